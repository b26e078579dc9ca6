"""Reads below the local log start, served from remote storage (Kafka's ``RemoteLogManager.read``).

When a fetch asks for an offset that is only in remote storage (``OffsetMovedToTieredStorage``
from the local log), ``RemoteLogReader.read`` does what Kafka's RLM does:

1. the epoch of the offset from the partition's leader epoch cache, then the RLMM's
   ``COPY_SEGMENT_FINISHED`` segment holding it under that epoch; none is
   ``OffsetOutOfRangeError``;
2. the offset index (through the ``RemoteIndexCache``) gives the byte position of the largest
   indexed batch at or below the offset; the segment is streamed from there and batches whose last
   offset is below the fetch offset are skipped; a segment with no such batch (compaction left a
   gap) moves the read to the next segment (``epoch_for_offset(end + 1)``);
3. no batch anywhere: empty records;
4. ``min_one_message`` false and the first batch larger than ``max_bytes``: empty records.
   Otherwise the buffer is ``max(first batch, max_bytes)`` with ``min_one_message``, else
   ``max_bytes``: the first batch, then the stream's next bytes up to that size;
5. ``fetch_offset_metadata`` is the first batch's base offset, the segment's start offset and the
   batch's byte position;
6. ``read_committed``: the aborted transactions overlapping the data, from the transaction index
   of this segment and, while the search is incomplete, of the next remote segments that have one
   (``lineage.next_segment_with_txn_index``; segments marked ``txn_idx_empty`` are skipped), then
   of the local segments.

**One bounded request per read.** Kafka opens the segment stream from the start position to the
segment's end and reads what it needs. Here the RSM is asked for a byte range that is known to
hold everything the read needs, computed from the (cached) offset index: the batch holding the
fetch offset starts at or before the first index entry after the start position (that entry's
batch ends at an offset above the target), so the range ends at that entry's position plus
``max(max_bytes, header)``; with ``min_one_message`` it also reaches the following index entry,
which bounds the end of that first batch. A store that serves ranges (an object store's ranged
GET) then transfers at most about ``index.interval.bytes + max_bytes`` bytes. When an index lies
(it bounds too little), the stream is reopened past the range, so the answer never depends on the
bound. With a warm index cache a read makes exactly one RSM request.

**Reading the bytes once.** A catch-up read moves about ``max_bytes`` per call, so what it costs
beyond the RSM's own read is what matters: the bytes are read once, never joined or copied again.
The bytes before the batch holding the offset (normally the one batch of the index entry found,
which Kafka reads too) are read in one call into the reading thread's scratch buffer (a
``bytearray`` kept per thread; with the stream's ``read1`` when it has one, so that a buffered
stream does not read ahead bytes it would then copy out) and their headers walked there. Where
the index says the answer starts (at the entry found if its batch ends at the offset, else at
the next entry), ``max_bytes`` are read from the stream in one ``read`` and that ``bytes`` object
is returned as it is once its first header shows the batch holding the offset: the same read, into
the same kind of object, as a raw ranged fetch of those bytes. Anything unusual (the index was
wrong, the first batch is larger than ``max_bytes``, the range or the segment ends first, a bad
header) hands those bytes to the buffer, where the general path walks the headers (reading on
with ``readinto``) and gives the answer, copied out of the buffer once, or the error. Either way
the answer is Kafka's to the byte. The offset index itself is searched in memory
(``RemoteIndexCacheEntry`` decodes it once): locating the range is three ``bisect`` calls.

**Where the next fetch starts.** A read also remembers, in the segment's index cache entry,
where the batch after its last whole batch starts and which offset that batch begins after
(``RemoteIndexCacheEntry.remember_batch_start``): exactly what a catching-up consumer asks for
next. That fetch then opens its range at that batch, not at the index entry below it, and its
first ``read`` is the answer: no bytes read and skipped. Kafka's broker keeps the same knowledge
for local reads in the fetch offset's ``LogOffsetMetadata``; a segment never changes, so it
cannot go stale.

**Frames, not bytes.** After a read has copied ``max_bytes`` the CPU caches hold the data, not
the interpreter's working set, and each Python function call on the way back costs about a
microsecond and a half instead of a tenth. So the warm path avoids frames: namedtuples built
with ``tuple.__new__``, the metrics and the fetch quota recorded with one queue append each
(folded when they are read), small helpers inlined where every read goes through them.

**Partial last batch.** As in Kafka, the records end wherever the buffer does, which may be inside
a batch (a Kafka consumer drops such a tail); ``trim_partial_batch`` cuts it off for callers that
want whole batches only, as the local log returns.

**Checks.** Every batch header crossed or returned is checked (size, magic); a failure is
``CorruptRecordError`` naming the remote segment and byte position. CRCs are not checked by
default (``RemoteLogReader(verify_crc=True)`` checks every whole batch returned): Kafka's broker
does not verify on this path either, its consumer does, and so does tierlog's ``Node.fetch``,
which decodes what a read returns with ``iter_batches_with_records(verify_crc=True)``; a corrupt
remote batch still ends in a typed error before anyone sees its records, without checksumming
every byte twice (about 0.1 ms per MiB, a quarter of a warm read). Kafka treats a segment that
ends inside a batch as the end of the data; here a truncated batch before the buffer's end is
corruption, since going on to the next segment would silently skip records.

**Errors.** A segment deleted between the metadata lookup and the fetch (the RSM says
``RemoteResourceNotFoundException``, or the index cache cannot fetch its offset index): its cache
entry is dropped, the lookup is repeated once, then ``OffsetOutOfRangeError``. Retriable RSM
errors (``RetriableRemoteStorageException``) propagate unchanged.

Also here: ListOffsets over remote segments (``RemoteLogReader.find_offset_by_timestamp``, Kafka's
``findOffsetByTimestamp``) and the special targets (``earliest_offset``, ``earliest_local_offset``,
``latest_tiered_offset``); and ``RemoteReaderPool``, Kafka's ``remote-log-reader`` thread pool
with its bounded queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import closing, contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, BinaryIO, Final, NamedTuple, Protocol, Self, TypeVar

from tierlog.log.batch import (
    ATTRIBUTES_OFFSET,
    CRC_FIELD,
    CRC_OFFSET,
    HEADER,
    HEADER_BOUNDS,
    HEADER_SIZE_UP_TO_MAGIC,
    LEGACY_RECORD_OVERHEAD_V0,
    LENGTH_AND_MAGIC,
    LENGTH_FIELD,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
    WALK_BAD,
    WALK_END,
    RecordBatch,
    bad_magic,
    corrupt,
    crc_mismatch,
    decode_batch,
    walk_batch_headers,
)
from tierlog.log.crc import crc32c
from tierlog.log.index import OffsetPosition
from tierlog.log.leader_epoch_cache import LeaderEpochFileCache
from tierlog.log.local_log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    LocalLog,
    OffsetOutOfRangeError,
)
from tierlog.log.record import NO_TIMESTAMP
from tierlog.log.segment import (
    FetchDataInfo,
    LogOffsetMetadata,
    LogSegment,
    TimestampAndOffset,
    batch_spans,
)
from tierlog.log.txn_index import AbortedTxn
from tierlog.rlm.index_cache import DecodedOffsetIndex, RemoteIndexCache, RemoteIndexCacheEntry
from tierlog.rlm.lineage import (
    build_filtered_leader_epoch_map,
    is_remote_segment_within_leader_epochs,
    next_segment_with_txn_index,
)
from tierlog.spi import (
    CorruptRecordError,
    IllegalStateError,
    InvalidArgumentError,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteResourceNotFoundException,
    RemoteStorageManager,
    RetriableRemoteStorageException,
    TopicIdPartition,
)

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "FetchMetrics",
    "FetchQuota",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "LogProvider",
    "RemoteLogReader",
    "RemoteReadRejectedError",
    "RemoteReaderPool",
    "RemoteStorageFetchInfo",
    "earliest_local_offset",
    "earliest_offset",
    "latest_tiered_offset",
    "offset_for_special_timestamp",
    "trim_partial_batch",
]

_LOG = logging.getLogger(__name__)

READ_UNCOMMITTED: Final = "read_uncommitted"
READ_COMMITTED: Final = "read_committed"
_ISOLATIONS: Final = frozenset({READ_UNCOMMITTED, READ_COMMITTED})

LATEST_TIERED_TIMESTAMP: Final = -5
"""Kafka's ``ListOffsetsRequest.LATEST_TIERED_TIMESTAMP``: the highest offset in remote storage."""
NO_PARTITION_LEADER_EPOCH: Final = -1

