"""The state of a partition's local log that every part of ``LocalLog`` reads and moves.

``LocalLog`` is a facade over parts that each hold one concept (``log_append``: appending and
rolling; ``log_read``: reads; ``log_retention``: deleting old segments; ``log_truncation``:
truncation and restarting; ``recovery``: loading a directory). They all work on one partition's
segments, producer state, leader epochs and offsets, under one lock, so that state is this one
object, which each part holds. A log cleaner (``tierlog.compaction``) works beside them through
``LocalLog``: it reads sealed segments, writes ``.cleaned`` ones and has them swapped in
(``replace_segments``, here), and records how far it cleaned (``cleaner_offset``).

Besides the fields, this holds the few moves of the offsets that several parts make and that
must stay consistent wherever they are made: the high watermark (bounded to the log, producer
state and the last stable offset follow it), the log start offset (epochs, producer state and
snapshots follow it), the recovery point (advanced by flushing), and the checkpoint file that
records them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from tierlog._durable import fsync_directory
from tierlog.log.files import CLEANED_FILE_SUFFIX, DELETED_FILE_SUFFIX, SWAP_FILE_SUFFIX
from tierlog.log.leader_epoch_cache import LeaderEpochFileCache
from tierlog.log.log_config import LogConfig
from tierlog.log.log_errors import OffsetOutOfRangeError
from tierlog.log.producer_state import ProducerStateManager
from tierlog.log.recovery import LoadedLogOffsets, OffsetsCheckpoint, write_offsets_checkpoint
from tierlog.log.segment import LogSegment, LogSegments
from tierlog.spi import IllegalStateError, TopicPartition

__all__ = ["LogState", "SwapStep"]

_LOG = logging.getLogger(__name__)

SwapStep = Callable[[str, int], None]
"""Called by ``LogState.replace_segments`` after each durable step of a swap, with the step
(``"swap"``: a new segment renamed ``.cleaned`` -> ``.swap``; ``"deleted"``: an old segment's
files renamed ``.deleted``; ``"removed"``: those files deleted; ``"final"``: a new segment
renamed ``.swap`` -> its final name) and the segment's base offset. Tests raise from it to leave
the directory as a crash at that point would."""


class LogState:
    """One partition's segments, producer state, epochs and offsets, and the lock over them.

    Fields are public to the parts of ``LocalLog`` (this package), not to its users, who go
    through ``LocalLog``. ``local_log_start`` is the first local offset as tracked for a tiered
    log; ``local_log_start_offset`` is what applies (the log start offset when not tiered).
    """

    __slots__ = (
        "cleaner_offset",
        "clock",
        "closed",
        "config",
        "dir",
        "epochs",
        "first_unstable_offset",
        "flush_on_roll",
        "high_watermark",
        "highest_offset_in_remote_storage",
        "hw_follows_leo",
        "local_log_start",
        "lock",
        "log_end_offset",
        "log_start_offset",
        "psm",
        "recovery_point",
        "segments",
        "sync",
        "tp",
    )

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
        clock: Callable[[], int],
        flush_on_roll: bool,
        high_watermark_follows_leo: bool,
        sync: bool,
    ) -> None:
        self.dir = directory
        self.config = config
        self.tp = topic_partition
        self.segments = segments
        self.epochs = leader_epoch_cache
        self.psm = producer_state
        self.clock = clock
        self.flush_on_roll = flush_on_roll
        self.hw_follows_leo = high_watermark_follows_leo
        self.sync = sync
        self.lock = threading.RLock()
        self.closed = False
        self.log_end_offset = offsets.log_end_offset
        self.recovery_point = offsets.recovery_point
        self.log_start_offset = offsets.log_start_offset
        first = segments.first_segment()
        assert first is not None  # the loader always leaves an active segment
        self.local_log_start = max(offsets.log_start_offset, first.base_offset)
        if not self.remote_log_enabled:
            self.log_start_offset = self.local_log_start
        self.highest_offset_in_remote_storage = -1
        self.cleaner_offset: int | None = None
        self.first_unstable_offset: int | None = None
        self.high_watermark = self.log_start_offset

    # Derived facts -------------------------------------------------------------------------------
    @property
    def remote_log_enabled(self) -> bool:
        return self.config.remote_log_enabled(self.tp.topic)

    @property
    def remote_copy_enabled(self) -> bool:
        return self.config.remote_copy_enabled(self.tp.topic)

    @property
    def local_log_start_offset(self) -> int:
        """The first offset in the local segments (equal to the log start when not tiered)."""
        return self.local_log_start if self.remote_log_enabled else self.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        """The first offset not yet decided (an open transaction), capped by the high watermark."""
        fuo = self.first_unstable_offset
        return fuo if fuo is not None and fuo < self.high_watermark else self.high_watermark

    def check_open(self) -> None:
        if self.closed:
            raise IllegalStateError(f"the log of {self.tp} in {self.dir} is closed")

    # Checkpoint ----------------------------------------------------------------------------------
    def write_checkpoint(self, *, clean_shutdown: bool = False) -> None:
        """Record the recovery point, log start offset and high watermark (a deleted directory
        is left alone)."""
        if not self.dir.exists():
            return
        write_offsets_checkpoint(
            self.dir,
            OffsetsCheckpoint(
                self.recovery_point,
                self.log_start_offset,
                self.high_watermark,
                clean_shutdown,
            ),
            sync=self.sync,
        )

    # High watermark and LSO ----------------------------------------------------------------------
    def apply_high_watermark(self, hw: int) -> int:
        """Set the high watermark, bounded to ``[log start, log end]``; returns the new value."""
        new = max(self.log_start_offset, min(hw, self.log_end_offset))
        if new < self.high_watermark:
            _LOG.warning(
                "Non-monotonic update of high watermark from %d to %d", self.high_watermark, new
            )
        self.high_watermark = new
        self.psm.on_high_watermark_updated(new)
        self.maybe_increment_first_unstable_offset()
        return new

    def maybe_increment_first_unstable_offset(self) -> None:
        first = self.psm.first_unstable_offset()
        if first is not None and first < self.log_start_offset:
            first = self.log_start_offset
        self.first_unstable_offset = first

    # Log start offset ----------------------------------------------------------------------------
    def maybe_increment_log_start_offset(self, new_log_start_offset: int, reason: str) -> bool:
        """Raise the log start offset (never above the high watermark); True if it moved.

        Epochs before it are forgotten, producer state and the LSO follow, the checkpoint is
        rewritten. The caller holds the lock and checked that the log is open.
        """
        if new_log_start_offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"Cannot increment the log start offset to {new_log_start_offset} of "
                f"partition {self.tp} since it is larger than the high watermark "
                f"{self.high_watermark}"
            )
        if self.remote_log_enabled:
            self.local_log_start = max(new_log_start_offset, self.local_log_start)
        if new_log_start_offset <= self.log_start_offset:
            return False
        self.log_start_offset = new_log_start_offset
        self.recovery_point = max(self.recovery_point, new_log_start_offset)
        _LOG.info("Incremented log start offset to %d due to %s", new_log_start_offset, reason)
        self.epochs.truncate_from_start(new_log_start_offset)
        self.psm.on_log_start_offset_incremented(new_log_start_offset)
        self.psm.delete_snapshots_before(new_log_start_offset)
        self.maybe_increment_first_unstable_offset()
        self.write_checkpoint()
        return True

    # Flushing ------------------------------------------------------------------------------------
    def flush(self, offset: int, *, including_offset: bool = False) -> None:
        """Flush segments holding offsets below ``offset`` (to ``offset`` with
        ``including_offset``, so an empty active segment at the log end is flushed too, as
        Kafka's shutdown flush does); the recovery point becomes ``offset``."""
        flush_to = offset + 1 if including_offset else offset
        if flush_to <= self.recovery_point:
            return
        to_flush = self.segments.values(self.recovery_point, flush_to)
        for segment in to_flush:
            segment.flush()
        if any(s.base_offset >= self.recovery_point for s in to_flush):
            fsync_directory(self.dir)
        self.recovery_point = offset
        self.write_checkpoint()

    # Segments ------------------------------------------------------------------------------------
    def replace_segment(self, new_offset: int, to_delete: LogSegment) -> LogSegment:
        """Open a new empty segment at ``new_offset`` and delete ``to_delete`` (which may have the
        same base offset: it is renamed ``.deleted`` first)."""
        if new_offset == to_delete.base_offset:
            to_delete.change_file_suffixes("", ".deleted")
        new_segment = LogSegment.open(self.dir, new_offset, self.config, clock=self.clock)
        self.segments.add(new_segment)
        if new_offset != to_delete.base_offset:
            self.segments.remove(to_delete.base_offset)
        to_delete.delete()
        return new_segment

    def delete_producer_snapshots(self, segments: Iterable[LogSegment]) -> None:
        """Delete the producer snapshots named by the base offsets of deleted segments."""
        for segment in segments:
            snapshot = self.psm.remove_and_mark_snapshot_for_deletion(segment.base_offset)
            if snapshot is not None:
                snapshot.delete_if_exists()

    def replace_segments(
        self,
        new_segments: Sequence[LogSegment],
        old_segments: Sequence[LogSegment],
        step: SwapStep | None = None,
    ) -> list[LogSegment]:
        """Swap cleaned segments in for ``old_segments`` (Kafka's ``LocalLog.replaceSegments``);
        returns the old segments removed without a replacement at their base offset.

        ``new_segments`` are open on ``.cleaned`` files, written and flushed. The order makes a
        crash at any point recoverable by ``recovery.LogLoader`` to the old segments or the new
        ones: each new segment is renamed ``.swap``, highest base offset first (until the lowest
        is, a ``.cleaned`` file remains, and the loader drops every ``.swap`` above it with the
        ``.cleaned`` files: the old segments stay); each old segment, once all new ones are
        ``.swap``, is taken out of the map and its files renamed ``.deleted``, then deleted (the
        loader completes a swap whose ``.swap`` files are all there: it deletes the old files the
        new segments cover and renames them into place); then each new segment takes its final
        name and the directory is ``fsync``-ed. The caller holds the lock and checked the
        arguments (``LocalLog.replace_segments``); old segments no longer in the log are
        skipped, as Kafka skips them.
        """
        news = sorted(new_segments, key=lambda s: s.base_offset)
        olds = sorted(
            (s for s in old_segments if self.segments.get(s.base_offset) is s),
            key=lambda s: s.base_offset,
        )
        for segment in reversed(news):
            segment.change_file_suffixes(CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
            if step is not None:
                step("swap", segment.base_offset)
        for segment in reversed(news):
            self.segments.add(segment)  # replaces an old segment of the same base offset
        new_bases = {s.base_offset for s in news}
        for segment in olds:
            if segment.base_offset not in new_bases:
                self.segments.remove(segment.base_offset)
            segment.change_file_suffixes("", DELETED_FILE_SUFFIX)
            if step is not None:
                step("deleted", segment.base_offset)
            segment.delete_if_exists()
            if step is not None:
                step("removed", segment.base_offset)
        for segment in news:
            segment.change_file_suffixes(SWAP_FILE_SUFFIX, "")
            if step is not None:
                step("final", segment.base_offset)
        fsync_directory(self.dir)
        removed = [s for s in olds if s.base_offset not in new_bases]
        self.delete_producer_snapshots(removed)
        return removed
