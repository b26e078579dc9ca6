"""One round of Kafka's log cleaner on a local log, in this process.

``clean_local_log`` is Kafka's ``Cleaner.clean`` + ``doClean`` for a log whose segments are all
on local disk (a compacted topic that is not tiered, or a Kafka partition directory cleaned
offline): plan the round (``plan``), build the offset map over the dirty range in one pass with
no size limit (``scan``), decide the transactions (``txn``), rewrite every segment from the log
start to the end of the dirty range group by group (``rewrite``, ``writer``) and swap each
cleaned group in (``LocalLog.replace_segments``). The caller owns the cleaner checkpoint: it
passes the last one in and stores ``CleanResult.end_offset`` when the round cleaned.

Unlike Kafka's cleaner, whose offset map (``log.cleaner.dedupe.buffer.size``) can end a round
early and leave the rest of the dirty range to later rounds, a round here always covers the whole
dirty range: the map is a dict here and a distributed aggregation in the Spark engine.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tierlog.compaction.engine import CleanEngine, GroupTask, PythonEngine, SegmentTask
from tierlog.compaction.faults import fault_point
from tierlog.compaction.plan import (
    LogToClean,
    SegmentInfo,
    cleanable_offsets,
    group_segments_by_size,
    log_to_clean,
)
from tierlog.compaction.rewrite import RetentionContext, RewriteStats
from tierlog.compaction.txn import AbortedIndex, decide_transactions
from tierlog.compaction.writer import CLEANED_SUFFIX
from tierlog.log.local_log import LocalLog
from tierlog.log.segment import LogSegment
from tierlog.log.txn_index import AbortedTxn
from tierlog.spi import TopicPartition

__all__ = ["CleanResult", "clean_local_log", "segment_info"]

_LOG = logging.getLogger(__name__)


@dataclass(slots=True)
class CleanResult:
    """What a round did (Kafka's cleaner stats block, in numbers)."""

    topic_partition: TopicPartition
    cleaned: bool
    """False when the log was not eligible (nothing was written)."""
    first_dirty_offset: int
    end_offset: int
    """The new cleaner checkpoint when ``cleaned`` (the first uncleanable offset)."""
    cleanable_ratio: float
    keys_mapped: int = 0
    """Distinct keys in the offset map."""
    segments_read: int = 0
    segments_written: int = 0
    stats: RewriteStats = field(default_factory=RewriteStats)
    map_bytes_read: int = 0
    """Bytes read by pass 1 and the transaction scan."""
    elapsed_s: float = 0.0
    checkpoint_reset: bool = False

    def summary_line(self) -> str:
        """One human line, like the last lines of Kafka's stats block."""
        s = self.stats
        if not self.cleaned:
            return (
                f"{self.topic_partition}: not cleaned (dirty ratio {self.cleanable_ratio:.3f}, "
                f"dirty section [{self.first_dirty_offset}, {self.end_offset}))"
            )
        reduction = 100.0 * (1 - s.bytes_written / s.bytes_read) if s.bytes_read else 0.0
        fewer = 100.0 * (1 - s.records_written / s.records_read) if s.records_read else 0.0
        return (
            f"{self.topic_partition}: cleaned dirty section [{self.first_dirty_offset}, "
            f"{self.end_offset}) in {self.elapsed_s:.1f} s: {self.keys_mapped:,} keys; start "
            f"{s.bytes_read:,} bytes ({s.records_read:,} records), end {s.bytes_written:,} bytes "
            f"({s.records_written:,} records): {reduction:.1f}% size reduction "
            f"({fewer:.1f}% fewer records)"
        )


def segment_info(segment: LogSegment) -> SegmentInfo:
    """The planner's view of a local segment."""
    return SegmentInfo(
        base_offset=segment.base_offset,
        size=segment.size,
        largest_timestamp=segment.largest_timestamp(),
        first_batch_timestamp=segment.first_batch_timestamp(),
        offset_index_entries=segment.offset_index.entries,
        time_index_entries=segment.time_index.entries,
    )


def _aborted_entries(segments: Sequence[LogSegment], end_offset: int) -> list[AbortedTxn]:
    """Every aborted transaction that starts below ``end_offset``, from every segment's index
    (a transaction's entry sits in the segment of its marker, possibly past the range)."""
    out: list[AbortedTxn] = []
    for segment in segments:
        out.extend(e for e in segment.txn_index.all_aborted_txns() if e.first_offset < end_offset)
    return out


def plan_local_log(log: LocalLog, *, checkpoint: int | None, now_ms: int) -> LogToClean:
    """The round's plan for ``log`` (see ``plan``)."""
    config = log.config
    segments = log.segments
    active = segments[-1]
    infos = [segment_info(s) for s in segments[:-1]]
    cleanable = cleanable_offsets(
        infos,
        checkpoint=checkpoint,
        log_start_offset=log.log_start_offset,
        log_end_offset=log.log_end_offset,
        last_stable_offset=log.last_stable_offset,
        active_segment_base=active.base_offset,
        min_compaction_lag_ms=config.min_compaction_lag_ms,
        max_compaction_lag_ms=config.max_compaction_lag_ms,
        now_ms=now_ms,
    )
    return log_to_clean(infos, cleanable, active.base_offset)


def clean_local_log(
    log: LocalLog,
    *,
    checkpoint: int | None,
    now_ms: int | None = None,
    force: bool = False,
    engine: CleanEngine | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> CleanResult:
    """Run one cleaning round on ``log`` if it is eligible (or ``force``); see the module doc.

    ``engine`` computes the two passes (``PythonEngine``, in this process, by default; the Spark
    engine in ``spark_engine``). ``progress(phase, done, total)`` is called per segment in each
    phase ("map", "clean") by engines that can.
    """
    started = time.monotonic()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    config = log.config
    plan = plan_local_log(log, checkpoint=checkpoint, now_ms=now)
    result = CleanResult(
        topic_partition=log.topic_partition,
        cleaned=False,
        first_dirty_offset=plan.first_dirty_offset,
        end_offset=plan.first_uncleanable_offset,
        cleanable_ratio=plan.cleanable_ratio,
        checkpoint_reset=plan.checkpoint_reset,
    )
    eligible = plan.eligible(config.min_cleanable_dirty_ratio) or (
        force and plan.cleanable_bytes > 0
    )
    if not eligible:
        return result
    engine = engine or PythonEngine()

    end_offset = plan.first_uncleanable_offset
    first_dirty = plan.first_dirty_offset
    all_segments = log.segments
    to_clean = [s for s in all_segments if s.base_offset < end_offset]
    aborted = AbortedIndex(_aborted_entries(all_segments, end_offset))
    tasks = [
        SegmentTask(
            index=i,
            base_offset=s.base_offset,
            next_offset=to_clean[i + 1].base_offset if i + 1 < len(to_clean) else end_offset,
            path=str(s.log_path),
        )
        for i, s in enumerate(to_clean)
    ]

    # Pass 1 and the transaction events: one read of each segment of the round.
    scanned = engine.scan(
        tasks,
        aborted=aborted,
        first_dirty_offset=first_dirty,
        end_offset=end_offset,
        progress=progress,
    )
    result.map_bytes_read = scanned.bytes_read
    result.keys_mapped = scanned.keys_mapped
    ctx = RetentionContext(
        now_ms=now,
        delete_retention_ms=config.delete_retention_ms,
        first_uncleanable_offset=end_offset,
        map_latest_offset=end_offset - 1,
        producers=log.last_records_of_active_producers(),
        decisions=decide_transactions(scanned.events, aborted.entries),
    )

    # Pass 2: every group rewritten into a .cleaned segment, then swapped in, in order.
    by_base = {s.base_offset: s for s in to_clean}
    task_of = {t.base_offset: t for t in tasks}
    groups = [
        GroupTask(
            base_offset=group[0].base_offset,
            sources=tuple(task_of[info.base_offset] for info in group),
            directory=str(log.dir),
            last_modified_ms=by_base[group[-1].base_offset].last_modified(),
        )
        for group in group_segments_by_size(
            [segment_info(s) for s in to_clean],
            max_size=config.segment_size,
            max_index_size=config.max_index_size,
            first_uncleanable_offset=end_offset,
        )
    ]
    for written in engine.rewrite(groups, ctx=ctx, config=config, progress=progress):
        result.stats.add(written.stats)
        cleaned = LogSegment.open(log.dir, written.base_offset, config, suffix=CLEANED_SUFFIX)
        fault_point("swap.cleaned")
        group = next(g for g in groups if g.base_offset == written.base_offset)
        log.replace_segments([cleaned], [by_base[t.base_offset] for t in group.sources])
        result.segments_written += 1
    result.segments_read = len(to_clean)
    result.cleaned = True
    result.elapsed_s = time.monotonic() - started
    _LOG.info("%s", result.summary_line())
    return result
