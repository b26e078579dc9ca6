"""The compacted projection: what a keyed record means, and which records a write needs.

``ProjectionApplier`` is the ``RecordApplier`` the topic RLMM's ``ConsumerTask`` feeds (see
``tierlog_rlmm_topic.applier``). It keeps, per user partition, the projection's current keys
(the latest value of each key, reduced to the segment it describes and that event's state) next
to the cache (``RemotePartitionMetadataStore``), so that:

- a reader of the *whole* topic and a reader of the topic after Kafka's log cleaner compacted
  it (latest value per key, tombstones and null keys gone) build the same cache: the rules of
  ``apply`` below are those a bootstrapping reader needs, and a live reader follows them too;
- a writer knows, from the same state, the key of an event, the value that makes the key
  self-sufficient (``values.py``) and the tombstones to write (``plan_write``); the cleanup
  manager knows the orphan keys (``orphan_keys``).

Applying a record (``apply``):

- **a null key** (a legacy record, written by Kafka's TBRLMM or tierlog's ``topic`` RLMM, before
  a migration or on a level-0 cluster): applied as the topic RLMM applies it (``StoreApplier``).
- **a keyed add** (COPY_SEGMENT_STARTED): applied; the key now describes that segment.
- **a keyed update**: when compaction removed the records that brought its segment to the
  state before it, those states are applied first, as a full history went through them: the
  value's ``SegmentAddRecord`` for a segment the cache does not know, COPY_SEGMENT_FINISHED
  when ``CopyFinished`` says so before a deletion, DELETE_SEGMENT_STARTED before a
  DELETE_SEGMENT_FINISHED; then the update. An update that restates exactly what the cache
  holds (same state, broker, time and custom metadata) changes nothing: it is not applied again
  (re-applying COPY_SEGMENT_FINISHED would re-route the segment's offsets to it).
- **a bare keyed update** (no ``SegmentAddRecord``: the record of an invalid transition, see
  below): not applied. Every reader of the whole history drops it (Kafka's cache does, and the
  writer published it because its cache would); in a compacted topic it stands before records
  of its segment that compaction removed, where it could be valid (a COPY_SEGMENT_FINISHED of a
  segment whose DELETE_SEGMENT_STARTED is no longer there would route the segment's offsets to
  it again). Its key describes no segment.
- **a keyed partition delete**: applied as the legacy store does (DELETE_PARTITION_FINISHED drops
  the partition); its key is the partition's delete marker.
- **a value overwriting a key that described another segment**: that segment has lost a key. If
  no other key describes it any more, a bootstrapping reader will never see it, so it is
  forgotten here too (removed from the cache): that is how a COPY_SEGMENT_STARTED upload
  superseded by a retry under the same leader epoch disappears (seed scenario 3), logged at
  INFO; any other segment forgotten this way is logged at WARNING (its remote data is no longer
  referenced; tierlog's writer never does this, see ``plan_write``).
- **a tombstone**: the key is forgotten, and the segment it described with it under the same
  rule.

The one difference with a full replay of the legacy history (the audit topic): superseded
COPY_SEGMENT_STARTED uploads, which that replay still lists. And what tombstones make a reader
forget (level 1, once the log cleaner removed the keys of deleted segments):
``highest_offset_for_epoch`` of an epoch with no finished segment left (a full replay remembers
the offset of a deleted one). Routing is the same for every reader: Kafka's cache routes a
range to the copy that finished last and never routes a copy it displaced again, so when the
copy that displaced others is deleted while they live, a full replay serves their offsets from
nothing; a reader of the compacted topic does too because that copy's history stays in the
topic while it matters (displacement markers, below). Listings are the same too: whether
Kafka's cache replaces a displaced copy in the epoch's listing (``put``) or drops it among the
unreferenced segments depends on the epoch's highest copied offset when the displacing copy
finished, which later segments, since deleted and compacted away, may have raised. A FINISHED
value says what that offset was where it mattered (``EpochHighestOffsets``: the segment's
epochs that had copied past it); applying it, a reader first restores those offsets
(``RemotePartitionMetadataStore.raise_highest_offset``). The applier remembers them per
finished segment (only such segments: copies finishing out of order), so that the segment's
deletion, which replays its FINISHED when it overwrites it (``CopyFinished``), and a
migration's restatement of it carry them too.

Writing (``plan_write``):

- the key is ``MetadataKey(topic id, partition, end offset, broker leader epoch)`` with the
  event's ``broker_leader_epoch``, or when the caller did not set it: the highest epoch of the
  segment for an add, the epoch of the key the segment was last written under for an update;
  for a partition delete the event's ``end_offset`` and epoch, else those of the partition's
  previous delete marker, else (highest known end offset + 1) and the highest known key epoch;
- **a key never hides a live segment**: when that key describes another segment still in the
  cache (a cleaned copy of the same offsets published under the same epoch, a re-upload after an
  unclean election, the current leader's upload in progress when the previous leader finishes
  its own), an update goes to the key its segment was last written under, and an add or a
  relocated update to the nearest free key of the same end offset (epochs below, then above),
  logged at INFO. Only an add supersedes a COPY_SEGMENT_STARTED segment under its key (a retry
  under the same leader epoch, seed scenario 3). Nor is a key reused that holds the
  DELETE_SEGMENT_FINISHED of a segment other keys still describe alive (level 0, where nothing
  tombstones them): the segment would come back for a bootstrapping reader;
- **a deletion does not overwrite the FINISHED of a segment another copy overlaps**: a reader
  of the compacted topic replays a key at the position of its latest value, and Kafka's cache
  routes a range to the copy that finished last. Written over its FINISHED, the deletion of a
  copy another one displaced (a duplicate upload after a leadership change, a segment replaced
  by its cleaned copy) would replay that FINISHED after the displacing copy's, take the range
  from it, then leave the range served by nothing. Nor the FINISHED of a segment that displaced
  a copy still finished: that FINISHED is where the cache displaced the copy, and replayed
  later (once the epoch has later segments) it would displace it differently (Kafka's ``put``
  replaces the copy, which the epoch then no longer lists, where the epoch's highest offset
  made the cache drop it into the unreferenced ones). Such a deletion goes to the segment's
  last key if that is another one, else to the nearest free key. Otherwise the deletion
  overwrites the FINISHED, and ``CopyFinished`` replays it (the epoch's highest copied offset
  counts it, as for a reader of the whole history);
- **an invalid transition** (Kafka's cache logs and drops it) is written, as the topic RLMM
  writes it, to the audit topic as is; its projection record is *bare* (the update and its
  ``BrokerLeaderEpoch``, no ``SegmentAddRecord``) under a key describing no live segment, so
  every reader drops it as Kafka does without the key of the segment losing what it says; at
  level 1 that key is tombstoned in the same write;
- tombstones (only when asked: level 1): after DELETE_SEGMENT_FINISHED of segment S at end
  offset E, every key describing S, and the keys of E with an epoch up to the deleting one that
  describe a segment no longer in the cache (seed scenario 4; a key still describing a live
  segment is left for that segment's own deletion: forgetting it would leak its remote data),
  but for displacement markers; after DELETE_PARTITION_FINISHED every segment key of the
  partition (the partition's delete marker stays: seed scenario 5); an earlier delete marker
  of the partition under another key;
- **displacement markers**: while a copy S displaced is still finished (a finished copy
  overlapping S in one of its leader epochs, not routed there, whose FINISHED a reader applies
  before S's, S's being the first to displace it), S's deletion keeps S's history in the topic:
  the key holding its DELETE_SEGMENT_FINISHED (with ``SegmentAddRecord`` and ``CopyFinished``)
  and the keys holding its FINISHED, where it was. A bootstrapping reader then replays the copy
  finishing, S finishing (displacing it), S's deletion: the cache a full replay gives, routing
  and listings included. No write takes a marker's key while it is needed. Once the copy is
  deleted or routed again, the marker goes: with the next deletion at E (then under any epoch:
  a cleaned copy's key may be above the deleting leader's), else as an orphan of the cleanup
  manager (a copy of another end offset). When no key holds S's FINISHED any more (a legacy
  history, or a migration's marker: ``plan_history_marker``), the deletion's value alone is
  the marker, replayed at its own position, and kept only if that replay takes no range from a
  copy the cache routes that a reader finishes before it.

Cost: the keys are indexed by end offset (and the end offsets kept sorted), so a deletion looks
at the keys of its end offset and of the offsets its segment covers (the next end offset or so),
not at every key of the partition.

Threads: ``apply`` runs on the consumer thread, ``plan_write``, ``orphan_keys`` and ``keys`` on
writer threads; one lock guards the projection state (the store has its own).
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from tierlog_rlmm_topic.applier import DecodedEvent, StoreApplier

from tierlog.metadata import RemotePartitionMetadataStore, serde, write_checks
from tierlog.metadata.serde import RemoteLogSegmentMetadataSnapshot
from tierlog.spi import (
    IllegalStateError,
    InvalidArgumentError,
    MetadataRecordError,
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteStorageException,
    TopicIdPartition,
    Uuid,
)
from tierlog_rlmm_compacted.keys import MetadataKey
from tierlog_rlmm_compacted.values import (
    ProjectionValue,
    decode_value,
    encode_value,
    epoch_ranges,
    segment_epoch_ranges,
)

__all__ = ["KeyEntry", "PlannedWrite", "ProjectionApplier"]

_LOG = logging.getLogger(__name__)

S = RemoteLogSegmentState
_DELETES: Final = frozenset({S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED})
_NEWEST: Final = 1 << 62
"""The position of a value being planned: after every value applied."""
_FINISHED: Final = S.COPY_SEGMENT_FINISHED
_RELOCATION_SPAN: Final = 1 << 16
"""How far from its epoch a relocated key is looked for (each way): far more than any
partition's number of leader epochs sharing one end offset."""


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """What a key's latest value says: the segment it is about (None for a partition delete
    marker) and that event's state. A bare update's key is about a segment without describing
    it (``ProjectionApplier.describes`` tells)."""

    segment_id: RemoteLogSegmentId | None
    state: RemoteLogSegmentState | RemotePartitionDeleteState


