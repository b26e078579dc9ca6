"""The local log of one partition directory: appends, reads, retention, truncation, recovery.

``LocalLog`` is Kafka's ``UnifiedLog`` + ``LocalLog`` for a single node, on a directory named
``<topic>-<partition>`` in Kafka's exact layout, so a broker can load what it writes and it can
load what a broker wrote:

- **appends**: ``append_as_leader`` validates batches as Kafka's ``LogValidator`` does for a
  producer (magic 2, CRC, size, offsets/count consistency, timestamps, no control batches from
  clients), assigns offsets in place (``batch.assign_offsets``), stamps the partition leader
  epoch and, with ``message.timestamp.type=LogAppendTime``, the append time; producer state
  checks idempotence and transactions (a retried batch returns its original offsets and is not
  written twice). ``append_as_follower`` keeps the offsets it is given. Both roll the active
  segment first when ``segment.bytes``, ``segment.ms`` (with jitter), a full index or an offset
  overflow says so, and record new leader epochs;
- **reads**: ``read(fetch_offset, max_bytes, isolation)`` returns whole batches, bounded by the
  high watermark (``read_uncommitted``), the last stable offset (``read_committed``, with the
  aborted transactions of the range) or the log end (``log_end``, for replication and tiering);
- **offsets**: the log start offset (moved by ``delete_records``, retention, truncation), the
  local log start offset (first local offset; below it the data is only in remote storage), the
  log end offset, the high watermark (set by the caller, as a partition leader sets it from its
  followers' fetches; ``high_watermark_follows_leo=True`` makes it track the log end, as a
  single-replica partition's does) and the last stable offset;
- **retention**: ``delete_retention_segments(highest_offset_in_remote_storage)`` deletes old
  segments by ``local.retention.ms``/``.bytes`` when tiered (``retention.*`` otherwise), never a
  segment above the high watermark and, when tiered, never one whose last offset is above the
  highest offset copied to remote storage;
- **truncation** (``truncate_to``, ``truncate_fully_and_start_at``) and **rolling** (``roll``), with
  a producer snapshot named by the new segment's base offset at each roll;
- **recovery**: ``LocalLog.open`` runs ``recovery.LogLoader``; a torn tail batch is truncated,
  indexes are rebuilt, producer state and epochs are restored.

Deliberate differences from Kafka, each because this log runs in one process without a
broker's background threads: segment files are deleted right after their ``.deleted`` rename
(Kafka waits ``file.delete.delay.ms`` so in-flight reads finish; tierlog's reads hold the lock);
the old segment is ``fsync``-ed when a segment is rolled, synchronously (Kafka flushes in a
scheduler thread), unless ``flush_on_roll=False``; an append may carry several batches (a Kafka
produce request carries one per partition); the maximum timestamp of an appended batch is taken
from its header rather than recomputed from its records; transaction verification (KIP-890
part 1) and splitting of overflowed legacy segments are not implemented.
"""

from __future__ import annotations

import enum
import logging
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from tierlog._durable import atomic_write, fsync_directory
from tierlog.log.batch import (
    LOG_OVERHEAD,
    RecordBatch,
    TimestampType,
    assign_offsets,
    decode_batch,
    read_batch_header,
    set_max_timestamp,
    verify_crc,
)
from tierlog.log.checkpoint import (
    EpochEntry,
    encode_leader_epoch_checkpoint,
    read_partition_metadata,
    write_partition_metadata,
)
from tierlog.log.compression import CompressionType
from tierlog.log.files import (
    leader_epoch_checkpoint_file,
    log_file,
    offset_index_file,
    parse_log_dir_name,
    partition_metadata_file,
    producer_snapshot_file,
    time_index_file,
    transaction_index_file,
)
from tierlog.log.leader_epoch_cache import LeaderEpochFileCache
from tierlog.log.log_config import LogConfig
from tierlog.log.producer_state import (
    DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    AppendOrigin,
    CompletedTxn,
    EndTxnMarker,
    InvalidProducerEpochError,
    ProducerAppendInfo,
    ProducerStateManager,
)
from tierlog.log.record import NO_TIMESTAMP
from tierlog.log.recovery import (
    LoadedLogOffsets,
    LogLoader,
    OffsetsCheckpoint,
    RecoveryReport,
    read_offsets_checkpoint,
    rebuild_producer_state,
    replay_segments,
    write_offsets_checkpoint,
)
from tierlog.log.segment import (
    FetchDataInfo,
    LogOffsetMetadata,
    LogSegment,
    LogSegments,
    RollParams,
    TimestampAndOffset,
    read_end_txn_marker,
)
from tierlog.log.txn_index import AbortedTxn
from tierlog.spi import (
    CorruptRecordError,
    IllegalStateError,
    InvalidArgumentError,
    LogSegmentData,
    TopicPartition,
    Uuid,
)

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "InconsistentTopicIdError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "Isolation",
    "LocalLog",
    "LogAppendInfo",
    "OffsetMovedToTieredStorageError",
    "OffsetOutOfRangeError",
    "OffsetsOutOfOrderError",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "SegmentCopyInputs",
    "UnexpectedAppendOffsetError",
]

_LOG = logging.getLogger(__name__)

Isolation = Literal["read_uncommitted", "read_committed", "log_end"]
"""How far a read may go: the high watermark, the last stable offset, or the log end."""

EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1
EARLIEST_LOCAL_TIMESTAMP: Final = -4
_INT32_MAX: Final = (1 << 31) - 1
_LEGACY_MIN_RECORD_SIZE: Final = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0
_INT32: Final = struct.Struct(">i")

RecordsInput = bytes | bytearray | memoryview | Iterable[bytes | bytearray | memoryview]
"""Batches to append: one buffer of whole batches, or an iterable of single batches."""


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


# Errors ----------------------------------------------------------------------------------------
class OffsetOutOfRangeError(InvalidArgumentError):
    """Kafka's ``OffsetOutOfRangeException``: the offset is below the log start or past its end."""


class OffsetMovedToTieredStorageError(OffsetOutOfRangeError):
    """The offset is in the log but only in remote storage (below the local log start offset).

    Kafka answers ``OFFSET_MOVED_TO_TIERED_STORAGE``; the reader must go to the RLM.
    """


class InvalidRecordError(InvalidArgumentError):
    """Kafka's ``InvalidRecordException``: a batch breaks the produce rules."""


class InvalidTimestampError(InvalidRecordError):
    """Kafka's ``InvalidTimestampException``: a record timestamp outside the allowed window."""


class RecordTooLargeError(InvalidArgumentError):
    """Kafka's ``RecordTooLargeException``: a batch exceeds ``max.message.bytes``."""


class RecordBatchTooLargeError(InvalidArgumentError):
    """Kafka's ``RecordBatchTooLargeException``: an append exceeds ``segment.bytes``."""


class OffsetsOutOfOrderError(InvalidArgumentError):
    """Kafka's ``OffsetsOutOfOrderException``: a follower's batches do not increase."""


class UnexpectedAppendOffsetError(InvalidArgumentError):
    """Kafka's ``UnexpectedAppendOffsetException``: a follower append below the log end."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class InconsistentTopicIdError(IllegalStateError):
    """Kafka's ``InconsistentTopicIdException``: ``partition.metadata`` names another topic id."""


