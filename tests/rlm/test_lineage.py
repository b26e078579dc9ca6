"""Leader-epoch lineage and the offsets derived from remote metadata (``tierlog.rlm.lineage``).

Cases are ported from Kafka's ``RemoteLogManagerTest`` (named where ported) and KAFKA-FACTS 6.1
items 8 and 11; segment metadata lives in a real embedded RLMM, epochs in a real
``LeaderEpochFileCache``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tierlog.log.leader_epoch_cache import LeaderEpochFileCache
from tierlog.metadata.embedded import NUM_PARTITIONS_CONFIG, EmbeddedRemoteLogMetadataManager
from tierlog.rlm.lineage import (
    build_filtered_leader_epoch_map,
    find_highest_remote_offset,
    find_log_start_offset,
    is_remote_segment_within_leader_epochs,
    next_segment_with_txn_index,
    segment_epochs_all_below,
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
STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
_PATH = (STARTED, FINISHED, DELETE_STARTED, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED)


class RecordingRLMM(EmbeddedRemoteLogMetadataManager):
    """The embedded RLMM, remembering the ``next_segment_with_txn_index`` calls it answers."""

    def __init__(self) -> None:
        super().__init__()
        self.txn_calls: list[tuple[int, int]] = []

    def next_segment_with_txn_index(
        self, topic_id_partition: TopicIdPartition, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        self.txn_calls.append((epoch, offset))
        return super().next_segment_with_txn_index(topic_id_partition, epoch, offset)


@pytest.fixture
def tip() -> TopicIdPartition:
    return TopicIdPartition(Uuid.random(), "Leader", 0)


@pytest.fixture
def rlmm(tmp_path: Path, tip: TopicIdPartition) -> Iterator[RecordingRLMM]:
    manager = RecordingRLMM()
    manager.configure({"dir": str(tmp_path / "rlmm"), NUM_PARTITIONS_CONFIG: "1"})
    manager.on_partition_leadership_changes({tip}, set())
    yield manager
    manager.close()


def seg(
    tip: TopicIdPartition, start: int, end: int, epochs: dict[int, int], **kw: object
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(tip),
        start,
        end,
        NOW,
        0,
        NOW,
        1024,
        epochs,
        **kw,  # type: ignore[arg-type]
    )


def put(
    rlmm: EmbeddedRemoteLogMetadataManager,
    segment: RemoteLogSegmentMetadata,
    state: RemoteLogSegmentState = FINISHED,
) -> RemoteLogSegmentMetadata:
    """Add ``segment`` and walk it through the lifecycle up to ``state``."""
    rlmm.add_remote_log_segment_metadata(segment).result()
    current = segment
    for step in _PATH[1 : _PATH.index(state) + 1]:
        update = RemoteLogSegmentMetadataUpdate(segment.remote_log_segment_id, NOW, None, step, 0)
        rlmm.update_remote_log_segment_metadata(update).result()
        current = current.create_with_updates(update)
    return current


def cache(entries: dict[int, int]) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(None, entries.items())


# build_filtered_leader_epoch_map -----------------------------------------------------------------
def test_filtered_map_drops_epochs_without_records() -> None:
    """RemoteLogManagerTest.testBuildFilteredLeaderEpochMap (KAFKA-FACTS 5.3 example)."""
    epochs = {0: 0, 1: 0, 2: 0, 3: 30, 4: 40, 5: 60, 6: 60, 7: 70, 8: 70}
    filtered = build_filtered_leader_epoch_map(epochs)
    assert filtered == {2: 0, 3: 30, 4: 40, 6: 60, 8: 70}
    assert list(filtered) == [2, 3, 4, 6, 8]
    assert build_filtered_leader_epoch_map({0: 0, 1: 0, 2: 0}) == {2: 0}


def test_filtered_map_keeps_the_last_epoch_and_sorts() -> None:
    assert build_filtered_leader_epoch_map({}) == {}
    assert build_filtered_leader_epoch_map({7: 70}) == {7: 70}
    # Given out of order, the result is still ascending by epoch (a NavigableMap in Kafka).
    filtered = build_filtered_leader_epoch_map({3: 30, 1: 10, 2: 10})
    assert list(filtered.items()) == [(2, 10), (3, 30)]


# is_remote_segment_within_leader_epochs -----------------------------------------------------------
LINEAGE = {0: 0, 1: 10, 2: 20, 3: 30, 4: 40, 5: 50, 7: 70}


@pytest.mark.parametrize(
    ("start", "end", "epochs", "expected"),
    [
        (15, 35, {1: 15, 2: 20, 3: 30}, True),  # several epochs within the lineage
        (15, 19, {1: 15}, True),  # a single epoch
        (0, 5, {0: 0}, True),  # starts where the lineage's first epoch starts
        (70, 75, {7: 70}, True),  # starts where the lineage's last epoch starts
        (15, 29, {1: 15, 2: 20}, True),  # ends where epoch 2 ends
        (55, 85, {5: 55, 6: 60, 7: 70}, False),  # epoch 6 is not in the lineage
        (15, 45, {1: 15, 2: 20, 4: 40}, False),  # epoch 3 of the lineage is missing
        (15, 95, LINEAGE, False),  # ends past the log end offset
        (15, 90, LINEAGE, False),  # ends at the log end offset
        (5, 25, {1: 5, 2: 20}, False),  # epoch 1 starts before its lineage start
        (15, 35, {1: 15, 2: 20}, False),  # ends after epoch 2 ends
    ],
)
def test_remote_segment_within_leader_epochs(
    tip: TopicIdPartition, start: int, end: int, epochs: dict[int, int], expected: bool
) -> None:
    """RemoteLogManagerTest.testRemoteSegmentWithinLeaderEpochs (KAFKA-FACTS 6.1 item 8)."""
    segment = seg(tip, start, end, epochs)
    assert is_remote_segment_within_leader_epochs(segment, 90, LINEAGE) is expected


@pytest.mark.parametrize(
    ("start", "end", "epochs", "expected"),
    [
        # Copied by an older leader before the log start moved to 51: epoch 5 is ignored and
        # epoch 7 may start before its (truncated) lineage start because it is the first.
        (14, 150, {5: 14, 7: 15, 9: 100}, True),
        (2, 7, {2: 5, 3: 6}, False),  # entirely below the lineage
        (15, 250, {7: 15, 9: 100, 10: 200}, False),  # epoch 10 is beyond the lineage
        (75, 100, {8: 75}, False),  # epoch 8 is not in the lineage
        (15, 150, {7: 15, 9: 101}, False),  # epoch 9 starts elsewhere
        (99, 150, {9: 99}, False),  # epoch 9 (not the first) starts before its start
    ],
)
def test_remote_segment_within_leader_epochs_for_overlapping_segments(
    tip: TopicIdPartition, start: int, end: int, epochs: dict[int, int], expected: bool
) -> None:
    """RemoteLogManagerTest.testRemoteSegmentWithinLeaderEpochsForOverlappingSegments."""
    lineage = {7: 51, 9: 100}
    segment = seg(tip, start, end, epochs)
    assert is_remote_segment_within_leader_epochs(segment, 210, lineage) is expected


def test_segment_epochs_without_records_are_filtered_before_the_check(
    tip: TopicIdPartition,
) -> None:
    # Epoch 1 holds no record in the segment ({1:15, 2:15}); once filtered, the segment is
    # {2:15} and its first epoch 2 starts before the lineage's epoch 2 start (20).
    assert not is_remote_segment_within_leader_epochs(seg(tip, 15, 25, {1: 15, 2: 15}), 90, LINEAGE)
    # Filtered to {1:15, 2:20}: within the lineage.
    assert is_remote_segment_within_leader_epochs(
        seg(tip, 15, 29, {0: 15, 1: 15, 2: 20}), 90, LINEAGE
    )


def test_a_segment_must_end_before_the_next_lineage_epoch_starts(tip: TopicIdPartition) -> None:
    assert is_remote_segment_within_leader_epochs(seg(tip, 15, 29, {1: 15, 2: 20}), 90, LINEAGE)
    assert not is_remote_segment_within_leader_epochs(seg(tip, 15, 30, {1: 15, 2: 20}), 90, LINEAGE)


def test_an_empty_lineage_validates_nothing(tip: TopicIdPartition) -> None:
    assert not is_remote_segment_within_leader_epochs(seg(tip, 0, 5, {0: 0}), 90, {})


def test_segment_epochs_all_below(tip: TopicIdPartition) -> None:
    segment = seg(tip, 0, 99, {0: 0, 2: 50})
    assert segment_epochs_all_below(segment, 3)
    assert not segment_epochs_all_below(segment, 2)


# find_highest_remote_offset -----------------------------------------------------------------------
def test_find_highest_remote_offset_on_empty_remote_storage(
    rlmm: RecordingRLMM, tip: TopicIdPartition
) -> None:
    """RemoteLogManagerTest.testFindHighestRemoteOffsetOnEmptyRemoteStorage."""
    assert find_highest_remote_offset(rlmm, tip, cache({0: 0, 1: 500}), 600) == (-1, -1)
    assert find_highest_remote_offset(rlmm, tip, cache({}), 600) == (-1, -1)


def test_find_highest_remote_offset(rlmm: RecordingRLMM, tip: TopicIdPartition) -> None:
    """RemoteLogManagerTest.testFindHighestRemoteOffset: only epoch 0 has a remote highest
    offset (200), below where the leader's epoch 0 ends (500)."""
    put(rlmm, seg(tip, 0, 200, {0: 0}))
    assert rlmm.highest_offset_for_epoch(tip, 1) is None
    assert find_highest_remote_offset(rlmm, tip, cache({0: 0, 1: 500}), 600) == (200, 0)


