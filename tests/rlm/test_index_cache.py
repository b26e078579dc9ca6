"""RemoteIndexCache: Kafka's RemoteIndexCacheTest scenarios on real segments in the local RSM.

The segments are written by a real ``LocalLog`` and tiered into the ``local`` RSM (see
``_tiering``); the RSM is wrapped in a counting subclass so "fetched once, then cached" is a fact
about real requests. Time (expiry, the cleaner's delay) runs on an injected clock.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import pytest

from tierlog.log.batch import ControlRecordType
from tierlog.log.index import CorruptIndexError, OffsetPosition
from tierlog.log.local_log import LocalLog
from tierlog.log.offset_index import OffsetIndex
from tierlog.log.txn_index import AbortedTxn
from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager
from tierlog.rlm.index_cache import (
    CLEANER_THREAD_NAME,
    DIR_NAME,
    DecodedOffsetIndex,
    RemoteIndexCache,
    offset_index_file_name,
    time_index_file_name,
    txn_index_file_name,
)
from tierlog.spi import (
    IllegalStateError,
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    Uuid,
)

from ._tiering import (
    Clock,
    CountingStorage,
    batch,
    fill,
    marker,
    open_log,
    open_rlmm,
    open_rsm,
    tier,
    txn_batch,
)

KAFKA_NAME = re.compile(r"(\d+)_([A-Za-z0-9_-]{22})\.(index|timeindex|txnindex)")
INDEX_TYPES = (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.TRANSACTION)


@dataclass
class Env:
    """A log of six tiered segments, the RSM and RLMM holding them, and caches to close."""

    root: Path
    clock: Clock
    log: LocalLog
    rsm: CountingStorage
    rlmm: EmbeddedRemoteLogMetadataManager
    segments: list[RemoteLogSegmentMetadata]
    caches: list[RemoteIndexCache] = field(default_factory=list)

    @property
    def log_dir(self) -> Path:
        return self.root / "broker"

    @property
    def cache_dir(self) -> Path:
        return self.log_dir / DIR_NAME

    def cache(self, rsm: CountingStorage | None = None, **kwargs: object) -> RemoteIndexCache:
        options: dict[str, object] = {"clock": self.clock, "cleaner_delay_ms": 10_000}
        options.update(kwargs)
        cache = RemoteIndexCache(rsm or self.rsm, self.log_dir, **options)  # type: ignore[arg-type]
        self.caches.append(cache)
        return cache

    def files(self) -> list[str]:
        return sorted(p.name for p in self.cache_dir.iterdir())


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    clock = Clock()
    log = open_log(tmp_path / "topic-0", clock)
    fill(log, 40)
    rsm = open_rsm(tmp_path / "remote")
    rlmm = open_rlmm(tmp_path / "rlmm")
    segments = tier(log, rsm, rlmm)
    assert len(segments) >= 6
    rsm.reset_counts()
    environment = Env(tmp_path, clock, log, rsm, rlmm, segments)
    yield environment
    for cache in environment.caches:
        cache.close()
    rlmm.close()
    rsm.close()
    log.close()


DEADLINE_S = 60.0
"""How long a test waits for another thread before it fails: only a hung one takes this."""


def wait_until(condition: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    """Poll for something another thread does (the cleaner), a few milliseconds at a time."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


def entry_weight(env: Env, metadata: RemoteLogSegmentMetadata) -> int:
    with env.cache(max_size_bytes=1 << 20) as probe:
        weight = probe.get_index_entry(metadata).size_bytes
    shutil.rmtree(env.cache_dir)
    env.rsm.reset_counts()
    return weight


