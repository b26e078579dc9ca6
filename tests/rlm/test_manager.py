"""The RemoteLogManager end to end on real components (``_harness``): copy, local retention
gated by the copy, reads below the local log start, failures of the RSM, leadership changes.

Scenarios follow Kafka's ``RemoteLogManagerTest`` (copy sequence, failure cleanup, custom
metadata limit) and its tiered-storage integration tests (offload and consume, delete segments,
leader change).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from tierlog.log.batch import build_batch
from tierlog.log.checkpoint import parse_leader_epoch_checkpoint
from tierlog.log.local_log import LocalLog, OffsetMovedToTieredStorageError, OffsetOutOfRangeError
from tierlog.log.record import Record
from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager
from tierlog.rlm.config import RemoteLogManagerConfig
from tierlog.rlm.manager import RemoteLogManager, RLMCopyTask, RLMExpirationTask
from tierlog.rlm.remote_read import RemoteStorageFetchInfo
from tierlog.rlm.scheduler import ScheduledTask
from tierlog.spi import (
    CustomMetadata,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageException,
    RemoteStorageNotReadyException,
    RetriableRemoteStorageException,
    TopicIdPartition,
)
from tierlog.storage.local import LOG_SUFFIX, LocalTieredStorage

from ._harness import DEFAULT_TOPIC, TOPIC_ID, Clock, Harness, key_of, value_of

# Generous: a bound on waits for the pools' threads on a loaded machine, never a measured time.
_DEADLINE_S = 60.0


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    harness = Harness(tmp_path)
    yield harness  # type: ignore[misc]
    harness.close()


def _remote_files(root: Path) -> list[Path]:
    base = root / "remote"
    return sorted(p for p in base.rglob("*") if p.is_file()) if base.exists() else []


def test_copy_uploads_every_sealed_segment_and_advances_the_highest_remote_offset(
    h: Harness,
) -> None:
    h.lead()
    h.produce(200)
    sealed = h.log.sealed_segments()
    assert len(sealed) >= 3
    assert h.log.highest_offset_in_remote_storage == -1

    h.rlm.run_once(h.tp)

    remote = h.remote_segments()
    assert [s.start_offset for s in remote] == [s.base_offset for s in sealed]
    assert remote[-1].end_offset == h.log.active_segment.base_offset - 1
    assert all(s.segment_leader_epochs == {0: s.start_offset} for s in remote)
    assert [s.segment_size_in_bytes for s in remote] == [s.size for s in sealed]
    assert h.log.highest_offset_in_remote_storage == remote[-1].end_offset
    assert h.rlm.copied_segments == len(sealed)
    # The active segment is never copied.
    assert all(s.end_offset < h.log.active_segment.base_offset for s in remote)
    # A second run copies nothing new.
    h.rlm.run_once(h.tp)
    assert len(h.remote_segments()) == len(sealed)


def test_local_retention_deletes_only_what_was_copied(h: Harness) -> None:
    h.lead()
    h.produce(200)
    first_active = h.log.active_segment.base_offset
    assert h.log.delete_retention_segments() == 0  # nothing copied yet
    assert h.log.local_log_start_offset == 0

    h.tier()

    assert h.log.local_log_start_offset == first_active
    assert h.log.log_start_offset == 0  # the data is still in the log, remotely
    with pytest.raises(OffsetMovedToTieredStorageError):
        h.log.read(0, 1024)


def test_consume_from_offset_zero_reads_remote_then_local(h: Harness) -> None:
    h.lead()
    h.produce(300)
    h.tier()
    assert h.log.local_log_start_offset > 100
    records = list(h.consume(0))
    assert [r.offset for r in records] == list(range(300))
    assert all(r.value == value_of(r.offset) for r in records)
    # From the middle of a remote batch.
    assert [r.offset for r in h.consume(7)][:3] == [7, 8, 9]


def test_copy_sends_the_segment_its_indexes_epochs_and_producer_snapshot(h: Harness) -> None:
    h.lead()
    h.produce(60)
    h.lead(3)
    h.produce(60)
    h.rlm.run_once(h.tp)
    remote = h.remote_segments()
    spanning = [s for s in remote if len(s.segment_leader_epochs) == 2]
    assert spanning, "a segment holding both epochs"
    seg = spanning[0]
    assert seg.segment_leader_epochs == {0: seg.start_offset, 3: 60}
    with h.rsm.fetch_index(seg, IndexType.LEADER_EPOCH) as f:
        epochs = parse_leader_epoch_checkpoint(f.read())
    assert [(e.epoch, e.start_offset) for e in epochs] == [(0, 0), (3, 60)]
    with h.rsm.fetch_log_segment(seg, 0) as f:
        assert len(f.read()) == seg.segment_size_in_bytes


class _FailingCopy(LocalTieredStorage):
    """The real local RSM whose copy fails after writing the data (a partial copy)."""

    def __init__(self, error: Exception, times: int = 1) -> None:
        super().__init__()
        self.error = error
        self.times = times

    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        log_segment_data: LogSegmentData,
    ) -> CustomMetadata | None:
        result = super().copy_log_segment_data(remote_log_segment_metadata, log_segment_data)
        if self.times > 0:
            self.times -= 1
            raise self.error
        return result


def test_non_retriable_copy_failure_deletes_the_partial_copy(tmp_path: Path) -> None:
    rsm = _FailingCopy(RemoteStorageException("bucket is gone"))
    rsm.configure({"dir": str(tmp_path / "remote")})
    h = Harness(tmp_path, rsm=rsm)
    try:
        h.lead()
        h.produce(100)
        h.rlm.run_once(h.tp)
        # The first attempt was cleaned up: no data, no listed metadata, nothing advanced.
        assert h.remote_segments(finished_only=False) == []
        assert _remote_files(tmp_path) == []
        assert h.log.highest_offset_in_remote_storage == -1
        task = next(t for t in h.rlm.tasks(h.tp) if isinstance(t, RLMCopyTask))
        assert task.failures == 1 and task.retry_at_ms > h.clock.now
        # Backing off: a run now does nothing.
        h.rlm.run_once(h.tp)
        assert h.remote_segments() == []
        h.clock.advance(task.retry_at_ms - h.clock.now)
        h.rlm.run_once(h.tp)
        assert len(h.remote_segments()) == len(h.log.sealed_segments())
    finally:
        h.close()


def test_retriable_copy_failure_leaves_the_started_record_and_retries(tmp_path: Path) -> None:
    rsm = _FailingCopy(RetriableRemoteStorageException("throttled"))
    rsm.configure({"dir": str(tmp_path / "remote")})
    h = Harness(tmp_path, rsm=rsm)
    try:
        h.lead()
        h.produce(100)
        h.rlm.run_once(h.tp)
        listed = h.remote_segments(finished_only=False)
        assert [s.state for s in listed] == [RemoteLogSegmentState.COPY_SEGMENT_STARTED]
        assert h.log.highest_offset_in_remote_storage == -1
        h.clock.advance(60_000)
        h.rlm.run_once(h.tp)
        finished = h.remote_segments()
        assert len(finished) == len(h.log.sealed_segments())
        # The retry copied the same offsets under a new segment id.
        assert finished[0].start_offset == listed[0].start_offset
        assert finished[0].remote_log_segment_id != listed[0].remote_log_segment_id
        # The expiration task deleted the superseded dangling copy.
        assert [s.state for s in h.remote_segments(finished_only=False)] == [
            RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ] * len(finished)
        h.log.delete_retention_segments()
        assert [r.offset for r in h.consume(0)] == list(range(100))
    finally:
        h.close()


class _BigCustomMetadata(LocalTieredStorage):
    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        log_segment_data: LogSegmentData,
    ) -> CustomMetadata | None:
        super().copy_log_segment_data(remote_log_segment_metadata, log_segment_data)
        return CustomMetadata(b"x" * 200)


def test_custom_metadata_over_the_limit_deletes_the_copy_and_stops_copying(tmp_path: Path) -> None:
    rsm = _BigCustomMetadata()
    rsm.configure({"dir": str(tmp_path / "remote")})
    h = Harness(tmp_path, rsm=rsm)
    try:
        h.lead()
        h.produce(100)
        h.rlm.run_once(h.tp)
        assert h.remote_segments(finished_only=False) == []
        assert _remote_files(tmp_path) == []
        assert not any(isinstance(t, RLMCopyTask) and not t.cancelled for t in h.rlm.tasks(h.tp))
    finally:
        h.close()


def test_remote_retention_by_size_deletes_oldest_and_moves_the_log_start(h: Harness) -> None:
    h.lead()
    h.produce(300)
    h.tier()
    remote = h.remote_segments()
    total_remote = sum(s.segment_size_in_bytes for s in remote)
    # Keep all but the two oldest segments.
    keep = total_remote - remote[0].segment_size_in_bytes - remote[1].segment_size_in_bytes
    h.log.update_config(
        {**h.topic_props, "retention.bytes": keep + h.log.only_local_log_segments_size()}
    )
    h.rlm.run_once(h.tp)
    after = h.remote_segments()
    assert [s.start_offset for s in after] == [s.start_offset for s in remote[2:]]
    assert h.log.log_start_offset == remote[1].end_offset + 1
    assert next(r.offset for r in h.consume(h.log.log_start_offset)) == remote[2].start_offset
    with pytest.raises(OffsetOutOfRangeError):
        list(h.consume(0))


def test_remote_retention_by_time_is_strict(h: Harness) -> None:
    h.lead()
    h.produce(100)
    h.clock.advance(10_000)
    h.produce(100)
    h.tier()
    remote = h.remote_segments()
    old = [s for s in remote if s.max_timestamp_ms < h.clock.now]
    assert old and len(old) < len(remote)
    # retention.ms such that now - retention == the old segments' max timestamp: kept (strict).
    cut = old[-1].max_timestamp_ms
    h.log.update_config({**h.topic_props, "retention.ms": h.clock.now - cut})
    h.rlm.run_once(h.tp)
    assert len(h.remote_segments()) == len(remote)
    h.clock.advance(1)
    h.rlm.run_once(h.tp)
    # Now the cut-off is one past the old segments' max timestamp: exactly those go.
    assert [s.start_offset for s in h.remote_segments()] == [
        s.start_offset for s in remote if s.max_timestamp_ms > cut
    ]


def test_stop_partitions_with_delete_empties_remote_storage(h: Harness) -> None:
    h.lead()
    h.produce(200)
    h.tier()
    assert _remote_files(h.root)
    errors = h.rlm.stop_partitions([h.tp], delete_remote=True)
    assert errors == {}
    assert [p for p in _remote_files(h.root)] == []
    assert h.rlm.partitions == []


def test_leader_epoch_change_keeps_copying_with_the_new_epoch(h: Harness) -> None:
    h.lead()
    h.produce(100)
    h.rlm.run_once(h.tp)
    before = h.remote_segments()
    h.lead(1)
    h.produce(100)
    h.rlm.run_once(h.tp)
    after = h.remote_segments()
    assert after[: len(before)] == before
    new = after[len(before) :]
    assert new and all(max(s.segment_leader_epochs) == 1 for s in new[1:])
    ends = [s.end_offset for s in after]
    starts = [s.start_offset for s in after]
    assert starts[1:] == [e + 1 for e in ends[:-1]]  # contiguous, no gap, no overlap


class _Unavailable(LocalTieredStorage):
    """The real RSM behind a switch that makes every call fail as an unreachable store would."""

    down = False

    def _check(self) -> None:
        if self.down:
            raise RetriableRemoteStorageException("remote storage unavailable")

    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        log_segment_data: LogSegmentData,
    ) -> CustomMetadata | None:
        self._check()
        return super().copy_log_segment_data(remote_log_segment_metadata, log_segment_data)

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        self._check()
        return super().fetch_log_segment(remote_log_segment_metadata, start_position, end_position)

    def fetch_index(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata, index_type: IndexType
    ) -> BinaryIO:
        self._check()
        return super().fetch_index(remote_log_segment_metadata, index_type)


def test_remote_storage_outage_local_goes_on_remote_reads_retriable_then_catch_up(
    tmp_path: Path,
) -> None:
    rsm = _Unavailable()
    rsm.configure({"dir": str(tmp_path / "remote")})
    h = Harness(tmp_path, rsm=rsm)
    try:
        h.lead()
        h.produce(150)
        h.tier()
        tiered = h.log.local_log_start_offset
        assert tiered > 0
        rsm.down = True
        h.produce(150)  # local appends go on
        h.tier()  # copy fails (retriable); local retention keeps the uncopied segments
        assert h.log.local_log_start_offset == tiered
        local = [r.offset for r in h.consume(tiered)]
        assert local == list(range(tiered, 300))
        with pytest.raises(RetriableRemoteStorageException):
            list(h.consume(0))
        rsm.down = False
        h.clock.advance(120_000)  # past the backoff
        h.tier()
        assert h.log.local_log_start_offset > tiered
        assert [r.offset for r in h.consume(0)] == list(range(300))
    finally:
        h.close()


def test_reads_while_the_rlmm_is_not_ready_fail_with_the_retriable_not_ready_error(
    h: Harness,
) -> None:
    h.lead()
    h.produce(300)
    h.tier()
    fetch = RemoteStorageFetchInfo(
        max_bytes=4096, min_one_message=True, topic_id_partition=h.tp, fetch_offset=0
    )
    before = h.rlm.read(fetch).records
    assert before
    h.rlmm.on_stop_partitions({h.tp})  # the RLMM no longer serves the partition
    assert not h.rlmm.is_ready(h.tp)
    with pytest.raises(RemoteStorageNotReadyException, match="not ready yet") as raised:
        h.rlm.read(fetch)
    assert isinstance(raised.value, RetriableRemoteStorageException)
    with pytest.raises(RemoteStorageNotReadyException):
        h.rlm.async_read(fetch)
    h.rlmm.on_partition_leadership_changes({h.tp}, set())  # replayed from its store
    assert h.rlmm.is_ready(h.tp)
    assert h.rlm.read(fetch).records == before
    assert h.rlm.async_read(fetch).result(timeout=10).records == before


@pytest.fixture
def frequent_thread_switches() -> Iterator[None]:
    """Switch threads every microsecond instead of every 5 ms, so that a read-modify-write
    that is not atomic gets interleaved with another thread's as often as possible."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


