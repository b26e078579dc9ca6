"""RemoteLogMetadataCache: Kafka's semantics, and the compact layout that must not change them.

The scenario tests carry Kafka's own inputs and expected outputs (KAFKA-FACTS 6.1 items 1-5,
RemoteLogMetadataCacheTest, RemoteLogLeaderEpochStateTest, RemoteLogSegmentLifecycleTest); the
state machine at the end drives the cache and a naive model written line by line from Kafka's
Java source with the same events, and compares every read after every event.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import tierlog.metadata.cache as cache_module
from tierlog.metadata.cache import RemoteLogMetadataCache
from tierlog.spi import (
    CustomMetadata,
    InvalidArgumentError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteResourceNotFoundException,
    TopicIdPartition,
    Uuid,
)

S = RemoteLogSegmentState
TIP = TopicIdPartition(Uuid(0x5EED, 0x0405), "foo", 0)
OTHER_TIP = TopicIdPartition(Uuid(0x5EED, 0x0406), "bar", 0)
SEG_SIZE = 1048576
_ids = itertools.count(1)


def new_id(tip: TopicIdPartition = TIP) -> RemoteLogSegmentId:
    return RemoteLogSegmentId(tip, Uuid(0xC0FFEE, next(_ids)))


def seg(
    start: int,
    end: int,
    epochs: Mapping[int, int],
    size: int = SEG_SIZE,
    *,
    segment_id: RemoteLogSegmentId | None = None,
    txn_idx_empty: bool = False,
    custom: CustomMetadata | None = None,
) -> RemoteLogSegmentMetadata:
    """A COPY_SEGMENT_STARTED segment, as the RLM adds it (broker 0)."""
    return RemoteLogSegmentMetadata(
        segment_id or new_id(),
        start,
        end,
        -1,
        0,
        1000,
        size,
        epochs,
        custom,
        S.COPY_SEGMENT_STARTED,
        txn_idx_empty,
    )


def upd(
    segment: RemoteLogSegmentMetadata | RemoteLogSegmentId,
    state: RemoteLogSegmentState,
    custom: CustomMetadata | None = None,
) -> RemoteLogSegmentMetadataUpdate:
    segment_id = (
        segment.remote_log_segment_id if isinstance(segment, RemoteLogSegmentMetadata) else segment
    )
    return RemoteLogSegmentMetadataUpdate(segment_id, 2000, custom, state, 1)


def move(
    cache: RemoteLogMetadataCache, m: RemoteLogSegmentMetadata, state: RemoteLogSegmentState
) -> RemoteLogSegmentMetadata:
    """Apply an update to ``m`` and return the metadata Kafka would then hold."""
    update = upd(m, state)
    cache.update_remote_log_segment_metadata(update)
    return m.create_with_updates(update)


def add_fin(
    cache: RemoteLogMetadataCache,
    start: int,
    end: int,
    epochs: Mapping[int, int],
    size: int = SEG_SIZE,
    **kwargs: object,
) -> RemoteLogSegmentMetadata:
    m = seg(start, end, epochs, size, **kwargs)  # type: ignore[arg-type]
    cache.add_copy_in_progress_segment(m)
    return move(cache, m, S.COPY_SEGMENT_FINISHED)


def ids(segments: Iterable[RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentId]:
    return [m.remote_log_segment_id for m in segments]


@pytest.fixture
def cache() -> RemoteLogMetadataCache:
    c = RemoteLogMetadataCache(TIP)
    c.mark_initialized()
    return c


# KAFKA-FACTS 6.1 item 1 and RemoteLogMetadataCacheTest ------------------------------------------
def test_drop_event_on_invalid_state_transition(
    cache: RemoteLogMetadataCache, caplog: pytest.LogCaptureFixture
) -> None:
    """testDropEventOnInvalidStateTransition: the 8-step walk on seg(10,100,{5:10})."""
    m = seg(10, 100, {5: 10})
    cache.add_copy_in_progress_segment(m)

    def step(state: RemoteLogSegmentState, expected: RemoteLogSegmentState | None) -> None:
        caplog.clear()
        cache.update_remote_log_segment_metadata(upd(m, state))
        listed = list(cache.list_remote_log_segments(5))
        if expected is None:
            assert listed == []
        else:
            assert [x.state for x in listed] == [expected]
            dropped = expected != state
            assert (
                any(
                    r.levelno == logging.ERROR and "Dropping the event" in r.getMessage()
                    for r in caplog.records
                )
                == dropped
            )

    with caplog.at_level(logging.ERROR, logger="tierlog.metadata.cache"):
        step(S.DELETE_SEGMENT_FINISHED, S.COPY_SEGMENT_STARTED)  # invalid-1
        step(S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_FINISHED)  # valid-2
        step(S.DELETE_SEGMENT_FINISHED, S.COPY_SEGMENT_FINISHED)  # invalid-3
        step(S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED)  # invalid-4
        step(S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED)  # valid-5
        step(S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED)  # invalid-6
        step(S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED)  # invalid-7
        step(S.DELETE_SEGMENT_FINISHED, None)  # valid-8
    assert list(cache.list_all_remote_log_segments()) == []


@pytest.mark.parametrize("initialized", [True, False])
def test_update_of_unknown_segment(initialized: bool) -> None:
    """testCacheUpdateMetadataOnInvalidArgs: RRNFE only once initialized (KAFKA-15632)."""
    cache = RemoteLogMetadataCache(TIP)
    if initialized:
        cache.mark_initialized()
    for state in (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
        update = upd(new_id(), state)
        if initialized:
            with pytest.raises(RemoteResourceNotFoundException, match="No remote log segment"):
                cache.update_remote_log_segment_metadata(update)
        else:
            cache.update_remote_log_segment_metadata(update)
    assert cache.segment_count() == 0


@pytest.mark.parametrize(
    "state", [S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED]
)
def test_add_with_a_state_other_than_started_is_refused(
    cache: RemoteLogMetadataCache, state: RemoteLogSegmentState
) -> None:
    """testCacheAddMetadataOnInvalidArgs."""
    m = seg(0, 100, {0: 0})
    with pytest.raises(InvalidArgumentError, match="should have state as COPY_SEGMENT_STARTED"):
        cache.add_copy_in_progress_segment(m.create_with_updates(upd(m, state)))
    assert cache.segment_count() == 0


def test_update_to_copy_started_raises_only_when_the_transition_is_valid(
    cache: RemoteLogMetadataCache,
) -> None:
    m = seg(0, 100, {0: 0})
    cache.add_copy_in_progress_segment(m)
    with pytest.raises(InvalidArgumentError, match="can not be updated"):
        cache.update_remote_log_segment_metadata(upd(m, S.COPY_SEGMENT_STARTED))
    move(cache, m, S.COPY_SEGMENT_FINISHED)
    cache.update_remote_log_segment_metadata(upd(m, S.COPY_SEGMENT_STARTED))  # dropped
    assert [x.state for x in cache.list_remote_log_segments(0)] == [S.COPY_SEGMENT_FINISHED]


def test_adding_a_known_segment_again(cache: RemoteLogMetadataCache) -> None:
    """Valid while COPY_SEGMENT_STARTED (the metadata is replaced), dropped after."""
    m = seg(0, 100, {0: 0}, 10)
    cache.add_copy_in_progress_segment(m)
    bigger = seg(0, 120, {0: 0}, 30, segment_id=m.remote_log_segment_id)
    cache.add_copy_in_progress_segment(bigger)
    assert list(cache.list_remote_log_segments(0)) == [bigger]
    assert cache.remote_log_size(0) == 30
    finished = move(cache, bigger, S.COPY_SEGMENT_FINISHED)
    cache.add_copy_in_progress_segment(m)  # FINISHED -> STARTED: dropped
    assert list(cache.list_remote_log_segments(0)) == [finished]


class SignallingEvent(threading.Event):
    """An event that tells when a thread starts waiting on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.set()
        return super().wait(timeout)


