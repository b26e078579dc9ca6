"""Loading a partition directory after a clean shutdown or a crash (Kafka's ``LogLoader``).

``LogLoader.load()`` turns whatever a process left in a partition directory into a consistent
set of segments, as Kafka's ``LogLoader`` does, in the same passes:

1. leftovers of interrupted operations: ``*.deleted`` files are deleted (a deletion that was
   under way), ``*.cleaned`` files too (an aborted clean or split), ``*.swap`` files at or above
   the lowest ``.cleaned`` offset are deleted (an incomplete split) and the other ``.swap`` files
   are completed: the segments they replace are deleted and they are renamed into place;
2. every ``.log`` file is opened as a segment; an index without its ``.log`` is deleted; an index
   that is missing or fails its sanity check (``LogSegment.sanity_check``) is rebuilt from the
   batches (``LogSegment.recover``); the indexes of sealed segments are trimmed to their entries
   (an untrimmed index left by a crash would otherwise read as zero-filled entries in Kafka);
3. unless the last shutdown was clean, every segment from the recovery point on is recovered:
   batches CRC-checked, indexes rebuilt, producer state and epochs replayed; the first invalid
   batch (a torn write, a bad CRC) ends the log: the rest of its segment is truncated with a
   warning and later segments are deleted, and nothing before it is lost;
4. the leader epoch cache is truncated to the recovered log end, and to the log start offset;
   producer state is rebuilt from the latest snapshot at or below the log end plus the batches
   after it, and snapshots that match no segment are removed.

Kafka keeps the recovery point, the log start offset and the high watermark of all partitions in
three checkpoint files of the *log directory* (``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``replication-offset-checkpoint``) and a ``.kafka_cleanshutdown``
marker. tierlog manages one partition directory on its own, so it keeps the same four facts in
one file inside it, ``tierlog-offsets-checkpoint``, in Kafka's checkpoint text format (version,
count, then ``<name> <value>`` lines), written atomically. Kafka ignores the file; a directory
copied from a broker has none, and is then fully recovered from offset 0 as Kafka would without
checkpoints; so is one whose file is corrupt (with a warning), as Kafka does when it cannot read
its recovery-point checkpoint. Splitting a segment whose offsets overflow its index (logs written
by Kafka < 0.11) is not implemented: such a segment raises ``LogSegmentOffsetOverflowError``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, NamedTuple

from tierlog.log._checkpoint_file import read_checkpoint, write_checkpoint
from tierlog.log.batch import LOG_OVERHEAD
from tierlog.log.files import (
    CLEANED_FILE_SUFFIX,
    DELETE_DIR_SUFFIX,
    DELETED_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    is_index_file,
    is_log_file,
    leader_epoch_checkpoint_file,
    log_file,
    offset_from_file_name,
)
from tierlog.log.index import InvalidOffsetError
from tierlog.log.leader_epoch_cache import LeaderEpochFileCache
from tierlog.log.log_config import LogConfig
from tierlog.log.producer_state import (
    AppendOrigin,
    CompletedTxn,
    ProducerAppendInfo,
    ProducerStateManager,
)
from tierlog.log.reader import iter_batches
from tierlog.log.segment import LogSegment, LogSegments, read_end_txn_marker
from tierlog.spi import CorruptRecordError, IllegalStateError, InvalidArgumentError, TopicPartition

__all__ = [
    "OFFSETS_CHECKPOINT_FILENAME",
    "LoadedLog",
    "LoadedLogOffsets",
    "LogLoader",
    "OffsetsCheckpoint",
    "RecoveryReport",
    "load_log",
    "load_producers_from_segment",
    "read_offsets_checkpoint",
    "rebuild_producer_state",
    "replay_segments",
    "write_offsets_checkpoint",
]

_LOG = logging.getLogger(__name__)

OFFSETS_CHECKPOINT_FILENAME: Final = "tierlog-offsets-checkpoint"
_CHECKPOINT_VERSION: Final = 0
_SNAPSHOT_DELETE_SUFFIX: Final = ".checkpoint.deleted"  # KRaft snapshots, left alone as Kafka


# The offsets checkpoint ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OffsetsCheckpoint:
    """What Kafka's log-directory checkpoints and clean-shutdown marker say about a partition."""

    recovery_point: int = 0
    log_start_offset: int = 0
    high_watermark: int = 0
    clean_shutdown: bool = False


