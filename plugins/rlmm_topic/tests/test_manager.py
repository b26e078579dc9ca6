"""The ``topic`` RLMM against a real broker, checked from outside: the shared manager tests
(``services.rlmm_suites.RlmmManagerSuite``: registration, the conformance configuration,
read-your-writes, replay by a second node, lifecycle errors), then this plugin's own: the topic
it creates, the records it writes (read back with a bare confluent-kafka consumer),
initialization failures, refused writes, an unreadable record, and replay progress.

Every test uses a topic of its own (``topic_name``), deleted afterwards; waits are on
conditions with generous deadlines, never sleeps taken as assertions.
"""

from __future__ import annotations

import io
import logging
import pickle
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from confluent_kafka.cimpl import NewTopic
from services._common import Service
from services.kafka import create_topic
from services.rlmm_faults import (
    DEADLINE_S,
    assign,
    check_gives_up,
    done,
    read_partition,
    wait_until,
)
from services.rlmm_suites import RlmmManagerSuite
from tierlog_rlmm_topic import (
    ConsumeTimeoutError,
    ReplayProgressSettings,
    TopicBasedRemoteLogMetadataManager,
    UnreadableMetadataRecordError,
)
from tierlog_rlmm_topic import producer as producer_module

from tierlog.conformance.rlmm_suite import (
    DELETE_FINISHED,
    DELETE_STARTED,
    FINISHED,
    new_partition,
    segment,
    update_of,
)
from tierlog.metadata import metadata_partition, serialize
from tierlog.progress import Progress
from tierlog.rlm.config import KAFKA_DEFAULT_RLMM_CLASS_NAME, plugin_name
from tierlog.spi import (
    ConfigError,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageNotReadyException,
    TopicIdPartition,
)

PARTITIONS = 3
SERVERS = "remote.log.metadata.common.client.bootstrap.servers"

Factory = Callable[..., TopicBasedRemoteLogMetadataManager]


class TestManager(RlmmManagerSuite):
    """The shared manager tests on the topic RLMM (``rlmm_plugin`` in ``conftest.py``)."""


def bare_consumer(servers: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": "tierlog-rlmm-test-reader",
            "enable.auto.commit": False,
        }
    )


def end_offsets(servers: str, topic: str) -> list[int]:
    consumer = bare_consumer(servers)
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()