def test_await_initialized() -> None:
    """A waiter already waiting is woken by ``mark_initialized`` (it is marked once the waiter
    waits, not whenever the main thread gets there first)."""
    cache = RemoteLogMetadataCache(TIP)
    assert not cache.is_initialized()
    assert not cache.await_initialized(0.01)
    event = SignallingEvent()
    cache._initialized = event
    seen = threading.Event()

    def waiter() -> None:
        if cache.await_initialized(60):
            seen.set()

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    assert event.waiting.wait(60)
    cache.mark_initialized()
    thread.join(60)
    assert seen.is_set()
    assert cache.is_initialized()


# KAFKA-FACTS 6.1 item 2: RemoteLogSegmentLifecycleTest.testRemoteLogSegmentLifeCycle -------------
def test_lifecycle_and_epoch_lookup(cache: RemoteLogMetadataCache) -> None:
    s0 = seg(0, 100, {0: 0, 1: 20, 2: 80})
    cache.add_copy_in_progress_segment(s0)
    assert cache.remote_log_segment_metadata(1, 40) is None
    assert [cache.highest_offset_for_epoch(e) for e in range(3)] == [None, None, None]
    s0 = move(cache, s0, S.COPY_SEGMENT_FINISHED)
    s1 = add_fin(cache, 101, 200, {2: 101})
    s2 = add_fin(cache, 201, 300, {2: 201, 3: 240})
    s3 = add_fin(cache, 250, 400, {3: 250, 4: 370})

    expected = {
        (1, 40): s0,
        (2, 110): s1,
        (3, 240): s2,
        (3, 250): s3,
        (4, 375): s3,
        (1, 110): None,
        (4, 401): None,
        (5, 301): None,
    }
    for (epoch, offset), segment in expected.items():
        assert cache.remote_log_segment_metadata(epoch, offset) == segment, (epoch, offset)

    s0 = move(cache, s0, S.DELETE_SEGMENT_STARTED)
    assert cache.remote_log_segment_metadata(0, 10) is None
    move(cache, s0, S.DELETE_SEGMENT_FINISHED)
    assert cache.remote_log_segment_metadata(0, 10) is None

    highest = {0: 19, 1: 79, 2: 239, 3: 369, 4: 400}
    for epoch, offset in highest.items():
        assert cache.highest_offset_for_epoch(epoch) == offset
    assert cache.highest_offset_for_epoch(5) is None


# KAFKA-FACTS 6.1 item 3: visibility per state ---------------------------------------------------
def test_copy_started_segment_is_listed_but_not_readable(cache: RemoteLogMetadataCache) -> None:
    m = seg(0, 50, {0: 0})
    cache.add_copy_in_progress_segment(m)
    assert cache.remote_log_segment_metadata(0, 0) is None
    assert list(cache.list_remote_log_segments(0)) == [m]
    assert list(cache.list_all_remote_log_segments()) == [m]


def test_copy_finished_segment_is_listed_and_readable(cache: RemoteLogMetadataCache) -> None:
    m = add_fin(cache, 101, 200, {0: 101})
    assert cache.remote_log_segment_metadata(0, 150) == m
    assert list(cache.list_remote_log_segments(0)) == [m]
    assert list(cache.list_all_remote_log_segments()) == [m]


def test_delete_started_then_finished_segment(cache: RemoteLogMetadataCache) -> None:
    m = seg(201, 300, {0: 201})
    cache.add_copy_in_progress_segment(m)
    m = move(cache, m, S.COPY_SEGMENT_FINISHED)
    m = move(cache, m, S.DELETE_SEGMENT_STARTED)
    assert cache.remote_log_segment_metadata(0, 250) is None
    assert list(cache.list_remote_log_segments(0)) == [m]
    assert list(cache.list_all_remote_log_segments()) == [m]
    move(cache, m, S.DELETE_SEGMENT_FINISHED)
    assert list(cache.list_remote_log_segments(0)) == []
    assert list(cache.list_all_remote_log_segments()) == []
    assert cache.remote_log_size(0) == 0
    assert cache.segment_count() == 0


def test_cache_list_segments(cache: RemoteLogMetadataCache) -> None:
    """testCacheListSegments."""
    s0 = add_fin(cache, 0, 100, {0: 0})
    s1 = add_fin(cache, 101, 200, {0: 101})
    s2 = add_fin(cache, 201, 400, {0: 201, 1: 301})
    assert list(cache.list_remote_log_segments(0)) == [s0, s1, s2]
    assert sorted(ids(cache.list_all_remote_log_segments()), key=str) == sorted(
        ids([s0, s1, s2]), key=str
    )
    assert list(cache.list_remote_log_segments(1)) == [s2]


# KAFKA-FACTS 6.1 item 4 and RemoteLogLeaderEpochStateTest -----------------------------------------
# Kafka's fin(start, id, epochEnd) on one epoch state is a segment (start, epochEnd, {E: start}).
E = 7


def fin(cache: RemoteLogMetadataCache, start: int, epoch_end: int) -> RemoteLogSegmentId:
    return add_fin(cache, start, epoch_end, {E: start}).remote_log_segment_id


def started(cache: RemoteLogMetadataCache, start: int) -> RemoteLogSegmentId:
    m = seg(start, start + 1, {E: start})
    cache.add_copy_in_progress_segment(m)
    return m.remote_log_segment_id


def floor(cache: RemoteLogMetadataCache, offset: int) -> RemoteLogSegmentId | None:
    view = cache.leader_epoch_state(E)
    assert view is not None
    below = [(k, i) for k, i in view.offset_to_id if k <= offset]
    return below[-1][1] if below else None