_CHECKPOINT_NAMES: Final = (
    "recovery-point",
    "log-start-offset",
    "high-watermark",
    "clean-shutdown",
)
"""The entries of ``tierlog-offsets-checkpoint``, in the order they are written."""


def read_offsets_checkpoint(directory: str | os.PathLike[str]) -> OffsetsCheckpoint | None:
    """The partition's ``tierlog-offsets-checkpoint``, or None if there is none.

    A malformed file raises ``CorruptCheckpointError`` (as the other checkpoint readers do)
    naming the file, the line and what is wrong with it (Kafka's checkpoint text, read by
    ``_checkpoint_file``); the file is rewritten atomically at every flush, so that means the
    disk or someone else damaged it. Entries of unknown names are ignored (a later version may
    add some); each of the four known ones must be there.
    """
    checkpoint = read_checkpoint(
        Path(directory) / OFFSETS_CHECKPOINT_FILENAME,
        kind="offsets checkpoint",
        version=_CHECKPOINT_VERSION,
        fields=("name", "value"),
    )
    if checkpoint is None:
        return None
    values: dict[str, int] = {}
    for number, (name, value) in checkpoint.entries:
        values[name] = checkpoint.integer(number, value, f"the value of {name}")
    missing = [name for name in _CHECKPOINT_NAMES if name not in values]
    if missing:
        raise checkpoint.fault(f"no {', '.join(repr(m) for m in missing)} entry")
    return OffsetsCheckpoint(
        recovery_point=values["recovery-point"],
        log_start_offset=values["log-start-offset"],
        high_watermark=values["high-watermark"],
        clean_shutdown=bool(values["clean-shutdown"]),
    )


def write_offsets_checkpoint(
    directory: str | os.PathLike[str], checkpoint: OffsetsCheckpoint, *, sync: bool = True
) -> None:
    """Atomically replace the partition's ``tierlog-offsets-checkpoint``."""
    values = (
        checkpoint.recovery_point,
        checkpoint.log_start_offset,
        checkpoint.high_watermark,
        int(checkpoint.clean_shutdown),
    )
    write_checkpoint(
        Path(directory) / OFFSETS_CHECKPOINT_FILENAME,
        _CHECKPOINT_VERSION,
        zip(_CHECKPOINT_NAMES, values, strict=True),
        sync=sync,
    )


# Producer state replay -----------------------------------------------------------------------
def load_producers_from_segment(
    producer_state: ProducerStateManager,
    segment: LogSegment,
    start_position: int,
    end_position: int,
) -> None:
    """Replay the producer state of the batches in ``[start_position, end_position)``.

    Kafka's ``loadProducersFromRecords`` with ``REPLICATION`` origin (nothing is refused), the
    batches streamed from the file rather than loaded whole. The transaction index is not
    touched: it already holds the aborts of these batches.
    """
    infos: dict[int, ProducerAppendInfo] = {}
    completed: list[CompletedTxn] = []
    path = str(segment.log_path)
    for pos, header in iter_batches(
        segment.log_path, verify_crc=False, start=start_position, end=end_position
    ):
        if not header.has_producer_id:
            continue
        marker = None
        if header.is_control:
            data = segment.read_bytes(pos, LOG_OVERHEAD + header.length)
            marker = read_end_txn_marker(data, path=path, file_offset=pos)
        info = infos.get(header.producer_id)
        if info is None:
            info = producer_state.prepare_update(header.producer_id, AppendOrigin.REPLICATION)
            infos[header.producer_id] = info
        txn = info.append(header, marker)
        if txn is not None:
            completed.append(txn)
    for info in infos.values():
        producer_state.update(info)
    for txn in completed:
        producer_state.complete_txn(txn)


