"""Cleaning a Kafka-format partition directory offline, as Kafka's cleaner would.

``clean_partition_dir`` opens a partition directory (one tierlog wrote, or a copy of a Kafka
broker's) as a ``LocalLog``, runs one cleaning round and writes the cleaner checkpoint, all in the
files and places Kafka uses: the checkpoint is ``<log dir>/cleaner-offset-checkpoint``, and the
high watermark (which bounds the last stable offset, so what may be cleaned) comes from
``<log dir>/replication-offset-checkpoint`` when that file names the partition, else it is the
log end. Run it on a copy: a broker must not have the directory open.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from tierlog.compaction.cleaner import CleanResult, clean_local_log
from tierlog.compaction.engine import CleanEngine
from tierlog.log.cleaner_checkpoint import CleanerOffsetCheckpoints, read_offset_checkpoint
from tierlog.log.local_log import LocalLog

__all__ = ["REPLICATION_OFFSET_CHECKPOINT", "CleanSummary", "clean_partition_dir"]

REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"

CleanSummary = CleanResult
"""What ``clean_partition_dir`` returns (the round's ``CleanResult``)."""


def clean_partition_dir(
    directory: str | os.PathLike[str],
    *,
    config: Mapping[str, object] | None = None,
    now_ms: int | None = None,
    force: bool = False,
    engine: CleanEngine | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> CleanSummary:
    """Run one cleaning round on the partition directory ``directory``.

    ``config`` holds the topic's configuration with Kafka's keys (``cleanup.policy`` defaults to
    ``compact`` here); ``now_ms`` is the round's clock (wall clock by default); ``force`` cleans
    even below ``min.cleanable.dirty.ratio`` when there is something to clean; ``engine`` is
    the in-process engine by default (``spark_engine.SparkEngine`` for a Spark job).
    """
    path = Path(directory)
    if not path.is_dir():
        raise FileNotFoundError(f"partition directory {path} does not exist")
    props: dict[str, object] = {"cleanup.policy": "compact"}
    props.update(config or {})
    now = int(time.time() * 1000) if now_ms is None else now_ms
    # The round's clock also judges which producers have expired when the log loads.
    log = LocalLog.open(path, props, create=False, clock=lambda: now)
    try:
        tp = log.topic_partition
        hw_file = path.parent / REPLICATION_OFFSET_CHECKPOINT
        high_watermark = read_offset_checkpoint(hw_file).get(tp) if hw_file.is_file() else None
        log.update_high_watermark(log.log_end_offset if high_watermark is None else high_watermark)
        checkpoints = CleanerOffsetCheckpoints(path.parent)
        result = clean_local_log(
            log,
            checkpoint=checkpoints.get(tp),
            now_ms=now,
            force=force,
            engine=engine,
            progress=progress,
        )
        if result.cleaned:
            checkpoints.update(tp, result.end_offset)
        elif result.checkpoint_reset:
            checkpoints.update(tp, result.first_dirty_offset)
        return result
    finally:
        log.close()
