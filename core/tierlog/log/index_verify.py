"""Checking an offset or time index against its segment, entry by entry.

What an index entry promises is a property of the log format (Kafka's ``LogSegment`` writes an
entry only for the last offset of a batch, at the position where that batch starts, and the time
index follows the largest timestamp), so the checks live here, beside the indexes, and any tool
can run them; ``tierlog log dump --verify-index`` only renders what they find.

The checks are Kafka's (``DumpLogSegments.dumpIndex`` and ``dumpTimeIndex``) plus those Kafka's
tool dies on or leaves to the broker's sanity check:

- offset index entry: its offset is at least the base offset and above the previous entry's, its
  position above the previous entry's, and at its position the segment holds a v2 batch that fits
  in the segment and whose last offset is the entry's (anything else there is a ``LOG_OFFSET``
  mismatch with log offset -1 and the reason);
- time index entry: its offset is at least the base offset and not below the previous entry's,
  its timestamp above the previous entry's (above -1 for the first, as Kafka checks), the first
  batch whose last offset is >= the entry's ends exactly there (else ``OFFSET_NOT_FOUND``; where
  the segment cannot be read further the rest are not found, as Kafka's iterator ends there), and
  that batch's max timestamp is the entry's (with ``deep``, its records' largest timestamp).

Each verifier is a generator of findings in index order: an ``IndexMismatch`` per failed check of
an entry, and a ``SegmentReadError`` where the segment itself could not be decoded. Nothing is
printed and nothing is held beyond the current entry, so an index of a million entries is
checked in constant memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from tierlog.log.batch import RecordBatch, UnsupportedRecordFormatError
from tierlog.log.batch_at import frame_at, records_max_timestamp
from tierlog.log.index import OffsetPosition, TimestampOffset
from tierlog.log.offset_index import OffsetIndex
from tierlog.log.reader import iter_batches
from tierlog.log.record import NO_TIMESTAMP
from tierlog.log.time_index import TimeIndex
from tierlog.spi import TierlogError

__all__ = [
    "Check",
    "Finding",
    "IndexMismatch",
    "SegmentReadError",
    "verify_offset_index",
    "verify_time_index",
]


class Check(Enum):
    """A kind of failed index entry check; the value is the dump's JSON ``check``.

    The first four are Kafka's (``DumpLogSegments`` collects them under its titles); the others
    are failures Kafka's tool does not look for, or dies on with an exception.
    """

    LOG_OFFSET = "log-offset"
    TIMESTAMP = "timestamp"
    TIMESTAMP_ORDER = "timestamp-order"
    OFFSET_NOT_FOUND = "offset-not-found"
    OFFSET_ORDER = "offset-order"
    POSITION_ORDER = "position-order"
    BELOW_BASE_OFFSET = "below-base-offset"


@dataclass(frozen=True, slots=True)
class IndexMismatch:
    """One failed check of one index entry.

    ``entry`` is the entry's number in the index and ``position`` its byte position in the index
    file; ``message`` says what is wrong in a full sentence. The entry's own fields are
    ``offset`` and, for an offset index, ``segment_position``, for a time index, ``timestamp``.
    ``compared_with`` is the value the entry failed against: the base offset
    (``BELOW_BASE_OFFSET``) or the previous entry's offset, position or timestamp (the
    ``*_ORDER`` checks; -1 for the first time index entry). ``log_offset`` and ``log_timestamp``
    are what the segment holds there (``None`` when it holds no batch there, or the check is not
    about the segment); ``reason`` says why no batch could be found at all.
    """

    kind: Check
    entry: int
    position: int
    message: str
    offset: int
    segment_position: int | None = None
    timestamp: int | None = None
    compared_with: int | None = None
    log_offset: int | None = None
    log_timestamp: int | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SegmentReadError:
    """The segment's records could not be decoded where checking ``entry`` needed them.

    Not a mismatch of the index: the segment is damaged. ``position`` is the byte position in the
    segment named by the error (``None`` if it names none); ``error`` is the error itself.
    """

    entry: int
    position: int | None
    message: str
    error: TierlogError


Finding = IndexMismatch | SegmentReadError
"""What a verifier yields."""


def _below_base(
    n: int,
    at: int,
    offset: int,
    base: int,
    *,
    segment_position: int | None = None,
    timestamp: int | None = None,
) -> list[IndexMismatch]:
    """The first check of an offset or time index entry: its offset is not below the base."""
    if offset >= base:
        return []
    return [
        IndexMismatch(
            Check.BELOW_BASE_OFFSET,
            n,
            at,
            f"offset {offset} is below the base offset {base}",
            offset,
            segment_position=segment_position,
            timestamp=timestamp,
            compared_with=base,
        )
    ]


# Offset index ------------------------------------------------------------------------------------
def _offset_entry_checks(
    n: int,
    entry: OffsetPosition,
    prev: OffsetPosition | None,
    *,
    base: int,
    fd: int,
    file_size: int,
    log_path: Path,
) -> list[IndexMismatch]:
    """What is wrong with one offset index entry, given the previous one and the segment."""
    offset, position = entry
    at = n * OffsetIndex.ENTRY_SIZE
    found = _below_base(n, at, offset, base, segment_position=position)
    if prev is not None and offset <= prev.offset:
        found.append(
            IndexMismatch(
                Check.OFFSET_ORDER,
                n,
                at,
                f"offset {offset} is not above the previous entry's {prev.offset}",
                offset,
                segment_position=position,
                compared_with=prev.offset,
            )
        )
    if prev is not None and position <= prev.position:
        found.append(
            IndexMismatch(
                Check.POSITION_ORDER,
                n,
                at,
                f"position {position} is not above the previous entry's {prev.position}",
                offset,
                segment_position=position,
                compared_with=prev.position,
            )
        )
    reason: str | None = None
    if position < 0:
        reason = f"position {position} is negative"
    elif position >= file_size:
        reason = f"position {position} is past the end of the {file_size}-byte segment"
    else:
        try:
            header = frame_at(fd, position, log_path)
        except UnsupportedRecordFormatError as exc:
            reason = (
                f"no record batch at position {position}: its magic byte is {exc.magic}, not 2 "
                "(inside a batch, or a legacy message set, which tierlog does not read)"
            )
        except TierlogError as exc:
            reason = f"no record batch at position {position}: {exc}"
        else:
            if header.size_in_bytes > file_size - position:
                reason = (
                    f"the batch at position {position} overflows the segment: it is "
                    f"{header.size_in_bytes} bytes, {file_size - position} remain"
                )
            elif header.last_offset != offset:
                found.append(
                    IndexMismatch(
                        Check.LOG_OFFSET,
                        n,
                        at,
                        f"index offset {offset}, log offset {header.last_offset}: the batch at "
                        f"position {position} of {log_path} ends at offset {header.last_offset}",
                        offset,
                        segment_position=position,
                        log_offset=header.last_offset,
                    )
                )
    if reason is not None:
        found.append(
            IndexMismatch(
                Check.LOG_OFFSET,
                n,
                at,
                f"{reason} (segment {log_path})",
                offset,
                segment_position=position,
                reason=reason,
            )
        )
    return found


def verify_offset_index(index: OffsetIndex, log_path: Path) -> Iterator[IndexMismatch]:
    """Check each entry's order, and that its position starts the batch ending at its offset.

    The batch is framed at the entry's position (a header, magic 2, a length that fits in the
    segment), so an entry past the segment's end, inside a batch or on a batch that overflows
    the segment is a mismatch with no log offset and a ``reason``, where Kafka's tool dies with
    an exception. ``OSError`` if the segment cannot be opened.
    """
    with open(log_path, "rb", buffering=0) as f:
        fd = f.fileno()
        file_size = os.fstat(fd).st_size
        prev: OffsetPosition | None = None
        for n, entry in enumerate(index):
            yield from _offset_entry_checks(
                n,
                entry,
                prev,
                base=index.base_offset,
                fd=fd,
                file_size=file_size,
                log_path=log_path,
            )
            prev = entry


# Time index --------------------------------------------------------------------------------------
class _BatchCursor:
    """Walks a segment's batch headers forward to the first batch ending at or after an offset.

    Time index entries come in offset order, so one pass over the segment serves them all; an
    entry whose offset goes backwards (a corrupt index) restarts the walk from the start. Where
    the segment stops being readable (a torn or overflowing batch, garbage), the walk ends and
    ``error`` says why, as Kafka's batch iterator ends there.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._batches: Iterator[tuple[int, RecordBatch]] | None = None
        self._current: tuple[int, RecordBatch] | None = None
        self._target = -1
        self.error: TierlogError | None = None

    def first_ending_at_or_after(self, offset: int) -> tuple[int, RecordBatch] | None:
        """``(position, header)`` of that batch, or ``None`` (then see ``error``)."""
        if self._batches is None or offset < self._target:
            self.close()
            self.error = None
            self._batches = iter_batches(self._path, verify_crc=False)
            self._current = self._next()
        self._target = offset
        while self._current is not None and self._current[1].last_offset < offset:
            self._current = self._next()
        return self._current

    def _next(self) -> tuple[int, RecordBatch] | None:
        assert self._batches is not None
        try:
            return next(self._batches, None)
        except TierlogError as exc:
            self.error = exc
            return None

    def close(self) -> None:
        if self._batches is not None:
            close = getattr(self._batches, "close", None)
            if close is not None:
                close()
            self._batches = None