def unreferenced(cache: RemoteLogMetadataCache) -> frozenset[RemoteLogSegmentId]:
    view = cache.leader_epoch_state(E)
    assert view is not None
    return view.unreferenced_ids


def referenced(cache: RemoteLogMetadataCache) -> list[RemoteLogSegmentId]:
    view = cache.leader_epoch_state(E)
    assert view is not None
    return [i for _, i in view.offset_to_id]


def highest(cache: RemoteLogMetadataCache) -> int | None:
    return cache.highest_offset_for_epoch(E)


def test_epoch_list_is_empty(cache: RemoteLogMetadataCache) -> None:
    assert list(cache.list_remote_log_segments(E)) == []
    s = started(cache, 0)
    move_id(cache, s, S.DELETE_SEGMENT_STARTED)
    move_id(cache, s, S.DELETE_SEGMENT_FINISHED)
    view = cache.leader_epoch_state(E)
    assert view is not None and view.offset_to_id == () and view.unreferenced_ids == frozenset()
    assert list(cache.list_remote_log_segments(E)) == []


def move_id(
    cache: RemoteLogMetadataCache, segment_id: RemoteLogSegmentId, state: RemoteLogSegmentState
) -> None:
    cache.update_remote_log_segment_metadata(upd(segment_id, state))


def test_copy_started_is_unreferenced(cache: RemoteLogMetadataCache) -> None:
    s = started(cache, 0)
    assert unreferenced(cache) == {s}
    assert referenced(cache) == []


def test_copy_finished(cache: RemoteLogMetadataCache) -> None:
    s1 = fin(cache, 10, 100)
    s2 = fin(cache, 101, 200)
    assert referenced(cache) == [s1, s2]
    assert floor(cache, 90) == s1
    assert floor(cache, 150) == s2
    assert unreferenced(cache) == frozenset()
    assert highest(cache) == 200


def test_overlapping_segments(cache: RemoteLogMetadataCache) -> None:
    s1 = fin(cache, 10, 100)
    s2 = fin(cache, 5, 150)
    assert referenced(cache) == [s2]
    assert floor(cache, 11) == s2
    assert cache.remote_log_segment_metadata(E, 11) is not None
    assert ids([cache.remote_log_segment_metadata(E, 11)]) == [s2]  # type: ignore[list-item]
    assert unreferenced(cache) == {s1}
    assert highest(cache) == 150
    assert ids(cache.list_remote_log_segments(E)) == [s2, s1]


def test_multiple_overlapping_segments(cache: RemoteLogMetadataCache) -> None:
    s1 = fin(cache, 10, 100)
    s2 = fin(cache, 5, 150)
    s3 = fin(cache, 148, 155)
    s4 = fin(cache, 4, 200)
    assert referenced(cache) == [s4]
    assert floor(cache, 11) == s4
    assert unreferenced(cache) == {s1, s2, s3}
    assert highest(cache) == 200
    assert cache.segment_count(E) == 4
    assert cache.remote_log_size(E) == 4 * SEG_SIZE


def test_duplicate_segments(cache: RemoteLogMetadataCache) -> None:
    s1 = fin(cache, 10, 100)
    s2 = fin(cache, 10, 100)
    assert floor(cache, 11) == s2
    assert unreferenced(cache) == {s1}
    assert highest(cache) == 100


def test_segments_with_same_start_offset(cache: RemoteLogMetadataCache) -> None:
    s1 = fin(cache, 10, 100)
    s2 = fin(cache, 10, 150)
    assert floor(cache, 11) == s2
    assert floor(cache, 111) == s2
    assert unreferenced(cache) == {s1}
    assert highest(cache) == 150


def test_list_is_sorted_by_start_offset(cache: RemoteLogMetadataCache) -> None:
    """testListAllRemoteLogSegmentsShouldReturnSortedSegments: [s1, s2, s4, s3]."""
    s1 = started(cache, 0)
    s2 = fin(cache, 5, 10)
    s3 = fin(cache, 11, 100)
    s4 = fin(cache, 9, 150)
    assert ids(cache.list_remote_log_segments(E)) == [s1, s2, s4, s3]


def test_delete_started(cache: RemoteLogMetadataCache) -> None:
    s1 = fin(cache, 10, 100)
    s2 = fin(cache, 101, 200)
    move_id(cache, s1, S.DELETE_SEGMENT_STARTED)
    move_id(cache, s2, S.DELETE_SEGMENT_STARTED)
    assert referenced(cache) == []
    assert unreferenced(cache) == {s1, s2}
    assert cache.remote_log_size(E) == 2 * SEG_SIZE


def test_delete_finished(cache: RemoteLogMetadataCache) -> None:
    s = started(cache, 0)
    assert unreferenced(cache) == {s}
    move_id(cache, s, S.DELETE_SEGMENT_STARTED)
    move_id(cache, s, S.DELETE_SEGMENT_FINISHED)
    assert unreferenced(cache) == frozenset()
    assert cache.segment_count(E) == 0


def test_unknown_segment_in_an_epoch_fails_the_listing(cache: RemoteLogMetadataCache) -> None:
    """testListAllRemoteLogSegmentsShouldThrowErrorForUnknownSegmentId, reached through the
    cache: re-adding a started segment with other epochs leaves its id unreferenced under the
    old ones, and once it is deleted Kafka's listing of those epochs raises."""
    m = seg(0, 10, {0: 0}, 5)
    cache.add_copy_in_progress_segment(m)
    moved = seg(0, 10, {1: 0}, 7, segment_id=m.remote_log_segment_id)
    cache.add_copy_in_progress_segment(moved)
    assert list(cache.list_remote_log_segments(0)) == [moved]  # still listed under epoch 0
    assert cache.remote_log_size(0) == 7 and cache.remote_log_size(1) == 7
    move(cache, moved, S.DELETE_SEGMENT_STARTED)
    move(cache, moved, S.DELETE_SEGMENT_FINISHED)
    with pytest.raises(RemoteResourceNotFoundException, match="No remote log segment metadata"):
        list(cache.list_remote_log_segments(0))
    with pytest.raises(RemoteResourceNotFoundException):
        cache.remote_log_size(0)
    assert list(cache.list_remote_log_segments(1)) == []
    view = cache.leader_epoch_state(0)
    assert view is not None and view.unreferenced_ids == {m.remote_log_segment_id}
    # The same id added again makes epoch 0's entry resolve again, as in Kafka's map.
    again = seg(50, 60, {2: 50}, 11, segment_id=m.remote_log_segment_id)
    cache.add_copy_in_progress_segment(again)
    assert list(cache.list_remote_log_segments(0)) == [again]
    assert cache.remote_log_size(0) == 11
    assert cache.segment_count(0) == 1


