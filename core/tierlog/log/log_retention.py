"""Retention of a partition's local log: which old segments go, and deleting them.

Kafka's ``UnifiedLog.deleteOldSegments``: segments entirely below the log start offset, then by
size and by time. When the topic is tiered (and copying) the limits are ``local.retention.bytes``
and ``local.retention.ms`` and a segment is deletable only once its last offset is in remote
storage (``highest_offset_in_remote_storage``) or the log start has passed it; otherwise
``retention.bytes``/``retention.ms``. Never a segment holding offsets at or above the high
watermark; when tiered, the active segment is rolled first if it alone breaches, so the next
pass can delete it once copied. ``delete_records`` (Kafka's DeleteRecords) is the same deletion
driven by a moved log start offset.

What goes depends on ``cleanup.policy`` (Kafka's rules, and the KIP "Tiered Storage for
compacted topics" for the tiered compacted ones, which Kafka does not have):

- ``delete`` or ``compact,delete``: below the log start, then by size and time
  (``local.retention.*`` and copied first when tiered, ``retention.*`` otherwise);
- ``compact``, tiered: below the log start, then by ``local.retention.*`` and copied first as
  above, but only segments also entirely below the cleaner offset (compacted already:
  ``LocalLog.cleaner_offset``; none while it is unknown);
- ``compact``, not tiered: only what is below the log start (only the cleaner shrinks it);
- empty, tiered: as ``delete`` tiered (Kafka's rule for an empty policy); empty, not tiered:
  only what is below the log start.

The tiered ``compact`` rule keeps a segment locally until the cleaner has been over it, so that
compaction normally reads local data and does not download it again (the KIP's second
formulation; its first said local retention would ignore compaction). A tiered topic that stopped
copying (``remote.log.copy.disable``) follows the rules of an untiered one, as in Kafka.

Retention only chooses and deletes whole segments; it rolls through the appender and removes
files through the ``remove_segments`` hook ``LocalLog`` gives it (which a subclass may wrap, as
the fault-injection tests do). The log cleaner (``tierlog.compaction``) is its sibling: it
chooses segments to rewrite rather than to delete, and swaps them in through
``LocalLog.replace_segments``.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable

from tierlog.log.log_state import LogState
from tierlog.log.segment import LogSegment

__all__ = ["LogRetention", "SegmentPredicate"]

_LOG = logging.getLogger(__name__)

SegmentPredicate = Callable[[LogSegment, LogSegment | None], bool]
"""``predicate(segment, next segment or None)``: whether retention wants ``segment`` gone."""


class _Reason(enum.Enum):
    RETENTION_TIME = "retention time"
    RETENTION_SIZE = "retention size"
    LOG_START_OFFSET = "log start offset"


class LogRetention:
    """Deletes the segments retention allows from a ``LogState`` (see the module docstring).

    ``roll`` seals the active segment (the appender's); ``remove_segments`` takes segments out
    of the log and deletes their files. The caller holds the lock.
    """

    __slots__ = ("_remove_segments", "_roll", "_state")

    def __init__(
        self,
        state: LogState,
        *,
        roll: Callable[[int | None], LogSegment],
        remove_segments: Callable[[Iterable[LogSegment]], None],
    ) -> None:
        self._state = state
        self._roll = roll
        self._remove_segments = remove_segments

    def delete_retention_segments(self, start_ms: int) -> int:
        """Delete by log start, size and time (as configured, see the module docstring's
        table); returns how many were deleted."""
        st = self._state
        cfg = st.config
        by_log_start = self._delete_old_segments(
            self._log_start_breached_predicate(), _Reason.LOG_START_OFFSET
        )
        if cfg.delete or (not cfg.compact and st.remote_copy_enabled):
            return (
                by_log_start
                + self._delete_retention_size_breached_segments()
                + self._delete_retention_ms_breached_segments(start_ms)
            )
        if cfg.compact and st.remote_copy_enabled:
            cleaned = self._cleaned_predicate()
            return (
                by_log_start
                + self._delete_retention_size_breached_segments(cleaned)
                + self._delete_retention_ms_breached_segments(start_ms, cleaned)
            )
        return by_log_start

    def _cleaned_predicate(self) -> SegmentPredicate:
        """True for a sealed segment entirely below the cleaner offset: its last offset (the
        next segment's base - 1, what every retention check bounds a segment by) is below it.
        The cleaner's offsets are segment bases (it never cleans part of a segment), so this is
        "the cleaner has been over every record of it"."""
        st = self._state

        def cleaned(segment: LogSegment, nxt: LogSegment | None) -> bool:
            offset = st.cleaner_offset
            return nxt is not None and offset is not None and nxt.base_offset <= offset

        return cleaned

    def delete_below_log_start(self) -> int:
        """Delete the segments now entirely below the log start offset (after DeleteRecords)."""
        return self._delete_old_segments(
            self._log_start_breached_predicate(), _Reason.LOG_START_OFFSET
        )

    def _log_start_breached_predicate(self) -> SegmentPredicate:
        st = self._state

        def breached(segment: LogSegment, nxt: LogSegment | None) -> bool:
            bound = st.local_log_start_offset if st.remote_log_enabled else st.log_start_offset
            return nxt is not None and nxt.base_offset <= bound

        return breached

    def _delete_retention_ms_breached_segments(
        self, start_ms: int, also: SegmentPredicate | None = None
    ) -> int:
        """By time; ``also`` is a further condition a segment must meet (checked first)."""
        st = self._state
        cfg = st.config
        retention_ms = (
            cfg.effective_local_retention_ms if st.remote_copy_enabled else cfg.retention_ms
        )
        if retention_ms < 0:
            return 0

        def breached(segment: LogSegment, nxt: LogSegment | None) -> bool:
            if also is not None and not also(segment, nxt):
                return False
            largest = segment.largest_timestamp()
            if start_ms < largest:
                _LOG.warning(
                    "%r contains future timestamp(s), making it ineligible to be deleted", segment
                )
            return start_ms - largest > retention_ms

        return self._delete_old_segments(breached, _Reason.RETENTION_TIME)

    def _delete_retention_size_breached_segments(self, also: SegmentPredicate | None = None) -> int:
        """By size; ``also`` is a further condition a segment must meet (checked first)."""
        st = self._state
        cfg = st.config
        retention_size = (
            cfg.effective_local_retention_bytes if st.remote_copy_enabled else cfg.retention_bytes
        )
        log_size = st.segments.size_in_bytes()
        if retention_size < 0 or log_size < retention_size:
            return 0
        diff = log_size - retention_size

        def breached(segment: LogSegment, nxt: LogSegment | None) -> bool:
            nonlocal diff
            if also is not None and not also(segment, nxt):
                return False
            if diff - segment.size >= 0:
                diff -= segment.size
                return True
            return False

        return self._delete_old_segments(breached, _Reason.RETENTION_SIZE)

    def _is_segment_eligible_for_deletion(self, nxt: LogSegment | None, upper_bound: int) -> bool:
        st = self._state
        if not st.remote_copy_enabled:
            return True
        passed_by_log_start = nxt is not None and st.log_start_offset >= nxt.base_offset
        return (
            upper_bound > 0 and upper_bound - 1 <= st.highest_offset_in_remote_storage
        ) or passed_by_log_start

    def deletable_segments(self, predicate: SegmentPredicate) -> list[LogSegment]:
        """Oldest segments while ``predicate(segment, next)`` holds and deletion is allowed."""
        st = self._state
        segments = st.segments.values()
        deletable: list[LogSegment] = []
        should_roll = False
        for i, segment in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            last_and_empty = nxt is None and segment.size == 0
            upper_bound = nxt.base_offset if nxt is not None else st.log_end_offset
            result = st.high_watermark >= upper_bound and predicate(segment, nxt)
            if result and st.remote_log_enabled and nxt is None and segment.size > 0:
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

    def _delete_old_segments(self, predicate: SegmentPredicate, reason: _Reason) -> int:
        deletable = self.deletable_segments(predicate)
        if not deletable:
            return 0
        return self._delete_segments(deletable, reason)

    def _delete_segments(self, deletable: list[LogSegment], reason: _Reason) -> int:
        st = self._state
        count = len(deletable)
        to_delete = list(deletable)
        if len(st.segments) == count:
            new_segment = self._roll(None)
            if to_delete[-1].base_offset == new_segment.base_offset:
                _LOG.warning(
                    "Empty active segment at %d was deleted and recreated due to %s",
                    new_segment.base_offset,
                    reason.value,
                )
                to_delete.pop()
        if to_delete:
            nxt = st.segments.higher_segment(to_delete[-1].base_offset)
            assert nxt is not None  # the active segment is never in to_delete
            if st.remote_copy_enabled:
                if nxt.base_offset > st.local_log_start:
                    st.local_log_start = nxt.base_offset
                    _LOG.info(
                        "Incremented local log start offset to %d due to %s",
                        nxt.base_offset,
                        reason.value,
                    )
            else:
                st.maybe_increment_log_start_offset(nxt.base_offset, reason.value + " breach")
            _LOG.info("Deleting segments due to %s breach: %s", reason.value, to_delete)
            self._remove_segments(to_delete)
        st.delete_producer_snapshots(deletable)
        st.write_checkpoint()
        return count
