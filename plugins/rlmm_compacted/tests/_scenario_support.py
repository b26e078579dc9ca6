"""Building blocks of the tests against the real broker: configurations of compacted RLMM
nodes, an independent reading of the projection and audit topics, what a projection record
says (in words, to compare lists of records), Kafka's log cleaner made to run, and the readers
a scenario's outcome is compared with (a fresh node bootstrapping from the compacted topic, a
legacy replay of the audit topic).

Used by ``test_scenarios.py``, ``test_mixed_cluster.py`` and ``test_faults.py``. What both RLMM
plugins' tests use (waiting, nodes, the independent reader of a topic) is
``services.rlmm_faults``'s, re-exported here. Nothing here sleeps as an assertion: every wait
is on a condition with a deadline.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Final, Unpack

from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin._resource import ResourceType
from services import rlmm_faults
from services.rlmm_faults import (
    DEADLINE_S,
    Layout,
    Rec,
    assign,
    node_configs,
    read_records,
    wait_gone,
    wait_until,
)
from tierlog_rlmm_compacted import CompactedRemoteLogMetadataManager
from tierlog_rlmm_compacted.config import AUDIT_TOPIC_NAME
from tierlog_rlmm_compacted.keys import MetadataKey
from tierlog_rlmm_compacted.state import PartitionState, logical_state
from tierlog_rlmm_compacted.values import decode_value
from tierlog_rlmm_topic import TopicBasedRemoteLogMetadataManager

from tierlog.conformance.rlmm_suite import segment
from tierlog.metadata import serde
from tierlog.metadata.formatter import kafka_string
from tierlog.spi import (
    RemoteLogMetadata,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
    Uuid,
)

__all__ = [
    "COMPACTION_DEADLINE_S",
    "DEADLINE_S",
    "Expected",
    "Rec",
    "Roller",
    "alter_topic",
    "as_compacted",
    "assign",
    "audit_text",
    "cleaner_configs",
    "compacted_configs",
    "describe_configs",
    "describe_expected",
    "describe_record",
    "legacy_configs",
    "legacy_replay",
    "node_state",
    "open_node",
    "read_records",
    "rolling",
    "wait_compacted",
    "wait_gone",
    "wait_until",
]

COMPACTION_DEADLINE_S: Final = 240.0
"""Waits for Kafka's log cleaner to leave the expected content: a few cleaning rounds (the
broker's ``log.cleaner.backoff.ms`` is 1 s) on two busy cores; a tombstone needs two."""

ROLL_INTERVAL_S: Final = 0.5


# Configurations ----------------------------------------------------------------------------------
def compacted_configs(
    servers: str,
    topic: str,
    audit_topic: str,
    *,
    node_id: int,
    extra: Mapping[str, str] | None = None,
    **layout: Unpack[Layout],
) -> dict[str, str]:
    """The compacted RLMM's ``rlmm.config.`` keys for a projection and an audit topic of the
    test's own (one partition unless ``layout`` says otherwise)."""
    layout.setdefault("partitions", 1)
    own = {AUDIT_TOPIC_NAME: audit_topic, **(extra or {})}
    return node_configs(servers, topic, node_id=node_id, extra=own, **layout)


def cleaner_configs(*, min_compaction_lag_ms: int) -> dict[str, str]:
    """Projection topic configs that let Kafka's cleaner compact it within seconds: a segment
    rolled by any append 100 ms after its first record, cleaned as soon as 1% of the log is
    dirty, tombstones removed by the first cleaning after the one that stamped them.

    ``min_compaction_lag_ms``: a large lag keeps the cleaner off (every rolled segment is too
    young) while a test reads the full history; ``alter_topic`` sets it to 0 afterwards."""
    prefix = "remote.log.metadata.topic.config."
    return {
        f"{prefix}segment.ms": "100",
        f"{prefix}min.cleanable.dirty.ratio": "0.01",
        f"{prefix}delete.retention.ms": "0",
        f"{prefix}min.compaction.lag.ms": str(min_compaction_lag_ms),
    }