def test_put_at_the_same_key_silently_drops_the_other_segment(
    cache: RemoteLogMetadataCache,
) -> None:
    """When highestLogOffset > the new epoch end the loop does not run and put() replaces the
    segment mapped at the same start: it leaves the epoch's list (and its size) until its
    DELETE_SEGMENT_STARTED adds it back as unreferenced."""
    a = add_fin(cache, 0, 100, {E: 0}, 10)
    b = add_fin(cache, 0, 50, {E: 0}, 3)
    assert referenced(cache) == [b.remote_log_segment_id]
    assert unreferenced(cache) == frozenset()
    assert list(cache.list_remote_log_segments(E)) == [b]
    assert cache.remote_log_size(E) == 3 and cache.segment_count(E) == 1
    assert sorted(ids(cache.list_all_remote_log_segments()), key=str) == sorted(
        ids([a, b]), key=str
    )
    assert highest(cache) == 100
    assert cache.remote_log_segment_metadata(E, 60) is None  # b ends at 50
    a = move(cache, a, S.DELETE_SEGMENT_STARTED)  # remove(0, a) is a no-op: 0 maps to b
    assert referenced(cache) == [b.remote_log_segment_id]
    assert unreferenced(cache) == {a.remote_log_segment_id}
    assert cache.remote_log_size(E) == 13 and cache.segment_count(E) == 2
    move(cache, a, S.DELETE_SEGMENT_FINISHED)
    assert list(cache.list_remote_log_segments(E)) == [b]
    assert cache.remote_log_size(E) == 3


def test_a_raised_highest_offset_makes_the_next_copy_replace_instead_of_drop(
    cache: RemoteLogMetadataCache,
) -> None:
    """A reader of a compacted history restores the epoch's highest copied offset a deleted
    segment had raised: the next copy of the same offsets then replaces the segment mapped at
    its start (which leaves the epoch's list) instead of dropping it into the unreferenced ones
    (still listed), as the full history did. Never lowered."""
    a = add_fin(cache, 0, 50, {E: 0}, 10)
    cache.raise_highest_offset_for_epoch(E, 100)
    assert highest(cache) == 100
    cache.raise_highest_offset_for_epoch(E, 60)
    assert highest(cache) == 100
    b = add_fin(cache, 0, 50, {E: 0}, 3)
    assert referenced(cache) == [b.remote_log_segment_id]
    assert unreferenced(cache) == frozenset()
    assert list(cache.list_remote_log_segments(E)) == [b]
    assert a.remote_log_segment_id in ids(cache.list_all_remote_log_segments())
    assert highest(cache) == 100

    other = RemoteLogMetadataCache()  # the same copies without the raise: a is dropped, listed
    a2 = add_fin(other, 0, 50, {E: 0}, 10)
    b2 = add_fin(other, 0, 50, {E: 0}, 3)
    assert ids(other.list_remote_log_segments(E)) == ids([b2, a2])


def test_raising_the_highest_offset_of_an_unknown_epoch() -> None:
    empty = RemoteLogMetadataCache()
    empty.raise_highest_offset_for_epoch(3, 9)
    assert empty.highest_offset_for_epoch(3) == 9
    assert list(empty.list_remote_log_segments(3)) == []


def test_finished_again_reruns_the_overlap_loop(cache: RemoteLogMetadataCache) -> None:
    """FINISHED -> FINISHED is a valid retry and re-applies the epoch bookkeeping."""
    a = add_fin(cache, 10, 20, {E: 10}, 1)
    b = add_fin(cache, 21, 30, {E: 21}, 2)
    move(cache, a, S.COPY_SEGMENT_FINISHED)  # highest 30 > 20: no loop, put(10, a) again
    assert referenced(cache) == ids([a, b])
    c = add_fin(cache, 5, 40, {E: 5}, 4)  # drops a and b
    move(cache, a, S.COPY_SEGMENT_FINISHED)  # highest 40 > 20: put(10, a) after c
    assert referenced(cache) == ids([c, a])
    assert unreferenced(cache) == {b.remote_log_segment_id}
    assert cache.remote_log_size(E) == 7


# KAFKA-FACTS 6.1 item 5: remoteLogSize (TopicBasedRemoteLogMetadataManagerTest) ----------------
def test_remote_log_size_of_the_same_epoch(cache: RemoteLogMetadataCache) -> None:
    for start, end, size in ((0, 100, 1), (100, 200, 2), (200, 300, 3)):
        cache.add_copy_in_progress_segment(seg(start, end, {0: 0}, size * SEG_SIZE))
    assert cache.remote_log_size(0) == 6 * SEG_SIZE


def test_remote_log_size_of_different_epochs(cache: RemoteLogMetadataCache) -> None:
    for epoch, (start, end, size) in enumerate(((0, 100, 1), (100, 200, 2), (200, 300, 3))):
        cache.add_copy_in_progress_segment(seg(start, end, {epoch: start}, size * SEG_SIZE))
    assert [cache.remote_log_size(e) for e in range(3)] == [SEG_SIZE, 2 * SEG_SIZE, 3 * SEG_SIZE]
    assert cache.remote_log_size(9001) == 0


def test_remote_log_size_counts_a_segment_in_each_of_its_epochs(
    cache: RemoteLogMetadataCache,
) -> None:
    m = add_fin(cache, 0, 100, {0: 0, 1: 50}, 10)
    assert cache.remote_log_size(0) == cache.remote_log_size(1) == 10
    move(cache, m, S.DELETE_SEGMENT_STARTED)
    assert cache.remote_log_size(0) == cache.remote_log_size(1) == 10
    move(cache, m, S.DELETE_SEGMENT_FINISHED)
    assert cache.remote_log_size(0) == cache.remote_log_size(1) == 0


