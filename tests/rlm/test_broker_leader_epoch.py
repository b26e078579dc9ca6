"""Every metadata event the RemoteLogManager publishes carries the publishing leader's epoch.

KAFKA-20033's compacted RLMM keys its records by ``topicId:partition:endOffset:brokerLeaderEpoch``,
so the RLM must say under which leader epoch it publishes each event
(``broker_leader_epoch``): the copy task's add and COPY_SEGMENT_FINISHED update, the expiration
task's DELETE_SEGMENT_STARTED/_FINISHED, and the deletions of ``stop_partitions(...,
delete_remote=True)``. The epoch is the leader's current one (its log's latest epoch), not the
epochs of the records in the segment: after a leadership change the new leader's events carry
its epoch even for a segment written entirely under the old one.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager
from tierlog.spi import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)

from ._harness import Harness

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
