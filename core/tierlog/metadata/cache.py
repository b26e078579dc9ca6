"""RemoteLogMetadataCache: the in-memory view of one user partition's remote segments.

Semantics are Kafka's ``RemoteLogMetadataCache`` and ``RemoteLogLeaderEpochState``
(``storage/src/main/java/org/apache/kafka/server/log/remote/metadata/storage/``) to the letter,
including the corners that look like accidents, because every broker replaying the same
``__remote_log_metadata`` events must reach the same answers as a Kafka broker would:

- an invalid state transition is logged at ERROR and dropped, never raised;
- a COPY_SEGMENT_FINISHED segment displaces the later entries of an epoch only while
  ``highestLogOffset <= leaderEpochEndOffset`` (the loop runs all or nothing), and its ``put``
  silently replaces another segment mapped at the same start offset, which then vanishes from
  ``list_remote_log_segments(epoch)`` until it is deleted;
- ``offsetToId.remove(start, id)`` removes only a mapping to that very segment;
- unreferenced ids are tracked per epoch by id, so re-adding a COPY_SEGMENT_STARTED segment with
  different epochs leaves it listed under its old epochs, and once it is deleted those epochs
  raise ``RemoteResourceNotFoundException`` when listed (Kafka's dangling id), until the same id
  is added again.

Memory is the reason for the layout. A partition may hold millions of remote segments, and one
Python object graph per segment (dataclass, epoch dict, id, dict entries, a sorted map node)
costs well over 1 KB. Here a segment is one row in ``array`` columns (about 75 bytes), its leader
epochs live in a shared pool, the id-to-row index is an open-addressing table of 4-byte ints, and
each epoch's ``offsetToId`` is a pair of sorted ``array`` columns searched with ``bisect``.
``RemoteLogSegmentMetadata`` objects are built only when a lookup returns them. Rows of
DELETE_SEGMENT_FINISHED segments are reused; a per-row generation number lets a long listing
notice that a row it has not reached yet now belongs to another segment.

Cleaned segments (tierlog's compacted topics in tiered storage, KIP-1272) are the one addition.
A segment the log cleaner rewrote is uploaded under a new id with the same offsets and leader
epochs as the segment it replaces, and its metadata carries the cleaner-offset vector (the
offset each leader epoch's cleaner reached). Kafka's rule (the last COPY_SEGMENT_FINISHED
mapped at a start offset wins) would let a zombie leader's late upload win; here a cleaned
segment takes over its offsets only if it is at least as new (its vector's top epoch, then the
cleaner offset there) as the segment it replaces, and valid: its vector claims for no earlier
epoch more than the newest epoch's vector resolved for it, whatever order the events came in.
When a newer epoch's vector appears, segments routed earlier that it invalidates are routed back
to the best valid segment of the same offsets. A cleaned segment not routed leaves its epochs'
lists, as a segment Kafka's ``put`` displaced; segments without a vector follow Kafka exactly.

``remote_log_size(epoch)`` (KIP-852) is a running sum per epoch, updated at every change of
membership of the epoch's list, so it costs the same for ten segments or ten million.
"""

from __future__ import annotations

import logging
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from typing import Final, NamedTuple

from tierlog.spi import (
    CustomMetadata,
    InvalidArgumentError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteResourceNotFoundException,
    TopicIdPartition,
    Uuid,
)

__all__ = ["LeaderEpochStateView", "RemoteLogMetadataCache"]

_LOG = logging.getLogger(__name__)

_M64: Final = (1 << 64) - 1
_FIB: Final = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: Fibonacci hashing of the id table
_I64_MIN: Final = -(1 << 63)
_I64_MAX: Final = (1 << 63) - 1
_I32_MIN: Final = -(1 << 31)
_I32_MAX: Final = (1 << 31) - 1

_FREE: Final = -1  # state column value of a reusable row
_STARTED: Final = RemoteLogSegmentState.COPY_SEGMENT_STARTED
_FINISHED: Final = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_DELETE_STARTED: Final = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
_DELETE_FINISHED: Final = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
_STATES: Final = tuple(sorted(RemoteLogSegmentState, key=int))  # indexed by the byte id

_CHUNK: Final = 256
"""Rows materialized per lock acquisition by a listing: long enough to amortize the lock, short
enough (about a millisecond) not to stall the thread applying metadata events."""

_LOOKED_UP_MAX: Final = 64
"""Lookup results a cache keeps built (per partition): more than the segments consumers read
at once, few enough to leave the columnar store's memory footprint as it is."""

_COMPACT_MIN: Final = 4096
"""An epoch's map drops its dead prefix (deleted front entries) once it is at least this long
and at least half of the columns."""


class LeaderEpochStateView(NamedTuple):
    """A snapshot of one leader epoch's bookkeeping (Kafka's ``RemoteLogLeaderEpochState``).

    For tests, metrics and debugging: ``offset_to_id`` is the epoch's ``offsetToId`` in key
    order, ``unreferenced_ids`` its ``unreferencedSegmentIds`` (including ids whose segment is
    gone), ``size_in_bytes`` and ``segment_count`` cover exactly what
    ``list_remote_log_segments(epoch)`` returns.
    """

    offset_to_id: tuple[tuple[int, RemoteLogSegmentId], ...]
    unreferenced_ids: frozenset[RemoteLogSegmentId]
    highest_log_offset: int | None
    size_in_bytes: int
    segment_count: int


