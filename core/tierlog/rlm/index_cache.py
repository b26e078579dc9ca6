"""The ``RemoteIndexCache``: remote segments' offset, time and transaction indexes on local disk.

Every read below the local log start needs the offset index of a remote segment (where to start
streaming), every ListOffsets by timestamp its time index, and every ``read_committed`` fetch its
transaction index. Fetching them from remote storage each time would cost a round trip (or three)
per fetch, so, as Kafka's ``RemoteIndexCache`` does, they are downloaded once into
``<log_dir>/remote-log-index-cache/`` and looked up there with positioned reads. Kafka's rules,
kept so a broker's directory and tierlog's are interchangeable:

- **Names.** ``<startOffset>_<segmentUuid>.index`` / ``.timeindex`` / ``.txnindex``: the start
  offset is *not* zero-padded (unlike a local log's files) and the uuid is ``str(Uuid)``, 22
  characters of base64url.
- **Downloads** go to ``<name>.tmp`` and are renamed into place, so a crash leaves either a
  complete file or a ``.tmp`` that the next start deletes. They are not ``fsync``-ed (Kafka does
  not either): this is a cache, a file torn by a power loss fails its sanity check and is
  fetched again.
- **Missing transaction index.** A segment without aborted transactions has none in remote
  storage (``RemoteResourceNotFoundException``); it is stored as an empty file, so the entry is
  complete and the fetch is not repeated.
- **Bounded by weight**, the sum of the three files' sizes (``remote.log.index.file.cache.total
  .size.bytes``, 1 GiB by default, ``resize`` changes it), and **expiring after access**
  (``remote.log.index.file.cache.ttl.ms``, 15 minutes; ``<= 0`` disables it). Kafka uses
  Caffeine's Window-TinyLFU; this is a plain LRU by weight, which is what Kafka's class comment
  describes in spirit ("LRU-like") and simpler to reason about: the least recently used entries
  are evicted until the total weight fits. Like Caffeine, an entry heavier than the whole budget
  is evicted as soon as it is inserted (the caller that loaded it still uses it).
- **Two-phase removal.** Eviction, expiry and ``remove`` rename the three files to
  ``*.deleted`` at once; the ``remote-log-index-cleaner`` thread deletes them
  ``cleaner_delay_ms`` (10 s) later.
- **Startup** deletes every ``*.deleted`` and ``*.tmp``, loads each complete triplet after a
  sanity check, and deletes the files of incomplete ones. A triplet that fails its sanity check
  is deleted too (Kafka's startup would fail on it; a cache should refill instead).
- **Corruption.** A cached file that fails its sanity check when an entry is built is fetched
  again; a file the RSM serves corrupt raises ``CorruptIndexError`` and nothing is cached.

**Offset lookups in memory.** A remote segment's indexes never change once downloaded, and
every read looks its offset index up several times (where to start, and the entries bounding the
byte range to request). So the first lookup on an entry decodes the offset index once into two
``array('i')`` (relative offsets and positions, 8 bytes per entry, as on disk) and every lookup
is then a ``bisect`` over them, with the same answers as the file-searching ``OffsetIndex``
methods. Entries loaded at startup and never read cost no memory beyond their open files.

Thread safety. One lock guards the map; a missing entry is loaded by one thread while the others
asking for the same segment wait for it, and lookups of other segments are not blocked by the
download. A file is never deleted under a reader: every lookup that reads a file holds a
reference on its entry, and the cleaner closes and deletes an entry's files only once no
reference is left (the renames of the first phase are harmless to open files). The decoded offset
index is built under the entry's lock and never changed, so offset lookups read it without one.
``close`` waits for operations in flight, then closes the files without deleting them, so a
restart reloads them.
"""

from __future__ import annotations

import heapq
import io
import itertools
import logging
import os
import shutil
import sys
import threading
import time
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import BinaryIO, Final, Self, TypeVar

from tierlog.log.files import (
    DELETED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
)
from tierlog.log.index import CorruptIndexError, OffsetPosition
from tierlog.log.offset_index import OffsetIndex
from tierlog.log.time_index import TimeIndex
from tierlog.log.txn_index import TransactionIndex, TxnIndexSearchResult
from tierlog.spi import (
    IllegalStateError,
    IndexType,
    InvalidArgumentError,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageManager,
    Uuid,
)

__all__ = [
    "CLEANER_THREAD_NAME",
    "DEFAULT_CLEANER_DELAY_MS",
    "DEFAULT_MAX_SIZE_BYTES",
    "DEFAULT_TTL_MS",
    "DIR_NAME",
    "TMP_FILE_SUFFIX",
    "RemoteIndexCache",
    "RemoteIndexCacheEntry",
    "RemoteIndexCacheStats",
    "index_file_prefix",
    "offset_index_file_name",
    "time_index_file_name",
    "txn_index_file_name",
]

_LOG = logging.getLogger(__name__)

DIR_NAME: Final = "remote-log-index-cache"
"""Kafka's ``RemoteIndexCache.DIR_NAME``, under the broker's log directory."""
TMP_FILE_SUFFIX: Final = ".tmp"
CLEANER_THREAD_NAME: Final = "remote-log-index-cleaner"
DEFAULT_MAX_SIZE_BYTES: Final = 1 << 30
"""``remote.log.index.file.cache.total.size.bytes``'s default."""
DEFAULT_TTL_MS: Final = 900_000
"""``remote.log.index.file.cache.ttl.ms``'s default."""
DEFAULT_CLEANER_DELAY_MS: Final = 10_000
"""Kafka's ``fileDeleteDelayMs``: how long ``*.deleted`` files stay for readers still using them."""

