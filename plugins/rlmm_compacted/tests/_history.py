"""An in-memory metadata partition, a model of Kafka's log cleaner, and RLM-like histories.

The fast tests of the projection (``test_projection.py``) need no broker: a writer drives
``ProjectionApplier.plan_write`` the way tierlog's RemoteLogManager would (copies, retries,
leadership changes, deletions, cleaned copies, a partition deletion), appends each write's
records to an in-memory partition (projection) and to an audit list (Kafka's legacy bytes), and
applies them to its own applier before the next write (read-your-writes). ``compact`` is Kafka's
log cleaner once ``delete.retention.ms`` has passed (KAFKA-LOGCLEANER.md): records without a key
dropped, the latest record of each key kept in offset order, tombstones removed. The same
behaviour is checked against a real broker's cleaner in ``test_scenarios.py``.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from tierlog_rlmm_compacted.keys import MetadataKey
from tierlog_rlmm_compacted.projection import ProjectionApplier
from tierlog_rlmm_topic.applier import DecodedEvent, StoreApplier

from tierlog.metadata import RemotePartitionMetadataStore
from tierlog.spi import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    Uuid,
)

S = RemoteLogSegmentState
P = RemotePartitionDeleteState


@dataclass(frozen=True, slots=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass
class Log:
    """One metadata partition: records with offsets."""

    records: list[Rec] = field(default_factory=list)

    def append(self, key: bytes | None, value: bytes | None) -> Rec:
        record = Rec(len(self.records), key, value)
        self.records.append(record)
        return record


def compact(records: Iterable[Rec]) -> list[Rec]:
    """Kafka's log cleaner, fully cleaned and past ``delete.retention.ms``."""
    records = list(records)
    latest: dict[bytes, Rec] = {}
    for record in records:
        if record.key is not None:
            latest[record.key] = record
    return [r for r in records if r.key is not None and latest[r.key] is r and r.value is not None]


def replay(records: Iterable[Rec], tips: Sequence[TopicIdPartition]) -> ProjectionApplier:
    """A fresh node's applier after reading ``records`` (hosting ``tips``), initialized."""
    applier = ProjectionApplier(RemotePartitionMetadataStore())
    for tip in tips:
        applier.load(tip)
    for record in records:
        event = applier.decode(record.key, record.value)
        if event.topic_id_partition in tips:
            applier.apply(event)
    for tip in tips:
        applier.mark_initialized(tip)
    return applier


def replay_legacy(values: Iterable[bytes], tips: Sequence[TopicIdPartition]) -> StoreApplier:
    """The topic RLMM's view of the audit topic (Kafka's legacy records, keys ignored)."""
    from tierlog.metadata import serde

    applier = StoreApplier(RemotePartitionMetadataStore())
    for tip in tips:
        applier.load(tip)
    for value in values:
        event = applier.decode(None, value)
        if event.topic_id_partition in tips:
            applier.apply(event)
    for tip in tips:
        applier.mark_initialized(tip)
    assert serde  # the values are Kafka's bytes: the legacy applier decodes them
    return applier


@dataclass(frozen=True)
class PartitionState:
    """What a reader of a partition can observe, comparable between readers."""

    deleted: bool
    segments: tuple[RemoteLogSegmentMetadata, ...] = ()
    by_epoch: tuple[tuple[int, tuple[RemoteLogSegmentId, ...], int | None, int], ...] = ()


def observe(
    store: RemotePartitionMetadataStore,
    tip: TopicIdPartition,
    *,
    leave_out: frozenset[RemoteLogSegmentId] = frozenset(),
) -> PartitionState:
    """Every listed segment, and per epoch of the listed segments: the listing order, the
    highest copied offset and the remote log size; ``leave_out`` segments are left out of the
    listings and of the sizes (the superseded uploads a legacy replay still lists)."""
    if not store.is_initialized(tip):
        return PartitionState(deleted=True)
    segments = [
        s for s in store.list_remote_log_segments(tip) if s.remote_log_segment_id not in leave_out
    ]
    segments.sort(key=lambda s: (s.start_offset, s.remote_log_segment_id.id.bytes))
    epochs = sorted({e for s in segments for e in s.segment_leader_epochs})
    by_epoch = []
    for epoch in epochs:
        listed = list(store.list_remote_log_segments(tip, epoch))
        left_out = sum(
            s.segment_size_in_bytes for s in listed if s.remote_log_segment_id in leave_out
        )
        by_epoch.append(
            (
                epoch,
                tuple(
                    s.remote_log_segment_id
                    for s in listed
                    if s.remote_log_segment_id not in leave_out
                ),
                store.highest_offset_for_epoch(tip, epoch),
                store.remote_log_size(tip, epoch) - left_out,
            )
        )
    return PartitionState(False, tuple(segments), tuple(by_epoch))