# Names and fetching ----------------------------------------------------------------------------
def test_index_file_names_and_location(env: Env) -> None:
    cache = env.cache()
    metadata = env.segments[1]  # start offset 6: not zero-padded in the name
    entry = cache.get_index_entry(metadata)
    uuid = str(metadata.remote_log_segment_id.id)
    assert entry.offset_index.path == env.cache_dir / f"6_{uuid}.index"
    assert entry.time_index.path == env.cache_dir / f"6_{uuid}.timeindex"
    assert entry.txn_index.path == env.cache_dir / f"6_{uuid}.txnindex"
    assert entry.offset_index.path.name == offset_index_file_name(metadata)
    assert entry.time_index.path.name == time_index_file_name(metadata)
    assert entry.txn_index.path.name == txn_index_file_name(metadata)
    assert cache.cache_dir == env.log_dir / "remote-log-index-cache"
    for name in env.files():
        match = KAFKA_NAME.fullmatch(name)
        assert match is not None, name
        assert (int(match[1]), Uuid.from_string(match[2])) == (6, metadata.remote_log_segment_id.id)
    # The downloaded files are the remote indexes byte for byte.
    remote = env.rsm.segment_paths(metadata)
    assert entry.offset_index.path.read_bytes() == remote[".index"].read_bytes()
    assert entry.time_index.path.read_bytes() == remote[".timeindex"].read_bytes()


def test_fetch_from_remote_storage_once_then_cached(env: Env) -> None:
    cache = env.cache()
    metadata = env.segments[0]
    second = cache.get_index_entry(metadata).offset_index.entry(1)
    assert env.rsm.index_fetches() == 3
    assert {t for _, t in env.rsm.index_requests} == set(INDEX_TYPES)
    assert cache.lookup_offset(metadata, second.offset) == second.position
    first = cache.get_index_entry(metadata).offset_index.entry(0)
    assert cache.lookup_offset(metadata, first.offset) == first.position
    assert cache.lookup_timestamp(metadata, 0, metadata.start_offset) == 0
    cache.collect_aborted(metadata, 0, 100)
    assert env.rsm.index_fetches() == 3  # nothing fetched again
    stats = cache.stats()
    assert (stats.misses, stats.hits) == (1, 5)
    assert dict(stats.fetches) == {**dict.fromkeys(IndexType, 0), **dict.fromkeys(INDEX_TYPES, 1)}
    assert cache.fetch_count() == 3 and cache.fetch_count(IndexType.OFFSET) == 1
    assert (cache.entry_count, cache.size_bytes) == (1, cache.get_index_entry(metadata).size_bytes)
    summary = cache.stats().summary()
    assert summary.startswith("6 hits, 1 misses, 0 load failures, 0 evictions, 0 expirations;")
    assert "offset=1" in summary and "mappingproxy" not in summary


def test_missing_transaction_index_is_cached_as_an_empty_file(env: Env) -> None:
    metadata = env.segments[0]
    with pytest.raises(RemoteResourceNotFoundException):  # the RSM has none for this segment
        env.rsm.fetch_index(metadata, IndexType.TRANSACTION)
    env.rsm.reset_counts()
    cache = env.cache()
    entry = cache.get_index_entry(metadata)
    assert entry.txn_index.path.exists() and entry.txn_index.path.stat().st_size == 0
    assert entry.txn_index.is_empty()
    assert cache.collect_aborted(metadata, 0, 1000).aborted_transactions == []
    cache.close()
    # The empty file completes the set: a restart loads it without asking again.
    env.rsm.reset_counts()
    restarted = env.cache()
    assert restarted.contains(metadata.remote_log_segment_id.id)
    restarted.get_index_entry(metadata)
    assert env.rsm.index_fetches() == 0


def test_transaction_index_with_aborted_transactions(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "topic-0", clock)
    log.append_as_leader(batch("a"), 0)  # 0
    log.append_as_leader(txn_batch(7, 0, "t1", "t2"), 0)  # 1-2
    log.append_as_leader(marker(ControlRecordType.ABORT, 7), 0, origin="coordinator")  # 3
    log.roll()
    log.append_as_leader(batch("b"), 0)
    rsm = open_rsm(tmp_path / "remote")
    rlmm = open_rlmm(tmp_path / "rlmm")
    (metadata,) = tier(log, rsm, rlmm)
    assert not metadata.txn_idx_empty
    with RemoteIndexCache(rsm, tmp_path / "broker", clock=clock) as cache:
        entry = cache.get_index_entry(metadata)
        assert entry.txn_index.path.read_bytes() == AbortedTxn(7, 1, 3, 4).to_bytes()
        result = cache.collect_aborted(metadata, 0, 4)
        assert result.aborted_transactions == [AbortedTxn(7, 1, 3, 4)]
        assert cache.collect_aborted(metadata, 4, 10).aborted_transactions == []
    rlmm.close()
    rsm.close()
    log.close()