def test_find_highest_remote_offset_with_unclean_leader_election(
    rlmm: RecordingRLMM, tip: TopicIdPartition
) -> None:
    """RemoteLogManagerTest.testFindHighestRemoteOffsetWithUncleanLeaderElection: remote epoch 0
    reaches 200 but this leader's epoch 0 ends at 149, so copying resumes at 150."""
    put(rlmm, seg(tip, 0, 200, {0: 0}))
    assert find_highest_remote_offset(rlmm, tip, cache({0: 0, 1: 150, 2: 300}), 400) == (149, 0)


def test_find_highest_remote_offset_at_the_end_of_the_leaders_epoch(
    rlmm: RecordingRLMM, tip: TopicIdPartition
) -> None:
    # Remote epoch 0 reaches 200, exactly where this leader's epoch 1 starts: resume at 200.
    put(rlmm, seg(tip, 0, 200, {0: 0}))
    assert find_highest_remote_offset(rlmm, tip, cache({0: 0, 1: 200}), 300) == (199, 0)
    assert find_highest_remote_offset(rlmm, tip, cache({0: 0, 1: 201}), 300) == (200, 0)


def test_find_highest_remote_offset_uses_the_latest_epoch_first(
    rlmm: RecordingRLMM, tip: TopicIdPartition
) -> None:
    put(rlmm, seg(tip, 0, 99, {0: 0}))
    put(rlmm, seg(tip, 100, 150, {1: 100}))
    assert find_highest_remote_offset(rlmm, tip, cache({0: 0, 1: 100}), 200) == (150, 1)
    # The latest epoch ends at the log end offset: a remote copy past it (this replica was
    # truncated) is capped to the local log.
    assert find_highest_remote_offset(rlmm, tip, cache({0: 0, 1: 100}), 120) == (119, 1)


