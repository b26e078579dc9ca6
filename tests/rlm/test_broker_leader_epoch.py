"""Every metadata event the RemoteLogManager publishes carries the publishing leader's epoch.

KAFKA-20033's compacted RLMM keys its records by ``topicId:partition:endOffset:brokerLeaderEpoch``,
so the RLM must say under which leader epoch it publishes each event
(``broker_leader_epoch``): the copy task's add and COPY_SEGMENT_FINISHED update, the expiration
task's DELETE_SEGMENT_STARTED/_FINISHED, the cleanup of a failed copy, the deletions of
``stop_partitions(..., delete_remote=True)``, and the tiered log cleaner's cleaned segments
(published under the cleaning leader's epoch). The epoch is the leader's current one (its log's
latest epoch), not the epochs of the records in the segment: after a leadership change the new
leader's events carry its epoch even for a segment written entirely under the old one.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from tierlog.compaction.engine import PythonEngine
from tierlog.compaction.remote_io import StorageSpec, register_open
from tierlog.compaction.tiered import TieredCleaner
from tierlog.log.batch import build_batch
from tierlog.log.record import Record
from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager
from tierlog.spi import (
    CustomMetadata,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageException,
)
from tierlog.storage.local import LocalTieredStorage

from ._harness import Harness
from ._tiering import TIP, Clock, open_log, open_rsm, tier

S = RemoteLogSegmentState


class RecordingRlmm(EmbeddedRemoteLogMetadataManager):
    """The embedded RLMM, remembering every event it was given, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate] = []

    def add_remote_log_segment_metadata(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata
    ) -> Future[None]:
        self.events.append(remote_log_segment_metadata)
        return super().add_remote_log_segment_metadata(remote_log_segment_metadata)

    def update_remote_log_segment_metadata(
        self, remote_log_segment_metadata_update: RemoteLogSegmentMetadataUpdate
    ) -> Future[None]:
        self.events.append(remote_log_segment_metadata_update)
        return super().update_remote_log_segment_metadata(remote_log_segment_metadata_update)


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[Harness, RecordingRlmm]]:
    rlmm = RecordingRlmm()
    rlmm.configure({"dir": str(tmp_path / "rlmm")})
    harness = Harness(tmp_path, rlmm=rlmm)
    yield harness, rlmm
    harness.close()


def _state(event: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate) -> S:
    return event.state


def test_copy_events_carry_the_current_leader_epoch(
    recorded: tuple[Harness, RecordingRlmm],
) -> None:
    h, rlmm = recorded
    h.lead(0)
    h.produce(60)
    h.rlm.run_once(h.tp)
    first = list(rlmm.events)
    assert first and {_state(e) for e in first} == {S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED}
    assert {e.broker_leader_epoch for e in first} == {0}

    # More epoch-0 records, sealed in segments but not copied before a new leader epoch: the
    # epoch-4 leader copies segments holding only epoch-0 records, under its own epoch.
    h.produce(60, epoch=0)
    h.lead(4)
    h.rlm.run_once(h.tp)
    later = rlmm.events[len(first) :]
    assert later, "the new leader copied nothing"
    assert {e.broker_leader_epoch for e in later} == {4}
    published_under_4 = [e for e in later if isinstance(e, RemoteLogSegmentMetadata)]
    assert any(max(e.segment_leader_epochs) == 0 for e in published_under_4), (
        "expected a segment of epoch-0 records sealed and copied by the epoch-4 leader"
    )


def test_deletions_carry_the_deleting_leaders_epoch(
    recorded: tuple[Harness, RecordingRlmm],
) -> None:
    h, rlmm = recorded
    h.lead(2)
    h.produce(60, epoch=2)
    h.rlm.run_once(h.tp)
    copied = len(rlmm.events)
    assert copied
    h.lead(7)
    errors = h.rlm.stop_partitions([h.tp], delete_remote=True)
    assert errors == {}
    deletions = rlmm.events[copied:]
    assert {_state(e) for e in deletions} == {S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED}
    assert {e.broker_leader_epoch for e in deletions} == {7}