# Results ---------------------------------------------------------------------------------------
@dataclass(slots=True)
class LogAppendInfo:
    """What an append did (Kafka's ``LogAppendInfo``).

    ``duplicate`` is true when the batch was a producer's retry of a batch already in the log:
    nothing was written and the offsets are those of the original batch.
    """

    first_offset: int
    last_offset: int
    last_leader_epoch: int | None
    max_timestamp: int
    log_append_time: int
    log_start_offset: int
    valid_bytes: int
    num_batches: int
    source_compression: CompressionType = CompressionType.NONE
    offsets_monotonic: bool = True
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class SegmentCopyInputs:
    """Everything the RLM copy task needs for one sealed segment (Kafka's ``copyLogSegment``).

    ``data`` is the ``LogSegmentData`` handed to ``RemoteStorageManager.copy_log_segment_data``:
    its ``leader_epoch_index`` is the checkpoint text of every epoch up to the segment's end
    (``epoch_entries_in_range(-1, next base)``, as Kafka ships it); ``segment_leader_epochs`` are
    the epochs of the segment itself, the first clamped to its base offset, for
    ``RemoteLogSegmentMetadata``.
    """

    segment: LogSegment
    start_offset: int
    end_offset: int
    next_segment_base_offset: int
    largest_timestamp: int
    size_in_bytes: int
    segment_leader_epochs: dict[int, int]
    txn_index_empty: bool
    data: LogSegmentData


class _Reason(enum.Enum):
    RETENTION_TIME = "retention time"
    RETENTION_SIZE = "retention size"
    LOG_START_OFFSET = "log start offset"


def _to_buffer(records: RecordsInput) -> bytearray:
    if isinstance(records, bytes | bytearray | memoryview):
        return bytearray(records)
    return bytearray(b"".join(bytes(r) for r in records))


def _parse_input(buf: bytearray) -> list[tuple[int, RecordBatch]]:
    """The batches of an append buffer; a partial last batch ends the list, as Kafka's
    ``ByteBufferLogInputStream`` (a follower's fetch may end in one)."""
    out: list[tuple[int, RecordBatch]] = []
    pos = 0
    end = len(buf)
    while end - pos >= LOG_OVERHEAD:
        length: int = _INT32.unpack_from(buf, pos + 8)[0]
        if length < _LEGACY_MIN_RECORD_SIZE:
            raise CorruptRecordError(
                f"Record size {length} is less than the minimum record overhead "
                f"({_LEGACY_MIN_RECORD_SIZE}) at position {pos} of the append",
                position=pos,
            )
        if LOG_OVERHEAD + length > end - pos:
            break
        header = read_batch_header(buf, pos, end=end)
        out.append((pos, header))
        pos += LOG_OVERHEAD + length
    return out


