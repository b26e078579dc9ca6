"""Remote retention decisions (``tierlog.rlm.retention``), over a real embedded RLMM.

Cases are ported from Kafka's ``RemoteLogManagerTest`` (named where ported) and KAFKA-FACTS 5.3
and 6.1 item 10. Kafka's tests mock the RLMM's listings; here the segments go through the real
lifecycle (add, COPY_SEGMENT_FINISHED, ...) in an embedded RLMM, so the listing order and the
visibility of each state are the RLMM's own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tierlog.log.leader_epoch_cache import LeaderEpochFileCache
from tierlog.metadata.embedded import NUM_PARTITIONS_CONFIG, EmbeddedRemoteLogMetadataManager
from tierlog.rlm.retention import (
    REASON_DANGLING_DELETE,
    REASON_LOG_START_OFFSET,
    REASON_RETENTION_SIZE,
    REASON_RETENTION_TIME,
    REASON_UNREFERENCED,
    RemoteLogStats,
    RetentionPlan,
    plan_remote_retention,
    remote_log_stats,
)
from tierlog.spi import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    Uuid,
)

NOW = 1_700_000_000_000
SEGMENT_SIZE = 1024
STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
_PATH = (STARTED, FINISHED, DELETE_STARTED, DELETE_FINISHED)


@pytest.fixture
def tip() -> TopicIdPartition:
    return TopicIdPartition(Uuid.random(), "Leader", 0)


@pytest.fixture
def rlmm(tmp_path: Path, tip: TopicIdPartition) -> Iterator[EmbeddedRemoteLogMetadataManager]:
    manager = EmbeddedRemoteLogMetadataManager()
    manager.configure({"dir": str(tmp_path / "rlmm"), NUM_PARTITIONS_CONFIG: "1"})
    manager.on_partition_leadership_changes({tip}, set())
    yield manager
    manager.close()


def put(
    rlmm: EmbeddedRemoteLogMetadataManager,
    tip: TopicIdPartition,
    start: int,
    end: int,
    epochs: dict[int, int],
    *,
    state: RemoteLogSegmentState = FINISHED,
    max_ts: int = NOW,
    size: int = SEGMENT_SIZE,
) -> RemoteLogSegmentMetadata:
    """A segment added to the RLMM and walked through its lifecycle up to ``state``."""
    segment = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(tip), start, end, max_ts, 0, NOW, size, epochs
    )
    rlmm.add_remote_log_segment_metadata(segment).result()
    for step in _PATH[1 : _PATH.index(state) + 1]:
        move(rlmm, segment, step)
    return segment


def move(
    rlmm: EmbeddedRemoteLogMetadataManager,
    segment: RemoteLogSegmentMetadata,
    state: RemoteLogSegmentState,
) -> None:
    update = RemoteLogSegmentMetadataUpdate(segment.remote_log_segment_id, NOW, None, state, 0)
    rlmm.update_remote_log_segment_metadata(update).result()


def plan(
    rlmm: EmbeddedRemoteLogMetadataManager,
    tip: TopicIdPartition,
    epochs: dict[int, int],
    *,
    log_end_offset: int,
    log_start_offset: int = 0,
    local_size: int = 0,
    retention_ms: int = -1,
    retention_bytes: int = -1,
    now_ms: int = NOW,
    being_copied: Sequence[RemoteLogSegmentMetadata] = (),
    assume_all_segments_valid: bool = False,
) -> RetentionPlan:
    return plan_remote_retention(
        rlmm,
        tip,
        epoch_cache_entries=epochs,
        log_end_offset=log_end_offset,
        log_start_offset=log_start_offset,
        only_local_log_segments_size=local_size,
        retention_ms=retention_ms,
        retention_bytes=retention_bytes,
        now_ms=now_ms,
        segment_ids_being_copied={s.remote_log_segment_id for s in being_copied},
        assume_all_segments_valid=assume_all_segments_valid,
    )


def ids(segments: Sequence[RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentId]:
    return [s.remote_log_segment_id for s in segments]


def finish_deletes(rlmm: EmbeddedRemoteLogMetadataManager, result: RetentionPlan) -> None:
    """What the expiration task does with a plan (DELETE_STARTED, then DELETE_FINISHED)."""
    for segment in (*result.to_delete, *result.unreferenced):
        if segment.state is not DELETE_STARTED:
            move(rlmm, segment, DELETE_STARTED)
        move(rlmm, segment, DELETE_FINISHED)


# Stats --------------------------------------------------------------------------------------------
def test_remote_log_stats_counts_sizes_by_state(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    """Kafka's calculateMetadataAndSize: size is FINISHED + DELETE_STARTED, a copy in progress
    is counted in the metadata count only."""
    put(rlmm, tip, 0, 99, {0: 0}, state=STARTED, size=1)
    put(rlmm, tip, 100, 199, {0: 100, 1: 150}, size=10)
    put(rlmm, tip, 200, 299, {1: 200}, state=DELETE_STARTED, size=100)
    put(rlmm, tip, 300, 399, {2: 300}, state=DELETE_FINISHED, size=1000)  # gone
    stats = remote_log_stats(rlmm.list_remote_log_segments(tip))
    assert stats == RemoteLogStats(
        count=3, epochs=frozenset({0, 1}), size=110, copy_finished_size=10
    )


def test_no_remote_segment_plans_nothing(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    """testDeleteRetentionMsOnExpiredSegment: DELETE_SEGMENT_FINISHED segments are gone."""
    put(rlmm, tip, 0, 99, {0: 0}, state=DELETE_FINISHED)
    put(rlmm, tip, 100, 199, {0: 100}, state=DELETE_FINISHED)
    result = plan(rlmm, tip, {0: 0}, log_end_offset=200, retention_ms=0, retention_bytes=0)
    assert result == RetentionPlan()
    assert result.stats.count == 0


# Retention size and time (KAFKA-FACTS 6.1 item 10) -----------------------------------------------
SIZE_EPOCHS = {0: 0, 1: 20, 3: 50, 4: 100}


def fifty_segments(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition, old: int = 0
) -> list[RemoteLogSegmentMetadata]:
    """Kafka's listRemoteLogSegmentMetadataByTime: 50 segments of 100 records and 1024 bytes,
    epochs from the cache truncated to each segment; the first ``old`` are 2 ms old."""
    epoch_cache = LeaderEpochFileCache(None, SIZE_EPOCHS.items())
    out = []
    for idx in range(50):
        start, end = idx * 100, idx * 100 + 99
        epochs = dict(epoch_cache.epoch_entries_in_range(start, end))
        ts = NOW - 2 if idx < old else NOW
        out.append(put(rlmm, tip, start, end, epochs, max_ts=ts))
    return out


@pytest.mark.parametrize("k", [0, 1, 23, 50])
def test_delete_log_segment_due_to_retention_size_breach(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition, k: int
) -> None:
    """RemoteLogManagerTest.testDeleteLogSegmentDueToRetentionSizeBreach."""
    segments = fifty_segments(rlmm, tip)
    assert dict(segments[0].segment_leader_epochs) == {0: 0, 1: 20, 3: 50}
    assert dict(segments[1].segment_leader_epochs) == {4: 100}
    result = plan(
        rlmm,
        tip,
        SIZE_EPOCHS,
        log_end_offset=5001,
        local_size=512,
        retention_bytes=(50 - k) * SEGMENT_SIZE + 512,
    )
    assert ids(result.to_delete) == ids(segments[:k])
    assert result.new_log_start_offset == (k * 100 if k else None)
    assert set(result.reasons.values()) <= {REASON_RETENTION_SIZE}
    assert len(result.reasons) == k
    assert result.unreferenced == []
    assert not result.stopped_at_copying
    assert result.retention_size_total == 50 * SEGMENT_SIZE + 512
    assert result.all_segments_valid is (True if k else None)


@pytest.mark.parametrize("k", [0, 1, 23, 50])
def test_delete_log_segment_due_to_retention_time_breach(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition, k: int
) -> None:
    """RemoteLogManagerTest.testDeleteLogSegmentDueToRetentionTimeBreach: retention.ms=1, the
    first k segments' largest timestamp is now - 2 (< now - 1), the others now."""
    segments = fifty_segments(rlmm, tip, old=k)
    result = plan(rlmm, tip, SIZE_EPOCHS, log_end_offset=5001, local_size=512, retention_ms=1)
    assert ids(result.to_delete) == ids(segments[:k])
    assert result.new_log_start_offset == (k * 100 if k else None)
    assert set(result.reasons.values()) <= {REASON_RETENTION_TIME}
    assert len(result.reasons) == k
    assert result.retention_size_total is None


