"""Benchmark partitions, built the same way for ``bench/rlm.py`` and ``bench/rsm.py``.

A ``LocalLog`` (``index.interval.bytes`` 4096, remote storage enabled, no retention) filled with
``append_as_leader`` from a pool of producer batches (``log_format.make_batches``) under one
leader epoch, then rolled, so every byte is in a sealed segment (the progress shown by
``tierlog.progress``); and the ``RemoteLogSegmentMetadata`` of copying one of those segments
under a new segment id.
"""

from __future__ import annotations

import time
from pathlib import Path

from tierlog.log.local_log import LocalLog, SegmentCopyInputs
from tierlog.progress import Progress
from tierlog.spi import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    Uuid,
)

NOW_MS = 1_700_000_100_000  # just after the generated records' timestamps
LEADER_EPOCH = 3


def build_log(
    directory: Path,
    pool: list[bytes],
    size: int,
    segment_bytes: int,
    *,
    topic_id: Uuid,
    description: str = "build the log",
) -> tuple[LocalLog, float]:
    """A tiered partition holding ``size`` bytes of the pool (cycled), all in sealed segments
    of ``segment_bytes``, and the seconds the appends took. The progress, under
    ``description``, is updated every 1 % only: the appends are timed."""
    config: dict[str, object] = {
        "segment.bytes": segment_bytes,
        "index.interval.bytes": 4096,
        "remote.storage.enable": True,
        "retention.ms": -1,
        "retention.bytes": -1,
    }
    local = LocalLog.open(
        directory,
        config,
        topic_id=topic_id,
        clock=lambda: NOW_MS,
        high_watermark_follows_leo=True,
    )
    local.assign_epoch_start_offset(LEADER_EPOCH, 0)
    written = 0
    i = 0
    step = next_report = max(size // 100, 1)
    with Progress(description, total=size, unit="bytes") as progress:
        t0 = time.perf_counter()
        while written < size:
            data = pool[i % len(pool)]
            local.append_as_leader(data, LEADER_EPOCH)
            written += len(data)
            i += 1
            if written >= next_report:
                progress.update(written)
                next_report += step
        local.roll()
        return local, time.perf_counter() - t0


def copy_metadata(inputs: SegmentCopyInputs, tp: TopicIdPartition) -> RemoteLogSegmentMetadata:
    """``COPY_SEGMENT_STARTED`` metadata of a copy of ``inputs`` under a new segment id."""
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate_new(tp),
        start_offset=inputs.start_offset,
        end_offset=inputs.end_offset,
        max_timestamp_ms=inputs.largest_timestamp,
        broker_id=0,
        event_timestamp_ms=NOW_MS,
        segment_size_in_bytes=inputs.size_in_bytes,
        segment_leader_epochs=inputs.segment_leader_epochs,
        state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        txn_idx_empty=inputs.txn_index_empty,
    )