def test_expiration_deletes_under_the_current_leaders_epoch(
    recorded: tuple[Harness, RecordingRlmm],
) -> None:
    """Segments copied under epoch 1 expire (retention.bytes) once epoch 3 leads: the
    expiration task's DELETE_SEGMENT_STARTED/_FINISHED carry 3."""
    h, rlmm = recorded
    h.lead(1)
    h.produce(80, epoch=1)
    h.tier()
    copied = len(rlmm.events)
    assert copied and {e.broker_leader_epoch for e in rlmm.events} == {1}
    h.lead(3)
    h.log.update_config({**h.topic_props, "retention.bytes": 1})
    h.rlm.run_once(h.tp)
    deletions = rlmm.events[copied:]
    assert {_state(e) for e in deletions} == {S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED}
    assert {e.broker_leader_epoch for e in deletions} == {3}


class _FailingCopy(LocalTieredStorage):
    """The local RSM whose first copy fails after writing its data (a partial copy)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        log_segment_data: LogSegmentData,
    ) -> CustomMetadata | None:
        result = super().copy_log_segment_data(remote_log_segment_metadata, log_segment_data)
        if not self.failed:
            self.failed = True
            raise RemoteStorageException("bucket is gone")
        return result


def test_a_failed_copys_cleanup_carries_the_leaders_epoch(tmp_path: Path) -> None:
    rsm = _FailingCopy()
    rsm.configure({"dir": str(tmp_path / "remote")})
    rlmm = RecordingRlmm()
    rlmm.configure({"dir": str(tmp_path / "rlmm")})
    h = Harness(tmp_path, rsm=rsm, rlmm=rlmm)
    try:
        h.produce(30, epoch=0)
        h.lead(6)
        h.produce(30)
        h.rlm.run_once(h.tp)
        assert rsm.failed
        assert [_state(e) for e in rlmm.events] == [
            S.COPY_SEGMENT_STARTED,
            S.DELETE_SEGMENT_STARTED,
            S.DELETE_SEGMENT_FINISHED,
        ]
        assert {e.broker_leader_epoch for e in rlmm.events} == {6}
    finally:
        h.close()


def test_the_tiered_cleaner_publishes_under_the_cleaning_leaders_epoch(tmp_path: Path) -> None:
    """A cleaned segment's add and COPY_SEGMENT_FINISHED carry the epoch the round ran under
    (``leader_epoch`` of ``TieredCleaner.clean``), not the epochs of its records."""
    clock = Clock()
    log = open_log(
        tmp_path / "log" / "topic-0",
        clock,
        **{"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01},
    )
    rsm = open_rsm(tmp_path / "remote")
    rlmm = RecordingRlmm()
    rlmm.configure({"dir": str(tmp_path / "rlmm")})
    rlmm.on_partition_leadership_changes({TIP}, set())
    try:
        for i in range(30):
            records = [Record(j, clock.now + i, b"k%d" % (j % 2), b"v%d" % i) for j in range(3)]
            log.append_as_leader(build_batch(records), 0)
            log.roll()
        tier(log, rsm, rlmm)
        tiered = len(rlmm.events)
        log.assign_epoch_start_offset(9, log.log_end_offset)
        spec = StorageSpec.of("local", {"dir": str(tmp_path / "remote")})
        register_open(spec, rsm)
        cleaner = TieredCleaner(rlmm, rsm, spec, broker_id=0, scratch=str(tmp_path / "scratch"))
        result = cleaner.clean(
            log,
            TIP,
            leader_epoch=9,
            checkpoint=None,
            now_ms=clock.now,
            force=True,
            engine=PythonEngine(),
        )
        assert result.cleaned
        published = rlmm.events[tiered:]
        assert {_state(e) for e in published} == {S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED}
        assert {e.broker_leader_epoch for e in published} == {9}
        adds = [e for e in published if isinstance(e, RemoteLogSegmentMetadata)]
        assert adds and all(set(e.segment_leader_epochs) == {0} for e in adds)
    finally:
        log.close()
        rlmm.close()