@dataclass(frozen=True, slots=True)
class PlannedWrite:
    """The records of one write: the projection record, its audit copy, the tombstones."""

    key: MetadataKey
    value: bytes
    """The projection value (``values.encode_value``)."""
    audit_value: bytes
    """Kafka's legacy bytes of the event (``serde.serialize``), for the audit topic."""
    tombstones: tuple[MetadataKey, ...] = ()


# What ``decode`` gives the consumer task, inside a DecodedEvent.
@dataclass(frozen=True, slots=True)
class _Legacy:
    metadata: RemoteLogMetadata


@dataclass(frozen=True, slots=True)
class _Keyed:
    key: MetadataKey
    value: ProjectionValue


@dataclass(frozen=True, slots=True)
class _Tombstone:
    key: MetadataKey


@dataclass(frozen=True, slots=True)
class _Span:
    """A segment's offsets per leader epoch: what a reader replaying it routes. Kept for a
    deleted segment while a key holds its DELETE_SEGMENT_FINISHED (the cache forgot it)."""

    start: int
    end: int
    epochs: tuple[tuple[int, int], ...]
    """(leader epoch, its first offset in the segment), ascending."""

    @classmethod
    def of(cls, segment: RemoteLogSegmentMetadata) -> _Span:
        return cls(
            segment.start_offset,
            segment.end_offset,
            tuple(sorted(segment.segment_leader_epochs.items())),
        )

    def ranges(self) -> dict[int, tuple[int, int]]:
        return epoch_ranges(self.epochs, self.end)