_MIN_SCRATCH: Final = 64 * 1024
"""The size of a new read buffer (it grows when a read needs more)."""
_SCRATCH_MAX: Final = 4 << 20
"""The largest read buffer a thread keeps between reads (room for a fetch of the default
``max.partition.fetch.bytes``, 1 MiB, and what precedes it; larger reads allocate their own),
and the most bytes read ahead of the batch holding the offset in one call."""
_MAX_OFFSET: Final = (1 << 63) - 1

_T = TypeVar("_T")

LogProvider = Callable[[TopicIdPartition], LocalLog | None]
"""The local log of a partition hosted here, or None (Kafka's ``fetchLog``)."""


class FetchMetrics(Protocol):
    """What the reader records (``tierlog.rlm.metrics.RemoteStorageMetrics`` provides it)."""

    def record_remote_read(
        self, topic: str, num_bytes: int, seconds: float, *, failed: bool
    ) -> None: ...


class FetchQuota(Protocol):
    """The KIP-956 fetch quota the bytes read count against (``tierlog.rlm.quota``)."""

    def record(self, num_bytes: float) -> None: ...


# Requests and results --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RemoteStorageFetchInfo:
    """One partition's part of a fetch that must be served from remote storage.

    Kafka's ``RemoteStorageFetchInfo``; ``max_bytes`` is already the smaller of the request's and
    the partition's limits, ``isolation`` is ``read_uncommitted`` or ``read_committed``.
    """

    max_bytes: int
    min_one_message: bool
    topic_id_partition: TopicIdPartition
    fetch_offset: int
    isolation: str = READ_UNCOMMITTED

    def __post_init__(self) -> None:
        if self.max_bytes < 0:
            raise InvalidArgumentError(f"max_bytes must be >= 0, got {self.max_bytes}")
        if self.fetch_offset < 0:
            raise InvalidArgumentError(f"fetch_offset must be >= 0, got {self.fetch_offset}")
        if self.isolation not in _ISOLATIONS:
            raise InvalidArgumentError(
                f"isolation must be {READ_UNCOMMITTED!r} or {READ_COMMITTED!r}, "
                f"got {self.isolation!r}"
            )


class RemoteReadRejectedError(RetriableRemoteStorageException):
    """The remote read pool is full: the read was not queued (Kafka's
    ``RejectedExecutionException`` from ``asyncRead``).

    A ``RetriableRemoteStorageException`` because the condition is transient and the same read
    succeeds once the pool drains: code that already backs off and retries on retriable remote
    storage errors (the fetch path, a consumer) handles it correctly without knowing this type.
    """


def trim_partial_batch(info: FetchDataInfo) -> FetchDataInfo:
    """``info`` without a partial batch at the end of its records (whole batches only).

    ``RemoteLogReader.read`` returns what Kafka sends, which may end inside a batch; a consumer
    facing API that hands out batches uses this first. The result is ``info`` itself when there
    is nothing to cut.
    """
    whole = batch_spans(info.records)
    if whole == len(info.records):
        return info
    return info._replace(records=info.records[:whole])


# Special ListOffsets targets -------------------------------------------------------------------
def earliest_offset(log: LocalLog) -> TimestampAndOffset:
    """``EARLIEST_TIMESTAMP`` (-2): the log start offset (remote data included), with the first
    cached epoch when it starts at or before it (Kafka's rule)."""
    start = log.log_start_offset
    earliest = log.leader_epoch_cache.earliest_entry()
    epoch = earliest.epoch if earliest is not None and earliest.start_offset <= start else None
    return TimestampAndOffset(NO_TIMESTAMP, start, epoch)


def earliest_local_offset(log: LocalLog) -> TimestampAndOffset:
    """``EARLIEST_LOCAL_TIMESTAMP`` (-4): the first offset on local disk, with its epoch (the
    same as ``earliest_offset`` for a partition that is not tiered)."""
    if not log.remote_log_enabled:
        return earliest_offset(log)
    local = log.local_log_start_offset
    return TimestampAndOffset(NO_TIMESTAMP, local, log.leader_epoch_cache.epoch_for_offset(local))


def latest_tiered_offset(log: LocalLog) -> TimestampAndOffset:
    """``LATEST_TIERED_TIMESTAMP`` (-5): the highest offset copied to remote storage.

    ``-1`` with epoch ``-1`` when nothing was copied or the partition is not tiered; otherwise
    the epoch of that offset if the cache knows it (Kafka's rule).
    """
    if not log.remote_log_enabled:
        return TimestampAndOffset(NO_TIMESTAMP, -1, NO_PARTITION_LEADER_EPOCH)
    highest = log.highest_offset_in_remote_storage
    epoch = log.leader_epoch_cache.epoch_for_offset(highest)
    if epoch is None and highest == -1:
        epoch = NO_PARTITION_LEADER_EPOCH
    return TimestampAndOffset(NO_TIMESTAMP, highest, epoch)


