"""Which sealed local segments the copy task may upload now (Kafka's ``candidateLogSegments``).

Three rules, from ``RemoteLogManager.RLMCopyTask``:

1. never the active segment: a segment is uploaded with the base offset of the segment after it
   (its end is ``next base - 1``), so the last segment can never be a candidate;
2. only committed data: a segment is a candidate only if the next segment starts at or below the
   last stable offset, i.e. its last offset is below the LSO (remote storage holds only what a
   ``read_committed`` consumer may see, and only what the ISR acknowledged);
3. the copy lag of KIP-1241 (``remote.copy.lag.ms`` / ``remote.copy.lag.bytes``): a segment may
   wait until it is old enough or enough log follows it. The scan stops at the first segment
   that must still wait, so segments are uploaded strictly in order and the remote log has no
   holes.

``copy_lag`` is the ``RemoteCopyLagBytes`` / ``RemoteCopyLagSegments`` metric pair.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from tierlog.log.local_log import LocalLog
from tierlog.log.log_config import LogConfig
from tierlog.log.segment import LogSegment

__all__ = [
    "CopyCandidate",
    "candidate_log_segments",
    "copy_lag",
    "is_eligible_for_upload",
]

_MAX_OFFSET = (1 << 63) - 1


@dataclass(frozen=True)
class CopyCandidate:
    """A segment to upload and the base offset of the segment after it (Kafka's
    ``EnrichedLogSegment``): the remote segment ends at ``next_segment_offset - 1`` and the
    producer snapshot shipped with it is the one at ``next_segment_offset``."""

    segment: LogSegment
    next_segment_offset: int


def _effective_copy_lags(config: LogConfig) -> tuple[int, int]:
    """``(remoteCopyLagMs(), remoteCopyLagBytes())`` of Kafka's ``LogConfig``: the topic values,
    with -1 replaced by the effective local retention (which may itself be -1, unlimited)."""
    return config.effective_remote_copy_lag_ms(), config.effective_remote_copy_lag_bytes()


def candidate_log_segments(
    log: LocalLog, from_offset: int, last_stable_offset: int, *, now_ms: int
) -> list[CopyCandidate]:
    """The segments the copy task may upload, in order, from the one holding ``from_offset``.

    ``from_offset`` is ``max(copied offset + 1, log start offset)``. For each consecutive pair
    ``(segment, next)`` of ``log.log_segments(from_offset, MAX)``: ``segment`` is a candidate when
    ``next.base_offset <= last_stable_offset`` and it passes ``is_eligible_for_upload``, whose
    byte lag counts the bytes from ``from_offset`` that follow it; the first segment within the
    LSO that is not eligible ends the list. The active segment is never a candidate.
    """
    segments = log.log_segments(from_offset, _MAX_OFFSET)
    candidates: list[CopyCandidate] = []
    if not segments:
        return candidates
    total = sum(s.size for s in segments)
    lag_ms, lag_bytes = _effective_copy_lags(log.config)
    cumulative = 0
    for previous, current in itertools.pairwise(segments):
        # Kafka keeps looping (without a break) past the LSO; every later segment starts even
        # higher, so none of them is a candidate either.
        if current.base_offset <= last_stable_offset:
            cumulative += previous.size
            if not _eligible(
                previous, now_ms, total, cumulative, lag_ms=lag_ms, lag_bytes=lag_bytes
            ):
                break
            candidates.append(CopyCandidate(previous, current.base_offset))
    return candidates


def is_eligible_for_upload(
    log: LocalLog,
    segment: LogSegment,
    from_offset: int,
    cumulative_size_including_segment: int,
    *,
    now_ms: int,
    total_size: int | None = None,
) -> bool:
    """Whether ``segment`` has passed its copy lag (KIP-1241, Kafka's ``isEligibleForUpload``).

    With ``lag_ms = remote.copy.lag.ms`` and ``lag_bytes = remote.copy.lag.bytes`` as the topic
    resolves them (-1 meaning the effective ``local.retention.ms`` / ``local.retention.bytes``):

    - either lag is 0 (``remote.copy.lag.ms`` defaults to 0): eligible at once;
    - otherwise eligible if ``lag_ms > 0`` and the segment's age ``now - largest timestamp`` is
      negative (a timestamp in the future: clock skew must not hold data back forever) or at
      least ``lag_ms``; or if ``lag_bytes > 0`` and the bytes of the log after the segment
      (``total size from from_offset - cumulative_size_including_segment``) are at least
      ``lag_bytes``;
    - a negative lag disables its check, so with both lags -1 and unlimited local retention
      nothing is ever eligible (Kafka's ``RemoteLagCopyTest`` asserts exactly that);
    - when the largest timestamp cannot be read (an ``OSError``: it falls back to the file's
      modification time), the time check passes, as Kafka treats an ``IOException``.

    ``total_size`` is the size of ``log.log_segments(from_offset, MAX)``; computed when omitted.
    """
    if total_size is None:
        total_size = sum(s.size for s in log.log_segments(from_offset, _MAX_OFFSET))
    lag_ms, lag_bytes = _effective_copy_lags(log.config)
    return _eligible(
        segment,
        now_ms,
        total_size,
        cumulative_size_including_segment,
        lag_ms=lag_ms,
        lag_bytes=lag_bytes,
    )


def _eligible(
    segment: LogSegment, now_ms: int, total: int, cumulative: int, *, lag_ms: int, lag_bytes: int
) -> bool:
    if lag_ms == 0 or lag_bytes == 0:
        return True
    if lag_ms > 0:
        try:
            age = now_ms - segment.largest_timestamp()
        except OSError:
            return True
        if age < 0 or age >= lag_ms:
            return True
    return lag_bytes > 0 and total - cumulative >= lag_bytes


def copy_lag(log: LocalLog) -> tuple[int, int]:
    """``(RemoteCopyLagBytes, RemoteCopyLagSegments)``: what is local only, less the active
    segment (Kafka's ``recordLagStats``).

    "Local only" is every segment whose base offset is at or above the highest offset in remote
    storage (``onlyLocalLogSegmentsSize`` / ``onlyLocalLogSegmentsCount``). Both values are
    floored at 0: after a leader change the active segment may start below the highest remote
    offset, so it is not counted in the local size that it is subtracted from.
    """
    highest = log.highest_offset_in_remote_storage
    local_only = [s for s in log.segments if s.base_offset >= highest]
    size = sum(s.size for s in local_only)
    return max(0, size - log.active_segment.size), max(0, len(local_only) - 1)