def test_lookups_below_the_first_entry_and_past_the_last(env: Env) -> None:
    cache = env.cache()
    metadata = env.segments[2]
    index = cache.get_index_entry(metadata).offset_index
    assert index.entries >= 2
    first, last = index.entry(0), index.entry(index.entries - 1)
    assert cache.lookup_offset(metadata, metadata.start_offset - 1) == 0
    assert cache.lookup_offset(metadata, first.offset - 1) == 0
    assert cache.lookup_offset(metadata, first.offset) == first.position
    assert cache.lookup_offset(metadata, last.offset) == last.position
    assert cache.lookup_offset(metadata, last.offset + 1) == last.position
    assert cache.lookup_offset(metadata, 1 << 40) == last.position
    # Timestamps: record at offset o has timestamp NOW - 10_000 + o (see _tiering.fill).
    time_index = cache.get_index_entry(metadata).time_index
    ts_first = time_index.entry(0)
    assert cache.lookup_timestamp(metadata, 0, metadata.start_offset) == 0
    assert cache.lookup_timestamp(metadata, ts_first.timestamp, metadata.start_offset) == (
        index.lookup(ts_first.offset).position
    )
    # A starting offset past the time index's answer moves the position on.
    assert cache.lookup_timestamp(metadata, 0, last.offset) == last.position


def test_in_memory_lookups_answer_as_the_index_file_does(tmp_path: Path) -> None:
    """The entry decodes its offset index once and searches it in memory: every answer is
    the file-searching ``OffsetIndex``'s, below, between, on and past the entries (a segment
    large enough for the file search to use its windows)."""
    clock = Clock()
    props = {
        "internal.segment.bytes": 200_000,
        "index.interval.bytes": 0,
        "segment.index.bytes": 1 << 20,
    }
    log = open_log(tmp_path / "topic-0", clock, **props)
    try:
        fill(log, 3000)
        rsm = open_rsm(tmp_path / "remote")
        rlmm = open_rlmm(tmp_path / "rlmm")
        (metadata, *_) = tier(log, rsm, rlmm)
        with RemoteIndexCache(rsm, tmp_path / "broker", clock=clock) as cache:
            entry = cache.get_index_entry(metadata)
            index = entry.offset_index
            assert index.entries > 1024  # more than two search windows
            base = metadata.start_offset
            for offset in range(base - 2, metadata.end_offset + 3):
                assert entry.lookup_offset(offset) == index.lookup(offset), offset
            for position in range(-1, metadata.segment_size_in_bytes + 2, 37):
                at = OffsetPosition(base, position)
                assert entry.first_entry_after(position) == index.fetch_upper_bound_offset(
                    OffsetPosition(base, position), 1
                )
                assert entry.fetch_upper_bound_offset(at, 5) == index.fetch_upper_bound_offset(
                    at, 5
                )
            for offset in range(base - 1, metadata.end_offset + 2):
                assert entry.read_bounds(offset) == _file_read_bounds(index, offset), offset
        rlmm.close()
        rsm.close()
    finally:
        log.close()


def _file_read_bounds(
    index: OffsetIndex, offset: int
) -> tuple[OffsetPosition, OffsetPosition | None, OffsetPosition | None]:
    """``read_bounds`` from the file: the lookup and the next two entries by position."""
    found = index.lookup(offset)
    bound = index.fetch_upper_bound_offset(found, 1)
    after = None if bound is None else index.fetch_upper_bound_offset(bound, 1)
    return found, bound, after


@pytest.mark.parametrize(
    "entries",
    [[], [(100, 0)], [(100, 0), (103, 98), (107, 250)], [(102, 98)], [(102, 98), (105, 300)]],
)
def test_in_memory_read_bounds_of_small_indexes(
    tmp_path: Path, entries: list[tuple[int, int]]
) -> None:
    """Empty, one entry, a first entry at position 0 (not written by tierlog's indexer, but
    legal): ``read_bounds`` is the file's lookup and next two entries."""
    path = tmp_path / "00000000000000000100.index"
    with OffsetIndex(path, 100, 4096) as writer:
        for offset, position in entries:
            writer.append(offset, position)
    with OffsetIndex(path, 100, writable=False) as index:
        decoded = DecodedOffsetIndex.read(index)
        for offset in range(98, 110):
            assert decoded.read_bounds(offset) == _file_read_bounds(index, offset), offset
            assert decoded.lookup(offset) == index.lookup(offset)


