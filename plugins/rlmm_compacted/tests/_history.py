"""An in-memory metadata partition, a model of Kafka's log cleaner, and RLM-like histories.

The fast tests of the projection (``test_projection.py``) need no broker: a writer drives
``ProjectionApplier.plan_write`` the way tierlog's RemoteLogManager would (copies, retries,
leadership changes, deletions, cleaned copies, invalid transitions, a partition deletion),
appends each write's records to an in-memory partition (projection) and to an audit list
(Kafka's legacy bytes), and applies them to its own applier before the next write
(read-your-writes). ``compact`` is Kafka's log cleaner (KAFKA-LOGCLEANER.md): records without a
key dropped, the latest record of each key kept in offset order, tombstones kept until
``delete.retention.ms`` has passed, then removed. The same behaviour is checked against a real
broker's cleaner by the scenario tests.

Readers are compared through ``observe``: what the RemoteLogManager can learn from a store.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from tierlog_rlmm_compacted.keys import MetadataKey
from tierlog_rlmm_compacted.projection import PlannedWrite, ProjectionApplier
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


# The metadata partition and the cleaner ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Rec:
    """One record of the projection topic's partition."""

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


def compact(records: Iterable[Rec], *, tombstones_expired: bool = True) -> list[Rec]:
    """Kafka's log cleaner after a complete round: null-key records dropped, the latest record
    of each key kept, in offset order; its tombstones too until ``delete.retention.ms`` has
    passed (``tombstones_expired=False``), removed after it."""
    records = list(records)
    latest: dict[bytes, Rec] = {}
    for record in records:
        if record.key is not None:
            latest[record.key] = record
    return [
        r
        for r in records
        if r.key is not None
        and latest[r.key] is r
        and (r.value is not None or not tombstones_expired)
    ]


# Readers ------------------------------------------------------------------------------------------
def replay(records: Iterable[Rec], tips: Sequence[TopicIdPartition]) -> ProjectionApplier:
    """A fresh node's applier after reading ``records`` (hosting ``tips``), initialized: what
    the consumer task does (records of partitions it does not host are skipped)."""
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
    """The topic RLMM's view of the audit topic (Kafka's legacy records: null keys)."""
    applier = StoreApplier(RemotePartitionMetadataStore())
    for tip in tips:
        applier.load(tip)
    for value in values:
        event = applier.decode(None, value)
        if event.topic_id_partition in tips:
            applier.apply(event)
    for tip in tips:
        applier.mark_initialized(tip)
    return applier


@dataclass(frozen=True)
class EpochView:
    """One leader epoch as the RLM sees it.

    ``listing`` is ``list_remote_log_segments(tip, epoch)`` grouped by start offset, in order:
    which segments share a start offset is compared, not their order (Kafka lists them from a
    HashSet). ``routing`` maps each listed segment's first and last offset in the epoch to the
    segment ``remote_log_segment_metadata`` serves there (None: none).
    """

    epoch: int
    listing: tuple[tuple[int, frozenset[RemoteLogSegmentId]], ...]
    highest: int | None
    size: int
    routing: tuple[tuple[int, RemoteLogSegmentId | None], ...]


@dataclass(frozen=True)
class PartitionState:
    """What a reader of a partition can tell the RLM, comparable between readers."""

    deleted: bool
    segments: tuple[RemoteLogSegmentMetadata, ...] = ()
    epochs: tuple[EpochView, ...] = ()

    @property
    def ids(self) -> frozenset[RemoteLogSegmentId]:
        return frozenset(s.remote_log_segment_id for s in self.segments)


def _epoch_range(segment: RemoteLogSegmentMetadata, epoch: int) -> tuple[int, int]:
    epochs = sorted(segment.segment_leader_epochs.items())
    for i, (e, start) in enumerate(epochs):
        if e == epoch:
            end = epochs[i + 1][1] - 1 if i + 1 < len(epochs) else segment.end_offset
            return start, end
    raise AssertionError(f"epoch {epoch} not in {segment}")