def legacy_configs(
    servers: str, audit_topic: str, *, node_id: int, partitions: int = 1
) -> dict[str, str]:
    """tierlog's ``topic`` RLMM (Kafka's TBRLMM) reading the audit topic as its metadata topic,
    committed records only (the audit records are transactional)."""
    isolation = {"remote.log.metadata.consumer.isolation.level": "read_committed"}
    return node_configs(
        servers, audit_topic, node_id=node_id, partitions=partitions, extra=isolation
    )


def open_node(
    configs: Mapping[str, str],
    opened: list[RemoteLogMetadataManager],
    kind: type[RemoteLogMetadataManager] = CompactedRemoteLogMetadataManager,
) -> RemoteLogMetadataManager:
    """A configured RLMM (compacted unless ``kind`` says otherwise), appended to ``opened``
    (closed by the test's fixture)."""
    return rlmm_faults.open_node(configs, opened, kind)


def node_state(rlmm: RemoteLogMetadataManager, tip: TopicIdPartition) -> PartitionState:
    """What ``rlmm`` answers for ``tip`` (``state.logical_state``)."""
    return logical_state(rlmm, tip)


# Topics, read and configured from outside -------------------------------------------------------
def alter_topic(admin: AdminClient, topic: str, configs: Mapping[str, str]) -> None:
    """Set topic configs (incrementally), as an operator's ``kafka-configs --alter`` would."""
    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in configs.items()
    ]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(timeout=60)


