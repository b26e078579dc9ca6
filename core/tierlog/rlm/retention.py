"""What the expiration task deletes from remote storage, decided without deleting anything.

A port of the decision part of Kafka's ``RLMExpirationTask.cleanupExpiredRemoteLogSegments``
(``RemoteLogManager``): ``plan_remote_retention`` reads the RLMM and returns a ``RetentionPlan``;
the task then (Kafka's order) moves the log start offset to ``new_log_start_offset`` *before*
deleting, deletes ``to_delete`` in order (DELETE_SEGMENT_STARTED, RSM delete,
DELETE_SEGMENT_FINISHED), and finally deletes ``unreferenced`` without touching the log start.

Before calling it the task seeds the log's highest offset in remote storage when it is still
unknown (Kafka's ``maybeSeedHighestOffsetInRemoteStorage``, KAFKA-20732), because
``only_local_log_segments_size`` counts every segment at or above that offset: unseeded on a new
leader, it would count segments already in remote storage twice and size retention would
delete too much.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import Final

from tierlog.rlm.lineage import (
    build_filtered_leader_epoch_map,
    is_remote_segment_within_leader_epochs,
    segment_epochs_all_below,
)
from tierlog.spi import (
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

__all__ = [
    "REASON_DANGLING_DELETE",
    "REASON_LOG_START_OFFSET",
    "REASON_RETENTION_SIZE",
    "REASON_RETENTION_TIME",
    "REASON_UNREFERENCED",
    "RemoteLogStats",
    "RetentionPlan",
    "plan_remote_retention",
    "remote_log_stats",
]

_LOG = logging.getLogger(__name__)

REASON_RETENTION_TIME: Final = "retention time"
REASON_RETENTION_SIZE: Final = "retention size"
REASON_LOG_START_OFFSET: Final = "log start offset"
REASON_DANGLING_DELETE: Final = "dangling delete"
REASON_UNREFERENCED: Final = "unreferenced"

_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
_DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED


@dataclass
class RemoteLogStats:
    """Kafka's ``RemoteLogMetadataStats`` over every remote segment of a partition.

    ``size`` counts COPY_SEGMENT_FINISHED and DELETE_SEGMENT_STARTED segments (the
    ``RemoteLogSizeBytes`` metric: a copy in progress is left out so that retried uploads do not
    inflate it); ``copy_finished_size`` only the finished copies (the first estimate of the
    remote size for size retention); ``epochs`` every leader epoch any segment holds.
    """

    count: int = 0
    epochs: frozenset[int] = frozenset()
    size: int = 0
    copy_finished_size: int = 0


def remote_log_stats(segments: Iterable[RemoteLogSegmentMetadata]) -> RemoteLogStats:
    """Count and size ``segments`` as Kafka's ``calculateMetadataAndSize`` does."""
    epochs: set[int] = set()
    count = size = finished = 0
    for segment in segments:
        epochs.update(segment.segment_leader_epochs)
        count += 1
        if segment.state is _FINISHED:
            finished += segment.segment_size_in_bytes
            size += segment.segment_size_in_bytes
        elif segment.state is _DELETE_STARTED:
            size += segment.segment_size_in_bytes
    return RemoteLogStats(count, frozenset(epochs), size, finished)


@dataclass(frozen=True)
class RetentionPlan:
    """What one run of the expiration task must do.

    - ``to_delete``: the segments to delete, in the order found, each once;
    - ``new_log_start_offset``: the log start offset to publish before deleting (the largest
      ``end_offset + 1`` of the segments deleted by retention time or size), or None;
    - ``reasons``: segment id -> why (``"retention time"``, ``"retention size"``,
      ``"log start offset"``, ``"dangling delete"``, and ``"unreferenced"`` for
      ``unreferenced``);
    - ``stopped_at_copying``: the scan stopped at a segment whose copy is in progress;
    - ``unreferenced``: segments made only of epochs below the leader's earliest epoch (left by
      an unclean leader election), deleted after ``to_delete`` without moving the log start;
    - ``stats``: the ``remote_log_stats`` of every remote segment (metrics);
    - ``retention_size_total``: the size Kafka measures against ``retention.bytes`` (local only
      + valid remote, or the estimate with all finished copies when it is within the limit), for
      ``RetentionSizeInPercent``; None when size retention is off or nothing is remote;
    - ``all_segments_valid``: every finished copy was found in the lineage and the sizes agree,
      so the next run may pass ``assume_all_segments_valid=True`` (Kafka's per-task
      ``isAllSegmentsValid`` cache); None when the check did not run.
    """

    to_delete: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    new_log_start_offset: int | None = None
    reasons: dict[RemoteLogSegmentId, str] = field(default_factory=dict)
    stopped_at_copying: bool = False
    unreferenced: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    stats: RemoteLogStats = field(default_factory=RemoteLogStats)
    retention_size_total: int | None = None
    all_segments_valid: bool | None = None

    @property
    def size_to_delete(self) -> int:
        """Bytes of ``to_delete`` and ``unreferenced`` (the ``RemoteDeleteLagBytes`` start)."""
        return sum(s.segment_size_in_bytes for s in (*self.to_delete, *self.unreferenced))


