"""The transactional metadata producer against the real broker, checked from outside with bare
confluent-kafka consumers: a write's records land in one transaction (a ``read_committed``
reader sees all of them or none), group commit under concurrent writes, a refused record
failing its write alone, fencing by a second producer with the same ``transactional.id``,
close, and initialization against a port nothing listens on.

Every test uses topics of its own (deleted afterwards); waits are on conditions or futures with
generous deadlines.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from services._common import Service, free_ports
from tierlog_rlmm_compacted.txn_producer import OutRecord, TransactionalMetadataProducer
from tierlog_rlmm_topic.producer import ProduceError, RetriableProduceError

from tierlog.spi import IllegalStateError, InvalidArgumentError

DEADLINE_S = 120.0

Record = tuple[int, bytes | None, bytes | None]
"""(offset, key, value) of a record read back."""


@pytest.fixture
def make_topic(kafka_admin: AdminClient, delete_topics: list[str]) -> Callable[..., str]:
    """``make_topic(partitions=3, **configs)``: a fresh topic, deleted after the test."""

    def make(partitions: int = 3, **configs: str) -> str:
        name = f"tierlog-txn-test-{uuid.uuid4().hex}"
        new = NewTopic(name, num_partitions=partitions, replication_factor=1, config=configs)
        kafka_admin.create_topics([new])[name].result(timeout=60)
        delete_topics.append(name)
        return name

    return make


@pytest.fixture
def make_producer(kafka_broker: Service) -> Iterator[Callable[..., TransactionalMetadataProducer]]:
    """``make_producer(transactional_id=None, **kwargs)``: a producer on the session's broker
    (a fresh transactional.id unless given), closed after the test."""
    made: list[TransactionalMetadataProducer] = []

    def make(transactional_id: str | None = None, **kwargs: Any) -> TransactionalMetadataProducer:
        producer = TransactionalMetadataProducer(
            {
                "bootstrap.servers": kafka_broker.url,
                "transactional.id": transactional_id or f"tierlog-txn-{uuid.uuid4().hex}",
                "acks": "all",
                "enable.idempotence": "true",
            },
            init_timeout_s=60.0,
            **kwargs,
        )
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.close()


def read_all(servers: str, topic: str, partition: int, *, committed: bool = True) -> list[Record]:
    """Every record of ``topic``/``partition`` a ``read_committed`` (or ``read_uncommitted``)
    reader sees, read to the partition's end."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": "tierlog-txn-test-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    records: list[Record] = []
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return records
                continue
            offset = message.offset()
            assert offset is not None
            records.append((offset, message.key(), message.value()))
        pytest.fail(f"could not read {topic} partition {partition} to its end", pytrace=False)
    finally:
        consumer.close()


def result(future: Future[tuple[int, int]]) -> tuple[int, int]:
    return future.result(timeout=DEADLINE_S)


def test_a_write_lands_in_one_transaction(
    make_topic: Callable[..., str],
    make_producer: Callable[..., TransactionalMetadataProducer],
    kafka_broker: Service,
) -> None:
    projection, audit = make_topic(), make_topic()
    producer = make_producer()
    records = [
        OutRecord(projection, 1, b"k:0:9:0", b"value"),
        OutRecord(audit, 1, None, b"legacy"),
        OutRecord(projection, 1, b"k:0:4:0", None),
    ]
    partition, offset = result(producer.send(records, primary=0))
    assert partition == 1
    assert read_all(kafka_broker.url, projection, 1) == [
        (offset, b"k:0:9:0", b"value"),
        (offset + 1, b"k:0:4:0", None),
    ]
    assert [(k, v) for _, k, v in read_all(kafka_broker.url, audit, 1)] == [(None, b"legacy")]
    assert producer.transactions == 1
    # The primary index picks the record whose position the future gives.
    # Offsets: the first write's two records, its commit marker, then this write's two.
    second = result(producer.send(records, primary=2))
    assert second == (1, offset + 4)


def test_a_refused_record_fails_its_write_alone_and_nothing_of_it_is_committed(
    make_topic: Callable[..., str],
    make_producer: Callable[..., TransactionalMetadataProducer],
    kafka_broker: Service,
) -> None:
    normal = make_topic()
    small = make_topic(**{"max.message.bytes": "1024"})
    producer = make_producer()
    bad = producer.send(
        [OutRecord(normal, 0, b"bad", b"first"), OutRecord(small, 0, b"big", b"x" * 4096)],
        primary=0,
    )
    goods = [
        producer.send([OutRecord(normal, 0, f"good-{i}".encode(), b"v")], primary=0)
        for i in range(5)
    ]
    with pytest.raises(ProduceError) as caught:
        result(bad)
    assert not isinstance(caught.value, RetriableProduceError)
    assert small in str(caught.value)
    positions = [result(good) for good in goods]
    committed = read_all(kafka_broker.url, normal, 0)
    assert [key for _, key, _ in committed] == [f"good-{i}".encode() for i in range(5)]
    assert [offset for offset, _, _ in committed] == [offset for _, offset in positions]
    # The bad write's first record was written, then aborted: only read_uncommitted sees it.
    uncommitted = read_all(kafka_broker.url, normal, 0, committed=False)
    assert b"bad" in [key for _, key, _ in uncommitted]
    assert read_all(kafka_broker.url, small, 0, committed=False) == []
    assert producer.aborts >= 1


