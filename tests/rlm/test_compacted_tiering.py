"""Compacted topics in tiered storage, on a real ``RemoteLogManager`` (``_harness``: ``local`` RSM,
``embedded`` RLMM, injected clock; ``_cluster`` for a follower):

- a compacted topic's sealed segments are copied like a delete topic's; remote retention expires
  them by ``retention.ms`` with ``compact,delete`` and never with ``compact`` alone; local
  retention of a tiered ``compact`` topic waits for the cleaner offset;
- reads across the holes compaction leaves, served from remote storage: an offset compacted
  away gives the next batch, in the same remote segment or the next one (the hole is the end of
  a segment); a consumer reads each survivor once; a follower bootstrapped from remote storage
  replicates the holes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tierlog.log.batch import build_batch
from tierlog.log.reader import iter_batches_with_records
from tierlog.log.record import Record
from tierlog.rlm.remote_read import RemoteStorageFetchInfo, trim_partial_batch

from ._cluster import Cluster
from ._harness import NOW, Harness

HOUR = 3_600_000


@pytest.fixture
def make(tmp_path: Path) -> Iterator[object]:
    made: list[Harness] = []

    def factory(**topic: object) -> Harness:
        harness = Harness(tmp_path / f"h{len(made)}", topic=topic)
        made.append(harness)
        return harness

    yield factory
    for harness in made:
        harness.close()


def produce_and_roll(h: Harness, count: int) -> None:
    h.produce(count)
    h.log.roll()


# Copy and retention ------------------------------------------------------------------------------
def test_compact_delete_tiers_and_expires_by_remote_retention(make) -> None:  # type: ignore[no-untyped-def]
    h: Harness = make(**{"cleanup.policy": "compact,delete", "retention.ms": 10 * HOUR})
    assert h.log.remote_log_enabled
    h.lead()
    produce_and_roll(h, 300)
    h.tier()
    copied = h.remote_segments()
    assert copied, "a compacted topic's sealed segments are copied"
    assert copied[0].start_offset == 0
    assert copied[-1].end_offset == h.log.active_segment.base_offset - 1
    # Copied, and local.retention.bytes=1: the local copies went but the last sealed one, which
    # alone is above the limit (compact,delete is a delete topic for local retention); the
    # records are read back from remote storage.
    assert len(h.log.sealed_segments()) == 1
    assert h.log.local_log_start_offset == h.log.sealed_segments()[0].base_offset > 0
    assert [r.offset for r in h.consume()] == list(range(300))
    # Past retention.ms the remote segments expire and the log start follows.
    h.clock.advance(11 * HOUR)
    h.tier()
    assert h.remote_segments() == []
    assert h.log.log_start_offset == h.log.active_segment.base_offset


def test_compact_alone_tiers_but_never_expires_by_time_or_size(make) -> None:  # type: ignore[no-untyped-def]
    h: Harness = make(
        **{"cleanup.policy": "compact", "retention.ms": 10 * HOUR, "retention.bytes": 1000}
    )
    h.lead()
    produce_and_roll(h, 300)
    h.tier()
    copied = h.remote_segments()
    assert copied
    sealed = [s.base_offset for s in h.log.sealed_segments()]
    # Copied but never cleaned: local retention keeps every segment (the KIP's rule).
    assert sealed and sealed[0] == 0
    h.clock.advance(11 * HOUR)
    h.tier()
    # retention.ms and retention.bytes do not apply to a compacted topic without delete.
    assert [s.remote_log_segment_id for s in h.remote_segments()] == [
        s.remote_log_segment_id for s in copied
    ]
    assert h.log.log_start_offset == 0
    # The cleaner went over the first two segments: those local copies may go now.
    h.log.set_cleaner_offset(sealed[2])
    h.tier()
    assert [s.base_offset for s in h.log.sealed_segments()] == sealed[2:]
    assert h.log.local_log_start_offset == sealed[2]
    assert [r.offset for r in h.consume()] == list(range(300))


# Reads across holes ------------------------------------------------------------------------------
# (offsets of the surviving records, last offset of the batch), as a cleaner leaves them: three
# segments to tier, each ending before the next one's base, then the active one.
SEGMENTS = [
    [([0, 2], 3), ([5], 5), ([6], 6)],  # [0, 10): 7-9 compacted away
    [([11, 13], 14), ([17], 19)],  # [10, 20): starts with a hole, ends with an empty tail
    [([21], 21), ([24], 24)],  # [20, 30): 25-29 compacted away
]
ACTIVE = [([30], 30), ([32, 33], 33)]
SURVIVORS = [0, 2, 5, 6, 11, 13, 17, 21, 24, 30, 32, 33]


def batch(offsets: list[int], last: int) -> bytes:
    records = [Record(o, NOW, b"k%d" % o, b"v%d" % o) for o in offsets]
    return build_batch(
        records,
        base_offset=offsets[0],
        last_offset_delta=last - offsets[0],
        partition_leader_epoch=0,
    )


def build_with_holes(h: Harness) -> None:
    for n, segment in enumerate(SEGMENTS):
        for offsets, last in segment:
            h.log.append_as_follower(batch(offsets, last), 0)
        h.log.roll(10 * (n + 1))
    for offsets, last in ACTIVE:
        h.log.append_as_follower(batch(offsets, last), 0)
    h.lead()
    h.tier()


def remote_read(h: Harness, offset: int, max_bytes: int = 1) -> list[tuple[int, int]]:
    info = trim_partial_batch(
        h.rlm.read(
            RemoteStorageFetchInfo(
                max_bytes=max_bytes,
                min_one_message=True,
                topic_id_partition=h.tp,
                fetch_offset=offset,
                isolation="read_uncommitted",
            )
        )
    )
    return [(hd.base_offset, hd.last_offset) for hd in info.batches()]


@pytest.mark.parametrize("policy", ["compact,delete", "compact"])
def test_remote_reads_across_holes_return_the_next_batch(make, policy: str) -> None:  # type: ignore[no-untyped-def]
    h: Harness = make(**{"cleanup.policy": policy})
    build_with_holes(h)
    remote = h.remote_segments()
    assert [(s.start_offset, s.end_offset) for s in remote] == [(0, 9), (10, 19), (20, 29)]
    if policy == "compact":
        h.log.set_cleaner_offset(30)
        h.tier()
    assert h.log.local_log_start_offset == 30  # everything below is read from remote storage
    batches = [(o[0], last) for segment in SEGMENTS for o, last in segment]
    for offset in range(30):
        after = [b for b in batches if b[1] >= offset]
        got = remote_read(h, offset)
        # The batch holding the offset or the next one, in this segment or a later one; none
        # past the last remote batch (24).
        assert got[:1] == after[:1], offset
    # The hole is the end of segment [0, 10): a read at 8 continues in [10, 20).
    assert remote_read(h, 8, 1 << 20) == [(11, 14), (17, 19)]
    # Past the last batch of the last remote segment there is nothing remote.
    assert remote_read(h, 27) == []
    # A consumer reading remote storage from 0 gets each remote survivor once, moving past
    # each batch's last offset; at 25 (the final hole of the last remote segment) remote
    # storage has nothing more, and the next batch is the first local one, which
    # ``Node.fetch`` reads then (tests/rlm/test_compacted_node.py).
    seen: list[int] = []
    offset = 0
    while offset < 25:
        info = trim_partial_batch(
            h.rlm.read(
                RemoteStorageFetchInfo(
                    max_bytes=64,
                    min_one_message=True,
                    topic_id_partition=h.tp,
                    fetch_offset=offset,
                    isolation="read_uncommitted",
                )
            )
        )
        assert info.records, f"no progress at {offset}"
        for _, header, records in iter_batches_with_records(info.records):
            seen.extend(r.offset for r in records if r.offset >= offset)
            offset = header.last_offset + 1
    assert seen == [o for o in SURVIVORS if o < 25]
    assert [r.offset for r in h.consume(30)] == [30, 32, 33]


def test_a_follower_bootstrapped_from_remote_replicates_the_holes(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, topic={"cleanup.policy": "compact,delete"})
    try:
        leader, follower = cluster.nodes
        build_with_holes(leader)
        assert leader.log.local_log_start_offset == 30
        follower.rlm.on_leadership_change([], [follower.log])
        start = cluster.bootstrap_from_remote(leader, follower)
        assert start == 30
        cluster.replicate(leader, follower)
        assert follower.log.log_end_offset == leader.log.log_end_offset == 34
        leader_data = leader.log.read(30, 1 << 20, "log_end").records
        assert follower.log.read(30, 1 << 20, "log_end").records == leader_data
        # Below its local start, the follower serves the remote segments, holes and all.
        assert remote_read(follower, 8, 1 << 20) == [(11, 14), (17, 19)]
        assert [r.offset for _, _, rs in iter_batches_with_records(leader_data) for r in rs] == [
            30,
            32,
            33,
        ]
    finally:
        cluster.close()