def offset_for_special_timestamp(log: LocalLog, target: int) -> TimestampAndOffset:
    """The answer for one of the negative ListOffsets targets -1, -2, -4, -5."""
    if target == EARLIEST_TIMESTAMP:
        return earliest_offset(log)
    if target == EARLIEST_LOCAL_TIMESTAMP:
        return earliest_local_offset(log)
    if target == LATEST_TIERED_TIMESTAMP:
        return latest_tiered_offset(log)
    if target == LATEST_TIMESTAMP:
        return TimestampAndOffset(NO_TIMESTAMP, log.log_end_offset, log.latest_epoch())
    raise InvalidArgumentError(f"unsupported special ListOffsets target {target}")


def _local_segments(log: LocalLog) -> list[LogSegment]:
    """A snapshot of the log's segments, taken under its lock (retention may delete some
    meanwhile; Kafka's ``logSegments()`` is a snapshot too)."""
    return log.log_segments(0, _MAX_OFFSET)


# Reading a remote segment ----------------------------------------------------------------------
class _SegmentGone(Exception):
    """The segment's data or offset index is not in remote storage any more (deleted)."""

    def __init__(self, metadata: RemoteLogSegmentMetadata) -> None:
        super().__init__(f"remote segment {metadata.remote_log_segment_id} is gone")
        self.metadata = metadata


def _describe(metadata: RemoteLogSegmentMetadata) -> str:
    """How errors name a remote segment: its id, partition and offsets."""
    return (
        f"remote segment {metadata.remote_log_segment_id.id} of "
        f"{metadata.topic_id_partition} (offsets {metadata.start_offset}-{metadata.end_offset})"
    )


# The calling thread's read buffer -------------------------------------------------------------
_scratch = threading.local()


def _take_scratch(size: int) -> bytearray:
    """A buffer of at least ``size`` bytes: the thread's scratch buffer if it is free and large
    enough (it is then taken until given back), else a new one."""
    buffer: bytearray | None = getattr(_scratch, "buffer", None)
    if buffer is not None and len(buffer) >= size:
        _scratch.buffer = None
        return buffer
    return bytearray(size)


def _give_back_scratch(buffer: bytearray) -> None:
    """Keep ``buffer`` as the thread's scratch buffer, unless it is larger than
    ``_SCRATCH_MAX`` or the thread already keeps a larger one."""
    if len(buffer) > _SCRATCH_MAX:
        return
    current: bytearray | None = getattr(_scratch, "buffer", None)
    if current is None or len(current) < len(buffer):
        _scratch.buffer = buffer


def _clamp_end(metadata: RemoteLogSegmentMetadata, end: int | None) -> int | None:
    """``end`` (inclusive), or None when the range reaches the segment's end anyway."""
    size = metadata.segment_size_in_bytes
    if end is not None and size > 0 and end >= size - 1:
        return None
    return end


def _open_range(
    rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, start: int, end: int | None
) -> BinaryIO:
    """The RSM's stream of ``start..end`` of the segment; a segment gone is ``_SegmentGone``."""
    size = metadata.segment_size_in_bytes
    if end is not None and size > 0 and end >= size - 1:
        end = None  # _clamp_end, inlined (a frame less on every read)
    try:
        return rsm.fetch_log_segment(metadata, start, end)
    except RemoteResourceNotFoundException as exc:
        raise _SegmentGone(metadata) from exc


class _SegmentBuffer:
    """The bytes of a remote segment from a position, from one ranged RSM request.

    ``end`` (inclusive) bounds the request; if the read needs bytes past it, the rest of the
    segment is requested from there (an index that bounded too little must not change the
    answer). Two ways to read:

    - ``fill`` reads into one buffer (``readinto``) exactly the bytes asked for: the stream is
      never asked for more, so its position is always ``available``. The buffer holds the
      segment's bytes from ``base`` to ``available``; ``fill`` may drop those before its
      ``keep`` position when it needs room, so scanning a long range keeps about one batch in
      memory. It is the thread's scratch buffer (``_take_scratch``), given back by ``close``.
    - ``read_direct`` returns the stream's next bytes as a new ``bytes`` object, which a read
      can return as it is (no copy); ``push`` hands them to the buffer when it cannot.

    A buffered stream (the ``local`` RSM's ``io.BufferedReader``) reads a buffer-full ahead on
    a small read and copies it out on the next: ``fill(..., ahead=False)``, for the bytes before
    a ``read_direct``, uses the stream's ``read1`` when it has one (the bytes it holds, else one
    read of the underlying stream, without read-ahead), so that they do not cost a copy of the
    stream's buffer-full of the bytes after them.
    """

    def __init__(
        self,
        rsm: RemoteStorageManager,
        metadata: RemoteLogSegmentMetadata,
        start: int,
        end: int | None,
        stream: BinaryIO | None = None,
    ) -> None:
        """``stream``: the request for ``start..end`` when the caller made it already
        (``_open_range``); the buffer then owns it."""
        self._rsm = rsm
        self._metadata = metadata
        self._end = _clamp_end(metadata, end)
        self._base = start
        self._filled = 0
        self._at_end = False
        self._stream = stream if stream is not None else _open_range(rsm, metadata, start, end)
        self._scratch: bytearray | None = None  # taken on first use: a direct read needs none

    def _open(self, start: int, end: int | None) -> BinaryIO:
        return _open_range(self._rsm, self._metadata, start, end)

    @property
    def data(self) -> bytearray:
        """The buffer: ``data[i]`` is the segment's byte at position ``base + i``, for positions
        below ``available`` (the rest is stale). Valid until the next ``fill`` or ``push``."""
        return self._data

    @property
    def _data(self) -> bytearray:
        scratch = self._scratch
        if scratch is None:
            scratch = self._scratch = _take_scratch(_MIN_SCRATCH)
        return scratch

    @property
    def base(self) -> int:
        """The segment position of ``data[0]``."""
        return self._base

    @property
    def available(self) -> int:
        """The segment position after the last byte read (the stream's position)."""
        return self._base + self._filled

    def fill(self, upto: int, keep: int, *, ahead: bool = True) -> int:
        """Read until the buffer holds the segment's bytes up to position ``upto`` (exclusive)
        or the segment ends; ``available`` afterwards.

        The bytes before position ``keep`` may be dropped to make room (``base`` moves up).
        ``ahead=False``: the stream should not read ahead (a ``read_direct`` follows).
        """
        have = self._base + self._filled
        if upto <= have or self._at_end:
            return have
        if upto - self._base > len(self._data):
            self._make_room(min(keep, have), upto)
        with memoryview(self._data) as view:
            while self._base + self._filled < upto:
                position = self._base + self._filled
                n = self._read_into(view[self._filled : upto - self._base], ahead)
                if n:
                    self._filled += n
                elif self._end is not None and position > self._end:
                    # The bounded range was too short: the rest of the segment, from here.
                    self._stream.close()
                    self._end = None
                    self._stream = self._open(position, None)
                else:
                    self._at_end = True
                    break
        return self._base + self._filled

    def _read_into(self, view: memoryview, ahead: bool) -> int:
        """Some of the stream's next bytes into ``view``; how many (0 at its end)."""
        stream: Any = self._stream  # a BinaryIO need not have read1 or readinto
        read1 = None if ahead else getattr(stream, "read1", None)
        if read1 is None:
            readinto = getattr(stream, "readinto", None)
            if readinto is not None:
                return int(readinto(view) or 0)
            read1 = stream.read
        chunk = read1(len(view))
        view[: len(chunk)] = chunk
        return len(chunk)

    def read_direct(self, size: int) -> bytes:
        """The stream's next ``size`` bytes as a new ``bytes`` object (fewer where the request
        or the segment ends, or the stream reads short), from ``available`` on.

        They are not in the buffer: a caller that does not keep them must ``push`` them.
        """
        return self._stream.read(size)

    def push(self, data: bytes, keep: int) -> None:
        """Put in the buffer what ``read_direct`` returned (it follows ``available``)."""
        have = self._base + self._filled
        if have + len(data) - self._base > len(self._data):
            self._make_room(min(keep, have), have + len(data))
        self._data[self._filled : self._filled + len(data)] = data
        self._filled += len(data)

    def _make_room(self, keep: int, upto: int) -> None:
        """Drop the bytes before position ``keep``, then grow the buffer to reach ``upto``."""
        data = self._data
        drop = keep - self._base
        if drop > 0:
            kept = self._filled - drop
            if kept:
                with memoryview(data) as view:
                    view[:kept] = view[drop : self._filled]  # a memmove
            self._base = keep
            self._filled = kept
        if upto - self._base > len(data):
            grown = bytearray(upto - self._base)
            with memoryview(data) as view:
                grown[: self._filled] = view[: self._filled]
            self._scratch = grown

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            if self._scratch is not None:
                _give_back_scratch(self._scratch)


