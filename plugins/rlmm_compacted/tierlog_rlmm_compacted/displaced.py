"""Which deleted copies a migration keeps as displacement markers.

Kafka's cache routes a range of offsets to the copy that finished last and never routes a copy
it displaced again. When a legacy history deleted a copy that had displaced copies still
finished (a duplicate upload after a leadership change, deleted before the first upload), the
history serves their offsets from no segment. Keyed values of the live segments alone cannot
say that: a reader replaying the displaced copy's COPY_SEGMENT_FINISHED routes its offsets to
it. The migration then also writes the deleted copy's history as one keyed value
(``ProjectionApplier.plan_history_marker``: add, finish, deletion replayed from its
DELETE_SEGMENT_FINISHED), placed where the copy finished.

``DisplacementTracker`` follows the history as the migration reads it, and remembers a deleted
copy only when, at its deletion, another finished copy of one of its leader epochs started
within its offsets there (what its COPY_SEGMENT_FINISHED may have displaced): memory for the
finished segments' start offsets and for those few copies, not for every deleted segment.
``needed`` keeps, once the whole history is read, the copies overlapping a live finished copy
whose first offset in an epoch the history serves from no segment.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass, field, replace

from tierlog.metadata import RemotePartitionMetadataStore
from tierlog.spi import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog_rlmm_compacted.values import segment_epoch_ranges

__all__ = ["DisplacementTracker", "HistoryMarker"]

S = RemoteLogSegmentState


@dataclass(frozen=True, slots=True)
class HistoryMarker:
    """A deleted copy whose history a migration writes: its metadata (COPY_SEGMENT_STARTED),
    its DELETE_SEGMENT_FINISHED, where its last COPY_SEGMENT_FINISHED was in the history and
    the leader epochs' highest offsets it finished against (``EpochHighestOffsets``)."""

    segment: RemoteLogSegmentMetadata
    deletion: RemoteLogSegmentMetadataUpdate
    finished_at: int
    highest: tuple[tuple[int, int], ...]


@dataclass
class _Epoch:
    """The start offsets of an epoch's finished segments, sorted, with the segments there."""

    starts: list[int] = field(default_factory=list)
    at: dict[int, set[RemoteLogSegmentId]] = field(default_factory=dict)

    def add(self, start: int, segment_id: RemoteLogSegmentId) -> None:
        ids = self.at.get(start)
        if ids is None:
            ids = self.at[start] = set()
            insort(self.starts, start)
        ids.add(segment_id)

    def discard(self, start: int, segment_id: RemoteLogSegmentId) -> None:
        ids = self.at.get(start)
        if ids is None:
            return
        ids.discard(segment_id)
        if not ids:
            del self.at[start]
            del self.starts[bisect_left(self.starts, start)]

    def any_within(self, first: int, last: int) -> bool:
        return bisect_right(self.starts, last) > bisect_left(self.starts, first)


class DisplacementTracker:
    """See the module docstring. ``observe`` before each event is applied to the store it is
    given (the reference replay of the history)."""

    def __init__(self) -> None:
        self._epochs: dict[tuple[TopicIdPartition, int], _Epoch] = {}
        self._finished_at: dict[RemoteLogSegmentId, int] = {}
        self._highest: dict[RemoteLogSegmentId, tuple[tuple[int, int], ...]] = {}
        self._candidates: dict[TopicIdPartition, list[HistoryMarker]] = {}

    def observe(
        self,
        current: RemoteLogSegmentMetadata | None,
        event: RemoteLogSegmentMetadataUpdate,
        offset: int,
        highest: tuple[tuple[int, int], ...],
    ) -> None:
        """``event`` (read at ``offset``) is about to be applied to ``current``, the segment
        as the reference holds it (None: unknown). ``highest``: for a DELETE_SEGMENT_STARTED,
        the segment's ``EpochHighestOffsets`` (``ProjectionApplier.highest_offsets_at_finish``,
        before the event)."""
        if current is None or not S.is_valid_transition(current.state, event.state):
            return  # the reference drops it
        segment_id = current.remote_log_segment_id
        tip = segment_id.topic_id_partition
        if event.state is S.COPY_SEGMENT_FINISHED:
            if current.state is S.COPY_SEGMENT_STARTED:
                self._index(tip, current, add=True)
            self._finished_at[segment_id] = offset
        elif event.state is S.DELETE_SEGMENT_STARTED:
            if current.state is S.COPY_SEGMENT_FINISHED:
                self._index(tip, current, add=False)
                self._highest[segment_id] = highest
        elif event.state is S.DELETE_SEGMENT_FINISHED:
            finished_at = self._finished_at.pop(segment_id, None)
            at_finish = self._highest.pop(segment_id, ())
            if finished_at is not None and any(
                self._epoch(tip, epoch).any_within(first, last)
                for epoch, (first, last) in segment_epoch_ranges(current).items()
            ):
                self._candidates.setdefault(tip, []).append(
                    HistoryMarker(
                        replace(current, state=S.COPY_SEGMENT_STARTED),
                        event,
                        finished_at,
                        at_finish,
                    )
                )

    def finished_at(self, segment_id: RemoteLogSegmentId) -> int | None:
        """Where the history last finished copying a segment still finished or being deleted
        (None: it never finished, or its deletion finished)."""
        return self._finished_at.get(segment_id)

    def needed(
        self, tip: TopicIdPartition, reference: RemotePartitionMetadataStore
    ) -> list[HistoryMarker]:
        """The remembered copies of ``tip`` that overlap, in one of their leader epochs, the
        first offset there of a live finished copy that ``reference`` (initialized) does not
        serve from that copy: one a copy displaced. Served from no segment since, its offsets
        need the deleted copy's history; served from a later copy, its listing may (Kafka's
        cache keeps a copy dropped among the unreferenced ones listed, one a later copy
        replaced at its start offset not)."""
        candidates = self._candidates.get(tip)
        if not candidates:
            return []
        unserved: dict[int, list[int]] = {}
        for segment in reference.list_remote_log_segments(tip):
            if segment.state is not S.COPY_SEGMENT_FINISHED:
                continue
            for epoch, (first, _) in segment_epoch_ranges(segment).items():
                served = reference.remote_log_segment_metadata(tip, epoch, first)
                if served is None or served.remote_log_segment_id != segment.remote_log_segment_id:
                    insort(unserved.setdefault(epoch, []), first)
        if not unserved:
            return []
        return [
            marker
            for marker in candidates
            if any(
                bisect_right(starts, last) > bisect_left(starts, first)
                for epoch, (first, last) in segment_epoch_ranges(marker.segment).items()
                if (starts := unserved.get(epoch))
            )
        ]

    def _epoch(self, tip: TopicIdPartition, epoch: int) -> _Epoch:
        state = self._epochs.get((tip, epoch))
        if state is None:
            state = self._epochs[(tip, epoch)] = _Epoch()
        return state

    def _index(
        self, tip: TopicIdPartition, segment: RemoteLogSegmentMetadata, *, add: bool
    ) -> None:
        for epoch, (first, _) in segment_epoch_ranges(segment).items():
            state = self._epoch(tip, epoch)
            if add:
                state.add(first, segment.remote_log_segment_id)
            else:
                state.discard(first, segment.remote_log_segment_id)