def test_group_commit_under_concurrent_writes(
    make_topic: Callable[..., str],
    make_producer: Callable[..., TransactionalMetadataProducer],
    kafka_broker: Service,
) -> None:
    topic = make_topic()
    producer = make_producer()
    threads, per_thread = 8, 40
    futures: dict[tuple[int, int], Future[tuple[int, int]]] = {}
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def writer(thread: int) -> None:
        start.wait(timeout=DEADLINE_S)
        for i in range(per_thread):
            future = producer.send(
                [OutRecord(topic, thread % 3, f"{thread}:{i}".encode(), b"v")], primary=0
            )
            with lock:
                futures[(thread, i)] = future

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(DEADLINE_S)
    positions = {key: result(future) for key, future in futures.items()}
    writes = threads * per_thread
    assert len(positions) == writes
    assert len(set(positions.values())) == writes, "every write has a position of its own"
    transactions = producer.transactions
    assert transactions < writes // 2, f"{transactions} transactions for {writes} writes"
    for partition in range(3):
        committed = read_all(kafka_broker.url, topic, partition)
        by_key = {key: offset for offset, key, _ in committed}
        mine = {k: p for k, p in positions.items() if p[0] == partition}
        assert len(committed) == len(mine)
        for (thread, i), (_, offset) in mine.items():
            assert by_key[f"{thread}:{i}".encode()] == offset
        # One thread's writes keep their order.
        for thread in range(threads):
            offsets = [mine[(thread, i)][1] for i in range(per_thread) if (thread, i) in mine]
            assert offsets == sorted(offsets)


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(
    make_topic: Callable[..., str],
    make_producer: Callable[..., TransactionalMetadataProducer],
    kafka_broker: Service,
) -> None:
    topic = make_topic()
    transactional_id = f"tierlog-txn-fenced-{uuid.uuid4().hex}"
    first = make_producer(transactional_id)
    result(first.send([OutRecord(topic, 0, b"before", b"v")], primary=0))
    second = make_producer(transactional_id)
    fenced = first.send([OutRecord(topic, 0, b"fenced", b"v")], primary=0)
    with pytest.raises(ProduceError) as caught:
        result(fenced)
    assert not isinstance(caught.value, RetriableProduceError)
    message = str(caught.value)
    assert "fenced" in message
    assert transactional_id in message
    with pytest.raises(ProduceError, match="fenced"):
        first.send([OutRecord(topic, 0, b"later", b"v")], primary=0)
    result(second.send([OutRecord(topic, 0, b"after", b"v")], primary=0))
    assert [key for _, key, _ in read_all(kafka_broker.url, topic, 0)] == [b"before", b"after"]


def test_close_commits_what_is_queued_then_refuses(
    make_topic: Callable[..., str],
    make_producer: Callable[..., TransactionalMetadataProducer],
    kafka_broker: Service,
) -> None:
    topic = make_topic()
    producer = make_producer()
    futures = [
        producer.send([OutRecord(topic, 2, f"{i}".encode(), b"v")], primary=0) for i in range(50)
    ]
    producer.close()
    assert all(future.done() for future in futures)
    offsets = [result(future)[1] for future in futures]
    assert [offset for offset, _, _ in read_all(kafka_broker.url, topic, 2)] == offsets
    with pytest.raises(IllegalStateError, match="closed"):
        producer.send([OutRecord(topic, 2, b"late", b"v")], primary=0)
    producer.close()  # idempotent


def test_invalid_writes_and_configuration(
    make_topic: Callable[..., str],
    make_producer: Callable[..., TransactionalMetadataProducer],
    kafka_broker: Service,
) -> None:
    topic = make_topic()
    producer = make_producer()
    with pytest.raises(InvalidArgumentError, match="at least one record"):
        producer.send([], primary=0)
    with pytest.raises(InvalidArgumentError, match="primary index 1"):
        producer.send([OutRecord(topic, 0, b"k", b"v")], primary=1)
    with pytest.raises(InvalidArgumentError, match=r"transactional\.id"):
        TransactionalMetadataProducer({"bootstrap.servers": kafka_broker.url})


def test_initialization_gives_up_with_a_clear_error() -> None:
    (port,) = free_ports(1)  # nothing listens there
    servers = f"127.0.0.1:{port}"
    started = time.monotonic()
    with pytest.raises(RetriableProduceError) as caught:
        TransactionalMetadataProducer(
            {"bootstrap.servers": servers, "transactional.id": "tierlog-txn-nowhere"},
            init_timeout_s=2.0,
        )
    elapsed = time.monotonic() - started
    message = str(caught.value)
    assert servers in message
    assert "tierlog-txn-nowhere" in message
    assert "last error" in message
    assert elapsed < 30, f"initialization took {elapsed:.1f}s with a 2 s limit"