@dataclass(slots=True)
class _Partition:
    keys: dict[MetadataKey, KeyEntry] = field(default_factory=dict)
    # The keys whose value describes the segment (an add, an update with its add record).
    refs: dict[RemoteLogSegmentId, set[MetadataKey]] = field(default_factory=dict)
    last_key: dict[RemoteLogSegmentId, MetadataKey] = field(default_factory=dict)
    # Segments whose COPY_SEGMENT_FINISHED a reader replays before their deletion: finished
    # ones, and deleting ones whose DELETE_SEGMENT_STARTED said so (``CopyFinished``).
    finished: set[RemoteLogSegmentId] = field(default_factory=set)
    delete_key: MetadataKey | None = None
    # The keys by end offset, and those end offsets in order: a deletion looks at the keys of
    # its end offset, a displacement check at the keys of the offsets it covers.
    by_end: dict[int, set[MetadataKey]] = field(default_factory=dict)
    ends: list[int] = field(default_factory=list)
    # Where each key's latest value is among the partition's keyed values (the topic's order,
    # which compaction keeps): the order in which a reader replays them.
    positions: dict[MetadataKey, int] = field(default_factory=dict)
    applied: int = 0
    """Keyed values applied so far: the position of the next one."""
    # Keys holding a finished segment's DELETE_SEGMENT_FINISHED: possible displacement markers.
    deaths: dict[MetadataKey, _Span] = field(default_factory=dict)
    # The longest segment (end - start) a key described: how far below a range's end the
    # segments overlapping it can start; and each described segment's start offset.
    widest: int = 0
    starts: dict[RemoteLogSegmentId, int] = field(default_factory=dict)
    # For a finished segment whose leader epochs had copied past it when it finished: those
    # epochs' highest copied offsets then (``EpochHighestOffsets``; rare: copies finishing out
    # of order).
    highest: dict[RemoteLogSegmentId, tuple[tuple[int, int], ...]] = field(default_factory=dict)

    def put(self, key: MetadataKey, entry: KeyEntry) -> None:
        if key not in self.keys:
            same_end = self.by_end.get(key.end_offset)
            if same_end is None:
                same_end = self.by_end[key.end_offset] = set()
                insort(self.ends, key.end_offset)
            same_end.add(key)
        self.keys[key] = entry
        self.positions[key] = self.applied
        self.applied += 1

    def pop(self, key: MetadataKey) -> KeyEntry | None:
        entry = self.keys.pop(key, None)
        self.positions.pop(key, None)
        self.deaths.pop(key, None)
        if entry is not None:
            same_end = self.by_end[key.end_offset]
            same_end.discard(key)
            if not same_end:
                del self.by_end[key.end_offset]
                del self.ends[bisect_left(self.ends, key.end_offset)]
        return entry

    def ending(self, low: int, high: int) -> Iterator[MetadataKey]:
        """The keys whose end offset is in [``low``, ``high``]."""
        ends = self.ends
        for i in range(bisect_left(ends, low), bisect_right(ends, high)):
            yield from self.by_end[ends[i]]


def _epoch_of(metadata: RemoteLogSegmentMetadata) -> int:
    return max(metadata.segment_leader_epochs)


def _key_order(key: MetadataKey) -> int:
    return key.broker_leader_epoch