def rebuild_producer_state(
    producer_state: ProducerStateManager,
    segments: LogSegments,
    log_start_offset: int,
    last_offset: int,
    *,
    now: int,
    reload_from_clean_shutdown: bool,
) -> None:
    """Bring ``producer_state`` to ``last_offset`` (Kafka's ``UnifiedLog.rebuildProducerState``).

    Loads the latest snapshot in ``(log_start_offset, last_offset]`` and replays the batches after
    it; snapshots are taken at the bases of the last two segments on the way (so the next
    recovery scans less) and at ``last_offset``. After a clean shutdown with no snapshot at all
    (a log written before snapshots existed), empty snapshots are written instead of scanning.
    Free of other side effects, so recovery can run it on a scratch manager.
    """
    offsets_to_snapshot: list[int] = []
    last = segments.last_segment()
    if last is not None:
        lower = segments.lower_segment(last.base_offset)
        if lower is not None:
            offsets_to_snapshot.append(lower.base_offset)
        offsets_to_snapshot.append(last.base_offset)
    offsets_to_snapshot.append(last_offset)
    _LOG.info("Loading producer state till offset %d", last_offset)
    if producer_state.latest_snapshot_offset() is None and reload_from_clean_shutdown:
        for offset in offsets_to_snapshot:
            producer_state.update_map_end_offset(offset)
            producer_state.take_snapshot()
        return
    empty_before_truncation = (
        producer_state.is_empty() and producer_state.map_end_offset >= last_offset
    )
    producer_state.truncate_and_reload(log_start_offset, last_offset, now)
    if last_offset > producer_state.map_end_offset and not empty_before_truncation:
        replay_segments(
            producer_state, segments, log_start_offset, last_offset, snapshot_at=offsets_to_snapshot
        )
    producer_state.update_map_end_offset(last_offset)
    producer_state.take_snapshot()


def replay_segments(
    producer_state: ProducerStateManager,
    segments: LogSegments,
    log_start_offset: int,
    last_offset: int,
    *,
    snapshot_at: Collection[int] = (),
) -> None:
    """Replay the batches from ``producer_state.map_end_offset`` up to ``last_offset``.

    A snapshot is taken on the way at each segment base offset in ``snapshot_at``.
    """
    segment_of_last = segments.floor_segment(last_offset)
    for segment in segments.values(producer_state.map_end_offset, last_offset):
        start = max(segment.base_offset, producer_state.map_end_offset, log_start_offset)
        producer_state.update_map_end_offset(start)
        if segment.base_offset in snapshot_at:
            producer_state.take_snapshot()
        max_position = segment.size
        if segment is segment_of_last:
            located = segment.translate_offset(last_offset)
            max_position = located.position if located is not None else segment.size
        located_start = segment.translate_offset(start)
        if located_start is not None and located_start.position < max_position:
            load_producers_from_segment(
                producer_state, segment, located_start.position, max_position
            )


# The loader ----------------------------------------------------------------------------------
class LoadedLogOffsets(NamedTuple):
    """What loading found: the log start offset, the recovery point and the log end offset."""

    log_start_offset: int
    recovery_point: int
    log_end_offset: int


@dataclass(slots=True)
class RecoveryReport:
    """What loading had to repair, for logs and tests."""

    deleted_files: list[str] = field(default_factory=list)
    """Leftover ``.deleted``/``.cleaned``/``.swap``/orphan index/``.tmp`` files removed."""
    swapped_in: list[str] = field(default_factory=list)
    """``.swap`` files renamed into place."""
    rebuilt_index_segments: list[int] = field(default_factory=list)
    """Base offsets of segments whose indexes were missing or corrupt."""
    recovered_segments: list[int] = field(default_factory=list)
    """Base offsets of segments recovered (re-scanned)."""
    truncated_bytes: int = 0
    """Bytes cut off torn or corrupt tails."""
    deleted_segments: list[int] = field(default_factory=list)
    """Segments deleted after a corruption, or because they ended before the log start."""
    discarded_checkpoint: str | None = None
    """Why ``tierlog-offsets-checkpoint`` could not be read, if it could not: it was ignored and
    every segment was recovered, as Kafka does with a corrupt recovery-point checkpoint."""