def test_remote_log_size_reads_the_running_sum(
    cache: RemoteLogMetadataCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Structural proof that remote_log_size does not scan: with no way to build or list a
    segment, it still answers, and the answer matches the scan made before."""
    for i in range(600):  # more than one listing chunk
        add_fin(cache, i * 10, i * 10 + 9, {i // 100: i * 10}, 1000 + i)
    expected = {
        e: sum(m.segment_size_in_bytes for m in cache.list_remote_log_segments(e)) for e in range(7)
    }

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("remote_log_size must not touch segments")

    monkeypatch.setattr(RemoteLogMetadataCache, "_materialize", forbidden)
    monkeypatch.setattr(RemoteLogMetadataCache, "list_remote_log_segments", forbidden)
    monkeypatch.setattr(RemoteLogMetadataCache, "_iterate", forbidden)
    assert {e: cache.remote_log_size(e) for e in range(7)} == expected
    assert expected[0] == sum(1000 + i for i in range(100))


# next_segment_with_txn_index --------------------------------------------------------------------
def test_next_segment_with_txn_index(cache: RemoteLogMetadataCache) -> None:
    a = add_fin(cache, 0, 99, {0: 0}, txn_idx_empty=True)
    add_fin(cache, 100, 199, {0: 100}, txn_idx_empty=True)
    c = add_fin(cache, 200, 299, {0: 200}, txn_idx_empty=False)
    add_fin(cache, 300, 399, {0: 300, 1: 350}, txn_idx_empty=True)
    add_fin(cache, 400, 499, {1: 400}, txn_idx_empty=False)  # another epoch: never reached
    assert cache.next_segment_with_txn_index(0, 50) == c
    assert cache.next_segment_with_txn_index(0, 250) == c
    assert cache.next_segment_with_txn_index(0, 320) is None
    assert cache.next_segment_with_txn_index(0, 1000) is None
    assert cache.next_segment_with_txn_index(3, 0) is None
    move(cache, a, S.DELETE_SEGMENT_STARTED)
    assert cache.next_segment_with_txn_index(0, 50) is None  # nothing mapped at or below 50
    # A gap stops the walk: 100..199 deleted leaves 0..99 -> 100 outside every segment.
    cache2 = RemoteLogMetadataCache(TIP)
    add_fin(cache2, 0, 99, {0: 0}, txn_idx_empty=True)
    add_fin(cache2, 200, 299, {0: 200}, txn_idx_empty=False)
    assert cache2.next_segment_with_txn_index(0, 10) is None


def test_next_segment_with_txn_index_stops_where_kafka_would_spin(
    cache: RemoteLogMetadataCache,
) -> None:
    """Epoch 0 of (5..8, {0: 5, 1: 25}) ends at 24, past the segment: from offset 20 the walk
    goes to 9, which is the same segment again; Kafka's loop never ends, tierlog's returns."""
    add_fin(cache, 5, 8, {0: 5, 1: 25}, txn_idx_empty=True)
    assert cache.next_segment_with_txn_index(0, 20) is None
    assert cache.next_segment_with_txn_index(0, 6) is None


# The compact layout -----------------------------------------------------------------------------
def test_reused_row_carries_nothing_of_the_deleted_segment(cache: RemoteLogMetadataCache) -> None:
    old = add_fin(
        cache, 0, 100, {0: 0, 1: 30, 2: 60}, 999, custom=CustomMetadata(b"old"), txn_idx_empty=True
    )
    move(cache, old, S.DELETE_SEGMENT_STARTED)
    move(cache, old, S.DELETE_SEGMENT_FINISHED)
    rows = len(cache._start)
    new = seg(500, 600, {3: 500}, 7)
    cache.add_copy_in_progress_segment(new)
    assert len(cache._start) == rows  # the row was reused
    assert list(cache.list_all_remote_log_segments()) == [new]
    assert cache.segment_metadata(new.remote_log_segment_id) == new
    assert cache.segment_metadata(old.remote_log_segment_id) is None
    assert [cache.remote_log_size(e) for e in range(4)] == [0, 0, 0, 7]
    finished = move(cache, new, S.COPY_SEGMENT_FINISHED)
    assert finished.custom_metadata is None and not finished.txn_idx_empty
    assert cache.remote_log_segment_metadata(3, 550) == finished
    assert cache.remote_log_segment_metadata(0, 50) is None
    with pytest.raises(RemoteResourceNotFoundException):
        cache.update_remote_log_segment_metadata(upd(old, S.DELETE_SEGMENT_FINISHED))


def test_custom_metadata_follows_updates(cache: RemoteLogMetadataCache) -> None:
    m = seg(0, 10, {0: 0}, custom=CustomMetadata(b"a"))
    cache.add_copy_in_progress_segment(m)
    assert cache.segment_metadata(m.remote_log_segment_id) == m
    update = upd(m, S.COPY_SEGMENT_FINISHED, CustomMetadata(b"b"))
    cache.update_remote_log_segment_metadata(update)
    assert cache.remote_log_segment_metadata(0, 5) == m.create_with_updates(update)
    update = upd(m, S.DELETE_SEGMENT_STARTED, None)
    cache.update_remote_log_segment_metadata(update)
    listed = list(cache.list_remote_log_segments(0))
    assert listed[0].custom_metadata is None


def test_long_listing_skips_segments_deleted_during_iteration(
    cache: RemoteLogMetadataCache,
) -> None:
    segments = [add_fin(cache, i * 10, i * 10 + 9, {0: i * 10}) for i in range(1000)]
    listing = cache.list_remote_log_segments(0)
    everything = cache.list_all_remote_log_segments()
    head = [next(listing) for _ in range(10)]
    assert head == segments[:10]
    for m in segments[500:510]:
        move(cache, m, S.DELETE_SEGMENT_STARTED)
        move(cache, m, S.DELETE_SEGMENT_FINISHED)
    newcomers = [add_fin(cache, 20000 + i, 20000 + i, {0: 20000 + i}) for i in range(10)]
    assert len(cache._start) == 1000  # the freed rows were reused by the newcomers
    rest = list(listing)
    assert head + rest == segments[:500] + segments[510:]
    assert sorted(ids(everything), key=str) == sorted(ids(segments[:500] + segments[510:]), key=str)
    assert list(cache.list_remote_log_segments(0))[-10:] == newcomers


def test_retention_from_the_front_of_a_large_epoch(
    cache: RemoteLogMetadataCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting the oldest segments moves the epoch's head; the dead prefix is cut off."""
    monkeypatch.setattr(cache_module, "_COMPACT_MIN", 16)
    segments = [add_fin(cache, i * 10, i * 10 + 9, {0: i * 10}, i + 1) for i in range(200)]
    for n, m in enumerate(segments[:150]):
        move(cache, m, S.DELETE_SEGMENT_STARTED)
        move(cache, m, S.DELETE_SEGMENT_FINISHED)
        if n % 7 == 0:
            alive = segments[n + 1 :]
            assert cache.remote_log_segment_metadata(0, alive[0].start_offset) == alive[0]
            assert cache.remote_log_segment_metadata(0, m.start_offset) is None
            assert cache.remote_log_size(0) == sum(x.segment_size_in_bytes for x in alive)
    state = cache._epochs[0]
    assert state.head < 2 * 16 and state.map_len() == 50
    assert list(cache.list_remote_log_segments(0)) == segments[150:]
    # Reinsert below the head: reuses the dead prefix, order is kept.
    early = add_fin(cache, 5, 5, {0: 5}, 1)
    assert cache.remote_log_segment_metadata(0, 5) == early
    assert ids(cache.list_remote_log_segments(0))[:2] == ids([early, segments[150]])


def test_id_index_with_colliding_ids(cache: RemoteLogMetadataCache) -> None:
    """Ids whose halves are equal all hash to one bucket: long probe chains, and deletions
    in any order must keep every other id reachable (backward-shift deletion)."""
    colliding = [RemoteLogSegmentId(TIP, Uuid(k, k)) for k in range(1, 150)]
    segments = {
        sid: add_fin(cache, i * 10, i * 10 + 9, {0: i * 10}, segment_id=sid)
        for i, sid in enumerate(colliding)
    }
    order = colliding[::3] + colliding[1::3]
    for n, sid in enumerate(order):
        move(cache, segments.pop(sid), S.DELETE_SEGMENT_STARTED)
        cache.update_remote_log_segment_metadata(upd(sid, S.DELETE_SEGMENT_FINISHED))
        if n % 10 == 0:
            for other, m in segments.items():
                assert cache.segment_metadata(other) == m
            assert cache.segment_metadata(sid) is None
    assert cache.segment_count() == len(segments) == len(colliding[2::3])
    for other, m in segments.items():
        assert cache.segment_metadata(other) == m


def test_segments_of_another_partition(cache: RemoteLogMetadataCache) -> None:
    with pytest.raises(InvalidArgumentError, match="partition"):
        cache.add_copy_in_progress_segment(seg(0, 1, {0: 0}, segment_id=new_id(OTHER_TIP)))
    m = add_fin(cache, 0, 10, {0: 0})
    alien = RemoteLogSegmentId(OTHER_TIP, m.remote_log_segment_id.id)
    with pytest.raises(RemoteResourceNotFoundException):
        cache.update_remote_log_segment_metadata(upd(alien, S.DELETE_SEGMENT_STARTED))
    assert cache.segment_metadata(alien) is None
    unbound = RemoteLogMetadataCache()
    unbound.add_copy_in_progress_segment(m.create_with_updates(upd(m, S.COPY_SEGMENT_STARTED)))
    assert unbound.topic_id_partition == TIP


def test_values_the_columns_cannot_hold_are_refused_before_any_change(
    cache: RemoteLogMetadataCache,
) -> None:
    with pytest.raises(InvalidArgumentError, match="brokerId"):
        cache.add_copy_in_progress_segment(
            RemoteLogSegmentMetadata(new_id(), 0, 1, 0, 1 << 31, 0, 1, {0: 0})
        )
    with pytest.raises(InvalidArgumentError, match="leaderEpoch"):
        cache.add_copy_in_progress_segment(seg(0, 1, {1 << 40: 0}))
    assert cache.segment_count() == 0 and cache.leader_epochs() == []
    m = seg(0, 1, {0: 0})
    cache.add_copy_in_progress_segment(m)
    with pytest.raises(InvalidArgumentError, match="eventTimestampMs"):
        cache.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                m.remote_log_segment_id, 1 << 63, None, S.COPY_SEGMENT_FINISHED, 0
            )
        )
    assert list(cache.list_remote_log_segments(0)) == [m]


