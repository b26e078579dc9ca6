"""The ``compacted`` RLMM against a real broker, checked from outside: the records it writes
(read back with bare ``read_committed`` consumers: keys, values decoded with
``tierlog.metadata.serde``, the audit topic's legacy bytes, tombstones only at level 1),
read-your-writes, replay by a second node, the compaction level (forward-only), the cleanup
manager (idempotent, two nodes), a dropped add, fencing of a second instance of a node, close.

Every test uses topics of its own (``topic_name`` and ``audit_topic_name``), deleted afterwards;
waits are on conditions with generous deadlines, never sleeps taken as assertions.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import replace

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.cimpl import NewTopic
from services._common import Service
from tierlog_rlmm_compacted import (
    CompactedRemoteLogMetadataManager,
    CompactedRlmmConfig,
    decode_value,
    enable_compaction,
)
from tierlog_rlmm_topic.producer import ProduceError

from tierlog.conformance.rlmm_suite import (
    DELETE_FINISHED,
    DELETE_STARTED,
    FINISHED,
    new_partition,
    segment,
    update_of,
)
from tierlog.metadata import deserialize, metadata_partition, serialize
from tierlog.spi import (
    ConfigError,
    IllegalStateError,
    RemoteLogMetadata,
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from tierlog.spi.plugins import get_registry

DEADLINE_S = 120.0
PARTITIONS = 3

Factory = Callable[..., CompactedRemoteLogMetadataManager]
Record = tuple[int, bytes | None, bytes | None]


@pytest.fixture
def rlmm_factory(
    rlmm_configs: Callable[..., dict[str, str]],
    topic_name: str,
    audit_topic_name: str,
    delete_topics: list[str],
) -> Iterator[Factory]:
    """``rlmm_factory(extra=None)``: a configured compacted RLMM on the test's topics; all are
    closed after the test, and the topics deleted."""
    made: list[CompactedRemoteLogMetadataManager] = []
    delete_topics.extend((topic_name, audit_topic_name))

    def make(extra: dict[str, str] | None = None) -> CompactedRemoteLogMetadataManager:
        rlmm = CompactedRemoteLogMetadataManager()
        made.append(rlmm)
        rlmm.configure(rlmm_configs(extra))
        return rlmm

    yield make
    for rlmm in made:
        rlmm.close()


def wait_until(condition: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout}s", pytrace=False)
        time.sleep(0.01)


def assign_and_wait(
    rlmm: CompactedRemoteLogMetadataManager, *tips: TopicIdPartition, follower: bool = False
) -> None:
    if follower:
        rlmm.on_partition_leadership_changes(set(), set(tips))
    else:
        rlmm.on_partition_leadership_changes(set(tips), set())
    wait_until(lambda: all(rlmm.is_ready(tip) for tip in tips), f"readiness of {tips}")


def done(future: Future[None]) -> None:
    future.result(timeout=DEADLINE_S)


def read_partition(servers: str, topic: str, partition: int) -> list[Record]:
    """Every committed record of ``topic``/``partition`` as ``(offset, key, value)``, read
    independently of the plugin."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": "tierlog-rlmm-compacted-test-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
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


def partition_of(tip: TopicIdPartition) -> int:
    return metadata_partition(tip, PARTITIONS)


def key_of(tip: TopicIdPartition, end: int, epoch: int) -> bytes:
    return f"{tip.topic_id}:{tip.partition}:{end}:{epoch}".encode()


def create_legacy_topic(admin: AdminClient, name: str) -> None:
    """The projection topic as a level-0 cluster has it: ``cleanup.policy=delete``."""
    new = NewTopic(
        name,
        num_partitions=PARTITIONS,
        replication_factor=1,
        config={"cleanup.policy": "delete", "retention.ms": "-1"},
    )
    admin.create_topics([new])[name].result(timeout=60)


