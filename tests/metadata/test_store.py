"""RemotePartitionMetadataStore: Kafka's partition lifecycle, readiness and delete handling
(KAFKA-FACTS 3.4, 3.5 and 6.1 items 1, 5 and 6, RemoteLogMetadataManagerTest)."""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from collections.abc import Mapping

import pytest

from tierlog.metadata.cache import RemoteLogMetadataCache
from tierlog.metadata.store import RemotePartitionMetadataStore
from tierlog.spi import (
    IllegalStateError,
    InvalidArgumentError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    RemoteStorageNotReadyException,
    RetriableRemoteStorageException,
    TopicIdPartition,
    Uuid,
)

S = RemoteLogSegmentState
D = RemotePartitionDeleteState
TP0 = TopicIdPartition(Uuid(0xF00, 1), "foo", 0)
TP1 = TopicIdPartition(Uuid(0xF00, 2), "foo", 1)
SEG_SIZE = 1048576
_ids = itertools.count(1)


def seg(
    start: int,
    end: int,
    epochs: Mapping[int, int],
    size: int = SEG_SIZE,
    tip: TopicIdPartition = TP0,
) -> RemoteLogSegmentMetadata:
    segment_id = RemoteLogSegmentId(tip, Uuid(0xBEEF, next(_ids)))
    return RemoteLogSegmentMetadata(segment_id, start, end, -1, 0, 1000, size, epochs)


def upd(
    m: RemoteLogSegmentMetadata, state: RemoteLogSegmentState
) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(m.remote_log_segment_id, 2000, None, state, 1)


def delete(
    state: RemotePartitionDeleteState, tip: TopicIdPartition = TP0
) -> RemotePartitionDeleteMetadata:
    return RemotePartitionDeleteMetadata(tip, state, 3000, 0)


@pytest.fixture
def store() -> RemotePartitionMetadataStore:
    s = RemotePartitionMetadataStore(not_ready_wait_s=0.01)
    s.maybe_load_partition(TP0)
    s.mark_initialized(TP0)
    return s


def finished(
    store: RemotePartitionMetadataStore, m: RemoteLogSegmentMetadata
) -> RemoteLogSegmentMetadata:
    store.handle(m)
    update = upd(m, S.COPY_SEGMENT_FINISHED)
    store.handle(update)
    return m.create_with_updates(update)


# Readiness (KAFKA-FACTS 3.4) --------------------------------------------------------------------
def test_unknown_partition_raises_not_found() -> None:
    store = RemotePartitionMetadataStore()
    message = re.escape(f"No resource found for partition: {TP0}")
    with pytest.raises(RemoteResourceNotFoundException, match=message):
        store.remote_log_segment_metadata(TP0, 0, 0)
    for read in (
        lambda: store.highest_offset_for_epoch(TP0, 0),
        lambda: store.list_remote_log_segments(TP0),
        lambda: store.list_remote_log_segments(TP0, 0),
        lambda: store.next_segment_with_txn_index(TP0, 0, 0),
        lambda: store.remote_log_size(TP0, 0),
    ):
        with pytest.raises(RemoteResourceNotFoundException):
            read()
    assert not store.is_initialized(TP0)


def test_loading_partition_is_not_ready_after_a_short_wait() -> None:
    store = RemotePartitionMetadataStore(not_ready_wait_s=0.05)
    store.maybe_load_partition(TP0)
    store.handle(seg(0, 100, {0: 0}))  # events are applied before initialization
    assert not store.is_initialized(TP0)
    t0 = time.monotonic()
    with pytest.raises(RemoteStorageNotReadyException, match="not initialized") as caught:
        store.list_remote_log_segments(TP0, 0)
    assert time.monotonic() - t0 >= 0.04
    assert isinstance(caught.value, RetriableRemoteStorageException)
    with pytest.raises(RemoteStorageNotReadyException):
        store.remote_log_size(TP0, 0)  # through the store's readiness check, as in Kafka
    store.mark_initialized(TP0)
    assert store.is_initialized(TP0)
    assert store.remote_log_size(TP0, 0) == SEG_SIZE