def _header_at(
    buffer: _SegmentBuffer, at: int, metadata: RemoteLogSegmentMetadata
) -> RecordBatch | None:
    """The header of the batch at segment position ``at``, or None at the end of the segment.

    Checked as Kafka's ``RemoteLogInputStream`` reads it: the 17 bytes up to the magic first
    (the size is checked before the magic), then the rest of the header.
    """
    available = buffer.fill(at + HEADER_SIZE_UP_TO_MAGIC, at) - at
    if available <= 0:
        return None
    if available < HEADER_SIZE_UP_TO_MAGIC:
        raise corrupt(
            f"truncated record batch header ({available} bytes, at least "
            f"{HEADER_SIZE_UP_TO_MAGIC} needed)",
            at,
            _describe(metadata),
        )
    length, magic = LENGTH_AND_MAGIC.unpack_from(buffer.data, at - buffer.base + LENGTH_OFFSET)
    if length < LEGACY_RECORD_OVERHEAD_V0:
        raise corrupt(
            f"record size {length} is smaller than the minimum record overhead "
            f"({LEGACY_RECORD_OVERHEAD_V0})",
            at,
            _describe(metadata),
        )
    if magic != MAGIC_V2:
        raise bad_magic(magic, at, _describe(metadata))
    if length < MIN_BATCH_LENGTH:
        raise corrupt(
            f"record batch length {length} is smaller than the minimum {MIN_BATCH_LENGTH}",
            at,
            _describe(metadata),
        )
    available = buffer.fill(at + RECORD_BATCH_OVERHEAD, at) - at
    if available < RECORD_BATCH_OVERHEAD:
        raise corrupt(
            "the segment ends inside a record batch header: "
            f"{available - HEADER_SIZE_UP_TO_MAGIC} of "
            f"{RECORD_BATCH_OVERHEAD - HEADER_SIZE_UP_TO_MAGIC} bytes could be read",
            at,
            _describe(metadata),
        )
    return RecordBatch._make(HEADER.unpack_from(buffer.data, at - buffer.base))


def _require_batch(
    buffer: _SegmentBuffer, at: int, size: int, metadata: RemoteLogSegmentMetadata
) -> None:
    """Read the whole batch at ``at`` (``size`` bytes, its header read already); a segment that
    ends inside it is corrupt."""
    available = buffer.fill(at + size, at) - at
    if available < size:
        raise corrupt(
            f"the segment ends inside a record batch: {available - RECORD_BATCH_OVERHEAD} of "
            f"{size - RECORD_BATCH_OVERHEAD} bytes could be read",
            at,
            _describe(metadata),
        )


def _skip_below(buffer: _SegmentBuffer, at: int, stop: int, offset: int) -> int:
    """The position of the first batch from ``at`` on that is not a sound batch, wholly
    before ``stop`` and held in the buffer, of offsets below ``offset``: the batches a read of
    ``offset`` skips, checked as ``_header_at`` and ``_require_batch`` would pass them. The read
    goes on from there (which reports whatever stopped this walk, if it is an error)."""
    data = buffer.data
    base = buffer.base
    unpack = HEADER_BOUNDS.unpack_from
    while at + HEADER_BOUNDS.size <= stop:
        base_offset, length, magic, last_delta = unpack(data, at - base)
        nxt = at + LOG_OVERHEAD + length
        if (
            length < MIN_BATCH_LENGTH
            or magic != MAGIC_V2
            or nxt > stop
            or base_offset + last_delta >= offset
        ):
            break
        at = nxt
    return at


def _check_batches(
    records: memoryview | bytes,
    first_position: int,
    metadata: RemoteLogSegmentMetadata,
    verify_crc: bool,
    entry: RemoteIndexCacheEntry | None = None,
) -> None:
    """Check the header of every whole batch of ``records`` (length, magic) and, with
    ``verify_crc``, its CRC; a partial last batch cannot be checked. The first fault in byte
    order is the one raised.

    The header walk is one ``walk_batch_headers`` call (C when it is built): without
    ``verify_crc``, the read's only per-batch work. Given the segment's index ``entry``, the
    walk's end is remembered in it: the batch after the last whole one starts there, and the
    consumer's next fetch asks for its offset (``remember_batch_start``).
    """
    end = len(records)
    pos, status, last = walk_batch_headers(records, MIN_BATCH_LENGTH, MAGIC_V2)
    if verify_crc:
        at = 0
        with memoryview(records) as view:  # no copy of the batches
            while at < pos:  # the batches before ``pos`` are whole, with sound headers
                nxt = at + LOG_OVERHEAD + LENGTH_FIELD.unpack_from(view, at + LENGTH_OFFSET)[0]
                (stored,) = CRC_FIELD.unpack_from(view, at + CRC_OFFSET)
                computed = crc32c(view[at + ATTRIBUTES_OFFSET : nxt])
                if computed != stored:
                    raise crc_mismatch(stored, computed, first_position + at, _describe(metadata))
                at = nxt
    if status == WALK_BAD:
        (length,) = LENGTH_FIELD.unpack_from(records, pos + LENGTH_OFFSET)
        raise _invalid_batch(records, pos, length, first_position, metadata)
    if status == WALK_END and pos + LOG_OVERHEAD <= end:
        # Fewer than 17 bytes left: a partial batch, unless its Length says it ends there.
        (length,) = LENGTH_FIELD.unpack_from(records, pos + LENGTH_OFFSET)
        if pos + LOG_OVERHEAD + length <= end:
            raise _invalid_batch(records, pos, length, first_position, metadata)
    if entry is not None and last >= 0 and first_position + pos < metadata.segment_size_in_bytes:
        base_offset, _, _, last_delta = HEADER_BOUNDS.unpack_from(records, last)
        entry.remember_batch_start(base_offset + last_delta + 1, first_position + pos)


