"""``tierlog metadata migrate``: turn a legacy ``__remote_log_metadata`` into the keyed projection.

A cluster that ran Kafka's TopicBasedRemoteLogMetadataManager (or tierlog's ``topic`` RLMM) has
a metadata topic of null-key records: the whole history, replayed by every reader. The
compacted RLMM reads the same topic, keyed. Migrating writes, next to the history, the keyed
values that describe every live segment and partition-delete marker, checks that a reader of
the keyed records alone (what is left once Kafka's log cleaner compacted the topic) sees what a
reader of the history sees, and only then sets the topic's compaction configs (level 1: from
then on tombstones are written and the cleaner removes the history).

The passes, each over every partition of the topic up to the end offsets captured when the pass
starts, with ``tierlog.metadata.MetadataTopicReader`` (what ``tierlog metadata dump`` reads with:
client configuration, timeouts, stalls), reading committed records only:

1. **Plan.** Each metadata partition's records go into a ``ProjectionApplier`` (null-key records
   applied as the topic RLMM applies them, keyed ones as the compacted RLMM does) and, for the
   reference, into a legacy ``StoreApplier`` (values only, keys ignored: what a Kafka broker's
   RLMM sees). For every live segment whose latest keyed value does not describe its current
   state, ``ProjectionApplier.plan_write`` gives the keyed value (an add for
   COPY_SEGMENT_STARTED, an update otherwise; the broker leader epoch is the fallback, the
   legacy records carry none); for every partition with a delete marker, the marker. Failed
   uploads (COPY_SEGMENT_STARTED) are planned after the other segments, so that one sharing a
   key with a finished retry moves to a free key instead of being superseded. A deleted copy
   that displaced copies still finished is planned as a displacement marker (``displaced.py``,
   ``ProjectionApplier.plan_history_marker``) where it finished. Each planned
   value is applied at once (the next plan sees it), and the partition's plan is checked as
   step 3 checks the topic: a plan that would not verify is never written.
2. **Write.** Per metadata partition, one transaction: the planned values, and with the audit
   enabled a copy of every null-key record of the partition into the same partition of the
   audit topic (null key, the original bytes, a header ``tierlog.migrated.offset=<offset>``),
   except the offsets an earlier run copied (read from those headers). The planned values of a
   partition an earlier run completed are already described, so a run interrupted anywhere and
   run again writes exactly what is missing. The transactional id is the topic's
   (``tierlog-metadata-migrate-<topic>``): a second migration of the same topic fences the
   first.
3. **Verify.** The topic read again: per user partition, the reference (the legacy way, or on
   a topic already at level 1, the compacted RLMM's way: a legacy replay of a compacted topic
   means nothing) against the state a reader gets from the keyed records alone after
   compaction (latest value per key, null keys dropped, tombstones removed), compared with
   ``state.logical_state``, and again once the cleanup manager's first pass tombstoned the
   orphan keys. The differences allowed: a COPY_SEGMENT_STARTED upload superseded under its key
   (seed scenario 3), and the highest offset of an epoch with no finished segment left
   (``diff(forgets=True)``). Any other (a legacy writer still writing, for instance) fails the
   migration, naming the partitions and the differences; nothing is switched.
4. **Switch.** ``topics.enable_compaction`` sets level 1 (the compaction defaults under
   ``--topic-config`` overrides), unless ``--dry-run``.

**Position records** (``position.py``: null-key records of the reserved topic id
``POSITION_TOPIC_ID`` that the compacted RLMM writes at level 0 after its transactions, so that
a Kafka broker's readiness never waits on a commit marker) are no history: every pass leaves
them out (not replayed, not planned, not compared, not copied to the audit topic) and counts
them apart.

``--dry-run`` reads and plans (pass 1, its check included) and writes nothing. Before anything,
the migration is refused while a Kafka broker's TopicBasedRemoteLogMetadataManager reads the
topic (``topics.kafka_readers``): it would stop at the first tombstone. tierlog nodes running
the ``topic`` RLMM cannot be seen from the cluster; stopping them (or switching them to
``compacted``) is the operator's step, and a ``topic`` RLMM refuses a compacted topic anyway.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TextIO

from tierlog_rlmm_topic.applier import DecodedEvent, StoreApplier
from tierlog_rlmm_topic.client_factory import close_client

from tierlog.metadata import RemotePartitionMetadataStore, metadata_partition, serde
from tierlog.metadata.topic_reader import (
    ClientLog,
    MetadataTopicReader,
    TopicRecord,
    kafka_error_text,
    load_client,
    load_client_config,
)
from tierlog.progress import Progress
from tierlog.spi import (
    InvalidArgumentError,
    MetadataRecordError,
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    TierlogError,
    TopicIdPartition,
    Uuid,
)
from tierlog_rlmm_compacted.config import (
    AUDIT_ENABLE,
    AUDIT_TOPIC_NAME,
    DEFAULT_AUDIT_TOPIC_NAME,
    TOPIC_CONFIG_PREFIX,
    CompactedRlmmConfig,
)
from tierlog_rlmm_compacted.displaced import DisplacementTracker, HistoryMarker
from tierlog_rlmm_compacted.keys import MetadataKey
from tierlog_rlmm_compacted.position import is_position
from tierlog_rlmm_compacted.projection import PlannedWrite, ProjectionApplier
from tierlog_rlmm_compacted.state import PartitionState, diff, logical_state

__all__ = [
    "AUDIT_OFFSET_HEADER",
    "MigrationOptions",
    "MigrationRefusedError",
    "MigrationReport",
    "migrate",
    "parse_topic_configs",
    "run_migrate",
]

_LOG = logging.getLogger(__name__)

AUDIT_OFFSET_HEADER: Final = "tierlog.migrated.offset"
"""Header of an audit copy: the offset of the legacy record it copies, in decimal."""
DEFAULT_TOPIC: Final = "__remote_log_metadata"
PURPOSE: Final = "tierlog metadata migrate"
"""What needs confluent-kafka, in the message when it is missing."""
TRANSACTIONAL_ID_PREFIX: Final = "tierlog-metadata-migrate-"
_GROUP: Final = "tierlog-metadata-migrate"
_TXN_ATTEMPTS: Final = 3

S = RemoteLogSegmentState


class MigrationRefusedError(TierlogError):
    """The topic cannot be migrated now (a Kafka broker's RLMM reads it)."""


@dataclass(frozen=True, slots=True)
class MigrationOptions:
    """What ``tierlog metadata migrate`` was asked (see the command's help)."""

    bootstrap_servers: str
    topic: str = DEFAULT_TOPIC
    audit_topic: str | None = DEFAULT_AUDIT_TOPIC_NAME
    """None: no audit copies (``--no-audit``)."""
    topic_configs: Mapping[str, str] = field(default_factory=dict)
    """``--topic-config`` overrides of the level-1 configs."""
    command_config: str | None = None
    """Kafka client properties file (security), as for ``tierlog metadata dump``."""
    timeout_s: float = 30.0
    dry_run: bool = False


@dataclass
class MigrationReport:
    """What a run read, wrote and found."""

    topic: str
    partitions: int = 0
    level_before: int = 0
    records_read: int = 0
    legacy_records: int = 0
    keyed_records: int = 0
    tombstones: int = 0
    positions: int = 0
    """Position records read (``position.py``), left out of every pass."""
    user_partitions: int = 0
    deleted_partitions: int = 0
    live_segments: int = 0
    keyed_written: int = 0
    """Keyed values written (planned, with ``dry_run``), delete markers included."""
    markers_written: int = 0
    history_markers: int = 0
    """Displacement markers among the keyed values (``displaced.py``)."""
    audit_copied: int = 0
    audit_topic: str | None = None
    transactions: int = 0
    superseded: int = 0
    """COPY_SEGMENT_STARTED uploads superseded under their key (the allowed difference)."""
    failures: dict[TopicIdPartition, list[str]] = field(default_factory=dict)
    checked: str = "plan"
    """What the last check compared: ``plan`` (pass 1) or ``topic`` (pass 3)."""
    configs_set: dict[str, str] | None = None
    dry_run: bool = False

    @property
    def verified(self) -> bool:
        return not self.failures

    @property
    def already_migrated(self) -> bool:
        """The topic was at level 1 and nothing was missing."""
        return (
            self.level_before == 1
            and self.verified
            and self.keyed_written == 0
            and self.audit_copied == 0
        )


# Reading ----------------------------------------------------------------------------------------
def _ends(reader: MetadataTopicReader, partitions: Iterable[int]) -> dict[int, int]:
    """The end offset of each of ``partitions``, now (0: nothing to read)."""
    marks = reader.watermarks(partitions)
    return {p: high if high > low else 0 for p, (low, high) in marks.items()}


# One metadata partition -------------------------------------------------------------------------
class _Scan:
    """One metadata partition read from its beginning: the reference, the projection and the
    latest keyed value of each key."""

    def __init__(self, topic: str, partition: int, count: int, *, legacy: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.count = count
        self.projection = ProjectionApplier(RemotePartitionMetadataStore())
        self.legacy = StoreApplier(RemotePartitionMetadataStore()) if legacy else None
        self.latest: dict[bytes, bytes | None] = {}
        self.tips: dict[TopicIdPartition, None] = {}
        self.changed: dict[RemoteLogSegmentId, int] = {}
        """Offset of the last record that changed each segment in the reference."""
        self.keyed_at: dict[RemoteLogSegmentId, int] = {}
        """Offset of the latest keyed value of each segment."""
        self.deletes: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}
        self.displaced = DisplacementTracker()
        """Deleted copies that displaced others (``displaced.py``): written as markers when
        copies they displaced are still finished."""
        self.records = self.legacy_records = self.keyed = self.tombstones = self.positions = 0
        self.misplaced = self.markers = self.history_markers = 0

    def add(self, record: TopicRecord) -> None:
        offset, key, value = record.offset, record.key, record.value
        self.records += 1
        where = f"{self.topic} partition {self.partition}, offset {offset}"
        if key is None and value is None:
            raise MetadataRecordError(f"{where}: a record with neither key nor value")
        try:
            decoded = self.projection.decode(key, value)
            plain = None if value is None else serde.deserialize(value)
        except MetadataRecordError as exc:
            raise MetadataRecordError(f"{where}: {exc}") from None
        tip = decoded.topic_id_partition
        if key is None and is_position(tip):
            self.positions += 1  # no history: the compacted RLMM's position record
            return
        if key is None:
            self.legacy_records += 1
        else:
            self.latest.pop(key, None)
            self.latest[key] = value
            if value is None:
                self.tombstones += 1
            else:
                self.keyed += 1
        if tip is None:
            return  # a snapshot record (apiKey 3): no user partition
        if value is not None and tip not in self.tips:
            if metadata_partition(tip, self.count) != self.partition:
                # Readers of ``tip`` never read this partition: nor does the migration.
                self.misplaced += 1
                return
            self.load(tip)
        # A keyed value restating what the reference holds (a migration's, or a compacted
        # RLMM's retry) is not history: the legacy reference skips it, as the compacted reader
        # does (a Kafka reader would apply a COPY_SEGMENT_FINISHED again, and route the
        # segment's offsets to it again).
        restated = (
            key is not None
            and isinstance(plain, RemoteLogMetadata)
            and _restates(self.reference_store, tip, plain)
        )
        # An update the legacy reference drops (an invalid transition, an unknown segment)
        # changes nothing: it neither orders the segment's keyed value nor counts for markers.
        # (On a topic already at level 1 the reference is the compacted reader's, and a keyed
        # value there may carry a segment it no longer knows: it applies it.)
        dropped = False
        if not restated and isinstance(plain, RemoteLogSegmentMetadataUpdate):
            segment_id = plain.remote_log_segment_id
            current = self.reference_store.peek_segment(tip, segment_id)
            if self.legacy is not None:
                dropped = current is None or not S.is_valid_transition(current.state, plain.state)
            self.displaced.observe(
                current, plain, offset, self.projection.highest_offsets_at_finish(tip, segment_id)
            )
        self.projection.apply(decoded)
        if isinstance(plain, RemoteLogMetadata):
            if self.legacy is not None and not restated:
                self.legacy.apply(DecodedEvent(tip, plain))
            if isinstance(plain, RemotePartitionDeleteMetadata):
                self.deletes[tip] = plain
            else:
                segment_id = plain.remote_log_segment_id
                if not restated and not dropped:
                    self.changed[segment_id] = offset
                if key is not None:
                    self.keyed_at[segment_id] = offset

    def load(self, tip: TopicIdPartition) -> None:
        self.tips[tip] = None
        self.projection.load(tip)
        if self.legacy is not None:
            self.legacy.load(tip)

    def finish(self) -> None:
        for tip in self.tips:
            self.projection.mark_initialized(tip)
            if self.legacy is not None:
                self.legacy.mark_initialized(tip)

    @property
    def reference_store(self) -> RemotePartitionMetadataStore:
        """The legacy replay (or on a compacted topic, the compacted RLMM's)."""
        return self.legacy.store if self.legacy is not None else self.projection.store

    def reference(self) -> dict[TopicIdPartition, PartitionState]:
        return {tip: logical_state(self.reference_store, tip) for tip in self.tips}

    # Planning ----------------------------------------------------------------------------------
    def plan(self) -> list[PlannedWrite]:
        """The keyed values missing for the partition's current state, applied as planned.

        A reader of the compacted topic applies the latest value of each segment in the
        topic's order; when two copies of the same offsets finished, the reads go to the one it
        applies last, as a reader of the history routes them to the one that finished last. So
        the segments are written in the order of their last change in the history (failed
        uploads last: they serve no read, and a retry's key then does not supersede them), and
        from the first segment with no keyed value describing it (or with one older than the
        previous segment's), every later segment is written again, described or not.

        A deleted copy that displaced copies still finished (``displaced.py``) is written too,
        as its history in one keyed value, in the order of its COPY_SEGMENT_FINISHED among the
        segments' changes: a reader replays it after the copies it displaced, as they finished
        before it."""
        writes: list[PlannedWrite] = []
        for tip in self.tips:
            entries = self.projection.keys(tip).values()
            described = {(e.segment_id, e.state) for e in entries}
            if not self.projection.is_deleted(tip):
                items: list[RemoteLogSegmentMetadata | HistoryMarker] = [
                    *self.projection.store.list_remote_log_segments(tip),
                    *(self.displaced.needed(tip, self.legacy.store) if self.legacy else ()),
                ]
                items.sort(key=self._order)
                previous = -1
                for index, item in enumerate(items):
                    segment_id, state = _described_as(item)
                    at = self.keyed_at.get(segment_id, -1)
                    if (segment_id, state) not in described or at < previous:
                        writes += [self._write_item(i) for i in items[index:]]
                        break
                    previous = at
            delete = self.deletes.get(tip)
            if delete is not None and (None, delete.state) not in described:
                writes.append(self._write(self.projection.plan_write(delete, tombstones=False)))
                self.markers += 1
        return writes

    def _order(self, item: RemoteLogSegmentMetadata | HistoryMarker) -> tuple[object, ...]:
        """Failed uploads last; then by the offset of the last change in the history, but for
        a copy that finished before its deletion started (a marker, or a segment in
        DELETE_SEGMENT_STARTED): by its COPY_SEGMENT_FINISHED, which its value replays and
        which routes reads as of where it was (its deletion only unmaps it)."""
        if isinstance(item, HistoryMarker):
            segment, changed = item.segment, item.finished_at
        else:
            segment, changed = item, self.changed.get(item.remote_log_segment_id, -1)
            if item.state is S.DELETE_SEGMENT_STARTED:
                finished = self.displaced.finished_at(item.remote_log_segment_id)
                if finished is not None:
                    changed = finished
        return (
            segment.state is S.COPY_SEGMENT_STARTED and not isinstance(item, HistoryMarker),
            changed,
            segment.start_offset,
            segment.end_offset,
            str(segment.remote_log_segment_id.id),
        )

    def _write_item(self, item: RemoteLogSegmentMetadata | HistoryMarker) -> PlannedWrite:
        if isinstance(item, HistoryMarker):
            self.history_markers += 1
            return self._write(
                self.projection.plan_history_marker(item.segment, item.deletion, item.highest)
            )
        return self._write(self.projection.plan_write(_event_of(item), tombstones=False))

    def _write(self, planned: PlannedWrite) -> PlannedWrite:
        key = planned.key.encode()
        self.projection.apply(self.projection.decode(key, planned.value))
        self.latest.pop(key, None)
        self.latest[key] = planned.value
        return planned

    # Checking ----------------------------------------------------------------------------------
    def compacted(
        self, *, tombstoned: Collection[bytes] = ()
    ) -> tuple[ProjectionApplier, dict[TopicIdPartition, PartitionState]]:
        """A fresh reader of the keyed records alone, as compaction leaves them (without the
        ``tombstoned`` keys: once the cleanup manager tombstoned them)."""
        reader = ProjectionApplier(RemotePartitionMetadataStore())
        for tip in self.tips:
            reader.load(tip)
        for key, value in self.latest.items():
            if value is not None and key not in tombstoned:
                reader.apply(reader.decode(key, value))
        for tip in self.tips:
            reader.mark_initialized(tip)
        return reader, {tip: logical_state(reader.store, tip) for tip in self.tips}

    def check(self, report: MigrationReport) -> None:
        """Compare the reference with the compacted reader, and with the reader once the
        cleanup manager's first pass at level 1 tombstoned the orphan keys (a displacement
        marker it would drop must not be needed); differences into ``report``."""
        reference = self.reference()
        reader, compacted = self.compacted()
        orphans = {k.encode() for tip in self.tips for k in reader.orphan_keys(tip)}
        cleaned = self.compacted(tombstoned=orphans)[1] if orphans else compacted
        for tip, expected in reference.items():
            got = compacted[tip]
            superseded = _superseded(expected, got, reader.keys(tip))
            report.superseded += len(superseded)
            want = expected.without(superseded)
            differences = diff(want, got, forgets=self.legacy is not None) or [
                f"once the cleanup manager tombstoned the orphan keys: {line}"
                for line in diff(want, cleaned[tip], forgets=True)
            ]
            if differences:
                report.failures[tip] = differences + self._orphaned_copies(tip, expected)

    def _orphaned_copies(self, tip: TopicIdPartition, expected: PartitionState) -> list[str]:
        """Why the keyed records cannot rebuild a partition, when that is the reason: finished
        copies that a copy since deleted displaced (a duplicate upload after a leadership
        change, deleted first). Kafka's cache serves their offsets from no segment; keyed
        records of the live segments alone would route them to the copy again."""
        store = self.reference_store
        lines = []
        for segment in expected.segments:
            if segment.state is not S.COPY_SEGMENT_FINISHED:
                continue
            epochs = sorted(segment.segment_leader_epochs.items())
            for epoch, start in epochs:
                if store.remote_log_segment_metadata(tip, epoch, start) is None:
                    lines.append(
                        f"segment {segment.remote_log_segment_id.id} (offsets "
                        f"{segment.start_offset}-{segment.end_offset}) is a finished copy that a "
                        f"copy since deleted displaced: the history serves offset {start} of "
                        f"leader epoch {epoch} from no segment, which the keyed records of the "
                        "live segments cannot rebuild; run the migration again once it is "
                        "deleted too"
                    )
                    break
        return lines


def _is_position_value(value: bytes) -> bool:
    """Whether a null-key record's value is a position record (never copied to the audit)."""
    event = serde.deserialize(value)
    return isinstance(event, RemoteLogMetadata) and is_position(event)


def _restates(
    store: RemotePartitionMetadataStore, tip: TopicIdPartition, event: RemoteLogMetadata
) -> bool:
    """Whether ``event`` says exactly what ``store`` holds of its segment."""
    if isinstance(event, RemoteLogSegmentMetadata):
        return store.peek_segment(tip, event.remote_log_segment_id) == event
    if isinstance(event, RemoteLogSegmentMetadataUpdate):
        current = store.peek_segment(tip, event.remote_log_segment_id)
        return (
            current is not None
            and current.state is event.state
            and current.broker_id == event.broker_id
            and current.event_timestamp_ms == event.event_timestamp_ms
            and current.custom_metadata == event.custom_metadata
        )
    return False


def _described_as(
    item: RemoteLogSegmentMetadata | HistoryMarker,
) -> tuple[RemoteLogSegmentId, RemoteLogSegmentState]:
    """The segment and state a keyed value already written for ``item`` says."""
    if isinstance(item, HistoryMarker):
        return item.segment.remote_log_segment_id, S.DELETE_SEGMENT_FINISHED
    return item.remote_log_segment_id, item.state


def _event_of(segment: RemoteLogSegmentMetadata) -> RemoteLogMetadata:
    """The event that publishes ``segment``'s current state."""
    if segment.state is S.COPY_SEGMENT_STARTED:
        return segment
    return RemoteLogSegmentMetadataUpdate(
        segment.remote_log_segment_id,
        segment.event_timestamp_ms,
        segment.custom_metadata,
        segment.state,
        segment.broker_id,
    )


def _superseded(
    expected: PartitionState, got: PartitionState, keys: Mapping[MetadataKey, Any]
) -> set[Uuid]:
    """The uploads of ``expected`` that ``got`` lacks because a retry took their key: still
    COPY_SEGMENT_STARTED, and a key of their end offset describes another segment."""
    present = got.segment_ids
    out: set[Uuid] = set()
    for segment in expected.segments:
        segment_id = segment.remote_log_segment_id
        if segment.state is not S.COPY_SEGMENT_STARTED or segment_id.id in present:
            continue
        if any(
            key.end_offset == segment.end_offset
            and entry.segment_id is not None
            and entry.segment_id != segment_id
            for key, entry in keys.items()
        ):
            out.add(segment_id.id)
    return out


# Writing ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Out:
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


class _Transactions:
    """The migration's transactional producer: one transaction per call of ``write``."""

    def __init__(self, kafka: Any, config: dict[str, Any], timeout_s: float) -> None:
        self._kafka = kafka
        self._timeout = timeout_s
        self._id = config["transactional.id"]
        try:
            self._producer = kafka.Producer(config)
        except (kafka.KafkaException, ValueError) as exc:
            raise TierlogError(f"invalid client configuration: {kafka_error_text(exc)}") from None
        try:
            self._producer.init_transactions(timeout_s)
        except kafka.KafkaException as exc:
            raise TierlogError(
                f"cannot start the migration's transactional producer ({self._id}) within "
                f"{timeout_s:g} s: {kafka_error_text(exc)}"
            ) from None

    def write(self, records: Sequence[_Out]) -> None:
        """Produce ``records`` in one transaction and commit it; retried when the broker asks
        to abort (nothing of an aborted attempt is visible to a read_committed reader)."""
        kafka = self._kafka
        for attempt in range(1, _TXN_ATTEMPTS + 1):
            try:
                self._producer.begin_transaction()
                for record in records:
                    self._produce(record)
                self._commit()
                return
            except kafka.KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if error is None or not error.txn_requires_abort() or attempt == _TXN_ATTEMPTS:
                    raise TierlogError(self._failure(exc)) from None
                _LOG.warning(
                    "transaction %s aborted (%s): retrying", self._id, kafka_error_text(exc)
                )
                self._producer.abort_transaction(self._timeout)

    def _produce(self, record: _Out) -> None:
        while True:
            try:
                self._producer.produce(
                    record.topic,
                    value=record.value,
                    key=record.key,
                    partition=record.partition,
                    headers=list(record.headers) or None,
                )
                return
            except BufferError:  # librdkafka's queue is full: let it drain
                self._producer.poll(0.1)

    def _commit(self) -> None:
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                self._producer.commit_transaction(self._timeout)
                return
            except self._kafka.KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if error is None or not error.retriable() or time.monotonic() > deadline:
                    raise
                _LOG.info(
                    "committing transaction %s: %s; retrying", self._id, kafka_error_text(exc)
                )

    def _failure(self, exc: BaseException) -> str:
        error = exc.args[0] if exc.args else None
        text = kafka_error_text(exc)
        if error is not None and error.fatal():
            return (
                f"the migration's transactional producer ({self._id}) failed for good: {text}; "
                "is another `tierlog metadata migrate` of this topic running? Run it again once "
                "that one is done: it writes only what is missing"
            )
        return f"the migration's transaction ({self._id}) failed: {text}; run it again"

    def close(self) -> None:
        self._producer.flush(self._timeout)
        close_client(self._producer)


# The run ----------------------------------------------------------------------------------------
def parse_topic_configs(items: Sequence[str]) -> dict[str, str]:
    """``--topic-config k=v`` items as a mapping; ``InvalidArgumentError`` for a malformed one."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise InvalidArgumentError(
                f"--topic-config {item!r}: expected NAME=VALUE, e.g. min.cleanable.dirty.ratio=0.2"
            )
        out[name.strip()] = value.strip()
    return out


class _Migration:
    """One run: clients, passes, report."""

    def __init__(
        self,
        options: MigrationOptions,
        *,
        err: TextIO,
        after_transaction: Callable[[int], None] | None,
    ) -> None:
        self.options = options
        self.err = err
        self.after_transaction = after_transaction
        self.kafka = load_client(PURPOSE)
        self.report = MigrationReport(options.topic, dry_run=options.dry_run)
        self.ends: dict[int, int] = {}
        """End offsets of the topic's partitions when pass 1 started."""
        self.legacy_partitions: set[int] = set()
        """Partitions where pass 1 read null-key records (the ones to copy to the audit)."""
        self.client_log = ClientLog()
        self.security = load_client_config(options.command_config)
        self.client: dict[str, Any] = {
            **self.security,
            "bootstrap.servers": options.bootstrap_servers,
        }
        from confluent_kafka.admin import AdminClient

        # librdkafka's log lines go to this module's logger (``tierlog -vv`` shows them).
        self.client["logger"] = self.client_log
        self.admin = AdminClient(dict(self.client))

    def close(self) -> None:
        close_client(self.admin)

    def _reader(self, topic: str) -> MetadataTopicReader:
        """A reader of ``topic``'s committed records (an aborted write is no write)."""
        options = self.options
        return MetadataTopicReader(
            options.bootstrap_servers,
            topic,
            security=self.security,
            security_origin=options.command_config,
            timeout_s=options.timeout_s,
            committed_only=True,
            client_id=_GROUP,
            purpose=PURPOSE,
        )

    def run(self) -> MigrationReport:
        from tierlog_rlmm_compacted.topics import kafka_readers, read_level

        options, report = self.options, self.report
        timeout = options.timeout_s
        with self._admin_errors("ask the brokers whether Kafka's RLMM reads the topic"):
            readers = kafka_readers(self.admin, options.topic, timeout)
        if readers:
            raise MigrationRefusedError(_refusal(options.topic, readers))
        with self._reader(options.topic) as reader, self._admin_errors(f"describe {options.topic}"):
            count = reader.partition_count()
            report.partitions = count
            report.level_before = read_level(self.admin, options.topic, timeout)
            config = self._config(count)
            plans = self._plan(reader, count)
            if report.failures:
                return report
            self._write(reader, count, plans, config)
            if not options.dry_run:
                self._verify(reader, count)
                if report.verified:
                    self._switch(config)
        return report

    @contextlib.contextmanager
    def _admin_errors(self, what: str) -> Iterator[None]:
        """A ``KafkaException`` of an admin request as a ``TierlogError`` saying ``what``."""
        try:
            yield
        except self.kafka.KafkaException as exc:
            raise TierlogError(
                f"cannot {what} at {self.options.bootstrap_servers}: {kafka_error_text(exc)}"
            ) from None

    # Configuration -----------------------------------------------------------------------------
    def _config(self, count: int) -> CompactedRlmmConfig:
        """The compacted RLMM's configuration of this topic, for its topic configs."""
        from tierlog_rlmm_topic.topic import describe_topic_configs

        options = self.options
        metadata = self.admin.list_topics(topic=options.topic, timeout=options.timeout_s)
        partitions = metadata.topics[options.topic].partitions
        replicas = max((len(p.replicas) for p in partitions.values()), default=1)
        described = describe_topic_configs(self.admin, options.topic, options.timeout_s)
        configs = {
            "remote.log.metadata.common.client.bootstrap.servers": options.bootstrap_servers,
            "remote.log.metadata.topic.name": options.topic,
            "remote.log.metadata.topic.num.partitions": str(count),
            "remote.log.metadata.topic.replication.factor": str(replicas),
            "remote.log.metadata.topic.min.isr": described.get("min.insync.replicas", "1"),
            "remote.log.metadata.initialization.retry.max.timeout.ms": str(
                int(options.timeout_s * 1000)
            ),
            AUDIT_ENABLE: "false" if options.audit_topic is None else "true",
            "node.id": "0",
        }
        if options.audit_topic is not None:
            configs[AUDIT_TOPIC_NAME] = options.audit_topic
        for name, value in options.topic_configs.items():
            configs[TOPIC_CONFIG_PREFIX + name] = value
        return CompactedRlmmConfig.from_configs(configs)

    # Pass 1 ------------------------------------------------------------------------------------
    def _progress(self, what: str, total: int) -> Progress:
        return Progress(
            f"{what} {self.options.topic}", max(total, 1), unit="records", file=self.err
        )

    def _plan(self, reader: MetadataTopicReader, count: int) -> dict[int, list[PlannedWrite]]:
        report = self.report
        ends = _ends(reader, range(count))
        legacy = report.level_before == 0
        plans: dict[int, list[PlannedWrite]] = {}
        with self._progress("migrate: reading", sum(ends.values())) as progress:
            for partition in range(count):
                scan = _Scan(self.options.topic, partition, count, legacy=legacy)
                for record in reader.read(partition, ends[partition], progress):
                    scan.add(record)
                scan.finish()
                plans[partition] = scan.plan()
                scan.check(report)
                self._count(scan, plans[partition])
                if scan.legacy_records:
                    self.legacy_partitions.add(partition)
        self.ends = ends
        return plans

    def _count(self, scan: _Scan, plan: Sequence[PlannedWrite]) -> None:
        report = self.report
        report.records_read += scan.records
        report.legacy_records += scan.legacy_records
        report.keyed_records += scan.keyed
        report.tombstones += scan.tombstones
        report.positions += scan.positions
        report.user_partitions += len(scan.tips)
        for tip in scan.tips:
            if scan.projection.is_deleted(tip):
                report.deleted_partitions += 1
            else:
                report.live_segments += sum(
                    1 for _ in scan.projection.store.list_remote_log_segments(tip)
                )
        report.keyed_written += len(plan)
        report.markers_written += scan.markers
        report.history_markers += scan.history_markers
        if scan.misplaced:
            _LOG.warning(
                "%s partition %d holds %d record(s) of user partitions that belong to other "
                "partitions (Kafka's partitioner over %d partitions): no reader reads them there; "
                "they were left out",
                scan.topic,
                scan.partition,
                scan.misplaced,
                scan.count,
            )

    # Pass 2 ------------------------------------------------------------------------------------
    def _write(
        self,
        reader: MetadataTopicReader,
        count: int,
        plans: Mapping[int, Sequence[PlannedWrite]],
        config: CompactedRlmmConfig,
    ) -> None:
        """Pass 2 (with ``dry_run``: what it would write, counted)."""
        options, report = self.options, self.report
        audit = options.audit_topic
        with contextlib.ExitStack() as stack:
            audit_reader = progress = None
            if audit is not None:
                report.audit_topic = audit
                existed = self._exists(audit)
                if not options.dry_run:
                    self._ensure_audit(config)
                if existed:  # else nothing was copied yet
                    audit_reader = stack.enter_context(self._reader(audit))
                total = sum(self.ends[p] for p in self.legacy_partitions)
                progress = stack.enter_context(self._progress("migrate: copying", total))
            producer: _Transactions | None = None
            for partition in range(count):
                records = [
                    _Out(options.topic, partition, w.key.encode(), w.value)
                    for w in plans[partition]
                ]
                if audit is not None:
                    records += self._audit_copies(reader, audit_reader, audit, partition, progress)
                if not records:
                    continue
                report.transactions += 1
                if options.dry_run:
                    continue
                if producer is None:
                    producer = self._producer()
                    stack.callback(producer.close)
                producer.write(records)
                if self.after_transaction is not None:
                    self.after_transaction(partition)

    def _producer(self) -> _Transactions:
        config: dict[str, Any] = dict(self.client)
        config.update(
            {
                "transactional.id": TRANSACTIONAL_ID_PREFIX + self.options.topic,
                "enable.idempotence": True,
                "acks": "all",
                "client.id": _GROUP,
                "linger.ms": 5,
            }
        )
        return _Transactions(self.kafka, config, self.options.timeout_s)

    def _ensure_audit(self, config: CompactedRlmmConfig) -> None:
        """Create the audit topic if absent, or check it (partition count, not compacted)."""
        from tierlog_rlmm_compacted.topics import ensure_topics

        ensure_topics(self.admin, config)

    def _exists(self, topic: str) -> bool:
        metadata = self.admin.list_topics(topic=topic, timeout=self.options.timeout_s)
        described = metadata.topics.get(topic)
        return described is not None and described.error is None

    def _audit_copies(
        self,
        reader: MetadataTopicReader,
        audit_reader: MetadataTopicReader | None,
        audit: str,
        partition: int,
        progress: Progress | None,
    ) -> list[_Out]:
        """The audit copies of the partition's null-key records not yet copied (all of them
        when there is no audit topic yet)."""
        if partition not in self.legacy_partitions:
            return []
        copied: set[int] = set()
        if audit_reader is not None:
            audit_end = _ends(audit_reader, [partition])[partition]
            for record in audit_reader.read(partition, audit_end):
                for name, data in record.headers:
                    if name == AUDIT_OFFSET_HEADER and data is not None:
                        with contextlib.suppress(ValueError):
                            copied.add(int(data.decode("ascii")))
        copies = [
            _Out(
                audit,
                partition,
                None,
                record.value,
                ((AUDIT_OFFSET_HEADER, str(record.offset).encode("ascii")),),
            )
            for record in reader.read(partition, self.ends[partition], progress)
            if record.key is None
            and record.value is not None
            and record.offset not in copied
            and not _is_position_value(record.value)
        ]
        self.report.audit_copied += len(copies)
        return copies

    # Pass 3 ------------------------------------------------------------------------------------
    def _verify(self, reader: MetadataTopicReader, count: int) -> None:
        report = self.report
        ends = _ends(reader, range(count))
        legacy = report.level_before == 0
        with self._progress("migrate: verifying", sum(ends.values())) as progress:
            report.superseded = 0
            report.checked = "topic"
            for partition in range(count):
                scan = _Scan(self.options.topic, partition, count, legacy=legacy)
                for record in reader.read(partition, ends[partition], progress):
                    scan.add(record)
                scan.finish()
                scan.check(report)

    # Step 4 ------------------------------------------------------------------------------------
    def _switch(self, config: CompactedRlmmConfig) -> None:
        """Level 1, unless the topic is at level 1 already (the switch is forward-only: its
        settings are the operator's from then on)."""
        from tierlog_rlmm_compacted.topics import enable_compaction

        if self.report.level_before == 1:
            return
        enable_compaction(self.admin, config, timeout=self.options.timeout_s)
        self.report.configs_set = config.compaction_settings()


def _refusal(topic: str, brokers: Sequence[int]) -> str:
    ids = ", ".join(str(b) for b in sorted(brokers))
    return (
        f"cannot migrate {topic}: broker(s) {ids} run Kafka's "
        "TopicBasedRemoteLogMetadataManager on it (remote.log.storage.system.enable=true), which "
        "stops at the first tombstone a compacted topic holds. Move those brokers off Kafka's "
        "RLMM first (remote.log.metadata.manager.class.name, or tiered storage off, then a "
        "restart), and stop or switch to the `compacted` RLMM every tierlog node still running "
        "the `topic` RLMM (the cluster cannot show those); then run the migration again"
    )


def migrate(
    options: MigrationOptions,
    *,
    err: TextIO | None = None,
    after_transaction: Callable[[int], None] | None = None,
) -> MigrationReport:
    """Migrate ``options.topic`` (see the module docstring) and say what happened.

    ``after_transaction(partition)`` is called after each committed transaction (tests
    interrupt a run with it). Raises ``MigrationRefusedError`` while a Kafka RLMM reads the
    topic, ``TierlogError`` for a cluster that does not answer or a failed transaction; a
    failed verification is in the report (``verified``), not raised."""
    migration = _Migration(
        options, err=err if err is not None else sys.stderr, after_transaction=after_transaction
    )
    try:
        return migration.run()
    finally:
        migration.close()


# The command ------------------------------------------------------------------------------------
def print_report(report: MigrationReport, out: TextIO, err: TextIO) -> int:
    """The summary on ``out`` (failures on ``err``); the exit status."""
    verb = "would write" if report.dry_run else "written"
    lines = [
        f"topic: {report.topic} ({report.partitions} partitions, compaction level "
        f"{report.level_before} before)",
        f"records read: {report.records_read} ({report.legacy_records} legacy, "
        f"{report.keyed_records} keyed, {report.tombstones} tombstones"
        + (f", {report.positions} position records left out" if report.positions else "")
        + ")",
        f"user partitions: {report.user_partitions} ({report.deleted_partitions} deleted)",
        f"live segments: {report.live_segments}",
        f"keyed values {verb}: {report.keyed_written} ({report.markers_written} partition "
        "delete markers, "
        + (f"{report.history_markers} displacement markers, " if report.history_markers else "")
        + f"{report.transactions} transactions)",
    ]
    if report.audit_topic is None and not report.dry_run:
        lines.append("audit records copied: none (no audit)")
    else:
        lines.append(
            f"audit records {'to copy' if report.dry_run else 'copied'}: {report.audit_copied}"
            + (f" (to {report.audit_topic})" if report.audit_topic else "")
        )
    if report.verified:
        note = f", {report.superseded} superseded upload(s) left out" if report.superseded else ""
        lines.append(
            f"verification: passed (the {report.checked}, {report.user_partitions} "
            f"partitions{note})"
        )
    else:
        lines.append(f"verification: FAILED for {len(report.failures)} partition(s)")
    if report.configs_set is not None:
        settings = ", ".join(f"{k}={v}" for k, v in sorted(report.configs_set.items()))
        lines.append(f"configs set: {settings}")
    elif report.dry_run:
        lines.append("configs set: none (--dry-run)")
    elif report.level_before == 1:
        lines.append("configs set: none (the topic is compacted already)")
    else:
        lines.append("configs set: none")
    if report.already_migrated:
        lines.append("already migrated")
    out.write("\n".join(lines) + "\n")
    out.flush()
    if report.verified:
        return 0
    for tip, differences in sorted(report.failures.items(), key=lambda item: str(item[0])):
        print(
            f"tierlog: {tip}: the keyed records differ from the history: " + "; ".join(differences),
            file=err,
        )
    if report.checked == "plan":
        print(
            "tierlog: error: the planned keyed values would not rebuild the history (reference "
            "first, keyed second): nothing was written or switched",
            file=err,
        )
    else:
        print(
            "tierlog: error: verification failed (reference first, keyed second): nothing was "
            "switched. Is a legacy writer (Kafka's RLMM, tierlog's `topic` RLMM) still writing? "
            "Stop it and run the migration again: it writes only what is missing",
            file=err,
        )
    return 1


def run_migrate(args: argparse.Namespace) -> int:
    """``tierlog metadata migrate``'s handler (``tierlog.cli._metadata`` parses the arguments)."""
    if not args.topic:
        raise InvalidArgumentError("--topic must not be empty")
    audit = None if args.no_audit else args.audit_topic
    if audit is not None and audit == args.topic:
        raise InvalidArgumentError(f"--audit-topic {audit} is the topic being migrated")
    options = MigrationOptions(
        bootstrap_servers=args.bootstrap_servers,
        topic=args.topic,
        audit_topic=audit,
        topic_configs=parse_topic_configs(args.topic_config or ()),
        command_config=args.command_config,
        timeout_s=args.timeout,
        dry_run=args.dry_run,
    )
    report = migrate(options, err=sys.stderr)
    return print_report(report, sys.stdout, sys.stderr)