def test_read_waits_for_an_initialization_in_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """The partition is marked initialized once the read waits for it (not after a delay that
    a loaded machine could stretch past the read or past its wait): the read is served."""
    store = RemotePartitionMetadataStore(not_ready_wait_s=60)
    store.maybe_load_partition(TP0)
    waiting = threading.Event()
    await_initialized = RemoteLogMetadataCache.await_initialized

    def signalling(cache: RemoteLogMetadataCache, timeout: float | None = None) -> bool:
        waiting.set()
        return await_initialized(cache, timeout)

    monkeypatch.setattr(RemoteLogMetadataCache, "await_initialized", signalling)

    def initialize() -> None:
        if waiting.wait(60):
            store.mark_initialized(TP0)

    initializer = threading.Thread(target=initialize, daemon=True)
    initializer.start()
    try:
        assert list(store.list_remote_log_segments(TP0)) == []
        assert waiting.is_set()  # the read did wait
    finally:
        waiting.set()
        initializer.join(60)


def test_maybe_load_partition_keeps_an_existing_cache(store: RemotePartitionMetadataStore) -> None:
    m = finished(store, seg(0, 100, {0: 0}))
    store.maybe_load_partition(TP0)
    assert store.is_initialized(TP0)
    assert store.remote_log_segment_metadata(TP0, 0, 50) == m


def test_highest_offset_peeked_and_raised_before_initialization() -> None:
    """An applier replaying a compacted history reads and restores an epoch's highest copied
    offset while the partition loads (the reads of brokers would wait)."""
    store = RemotePartitionMetadataStore(not_ready_wait_s=0.01)
    assert store.peek_highest_offset(TP0, 0) is None  # not loaded
    store.maybe_load_partition(TP0)
    finished(store, seg(0, 100, {0: 0}))
    assert store.peek_highest_offset(TP0, 0) == 100
    assert store.peek_highest_offset(TP0, 1) is None
    store.raise_highest_offset(TP0, 0, 250)
    store.raise_highest_offset(TP0, 0, 120)
    assert store.peek_highest_offset(TP0, 0) == 250
    with pytest.raises(RemoteStorageNotReadyException):
        store.highest_offset_for_epoch(TP0, 0)
    store.mark_initialized(TP0)
    assert store.highest_offset_for_epoch(TP0, 0) == 250
    with pytest.raises(IllegalStateError, match="No partition metadata found"):
        store.raise_highest_offset(TP1, 0, 1)


def test_events_for_a_partition_never_loaded(store: RemotePartitionMetadataStore) -> None:
    m = seg(0, 1, {0: 0}, tip=TP1)
    with pytest.raises(IllegalStateError, match="No partition metadata found"):
        store.handle_remote_log_segment_metadata(m)
    with pytest.raises(IllegalStateError):
        store.handle_remote_log_segment_metadata_update(upd(m, S.COPY_SEGMENT_FINISHED))
    with pytest.raises(IllegalStateError):
        store.mark_initialized(TP1)


def test_handle_dispatches_every_kind_and_refuses_others(
    store: RemotePartitionMetadataStore,
) -> None:
    m = seg(0, 100, {0: 0})
    store.handle(m)
    assert list(store.list_remote_log_segments(TP0)) == [m]
    store.handle(upd(m, S.COPY_SEGMENT_FINISHED))
    assert store.highest_offset_for_epoch(TP0, 0) == 100
    store.handle(delete(D.DELETE_PARTITION_MARKED))
    assert store.remote_partition_delete_metadata(TP0) == delete(D.DELETE_PARTITION_MARKED)
    with pytest.raises(InvalidArgumentError, match="is not supported"):
        store.handle("not metadata")  # type: ignore[arg-type]