def describe_configs(admin: AdminClient, topic: str) -> dict[str, str | None]:
    """A topic's configs as the broker describes them."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=60)
    return {name: entry.value for name, entry in entries.items()}


# What a projection record says ------------------------------------------------------------------
def _segment_text(add: RemoteLogSegmentMetadata) -> str:
    """The fields of a segment that are its own (not those an update changes)."""
    return (
        f"{add.remote_log_segment_id.id} [{add.start_offset}..{add.end_offset}] "
        f"epochs={dict(sorted(add.segment_leader_epochs.items()))} "
        f"size={add.segment_size_in_bytes} maxTs={add.max_timestamp_ms} "
        f"txnIdxEmpty={add.txn_idx_empty} cleaner={add.cleaner_offsets} {add.state.name}"
    )


def describe_record(record: Rec) -> str:
    """A projection record in words: its key, and either ``null`` (a tombstone) or the event
    (Kafka's ``toString()``, as its console formatter prints it) with the projection's tags
    (BrokerLeaderEpoch, EndOffset, SegmentAddRecord, CopyFinished)."""
    key = record.key_text
    if record.value is None:
        return f"{key} => null"
    value = decode_value(record.value)
    parts = [f"{key} => {kafka_string(value.event)}", f"epoch={value.broker_leader_epoch}"]
    if value.end_offset is not None:
        parts.append(f"end={value.end_offset}")
    if value.add_record is not None:
        parts.append(f"add=<{_segment_text(value.add_record)}>")
    if value.copy_finished:
        parts.append("copyFinished")
    return " ".join(parts)


@dataclass(frozen=True)
class Expected:
    """A projection record a test expects: ``event`` None for a tombstone of ``key``;
    ``segment`` the segment's add (COPY_SEGMENT_STARTED) for an update."""

    key: MetadataKey
    event: RemoteLogMetadata | None = None
    segment: RemoteLogSegmentMetadata | None = None
    copy_finished: bool = False


def describe_expected(expected: Expected) -> str:
    """``describe_record``'s words for the record ``expected`` describes."""
    key = str(expected.key)
    event = expected.event
    if event is None:
        return f"{key} => null"
    parts = [f"{key} => {kafka_string(event)}", f"epoch={expected.key.broker_leader_epoch}"]
    if isinstance(event, RemoteLogSegmentMetadataUpdate):
        assert expected.segment is not None, "an expected update needs its segment"
        parts.append(f"end={expected.segment.end_offset}")
        parts.append(f"add=<{_segment_text(expected.segment)}>")
    elif isinstance(event, RemotePartitionDeleteMetadata):
        parts.append(f"end={expected.key.end_offset}")
    if expected.copy_finished:
        parts.append("copyFinished")
    return " ".join(parts)


def as_compacted(records: Sequence[Expected]) -> list[Expected]:
    """What Kafka's log cleaner leaves of ``records`` once tombstones are past their
    ``delete.retention.ms``: the last record of each key, in offset order, tombstones gone."""
    last = {r.key: i for i, r in enumerate(records)}
    return [r for i, r in enumerate(records) if last[r.key] == i and r.event is not None]


def audit_text(value: bytes | None) -> str:
    """An audit record in words (Kafka's formatter text of the legacy value)."""
    return "null" if value is None else kafka_string(serde.deserialize(value))


# Kafka's log cleaner, made to run ------------------------------------------------------------
@dataclass(eq=False)
class Roller:
    """Rolls the projection topic's active segment, which Kafka's cleaner never touches: every
    ``ROLL_INTERVAL_S`` it publishes, through ``rlmm``, the add of a new segment of a user
    partition of its own (``tip``, assigned to ``rlmm`` as leader), a harmless event whose
    append rolls the segment once ``segment.ms`` (100 ms) has passed. Each add gets a key of its
    own, so the roller's records survive compaction; tests look at their own partitions only."""

    rlmm: RemoteLogMetadataManager
    tip: TopicIdPartition
    written: int = 0
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Roller:
        self._thread = threading.Thread(target=self._run, name="roller", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            start = self.written * 10
            add = segment(self.tip, start, start + 9, {0: start})
            try:
                future: Future[None] = self.rlmm.add_remote_log_segment_metadata(
                    replace(add, broker_leader_epoch=0)
                )
                future.result(timeout=DEADLINE_S)
            except BaseException as exc:  # reported by check(), never swallowed
                self.error = exc
                return
            self.written += 1
            self._stop.wait(ROLL_INTERVAL_S)

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"the roller's write failed: {self.error!r}") from self.error

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(DEADLINE_S + 10)
            assert not self._thread.is_alive(), "the roller did not stop"
        self.check()


@contextlib.contextmanager
def rolling(rlmm: RemoteLogMetadataManager, tip: TopicIdPartition) -> Iterator[Roller]:
    """A running ``Roller``, stopped (and checked) on exit."""
    roller = Roller(rlmm, tip).start()
    try:
        yield roller
    finally:
        roller.stop()


def wait_compacted(
    servers: str,
    topic: str,
    topic_ids: Iterable[Uuid],
    expected: Sequence[Expected],
    roller: Roller,
) -> list[Rec]:
    """Wait until the projection topic's records of ``topic_ids`` are exactly ``expected``
    (in words, in order), which only Kafka's log cleaner can bring about; the records."""
    wanted = [describe_expected(e) for e in expected]
    prefixes = tuple(f"{topic_id}:" for topic_id in topic_ids)
    seen: list[str] = []
    found: list[Rec] = []

    def compacted() -> bool:
        nonlocal seen, found
        roller.check()
        found = [
            r
            for r in read_records(servers, topic)
            if r.key_text is not None and r.key_text.startswith(prefixes)
        ]
        seen = [describe_record(r) for r in found]
        return seen == wanted

    wait_until(
        compacted,
        f"Kafka's log cleaner leaving {len(wanted)} record(s) of the scenario in {topic}",
        COMPACTION_DEADLINE_S,
        interval=1.0,
        details=lambda: (
            "expected:\n  "
            + "\n  ".join(wanted)
            + "\nfound:\n  "
            + "\n  ".join(seen)
            + f"\n({roller.written} roll events written)"
        ),
    )
    return found


# Readers to compare -----------------------------------------------------------------------------
def legacy_replay(
    servers: str,
    audit_topic: str,
    tips: Iterable[TopicIdPartition],
    opened: list[RemoteLogMetadataManager],
    *,
    node_id: int,
    gone: Iterable[TopicIdPartition] = (),
) -> RemoteLogMetadataManager:
    """tierlog's ``topic`` RLMM replaying the audit topic (the full legacy history), with
    ``tips`` ready (``gone``: replayed up to their finished deletion)."""
    legacy = open_node(
        legacy_configs(servers, audit_topic, node_id=node_id),
        opened,
        TopicBasedRemoteLogMetadataManager,
    )
    tips, gone = set(tips), set(gone)
    assign(legacy, tips | gone, follower=True, wait=False)
    wait_until(lambda: all(legacy.is_ready(tip) for tip in tips), "the legacy replay's readiness")
    for tip in gone:
        wait_gone(legacy, tip)
    return legacy
