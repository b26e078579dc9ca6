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
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from services._common import Service
from services.rlmm_faults import DEADLINE_S, check_gives_up, read_partition
from tierlog_rlmm_compacted.txn_producer import OutRecord, TransactionalMetadataProducer
from tierlog_rlmm_topic.producer import ProduceError, RetriableProduceError

from tierlog.spi import IllegalStateError, InvalidArgumentError

Record = tuple[int, bytes | None, bytes | None]
"""(offset, key, value) of a record read back."""


@dataclass
class Txn:
    """The session's broker as these tests use it: fresh topics (deleted after the test),
    producers (closed after it), and what a reader sees of a partition."""

    servers: str
    admin: AdminClient
    created: list[str]
    producers: list[TransactionalMetadataProducer] = field(default_factory=list)

    def topic(self, partitions: int = 3, *, configs: Mapping[str, str] | None = None) -> str:
        """A fresh topic with ``configs``."""
        name = f"tierlog-txn-test-{uuid.uuid4().hex}"
        new = NewTopic(
            name, num_partitions=partitions, replication_factor=1, config=dict(configs or {})
        )
        self.admin.create_topics([new])[name].result(timeout=60)
        self.created.append(name)
        return name

    def producer(
        self, transactional_id: str | None = None, **kwargs: Any
    ) -> TransactionalMetadataProducer:
        """A producer on the broker (a fresh ``transactional.id`` unless given)."""
        producer = TransactionalMetadataProducer(
            {
                "bootstrap.servers": self.servers,
                "transactional.id": transactional_id or f"tierlog-txn-{uuid.uuid4().hex}",
                "acks": "all",
                "enable.idempotence": "true",
            },
            init_timeout_s=60.0,
            **kwargs,
        )
        self.producers.append(producer)
        return producer

    def read(self, topic: str, partition: int, *, committed: bool = True) -> list[Record]:
        """Every record of ``topic``/``partition`` a ``read_committed`` (or
        ``read_uncommitted``) reader sees, read to the partition's end."""
        isolation = "read_committed" if committed else "read_uncommitted"
        return read_partition(self.servers, topic, partition, isolation=isolation)


@pytest.fixture
def txn(kafka_broker: Service, kafka_admin: AdminClient, delete_topics: list[str]) -> Iterator[Txn]:
    """The test's ``Txn``; its producers are closed after the test, its topics deleted."""
    world = Txn(kafka_broker.url, kafka_admin, delete_topics)
    yield world
    for producer in world.producers:
        producer.close()


def result(future: Future[tuple[int, int]]) -> tuple[int, int]:
    return future.result(timeout=DEADLINE_S)


def test_a_write_lands_in_one_transaction(txn: Txn) -> None:
    projection, audit = txn.topic(), txn.topic()
    producer = txn.producer()
    records = [
        OutRecord(projection, 1, b"k:0:9:0", b"value"),
        OutRecord(audit, 1, None, b"legacy"),
        OutRecord(projection, 1, b"k:0:4:0", None),
    ]
    partition, offset = result(producer.send(records, primary=0))
    assert partition == 1
    assert txn.read(projection, 1) == [
        (offset, b"k:0:9:0", b"value"),
        (offset + 1, b"k:0:4:0", None),
    ]
    assert [(k, v) for _, k, v in txn.read(audit, 1)] == [(None, b"legacy")]
    assert producer.transactions == 1
    # The primary index picks the record whose position the future gives.
    # Offsets: the first write's two records, its commit marker, then this write's two.
    second = result(producer.send(records, primary=2))
    assert second == (1, offset + 4)


def test_a_refused_record_fails_its_write_alone_and_nothing_of_it_is_committed(txn: Txn) -> None:
    normal = txn.topic()
    small = txn.topic(configs={"max.message.bytes": "1024"})
    producer = txn.producer()
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
    committed = txn.read(normal, 0)
    assert [key for _, key, _ in committed] == [f"good-{i}".encode() for i in range(5)]
    assert [offset for offset, _, _ in committed] == [offset for _, offset in positions]
    # The bad write's first record was written, then aborted: only read_uncommitted sees it.
    uncommitted = txn.read(normal, 0, committed=False)
    assert b"bad" in [key for _, key, _ in uncommitted]
    assert txn.read(small, 0, committed=False) == []
    assert producer.aborts >= 1


def test_group_commit_under_concurrent_writes(txn: Txn) -> None:
    topic = txn.topic()
    producer = txn.producer()
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
        committed = txn.read(topic, partition)
        by_key = {key: offset for offset, key, _ in committed}
        mine = {k: p for k, p in positions.items() if p[0] == partition}
        assert len(committed) == len(mine)
        for (thread, i), (_, offset) in mine.items():
            assert by_key[f"{thread}:{i}".encode()] == offset
        # One thread's writes keep their order.
        for thread in range(threads):
            offsets = [mine[(thread, i)][1] for i in range(per_thread) if (thread, i) in mine]
            assert offsets == sorted(offsets)


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(txn: Txn) -> None:
    topic = txn.topic()
    transactional_id = f"tierlog-txn-fenced-{uuid.uuid4().hex}"
    first = txn.producer(transactional_id)
    result(first.send([OutRecord(topic, 0, b"before", b"v")], primary=0))
    second = txn.producer(transactional_id)
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
    assert [key for _, key, _ in txn.read(topic, 0)] == [b"before", b"after"]


def test_close_commits_what_is_queued_then_refuses(txn: Txn) -> None:
    topic = txn.topic()
    producer = txn.producer()
    futures = [
        producer.send([OutRecord(topic, 2, f"{i}".encode(), b"v")], primary=0) for i in range(50)
    ]
    producer.close()
    assert all(future.done() for future in futures)
    offsets = [result(future)[1] for future in futures]
    assert [offset for offset, _, _ in txn.read(topic, 2)] == offsets
    with pytest.raises(IllegalStateError, match="closed"):
        producer.send([OutRecord(topic, 2, b"late", b"v")], primary=0)
    producer.close()  # idempotent


def test_invalid_writes_and_configuration(txn: Txn) -> None:
    topic = txn.topic()
    producer = txn.producer()
    with pytest.raises(InvalidArgumentError, match="at least one record"):
        producer.send([], primary=0)
    with pytest.raises(InvalidArgumentError, match="primary index 1"):
        producer.send([OutRecord(topic, 0, b"k", b"v")], primary=1)
    with pytest.raises(InvalidArgumentError, match=r"transactional\.id"):
        TransactionalMetadataProducer({"bootstrap.servers": txn.servers})


def test_initialization_gives_up_with_a_clear_error() -> None:
    check_gives_up(
        lambda servers: TransactionalMetadataProducer(
            {"bootstrap.servers": servers, "transactional.id": "tierlog-txn-nowhere"},
            init_timeout_s=2.0,
        ),
        RetriableProduceError,
        "tierlog-txn-nowhere",
    )
