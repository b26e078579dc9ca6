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

**Partial last batch.** As in Kafka, the records end wherever the buffer does, which may be inside
a batch (a Kafka consumer drops such a tail); ``trim_partial_batch`` cuts it off for callers that
want whole batches only, as the local log returns.

**Checks.** Every batch header crossed is checked (size, magic) and every whole batch returned is
CRC-checked; a failure is ``CorruptRecordError`` naming the remote segment and byte position.
Kafka's broker does not verify on this path (its consumer does), and it treats a segment that
ends inside a batch as the end of the data; here a truncated batch before the buffer's end is
corruption too, since going on to the next segment would silently skip records.

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
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, BinaryIO, Final, Protocol, Self, TypeVar

from tierlog.log.batch import (
    ATTRIBUTES_OFFSET,
    HEADER,
    HEADER_SIZE_UP_TO_MAGIC,
    LEGACY_RECORD_OVERHEAD_V0,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    RecordBatch,
    bad_magic,
    corrupt,
    crc_mismatch,
    decode_batch,
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
from tierlog.rlm.index_cache import RemoteIndexCache, RemoteIndexCacheEntry
from tierlog.rlm.lineage import (
    build_filtered_leader_epoch_map,
    is_remote_segment_within_leader_epochs,
    next_segment_with_txn_index,
)
from tierlog.spi import (
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

_SKIP_CHUNK: Final = 64 * 1024
_MAX_OFFSET: Final = (1 << 63) - 1

_T = TypeVar("_T")

LogProvider = Callable[[TopicIdPartition], LocalLog | None]
"""The local log of a partition hosted here, or None (Kafka's ``fetchLog``)."""


class FetchMetrics(Protocol):
    """What the reader records (``tierlog.rlm.metrics.RemoteStorageMetrics`` provides it)."""

    def record_fetch(self, topic: str, num_bytes: int) -> None: ...

    def record_fetch_error(self, topic: str) -> None: ...

    def observe_reader_fetch(self, seconds: float) -> None: ...


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


class _SegmentStream:
    """The bytes of a remote segment from a position, from one ranged RSM request.

    ``end`` (inclusive) bounds the first request; if reading goes past it, the rest of the
    segment is requested (an index that bounded too little must not change the answer).
    """

    def __init__(
        self,
        rsm: RemoteStorageManager,
        metadata: RemoteLogSegmentMetadata,
        start: int,
        end: int | None,
    ) -> None:
        size = metadata.segment_size_in_bytes
        if end is not None and size > 0 and end >= size - 1:
            end = None  # the range reaches the segment's end anyway
        self._rsm = rsm
        self._metadata = metadata
        self._position = start
        self._end = end
        self._stream = self._open(start, end)

    def _open(self, start: int, end: int | None) -> BinaryIO:
        try:
            return self._rsm.fetch_log_segment(self._metadata, start, end)
        except RemoteResourceNotFoundException as exc:
            raise _SegmentGone(self._metadata) from exc

    @property
    def position(self) -> int:
        """The segment position of the next byte to read."""
        return self._position

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes; fewer only at the end of the segment."""
        parts: list[bytes] = []
        want = size
        while want > 0:
            chunk = self._stream.read(want)
            if not chunk:
                if self._end is not None and self._position > self._end:
                    self._stream.close()
                    self._end = None
                    self._stream = self._open(self._position, None)
                    continue
                break
            parts.append(chunk)
            self._position += len(chunk)
            want -= len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        self._stream.close()


def _read_exactly(stream: _SegmentStream, size: int, what: str, at: int, where: str) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise corrupt(
            f"the segment ends inside {what}: {len(data)} of {size} bytes could be read", at, where
        )
    return data


def _next_header(stream: _SegmentStream, where: str) -> tuple[RecordBatch, bytes] | None:
    """The next batch's header and its 61 raw bytes, or None at the end of the segment.

    Read as Kafka's ``RemoteLogInputStream``: the 17 bytes up to the magic first (the size is
    checked before the magic), then the rest of the header.
    """
    at = stream.position
    head = stream.read(HEADER_SIZE_UP_TO_MAGIC)
    if not head:
        return None
    if len(head) < HEADER_SIZE_UP_TO_MAGIC:
        raise corrupt(
            f"truncated record batch header ({len(head)} bytes, at least "
            f"{HEADER_SIZE_UP_TO_MAGIC} needed)",
            at,
            where,
        )
    length = int.from_bytes(head[8:12], "big", signed=True)
    if length < LEGACY_RECORD_OVERHEAD_V0:
        raise corrupt(
            f"record size {length} is smaller than the minimum record overhead "
            f"({LEGACY_RECORD_OVERHEAD_V0})",
            at,
            where,
        )
    magic = head[16]
    if magic != MAGIC_V2:
        raise bad_magic(magic if magic < 128 else magic - 256, at, where)
    if length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
        raise corrupt(
            f"record batch length {length} is smaller than the minimum "
            f"{RECORD_BATCH_OVERHEAD - LOG_OVERHEAD}",
            at,
            where,
        )
    raw = head + _read_exactly(
        stream, RECORD_BATCH_OVERHEAD - HEADER_SIZE_UP_TO_MAGIC, "a record batch header", at, where
    )
    return RecordBatch._make(HEADER.unpack(raw)), raw


def _skip(stream: _SegmentStream, size: int, at: int, where: str) -> None:
    while size > 0:
        step = min(size, _SKIP_CHUNK)
        _read_exactly(stream, step, "a record batch", at, where)
        size -= step


def _check_crcs(data: bytes, first_position: int, where: str) -> None:
    """CRC-check every whole batch of ``data`` (a partial last batch cannot be checked)."""
    view = memoryview(data)
    pos = 0
    end = len(data)
    while pos + LOG_OVERHEAD <= end:
        length = int.from_bytes(view[pos + 8 : pos + 12], "big", signed=True)
        size = LOG_OVERHEAD + length
        if pos + size > end:
            return
        if length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or view[pos + 16] != MAGIC_V2:
            raise corrupt(
                f"invalid record batch (length {length}, magic {view[pos + 16]})",
                first_position + pos,
                where,
            )
        stored = int.from_bytes(view[pos + 17 : pos + 21], "big")
        computed = crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size])
        if computed != stored:
            raise crc_mismatch(stored, computed, first_position + pos, where)
        pos += size


@dataclass(frozen=True, slots=True)
class _SegmentRead:
    """What was read from one segment: the first batch's base offset and position, the bytes,
    and whether the first batch was too large to return."""

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
    ) -> None:
        self._rsm = rsm
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
        topic = fetch_info.topic_id_partition.topic
        started = self._clock()
        try:
            info = self._read(fetch_info)
        except OffsetOutOfRangeError:
            self._record(topic, started, 0, failed=False)
            raise
        except Exception:
            self._record(topic, started, 0, failed=True)
            raise
        self._record(topic, started, len(info.records), failed=False)
        return info

    def _record(self, topic: str, started: float, num_bytes: int, *, failed: bool) -> None:
        if self._metrics is not None:
            self._metrics.observe_reader_fetch(self._clock() - started)
            self._metrics.record_fetch(topic, num_bytes)
            if failed:
                self._metrics.record_fetch_error(topic)
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
        """The segment's index cache entry, held; a segment whose offset or time index is gone
        from remote storage is ``_SegmentGone``."""
        with ExitStack() as stack:
            try:
                entry = stack.enter_context(self._cache.acquire(metadata))
            except RemoteResourceNotFoundException as exc:
                raise _SegmentGone(metadata) from exc
            yield entry

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
            with self._index_entry(current) as entry:
                found = self._read_segment(current, entry, fetch_info)
                if found is None:
                    current = self._next_segment(current, epochs)
                    continue
                if found.first_entry_incomplete:
                    return FetchDataInfo(
                        LogOffsetMetadata(offset), b"", True, [] if committed else None
                    )
                info = FetchDataInfo(
                    LogOffsetMetadata(found.base_offset, current.start_offset, found.position),
                    found.records,
                )
                if not committed:
                    return info
                bound = entry.fetch_upper_bound_offset(
                    OffsetPosition(found.base_offset, found.position), len(found.records)
                )
            upper = bound.offset if bound is not None else current.end_offset + 1
            aborted = self._aborted_transactions(
                current, found.base_offset, upper, log, epochs
            )
            return info._replace(aborted_transactions=aborted)
        return FetchDataInfo(LogOffsetMetadata(offset), b"", False, [] if committed else None)

    @staticmethod
    def _range_end(
        entry: RemoteIndexCacheEntry, start: int, max_bytes: int, min_one_message: bool
    ) -> int | None:
        """The last byte position the read may need (inclusive), or None: to the segment's end.

        The batch holding the target starts at or before the first index entry after ``start``
        (that batch's last offset is above the target); the bytes returned start at that batch
        and are at most ``max_bytes``, or the first batch whole with ``min_one_message``, whose
        end is bounded by the index entry after it.
        """
        bound = entry.first_entry_after(start)
        if bound is None:
            return None
        need = bound.position + max(max_bytes, RECORD_BATCH_OVERHEAD)
        if min_one_message:
            after = entry.first_entry_after(bound.position)
            if after is None:
                return None
            need = max(need, after.position)
        return need - 1

    def _read_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        entry: RemoteIndexCacheEntry,
        fetch_info: RemoteStorageFetchInfo,
    ) -> _SegmentRead | None:
        """Steps 2 and 4 for one segment; None when it holds no batch at or past the offset."""
        offset = fetch_info.fetch_offset
        max_bytes = fetch_info.max_bytes
        min_one = fetch_info.min_one_message
        where = _describe(metadata)
        start = entry.lookup_offset(offset).position
        end = self._range_end(entry, start, max_bytes, min_one)
        with closing(_SegmentStream(self._rsm, metadata, start, end)) as stream:
            while True:
                at = stream.position
                found = _next_header(stream, where)
                if found is None:
                    return None
                header, raw = found
                if header.last_offset >= offset:
                    break
                _skip(stream, header.size_in_bytes - RECORD_BATCH_OVERHEAD, at, where)
            first_size = header.size_in_bytes
            if not min_one and first_size > max_bytes:
                _LOG.debug(
                    "Returning no records for offset %d of %s: the first batch (%d bytes) is "
                    "larger than max_bytes %d",
                    offset,
                    metadata.topic_id_partition,
                    first_size,
                    max_bytes,
                )
                return _SegmentRead(header.base_offset, at, b"", True)
            capacity = max(first_size, max_bytes) if min_one else max_bytes
            body = _read_exactly(
                stream, first_size - RECORD_BATCH_OVERHEAD, "a record batch", at, where
            )
            rest = stream.read(capacity - first_size)
        records = raw + body + rest
        _check_crcs(records, at, where)
        return _SegmentRead(header.base_offset, at, records, False)

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
        where = _describe(metadata)
        try:
            with self._index_entry(metadata) as entry:
                start = entry.lookup_timestamp(timestamp, starting_offset).position
            with closing(_SegmentStream(self._rsm, metadata, start, None)) as stream:
                while True:
                    at = stream.position
                    found = _next_header(stream, where)
                    if found is None:
                        return None
                    header, raw = found
                    body = _read_exactly(
                        stream, header.size_in_bytes - RECORD_BATCH_OVERHEAD, "a record batch",
                        at, where,
                    )
                    if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                        continue
                    _, records = decode_batch(raw + body, path=where, file_offset=at)
                    for record in records:
                        if record.timestamp >= timestamp and record.offset >= starting_offset:
                            epoch = header.partition_leader_epoch
                            return TimestampAndOffset(
                                record.timestamp,
                                record.offset,
                                epoch if epoch != NO_PARTITION_LEADER_EPOCH else None,
                            )
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