def _invalid_batch(
    records: memoryview | bytes,
    pos: int,
    length: int,
    first_position: int,
    metadata: RemoteLogSegmentMetadata,
) -> CorruptRecordError:
    """The error for a batch of ``records`` at ``pos`` with a bad Length or magic (a Length
    below the minimum may leave the magic outside ``records``)."""
    magic = records[pos + MAGIC_OFFSET] if pos + MAGIC_OFFSET < len(records) else None
    return corrupt(
        f"invalid record batch (length {length}, magic {magic})",
        first_position + pos,
        _describe(metadata),
    )


class _SegmentRead(NamedTuple):
    """What was read from one segment: the first batch's base offset and position, the bytes,
    and whether the first batch was too large to return (a tuple: built on every read)."""

    base_offset: int
    position: int
    records: bytes
    first_entry_incomplete: bool


# The reader ------------------------------------------------------------------------------------
class RemoteLogReader:
    """Serves reads and ListOffsets below the local log start from remote storage.

    ``log_for`` gives the local log of a partition (its leader epoch cache maps offsets to
    epochs, its segments complete the aborted-transaction search): a ``LocalLog`` for a reader of
    one partition, or a function of the ``TopicIdPartition`` (None for a partition not hosted
    here). ``metrics`` and ``fetch_quota`` receive what Kafka's ``RemoteLogReader`` task
    records; ``clock`` (seconds, monotonic) times reads. Thread-safe: reads run concurrently on
    the ``RemoteReaderPool``.

    ``verify_crc`` also CRC-checks every whole batch a read returns. Off by default, as on
    Kafka's broker, which does not verify on this path either: the consumer does, and tierlog's
    ``Node.fetch`` decodes what it returns with ``iter_batches_with_records(verify_crc=True)``,
    so a corrupt remote batch still ends in a typed ``CorruptRecordError`` before anyone sees
    its records, while checking here too would checksum every byte twice (about 0.1 ms per MiB,
    a quarter of a warm read). The headers (length bounds, magic) are checked either way.
    """

    def __init__(
        self,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
        index_cache: RemoteIndexCache,
        log_for: LocalLog | LogProvider,
        *,
        metrics: FetchMetrics | None = None,
        fetch_quota: FetchQuota | None = None,
        clock: Callable[[], float] = time.monotonic,
        verify_crc: bool = False,
    ) -> None:
        self._rsm = rsm
        self._verify_crc = verify_crc
        self._rlmm = rlmm
        self._cache = index_cache
        self._metrics = metrics
        self._fetch_quota = fetch_quota
        self._clock = clock
        if isinstance(log_for, LocalLog):
            only = log_for

            def single(tp: TopicIdPartition) -> LocalLog | None:
                mine = only.topic_partition
                return only if (tp.topic, tp.partition) == (mine.topic, mine.partition) else None

            self._log_for: LogProvider = single
        else:
            self._log_for = log_for

    @property
    def index_cache(self) -> RemoteIndexCache:
        return self._cache

    # Read ----------------------------------------------------------------------------------------
    def read(self, fetch_info: RemoteStorageFetchInfo) -> FetchDataInfo:
        """Kafka's ``RemoteLogManager.read`` (see the module docstring), with what Kafka's
        ``RemoteLogReader`` task records around it: the read time, the fetch request and bytes
        meters (an error meter for failures other than ``OffsetOutOfRangeError``) and the bytes
        returned against the fetch quota (KIP-956)."""
        started = self._clock()
        try:
            info = self._read(fetch_info)
        except OffsetOutOfRangeError:
            self._record(fetch_info.topic_id_partition.topic, started, 0, failed=False)
            raise
        except Exception:
            self._record(fetch_info.topic_id_partition.topic, started, 0, failed=True)
            raise
        # _record, inlined for the success path (a frame less on every read).
        num_bytes = len(info.records)
        if self._metrics is not None:
            self._metrics.record_remote_read(
                fetch_info.topic_id_partition.topic,
                num_bytes,
                self._clock() - started,
                failed=False,
            )
        if self._fetch_quota is not None:
            self._fetch_quota.record(num_bytes)
        return info

    def _record(self, topic: str, started: float, num_bytes: int, *, failed: bool) -> None:
        if self._metrics is not None:
            self._metrics.record_remote_read(
                topic, num_bytes, self._clock() - started, failed=failed
            )
        if self._fetch_quota is not None:
            self._fetch_quota.record(num_bytes)

    def _read(self, fetch_info: RemoteStorageFetchInfo) -> FetchDataInfo:
        tip = fetch_info.topic_id_partition
        log = self._log_for(tip)
        epochs = log.leader_epoch_cache if log is not None else None
        offset = fetch_info.fetch_offset
        metadata = self._segment_for(tip, epochs, offset)
        try:
            return self._read_from(metadata, fetch_info, log, epochs)
        except _SegmentGone as gone:
            self._cache.remove(gone.metadata.remote_log_segment_id.id)
            _LOG.info(
                "Remote segment %s was deleted during a read of offset %d of %s: looking again",
                gone.metadata.remote_log_segment_id.id,
                offset,
                tip,
            )
        metadata = self._segment_for(tip, epochs, offset)
        try:
            return self._read_from(metadata, fetch_info, log, epochs)
        except _SegmentGone as gone:
            self._cache.remove(gone.metadata.remote_log_segment_id.id)
            raise OffsetOutOfRangeError(
                f"Offset {offset} of partition {tip} is not in remote storage any more: "
                f"{_describe(gone.metadata)} was deleted while it was being read"
            ) from gone.__cause__

    def _segment_for(
        self, tip: TopicIdPartition, epochs: LeaderEpochFileCache | None, offset: int
    ) -> RemoteLogSegmentMetadata:
        epoch = epochs.epoch_for_offset(offset) if epochs is not None else None
        metadata = (
            self._rlmm.remote_log_segment_metadata(tip, epoch, offset)
            if epoch is not None
            else None
        )
        if metadata is None:
            raise OffsetOutOfRangeError(
                f"Received request for offset {offset} for leader epoch "
                f"{epoch if epoch is not None else 'NOT AVAILABLE'} and partition {tip} which "
                "does not exist in remote tier."
            )
        return metadata

    def _next_segment(
        self, metadata: RemoteLogSegmentMetadata, epochs: LeaderEpochFileCache | None
    ) -> RemoteLogSegmentMetadata | None:
        """Kafka's ``findNextSegmentMetadata``: the segment holding ``end_offset + 1``."""
        if epochs is None:
            return None
        offset = metadata.end_offset + 1
        epoch = epochs.epoch_for_offset(offset)
        if epoch is None:
            return None
        return self._rlmm.remote_log_segment_metadata(metadata.topic_id_partition, epoch, offset)

    @contextmanager
    def _index_entry(self, metadata: RemoteLogSegmentMetadata) -> Iterator[RemoteIndexCacheEntry]:
        """The segment's index cache entry, held for the ``with`` block; a segment whose offset
        or time index is gone from remote storage is ``_SegmentGone``."""
        try:
            entry = self._cache.acquire_entry(metadata)
        except RemoteResourceNotFoundException as exc:
            raise _SegmentGone(metadata) from exc
        try:
            yield entry
        finally:
            self._cache.release(entry)

    def _read_from(
        self,
        metadata: RemoteLogSegmentMetadata,
        fetch_info: RemoteStorageFetchInfo,
        log: LocalLog | None,
        epochs: LeaderEpochFileCache | None,
    ) -> FetchDataInfo:
        offset = fetch_info.fetch_offset
        committed = fetch_info.isolation == READ_COMMITTED
        current: RemoteLogSegmentMetadata | None = metadata
        while current is not None:
            try:
                entry, offsets = self._cache.offsets_entry(current)
            except RemoteResourceNotFoundException as exc:
                raise _SegmentGone(current) from exc
            found = self._read_segment(current, entry, offsets, fetch_info)
            if found is None:
                current = self._next_segment(current, epochs)
                continue
            if found.first_entry_incomplete:
                return FetchDataInfo(
                    LogOffsetMetadata(offset), b"", True, [] if committed else None
                )
            # Built with tuple.__new__ (as batch.py builds headers): NamedTuple's __new__ is a
            # Python function, a frame on every read.
            where = (found.base_offset, current.start_offset, found.position)
            info = tuple.__new__(
                FetchDataInfo,
                (tuple.__new__(LogOffsetMetadata, where), found.records, False, None),
            )
            if not committed:
                return info
            # The first index entry certainly past the bytes returned (Kafka's
            # fetchUpperBoundOffset) bounds the aborted transactions that matter.
            bound = offsets.first_at_or_after(found.position + len(found.records))
            upper = bound.offset if bound is not None else current.end_offset + 1
            aborted = self._aborted_transactions(current, found.base_offset, upper, log, epochs)
            return info._replace(aborted_transactions=aborted)
        return FetchDataInfo(LogOffsetMetadata(offset), b"", False, [] if committed else None)

    @staticmethod
    def _range_end(
        bound: OffsetPosition | None,
        after: OffsetPosition | None,
        max_bytes: int,
        min_one_message: bool,
    ) -> int | None:
        """The last byte position the read may need (inclusive), or None: to the segment's end.

        ``bound`` is the first index entry after the start position, ``after`` the one after it.
        The batch holding the target starts at or before ``bound`` (that batch's last offset is
        above the target); the bytes returned start at that batch and are at most ``max_bytes``,
        or the first batch whole with ``min_one_message``, whose end is bounded by ``after``.
        """
        if bound is None:
            return None
        need = bound.position + max(max_bytes, RECORD_BATCH_OVERHEAD)
        if min_one_message:
            if after is None:
                return None
            need = max(need, after.position)
        return need - 1

    def _read_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        entry: RemoteIndexCacheEntry,
        offsets: DecodedOffsetIndex,
        fetch_info: RemoteStorageFetchInfo,
    ) -> _SegmentRead | None:
        """Steps 2 and 4 for one segment; None when it holds no batch at or past the offset."""
        offset = fetch_info.fetch_offset
        max_bytes = fetch_info.max_bytes
        min_one = fetch_info.min_one_message
        want = max(max_bytes, RECORD_BATCH_OVERHEAD)
        expected = entry.batch_starts.get(offset)
        if expected is not None:
            # A read before this one ended where the batch holding the offset starts; that
            # batch ends at the next index entry after it, at the latest.
            start = expected
            end: int | None = start + want - 1
            if min_one:
                after_position = offsets.position_after(start)
                end = None if after_position < 0 else max(start + want, after_position) - 1
        else:
            found, bound, after = offsets.read_bounds(offset)
            start = found.position
            end = self._range_end(bound, after, max_bytes, min_one)
            # Where the index says the batch holding the offset starts: at ``found`` if its
            # batch ends at the offset, else (the batches before ``bound`` end below it) at
            # ``bound``.
            expected = start
            if found.offset < offset:
                expected = bound.position if bound is not None else None
        stream = _open_range(self._rsm, metadata, start, end)
        data = b""
        if expected == start:
            # The usual case (always so for a consumer's next fetch): the request starts at the
            # batch holding the offset, and its first ``want`` bytes are the answer.
            try:
                data = stream.read(want)
                direct = self._direct_answer(data, entry, metadata, start, fetch_info)
            except BaseException:
                stream.close()
                raise
            if direct is not None:
                stream.close()
                return direct
            expected = None  # tried: the general path below finds the answer, or the error
        buffer = _SegmentBuffer(self._rsm, metadata, start, end, stream)
        try:
            if data:
                buffer.push(data, start)
                del data
            at = start
            if expected is not None and start < expected <= start + _SCRATCH_MAX:
                # The batches to skip, in one read, walked in memory.
                have = buffer.fill(expected, start, ahead=False)
                at = _skip_below(buffer, start, min(have, expected), offset)
            while True:
                if at == expected and buffer.available == at:
                    direct = self._read_direct(buffer, entry, metadata, at, fetch_info)
                    if direct is not None:
                        return direct
                header = _header_at(buffer, at, metadata)
                if header is None:
                    return None
                size = header.size_in_bytes
                if header.last_offset >= offset:
                    break
                _require_batch(buffer, at, size, metadata)  # skipped, but it must be whole
                at += size
            if not min_one and size > max_bytes:
                return self._first_batch_too_large(
                    metadata, header.base_offset, at, size, fetch_info
                )
            _require_batch(buffer, at, size, metadata)
            capacity = max(size, max_bytes) if min_one else max_bytes
            stop = min(buffer.fill(at + capacity, at), at + capacity)
            begin = at - buffer.base
            with (
                memoryview(buffer.data) as view,
                view[begin : stop - buffer.base] as records,
            ):
                returned = bytes(records)
            _check_batches(returned, at, metadata, self._verify_crc, entry)
            return _SegmentRead(header.base_offset, at, returned, False)
        finally:
            buffer.close()

    def _read_direct(
        self,
        buffer: _SegmentBuffer,
        entry: RemoteIndexCacheEntry,
        metadata: RemoteLogSegmentMetadata,
        at: int,
        fetch_info: RemoteStorageFetchInfo,
    ) -> _SegmentRead | None:
        """``_direct_answer`` of the buffer's next bytes (the batches before ``at`` skipped);
        when there is none, the bytes go to the buffer for the general path."""
        data = buffer.read_direct(max(fetch_info.max_bytes, RECORD_BATCH_OVERHEAD))
        direct = self._direct_answer(data, entry, metadata, at, fetch_info)
        if direct is None:
            buffer.push(data, at)
        return direct

    def _direct_answer(
        self,
        data: bytes,
        entry: RemoteIndexCacheEntry,
        metadata: RemoteLogSegmentMetadata,
        at: int,
        fetch_info: RemoteStorageFetchInfo,
    ) -> _SegmentRead | None:
        """The answer when the index says the batch at ``at`` holds the offset and ``data``
        are the ``max(max_bytes, header)`` bytes from there, read in one piece: returned as
        they are (no copy) when they start with a sound header of a batch holding the offset,
        the first batch whole. Anything else (the index was wrong, a batch larger than
        ``max_bytes``, the segment or the request ends, corruption) is None: the general path
        then finds the answer, or the error, from the same bytes.
        """
        max_bytes = fetch_info.max_bytes
        want = max(max_bytes, RECORD_BATCH_OVERHEAD)
        if len(data) != want:
            return None
        base_offset, length, magic, last_delta = HEADER_BOUNDS.unpack_from(data)
        if (
            length < MIN_BATCH_LENGTH
            or magic != MAGIC_V2
            or base_offset + last_delta < fetch_info.fetch_offset
        ):
            return None
        size = LOG_OVERHEAD + length
        if fetch_info.min_one_message:
            capacity = max(size, max_bytes)
        elif size > max_bytes:
            return self._first_batch_too_large(metadata, base_offset, at, size, fetch_info)
        else:
            capacity = max_bytes
        if capacity > want:
            return None
        records = data if capacity == want else data[:capacity]
        _check_batches(records, at, metadata, self._verify_crc, entry)
        return tuple.__new__(_SegmentRead, (base_offset, at, records, False))  # no __new__ frame

    @staticmethod
    def _first_batch_too_large(
        metadata: RemoteLogSegmentMetadata,
        base_offset: int,
        at: int,
        size: int,
        fetch_info: RemoteStorageFetchInfo,
    ) -> _SegmentRead:
        """Step 4's empty answer: ``min_one_message`` is false and the first batch (at ``at``,
        ``size`` bytes) is larger than ``max_bytes``."""
        _LOG.debug(
            "Returning no records for offset %d of %s: the first batch (%d bytes) is larger "
            "than max_bytes %d",
            fetch_info.fetch_offset,
            metadata.topic_id_partition,
            size,
            fetch_info.max_bytes,
        )
        return _SegmentRead(base_offset, at, b"", True)

    def _aborted_transactions(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_offset: int,
        upper_bound: int,
        log: LocalLog | None,
        epochs: LeaderEpochFileCache | None,
    ) -> list[AbortedTxn]:
        """Step 6: this segment's, the next remote segments', then the local segments' aborted
        transactions overlapping ``[start_offset, upper_bound)``, without duplicates."""
        found: list[AbortedTxn] = []
        complete = False
        current: RemoteLogSegmentMetadata | None = metadata
        while not complete and current is not None:
            if not current.txn_idx_empty:
                with self._index_entry(current) as entry:
                    result = entry.collect_aborted_txns(start_offset, upper_bound)
                found.extend(result.aborted_transactions)
                complete = result.is_complete
            if not complete:
                nxt = (
                    next_segment_with_txn_index(
                        self._rlmm, current.topic_id_partition, epochs, current.end_offset + 1
                    )
                    if epochs is not None
                    else None
                )
                if nxt is not None and nxt.end_offset <= current.end_offset:
                    _LOG.warning(
                        "The RLMM returned %s as the segment after offset %d: stopping the remote "
                        "aborted-transaction search",
                        nxt,
                        current.end_offset,
                    )
                    nxt = None
                current = nxt
        if not complete and log is not None:
            for segment in _local_segments(log):
                try:
                    result = segment.collect_aborted_txns(start_offset, upper_bound)
                except IllegalStateError:
                    continue  # deleted by local retention meanwhile: its data is remote
                found.extend(result.aborted_transactions)
                if result.is_complete:
                    break
        # A transaction can be listed twice (a segment both remote and local); Kafka's set
        # keys on (producer id, first offset), the two fields a fetch response carries.
        seen: set[tuple[int, int]] = set()
        unique: list[AbortedTxn] = []
        for txn in found:
            key = (txn.producer_id, txn.first_offset)
            if key not in seen:
                seen.add(key)
                unique.append(txn)
        return unique

    # ListOffsets ---------------------------------------------------------------------------------
    def find_offset_by_timestamp(
        self,
        tp: TopicIdPartition,
        timestamp: int,
        starting_offset: int,
        epoch_cache: LeaderEpochFileCache,
        log: LocalLog,
    ) -> TimestampAndOffset | None:
        """The first record at or after ``starting_offset`` with a timestamp >= ``timestamp``,
        looked for in remote segments (Kafka's ``findOffsetByTimestamp``).

        For each epoch from the one of ``starting_offset`` upwards, the first listed segment that
        is ``COPY_SEGMENT_FINISHED``, within the leader's lineage, ends at or after
        ``starting_offset`` and has a max timestamp >= ``timestamp`` is searched: in remote
        storage when it starts below the first local segment, otherwise in the local segments
        (the first whose largest timestamp reaches the target), which is cheaper. None when no
        remote segment qualifies (the caller then searches the local log). A segment deleted
        meanwhile raises ``RemoteResourceNotFoundException``.
        """
        epoch = epoch_cache.epoch_for_offset(starting_offset)
        lineage = build_filtered_leader_epoch_map(epoch_cache.epoch_with_offsets())
        while epoch is not None:
            for metadata in self._rlmm.list_remote_log_segments(tp, epoch):
                if not (
                    metadata.max_timestamp_ms >= timestamp
                    and metadata.end_offset >= starting_offset
                    and is_remote_segment_within_leader_epochs(
                        metadata, log.log_end_offset, lineage
                    )
                    and metadata.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                ):
                    continue
                segments = _local_segments(log)
                if not segments or metadata.start_offset < segments[0].base_offset:
                    return self._lookup_timestamp(metadata, timestamp, starting_offset)
                for segment in segments:
                    if segment.largest_timestamp() >= timestamp:
                        return segment.find_offset_by_timestamp(timestamp, starting_offset)
            epoch = epoch_cache.next_epoch(epoch)
        return None

    def _lookup_timestamp(
        self, metadata: RemoteLogSegmentMetadata, timestamp: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        """Kafka's ``lookupTimestamp``: scan the segment from the time index's position."""
        try:
            with self._index_entry(metadata) as entry:
                start = entry.lookup_timestamp(timestamp, starting_offset).position
            with closing(_SegmentBuffer(self._rsm, metadata, start, None)) as buffer:
                at = start
                while True:
                    header = _header_at(buffer, at, metadata)
                    if header is None:
                        return None
                    size = header.size_in_bytes
                    _require_batch(buffer, at, size, metadata)
                    if header.max_timestamp >= timestamp and header.last_offset >= starting_offset:
                        begin = at - buffer.base
                        batch = bytes(buffer.data[begin : begin + size])
                        _, records = decode_batch(batch, path=_describe(metadata), file_offset=at)
                        for record in records:
                            if record.timestamp >= timestamp and record.offset >= starting_offset:
                                epoch = header.partition_leader_epoch
                                return TimestampAndOffset(
                                    record.timestamp,
                                    record.offset,
                                    epoch if epoch != NO_PARTITION_LEADER_EPOCH else None,
                                )
                    at += size
        except _SegmentGone as gone:
            self._cache.remove(metadata.remote_log_segment_id.id)
            cause = gone.__cause__
            assert isinstance(cause, RemoteResourceNotFoundException)
            raise cause from None


# The reader pool -------------------------------------------------------------------------------
class RemoteReaderPool:
    """Kafka's ``remote-log-reader`` pool: ``threads`` workers and at most ``max_pending_tasks``
    reads waiting for one (``remote.log.reader.threads`` = 10,
    ``remote.log.reader.max.pending.tasks`` = 100).

    ``submit`` never blocks: a read that finds every worker busy and the queue full is rejected
    with ``RemoteReadRejectedError``, as Kafka's ``asyncRead`` throws
    ``RejectedExecutionException``, so a burst of remote fetches cannot pile up without bound.
    ``queue_size`` and ``idle_percent`` are Kafka's ``RemoteLogReaderTaskQueueSize`` and
    ``RemoteLogReaderAvgIdlePercent`` gauges (the latter a fraction, ``1 - busy / threads``).
    """

    def __init__(
        self,
        reader: RemoteLogReader | Callable[[RemoteStorageFetchInfo], FetchDataInfo],
        *,
        threads: int = 10,
        max_pending_tasks: int = 100,
        thread_name_prefix: str = "remote-log-reader",
    ) -> None:
        if threads < 1:
            raise InvalidArgumentError(f"threads must be >= 1, got {threads}")
        if max_pending_tasks < 1:
            raise InvalidArgumentError(f"max_pending_tasks must be >= 1, got {max_pending_tasks}")
        self._read = reader.read if isinstance(reader, RemoteLogReader) else reader
        self._threads_count = threads
        self._max_pending = max_pending_tasks
        self._cond = threading.Condition()
        self._pending: deque[tuple[Future[Any], Callable[[], Any]]] = deque()
        self._idle = threads
        self._active = 0
        self._rejected = 0
        self._completed = 0
        self._closed = False
        self._workers = [
            threading.Thread(target=self._work, name=f"{thread_name_prefix}-{i}", daemon=True)
            for i in range(threads)
        ]
        for worker in self._workers:
            worker.start()

    # Metrics -------------------------------------------------------------------------------------
    @property
    def threads(self) -> int:
        return self._threads_count

    @property
    def max_pending_tasks(self) -> int:
        return self._max_pending

    @property
    def queue_size(self) -> int:
        """Tasks accepted and not started yet."""
        with self._cond:
            return len(self._pending)

    @property
    def active_count(self) -> int:
        """Tasks running now."""
        with self._cond:
            return self._active

    @property
    def idle_percent(self) -> float:
        """The fraction of workers not running a task (Kafka's ``1 - active / core``)."""
        with self._cond:
            return 1 - self._active / self._threads_count

    @property
    def rejected_count(self) -> int:
        with self._cond:
            return self._rejected

    @property
    def completed_count(self) -> int:
        with self._cond:
            return self._completed

    # Submitting ----------------------------------------------------------------------------------
    def submit(self, fetch_info: RemoteStorageFetchInfo) -> Future[FetchDataInfo]:
        """Queue a remote read; its future holds the ``FetchDataInfo`` or the read's error.

        Raises ``RemoteReadRejectedError`` when the pool is full, ``IllegalStateError`` once
        closed.
        """
        read = self._read
        return self.submit_task(lambda: read(fetch_info))

    def submit_task(self, task: Callable[[], _T]) -> Future[_T]:
        """Queue any remote-storage task on the same workers and queue (Kafka runs ListOffsets
        by timestamp, ``RemoteLogOffsetReader``, on this pool too)."""
        future: Future[_T] = Future()
        with self._cond:
            if self._closed:
                raise IllegalStateError("the remote reader pool is closed")
            # A task runs at once if a worker is idle, else it waits in the queue (Java's
            # ThreadPoolExecutor with core = max threads and a bounded queue).
            if len(self._pending) >= self._idle + self._max_pending:
                self._rejected += 1
                raise RemoteReadRejectedError(
                    f"the remote reader pool is full: {self._active} of {self._threads_count} "
                    f"threads busy and {len(self._pending) - self._idle} of "
                    f"{self._max_pending} pending tasks queued"
                )
            self._pending.append((future, task))
            self._cond.notify()
        return future

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                future, task = self._pending.popleft()
                self._idle -= 1
                self._active += 1
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        result = task()
                    except BaseException as exc:
                        future.set_exception(exc)
                    else:
                        future.set_result(result)
            finally:
                with self._cond:
                    self._active -= 1
                    self._idle += 1
                    self._completed += 1

    # Lifecycle -----------------------------------------------------------------------------------
    def close(self, *, cancel_pending: bool = True, wait: bool = True) -> None:
        """Refuse new tasks, cancel the queued ones (or let them run) and stop the workers.

        Idempotent. Running tasks finish; with ``wait`` this returns when every worker exited.
        """
        with self._cond:
            self._closed = True
            if cancel_pending:
                while self._pending:
                    future, _ = self._pending.popleft()
                    future.cancel()
            self._cond.notify_all()
        if wait:
            current = threading.current_thread()
            for worker in self._workers:
                if worker is not current:
                    worker.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