_INDEX_SUFFIXES: Final = (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX)
_COPY_CHUNK: Final = 1 << 20
_MAX_CLEANER_WAIT_S: Final = 1.0
"""The cleaner re-reads the clock at least this often (an injected clock does not wake it)."""
_NEXT_BATCHES_MAX: Final = 256
"""Batch starts an entry remembers (``remember_batch_start``): one per consumer reading the
segment at once is what is used; a few KiB at most."""

_T = TypeVar("_T")


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


# File names ------------------------------------------------------------------------------------
def index_file_prefix(metadata: RemoteLogSegmentMetadata) -> str:
    """``<startOffset>_<segmentUuid>``, Kafka's ``generateFileNamePrefixForIndex``."""
    return f"{metadata.start_offset}_{metadata.remote_log_segment_id.id}"


def offset_index_file_name(metadata: RemoteLogSegmentMetadata) -> str:
    return index_file_prefix(metadata) + INDEX_FILE_SUFFIX


def time_index_file_name(metadata: RemoteLogSegmentMetadata) -> str:
    return index_file_prefix(metadata) + TIME_INDEX_FILE_SUFFIX


def txn_index_file_name(metadata: RemoteLogSegmentMetadata) -> str:
    return index_file_prefix(metadata) + TXN_INDEX_FILE_SUFFIX


def _parse_prefix(prefix: str) -> tuple[int, Uuid] | None:
    """``(start offset, segment uuid)`` of a cache file prefix, or None if it is not one."""
    offset_text, sep, uuid_text = prefix.partition("_")
    if not sep or not offset_text.isdigit():
        return None
    try:
        return int(offset_text), Uuid.from_string(uuid_text)
    except InvalidArgumentError:
        return None


# Opening indexes -------------------------------------------------------------------------------
_Index = TypeVar("_Index", OffsetIndex, TimeIndex, TransactionIndex)


def _sanity_checked(index: _Index) -> _Index:
    """``index`` once its sanity check passed (it is closed when the check fails)."""
    try:
        index.sanity_check()
    except BaseException:
        index.close()
        raise
    return index


def _open_offset_index(path: Path, start_offset: int) -> OffsetIndex:
    return _sanity_checked(OffsetIndex(path, start_offset, writable=False))


def _open_time_index(path: Path, start_offset: int) -> TimeIndex:
    return _sanity_checked(TimeIndex(path, start_offset, writable=False))


def _open_txn_index(path: Path, start_offset: int) -> TransactionIndex:
    return _sanity_checked(TransactionIndex(start_offset, path, writable=False))


# Decoded offset indexes ------------------------------------------------------------------------
_INT32: Final = next(code for code in ("i", "l") if array(code).itemsize == 4)
"""The ``array`` type code of a 4-byte signed integer (``i`` on every platform CPython runs on)."""