def test_an_entry_renamed_before_its_first_lookup_decodes_its_open_file(env: Env) -> None:
    """Once removed, an entry's files are ``*.deleted``, a name the next entry of the same
    segment takes over when it is removed in turn (and the cleaner deletes it): the first
    lookup of the older entry, still held, reads the file it opened, not that name."""
    metadata = env.segments[1]
    uuid = metadata.remote_log_segment_id.id
    cache = env.cache(cleaner_delay_ms=0)
    with cache.acquire(metadata) as old:
        target = old.offset_index.entry(1)
        cache.remove(uuid)  # renamed; deletion deferred while held
        newer = cache.get_index_entry(metadata)
        cache.remove(uuid)  # renamed over the older entry's *.deleted files
        cache.clean_up()
        wait_until(lambda: newer.cleanup_started, "the newer entry's deletion")
        assert not old.cleanup_started
        assert not old.offset_index.path.exists()
        assert old.lookup_offset(target.offset) == target
        assert old.read_bounds(target.offset)[0] == target
    assert old.cleanup_started


# Eviction and expiry ---------------------------------------------------------------------------
def test_size_eviction_is_least_recently_used_by_weight(env: Env) -> None:
    s0, s1, s2 = env.segments[:3]
    weight = entry_weight(env, s0)
    assert weight > 0
    cache = env.cache(max_size_bytes=2 * weight)
    cache.get_index_entry(s0)
    cache.get_index_entry(s1)
    assert (cache.entry_count, cache.size_bytes) == (2, 2 * weight)
    cache.lookup_offset(s0, s0.start_offset)  # s0 is now the most recently used
    cache.get_index_entry(s2)
    assert cache.contains(s0.remote_log_segment_id.id)
    assert not cache.contains(s1.remote_log_segment_id.id)
    assert cache.contains(s2.remote_log_segment_id.id)
    assert (cache.entry_count, cache.size_bytes) == (2, 2 * weight)
    assert cache.stats().evictions == 1
    uuid1 = str(s1.remote_log_segment_id.id)
    assert sorted(n for n in env.files() if uuid1 in n) == [
        f"{s1.start_offset}_{uuid1}{suffix}.deleted"
        for suffix in (".index", ".timeindex", ".txnindex")
    ]
    assert env.rsm.index_fetches() == 9
    cache.get_index_entry(s1)  # evicted: fetched again, evicting s0 (now the least recent)
    assert env.rsm.index_fetches() == 12
    assert not cache.contains(s0.remote_log_segment_id.id)


def test_an_entry_heavier_than_the_cache_is_evicted_at_once_but_served(env: Env) -> None:
    metadata = env.segments[0]
    cache = env.cache(max_size_bytes=1)
    position = cache.get_index_entry(metadata).offset_index.entry(1).position
    assert cache.entry_count == 0 and cache.size_bytes == 0
    offset = cache.get_index_entry(metadata).offset_index.entry(1).offset
    assert cache.lookup_offset(metadata, offset) == position


def test_ttl_expiry_after_access(env: Env) -> None:
    s0, s1 = env.segments[:2]
    cache = env.cache(ttl_ms=10_000)
    cache.get_index_entry(s0)
    env.clock.advance(9_000)
    assert cache.entry_count == 1
    env.clock.advance(2_000)
    assert cache.entry_count == 0
    assert cache.stats().expirations == 1
    # Several entries expire independently.
    cache.get_index_entry(s0)
    env.clock.advance(5_000)
    cache.get_index_entry(s1)
    env.clock.advance(6_000)
    assert not cache.contains(s0.remote_log_segment_id.id)
    assert cache.contains(s1.remote_log_segment_id.id)


def test_ttl_is_refreshed_by_access(env: Env) -> None:
    metadata = env.segments[0]
    cache = env.cache(ttl_ms=10_000)
    cache.get_index_entry(metadata)
    env.clock.advance(8_000)
    cache.lookup_offset(metadata, metadata.start_offset)
    env.clock.advance(8_000)
    assert cache.contains(metadata.remote_log_segment_id.id)
    assert env.rsm.index_fetches() == 3