class Node:
    """A writer (a leader's RLMM): plans each write, appends its records, applies them."""

    def __init__(self, tips: Sequence[TopicIdPartition], *, audit: bool = True) -> None:
        self.tips = list(tips)
        self.applier = replay((), self.tips)
        self.log = Log()
        self.audit: list[bytes] = []
        self.audit_enabled = audit
        self.level = 0
        self.tombstones_written = 0

    def write(self, event: RemoteLogMetadata) -> MetadataKey:
        plan = self.applier.plan_write(event, tombstones=self.level >= 1)
        written = [self.log.append(plan.key.encode(), plan.value)]
        written += [self.log.append(k.encode(), None) for k in plan.tombstones]
        self.tombstones_written += len(plan.tombstones)
        if self.audit_enabled:
            self.audit.append(plan.audit_value)
        self._consume(written)
        return plan.key

    def cleanup(self) -> int:
        """What the cleanup manager does once: tombstone every orphan key."""
        written = []
        for tip in self.tips:
            written += [self.log.append(k.encode(), None) for k in self.applier.orphan_keys(tip)]
        self._consume(written)
        self.tombstones_written += len(written)
        return len(written)

    def _consume(self, records: Iterable[Rec]) -> None:
        for record in records:
            event: DecodedEvent = self.applier.decode(record.key, record.value)
            if event.topic_id_partition in self.tips:
                self.applier.apply(event)


def _id(rnd: random.Random, tip: TopicIdPartition) -> RemoteLogSegmentId:
    return RemoteLogSegmentId(tip, Uuid(rnd.getrandbits(63) + 1, rnd.getrandbits(63) + 1))