class DecodedOffsetIndex:
    """An offset index held in memory: ``bisect`` over its relative offsets and positions.

    Answers exactly as ``OffsetIndex.lookup`` and ``fetch_upper_bound_offset`` do on the file
    (entries are sorted by both fields, which ``OffsetIndex.sanity_check`` guarantees for every
    file the cache opens). Immutable once built, so threads share it without a lock.
    """

    __slots__ = ("_base", "_offsets", "_positions")

    def __init__(self, base_offset: int, relative_offsets: array[int], positions: array[int]):
        self._base = base_offset
        self._offsets = relative_offsets
        self._positions = positions

    @classmethod
    def read(cls, index: OffsetIndex) -> DecodedOffsetIndex:
        """Decode the file at ``index.path`` in one read (a few MiB for a large segment).

        Only for a live entry's index, under the entry's lock: its name is then its own (renames
        happen under that lock) and the file is not deleted while a reference is held.
        """
        size = index.entries * OffsetIndex.ENTRY_SIZE
        with open(index.path, "rb") as file:
            data = file.read(size)
        if len(data) != size:
            raise CorruptIndexError(
                f"index {index.path} is shorter than expected: wanted {size} bytes, got "
                f"{len(data)} (was the file truncated by another process?)",
                path=str(index.path),
                position=len(data),
            )
        words = array(_INT32)
        words.frombytes(data)
        if sys.byteorder == "little":
            words.byteswap()  # the file is big-endian
        return cls(index.base_offset, words[0::2], words[1::2])

    @classmethod
    def iterate(cls, index: OffsetIndex) -> DecodedOffsetIndex:
        """Decode through the index's own open file, entry by entry (slower than ``read``).

        For an entry already renamed to ``*.deleted``: that name is not its own any more (a later
        entry of the same segment, removed in turn, replaces the file under it), while the open
        file stays the one it loaded.
        """
        base = index.base_offset
        offsets = array(_INT32)
        positions = array(_INT32)
        for offset, position in index:
            offsets.append(offset - base)
            positions.append(position)
        return cls(base, offsets, positions)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The largest entry whose offset is <= ``target_offset``, else ``(base_offset, 0)``."""
        slot = bisect_right(self._offsets, target_offset - self._base) - 1
        if slot < 0:
            return OffsetPosition(self._base, 0)
        return OffsetPosition(self._base + self._offsets[slot], self._positions[slot])

    def read_bounds(
        self, target_offset: int
    ) -> tuple[OffsetPosition, OffsetPosition | None, OffsetPosition | None]:
        """``lookup(target_offset)`` and the first two entries whose positions are after its
        position, or None, with one search: positions strictly increase (``sanity_check``), so
        those are the next two slots."""
        base = self._base
        offsets = self._offsets
        positions = self._positions
        slot = bisect_right(offsets, target_offset - base) - 1
        if slot >= 0:
            found = OffsetPosition(base + offsets[slot], positions[slot])
            nxt = slot + 1
        else:
            found = OffsetPosition(base, 0)
            nxt = 0 if positions and positions[0] > 0 else 1
        count = len(positions)
        if nxt >= count:
            return found, None, None
        bound = OffsetPosition(base + offsets[nxt], positions[nxt])
        nxt += 1
        if nxt >= count:
            return found, bound, None
        return found, bound, OffsetPosition(base + offsets[nxt], positions[nxt])

    def position_after(self, position: int) -> int:
        """The position of the first entry whose position is > ``position``, or -1."""
        positions = self._positions
        slot = bisect_right(positions, position)
        return positions[slot] if slot < len(positions) else -1

    def first_at_or_after(self, position: int) -> OffsetPosition | None:
        """The first entry whose position is >= ``position``, or None."""
        slot = bisect_left(self._positions, position)
        if slot == len(self._positions):
            return None
        return OffsetPosition(self._base + self._offsets[slot], self._positions[slot])


# Entries ---------------------------------------------------------------------------------------
class RemoteIndexCacheEntry:
    """The three indexes of one remote segment, and the bookkeeping that keeps them readable.

    Lookups go through the methods here (or through the cache); those that read a file hold a
    reference on the entry for their duration: the cleaner closes and deletes the files only when
    no reference is left. Offset lookups use the offset index decoded in memory by the first one
    (which reads the file under a reference). The index objects are exposed for inspection;
    reading them directly is safe while the entry is in the cache or a reference is held
    (``RemoteIndexCache.acquire``).
    """

    def __init__(
        self,
        segment_id: Uuid,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        txn_index: TransactionIndex,
    ) -> None:
        self._segment_id = segment_id
        self._offset_index = offset_index
        self._time_index = time_index
        self._txn_index = txn_index
        self._lock = threading.RLock()  # reentrant: _offsets decodes under it in _reading
        self._refs = 0
        self._marked_for_cleanup = False
        self._cleanup_requested = False
        self._cleaned = False
        self._closed = False
        self._decoded: DecodedOffsetIndex | None = None
        self.batch_starts: dict[int, int] = {}
        """What ``remember_batch_start`` recorded: offset -> position (read it with ``get``)."""
        self.accessed_ms = 0
        """When the cache last handed this entry out (its TTL clock), set by the cache."""
        self._size_bytes = (
            offset_index.size_in_bytes() + time_index.size_in_bytes() + txn_index.size_in_bytes
        )

    # Properties ----------------------------------------------------------------------------------
    @property
    def segment_id(self) -> Uuid:
        return self._segment_id

    @property
    def offset_index(self) -> OffsetIndex:
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        return self._time_index

    @property
    def txn_index(self) -> TransactionIndex:
        return self._txn_index

    @property
    def size_bytes(self) -> int:
        """The entry's weight in the cache: the three files' sizes (Kafka's ``entrySizeBytes``)."""
        return self._size_bytes

    @property
    def marked_for_cleanup(self) -> bool:
        """The files were renamed to ``*.deleted`` (the entry left the cache)."""
        return self._marked_for_cleanup

    @property
    def cleanup_started(self) -> bool:
        """The files were closed and deleted; lookups raise ``IllegalStateError``."""
        return self._cleaned

    @property
    def references(self) -> int:
        """Lookups in progress on this entry."""
        return self._refs

    def __repr__(self) -> str:
        return (
            f"RemoteIndexCacheEntry(offsetIndex={self._offset_index.path.name}, "
            f"timeIndex={self._time_index.path.name}, txnIndex={self._txn_index.path.name})"
        )

    # References ----------------------------------------------------------------------------------
    def _retain(self) -> None:
        with self._lock:
            if self._cleaned or self._closed:
                raise IllegalStateError(
                    f"the index entry of remote segment {self._segment_id} was "
                    f"{'deleted' if self._cleaned else 'closed'}"
                )
            self._refs += 1

    def _release(self) -> None:
        with self._lock:
            self._refs -= 1
            if self._refs == 0 and self._cleanup_requested and not self._cleaned:
                self._delete_files()

    @contextmanager
    def _reading(self) -> Iterator[None]:
        self._retain()
        try:
            yield
        finally:
            self._release()

    # Lookups -------------------------------------------------------------------------------------
    def _offsets(self) -> DecodedOffsetIndex:
        """The offset index in memory, decoded by the first lookup.

        Built once (under a reference, so the file is there, and under the entry's lock) and
        never changed afterwards, so lookups read it without a reference or a lock; they still
        fail once the entry was deleted or closed, as lookups on the files would.
        """
        decoded = self._decoded
        if decoded is None or self._cleaned or self._closed:
            # _reading raises IllegalStateError once the entry was deleted or closed.
            with self._reading(), self._lock:
                decoded = self._decoded
                if decoded is None:
                    index = self._offset_index
                    decoded = self._decoded = (
                        DecodedOffsetIndex.iterate(index)
                        if self._marked_for_cleanup
                        else DecodedOffsetIndex.read(index)
                    )
        return decoded

    def offsets_in_memory(self) -> DecodedOffsetIndex:
        """The offset index decoded in memory (by this call, under a reference, the first
        time). It is immutable and owns its arrays: a read keeps using it without a reference,
        even if the entry is evicted or deleted meanwhile."""
        decoded = self._decoded
        return decoded if decoded is not None else self._offsets()

    def lookup_offset(self, offset: int) -> OffsetPosition:
        """The largest offset index entry <= ``offset``, else ``(start offset, 0)``."""
        return self._offsets().lookup(offset)

    def lookup_timestamp(self, timestamp: int, starting_offset: int) -> OffsetPosition:
        """Where to start scanning for the first record at or after ``timestamp`` and
        ``starting_offset``: the offset index entry of ``max(starting_offset, time index lookup)``
        (Kafka's ``Entry.lookupTimestamp``)."""
        with self._reading():
            found = self._time_index.lookup(timestamp)
        return self._offsets().lookup(max(starting_offset, found.offset))

    def first_entry_after(self, position: int) -> OffsetPosition | None:
        """The first offset index entry whose position is > ``position``, or None.

        Its batch starts there and holds offsets up to its offset, so for a target offset below
        that entry's, the batch holding the target starts at or before the entry's position:
        the read path uses it to bound the byte range it asks remote storage for.
        """
        return self._offsets().first_at_or_after(position + 1)

    def remember_batch_start(self, offset: int, position: int) -> None:
        """Record that the first batch holding an offset >= ``offset`` starts at ``position``:
        what a read that returned the batches up to ``offset - 1`` learnt from their headers.

        A consumer's next fetch asks for exactly that offset, and the offset index (one entry
        per ``index.interval.bytes``) can only place it at or after the floor entry's batch,
        whose bytes would be read and skipped. Kafka's broker keeps the same knowledge for local
        reads (the fetch offset's ``LogOffsetMetadata``). Bounded: a segment keeps the last
        ``_NEXT_BATCHES_MAX`` of them; the segment is immutable, so they never go stale.
        """
        starts = self.batch_starts
        if len(starts) >= _NEXT_BATCHES_MAX:
            starts.clear()
        starts[offset] = position

    def read_bounds(
        self, offset: int
    ) -> tuple[OffsetPosition, OffsetPosition | None, OffsetPosition | None]:
        """``lookup_offset(offset)`` and the next two entries by position after it (or None):
        what a read of ``offset`` needs to know which bytes to request, in one call."""
        return self._offsets().read_bounds(offset)

    def fetch_upper_bound_offset(
        self, fetch_offset: OffsetPosition, fetch_size: int
    ) -> OffsetPosition | None:
        """``OffsetIndex.fetch_upper_bound_offset``: the first entry whose position is >=
        ``fetch_offset.position + fetch_size`` (an entry certainly past a fetch), or None."""
        return self._offsets().first_at_or_after(fetch_offset.position + fetch_size)

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``."""
        with self._reading():
            return self._txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    # Removal -------------------------------------------------------------------------------------
    def mark_for_cleanup(self) -> None:
        """Rename the three files to ``*.deleted`` (idempotent); open files stay readable."""
        with self._lock:
            if self._marked_for_cleanup or self._cleaned:
                return
            self._marked_for_cleanup = True
            for index in (self._offset_index, self._time_index, self._txn_index):
                try:
                    index.rename_to(index.path.with_name(index.path.name + DELETED_FILE_SUFFIX))
                except FileNotFoundError:
                    _LOG.warning("Index file %s vanished before it was marked deleted", index.path)

    def cleanup(self) -> None:
        """Close and delete the files once no lookup holds the entry (the cleaner's phase two).

        A no-op unless the entry was marked; when lookups are in progress the last one to finish
        does the deletion.
        """
        with self._lock:
            if not self._marked_for_cleanup or self._cleaned:
                return
            self._cleanup_requested = True
            if self._refs == 0:
                self._delete_files()

    def _delete_files(self) -> None:
        """Close and delete the three files; a failure is logged (the next start retries)."""
        self._cleaned = True
        for index in (self._offset_index, self._time_index, self._txn_index):
            try:
                index.delete_if_exists()
            except OSError:
                _LOG.warning("Failed to delete %s", index.path, exc_info=True)

    def close(self) -> None:
        """Close the files without deleting them (the cache is closing; a restart reloads them)."""
        with self._lock:
            self._closed = True
            for index in (self._offset_index, self._time_index, self._txn_index):
                try:
                    index.close()
                except OSError:
                    _LOG.warning("Failed to close %s", index.path, exc_info=True)


# The cache -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RemoteIndexCacheStats:
    """Counters since the cache was created (for metrics and tests).

    ``hits``/``misses`` count entry lookups served from memory or needing a load (Caffeine's
    ``recordStats``); ``fetches`` the RSM ``fetch_index`` calls by index type (including those
    answered with "not found"); ``disk_hits`` the index files found valid in the cache
    directory while an entry was built, so not fetched.
    """

    hits: int
    misses: int
    load_failures: int
    evictions: int
    expirations: int
    fetches: Mapping[IndexType, int]
    disk_hits: Mapping[IndexType, int]

    def summary(self) -> str:
        """One readable line for the log (the dataclass repr shows ``mappingproxy(...)``)."""

        def by_type(counts: Mapping[IndexType, int]) -> str:
            return ", ".join(f"{t.name.lower()}={n}" for t, n in counts.items() if n) or "none"

        return (
            f"{self.hits} hits, {self.misses} misses, {self.load_failures} load failures, "
            f"{self.evictions} evictions, {self.expirations} expirations; index fetches: "
            f"{by_type(self.fetches)}; found on disk: {by_type(self.disk_hits)}"
        )


@dataclass(slots=True)
class _Load:
    """A load in progress, which other threads asking for the same segment wait on."""

    done: threading.Event = field(default_factory=threading.Event)
    entry: RemoteIndexCacheEntry | None = None
    error: BaseException | None = None
    invalidated: bool = False


class _Cleaner:
    """The ``remote-log-index-cleaner`` thread: deletes retired entries after a delay."""

    def __init__(self, clock: Callable[[], int], delay_ms: int) -> None:
        self._clock = clock
        self.delay_ms = delay_ms
        self._cond = threading.Condition()
        self._tasks: list[tuple[int, int, RemoteIndexCacheEntry]] = []
        self._seq = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=CLEANER_THREAD_NAME, daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._tasks)

    def schedule(self, entry: RemoteIndexCacheEntry) -> None:
        with self._cond:
            if self._stopped:
                return  # the files stay as *.deleted; the next start deletes them
            due = self._clock() + self.delay_ms
            heapq.heappush(self._tasks, (due, next(self._seq), entry))
            self._cond.notify()

    def _take_due(self) -> list[RemoteIndexCacheEntry]:
        now = self._clock()
        due: list[RemoteIndexCacheEntry] = []
        while self._tasks and self._tasks[0][0] <= now:
            due.append(heapq.heappop(self._tasks)[2])
        return due

    def run_due(self) -> int:
        """Clean up every entry whose delay has passed, in this thread; how many."""
        with self._cond:
            due = self._take_due()
        for entry in due:
            self._clean(entry)
        return len(due)

    @staticmethod
    def _clean(entry: RemoteIndexCacheEntry) -> None:
        try:
            entry.cleanup()
            _LOG.debug("Cleaned up index entry %s", entry)
        except Exception:
            # One failure must not stop the thread (Kafka's testCleanerThreadShutdown).
            _LOG.exception("Error while cleaning up the index entry %s", entry)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    if not self._tasks:
                        self._cond.wait()
                        continue
                    wait_ms = self._tasks[0][0] - self._clock()
                    if wait_ms <= 0:
                        break
                    self._cond.wait(min(wait_ms / 1000, _MAX_CLEANER_WAIT_S))
                if self._stopped:
                    return
                due = self._take_due()
            for entry in due:
                self._clean(entry)

    def stop(self) -> None:
        """Stop the thread; pending deletions are dropped (the next start deletes the files)."""
        with self._cond:
            self._stopped = True
            self._tasks.clear()
            self._cond.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()


class RemoteIndexCache:
    """Kafka's ``RemoteIndexCache`` (see the module docstring).

    ``rsm`` serves the indexes; the files live in ``<log_dir>/remote-log-index-cache``.
    ``max_size_bytes`` bounds the total weight, ``ttl_ms`` expires entries not accessed for that
    long (``<= 0``: never), ``clock`` (milliseconds, monotonic) drives expiry and the cleaner's
    delay, ``cleaner_delay_ms`` is how long removed files stay as ``*.deleted``.
    """

    def __init__(
        self,
        rsm: RemoteStorageManager,
        log_dir: str | os.PathLike[str],
        *,
        max_size_bytes: int = DEFAULT_MAX_SIZE_BYTES,
        ttl_ms: int = DEFAULT_TTL_MS,
        clock: Callable[[], int] = _monotonic_ms,
        cleaner_delay_ms: int = DEFAULT_CLEANER_DELAY_MS,
    ) -> None:
        if max_size_bytes < 0:
            raise InvalidArgumentError(f"max_size_bytes must be >= 0, got {max_size_bytes}")
        if cleaner_delay_ms < 0:
            raise InvalidArgumentError(f"cleaner_delay_ms must be >= 0, got {cleaner_delay_ms}")
        self._rsm = rsm
        self._dir = Path(log_dir) / DIR_NAME
        self._max_size = max_size_bytes
        self._ttl_ms = ttl_ms
        self._clock = clock
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        """Notified when the last operation in flight ends (``close`` waits for it)."""
        self._entries: OrderedDict[Uuid, RemoteIndexCacheEntry] = OrderedDict()
        self._loading: dict[Uuid, _Load] = {}
        self._size = 0
        self._active = 0
        self._closed = False
        self._hits = self._misses = self._load_failures = self._evictions = self._expirations = 0
        self._fetches = dict.fromkeys(IndexType, 0)
        self._disk_hits = dict.fromkeys(IndexType, 0)
        self._cleaner = _Cleaner(clock, cleaner_delay_ms)
        self._init()
        self._cleaner.start()

    # Properties ----------------------------------------------------------------------------------
    @property
    def cache_dir(self) -> Path:
        return self._dir

    @property
    def max_size_bytes(self) -> int:
        return self._max_size

    @property
    def ttl_ms(self) -> int:
        return self._ttl_ms

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def size_bytes(self) -> int:
        """The total weight of the entries (expired ones removed first)."""
        with self._lock:
            self._expire_locked(self._clock())
            return self._size

    @property
    def entry_count(self) -> int:
        """How many segments have an entry (expired ones removed first)."""
        with self._lock:
            self._expire_locked(self._clock())
            return len(self._entries)

    @property
    def pending_cleanup_count(self) -> int:
        """Entries renamed to ``*.deleted`` whose deletion is still scheduled."""
        return self._cleaner.pending

    @property
    def cleaner_alive(self) -> bool:
        return self._cleaner.alive

    def contains(self, segment_id: Uuid) -> bool:
        """Whether ``segment_id`` has an entry now (no access recorded, nothing loaded)."""
        with self._lock:
            self._expire_locked(self._clock())
            return segment_id in self._entries

    def stats(self) -> RemoteIndexCacheStats:
        with self._lock:
            return RemoteIndexCacheStats(
                self._hits,
                self._misses,
                self._load_failures,
                self._evictions,
                self._expirations,
                MappingProxyType(dict(self._fetches)),
                MappingProxyType(dict(self._disk_hits)),
            )

    def fetch_count(self, index_type: IndexType | None = None) -> int:
        """RSM ``fetch_index`` calls made, for one index type or all of them."""
        with self._lock:
            if index_type is None:
                return sum(self._fetches.values())
            return self._fetches[index_type]

    # Startup -------------------------------------------------------------------------------------
    def _init(self) -> None:
        """Kafka's ``init``: clean leftovers, then load every complete, sane triplet."""
        self._dir.mkdir(parents=True, exist_ok=True)
        groups: dict[str, set[str]] = {}
        for path in self._dir.iterdir():
            name = path.name
            if name.endswith((DELETED_FILE_SUFFIX, TMP_FILE_SUFFIX)):
                path.unlink(missing_ok=True)
                _LOG.debug("Deleted %s on cache initialization", path)
                continue
            prefix, dot, rest = name.partition(".")
            suffix = dot + rest
            if suffix not in _INDEX_SUFFIXES or _parse_prefix(prefix) is None:
                _LOG.warning("Ignoring %s in %s: not a remote index cache file", name, self._dir)
                continue
            groups.setdefault(prefix, set()).add(suffix)
        now = self._clock()
        for prefix, suffixes in sorted(groups.items()):
            parsed = _parse_prefix(prefix)
            assert parsed is not None
            start_offset, segment_id = parsed
            paths = [self._dir / (prefix + suffix) for suffix in _INDEX_SUFFIXES]
            if segment_id in self._entries or len(suffixes) != len(_INDEX_SUFFIXES):
                _LOG.info("Deleting the incomplete index set %s* in %s", prefix, self._dir)
                for path in paths:
                    path.unlink(missing_ok=True)
                continue
            try:
                entry = self._open_entry(segment_id, start_offset, *paths)
            except CorruptIndexError:
                _LOG.warning(
                    "Deleting the index set %s* in %s: it failed its sanity check",
                    prefix,
                    self._dir,
                    exc_info=True,
                )
                for path in paths:
                    path.unlink(missing_ok=True)
                continue
            self._entries[segment_id] = entry
            entry.accessed_ms = now
            self._size += entry.size_bytes
        with self._lock:
            self._evict_locked()
        _LOG.info("RemoteIndexCache loaded %d entries from %s", len(self._entries), self._dir)

    @staticmethod
    def _open_entry(
        segment_id: Uuid, start_offset: int, offset_path: Path, time_path: Path, txn_path: Path
    ) -> RemoteIndexCacheEntry:
        offset_index = _open_offset_index(offset_path, start_offset)
        try:
            time_index = _open_time_index(time_path, start_offset)
            try:
                txn_index = _open_txn_index(txn_path, start_offset)
            except BaseException:
                time_index.close()
                raise
        except BaseException:
            offset_index.close()
            raise
        return RemoteIndexCacheEntry(segment_id, offset_index, time_index, txn_index)

    # Loading -------------------------------------------------------------------------------------
    def _load_index_file(
        self,
        metadata: RemoteLogSegmentMetadata,
        index_type: IndexType,
        opener: Callable[[Path, int], _T],
    ) -> _T:
        """Kafka's ``loadIndexFile``: the file on disk if it is sane, else a fresh download."""
        suffix = {
            IndexType.OFFSET: INDEX_FILE_SUFFIX,
            IndexType.TIMESTAMP: TIME_INDEX_FILE_SUFFIX,
            IndexType.TRANSACTION: TXN_INDEX_FILE_SUFFIX,
        }[index_type]
        path = self._dir / (index_file_prefix(metadata) + suffix)
        start_offset = metadata.start_offset
        if path.exists():
            try:
                index = opener(path, start_offset)
            except CorruptIndexError:
                _LOG.info("The cached index %s is corrupt: fetching it again", path, exc_info=True)
            else:
                with self._lock:
                    self._disk_hits[index_type] += 1
                return index
        self._download(metadata, index_type, path)
        try:
            return opener(path, start_offset)
        except CorruptIndexError:
            path.unlink(missing_ok=True)
            raise

    def _download(
        self, metadata: RemoteLogSegmentMetadata, index_type: IndexType, path: Path
    ) -> None:
        with self._lock:
            self._fetches[index_type] += 1
        stream: BinaryIO
        try:
            stream = self._rsm.fetch_index(metadata, index_type)
        except RemoteResourceNotFoundException:
            if index_type is not IndexType.TRANSACTION:
                raise
            # No aborted transaction in the segment: an empty index, cached as such.
            stream = io.BytesIO()
        temp = path.with_name(path.name + TMP_FILE_SUFFIX)
        try:
            with stream, open(temp, "wb") as out:
                shutil.copyfileobj(stream, out, _COPY_CHUNK)
            os.replace(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise

    def _create_entry(self, metadata: RemoteLogSegmentMetadata) -> RemoteIndexCacheEntry:
        segment_id = metadata.remote_log_segment_id.id
        offset_index = self._load_index_file(metadata, IndexType.OFFSET, _open_offset_index)
        try:
            time_index = self._load_index_file(metadata, IndexType.TIMESTAMP, _open_time_index)
            try:
                txn_index = self._load_index_file(metadata, IndexType.TRANSACTION, _open_txn_index)
            except BaseException:
                time_index.close()
                raise
        except BaseException:
            offset_index.close()
            raise
        return RemoteIndexCacheEntry(segment_id, offset_index, time_index, txn_index)

    def _check_open(self, segment_id: Uuid) -> None:
        if self._closed:
            raise IllegalStateError(
                f"Unable to fetch index for segment-id = {segment_id}. RemoteIndexCache is closed."
            )

    def _acquire_entry(self, metadata: RemoteLogSegmentMetadata) -> RemoteIndexCacheEntry:
        """The segment's entry with a reference held (loaded first if needed).

        The caller must ``_release`` it and must have counted itself in ``_active``.
        """
        key = metadata.remote_log_segment_id.id
        while True:
            with self._lock:
                self._check_open(key)
                now = self._clock()
                self._expire_locked(now)
                entry = self._entries.get(key)
                if entry is not None:
                    self._entries.move_to_end(key)
                    entry.accessed_ms = now
                    self._hits += 1
                    entry._retain()
                    return entry
                load = self._loading.get(key)
                owner = load is None
                if load is None:
                    load = self._loading[key] = _Load()
                    self._misses += 1
            if owner:
                return self._load(metadata, load)
            load.done.wait()
            if load.error is not None:
                raise load.error
            assert load.entry is not None
            try:
                load.entry._retain()
            except IllegalStateError:
                continue  # evicted and deleted already (a tiny cache): load it again
            return load.entry

    def _load(self, metadata: RemoteLogSegmentMetadata, load: _Load) -> RemoteIndexCacheEntry:
        key = metadata.remote_log_segment_id.id
        try:
            entry = self._create_entry(metadata)
        except BaseException as exc:
            with self._lock:
                self._loading.pop(key, None)
                self._load_failures += 1
                load.error = exc
            load.done.set()
            raise
        with self._lock:
            self._loading.pop(key, None)
            entry._retain()
            if load.invalidated:
                # removed while it was loading: the caller uses it, nobody else will
                self._retire_locked(entry)
            else:
                self._entries[key] = entry
                entry.accessed_ms = self._clock()
                self._size += entry.size_bytes
                self._evict_locked()
            load.entry = entry
        load.done.set()
        return entry

    def _end_operation(self) -> None:
        """End an operation counted in ``_active`` (``close`` waits for none to be left)."""
        with self._lock:
            self._active -= 1
            if self._active == 0:
                self._idle.notify_all()

    def acquire_entry(self, metadata: RemoteLogSegmentMetadata) -> RemoteIndexCacheEntry:
        """``acquire`` without a ``with`` block, for the read path (one call each way instead
        of three context managers, and a hit takes the lock once): the entry, held until
        ``release(entry)``, which must follow in a ``finally``."""
        key = metadata.remote_log_segment_id.id
        with self._lock:
            if self._closed:
                raise IllegalStateError("RemoteIndexCache is closed")
            now = self._clock()
            self._expire_locked(now)
            entry = self._entries.get(key)
            if entry is not None:  # a hit, as _acquire_entry counts it
                self._entries.move_to_end(key)
                entry.accessed_ms = now
                self._hits += 1
                entry._retain()
                self._active += 1
                return entry
            self._active += 1
        try:
            return self._acquire_entry(metadata)
        except BaseException:
            self._end_operation()
            raise

    def offsets_entry(
        self, metadata: RemoteLogSegmentMetadata
    ) -> tuple[RemoteIndexCacheEntry, DecodedOffsetIndex]:
        """The segment's entry and its offset index in memory, for a read's offset lookups,
        which need no reference held (``offsets_in_memory``): a hit on a decoded entry is one
        lock hold, the rest goes through ``acquire_entry``. Counted as ``acquire_entry`` counts."""
        key = metadata.remote_log_segment_id.id
        with self._lock:
            if self._closed:
                raise IllegalStateError("RemoteIndexCache is closed")
            now = self._clock()
            entries = self._entries
            ttl = self._ttl_ms
            # _expire_locked's first test inlined (a frame less on every read).
            if ttl > 0 and entries and now - next(iter(entries.values())).accessed_ms >= ttl:
                self._expire_locked(now)
            entry = entries.get(key)
            if entry is not None:
                decoded = entry._decoded
                if decoded is not None:
                    self._entries.move_to_end(key)
                    entry.accessed_ms = now
                    self._hits += 1
                    return entry, decoded
        entry = self.acquire_entry(metadata)
        try:
            return entry, entry.offsets_in_memory()
        finally:
            self.release(entry)

    def release(self, entry: RemoteIndexCacheEntry) -> None:
        """End an ``acquire_entry``."""
        try:
            entry._release()
        finally:
            self._end_operation()

    @contextmanager
    def acquire(self, metadata: RemoteLogSegmentMetadata) -> Iterator[RemoteIndexCacheEntry]:
        """The segment's entry, fetched if needed, with its files guaranteed readable (and
        ``close`` held off) until the block ends."""
        entry = self.acquire_entry(metadata)
        try:
            yield entry
        finally:
            self.release(entry)

    def get_index_entry(self, metadata: RemoteLogSegmentMetadata) -> RemoteIndexCacheEntry:
        """The segment's entry, fetched from the RSM the first time (Kafka's ``getIndexEntry``).

        No reference is kept: use the entry's own lookup methods (each holds one), or
        ``acquire`` to read the index objects directly across several calls.
        """
        with self.acquire(metadata) as entry:
            return entry

    # Lookups -------------------------------------------------------------------------------------
    def lookup_offset(self, metadata: RemoteLogSegmentMetadata, offset: int) -> int:
        """The byte position to start reading the segment for ``offset``: that of the largest
        offset index entry <= ``offset``, 0 below the first entry."""
        with self.acquire(metadata) as entry:
            return entry.lookup_offset(offset).position

    def lookup_timestamp(
        self, metadata: RemoteLogSegmentMetadata, timestamp: int, start_offset: int
    ) -> int:
        """The byte position to start scanning the segment for the first record with a
        timestamp >= ``timestamp`` at or after ``start_offset`` (Kafka's ``lookupTimestamp``)."""
        with self.acquire(metadata) as entry:
            return entry.lookup_timestamp(timestamp, start_offset).position

    def collect_aborted(
        self, metadata: RemoteLogSegmentMetadata, start_offset: int, upper_bound: int
    ) -> TxnIndexSearchResult:
        """The segment's aborted transactions overlapping ``[start_offset, upper_bound)``."""
        with self.acquire(metadata) as entry:
            return entry.collect_aborted_txns(start_offset, upper_bound)

    # Removal, expiry, eviction -------------------------------------------------------------------
    def _retire_locked(self, entry: RemoteIndexCacheEntry) -> None:
        """Phase one of removal (rename to ``*.deleted``); phase two is scheduled."""
        try:
            entry.mark_for_cleanup()
        except OSError:
            _LOG.warning("Failed to mark %s for deletion", entry, exc_info=True)
        self._cleaner.schedule(entry)

    def _remove_locked(self, key: Uuid) -> RemoteIndexCacheEntry | None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        self._size -= entry.size_bytes
        self._retire_locked(entry)
        return entry

    def _evict_locked(self) -> None:
        while self._size > self._max_size and self._entries:
            key = next(iter(self._entries))
            self._remove_locked(key)
            self._evictions += 1

    def _expire_locked(self, now: int) -> None:
        """Remove the entries not accessed for ``ttl_ms``: a prefix of the access order."""
        if self._ttl_ms <= 0:
            return
        entries = self._entries
        while entries:
            oldest = next(iter(entries.values()))
            if now - oldest.accessed_ms < self._ttl_ms:
                return
            self._remove_locked(oldest.segment_id)
            self._expirations += 1

    def remove(self, segment_id: Uuid) -> None:
        """Drop the segment's entry (its remote segment was deleted); a load in progress is not
        cached when it completes. Unknown ids are ignored."""
        self.remove_all((segment_id,))

    def remove_all(self, segment_ids: Iterable[Uuid]) -> None:
        """``remove`` for several segments."""
        with self._lock:
            for key in segment_ids:
                if self._remove_locked(key) is None and key in self._loading:
                    self._loading[key].invalidated = True

    def resize(self, max_size_bytes: int) -> None:
        """Change the weight bound, evicting at once if the entries no longer fit."""
        if max_size_bytes < 0:
            raise InvalidArgumentError(f"max_size_bytes must be >= 0, got {max_size_bytes}")
        with self._lock:
            self._max_size = max_size_bytes
            self._evict_locked()

    def clean_up(self) -> None:
        """Expire what is due now and delete the retired files whose delay has passed, in the
        calling thread (the cleaner thread does the latter on its own; with an injected clock,
        tests call this after moving it)."""
        with self._lock:
            self._expire_locked(self._clock())
        self._cleaner.run_due()

    # Lifecycle -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the cleaner, wait for lookups in flight and close every file (not deleting it).

        Idempotent. Files renamed to ``*.deleted`` and not yet deleted are left for the next
        start, which deletes them.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            while self._active:
                self._idle.wait()
            entries = list(self._entries.values())
        self._cleaner.stop()
        for entry in entries:
            entry.close()
        _LOG.info("RemoteIndexCache closed: %s", self.stats().summary())

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"RemoteIndexCache(dir={str(self._dir)!r}, entries={len(self._entries)}, "
            f"size_bytes={self._size}, max_size_bytes={self._max_size})"
        )