def _time_entry_checks(
    n: int, entry: TimestampOffset, prev: TimestampOffset | None, base: int
) -> list[IndexMismatch]:
    """What is wrong with one time index entry's order, given the previous entry.

    Before the first entry the previous timestamp is -1 (``NO_TIMESTAMP``), as in Kafka: an
    index never holds an entry at or below it.
    """
    timestamp, offset = entry
    at = n * TimeIndex.ENTRY_SIZE
    found = _below_base(n, at, offset, base, timestamp=timestamp)
    if prev is not None and offset < prev.offset:
        found.append(
            IndexMismatch(
                Check.OFFSET_ORDER,
                n,
                at,
                f"offset {offset} is below the previous entry's offset {prev.offset}",
                offset,
                timestamp=timestamp,
                compared_with=prev.offset,
            )
        )
    prev_timestamp = NO_TIMESTAMP if prev is None else prev.timestamp
    if timestamp <= prev_timestamp:
        previous = (
            f"the previous entry's timestamp {prev_timestamp}"
            if n
            else f"{NO_TIMESTAMP}, the timestamp of no record (every entry's is above it)"
        )
        found.append(
            IndexMismatch(
                Check.TIMESTAMP_ORDER,
                n,
                at,
                f"timestamp {timestamp} is not above {previous}",
                offset,
                timestamp=timestamp,
                compared_with=prev_timestamp,
            )
        )
    return found