@dataclass
class Leader:
    """One user partition's leader, publishing as tierlog's RLM would."""

    node: Node
    tip: TopicIdPartition
    rnd: random.Random
    epoch: int = 0
    next_offset: int = 0
    clock: int = 1_700_000_000_000
    live: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    superseded: set[RemoteLogSegmentId] = field(default_factory=set)
    epoch_starts: dict[int, int] = field(default_factory=dict)

    def _now(self) -> int:
        self.clock += self.rnd.randrange(1, 1000)
        return self.clock

    def _segment(self, start: int, end: int, epoch: int) -> RemoteLogSegmentMetadata:
        epochs = {e: o for e, o in self.epoch_starts.items() if o <= end}
        epochs = {e: max(o, start) for e, o in epochs.items()}
        # Keep the epochs whose range overlaps [start, end].
        ordered = sorted(epochs.items())
        kept = {
            e: o
            for i, (e, o) in enumerate(ordered)
            if i + 1 == len(ordered) or ordered[i + 1][1] > start
        }
        if not kept:
            kept = {self.epoch: start}
        return RemoteLogSegmentMetadata(
            _id(self.rnd, self.tip),
            start,
            end,
            self._now(),
            1,
            self._now(),
            self.rnd.randrange(1, 1 << 20),
            kept,
            broker_leader_epoch=epoch,
            txn_idx_empty=self.rnd.random() < 0.5,
        )

    def _update(
        self, segment: RemoteLogSegmentMetadata, state: RemoteLogSegmentState, epoch: int
    ) -> RemoteLogSegmentMetadataUpdate:
        return RemoteLogSegmentMetadataUpdate(
            segment.remote_log_segment_id, self._now(), segment.custom_metadata, state, 1, epoch
        )

    def new_epoch(self) -> None:
        self.epoch += 1
        self.epoch_starts[self.epoch] = self.next_offset

    def copy(self) -> None:
        """One segment copied; sometimes a failed attempt first (cleaned up, or superseded by
        the retry under the same key), or a leadership change during the upload."""
        if not self.epoch_starts:
            self.epoch_starts[self.epoch] = 0
        start = self.next_offset
        end = start + self.rnd.randrange(1, 200)
        self.next_offset = end + 1
        roll = self.rnd.random()
        segment = self._segment(start, end, self.epoch)
        self.node.write(segment)
        if roll < 0.1:  # a failed copy, cleaned up, then retried
            for state in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
                self.node.write(self._update(segment, state, self.epoch))
            segment = self._segment(start, end, self.epoch)
            self.node.write(segment)
        elif roll < 0.2:  # the node died mid-copy; a retry under the same epoch (scenario 3)
            self.superseded.add(segment.remote_log_segment_id)
            segment = self._segment(start, end, self.epoch)
            self.node.write(segment)
        elif roll < 0.3:  # leadership moved during the upload; both finish (scenario 2)
            old_epoch = self.epoch
            self.new_epoch()
            self.epoch_starts[self.epoch] = self.next_offset
            other = self._segment(start, end, self.epoch)
            other = replace(other, segment_leader_epochs=segment.segment_leader_epochs)
            self.node.write(other)
            self.node.write(self._update(segment, S.COPY_SEGMENT_FINISHED, old_epoch))
            self.node.write(self._update(other, S.COPY_SEGMENT_FINISHED, self.epoch))
            self.live += [replace(segment, state=S.COPY_SEGMENT_FINISHED), other]
            return
        self.node.write(self._update(segment, S.COPY_SEGMENT_FINISHED, self.epoch))
        self.live.append(segment)

    def clean_copy(self) -> None:
        """A cleaned copy of a live segment, same offsets, new id (tiered compaction)."""
        if not self.live:
            return
        source = self.rnd.choice(self.live)
        copy = replace(
            source,
            remote_log_segment_id=_id(self.rnd, self.tip),
            state=S.COPY_SEGMENT_STARTED,
            cleaner_offsets={self.epoch: source.end_offset},
            broker_leader_epoch=self.epoch,
        )
        self.node.write(copy)
        self.node.write(self._update(copy, S.COPY_SEGMENT_FINISHED, self.epoch))
        self.live.append(copy)

    def expire(self) -> None:
        """Delete the oldest live segment (and every other copy of the same end offset, as
        retention would)."""
        if not self.live:
            return
        oldest = min(s.end_offset for s in self.live)
        for segment in [s for s in self.live if s.end_offset == oldest]:
            for state in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
                self.node.write(self._update(segment, state, self.epoch))
            self.live.remove(segment)

    def delete_partition(self) -> None:
        while self.live:
            self.expire()
        end = self.next_offset
        for state in (
            P.DELETE_PARTITION_MARKED,
            P.DELETE_PARTITION_STARTED,
            P.DELETE_PARTITION_FINISHED,
        ):
            self.node.write(
                RemotePartitionDeleteMetadata(
                    self.tip, state, self._now(), 1, broker_leader_epoch=self.epoch, end_offset=end
                )
            )


def random_history(
    seed: int,
    *,
    steps: int = 60,
    partitions: int = 2,
    level_from: int | None = None,
    clean_copies: bool = False,
) -> tuple[Node, list[Leader]]:
    """A random history of ``partitions`` user partitions sharing one metadata partition;
    tombstones from step ``level_from`` on (None: level 0 throughout). ``clean_copies`` adds
    cleaned copies of live segments (tiered compaction): their routing depends on the cleaner
    vectors of every cleaned segment ever seen, deleted ones included, which a compacted topic
    no longer holds, so the epoch listings are only comparable without them."""
    rnd = random.Random(seed)
    topic_id = Uuid(rnd.getrandbits(63) + 1, rnd.getrandbits(63) + 1)
    tips = [TopicIdPartition(topic_id, "orders", p) for p in range(partitions)]
    node = Node(tips)
    leaders = [Leader(node, tip, random.Random(rnd.getrandbits(32))) for tip in tips]
    for step in range(steps):
        if level_from is not None and step >= level_from and node.level == 0:
            node.level = 1
            node.cleanup()
        leader = rnd.choice(leaders)
        action = rnd.random()
        if action < 0.5:
            leader.copy()
        elif action < 0.7:
            leader.expire()
        elif action < 0.8:
            leader.new_epoch()
        elif action < 0.9:
            if clean_copies:
                leader.clean_copy()
        elif action < 0.92 and step > steps // 2:
            leader.delete_partition()
            leaders.remove(leader)
            if not leaders:
                break
    return node, leaders