@dataclass
class _SizeBreach:
    """Kafka's ``RetentionSizeData``; only built when the total exceeds ``retention.bytes``."""

    retention_bytes: int
    remaining: int


def plan_remote_retention(
    rlmm: RemoteLogMetadataManager,
    tp: TopicIdPartition,
    *,
    epoch_cache_entries: Mapping[int, int],
    log_end_offset: int,
    log_start_offset: int,
    only_local_log_segments_size: int,
    retention_ms: int,
    retention_bytes: int,
    now_ms: int,
    segment_ids_being_copied: Set[RemoteLogSegmentId],
    assume_all_segments_valid: bool = False,
) -> RetentionPlan:
    """Decide remote retention for ``tp`` (steps of Kafka's ``cleanupExpiredRemoteLogSegments``).

    ``epoch_cache_entries`` is the leader epoch cache's ``epoch_with_offsets()`` (unfiltered);
    the other values come from the log and its config (``retention.ms``, ``retention.bytes``).
    ``segment_ids_being_copied`` may be the copy task's live set: it is read as the scan goes.

    1. Stats over every segment; none: nothing to do.
    2. The lineage is ``build_filtered_leader_epoch_map(epoch_cache_entries)``.
    3. Size retention (``retention.bytes >= 0``): nothing when ``only_local + finished copies``
       is within it; otherwise the remote size is recomputed from the finished copies of the
       lineage's epochs that are within the lineage (each once), and the excess over
       ``retention.bytes`` is what must go.
    4. Time retention (``retention.ms > -1`` and ``now - retention.ms >= 0``): a segment goes
       when its ``max_timestamp_ms < now - retention.ms`` (strictly: Kafka's test keeps a segment
       whose timestamp equals the cut-off).
    5. For each lineage epoch in ascending order, its segments as the RLMM lists them:
       a segment being copied stops the whole scan; a DELETE_SEGMENT_STARTED one is taken again
       (a delete that failed earlier is retried now rather than waiting for retention);
       DELETE_SEGMENT_FINISHED ones and those already taken are skipped; a segment whose epochs
       are all <= the lineage's first epoch and that ends below ``log_start_offset`` goes (the
       log start was moved by DeleteRecords and the epoch cache truncated, so the lineage check
       would never match it again); otherwise a segment within the lineage goes if time
       retention, else size retention, says so. Size retention takes a segment while the excess
       minus its size stays >= 0; a segment deleted by time also reduces the excess. The scan
       stops at the first segment within the lineage that is kept: everything after it is
       newer. Segments outside the lineage are passed over.
    6. ``new_log_start_offset``: the largest ``end_offset + 1`` over the segments taken for time
       or size (segments overlap after leader changes, so the last one is not always the
       highest); deletions for the log start offset or dangling deletes do not move it.
    7. Unreferenced: for each remote epoch below the cache's earliest epoch, every listed
       segment whose epochs are all below it.
    """
    stats = remote_log_stats(rlmm.list_remote_log_segments(tp))
    if stats.count == 0:
        return RetentionPlan(stats=stats)

    lineage = build_filtered_leader_epoch_map(epoch_cache_entries)
    size_total, breach, all_valid = _size_retention(
        rlmm,
        tp,
        lineage,
        retention_bytes=retention_bytes,
        only_local_log_segments_size=only_local_log_segments_size,
        copy_finished_size=stats.copy_finished_size,
        log_end_offset=log_end_offset,
        assume_all_segments_valid=assume_all_segments_valid,
    )
    cleanup_until_ms = now_ms - retention_ms
    time_retention = retention_ms > -1 and cleanup_until_ms >= 0
    remaining = breach.remaining if breach is not None else 0

    to_delete: list[RemoteLogSegmentMetadata] = []
    reasons: dict[RemoteLogSegmentId, str] = {}
    new_log_start: int | None = None
    stopped_at_copying = False
    first_epoch = next(iter(lineage), None)
    can_process = True
    for epoch in lineage:
        if not can_process:
            break
        for segment in rlmm.list_remote_log_segments(tp, epoch):
            segment_id = segment.remote_log_segment_id
            if segment_id in segment_ids_being_copied:
                _LOG.debug(
                    "Copy for the segment %s is in progress: skipping cleanup for it and the "
                    "remaining segments",
                    segment_id,
                )
                stopped_at_copying = True
                can_process = False
                break
            if segment_id in reasons or segment.state is _DELETE_FINISHED:
                continue
            if segment.state is _DELETE_STARTED:
                to_delete.append(segment)
                reasons[segment_id] = REASON_DANGLING_DELETE
                continue
            reason: str | None = None
            valid = False
            if (
                first_epoch is not None
                and all(e <= first_epoch for e in segment.segment_leader_epochs)
                and segment.end_offset < log_start_offset
            ):
                reason = REASON_LOG_START_OFFSET
            else:
                valid = is_remote_segment_within_leader_epochs(segment, log_end_offset, lineage)
                if valid:
                    size = segment.segment_size_in_bytes
                    if time_retention and segment.max_timestamp_ms < cleanup_until_ms:
                        reason = REASON_RETENTION_TIME
                        remaining = max(0, remaining - size)
                    elif breach is not None and remaining > 0 and remaining - size >= 0:
                        reason = REASON_RETENTION_SIZE
                        remaining -= size
                    if reason is not None:
                        end = segment.end_offset + 1
                        new_log_start = end if new_log_start is None else max(new_log_start, end)
            if reason is not None:
                _LOG.info(
                    "About to delete remote log segment %s due to %s breach",
                    segment_id,
                    reason,
                )
                to_delete.append(segment)
                reasons[segment_id] = reason
            elif valid:
                can_process = False
                break

    unreferenced: list[RemoteLogSegmentMetadata] = []
    earliest = min(epoch_cache_entries, default=None)
    if earliest is not None:
        for epoch in sorted(e for e in stats.epochs if e < earliest):
            for segment in rlmm.list_remote_log_segments(tp, epoch):
                segment_id = segment.remote_log_segment_id
                if (
                    segment_id in reasons
                    or segment.state is _DELETE_FINISHED
                    or not segment_epochs_all_below(segment, earliest)
                ):
                    continue
                unreferenced.append(segment)
                reasons[segment_id] = REASON_UNREFERENCED
    return RetentionPlan(
        to_delete=to_delete,
        new_log_start_offset=new_log_start,
        reasons=reasons,
        stopped_at_copying=stopped_at_copying,
        unreferenced=unreferenced,
        stats=stats,
        retention_size_total=size_total,
        all_segments_valid=all_valid,
    )