@pytest.mark.parametrize("ttl_ms", [0, -1])
def test_ttl_can_be_disabled(env: Env, ttl_ms: int) -> None:
    cache = env.cache(ttl_ms=ttl_ms)
    cache.get_index_entry(env.segments[0])
    env.clock.advance(15 * 60 * 1000 * 100)
    cache.clean_up()
    assert cache.entry_count == 1


def test_size_and_time_eviction_together(env: Env) -> None:
    weight = entry_weight(env, env.segments[0])
    cache = env.cache(max_size_bytes=2 * weight, ttl_ms=10_000)
    for metadata in env.segments[:3]:
        cache.get_index_entry(metadata)
    assert cache.entry_count == 2
    env.clock.advance(11_000)
    assert cache.entry_count == 0 and cache.size_bytes == 0


def test_resize(env: Env) -> None:
    weight = entry_weight(env, env.segments[0])
    cache = env.cache()
    for metadata in env.segments[:4]:
        cache.get_index_entry(metadata)
    cache.resize(2 * weight)
    assert cache.max_size_bytes == 2 * weight
    assert [cache.contains(m.remote_log_segment_id.id) for m in env.segments[:4]] == [
        False,
        False,
        True,
        True,
    ]
    cache.resize(1 << 30)
    cache.get_index_entry(env.segments[0])
    assert cache.entry_count == 3
    cache.resize(0)
    assert cache.entry_count == 0
    assert all(name.endswith(".deleted") for name in env.files())


# Removal and the cleaner -----------------------------------------------------------------------
def test_remove_renames_then_the_cleaner_deletes_after_the_delay(env: Env) -> None:
    metadata = env.segments[0]
    cache = env.cache(cleaner_delay_ms=10_000)
    entry = cache.get_index_entry(metadata)
    cache.remove(metadata.remote_log_segment_id.id)
    assert not cache.contains(metadata.remote_log_segment_id.id)
    assert entry.marked_for_cleanup and not entry.cleanup_started
    assert len(env.files()) == 3 and all(n.endswith(".deleted") for n in env.files())
    assert cache.pending_cleanup_count == 1
    env.clock.advance(9_999)
    cache.clean_up()
    assert len(env.files()) == 3
    env.clock.advance(1)
    cache.clean_up()
    assert env.files() == [] and entry.cleanup_started
    assert cache.pending_cleanup_count == 0


def test_the_cleaner_thread_deletes_on_its_own(env: Env) -> None:
    cache = env.cache(cleaner_delay_ms=0)
    assert cache.cleaner_alive
    for metadata in env.segments[:2]:
        cache.get_index_entry(metadata)
    cache.remove_all([m.remote_log_segment_id.id for m in env.segments[:2]])
    wait_until(lambda: env.files() == [], "the cleaner to delete the files")
    assert cache.entry_count == 0


def test_remove_unknown_and_remove_all(env: Env) -> None:
    cache = env.cache()
    for metadata in env.segments[:4]:
        cache.get_index_entry(metadata)
    cache.remove(Uuid.random())
    assert cache.entry_count == 4 and not any(n.endswith(".deleted") for n in env.files())
    cache.remove_all([m.remote_log_segment_id.id for m in env.segments[1:3]] + [Uuid.random()])
    assert [cache.contains(m.remote_log_segment_id.id) for m in env.segments[:4]] == [
        True,
        False,
        False,
        True,
    ]
    assert sum(n.endswith(".deleted") for n in env.files()) == 6


def test_entry_stays_readable_when_marked_for_cleanup(env: Env) -> None:
    """Kafka's testFetchIndexAccessibleWhenMarkedForCleanup."""
    metadata = env.segments[0]
    uuid = metadata.remote_log_segment_id.id
    cache = env.cache(cleaner_delay_ms=300_000)
    entry = cache.get_index_entry(metadata)
    target = entry.offset_index.entry(1)
    cache.remove(uuid)
    assert entry.lookup_offset(target.offset) == target
    # The cache fetches a new entry; both coexist on disk (3 live + 3 deleted files).
    assert cache.lookup_offset(metadata, target.offset) == target.position
    assert env.rsm.index_fetches() == 6
    entry2 = cache.get_index_entry(metadata)
    assert entry2 is not entry and len(env.files()) == 6
    cache.remove(uuid)
    assert len(env.files()) == 3
    assert entry.lookup_offset(target.offset) == target
    assert entry2.lookup_offset(target.offset) == target
    entry.cleanup()
    with pytest.raises(IllegalStateError):
        entry.lookup_offset(target.offset)
    assert entry2.lookup_offset(target.offset) == target
    entry2.cleanup()
    assert env.files() == []
    with pytest.raises(IllegalStateError):
        entry2.lookup_offset(target.offset)