# KAFKA-FACTS 6.1 item 1 at the store: unknown segment updates ----------------------------------
def test_update_of_unknown_segment_is_logged_after_initialization(
    store: RemotePartitionMetadataStore, caplog: pytest.LogCaptureFixture
) -> None:
    ghost = seg(0, 1, {0: 0})
    with caplog.at_level(logging.WARNING, logger="tierlog.metadata.store"):
        store.handle(upd(ghost, S.COPY_SEGMENT_FINISHED))
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "Error occurred while updating the remote log segment" in caplog.text
    assert caplog.records[0].exc_info is not None
    assert caplog.records[0].exc_info[0] is RemoteResourceNotFoundException


def test_update_of_unknown_segment_is_silent_before_initialization(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = RemotePartitionMetadataStore()
    store.maybe_load_partition(TP0)
    with caplog.at_level(logging.WARNING):
        store.handle(upd(seg(0, 1, {0: 0}), S.DELETE_SEGMENT_FINISHED))
    assert caplog.records == []


def test_add_with_a_state_other_than_started(store: RemotePartitionMetadataStore) -> None:
    m = seg(0, 1, {0: 0})
    with pytest.raises(InvalidArgumentError):
        store.handle(m.create_with_updates(upd(m, S.COPY_SEGMENT_FINISHED)))


# RemoteLogMetadataManagerTest.testFetchSegments -------------------------------------------------
def test_fetch_segments(store: RemotePartitionMetadataStore) -> None:
    m = seg(101, 200, {0: 101})
    store.handle(m)
    assert store.remote_log_segment_metadata(TP0, 0, 150) is None
    update = upd(m, S.COPY_SEGMENT_FINISHED)
    store.handle(update)
    assert store.remote_log_segment_metadata(TP0, 0, 150) == m.create_with_updates(update)
    assert store.segment_metadata(TP0, m.remote_log_segment_id) == m.create_with_updates(update)


# KAFKA-FACTS 6.1 item 5: remoteLogSize ----------------------------------------------------------
def test_remote_log_size(store: RemotePartitionMetadataStore) -> None:
    for start, end, size in ((0, 100, 1), (100, 200, 2), (200, 300, 3)):
        store.handle(seg(start, end, {0: 0}, size * SEG_SIZE))
    assert store.remote_log_size(TP0, 0) == 6 * SEG_SIZE

    store.maybe_load_partition(TP1)
    store.mark_initialized(TP1)
    for epoch, (start, end, size) in enumerate(((0, 100, 1), (100, 200, 2), (200, 300, 3))):
        store.handle(seg(start, end, {epoch: start}, size * SEG_SIZE, tip=TP1))
    assert [store.remote_log_size(TP1, e) for e in range(3)] == [
        SEG_SIZE,
        2 * SEG_SIZE,
        3 * SEG_SIZE,
    ]
    assert store.remote_log_size(TP1, 9001) == 0
    unknown = TopicIdPartition(Uuid(0xF00, 99), "nope", 0)
    with pytest.raises(RemoteResourceNotFoundException):
        store.remote_log_size(unknown, 0)


# KAFKA-FACTS 6.1 item 6 and 3.5: partition deletion ---------------------------------------------
def test_remote_partition_deletion(store: RemotePartitionMetadataStore) -> None:
    """RemoteLogMetadataManagerTest.testRemotePartitionDeletion."""
    m = finished(store, seg(0, 100, {0: 0, 1: 20, 2: 50, 3: 80}))
    assert store.remote_log_segment_metadata(TP0, 1, 30) == m
    store.handle(delete(D.DELETE_PARTITION_MARKED))
    assert store.remote_log_segment_metadata(TP0, 1, 30) == m
    store.handle(delete(D.DELETE_PARTITION_STARTED))
    assert store.remote_log_segment_metadata(TP0, 1, 30) == m
    assert store.remote_partition_delete_metadata(TP0) == delete(D.DELETE_PARTITION_STARTED)
    store.handle(delete(D.DELETE_PARTITION_FINISHED))
    with pytest.raises(RemoteResourceNotFoundException):
        store.remote_log_segment_metadata(TP0, 1, 30)
    assert store.remote_partition_delete_metadata(TP0) is None
    assert not store.is_initialized(TP0)
    with pytest.raises(IllegalStateError):  # its events are no longer accepted
        store.handle(seg(200, 300, {4: 200}))


def test_partition_delete_states_are_not_validated(store: RemotePartitionMetadataStore) -> None:
    """Kafka keeps the latest delete event whatever the transition (isValidTransition is
    never called), and accepts one for a partition it does not hold."""
    store.handle(delete(D.DELETE_PARTITION_STARTED))
    store.handle(delete(D.DELETE_PARTITION_MARKED))
    assert store.remote_partition_delete_metadata(TP0) == delete(D.DELETE_PARTITION_MARKED)
    store.handle(delete(D.DELETE_PARTITION_MARKED, TP1))
    assert store.remote_partition_delete_metadata(TP1) == delete(D.DELETE_PARTITION_MARKED, TP1)
    store.handle(delete(D.DELETE_PARTITION_FINISHED, TP1))
    assert store.remote_partition_delete_metadata(TP1) is None
    assert store.is_initialized(TP0)


def test_clear_topic_partition_keeps_the_delete_event(store: RemotePartitionMetadataStore) -> None:
    finished(store, seg(0, 100, {0: 0}))
    store.handle(delete(D.DELETE_PARTITION_MARKED))
    store.clear_topic_partition(TP0)
    assert not store.is_initialized(TP0)
    with pytest.raises(RemoteResourceNotFoundException):
        store.list_remote_log_segments(TP0)
    assert store.remote_partition_delete_metadata(TP0) == delete(D.DELETE_PARTITION_MARKED)
    store.clear_topic_partition(TP0)  # idempotent
    store.maybe_load_partition(TP0)  # reloading starts from an empty, uninitialized cache
    assert not store.is_initialized(TP0)


def test_partitions_are_independent(store: RemotePartitionMetadataStore) -> None:
    store.maybe_load_partition(TP1)
    store.mark_initialized(TP1)
    a = finished(store, seg(0, 100, {0: 0}))
    b = finished(store, seg(0, 100, {0: 0}, tip=TP1))
    assert list(store.list_remote_log_segments(TP0, 0)) == [a]
    assert list(store.list_remote_log_segments(TP1, 0)) == [b]
    store.handle(upd(b, S.DELETE_SEGMENT_STARTED))
    assert store.remote_log_segment_metadata(TP0, 0, 5) == a
    assert store.remote_log_segment_metadata(TP1, 0, 5) is None


def test_reads_through_the_store(store: RemotePartitionMetadataStore) -> None:
    a = seg(0, 99, {0: 0})
    a = RemoteLogSegmentMetadata(
        a.remote_log_segment_id, 0, 99, -1, 0, 1, 10, {0: 0}, txn_idx_empty=True
    )
    a = finished(store, a)
    b = finished(store, seg(100, 199, {0: 100, 1: 150}))
    assert store.next_segment_with_txn_index(TP0, 0, 5) == b
    assert store.highest_offset_for_epoch(TP0, 0) == 149
    assert store.highest_offset_for_epoch(TP0, 1) == 199
    assert list(store.list_remote_log_segments(TP0, 0)) == [a, b]
    assert sorted(store.list_remote_log_segments(TP0), key=lambda m: m.start_offset) == [a, b]


def test_close_drops_everything(store: RemotePartitionMetadataStore) -> None:
    finished(store, seg(0, 100, {0: 0}))
    store.handle(delete(D.DELETE_PARTITION_MARKED))
    store.close()
    assert not store.is_initialized(TP0)
    assert store.remote_partition_delete_metadata(TP0) is None
    with pytest.raises(RemoteResourceNotFoundException):
        store.remote_log_segment_metadata(TP0, 0, 0)
