"""What a round cleans: ``cleanable_offsets``, ``log_to_clean`` and ``group_segments_by_size``.

Kafka's ``LogCleanerManager.cleanableOffsets``/``maxCompactionDelay``, ``LogToClean`` and
``Cleaner.groupSegmentsBySize`` (KAFKA-LOGCLEANER.md sections 1 and 4), on plain segment
descriptions; the scenarios follow ``LogCleanerManagerTest`` and ``LogCleanerTest``.
"""

from __future__ import annotations

import itertools

import pytest

from tierlog.compaction.plan import (
    CleanableRange,
    LogToClean,
    SegmentInfo,
    cleanable_offsets,
    group_segments_by_size,
    log_to_clean,
)
from tierlog.spi import InvalidArgumentError

NOW = 1_700_000_000_000
HOUR = 3_600_000
INT32_MAX = (1 << 31) - 1
LONG_MAX = (1 << 63) - 1


def segs(*bases: int, size: int = 100, ts: int = NOW - 10 * HOUR) -> list[SegmentInfo]:
    return [SegmentInfo(b, size, ts, first_batch_timestamp=ts) for b in bases]


def offsets(
    segments: list[SegmentInfo],
    *,
    checkpoint: int | None = 0,
    log_start: int = 0,
    log_end: int = 1000,
    lso: int | None = None,
    active: int = 1000,
    min_lag: int = 0,
    max_lag: int = LONG_MAX,
    now: int = NOW,
) -> CleanableRange:
    return cleanable_offsets(
        segments,
        checkpoint=checkpoint,
        log_start_offset=log_start,
        log_end_offset=log_end,
        last_stable_offset=log_end if lso is None else lso,
        active_segment_base=active,
        min_compaction_lag_ms=min_lag,
        max_compaction_lag_ms=max_lag,
        now_ms=now,
    )


def plan(segments: list[SegmentInfo], active: int = 1000, **kwargs: object) -> LogToClean:
    return log_to_clean(segments, offsets(segments, active=active, **kwargs), active)  # type: ignore[arg-type]


# First dirty offset ------------------------------------------------------------------------------


def test_first_dirty_is_the_log_start_without_a_checkpoint() -> None:
    r = offsets(segs(0, 100, 200), checkpoint=None, log_start=40, active=300, log_end=310)
    assert (r.first_dirty_offset, r.checkpoint_reset) == (40, False)


def test_checkpoint_within_the_log_is_the_first_dirty_offset() -> None:
    r = offsets(segs(0, 100, 200), checkpoint=150, log_start=40, active=300, log_end=310)
    assert (r.first_dirty_offset, r.checkpoint_reset) == (150, False)
    # At the log end exactly: valid (Kafka resets only past it).
    r = offsets(segs(0, 100, 200), checkpoint=310, log_start=40, active=300, log_end=310)
    assert (r.first_dirty_offset, r.checkpoint_reset) == (310, False)
    # At the log start exactly: valid.
    r = offsets(segs(0, 100, 200), checkpoint=40, log_start=40, active=300, log_end=310)
    assert (r.first_dirty_offset, r.checkpoint_reset) == (40, False)


def test_checkpoint_below_the_log_start_is_reset() -> None:
    # LogCleanerManagerTest.testDirtyOffsetResetIfSmallerThanStartOffset.
    r = offsets(segs(0, 100, 200), checkpoint=0, log_start=10, active=300, log_end=310)
    assert (r.first_dirty_offset, r.checkpoint_reset) == (10, True)


def test_checkpoint_past_the_log_end_is_reset(caplog: pytest.LogCaptureFixture) -> None:
    # LogCleanerManagerTest.testDirtyOffsetResetIfLargerThanEndOffset.
    r = offsets(segs(0, 100, 200), checkpoint=311, log_start=5, active=300, log_end=310)
    assert (r.first_dirty_offset, r.checkpoint_reset) == (5, True)
    assert "311" in caplog.text and "310" in caplog.text