class LogLoader:
    """Loads one partition directory into ``segments`` (see the module docstring).

    ``leader_epoch_cache`` and ``producer_state`` are updated in place; ``producer_state`` must be
    empty. ``had_clean_shutdown`` skips the recovery of segments (indexes are still checked).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        config: LogConfig,
        segments: LogSegments,
        *,
        log_start_offset_checkpoint: int,
        recovery_point_checkpoint: int,
        had_clean_shutdown: bool,
        leader_epoch_cache: LeaderEpochFileCache,
        producer_state: ProducerStateManager,
        remote_log_enabled: bool,
        clock: Callable[[], int],
    ) -> None:
        self._dir = Path(directory)
        self._config = config
        self._segments = segments
        self._log_start_checkpoint = log_start_offset_checkpoint
        self._recovery_point_checkpoint = recovery_point_checkpoint
        self._had_clean_shutdown = had_clean_shutdown
        self._epochs = leader_epoch_cache
        self._producer_state = producer_state
        self._remote_log_enabled = remote_log_enabled
        self._clock = clock
        self.report = RecoveryReport()

    # Helpers -------------------------------------------------------------------------------------
    def _files(self) -> list[Path]:
        return sorted(p for p in self._dir.iterdir() if p.is_file())

    def _delete(self, path: Path, why: str) -> None:
        _LOG.info("Deleting %s %s", why, path)
        path.unlink(missing_ok=True)
        self.report.deleted_files.append(path.name)

    def _open_segment(self, base_offset: int, suffix: str = "") -> LogSegment:
        return LogSegment.open(
            self._dir, base_offset, self._config, suffix=suffix, clock=self._clock
        )

    # Passes --------------------------------------------------------------------------------------
    def load(self) -> LoadedLogOffsets:
        swap_files = self._remove_temp_files_and_collect_swap_files()
        self._complete_swaps(swap_files)
        self._segments.close()
        self._segments.clear()
        self._load_segment_files()
        if not str(self._dir).endswith(DELETE_DIR_SUFFIX):
            recovery_point, next_offset = self._recover_log()
            self._segments.active_segment.resize_indexes(self._config.max_index_size)
        else:
            if not self._segments:
                self._segments.add(self._open_segment(0))
            recovery_point, next_offset = 0, 0

        self._epochs.truncate_from_end(next_offset)
        first = self._segments.first_segment()
        assert first is not None  # _recover_log always leaves a segment
        new_log_start = (
            self._log_start_checkpoint
            if self._remote_log_enabled
            else max(self._log_start_checkpoint, first.base_offset)
        )
        self._epochs.truncate_from_start(self._log_start_checkpoint)
        if not self._producer_state.is_empty():
            raise IllegalStateError("Producer state must be empty during log initialization")
        self._producer_state.remove_stray_snapshots(self._segments.base_offsets)
        rebuild_producer_state(
            self._producer_state,
            self._segments,
            new_log_start,
            next_offset,
            now=self._clock(),
            reload_from_clean_shutdown=self._had_clean_shutdown,
        )
        return LoadedLogOffsets(new_log_start, recovery_point, next_offset)

    def _remove_temp_files_and_collect_swap_files(self) -> list[Path]:
        swap_files: list[Path] = []
        cleaned_files: list[Path] = []
        min_cleaned = 1 << 63
        for path in self._files():
            name = path.name
            if name.endswith(DELETED_FILE_SUFFIX) and not name.endswith(_SNAPSHOT_DELETE_SUFFIX):
                self._delete(path, "stray temporary file")
            elif name.endswith(CLEANED_FILE_SUFFIX):
                min_cleaned = min(min_cleaned, offset_from_file_name(name))
                cleaned_files.append(path)
            elif name.endswith(SWAP_FILE_SUFFIX):
                swap_files.append(path)
            elif name.endswith(".tmp"):
                # An atomic_write (checkpoint, snapshot) that did not reach its rename.
                self._delete(path, "unfinished temporary file")
        valid: list[Path] = []
        for path in swap_files:
            if offset_from_file_name(path.name) >= min_cleaned:
                self._delete(path, f"invalid swap file (minCleanedFileOffset: {min_cleaned})")
            else:
                valid.append(path)
        for path in cleaned_files:
            self._delete(path, "stray .cleaned file")
        return valid

    def _complete_swaps(self, swap_files: list[Path]) -> None:
        min_swap = 1 << 63
        max_swap = -(1 << 63)
        for path in swap_files:
            if not is_log_file(path.name[: -len(SWAP_FILE_SUFFIX)]):
                continue
            base = offset_from_file_name(path.name)
            segment = self._open_segment(base, SWAP_FILE_SUFFIX)
            try:
                _LOG.info(
                    "Found log file %s from interrupted swap operation, which is recoverable "
                    "from .swap files by renaming.",
                    path,
                )
                min_swap = min(min_swap, base)
                max_swap = max(max_swap, segment.read_next_offset())
            finally:
                segment.close_handlers()
        if min_swap <= max_swap:
            for path in self._files():
                if path.name.endswith(SWAP_FILE_SUFFIX):
                    continue
                try:
                    offset = offset_from_file_name(path.name)
                except InvalidArgumentError:
                    continue
                if min_swap <= offset < max_swap:
                    self._delete(path, "segment file that was compacted but not yet deleted")
        for path in self._files():
            if path.name.endswith(SWAP_FILE_SUFFIX):
                target = path.with_name(path.name[: -len(SWAP_FILE_SUFFIX)])
                _LOG.info("Recovering file %s by renaming from .swap files.", path.name)
                os.replace(path, target)
                self.report.swapped_in.append(target.name)

    def _load_segment_files(self) -> None:
        for path in self._files():
            name = path.name
            if is_index_file(name):
                offset = offset_from_file_name(name)
                if not log_file(self._dir, offset).exists():
                    _LOG.warning(
                        "Found an orphaned index file %s, with no corresponding log file.", path
                    )
                    self._delete(path, "orphaned index file")
            elif is_log_file(name):
                base = offset_from_file_name(name)
                segment = self._open_segment(base)
                try:
                    segment.sanity_check()
                except FileNotFoundError as e:
                    if self._had_clean_shutdown or base < self._recovery_point_checkpoint:
                        _LOG.error(
                            "Could not find index file corresponding to log file %s (%s), "
                            "recovering segment and rebuilding index files...",
                            segment.log_path,
                            e,
                        )
                    self._recover_segment_with_index_rebuild(segment)
                except CorruptRecordError as e:
                    _LOG.warning(
                        "Found a corrupted index file corresponding to log file %s due to %s, "
                        "recovering segment and rebuilding index files...",
                        segment.log_path,
                        e,
                    )
                    self._recover_segment_with_index_rebuild(segment)
                else:
                    # A sealed segment's indexes end at their last entry; one a crash left
                    # preallocated is trimmed (the active segment's are resized after loading).
                    segment.offset_index.trim_to_valid_size()
                    segment.time_index.trim_to_valid_size()
                self._segments.add(segment)

    def _recover_segment_with_index_rebuild(self, segment: LogSegment) -> None:
        self.report.rebuilt_index_segments.append(segment.base_offset)
        self._recover_segment(segment)

    def _recover_segment(self, segment: LogSegment) -> int:
        """Recover one segment with producer state rebuilt up to its base on a scratch manager."""
        scratch = ProducerStateManager(
            self._dir,
            producer_id_expiration_ms=self._producer_state.producer_id_expiration_ms,
            max_transaction_timeout_ms=self._producer_state.max_transaction_timeout_ms,
            clock=self._clock,
        )
        rebuild_producer_state(
            scratch,
            self._segments,
            self._log_start_checkpoint,
            segment.base_offset,
            now=self._clock(),
            reload_from_clean_shutdown=False,
        )
        truncated = segment.recover(scratch, self._epochs)
        # Snapshot the state at the segment's end so the next segment need not replay this one.
        scratch.take_snapshot()
        self.report.recovered_segments.append(segment.base_offset)
        self.report.truncated_bytes += truncated
        return truncated

    def _remove_and_delete_segments(self, segments: list[LogSegment], why: str) -> None:
        if not segments:
            return
        _LOG.info("Deleting segments as part of log recovery (%s): %s", why, segments)
        for segment in segments:
            self._segments.remove(segment.base_offset)
            segment.delete()
            self.report.deleted_segments.append(segment.base_offset)
            snapshot = self._producer_state.remove_and_mark_snapshot_for_deletion(
                segment.base_offset
            )
            if snapshot is not None:
                snapshot.delete_if_exists()

    def _recover_log(self) -> tuple[int, int]:
        if not self._had_clean_shutdown:
            unflushed = self._segments.values(self._recovery_point_checkpoint, None)
            for i, segment in enumerate(unflushed):
                _LOG.info("Recovering unflushed segment %d.", segment.base_offset)
                try:
                    truncated = self._recover_segment(segment)
                except (InvalidOffsetError, OSError) as e:
                    _LOG.warning(
                        "Found invalid offset during recovery (%s). Deleting the corrupt segment "
                        "and creating an empty one with starting offset %d",
                        e,
                        segment.base_offset,
                    )
                    truncated = segment.truncate_to(segment.base_offset)
                    self.report.truncated_bytes += truncated
                if truncated > 0:
                    _LOG.warning(
                        "Corruption found in segment %d, truncating to offset %d",
                        segment.base_offset,
                        segment.read_next_offset(),
                    )
                    self._remove_and_delete_segments(unflushed[i + 1 :], "after a corruption")
                    break

        log_end: int | None = None
        if self._segments:
            active = self._segments.active_segment
            try:
                end = active.read_next_offset()
            except CorruptRecordError as exc:
                # Only possible after a "clean" shutdown (otherwise the active segment was just
                # recovered): the marker lied or the file was damaged since. Kafka's
                # readNextOffset would stop at the damage; recovering the segment does that and
                # also truncates the damage away, keeping everything before it.
                _LOG.warning(
                    "The active segment %d is damaged although the last shutdown was clean "
                    "(%s); recovering it",
                    active.base_offset,
                    exc,
                )
                self._had_clean_shutdown = False
                self._recover_segment(active)
                end = active.read_next_offset()
            if end >= self._log_start_checkpoint:
                log_end = end
            else:
                _LOG.warning(
                    "Deleting all segments because logEndOffset (%d) is smaller than "
                    "logStartOffset %d. This could happen if segment files were deleted from the "
                    "file system.",
                    end,
                    self._log_start_checkpoint,
                )
                self._remove_and_delete_segments(self._segments.values(), "log end < log start")
                self._epochs.clear_and_flush()
                self._producer_state.truncate_fully_and_start_at(self._log_start_checkpoint)
        if not self._segments:
            self._segments.add(self._open_segment(self._log_start_checkpoint))
        if self._had_clean_shutdown and log_end is not None:
            return log_end, log_end
        if log_end is None:
            log_end = self._segments.active_segment.read_next_offset()
        return min(self._recovery_point_checkpoint, log_end), log_end


# Loading a partition ---------------------------------------------------------------------------
class LoadedLog(NamedTuple):
    """A loaded partition directory: what ``LocalLog`` is built from."""

    segments: LogSegments
    leader_epoch_cache: LeaderEpochFileCache
    producer_state: ProducerStateManager
    offsets: LoadedLogOffsets
    high_watermark: int
    """The checkpointed high watermark (``LocalLog`` bounds it to the loaded log)."""
    report: RecoveryReport


def load_log(
    directory: Path,
    config: LogConfig,
    topic_partition: TopicPartition,
    *,
    clock: Callable[[], int],
    producer_id_expiration_ms: int,
    max_transaction_timeout_ms: int,
    sync: bool,
) -> LoadedLog:
    """Load (recovering as needed) the existing partition directory ``directory``.

    The checkpoint says where recovery starts; a clean-shutdown marker in it is cleared before
    loading, as Kafka deletes its marker, so a crash during or after loading recovers again. A
    corrupt checkpoint is ignored with a warning: recovery then starts at offset 0 and the log
    start offset comes from the segments, as Kafka resets its recovery point and log start
    offset when their checkpoint files cannot be read. Nothing in the segments is lost; the
    high watermark restarts at the log start and ``LocalLog.open`` rewrites the checkpoint.
    """
    discarded: str | None = None
    try:
        checkpoint = read_offsets_checkpoint(directory) or OffsetsCheckpoint()
    except CorruptRecordError as e:
        discarded = str(e)
        _LOG.warning(
            "Ignoring the offsets checkpoint of %s and recovering every segment: %s", directory, e
        )
        checkpoint = OffsetsCheckpoint()
    if checkpoint.clean_shutdown:
        write_offsets_checkpoint(
            directory,
            OffsetsCheckpoint(
                checkpoint.recovery_point,
                checkpoint.log_start_offset,
                checkpoint.high_watermark,
                False,
            ),
            sync=sync,
        )
    epochs = LeaderEpochFileCache(leader_epoch_checkpoint_file(directory), sync=sync)
    psm = ProducerStateManager(
        directory,
        producer_id_expiration_ms=producer_id_expiration_ms,
        max_transaction_timeout_ms=max_transaction_timeout_ms,
        clock=clock,
        partition=str(topic_partition),
        sync=sync,
    )
    segments = LogSegments()
    loader = LogLoader(
        directory,
        config,
        segments,
        log_start_offset_checkpoint=checkpoint.log_start_offset,
        recovery_point_checkpoint=checkpoint.recovery_point,
        had_clean_shutdown=checkpoint.clean_shutdown,
        leader_epoch_cache=epochs,
        producer_state=psm,
        remote_log_enabled=config.remote_log_enabled(topic_partition.topic),
        clock=clock,
    )
    try:
        offsets = loader.load()
    except BaseException:
        segments.close_handlers()
        raise
    loader.report.discarded_checkpoint = discarded
    return LoadedLog(segments, epochs, psm, offsets, checkpoint.high_watermark, loader.report)