class _EpochState:
    """One leader epoch: ``offsetToId`` as sorted parallel columns, plus the unreferenced set.

    ``keys[head:]``/``slots[head:]`` are the live entries; ``head`` grows when the first entry is
    removed (retention deletes from the front), so that case is O(1) instead of a memmove, and
    the dead prefix is cut off in bulk (amortized O(1)). ``unref`` holds rows (not ids) of live
    segments; ``ghosts`` holds the ids (as 128-bit ints) of unreferenced segments that no longer
    exist, which make Kafka's listing of the epoch fail. ``size``/``count`` sum over the members
    of the epoch's list: the rows in the map and in ``unref``.
    """

    __slots__ = ("count", "ghosts", "head", "highest", "keys", "size", "slots", "unref")

    def __init__(self) -> None:
        self.keys = array("q")
        self.slots = array("i")
        self.head = 0
        self.unref: set[int] | None = None
        self.ghosts: set[int] | None = None
        self.highest: int | None = None
        self.size = 0
        self.count = 0

    def map_len(self) -> int:
        return len(self.keys) - self.head

    def floor(self, offset: int) -> int:
        """The row mapped at the greatest key <= ``offset``, or -1 (``floorEntry``)."""
        i = bisect_right(self.keys, offset, self.head) - 1
        return self.slots[i] if i >= self.head else -1

    def maps_to(self, key: int, slot: int) -> bool:
        keys = self.keys
        i = bisect_left(keys, key, self.head)
        return i < len(keys) and keys[i] == key and self.slots[i] == slot

    def put(self, key: int, slot: int) -> int:
        """``offsetToId.put``: returns the row it replaced at ``key``, or -1."""
        keys = self.keys
        head = self.head
        if len(keys) == head or key > keys[-1]:
            keys.append(key)
            self.slots.append(slot)
            return -1
        i = bisect_left(keys, key, head)
        if keys[i] == key:
            old = self.slots[i]
            self.slots[i] = slot
            return old
        if i == head and head > 0:  # reuse the dead prefix: no memmove
            head -= 1
            keys[head] = key
            self.slots[head] = slot
            self.head = head
        else:
            keys.insert(i, key)
            self.slots.insert(i, slot)
        return -1

    def pop_last(self) -> int:
        self.keys.pop()
        slot = self.slots.pop()
        if len(self.keys) == self.head:
            self._clear()
        return slot

    def remove(self, key: int, slot: int) -> bool:
        """``offsetToId.remove(key, slot)``: only if ``key`` maps to this very row."""
        keys = self.keys
        head = self.head
        n = len(keys)
        i = bisect_left(keys, key, head)
        if i == n or keys[i] != key or self.slots[i] != slot:
            return False
        if i == n - 1:
            keys.pop()
            self.slots.pop()
        elif i == head:
            self.head = head = head + 1
            if head >= _COMPACT_MIN and 2 * head >= n:
                del keys[:head]
                del self.slots[:head]
                self.head = 0
        else:
            del keys[i]
            del self.slots[i]
        if len(keys) == self.head:
            self._clear()
        return True

    def _clear(self) -> None:
        self.keys = array("q")
        self.slots = array("i")
        self.head = 0

    def unref_add(self, slot: int) -> None:
        if self.unref is None:
            self.unref = {slot}
        else:
            self.unref.add(slot)

    def unref_discard(self, slot: int) -> bool:
        unref = self.unref
        if unref is None or slot not in unref:
            return False
        unref.remove(slot)
        if not unref:
            self.unref = None
        return True

    def in_unref(self, slot: int) -> bool:
        return self.unref is not None and slot in self.unref


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise InvalidArgumentError(f"{name} = {value} is outside [{low}, {high}]")


_VALID_TRANSITIONS: Final = frozenset(
    (src, dst)
    for src in (None, *RemoteLogSegmentState)
    for dst in RemoteLogSegmentState
    if RemoteLogSegmentState.is_valid_transition(src, dst)
)
"""Kafka's ``isValidTransition`` as a set of (src, dst) pairs: one hash lookup per event."""


def _check_transition(
    existing: RemoteLogSegmentState | None,
    target: RemoteLogSegmentState,
    segment_id: RemoteLogSegmentId,
) -> bool:
    if (existing, target) in _VALID_TRANSITIONS:
        return True
    _LOG.error(
        "Current state: %s can not be transitioned to target state: %s, segmentId: %s. "
        "Dropping the event",
        "null" if existing is None else existing.name,
        target.name,
        segment_id,
    )
    return False