@pytest.mark.parametrize(
    ("retention_bytes", "retention_ms", "advance", "deleted"),
    [(0, -1, 1, True), (-1, 0, 1, True), (-1, 0, 0, False)],
)
def test_deletion_on_retention_breached_segments(
    rlmm: EmbeddedRemoteLogMetadataManager,
    tip: TopicIdPartition,
    retention_bytes: int,
    retention_ms: int,
    advance: int,
    deleted: bool,
) -> None:
    """RemoteLogManagerTest.testDeletionOnRetentionBreachedSegments: a segment whose largest
    timestamp equals ``now - retention.ms`` is kept (strict ``<``)."""
    segments = [put(rlmm, tip, i * 100, i * 100 + 99, {0: i * 100}) for i in range(2)]
    result = plan(
        rlmm,
        tip,
        {0: 0},
        log_end_offset=200,
        retention_ms=retention_ms,
        retention_bytes=retention_bytes,
        now_ms=NOW + advance,
    )
    if deleted:
        assert ids(result.to_delete) == ids(segments)
        assert result.new_log_start_offset == 200
    else:
        assert result.to_delete == []
        assert result.new_log_start_offset is None


def test_retention_time_boundary_is_strict(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    older = put(rlmm, tip, 0, 99, {0: 0}, max_ts=NOW - 1001)
    put(rlmm, tip, 100, 199, {0: 100}, max_ts=NOW - 1000)  # == cleanup-until: kept
    put(rlmm, tip, 200, 299, {0: 200}, max_ts=NOW - 5000)  # after a kept one: not reached
    result = plan(rlmm, tip, {0: 0}, log_end_offset=300, retention_ms=1000)
    assert ids(result.to_delete) == ids([older])
    assert result.new_log_start_offset == 100


def test_delete_retention_ms_bigger_than_time_ms(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    """RemoteLogManagerTest.testDeleteRetentionMsBiggerThanTimeMs: now - retention.ms < 0
    disables time retention, even for a segment whose timestamp is below that."""
    put(rlmm, tip, 0, 99, {0: 0}, max_ts=-2)
    result = plan(rlmm, tip, {0: 0}, log_end_offset=200, retention_ms=NOW + 1)
    assert result.to_delete == []
    # A cut-off of 1 (>= 0) applies: the same segment goes.
    result = plan(rlmm, tip, {0: 0}, log_end_offset=200, retention_ms=NOW - 1)
    assert len(result.to_delete) == 1


@pytest.mark.parametrize(("retention_bytes", "retention_ms"), [(0, -1), (-1, 0)])
def test_deletion_on_overlapping_retention_breached_segments(
    rlmm: EmbeddedRemoteLogMetadataManager,
    tip: TopicIdPartition,
    retention_bytes: int,
    retention_ms: int,
) -> None:
    """RemoteLogManagerTest.testDeletionOnOverlappingRetentionBreachedSegments: S(0,99) and a
    later copy S'(0,104) of the same epoch are both deleted; the log start is 105, the largest
    end + 1, not the last deleted segment's."""
    first = put(rlmm, tip, 0, 99, {0: 0}, max_ts=NOW - 1)
    second = put(rlmm, tip, 0, 104, {0: 0}, max_ts=NOW - 1, size=SEGMENT_SIZE + 128)
    result = plan(
        rlmm,
        tip,
        {0: 0},
        log_end_offset=200,
        retention_ms=retention_ms,
        retention_bytes=retention_bytes,
    )
    assert sorted(map(str, ids(result.to_delete))) == sorted(map(str, ids([first, second])))
    assert result.new_log_start_offset == 105


def test_time_deletions_reduce_the_size_breach(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    # 3 KiB remote, retention.bytes 2 KiB: 1 KiB must go, and the segment expired by time
    # already accounts for it, so size retention takes nothing more.
    old = put(rlmm, tip, 0, 99, {0: 0}, max_ts=NOW - 5000)
    put(rlmm, tip, 100, 199, {0: 100})
    put(rlmm, tip, 200, 299, {0: 200})
    result = plan(
        rlmm,
        tip,
        {0: 0},
        log_end_offset=300,
        retention_ms=1000,
        retention_bytes=2 * SEGMENT_SIZE,
    )
    assert ids(result.to_delete) == ids([old])
    assert result.reasons == {old.remote_log_segment_id: REASON_RETENTION_TIME}
    assert result.new_log_start_offset == 100


def test_size_retention_never_deletes_more_than_the_breach(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    for i in range(3):
        put(rlmm, tip, i * 100, i * 100 + 99, {0: i * 100})
    # 1000 bytes over the limit: deleting a 1024-byte segment would go below it.
    result = plan(rlmm, tip, {0: 0}, log_end_offset=300, retention_bytes=3 * SEGMENT_SIZE - 1000)
    assert result.to_delete == []
    assert result.retention_size_total == 3 * SEGMENT_SIZE
    # The estimate within the limit: no breach, the lineage is not even checked.
    result = plan(
        rlmm, tip, {0: 0}, log_end_offset=300, local_size=10, retention_bytes=3 * SEGMENT_SIZE + 10
    )
    assert result.to_delete == []
    assert result.retention_size_total == 3 * SEGMENT_SIZE + 10
    assert result.all_segments_valid is None


def test_the_scan_stops_at_the_first_valid_segment_kept(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    # Segments are visited in offset order: a newer-timestamped one stops the scan even if an
    # older-timestamped segment follows it (as in Kafka, where timestamps grow with offsets).
    put(rlmm, tip, 0, 99, {0: 0}, max_ts=NOW)
    put(rlmm, tip, 100, 199, {0: 100}, max_ts=NOW - 5000)
    assert plan(rlmm, tip, {0: 0}, log_end_offset=200, retention_ms=1000).to_delete == []


# Lineage: size counted and deletions made only within the leader's epochs -------------------------
def test_segments_outside_the_lineage_are_not_counted_nor_deleted(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    """Kafka's buildRetentionSizeData counts only the finished copies within the lineage."""
    a = put(rlmm, tip, 0, 99, {0: 0})
    # Copied by a leader whose history diverged: epoch 1 is not in this leader's lineage.
    put(rlmm, tip, 100, 249, {0: 100, 1: 150})
    b = put(rlmm, tip, 100, 199, {0: 100})
    put(rlmm, tip, 200, 299, {2: 200})
    lineage = {0: 0, 2: 200}
    result = plan(rlmm, tip, lineage, log_end_offset=300, retention_bytes=2 * SEGMENT_SIZE)
    # 3 valid KiB against 2 KiB: only the first segment goes; the invalid one is passed over.
    assert ids(result.to_delete) == ids([a])
    assert result.retention_size_total == 3 * SEGMENT_SIZE
    assert result.all_segments_valid is False
    # Kafka's isAllSegmentsValid cache: trusting every finished copy counts the diverged one.
    trusting = plan(
        rlmm,
        tip,
        lineage,
        log_end_offset=300,
        retention_bytes=2 * SEGMENT_SIZE,
        assume_all_segments_valid=True,
    )
    assert ids(trusting.to_delete) == ids([a, b])
    assert trusting.retention_size_total == 4 * SEGMENT_SIZE
    assert trusting.new_log_start_offset == 200


def test_segments_beyond_the_log_end_are_not_deleted(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    # This replica's log ends at 150: a remote segment ending at 199 is not in its lineage.
    put(rlmm, tip, 100, 199, {0: 100}, max_ts=NOW - 5000)
    result = plan(rlmm, tip, {0: 0}, log_end_offset=150, retention_ms=1000)
    assert result.to_delete == []


def test_all_segments_valid(rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition) -> None:
    """RemoteLogManagerTest.testBuildRetentionSizeData, steps 4 and 5: the remote size is
    recomputed over the lineage; when it matches the finished copies, all are valid."""
    put(rlmm, tip, 0, 50, {0: 0}, size=1000)
    result = plan(rlmm, tip, {0: 0}, log_end_offset=100, local_size=500, retention_bytes=1000)
    assert result.retention_size_total == 1500
    assert result.all_segments_valid is True
    # 500 bytes over: the 1000-byte segment cannot go without going below the limit.
    assert result.to_delete == []


# Dangling deletes, copies in progress -------------------------------------------------------------
def test_dangling_delete_is_retried_without_retention(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    dangling = put(rlmm, tip, 0, 99, {0: 0}, state=DELETE_STARTED)
    put(rlmm, tip, 100, 199, {0: 100})
    result = plan(rlmm, tip, {0: 0}, log_end_offset=200)
    assert ids(result.to_delete) == ids([dangling])
    assert result.reasons == {dangling.remote_log_segment_id: REASON_DANGLING_DELETE}
    assert result.new_log_start_offset is None
    assert result.to_delete[0].state is DELETE_STARTED


def test_a_dangling_delete_spanning_epochs_is_planned_once(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    dangling = put(rlmm, tip, 0, 199, {0: 0, 1: 100}, state=DELETE_STARTED)
    result = plan(rlmm, tip, {0: 0, 1: 100}, log_end_offset=300)
    assert ids(result.to_delete) == ids([dangling])


def test_a_dangling_delete_after_a_kept_segment_waits(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    # Kafka's scan stops at the first valid segment kept: later segments are not looked at.
    put(rlmm, tip, 0, 99, {0: 0})
    put(rlmm, tip, 100, 199, {0: 100}, state=DELETE_STARTED)
    assert plan(rlmm, tip, {0: 0}, log_end_offset=200).to_delete == []


def test_remote_log_size_retention_filters_out_copies_in_progress(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    """RemoteLogManagerTest.testRemoteLogSizeRetentionShouldFilterOutCopySegmentStartState,
    adapted to a real RLMM: a dangling DELETE_SEGMENT_STARTED segment is retried; copies in
    progress and deletions do not count in the remote size; once the copy finishes, it does."""
    retention = 10 * SEGMENT_SIZE
    dangling = put(rlmm, tip, 0, 99, {0: 0}, state=DELETE_STARTED)
    put(rlmm, tip, 0, 99, {0: 0}, state=DELETE_FINISHED)
    finished = [put(rlmm, tip, i * 100, i * 100 + 99, {0: i * 100}) for i in range(1, 12)]
    copying = put(rlmm, tip, 1200, 1299, {0: 1200}, state=STARTED)

    run1 = plan(
        rlmm, tip, {0: 0}, log_end_offset=2000, retention_bytes=retention, being_copied=[copying]
    )
    # 11 finished KiB against 10: one segment by size, plus the dangling delete.
    assert ids(run1.to_delete) == ids([dangling, finished[0]])
    assert run1.reasons[dangling.remote_log_segment_id] == REASON_DANGLING_DELETE
    assert run1.reasons[finished[0].remote_log_segment_id] == REASON_RETENTION_SIZE
    assert run1.new_log_start_offset == 200
    assert run1.stats.copy_finished_size == 11 * SEGMENT_SIZE
    assert run1.stats.size == 12 * SEGMENT_SIZE  # the DELETE_STARTED one counts in the metric

    finish_deletes(rlmm, run1)
    move(rlmm, copying, FINISHED)
    run2 = plan(rlmm, tip, {0: 0}, log_end_offset=2000, retention_bytes=retention)
    assert ids(run2.to_delete) == ids([finished[1]])
    assert run2.new_log_start_offset == 300


def test_deletion_skipped_for_segments_being_copied(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    """RemoteLogManagerTest.testDeletionSkippedForSegmentsBeingCopied: retention.bytes=0, the
    only segment is being copied: nothing is deleted until its copy finishes."""
    copying = put(rlmm, tip, 0, 149, {0: 0}, state=STARTED)
    result = plan(rlmm, tip, {0: 0}, log_end_offset=150, retention_bytes=0, being_copied=[copying])
    assert result.to_delete == []
    assert result.stopped_at_copying
    move(rlmm, copying, FINISHED)
    result = plan(rlmm, tip, {0: 0}, log_end_offset=150, retention_bytes=0)
    assert ids(result.to_delete) == ids([copying])
    assert not result.stopped_at_copying
    assert result.new_log_start_offset == 150


def test_a_segment_being_copied_stops_the_scan_of_every_epoch(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    first = put(rlmm, tip, 0, 99, {0: 0})
    copying = put(rlmm, tip, 100, 199, {0: 100}, state=STARTED)
    put(rlmm, tip, 200, 299, {1: 200})
    result = plan(
        rlmm, tip, {0: 0, 1: 200}, log_end_offset=300, retention_bytes=0, being_copied=[copying]
    )
    assert ids(result.to_delete) == ids([first])
    assert result.stopped_at_copying
    assert result.new_log_start_offset == 100


# Log start offset breach and unreferenced segments ------------------------------------------------
def test_segments_below_the_log_start_offset_are_deleted(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    """Kafka's isSegmentBreachByLogStartOffset: DeleteRecords moved the log start to 150 and the
    epoch cache was truncated from the start ({1:150, 2:300}); a segment ending below it whose
    epochs are all <= the first lineage epoch goes, although it is no longer within the
    lineage, and the log start offset is not moved for it."""
    below = put(rlmm, tip, 0, 99, {0: 0, 1: 50})
    put(rlmm, tip, 100, 199, {1: 100})
    put(rlmm, tip, 200, 349, {1: 200, 2: 300})
    result = plan(rlmm, tip, {1: 150, 2: 300}, log_end_offset=400, log_start_offset=150)
    assert ids(result.to_delete) == ids([below])
    assert result.reasons == {below.remote_log_segment_id: REASON_LOG_START_OFFSET}
    assert result.new_log_start_offset is None


def test_log_start_breach_needs_epochs_at_most_the_first_lineage_epoch(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    # Ends below the log start but holds epoch 2 (above the first lineage epoch 1): not a log
    # start breach; outside the lineage (epoch 2 starts at 300 in it), so it is passed over.
    put(rlmm, tip, 0, 99, {1: 0, 2: 50})
    result = plan(rlmm, tip, {1: 0, 2: 300}, log_end_offset=400, log_start_offset=150)
    assert result.to_delete == []


def test_unreferenced_segments_after_unclean_leader_election(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    """The remote epochs below the new leader's earliest epoch (3) hold segments no lineage will
    reach again: those made only of such epochs are deleted, without moving the log start."""
    u0 = put(rlmm, tip, 0, 99, {0: 0})
    u01 = put(rlmm, tip, 100, 199, {0: 100, 1: 150})  # listed under epochs 0 and 1: once
    u2 = put(rlmm, tip, 200, 249, {2: 200}, state=STARTED)  # any state, as Kafka
    mixed = put(rlmm, tip, 250, 349, {2: 250, 3: 300})  # holds epoch 3: kept
    put(rlmm, tip, 350, 399, {3: 350})
    result = plan(rlmm, tip, {3: 300, 4: 400}, log_end_offset=500)
    assert result.to_delete == []
    assert ids(result.unreferenced) == ids([u0, u01, u2])
    assert all(result.reasons[i] == REASON_UNREFERENCED for i in ids(result.unreferenced))
    assert mixed.remote_log_segment_id not in result.reasons
    assert result.new_log_start_offset is None
    assert result.size_to_delete == 3 * SEGMENT_SIZE


def test_unreferenced_cleanup_uses_the_unfiltered_earliest_epoch(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    # The cache's earliest epoch (1, with no record) is filtered out of the lineage but still
    # bounds the unreferenced cleanup: epoch 0 is below it, epoch 1 is not.
    u0 = put(rlmm, tip, 0, 99, {0: 0})
    put(rlmm, tip, 100, 199, {1: 100})
    result = plan(rlmm, tip, {1: 100, 2: 100, 3: 300}, log_end_offset=400)
    assert ids(result.unreferenced) == ids([u0])


def test_retention_and_unreferenced_together(
    rlmm: EmbeddedRemoteLogMetadataManager, tip: TopicIdPartition
) -> None:
    stale = put(rlmm, tip, 0, 99, {0: 0}, max_ts=NOW - 5000)
    expired = put(rlmm, tip, 100, 199, {1: 100}, max_ts=NOW - 5000)
    put(rlmm, tip, 200, 299, {1: 200})
    result = plan(rlmm, tip, {1: 100}, log_end_offset=300, retention_ms=1000)
    assert ids(result.to_delete) == ids([expired])
    assert ids(result.unreferenced) == ids([stale])
    assert result.new_log_start_offset == 200
