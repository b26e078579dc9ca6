"""``tierlog metadata migrate`` against a real broker, and ``state`` (the comparison it uses).

- a legacy history written by tierlog's ``topic`` RLMM: the state before (that RLMM) equals
  the state a fresh compacted RLMM bootstraps from the migrated topic, before and after the
  broker's log cleaner really compacted it (the null-key records gone); the audit topic holds
  the legacy records with their offsets; the compaction configs are set; a re-run writes
  nothing and says "already migrated";
- the history Kafka's own tiered storage wrote (the session broker tiers topics with Kafka's
  TBRLMM on its ``__remote_log_metadata``): migrating that topic is refused while Kafka reads
  it; a copy of it (same partitions, same records in order) migrates, and the compacted RLMM
  on the copy equals tierlog's ``topic`` RLMM replaying Kafka's topic;
- an interrupted migration (an exception after the first partition's transaction) run again
  completes and writes nothing twice; a legacy writer still writing fails the verification
  (exit 1, nothing switched); a dry run writes nothing;
- ``logical_state``, ``diff`` and ``PartitionState.without`` on stores (no broker).
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
from _migration_support import (
    DEADLINE_S,
    METADATA_PARTITIONS,
    History,
    closing,
    end_offsets,
    legacy_history,
    migrate_cli,
    produce,
    read_topic,
    states,
    tip_on,
    topic_configs,
    wait_until,
)
from confluent_kafka import KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from services._common import Service
from tierlog_rlmm_compacted.manager import CompactedRemoteLogMetadataManager
from tierlog_rlmm_compacted.migration import (
    AUDIT_OFFSET_HEADER,
    MigrationOptions,
    migrate,
    print_report,
)
from tierlog_rlmm_compacted.state import PartitionState, diff, logical_state
from tierlog_rlmm_topic import TopicBasedRemoteLogMetadataManager

from tierlog.cli import _metadata
from tierlog.conformance.rlmm_suite import (
    DELETE_FINISHED,
    DELETE_STARTED,
    FINISHED,
    segment,
    update_of,
)
from tierlog.metadata import RemotePartitionMetadataStore, metadata_partition, serde
from tierlog.spi import (
    CustomMetadata,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    Uuid,
)

COMPACT_NOW = (
    "--topic-config",
    "segment.ms=100",
    "--topic-config",
    "min.cleanable.dirty.ratio=0.01",
    "--topic-config",
    "delete.retention.ms=100",
)
"""Topic configs under which the session broker's cleaner (log.cleaner.backoff.ms=1000)
compacts the migrated topic within seconds once its segments roll."""


@dataclass(frozen=True)
class Legacy:
    """A test's legacy metadata topic and its writer, tierlog's topic RLMM (2 partitions)."""

    servers: str
    admin: AdminClient
    topic: str
    audit: str
    rlmm: TopicBasedRemoteLogMetadataManager

    @property
    def args(self) -> tuple[str, ...]:
        return (
            "--bootstrap-servers",
            self.servers,
            "--topic",
            self.topic,
            "--audit-topic",
            self.audit,
        )


@pytest.fixture
def legacy(
    kafka_admin: AdminClient,
    rlmm_configs: Callable[..., dict[str, str]],
    topic_name: str,
    audit_topic_name: str,
    delete_topics: list[str],
) -> Iterator[Legacy]:
    delete_topics += [topic_name, audit_topic_name]
    configs = rlmm_configs({"remote.log.metadata.topic.num.partitions": "2"})
    rlmm = TopicBasedRemoteLogMetadataManager()
    rlmm.configure(configs)
    servers = configs["remote.log.metadata.common.client.bootstrap.servers"]
    yield Legacy(servers, kafka_admin, topic_name, audit_topic_name, rlmm)
    rlmm.close()


@pytest.fixture
def compacted_factory(
    rlmm_configs: Callable[..., dict[str, str]], audit_topic_name: str, delete_topics: list[str]
) -> Iterator[Callable[..., CompactedRemoteLogMetadataManager]]:
    """``compacted_factory(partitions, topic=None)``: a fresh compacted RLMM on the test's (or
    another) topic; closed after the test."""
    made: list[CompactedRemoteLogMetadataManager] = []
    delete_topics.append(audit_topic_name)

    def make(partitions: int, topic: str | None = None) -> CompactedRemoteLogMetadataManager:
        extra = {"remote.log.metadata.topic.num.partitions": str(partitions), "node.id": "9"}
        if topic is not None:
            extra["remote.log.metadata.topic.name"] = topic
            extra["remote.log.metadata.audit.topic.name"] = f"{topic}-audit"
            delete_topics.append(f"{topic}-audit")
        rlmm = CompactedRemoteLogMetadataManager()
        made.append(rlmm)
        rlmm.configure(rlmm_configs(extra))
        return rlmm

    yield make
    for rlmm in made:
        rlmm.close()


def bootstrapped(
    rlmm: TopicBasedRemoteLogMetadataManager,
    live: list[TopicIdPartition],
    gone: list[TopicIdPartition],
) -> dict[TopicIdPartition, PartitionState]:
    """The states an RLMM rebuilds for ``live`` and ``gone`` partitions (each gone partition
    shares its metadata partition with a live one, whose readiness says it was replayed)."""
    rlmm.on_partition_leadership_changes(set(live) | set(gone), set())
    wait_until(lambda: all(rlmm.is_ready(t) for t in live), "the RLMM's replay")
    return states(rlmm, live + gone)


def legacy_records(records: dict[int, list[Any]]) -> dict[int, list[tuple[int, bytes]]]:
    """The null-key records of each partition that has some: (offset, value)."""
    out = {
        p: [(r.offset, r.value) for r in recs if r.key is None and r.value is not None]
        for p, recs in records.items()
    }
    return {p: values for p, values in out.items() if values}


def migrated_offsets(audit: dict[int, list[Any]]) -> dict[int, list[tuple[int, bytes]]]:
    out: dict[int, list[tuple[int, bytes]]] = {}
    for p, recs in audit.items():
        for r in recs:
            assert r.key is None
            (header,) = [v for k, v in r.headers if k == AUDIT_OFFSET_HEADER]
            out.setdefault(p, []).append((int(header.decode()), r.value))
    return out


def restate_last_keyed(servers: str, topic: str) -> None:
    """Append again, in each partition, its last keyed record: the latest value of that key
    does not change, and the append rolls the segment once ``segment.ms`` has passed."""
    again = []
    for partition, recs in read_topic(servers, topic).items():
        keyed = [r for r in recs if r.key is not None and r.value is not None]
        if keyed:
            again.append((partition, keyed[-1].key, keyed[-1].value))
    produce(servers, topic, again)


# (a) A history of the topic RLMM -----------------------------------------------------------------
def test_topic_rlmm_history_migrates_and_compacts(
    legacy: Legacy, compacted_factory: Callable[..., CompactedRemoteLogMetadataManager]
) -> None:
    servers, topic, audit = legacy.servers, legacy.topic, legacy.audit
    history = legacy_history(legacy.rlmm)
    before = states(legacy.rlmm, history.tips)
    assert [before[t].gone for t in history.tips] == [False] * 4 + [True]
    started = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    assert sum(s.state is started for s in before[history.live[0]].segments) == 2
    legacy.rlmm.close()
    originals = legacy_records(read_topic(servers, topic))

    run = migrate_cli(*legacy.args, *COMPACT_NOW)

    assert run.code == 0, run.err
    # Nothing to warn about (the keyed values restating the history are expected).
    assert "WARNING" not in run.err and "ERROR" not in run.err, run.err
    read = sum(len(v) for v in originals.values())
    assert (
        run.line("records read:") == f"records read: {read} ({read} legacy, 0 keyed, 0 tombstones)"
    )
    assert run.line("user partitions:") == "user partitions: 5 (1 deleted)"
    assert run.line("live segments:") == f"live segments: {history.keyed_values - history.markers}"
    assert run.line("keyed values written:") == (
        f"keyed values written: {history.keyed_values} ({history.markers} partition delete "
        "markers, 2 transactions)"
    )
    assert run.line("audit records copied:") == f"audit records copied: {read} (to {audit})"
    assert run.line("verification:") == "verification: passed (the topic, 5 partitions)"
    assert "already migrated" not in run.out
    configs = topic_configs(legacy.admin, topic)
    assert configs["cleanup.policy"] == "compact"
    assert configs["segment.ms"] == "100"
    assert configs["min.cleanable.dirty.ratio"] == "0.01"
    assert configs["delete.retention.ms"] == "100"
    assert run.line("configs set:").startswith("configs set: cleanup.policy=compact, ")
    # Every keyed value is Kafka's record (version 0) with our tags: a TBRLMM still reads it.
    keyed = [r for recs in read_topic(servers, topic).values() for r in recs if r.key]
    assert len(keyed) == history.keyed_values
    assert all(serde.decode_record(r.value).version == 0 for r in keyed)
    # The audit topic: each legacy record once, same partition, same order, its offset.
    assert migrated_offsets(read_topic(servers, audit)) == originals

    after = bootstrapped(compacted_factory(METADATA_PARTITIONS), history.live, history.deleted)
    assert {t: diff(before[t], after[t]) for t in history.tips} == {t: [] for t in history.tips}
    assert after == before

    # The broker's cleaner compacts the topic once appends roll its segments: the null-key
    # records go (and any older value of a key).
    def compacted() -> bool:
        if any(r.key is None for recs in read_topic(servers, topic).values() for r in recs):
            restate_last_keyed(servers, topic)
            return False
        return True

    wait_until(compacted, "the log cleaner removing the legacy records")
    left = [r for recs in read_topic(servers, topic).values() for r in recs]
    assert len({r.key for r in left}) == history.keyed_values
    fresh = bootstrapped(compacted_factory(METADATA_PARTITIONS), history.live, history.deleted)
    assert {t: diff(before[t], fresh[t]) for t in history.tips} == {t: [] for t in history.tips}

    # (d) Run again on the migrated, compacted topic: nothing written, exit 0.
    ends = end_offsets(servers, topic), end_offsets(servers, audit)
    again = migrate_cli(*legacy.args)
    assert again.code == 0, again.err
    assert "already migrated" in again.out.splitlines(), again.out
    assert again.line("keyed values written:").startswith("keyed values written: 0 ")
    assert again.line("audit records copied:").startswith("audit records copied: 0")
    assert again.line("configs set:") == "configs set: none (the topic is compacted already)"
    assert (end_offsets(servers, topic), end_offsets(servers, audit)) == ends


def test_rerun_before_compaction_writes_nothing(legacy: Legacy) -> None:
    """(d) on a topic migrated a moment ago: history and keyed values side by side."""
    legacy_history(legacy.rlmm)
    legacy.rlmm.close()
    first = migrate_cli(*legacy.args)
    assert first.code == 0, first.err
    ends = end_offsets(legacy.servers, legacy.topic), end_offsets(legacy.servers, legacy.audit)
    again = migrate_cli(*legacy.args)
    assert again.code == 0, again.err
    assert "already migrated" in again.out.splitlines(), again.out
    assert again.line("keyed values written:") == (
        "keyed values written: 0 (0 partition delete markers, 0 transactions)"
    )
    assert again.line("audit records copied:") == f"audit records copied: 0 (to {legacy.audit})"
    assert again.line("verification:").startswith("verification: passed (the topic")
    after = end_offsets(legacy.servers, legacy.topic), end_offsets(legacy.servers, legacy.audit)
    assert after == ends


# (c) Interrupted, run again -----------------------------------------------------------------------
class Interrupted(Exception):
    pass


def test_interrupted_migration_completes_and_writes_nothing_twice(legacy: Legacy) -> None:
    servers, topic = legacy.servers, legacy.topic
    history = legacy_history(legacy.rlmm)
    legacy.rlmm.close()
    originals = legacy_records(read_topic(servers, topic))
    committed: list[int] = []

    def interrupt(partition: int) -> None:
        committed.append(partition)
        raise Interrupted(f"after the transaction of partition {partition}")

    with pytest.raises(Interrupted):
        migrate(MigrationOptions(servers, topic, legacy.audit), after_transaction=interrupt)
    assert committed == [0]
    halfway = read_topic(servers, topic)
    first_keyed = sum(1 for r in halfway[0] if r.key is not None)
    assert first_keyed > 0
    assert not any(r.key is not None for r in halfway[1])
    assert topic_configs(legacy.admin, topic)["cleanup.policy"] == "delete"
    assert migrated_offsets(read_topic(servers, legacy.audit)) == {0: originals[0]}

    run = migrate_cli(*legacy.args)

    assert run.code == 0, run.err
    assert run.line("keyed values written:").startswith(
        f"keyed values written: {history.keyed_values - first_keyed} "
    )
    assert run.line("audit records copied:").startswith(
        f"audit records copied: {len(originals[1])} "
    )
    final = read_topic(servers, topic)
    keys = Counter((p, r.key) for p, recs in final.items() for r in recs if r.key is not None)
    assert sum(keys.values()) == history.keyed_values
    assert max(keys.values()) == 1  # no key written twice
    assert migrated_offsets(read_topic(servers, legacy.audit)) == originals
    assert topic_configs(legacy.admin, topic)["cleanup.policy"] == "compact"


# A legacy writer still writing; a dry run ---------------------------------------------------------
def test_a_legacy_writer_still_writing_fails_the_verification(legacy: Legacy) -> None:
    history = legacy_history(legacy.rlmm)
    tip = history.live[2]  # on metadata partition 1, written after partition 0's transaction
    assert metadata_partition(tip, METADATA_PARTITIONS) == 1
    late = segment(tip, 20, 29, {0: 20})

    def legacy_write(partition: int) -> None:
        if partition == 0:
            legacy.rlmm.add_remote_log_segment_metadata(late).result(timeout=DEADLINE_S)
            legacy.rlmm.update_remote_log_segment_metadata(update_of(late, FINISHED)).result(
                timeout=DEADLINE_S
            )

    report = migrate(
        MigrationOptions(legacy.servers, legacy.topic, None), after_transaction=legacy_write
    )

    assert not report.verified
    assert list(report.failures) == [tip]
    assert report.failures[tip][0] == (
        f"segment {late.remote_log_segment_id.id} (20-29, COPY_SEGMENT_FINISHED) only in the first"
    )
    assert report.configs_set is None
    assert topic_configs(legacy.admin, legacy.topic)["cleanup.policy"] == "delete"
    out, err = io.StringIO(), io.StringIO()
    assert print_report(report, out, err) == 1
    assert "verification: FAILED for 1 partition(s)" in out.getvalue()
    assert f"tierlog: {tip}: the keyed records differ from the history: segment" in err.getvalue()
    assert "nothing was switched" in err.getvalue()


def test_a_copy_a_deleted_duplicate_displaced_migrates_with_a_marker(
    legacy: Legacy, compacted_factory: Callable[..., CompactedRemoteLogMetadataManager]
) -> None:
    """A duplicate upload (a leadership change during the upload) displaced the first copy,
    then was deleted first: the history serves offsets 0-99 from no segment. The migration
    writes the duplicate's history as a displacement marker; a compacted RLMM bootstrapping
    from the migrated topic serves them from nothing too, and deleting the first copy at
    level 1 tombstones the marker with it."""
    tip = tip_on(0, "displaced")
    rlmm = legacy.rlmm
    rlmm.on_partition_leadership_changes({tip}, set())
    wait_until(lambda: rlmm.is_ready(tip), "the legacy RLMM's readiness")
    first, duplicate = segment(tip, 0, 99, {0: 0}), segment(tip, 0, 99, {0: 0})
    for metadata in (first, duplicate):
        rlmm.add_remote_log_segment_metadata(metadata).result(timeout=DEADLINE_S)
        rlmm.update_remote_log_segment_metadata(update_of(metadata, FINISHED)).result(
            timeout=DEADLINE_S
        )
    for state in (DELETE_STARTED, DELETE_FINISHED):
        rlmm.update_remote_log_segment_metadata(update_of(duplicate, state)).result(
            timeout=DEADLINE_S
        )
    assert rlmm.remote_log_segment_metadata(tip, 0, 0) is None
    expected = states(rlmm, [tip])
    rlmm.close()

    run = migrate_cli(*legacy.args)

    assert run.code == 0, run.out + run.err
    assert run.line("keyed values written:") == (
        "keyed values written: 2 (0 partition delete markers, 1 displacement markers, "
        "1 transactions)"
    )
    assert topic_configs(legacy.admin, legacy.topic)["cleanup.policy"] == "compact"
    compacted = compacted_factory(METADATA_PARTITIONS, legacy.topic)
    assert bootstrapped(compacted, [tip], []) == expected
    assert compacted.remote_log_segment_metadata(tip, 0, 0) is None
    assert compacted.applier.orphan_keys(tip) == [], "the marker is needed"

    for state in (DELETE_STARTED, DELETE_FINISHED):
        compacted.update_remote_log_segment_metadata(update_of(first, state)).result(
            timeout=DEADLINE_S
        )
    assert compacted.applier.keys(tip) == {}, "the marker outlived the copy it displaced"


def test_dry_run_writes_nothing(legacy: Legacy) -> None:
    history = legacy_history(legacy.rlmm)
    legacy.rlmm.close()
    ends = end_offsets(legacy.servers, legacy.topic)

    run = migrate_cli(*legacy.args, "--dry-run")

    assert run.code == 0, run.err
    assert run.line("keyed values would write:") == (
        f"keyed values would write: {history.keyed_values} ({history.markers} partition delete "
        "markers, 2 transactions)"
    )
    assert run.line("audit records to copy:") == (
        f"audit records to copy: {sum(ends.values())} (to {legacy.audit})"
    )
    assert run.line("verification:") == "verification: passed (the plan, 5 partitions)"
    assert run.line("configs set:") == "configs set: none (--dry-run)"
    assert end_offsets(legacy.servers, legacy.topic) == ends
    assert legacy.audit not in legacy.admin.list_topics(timeout=30).topics
    assert topic_configs(legacy.admin, legacy.topic)["cleanup.policy"] == "delete"


# (b) Kafka's own tiered storage ------------------------------------------------------------------
KAFKA_METADATA_TOPIC = "__remote_log_metadata"
KAFKA_METADATA_PARTITIONS = 5
"""The session broker's ``__remote_log_metadata`` (``start_kafka``'s default)."""


def tiered_topic(admin: AdminClient, name: str) -> TopicIdPartition:
    """A one-partition topic Kafka tiers in segments of 16 KiB."""
    configs = {"remote.storage.enable": "true", "internal.segment.bytes": "16384"}
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(timeout=60)
    found: list[Uuid] = []

    def led() -> bool:
        try:
            described = admin.describe_topics(TopicCollection([name]))[name].result(timeout=30)
        except KafkaException:  # not in the metadata yet
            return False
        if described.partitions[0].leader is None:
            return False
        topic_id = described.topic_id
        found.append(
            Uuid(topic_id.get_most_significant_bits(), topic_id.get_least_significant_bits())
        )
        return True

    wait_until(led, f"{name} to have a leader")
    return TopicIdPartition(found[-1], name, 0)


def fill(servers: str, topic: str, records: int) -> None:
    # Batches well below the 16 KiB segments (the broker refuses larger ones).
    records_ = [(0, str(i).encode(), bytes(1000)) for i in range(records)]
    produce(servers, topic, records_, **{"batch.size": 4000})


def kafka_live_segments(servers: str, tip: TopicIdPartition) -> dict[Uuid, tuple[int, int, Any]]:
    """Kafka's segments of ``tip`` not yet deleted, folded from its ``__remote_log_metadata``:
    id -> (start offset, end offset, state)."""
    live: dict[Uuid, tuple[int, int, Any]] = {}
    for records in read_topic(servers, KAFKA_METADATA_TOPIC).values():
        for r in records:
            event = serde.deserialize(r.value)
            if getattr(event, "topic_id_partition", None) != tip:
                continue
            if isinstance(event, RemoteLogSegmentMetadata):
                live[event.remote_log_segment_id.id] = (
                    event.start_offset,
                    event.end_offset,
                    event.state,
                )
            elif isinstance(event, RemoteLogSegmentMetadataUpdate):
                start, end, _ = live[event.remote_log_segment_id.id]
                live[event.remote_log_segment_id.id] = (start, end, event.state)
                if event.state is RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                    del live[event.remote_log_segment_id.id]
    return live


def tier_all(broker: Service, tip: TopicIdPartition) -> dict[Uuid, tuple[int, int, Any]]:
    """Wait until Kafka tiered every segment of ``tip`` but the active one."""
    directory = broker.directory / "data" / f"{tip.topic}-0"
    active = max(int(path.name[:20]) for path in directory.glob("*.log"))
    assert active > 0, "no segment rolled"
    live: dict[Uuid, tuple[int, int, Any]] = {}

    def tiered() -> bool:
        live.update(kafka_live_segments(broker.url, tip))
        finished = [
            end
            for _, end, state in live.values()
            if state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ]
        return max(finished, default=-1) == active - 1

    wait_until(tiered, f"Kafka tiering {tip.topic} up to offset {active - 1}")
    return kafka_live_segments(broker.url, tip)


def test_kafka_history_copy_migrates_and_kafka_topic_is_refused(
    kafka_broker: Service,
    kafka_admin: AdminClient,
    compacted_factory: Callable[..., CompactedRemoteLogMetadataManager],
    topic_name: str,
    delete_topics: list[str],
) -> None:
    servers = kafka_broker.url
    # Migrating Kafka's own topic is refused while its TBRLMM reads it.
    refused = migrate_cli("--bootstrap-servers", servers)
    assert refused.code == 2, refused.err
    assert "cannot migrate __remote_log_metadata: broker(s) 1 run Kafka's" in refused.err
    assert not refused.out

    # Kafka tiers two topics, then deletes the first segments of one (DeleteRecords: its RLM
    # deletes the remote segments below the log start offset) and the whole other one.
    kept = tiered_topic(kafka_admin, f"{topic_name}-kept")
    dropped = tiered_topic(kafka_admin, f"{topic_name}-dropped")
    delete_topics.append(kept.topic)
    fill(servers, kept.topic, 120)
    fill(servers, dropped.topic, 60)
    segments = sorted(tier_all(kafka_broker, kept).values())
    assert len(segments) >= 4
    tier_all(kafka_broker, dropped)
    log_start = segments[1][1] + 1
    (future,) = kafka_admin.delete_records([TopicPartition(kept.topic, 0, log_start)]).values()
    future.result(timeout=60)
    kafka_admin.delete_topics([dropped.topic])[dropped.topic].result(timeout=60)
    wait_until(
        lambda: min(s for s, _, _ in kafka_live_segments(servers, kept).values()) == log_start,
        f"Kafka deleting the remote segments of {kept.topic} below {log_start}",
    )
    wait_until(
        lambda: not kafka_live_segments(servers, dropped),
        f"Kafka deleting the remote segments of the deleted {dropped.topic}",
    )

    # The copy: same partition count, each partition's records in order.
    copy = f"{topic_name}-copy"
    delete_topics += [copy, f"{copy}-audit"]
    kafka_admin.create_topics(
        [NewTopic(copy, KAFKA_METADATA_PARTITIONS, 1, config={"retention.ms": "-1"})]
    )[copy].result(timeout=60)
    source = read_topic(servers, KAFKA_METADATA_TOPIC)
    produce(
        servers, copy, [(p, r.key, r.value) for p, recs in sorted(source.items()) for r in recs]
    )
    copied = {p: [(r.key, r.value) for r in recs] for p, recs in read_topic(servers, copy).items()}
    assert copied == {p: [(r.key, r.value) for r in recs] for p, recs in source.items()}

    # The reference: tierlog's topic RLMM replaying Kafka's own topic.
    oracle = TopicBasedRemoteLogMetadataManager()
    with closing(oracle):
        oracle.configure(
            {
                "remote.log.metadata.common.client.bootstrap.servers": servers,
                "remote.log.metadata.topic.num.partitions": str(KAFKA_METADATA_PARTITIONS),
                "remote.log.metadata.topic.replication.factor": "1",
                "remote.log.metadata.topic.min.isr": "1",
                "node.id": "7",
            }
        )
        expected = bootstrapped(oracle, [kept, dropped], [])
    assert len(expected[kept].segments) == len(segments) - 2
    assert not expected[dropped].segments and not expected[dropped].gone

    run = migrate_cli(
        "--bootstrap-servers", servers, "--topic", copy, "--audit-topic", f"{copy}-audit"
    )
    assert run.code == 0, run.err
    assert run.line("verification:").startswith("verification: passed (the topic")
    assert topic_configs(kafka_admin, copy)["cleanup.policy"] == "compact"
    assert migrated_offsets(read_topic(servers, f"{copy}-audit")) == legacy_records(source)

    got = bootstrapped(
        compacted_factory(KAFKA_METADATA_PARTITIONS, topic=copy), [kept, dropped], []
    )
    assert {t: diff(expected[t], got[t]) for t in got} == {kept: [], dropped: []}
    assert got == expected


# The command without the plugin ------------------------------------------------------------------
def test_migrate_without_the_plugin_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = _metadata.importlib.import_module

    def missing(name: str, package: str | None = None) -> Any:
        if name.startswith("tierlog_rlmm_compacted"):
            raise ModuleNotFoundError(f"No module named {name!r}", name="tierlog_rlmm_compacted")
        return real(name, package)

    monkeypatch.setattr(_metadata.importlib, "import_module", missing)
    run = migrate_cli("--bootstrap-servers", "127.0.0.1:1")
    assert run.code == 2
    assert "pip install plugins/rlmm_compacted" in run.err


def test_topic_config_must_be_name_equals_value() -> None:
    run = migrate_cli("--bootstrap-servers", "127.0.0.1:1", "--topic-config", "segment.ms")
    assert run.code == 2
    assert "--topic-config 'segment.ms': expected NAME=VALUE" in run.err


# logical_state, diff, without (no broker) --------------------------------------------------------
def _store(tip: TopicIdPartition, *events: Any) -> RemotePartitionMetadataStore:
    store = RemotePartitionMetadataStore()
    store.maybe_load_partition(tip)
    for event in events:
        store.handle(event)
    store.mark_initialized(tip)
    return store


def test_logical_state_diff_and_without() -> None:
    tip = TopicIdPartition(Uuid.random(), "t", 0)
    s1 = segment(tip, 0, 99, {0: 0, 1: 50}, size=100)
    s2 = segment(tip, 100, 199, {1: 100}, size=200)
    failed = segment(tip, 100, 199, {1: 100}, size=300)
    copies = (s1, update_of(s1, FINISHED), s2, update_of(s2, FINISHED))
    both = _store(tip, *copies, failed)
    state = logical_state(both, tip)
    assert [e.epoch for e in state.epochs] == [0, 1]
    assert state.epochs[1].size == 600 and state.epochs[1].highest_offset == 199
    assert len(state.segments) == 3 and not state.gone and state.delete_state is None
    one = logical_state(_store(tip, *copies), tip)
    first, second, third = (str(s.remote_log_segment_id.id) for s in (s1, s2, failed))
    assert diff(state, one) == [
        f"segment {third} (100-199, COPY_SEGMENT_STARTED) only in the first",
        f"leader epoch 1: listing [0: {{{first}}}, 100: {{{', '.join(sorted([second, third]))}}}] "
        f"vs [0: {{{first}}}, 100: {{{second}}}]",
        "leader epoch 1: remote log size 600 vs 300",
    ]
    assert state.without({failed.remote_log_segment_id.id}) == one
    assert diff(state.without({failed.remote_log_segment_id.id}), one) == []
    # A changed field is named with both values.
    finished = copies[1]
    custom = _store(tip, s1, replace(finished, custom_metadata=CustomMetadata(b"x")))
    plain = _store(tip, s1, finished)
    (line,) = [
        d for d in diff(logical_state(custom, tip), logical_state(plain, tip)) if "custom" in d
    ]
    assert "custom_metadata CustomMetadata(" in line and "vs None" in line
    # A partition the reader does not have is gone.
    other = TopicIdPartition(Uuid.random(), "t", 1)
    assert logical_state(plain, other) == PartitionState(other, True)
    assert diff(logical_state(plain, other), PartitionState(other, False)) == [
        "partition gone (deleted or unknown) vs present"
    ]


def test_a_reader_of_live_segments_may_forget_a_deleted_epochs_highest_offset() -> None:
    """Epoch 0's finished segment was deleted; a failed upload of epoch 0 is left. The full
    history remembers epoch 0's highest offset (99), a reader of keyed values describing live
    segments cannot: ``diff(forgets=True)`` accepts unknown or lower there, never higher, and
    never in an epoch with a finished segment."""
    tip = TopicIdPartition(Uuid.random(), "t", 0)
    gone, failed = segment(tip, 0, 99, {0: 0}), segment(tip, 100, 149, {0: 100})
    kept = segment(tip, 150, 199, {1: 150})
    deletion = [update_of(gone, s) for s in (FINISHED, DELETE_STARTED, DELETE_FINISHED)]
    live = (failed, kept, update_of(kept, FINISHED))
    full = logical_state(_store(tip, gone, *deletion, *live), tip)
    keyed = logical_state(_store(tip, *live), tip)
    assert diff(full, keyed) == ["leader epoch 0: highest offset 99 vs None"]
    assert diff(full, keyed, forgets=True) == []
    lower = _store(tip, *live)
    lower.raise_highest_offset(tip, 0, 50)
    assert diff(full, logical_state(lower, tip), forgets=True) == []
    higher = _store(tip, *live)
    higher.raise_highest_offset(tip, 0, 120)
    assert diff(full, logical_state(higher, tip), forgets=True) == [
        "leader epoch 0: highest offset 99 vs 120"
    ]
    # Epoch 1 has a finished segment: its highest offset must be the same.
    bumped = _store(tip, *live)
    bumped.raise_highest_offset(tip, 1, 250)
    assert diff(keyed, logical_state(bumped, tip), forgets=True) == [
        "leader epoch 1: highest offset 199 vs 250"
    ]


@dataclass(frozen=True)
class _Relisted:
    """A reader answering as ``store``, but listing each epoch's segments as ``relist`` says: a
    reader whose per-epoch listing differs from Kafka's."""

    store: RemotePartitionMetadataStore
    relist: Callable[[list[RemoteLogSegmentMetadata]], list[RemoteLogSegmentMetadata]]

    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> Iterator[RemoteLogSegmentMetadata]:
        listed = list(self.store.list_remote_log_segments(topic_id_partition, leader_epoch))
        return iter(listed if leader_epoch is None else self.relist(listed))

    def highest_offset_for_epoch(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int
    ) -> int | None:
        return self.store.highest_offset_for_epoch(topic_id_partition, leader_epoch)

    def remote_log_size(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int:
        return self.store.remote_log_size(topic_id_partition, leader_epoch)

    def remote_log_segment_metadata(
        self, topic_id_partition: TopicIdPartition, epoch_for_offset: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        return self.store.remote_log_segment_metadata(topic_id_partition, epoch_for_offset, offset)


def test_listings_compare_which_segments_share_a_start_offset_not_their_order() -> None:
    """Kafka lists an epoch's segments with equal start offsets in HashSet order (unspecified):
    two readers listing the same segments in another order among equal starts answer alike.
    Another order of start offsets, or a segment missing from an epoch's listing, still
    differs."""
    tip = TopicIdPartition(Uuid.random(), "t", 0)
    x, y = segment(tip, 0, 9, {0: 0}, size=10), segment(tip, 0, 9, {0: 0}, size=20)
    z = segment(tip, 10, 19, {0: 10}, size=40)
    xyz, yxz = _store(tip, x, y, z), _store(tip, y, x, z)
    x_id, y_id, z_id = (s.remote_log_segment_id.id for s in (x, y, z))

    def order(store: RemotePartitionMetadataStore) -> list[Uuid]:
        return [s.remote_log_segment_id.id for s in store.list_remote_log_segments(tip, 0)]

    assert (order(xyz), order(yxz)) == ([x_id, y_id, z_id], [y_id, x_id, z_id])
    state = logical_state(xyz, tip)
    assert diff(state, logical_state(yxz, tip)) == []
    assert logical_state(yxz, tip) == state
    assert state.epochs[0].listing == ((0, frozenset({x_id, y_id})), (10, frozenset({z_id})))

    reversed_starts = logical_state(_Relisted(xyz, lambda listed: listed[::-1]), tip)
    runs = f"0: {{{', '.join(sorted([str(x_id), str(y_id)]))}}}"
    assert diff(state, reversed_starts) == [
        f"leader epoch 0: listing [{runs}, 10: {{{z_id}}}] vs [10: {{{z_id}}}, {runs}]"
    ]
    without_y = logical_state(
        _Relisted(xyz, lambda listed: [s for s in listed if s is not listed[1]]), tip
    )
    assert diff(state, without_y) == [
        f"leader epoch 0: listing [{runs}, 10: {{{z_id}}}] vs [0: {{{x_id}}}, 10: {{{z_id}}}]"
    ]
    # ``without`` regroups what is left: removing y leaves x alone at 0; removing z from a
    # listing 0, 10, 0 leaves one run of 0.
    assert state.without({y_id}) == logical_state(_store(tip, x, z), tip)
    zero = logical_state(_Relisted(xyz, lambda listed: [listed[0], listed[2], listed[1]]), tip)
    assert zero.epochs[0].listing == (
        (0, frozenset({x_id})),
        (10, frozenset({z_id})),
        (0, frozenset({y_id})),
    )
    assert zero.without({z_id}).epochs[0].listing == ((0, frozenset({x_id, y_id})),)


def test_the_segment_serving_the_reads_is_compared() -> None:
    """Two finished copies of the same offsets: the reads go to the last one finished."""
    tip = TopicIdPartition(Uuid.random(), "t", 0)
    x, y = segment(tip, 0, 9, {0: 0}), segment(tip, 0, 9, {0: 0})
    x_done, y_done = update_of(x, FINISHED), update_of(y, FINISHED)
    to_y = logical_state(_store(tip, x, y, x_done, y_done), tip)
    to_x = logical_state(_store(tip, x, y, y_done, x_done), tip)
    assert to_y.segments == to_x.segments
    assert to_y.epochs[0].routing == (
        (0, y.remote_log_segment_id.id),
        (9, y.remote_log_segment_id.id),
    )
    lines = diff(to_y, to_x)
    x_id, y_id = x.remote_log_segment_id.id, y.remote_log_segment_id.id
    assert f"leader epoch 0: offset 0 served by segment {y_id} vs segment {x_id}" in lines
    assert f"leader epoch 0: offset 9 served by segment {y_id} vs segment {x_id}" in lines


def test_segments_compare_every_field() -> None:
    tip = TopicIdPartition(Uuid.random(), "t", 0)
    base = segment(tip, 0, 9, {0: 0})
    moved = RemoteLogSegmentMetadata(
        base.remote_log_segment_id, 0, 9, base.max_timestamp_ms + 1, base.broker_id,
        base.event_timestamp_ms, base.segment_size_in_bytes, {0: 0}, txn_idx_empty=True,
    )  # fmt: skip
    lines = diff(logical_state(_store(tip, base), tip), logical_state(_store(tip, moved), tip))
    assert lines == [
        f"segment {base.remote_log_segment_id.id}: max_timestamp_ms {base.max_timestamp_ms!r} vs "
        f"{moved.max_timestamp_ms!r}; txn_idx_empty False vs True"
    ]


def test_history_fixture_is_what_the_tests_count(legacy: Legacy) -> None:
    """The counts the migration tests assert come from the history itself."""
    history: History = legacy_history(legacy.rlmm)
    before = states(legacy.rlmm, history.tips)
    live_segments = sum(len(before[t].segments) for t in history.live)
    assert live_segments + history.markers == history.keyed_values
    shared = Counter(metadata_partition(t, METADATA_PARTITIONS) for t in history.tips)
    assert shared[0] >= 2 and shared[1] >= 2  # several user partitions per metadata partition