def produce_raw(servers: str, topic: str, partition: int, values: list[bytes | None]) -> None:
    """Write records as another writer would (not through the plugin), in order (idempotent:
    no retried batch lands after a later one)."""
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 20, "enable.idempotence": True})
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, _: object) -> None:
        if error is not None:
            errors.append(error)

    for value in values:
        while True:
            try:
                producer.produce(topic, value=value, partition=partition, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(DEADLINE_S) == 0
    assert not errors, errors


def partition_of(tip: TopicIdPartition) -> int:
    return metadata_partition(tip, PARTITIONS)


def tips_on_distinct_partitions() -> tuple[TopicIdPartition, TopicIdPartition]:
    """Two user partitions whose events live in different metadata partitions."""
    first = new_partition("alpha", 0)
    while True:
        second = new_partition("beta", 0)
        if partition_of(second) != partition_of(first):
            return first, second


# Registration ------------------------------------------------------------------------------------
def test_kafkas_class_name_means_topic() -> None:
    """Kafka's own RLMM class name in ``remote.log.metadata.manager.class.name`` selects this
    plugin (its registration under ``topic`` is a shared test)."""
    assert plugin_name(KAFKA_DEFAULT_RLMM_CLASS_NAME, "embedded") == "topic"


# The topic ----------------------------------------------------------------------------------------
def test_topic_is_created_with_kafkas_configs(
    rlmm_factory: Factory, kafka_admin: AdminClient, topic_name: str
) -> None:
    rlmm_factory({"remote.log.metadata.topic.retention.ms": "3600000"})
    described = kafka_admin.list_topics(topic=topic_name, timeout=30).topics[topic_name]
    assert len(described.partitions) == PARTITIONS
    assert all(len(p.replicas) == 1 for p in described.partitions.values())
    resource = ConfigResource("TOPIC", topic_name)
    configs = kafka_admin.describe_configs([resource])[resource].result(timeout=30)
    assert {
        key: configs[key].value
        for key in (
            "retention.ms",
            "cleanup.policy",
            "remote.storage.enable",
            "min.insync.replicas",
        )
    } == {
        "retention.ms": "3600000",
        "cleanup.policy": "delete",
        "remote.storage.enable": "false",
        "min.insync.replicas": "1",
    }


def test_an_existing_topic_is_used_as_it_is(
    rlmm_factory: Factory, kafka_admin: AdminClient, topic_name: str
) -> None:
    new = NewTopic(topic_name, num_partitions=PARTITIONS, replication_factor=1)
    kafka_admin.create_topics([new])[topic_name].result(timeout=60)
    rlmm = rlmm_factory()
    tip = new_partition()
    assign(rlmm, [tip])
    done(rlmm.add_remote_log_segment_metadata(segment(tip, 0, 9, {0: 0})))


def test_partition_count_mismatch_names_topic_and_both_counts(
    rlmm_factory: Factory, kafka_admin: AdminClient, topic_name: str
) -> None:
    new = NewTopic(topic_name, num_partitions=2, replication_factor=1)
    kafka_admin.create_topics([new])[topic_name].result(timeout=60)
    with pytest.raises(ConfigError) as caught:
        rlmm_factory()
    message = str(caught.value)
    assert topic_name in message
    assert "has 2 partitions" in message
    assert "remote.log.metadata.topic.num.partitions is 3" in message


def test_initialization_gives_up_with_a_clear_error(
    rlmm_configs: Callable[..., dict[str, str]],
) -> None:
    rlmm = TopicBasedRemoteLogMetadataManager()
    limits = {
        "remote.log.metadata.initialization.retry.max.timeout.ms": "2000",
        "remote.log.metadata.initialization.retry.interval.ms": "100",
    }
    check_gives_up(
        lambda servers: rlmm.configure(rlmm_configs({SERVERS: servers, **limits})),
        RemoteStorageException,
        "within 2000 ms",
        "last error:",
    )
    rlmm.close()


def test_librdkafka_refusing_a_key_is_a_config_error(
    rlmm_configs: Callable[..., dict[str, str]],
    topic_name: str,
    delete_topics: list[str],
) -> None:
    delete_topics.append(topic_name)
    rlmm = TopicBasedRemoteLogMetadataManager()
    with pytest.raises(ConfigError, match=r"no\.such\.client\.key"):
        rlmm.configure(rlmm_configs({"remote.log.metadata.producer.no.such.client.key": "1"}))
    rlmm.close()


# Records on the wire ------------------------------------------------------------------------------
def test_records_have_a_null_key_kafkas_partition_and_serde(
    rlmm_factory: Factory, kafka_broker: Service, topic_name: str
) -> None:
    rlmm = rlmm_factory()
    tip = new_partition()
    assign(rlmm, [tip])
    seg = segment(tip, 0, 99, {0: 0, 3: 50}, txn_idx_empty=True)
    upd = update_of(seg, FINISHED)
    done(rlmm.add_remote_log_segment_metadata(seg))
    done(rlmm.update_remote_log_segment_metadata(upd))
    expected = partition_of(tip)
    records = read_partition(kafka_broker.url, topic_name, expected)
    assert [(key, value) for _, key, value in records] == [
        (None, serialize(seg)),
        (None, serialize(upd)),
    ]
    others = [p for p in range(PARTITIONS) if p != expected]
    assert all(not read_partition(kafka_broker.url, topic_name, p) for p in others)


# Read-your-writes and refused writes -------------------------------------------------------------
def test_refused_writes_produce_nothing(
    rlmm_factory: Factory, kafka_broker: Service, topic_name: str
) -> None:
    rlmm = rlmm_factory()
    tip = new_partition()
    assign(rlmm, [tip])
    seg = segment(tip, 0, 9, {0: 0})
    done(rlmm.add_remote_log_segment_metadata(seg))
    before = end_offsets(kafka_broker.url, topic_name)
    unassigned = new_partition("unassigned")
    with pytest.raises(RemoteStorageException, match="is not assigned to this RLMM"):
        rlmm.add_remote_log_segment_metadata(segment(unassigned, 0, 9, {0: 0}))
    unknown = update_of(segment(tip, 10, 19, {0: 10}), FINISHED)
    with pytest.raises(RemoteResourceNotFoundException):
        rlmm.update_remote_log_segment_metadata(unknown)
    with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED"):
        rlmm.add_remote_log_segment_metadata(seg.create_with_updates(update_of(seg, FINISHED)))
    done(rlmm.update_remote_log_segment_metadata(update_of(seg, DELETE_STARTED)))
    done(rlmm.update_remote_log_segment_metadata(update_of(seg, DELETE_FINISHED)))
    with pytest.raises(RemoteResourceNotFoundException):
        rlmm.update_remote_log_segment_metadata(update_of(seg, DELETE_FINISHED))
    after = end_offsets(kafka_broker.url, topic_name)
    written = [a - b for a, b in zip(after, before, strict=True)]
    assert written[partition_of(tip)] == 2, "only the two valid updates were produced"
    assert sum(written) == 2


# An unreadable record -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"\x07garbage", "frame version"),
        (b"\x01\x09\x00", "apiKey"),
        (None, "null value"),
    ],
    ids=["corrupt", "unknown-api-key", "tombstone"],
)
def test_an_unreadable_record_stops_its_partition_with_a_clear_error(
    rlmm_factory: Factory, caplog: pytest.LogCaptureFixture, value: bytes | None, reason: str
) -> None:
    writer = rlmm_factory()
    servers, topic_name = writer.config.bootstrap_servers, writer.config.topic_name
    broken, healthy = tips_on_distinct_partitions()
    assign(writer, [broken, healthy])
    good = segment(broken, 0, 9, {0: 0})
    done(writer.add_remote_log_segment_metadata(good))
    bad_partition = partition_of(broken)
    produce_raw(servers, topic_name, bad_partition, [value, serialize(good)])
    bad_offset = 1  # after the good record the writer produced

    # The running node stops that partition: a write to it fails with the error.
    with caplog.at_level(logging.ERROR, logger="tierlog_rlmm_topic"):
        wait_until(
            lambda: writer.consumer_task.failure_for(broken) is not None,
            "the running node noticing the unreadable record",
        )
        with pytest.raises(UnreadableMetadataRecordError):
            done(writer.add_remote_log_segment_metadata(segment(broken, 10, 19, {0: 10})))
        done(writer.add_remote_log_segment_metadata(segment(healthy, 0, 9, {0: 0})))

        # A node that replays the topic never marks the partition ready, and says why.
        reader = rlmm_factory({"node.id": "2"})
        reader.on_partition_leadership_changes({broken, healthy}, set())
        wait_until(lambda: reader.is_ready(healthy), "readiness of the healthy partition")
        wait_until(
            lambda: reader.consumer_task.failure_for(broken) is not None,
            "the replaying node noticing the unreadable record",
        )
    assert not reader.is_ready(broken)
    with pytest.raises(UnreadableMetadataRecordError) as caught:
        reader.list_remote_log_segments(broken)
    error = caught.value
    assert not isinstance(error, RemoteStorageNotReadyException)
    assert (error.topic, error.partition, error.offset) == (topic_name, bad_partition, bad_offset)
    message = str(error)
    assert f"offset {bad_offset}" in message
    assert f"topic {topic_name} partition {bad_partition}" in message
    assert reason in message
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert any(f"offset {bad_offset}" in r.getMessage() for r in errors)
    assert [m.start_offset for m in reader.list_remote_log_segments(healthy)] == [0]


