"""The leader epoch cache: ports of Kafka's ``LeaderEpochFileCacheTest`` and the RLM's views.

Each Kafka test keeps its name (snake_case) and its inputs and expected outputs; the cache is
backed by a real ``leader-epoch-checkpoint`` file, checked byte for byte where Kafka checks the
file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.log.checkpoint import (
    EpochEntry,
    encode_leader_epoch_checkpoint,
    parse_leader_epoch_checkpoint,
    read_leader_epoch_checkpoint,
)
from tierlog.log.leader_epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochFileCache,
)
from tierlog.spi import InvalidArgumentError

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return tmp_path / "leader-epoch-checkpoint"


@pytest.fixture
def cache(checkpoint: Path) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(checkpoint, sync=False)


def entries(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(e, o) for e, o in pairs]


def test_previous_epoch(cache: LeaderEpochFileCache) -> None:
    assert cache.previous_epoch() is None
    cache.assign(2, 10)
    assert cache.previous_epoch() is None
    cache.assign(4, 15)
    assert cache.previous_epoch() == 2
    cache.assign(10, 20)
    assert cache.previous_epoch() == 4
    cache.truncate_from_end(18)
    assert cache.previous_epoch() == 2


def test_should_add_epoch_and_message_offset_to_cache(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 10)
    assert cache.latest_epoch() == 2
    assert cache.epoch_entries()[0] == EpochEntry(2, 10)
    assert cache.end_offset_for(2, 11) == (2, 11)


def test_should_return_log_end_offset_if_latest_epoch_requested(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(2, 11)
    cache.assign(2, 12)
    assert cache.end_offset_for(2, 14) == (2, 14)


def test_should_return_undefined_offset_if_undefined_epoch_requested(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(2, 11)
    cache.assign(3, 12)
    assert cache.end_offset_for(UNDEFINED_EPOCH, 0) == UNDEFINED


def test_should_not_overwrite_log_end_offset_for_a_leader_epoch_once_assigned(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(2, 9)
    cache.assign(2, 10)
    assert cache.epoch_entries() == entries((2, 9))


def test_should_enforce_monotonically_increasing_start_offsets(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(2, 9)
    cache.assign(3, 9)
    assert cache.epoch_entries() == entries((3, 9))


def test_should_not_overwrite_offset_for_a_leader_epoch_once_assigned(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(2, 6)
    cache.assign(2, 10)
    assert cache.epoch_entries()[0].start_offset == 6


def test_should_return_unsupported_if_no_epoch_recorded(cache: LeaderEpochFileCache) -> None:
    assert cache.end_offset_for(0, 0) == UNDEFINED
    assert cache.end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED


def test_should_return_first_epoch_if_requested_epoch_less_than_first_epoch(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(5, 11)
    cache.assign(6, 12)
    cache.assign(7, 13)
    assert cache.end_offset_for(4, 0) == (4, 11)


def test_should_truncate_if_matching_epoch_but_earlier_starting_offset(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(5, 11)
    cache.assign(6, 12)
    cache.assign(7, 13)
    cache.assign(7, 12)  # epoch 7 starts at an earlier offset
    assert cache.end_offset_for(5, 0) == (5, 12)
    assert cache.end_offset_for(6, 0) == (5, 12)


def test_should_get_first_offset_of_subsequent_epoch_when_offset_requested_for_previous(
    cache: LeaderEpochFileCache,
) -> None:
    for epoch, offset in [(1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16)]:
        cache.assign(epoch, offset)
    assert cache.end_offset_for(2, 17) == (2, 15)


def test_should_return_next_available_epoch_if_no_exact_epoch(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(0, 10)
    cache.assign(2, 13)
    cache.assign(4, 17)
    assert cache.end_offset_for(1, 0) == (0, 13)
    assert cache.end_offset_for(2, 0) == (2, 17)
    assert cache.end_offset_for(3, 0) == (2, 17)


def test_should_not_update_epoch_and_start_offset_if_it_did_not_change(
    cache: LeaderEpochFileCache,
) -> None:
    assert cache.assign(2, 6)
    assert not cache.assign(2, 7)
    assert cache.epoch_entries() == entries((2, 6))


def test_should_return_invalid_offset_if_epoch_not_tracked(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 100)
    assert cache.end_offset_for(3, 100) == UNDEFINED


def test_should_support_epochs_that_do_not_start_from_zero(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 6)
    assert cache.end_offset_for(2, 7) == (2, 7)
    assert cache.epoch_entries() == entries((2, 6))


def test_should_persist_epochs_between_instances(checkpoint: Path) -> None:
    first = LeaderEpochFileCache(checkpoint, sync=False)
    first.assign(2, 6)
    second = LeaderEpochFileCache(checkpoint)
    assert second.epoch_entries() == entries((2, 6))
    assert checkpoint.read_bytes() == b"0\n1\n2 6\n"


def test_should_enforce_monotonically_increasing_epochs(cache: LeaderEpochFileCache) -> None:
    cache.assign(1, 5)
    cache.assign(2, 6)
    # An epoch lower than the latest is neither ignored nor refused: later epochs are removed.
    cache.assign(1, 7)
    assert cache.latest_epoch() == 1
    assert cache.end_offset_for(1, 8) == (1, 8)
    assert cache.end_offset_for(2, 8) == UNDEFINED
    assert cache.epoch_entries()[0] == EpochEntry(1, 7)


def test_should_enforce_offsets_increase_monotonically(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 6)
    cache.assign(3, 5)
    assert cache.epoch_entries()[0] == EpochEntry(3, 5)


def test_should_increase_and_track_epochs_as_leaders_change_many_times(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(0, 0)
    cache.assign(1, 0)
    assert cache.latest_epoch() == 1
    assert cache.end_offset_for(1, 0) == (1, 0)
    assert cache.end_offset_for(0, 0) == (0, 0)
    assert cache.end_offset_for(1, 5) == (1, 5)
    assert cache.end_offset_for(0, 5) == (0, 0)
    cache.assign(2, 5)
    assert cache.end_offset_for(2, 10) == (2, 10)
    assert cache.end_offset_for(1, 10) == (1, 5)
    assert cache.end_offset_for(0, 10) == (0, 0)


def test_should_increase_and_track_epochs_as_follower_receives_many_messages(
    cache: LeaderEpochFileCache,
) -> None:
    for offset in range(3):
        cache.assign(0, offset)
    assert cache.latest_epoch() == 0
    assert cache.end_offset_for(0, 3) == (0, 3)
    for offset in range(3, 6):
        cache.assign(1, offset)
    assert cache.end_offset_for(1, 6) == (1, 6)
    for offset in range(6, 9):
        cache.assign(2, offset)
    assert cache.latest_epoch() == 2
    assert cache.end_offset_for(2, 9) == (2, 9)
    assert cache.end_offset_for(0, 9) == (0, 3)
    assert cache.end_offset_for(1, 9) == (1, 6)


@pytest.fixture
def three(cache: LeaderEpochFileCache) -> LeaderEpochFileCache:
    cache.assign(2, 6)
    cache.assign(3, 8)
    cache.assign(4, 11)
    return cache


def test_should_drop_entries_on_epoch_boundary_when_removing_latest(
    three: LeaderEpochFileCache,
) -> None:
    three.truncate_from_end(8)
    assert three.epoch_entries() == entries((2, 6))


def test_should_preserve_reset_offset_on_clear_earliest_if_one_exists(
    three: LeaderEpochFileCache,
) -> None:
    three.truncate_from_start(8)
    assert three.epoch_entries() == entries((3, 8), (4, 11))


def test_should_update_saved_offset_when_offset_to_clear_to_is_between_epochs(
    three: LeaderEpochFileCache,
) -> None:
    three.truncate_from_start(9)
    assert three.epoch_entries() == entries((3, 9), (4, 11))


@pytest.mark.parametrize("offset", [1, 6, UNDEFINED_EPOCH_OFFSET])
def test_should_not_clear_anything_if_offset_too_early(
    three: LeaderEpochFileCache, offset: int
) -> None:
    three.truncate_from_start(offset)
    assert three.epoch_entries() == entries((2, 6), (3, 8), (4, 11))


def test_should_retain_latest_epoch_on_clear_all_earliest(three: LeaderEpochFileCache) -> None:
    three.truncate_from_start(11)
    assert three.epoch_entries() == entries((4, 11))


def test_should_update_offset_between_epoch_boundaries_on_clear_earliest2(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(0, 0)
    cache.assign(1, 7)
    cache.assign(2, 10)
    cache.truncate_from_start(5)
    assert cache.epoch_entries() == entries((0, 5), (1, 7), (2, 10))


def test_should_retain_latest_epoch_on_clear_all_earliest_and_update_its_offset(
    three: LeaderEpochFileCache,
) -> None:
    three.truncate_from_start(15)
    assert three.epoch_entries() == entries((4, 15))


def test_should_drop_entries_between_epoch_boundary_when_removing_newest(
    three: LeaderEpochFileCache,
) -> None:
    three.truncate_from_end(9)
    assert three.latest_epoch() == 3
    assert three.epoch_entries() == entries((2, 6), (3, 8))


def test_should_not_reset_epoch_history_tail_if_undefined_passed(
    three: LeaderEpochFileCache,
) -> None:
    three.truncate_from_end(UNDEFINED_EPOCH_OFFSET)
    assert len(three.epoch_entries()) == 3


def test_should_clear_all_entries(three: LeaderEpochFileCache, checkpoint: Path) -> None:
    three.clear_and_flush()
    assert three.epoch_entries() == []
    assert read_leader_epoch_checkpoint(checkpoint) == []


def test_empty_cache(cache: LeaderEpochFileCache) -> None:
    assert cache.latest_epoch() is None
    assert cache.end_offset_for(7, 0) == UNDEFINED
    assert cache.truncate_from_start(7) == []
    assert cache.truncate_from_end(7) == []
    assert cache.epoch_for_offset(0) is None


def test_find_previous_epoch_and_entry(cache: LeaderEpochFileCache) -> None:
    assert cache.previous_epoch(2) is None
    assert cache.previous_entry(2) is None
    cache.assign(2, 10)
    assert cache.previous_epoch(2) is None
    cache.assign(4, 15)
    assert cache.previous_epoch(4) == 2
    assert cache.previous_entry(4) == EpochEntry(2, 10)
    cache.assign(10, 20)
    assert cache.previous_epoch(10) == 4
    assert cache.previous_entry(10) == EpochEntry(4, 15)
    cache.truncate_from_end(18)
    latest = cache.latest_epoch()
    assert latest is not None
    assert cache.previous_epoch(latest) == 2
    assert cache.previous_entry(latest) == EpochEntry(2, 10)


def test_find_next_epoch(cache: LeaderEpochFileCache) -> None:
    cache.assign(0, 0)
    cache.assign(1, 100)
    cache.assign(2, 200)
    assert [cache.next_epoch(e) for e in (-1, 0, 1, 2, 100)] == [0, 1, 2, None, None]


def test_get_epoch_entry(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 100)
    cache.assign(3, 500)
    cache.assign(5, 1000)
    assert cache.epoch_entry(3) == EpochEntry(3, 500)
    assert cache.epoch_entry(4) is None
    assert cache.earliest_entry() == EpochEntry(2, 100)
    assert cache.latest_entry() == EpochEntry(5, 1000)


def test_should_fetch_epoch_for_given_offset(cache: LeaderEpochFileCache) -> None:
    cache.assign(0, 10)
    cache.assign(1, 20)
    cache.assign(5, 30)
    assert cache.epoch_for_offset(25) == 1
    assert cache.epoch_for_offset(20) == 1
    assert cache.epoch_for_offset(30) == 5
    assert cache.epoch_for_offset(50) == 5
    assert cache.epoch_for_offset(5) is None


def test_should_write_checkpoint_on_truncation(
    three: LeaderEpochFileCache, checkpoint: Path
) -> None:
    three.truncate_from_end(11)
    three.truncate_from_start(8)
    assert read_leader_epoch_checkpoint(checkpoint) == entries((3, 8))


def test_negative_epoch_or_offset_is_refused(cache: LeaderEpochFileCache) -> None:
    with pytest.raises(InvalidArgumentError):
        cache.assign(-1, 0)
    with pytest.raises(InvalidArgumentError):
        cache.assign(0, -5)


def test_a_non_monotonic_checkpoint_is_repaired_on_load(checkpoint: Path) -> None:
    # Entries are assigned one by one on load, as in Kafka.
    checkpoint.write_bytes(b"0\n3\n1 0\n3 10\n2 20\n")
    assert LeaderEpochFileCache(checkpoint).epoch_entries() == entries((1, 0), (2, 20))


# The RLM's views ------------------------------------------------------------------------------
def test_epoch_entries_in_range_clamps_and_cuts(three: LeaderEpochFileCache) -> None:
    # (2,6) (3,8) (4,11): a segment [7, 11) spans epochs 2 (from 7) and 3.
    assert three.epoch_entries_in_range(7, 11) == entries((2, 7), (3, 8))
    # What the RLM ships as the segment's leader epoch index: everything up to the segment end.
    assert three.epoch_entries_in_range(-1, 11) == entries((2, 6), (3, 8))
    assert three.epoch_entries_in_range(8, 100) == entries((3, 8), (4, 11))
    assert three.epoch_entries_in_range(0, 6) == []
    # The cache itself is untouched.
    assert three.epoch_entries() == entries((2, 6), (3, 8), (4, 11))


def test_segment_view_is_in_memory(three: LeaderEpochFileCache, checkpoint: Path) -> None:
    before = checkpoint.read_bytes()
    view = three.segment_view(9, 12)
    assert view.path is None
    assert view.epoch_entries() == entries((3, 9), (4, 11))
    view.truncate_from_end(11)
    assert checkpoint.read_bytes() == before
    assert view.to_checkpoint_bytes() == b"0\n1\n3 9\n"


def test_with_checkpoint_moves_the_file(three: LeaderEpochFileCache, tmp_path: Path) -> None:
    moved = three.with_checkpoint(tmp_path / "other")
    moved.assign(5, 20)
    assert read_leader_epoch_checkpoint(tmp_path / "other") == entries(
        (2, 6), (3, 8), (4, 11), (5, 20)
    )


def test_assign_all_writes_once(cache: LeaderEpochFileCache, checkpoint: Path) -> None:
    cache.assign_all([(0, 0), (1, 5), (3, 9)])
    assert checkpoint.read_bytes() == encode_leader_epoch_checkpoint(
        entries((0, 0), (1, 5), (3, 9))
    )


# A model check: the cache against a plain list -------------------------------------------------
def _model_assign(model: list[tuple[int, int]], epoch: int, offset: int) -> None:
    if model and model[-1][0] == epoch and offset >= model[-1][1]:
        return
    while model and (model[-1][0] >= epoch or model[-1][1] >= offset):
        model.pop()
    model.append((epoch, offset))


ops = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 12), st.integers(0, 60)),
        st.tuples(st.just("end"), st.integers(-1, 60), st.just(0)),
        st.tuples(st.just("start"), st.integers(-1, 60), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_cache_matches_a_model_and_its_file(
    tmp_path_factory: pytest.TempPathFactory, ops_: list[tuple[str, int, int]]
) -> None:
    path = tmp_path_factory.mktemp("epochs") / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(path, sync=False)
    model: list[tuple[int, int]] = []
    for op, a, b in ops_:
        if op == "assign":
            cache.assign(a, b)
            _model_assign(model, a, b)
        elif op == "end":
            cache.truncate_from_end(a)
            if a >= 0:
                model = [(e, o) for e, o in model if o < a]
        else:
            cache.truncate_from_start(a)
            before = [(e, o) for e, o in model if o <= a]
            if before:
                model = [(before[-1][0], a)] + [(e, o) for e, o in model if o > a]
        assert cache.epoch_entries() == [EpochEntry(e, o) for e, o in model]
        epochs = [e for e, _ in model]
        offsets = [o for _, o in model]
        assert epochs == sorted(set(epochs)) and offsets == sorted(set(offsets))
    if path.exists():
        assert parse_leader_epoch_checkpoint(path.read_bytes()) == cache.epoch_entries()