def observe(
    store: RemotePartitionMetadataStore,
    tip: TopicIdPartition,
    *,
    leave_out: frozenset[RemoteLogSegmentId] = frozenset(),
) -> PartitionState:
    """Every listed segment (all fields), and per epoch of the listed segments: the listing,
    the highest copied offset, the remote log size and the routing of each segment's offsets.
    ``leave_out`` segments are left out of the listings and sizes (the superseded uploads a
    legacy replay still lists)."""
    if not store.is_initialized(tip):
        return PartitionState(deleted=True)
    segments = [
        s for s in store.list_remote_log_segments(tip) if s.remote_log_segment_id not in leave_out
    ]
    segments.sort(key=lambda s: (s.start_offset, s.remote_log_segment_id.id.bytes))
    views = []
    for epoch in sorted({e for s in segments for e in s.segment_leader_epochs}):
        listed = [
            s
            for s in store.list_remote_log_segments(tip, epoch)
            if s.remote_log_segment_id not in leave_out
        ]
        starts = [s.start_offset for s in listed]
        assert starts == sorted(starts), f"epoch {epoch} not listed in start order: {starts}"
        groups: dict[int, set[RemoteLogSegmentId]] = {}
        for s in listed:
            groups.setdefault(s.start_offset, set()).add(s.remote_log_segment_id)
        left_out = sum(
            s.segment_size_in_bytes
            for s in store.list_remote_log_segments(tip, epoch)
            if s.remote_log_segment_id in leave_out
        )
        probes = sorted({o for s in listed for o in _epoch_range(s, epoch)})
        routing = []
        for offset in probes:
            served = store.remote_log_segment_metadata(tip, epoch, offset)
            routing.append((offset, None if served is None else served.remote_log_segment_id))
        views.append(
            EpochView(
                epoch,
                tuple((start, frozenset(ids)) for start, ids in groups.items()),
                store.highest_offset_for_epoch(tip, epoch),
                store.remote_log_size(tip, epoch) - left_out,
                tuple(routing),
            )
        )
    return PartitionState(False, tuple(segments), tuple(views))


def differences(
    expected: PartitionState, got: PartitionState, *, forgets: bool = False
) -> list[str]:
    """What ``got`` answers differently from ``expected``, in words (empty: the same).

    ``forgets``: ``got`` read a topic whose tombstones removed deleted segments. It cannot
    know the highest copied offset those segments gave an epoch, so in an epoch with no
    finished segment left its ``highest_offset_for_epoch`` may be lower or unknown; never
    higher (the one difference besides superseded uploads, documented in ``projection.py``).
    """
    if expected.deleted or got.deleted:
        return (
            []
            if expected.deleted == got.deleted
            else [f"deleted: {expected.deleted} != {got.deleted}"]
        )
    out = []
    if expected.segments != got.segments:
        want = {s.remote_log_segment_id: s for s in expected.segments}
        have = {s.remote_log_segment_id: s for s in got.segments}
        for ident in sorted(want.keys() | have.keys(), key=lambda i: i.id):
            if want.get(ident) != have.get(ident):
                out.append(f"segment {ident.id}: {want.get(ident)} != {have.get(ident)}")
    views = {v.epoch: v for v in got.epochs}
    if [v.epoch for v in expected.epochs] != [v.epoch for v in got.epochs]:
        out.append(f"epochs {[v.epoch for v in expected.epochs]} != {list(views)}")
    for want_view in expected.epochs:
        have_view = views.get(want_view.epoch)
        if have_view is None:
            continue
        finished = any(
            s.state is S.COPY_SEGMENT_FINISHED and want_view.epoch in s.segment_leader_epochs
            for s in expected.segments
        )
        highest_ok = want_view.highest == have_view.highest or (
            forgets
            and not finished
            and (
                have_view.highest is None
                or (want_view.highest is not None and have_view.highest < want_view.highest)
            )
        )
        for what in ("listing", "size", "routing"):
            if getattr(want_view, what) != getattr(have_view, what):
                out.append(
                    f"epoch {want_view.epoch} {what}: {getattr(want_view, what)} != "
                    f"{getattr(have_view, what)}"
                )
        if not highest_ok:
            out.append(
                f"epoch {want_view.epoch} highest: {want_view.highest} != {have_view.highest}"
            )
    return out