@pytest.mark.usefixtures("frequent_thread_switches")
def test_totals_equal_what_remote_storage_holds_after_concurrent_copies_and_deletes(
    tmp_path: Path,
) -> None:
    """Six partitions copied by four copier threads at once, then half of them expired by four
    expiration threads while the other half are deleted by ``stop_partitions``: the totals the
    quickstart prints are exactly what the RLMM and the RSM hold."""
    clock = Clock()
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(tmp_path / "remote")})
    rlmm = EmbeddedRemoteLogMetadataManager()
    rlmm.configure({"dir": str(tmp_path / "rlmm")})
    config, unknown = RemoteLogManagerConfig.from_props(
        {
            "remote.log.manager.task.interval.ms": 3_600_000,  # runs only when triggered
            "remote.log.manager.copier.thread.pool.size": 4,
            "remote.log.manager.expiration.thread.pool.size": 4,
        }
    )
    assert not unknown
    log_dir = tmp_path / "logs"
    rlm = RemoteLogManager(config, rsm, rlmm, broker_id=0, log_dir=log_dir, clock_ms=clock)
    logs: list[LocalLog] = []
    try:
        for partition in range(6):
            log = LocalLog.open(
                log_dir / f"topic-{partition}",
                DEFAULT_TOPIC,
                topic_id=TOPIC_ID,
                clock=clock,
                sync=False,
                high_watermark_follows_leo=True,
            )
            logs.append(log)
            log.assign_epoch_start_offset(0, 0)
            for first in range(0, 400, 5):
                records = [
                    Record(i, clock.now, key_of(first + i), value_of(first + i)) for i in range(5)
                ]
                log.append_as_leader(build_batch(records), 0)
        tps = [TopicIdPartition(TOPIC_ID, "topic", p) for p in range(len(logs))]

        def scheduled(
            tp: TopicIdPartition, kind: type[RLMCopyTask] | type[RLMExpirationTask]
        ) -> ScheduledTask:
            task = next(t for t in rlm.tasks(tp) if isinstance(t, kind))
            assert task.scheduled is not None
            return task.scheduled

        # Leadership schedules every task, each copy task's first run at once.
        rlm.on_leadership_change(logs)
        for tp in tps:
            assert scheduled(tp, RLMCopyTask).wait_runs(1, _DEADLINE_S)
        copied = {tp: list(rlmm.list_remote_log_segments(tp)) for tp in tps}
        for tp, log in zip(tps, logs, strict=True):
            assert [s.state for s in copied[tp]] == [
                RemoteLogSegmentState.COPY_SEGMENT_FINISHED
            ] * len(log.sealed_segments())
        every_copy = [s for segments in copied.values() for s in segments]
        assert len(every_copy) >= 6 * 5
        assert all(rsm.segment_paths(s)[LOG_SUFFIX].exists() for s in every_copy)
        assert rlm.copied_segments == len(every_copy)
        assert rlm.copied_bytes == sum(s.segment_size_in_bytes for s in every_copy)
        assert rlm.deleted_segments == 0

        # Expire everything remote in the first half while the second half is deleted.
        expiring, stopping = tps[:3], tps[3:]
        for log in logs[:3]:
            log.update_config({**DEFAULT_TOPIC, "retention.ms": 1})
        clock.advance(1_000)
        runs = {tp: scheduled(tp, RLMExpirationTask).runs for tp in expiring}
        for tp in expiring:
            rlm.trigger(tp)
        assert rlm.stop_partitions(stopping, delete_remote=True) == {}
        for tp in expiring:
            assert scheduled(tp, RLMExpirationTask).wait_runs(runs[tp] + 1, _DEADLINE_S)
            assert list(rlmm.list_remote_log_segments(tp)) == []
        assert not any(rsm.segment_paths(s)[LOG_SUFFIX].exists() for s in every_copy)
        assert rlm.deleted_segments == len(every_copy)
        assert rlm.copied_segments == len(every_copy)  # nothing copied twice
    finally:
        rlm.close()
        for log in logs:
            log.close()
        rsm.close()
        rlmm.close()