def test_a_consume_timeout_keeps_its_facts_through_pickling() -> None:
    error = ConsumeTimeoutError("not applied", position=12, readable_end=12)
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, ConsumeTimeoutError) and isinstance(copy, TimeoutError)
    assert (str(copy), copy.position, copy.readable_end) == ("not applied", 12, 12)


def test_a_producer_that_lost_its_brokers_is_replaced(
    kafka_broker: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """librdkafka can drop every broker a producer knew, for good, after a broker restart
    (librdkafka#5301): its records then wait for nothing. Simulated on the first librdkafka
    producer, once armed: it holds the records it is given and cannot fetch metadata. With
    records held and no delivery report for the check's time (2 s here), it is replaced: the
    held write fails retriably naming the issue, the next write goes to the new producer."""
    topic = f"tierlog-lost-brokers-{uuid.uuid4().hex}"
    create_topic(kafka_broker.url, topic, 1)
    lost = threading.Event()
    held: list[Callable[[KafkaError | None, Any], None]] = []

    class LostProducer(Producer):
        def produce(self, *args: Any, **kwargs: Any) -> None:
            if lost.is_set():
                held.append(kwargs["on_delivery"])
                return
            super().produce(*args, **kwargs)

        def __len__(self) -> int:
            return len(held) + super().__len__()

        def list_topics(self, *args: Any, **kwargs: Any) -> Any:
            if lost.is_set():
                raise KafkaException(KafkaError(KafkaError._TRANSPORT, "simulated: no broker"))
            return super().list_topics(*args, **kwargs)

        def purge(self, *args: Any, **kwargs: Any) -> None:
            for delivered in held:
                delivered(KafkaError(KafkaError._PURGE_QUEUE, "purged"), None)
            held.clear()
            super().purge(*args, **kwargs)

    real_new_client = producer_module.new_client
    made: list[Any] = []

    def new_client(factory: Any, configs: Any, role: str) -> Any:
        client = real_new_client(LostProducer if not made else factory, configs, role)
        made.append(client)
        return client

    monkeypatch.setattr(producer_module, "new_client", new_client)
    configs = {"bootstrap.servers": kafka_broker.url, "acks": "all", "enable.idempotence": "true"}
    producer = producer_module.MetadataProducer(topic, configs, lost_check_after_s=2.0)
    try:
        assert producer.send(0, b"before").result(timeout=DEADLINE_S) == (0, 0)
        lost.set()
        error = producer.send(0, b"lost").exception(timeout=DEADLINE_S)
        assert isinstance(error, producer_module.RetriableProduceError), error
        assert "librdkafka#5301" in str(error) and "replaced" in str(error)
        assert producer.replaced == 1
        assert producer.send(0, b"after").result(timeout=DEADLINE_S) == (0, 1)
    finally:
        producer.close()


# Replay progress ---------------------------------------------------------------------------------
def test_a_long_replay_shows_progress(
    rlmm_factory: Factory, kafka_broker: Service, topic_name: str
) -> None:
    writer = rlmm_factory()
    tip = new_partition("progress")
    assign(writer, [tip])
    records = 600
    produce_raw(
        kafka_broker.url,
        topic_name,
        partition_of(tip),
        [serialize(segment(tip, i * 10, i * 10 + 9, {0: i * 10})) for i in range(records)],
    )
    shown: list[Progress] = []
    output = io.StringIO()

    def factory(description: str, total: float) -> Progress:
        progress = Progress(description, total, unit="records", file=output, step=25)
        shown.append(progress)
        return progress

    reader = rlmm_factory(
        {"node.id": "2"},
        progress=ReplayProgressSettings(
            records_threshold=100, seconds_threshold=3600, factory=factory
        ),
    )
    quiet = rlmm_factory({"node.id": "3"})  # the default threshold: nothing shown
    assign(reader, [tip])
    assign(quiet, [tip])
    assert len(list(reader.list_remote_log_segments(tip))) == records
    assert reader.consumer_task.replays_shown == 1
    assert quiet.consumer_task.replays_shown == 0
    (progress,) = shown
    assert progress.done >= records
    text = output.getvalue()
    assert f"replaying {topic_name}" in text
    assert "partitions ready" in text
    assert "records" in text