# The log ---------------------------------------------------------------------------------------
class LocalLog:
    """A partition's local log; create or load one with ``LocalLog.open`` (module docstring)."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        topic_partition: TopicPartition,
        *,
        segments: LogSegments,
        leader_epoch_cache: LeaderEpochFileCache,
        producer_state: ProducerStateManager,
        offsets: LoadedLogOffsets,
        high_watermark: int,
        topic_id: Uuid | None,
        clock: Callable[[], int],
        flush_on_roll: bool,
        high_watermark_follows_leo: bool,
        recovery_report: RecoveryReport,
        sync: bool,
    ) -> None:
        self._dir = directory
        self._config = config
        self._tp = topic_partition
        self._segments = segments
        self._epochs = leader_epoch_cache
        self._psm = producer_state
        self._clock = clock
        self._flush_on_roll = flush_on_roll
        self._hw_follows_leo = high_watermark_follows_leo
        self._sync = sync
        self._topic_id = topic_id
        self._lock = threading.RLock()
        self._closed = False
        self.recovery_report = recovery_report
        self._log_end_offset = offsets.log_end_offset
        self._recovery_point = offsets.recovery_point
        self._log_start_offset = offsets.log_start_offset
        first = segments.first_segment()
        assert first is not None  # the loader always leaves an active segment
        self._local_log_start_offset = max(offsets.log_start_offset, first.base_offset)
        if not self.remote_log_enabled:
            self._log_start_offset = self._local_log_start_offset
        self._highest_offset_in_remote_storage = -1
        self._first_unstable_offset: int | None = None
        self._high_watermark = self._log_start_offset
        self._apply_high_watermark(high_watermark)
        self._maybe_increment_first_unstable_offset()

    # Opening -------------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        config: LogConfig | Mapping[str, object] | None = None,
        *,
        topic_id: Uuid | None = None,
        topic_partition: TopicPartition | None = None,
        clock: Callable[[], int] | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
        flush_on_roll: bool = True,
        high_watermark_follows_leo: bool = False,
        create: bool = True,
        sync: bool = True,
    ) -> LocalLog:
        """Open (creating if ``create``) the partition directory ``directory`` and recover it.

        ``config`` is a ``LogConfig`` or Kafka keys (``LogConfig.from_props``). The topic and
        partition come from the directory name unless ``topic_partition`` is given. ``topic_id``
        is written to ``partition.metadata`` when the file does not exist and must match it when
        it does (``InconsistentTopicIdError``). ``clock`` (ms) drives rolling by time, retention,
        producer expiration and LogAppendTime. ``sync=False`` skips the ``fsync`` of checkpoints
        and snapshots (tests).
        """
        cfg = config if isinstance(config, LogConfig) else LogConfig.from_props(config or {})
        path = Path(directory)
        tp = topic_partition or parse_log_dir_name(path).topic_partition
        if not path.is_dir():
            if not create:
                raise FileNotFoundError(f"partition directory {path} does not exist")
            path.mkdir(parents=True)
        now_fn = clock or _wall_clock_ms

        metadata_path = partition_metadata_file(path)
        if metadata_path.exists():
            on_file = read_partition_metadata(metadata_path).topic_id
            if topic_id is not None and topic_id != on_file:
                raise InconsistentTopicIdError(
                    f"Tried to assign topic ID {topic_id} to log for topic partition {tp}, but "
                    f"log already contained topic ID {on_file}"
                )
            topic_id = on_file
        elif topic_id is not None:
            write_partition_metadata(metadata_path, topic_id, sync=sync)

        checkpoint = read_offsets_checkpoint(path) or OffsetsCheckpoint()
        # Kafka deletes the clean-shutdown marker once loading starts: a crash from here on
        # must recover again.
        if checkpoint.clean_shutdown:
            write_offsets_checkpoint(
                path,
                OffsetsCheckpoint(
                    checkpoint.recovery_point,
                    checkpoint.log_start_offset,
                    checkpoint.high_watermark,
                    False,
                ),
                sync=sync,
            )
        epochs = LeaderEpochFileCache(leader_epoch_checkpoint_file(path), sync=sync)
        psm = ProducerStateManager(
            path,
            producer_id_expiration_ms=producer_id_expiration_ms,
            max_transaction_timeout_ms=max_transaction_timeout_ms,
            clock=now_fn,
            partition=str(tp),
            sync=sync,
        )
        segments = LogSegments()
        loader = LogLoader(
            path,
            cfg,
            segments,
            log_start_offset_checkpoint=checkpoint.log_start_offset,
            recovery_point_checkpoint=checkpoint.recovery_point,
            had_clean_shutdown=checkpoint.clean_shutdown,
            leader_epoch_cache=epochs,
            producer_state=psm,
            remote_log_enabled=cfg.remote_log_enabled(tp.topic),
            clock=now_fn,
        )
        try:
            offsets = loader.load()
        except BaseException:
            segments.close_handlers()
            raise
        log = cls(
            path,
            cfg,
            tp,
            segments=segments,
            leader_epoch_cache=epochs,
            producer_state=psm,
            offsets=offsets,
            high_watermark=checkpoint.high_watermark,
            topic_id=topic_id,
            clock=now_fn,
            flush_on_roll=flush_on_roll,
            high_watermark_follows_leo=high_watermark_follows_leo,
            recovery_report=loader.report,
            sync=sync,
        )
        log._write_checkpoint()
        _LOG.info(
            "Loaded log %s: log start offset %d, log end offset %d, %d segments",
            path,
            log.log_start_offset,
            log.log_end_offset,
            len(segments),
        )
        return log

    # Properties ----------------------------------------------------------------------------------
    @property
    def dir(self) -> Path:
        return self._dir

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def topic_partition(self) -> TopicPartition:
        return self._tp

    @property
    def topic_id(self) -> Uuid | None:
        return self._topic_id

    @property
    def leader_epoch_cache(self) -> LeaderEpochFileCache:
        return self._epochs

    @property
    def producer_state_manager(self) -> ProducerStateManager:
        return self._psm

    @property
    def remote_log_enabled(self) -> bool:
        return self._config.remote_log_enabled(self._tp.topic)

    @property
    def _remote_copy_enabled(self) -> bool:
        return self._config.remote_copy_enabled(self._tp.topic)

    @property
    def log_start_offset(self) -> int:
        """The first offset readable from the log, locally or in remote storage."""
        return self._log_start_offset

    @property
    def local_log_start_offset(self) -> int:
        """The first offset in the local segments (equal to the log start when not tiered)."""
        return self._local_log_start_offset if self.remote_log_enabled else self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets (LEO)."""
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        """Offsets below this are flushed to disk; recovery after a crash starts here."""
        return self._recovery_point

    @property
    def highest_offset_in_remote_storage(self) -> int:
        return self._highest_offset_in_remote_storage

    @property
    def first_unstable_offset(self) -> int | None:
        return self._first_unstable_offset

    @property
    def last_stable_offset(self) -> int:
        """The first offset not yet decided (an open transaction), capped by the high watermark."""
        fuo = self._first_unstable_offset
        return fuo if fuo is not None and fuo < self._high_watermark else self._high_watermark

    @property
    def segments(self) -> list[LogSegment]:
        """Every segment, oldest first; the last is the active one."""
        return self._segments.values()

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.active_segment

    def sealed_segments(self) -> list[LogSegment]:
        """Every segment but the active one (those the RLM may copy)."""
        return self._segments.values()[:-1]

    def non_active_segments_from(self, offset: int) -> list[LogSegment]:
        """Sealed segments holding offsets from ``offset`` on (``nonActiveLogSegmentsFrom``)."""
        with self._lock:
            return self._segments.non_active_segments_from(offset)

    def log_segments(self, from_offset: int, to_offset: int) -> list[LogSegment]:
        """Segments holding offsets in ``[from_offset, to_offset)``."""
        with self._lock:
            return self._segments.values(from_offset, to_offset)

    def size(self) -> int:
        """Bytes in all local segments."""
        return self._segments.size_in_bytes()

    def only_local_log_segments_size(self) -> int:
        """Bytes of the segments not (entirely) in remote storage yet (Kafka's metric)."""
        return sum(
            s.size
            for s in self._segments.values()
            if s.base_offset >= self._highest_offset_in_remote_storage
        )

    def is_empty(self) -> bool:
        return self._log_start_offset == self._log_end_offset

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return (
            f"LocalLog(dir={str(self._dir)!r}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self._log_end_offset}, high_watermark={self._high_watermark}, "
            f"segments={len(self._segments)})"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError(f"the log of {self._tp} in {self._dir} is closed")

    # Checkpoints ---------------------------------------------------------------------------------
    def _write_checkpoint(self, *, clean_shutdown: bool = False) -> None:
        if not self._dir.exists():
            return
        write_offsets_checkpoint(
            self._dir,
            OffsetsCheckpoint(
                self._recovery_point,
                self._log_start_offset,
                self._high_watermark,
                clean_shutdown,
            ),
            sync=self._sync,
        )

    # High watermark and LSO ----------------------------------------------------------------------
    def _apply_high_watermark(self, hw: int) -> int:
        new = max(self._log_start_offset, min(hw, self._log_end_offset))
        if new < self._high_watermark:
            _LOG.warning(
                "Non-monotonic update of high watermark from %d to %d", self._high_watermark, new
            )
        self._high_watermark = new
        self._psm.on_high_watermark_updated(new)
        self._maybe_increment_first_unstable_offset()
        return new

    def update_high_watermark(self, hw: int) -> int:
        """Set the high watermark, bounded to ``[log start, log end]``; returns the new value.

        On a single node the caller decides what is committed (Kafka's leader does it from its
        followers' fetch offsets); reads with isolation stop there.
        """
        with self._lock:
            self._check_open()
            return self._apply_high_watermark(hw)

    def maybe_increment_high_watermark(self, hw: int) -> bool:
        """Raise the high watermark to ``hw`` if it is higher; ``InvalidArgumentError`` past LEO."""
        with self._lock:
            if hw > self._log_end_offset:
                raise InvalidArgumentError(
                    f"High watermark {hw} update exceeds current log end offset "
                    f"{self._log_end_offset}"
                )
            if hw > self._high_watermark:
                self._apply_high_watermark(hw)
                return True
            return False

    def _maybe_increment_first_unstable_offset(self) -> None:
        first = self._psm.first_unstable_offset()
        if first is not None and first < self._log_start_offset:
            first = self._log_start_offset
        self._first_unstable_offset = first

    # Appending -----------------------------------------------------------------------------------
    def append_as_leader(
        self,
        records: RecordsInput,
        leader_epoch: int,
        *,
        origin: AppendOrigin | str = AppendOrigin.CLIENT,
        transaction_version: int = 0,
    ) -> LogAppendInfo:
        """Validate, assign offsets and the leader epoch, and append (Kafka's ``appendAsLeader``).

        ``origin`` is ``client`` (a producer: full validation) or ``coordinator`` (transaction
        markers, written by ``batch.build_control_batch``). Raises ``CorruptRecordError`` (bad
        CRC), ``UnsupportedRecordFormatError`` (magic 0/1), ``InvalidRecordError``,
        ``RecordTooLargeError``, ``RecordBatchTooLargeError`` or a ``ProducerStateError``
        (``OutOfOrderSequenceError``, ``InvalidProducerEpochError``, ``InvalidTxnStateError``,
        ``TransactionCoordinatorFencedError``); nothing is written then.
        """
        kind = AppendOrigin(origin)
        if kind is AppendOrigin.REPLICATION:
            raise InvalidArgumentError("use append_as_follower for replicated batches")
        return self._append(
            records, kind, True, leader_epoch, False, transaction_version=transaction_version
        )

    def append_as_follower(self, records: RecordsInput, leader_epoch: int) -> LogAppendInfo:
        """Append batches with their offsets and epochs as given (Kafka's ``appendAsFollower``).

        Batches whose partition leader epoch is above ``leader_epoch`` are skipped with what
        follows them (KAFKA-18723); the first offset must not be below the log end
        (``UnexpectedAppendOffsetError``) and offsets must increase (``OffsetsOutOfOrderError``).
        """
        return self._append(records, AppendOrigin.REPLICATION, False, leader_epoch, True)

    def _analyze_and_validate(
        self,
        buf: bytearray,
        origin: AppendOrigin,
        ignore_record_size: bool,
        require_offsets_monotonic: bool,
        leader_epoch: int,
    ) -> list[tuple[int, RecordBatch]]:
        batches: list[tuple[int, RecordBatch]] = []
        last_offset = -1
        for pos, header in _parse_input(buf):
            if origin is AppendOrigin.CLIENT and header.base_offset != 0:
                raise InvalidRecordError(
                    f"The baseOffset of the record batch in the append to {self._tp} should be "
                    f"0, but it is {header.base_offset}"
                )
            if (
                origin is AppendOrigin.REPLICATION
                and header.partition_leader_epoch >= 0
                and header.partition_leader_epoch > leader_epoch
            ):
                _LOG.info(
                    "Skipping batch at offset %d and what follows: its partition leader epoch "
                    "%d is higher than the replica's current leader epoch %d",
                    header.base_offset,
                    header.partition_leader_epoch,
                    leader_epoch,
                )
                break
            if last_offset >= header.last_offset and require_offsets_monotonic:
                raise OffsetsOutOfOrderError(
                    f"Out of order offsets found in append to {self._tp}: batch ending at "
                    f"{header.last_offset} follows offset {last_offset}"
                )
            last_offset = header.last_offset
            size = LOG_OVERHEAD + header.length
            if not ignore_record_size and size > self._config.max_message_bytes:
                raise RecordTooLargeError(
                    f"The record batch size in the append to {self._tp} is {size} bytes which "
                    f"exceeds the maximum configured value of {self._config.max_message_bytes}."
                )
            try:
                verify_crc(buf, pos, header)
            except CorruptRecordError as e:
                raise CorruptRecordError(
                    f"Record is corrupt (stored crc = {header.crc}) in topic partition "
                    f"{self._tp}: {e}",
                    position=pos,
                ) from e
            batches.append((pos, header))
        return batches

    def _validate_client_batch(
        self, buf: bytearray, pos: int, header: RecordBatch, now: int
    ) -> None:
        """``LogValidator.validateBatch`` and the timestamp checks, for a producer's batch."""
        count = header.records_count
        if count <= 0:
            raise InvalidRecordError(
                f"Invalid reported count for record batch: {count} in topic partition {self._tp}"
            )
        if header.last_offset_delta + 1 != count:
            raise InvalidRecordError(
                f"Inconsistent batch offset range [{header.base_offset}, {header.last_offset}] "
                f"and count of records {count} in topic partition {self._tp}"
            )
        if header.is_control:
            raise InvalidRecordError(
                f"Clients are not allowed to write control records in topic partition {self._tp}"
            )
        if header.has_producer_id and header.base_sequence < 0:
            raise InvalidRecordError(
                f"Invalid sequence number {header.base_sequence} in record batch with producerId "
                f"{header.producer_id} in topic partition {self._tp}"
            )
        self._validate_timestamps(buf, pos, header, now)

    def _validate_timestamps(self, buf: bytearray, pos: int, header: RecordBatch, now: int) -> None:
        cfg = self._config
        if cfg.log_append_time:
            if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
                raise InvalidRecordError(
                    "Invalid timestamp type in batch: Producer should not set timestamp type to "
                    "LogAppendTime."
                )
            return
        if header.max_timestamp != NO_TIMESTAMP and (
            header.max_timestamp - now > cfg.message_timestamp_after_max_ms
        ):
            raise InvalidTimestampError(
                f"Timestamp {header.max_timestamp} of a message in the batch is out of range. The "
                f"timestamp should be within [{now - cfg.message_timestamp_before_max_ms}, "
                f"{now + cfg.message_timestamp_after_max_ms}]"
            )
        if cfg.message_timestamp_before_max_ms < (1 << 63) - 1:
            _, records = decode_batch(buf, pos, verify=False)
            for record in records:
                if record.timestamp != NO_TIMESTAMP and (
                    now - record.timestamp > cfg.message_timestamp_before_max_ms
                ):
                    raise InvalidTimestampError(
                        f"Timestamp {record.timestamp} of message with offset {record.offset} is "
                        f"out of range. The timestamp should be within "
                        f"[{now - cfg.message_timestamp_before_max_ms}, "
                        f"{now + cfg.message_timestamp_after_max_ms}]"
                    )

    def _append(
        self,
        records: RecordsInput,
        origin: AppendOrigin,
        assign: bool,
        leader_epoch: int,
        ignore_record_size: bool,
        *,
        transaction_version: int = 0,
    ) -> LogAppendInfo:
        buf = _to_buffer(records)
        batches = self._analyze_and_validate(
            buf, origin, ignore_record_size, not assign, leader_epoch
        )
        with self._lock:
            self._check_open()
            if not batches:
                return LogAppendInfo(
                    -1, -1, None, NO_TIMESTAMP, NO_TIMESTAMP, self._log_start_offset, 0, 0
                )
            valid = batches[-1][0] + LOG_OVERHEAD + batches[-1][1].length
            if valid < len(buf):
                del buf[valid:]
            now = self._clock()
            log_append_time = NO_TIMESTAMP
            compression = CompressionType.NONE
            for _, header in batches:
                if header.compression_id:
                    compression = header.compression
            if assign:
                first_offset = self._log_end_offset
                if origin is AppendOrigin.CLIENT:
                    for pos, header in batches:
                        self._validate_client_batch(buf, pos, header, now)
                assign_offsets(buf, first_offset, partition_leader_epoch=leader_epoch)
                restamped = False
                if self._config.log_append_time:
                    log_append_time = now
                    for pos, _ in batches:
                        set_max_timestamp(buf, TimestampType.LOG_APPEND_TIME, now, pos)
                    restamped = True
                else:
                    for pos, header in batches:
                        if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
                            set_max_timestamp(
                                buf, TimestampType.CREATE_TIME, header.max_timestamp, pos
                            )
                            restamped = True
                if restamped:
                    headers = [read_batch_header(buf, pos) for pos, _ in batches]
                else:
                    headers = []
                    offset = first_offset
                    for _, header in batches:
                        headers.append(
                            header._replace(base_offset=offset, partition_leader_epoch=leader_epoch)
                        )
                        offset += header.last_offset_delta + 1
            else:
                headers = [header for _, header in batches]
                first_offset = headers[0].base_offset
                if first_offset < self._log_end_offset:
                    raise UnexpectedAppendOffsetError(
                        f"Unexpected offset in append to {self._tp}. First offset {first_offset} "
                        f"is less than the next offset {self._log_end_offset}. Last offset in "
                        f"append: {headers[-1].last_offset}. Log start offset = "
                        f"{self._log_start_offset}",
                        first_offset,
                        headers[-1].last_offset,
                    )
            last_offset = headers[-1].last_offset
            max_timestamp = max(h.max_timestamp for h in headers)

            for header in headers:
                if header.partition_leader_epoch >= 0:
                    self._epochs.assign(header.partition_leader_epoch, header.base_offset)

            if origin is not AppendOrigin.REPLICATION and valid > self._config.segment_size:
                raise RecordBatchTooLargeError(
                    f"Message batch size is {valid} bytes in append to partition {self._tp}, "
                    f"which exceeds the maximum configured segment size of "
                    f"{self._config.segment_size}."
                )

            segment = self._maybe_roll(valid, max_timestamp, first_offset, last_offset, now)
            updated, completed, duplicate = self._analyze_producer_state(
                buf, headers, origin, transaction_version
            )
            last_epoch = headers[-1].partition_leader_epoch
            info = LogAppendInfo(
                first_offset,
                last_offset,
                last_epoch if last_epoch >= 0 else None,
                log_append_time if log_append_time != NO_TIMESTAMP else max_timestamp,
                log_append_time,
                self._log_start_offset,
                valid,
                len(headers),
                compression,
            )
            if duplicate is not None:
                info.first_offset = duplicate.first_offset
                info.last_offset = duplicate.last_offset
                info.log_append_time = duplicate.timestamp if self._config.log_append_time else -1
                info.duplicate = True
                return info

            segment.append(last_offset, buf, headers)
            self._log_end_offset = last_offset + 1
            for append_info in updated.values():
                self._psm.update(append_info)
            for txn in completed:
                lso = self._psm.last_stable_offset(txn)
                segment.update_txn_index(txn, lso)
                self._psm.complete_txn(txn)
            self._psm.update_map_end_offset(last_offset + 1)
            self._maybe_increment_first_unstable_offset()
            if self._hw_follows_leo:
                self._apply_high_watermark(self._log_end_offset)
            if self._log_end_offset - self._recovery_point >= self._config.flush_messages:
                self._flush(self._log_end_offset)
            return info

    def _analyze_producer_state(
        self,
        buf: bytearray,
        headers: list[RecordBatch],
        origin: AppendOrigin,
        transaction_version: int,
    ) -> tuple[dict[int, ProducerAppendInfo], list[CompletedTxn], _Duplicate | None]:
        updated: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        pos = 0
        for header in headers:
            size = LOG_OVERHEAD + header.length
            if header.has_producer_id:
                pid = header.producer_id
                if origin is AppendOrigin.CLIENT:
                    entry = self._psm.last_entry(pid)
                    if entry is not None:
                        meta = entry.find_duplicate_batch(header)
                        if meta is not None:
                            return (
                                updated,
                                completed,
                                _Duplicate(meta.first_offset, meta.last_offset, meta.timestamp),
                            )
                if origin is not AppendOrigin.REPLICATION and header.is_transactional:
                    entry = self._psm.last_entry(pid)
                    ongoing = (
                        entry is not None
                        and entry.current_txn_first_offset is not None
                        and entry.producer_epoch == header.producer_epoch
                    )
                    if (
                        not ongoing
                        and entry is not None
                        and header.producer_epoch < entry.producer_epoch
                    ):
                        raise InvalidProducerEpochError(
                            f"Epoch of producer {pid} is {header.producer_epoch}, which is smaller "
                            f"than the last seen epoch {entry.producer_epoch}"
                        )
                marker: EndTxnMarker | None = None
                if header.is_control:
                    marker = read_end_txn_marker(buf, pos)
                info = updated.get(pid)
                if info is None:
                    info = self._psm.prepare_update(pid, origin)
                    updated[pid] = info
                txn = info.append(header, marker, transaction_version=transaction_version)
                if txn is not None:
                    completed.append(txn)
            pos += size
        return updated, completed, None

    # Rolling -------------------------------------------------------------------------------------
    def _maybe_roll(
        self, messages_size: int, max_timestamp: int, first_offset: int, last_offset: int, now: int
    ) -> LogSegment:
        segment = self._segments.active_segment
        params = RollParams(
            self._config.segment_ms,
            self._config.segment_size,
            max_timestamp,
            last_offset,
            messages_size,
            now,
        )
        if segment.should_roll(params):
            _LOG.debug(
                "Rolling new log segment (log_size = %d/%d, offset_index_size = %d/%d, "
                "time_index_size = %d/%d, inactive_time_ms = %d/%d).",
                segment.size,
                self._config.segment_size,
                segment.offset_index.entries,
                segment.offset_index.max_entries,
                segment.time_index.entries,
                segment.time_index.max_entries,
                segment.time_waited_for_roll(now, max_timestamp),
                self._config.segment_ms - segment.roll_jitter_ms,
            )
            return self._roll(first_offset)
        return segment

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Seal the active segment and start a new one at the log end offset (or later).

        The sealed segment's indexes are trimmed and get their final time index entry; a
        producer snapshot is written at the new base offset; the sealed segment is flushed and
        the recovery point advanced (unless ``flush_on_roll=False``).
        """
        with self._lock:
            self._check_open()
            return self._roll(expected_next_offset)

    def _roll(self, expected_next_offset: int | None) -> LogSegment:
        start = time.monotonic()
        new_offset = max(expected_next_offset or 0, self._log_end_offset)
        active = self._segments.active_segment
        if self._segments.contains(new_offset):
            if active.base_offset == new_offset and active.size == 0:
                # KAFKA-6388: an empty active segment whose index is "full" (tiny index size).
                _LOG.warning(
                    "Trying to roll a new log segment with start offset %d while it already "
                    "exists and is active with size 0; recreating it",
                    new_offset,
                )
                new_segment = self._create_and_delete_segment(new_offset, active)
            else:
                raise IllegalStateError(
                    f"Trying to roll a new log segment for topic partition {self._tp} with start "
                    f"offset {new_offset} while it already exists. Existing segment is "
                    f"{self._segments.get(new_offset)!r}."
                )
        elif new_offset < active.base_offset:
            raise IllegalStateError(
                f"Trying to roll a new log segment for topic partition {self._tp} with start "
                f"offset {new_offset} lower than start offset of the active segment {active!r}"
            )
        else:
            for path in (
                log_file(self._dir, new_offset),
                offset_index_file(self._dir, new_offset),
                time_index_file(self._dir, new_offset),
                transaction_index_file(self._dir, new_offset),
            ):
                if path.exists():
                    _LOG.warning(
                        "Newly rolled segment file %s already exists; deleting it first", path
                    )
                    path.unlink()
            active.on_become_inactive_segment()
            new_segment = LogSegment.open(self._dir, new_offset, self._config, clock=self._clock)
            self._segments.add(new_segment)
        # A snapshot at the new base offset lets recovery start at this segment, and is what the
        # RLM ships with the segment just sealed.
        self._psm.update_map_end_offset(new_segment.base_offset)
        self._psm.take_snapshot()
        if self._flush_on_roll:
            self._flush(new_segment.base_offset)
        _LOG.info(
            "Rolled new log segment at offset %d in %.1f ms.",
            new_offset,
            (time.monotonic() - start) * 1000,
        )
        return new_segment

    def _create_and_delete_segment(self, new_offset: int, to_delete: LogSegment) -> LogSegment:
        if new_offset == to_delete.base_offset:
            to_delete.change_file_suffixes("", ".deleted")
        new_segment = LogSegment.open(self._dir, new_offset, self._config, clock=self._clock)
        self._segments.add(new_segment)
        if new_offset != to_delete.base_offset:
            self._segments.remove(to_delete.base_offset)
        to_delete.delete()
        return new_segment

    # Flushing ------------------------------------------------------------------------------------
    def flush(self, offset: int | None = None) -> None:
        """``fsync`` the segments up to ``offset`` (default: the log end) and advance the
        recovery point there; the checkpoint is rewritten."""
        with self._lock:
            self._check_open()
            self._flush(self._log_end_offset if offset is None else offset)

    def _flush(self, offset: int, *, including_offset: bool = False) -> None:
        """Flush segments holding offsets below ``offset`` (to ``offset`` with
        ``including_offset``, so an empty active segment at the log end is flushed too, as
        Kafka's shutdown flush does); the recovery point becomes ``offset``."""
        flush_to = offset + 1 if including_offset else offset
        if flush_to <= self._recovery_point:
            return
        to_flush = self._segments.values(self._recovery_point, flush_to)
        for segment in to_flush:
            segment.flush()
        if any(s.base_offset >= self._recovery_point for s in to_flush):
            fsync_directory(self._dir)
        self._recovery_point = offset
        self._write_checkpoint()

    # Reading -------------------------------------------------------------------------------------
    def _offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """Where ``offset`` is: its segment and the position of the batch holding it, or of the
        first batch after it (message-only metadata outside the local log)."""
        if offset == self._log_end_offset:
            active = self._segments.active_segment
            return LogOffsetMetadata(offset, active.base_offset, active.size)
        segment = self._segments.floor_segment(offset)
        if offset > self._log_end_offset or segment is None:
            return LogOffsetMetadata(offset)
        located = segment.translate_offset(offset)
        if located is not None:
            return LogOffsetMetadata(offset, segment.base_offset, located.position)
        nxt = self._segments.higher_segment(segment.base_offset)
        if nxt is not None:
            return LogOffsetMetadata(offset, nxt.base_offset, 0)
        return LogOffsetMetadata(offset, segment.base_offset, segment.size)

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation: Isolation = "read_uncommitted",
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Whole batches from the one holding ``fetch_offset``, at most ``max_bytes`` (at least
        one batch with ``min_one_message``), not past the isolation's bound.

        ``read_uncommitted`` stops at the high watermark, ``read_committed`` at the last stable
        offset and lists the aborted transactions the data overlaps, ``log_end`` at the log end.
        ``OffsetOutOfRangeError`` below the log start or past the log end;
        ``OffsetMovedToTieredStorageError`` when the offset is only in remote storage.

        The bytes are read into memory (Kafka sends a zero-copy file slice), so ``max_bytes``
        should be a fetch size (Kafka's ``fetch.max.bytes`` is 50 MiB), not "everything".
        """
        if isolation not in ("read_uncommitted", "read_committed", "log_end"):
            raise InvalidArgumentError(f"unknown isolation {isolation!r}")
        if max_bytes < 0:
            raise InvalidArgumentError(f"max_bytes must be >= 0, got {max_bytes}")
        with self._lock:
            self._check_open()
            if fetch_offset < self._log_start_offset or fetch_offset > self._log_end_offset:
                raise OffsetOutOfRangeError(
                    f"Received request for offset {fetch_offset} for partition {self._tp}, but we "
                    f"only have log segments in the range {self._log_start_offset} to "
                    f"{self._log_end_offset}."
                )
            first_local = max(self.local_log_start_offset, self._segments.base_offsets[0])
            if fetch_offset < first_local:
                if not self.remote_log_enabled:
                    raise OffsetOutOfRangeError(
                        f"Offset {fetch_offset} of partition {self._tp} is below the first "
                        f"offset of the log's segments, {first_local}"
                    )
                raise OffsetMovedToTieredStorageError(
                    f"Offset {fetch_offset} of partition {self._tp} is below the local log start "
                    f"offset {first_local}: it is only in remote storage"
                )
            committed = isolation == "read_committed"
            if isolation == "log_end":
                max_offset = self._log_end_offset
            elif committed:
                max_offset = self.last_stable_offset
            else:
                max_offset = self._high_watermark
            empty_aborted: list[AbortedTxn] | None = [] if committed else None
            if fetch_offset >= max_offset:
                return FetchDataInfo(self._offset_metadata(fetch_offset), b"", False, empty_aborted)
            max_meta = self._offset_metadata(max_offset)
            segment = self._segments.floor_segment(fetch_offset)
            while segment is not None:
                if segment.base_offset < max_meta.segment_base_offset:
                    max_position = segment.size
                elif segment.base_offset == max_meta.segment_base_offset:
                    max_position = max_meta.relative_position_in_segment
                else:
                    max_position = 0
                info = segment.read(fetch_offset, max_bytes, max_position, min_one_message)
                if info is not None:
                    if committed:
                        info = info._replace(
                            aborted_transactions=self._aborted_transactions_for(
                                fetch_offset, segment, info
                            )
                        )
                    return info
                segment = self._segments.higher_segment(segment.base_offset)
            return FetchDataInfo(
                self._offset_metadata(self._log_end_offset), b"", False, empty_aborted
            )

    def _aborted_transactions_for(
        self, fetch_offset: int, segment: LogSegment, info: FetchDataInfo
    ) -> list[AbortedTxn]:
        upper = segment.fetch_upper_bound_offset(info.fetch_offset_metadata, len(info.records))
        if upper is None:
            nxt = self._segments.higher_segment(segment.base_offset)
            upper = nxt.base_offset if nxt is not None else self._log_end_offset
        return self._collect_aborted(fetch_offset, upper, segment)

    def _collect_aborted(
        self, start_offset: int, upper_bound_offset: int, starting: LogSegment
    ) -> list[AbortedTxn]:
        found: list[AbortedTxn] = []
        for segment in [starting, *self._segments.higher_segments(starting.base_offset)]:
            result = segment.collect_aborted_txns(start_offset, upper_bound_offset)
            found.extend(result.aborted_transactions)
            if result.is_complete:
                break
        return found

    def fetch_offset_by_timestamp(self, target_timestamp: int) -> TimestampAndOffset | None:
        """The first local record with a timestamp >= the target (Kafka's ListOffsets).

        Special targets: ``EARLIEST_TIMESTAMP`` (-2, the log start), ``LATEST_TIMESTAMP`` (-1,
        the log end), ``EARLIEST_LOCAL_TIMESTAMP`` (-4, the local log start). None if no record
        has such a timestamp.
        """
        with self._lock:
            self._check_open()
            if target_timestamp == EARLIEST_TIMESTAMP:
                return TimestampAndOffset(
                    NO_TIMESTAMP,
                    self._log_start_offset,
                    self._epochs.epoch_for_offset(self._log_start_offset),
                )
            if target_timestamp == LATEST_TIMESTAMP:
                return TimestampAndOffset(
                    NO_TIMESTAMP, self._log_end_offset, self._epochs.latest_epoch()
                )
            if target_timestamp == EARLIEST_LOCAL_TIMESTAMP:
                local = self.local_log_start_offset
                return TimestampAndOffset(NO_TIMESTAMP, local, self._epochs.epoch_for_offset(local))
            if target_timestamp < 0:
                raise InvalidArgumentError(f"unsupported target timestamp {target_timestamp}")
            for segment in self._segments.values():
                if segment.largest_timestamp() >= target_timestamp:
                    return segment.find_offset_by_timestamp(
                        target_timestamp, self.local_log_start_offset
                    )
            return None

    # Leader epochs -------------------------------------------------------------------------------
    def latest_epoch(self) -> int | None:
        return self._epochs.latest_epoch()

    def assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> None:
        """Record that ``leader_epoch`` starts at ``start_offset`` (a new leader does this)."""
        with self._lock:
            self._epochs.assign(leader_epoch, start_offset)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int] | None:
        """``(end offset, epoch)`` for OffsetsForLeaderEpoch, or None when undefined."""
        epoch, offset = self._epochs.end_offset_for(leader_epoch, self._log_end_offset)
        return None if offset == -1 else (offset, epoch)

    # Log start offsets ---------------------------------------------------------------------------
    def maybe_increment_log_start_offset(self, new_log_start_offset: int, reason: str) -> bool:
        """Raise the log start offset (never above the high watermark); True if it moved.

        Epochs before it are forgotten, producer state and the LSO follow, the checkpoint is
        rewritten.
        """
        with self._lock:
            self._check_open()
            if new_log_start_offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"Cannot increment the log start offset to {new_log_start_offset} of "
                    f"partition {self._tp} since it is larger than the high watermark "
                    f"{self._high_watermark}"
                )
            if self.remote_log_enabled:
                self._local_log_start_offset = max(
                    new_log_start_offset, self._local_log_start_offset
                )
            if new_log_start_offset <= self._log_start_offset:
                return False
            self._log_start_offset = new_log_start_offset
            self._recovery_point = max(self._recovery_point, new_log_start_offset)
            _LOG.info("Incremented log start offset to %d due to %s", new_log_start_offset, reason)
            self._epochs.truncate_from_start(new_log_start_offset)
            self._psm.on_log_start_offset_incremented(new_log_start_offset)
            self._psm.delete_snapshots_before(new_log_start_offset)
            self._maybe_increment_first_unstable_offset()
            self._write_checkpoint()
            return True

    def delete_records(self, offset: int) -> int:
        """Advance the log start offset to ``offset`` (Kafka's DeleteRecords) and delete the
        local segments now entirely below it; returns the new log start offset."""
        with self._lock:
            self.maybe_increment_log_start_offset(offset, "client delete records request")
            self._delete_old_segments(
                self._log_start_breached_predicate(), _Reason.LOG_START_OFFSET
            )
            return self._log_start_offset

    def update_log_start_offset_from_remote_tier(self, remote_log_start_offset: int) -> None:
        """The RLM deleted remote segments up to here: the log start follows (tiered logs only)."""
        if not self.remote_log_enabled:
            _LOG.error("Ignoring the call as the remote log storage is disabled")
            return
        self.maybe_increment_log_start_offset(remote_log_start_offset, "segment deletion")

    def update_highest_offset_in_remote_storage(self, offset: int) -> None:
        """The RLM copied segments up to ``offset`` (inclusive): local retention may delete them."""
        with self._lock:
            if not self.remote_log_enabled:
                _LOG.warning(
                    "Unable to update the highest offset in remote storage with offset %d since "
                    "remote storage is not enabled.",
                    offset,
                )
            elif offset > self._highest_offset_in_remote_storage:
                self._highest_offset_in_remote_storage = offset

    # Retention -----------------------------------------------------------------------------------
    def delete_retention_segments(
        self, highest_offset_in_remote_storage: int | None = None, *, now: int | None = None
    ) -> int:
        """Delete the segments retention allows; returns how many were deleted.

        Kafka's ``deleteOldSegments``: segments entirely below the log start offset, then by size
        and by time. When the topic is tiered (and copying) the limits are
        ``local.retention.bytes``/``local.retention.ms`` and a segment is deletable only if its
        last offset is <= the highest offset in remote storage (``-1``: nothing is) or the log
        start has passed it; otherwise ``retention.bytes``/``retention.ms``. Never a segment
        holding offsets at or above the high watermark; the active segment is rolled first when
        it alone breaches (tiered), so the next call can delete it once copied.
        """
        with self._lock:
            self._check_open()
            if highest_offset_in_remote_storage is not None:
                self.update_highest_offset_in_remote_storage(highest_offset_in_remote_storage)
            start_ms = self._clock() if now is None else now
            cfg = self._config
            if cfg.delete or (not cfg.compact and self._remote_copy_enabled):
                return (
                    self._delete_old_segments(
                        self._log_start_breached_predicate(), _Reason.LOG_START_OFFSET
                    )
                    + self._delete_retention_size_breached_segments()
                    + self._delete_retention_ms_breached_segments(start_ms)
                )
            return self._delete_old_segments(
                self._log_start_breached_predicate(), _Reason.LOG_START_OFFSET
            )

    def _log_start_breached_predicate(self) -> Callable[[LogSegment, LogSegment | None], bool]:
        def breached(segment: LogSegment, nxt: LogSegment | None) -> bool:
            bound = (
                self.local_log_start_offset if self.remote_log_enabled else self._log_start_offset
            )
            return nxt is not None and nxt.base_offset <= bound

        return breached

    def _delete_retention_ms_breached_segments(self, start_ms: int) -> int:
        cfg = self._config
        retention_ms = (
            cfg.effective_local_retention_ms if self._remote_copy_enabled else cfg.retention_ms
        )
        if retention_ms < 0:
            return 0

        def breached(segment: LogSegment, nxt: LogSegment | None) -> bool:
            largest = segment.largest_timestamp()
            if start_ms < largest:
                _LOG.warning(
                    "%r contains future timestamp(s), making it ineligible to be deleted", segment
                )
            return start_ms - largest > retention_ms

        return self._delete_old_segments(breached, _Reason.RETENTION_TIME)

    def _delete_retention_size_breached_segments(self) -> int:
        cfg = self._config
        retention_size = (
            cfg.effective_local_retention_bytes
            if self._remote_copy_enabled
            else cfg.retention_bytes
        )
        log_size = self.size()
        if retention_size < 0 or log_size < retention_size:
            return 0
        diff = log_size - retention_size

        def breached(segment: LogSegment, nxt: LogSegment | None) -> bool:
            nonlocal diff
            if diff - segment.size >= 0:
                diff -= segment.size
                return True
            return False

        return self._delete_old_segments(breached, _Reason.RETENTION_SIZE)

    def _is_segment_eligible_for_deletion(self, nxt: LogSegment | None, upper_bound: int) -> bool:
        if not self._remote_copy_enabled:
            return True
        passed_by_log_start = nxt is not None and self._log_start_offset >= nxt.base_offset
        return (
            upper_bound > 0 and upper_bound - 1 <= self._highest_offset_in_remote_storage
        ) or passed_by_log_start

    def deletable_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool]
    ) -> list[LogSegment]:
        """Oldest segments while ``predicate(segment, next)`` holds and deletion is allowed."""
        segments = self._segments.values()
        deletable: list[LogSegment] = []
        should_roll = False
        for i, segment in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            last_and_empty = nxt is None and segment.size == 0
            upper_bound = nxt.base_offset if nxt is not None else self._log_end_offset
            result = self._high_watermark >= upper_bound and predicate(segment, nxt)
            if result and self.remote_log_enabled and nxt is None and segment.size > 0:
                should_roll = True
            if (
                result
                and not last_and_empty
                and self._is_segment_eligible_for_deletion(nxt, upper_bound)
            ):
                deletable.append(segment)
            else:
                break
        if should_roll:
            _LOG.info("Rolling the active segment to make it eligible for deletion")
            self._roll(None)
        return deletable

    def _delete_old_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], reason: _Reason
    ) -> int:
        deletable = self.deletable_segments(predicate)
        if not deletable:
            return 0
        return self._delete_segments(deletable, reason)

    def _delete_segments(self, deletable: list[LogSegment], reason: _Reason) -> int:
        count = len(deletable)
        to_delete = list(deletable)
        if len(self._segments) == count:
            new_segment = self._roll(None)
            if to_delete[-1].base_offset == new_segment.base_offset:
                _LOG.warning(
                    "Empty active segment at %d was deleted and recreated due to %s",
                    new_segment.base_offset,
                    reason.value,
                )
                to_delete.pop()
        if to_delete:
            nxt = self._segments.higher_segment(to_delete[-1].base_offset)
            assert nxt is not None  # the active segment is never in to_delete
            if self._remote_copy_enabled:
                if nxt.base_offset > self._local_log_start_offset:
                    self._local_log_start_offset = nxt.base_offset
                    _LOG.info(
                        "Incremented local log start offset to %d due to %s",
                        nxt.base_offset,
                        reason.value,
                    )
            else:
                self.maybe_increment_log_start_offset(nxt.base_offset, reason.value + " breach")
            _LOG.info("Deleting segments due to %s breach: %s", reason.value, to_delete)
            self._remove_and_delete_segments(to_delete)
        self._delete_producer_snapshots(deletable)
        self._write_checkpoint()
        return count

    def _remove_and_delete_segments(self, segments: Iterable[LogSegment]) -> None:
        for segment in list(segments):
            self._segments.remove(segment.base_offset)
            segment.delete()

    def _delete_producer_snapshots(self, segments: Iterable[LogSegment]) -> None:
        for segment in segments:
            snapshot = self._psm.remove_and_mark_snapshot_for_deletion(segment.base_offset)
            if snapshot is not None:
                snapshot.delete_if_exists()

    # Truncation ----------------------------------------------------------------------------------
    def truncate_to(self, target_offset: int) -> bool:
        """Remove every offset >= ``target_offset`` (a follower diverged); True if anything went.

        Whole batches are removed, so a batch holding ``target_offset`` goes entirely (as in
        Kafka, where followers truncate at batch boundaries). Epochs from the target on are
        removed and producer state is rebuilt to the target.
        """
        if target_offset < 0:
            raise InvalidArgumentError(
                f"Cannot truncate partition {self._tp} to a negative offset ({target_offset})."
            )
        with self._lock:
            self._check_open()
            if target_offset < self._high_watermark:
                _LOG.warning(
                    "Truncating %s to offset %d below high watermark %d",
                    self._tp,
                    target_offset,
                    self._high_watermark,
                )
            if target_offset >= self._log_end_offset:
                self._epochs.truncate_from_end(self._log_end_offset)
                return False
            _LOG.info("Truncating to offset %d", target_offset)
            if self._segments.base_offsets[0] > target_offset:
                self._truncate_fully_and_start_at(target_offset, None)
                return True
            deleted = [s for s in self._segments.values() if s.base_offset > target_offset]
            self._remove_and_delete_segments(deleted)
            self._segments.active_segment.truncate_to(target_offset)
            self._log_end_offset = target_offset
            self._recovery_point = min(self._recovery_point, target_offset)
            self._delete_producer_snapshots(deleted)
            self._epochs.truncate_from_end(target_offset)
            self._log_start_offset = min(target_offset, self._log_start_offset)
            rebuild_producer_state(
                self._psm,
                self._segments,
                self._log_start_offset,
                target_offset,
                now=self._clock(),
                reload_from_clean_shutdown=False,
            )
            self._high_watermark = min(self._log_end_offset, self._high_watermark)
            self._psm.on_high_watermark_updated(self._high_watermark)
            self._maybe_increment_first_unstable_offset()
            self._write_checkpoint()
            return True

    def truncate_fully_and_start_at(
        self, new_offset: int, log_start_offset: int | None = None
    ) -> None:
        """Delete all data and restart the log empty at ``new_offset`` (a follower whose data
        the leader no longer has; tiered: the first offset after the last remote segment)."""
        if new_offset < 0:
            raise InvalidArgumentError(f"cannot start a log at a negative offset ({new_offset})")
        with self._lock:
            self._check_open()
            self._truncate_fully_and_start_at(new_offset, log_start_offset)

    def _truncate_fully_and_start_at(self, new_offset: int, log_start_offset: int | None) -> None:
        _LOG.debug(
            "Truncate and start at offset %d, logStartOffset: %s", new_offset, log_start_offset
        )
        existing = self._segments.values()
        self._remove_and_delete_segments(existing[:-1])
        self._create_and_delete_segment(new_offset, existing[-1])
        self._log_end_offset = new_offset
        self._recovery_point = min(self._recovery_point, new_offset)
        self._epochs.clear_and_flush()
        self._psm.truncate_fully_and_start_at(new_offset)
        self._log_start_offset = new_offset if log_start_offset is None else log_start_offset
        self._local_log_start_offset = new_offset
        rebuild_producer_state(
            self._psm,
            self._segments,
            self._log_start_offset,
            new_offset,
            now=self._clock(),
            reload_from_clean_shutdown=False,
        )
        self._high_watermark = self._log_start_offset
        self._apply_high_watermark(self._log_end_offset)
        self._write_checkpoint()

    # Tiering -------------------------------------------------------------------------------------
    def segment_copy_inputs(self, segment: LogSegment | int) -> SegmentCopyInputs:
        """What the RLM copy task needs to copy a sealed segment (given or by base offset).

        The producer snapshot at the next segment's base offset is the one taken when the
        segment was rolled; if it is gone (a directory loaded from elsewhere) it is rebuilt from
        the log and written. The transaction index is ``None`` when the segment has no aborted
        transaction (no file, or an empty one). ``IllegalStateError`` for the active segment.
        """
        with self._lock:
            self._check_open()
            base = segment if isinstance(segment, int) else segment.base_offset
            seg = self._segments.get(base)
            if seg is None:
                raise InvalidArgumentError(f"no segment with base offset {base} in {self._dir}")
            nxt = self._segments.higher_segment(base)
            if nxt is None:
                raise IllegalStateError(
                    f"segment {base} is the active segment: it cannot be copied"
                )
            next_base = nxt.base_offset
            snapshot = self._psm.fetch_snapshot(next_base)
            if snapshot is None:
                snapshot = self._build_producer_snapshot(next_base)
            epochs = self._epochs.epoch_entries_in_range(seg.base_offset, next_base)
            txn_path = seg.txn_index_path
            txn_empty = seg.txn_index.is_empty()
            data = LogSegmentData(
                log_segment=seg.log_path,
                offset_index=seg.offset_index_path,
                time_index=seg.time_index_path,
                transaction_index=None if txn_empty or not txn_path.exists() else txn_path,
                producer_snapshot_index=snapshot,
                leader_epoch_index=encode_leader_epoch_checkpoint(
                    self._epochs.epoch_entries_in_range(-1, next_base)
                ),
            )
            return SegmentCopyInputs(
                segment=seg,
                start_offset=seg.base_offset,
                end_offset=next_base - 1,
                next_segment_base_offset=next_base,
                largest_timestamp=seg.largest_timestamp(),
                size_in_bytes=seg.size,
                segment_leader_epochs={e.epoch: e.start_offset for e in epochs},
                txn_index_empty=txn_empty,
                data=data,
            )

    def restore_remote_aux_state(
        self,
        next_offset: int,
        *,
        log_start_offset: int,
        leader_epochs: Iterable[EpochEntry | tuple[int, int]],
        producer_snapshot: bytes,
    ) -> None:
        """Restart the log empty at ``next_offset`` with the state of the remote data before it
        (Kafka's ``TierStateMachine.buildRemoteLogAuxState``, follower side).

        A follower whose fetch offset is only in remote storage keeps no local data below
        ``next_offset`` (the end of the remote segment + 1) but needs the leader epochs and the
        producer state up to there: the epochs are those of the segment's leader-epoch
        checkpoint, the producer snapshot is written as ``<next_offset>.snapshot`` (atomically)
        and loaded.
        """
        if next_offset < 0 or log_start_offset < 0:
            raise InvalidArgumentError(
                f"invalid offsets to restart at: next {next_offset}, log start {log_start_offset}"
            )
        with self._lock:
            self._check_open()
            self._truncate_fully_and_start_at(next_offset, log_start_offset)
            self._epochs.assign_all(leader_epochs)
            self._epochs.flush()
            atomic_write(
                producer_snapshot_file(self._dir, next_offset), producer_snapshot, sync=self._sync
            )
            self._psm.truncate_fully_and_reload_snapshots()
            rebuild_producer_state(
                self._psm,
                self._segments,
                # The snapshot at ``next_offset`` must load even when the log starts there.
                min(self._log_start_offset, next_offset - 1) if next_offset > 0 else 0,
                next_offset,
                now=self._clock(),
                reload_from_clean_shutdown=False,
            )
            self._maybe_increment_first_unstable_offset()
            self._write_checkpoint()

    def _build_producer_snapshot(self, offset: int) -> Path:
        scratch = ProducerStateManager(
            self._dir,
            producer_id_expiration_ms=self._psm.producer_id_expiration_ms,
            max_transaction_timeout_ms=self._psm.max_transaction_timeout_ms,
            clock=self._clock,
            sync=self._sync,
        )
        scratch.reload_up_to(self._log_start_offset, offset)
        if scratch.map_end_offset < offset:
            replay_segments(scratch, self._segments, self._log_start_offset, offset)
        _LOG.info("Rebuilt the missing producer snapshot at offset %d", offset)
        return self._psm.write_snapshot_at(offset, scratch.active_producers.values())

    # Lifecycle -----------------------------------------------------------------------------------
    def update_config(self, config: LogConfig | Mapping[str, object]) -> LogConfig:
        """Replace the configuration (dynamic topic config); returns the old one."""
        new = config if isinstance(config, LogConfig) else self._config.with_overrides(config)
        with self._lock:
            old, self._config = self._config, new
            return old

    def take_producer_snapshot(self) -> Path | None:
        with self._lock:
            self._check_open()
            return self._psm.take_snapshot()

    def remove_expired_producers(self, now: int | None = None) -> None:
        """Forget producers idle longer than ``producer.id.expiration.ms`` (Kafka runs this
        periodically)."""
        with self._lock:
            self._psm.remove_expired_producers(self._clock() if now is None else now)

    def close(self) -> None:
        """Flush everything, snapshot producer state and record a clean shutdown; idempotent."""
        with self._lock:
            if self._closed:
                return
            try:
                self._flush(self._log_end_offset, including_offset=True)
                self._psm.take_snapshot()
                self._segments.close()
                self._recovery_point = self._log_end_offset
                self._write_checkpoint(clean_shutdown=True)
            finally:
                self._segments.close_handlers()
                self._closed = True

    def close_handlers(self) -> None:
        """Close the files without writing anything (the disk failed, or a test simulating a
        crash: what is on disk then is what a ``kill -9`` would leave)."""
        with self._lock:
            self._segments.close_handlers()
            self._closed = True

    def delete(self) -> None:
        """Delete every segment, snapshot and checkpoint, then the directory itself."""
        with self._lock:
            self._segments.close_handlers()
            self._closed = True
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> LocalLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class _Duplicate:
    first_offset: int
    last_offset: int
    timestamp: int
