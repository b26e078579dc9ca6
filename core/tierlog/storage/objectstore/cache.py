"""Caches of decoded chunks (memory, then disk) and of segment manifests.

Chunks are cached **decoded** (decompressed, decrypted) under ``(object id, chunk index)``,
where the object id is the ``.log`` key plus the manifest's ``copy_id``: a copy retried under
the same segment id gets a new ``copy_id``, so a cache can never serve bytes of an earlier
attempt, even after a restart, and nothing has to be invalidated across brokers.

- ``LruCache``: a thread-safe LRU bounded by a weight (bytes for chunks, entries for
  manifests).
- ``DiskChunkCache``: files under ``fetch.disk.cache.dir``, bounded in bytes, written to a
  temporary name and renamed (atomic), and found again after a restart (Aiven's disk cache is
  wiped at start, #830). Each file carries a CRC-32 and the length of its payload: a truncated
  or corrupted file (a crash mid-write on a file system that reorders, a disk error, someone
  editing it) is deleted and counted as a miss, never served.
- ``ChunkCache``: the memory tier in front of the optional disk tier.

The disk tier holds *decrypted* data of encrypted segments: protect its directory as you would
the local log directory (the broker's local segments are plaintext too).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import struct
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Final, Generic, TypeVar

__all__ = ["ChunkCache", "ChunkKey", "DiskChunkCache", "LruCache"]

_LOG = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

ChunkKey = tuple[str, int]
"""(object id, chunk index)."""

_DISK_MAGIC: Final = b"TLCC"
_DISK_HEADER: Final = struct.Struct(">4sIQ")
"""magic, CRC-32 of the payload, payload length."""
_CHUNK_SUFFIX: Final = ".chunk"
_TEMP_SUFFIX: Final = ".tmp"


class LruCache(Generic[K, V]):
    """A thread-safe least-recently-used map bounded by the total ``weigh(value)``.

    A value heavier than the whole capacity is not kept. ``capacity`` 0 keeps nothing.
    """

    def __init__(self, capacity: int, weigh: Callable[[V], int]) -> None:
        self.capacity = capacity
        self._weigh = weigh
        self._lock = threading.Lock()
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._weight = 0

    def get(self, key: K) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def __contains__(self, key: K) -> bool:
        with self._lock:
            return key in self._entries

    def put(self, key: K, value: V) -> None:
        weight = self._weigh(value)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._weight -= old[1]
            if weight > self.capacity:
                return
            self._entries[key] = (value, weight)
            self._weight += weight
            while self._weight > self.capacity:
                _, (_, w) = self._entries.popitem(last=False)
                self._weight -= w

    def discard(self, key: K) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._weight -= old[1]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._weight = 0

    @property
    def weight(self) -> int:
        """The total weight held (bytes, for a chunk cache)."""
        with self._lock:
            return self._weight

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


class DiskChunkCache:
    """Decoded chunks in files under ``directory``, at most ``capacity`` bytes, LRU.

    The recency order survives a restart approximately: files are ordered by modification time
    at start, and a hit touches the file.
    """

    def __init__(self, directory: Path, capacity: int) -> None:
        self.directory = directory
        self.capacity = capacity
        self._lock = threading.Lock()
        self._files: OrderedDict[str, int] = OrderedDict()
        self._size = 0
        directory.mkdir(parents=True, exist_ok=True)
        found: list[tuple[int, str, int]] = []
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.endswith(_TEMP_SUFFIX):  # a write cut short by a crash
                    self._unlink(entry.name)
                elif entry.name.endswith(_CHUNK_SUFFIX) and entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    found.append((st.st_mtime_ns, entry.name, st.st_size))
        for _, name, size in sorted(found):
            self._files[name] = size
            self._size += size
        with self._lock:
            self._evict()
        _LOG.info(
            "disk chunk cache %s: %d chunks, %d bytes (capacity %d)",
            directory,
            len(self._files),
            self._size,
            capacity,
        )

    @staticmethod
    def file_name(key: ChunkKey) -> str:
        digest = hashlib.sha256(f"{key[0]}\0{key[1]}".encode()).hexdigest()[:48]
        return digest + _CHUNK_SUFFIX

    def path(self, key: ChunkKey) -> Path:
        return self.directory / self.file_name(key)

    def _unlink(self, name: str) -> None:
        try:
            os.unlink(self.directory / name)
        except FileNotFoundError:
            pass
        except OSError as exc:
            _LOG.warning("cannot remove %s from the disk cache: %s", name, exc)

    def _evict(self) -> None:
        while self._size > self.capacity and self._files:
            name, size = self._files.popitem(last=False)
            self._size -= size
            self._unlink(name)

    def _forget(self, name: str) -> None:
        with self._lock:
            size = self._files.pop(name, None)
            if size is not None:
                self._size -= size
        self._unlink(name)

    def get(self, key: ChunkKey) -> bytes | None:
        name = self.file_name(key)
        with self._lock:
            if name not in self._files:
                return None
            self._files.move_to_end(name)
        path = self.directory / name
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:  # evicted meanwhile
            self._forget(name)
            return None
        except OSError as exc:
            _LOG.warning("disk cache read of %s failed (%s); dropping it", path, exc)
            self._forget(name)
            return None
        if len(raw) >= _DISK_HEADER.size:
            magic, crc, length = _DISK_HEADER.unpack_from(raw)
            payload = raw[_DISK_HEADER.size :]
            if magic == _DISK_MAGIC and length == len(payload) and zlib.crc32(payload) == crc:
                with contextlib.suppress(OSError):
                    os.utime(path)
                return payload
        _LOG.warning("disk cache entry %s is corrupt; dropping it", path)
        self._forget(name)
        return None

    def put(self, key: ChunkKey, data: bytes) -> None:
        size = _DISK_HEADER.size + len(data)
        if size > self.capacity:
            return
        name = self.file_name(key)
        temp = self.directory / f".{name}.{secrets.token_hex(6)}{_TEMP_SUFFIX}"
        try:
            with open(temp, "wb") as f:
                f.write(_DISK_HEADER.pack(_DISK_MAGIC, zlib.crc32(data), len(data)))
                f.write(data)
            os.replace(temp, self.directory / name)
        except OSError as exc:
            _LOG.warning("disk cache write to %s failed: %s", self.directory, exc)
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
            return
        with self._lock:
            old = self._files.pop(name, None)
            if old is not None:
                self._size -= old
            self._files[name] = size
            self._size += size
            self._evict()

    @property
    def size(self) -> int:
        """Bytes held on disk (headers included)."""
        with self._lock:
            return self._size

    def __len__(self) -> int:
        with self._lock:
            return len(self._files)

    def __contains__(self, key: ChunkKey) -> bool:
        with self._lock:
            return self.file_name(key) in self._files


class ChunkCache:
    """Memory LRU in front of an optional disk cache; counts hits and misses per tier."""

    def __init__(
        self,
        memory_capacity: int,
        disk: DiskChunkCache | None = None,
        *,
        on_hit: Callable[[str], None] | None = None,
        on_miss: Callable[[str], None] | None = None,
    ) -> None:
        self.memory: LruCache[ChunkKey, bytes] = LruCache(memory_capacity, len)
        self.disk = disk
        self._on_hit = on_hit or (lambda _tier: None)
        self._on_miss = on_miss or (lambda _tier: None)

    @property
    def enabled(self) -> bool:
        return self.memory.capacity > 0 or self.disk is not None

    def get(self, key: ChunkKey, *, promote: bool = True) -> bytes | None:
        if self.memory.capacity:
            found = self.memory.get(key)
            if found is not None:
                self._on_hit("memory")
                return found
            self._on_miss("memory")
        if self.disk is not None:
            found = self.disk.get(key)
            if found is not None:
                self._on_hit("disk")
                if promote:
                    self.memory.put(key, found)
                return found
            self._on_miss("disk")
        return None

    def contains(self, key: ChunkKey) -> bool:
        """Whether ``get`` would find it (without counting or promoting)."""
        return key in self.memory or (self.disk is not None and key in self.disk)

    def put(self, key: ChunkKey, data: bytes, *, memory: bool = True, disk: bool = True) -> None:
        """Keep ``data`` in the tiers asked for (a scan is kept out of the memory tier)."""
        if memory and self.memory.capacity:
            self.memory.put(key, data)
        if disk and self.disk is not None:
            self.disk.put(key, data)

    def clear_memory(self) -> None:
        self.memory.clear()