# The writer ---------------------------------------------------------------------------------------
class Node:
    """A writer (a leader's RLMM): plans each write, appends its records, applies them."""

    def __init__(self, tips: Sequence[TopicIdPartition], *, audit: bool = True) -> None:
        self.tips = list(tips)
        self.applier = replay((), self.tips)
        self.log = Log()
        self.audit: list[bytes] = []
        self.audit_enabled = audit
        self.level = 0
        self.plans: list[PlannedWrite] = []

    def write(self, event: RemoteLogMetadata) -> PlannedWrite:
        """One write: its projection record and tombstones appended (one transaction), its
        audit value, then read back (the write completes once its record is applied)."""
        plan = self.applier.plan_write(event, tombstones=self.level >= 1)
        written = [self.log.append(plan.key.encode(), plan.value)]
        written += [self.log.append(k.encode(), None) for k in plan.tombstones]
        if self.audit_enabled:
            self.audit.append(plan.audit_value)
        self.plans.append(plan)
        self._consume(written)
        return plan

    def cleanup(self) -> list[MetadataKey]:
        """What the cleanup manager does once: tombstone every orphan key."""
        keys = [k for tip in self.tips for k in self.applier.orphan_keys(tip)]
        self._consume([self.log.append(k.encode(), None) for k in keys])
        return keys

    def _consume(self, records: Iterable[Rec]) -> None:
        for record in records:
            event: DecodedEvent = self.applier.decode(record.key, record.value)
            if event.topic_id_partition in self.tips:
                self.applier.apply(event)


def _id(rnd: random.Random, tip: TopicIdPartition) -> RemoteLogSegmentId:
    return RemoteLogSegmentId(tip, Uuid(rnd.getrandbits(63) + 1, rnd.getrandbits(63) + 1))