def test_find_highest_remote_offset_ignores_copies_in_progress(
    rlmm: RecordingRLMM, tip: TopicIdPartition
) -> None:
    put(rlmm, seg(tip, 0, 200, {0: 0}), STARTED)
    assert find_highest_remote_offset(rlmm, tip, cache({0: 0}), 300) == (-1, -1)


# find_log_start_offset ----------------------------------------------------------------------------
def test_find_log_start_offset(rlmm: RecordingRLMM, tip: TopicIdPartition) -> None:
    """RemoteLogManagerTest.testFindLogStartOffset: epoch 0 has no remote segment; the first one
    of epoch 1 starts at 500."""
    epochs = cache({0: 0, 1: 250, 2: 550})
    for start, end in ((500, 539), (540, 700)):
        segment_epochs = dict(epochs.epoch_entries_in_range(start, end))
        put(rlmm, seg(tip, start, end, segment_epochs))
    assert find_log_start_offset(rlmm, tip, epochs, 250) == 500


def test_find_log_start_offset_falls_back_to_the_local_log_start(
    rlmm: RecordingRLMM, tip: TopicIdPartition
) -> None:
    """RemoteLogManagerTest.testFindLogStartOffsetFallbackToLocalLogStartOffsetWhenRemoteIsEmpty."""
    assert find_log_start_offset(rlmm, tip, cache({1: 250, 2: 550}), 250) == 250
    assert find_log_start_offset(rlmm, tip, cache({}), 17) == 17


