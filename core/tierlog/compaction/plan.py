"""What a round cleans: cleanable offsets, the dirty ratio, eligibility, and output groups.

Kafka's ``LogCleanerManager`` and ``LogToClean`` (KAFKA-LOGCLEANER.md sections 1 and 4), over a
plain description of the log's segments (``SegmentInfo``) so that the same rules serve a local
log, a log whose older segments live only in remote storage, and an offline partition directory.
A log is seen as five regions: cleaned (below the first dirty offset), dirty (cleanable),
uncleanable (held back by ``min.compaction.lag.ms``), unstable (past the last stable offset) and
the active segment. For a tiered log the cleaned and dirty regions include remote segments, and
the dirty ratio counts their bytes (as the KIP asks: cleanable / (local + remote)).

Everything here is arithmetic on ``SegmentInfo`` lists: no I/O, no clock (``now_ms`` is given).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from tierlog.spi import InvalidArgumentError

__all__ = [
    "CleanableRange",
    "LogToClean",
    "SegmentInfo",
    "cleanable_offsets",
    "group_segments_by_size",
    "log_to_clean",
]

_LOG = logging.getLogger(__name__)

INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
OFFSET_INDEX_ENTRY_SIZE = 8
TIME_INDEX_ENTRY_SIZE = 12


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One segment as the planner sees it (local or remote).

    ``largest_timestamp`` is Kafka's ``LogSegment.largestTimestamp``: the largest record
    timestamp, or the file's modification time for a segment without records.
    ``first_batch_timestamp`` is the max timestamp of its first batch (Kafka's
    ``getFirstBatchTimestamp``, which ``max.compaction.lag.ms`` reads), None if unknown or empty.
    ``offset_index_entries`` and ``time_index_entries`` size the output groups.
    """

    base_offset: int
    size: int
    largest_timestamp: int
    first_batch_timestamp: int | None = None
    offset_index_entries: int = 0
    time_index_entries: int = 0
    remote: bool = False

    @property
    def offset_index_bytes(self) -> int:
        return self.offset_index_entries * OFFSET_INDEX_ENTRY_SIZE

    @property
    def time_index_bytes(self) -> int:
        return self.time_index_entries * TIME_INDEX_ENTRY_SIZE


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """``[first_dirty_offset, first_uncleanable_offset)`` before rounding, and the delay past
    ``max.compaction.lag.ms`` of the oldest dirty segment (0 when none is overdue)."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    max_compaction_delay_ms: int
    checkpoint_reset: bool
    """True when the checkpoint was out of the log's range and was reset to the log start
    (Kafka writes the reset value back at once)."""


@dataclass(frozen=True, slots=True)
class LogToClean:
    """One round's plan for a log: its regions in bytes and whether it is worth cleaning."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    """Rounded down to a segment base: the end of what this round cleans (``endOffset``)."""
    clean_bytes: int
    cleanable_bytes: int
    max_compaction_delay_ms: int
    checkpoint_reset: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        total = self.total_bytes
        return self.cleanable_bytes / total if total > 0 else 0.0

    @property
    def need_compaction_now(self) -> bool:
        return self.max_compaction_delay_ms > 0

    def eligible(self, min_cleanable_dirty_ratio: float) -> bool:
        """Kafka's test: ratio strictly above the minimum, or an overdue segment with bytes to
        clean."""
        return (self.need_compaction_now and self.cleanable_bytes > 0) or (
            self.cleanable_ratio > min_cleanable_dirty_ratio
        )


def _check_sorted(segments: Sequence[SegmentInfo]) -> None:
    for prev, cur in itertools.pairwise(segments):
        if cur.base_offset <= prev.base_offset:
            raise InvalidArgumentError(
                f"segments must be in increasing base offset order: {cur.base_offset} after "
                f"{prev.base_offset}"
            )


def _overlapping(
    segments: Sequence[SegmentInfo], start: int, end: int, active_segment_base: int
) -> list[SegmentInfo]:
    """Kafka's ``logSegments(from, to)`` over the non-active segments: those holding offsets
    in ``[start, end)`` (the floor segment of ``start`` included); the last one ends where the
    active segment begins. Nothing for an empty range."""
    if start >= end:
        return []
    out: list[SegmentInfo] = []
    for i, seg in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else active_segment_base
        if seg.base_offset < end and next_base > start:
            out.append(seg)
    return out


