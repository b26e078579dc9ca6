"""Truncating a partition's local log, and restarting it empty at an offset.

A follower whose log diverged from its leader's truncates to the divergence point
(``truncate_to``); one whose data the leader no longer has, or whose fetch offset is only in
remote storage, restarts empty (``truncate_fully_and_start_at``, and ``restore_remote_aux_state``
which also restores the leader epochs and producer state of the remote data before the restart
point, Kafka's ``buildRemoteLogAuxState``). Each removes whole segments or batches and then
rebuilds what depends on them (epochs, producer state, the high watermark, the checkpoint), the
same rebuilding recovery does, hence ``recovery.rebuild_producer_state``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from tierlog._durable import atomic_write
from tierlog.log.checkpoint import EpochEntry
from tierlog.log.files import producer_snapshot_file
from tierlog.log.log_state import LogState
from tierlog.log.recovery import rebuild_producer_state
from tierlog.log.segment import LogSegment

__all__ = ["LogTruncation"]

_LOG = logging.getLogger(__name__)


class LogTruncation:
    """Truncates a ``LogState``; the caller holds the lock and checked that the log is open.

    ``remove_segments`` takes segments out of the log and deletes their files (``LocalLog``'s
    hook, shared with retention).
    """

    __slots__ = ("_remove_segments", "_state")

    def __init__(
        self, state: LogState, *, remove_segments: Callable[[Iterable[LogSegment]], None]
    ) -> None:
        self._state = state
        self._remove_segments = remove_segments

    def truncate_to(self, target_offset: int) -> bool:
        """``LocalLog.truncate_to`` (the target is >= 0): remove every offset >= the target."""
        st = self._state
        if target_offset < st.high_watermark:
            _LOG.warning(
                "Truncating %s to offset %d below high watermark %d",
                st.tp,
                target_offset,
                st.high_watermark,
            )
        if target_offset >= st.log_end_offset:
            st.epochs.truncate_from_end(st.log_end_offset)
            return False
        _LOG.info("Truncating to offset %d", target_offset)
        if st.segments.base_offsets[0] > target_offset:
            self.truncate_fully_and_start_at(target_offset, None)
            return True
        deleted = [s for s in st.segments.values() if s.base_offset > target_offset]
        self._remove_segments(deleted)
        st.segments.active_segment.truncate_to(target_offset)
        st.log_end_offset = target_offset
        st.recovery_point = min(st.recovery_point, target_offset)
        st.delete_producer_snapshots(deleted)
        st.epochs.truncate_from_end(target_offset)
        st.log_start_offset = min(target_offset, st.log_start_offset)
        self._rebuild_producer_state(st.log_start_offset, target_offset)
        st.high_watermark = min(st.log_end_offset, st.high_watermark)
        st.psm.on_high_watermark_updated(st.high_watermark)
        st.maybe_increment_first_unstable_offset()
        st.write_checkpoint()
        return True

    def truncate_fully_and_start_at(self, new_offset: int, log_start_offset: int | None) -> None:
        """Delete all data and restart the log empty at ``new_offset``."""
        st = self._state
        _LOG.debug(
            "Truncate and start at offset %d, logStartOffset: %s", new_offset, log_start_offset
        )
        existing = st.segments.values()
        self._remove_segments(existing[:-1])
        st.replace_segment(new_offset, existing[-1])
        st.log_end_offset = new_offset
        st.recovery_point = min(st.recovery_point, new_offset)
        st.epochs.clear_and_flush()
        st.psm.truncate_fully_and_start_at(new_offset)
        st.log_start_offset = new_offset if log_start_offset is None else log_start_offset
        st.local_log_start = new_offset
        self._rebuild_producer_state(st.log_start_offset, new_offset)
        st.high_watermark = st.log_start_offset
        st.apply_high_watermark(st.log_end_offset)
        st.write_checkpoint()

    def restore_remote_aux_state(
        self,
        next_offset: int,
        *,
        log_start_offset: int,
        leader_epochs: Iterable[EpochEntry | tuple[int, int]],
        producer_snapshot: bytes,
    ) -> None:
        """``LocalLog.restore_remote_aux_state`` (the offsets are valid): restart empty at
        ``next_offset`` with the epochs and producer state of the remote data before it."""
        st = self._state
        self.truncate_fully_and_start_at(next_offset, log_start_offset)
        st.epochs.assign_all(leader_epochs)
        st.epochs.flush()
        atomic_write(producer_snapshot_file(st.dir, next_offset), producer_snapshot, sync=st.sync)
        st.psm.truncate_fully_and_reload_snapshots()
        # The snapshot at ``next_offset`` must load even when the log starts there.
        self._rebuild_producer_state(
            min(st.log_start_offset, next_offset - 1) if next_offset > 0 else 0, next_offset
        )
        st.maybe_increment_first_unstable_offset()
        st.write_checkpoint()

    def _rebuild_producer_state(self, log_start_offset: int, last_offset: int) -> None:
        """Producer state up to ``last_offset`` from the snapshots and segments left."""
        st = self._state
        rebuild_producer_state(
            st.psm,
            st.segments,
            log_start_offset,
            last_offset,
            now=st.clock(),
            reload_from_clean_shutdown=False,
        )
