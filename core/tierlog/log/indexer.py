"""Which batches of a segment get index entries, on append and when rebuilding the indexes.

Kafka's ``LogSegment`` decides, batch by batch, when the offset index and the time index get an
entry (``SegmentIndexer``), and its recovery rebuilds both files from the batch headers with the
same rule (``rebuild_indexes``). This sits above ``offset_index`` and ``time_index`` because it
drives both; ``index`` (what the two share) must not import its own subclasses, so it lives
here rather than there.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from tierlog.log.index import TimestampOffset
from tierlog.log.offset_index import OffsetIndex
from tierlog.log.time_index import TimeIndex
from tierlog.spi import InvalidArgumentError

__all__ = ["BatchIndexInfo", "RebuildResult", "SegmentIndexer", "rebuild_indexes"]


class BatchIndexInfo(NamedTuple):
    """What indexing needs from a batch header: where it is, its offsets, max timestamp, size.

    Any 5-tuple in this order is accepted, so the shallow batch reader need not be imported here.
    """

    position: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    size_in_bytes: int


class RebuildResult(NamedTuple):
    """The outcome of ``rebuild_indexes``."""

    batches: int
    """Batches seen."""
    valid_bytes: int
    """The position after the last batch seen (0 if none)."""
    max_timestamp_and_offset: TimestampOffset
    """The largest batch max timestamp and the last offset of its batch (``(-1, base)`` if none)."""


class SegmentIndexer:
    """Kafka's ``LogSegment`` index bookkeeping: which batches get offset and time index entries.

    For each batch appended, as ``LogSegment.append`` and ``recover`` do: if the batch's max
    timestamp is above the largest so far, that timestamp and the batch's last offset become the
    "max timestamp so far"; then, if more than ``index_interval_bytes`` bytes were appended since
    the last index entry, the offset index gets ``(batch last offset, batch position)`` and the
    time index ``(max timestamp so far, its offset)`` (kept only if the timestamp grew). So the
    first batch of a segment is never indexed; lookups below the first entry fall back to the
    segment's start.

    The state can be seeded (``bytes_since_last_index_entry``, ``max_timestamp_and_offset``) for
    a segment that already has data, as Kafka seeds it from the time index's last entry.
    """

    def __init__(
        self,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        index_interval_bytes: int,
        *,
        bytes_since_last_index_entry: int = 0,
        max_timestamp_and_offset: TimestampOffset | None = None,
    ) -> None:
        if index_interval_bytes < 0:
            raise InvalidArgumentError(
                f"index.interval.bytes must be >= 0, got {index_interval_bytes}"
            )
        self._offset_index = offset_index
        self._time_index = time_index
        self._interval = index_interval_bytes
        self.bytes_since_last_index_entry = bytes_since_last_index_entry
        self.max_timestamp_and_offset = (
            max_timestamp_and_offset
            if max_timestamp_and_offset is not None
            else time_index.last_entry
        )
        self._next_position: int | None = None

    def append(
        self, position: int, last_offset: int, max_timestamp: int, size_in_bytes: int
    ) -> None:
        """Account for one batch written at ``position``; add index entries if it is time to.

        Batches must be given in file order and back to back; their last offsets must fit the
        index (``IndexOffsetOverflowError`` otherwise, Kafka's segment offset overflow).
        """
        if size_in_bytes <= 0 or position < 0:
            raise InvalidArgumentError(
                f"a batch needs a position >= 0 and a size > 0, got position {position}, "
                f"size {size_in_bytes}"
            )
        if self._next_position is not None and position != self._next_position:
            raise InvalidArgumentError(
                f"batch at position {position} does not follow the previous batch, which ended "
                f"at {self._next_position}"
            )
        self._offset_index.relative_offset(last_offset)  # raises IndexOffsetOverflowError
        if max_timestamp > self.max_timestamp_and_offset.timestamp:
            self.max_timestamp_and_offset = TimestampOffset(max_timestamp, last_offset)
        if self.bytes_since_last_index_entry > self._interval:
            self._offset_index.append(last_offset, position)
            self._time_index.maybe_append(*self.max_timestamp_and_offset)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size_in_bytes
        self._next_position = position + size_in_bytes

    def on_become_inactive(self) -> None:
        """Add the final time index entry (the max timestamp, even if the index is full).

        Kafka does this when a segment is rolled, closed or recovered, so a sealed segment's time
        index always ends with its largest timestamp (retention by time reads it).
        """
        self._time_index.maybe_append(*self.max_timestamp_and_offset, skip_full_check=True)


def rebuild_indexes(
    batches: Iterable[BatchIndexInfo | tuple[int, int, int, int, int]],
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    index_interval_bytes: int,
    *,
    trim: bool = True,
) -> RebuildResult:
    """Rebuild a segment's offset and time indexes from its batch headers, as Kafka's recovery.

    Both indexes are reset (emptied and grown to their ``max_index_size``), every batch is fed to
    a ``SegmentIndexer``, the final time index entry is added, and with ``trim`` both files are
    cut to their entries, which is what ``LogSegment.recover`` leaves on disk. ``batches`` yields
    ``(position, base_offset, last_offset, max_timestamp, size_in_bytes)`` in file order starting
    at position 0; the caller stops at the first invalid batch (and truncates the segment there).
    A full index raises ``InvalidArgumentError`` as in Kafka: size the index with
    ``segment.index.bytes``.
    """
    if index_interval_bytes < 0:
        raise InvalidArgumentError(f"index.interval.bytes must be >= 0, got {index_interval_bytes}")
    offset_index.reset()
    time_index.reset()
    indexer = SegmentIndexer(offset_index, time_index, index_interval_bytes)
    count = 0
    valid_bytes = 0
    for batch in batches:
        if len(batch) != 5:
            raise InvalidArgumentError(
                "a batch is (position, base_offset, last_offset, max_timestamp, size_in_bytes), "
                f"got {batch!r}"
            )
        position, _base, last_offset, max_timestamp, size = batch
        if count == 0 and position != 0:
            raise InvalidArgumentError(
                f"a rebuild starts at the segment's first batch (position 0), got {position}"
            )
        indexer.append(position, last_offset, max_timestamp, size)
        count += 1
        valid_bytes = position + size
    indexer.on_become_inactive()
    if trim:
        offset_index.trim_to_valid_size()
        time_index.trim_to_valid_size()
    return RebuildResult(count, valid_bytes, indexer.max_timestamp_and_offset)