def test_files_in_use_are_deleted_only_when_released(env: Env) -> None:
    metadata = env.segments[0]
    cache = env.cache(cleaner_delay_ms=0)
    with cache.acquire(metadata) as entry:
        target = entry.offset_index.entry(1)
        cache.remove(metadata.remote_log_segment_id.id)
        cache.clean_up()  # due now, but the entry is in use: deletion is deferred
        assert entry.references == 1 and not entry.cleanup_started
        assert len(env.files()) == 3
        assert entry.offset_index.lookup(target.offset) == target
    assert entry.cleanup_started and entry.references == 0
    wait_until(lambda: env.files() == [], "the deferred deletion")


# Corruption ------------------------------------------------------------------------------------
def _keep_copies(env: Env, metadata: RemoteLogSegmentMetadata) -> dict[Path, bytes]:
    cache = env.cache()
    entry = cache.get_index_entry(metadata)
    saved = {
        index.path: index.path.read_bytes()
        for index in (entry.offset_index, entry.time_index, entry.txn_index)
    }
    cache.close()
    shutil.rmtree(env.cache_dir)
    env.rsm.reset_counts()
    return saved


def test_index_files_already_on_disk_are_used(env: Env) -> None:
    """Kafka's testIndexFileAlreadyExistOnDiskButNotInCache: files present, no entry yet."""
    metadata = env.segments[0]
    saved = _keep_copies(env, metadata)
    cache = env.cache()
    for path, data in saved.items():
        path.write_bytes(data)
    cache.get_index_entry(metadata)
    assert env.rsm.index_fetches() == 0
    assert dict(cache.stats().disk_hits) == {
        **dict.fromkeys(IndexType, 0),
        **dict.fromkeys(INDEX_TYPES, 1),
    }


def test_a_corrupt_cached_file_is_fetched_again(env: Env) -> None:
    metadata = env.segments[0]
    saved = _keep_copies(env, metadata)
    cache = env.cache()
    for path, data in saved.items():
        path.write_bytes(b"Hello, world1" if path.suffix == ".timeindex" else data)
    entry = cache.get_index_entry(metadata)
    assert env.rsm.index_requests == [(metadata.remote_log_segment_id.id, IndexType.TIMESTAMP)]
    entry.time_index.sanity_check()
    assert (
        entry.time_index.path.read_bytes()
        == env.rsm.segment_paths(metadata)[".timeindex"].read_bytes()
    )


class CorruptingStorage(CountingStorage):
    """The local RSM serving a damaged copy of one index type."""

    def __init__(self, damaged: IndexType) -> None:
        super().__init__()
        self.damaged: IndexType | None = damaged

    def fetch_index(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata, index_type: IndexType
    ) -> BinaryIO:
        stream = super().fetch_index(remote_log_segment_metadata, index_type)
        if index_type is not self.damaged:
            return stream
        with stream:
            data = stream.read()
        if index_type is IndexType.OFFSET:
            return io.BytesIO(b"Hello, world")  # 12 bytes: not a multiple of 8
        if index_type is IndexType.TIMESTAMP:
            return io.BytesIO(data[12:] + data[:12])  # timestamps out of order
        # a last offset below the segment's start offset, as Kafka's test builds one
        return io.BytesIO(AbortedTxn(0, 0, 1, 1).to_bytes())