def test_checkpoint_reset_cases_of_kafka() -> None:
    # LogCleanerManagerTest.testCleanableOffsetsNeedsCheckpointReset.
    s = segs(0, 100, 200)
    assert not offsets(s, checkpoint=15, log_start=10, active=300, log_end=310).checkpoint_reset
    assert offsets(s, checkpoint=15, log_start=20, active=300, log_end=310).checkpoint_reset
    assert offsets(s, checkpoint=325, log_start=20, active=300, log_end=310).checkpoint_reset


# First uncleanable offset ------------------------------------------------------------------------


def test_uncleanable_is_bounded_by_the_active_segment() -> None:
    # LogCleanerManagerTest.testCleanableOffsetsActiveSegment.
    r = offsets(segs(0, 100, 200), active=300, log_end=350)
    assert (r.first_dirty_offset, r.first_uncleanable_offset) == (0, 300)


def test_uncleanable_is_bounded_by_the_last_stable_offset() -> None:
    # LogCleanerManagerTest.testCleanableOffsetsForNone: high watermark 50.
    r = offsets(segs(0, 30, 60, 90), active=120, log_end=130, lso=50)
    assert r.first_uncleanable_offset == 50


def test_uncleanable_is_at_least_the_first_dirty_offset() -> None:
    # A checkpoint past the LSO (and past the active base, LogCleanerManagerTest's
    # testDirtyOffsetLargerThanActiveSegmentBaseOffset): nothing is cleanable.
    r = offsets(segs(0, 100), checkpoint=150, active=200, log_end=220, lso=120)
    assert (r.first_dirty_offset, r.first_uncleanable_offset) == (150, 150)
    r = offsets([], checkpoint=3, active=0, log_end=6)
    assert (r.first_dirty_offset, r.first_uncleanable_offset) == (3, 3)
    p = log_to_clean([], r, 0)
    assert (p.first_uncleanable_offset, p.cleanable_bytes) == (0, 0)
    assert not p.eligible(0.0)