def test_find_log_start_offset_in_a_later_epoch(rlmm: RecordingRLMM, tip: TopicIdPartition) -> None:
    """RemoteLogManagerTest.testLogStartOffsetUpdatedOnStartup: only epoch 2 has a segment."""
    put(rlmm, seg(tip, 600, 700, {2: 600}))
    assert find_log_start_offset(rlmm, tip, cache({1: 250, 2: 550}), 250) == 600


def test_find_log_start_offset_counts_any_listed_state(
    rlmm: RecordingRLMM, tip: TopicIdPartition
) -> None:
    # Kafka takes the first listed segment, whatever its state.
    put(rlmm, seg(tip, 300, 399, {1: 300}), STARTED)
    assert find_log_start_offset(rlmm, tip, cache({1: 250}), 250) == 300


# next_segment_with_txn_index ----------------------------------------------------------------------
TOTAL_EPOCHS = {0: 0, 1: 100, 2: 200}


def test_find_next_segment_with_txn_index(rlmm: RecordingRLMM, tip: TopicIdPartition) -> None:
    """RemoteLogManagerTest.testFindNextSegmentWithTxnIndex: offset 10 is in epoch 0, whose
    segment answers at once."""
    wanted = put(rlmm, seg(tip, 10, 110, {0: 10}, txn_idx_empty=False))
    found = next_segment_with_txn_index(rlmm, tip, cache(TOTAL_EPOCHS), 10)
    assert found is not None
    assert found.remote_log_segment_id == wanted.remote_log_segment_id
    assert rlmm.txn_calls == [(0, 10)]


def test_find_next_segment_with_txn_index_traverses_next_epoch(
    rlmm: RecordingRLMM, tip: TopicIdPartition
) -> None:
    """RemoteLogManagerTest.testFindNextSegmentWithTxnIndexTraversesNextEpoch (KAFKA-FACTS 6.1
    item 11): epochs 0 and 1 have nothing, epoch 2 has the segment."""
    wanted = put(rlmm, seg(tip, 200, 300, {2: 200}, txn_idx_empty=False))
    found = next_segment_with_txn_index(rlmm, tip, cache(TOTAL_EPOCHS), 10)
    assert found is not None
    assert found.remote_log_segment_id == wanted.remote_log_segment_id
    assert rlmm.txn_calls == [(0, 10), (1, 100), (2, 200)]


def test_find_next_segment_with_txn_index_skips_segments_without_aborted_txns(
    rlmm: RecordingRLMM, tip: TopicIdPartition
) -> None:
    put(rlmm, seg(tip, 0, 99, {0: 0}, txn_idx_empty=True))
    put(rlmm, seg(tip, 100, 199, {1: 100}, txn_idx_empty=True))
    wanted = put(rlmm, seg(tip, 200, 299, {2: 200}, txn_idx_empty=False))
    found = next_segment_with_txn_index(rlmm, tip, cache(TOTAL_EPOCHS), 150)
    assert found is not None
    assert found.remote_log_segment_id == wanted.remote_log_segment_id
    # Offset 150 is in epoch 1: epoch 0 is not asked, and each epoch is asked from
    # max(its start, offset).
    assert rlmm.txn_calls == [(1, 150), (2, 200)]


def test_find_next_segment_with_txn_index_none(rlmm: RecordingRLMM, tip: TopicIdPartition) -> None:
    put(rlmm, seg(tip, 0, 99, {0: 0}, txn_idx_empty=True))
    assert next_segment_with_txn_index(rlmm, tip, cache(TOTAL_EPOCHS), 10) is None
    assert rlmm.txn_calls == [(0, 10), (1, 100), (2, 200)]
    rlmm.txn_calls.clear()
    # Below every epoch: no epoch for the offset, nothing asked.
    assert next_segment_with_txn_index(rlmm, tip, cache({1: 100}), 50) is None
    assert rlmm.txn_calls == []
