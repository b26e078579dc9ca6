"""The ``compacted`` RLMM against a real broker, checked from outside: the shared manager tests
(``services.rlmm_suites.RlmmManagerSuite``: registration, the conformance configuration,
read-your-writes, replay by a second node, lifecycle errors), here with the projection keys a
replaying node must hold; then this plugin's own: the records it writes (read back with bare
``read_committed`` consumers: keys, values decoded with ``tierlog.metadata.serde``, the audit
topic's legacy bytes, tombstones only at level 1), concurrent writers, the compaction level
(forward-only), the cleanup manager (idempotent, two nodes), a dropped add, fencing of a second
instance of a node, what needs a configured, open node.

Every test uses topics of its own (``topic_name`` and ``audit_topic_name``), deleted afterwards;
waits are on conditions with generous deadlines, never sleeps taken as assertions.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.cimpl import NewTopic
from services._common import Service
from services.rlmm_faults import DEADLINE_S, assign, done, read_partition, wait_until
from services.rlmm_suites import Node, RlmmManagerSuite, Tips
from tierlog_rlmm_compacted import (
    CompactedRemoteLogMetadataManager,
    CompactedRlmmConfig,
    decode_value,
    enable_compaction,
)
from tierlog_rlmm_compacted.config import AUDIT_TOPIC_NAME
from tierlog_rlmm_topic import BOOTSTRAP_SERVERS_ENV
from tierlog_rlmm_topic.config import TOPIC_NAME
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
    IllegalStateError,
    RemoteLogMetadata,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)

PARTITIONS = 3

Factory = Callable[..., CompactedRemoteLogMetadataManager]


def compacted(rlmm: RemoteLogMetadataManager) -> CompactedRemoteLogMetadataManager:
    assert isinstance(rlmm, CompactedRemoteLogMetadataManager)
    return rlmm


class TestManager(RlmmManagerSuite):
    """The shared manager tests on the compacted RLMM (``rlmm_plugin`` in ``conftest.py``)."""

    def check_replayed(
        self, writer: Node, reader: Node, tips: Tips, deleted: TopicIdPartition
    ) -> None:
        """The reader holds the writer's keys (and what they describe) once it has read the
        tombstones of the expired segments, and knows the partition deleted for good."""
        mine, theirs = compacted(writer).applier, compacted(reader).applier
        wait_until(
            lambda: all(theirs.keys(tip) == mine.keys(tip) for tip in tips),
            "the writer and the reader holding the same keys",
        )
        wait_until(lambda: theirs.is_deleted(deleted), "the deleted partition replayed")


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


# Configuration -----------------------------------------------------------------------------------
def test_the_conformance_config_names_its_two_topics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BOOTSTRAP_SERVERS_ENV, "h:1")
    config = CompactedRemoteLogMetadataManager.conformance_config()
    parsed = CompactedRlmmConfig.from_configs(config)
    assert (parsed.base.topic_name, parsed.audit_topic_name) == (
        config[TOPIC_NAME],
        config[AUDIT_TOPIC_NAME],
    )


# Records on the wire ------------------------------------------------------------------------------
def test_records_keys_values_audit_and_tombstones_at_level_1(
    rlmm_factory: Factory, kafka_broker: Service, topic_name: str, audit_topic_name: str
) -> None:
    rlmm = rlmm_factory()
    assert rlmm.level == 1, "a projection topic the RLMM creates is compacted"
    tip = new_partition()
    assign(rlmm, [tip])
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
    assign(rlmm, [tip])
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
    assign(rlmm, [tip])
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
    assign(rlmm, [tip])
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
    assign(reader, [tip], follower=True)
    assert list(reader.list_remote_log_segments(tip)) == [finished]


# Concurrent writers ------------------------------------------------------------------------------
def test_concurrent_writers_share_transactions(rlmm_factory: Factory) -> None:
    rlmm = rlmm_factory()
    tips = [new_partition("concurrent", p) for p in range(4)]
    assign(rlmm, tips)
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


# The cleanup manager -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Level0:
    """A node that wrote, on a level-0 projection topic, five deleted segments of ``tip`` (their
    keys ``orphans`` once compaction is on) and three ``live`` ones."""

    rlmm: CompactedRemoteLogMetadataManager
    tip: TopicIdPartition
    orphans: list[bytes]
    live: list[RemoteLogSegmentMetadata]


def level_0_history(factory: Factory, admin: AdminClient, topic: str, name: str) -> Level0:
    create_legacy_topic(admin, topic)
    rlmm = factory()
    tip = new_partition(name)
    assign(rlmm, [tip])
    orphans = []
    for i in range(5):
        lifecycle(rlmm, segment(tip, i * 10, i * 10 + 9, {0: i * 10}))
        orphans.append(key_of(tip, i * 10 + 9, 0))
    live = [copied(rlmm, segment(tip, i * 10, i * 10 + 9, {1: i * 10})) for i in range(5, 8)]
    return Level0(rlmm, tip, orphans, live)


def test_cleanup_tombstones_orphans_once(
    rlmm_factory: Factory, kafka_broker: Service, kafka_admin: AdminClient, topic_name: str
) -> None:
    history = level_0_history(rlmm_factory, kafka_admin, topic_name, "cleanup")
    rlmm, tip, orphans, live = history.rlmm, history.tip, history.orphans, history.live
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
    history = level_0_history(rlmm_factory, kafka_admin, topic_name, "cleanup-two")
    first, tip, orphans, live = history.rlmm, history.tip, history.orphans, history.live
    second = rlmm_factory({"node.id": "2"})
    assign(second, [tip], follower=True)
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
    assign(third, [tip], follower=True)
    assert list(third.list_remote_log_segments(tip)) == live
    assert third.applier.keys(tip) == first.applier.keys(tip)


# Fencing and lifecycle ---------------------------------------------------------------------------
def test_a_second_instance_of_a_node_fences_the_first(rlmm_factory: Factory) -> None:
    old = rlmm_factory()
    tip = new_partition("fenced")
    assign(old, [tip])
    copied(old, segment(tip, 0, 9, {0: 0}))
    new = rlmm_factory()  # the same node.id: the same transactional.id
    assign(new, [tip])
    with pytest.raises(ProduceError, match="fenced"):
        done(old.add_remote_log_segment_metadata(segment(tip, 10, 19, {0: 10})))
    seg = segment(tip, 20, 29, {0: 20})
    done(new.add_remote_log_segment_metadata(seg))
    assert seg in list(new.list_remote_log_segments(tip))


def test_the_level_and_the_cleanup_need_a_configured_open_node(rlmm_factory: Factory) -> None:
    """Beyond the shared lifecycle errors: the compaction level is not refreshed once closed,
    and neither its configuration nor its cleanup manager exists before ``configure``."""
    rlmm = rlmm_factory()
    rlmm.close()
    with pytest.raises(IllegalStateError):
        rlmm.refresh_level()
    unconfigured = CompactedRemoteLogMetadataManager()
    with pytest.raises(IllegalStateError, match="not configured"):
        _ = unconfigured.compacted_config
    with pytest.raises(IllegalStateError, match="not configured"):
        _ = unconfigured.cleanup