def cleanable_offsets(
    segments: Sequence[SegmentInfo],
    *,
    checkpoint: int | None,
    log_start_offset: int,
    log_end_offset: int,
    last_stable_offset: int,
    active_segment_base: int,
    min_compaction_lag_ms: int,
    max_compaction_lag_ms: int,
    now_ms: int,
) -> CleanableRange:
    """Kafka's ``LogCleanerManager.cleanableOffsets`` and ``maxCompactionDelay``.

    ``segments`` are the non-active segments (local and remote), in order; the active segment
    is named by ``active_segment_base``.
    """
    _check_sorted(segments)
    reset = False
    if checkpoint is None:
        first_dirty = log_start_offset
    elif checkpoint < log_start_offset:
        first_dirty, reset = log_start_offset, True
    elif checkpoint > log_end_offset:
        _LOG.warning(
            "The last checkpoint dirty offset %d is past the log end offset %d: resetting to "
            "the log start offset %d",
            checkpoint,
            log_end_offset,
            log_start_offset,
        )
        first_dirty, reset = log_start_offset, True
    else:
        first_dirty = checkpoint

    dirty_non_active = [
        s
        for i, s in enumerate(segments)
        if (segments[i + 1].base_offset if i + 1 < len(segments) else active_segment_base)
        > first_dirty
    ]
    uncleanable = min(last_stable_offset, active_segment_base)
    lag = max(min_compaction_lag_ms, 0)
    if lag > 0:
        for seg in dirty_non_active:
            if seg.largest_timestamp > now_ms - lag:
                uncleanable = min(uncleanable, seg.base_offset)
                break

    delay = 0
    first_batch_timestamps = [
        s.first_batch_timestamp
        for s in dirty_non_active
        if s.first_batch_timestamp is not None and s.first_batch_timestamp > 0
    ]
    if first_batch_timestamps:
        earliest = min(first_batch_timestamps)
        clean_until = now_ms - max(max_compaction_lag_ms, 0)
        if earliest < clean_until:
            delay = clean_until - earliest
    return CleanableRange(first_dirty, max(first_dirty, uncleanable), delay, reset)


def log_to_clean(
    segments: Sequence[SegmentInfo], cleanable: CleanableRange, active_segment_base: int
) -> LogToClean:
    """Kafka's ``LogToClean``: round the uncleanable offset down to its segment's base and
    measure the clean and cleanable regions in ``.log`` bytes (the active segment excluded; a
    first dirty offset inside a segment counts that segment on both sides)."""
    _check_sorted(segments)
    uncleanable = cleanable.first_uncleanable_offset
    # Kafka's floorLogSegment(uncleanable), the active segment included, else the active one.
    bases = [s.base_offset for s in segments if s.base_offset < active_segment_base]
    bases.append(active_segment_base)
    floors = [b for b in bases if b <= uncleanable]
    first_uncleanable = max(floors) if floors else active_segment_base
    first_dirty = cleanable.first_dirty_offset
    clean_bytes = sum(s.size for s in _overlapping(segments, -1, first_dirty, active_segment_base))
    dirty_start = min(first_dirty, first_uncleanable)
    cleanable_bytes = sum(
        s.size for s in _overlapping(segments, dirty_start, first_uncleanable, active_segment_base)
    )
    return LogToClean(
        first_dirty_offset=first_dirty,
        first_uncleanable_offset=first_uncleanable,
        clean_bytes=clean_bytes,
        cleanable_bytes=cleanable_bytes,
        max_compaction_delay_ms=cleanable.max_compaction_delay_ms,
        checkpoint_reset=cleanable.checkpoint_reset,
    )


def group_segments_by_size(
    segments: Sequence[SegmentInfo],
    *,
    max_size: int,
    max_index_size: int,
    first_uncleanable_offset: int,
) -> list[list[SegmentInfo]]:
    """Kafka's ``groupSegmentsBySize``: greedy, in order; a segment joins the current group
    while the group's ``.log`` bytes stay within ``max_size`` (``segment.bytes``), each index's
    bytes within ``max_index_size`` (``segment.index.bytes``), and its estimated last offset
    stays within an int32 of the group's first base (relative offsets must fit the index).
    Each group becomes one cleaned segment named by its first base offset."""
    _check_sorted(segments)
    groups: list[list[SegmentInfo]] = []
    i = 0
    n = len(segments)
    while i < n:
        first = segments[i]
        group = [first]
        log_size = first.size
        offset_index = first.offset_index_bytes
        time_index = first.time_index_bytes
        i += 1
        while i < n:
            seg = segments[i]
            last_offset = (
                segments[i + 1].base_offset - 1 if i + 1 < n else first_uncleanable_offset - 1
            )
            if (
                log_size + seg.size <= max_size
                and offset_index + seg.offset_index_bytes <= max_index_size
                and time_index + seg.time_index_bytes <= max_index_size
                and (seg.size == 0 or last_offset - first.base_offset <= INT32_MAX)
            ):
                group.append(seg)
                log_size += seg.size
                offset_index += seg.offset_index_bytes
                time_index += seg.time_index_bytes
                i += 1
            else:
                break
        groups.append(group)
    return groups