@pytest.mark.parametrize("damaged", INDEX_TYPES)
def test_a_corrupt_index_from_remote_storage_is_not_cached(env: Env, damaged: IndexType) -> None:
    metadata = env.segments[1]
    rsm = CorruptingStorage(damaged)
    rsm.configure({"dir": str(env.root / "remote"), "node.id": "0"})
    # Give the damaged type something to damage: a real transaction index for this segment.
    txn_path = rsm.segment_paths(metadata)[".txnindex"]
    txn_path.write_bytes(AbortedTxn(5, 7, 8, 7).to_bytes())
    cache = env.cache(rsm)
    with pytest.raises(CorruptIndexError):
        cache.get_index_entry(metadata)
    assert not cache.contains(metadata.remote_log_segment_id.id)
    suffix = {
        IndexType.OFFSET: ".index",
        IndexType.TIMESTAMP: ".timeindex",
        IndexType.TRANSACTION: ".txnindex",
    }[damaged]
    assert not any(n.endswith(suffix) for n in env.files())
    assert not any(n.endswith(".tmp") for n in env.files())
    # The fetch stopped at the damaged index: those before it were downloaded and kept.
    assert [t for _, t in rsm.index_requests] == list(INDEX_TYPES[: INDEX_TYPES.index(damaged) + 1])
    # Healthy this time: the damaged index and those after it are fetched, the others reused.
    rsm.damaged = None
    rsm.reset_counts()
    entry = cache.get_index_entry(metadata)
    assert [t for _, t in rsm.index_requests] == list(INDEX_TYPES[INDEX_TYPES.index(damaged) :])
    entry.offset_index.sanity_check()
    entry.time_index.sanity_check()
    assert entry.txn_index.all_aborted_txns() == [AbortedTxn(5, 7, 8, 7)]
    rsm.close()


# Startup ---------------------------------------------------------------------------------------
def test_startup_deletes_leftovers_and_partial_sets_and_loads_complete_ones(env: Env) -> None:
    good, partial, corrupt = env.segments[:3]
    cache = env.cache()
    for metadata in (good, partial, corrupt):
        cache.get_index_entry(metadata)
    cache.close()
    (env.cache_dir / txn_index_file_name(partial)).unlink()
    (env.cache_dir / offset_index_file_name(corrupt)).write_bytes(b"\x00\x00\x00\x05" * 3)
    leftovers = [
        f"100_{Uuid.random()}.index.deleted",
        f"100_{Uuid.random()}.timeindex.tmp",
        offset_index_file_name(good) + ".tmp",
    ]
    for name in leftovers:
        (env.cache_dir / name).write_bytes(b"x")
    (env.cache_dir / "README").write_text("not ours")
    env.rsm.reset_counts()
    restarted = env.cache()
    assert restarted.entry_count == 1 and restarted.contains(good.remote_log_segment_id.id)
    good_uuid = str(good.remote_log_segment_id.id)
    assert env.files() == sorted(
        [
            "README",
            *(f"{good.start_offset}_{good_uuid}{s}" for s in (".index", ".timeindex", ".txnindex")),
        ]
    )
    restarted.lookup_offset(good, good.start_offset)
    assert env.rsm.index_fetches() == 0


def test_restart_reloads_the_entries(env: Env) -> None:
    weight = entry_weight(env, env.segments[0])
    cache = env.cache()
    for metadata in env.segments[:3]:
        cache.get_index_entry(metadata)
    cache.close()
    env.rsm.reset_counts()
    reloaded = env.cache()
    assert reloaded.entry_count == 3 and reloaded.size_bytes == 3 * weight
    for metadata in env.segments[:3]:
        reloaded.lookup_offset(metadata, metadata.start_offset + 3)
    assert env.rsm.index_fetches() == 0
    reloaded.close()
    smaller = env.cache(max_size_bytes=2 * weight)
    assert smaller.entry_count == 2


# Lifecycle -------------------------------------------------------------------------------------
def _cleaner_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == CLEANER_THREAD_NAME and t.is_alive()]


def test_close_is_idempotent_keeps_the_files_and_stops_the_cleaner(env: Env) -> None:
    before = len(_cleaner_threads())
    cache = env.cache()
    assert len(_cleaner_threads()) == before + 1
    entry = cache.get_index_entry(env.segments[0])
    cache.close()
    cache.close()
    assert cache.closed and not cache.cleaner_alive
    assert len(_cleaner_threads()) == before
    assert entry.offset_index.closed
    assert len(env.files()) == 3
    with pytest.raises(IllegalStateError, match="closed"):
        cache.get_index_entry(env.segments[0])
    with pytest.raises(IllegalStateError):
        cache.lookup_offset(env.segments[1], 0)