@dataclass
class Leader:
    """One user partition's successive leaders, publishing as tierlog's RLM would."""

    node: Node
    tip: TopicIdPartition
    rnd: random.Random
    epoch: int = 0
    next_offset: int = 0
    clock: int = 1_700_000_000_000
    live: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    """Segments this history has not deleted (any state but DELETE_SEGMENT_FINISHED)."""
    superseded: set[RemoteLogSegmentId] = field(default_factory=set)
    """Uploads a retry under the same key superseded (a legacy replay still lists them)."""
    epoch_starts: dict[int, int] = field(default_factory=dict)
    vector: dict[int, int] = field(default_factory=dict)
    """The cleaner offset reached under each epoch (tiered compaction, KIP-1272)."""
    deleted: bool = False

    def _now(self) -> int:
        self.clock += self.rnd.randrange(1, 1000)
        return self.clock

    def _segment(self, start: int, end: int, epoch: int) -> RemoteLogSegmentMetadata:
        ordered = sorted((e, max(o, start)) for e, o in self.epoch_starts.items() if o <= end)
        kept = {
            e: o
            for i, (e, o) in enumerate(ordered)
            if i + 1 == len(ordered) or ordered[i + 1][1] > start
        }
        return RemoteLogSegmentMetadata(
            _id(self.rnd, self.tip),
            start,
            end,
            self._now(),
            1,
            self._now(),
            self.rnd.randrange(1, 1 << 20),
            kept or {self.epoch: start},
            broker_leader_epoch=epoch,
            txn_idx_empty=self.rnd.random() < 0.5,
        )

    def _update(
        self, segment: RemoteLogSegmentMetadata, state: RemoteLogSegmentState, epoch: int | None
    ) -> RemoteLogSegmentMetadataUpdate:
        return RemoteLogSegmentMetadataUpdate(
            segment.remote_log_segment_id, self._now(), segment.custom_metadata, state, 1, epoch
        )

    def _move(
        self, segment: RemoteLogSegmentMetadata, state: RemoteLogSegmentState, epoch: int
    ) -> RemoteLogSegmentMetadata:
        self.node.write(self._update(segment, state, epoch))
        moved = replace(segment, state=state)
        ident = segment.remote_log_segment_id
        self.live = [moved if s.remote_log_segment_id == ident else s for s in self.live]
        return moved

    def _forget(self, segment: RemoteLogSegmentMetadata) -> None:
        ident = segment.remote_log_segment_id
        self.live = [s for s in self.live if s.remote_log_segment_id != ident]

    def _finished(self) -> list[RemoteLogSegmentMetadata]:
        return [s for s in self.live if s.state is S.COPY_SEGMENT_FINISHED]

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
        self.live.append(segment)
        if roll < 0.1:  # a failed copy, cleaned up, then retried
            for state in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
                segment = self._move(segment, state, self.epoch)
            self._forget(segment)
            segment = self._segment(start, end, self.epoch)
            self.node.write(segment)
            self.live.append(segment)
        elif roll < 0.2:  # the node died mid-copy; a retry under the same epoch (scenario 3)
            self.superseded.add(segment.remote_log_segment_id)
            self._forget(segment)
            segment = self._segment(start, end, self.epoch)
            self.node.write(segment)
            self.live.append(segment)
        elif roll < 0.4:  # leadership moved during the upload (scenario 2)
            self._leadership_change_during(segment)
            return
        self._move(segment, S.COPY_SEGMENT_FINISHED, self.epoch)

    def _leadership_change_during(self, segment: RemoteLogSegmentMetadata) -> None:
        """The new leader uploads the same local segment under its epoch; the old one finishes
        under its epoch or the new one it has learnt, before or after, or died (its upload stays
        COPY_SEGMENT_STARTED, an orphan of another epoch)."""
        old_epoch = self.epoch
        self.new_epoch()
        other = replace(
            self._segment(segment.start_offset, segment.end_offset, self.epoch),
            segment_leader_epochs=segment.segment_leader_epochs,
        )
        self.node.write(other)
        self.live.append(other)
        how = self.rnd.randrange(4)
        if how == 0:  # the seed's scenario 2
            self._move(segment, S.COPY_SEGMENT_FINISHED, old_epoch)
            self._move(other, S.COPY_SEGMENT_FINISHED, self.epoch)
        elif how == 1:  # the old leader learnt the new epoch before it finished
            self._move(segment, S.COPY_SEGMENT_FINISHED, self.epoch)
            self._move(other, S.COPY_SEGMENT_FINISHED, self.epoch)
        elif how == 2:  # the new leader finished first
            self._move(other, S.COPY_SEGMENT_FINISHED, self.epoch)
            self._move(segment, S.COPY_SEGMENT_FINISHED, old_epoch)
        else:  # the old leader died: its upload is left in COPY_SEGMENT_STARTED
            self._move(other, S.COPY_SEGMENT_FINISHED, self.epoch)

    def clean_copy(self) -> None:
        """A cleaned copy of a finished segment, same offsets, new id (tiered compaction)."""
        finished = self._finished()
        if not finished:
            return
        source = self.rnd.choice(finished)
        # The cleaner-offset vector: what earlier epochs' cleaners reached, and this one's.
        self.vector[self.epoch] = max(self.vector.get(self.epoch, -1), source.end_offset)
        copy = replace(
            source,
            remote_log_segment_id=_id(self.rnd, self.tip),
            state=S.COPY_SEGMENT_STARTED,
            cleaner_offsets=dict(self.vector),
            broker_leader_epoch=self.epoch,
        )
        self.node.write(copy)
        self.live.append(copy)
        self._move(copy, S.COPY_SEGMENT_FINISHED, self.epoch)

    def _delete(self, segment: RemoteLogSegmentMetadata, *, interrupted: bool = False) -> None:
        if segment.state is not S.DELETE_SEGMENT_STARTED:
            segment = self._move(segment, S.DELETE_SEGMENT_STARTED, self.epoch)
        if interrupted:
            return
        self._move(segment, S.DELETE_SEGMENT_FINISHED, self.epoch)
        self._forget(segment)

    def expire(self) -> None:
        """Retention: delete every copy of the oldest end offset (any state), in any order; a
        deletion may be interrupted after DELETE_SEGMENT_STARTED, or the pass stop between two
        copies (a crash: the next pass deletes the rest). The copy serving the reads may go
        first, leaving the copies it displaced finished (a displacement marker's case)."""
        if not self.live:
            return
        oldest = min(s.end_offset for s in self.live)
        copies = [s for s in self.live if s.end_offset == oldest]
        self.rnd.shuffle(copies)
        for i, segment in enumerate(copies):
            if i > 0 and self.rnd.random() < 0.15:
                return
            self._delete(segment, interrupted=self.rnd.random() < 0.1)

    def delete_orphan(self) -> None:
        """What tierlog deletes early: a COPY_SEGMENT_STARTED upload a finished copy covers (an
        orphan of another epoch), a finished copy another copy of its offsets displaced, a
        deletion left half-way (DELETE_SEGMENT_STARTED)."""
        store = self.node.applier.store
        candidates = []
        for segment in self.live:
            covered = segment.state is S.COPY_SEGMENT_STARTED and any(
                s.state is S.COPY_SEGMENT_FINISHED and s.end_offset >= segment.end_offset
                for s in self.live
            )
            if covered or segment.state is S.DELETE_SEGMENT_STARTED:
                candidates.append(segment)
            elif segment.state is S.COPY_SEGMENT_FINISHED:
                epoch, start = next(iter(segment.segment_leader_epochs.items()))
                served = store.remote_log_segment_metadata(self.tip, epoch, start)
                if served is not None and served.remote_log_segment_id != (
                    segment.remote_log_segment_id
                ):
                    candidates.append(segment)
        if candidates:
            self._delete(self.rnd.choice(candidates), interrupted=self.rnd.random() < 0.2)

    def _serving(self, segment: RemoteLogSegmentMetadata) -> bool:
        epoch, start = next(iter(segment.segment_leader_epochs.items()))
        served = self.node.applier.store.remote_log_segment_metadata(self.tip, epoch, start)
        return served is not None and served.remote_log_segment_id == segment.remote_log_segment_id

    def delete_active(self) -> None:
        """Delete only the copy serving some offsets while copies it displaced are finished
        (seed scenario 4 when the leader deletes only the active upload): Kafka's cache serves
        those offsets from nothing until they are deleted too."""
        finished = self._finished()
        candidates = [
            s
            for s in finished
            if self._serving(s)
            and any(
                o is not s and o.start_offset <= s.end_offset and s.start_offset <= o.end_offset
                for o in finished
            )
        ]
        if candidates:
            self._delete(self.rnd.choice(candidates), interrupted=self.rnd.random() < 0.1)

    def invalid_update(self) -> None:
        """An update Kafka's cache drops (an invalid transition), as a confused or zombie
        writer would publish it."""
        if not self.live:
            return
        segment = self.rnd.choice(self.live)
        invalid = [
            s
            for s in (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED)
            if not RemoteLogSegmentState.is_valid_transition(segment.state, s)
        ]
        if invalid:
            self.node.write(self._update(segment, self.rnd.choice(invalid), self.epoch))

    def delete_partition(self) -> None:
        """The partition's deletion: usually its segments deleted first (tierlog's RLM), else
        the markers alone; MARKED, STARTED, FINISHED."""
        if self.rnd.random() < 0.8:
            while self.live:
                for segment in list(self.live):
                    self._delete(segment)
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
        self.live = []
        self.deleted = True