def _time_entry_batch_check(
    n: int,
    entry: TimestampOffset,
    cursor: _BatchCursor,
    fd: int,
    log_path: Path,
    *,
    deep: bool,
) -> Finding | None:
    """What is wrong between a time index entry and its segment: Kafka's two checks.

    The first batch whose last offset is >= the entry's must end exactly at it, and its max
    timestamp (with ``deep``, its records' largest timestamp, as Kafka's tool computes it) must
    be the entry's. Records that cannot be decoded are the segment's problem, not the index's.
    """
    timestamp, offset = entry
    at = n * TimeIndex.ENTRY_SIZE
    located = cursor.first_ending_at_or_after(offset)
    if located is None:
        if cursor.error is None:
            return IndexMismatch(
                Check.OFFSET_NOT_FOUND,
                n,
                at,
                f"offset {offset} is not in {log_path}: no batch ends at or after it",
                offset,
                timestamp=timestamp,
            )
        unreadable_at = getattr(cursor.error, "position", None)
        return IndexMismatch(
            Check.OFFSET_NOT_FOUND,
            n,
            at,
            f"offset {offset} was not found: {log_path} cannot be read past a corrupt batch: "
            f"{cursor.error}",
            offset,
            timestamp=timestamp,
            reason=f"the segment is unreadable from position {unreadable_at}",
        )
    position, batch = located
    if batch.last_offset != offset:
        return IndexMismatch(
            Check.OFFSET_NOT_FOUND,
            n,
            at,
            f"indexed offset {offset}, found log offset {batch.last_offset}: no batch of "
            f"{log_path} ends at offset {offset}",
            offset,
            timestamp=timestamp,
            log_offset=batch.last_offset,
            log_timestamp=batch.max_timestamp,
        )
    log_timestamp = batch.max_timestamp
    what = "has max timestamp"
    if deep:
        try:
            log_timestamp = records_max_timestamp(fd, position, batch, log_path)
        except TierlogError as exc:
            error_at = getattr(exc, "position", None)
            return SegmentReadError(
                n, error_at if isinstance(error_at, int) else None, str(exc), exc
            )
        what = "holds records up to timestamp"
    if log_timestamp == timestamp:
        return None
    return IndexMismatch(
        Check.TIMESTAMP,
        n,
        at,
        f"index timestamp {timestamp}, log timestamp {log_timestamp}: the batch of {log_path} "
        f"ending at offset {offset} {what} {log_timestamp}",
        offset,
        timestamp=timestamp,
        log_offset=batch.last_offset,
        log_timestamp=log_timestamp,
    )


def verify_time_index(index: TimeIndex, log_path: Path, *, deep: bool = False) -> Iterator[Finding]:
    """Check each entry's order, that its offset ends a batch, and that batch's max timestamp.

    ``deep`` compares with the records' largest timestamp instead of the batch header's, which
    decodes every indexed batch. ``OSError`` if the segment cannot be opened.
    """
    cursor = _BatchCursor(log_path)
    prev: TimestampOffset | None = None
    with open(log_path, "rb", buffering=0) as f:
        try:
            for n, entry in enumerate(index):
                yield from _time_entry_checks(n, entry, prev, index.base_offset)
                in_log = _time_entry_batch_check(n, entry, cursor, f.fileno(), log_path, deep=deep)
                if in_log is not None:
                    yield in_log
                prev = entry
        finally:
            cursor.close()