def _size_retention(
    rlmm: RemoteLogMetadataManager,
    tp: TopicIdPartition,
    lineage: Mapping[int, int],
    *,
    retention_bytes: int,
    only_local_log_segments_size: int,
    copy_finished_size: int,
    log_end_offset: int,
    assume_all_segments_valid: bool,
) -> tuple[int | None, _SizeBreach | None, bool | None]:
    """Kafka's ``buildRetentionSizeData``: ``(total measured, breach or None, all valid)``.

    The cheap estimate (local only + every finished copy) decides first; only when it exceeds
    ``retention.bytes`` is the remote size recomputed over the lineage, so that segments of a
    diverged history (which the scan will not delete) do not make valid data go.
    """
    if retention_bytes < 0:
        return None, None, None
    estimate = only_local_log_segments_size + copy_finished_size
    if estimate <= retention_bytes:
        return estimate, None, None
    all_valid: bool | None = None
    if assume_all_segments_valid:
        remote_size = copy_finished_size
    else:
        remote_size = 0
        valid_so_far = True
        visited: set[RemoteLogSegmentId] = set()
        for epoch in lineage:
            for segment in rlmm.list_remote_log_segments(tp, epoch):
                # Only finished copies: a copy in progress is counted once it finishes, a
                # deletion in progress is retried by the scan, a finished deletion is gone.
                if segment.state is not _FINISHED:
                    continue
                segment_id = segment.remote_log_segment_id
                if segment_id in visited:
                    continue
                visited.add(segment_id)
                if is_remote_segment_within_leader_epochs(segment, log_end_offset, lineage):
                    remote_size += segment.segment_size_in_bytes
                else:
                    valid_so_far = False
        all_valid = valid_so_far and remote_size == copy_finished_size
    total = only_local_log_segments_size + remote_size
    if total > retention_bytes:
        return total, _SizeBreach(retention_bytes, total - retention_bytes), all_valid
    return total, None, all_valid