def random_history(
    seed: int,
    *,
    steps: int = 60,
    partitions: int = 2,
    level_from: int | None = None,
    clean_copies: bool = False,
    invalid: bool = True,
    after_step: Callable[[Node, list[Leader]], None] | None = None,
) -> tuple[Node, list[Leader]]:
    """A random history of ``partitions`` user partitions sharing one metadata partition;
    tombstones from step ``level_from`` on (None: level 0 throughout; the switch runs the
    cleanup manager once). ``clean_copies`` adds cleaned copies of live segments (tiered
    compaction, published under the current epoch: relocated keys); ``invalid`` adds invalid
    transitions. ``after_step`` is called after each step (checks of every intermediate
    state)."""
    rnd = random.Random(seed)
    topic_id = Uuid(rnd.getrandbits(63) + 1, rnd.getrandbits(63) + 1)
    tips = [TopicIdPartition(topic_id, "orders", p) for p in range(partitions)]
    node = Node(tips)
    leaders = [Leader(node, tip, random.Random(rnd.getrandbits(32))) for tip in tips]
    for step in range(steps):
        if level_from is not None and step >= level_from and node.level == 0:
            node.level = 1
            node.cleanup()
        active = [leader for leader in leaders if not leader.deleted]
        if not active:
            break
        leader = rnd.choice(active)
        action = rnd.random()
        if action < 0.42:
            leader.copy()
        elif action < 0.57:
            leader.expire()
        elif action < 0.66:
            leader.new_epoch()
        elif action < 0.74:
            leader.delete_orphan()
        elif action < 0.8:
            leader.delete_active()
        elif action < 0.88:
            if clean_copies:
                leader.clean_copy()
        elif action < 0.95:
            if invalid:
                leader.invalid_update()
        elif step > steps // 2:
            leader.delete_partition()
        if after_step is not None:
            after_step(node, leaders)
    return node, leaders
