"""Chunk caches (memory LRU, disk tier that survives restarts) and the manifest LRU."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tierlog.storage.objectstore.cache import ChunkCache, DiskChunkCache, LruCache


def test_lru_is_bounded_by_weight_and_evicts_the_least_recently_used() -> None:
    cache: LruCache[str, bytes] = LruCache(100, len)
    cache.put("a", b"a" * 40)
    cache.put("b", b"b" * 40)
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("c", b"c" * 40)  # 120 > 100: evicts b, the least recently used
    assert "b" not in cache
    assert cache.get("a") == b"a" * 40 and cache.get("c") == b"c" * 40
    assert cache.weight == 80
    cache.put("huge", b"h" * 101)  # heavier than the whole cache: not kept, nothing evicted
    assert "huge" not in cache and len(cache) == 2
    cache.put("a", b"A" * 10)  # replacing re-weighs
    assert cache.weight == 50


def test_lru_capacity_zero_keeps_nothing() -> None:
    cache: LruCache[str, int] = LruCache(0, lambda _v: 1)
    cache.put("x", 1)
    assert cache.get("x") is None


def test_lru_stays_consistent_under_threads() -> None:
    cache: LruCache[int, bytes] = LruCache(10_000, len)

    def work(seed: int) -> None:
        for i in range(2000):
            cache.put((seed * 7919 + i) % 500, b"x" * (i % 50 + 1))
            cache.get(i % 500)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.weight <= 10_000
    assert cache.weight == sum(len(cache.get(k) or b"") for k in range(500))


def test_disk_cache_survives_a_restart(tmp_path: Path) -> None:
    disk = DiskChunkCache(tmp_path, 1 << 20)
    disk.put(("seg.log#c1", 0), b"zero")
    disk.put(("seg.log#c1", 7), b"seven")
    again = DiskChunkCache(tmp_path, 1 << 20)
    assert again.get(("seg.log#c1", 7)) == b"seven"
    assert again.get(("seg.log#c1", 0)) == b"zero"
    assert again.get(("seg.log#c2", 0)) is None, "another copy_id is another object"


def test_disk_cache_is_bounded_and_evicts_the_oldest(tmp_path: Path) -> None:
    entry = 1000
    disk = DiskChunkCache(tmp_path, 3 * (entry + 16))
    for i in range(3):
        disk.put(("o", i), bytes([i]) * entry)
    assert disk.get(("o", 0)) is not None  # 0 becomes the most recent
    disk.put(("o", 3), b"3" * entry)
    assert ("o", 1) not in disk and not disk.path(("o", 1)).exists()
    assert all(k in disk for k in [("o", 0), ("o", 2), ("o", 3)])
    assert disk.size <= disk.capacity
    assert len(list(tmp_path.iterdir())) == 3


def test_disk_cache_bound_applies_at_start(tmp_path: Path) -> None:
    big = DiskChunkCache(tmp_path, 1 << 20)
    for i in range(10):
        big.put(("o", i), b"x" * 1000)
    small = DiskChunkCache(tmp_path, 3500)
    assert small.size <= 3500 and len(small) == 3
    assert len(list(tmp_path.iterdir())) == 3


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "garbage-header"])
def test_a_corrupt_disk_entry_is_dropped_not_served(tmp_path: Path, damage: str) -> None:
    disk = DiskChunkCache(tmp_path, 1 << 20)
    key = ("seg.log#c1", 3)
    disk.put(key, b"precious bytes" * 100)
    path = disk.path(key)
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[-10] ^= 0xFF
    elif damage == "truncate":
        raw = raw[:-5]
    elif damage == "empty":
        raw = bytearray()
    else:
        raw[:4] = b"XXXX"
    path.write_bytes(bytes(raw))
    restarted = DiskChunkCache(tmp_path, 1 << 20)
    assert restarted.get(key) is None
    assert not path.exists(), "the corrupt file must be deleted"
    assert restarted.size == 0


def test_leftover_temporary_files_are_removed_at_start(tmp_path: Path) -> None:
    (tmp_path / ".abc.chunk.123.tmp").write_bytes(b"partial")
    DiskChunkCache(tmp_path, 1 << 20)
    assert list(tmp_path.iterdir()) == []


def test_chunk_cache_promotes_disk_hits_to_memory_and_counts(tmp_path: Path) -> None:
    hits: list[str] = []
    misses: list[str] = []
    disk = DiskChunkCache(tmp_path, 1 << 20)
    disk.put(("o", 1), b"from disk")
    cache = ChunkCache(1 << 20, disk, on_hit=hits.append, on_miss=misses.append)
    assert cache.get(("o", 1)) == b"from disk"
    assert (hits, misses) == (["disk"], ["memory"])
    assert cache.get(("o", 1)) == b"from disk"
    assert hits == ["disk", "memory"]
    assert cache.get(("o", 2)) is None
    assert misses == ["memory", "memory", "disk"]


def test_chunk_cache_keeps_scans_out_of_memory_only_when_asked(tmp_path: Path) -> None:
    cache = ChunkCache(1 << 20, DiskChunkCache(tmp_path, 1 << 20))
    cache.put(("o", 0), b"scan", memory=False)
    assert ("o", 0) not in cache.memory and cache.contains(("o", 0))
    cache.put(("o", 1), b"small read", disk=False)
    assert ("o", 1) in cache.memory and cache.disk is not None and ("o", 1) not in cache.disk