class RemoteLogMetadataCache:
    """The remote segments of one user partition, by id, by leader epoch and by offset.

    Visibility by state, as Kafka's Javadoc table:

    ===============================  =======  ========  ============  =============
    lookup                           COPY_    COPY_     DELETE_       DELETE_
                                     STARTED  FINISHED  STARTED       FINISHED
    ===============================  =======  ========  ============  =============
    remote_log_segment_metadata      no       yes       no            no
    list_remote_log_segments(epoch)  yes      yes       yes           no
    list_all_remote_log_segments     yes      yes       yes           no
    ===============================  =======  ========  ============  =============

    ``highest_offset_for_epoch`` counts COPY_SEGMENT_FINISHED segments and never decreases.

    Thread safety: every method takes one lock for a short time, so the thread applying
    metadata events and reader threads can share a cache. Listings of more than a few hundred
    segments are weakly consistent, like Java's concurrent collections: each segment is built
    when the iterator reaches it (with its state at that time), and a segment deleted
    (DELETE_SEGMENT_FINISHED) meanwhile is skipped; shorter listings are snapshots, as in Kafka.

    ``topic_id_partition`` is the partition every segment belongs to; left ``None``, the first
    added segment sets it. A segment of another partition is refused on add and unknown on update
    (Kafka keys its map by ``RemoteLogSegmentId``, which includes the partition).
    """

    def __init__(self, topic_id_partition: TopicIdPartition | None = None) -> None:
        self._tip = topic_id_partition
        self._lock = threading.Lock()
        self._initialized = threading.Event()
        self.initialized = False  # is_initialized() without two calls, for the read path
        # Segment rows.
        self._start = array("q")
        self._end = array("q")
        self._max_ts = array("q")
        self._event_ts = array("q")
        self._size = array("q")
        self._hi = array("Q")
        self._lo = array("Q")
        self._broker = array("i")
        self._state = array("b")
        self._txn = array("B")
        self._gen = array("I")
        self._ep_at = array("I")
        self._ep_n = array("I")
        self._custom: dict[int, CustomMetadata] = {}
        # Cleaner-offset vectors of rows the log cleaner wrote (compacted topics, KIP-1272), and
        # the resolved vector: what the newest leader epoch's cleaner says each earlier epoch's
        # cleaner reached (see "Cleaned segments" in the module docstring).
        self._cleaner: dict[int, dict[int, int]] = {}
        self._resolved: tuple[int, dict[int, int]] | None = None
        # Rows recently returned by the offset lookup, as built (the objects are immutable): a
        # catch-up read asks for the same segment once per fetch. Any write to a row drops it.
        self._looked_up: dict[int, RemoteLogSegmentMetadata] = {}
        self._free_rows = array("i")
        self._live = 0
        # Leader epochs of all rows: (epoch, start offset) pairs, a region per row.
        self._pool_epoch = array("i")
        self._pool_offset = array("q")
        self._pool_free: dict[int, array[int]] = {}
        # Id -> row: open addressing with linear probing, entries are row + 1 (0 = empty).
        self._bits = 4
        self._table = array("i", bytes(4 << self._bits))
        # Leader epochs.
        self._epochs: dict[int, _EpochState] = {}
        # Rows unreferenced in epochs that are not (any longer) among their own epochs, and ids
        # of deleted segments still unreferenced somewhere. Both stay empty unless a
        # COPY_SEGMENT_STARTED segment is added again with different leader epochs.
        self._extra_epochs: dict[int, set[int]] = {}
        self._ghost_epochs: dict[int, set[int]] = {}

    # Initialization -----------------------------------------------------------------------------
    def mark_initialized(self) -> None:
        """The partition's metadata has been replayed up to the end: reads may be served."""
        self.initialized = True
        self._initialized.set()

    def is_initialized(self) -> bool:
        return self._initialized.is_set()

    def await_initialized(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for ``mark_initialized``; whether it happened."""
        return self._initialized.wait(timeout)

    @property
    def topic_id_partition(self) -> TopicIdPartition | None:
        return self._tip

    # Events -------------------------------------------------------------------------------------
    def add_copy_in_progress_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Track a segment whose copy started: listed under its epochs, not yet readable.

        Raises ``InvalidArgumentError`` unless the state is COPY_SEGMENT_STARTED. Adding a known
        segment again is valid only while it is COPY_SEGMENT_STARTED (it replaces the stored
        metadata); otherwise the event is logged and dropped, as Kafka does.
        """
        _LOG.debug("Adding to in-progress state: [%s]", metadata)
        if metadata.state is not _STARTED:
            raise InvalidArgumentError(
                f"Given remoteLogSegmentMetadata:{metadata} should have state as "
                f"{_STARTED.name} but it contains state as: {metadata.state.name}"
            )
        segment_id = metadata.remote_log_segment_id
        leader_epochs = metadata.segment_leader_epochs
        epochs = list(leader_epochs.items())
        if not (
            _I64_MIN <= metadata.max_timestamp_ms <= _I64_MAX
            and _I64_MIN <= metadata.event_timestamp_ms <= _I64_MAX
            and _I64_MIN <= metadata.segment_size_in_bytes <= _I64_MAX
            and metadata.end_offset <= _I64_MAX  # the model ensures 0 <= start <= end
            and _I32_MIN <= metadata.broker_id <= _I32_MAX
            and _I32_MIN <= min(leader_epochs) <= max(leader_epochs) <= _I32_MAX
            and _I64_MIN <= min(leader_epochs.values()) <= max(leader_epochs.values()) <= _I64_MAX
        ):
            self._check_values(metadata, epochs)
        uid = segment_id.id.int
        hi, lo = uid >> 64, uid & _M64
        with self._lock:
            self._bind(segment_id.topic_id_partition)
            slot = self._find(hi, lo)
            existing = None if slot < 0 else _STATES[self._state[slot]]
            if not _check_transition(existing, _STARTED, segment_id):
                return
            if slot < 0:
                self._add_new(hi, lo, uid, metadata, epochs)
            else:
                self._add_again(slot, metadata, epochs)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Apply a state change to a known segment.

        An unknown segment is dropped silently before ``mark_initialized`` (KAFKA-15632: the
        metadata topic's retention may have removed the segment's first event) and raises
        ``RemoteResourceNotFoundException`` after. An invalid transition is logged at ERROR and
        dropped. A (valid, i.e. self-) transition to COPY_SEGMENT_STARTED raises
        ``InvalidArgumentError``.
        """
        _LOG.debug("Updating remote log segment metadata: [%s]", update)
        segment_id = update.remote_log_segment_id
        target = update.state
        uid = segment_id.id.int
        with self._lock:
            slot = -1
            if self._tip is None or segment_id.topic_id_partition == self._tip:
                slot = self._find(uid >> 64, uid & _M64)
            if slot < 0:
                if not self._initialized.is_set():
                    _LOG.debug(
                        "Dropping the event: %s as the base-metadata about the segment was "
                        "already removed",
                        update,
                    )
                    return
                raise RemoteResourceNotFoundException(
                    f"No remote log segment metadata found for :{segment_id}"
                )
            if not _check_transition(_STATES[self._state[slot]], target, segment_id):
                return
            if target is _STARTED:
                raise InvalidArgumentError(
                    f"metadataUpdate: {update} with state {_STARTED.name} can not be updated"
                )
            if not (
                _I32_MIN <= update.broker_id <= _I32_MAX
                and _I64_MIN <= update.event_timestamp_ms <= _I64_MAX
            ):
                _check_range("brokerId", update.broker_id, _I32_MIN, _I32_MAX)
                _check_range("eventTimestampMs", update.event_timestamp_ms, _I64_MIN, _I64_MAX)
            if target is _FINISHED:
                if slot in self._cleaner:
                    self._on_cleaned_copy_finished(slot)
                else:
                    self._on_copy_finished(slot)
            elif target is _DELETE_STARTED:
                self._on_delete_started(slot)
            else:
                self._on_delete_finished(slot, uid)
                return
            self._looked_up.pop(slot, None)
            self._broker[slot] = update.broker_id
            self._event_ts[slot] = update.event_timestamp_ms
            self._state[slot] = target
            if update.custom_metadata is None:
                self._custom.pop(slot, None)
            else:
                self._custom[slot] = update.custom_metadata

    # Reads --------------------------------------------------------------------------------------
    def remote_log_segment_metadata(
        self, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` under ``leader_epoch``, or None.

        Kafka's ``floorEntry`` lookup: the segment mapped at the greatest epoch start offset <=
        ``offset``, provided ``offset`` is not past the end of that epoch within the segment.
        """
        with self._lock:
            slot = self._lookup(leader_epoch, offset)
            if slot < 0:
                return None
            found = self._looked_up.get(slot)
            if found is None:
                if len(self._looked_up) >= _LOOKED_UP_MAX:
                    self._looked_up.clear()
                found = self._looked_up[slot] = self._materialize(slot)
            return found

    def next_segment_with_txn_index(
        self, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """From the segment holding ``offset``, the first one with a non-empty transaction
        index, following segments within ``leader_epoch`` only (Kafka's loop).

        One difference: where Kafka's loop would never end (an epoch start offset past the
        segment's end makes the walk come back to an offset it has visited), this returns None.
        """
        seen: set[int] | None = None
        while True:
            # One lock hold per step: a long run of segments without aborted transactions
            # must not stall the thread applying events.
            with self._lock:
                slot = self._lookup(leader_epoch, offset)
                if slot < 0:
                    return None
                if not self._txn[slot]:  # the column holds txn_idx_empty
                    return self._materialize(slot)
                next_offset = self._end[slot] + 1
            if next_offset <= offset:  # only with epoch offsets outside their segment
                if seen is None:
                    seen = set()
                elif next_offset in seen:
                    return None
                seen.add(next_offset)
            offset = next_offset

    def list_remote_log_segments(self, leader_epoch: int) -> Iterator[RemoteLogSegmentMetadata]:
        """The segments of ``leader_epoch`` not yet DELETE_SEGMENT_FINISHED.

        Kafka's order: the referenced segments in epoch-offset order, and when there are
        unreferenced ones they are appended and the whole list is stably sorted by start offset.
        An unknown epoch gives nothing. Raises ``RemoteResourceNotFoundException`` if the epoch
        still references a segment that no longer exists (see the module docstring).
        """
        with self._lock:
            state = self._epochs.get(leader_epoch)
            if state is None:
                return iter(())
            self._check_no_ghost(state)
            rows: Sequence[int] = state.slots[state.head :]
            if state.unref:
                listed = rows.tolist() if isinstance(rows, array) else list(rows)
                listed.extend(state.unref)
                listed.sort(key=self._start.__getitem__)
                rows = listed
            if len(rows) <= _CHUNK:
                return iter([self._materialize(s) for s in rows])
            generations = array("I", self._gen)
        return self._iterate(rows, generations)

    def list_all_remote_log_segments(self) -> Iterator[RemoteLogSegmentMetadata]:
        """Every segment not yet DELETE_SEGMENT_FINISHED, in no particular order."""
        with self._lock:
            if self._live <= _CHUNK:
                return iter(
                    [
                        self._materialize(s)
                        for s in range(len(self._state))
                        if self._state[s] != _FREE
                    ]
                )
            generations = array("I", self._gen)
            rows = range(len(self._state))
        return self._iterate(rows, generations)

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        """The highest offset of ``leader_epoch`` in COPY_SEGMENT_FINISHED segments seen so far.

        It never decreases: deleting segments does not lower it. ``None`` if no segment of the
        epoch finished copying.
        """
        with self._lock:
            state = self._epochs.get(leader_epoch)
            return None if state is None else state.highest

    def raise_highest_offset_for_epoch(self, leader_epoch: int, offset: int) -> None:
        """Make ``highest_offset_for_epoch(leader_epoch)`` at least ``offset``.

        For a reader that replays a compacted history (tierlog's compacted RLMM): the epoch's
        highest copied offset decides how the next COPY_SEGMENT_FINISHED of the epoch displaces
        the segments mapped at or after its start (all of them while the highest offset is
        within the segment, else only the one at its start offset, silently). When compaction
        removed the finished segments that had raised it, the writer's record says what it
        was, and this restores it before that copy finishes. Never lowers it.
        """
        with self._lock:
            state = self._epoch(leader_epoch)
            if state.highest is None or offset > state.highest:
                state.highest = offset

    def remote_log_size(self, leader_epoch: int) -> int:
        """Total ``segment_size_in_bytes`` of ``list_remote_log_segments(leader_epoch)``.

        KIP-852's number, read from a running sum instead of a scan: copies and deletions in
        progress count, and a segment spanning several epochs counts in each. Raises
        ``RemoteResourceNotFoundException`` exactly when the listing would.
        """
        with self._lock:
            state = self._epochs.get(leader_epoch)
            if state is None:
                return 0
            self._check_no_ghost(state)
            return state.size

    def segment_metadata(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        """The stored metadata of a segment, whatever its state; None once it is
        DELETE_SEGMENT_FINISHED or if unknown. O(1): for writers that validate an event
        against the current state (Kafka's cache has no such read; its map has ``get``)."""
        if self._tip is not None and segment_id.topic_id_partition != self._tip:
            return None
        uid = segment_id.id.int
        with self._lock:
            slot = self._find(uid >> 64, uid & _M64)
            return None if slot < 0 else self._materialize(slot)

    def segment_count(self, leader_epoch: int | None = None) -> int:
        """How many segments ``list_remote_log_segments(leader_epoch)`` would return, or with
        no epoch, how many segments the cache holds (for metrics; O(1))."""
        with self._lock:
            if leader_epoch is None:
                return self._live
            state = self._epochs.get(leader_epoch)
            return 0 if state is None else state.count

    def leader_epochs(self) -> list[int]:
        """The leader epochs the cache has seen, ascending (Kafka never forgets one)."""
        with self._lock:
            return sorted(self._epochs)

    def leader_epoch_state(self, leader_epoch: int) -> LeaderEpochStateView | None:
        """A snapshot of one epoch's ``offsetToId``, unreferenced ids and counters."""
        with self._lock:
            state = self._epochs.get(leader_epoch)
            if state is None:
                return None
            offset_to_id = tuple(
                (state.keys[i], self._segment_id(state.slots[i]))
                for i in range(state.head, len(state.keys))
            )
            unreferenced = {self._segment_id(s) for s in state.unref or ()}
            unreferenced.update(self._id_of_int(g) for g in state.ghosts or ())
            return LeaderEpochStateView(
                offset_to_id, frozenset(unreferenced), state.highest, state.size, state.count
            )

    # Row storage --------------------------------------------------------------------------------
    def _bind(self, tip: TopicIdPartition) -> None:
        if self._tip is None:
            self._tip = tip
        elif tip != self._tip:
            raise InvalidArgumentError(
                f"segment of partition {tip} added to the cache of partition {self._tip}"
            )

    @staticmethod
    def _check_values(metadata: RemoteLogSegmentMetadata, epochs: list[tuple[int, int]]) -> None:
        """Refuse values the columns cannot hold, naming the first, before anything changes."""
        for name, value in (
            ("startOffset", metadata.start_offset),
            ("endOffset", metadata.end_offset),
            ("maxTimestampMs", metadata.max_timestamp_ms),
            ("eventTimestampMs", metadata.event_timestamp_ms),
            ("segmentSizeInBytes", metadata.segment_size_in_bytes),
        ):
            _check_range(name, value, _I64_MIN, _I64_MAX)
        _check_range("brokerId", metadata.broker_id, _I32_MIN, _I32_MAX)
        for epoch, offset in epochs:
            _check_range("leaderEpoch", epoch, _I32_MIN, _I32_MAX)
            _check_range("epoch start offset", offset, _I64_MIN, _I64_MAX)

    def _write_row(
        self, slot: int, hi: int, lo: int, m: RemoteLogSegmentMetadata, *, at: int, n: int
    ) -> int:
        """Store ``m`` in row ``slot`` (-1: a new row at the end); returns the row."""
        if slot < 0:
            slot = len(self._start)
            self._start.append(m.start_offset)
            self._end.append(m.end_offset)
            self._max_ts.append(m.max_timestamp_ms)
            self._event_ts.append(m.event_timestamp_ms)
            self._size.append(m.segment_size_in_bytes)
            self._hi.append(hi)
            self._lo.append(lo)
            self._broker.append(m.broker_id)
            self._state.append(_STARTED)
            self._txn.append(m.txn_idx_empty)
            self._gen.append(0)
            self._ep_at.append(at)
            self._ep_n.append(n)
        else:
            self._start[slot] = m.start_offset
            self._end[slot] = m.end_offset
            self._max_ts[slot] = m.max_timestamp_ms
            self._event_ts[slot] = m.event_timestamp_ms
            self._size[slot] = m.segment_size_in_bytes
            self._hi[slot] = hi
            self._lo[slot] = lo
            self._broker[slot] = m.broker_id
            self._state[slot] = _STARTED
            self._txn[slot] = m.txn_idx_empty
            self._ep_at[slot] = at
            self._ep_n[slot] = n
        if m.custom_metadata is None:
            self._custom.pop(slot, None)
        else:
            self._custom[slot] = m.custom_metadata
        if m.cleaner_offsets is None:
            self._cleaner.pop(slot, None)
        else:
            self._cleaner[slot] = dict(m.cleaner_offsets)
        self._looked_up.pop(slot, None)
        return slot

    def _pool_store(self, epochs: list[tuple[int, int]]) -> int:
        """Put a row's (epoch, start offset) pairs in the pool; returns where they start."""
        n = len(epochs)
        free = self._pool_free.get(n)
        if free:
            at = free.pop()
            for i, (epoch, offset) in enumerate(epochs, at):
                self._pool_epoch[i] = epoch
                self._pool_offset[i] = offset
            return at
        at = len(self._pool_epoch)
        for epoch, offset in epochs:
            self._pool_epoch.append(epoch)
            self._pool_offset.append(offset)
        return at

    def _pool_release(self, at: int, n: int) -> None:
        free = self._pool_free.get(n)
        if free is None:
            free = self._pool_free[n] = array("I")
        free.append(at)

    def _row_epochs(self, slot: int) -> list[tuple[int, int]]:
        at = self._ep_at[slot]
        end = at + self._ep_n[slot]
        return list(zip(self._pool_epoch[at:end], self._pool_offset[at:end], strict=True))

    def _segment_id(self, slot: int) -> RemoteLogSegmentId:
        assert self._tip is not None
        return RemoteLogSegmentId(self._tip, Uuid(self._hi[slot], self._lo[slot]))

    def _id_of_int(self, uid: int) -> RemoteLogSegmentId:
        assert self._tip is not None
        return RemoteLogSegmentId(self._tip, Uuid.from_int(uid))

    def _materialize(self, slot: int) -> RemoteLogSegmentMetadata:
        """Build the immutable metadata object of a row (the only per-lookup allocation)."""
        at = self._ep_at[slot]
        n = self._ep_n[slot]
        if n == 1:
            epochs = {self._pool_epoch[at]: self._pool_offset[at]}
        else:
            epochs = dict(
                zip(self._pool_epoch[at : at + n], self._pool_offset[at : at + n], strict=True)
            )
        return RemoteLogSegmentMetadata(
            self._segment_id(slot),
            self._start[slot],
            self._end[slot],
            self._max_ts[slot],
            self._broker[slot],
            self._event_ts[slot],
            self._size[slot],
            epochs,
            self._custom.get(slot),
            _STATES[self._state[slot]],
            bool(self._txn[slot]),
            self._cleaner.get(slot),
        )

    def _iterate(
        self, rows: Sequence[int], generations: array[int]
    ) -> Iterator[RemoteLogSegmentMetadata]:
        """Materialize ``rows`` a chunk at a time, skipping rows freed since the snapshot."""
        state = self._state
        gen = self._gen
        for begin in range(0, len(rows), _CHUNK):
            with self._lock:
                chunk = [
                    self._materialize(s)
                    for s in rows[begin : begin + _CHUNK]
                    if s < len(generations) and state[s] != _FREE and gen[s] == generations[s]
                ]
            yield from chunk

    # Id index -----------------------------------------------------------------------------------
    def _home(self, hi: int, lo: int) -> int:
        return (((hi ^ lo) * _FIB) & _M64) >> (64 - self._bits)

    def _find(self, hi: int, lo: int) -> int:
        """The row of segment id (hi, lo), or -1."""
        table = self._table
        mask = len(table) - 1
        i = (((hi ^ lo) * _FIB) & _M64) >> (64 - self._bits)
        his = self._hi
        los = self._lo
        while True:
            entry = table[i]
            if not entry:
                return -1
            slot = entry - 1
            if los[slot] == lo and his[slot] == hi:
                return slot
            i = (i + 1) & mask

    def _index_insert(self, slot: int) -> None:
        if 3 * (self._live + 1) > 2 * len(self._table):
            self._index_grow()
        table = self._table
        mask = len(table) - 1
        i = (((self._hi[slot] ^ self._lo[slot]) * _FIB) & _M64) >> (64 - self._bits)
        while table[i]:
            i = (i + 1) & mask
        table[i] = slot + 1

    def _index_grow(self) -> None:
        old = self._table
        self._bits += 1
        table = self._table = array("i", bytes(4 << self._bits))
        mask = len(table) - 1
        his = self._hi
        los = self._lo
        for entry in old:
            if entry:
                i = self._home(his[entry - 1], los[entry - 1])
                while table[i]:
                    i = (i + 1) & mask
                table[i] = entry

    def _index_remove(self, slot: int) -> None:
        """Delete ``slot`` with backward-shift deletion (no tombstones, probes stay short)."""
        table = self._table
        mask = len(table) - 1
        i = self._home(self._hi[slot], self._lo[slot])
        while table[i] != slot + 1:
            i = (i + 1) & mask
        j = i
        while True:
            j = (j + 1) & mask
            entry = table[j]
            if not entry:
                break
            home = self._home(self._hi[entry - 1], self._lo[entry - 1])
            # The entry at j may move back to i unless its home lies cyclically in (i, j].
            if (i < home <= j) if i <= j else (home > i or home <= j):
                continue
            table[i] = entry
            i = j
        table[i] = 0

    # Epoch bookkeeping --------------------------------------------------------------------------
    def _epoch(self, leader_epoch: int) -> _EpochState:
        state = self._epochs.get(leader_epoch)
        if state is None:
            state = self._epochs[leader_epoch] = _EpochState()
        return state

    def _check_no_ghost(self, state: _EpochState) -> None:
        if state.ghosts:
            uid = next(iter(state.ghosts))
            raise RemoteResourceNotFoundException(
                f"No remote log segment metadata found for :{self._id_of_int(uid)}"
            )

    def _lookup(self, leader_epoch: int, offset: int) -> int:
        """The row ``remote_log_segment_metadata`` returns, or -1 (caller holds the lock)."""
        state = self._epochs.get(leader_epoch)
        if state is None:
            return -1
        slot = state.floor(offset)
        if slot < 0:
            _LOG.warning(
                "No remote segment found for leaderEpoch: %s, offset: %s", leader_epoch, offset
            )
            return -1
        # The end of the epoch within the segment: the next epoch's start - 1, else the end.
        at = self._ep_at[slot]
        epochs = self._pool_epoch
        epoch_end = self._end[slot]
        for i in range(at, at + self._ep_n[slot]):
            if epochs[i] > leader_epoch:
                epoch_end = self._pool_offset[i] - 1
                break
        return -1 if offset > epoch_end else slot

    def _join(self, state: _EpochState, slot: int) -> None:
        state.size += self._size[slot]
        state.count += 1

    def _leave(self, state: _EpochState, slot: int) -> None:
        state.size -= self._size[slot]
        state.count -= 1

    def _add_new(
        self,
        hi: int,
        lo: int,
        uid: int,
        metadata: RemoteLogSegmentMetadata,
        epochs: list[tuple[int, int]],
    ) -> None:
        at = self._pool_store(epochs)
        slot = self._free_rows.pop() if self._free_rows else -1
        slot = self._write_row(slot, hi, lo, metadata, at=at, n=len(epochs))
        self._index_insert(slot)
        self._live += 1
        # Epochs that still list this id from an earlier life of the segment (see module doc).
        ghost_epochs = self._ghost_epochs.pop(uid, None)
        if ghost_epochs:
            for epoch in ghost_epochs:
                state = self._epochs[epoch]
                assert state.ghosts is not None
                state.ghosts.discard(uid)
                if not state.ghosts:
                    state.ghosts = None
                state.unref_add(slot)
                self._join(state, slot)
        size = self._size[slot]
        for epoch, _ in epochs:
            state = self._epochs.get(epoch) or self._epoch(epoch)
            unref = state.unref
            if unref is None:
                state.unref = {slot}
            elif slot in unref:
                continue
            else:
                unref.add(slot)
            state.size += size
            state.count += 1
        if ghost_epochs:
            extra = ghost_epochs.difference(epoch for epoch, _ in epochs)
            if extra:
                self._extra_epochs[slot] = extra

    def _add_again(
        self, slot: int, metadata: RemoteLogSegmentMetadata, epochs: list[tuple[int, int]]
    ) -> None:
        """A COPY_SEGMENT_STARTED segment added again: Kafka replaces its metadata and adds it
        to the unreferenced ids of the new epochs, leaving it in those of the old ones."""
        members = {epoch for epoch, _ in self._row_epochs(slot)}
        members.update(self._extra_epochs.pop(slot, ()))
        old_size = self._size[slot]
        at = self._ep_at[slot]
        n = self._ep_n[slot]
        if n == len(epochs):
            for i, (epoch, offset) in enumerate(epochs, at):
                self._pool_epoch[i] = epoch
                self._pool_offset[i] = offset
        else:
            self._pool_release(at, n)
            at = self._pool_store(epochs)
        self._write_row(slot, self._hi[slot], self._lo[slot], metadata, at=at, n=len(epochs))
        delta = self._size[slot] - old_size
        for epoch in members:
            self._epochs[epoch].size += delta
        new_epochs = set()
        for epoch, _ in epochs:
            new_epochs.add(epoch)
            if epoch not in members:
                state = self._epoch(epoch)
                state.unref_add(slot)
                self._join(state, slot)
        extra = members - new_epochs
        if extra:
            self._extra_epochs[slot] = extra

    def _on_copy_finished(self, slot: int) -> None:
        pool_epoch = self._pool_epoch
        pool_offset = self._pool_offset
        at = self._ep_at[slot]
        stop = at + self._ep_n[slot]
        for i in range(at, stop):
            start = pool_offset[i]
            # The epoch's end within the segment: the next epoch's start - 1, else the end.
            epoch_end = pool_offset[i + 1] - 1 if i + 1 < stop else self._end[slot]
            state = self._epoch(pool_epoch[i])
            unref = state.unref
            was_member = (unref is not None and slot in unref) or state.maps_to(start, slot)
            highest = state.highest
            if highest is not None and highest <= epoch_end:
                # Kafka's loop condition `highestLogOffset <= leaderEpochEndOffset` does not
                # change inside the loop: it drops every entry at or after `start`, or none.
                keys = state.keys
                while len(keys) > state.head and keys[-1] >= start:
                    state.unref_add(state.pop_last())
                    keys = state.keys
            replaced = state.put(start, slot)
            if replaced >= 0 and replaced != slot:
                # Kafka's put silently drops the other segment from this epoch's list.
                self._leave(state, replaced)
            state.unref_discard(slot)
            if not was_member:
                self._join(state, slot)
            if highest is None or epoch_end > highest:
                state.highest = epoch_end

    # Cleaned segments (compacted topics in tiered storage) -------------------------------------
    def _generation(self, slot: int) -> tuple[int, int]:
        """How new a row's content is: (top epoch, cleaner offset there) of its vector; a row
        copied from the local log (no vector) is older than every cleaned one."""
        vector = self._cleaner.get(slot)
        if not vector:
            return (-1, -1)
        top = max(vector)
        return (top, vector[top])

    def _is_valid(self, slot: int) -> bool:
        """False for a row whose vector claims more for an earlier epoch than the newest
        epoch's cleaner resolved for it: a zombie leader's late output (KIP-1272's table)."""
        vector = self._cleaner.get(slot)
        resolved = self._resolved
        if not vector or resolved is None:
            return True
        top, prefix = resolved
        for epoch, offset in vector.items():
            if epoch < top:
                # An epoch the newest leader's vector does not name was not in its lineage.
                limit = prefix.get(epoch)
                if limit is None or offset > limit:
                    return False
        return True

    def _resolve(self, slot: int) -> bool:
        """Fold a finished cleaned row into the resolved vector; True if the newest epoch
        changed (every routed cleaned row must then be checked again)."""
        vector = self._cleaner[slot]
        top = max(vector)
        current = self._resolved
        if current is not None and top < current[0]:
            return False
        prefix = {epoch: offset for epoch, offset in vector.items() if epoch < top}
        if current is not None and top == current[0]:
            # Rows of one leader carry the prefix it resolved when it took over: keep the first.
            return False
        self._resolved = (top, prefix)
        return True

    def _routed_at(self, slot: int) -> list[tuple[_EpochState, int, int]]:
        """``(epoch state, start, row)`` for each epoch of ``slot``: the row mapped at that
        epoch's start of ``slot`` (-1 when none)."""
        out = []
        for epoch, start in self._row_epochs(slot):
            state = self._epoch(epoch)
            i = bisect_left(state.keys, start, state.head)
            mapped = state.slots[i] if i < len(state.keys) and state.keys[i] == start else -1
            out.append((state, start, mapped))
        return out

    def _on_cleaned_copy_finished(self, slot: int) -> None:
        """A cleaned row finished: route it only if it is valid and at least as new as what
        its offsets map to now; otherwise it stays listed under its epochs as unreferenced, as a
        segment Kafka's ``put`` displaced, for the expiration task to delete. A new leader
        epoch's vector may invalidate rows routed earlier (a zombie's output that arrived first):
        those are routed back to the best valid row of the same offsets."""
        changed = self._resolve(slot)
        if self._is_valid(slot) and all(
            mapped < 0 or self._generation(slot) >= self._generation(mapped)
            for _, _, mapped in self._routed_at(slot)
        ):
            self._on_copy_finished(slot)
        else:
            _LOG.info(
                "Cleaned remote segment %s (cleaner offsets %s) is not routed: it is fenced by "
                "the cleaner offsets %s or older than the segment it would replace",
                self._segment_id(slot),
                self._cleaner[slot],
                self._resolved,
            )
        if changed:
            self._reroute_invalid()

    def _reroute_invalid(self) -> None:
        for slot in [s for s in self._cleaner if self._state[s] == _FINISHED]:
            if self._is_valid(slot):
                continue
            for state, start, mapped in self._routed_at(slot):
                if mapped != slot:
                    continue
                best = self._best_row(slot)
                state.remove(start, slot)
                state.unref_add(slot)  # still listed, now unreferenced
                if best >= 0:
                    was_member = state.in_unref(best)
                    state.put(start, best)
                    if was_member:
                        state.unref_discard(best)
                    else:
                        self._join(state, best)
                    self._looked_up.pop(best, None)
            self._looked_up.pop(slot, None)

    def _best_row(self, slot: int) -> int:
        """The newest valid finished row with the same offsets and epochs as ``slot``."""
        epochs = self._row_epochs(slot)
        best, best_gen = -1, (-2, -2)
        for row in range(len(self._state)):
            if (
                row == slot
                or self._state[row] != _FINISHED
                or self._start[row] != self._start[slot]
                or self._end[row] != self._end[slot]
                or not self._is_valid(row)
                or self._row_epochs(row) != epochs
            ):
                continue
            generation = self._generation(row)
            if generation > best_gen:
                best, best_gen = row, generation
        return best

    def _on_delete_started(self, slot: int) -> None:
        for epoch, start in self._row_epochs(slot):
            state = self._epoch(epoch)
            if state.in_unref(slot):
                state.remove(start, slot)
                continue
            if not state.remove(start, slot):
                self._join(state, slot)
            state.unref_add(slot)

    def _on_delete_finished(self, slot: int, uid: int) -> None:
        for epoch, _ in self._row_epochs(slot):
            state = self._epoch(epoch)
            if state.unref_discard(slot):
                self._leave(state, slot)
        extra = self._extra_epochs.pop(slot, None)
        if extra:
            for epoch in extra:
                state = self._epochs[epoch]
                state.unref_discard(slot)
                self._leave(state, slot)
                if state.ghosts is None:
                    state.ghosts = {uid}
                else:
                    state.ghosts.add(uid)
            self._ghost_epochs[uid] = extra
        self._index_remove(slot)
        self._pool_release(self._ep_at[slot], self._ep_n[slot])
        self._custom.pop(slot, None)
        self._cleaner.pop(slot, None)
        self._looked_up.pop(slot, None)
        self._state[slot] = _FREE
        self._gen[slot] = (self._gen[slot] + 1) & 0xFFFFFFFF
        self._free_rows.append(slot)
        self._live -= 1