# Concurrency -----------------------------------------------------------------------------------
class BlockingStorage(CountingStorage):
    """The local RSM, holding index fetches of one segment until released."""

    def __init__(self, blocked: Uuid) -> None:
        super().__init__()
        self.blocked = blocked
        self.entered = threading.Event()
        self.release = threading.Event()

    def fetch_index(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata, index_type: IndexType
    ) -> BinaryIO:
        if remote_log_segment_metadata.remote_log_segment_id.id == self.blocked:
            self.entered.set()
            assert self.release.wait(DEADLINE_S)
        return super().fetch_index(remote_log_segment_metadata, index_type)


def test_a_miss_does_not_block_hits_and_loads_once(env: Env) -> None:
    cached, missing = env.segments[:2]
    rsm = BlockingStorage(missing.remote_log_segment_id.id)
    rsm.configure({"dir": str(env.root / "remote"), "node.id": "0"})
    cache = env.cache(rsm)
    cache.get_index_entry(cached)
    with ThreadPoolExecutor(3) as pool:
        loads = [pool.submit(cache.get_index_entry, missing) for _ in range(2)]
        assert rsm.entered.wait(DEADLINE_S)
        # While the miss is inside the RSM, a hit on another segment is served.
        hit = pool.submit(cache.lookup_offset, cached, cached.start_offset)
        assert hit.result(timeout=DEADLINE_S) == 0
        assert not loads[0].done() and not loads[1].done()
        rsm.release.set()
        first, second = (f.result(timeout=DEADLINE_S) for f in loads)
    assert first is second
    # Both callers got the one load: each index of the missing segment was fetched once.
    assert sorted(t.value for u, t in rsm.index_requests if u == rsm.blocked) == sorted(
        t.value for t in INDEX_TYPES
    )
    rsm.close()


def test_lookups_racing_eviction_never_read_a_deleted_file(env: Env) -> None:
    """A cache with room for one entry, deleting evicted files at once, hammered by threads
    looking up all six segments: every answer is right, no file vanishes under a reader."""
    weight = entry_weight(env, env.segments[0])
    cache = env.cache(max_size_bytes=weight, cleaner_delay_ms=0)
    expected: dict[int, list[tuple[int, int]]] = {}
    for i, metadata in enumerate(env.segments):
        entries = list(cache.get_index_entry(metadata).offset_index)
        expected[i] = [(e.offset, e.position) for e in entries]
    errors: list[BaseException] = []

    def hammer(seed: int) -> None:
        try:
            for n in range(150):
                i = (seed + n) % len(env.segments)
                metadata = env.segments[i]
                for offset, position in expected[i]:
                    assert cache.lookup_offset(metadata, offset) == position
                with cache.acquire(metadata) as entry:
                    assert [(e.offset, e.position) for e in entry.offset_index] == expected[i]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(s,)) for s in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert cache.stats().evictions > 50
    wait_until(lambda: sum(n.endswith(".deleted") for n in env.files()) == 0, "cleanup")
    assert len(env.files()) == 3 * cache.entry_count


def test_remove_during_a_load_is_not_cached(env: Env) -> None:
    metadata = env.segments[0]
    rsm = BlockingStorage(metadata.remote_log_segment_id.id)
    rsm.configure({"dir": str(env.root / "remote"), "node.id": "0"})
    cache = env.cache(rsm)
    with ThreadPoolExecutor(1) as pool:
        load = pool.submit(cache.get_index_entry, metadata)
        assert rsm.entered.wait(DEADLINE_S)
        cache.remove(metadata.remote_log_segment_id.id)
        rsm.release.set()
        entry = load.result(timeout=DEADLINE_S)
    assert entry.marked_for_cleanup
    assert not cache.contains(metadata.remote_log_segment_id.id)
    rsm.close()


def test_failed_load_leaves_no_temporary_file_and_is_retried(env: Env) -> None:
    metadata = env.segments[0]
    env.rsm.delete_log_segment_data(metadata)
    cache = env.cache()
    with pytest.raises(RemoteResourceNotFoundException):
        cache.get_index_entry(metadata)
    assert env.files() == [] and cache.stats().load_failures == 1
    with pytest.raises(RemoteResourceNotFoundException):
        cache.lookup_offset(metadata, 0)
    assert env.rsm.index_fetches(IndexType.OFFSET) == 2
    assert not os.path.exists(env.cache_dir / (offset_index_file_name(metadata) + ".tmp"))