def test_min_compaction_lag_holds_back_recent_segments() -> None:
    # LogCleanerManagerTest.testCleanableOffsetsForTime: four old segments, four recent ones.
    old, recent = NOW - 2 * HOUR, NOW - HOUR // 2
    s = [SegmentInfo(b, 100, old) for b in (0, 10, 20, 30)]
    s += [SegmentInfo(b, 100, recent) for b in (40, 50, 60)]
    r = offsets(s, active=70, log_end=75, min_lag=HOUR)
    assert r.first_uncleanable_offset == 40
    # testCleanableOffsetsForShortTime: every segment older than the lag.
    r = offsets(s, active=70, log_end=75, min_lag=HOUR // 4)
    assert r.first_uncleanable_offset == 70
    # Disabled at 0 (and a negative lag is 0).
    assert offsets(s, active=70, log_end=75, min_lag=0).first_uncleanable_offset == 70
    assert offsets(s, active=70, log_end=75, min_lag=-5).first_uncleanable_offset == 70


def test_min_compaction_lag_boundary_is_strict() -> None:
    # Uncleanable iff largest timestamp > now - lag.
    s = [SegmentInfo(0, 100, NOW - HOUR), SegmentInfo(10, 100, NOW - HOUR + 1)]
    assert offsets(s, active=20, log_end=25, min_lag=HOUR).first_uncleanable_offset == 10


def test_min_compaction_lag_looks_only_at_dirty_segments() -> None:
    # A recent segment before the first dirty offset's segment does not hold the round back;
    # the segment holding the first dirty offset does.
    s = [
        SegmentInfo(0, 100, NOW),
        SegmentInfo(10, 100, NOW - 2 * HOUR),
        SegmentInfo(20, 100, NOW - 2 * HOUR),
    ]
    r = offsets(s, checkpoint=12, active=30, log_end=31, min_lag=HOUR)
    assert r.first_uncleanable_offset == 30
    s[1] = SegmentInfo(10, 100, NOW)
    r = offsets(s, checkpoint=12, active=30, log_end=31, min_lag=HOUR)
    assert r.first_uncleanable_offset == 12  # max(first dirty, 10)
    assert log_to_clean(s, r, 30).first_uncleanable_offset == 10


def test_undecided_transaction_holds_back_its_segment() -> None:
    # LogCleanerManagerTest.testUndecidedTransactionalDataNotCleanable: LSO 0 (open
    # transaction at 0), then the abort at 3 makes [0, 3) cleanable, the lag the rest.
    s = [SegmentInfo(0, 100, NOW - 2 * HOUR)]
    assert offsets(s, active=3, log_end=3, lso=0, min_lag=HOUR).first_uncleanable_offset == 0
    s.append(SegmentInfo(3, 80, NOW))
    r = offsets(s, active=4, log_end=4, lso=4, min_lag=HOUR)
    assert r.first_uncleanable_offset == 3
    r = offsets(s, active=4, log_end=4, lso=4, min_lag=HOUR, now=NOW + 2 * HOUR)
    assert r.first_uncleanable_offset == 4


def test_max_compaction_lag_delay() -> None:
    s = [
        SegmentInfo(0, 100, NOW - 50 * HOUR, first_batch_timestamp=NOW - 50 * HOUR),
        SegmentInfo(10, 100, NOW - 5 * HOUR, first_batch_timestamp=NOW - 6 * HOUR),
        SegmentInfo(20, 100, NOW - 4 * HOUR, first_batch_timestamp=NOW - 8 * HOUR),
    ]
    # From the segment of the first dirty offset on: the earliest first-batch time is -8 h.
    r = offsets(s, checkpoint=15, active=30, log_end=31, max_lag=3 * HOUR)
    assert r.max_compaction_delay_ms == 5 * HOUR
    assert (
        offsets(s, checkpoint=15, active=30, log_end=31, max_lag=8 * HOUR).max_compaction_delay_ms
        == 0
    )
    assert (
        offsets(s, checkpoint=15, active=30, log_end=31, max_lag=9 * HOUR).max_compaction_delay_ms
        == 0
    )
    # From the log start, the first segment counts.
    assert (
        offsets(s, checkpoint=0, active=30, log_end=31, max_lag=HOUR).max_compaction_delay_ms
        == 49 * HOUR
    )
    # The default (Long.MAX) never triggers.
    assert offsets(s, checkpoint=0, active=30, log_end=31).max_compaction_delay_ms == 0


def test_max_compaction_lag_ignores_unknown_and_non_positive_timestamps() -> None:
    s = [
        SegmentInfo(0, 100, NOW, first_batch_timestamp=None),
        SegmentInfo(10, 100, NOW, first_batch_timestamp=0),
        SegmentInfo(20, 100, NOW, first_batch_timestamp=-1),
    ]
    assert offsets(s, active=30, log_end=31, max_lag=0).max_compaction_delay_ms == 0
    s.append(SegmentInfo(30, 100, NOW, first_batch_timestamp=NOW - 10))
    assert offsets(s, active=40, log_end=41, max_lag=0).max_compaction_delay_ms == 10


def test_max_compaction_lag_ignores_the_active_segment() -> None:
    # Only non-active segments are passed; nothing is overdue without one.
    assert offsets([], active=0, log_end=5, max_lag=0).max_compaction_delay_ms == 0


# LogToClean: rounding and the dirty ratio ---------------------------------------------------------


def test_uncleanable_offset_is_rounded_down_to_its_segment() -> None:
    s = segs(0, 100, 200, 300)
    # An LSO inside segment 200 blocks that whole segment.
    p = plan(s, active=400, log_end=450, lso=250)
    assert p.first_uncleanable_offset == 200
    assert p.cleanable_bytes == 200 and p.clean_bytes == 0
    # At a base exactly, that base.
    assert plan(s, active=400, log_end=450, lso=300).first_uncleanable_offset == 300
    # Inside the active segment: the active base.
    assert plan(s, active=400, log_end=450, lso=420).first_uncleanable_offset == 400


def test_rounding_can_make_the_cleanable_range_empty() -> None:
    # First dirty 120 and LSO 150 in the same segment: nothing to clean.
    p = plan(segs(0, 100, 200), checkpoint=120, active=300, log_end=310, lso=150)
    assert p.first_dirty_offset == 120
    assert p.first_uncleanable_offset == 100
    assert p.cleanable_bytes == 0
    # The clean side still counts segment 100 (it holds offsets below 120).
    assert p.clean_bytes == 200
    assert p.cleanable_ratio == 0.0 and not p.eligible(0.0)


def test_dirty_ratio_with_clean_cleanable_and_uncleanable_sections() -> None:
    # LogCleanerTest.testLogToCleanWithUncleanableSection: [0, 1] clean, [2, 3] cleanable,
    # [4, 5] uncleanable.
    s = [SegmentInfo(i * 10, 100 + i, NOW) for i in range(6)]
    r = CleanableRange(20, 40, 0, False)
    p = log_to_clean(s, r, 60)
    assert p.clean_bytes == 100 + 101
    assert p.cleanable_bytes == 102 + 103
    assert p.total_bytes == 406
    assert p.cleanable_ratio == pytest.approx(205 / 406)


def test_total_bytes_leave_the_active_segment_out() -> None:
    # LogCleanerTest.testLogToClean: first dirty = first uncleanable = the active base, so the
    # whole log but the active segment is clean and nothing is cleanable.
    s = [SegmentInfo(i, 77, NOW) for i in range(5)]
    p = log_to_clean(s, CleanableRange(5, 5, 0, False), 5)
    assert p.clean_bytes == 5 * 77
    assert p.cleanable_bytes == 0
    assert p.total_bytes == 5 * 77


def test_nothing_is_cleanable_after_a_complete_round() -> None:
    # The checkpoint of a complete round is the active segment's base: no dirty bytes, so no
    # ratio to clean at, whatever min.cleanable.dirty.ratio is.
    s = segs(0, 10)
    p = plan(s, checkpoint=20, active=20, log_end=25)
    assert (p.first_dirty_offset, p.first_uncleanable_offset) == (20, 20)
    assert p.cleanable_bytes == 0
    assert p.cleanable_ratio == 0.0
    assert not p.eligible(0.0)
    # A checkpoint past the active base (LogCleanerManagerTest's
    # testDirtyOffsetLargerThanActiveSegmentBaseOffset): not cleanable either.
    p = plan(s, checkpoint=22, active=20, log_end=25)
    assert p.cleanable_bytes == 0
    assert not p.eligible(0.0)


def test_mid_segment_first_dirty_offset_counts_on_both_sides() -> None:
    s = [SegmentInfo(0, 100, NOW), SegmentInfo(10, 200, NOW), SegmentInfo(20, 400, NOW)]
    p = log_to_clean(s, CleanableRange(15, 30, 0, False), 30)
    assert p.clean_bytes == 100 + 200
    assert p.cleanable_bytes == 200 + 400
    assert p.cleanable_ratio == pytest.approx(600 / 900)
    # At the base exactly, only the dirty side.
    p = log_to_clean(s, CleanableRange(10, 30, 0, False), 30)
    assert (p.clean_bytes, p.cleanable_bytes) == (100, 600)


def test_eligibility_is_a_strict_ratio_test_or_an_overdue_log() -> None:
    s = [SegmentInfo(0, 100, NOW), SegmentInfo(10, 100, NOW)]
    half = log_to_clean(s, CleanableRange(10, 20, 0, False), 20)
    assert half.cleanable_ratio == 0.5
    assert not half.eligible(0.5)
    assert half.eligible(0.49)
    assert not half.need_compaction_now
    overdue = log_to_clean(s, CleanableRange(10, 20, 1, False), 20)
    assert overdue.need_compaction_now and overdue.eligible(0.9)
    # Overdue but nothing cleanable: not eligible.
    s3 = [*s, SegmentInfo(20, 100, NOW)]
    nothing = log_to_clean(s3, CleanableRange(20, 20, 1, False), 30)
    assert nothing.cleanable_bytes == 0 and not nothing.eligible(0.0)
    # An empty log: ratio 0, never eligible.
    empty = log_to_clean([], CleanableRange(0, 0, 0, False), 0)
    assert empty.cleanable_ratio == 0.0 and not empty.eligible(0.0)


def test_zero_ratio_threshold_cleans_any_dirty_bytes() -> None:
    s = [SegmentInfo(0, 1000, NOW), SegmentInfo(10, 1, NOW)]
    p = log_to_clean(s, CleanableRange(10, 20, 0, False), 20)
    assert p.cleanable_ratio == pytest.approx(1 / 1001)
    assert p.eligible(0.0) and not p.eligible(0.01)


def test_plan_carries_the_checkpoint_reset_and_the_delay() -> None:
    s = [SegmentInfo(0, 10, NOW, first_batch_timestamp=NOW - 10 * HOUR)]
    p = plan(s, active=10, log_end=12, checkpoint=50, log_start=0, max_lag=HOUR)
    assert p.checkpoint_reset and p.first_dirty_offset == 0
    assert p.max_compaction_delay_ms == 9 * HOUR


def test_segments_must_be_in_order() -> None:
    bad = [SegmentInfo(10, 1, NOW), SegmentInfo(0, 1, NOW)]
    with pytest.raises(InvalidArgumentError, match="increasing base offset"):
        offsets(bad, active=20, log_end=20)
    whole = CleanableRange(0, 20, 0, False)
    with pytest.raises(InvalidArgumentError):
        log_to_clean(bad, whole, 20)
    with pytest.raises(InvalidArgumentError):
        group_segments_by_size(bad, max_size=10, max_index_size=10, first_uncleanable_offset=20)
    dup = [SegmentInfo(0, 1, NOW), SegmentInfo(0, 1, NOW)]
    with pytest.raises(InvalidArgumentError):
        log_to_clean(dup, whole, 20)


# Grouping ----------------------------------------------------------------------------------------


def bases_of(groups: list[list[SegmentInfo]]) -> list[list[int]]:
    return [[s.base_offset for s in g] for g in groups]


def test_grouping_by_large_and_small_limits() -> None:
    # LogCleanerTest.testSegmentGrouping: one group for huge limits, singletons for tiny ones.
    s = [
        SegmentInfo(i * 5, 70, NOW, offset_index_entries=4, time_index_entries=4) for i in range(10)
    ]
    big = group_segments_by_size(
        s, max_size=INT32_MAX, max_index_size=INT32_MAX, first_uncleanable_offset=50
    )
    assert bases_of(big) == [[i * 5 for i in range(10)]]
    for max_size, max_index in ((1, INT32_MAX), (INT32_MAX, 1)):
        small = group_segments_by_size(
            s, max_size=max_size, max_index_size=max_index, first_uncleanable_offset=50
        )
        assert bases_of(small) == [[i * 5] for i in range(10)]


def test_grouping_by_log_size_includes_the_exact_limit() -> None:
    s = [SegmentInfo(i * 5, 70, NOW) for i in range(10)]
    groups = group_segments_by_size(
        s, max_size=3 * 70, max_index_size=INT32_MAX, first_uncleanable_offset=50
    )
    assert [len(g) for g in groups] == [3, 3, 3, 1]
    groups = group_segments_by_size(
        s, max_size=3 * 70 - 1, max_index_size=INT32_MAX, first_uncleanable_offset=50
    )
    assert [len(g) for g in groups] == [2] * 5


def test_grouping_by_each_index_size() -> None:
    # Offset index entries are 8 bytes, time index entries 12: each is bounded separately.
    s = [SegmentInfo(i * 5, 1, NOW, offset_index_entries=3, time_index_entries=1) for i in range(6)]
    by_offset = group_segments_by_size(
        s, max_size=INT32_MAX, max_index_size=3 * 3 * 8, first_uncleanable_offset=30
    )
    assert [len(g) for g in by_offset] == [3, 3]
    s = [SegmentInfo(i * 5, 1, NOW, offset_index_entries=1, time_index_entries=3) for i in range(6)]
    by_time = group_segments_by_size(
        s, max_size=INT32_MAX, max_index_size=2 * 3 * 12, first_uncleanable_offset=30
    )
    assert [len(g) for g in by_time] == [2, 2, 2]
    assert s[0].offset_index_bytes == 8 and s[0].time_index_bytes == 36


def test_grouping_keeps_relative_offsets_within_an_int32() -> None:
    # LogCleanerTest.testSegmentGroupingWithSparseOffsets: a segment whose estimated last
    # offset (next base - 1, or first uncleanable - 1 for the last one) is more than Int.MaxValue
    # past the group's first base starts a new group.
    s = [SegmentInfo(0, 10, NOW), SegmentInfo(INT32_MAX - 1, 10, NOW)]
    fits = group_segments_by_size(
        s, max_size=INT32_MAX, max_index_size=INT32_MAX, first_uncleanable_offset=INT32_MAX + 1
    )
    assert bases_of(fits) == [[0, INT32_MAX - 1]]
    over = group_segments_by_size(
        s, max_size=INT32_MAX, max_index_size=INT32_MAX, first_uncleanable_offset=INT32_MAX + 2
    )
    assert bases_of(over) == [[0], [INT32_MAX - 1]]
    # The estimate uses the next segment's base, not the segment's own contents.
    s3 = [*s, SegmentInfo(INT32_MAX + 1, 10, NOW)]
    groups = group_segments_by_size(
        s3, max_size=INT32_MAX, max_index_size=INT32_MAX, first_uncleanable_offset=INT32_MAX + 5
    )
    assert bases_of(groups) == [[0, INT32_MAX - 1], [INT32_MAX + 1]]


def test_grouping_sparse_offsets_and_empty_segments() -> None:
    # LogCleanerTest.testSegmentGroupingWithSparseOffsetsAndEmptySegments: each segment spans
    # Int.MaxValue + 1 offsets, so non-empty ones never group; emptied ones (size 0) do.
    span = INT32_MAX + 1
    full = [SegmentInfo(i * span, 100, NOW) for i in range(3)]
    groups = group_segments_by_size(
        full, max_size=INT32_MAX, max_index_size=INT32_MAX, first_uncleanable_offset=3 * span
    )
    assert bases_of(groups) == [[0], [span], [2 * span]]
    emptied = [SegmentInfo(0, 0, NOW), SegmentInfo(span, 0, NOW), SegmentInfo(2 * span, 100, NOW)]
    groups = group_segments_by_size(
        emptied, max_size=INT32_MAX, max_index_size=INT32_MAX, first_uncleanable_offset=3 * span
    )
    assert bases_of(groups) == [[0, span], [2 * span]]


def test_grouping_covers_every_segment_in_order() -> None:
    sizes = [5, 50, 1, 30, 30, 0, 90, 10, 10, 10]
    s = [SegmentInfo(i * 3, size, NOW) for i, size in enumerate(sizes)]
    groups = group_segments_by_size(
        s, max_size=60, max_index_size=INT32_MAX, first_uncleanable_offset=30
    )
    assert [x for g in groups for x in g] == s
    assert all(sum(x.size for x in g) <= 60 or len(g) == 1 for g in groups)
    # Greedy: each group stops where the next segment would not fit.
    for g, nxt in itertools.pairwise(groups):
        assert sum(x.size for x in g) + nxt[0].size > 60
    assert (
        group_segments_by_size([], max_size=1, max_index_size=1, first_uncleanable_offset=0) == []
    )