def test_counts_for_metrics(cache: RemoteLogMetadataCache) -> None:
    add_fin(cache, 0, 9, {0: 0})
    add_fin(cache, 10, 19, {0: 10, 1: 15})
    cache.add_copy_in_progress_segment(seg(20, 29, {1: 20}))
    assert cache.segment_count() == 3
    assert [cache.segment_count(e) for e in (0, 1, 2)] == [2, 2, 0]
    assert cache.leader_epochs() == [0, 1]


def test_reads_while_another_thread_writes(cache: RemoteLogMetadataCache) -> None:
    errors: list[BaseException] = []
    done = threading.Event()

    def writer() -> None:
        try:
            for i in range(1000):
                m = add_fin(cache, i * 10, i * 10 + 9, {i // 200: i * 10}, 1)
                if i >= 200:
                    old = next(iter(cache.list_remote_log_segments((i - 200) // 200)))
                    move(cache, old, S.DELETE_SEGMENT_STARTED)
                    move(cache, old, S.DELETE_SEGMENT_FINISHED)
                del m
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    def reader() -> None:
        try:
            while not done.is_set():
                for epoch in range(6):
                    listed = list(cache.list_remote_log_segments(epoch))
                    assert all(epoch in m.segment_leader_epochs for m in listed)
                    cache.remote_log_size(epoch)
                    hit = cache.remote_log_segment_metadata(epoch, epoch * 2000 + 1999)
                    assert hit is None or hit.start_offset <= epoch * 2000 + 1999
                list(cache.list_all_remote_log_segments())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert cache.segment_count() == 200
    for epoch in range(6):
        assert cache.remote_log_size(epoch) == len(list(cache.list_remote_log_segments(epoch)))


# A naive model, line by line from Kafka's Java source ------------------------------------------
class RefLeaderEpochState:
    """RemoteLogLeaderEpochState with a plain dict for the skip list."""

    def __init__(self) -> None:
        self.offset_to_id: dict[int, RemoteLogSegmentId] = {}
        self.unreferenced: set[RemoteLogSegmentId] = set()
        self.highest_log_offset: int | None = None

    def last_entry(self) -> tuple[int, RemoteLogSegmentId] | None:
        if not self.offset_to_id:
            return None
        key = max(self.offset_to_id)
        return key, self.offset_to_id[key]

    def floor_entry(self, offset: int) -> RemoteLogSegmentId | None:
        keys = [k for k in self.offset_to_id if k <= offset]
        return self.offset_to_id[max(keys)] if keys else None

    def list_all(
        self, id_to_metadata: Mapping[RemoteLogSegmentId, RemoteLogSegmentMetadata]
    ) -> list[RemoteLogSegmentMetadata]:
        if not self.offset_to_id and not self.unreferenced:
            return []

        def collect(segment_ids: Iterable[RemoteLogSegmentId]) -> None:
            for i in segment_ids:
                m = id_to_metadata.get(i)
                if m is None:
                    raise RemoteResourceNotFoundException(f"No remote log segment for {i}")
                result.append(m)

        result: list[RemoteLogSegmentMetadata] = []
        collect(self.offset_to_id[k] for k in sorted(self.offset_to_id))
        if self.unreferenced:
            collect(self.unreferenced)
            result.sort(key=lambda m: m.start_offset)
        return result

    def copy_started(self, segment_id: RemoteLogSegmentId) -> None:
        self.unreferenced.add(segment_id)

    def copy_finished(self, start: int, segment_id: RemoteLogSegmentId, end: int) -> None:
        last = self.last_entry()
        while (
            last is not None
            and last[0] >= start
            and self.highest_log_offset is not None
            and self.highest_log_offset <= end
        ):
            del self.offset_to_id[last[0]]
            self.unreferenced.add(last[1])
            last = self.last_entry()
        self.offset_to_id[start] = segment_id
        self.unreferenced.discard(segment_id)
        if self.highest_log_offset is None or end > self.highest_log_offset:
            self.highest_log_offset = end

    def delete_started(self, start: int, segment_id: RemoteLogSegmentId) -> None:
        if self.offset_to_id.get(start) == segment_id:
            del self.offset_to_id[start]
        self.unreferenced.add(segment_id)

    def delete_finished(self, segment_id: RemoteLogSegmentId) -> None:
        self.unreferenced.discard(segment_id)


def epoch_end(m: RemoteLogSegmentMetadata, epoch: int) -> int:
    """``higherEntry(epoch).value - 1``, else the segment's end offset."""
    higher = [(e, o) for e, o in m.segment_leader_epochs.items() if e > epoch]
    return min(higher)[1] - 1 if higher else m.end_offset


class RefCache:
    """RemoteLogMetadataCache with dicts, for the state machine."""

    def __init__(self) -> None:
        self.id_to_metadata: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        self.epochs: dict[int, RefLeaderEpochState] = {}
        self.initialized = False

    def add(self, m: RemoteLogSegmentMetadata) -> None:
        if m.state is not S.COPY_SEGMENT_STARTED:
            raise InvalidArgumentError("should have state as COPY_SEGMENT_STARTED")
        existing = self.id_to_metadata.get(m.remote_log_segment_id)
        if not S.is_valid_transition(existing.state if existing else None, m.state):
            return
        for epoch in m.segment_leader_epochs:
            self.epochs.setdefault(epoch, RefLeaderEpochState()).copy_started(
                m.remote_log_segment_id
            )
        self.id_to_metadata[m.remote_log_segment_id] = m

    def update(self, u: RemoteLogSegmentMetadataUpdate) -> None:
        segment_id = u.remote_log_segment_id
        existing = self.id_to_metadata.get(segment_id)
        if not self.initialized and existing is None:
            return
        if existing is None:
            raise RemoteResourceNotFoundException(f"No remote log segment for {segment_id}")
        if not S.is_valid_transition(existing.state, u.state):
            return
        if u.state is S.COPY_SEGMENT_STARTED:
            raise InvalidArgumentError("can not be updated")
        updated = existing.create_with_updates(u)
        for epoch, start in updated.segment_leader_epochs.items():
            state = self.epochs.setdefault(epoch, RefLeaderEpochState())
            if u.state is S.COPY_SEGMENT_FINISHED:
                state.copy_finished(start, segment_id, epoch_end(updated, epoch))
            elif u.state is S.DELETE_SEGMENT_STARTED:
                state.delete_started(start, segment_id)
            else:
                state.delete_finished(segment_id)
        if u.state is S.DELETE_SEGMENT_FINISHED:
            del self.id_to_metadata[segment_id]
        else:
            self.id_to_metadata[segment_id] = updated

    def remote_log_segment_metadata(
        self, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        state = self.epochs.get(epoch)
        metadata = None
        if state is not None:
            segment_id = state.floor_entry(offset)
            if segment_id is not None:
                metadata = self.id_to_metadata.get(segment_id)
        end = -1 if metadata is None else epoch_end(metadata, epoch)
        return None if offset > end else metadata

    def next_segment_with_txn_index(
        self, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        txn_idx_empty = True
        visited = {offset}
        m = self.remote_log_segment_metadata(epoch, offset)
        while m is not None and txn_idx_empty:
            txn_idx_empty = m.txn_idx_empty
            if txn_idx_empty:
                if m.end_offset + 1 in visited:  # Kafka would loop forever: tierlog stops
                    return None
                visited.add(m.end_offset + 1)
                m = self.remote_log_segment_metadata(epoch, m.end_offset + 1)
        return None if txn_idx_empty else m

    def list_remote_log_segments(self, epoch: int) -> list[RemoteLogSegmentMetadata]:
        state = self.epochs.get(epoch)
        return [] if state is None else state.list_all(self.id_to_metadata)


def canonical(
    listing: list[RemoteLogSegmentMetadata], referenced_ids: set[RemoteLogSegmentId]
) -> list[RemoteLogSegmentMetadata]:
    """Kafka's listing up to what Kafka leaves unspecified: unreferenced ids come from a hash
    set, so among segments with equal start offsets their order is arbitrary (the referenced
    ones come first, in offset-map order, by the stable sort)."""
    out: list[RemoteLogSegmentMetadata] = []
    for _, run_iter in itertools.groupby(listing, key=lambda m: m.start_offset):
        run = list(run_iter)
        out += [m for m in run if m.remote_log_segment_id in referenced_ids]
        out += sorted(
            (m for m in run if m.remote_log_segment_id not in referenced_ids),
            key=lambda m: m.remote_log_segment_id.id.int,
        )
    return out


def outcome(call: object) -> object:
    """The result of ``call()`` or the type of the exception it raised."""
    try:
        result = call()  # type: ignore[operator]
        if isinstance(result, Iterator):
            result = list(result)
        return result
    except (InvalidArgumentError, RemoteResourceNotFoundException) as exc:
        return type(exc)


# Ids: half of them collide in the id index (equal halves hash alike).
POOL = [RemoteLogSegmentId(TIP, Uuid(0xA000 + k, 0xB000 + 7 * k)) for k in range(4)] + [
    RemoteLogSegmentId(TIP, Uuid(k, k)) for k in range(1, 5)
]
EPOCHS = range(0, 5)
OFFSETS = range(-1, 32)


@st.composite
def segments(draw: st.DrawFn) -> RemoteLogSegmentMetadata:
    segment_id = draw(st.sampled_from(POOL))
    start = draw(st.integers(0, 20))  # a narrow range: overlaps and equal starts are common
    end = start + draw(st.integers(0, 8))
    epochs = sorted(draw(st.lists(st.sampled_from(EPOCHS), min_size=1, max_size=3, unique=True)))
    if draw(st.integers(0, 9)) == 0:  # anything goes: Kafka does not validate epoch offsets
        offsets = [draw(st.integers(0, 30)) for _ in epochs]
    else:
        offsets = [start, *sorted(draw(st.integers(start, end)) for _ in epochs[1:])]
    custom = draw(st.none() | st.binary(max_size=3).map(CustomMetadata))
    return RemoteLogSegmentMetadata(
        segment_id,
        start,
        end,
        draw(st.integers(-1, 5)),
        draw(st.integers(0, 3)),
        draw(st.integers(0, 5)),
        draw(st.integers(0, 1000)),
        dict(zip(epochs, offsets, strict=True)),
        custom,
        S.COPY_SEGMENT_STARTED,
        draw(st.booleans()),
    )


class CacheMachine(RuleBasedStateMachine):
    """The compact cache and the naive model receive the same events; every read agrees."""

    def __init__(self) -> None:
        super().__init__()
        # Tiny listing chunks and compaction thresholds so every code path runs on small data.
        # A two-entry lookup memo, so that its invalidation and eviction are exercised too.
        self.saved = (cache_module._CHUNK, cache_module._COMPACT_MIN, cache_module._LOOKED_UP_MAX)
        cache_module._CHUNK = 2  # type: ignore[misc]
        cache_module._COMPACT_MIN = 2  # type: ignore[misc]
        cache_module._LOOKED_UP_MAX = 2  # type: ignore[misc]
        self.logger = logging.getLogger("tierlog.metadata.cache")
        self.level = self.logger.level
        self.logger.setLevel(logging.CRITICAL)  # invalid transitions are routine here
        self.cache = RemoteLogMetadataCache(TIP)
        self.model = RefCache()

    def teardown(self) -> None:
        (  # type: ignore[misc]
            cache_module._CHUNK,
            cache_module._COMPACT_MIN,
            cache_module._LOOKED_UP_MAX,
        ) = self.saved
        self.logger.setLevel(self.level)

    @rule(m=segments())
    def add(self, m: RemoteLogSegmentMetadata) -> None:
        assert outcome(lambda: self.cache.add_copy_in_progress_segment(m)) == outcome(
            lambda: self.model.add(m)
        )

    @rule(
        segment_id=st.sampled_from(POOL),
        state=st.sampled_from(S),
        broker=st.integers(0, 3),
        custom=st.none() | st.binary(max_size=3).map(CustomMetadata),
    )
    def update(
        self,
        segment_id: RemoteLogSegmentId,
        state: RemoteLogSegmentState,
        broker: int,
        custom: CustomMetadata | None,
    ) -> None:
        u = RemoteLogSegmentMetadataUpdate(segment_id, 9, custom, state, broker)
        assert outcome(lambda: self.cache.update_remote_log_segment_metadata(u)) == outcome(
            lambda: self.model.update(u)
        )

    @rule(m=segments())
    def add_and_finish(self, m: RemoteLogSegmentMetadata) -> None:
        self.add(m)
        self.advance(m.remote_log_segment_id, 1)

    @rule(
        template=st.sampled_from(POOL),
        segment_id=st.sampled_from(POOL),
        end_delta=st.integers(-3, 3),
        finish=st.booleans(),
    )
    def add_twin(
        self,
        template: RemoteLogSegmentId,
        segment_id: RemoteLogSegmentId,
        end_delta: int,
        finish: bool,
    ) -> None:
        """A copy of a known segment under another id, slightly shorter or longer: the
        duplicates and same-start overlaps a leader change produces."""
        known = self.model.id_to_metadata.get(template)
        if known is None:
            return
        m = RemoteLogSegmentMetadata(
            segment_id,
            known.start_offset,
            max(known.start_offset, known.end_offset + end_delta),
            -1,
            2,
            3,
            known.segment_size_in_bytes + 1,
            dict(known.segment_leader_epochs),
        )
        self.add(m)
        if finish:
            self.advance(segment_id, 1)

    @rule(segment_id=st.sampled_from(POOL), broker=st.integers(0, 3))
    def advance(self, segment_id: RemoteLogSegmentId, broker: int) -> None:
        """The next state of the segment's normal life (random updates rarely get far)."""
        known = self.model.id_to_metadata.get(segment_id)
        if known is None or known.state is S.DELETE_SEGMENT_FINISHED:
            return
        state = S(known.state + 1)
        u = RemoteLogSegmentMetadataUpdate(segment_id, 8, None, state, broker)
        assert outcome(lambda: self.cache.update_remote_log_segment_metadata(u)) == outcome(
            lambda: self.model.update(u)
        )

    @precondition(lambda self: not self.model.initialized)
    @rule()
    def mark_initialized(self) -> None:
        self.cache.mark_initialized()
        self.model.initialized = True

    @invariant()
    def reads_agree(self) -> None:
        cache, model = self.cache, self.model
        assert cache.segment_count() == len(model.id_to_metadata)
        assert cache.leader_epochs() == sorted(model.epochs)
        listed_all = list(cache.list_all_remote_log_segments())
        assert len(listed_all) == len(model.id_to_metadata)
        assert {m.remote_log_segment_id: m for m in listed_all} == model.id_to_metadata
        for segment_id in POOL:
            assert cache.segment_metadata(segment_id) == model.id_to_metadata.get(segment_id)
        for epoch in (*EPOCHS, 9):
            self.epoch_agrees(epoch)

    def epoch_agrees(self, epoch: int) -> None:
        cache, model = self.cache, self.model
        ref = model.epochs.get(epoch)
        view = cache.leader_epoch_state(epoch)
        if ref is None:
            assert view is None
        else:
            assert view is not None
            assert view.offset_to_id == tuple(sorted(ref.offset_to_id.items()))
            assert view.unreferenced_ids == ref.unreferenced
            assert view.highest_log_offset == ref.highest_log_offset
        assert cache.highest_offset_for_epoch(epoch) == (
            None if ref is None else ref.highest_log_offset
        )
        expected = outcome(lambda: model.list_remote_log_segments(epoch))
        actual = outcome(lambda: cache.list_remote_log_segments(epoch))
        if isinstance(expected, list):
            assert isinstance(actual, list)
            referenced_ids = set() if ref is None else set(ref.offset_to_id.values())
            assert canonical(actual, referenced_ids) == canonical(expected, referenced_ids)
            total = sum(m.segment_size_in_bytes for m in expected)
            assert cache.remote_log_size(epoch) == total
            assert cache.segment_count(epoch) == len(expected)
        else:
            assert actual == expected
            assert outcome(lambda: cache.remote_log_size(epoch)) == expected
        for offset in OFFSETS:
            assert cache.remote_log_segment_metadata(
                epoch, offset
            ) == model.remote_log_segment_metadata(epoch, offset), (epoch, offset)
        for offset in OFFSETS[::4]:
            assert cache.next_segment_with_txn_index(
                epoch, offset
            ) == model.next_segment_with_txn_index(epoch, offset), (epoch, offset)

    @invariant()
    def rows_are_consistent(self) -> None:
        """No structure refers to a free row; free + live rows are all the rows."""
        cache = self.cache
        free = set(cache._free_rows)
        assert len(free) == len(cache._free_rows)
        assert len(free) + cache.segment_count() == len(cache._start)
        assert all(cache._state[s] == cache_module._FREE for s in free)
        for state in cache._epochs.values():
            for s in list(state.slots[state.head :]) + list(state.unref or ()):
                assert s not in free
            assert len(state.keys) == len(state.slots)
            assert list(state.keys[state.head :]) == sorted(set(state.keys[state.head :]))


CacheMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_cache_agrees_with_kafka_model = CacheMachine.TestCase