class ProjectionApplier:
    """The compacted RLMM's ``RecordApplier``; see the module docstring."""

    def __init__(self, store: RemotePartitionMetadataStore) -> None:
        self.store = store
        self._legacy = StoreApplier(store)
        self._lock = threading.RLock()
        self._parts: dict[TopicIdPartition, _Partition] = {}
        self._by_id: dict[tuple[Uuid, int], TopicIdPartition] = {}

    # RecordApplier ---------------------------------------------------------------------------
    def decode(self, key: bytes | None, value: bytes | None) -> DecodedEvent:
        if key is None:
            if value is None:
                raise MetadataRecordError("a record with neither key nor value")
            legacy = serde.deserialize(value)
            if isinstance(legacy, RemoteLogSegmentMetadataSnapshot):
                return DecodedEvent(None, legacy)
            return DecodedEvent(legacy.topic_id_partition, _Legacy(legacy))
        parsed = MetadataKey.parse(key)
        if value is None:
            return DecodedEvent(self._tip_of(parsed), _Tombstone(parsed))
        decoded = decode_value(value)
        event = decoded.event
        tip = event.topic_id_partition
        if not parsed.belongs_to(tip):
            raise MetadataRecordError(
                f"the key {parsed} names another partition than its value, an event of {tip}"
            )
        end = event.end_offset if isinstance(event, RemoteLogSegmentMetadata) else None
        if end is None:
            end = decoded.end_offset
        if end is not None and end != parsed.end_offset:
            raise MetadataRecordError(
                f"the key {parsed} has end offset {parsed.end_offset}, its value {end} "
                f"(a {type(event).__name__} of {tip})"
            )
        return DecodedEvent(tip, _Keyed(parsed, decoded))

    def _tip_of(self, key: MetadataKey) -> TopicIdPartition:
        """The hosted partition a tombstone's key names; a name-less one (never hosted, so
        skipped by the consumer task) when the partition is not hosted here."""
        tip = self._by_id.get((key.topic_id, key.partition))
        return tip if tip is not None else TopicIdPartition(key.topic_id, "", key.partition)

    def apply(self, event: DecodedEvent) -> None:
        tip = event.topic_id_partition
        payload = event.event
        with self._lock:
            part = self._parts.get(tip) if tip is not None else None
            if part is None or tip is None:
                _LOG.debug("skipping a record of %s, which is no longer loaded", tip)
                return
            if isinstance(payload, _Legacy):
                self._apply_event(tip, part, payload.metadata)
            elif isinstance(payload, _Keyed):
                self._apply_keyed(tip, part, payload.key, payload.value)
            elif isinstance(payload, _Tombstone):
                self._drop_key(tip, part, payload.key, "a tombstone")
            else:
                raise IllegalStateError(f"not an event of this applier: {payload!r}")

    def load(self, topic_id_partition: TopicIdPartition) -> None:
        with self._lock:
            self._legacy.load(topic_id_partition)
            self._parts[topic_id_partition] = _Partition()
            self._by_id[(topic_id_partition.topic_id, topic_id_partition.partition)] = (
                topic_id_partition
            )

    def unload(self, topic_id_partition: TopicIdPartition) -> None:
        with self._lock:
            self._legacy.unload(topic_id_partition)
            self._parts.pop(topic_id_partition, None)
            ident = (topic_id_partition.topic_id, topic_id_partition.partition)
            if self._by_id.get(ident) == topic_id_partition:
                del self._by_id[ident]

    def mark_initialized(self, topic_id_partition: TopicIdPartition) -> None:
        self._legacy.mark_initialized(topic_id_partition)

    def is_deleted(self, topic_id_partition: TopicIdPartition) -> bool:
        """Whether the applied history finished the partition's deletion."""
        return self._legacy.is_deleted(topic_id_partition)

    # Applying ----------------------------------------------------------------------------------
    def _apply_event(
        self,
        tip: TopicIdPartition,
        part: _Partition,
        event: object,
        highest: Sequence[tuple[int, int]] = (),
    ) -> None:
        """One event, as the topic RLMM applies it, keeping track of finished copies. Before a
        COPY_SEGMENT_FINISHED, the epochs' highest copied offsets the writer saw (``highest``,
        from ``EpochHighestOffsets``) are restored: the FINISHED then displaces copies as it
        did for the writer, and what the epochs had copied past the segment is remembered."""
        if isinstance(event, RemoteLogSegmentMetadataUpdate) and event.state is _FINISHED:
            segment_id = event.remote_log_segment_id
            before = self.store.peek_segment(tip, segment_id)
            above: tuple[tuple[int, int], ...] = ()
            if before is not None and before.state in (S.COPY_SEGMENT_STARTED, _FINISHED):
                for epoch, offset in highest:
                    self.store.raise_highest_offset(tip, epoch, offset)
                above = self._copied_past(tip, before)
            self._legacy.apply(DecodedEvent(tip, event))
            current = self.store.peek_segment(tip, segment_id)
            if current is not None and current.state is _FINISHED:
                part.finished.add(segment_id)
                if above:
                    part.highest[segment_id] = above
                else:
                    part.highest.pop(segment_id, None)
            return
        self._legacy.apply(DecodedEvent(tip, event))
        if (
            isinstance(event, RemoteLogSegmentMetadataUpdate)
            and event.state is S.DELETE_SEGMENT_FINISHED
            and self.store.peek_segment(tip, event.remote_log_segment_id) is None
        ):  # not an invalid transition, which the cache dropped
            part.finished.discard(event.remote_log_segment_id)
            part.highest.pop(event.remote_log_segment_id, None)

    def _copied_past(
        self, tip: TopicIdPartition, segment: RemoteLogSegmentMetadata
    ) -> tuple[tuple[int, int], ...]:
        """The segment's leader epochs whose highest copied offset is past the segment's last
        offset in them, with that offset: what ``EpochHighestOffsets`` says."""
        past = []
        for epoch, (_, last) in sorted(segment_epoch_ranges(segment).items()):
            highest = self.store.peek_highest_offset(tip, epoch)
            if highest is not None and highest > last:
                past.append((epoch, highest))
        return tuple(past)

    def _apply_keyed(
        self, tip: TopicIdPartition, part: _Partition, key: MetadataKey, value: ProjectionValue
    ) -> None:
        event = value.event
        if isinstance(event, RemotePartitionDeleteMetadata):
            previous = part.keys.get(key)
            if previous is not None and previous.segment_id is not None:
                self._drop_key(tip, part, key, "a partition delete marker")
            part.put(key, KeyEntry(None, event.state))
            part.delete_key = key
            self._apply_event(tip, part, event)
            return
        segment_id = event.remote_log_segment_id
        bare = isinstance(event, RemoteLogSegmentMetadataUpdate) and value.add_record is None
        previous = part.keys.get(key)
        if previous is not None and (previous.segment_id != segment_id or bare):
            self._drop_key(tip, part, key, f"a value of segment {segment_id.id}")
        part.deaths.pop(key, None)
        if isinstance(event, RemoteLogSegmentMetadataUpdate) and not bare:
            self._catch_up(tip, part, value, event)
            current = self.store.peek_segment(tip, segment_id)
            if current is None or current.create_with_updates(event) != current:
                self._apply_event(tip, part, event, value.highest_offsets)
            if event.state is S.DELETE_SEGMENT_STARTED and not value.copy_finished:
                part.finished.discard(segment_id)
        elif not bare:
            self._apply_event(tip, part, event)
        else:
            _LOG.debug("not applying the bare update under %s (an invalid transition)", key)
        part.put(key, KeyEntry(segment_id, event.state))
        if not bare:
            part.refs.setdefault(segment_id, set()).add(key)
            part.last_key[segment_id] = key
            described = event if isinstance(event, RemoteLogSegmentMetadata) else value.add_record
            assert described is not None
            part.widest = max(part.widest, described.end_offset - described.start_offset)
            part.starts[segment_id] = described.start_offset
            if event.state is S.DELETE_SEGMENT_FINISHED and value.copy_finished:
                part.deaths[key] = _Span.of(described)

    def _catch_up(
        self,
        tip: TopicIdPartition,
        part: _Partition,
        value: ProjectionValue,
        event: RemoteLogSegmentMetadataUpdate,
    ) -> None:
        """Bring the segment to the state just before ``event`` through the states a full
        history went through, when compaction removed the records that did: its add (unknown
        segment), COPY_SEGMENT_FINISHED (``CopyFinished`` before a deletion),
        DELETE_SEGMENT_STARTED (before a DELETE_SEGMENT_FINISHED)."""
        add = value.add_record
        assert add is not None
        segment_id = event.remote_log_segment_id
        current = self.store.peek_segment(tip, segment_id)
        if current is None:
            self._apply_event(tip, part, add)
            state = S.COPY_SEGMENT_STARTED
        else:
            state = current.state
        path = []
        if state is S.COPY_SEGMENT_STARTED and value.copy_finished and event.state in _DELETES:
            path.append(S.COPY_SEGMENT_FINISHED)
        if event.state is S.DELETE_SEGMENT_FINISHED and state is not S.DELETE_SEGMENT_STARTED:
            path.append(S.DELETE_SEGMENT_STARTED)
        for step in path:
            self._apply_event(
                tip,
                part,
                RemoteLogSegmentMetadataUpdate(
                    segment_id, add.event_timestamp_ms, add.custom_metadata, step, add.broker_id
                ),
                value.highest_offsets if step is _FINISHED else (),
            )

    def _drop_key(
        self, tip: TopicIdPartition, part: _Partition, key: MetadataKey, because: str
    ) -> None:
        """``key`` no longer describes what it described; forget a segment nothing describes."""
        entry = part.pop(key)
        if part.delete_key == key:
            part.delete_key = None
        if entry is None or entry.segment_id is None:
            return
        segment_id = entry.segment_id
        refs = part.refs.get(segment_id)
        if refs is None or key not in refs:
            return  # a bare update's key: it described nothing
        refs.discard(key)
        if refs:
            if part.last_key.get(segment_id) == key:
                part.last_key[segment_id] = max(refs, key=_key_order)
            return
        del part.refs[segment_id]
        part.last_key.pop(segment_id, None)
        part.starts.pop(segment_id, None)
        self._forget(tip, part, segment_id, key, because)

    def _forget(
        self,
        tip: TopicIdPartition,
        part: _Partition,
        segment_id: RemoteLogSegmentId,
        key: MetadataKey,
        because: str,
    ) -> None:
        """Remove a segment no key describes any more, as a bootstrapping reader never sees it."""
        part.finished.discard(segment_id)
        part.highest.pop(segment_id, None)
        current = self.store.peek_segment(tip, segment_id)
        if current is None:
            return
        if current.state is S.COPY_SEGMENT_STARTED:
            _LOG.info(
                "forgetting upload %s of %s (COPY_SEGMENT_STARTED): its key %s now holds %s "
                "(an upload retried under the same leader epoch supersedes it)",
                segment_id.id,
                tip,
                key,
                because,
            )
        else:
            _LOG.warning(
                "forgetting segment %s of %s in state %s: its last key %s was overwritten by %s; "
                "a reader of the compacted topic will not see it, and its remote data is no "
                "longer referenced",
                segment_id.id,
                tip,
                current.state,
                key,
                because,
            )
        for state in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
            if current.state is S.DELETE_SEGMENT_STARTED and state is S.DELETE_SEGMENT_STARTED:
                continue
            self.store.handle(
                RemoteLogSegmentMetadataUpdate(
                    segment_id,
                    current.event_timestamp_ms,
                    current.custom_metadata,
                    state,
                    current.broker_id,
                )
            )

    # Writing -----------------------------------------------------------------------------------
    def plan_write(self, event: RemoteLogMetadata, *, tombstones: bool) -> PlannedWrite:
        """The records that publish ``event``; see the module docstring. Raises
        ``InvalidArgumentError`` for an add not in COPY_SEGMENT_STARTED or an update to it,
        ``IllegalStateError`` for a partition not loaded here and
        ``RemoteResourceNotFoundException`` for an update of a segment the cache does not know."""
        tip = event.topic_id_partition
        if isinstance(event, RemoteLogSegmentMetadata):
            write_checks.check_add(event)
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            write_checks.check_update(event)
        audit = serde.serialize(event)
        with self._lock:
            part = self._parts.get(tip)
            if part is None:
                raise IllegalStateError(f"{tip} is not loaded by this compacted RLMM")
            if isinstance(event, RemotePartitionDeleteMetadata):
                return self._plan_partition_delete(tip, part, event, audit, tombstones)
            if isinstance(event, RemoteLogSegmentMetadata):
                epoch = event.broker_leader_epoch
                if epoch is None:
                    epoch = _epoch_of(event)
                key = self._free_key(
                    tip,
                    part,
                    event.remote_log_segment_id,
                    MetadataKey.of(tip, event.end_offset, epoch),
                    superseding=True,
                )
                value = ProjectionValue(event, epoch)
                return PlannedWrite(key, encode_value(value), audit)
            return self._plan_update(tip, part, event, audit, tombstones)

    def plan_history_marker(
        self,
        segment: RemoteLogSegmentMetadata,
        deletion: RemoteLogSegmentMetadataUpdate,
        highest: tuple[tuple[int, int], ...],
    ) -> PlannedWrite:
        """The keyed DELETE_SEGMENT_FINISHED of a segment the cache no longer holds (``segment``
        its metadata when its deletion started, ``deletion`` the event that finished it), as a
        displacement marker alone: a reader replays the segment's whole history from it (add,
        COPY_SEGMENT_FINISHED against the epochs' highest offsets ``highest``, what
        ``highest_offsets_at_finish`` said before the deletion, then the deletion).
        For a migration, whose history deleted a copy that displaced copies still finished.
        ``IllegalStateError`` for a partition not loaded; ``InvalidArgumentError`` for a
        deletion of another segment or not DELETE_SEGMENT_FINISHED."""
        tip = segment.topic_id_partition
        segment_id = segment.remote_log_segment_id
        if deletion.remote_log_segment_id != segment_id or deletion.state is not (
            S.DELETE_SEGMENT_FINISHED
        ):
            raise InvalidArgumentError(
                f"a history marker of segment {segment_id} needs its DELETE_SEGMENT_FINISHED, "
                f"not {deletion.state} of {deletion.remote_log_segment_id}"
            )
        with self._lock:
            part = self._parts.get(tip)
            if part is None:
                raise IllegalStateError(f"{tip} is not loaded by this compacted RLMM")
            epoch = deletion.broker_leader_epoch
            if epoch is None:
                epoch = _epoch_of(segment)
            key = self._free_key(
                tip, part, segment_id, MetadataKey.of(tip, segment.end_offset, epoch)
            )
            value = ProjectionValue(
                replace(deletion, broker_leader_epoch=epoch),
                epoch,
                segment.end_offset,
                replace(segment, state=S.COPY_SEGMENT_STARTED, broker_leader_epoch=None),
                True,
                highest,
            )
            return PlannedWrite(key, encode_value(value), serde.serialize(deletion))

    def highest_offsets_at_finish(
        self, topic_id_partition: TopicIdPartition, segment_id: RemoteLogSegmentId
    ) -> tuple[tuple[int, int], ...]:
        """``EpochHighestOffsets`` of a finished (or deleting) segment: its leader epochs
        that had copied past it when it finished, with their highest offsets then."""
        with self._lock:
            part = self._parts.get(topic_id_partition)
            return () if part is None else part.highest.get(segment_id, ())

    def _plan_update(
        self,
        tip: TopicIdPartition,
        part: _Partition,
        event: RemoteLogSegmentMetadataUpdate,
        audit: bytes,
        tombstones: bool,
    ) -> PlannedWrite:
        segment_id = event.remote_log_segment_id
        current = self.store.peek_segment(tip, segment_id)
        if current is None:
            raise write_checks.unknown_segment(segment_id)
        last = part.last_key.get(segment_id)
        epoch = event.broker_leader_epoch
        if epoch is None:
            epoch = last.broker_leader_epoch if last is not None else _epoch_of(current)
        key = MetadataKey.of(tip, current.end_offset, epoch)
        if not RemoteLogSegmentState.is_valid_transition(current.state, event.state):
            return self._plan_invalid(
                tip, part, event, current=current, key=key, audit=audit, tombstones=tombstones
            )
        if last is not None and self._holds_other_live(tip, part, key, segment_id):
            _LOG.info(
                "the event of segment %s goes to its own key %s: %s describes another live segment",
                segment_id.id,
                last,
                key,
            )
            key = last
        copy_finished = event.state in _DELETES and (
            segment_id in part.finished or current.state is _FINISHED
        )
        keep = None
        marker = False
        if tombstones and event.state is S.DELETE_SEGMENT_FINISHED:
            # Tombstoned in this write unless the deletion is a displacement marker: then its
            # FINISHED stays where it is.
            marker = copy_finished and self._displacer(tip, part, current, unknown=False)
            if marker:
                keep = self._finished_key(tip, part, current, key, always=True)
        elif event.state in _DELETES:
            keep = self._finished_key(tip, part, current, key)
        if keep is not None and last is not None and last != keep:
            key = last
        key = self._free_key(tip, part, segment_id, key, keep=keep)
        add = replace(current, state=S.COPY_SEGMENT_STARTED, broker_leader_epoch=None)
        if event.state is _FINISHED and current.create_with_updates(event) != current:
            highest = self._copied_past(tip, current)  # what this FINISHED will find
        elif event.state is _FINISHED or copy_finished:
            # A restatement (migration) or a deletion: what the segment's FINISHED found.
            highest = part.highest.get(segment_id, ())
        else:
            highest = ()
        value = ProjectionValue(
            replace(event, broker_leader_epoch=epoch),
            epoch,
            current.end_offset,
            add,
            copy_finished,
            highest,
        )
        dead: tuple[MetadataKey, ...] = ()
        if tombstones and event.state is S.DELETE_SEGMENT_FINISHED:
            dead = self._obsolete(tip, part, current, key, epoch=epoch, marker=marker)
        return PlannedWrite(key, encode_value(value), audit, dead)

    def _obsolete(
        self,
        tip: TopicIdPartition,
        part: _Partition,
        segment: RemoteLogSegmentMetadata,
        key: MetadataKey,
        *,
        epoch: int,
        marker: bool,
    ) -> tuple[MetadataKey, ...]:
        """The tombstones of ``segment``'s DELETE_SEGMENT_FINISHED written under ``key`` by
        the leader of ``epoch``: ``key``, the segment's other keys, and the keys of its end
        offset with an epoch up to ``epoch`` that describe a segment no longer in the cache;
        but for the keys of displacement markers (``marker``: this deletion is one, ``key``
        and the keys holding its FINISHED stay; see the module docstring)."""
        segment_id = segment.remote_log_segment_id
        if marker:
            _LOG.info(
                "the DELETE_SEGMENT_FINISHED of segment %s of %s stays under %s, with its "
                "FINISHED: copies it displaced are still finished",
                segment_id.id,
                tip,
                key,
            )
        own = set(part.refs.get(segment_id, ()))
        dead = {key, *own}
        if marker:
            dead.discard(key)
            dead.difference_update(k for k in own if part.keys[k].state is _FINISHED)
        kept: dict[RemoteLogSegmentId, set[MetadataKey]] = {}
        for k in part.by_end.get(segment.end_offset, ()):
            described = part.keys[k].segment_id
            if described is None or described == segment_id:
                if described is not None and k.broker_leader_epoch <= epoch and k not in own:
                    dead.add(k)  # a bare update of the segment
                continue
            if self.store.peek_segment(tip, described) is not None:
                continue
            if described not in kept:
                kept[described] = self._marker_keys(tip, part, described)
            if k in kept[described]:
                continue
            # Keys of a marker no longer needed go under any epoch (a cleaned copy's key may be
            # above the deleting leader's).
            if k.broker_leader_epoch <= epoch or self._death_key(part, described) is not None:
                dead.add(k)
        return tuple(sorted(dead))

    def _plan_invalid(
        self,
        tip: TopicIdPartition,
        part: _Partition,
        event: RemoteLogSegmentMetadataUpdate,
        *,
        current: RemoteLogSegmentMetadata,
        key: MetadataKey,
        audit: bytes,
        tombstones: bool,
    ) -> PlannedWrite:
        """An update every reader drops (an invalid transition): written bare under a key that
        describes no live segment, so that it changes no key's meaning; tombstoned at once at
        level 1."""
        epoch = key.broker_leader_epoch
        spare = self._free_key(tip, part, None, key)
        _LOG.warning(
            "invalid transition %s -> %s of segment %s of %s: the event is written (the audit "
            "topic keeps it, every reader drops it), its projection record bare under %s",
            current.state,
            event.state,
            event.remote_log_segment_id.id,
            tip,
            spare,
        )
        value = ProjectionValue(replace(event, broker_leader_epoch=epoch), epoch)
        return PlannedWrite(spare, encode_value(value), audit, (spare,) if tombstones else ())

    def _finished_key(
        self,
        tip: TopicIdPartition,
        part: _Partition,
        segment: RemoteLogSegmentMetadata,
        key: MetadataKey,
        *,
        always: bool = False,
    ) -> MetadataKey | None:
        """``key`` when it holds ``segment``'s COPY_SEGMENT_FINISHED and another copy overlaps
        the segment, or the segment displaced a copy still finished (``_displacer``), or
        ``always``: a deletion must not overwrite it then.

        A reader of the compacted topic replays a key's history at the position of its latest
        value. A finished segment's deletion written over its FINISHED moves that FINISHED
        after the copies that finished since, and Kafka's cache routes a range to the copy that
        finished last: the replayed FINISHED would take the range from a copy that took it from
        this one (a duplicate upload after a leadership change, a cleaned copy), and the
        deletion would then leave it served by nothing. Keeping the FINISHED where it was keeps
        the order of the copies. Without an overlapping copy nothing can be displaced, and the
        deletion overwrites it (``CopyFinished`` replays it). Overlap: a read of the first or
        last offset of one of the segment's epochs served by another segment; when the cache
        cannot answer yet, assumed.
        """
        entry = part.keys.get(key)
        segment_id = segment.remote_log_segment_id
        if (
            entry is None
            or entry.segment_id != segment_id
            or entry.state is not _FINISHED
            or key not in part.refs.get(segment_id, ())
        ):
            return None
        if always:
            return key
        try:
            for epoch, (start, end) in segment_epoch_ranges(segment).items():
                for offset in (start, end):
                    served = self.store.remote_log_segment_metadata(tip, epoch, offset)
                    if served is not None and served.remote_log_segment_id != segment_id:
                        return key
        except RemoteStorageException:  # not initialized: keep it, the safe choice
            return key
        return key if self._displacer(tip, part, segment, unknown=True) else None

    def _plan_partition_delete(
        self,
        tip: TopicIdPartition,
        part: _Partition,
        event: RemotePartitionDeleteMetadata,
        audit: bytes,
        tombstones: bool,
    ) -> PlannedWrite:
        previous = part.delete_key
        segment_keys = [k for k, e in part.keys.items() if e.segment_id is not None]
        end = event.end_offset
        if end is None:
            if previous is not None:
                end = previous.end_offset
            else:
                end = max((k.end_offset for k in segment_keys), default=-2) + 1
        epoch = event.broker_leader_epoch
        if epoch is None:
            if previous is not None:
                epoch = previous.broker_leader_epoch
            else:
                epoch = max((k.broker_leader_epoch for k in part.keys), default=0)
        key = MetadataKey.of(tip, end, epoch)
        value = ProjectionValue(
            replace(event, broker_leader_epoch=epoch, end_offset=end), epoch, end
        )
        dead: set[MetadataKey] = set()
        if tombstones:
            if previous is not None and previous != key:
                dead.add(previous)
            if event.state is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                dead.update(segment_keys)
            dead.discard(key)
        return PlannedWrite(key, encode_value(value), audit, tuple(sorted(dead)))

    def _holds_other_live(
        self,
        tip: TopicIdPartition,
        part: _Partition,
        key: MetadataKey,
        segment_id: RemoteLogSegmentId | None,
        *,
        superseding: bool = False,
    ) -> bool:
        """Whether writing ``key`` would change what the projection says about a segment other
        than ``segment_id`` (None: about any segment): the key describes another live segment,
        or the death (DELETE_SEGMENT_FINISHED) of a segment other keys still describe alive
        (at level 0 nothing tombstones those: overwriting the death would bring it back).
        ``superseding``: an add may take the key of a COPY_SEGMENT_STARTED upload (a failed
        attempt under the same epoch, seed scenario 3); an update never does (it may be the
        current leader's upload in progress)."""
        entry = part.keys.get(key)
        if entry is None:
            return False
        if entry.segment_id is None:
            return True  # a partition delete marker (an end offset of the same log: unlikely)
        if entry.segment_id == segment_id:
            return False
        refs = part.refs.get(entry.segment_id, set())
        if key not in refs:
            return False  # a bare update's key describes nothing
        other = self.store.peek_segment(tip, entry.segment_id)
        if other is None:
            return len(refs) > 1 or key in self._marker_keys(tip, part, entry.segment_id)
        return not (
            superseding
            and other.state is S.COPY_SEGMENT_STARTED
            and entry.segment_id not in part.finished
        )

    def _free_key(
        self,
        tip: TopicIdPartition,
        part: _Partition,
        segment_id: RemoteLogSegmentId | None,
        key: MetadataKey,
        *,
        superseding: bool = False,
        keep: MetadataKey | None = None,
    ) -> MetadataKey:
        """``key``, or when it describes another live segment (or is ``keep``), the nearest free
        key of the same end offset (lower epochs first). ``superseding`` applies to ``key``
        only: a relocated add never takes the key of an upload of another epoch (an orphan that
        is still live)."""
        if key != keep and not self._holds_other_live(
            tip, part, key, segment_id, superseding=superseding
        ):
            return key
        epoch = key.broker_leader_epoch
        candidates: Iterable[int] = (
            *range(epoch - 1, max(-1, epoch - _RELOCATION_SPAN), -1),
            *range(epoch + 1, epoch + _RELOCATION_SPAN),
        )
        for candidate in candidates:
            other = MetadataKey.of(tip, key.end_offset, candidate)
            if other != keep and not self._holds_other_live(tip, part, other, segment_id):
                _LOG.info(
                    "an event of %s is written under %s: %s %s",
                    tip if segment_id is None else f"segment {segment_id.id} of {tip}",
                    other,
                    key,
                    "keeps its FINISHED" if key == keep else "describes another live segment",
                )
                return other
        raise IllegalStateError(f"no free key for segment {segment_id} of {tip} near {key}")

    # Displacement markers -----------------------------------------------------------------------
    def _death_key(self, part: _Partition, segment_id: RemoteLogSegmentId) -> MetadataKey | None:
        """The key holding the segment's DELETE_SEGMENT_FINISHED (with its add record and
        ``CopyFinished``), if any."""
        for key in part.refs.get(segment_id, ()):
            if key in part.deaths:
                return key
        return None

    def _finish_positions(self, part: _Partition, segment_id: RemoteLogSegmentId) -> list[int]:
        """Where a reader of the compacted topic applies the segment's COPY_SEGMENT_FINISHED:
        at each key holding it; without one, at the first of its deletion's keys when their
        values say ``CopyFinished`` (the catch-up)."""
        keys = part.refs.get(segment_id, ())
        finished = [part.positions[k] for k in keys if part.keys[k].state is _FINISHED]
        if finished:
            return finished
        if segment_id in part.finished or any(k in part.deaths for k in keys):
            deletes = [part.positions[k] for k in keys if part.keys[k].state in _DELETES]
            return [min(deletes)] if deletes else []
        return []

    def _marker_keys(
        self, tip: TopicIdPartition, part: _Partition, segment_id: RemoteLogSegmentId
    ) -> set[MetadataKey]:
        """For a segment no longer in the cache: the keys of its displacement marker while it
        is needed (its DELETE_SEGMENT_FINISHED and the keys holding its FINISHED); else none."""
        death = self._death_key(part, segment_id)
        if death is None:
            return set()
        finished = [k for k in part.refs[segment_id] if part.keys[k].state is _FINISHED]
        positions = [part.positions[k] for k in finished] or [part.positions[death]]
        if self._displaces(
            tip, part, segment_id, part.deaths[death], positions, single=not finished, unknown=True
        ):
            return {death, *finished}
        return set()

    def _displacer(
        self,
        tip: TopicIdPartition,
        part: _Partition,
        segment: RemoteLogSegmentMetadata,
        *,
        unknown: bool,
    ) -> bool:
        """Whether ``segment`` (in the cache, finished or being deleted) displaced a copy that
        is still finished: its deletion must stay, with its FINISHED (``_displaces``)."""
        segment_id = segment.remote_log_segment_id
        positions = self._finish_positions(part, segment_id)
        return self._displaces(
            tip,
            part,
            segment_id,
            _Span.of(segment),
            positions or [_NEWEST],
            single=not positions,
            unknown=unknown,
        )

    def _displaces(
        self,
        tip: TopicIdPartition,
        part: _Partition,
        segment_id: RemoteLogSegmentId,
        span: _Span,
        finish: list[int],
        *,
        single: bool,
        unknown: bool,
    ) -> bool:
        """Whether a reader of the compacted topic needs the segment's history (its FINISHED
        applied at the ``finish`` positions, its deletion) to route the reads as Kafka's cache
        does; ``unknown`` when the cache cannot answer yet.

        Kafka's cache routes a range to the copy that finished last and never routes a copy it
        displaced again; a reader that never saw the displacing copy would route the range to
        the displaced one. Needed while a finished copy overlapping the segment in one of its
        leader epochs is not routed there (the cache serves its first offset from another
        segment or nothing) and this segment displaced it: its FINISHED is the first a reader
        applies after the copy's, among the segments starting where the copy starts in that
        epoch. ``single``: the segment's FINISHED is applied from its deletion's value (no key
        holds it any more): never needed when that replay would take a range from a copy the
        cache routes that a reader finishes before it (``_replay_safe``)."""
        try:
            if single and not self._replay_safe(tip, part, span, at=min(finish)):
                return False
            ranges = span.ranges()
            for copy in self._live_near(tip, part, span.start, span.end, but=segment_id):
                copy_id = copy.remote_log_segment_id
                if copy.state is not _FINISHED:
                    continue
                after = max(self._finish_positions(part, copy_id), default=-1)
                mine = [p for p in finish if p > after]
                if not mine:
                    continue  # it finished after the segment: the segment did not displace it
                for epoch, (start, last) in segment_epoch_ranges(copy).items():
                    theirs = ranges.get(epoch)
                    if theirs is None or last < theirs[0] or start > theirs[1]:
                        continue
                    served = self.store.remote_log_segment_metadata(tip, epoch, start)
                    if served is not None and served.remote_log_segment_id == copy_id:
                        continue  # routed
                    between = (after, min(mine))
                    if not self._displaced_between(tip, part, (epoch, start), between, copy_id):
                        return True
            return False
        except RemoteStorageException:  # not initialized
            return unknown

    def _displaced_between(
        self,
        tip: TopicIdPartition,
        part: _Partition,
        at: tuple[int, int],
        between: tuple[int, int],
        copy_id: RemoteLogSegmentId,
    ) -> bool:
        """Whether a reader applies, strictly ``between`` two positions, the FINISHED of a
        segment (live, or deleted with a marker that can be replayed) whose leader epoch
        starts where the copy ``copy_id`` does (``at``): that one displaced the copy first."""
        epoch, start = at
        low, high = between
        for other in self._live_near(tip, part, start, start):
            other_id = other.remote_log_segment_id
            if (
                other_id != copy_id
                and segment_epoch_ranges(other).get(epoch, (None,))[0] == start
                and any(low < p < high for p in self._finish_positions(part, other_id))
            ):
                return True
        for key in part.ending(start, start + part.widest):
            span = part.deaths.get(key)
            dead_id = part.keys[key].segment_id
            if span is None or dead_id is None or span.ranges().get(epoch, (None,))[0] != start:
                continue
            positions = self._finish_positions(part, dead_id)
            if any(low < p < high for p in positions) and (
                any(part.keys[k].state is _FINISHED for k in part.refs[dead_id])
                or self._replay_safe(tip, part, span, at=part.positions[key])
            ):
                return True
        return False

    def _replay_safe(
        self, tip: TopicIdPartition, part: _Partition, span: _Span, *, at: int
    ) -> bool:
        """Whether replaying the segment of ``span`` (added, finished, deleted) at position
        ``at`` takes no range from a copy the cache routes: Kafka's cache replaces the segment
        mapped at the start offset of each of its epochs, and drops the later ones of the epoch
        when it reaches the epoch's highest offset. A copy a reader finishes after ``at`` takes
        its range back whatever the replay did (the replayed segment is gone by then)."""
        ranges = span.ranges()
        for copy in self._live_near(tip, part, span.start, span.end):
            if copy.state is not _FINISHED:
                continue
            copy_id = copy.remote_log_segment_id
            if max(self._finish_positions(part, copy_id), default=-1) > at:
                continue
            for epoch, (start, _) in segment_epoch_ranges(copy).items():
                theirs = ranges.get(epoch)
                if theirs is None or not theirs[0] <= start <= theirs[1]:
                    continue
                served = self.store.remote_log_segment_metadata(tip, epoch, start)
                if served is not None and served.remote_log_segment_id == copy_id:
                    return False
        return True

    def _live_near(
        self,
        tip: TopicIdPartition,
        part: _Partition,
        first: int,
        last: int,
        *,
        but: RemoteLogSegmentId | None = None,
    ) -> list[RemoteLogSegmentMetadata]:
        """The segments in the cache (``but`` one) that a key describes and whose offsets
        meet [``first``, ``last``]: the keys of the end offsets from ``first`` to ``last``
        plus the longest segment's length."""
        seen: set[RemoteLogSegmentId] = set()
        found = []
        for key in part.ending(first, last + part.widest):
            segment_id = part.keys[key].segment_id
            if segment_id is None or segment_id == but or segment_id in seen:
                continue
            seen.add(segment_id)
            start = part.starts.get(segment_id)
            if start is None or start > last:
                continue
            segment = self.store.peek_segment(tip, segment_id)
            if segment is not None:
                found.append(segment)
        return found

    # Inspection --------------------------------------------------------------------------------
    def describes(self, topic_id_partition: TopicIdPartition, key: MetadataKey) -> bool:
        """Whether ``key``'s latest value describes its segment (an add, or an update carrying
        its add record): False for a bare update's key, a marker, or an unknown key."""
        with self._lock:
            part = self._parts.get(topic_id_partition)
            if part is None:
                return False
            entry = part.keys.get(key)
            return (
                entry is not None
                and entry.segment_id is not None
                and key in part.refs.get(entry.segment_id, ())
            )

    def orphan_keys(self, topic_id_partition: TopicIdPartition) -> list[MetadataKey]:
        """The keys the cleanup manager tombstones: every segment key of a partition whose
        deletion finished; otherwise the keys of segments no longer in the cache (deleted, or
        forgotten) but for displacement markers still needed, and the keys of bare updates
        (invalid transitions, which describe nothing). Sorted; empty for a partition not
        loaded."""
        tip = topic_id_partition
        with self._lock:
            part = self._parts.get(tip)
            if part is None:
                return []
            deleted = self._legacy.is_deleted(tip)
            kept: dict[RemoteLogSegmentId, set[MetadataKey]] = {}
            orphans = []
            for k, entry in part.keys.items():
                segment_id = entry.segment_id
                if segment_id is None:
                    continue
                if deleted or k not in part.refs.get(segment_id, ()):
                    orphans.append(k)
                elif self.store.peek_segment(tip, segment_id) is None:
                    if segment_id not in kept:
                        kept[segment_id] = self._marker_keys(tip, part, segment_id)
                    if k not in kept[segment_id]:
                        orphans.append(k)
            return sorted(orphans)

    def keys(self, topic_id_partition: TopicIdPartition) -> dict[MetadataKey, KeyEntry]:
        """A copy of the partition's current keys (tests, tools); empty if not loaded."""
        with self._lock:
            part = self._parts.get(topic_id_partition)
            return dict(part.keys) if part is not None else {}
