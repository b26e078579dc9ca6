"""A log segment: ``<base>.log`` and its offset, time and transaction indexes.

A port of Kafka's ``LogSegment`` (``storage/.../internals/log/LogSegment.java``) and of the parts
of ``FileRecords`` it uses. The segment owns four files named by its base offset (``files``):

- ``.log``: record batches back to back, appended with ``pwrite`` at the current size;
- ``.index`` / ``.timeindex``: opened lazily (Kafka's ``LazyIndex``), so loading a log with
  thousands of segments does not open thousands of index files; a missing one is created
  preallocated to ``segment.index.bytes`` when first used;
- ``.txnindex``: the aborted transactions the segment completes, created by the first abort.

Index bookkeeping on append is ``indexer.SegmentIndexer`` (Kafka's ``LogSegment.append``): an
offset index entry about every ``index.interval.bytes``, and the time index follows the largest
timestamp seen. ``recover`` re-scans the batches with their CRCs, rebuilds all three indexes,
replays producer state and leader epochs, and truncates a torn or corrupt tail.

Reads return whole batches: ``read`` stops at the last batch that fits in ``max_size`` (Kafka's
``FileRecords.slice`` may end in a partial batch, which its clients skip; tierlog's readers need
not). With ``min_one_message`` the first batch is returned even when it is larger than
``max_size``, as Kafka does so a consumer never gets stuck on a large batch.

The class is not thread-safe, like Kafka's: the ``LocalLog`` serialises appends, truncations and
reads that depend on them. Positioned reads and writes (``os.pread``/``os.pwrite``) never move a
shared file offset, so concurrent readers of sealed segments are safe.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Final, NamedTuple

from tierlog.log.batch import (
    HEADER_SIZE_UP_TO_MAGIC,
    LENGTH_FIELD,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    ControlRecordType,
    RecordBatch,
    UnsupportedRecordFormatError,
    decode_batch,
    decode_control_record,
    read_batch_header,
)
from tierlog.log.files import (
    DELETED_FILE_SUFFIX,
    log_file,
    offset_index_file,
    time_index_file,
    transaction_index_file,
)
from tierlog.log.index import (
    NO_TIMESTAMP,
    IndexOffsetOverflowError,
    OffsetPosition,
    TimestampOffset,
)
from tierlog.log.indexer import SegmentIndexer, rebuild_indexes
from tierlog.log.leader_epoch_cache import LeaderEpochFileCache
from tierlog.log.log_config import LogConfig
from tierlog.log.offset_index import OffsetIndex
from tierlog.log.producer_state import (
    AppendOrigin,
    CompletedTxn,
    EndTxnMarker,
    ProducerStateManager,
)
from tierlog.log.reader import iter_batches
from tierlog.log.time_index import TimeIndex
from tierlog.log.txn_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult
from tierlog.spi import CorruptRecordError, IllegalStateError, InvalidArgumentError

__all__ = [
    "UNKNOWN_OFFSET",
    "FetchDataInfo",
    "LogOffsetMetadata",
    "LogOffsetPosition",
    "LogSegment",
    "LogSegmentOffsetOverflowError",
    "LogSegments",
    "RollParams",
    "TimestampAndOffset",
    "batch_spans",
    "read_end_txn_marker",
]

_LOG = logging.getLogger(__name__)

UNKNOWN_OFFSET: Final = -1
_SCAN_CHUNK: Final = 64 * 1024
_LEGACY_MIN_RECORD_SIZE: Final = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0
_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


# Value types -----------------------------------------------------------------------------------
class LogOffsetPosition(NamedTuple):
    """The batch that holds (or first follows) an offset: its base offset, position and size."""

    offset: int
    position: int
    size: int


class LogOffsetMetadata(NamedTuple):
    """An offset and, when known, the base offset and byte position of its segment.

    Kafka's ``LogOffsetMetadata``; ``segment_base_offset == -1`` means only the offset is known.
    """

    message_offset: int
    segment_base_offset: int = UNKNOWN_OFFSET
    relative_position_in_segment: int = -1

    @property
    def message_offset_only(self) -> bool:
        return self.segment_base_offset == UNKNOWN_OFFSET


class TimestampAndOffset(NamedTuple):
    """A record found by timestamp: its timestamp, offset and the leader epoch of its batch."""

    timestamp: int
    offset: int
    leader_epoch: int | None


class RollParams(NamedTuple):
    """What ``should_roll`` weighs (Kafka's ``RollParams``)."""

    max_segment_ms: int
    max_segment_bytes: int
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now: int


class FetchDataInfo(NamedTuple):
    """The result of a read: where it starts, the bytes of whole batches, aborted transactions.

    ``aborted_transactions`` is ``None`` unless the read was ``read_committed``; then it lists the
    aborted transactions overlapping the data returned (a consumer drops their records).
    ``first_entry_incomplete`` is true when the first batch did not fit in the size asked for
    (and ``min_one_message`` was false), so nothing was returned.
    """

    fetch_offset_metadata: LogOffsetMetadata
    records: bytes
    first_entry_incomplete: bool = False
    aborted_transactions: list[AbortedTxn] | None = None

    def batches(self) -> Iterator[RecordBatch]:
        """The headers of the batches in ``records``."""
        for _, header in iter_batches(self.records, verify_crc=False):
            yield header

    @property
    def size_in_bytes(self) -> int:
        return len(self.records)


class LogSegmentOffsetOverflowError(IndexOffsetOverflowError):
    """An offset cannot be stored relative to the segment's base (Kafka's
    ``LogSegmentOffsetOverflowException``): the segment must be rolled (or split) first."""

    def __init__(self, segment: LogSegment, offset: int, position: int | None = None) -> None:
        where = (
            f" (batch at position {position} of {segment.log_path})"
            if position is not None
            else f" ({segment.log_path})"
        )
        super().__init__(
            f"Detected offset overflow at offset {offset} in segment {segment!r}{where}: an offset "
            f"more than 2^31-1 above the base offset {segment.base_offset} cannot be indexed"
        )
        self.segment = segment
        self.offset = offset
        self.position = position


def batch_spans(data: bytes | bytearray | memoryview, limit: int | None = None) -> int:
    """How many leading bytes of ``data`` (at most ``limit``) are whole batches.

    Walks the ``Length`` fields only; a batch that does not fit ends the walk.
    """
    end = len(data) if limit is None else min(limit, len(data))
    pos = 0
    while pos + LOG_OVERHEAD <= end:
        (length,) = LENGTH_FIELD.unpack_from(data, pos + LENGTH_OFFSET)
        size = LOG_OVERHEAD + length
        if length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or pos + size > end:
            break
        pos += size
    return pos


def read_end_txn_marker(
    data: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    path: str | None = None,
    file_offset: int = 0,
) -> EndTxnMarker | None:
    """Decode the COMMIT/ABORT marker of the control batch at ``data[position]``.

    ``None`` for a control batch without records (the cleaner removed its transaction) or of
    another type (``LEADER_CHANGE``...). Raises ``CorruptRecordError`` for a malformed marker.
    """
    _, records = decode_batch(data, position, verify=False, path=path, file_offset=file_offset)
    if not records:
        return None
    try:
        control = decode_control_record(records[0])
    except CorruptRecordError as e:
        at = file_offset + position
        raise CorruptRecordError(f"{e} at position {at} of {path}", path=path, position=at) from e
    if control.type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        return None
    assert control.coordinator_epoch is not None
    return EndTxnMarker(control.type, control.coordinator_epoch, records[0].timestamp)


# The segment -----------------------------------------------------------------------------------
class LogSegment:
    """One segment of a partition's log; see the module docstring.

    Use ``LogSegment.open(directory, base_offset, config)``. ``suffix`` (``""``, ``.cleaned``,
    ``.swap``, ``.deleted``) is appended to every file name, as Kafka does while swapping or
    deleting segments.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        base_offset: int,
        *,
        index_interval_bytes: int = 4096,
        max_index_size: int = 10 * 1024 * 1024,
        roll_jitter_ms: int = 0,
        suffix: str = "",
        clock: Callable[[], int] | None = None,
    ) -> None:
        if base_offset < 0:
            raise InvalidArgumentError(f"segment base offset must be >= 0, got {base_offset}")
        self._dir = Path(directory)
        self._base_offset = base_offset
        self._index_interval_bytes = index_interval_bytes
        self._max_index_size = max_index_size
        self._roll_jitter_ms = roll_jitter_ms
        self._clock = clock or _wall_clock_ms
        self._log_path = log_file(self._dir, base_offset, suffix)
        self._offset_index_path = offset_index_file(self._dir, base_offset, suffix)
        self._time_index_path = time_index_file(self._dir, base_offset, suffix)
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._txn_index = TransactionIndex(
            base_offset, transaction_index_file(self._dir, base_offset, suffix)
        )
        self._fd: int | None = os.open(self._log_path, os.O_RDWR | os.O_CREAT | _O_CLOEXEC, 0o644)
        self._size = os.fstat(self._fd).st_size
        self._created = self._clock()
        self._rolling_based_timestamp: int | None = None
        self._max_ts: TimestampOffset | None = None  # None: read it from the time index
        self._indexer: SegmentIndexer | None = None

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        base_offset: int,
        config: LogConfig,
        *,
        suffix: str = "",
        clock: Callable[[], int] | None = None,
    ) -> LogSegment:
        """Open (creating it if needed) the segment at ``base_offset`` with ``config``'s sizes."""
        return cls(
            directory,
            base_offset,
            index_interval_bytes=config.index_interval_bytes,
            max_index_size=config.max_index_size,
            roll_jitter_ms=config.random_segment_jitter(),
            suffix=suffix,
            clock=clock,
        )

    # Properties ----------------------------------------------------------------------------------
    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def log_path(self) -> Path:
        return self._log_path

    @property
    def offset_index_path(self) -> Path:
        return self._offset_index_path

    @property
    def time_index_path(self) -> Path:
        return self._time_index_path

    @property
    def txn_index_path(self) -> Path:
        return self._txn_index.path

    @property
    def roll_jitter_ms(self) -> int:
        return self._roll_jitter_ms

    @property
    def offset_index(self) -> OffsetIndex:
        """The offset index, opened (or created) on first use."""
        if self._offset_index is None:
            self._offset_index = OffsetIndex(
                self._offset_index_path, self._base_offset, self._max_index_size
            )
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        """The time index, opened (or created) on first use."""
        if self._time_index is None:
            self._time_index = TimeIndex(
                self._time_index_path, self._base_offset, self._max_index_size
            )
        return self._time_index

    @property
    def txn_index(self) -> TransactionIndex:
        return self._txn_index

    @property
    def size(self) -> int:
        """Bytes in the ``.log`` file."""
        return self._size

    size_in_bytes = size

    def _require_fd(self) -> int:
        if self._fd is None:
            raise IllegalStateError(f"segment {self._log_path} is closed")
        return self._fd

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self._base_offset <= (1 << 31) - 1

    def __repr__(self) -> str:
        ts = self._max_ts.timestamp if self._max_ts is not None else NO_TIMESTAMP
        return (
            f"LogSegment(baseOffset={self._base_offset}, size={self._size}, "
            f"largestRecordTimestamp={ts})"
        )

    # Timestamps ----------------------------------------------------------------------------------
    @property
    def max_timestamp_and_offset(self) -> TimestampOffset:
        """The largest batch max timestamp so far and the last offset of its batch."""
        if self._indexer is not None:
            return self._indexer.max_timestamp_and_offset
        if self._max_ts is None:
            self._max_ts = self.time_index.last_entry
        return self._max_ts

    @property
    def max_timestamp_so_far(self) -> int:
        return self.max_timestamp_and_offset.timestamp

    def largest_record_timestamp(self) -> int | None:
        """The largest record timestamp, or None when no record has one."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else None

    def largest_timestamp(self) -> int:
        """The largest record timestamp, else the ``.log`` file's modification time (retention)."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.last_modified()

    def last_modified(self) -> int:
        """The ``.log`` file's modification time in ms."""
        return int(os.stat(self._log_path).st_mtime_ns // 1_000_000)

    def set_last_modified(self, ms: int) -> None:
        """Set the modification time of the log and index files (tests, split segments)."""
        ns = ms * 1_000_000
        for path in (self._log_path, self._offset_index_path, self._time_index_path):
            with contextlib.suppress(FileNotFoundError):
                os.utime(path, ns=(ns, ns))

    def _load_first_batch_timestamp(self) -> None:
        if self._rolling_based_timestamp is None and self._size > 0:
            for _, header in self._scan_headers(0):
                self._rolling_based_timestamp = header.max_timestamp
                break

    def time_waited_for_roll(self, now: int, message_timestamp: int) -> int:
        """How long the segment has waited to roll: by the first batch's timestamp if it has one
        (then against ``message_timestamp``), else by the wall clock since it was created."""
        self._load_first_batch_timestamp()
        ts = self._rolling_based_timestamp
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now - self._created

    def first_batch_timestamp(self) -> int | None:
        """The first batch's max timestamp, or None if there is no batch or it has none."""
        self._load_first_batch_timestamp()
        ts = self._rolling_based_timestamp
        return ts if ts is not None and ts >= 0 else None

    # Rolling -------------------------------------------------------------------------------------
    def should_roll(self, params: RollParams) -> bool:
        """Kafka's ``shouldRoll``: size, age (with this segment's jitter), a full index, or an
        offset that cannot be stored relative to the base offset."""
        reached_roll_ms = (
            self.time_waited_for_roll(params.now, params.max_timestamp_in_messages)
            > params.max_segment_ms - self._roll_jitter_ms
        )
        size = self._size
        return (
            size > params.max_segment_bytes - params.messages_size
            or (size > 0 and reached_roll_ms)
            or self.offset_index.is_full()
            or self.time_index.is_full()
            or not self.can_convert_to_relative_offset(params.max_offset_in_messages)
        )

    def on_become_inactive_segment(self) -> None:
        """The segment is no longer active: add the final time index entry and trim the indexes.

        The time index then ends with the segment's largest timestamp, which retention by time
        and the RLM read.
        """
        max_ts = self.max_timestamp_and_offset
        self.time_index.maybe_append(max_ts.timestamp, max_ts.offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def resize_indexes(self, size: int) -> None:
        """Give the indexes room again (the segment became active after loading)."""
        self.offset_index.resize(size)
        self.time_index.resize(size)

    # Appending -----------------------------------------------------------------------------------
    def append(
        self,
        largest_offset: int,
        records: bytes | bytearray | memoryview,
        batches: Sequence[RecordBatch] | None = None,
    ) -> None:
        """Append whole batches whose offsets are assigned; update the indexes.

        ``largest_offset`` is the last offset of ``records`` (checked against the index range
        first, ``LogSegmentOffsetOverflowError``). ``batches`` are the headers of ``records`` in
        order when the caller already parsed them (the log does), else they are parsed here.
        Kafka's ``append(largestOffset, records)``; the largest timestamp and its offset are
        taken from each batch, as Kafka does since KAFKA-16310.
        """
        size = len(records)
        if size == 0:
            return
        fd = self._require_fd()
        if not self.can_convert_to_relative_offset(largest_offset):
            raise LogSegmentOffsetOverflowError(self, largest_offset)
        if batches is None:
            batches = [header for _, header in iter_batches(records, verify_crc=False)]
        position = self._size
        view = memoryview(records)
        written = 0
        while written < size:
            written += os.pwrite(fd, view[written:], position + written)
        self._size = position + size
        indexer = self._indexer
        if indexer is None:
            indexer = self._new_indexer()
        for header in batches:
            batch_size = LOG_OVERHEAD + header.length
            indexer.append(position, header.last_offset, header.max_timestamp, batch_size)
            position += batch_size
        if position != self._size:
            raise InvalidArgumentError(
                f"the batch headers given cover {position - (self._size - size)} bytes, but "
                f"{size} bytes were appended"
            )

    def _new_indexer(self) -> SegmentIndexer:
        indexer = SegmentIndexer(
            self.offset_index,
            self.time_index,
            self._index_interval_bytes,
            max_timestamp_and_offset=self.max_timestamp_and_offset,
        )
        self._indexer = indexer
        return indexer

    def update_txn_index(self, completed: CompletedTxn, last_stable_offset: int) -> None:
        """Record an aborted transaction in the transaction index (a commit needs no entry)."""
        if completed.is_aborted:
            _LOG.debug(
                "Writing aborted transaction %s to transaction index, last stable offset is %d",
                completed,
                last_stable_offset,
            )
            self._txn_index.append(
                AbortedTxn(
                    completed.producer_id,
                    completed.first_offset,
                    completed.last_offset,
                    last_stable_offset,
                )
            )

    # Reading -------------------------------------------------------------------------------------
    def _scan_headers(
        self, start: int, end: int | None = None
    ) -> Iterator[tuple[int, RecordBatch]]:
        """Batch headers from ``start`` to ``end`` (default: the size), read in 64 KiB chunks.

        No CRC check; a header that is malformed or runs past the end raises
        ``CorruptRecordError`` naming the file and position.
        """
        fd = self._require_fd()
        stop = self._size if end is None else min(end, self._size)
        path = str(self._log_path)
        pos = start
        buf = b""
        buf_start = pos
        while pos < stop:
            off = pos - buf_start
            if off + RECORD_BATCH_OVERHEAD > len(buf):
                buf = os.pread(fd, max(_SCAN_CHUNK, RECORD_BATCH_OVERHEAD), pos)
                buf_start, off = pos, 0
                if len(buf) < min(HEADER_SIZE_UP_TO_MAGIC, stop - pos):
                    raise CorruptRecordError(
                        f"file ends early at position {pos} of {path}", path=path, position=pos
                    )
            header = read_batch_header(
                buf, off, end=off + (stop - pos), path=path, file_offset=buf_start
            )
            yield pos, header
            pos += LOG_OVERHEAD + header.length

    def batches(self, start_position: int = 0) -> Iterator[tuple[int, RecordBatch]]:
        """``(position, header)`` of every batch from ``start_position`` (no CRC check)."""
        return self._scan_headers(start_position)

    def read_bytes(self, position: int, size: int) -> bytes:
        """``size`` bytes at ``position`` (fewer at the end of the file)."""
        return os.pread(self._require_fd(), size, position)

    def translate_offset(self, offset: int, starting_position: int = 0) -> LogOffsetPosition | None:
        """The batch holding ``offset``, or the first batch after it; None past the last batch.

        An offset index lookup gives where to start; the batches are scanned from there (Kafka's
        ``translateOffset`` / ``FileRecords.searchForOffsetFromPosition``).
        """
        mapping = self.offset_index.lookup(offset)
        for pos, header in self._scan_headers(max(mapping.position, starting_position)):
            if header.last_offset >= offset:
                return LogOffsetPosition(header.base_offset, pos, LOG_OVERHEAD + header.length)
        return None

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> FetchDataInfo | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_size`` bytes.

        ``max_position`` bounds what may be exposed (the high watermark's or LSO's position;
        default: the segment size). With ``min_one_message`` the first batch is returned even if
        larger than ``max_size``. None when ``start_offset`` is past the last batch.
        """
        if max_size < 0:
            raise InvalidArgumentError(f"Invalid max size {max_size} for log read from segment")
        located = self.translate_offset(start_offset)
        if located is None:
            return None
        metadata = LogOffsetMetadata(located.offset, self._base_offset, located.position)
        adjusted = max(max_size, located.size) if min_one_message else max_size
        limit = self._size if max_position is None else min(max_position, self._size)
        fetch_size = min(limit - located.position, adjusted)
        incomplete = adjusted < located.size
        if fetch_size <= 0:
            return FetchDataInfo(metadata, b"", incomplete)
        data = os.pread(self._require_fd(), fetch_size, located.position)
        whole = batch_spans(data)
        return FetchDataInfo(metadata, data[:whole] if whole != len(data) else data, incomplete)

    def fetch_upper_bound_offset(self, start: LogOffsetMetadata, fetch_size: int) -> int | None:
        """An offset certainly past a fetch of ``fetch_size`` bytes from ``start`` (or None)."""
        found = self.offset_index.fetch_upper_bound_offset(
            OffsetPosition(start.message_offset, start.relative_position_in_segment), fetch_size
        )
        return found.offset if found is not None else None

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        return self._txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    def read_next_offset(self) -> int:
        """The offset after the last batch (the base offset when empty); scans from the last
        offset index entry."""
        start = self.offset_index.lookup(self.offset_index.last_offset).position
        next_offset = self._base_offset
        for _, header in self._scan_headers(start):
            next_offset = header.next_offset
        return next_offset

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int | None = None
    ) -> TimestampAndOffset | None:
        """The first record at or after ``starting_offset`` whose timestamp is >= ``timestamp``.

        Kafka's ``findOffsetByTimestamp``: the time index gives a lower bound, the offset index a
        position, then batches are scanned and the first batch whose max timestamp reaches the
        target is decoded. None if no record qualifies.
        """
        start = self._base_offset if starting_offset is None else starting_offset
        ts_entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(ts_entry.offset, start)).position
        path = str(self._log_path)
        for pos, header in self._scan_headers(position):
            if header.max_timestamp < timestamp:
                continue
            data = self.read_bytes(pos, LOG_OVERHEAD + header.length)
            _, records = decode_batch(data, verify=False, path=path, file_offset=pos)
            for record in records:
                if record.timestamp >= timestamp and record.offset >= start:
                    epoch = header.partition_leader_epoch
                    return TimestampAndOffset(
                        record.timestamp, record.offset, epoch if epoch >= 0 else None
                    )
        return None

    def _largest_timestamp_after(self, position: int) -> TimestampOffset:
        best = TimestampOffset(NO_TIMESTAMP, -1)
        for _, header in self._scan_headers(position):
            if header.max_timestamp > best.timestamp:
                best = TimestampOffset(header.max_timestamp, header.last_offset)
        return best

    def _read_largest_timestamp(self) -> TimestampOffset:
        last = self.time_index.last_entry
        position = self.offset_index.lookup(last.offset).position
        after = self._largest_timestamp_after(position)
        return after if after.timestamp > last.timestamp else last

    # Recovery and truncation -------------------------------------------------------------------
    def recover(
        self,
        producer_state: ProducerStateManager | None = None,
        leader_epoch_cache: LeaderEpochFileCache | None = None,
    ) -> int:
        """Rebuild the indexes from the batches and cut off an invalid tail; bytes truncated.

        Every batch is CRC-checked (Kafka's ``ensureValid``); the first one that is torn,
        corrupt or malformed ends the valid data and everything from it on is truncated (with a
        warning). Along the way producer state is replayed (aborted transactions go back into the
        transaction index) and leader epochs above the cache's latest are assigned. An offset
        that does not fit the index raises ``LogSegmentOffsetOverflowError``; a legacy batch
        (magic 0/1) raises ``UnsupportedRecordFormatError`` instead of being truncated.
        """
        self._txn_index.reset()
        self._indexer = None
        self._max_ts = None
        path = str(self._log_path)
        valid_bytes = 0
        oi = self.offset_index

        def batches() -> Iterator[tuple[int, int, int, int, int]]:
            nonlocal valid_bytes
            try:
                for pos, header in iter_batches(self._log_path, verify_crc=True, end=self._size):
                    size = LOG_OVERHEAD + header.length
                    if not oi.can_append_offset(header.last_offset):
                        raise LogSegmentOffsetOverflowError(self, header.last_offset, pos)
                    marker = None
                    if header.is_control and header.has_producer_id:
                        data = self.read_bytes(pos, size)
                        marker = read_end_txn_marker(data, path=path, file_offset=pos)
                    yield pos, header.base_offset, header.last_offset, header.max_timestamp, size
                    valid_bytes = pos + size
                    epoch = header.partition_leader_epoch
                    if leader_epoch_cache is not None and epoch >= 0:
                        latest = leader_epoch_cache.latest_epoch()
                        if latest is None or epoch > latest:
                            leader_epoch_cache.assign(epoch, header.base_offset)
                    if producer_state is not None:
                        self._update_producer_state(producer_state, header, marker)
            except CorruptRecordError as e:
                _LOG.warning(
                    "Found invalid messages in log segment %s at byte offset %d: %s",
                    path,
                    valid_bytes,
                    e,
                )
            except UnsupportedRecordFormatError as e:
                if not self._is_torn_legacy_lookalike(e.position):
                    raise
                _LOG.warning(
                    "Found invalid bytes in log segment %s at byte offset %d (not a batch: "
                    "impossible size): %s",
                    path,
                    valid_bytes,
                    e,
                )

        result = rebuild_indexes(batches(), oi, self.time_index, self._index_interval_bytes)
        self._max_ts = result.max_timestamp_and_offset
        truncated = self._size - valid_bytes
        if truncated > 0:
            _LOG.warning(
                "Truncated %d invalid bytes at the end of segment %s during recovery",
                truncated,
                path,
            )
            self._truncate_log(valid_bytes)
        return truncated

    def _is_torn_legacy_lookalike(self, position: int) -> bool:
        """True when the "legacy batch" at ``position`` has an impossible size.

        The shallow reader checks the magic byte before the size, so a torn tail of zeros (an
        extended or preallocated file after a crash) reads as magic 0. Kafka checks the size
        first: below a legacy record's 14-byte minimum, or past the end of the file, it is
        corruption to truncate, not a legacy message set to keep.
        """
        head = self.read_bytes(position, LOG_OVERHEAD)
        if len(head) < LOG_OVERHEAD:
            return True
        length: int = LENGTH_FIELD.unpack_from(head, LENGTH_OFFSET)[0]
        return length < _LEGACY_MIN_RECORD_SIZE or position + LOG_OVERHEAD + length > self._size

    def _update_producer_state(
        self, producer_state: ProducerStateManager, header: RecordBatch, marker: EndTxnMarker | None
    ) -> None:
        if header.has_producer_id:
            info = producer_state.prepare_update(header.producer_id, AppendOrigin.REPLICATION)
            completed = info.append(header, marker)
            producer_state.update(info)
            if completed is not None:
                lso = producer_state.last_stable_offset(completed)
                self.update_txn_index(completed, lso)
                producer_state.complete_txn(completed)
        producer_state.update_map_end_offset(header.last_offset + 1)

    def _truncate_log(self, position: int) -> int:
        fd = self._require_fd()
        if position > self._size:
            raise InvalidArgumentError(
                f"cannot truncate {self._log_path} of {self._size} bytes to {position}"
            )
        truncated = self._size - position
        if truncated:
            os.ftruncate(fd, position)
            self._size = position
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset`` and index entries at or above it.

        Returns the bytes removed. The indexes get their preallocated room back, since a
        truncated segment becomes the active one.
        """
        mapping = self.translate_offset(offset)
        oi, ti = self.offset_index, self.time_index
        oi.truncate_to(offset)
        ti.truncate_to(offset)
        self._txn_index.truncate_to(offset)
        oi.resize(oi.max_index_size)
        ti.resize(ti.max_index_size)
        truncated = 0 if mapping is None else self._truncate_log(mapping.position)
        if self._size == 0:
            self._created = self._clock()
            self._rolling_based_timestamp = None
        self._indexer = None
        self._max_ts = self._read_largest_timestamp()
        return truncated

    # Files ---------------------------------------------------------------------------------------
    def sanity_check(self) -> None:
        """Check the index files before trusting them; raise to have the segment recovered.

        ``FileNotFoundError`` when the offset or time index is missing (Kafka only requires the
        offset index; a missing time index would silently disable time lookups and retention by
        record time, so it is rebuilt too); ``CorruptIndexError`` (a ``CorruptRecordError``) for
        an inconsistent index: entries out of order, or pointing past the end of the ``.log``.
        """
        for path in (self._offset_index_path, self._time_index_path):
            if not path.exists():
                raise FileNotFoundError(f"Index file {path} does not exist")
        self.offset_index.sanity_check(segment_size=self._size)
        self.time_index.sanity_check()
        self._txn_index.sanity_check()

    def flush(self) -> None:
        """``fsync`` the log and its indexes.

        As in Kafka this creates index files not yet created (a segment rolled but never
        appended to), so a flushed segment always has its three files on disk.
        """
        os.fsync(self._require_fd())
        self.offset_index.flush()
        self.time_index.flush()
        self._txn_index.flush()

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename every file from ``old_suffix`` to ``new_suffix`` (``changeFileSuffixes``)."""

        def renamed(path: Path) -> Path:
            name = path.name
            if old_suffix and not name.endswith(old_suffix):
                raise InvalidArgumentError(f"{path} does not end with {old_suffix!r}")
            stem = name[: len(name) - len(old_suffix)] if old_suffix else name
            return path.with_name(stem + new_suffix)

        new_log = renamed(self._log_path)
        os.replace(self._log_path, new_log)
        self._log_path = new_log
        new_offset_index = renamed(self._offset_index_path)
        if self._offset_index is not None:
            self._offset_index.rename_to(new_offset_index)
        elif self._offset_index_path.exists():
            os.replace(self._offset_index_path, new_offset_index)
        self._offset_index_path = new_offset_index
        new_time_index = renamed(self._time_index_path)
        if self._time_index is not None:
            self._time_index.rename_to(new_time_index)
        elif self._time_index_path.exists():
            os.replace(self._time_index_path, new_time_index)
        self._time_index_path = new_time_index
        self._txn_index.rename_to(renamed(self._txn_index.path))

    def has_suffix(self, suffix: str) -> bool:
        return all(
            p.name.endswith(suffix)
            for p in (
                self._log_path,
                self._offset_index_path,
                self._time_index_path,
                self._txn_index.path,
            )
        )

    def update_parent_dir(self, directory: str | os.PathLike[str]) -> None:
        """The partition directory was renamed; the files are now in ``directory``."""
        self._dir = Path(directory)
        self._log_path = self._dir / self._log_path.name
        self._offset_index_path = self._dir / self._offset_index_path.name
        self._time_index_path = self._dir / self._time_index_path.name
        if self._offset_index is not None:
            self._offset_index.update_parent_dir(self._dir)
        if self._time_index is not None:
            self._time_index.update_parent_dir(self._dir)
        self._txn_index.update_parent_dir(self._dir)

    def close(self) -> None:
        """Write the final time index entry, trim the indexes, ``fsync`` and close the files."""
        if self._fd is None:
            return
        if self._indexer is not None or self._max_ts is not None:
            try:
                max_ts = self.max_timestamp_and_offset
                self.time_index.maybe_append(max_ts.timestamp, max_ts.offset, skip_full_check=True)
            except Exception as e:  # Kafka swallows this with a warning too
                _LOG.warning("Failed to append the final time index entry of %s: %s", self, e)
        try:
            for index in (self._offset_index, self._time_index):
                if index is not None:
                    index.close()
            os.fsync(self._fd)
        finally:
            self.close_handlers()

    def close_handlers(self) -> None:
        """Close the files without writing anything (the disk may have failed)."""
        for index in (self._offset_index, self._time_index):
            if index is not None:
                with contextlib.suppress(OSError):
                    index.close_handler()
        self._txn_index.close()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)

    @property
    def closed(self) -> bool:
        return self._fd is None

    def delete_if_exists(self) -> None:
        """Close and delete the four files (those that exist)."""
        self.close_handlers()
        for what, path in (
            ("log", self._log_path),
            ("offset index", self._offset_index_path),
            ("time index", self._time_index_path),
            ("transaction index", self._txn_index.path),
        ):
            try:
                path.unlink()
                _LOG.info("Deleted %s %s.", what, path)
            except FileNotFoundError:
                if what != "transaction index":
                    _LOG.info("Failed to delete %s %s because it does not exist.", what, path)

    def delete(self) -> None:
        """Delete the segment as Kafka does: rename its files ``*.deleted``, then delete them.

        The rename comes first so that a crash in between leaves only ``.deleted`` files, which
        the log loader removes; a reader never sees a half-deleted segment under its real name.
        """
        if not self.has_suffix(DELETED_FILE_SUFFIX):
            self.change_file_suffixes("", DELETED_FILE_SUFFIX)
        self.delete_if_exists()

    def deleted(self) -> bool:
        """True when none of the four files exists any more."""
        return not any(
            p.exists()
            for p in (
                self._log_path,
                self._offset_index_path,
                self._time_index_path,
                self._txn_index.path,
            )
        )


# The segments of a log -------------------------------------------------------------------------
class LogSegments:
    """A log's segments by base offset (Kafka's ``LogSegments``, a sorted map).

    Lookups are binary searches over the sorted base offsets; the last segment is the active one.
    Changes are made under the log's lock, but ``values()`` is also read without it (a status
    query, the RLM's threads), as Kafka reads its concurrent map: a segment is in the map before
    its base offset is listed and unlisted before it leaves the map, and ``values()`` skips a
    base offset whose segment went in between, so a reader sees a segment or not, never a
    ``KeyError``.
    """

    def __init__(self, segments: Iterable[LogSegment] = ()) -> None:
        self._by_base: dict[int, LogSegment] = {}
        self._bases: list[int] = []
        for segment in segments:
            self.add(segment)

    def add(self, segment: LogSegment) -> LogSegment | None:
        """Add ``segment``, replacing (and returning) one with the same base offset."""
        base = segment.base_offset
        previous = self._by_base.get(base)
        self._by_base[base] = segment
        if previous is None:
            insort(self._bases, base)
        return previous

    def remove(self, base_offset: int) -> LogSegment | None:
        if base_offset not in self._by_base:
            return None
        del self._bases[bisect_left(self._bases, base_offset)]
        return self._by_base.pop(base_offset)

    def clear(self) -> None:
        self._bases.clear()
        self._by_base.clear()

    def get(self, base_offset: int) -> LogSegment | None:
        return self._by_base.get(base_offset)

    def contains(self, base_offset: int) -> bool:
        return base_offset in self._by_base

    def __len__(self) -> int:
        return len(self._bases)

    def __bool__(self) -> bool:
        return bool(self._bases)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self.values())

    @property
    def base_offsets(self) -> list[int]:
        return list(self._bases)

    def values(
        self, from_offset: int | None = None, to_offset: int | None = None
    ) -> list[LogSegment]:
        """All segments, or those holding offsets in ``[from_offset, to_offset)``: from the one
        that includes ``from_offset`` to the one that includes ``to_offset - 1`` (Kafka's
        ``values(from, to)``)."""
        if from_offset is None:
            return [s for s in map(self._by_base.get, self._bases) if s is not None]
        to = (1 << 63) - 1 if to_offset is None else to_offset
        if from_offset == to:
            return []
        if to < from_offset:
            raise InvalidArgumentError(
                f"Invalid log segment range: requested segments from offset {from_offset} "
                f"which is greater than limit offset {to}"
            )
        start = bisect_right(self._bases, from_offset) - 1
        start = max(start, 0)
        stop = bisect_left(self._bases, to)
        return [self._by_base[b] for b in self._bases[start:stop]]

    def non_active_segments_from(self, from_offset: int) -> list[LogSegment]:
        """The sealed segments holding offsets from ``from_offset`` on."""
        if not self._bases:
            return []
        active_base = self._bases[-1]
        if from_offset > active_base:
            return []
        return self.values(from_offset, active_base)

    def first_segment(self) -> LogSegment | None:
        return self._by_base[self._bases[0]] if self._bases else None

    def last_segment(self) -> LogSegment | None:
        return self._by_base[self._bases[-1]] if self._bases else None

    @property
    def active_segment(self) -> LogSegment:
        segment = self.last_segment()
        if segment is None:
            raise IllegalStateError("the log has no segment")
        return segment

    def floor_segment(self, offset: int) -> LogSegment | None:
        """The segment with the largest base offset <= ``offset``."""
        i = bisect_right(self._bases, offset)
        return self._by_base[self._bases[i - 1]] if i else None

    def higher_segment(self, offset: int) -> LogSegment | None:
        """The segment with the smallest base offset > ``offset``."""
        i = bisect_right(self._bases, offset)
        return self._by_base[self._bases[i]] if i < len(self._bases) else None

    def lower_segment(self, offset: int) -> LogSegment | None:
        """The segment with the largest base offset < ``offset``."""
        i = bisect_left(self._bases, offset)
        return self._by_base[self._bases[i - 1]] if i else None

    def higher_segments(self, offset: int) -> list[LogSegment]:
        i = bisect_right(self._bases, offset)
        return [self._by_base[b] for b in self._bases[i:]]

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._by_base.values())

    def close(self) -> None:
        for segment in self.values():
            segment.close()

    def close_handlers(self) -> None:
        for segment in self.values():
            segment.close_handlers()

    def update_parent_dir(self, directory: str | os.PathLike[str]) -> None:
        for segment in self.values():
            segment.update_parent_dir(directory)
