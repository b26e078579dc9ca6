"""The cache's routing of cleaned segments: KIP-1272's zombie-leader table, in every order.

Broker A (leader epoch 0) and broker B (epoch 1) both clean the same compacted partition and
upload rewritten segments with their cleaner-offset vectors. B resolved epoch 0's cleaner offset
as 100 when it took over; A, a zombie, later publishes a segment claiming 123 for epoch 0. The
zombie's segment must never be what a read gets, whatever order the events arrive in.
"""

from __future__ import annotations

import itertools

import pytest

from tierlog.metadata.cache import RemoteLogMetadataCache
from tierlog.spi import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    Uuid,
)

TIP = TopicIdPartition(Uuid.random(), "compacted", 0)


def _segment(
    start: int, end: int, vector: dict[int, int] | None, epochs: dict[int, int] | None = None
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TIP, Uuid.random()),
        start,
        end,
        max_timestamp_ms=1,
        broker_id=0,
        event_timestamp_ms=1,
        segment_size_in_bytes=end - start + 1,
        segment_leader_epochs=epochs or {0: start},
        cleaner_offsets=vector,
    )


def _finish(cache: RemoteLogMetadataCache, seg: RemoteLogSegmentMetadata) -> None:
    cache.add_copy_in_progress_segment(seg)
    cache.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(
            seg.remote_log_segment_id, 2, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0
        )
    )


def _routed(cache: RemoteLogMetadataCache, epoch: int, offset: int) -> RemoteLogSegmentId | None:
    found = cache.remote_log_segment_metadata(epoch, offset)
    return None if found is None else found.remote_log_segment_id


def test_a_cleaned_segment_replaces_the_copied_one_and_carries_its_vector() -> None:
    cache = RemoteLogMetadataCache(TIP)
    original = _segment(0, 99, None)
    _finish(cache, original)
    cleaned = _segment(0, 99, {0: 100})
    _finish(cache, cleaned)
    found = cache.remote_log_segment_metadata(0, 50)
    assert found is not None
    assert found.remote_log_segment_id == cleaned.remote_log_segment_id
    assert found.cleaner_offsets == {0: 100}
    # As in Kafka, the displaced segment stays listed (unreferenced) until it is deleted: the
    # expiration task finds it there.
    assert {s.remote_log_segment_id for s in cache.list_remote_log_segments(0)} == {
        cleaned.remote_log_segment_id,
        original.remote_log_segment_id,
    }


@pytest.mark.parametrize("order", list(itertools.permutations(["seg1", "seg2"])))
def test_kip_table_zombie_segment_is_ignored_in_any_arrival_order(order: tuple[str, str]) -> None:
    """Seg-0 {LE-0: 100} from A; B takes over; B's Seg-2 {LE-0: 100, LE-1: 155}; A's late
    Seg-1 {LE-0: 123}. Seg-1 and Seg-2 rewrite different segments here (the harder case: no
    same-offset competition decides it)."""
    cache = RemoteLogMetadataCache(TIP)
    originals = {
        "x": _segment(0, 99, None),
        "y": _segment(100, 199, None, {0: 100, 1: 150}),
    }
    for seg in originals.values():
        _finish(cache, seg)
    seg0 = _segment(0, 99, {0: 100})  # A's finished compaction of x
    _finish(cache, seg0)
    seg1 = _segment(100, 199, {0: 123}, {0: 100, 1: 150})  # zombie A, rewrites y
    seg2 = _segment(0, 99, {0: 100, 1: 155})  # B, rewrites x again
    segs = {"seg1": seg1, "seg2": seg2}
    for name in order:
        _finish(cache, segs[name])
    # B's segment serves x; y goes back to (or stays) the copied original, never Seg-1.
    assert _routed(cache, 0, 50) == seg2.remote_log_segment_id
    assert _routed(cache, 0, 120) == originals["y"].remote_log_segment_id
    assert _routed(cache, 1, 160) == originals["y"].remote_log_segment_id
    # The zombie's segment is listed as unreferenced (for the expiration task), never served.
    listed = {s.remote_log_segment_id for s in cache.list_remote_log_segments(0)}
    assert seg1.remote_log_segment_id in listed


@pytest.mark.parametrize("order", list(itertools.permutations(["old", "new"])))
def test_the_newer_generation_of_the_same_offsets_wins_in_any_order(order: tuple[str, str]) -> None:
    cache = RemoteLogMetadataCache(TIP)
    _finish(cache, _segment(0, 99, None))
    segs = {"old": _segment(0, 99, {0: 80}), "new": _segment(0, 99, {0: 100})}
    for name in order:
        _finish(cache, segs[name])
    assert _routed(cache, 0, 10) == segs["new"].remote_log_segment_id


def test_a_zombie_from_an_epoch_outside_the_new_leaders_lineage_is_fenced() -> None:
    """B resolved nothing for epoch 0 but names it (its lineage holds it); a claim by an epoch
    B's vector does not name at all is fenced too."""
    cache = RemoteLogMetadataCache(TIP)
    original = _segment(0, 99, None, {0: 0, 2: 50})
    _finish(cache, original)
    _finish(cache, _segment(100, 199, {0: 0, 2: 10}, {2: 100}))  # B (epoch 2)
    stray = _segment(0, 99, {1: 60}, {0: 0, 2: 50})  # epoch 1 never in B's lineage
    _finish(cache, stray)
    assert _routed(cache, 0, 10) == original.remote_log_segment_id


def test_segments_without_a_vector_keep_kafkas_last_finished_wins() -> None:
    cache = RemoteLogMetadataCache(TIP)
    first = _segment(0, 99, None)
    second = _segment(0, 99, None)
    _finish(cache, first)
    _finish(cache, second)
    assert _routed(cache, 0, 10) == second.remote_log_segment_id
