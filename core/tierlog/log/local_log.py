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
  highest offset copied to remote storage; a compacted topic keeps more (``log_retention``);
- **cleaning** (``tierlog.compaction`` drives it): ``cleaner_offset`` (how far the cleaner has
  compacted, loaded by the caller from the log directory's ``cleaner-offset-checkpoint``),
  ``replace_segments`` (swap cleaned segments in, crash-safe) and
  ``last_records_of_active_producers`` (what the cleaner must keep for idempotence);
- **truncation** (``truncate_to``, ``truncate_fully_and_start_at``) and **rolling** (``roll``), with
  a producer snapshot named by the new segment's base offset at each roll;
- **recovery**: ``LocalLog.open`` runs ``recovery.LogLoader``; a torn tail batch is truncated,
  indexes are rebuilt, producer state and epochs are restored.

``LocalLog`` is the facade; each concept is a part of its own over one shared ``LogState``
(``log_state``): ``log_append`` (appending, rolling), ``log_read`` (reads, offset lookups),
``log_retention`` (deleting old segments), ``log_truncation`` (truncation, restarting at an
offset) and ``recovery`` (loading a directory). Tiering support (``segment_copy_inputs``) and the
lifecycle stay here. The errors are ``log_errors``'; every public name is importable from here.

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

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tierlog.log.checkpoint import (
    EpochEntry,
    encode_leader_epoch_checkpoint,
    read_partition_metadata,
    write_partition_metadata,
)
from tierlog.log.files import CLEANED_FILE_SUFFIX, parse_log_dir_name, partition_metadata_file
from tierlog.log.leader_epoch_cache import LeaderEpochFileCache
from tierlog.log.log_append import LogAppender, LogAppendInfo, RecordsInput
from tierlog.log.log_config import LogConfig
from tierlog.log.log_errors import (
    InconsistentTopicIdError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from tierlog.log.log_read import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    Isolation,
    LogReader,
)
from tierlog.log.log_retention import LogRetention
from tierlog.log.log_state import LogState
from tierlog.log.log_truncation import LogTruncation
from tierlog.log.producer_state import (
    DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    AppendOrigin,
    ProducerStateManager,
)
from tierlog.log.recovery import RecoveryReport, load_log, replay_segments
from tierlog.log.segment import FetchDataInfo, LogSegment, TimestampAndOffset
from tierlog.spi import (
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
    "RecordsInput",
    "SegmentCopyInputs",
    "UnexpectedAppendOffsetError",
]

_LOG = logging.getLogger(__name__)


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


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


# The log ---------------------------------------------------------------------------------------
class LocalLog:
    """A partition's local log; create or load one with ``LocalLog.open`` (module docstring)."""

    def __init__(
        self,
        state: LogState,
        *,
        high_watermark: int,
        topic_id: Uuid | None,
        recovery_report: RecoveryReport,
    ) -> None:
        """Wrap a loaded ``state`` (``LocalLog.open`` builds it); ``high_watermark`` is the
        checkpointed one, bounded here to the loaded log."""
        self._state = state
        self._lock = state.lock
        self._topic_id = topic_id
        self.recovery_report = recovery_report
        self._appender = LogAppender(state)
        self._reader = LogReader(state)
        # Bound methods of this object, so that a subclass's override of the hook is used.
        self._retention = LogRetention(
            state, roll=self._appender.roll, remove_segments=self._remove_and_delete_segments
        )
        self._truncation = LogTruncation(state, remove_segments=self._remove_and_delete_segments)
        state.apply_high_watermark(high_watermark)
        state.maybe_increment_first_unstable_offset()

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
        cleaner_offset: int | None = None,
    ) -> LocalLog:
        """Open (creating if ``create``) the partition directory ``directory`` and recover it.

        ``config`` is a ``LogConfig`` or Kafka keys (``LogConfig.from_props``). The topic and
        partition come from the directory name unless ``topic_partition`` is given. ``topic_id``
        is written to ``partition.metadata`` when the file does not exist and must match it when
        it does (``InconsistentTopicIdError``). ``clock`` (ms) drives rolling by time, retention,
        producer expiration and LogAppendTime. ``sync=False`` skips the ``fsync`` of checkpoints
        and snapshots (tests). Loading and recovery are ``recovery.load_log``'s.
        ``cleaner_offset`` is the partition's entry of the log directory's
        ``cleaner-offset-checkpoint`` (``cleaner_checkpoint``), if any: one past the loaded log
        end is dropped with a warning, as Kafka's cleaner resets such a checkpoint.
        """
        if cleaner_offset is not None and cleaner_offset < 0:
            raise InvalidArgumentError(f"cleaner offset must be >= 0, got {cleaner_offset}")
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

        loaded = load_log(
            path,
            cfg,
            tp,
            clock=now_fn,
            producer_id_expiration_ms=producer_id_expiration_ms,
            max_transaction_timeout_ms=max_transaction_timeout_ms,
            sync=sync,
        )
        state = LogState(
            path,
            cfg,
            tp,
            segments=loaded.segments,
            leader_epoch_cache=loaded.leader_epoch_cache,
            producer_state=loaded.producer_state,
            offsets=loaded.offsets,
            clock=now_fn,
            flush_on_roll=flush_on_roll,
            high_watermark_follows_leo=high_watermark_follows_leo,
            sync=sync,
        )
        log = cls(
            state,
            high_watermark=loaded.high_watermark,
            topic_id=topic_id,
            recovery_report=loaded.report,
        )
        log._state.write_checkpoint()
        if cleaner_offset is not None:
            if cleaner_offset > log.log_end_offset:
                _LOG.warning(
                    "Ignoring the cleaner offset %d of %s: it is past the log end offset %d",
                    cleaner_offset,
                    tp,
                    log.log_end_offset,
                )
            else:
                log._state.cleaner_offset = cleaner_offset
        _LOG.info(
            "Loaded log %s: log start offset %d, log end offset %d, %d segments",
            path,
            log.log_start_offset,
            log.log_end_offset,
            len(loaded.segments),
        )
        return log

    # Properties ----------------------------------------------------------------------------------
    @property
    def dir(self) -> Path:
        return self._state.dir

    @property
    def config(self) -> LogConfig:
        return self._state.config

    @property
    def topic_partition(self) -> TopicPartition:
        return self._state.tp

    @property
    def topic_id(self) -> Uuid | None:
        return self._topic_id

    @property
    def leader_epoch_cache(self) -> LeaderEpochFileCache:
        return self._state.epochs

    @property
    def producer_state_manager(self) -> ProducerStateManager:
        return self._state.psm

    @property
    def remote_log_enabled(self) -> bool:
        return self._state.remote_log_enabled

    @property
    def log_start_offset(self) -> int:
        """The first offset readable from the log, locally or in remote storage."""
        return self._state.log_start_offset

    @property
    def local_log_start_offset(self) -> int:
        """The first offset in the local segments (equal to the log start when not tiered)."""
        return self._state.local_log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets (LEO)."""
        return self._state.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._state.high_watermark

    @property
    def recovery_point(self) -> int:
        """Offsets below this are flushed to disk; recovery after a crash starts here."""
        return self._state.recovery_point

    @property
    def highest_offset_in_remote_storage(self) -> int:
        return self._state.highest_offset_in_remote_storage

    @property
    def first_unstable_offset(self) -> int | None:
        return self._state.first_unstable_offset

    @property
    def cleaner_offset(self) -> int | None:
        """How far the log is cleaned: offsets below it were compacted by a cleaner round (the
        partition's ``cleaner-offset-checkpoint`` entry); None when never cleaned. Local
        retention of a tiered ``cleanup.policy=compact`` topic deletes only below it."""
        return self._state.cleaner_offset

    @property
    def last_stable_offset(self) -> int:
        """The first offset not yet decided (an open transaction), capped by the high watermark."""
        return self._state.last_stable_offset

    @property
    def segments(self) -> list[LogSegment]:
        """Every segment, oldest first; the last is the active one."""
        return self._state.segments.values()

    @property
    def active_segment(self) -> LogSegment:
        return self._state.segments.active_segment

    def sealed_segments(self) -> list[LogSegment]:
        """Every segment but the active one (those the RLM may copy)."""
        return self._state.segments.values()[:-1]

    def non_active_segments_from(self, offset: int) -> list[LogSegment]:
        """Sealed segments holding offsets from ``offset`` on (``nonActiveLogSegmentsFrom``)."""
        with self._lock:
            return self._state.segments.non_active_segments_from(offset)

    def log_segments(self, from_offset: int, to_offset: int) -> list[LogSegment]:
        """Segments holding offsets in ``[from_offset, to_offset)``."""
        with self._lock:
            return self._state.segments.values(from_offset, to_offset)

    def size(self) -> int:
        """Bytes in all local segments."""
        return self._state.segments.size_in_bytes()

    def only_local_log_segments_size(self) -> int:
        """Bytes of the segments not (entirely) in remote storage yet (Kafka's metric)."""
        highest = self._state.highest_offset_in_remote_storage
        return sum(s.size for s in self._state.segments.values() if s.base_offset >= highest)

    def is_empty(self) -> bool:
        return self._state.log_start_offset == self._state.log_end_offset

    @property
    def closed(self) -> bool:
        return self._state.closed

    def __repr__(self) -> str:
        st = self._state
        return (
            f"LocalLog(dir={str(st.dir)!r}, log_start_offset={st.log_start_offset}, "
            f"log_end_offset={st.log_end_offset}, high_watermark={st.high_watermark}, "
            f"segments={len(st.segments)})"
        )

    # High watermark ------------------------------------------------------------------------------
    def update_high_watermark(self, hw: int) -> int:
        """Set the high watermark, bounded to ``[log start, log end]``; returns the new value.

        On a single node the caller decides what is committed (Kafka's leader does it from its
        followers' fetch offsets); reads with isolation stop there.
        """
        with self._lock:
            self._state.check_open()
            return self._state.apply_high_watermark(hw)

    def maybe_increment_high_watermark(self, hw: int) -> bool:
        """Raise the high watermark to ``hw`` if it is higher; ``InvalidArgumentError`` past LEO."""
        st = self._state
        with self._lock:
            if hw > st.log_end_offset:
                raise InvalidArgumentError(
                    f"High watermark {hw} update exceeds current log end offset {st.log_end_offset}"
                )
            if hw > st.high_watermark:
                st.apply_high_watermark(hw)
                return True
            return False

    # Appending and rolling (log_append) ----------------------------------------------------------
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
        return self._appender.append(
            records, kind, True, leader_epoch, False, transaction_version=transaction_version
        )

    def append_as_follower(self, records: RecordsInput, leader_epoch: int) -> LogAppendInfo:
        """Append batches with their offsets and epochs as given (Kafka's ``appendAsFollower``).

        Batches whose partition leader epoch is above ``leader_epoch`` are skipped with what
        follows them (KAFKA-18723); the first offset must not be below the log end
        (``UnexpectedAppendOffsetError``) and offsets must increase (``OffsetsOutOfOrderError``).
        """
        return self._appender.append(records, AppendOrigin.REPLICATION, False, leader_epoch, True)

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Seal the active segment and start a new one at the log end offset (or later).

        The sealed segment's indexes are trimmed and get their final time index entry; a
        producer snapshot is written at the new base offset; the sealed segment is flushed and
        the recovery point advanced (unless ``flush_on_roll=False``).
        """
        with self._lock:
            self._state.check_open()
            return self._appender.roll(expected_next_offset)

    def flush(self, offset: int | None = None) -> None:
        """``fsync`` the segments up to ``offset`` (default: the log end) and advance the
        recovery point there; the checkpoint is rewritten."""
        with self._lock:
            self._state.check_open()
            self._state.flush(self._state.log_end_offset if offset is None else offset)

    # Reading (log_read) --------------------------------------------------------------------------
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
        return self._reader.read(fetch_offset, max_bytes, isolation, min_one_message)

    def fetch_offset_by_timestamp(self, target_timestamp: int) -> TimestampAndOffset | None:
        """The first local record with a timestamp >= the target (Kafka's ListOffsets).

        Special targets: ``EARLIEST_TIMESTAMP`` (-2, the log start), ``LATEST_TIMESTAMP`` (-1,
        the log end), ``EARLIEST_LOCAL_TIMESTAMP`` (-4, the local log start). None if no record
        has such a timestamp.
        """
        return self._reader.fetch_offset_by_timestamp(target_timestamp)

    # Leader epochs -------------------------------------------------------------------------------
    def latest_epoch(self) -> int | None:
        return self._state.epochs.latest_epoch()

    def assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> None:
        """Record that ``leader_epoch`` starts at ``start_offset`` (a new leader does this)."""
        with self._lock:
            self._state.epochs.assign(leader_epoch, start_offset)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int] | None:
        """``(end offset, epoch)`` for OffsetsForLeaderEpoch, or None when undefined."""
        epoch, offset = self._state.epochs.end_offset_for(leader_epoch, self._state.log_end_offset)
        return None if offset == -1 else (offset, epoch)

    # Log start offsets ---------------------------------------------------------------------------
    def maybe_increment_log_start_offset(self, new_log_start_offset: int, reason: str) -> bool:
        """Raise the log start offset (never above the high watermark); True if it moved.

        Epochs before it are forgotten, producer state and the LSO follow, the checkpoint is
        rewritten.
        """
        with self._lock:
            self._state.check_open()
            return self._state.maybe_increment_log_start_offset(new_log_start_offset, reason)

    def delete_records(self, offset: int) -> int:
        """Advance the log start offset to ``offset`` (Kafka's DeleteRecords) and delete the
        local segments now entirely below it; returns the new log start offset."""
        with self._lock:
            self.maybe_increment_log_start_offset(offset, "client delete records request")
            self._retention.delete_below_log_start()
            return self._state.log_start_offset

    def update_log_start_offset_from_remote_tier(self, remote_log_start_offset: int) -> None:
        """The RLM deleted remote segments up to here: the log start follows (tiered logs only)."""
        if not self.remote_log_enabled:
            _LOG.error("Ignoring the call as the remote log storage is disabled")
            return
        self.maybe_increment_log_start_offset(remote_log_start_offset, "segment deletion")

    def update_highest_offset_in_remote_storage(self, offset: int) -> None:
        """The RLM copied segments up to ``offset`` (inclusive): local retention may delete them."""
        st = self._state
        with self._lock:
            if not st.remote_log_enabled:
                _LOG.warning(
                    "Unable to update the highest offset in remote storage with offset %d since "
                    "remote storage is not enabled.",
                    offset,
                )
            elif offset > st.highest_offset_in_remote_storage:
                st.highest_offset_in_remote_storage = offset

    # Retention (log_retention) -------------------------------------------------------------------
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
        it alone breaches (tiered), so the next call can delete it once copied. A compacted
        topic keeps more: without ``delete`` in its policy only what is below the log start goes,
        or, when tiered, only segments also below ``cleaner_offset`` (``log_retention``).
        """
        with self._lock:
            self._state.check_open()
            if highest_offset_in_remote_storage is not None:
                self.update_highest_offset_in_remote_storage(highest_offset_in_remote_storage)
            start_ms = self._state.clock() if now is None else now
            return self._retention.delete_retention_segments(start_ms)

    def deletable_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool]
    ) -> list[LogSegment]:
        """Oldest segments while ``predicate(segment, next)`` holds and deletion is allowed."""
        return self._retention.deletable_segments(predicate)

    def _remove_and_delete_segments(self, segments: Iterable[LogSegment]) -> None:
        """Take ``segments`` out of the log and delete their files (retention, truncation)."""
        for segment in list(segments):
            self._state.segments.remove(segment.base_offset)
            segment.delete()

    # Truncation (log_truncation) -----------------------------------------------------------------
    def truncate_to(self, target_offset: int) -> bool:
        """Remove every offset >= ``target_offset`` (a follower diverged); True if anything went.

        Whole batches are removed, so a batch holding ``target_offset`` goes entirely (as in
        Kafka, where followers truncate at batch boundaries). Epochs from the target on are
        removed and producer state is rebuilt to the target.
        """
        if target_offset < 0:
            raise InvalidArgumentError(
                f"Cannot truncate partition {self._state.tp} to a negative offset "
                f"({target_offset})."
            )
        with self._lock:
            self._state.check_open()
            truncated = self._truncation.truncate_to(target_offset)
            self._lower_cleaner_offset(self._state.log_end_offset)
            return truncated

    def truncate_fully_and_start_at(
        self, new_offset: int, log_start_offset: int | None = None
    ) -> None:
        """Delete all data and restart the log empty at ``new_offset`` (a follower whose data
        the leader no longer has; tiered: the first offset after the last remote segment)."""
        if new_offset < 0:
            raise InvalidArgumentError(f"cannot start a log at a negative offset ({new_offset})")
        with self._lock:
            self._state.check_open()
            self._truncation.truncate_fully_and_start_at(new_offset, log_start_offset)
            self._lower_cleaner_offset(new_offset)

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
            self._state.check_open()
            self._truncation.restore_remote_aux_state(
                next_offset,
                log_start_offset=log_start_offset,
                leader_epochs=leader_epochs,
                producer_snapshot=producer_snapshot,
            )
            self._lower_cleaner_offset(next_offset)

    # Cleaning ------------------------------------------------------------------------------------
    def set_cleaner_offset(self, offset: int | None) -> None:
        """Record how far the cleaner has compacted (None: forget it).

        The cleaner calls this after a round, with the offset it also writes to the log
        directory's ``cleaner-offset-checkpoint`` (this log does not write that file: it is
        shared by the directory's partitions and belongs to whoever runs the cleaner). An
        offset outside ``[0, log end]`` is an ``InvalidArgumentError``. Truncation lowers it to
        the new log end, as Kafka's ``maybeTruncateCheckpoint`` does.
        """
        with self._lock:
            self._state.check_open()
            if offset is not None and not 0 <= offset <= self._state.log_end_offset:
                raise InvalidArgumentError(
                    f"cleaner offset {offset} of {self._state.tp} is outside the log "
                    f"[0, {self._state.log_end_offset}]"
                )
            self._state.cleaner_offset = offset

    def _lower_cleaner_offset(self, offset: int) -> None:
        st = self._state
        if st.cleaner_offset is not None and st.cleaner_offset > offset:
            _LOG.info("Lowering the cleaner offset of %s to %d (truncation)", st.tp, offset)
            st.cleaner_offset = offset

    def replace_segments(
        self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment]
    ) -> list[LogSegment]:
        """Swap cleaned segments in for ``old_segments`` (Kafka's ``UnifiedLog.replaceSegments``);
        returns the old segments removed without a same-base replacement (their producer
        snapshots were deleted).

        ``new_segments`` are ``LogSegment`` objects open on ``.cleaned`` files
        (``LogSegment.open(dir, base, config, suffix=".cleaned")``) that the cleaner wrote and
        flushed. The old segments must be consecutive, and the new ones must not overlap each
        other nor hold an offset outside the old segments' range (from the first old base offset
        to the base of the segment after the last old one): ``InvalidArgumentError``. Unlike
        Kafka, which skips old segments retention deleted in the meantime, an old segment no
        longer in the log, or the active segment, is an ``IllegalStateError``: the cleaned
        output may then cover offsets the log dropped, and the round should be redone. Nothing
        is renamed when the arguments are refused.

        The swap runs under the log's lock, so a read sees the old segments or the new ones; the
        files move in the crash-safe order of ``LogState.replace_segments``, which the loader
        completes or rolls back on the next open. An ``OSError`` part-way leaves the directory
        as a crash would: close the log with ``close_handlers`` and open it again.
        """
        st = self._state
        if not new_segments:
            raise InvalidArgumentError("replace_segments needs at least one new segment")
        with self._lock:
            st.check_open()
            for segment in new_segments:
                if not segment.has_suffix(CLEANED_FILE_SUFFIX):
                    raise InvalidArgumentError(
                        f"{segment.log_path} is not a .cleaned segment: only those are swapped in"
                    )
            gone = [s.base_offset for s in old_segments if st.segments.get(s.base_offset) is not s]
            if gone or not old_segments:
                raise IllegalStateError(
                    f"cannot swap cleaned segments into {st.tp}: the segments {gone} they "
                    "replace are not in the log any more (retention or truncation ran during "
                    "the clean)"
                )
            if any(s is st.segments.active_segment for s in old_segments):
                raise IllegalStateError(
                    f"the active segment {st.segments.active_segment.base_offset} of {st.tp} "
                    "cannot be replaced"
                )
            low = min(s.base_offset for s in old_segments)
            after = st.segments.higher_segment(max(s.base_offset for s in old_segments))
            assert after is not None  # the active segment is not replaced
            replaced = {s.base_offset for s in old_segments}
            skipped = [
                s.base_offset
                for s in st.segments.values(low, after.base_offset)
                if s.base_offset not in replaced
            ]
            if skipped:
                raise InvalidArgumentError(
                    f"the segments replaced in {st.tp} must be consecutive: {skipped} would be "
                    "left among them"
                )
            previous_end = low
            for segment in sorted(new_segments, key=lambda s: s.base_offset):
                end = segment.read_next_offset()
                if segment.base_offset < previous_end or end > after.base_offset:
                    raise InvalidArgumentError(
                        f"cleaned segment {segment.base_offset} holds offsets up to {end - 1}, "
                        f"outside the replaced range [{low}, {after.base_offset - 1}] of {st.tp} "
                        "or overlapping another cleaned segment"
                    )
                previous_end = end
            removed = st.replace_segments(new_segments, old_segments, self._on_swap_step)
            _LOG.info(
                "Swapped in cleaned segments %s for %s of %s",
                sorted(s.base_offset for s in new_segments),
                sorted(s.base_offset for s in old_segments),
                st.tp,
            )
            return removed

    def _on_swap_step(self, step: str, base_offset: int) -> None:
        """Called after each durable step of ``replace_segments`` (``log_state.SwapStep``);
        nothing here. Fault-injection tests override it to stop a swap where a crash would."""

    def last_records_of_active_producers(self) -> dict[int, tuple[int | None, int]]:
        """Producer id -> (last data offset, or None if the producer wrote only markers;
        producer epoch), for every producer in the producer state (Kafka's
        ``UnifiedLog.lastRecordsOfActiveProducers``).

        The cleaner keeps each one's last batch (empty if need be), so a producer's next
        sequence still follows the log after a clean. Producers are those not yet removed by
        ``remove_expired_producers``, as in Kafka.
        """
        with self._lock:
            return {
                pid: (
                    entry.last_data_offset if entry.last_data_offset >= 0 else None,
                    entry.producer_epoch,
                )
                for pid, entry in self._state.psm.active_producers.items()
            }

    # Tiering -------------------------------------------------------------------------------------
    def segment_copy_inputs(self, segment: LogSegment | int) -> SegmentCopyInputs:
        """What the RLM copy task needs to copy a sealed segment (given or by base offset).

        The producer snapshot at the next segment's base offset is the one taken when the
        segment was rolled; if it is gone (a directory loaded from elsewhere) it is rebuilt from
        the log and written. The transaction index is ``None`` when the segment has no aborted
        transaction (no file, or an empty one). ``IllegalStateError`` for the active segment.
        """
        st = self._state
        with self._lock:
            st.check_open()
            base = segment if isinstance(segment, int) else segment.base_offset
            seg = st.segments.get(base)
            if seg is None:
                raise InvalidArgumentError(f"no segment with base offset {base} in {st.dir}")
            nxt = st.segments.higher_segment(base)
            if nxt is None:
                raise IllegalStateError(
                    f"segment {base} is the active segment: it cannot be copied"
                )
            next_base = nxt.base_offset
            snapshot = st.psm.fetch_snapshot(next_base)
            if snapshot is None:
                snapshot = self._build_producer_snapshot(next_base)
            epochs = st.epochs.epoch_entries_in_range(seg.base_offset, next_base)
            txn_path = seg.txn_index_path
            txn_empty = seg.txn_index.is_empty()
            data = LogSegmentData(
                log_segment=seg.log_path,
                offset_index=seg.offset_index_path,
                time_index=seg.time_index_path,
                transaction_index=None if txn_empty or not txn_path.exists() else txn_path,
                producer_snapshot_index=snapshot,
                leader_epoch_index=encode_leader_epoch_checkpoint(
                    st.epochs.epoch_entries_in_range(-1, next_base)
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

    def _build_producer_snapshot(self, offset: int) -> Path:
        st = self._state
        scratch = ProducerStateManager(
            st.dir,
            producer_id_expiration_ms=st.psm.producer_id_expiration_ms,
            max_transaction_timeout_ms=st.psm.max_transaction_timeout_ms,
            clock=st.clock,
            sync=st.sync,
        )
        scratch.reload_up_to(st.log_start_offset, offset)
        if scratch.map_end_offset < offset:
            replay_segments(scratch, st.segments, st.log_start_offset, offset)
        _LOG.info("Rebuilt the missing producer snapshot at offset %d", offset)
        return st.psm.write_snapshot_at(offset, scratch.active_producers.values())

    # Lifecycle -----------------------------------------------------------------------------------
    def update_config(self, config: LogConfig | Mapping[str, object]) -> LogConfig:
        """Replace the configuration (dynamic topic config); returns the old one."""
        new = config if isinstance(config, LogConfig) else self._state.config.with_overrides(config)
        with self._lock:
            old, self._state.config = self._state.config, new
            return old

    def take_producer_snapshot(self) -> Path | None:
        with self._lock:
            self._state.check_open()
            return self._state.psm.take_snapshot()

    def remove_expired_producers(self, now: int | None = None) -> None:
        """Forget producers idle longer than ``producer.id.expiration.ms`` (Kafka runs this
        periodically)."""
        with self._lock:
            self._state.psm.remove_expired_producers(self._state.clock() if now is None else now)

    def close(self) -> None:
        """Flush everything, snapshot producer state and record a clean shutdown; idempotent."""
        st = self._state
        with self._lock:
            if st.closed:
                return
            try:
                st.flush(st.log_end_offset, including_offset=True)
                st.psm.take_snapshot()
                st.segments.close()
                st.recovery_point = st.log_end_offset
                st.write_checkpoint(clean_shutdown=True)
            finally:
                st.segments.close_handlers()
                st.closed = True

    def close_handlers(self) -> None:
        """Close the files without writing anything (the disk failed, or a test simulating a
        crash: what is on disk then is what a ``kill -9`` would leave)."""
        with self._lock:
            self._state.segments.close_handlers()
            self._state.closed = True

    def delete(self) -> None:
        """Delete every segment, snapshot and checkpoint, then the directory itself."""
        with self._lock:
            self._state.segments.close_handlers()
            self._state.closed = True
            shutil.rmtree(self._state.dir, ignore_errors=True)

    def __enter__(self) -> LocalLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