def set_policy(admin: AdminClient, topic: str, policy: str) -> None:
    entry = ConfigEntry("cleanup.policy", policy, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("TOPIC", topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(timeout=60)


def lifecycle(
    rlmm: CompactedRemoteLogMetadataManager, seg: RemoteLogSegmentMetadata
) -> list[RemoteLogMetadata]:
    """Copy ``seg`` and delete it again, as the RLM does; the events written."""
    events: list[RemoteLogMetadata] = [seg]
    done(rlmm.add_remote_log_segment_metadata(seg))
    for state in (FINISHED, DELETE_STARTED, DELETE_FINISHED):
        upd = update_of(seg, state)
        done(rlmm.update_remote_log_segment_metadata(upd))
        events.append(upd)
    return events


def copied(
    rlmm: CompactedRemoteLogMetadataManager, seg: RemoteLogSegmentMetadata
) -> RemoteLogSegmentMetadata:
    done(rlmm.add_remote_log_segment_metadata(seg))
    upd = update_of(seg, FINISHED)
    done(rlmm.update_remote_log_segment_metadata(upd))
    return seg.create_with_updates(upd)


# Registration ------------------------------------------------------------------------------------
def test_registered_as_compacted() -> None:
    assert get_registry().metadata_manager_class("compacted") is CompactedRemoteLogMetadataManager


def test_conformance_config_needs_the_bootstrap_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TIERLOG_KAFKA_BOOTSTRAP_SERVERS", raising=False)
    with pytest.raises(ConfigError, match=r"compacted RLMM.*set TIERLOG_KAFKA_BOOTSTRAP_SERVERS"):
        CompactedRemoteLogMetadataManager.conformance_config()
    monkeypatch.setenv("TIERLOG_KAFKA_BOOTSTRAP_SERVERS", "h:1")
    first = CompactedRemoteLogMetadataManager.conformance_config()
    second = CompactedRemoteLogMetadataManager.conformance_config()
    assert first["remote.log.metadata.common.client.bootstrap.servers"] == "h:1"
    projection = first["remote.log.metadata.topic.name"]
    audit = first["remote.log.metadata.audit.topic.name"]
    assert projection != second["remote.log.metadata.topic.name"]
    assert audit != projection
    parsed = CompactedRlmmConfig.from_configs(first)
    assert (parsed.base.topic_name, parsed.audit_topic_name) == (projection, audit)


# Records on the wire ------------------------------------------------------------------------------
def test_records_keys_values_audit_and_tombstones_at_level_1(
    rlmm_factory: Factory, kafka_broker: Service, topic_name: str, audit_topic_name: str
) -> None:
    rlmm = rlmm_factory()
    assert rlmm.level == 1, "a projection topic the RLMM creates is compacted"
    tip = new_partition()
    assign_and_wait(rlmm, tip)
    seg = replace(segment(tip, 0, 99, {0: 0, 3: 50}, txn_idx_empty=True), broker_leader_epoch=7)
    events = lifecycle(rlmm, seg)
    key = key_of(tip, 99, 7)  # the publishing leader's epoch, not the segment's
    expected = partition_of(tip)

    projection = read_partition(kafka_broker.url, topic_name, expected)
    assert [k for _, k, _ in projection] == [key] * 5
    values = [v for _, _, v in projection]
    assert values[-1] is None, "DELETE_SEGMENT_FINISHED tombstones the segment's key"
    for event, value in zip(events, values[:-1], strict=True):
        assert value is not None
        assert deserialize(value) == event, "Kafka's legacy reader decodes every value"
        decoded = decode_value(value)
        assert decoded.event == event
        assert decoded.broker_leader_epoch == 7
    for value in values[1:-1]:
        assert value is not None
        decoded = decode_value(value)
        assert decoded.end_offset == 99
        add = decoded.add_record
        assert add is not None
        # The segment as the cache holds it (the last update's timestamp, broker and custom
        # metadata) in COPY_SEGMENT_STARTED: what a reader that never saw the add applies.
        assert replace(add, event_timestamp_ms=0, broker_id=0) == replace(
            seg, event_timestamp_ms=0, broker_id=0
        )
    assert decode_value(values[0]).add_record is None

    audit = read_partition(kafka_broker.url, audit_topic_name, expected)
    assert [(k, v) for _, k, v in audit] == [(None, serialize(event)) for event in events]
    for partition in range(PARTITIONS):
        if partition != expected:
            assert read_partition(kafka_broker.url, topic_name, partition) == []
            assert read_partition(kafka_broker.url, audit_topic_name, partition) == []
    wait_until(lambda: rlmm.applier.keys(tip) == {}, "the tombstone applied")
    assert list(rlmm.list_remote_log_segments(tip)) == []


def test_no_tombstone_at_level_0_and_the_level_only_goes_forward(
    rlmm_factory: Factory,
    kafka_broker: Service,
    kafka_admin: AdminClient,
    topic_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    create_legacy_topic(kafka_admin, topic_name)
    rlmm = rlmm_factory()
    assert rlmm.level == 0
    tip = new_partition()
    assign_and_wait(rlmm, tip)
    lifecycle(rlmm, segment(tip, 0, 9, {0: 0}))
    records = read_partition(kafka_broker.url, topic_name, partition_of(tip))
    assert len(records) == 4
    assert all(value is not None for _, _, value in records), "no tombstone at level 0"
    assert rlmm.refresh_level() == 0

    enable_compaction(kafka_admin, rlmm.compacted_config, timeout=60)
    assert rlmm.refresh_level() == 1
    assert rlmm.level == 1
    lifecycle(rlmm, segment(tip, 10, 19, {0: 10}))
    records = read_partition(kafka_broker.url, topic_name, partition_of(tip))
    assert [(k, v) for _, k, v in records[-1:]] == [(key_of(tip, 19, 0), None)]
    assert sum(value is None for _, _, value in records) == 1

    set_policy(kafka_admin, topic_name, "delete")
    with caplog.at_level(logging.ERROR, logger="tierlog_rlmm_compacted"):
        assert rlmm.refresh_level() == 1, "forward-only: never back to level 0"
        assert rlmm.refresh_level() == 1
    reverted = [r for r in caplog.records if "no longer compacted" in r.getMessage()]
    assert len(reverted) == 1, "the reverted topic is reported once, at ERROR"
    assert reverted[0].levelno == logging.ERROR
    lifecycle(rlmm, segment(tip, 20, 29, {0: 20}))
    records = read_partition(kafka_broker.url, topic_name, partition_of(tip))
    assert records[-1][1:] == (key_of(tip, 29, 0), None), "level 1 still writes tombstones"


def test_the_audit_can_be_switched_off(
    rlmm_factory: Factory, kafka_broker: Service, kafka_admin: AdminClient, audit_topic_name: str
) -> None:
    rlmm = rlmm_factory({"remote.log.metadata.audit.enable": "false"})
    tip = new_partition()
    assign_and_wait(rlmm, tip)
    copied(rlmm, segment(tip, 0, 9, {0: 0}))
    assert audit_topic_name not in kafka_admin.list_topics(timeout=30).topics
    assert len(read_partition(kafka_broker.url, rlmm.config.topic_name, partition_of(tip))) == 2


def test_an_add_kafkas_cache_drops_goes_to_the_audit_only(
    rlmm_factory: Factory,
    kafka_broker: Service,
    topic_name: str,
    audit_topic_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    rlmm = rlmm_factory()
    tip = new_partition()
    assign_and_wait(rlmm, tip)
    seg = segment(tip, 0, 9, {0: 0})
    finished = copied(rlmm, seg)
    with caplog.at_level(logging.ERROR, logger="tierlog_rlmm_compacted"):
        done(rlmm.add_remote_log_segment_metadata(seg))  # FINISHED -> STARTED: dropped
    assert any("Dropping the event" in r.getMessage() for r in caplog.records)
    assert list(rlmm.list_remote_log_segments(tip)) == [finished]
    partition = partition_of(tip)
    assert len(read_partition(kafka_broker.url, topic_name, partition)) == 2
    audit = read_partition(kafka_broker.url, audit_topic_name, partition)
    assert [v for _, _, v in audit][-1] == serialize(seg)
    # A node bootstrapping from the projection sees the segment as it is.
    reader = rlmm_factory({"node.id": "2"})
    assign_and_wait(reader, tip, follower=True)
    assert list(reader.list_remote_log_segments(tip)) == [finished]


# Read-your-writes and replay ---------------------------------------------------------------------
def test_read_your_writes(rlmm_factory: Factory) -> None:
    rlmm = rlmm_factory()
    tip = new_partition()
    assign_and_wait(rlmm, tip)
    for i in range(20):
        seg = segment(tip, i * 100, i * 100 + 99, {0: i * 100})
        done(rlmm.add_remote_log_segment_metadata(seg))
        assert seg.remote_log_segment_id in {
            m.remote_log_segment_id for m in rlmm.list_remote_log_segments(tip)
        }
        upd = update_of(seg, FINISHED)
        done(rlmm.update_remote_log_segment_metadata(upd))
        assert rlmm.remote_log_segment_metadata(tip, 0, i * 100 + 50) == seg.create_with_updates(
            upd
        )
        assert rlmm.highest_offset_for_epoch(tip, 0) == i * 100 + 99


def test_concurrent_writers_share_transactions(rlmm_factory: Factory) -> None:
    rlmm = rlmm_factory()
    tips = [new_partition("concurrent", p) for p in range(4)]
    assign_and_wait(rlmm, *tips)
    errors: list[BaseException] = []

    def writer(tip: TopicIdPartition) -> None:
        try:
            futures = [
                rlmm.add_remote_log_segment_metadata(segment(tip, i * 10, i * 10 + 9, {0: i * 10}))
                for i in range(30)
            ]
            for future in futures:
                done(future)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(tip,)) for tip in tips]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_S)
    assert not errors, errors
    for tip in tips:
        assert len(list(rlmm.list_remote_log_segments(tip))) == 30


def test_a_second_node_replays_the_projection(rlmm_factory: Factory) -> None:
    writer = rlmm_factory()
    tips = [new_partition("replay", p) for p in range(3)]
    assign_and_wait(writer, *tips)
    expected: dict[TopicIdPartition, list[RemoteLogSegmentMetadata]] = {}
    for tip in tips:
        live = []
        for i in range(12):
            seg = segment(tip, i * 10, i * 10 + 9, {i // 4: i * 10})
            if i < 4:
                lifecycle(writer, seg)  # expired: deleted, tombstoned
            elif i < 10:
                live.append(copied(writer, seg))
            else:
                done(writer.add_remote_log_segment_metadata(seg))  # upload in progress
                live.append(seg)
        expected[tip] = live
    deleted = new_partition("replay-deleted", 0)
    assign_and_wait(writer, deleted)
    lifecycle(writer, segment(deleted, 0, 9, {0: 0}))
    for state in RemotePartitionDeleteState:
        done(
            writer.put_remote_partition_delete_metadata(
                RemotePartitionDeleteMetadata(deleted, state, int(time.time() * 1000), 1)
            )
        )
    reader = rlmm_factory({"node.id": "2"})
    assert not any(reader.is_ready(tip) for tip in tips)
    assign_and_wait(reader, *tips, follower=True)
    for tip in tips:
        got = sorted(reader.list_remote_log_segments(tip), key=lambda m: m.start_offset)
        assert got == expected[tip]
        assert got == sorted(writer.list_remote_log_segments(tip), key=lambda m: m.start_offset)
        for epoch in range(3):
            assert reader.highest_offset_for_epoch(tip, epoch) == writer.highest_offset_for_epoch(
                tip, epoch
            )
        wait_until(
            lambda tip=tip: reader.applier.keys(tip) == writer.applier.keys(tip),
            "the writer and the reader holding the same keys",
        )
    reader.on_partition_leadership_changes(set(), {deleted})
    wait_until(lambda: reader.applier.is_deleted(deleted), "the deleted partition replayed")
    # The reader follows new writes as they come, without a new assignment.
    late = segment(tips[0], 1000, 1009, {5: 1000})
    done(writer.add_remote_log_segment_metadata(late))
    wait_until(
        lambda: late in list(reader.list_remote_log_segments(tips[0])),
        "the second node reading a later write",
    )


# The cleanup manager -----------------------------------------------------------------------------
def level_0_history(
    rlmm: CompactedRemoteLogMetadataManager, tip: TopicIdPartition
) -> tuple[list[bytes], list[RemoteLogSegmentMetadata]]:
    """Five deleted segments (their keys orphans once compaction is on) and three live ones,
    written at level 0; the orphan keys and the live segments."""
    orphans = []
    for i in range(5):
        lifecycle(rlmm, segment(tip, i * 10, i * 10 + 9, {0: i * 10}))
        orphans.append(key_of(tip, i * 10 + 9, 0))
    live = [copied(rlmm, segment(tip, i * 10, i * 10 + 9, {1: i * 10})) for i in range(5, 8)]
    return orphans, live


def test_cleanup_tombstones_orphans_once(
    rlmm_factory: Factory, kafka_broker: Service, kafka_admin: AdminClient, topic_name: str
) -> None:
    create_legacy_topic(kafka_admin, topic_name)
    rlmm = rlmm_factory()
    tip = new_partition("cleanup")
    assign_and_wait(rlmm, tip)
    orphans, live = level_0_history(rlmm, tip)
    assert rlmm.cleanup.run_once() == 0, "nothing is tombstoned at level 0"
    assert sorted(k.encode() for k in rlmm.applier.orphan_keys(tip)) == sorted(orphans)

    enable_compaction(kafka_admin, rlmm.compacted_config, timeout=60)
    assert rlmm.refresh_level() == 1
    before = read_partition(kafka_broker.url, topic_name, partition_of(tip))
    assert rlmm.cleanup.run_once() == len(orphans)
    assert rlmm.applier.orphan_keys(tip) == []
    assert rlmm.cleanup.run_once() == 0, "idempotent: the tombstones left the state"
    after = read_partition(kafka_broker.url, topic_name, partition_of(tip))
    new = after[len(before) :]
    assert sorted((k, v) for _, k, v in new) == sorted((k, None) for k in orphans)
    assert list(rlmm.list_remote_log_segments(tip)) == live
    keys = {key.encode() for key in rlmm.applier.keys(tip)}
    assert keys == {key_of(tip, seg.end_offset, 1) for seg in live}


def test_cleanup_covers_led_partitions_only_and_is_safe_with_two_nodes(
    rlmm_factory: Factory, kafka_admin: AdminClient, topic_name: str
) -> None:
    create_legacy_topic(kafka_admin, topic_name)
    first = rlmm_factory()
    tip = new_partition("cleanup-two")
    assign_and_wait(first, tip)
    orphans, live = level_0_history(first, tip)
    second = rlmm_factory({"node.id": "2"})
    assign_and_wait(second, tip, follower=True)
    enable_compaction(kafka_admin, first.compacted_config, timeout=60)
    assert first.refresh_level() == second.refresh_level() == 1
    assert second.cleanup.run_once() == 0, "a follower cleans nothing"

    # Both nodes believe they lead (a leadership change in flight) and scan at once.
    second.on_partition_leadership_changes({tip}, set())
    counts: list[int] = []
    scans = [
        threading.Thread(target=lambda rlmm=rlmm: counts.append(rlmm.cleanup.run_once()))
        for rlmm in (first, second)
    ]
    for scan in scans:
        scan.start()
    for scan in scans:
        scan.join(DEADLINE_S)
    assert len(counts) == 2
    assert len(orphans) <= sum(counts) <= 2 * len(orphans)
    for rlmm in (first, second):
        wait_until(lambda rlmm=rlmm: rlmm.applier.orphan_keys(tip) == [], "orphans applied")
        assert list(rlmm.list_remote_log_segments(tip)) == live
    assert first.cleanup.run_once() == second.cleanup.run_once() == 0
    # A third node bootstrapping from the cleaned projection sees the same live state.
    third = rlmm_factory({"node.id": "3"})
    assign_and_wait(third, tip, follower=True)
    assert list(third.list_remote_log_segments(tip)) == live
    assert third.applier.keys(tip) == first.applier.keys(tip)


# Fencing and lifecycle ---------------------------------------------------------------------------
def test_a_second_instance_of_a_node_fences_the_first(rlmm_factory: Factory) -> None:
    old = rlmm_factory()
    tip = new_partition("fenced")
    assign_and_wait(old, tip)
    copied(old, segment(tip, 0, 9, {0: 0}))
    new = rlmm_factory()  # the same node.id: the same transactional.id
    assign_and_wait(new, tip)
    with pytest.raises(ProduceError, match="fenced"):
        done(old.add_remote_log_segment_metadata(segment(tip, 10, 19, {0: 10})))
    seg = segment(tip, 20, 29, {0: 20})
    done(new.add_remote_log_segment_metadata(seg))
    assert seg in list(new.list_remote_log_segments(tip))


def test_lifecycle_errors(rlmm_factory: Factory) -> None:
    rlmm = rlmm_factory()
    tip = new_partition()
    with pytest.raises(IllegalStateError, match="already configured"):
        rlmm.configure({})
    assign_and_wait(rlmm, tip)
    rlmm.close()
    rlmm.close()  # idempotent
    assert not rlmm.is_ready(tip)
    with pytest.raises(IllegalStateError, match="CompactedRemoteLogMetadataManager is closed"):
        rlmm.add_remote_log_segment_metadata(segment(tip, 0, 1, {0: 0}))
    with pytest.raises(IllegalStateError):
        rlmm.refresh_level()
    unconfigured = CompactedRemoteLogMetadataManager()
    with pytest.raises(IllegalStateError, match="not configured"):
        _ = unconfigured.compacted_config
    with pytest.raises(IllegalStateError, match="not configured"):
        _ = unconfigured.cleanup
