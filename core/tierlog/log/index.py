"""What Kafka's offset and time indexes share (``AbstractIndex``).

An index file is an array of fixed-size big-endian entries sorted by key. Kafka's rules, kept
here because a broker reads what tierlog writes and the other way round:

- **Preallocation.** A new index file is created at ``max_index_size`` rounded down to a multiple
  of the entry size (``segment.index.bytes``, 10 MiB by default); the entry count lives in memory.
  ``trim_to_valid_size()`` cuts the file to ``entries * entry_size`` when the segment is rolled or
  closed, so every sealed segment's index is exactly its entries. ``resize()`` grows it again when
  a segment becomes active after loading or truncation.
- **Reopening.** Kafka takes ``file length // entry_size`` entries from an existing file. An active
  segment's file that was never trimmed (the broker crashed) then ends in zero-filled slots. Kafka
  never reads those: a segment above the recovery point is always recovered, which resets and
  rebuilds its indexes. tierlog also opens indexes outside that flow (a broker's directory, a
  remote segment), so on opening it drops a trailing run of all-zero slots after the first slot:
  the first slot may legitimately be all zeros (offset ``base`` at position 0, or timestamp 0 at
  relative offset 0), but a later slot never can, because keys strictly increase. For a trimmed
  file this changes nothing; for an untrimmed one it finds the entries that were really written.
  An untrimmed file that is all zeros is empty (a lone zero first entry cannot be told from an
  unwritten slot there, and an empty index is by far the likelier).
  ``truncate_to`` also zeroes the slots it discards so this holds after a later crash.
- **Reading.** Lookups binary-search the file with positioned reads (``os.pread``) and never load
  the whole index; the last few hundred slots of a search are read in one call. Memory maps are
  not used: a file another process shrinks under a mapping (a live broker trims the index when it
  rolls) kills the reader with ``SIGBUS``, whereas a short read is an ordinary error.
- **Sanity.** ``sanity_check()`` reads every entry and raises ``CorruptIndexError`` naming the
  file and byte position for a length that is not a multiple of the entry size, a key that does
  not increase, an offset below the base offset, and (offset index) a position that does not
  increase or that points past the segment. Kafka checks less; what it checks is included.

Kafka's lookup semantics: the offset index returns the largest entry whose offset is <= the
target, else ``(base_offset, 0)``; the time index the largest entry whose timestamp is <= the
target, else ``(-1, base_offset)``.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import threading
from abc import ABC, abstractmethod
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Final, NamedTuple, Self

from tierlog.spi import CorruptRecordError, IllegalStateError, InvalidArgumentError

__all__ = [
    "NO_TIMESTAMP",
    "AbstractIndex",
    "CorruptIndexError",
    "IndexOffsetOverflowError",
    "InvalidOffsetError",
    "OffsetPosition",
    "TimestampOffset",
]

_LOG = logging.getLogger(__name__)

NO_TIMESTAMP: Final = -1
"""Kafka's ``RecordBatch.NO_TIMESTAMP``: the timestamp of an empty time index's answer."""

_MAX_INT32: Final = (1 << 31) - 1
_WINDOW: Final = 512
"""Once a binary search is down to this many slots, they are read in one call."""
_CHUNK_ENTRIES: Final = 8192
"""Entries read per call when scanning a whole index (sanity check, iteration)."""


class CorruptIndexError(CorruptRecordError):
    """An index file is corrupt (Kafka's ``CorruptIndexException``); rebuild it from its segment."""


class InvalidOffsetError(InvalidArgumentError):
    """An entry's offset is not above the last one's (Kafka's ``InvalidOffsetException``)."""


class IndexOffsetOverflowError(InvalidArgumentError):
    """An offset cannot be stored relative to the base offset: below it, or 2^31 or more above it.

    Kafka's ``IndexOffsetOverflowException``; a segment must be rolled before such an offset.
    """


class OffsetPosition(NamedTuple):
    """An offset index entry: an offset and the byte position of its batch in the segment."""

    offset: int
    position: int


class TimestampOffset(NamedTuple):
    """A time index entry: every record after ``offset`` has a timestamp > ``timestamp``."""

    timestamp: int
    offset: int


def _round_down(number: int, factor: int) -> int:
    """Java's ``factor * (number / factor)`` for the sizes Kafka passes (negative gives 0)."""
    return factor * (number // factor) if number > 0 else 0


class AbstractIndex(ABC):
    """A file of fixed-size entries, preallocated, searched in place (Kafka's ``AbstractIndex``).

    ``path`` is created and preallocated to ``max_index_size`` (rounded down to the entry size)
    when it does not exist and ``writable`` is true. An existing file is opened as it is:
    ``max_entries`` is its length over the entry size, and ``entries`` the same less a trailing run
    of zero slots (see the module's docstring). A read-only index (``writable=False``) never
    creates or changes its file; a missing file then raises ``FileNotFoundError``.

    Mutations take a lock; lookups do not (a positioned read is atomic), as in Kafka. Use the
    index as a context manager or call ``close()``, which trims a writable index.
    """

    ENTRY_SIZE: ClassVar[int]
    _ENTRY_FORMAT: ClassVar[str]
    """The ``struct`` format of one entry."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        max_index_size: int = -1,
        *,
        writable: bool = True,
    ) -> None:
        self._path = Path(path)
        self._base_offset = base_offset
        self._max_index_size = max_index_size
        self._writable = writable
        self._lock = threading.RLock()
        self._fd: int | None = None
        entry_size = self.ENTRY_SIZE
        newly_created = False
        if writable:
            try:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o644)
                newly_created = True
            except FileExistsError:
                fd = os.open(self._path, os.O_RDWR | _O_CLOEXEC)
        else:
            fd = os.open(self._path, os.O_RDONLY | _O_CLOEXEC)
        try:
            if newly_created:
                if max_index_size < entry_size:
                    raise InvalidArgumentError(
                        f"invalid max index size {max_index_size} for {self._path}: "
                        f"less than one {entry_size}-byte entry"
                    )
                os.ftruncate(fd, _round_down(max_index_size, entry_size))
            self._length = os.fstat(fd).st_size
        except BaseException:
            os.close(fd)
            if newly_created:
                self._path.unlink(missing_ok=True)
            raise
        self._fd = fd
        self._max_entries = self._length // entry_size
        self._entries = 0
        try:
            if not newly_created:
                self._entries = self._written_entries(self._max_entries)
            self._load_last_entry()
        except BaseException:
            self.close_handler()
            raise
        _LOG.debug(
            "Loaded index %s: max entries %d, entries %d, length %d",
            self._path,
            self._max_entries,
            self._entries,
            self._length,
        )

    # Subclass hooks -----------------------------------------------------------------------------
    @abstractmethod
    def _load_last_entry(self) -> None:
        """Refresh the cached last entry from the file after the entry count changed."""

    @abstractmethod
    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``; past the last entry, no effect."""

    @abstractmethod
    def sanity_check(self) -> None:
        """Read the whole index and raise ``CorruptIndexError`` at the first inconsistency."""

    # Properties ---------------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def max_index_size(self) -> int:
        return self._max_index_size

    @property
    def max_entries(self) -> int:
        """How many entries the file has room for (its length over the entry size)."""
        return self._max_entries

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def length(self) -> int:
        """The file's length in bytes, preallocated tail included."""
        return self._length

    @property
    def writable(self) -> bool:
        return self._writable

    @property
    def closed(self) -> bool:
        return self._fd is None

    def size_in_bytes(self) -> int:
        """The bytes the entries use (``entries * entry_size``)."""
        return self._entries * self.ENTRY_SIZE

    def is_full(self) -> bool:
        """No free slot is left, so the segment must be rolled before the next index entry."""
        return self._entries >= self._max_entries

    def relative_offset(self, offset: int) -> int:
        """``offset - base_offset`` as stored, or ``IndexOffsetOverflowError`` if not an int32."""
        relative = offset - self._base_offset
        if not 0 <= relative <= _MAX_INT32:
            raise IndexOffsetOverflowError(
                f"integer overflow for offset {offset} ({self._path}, base offset "
                f"{self._base_offset})"
            )
        return relative

    def can_append_offset(self, offset: int) -> bool:
        """True if ``offset`` can be stored relative to this index's base offset."""
        return 0 <= offset - self._base_offset <= _MAX_INT32

    # File management ----------------------------------------------------------------------------
    def resize(self, new_size: int) -> bool:
        """Set the file length to ``new_size`` rounded down to the entry size; True if it changed.

        Growing adds zero slots (Kafka does this when a segment becomes active again); shrinking
        below the entries also drops entries, where Kafka would be left with an invalid position.
        """
        with self._lock:
            fd = self._require_writable("resize")
            rounded = _round_down(new_size, self.ENTRY_SIZE)
            if rounded == self._length:
                return False
            os.ftruncate(fd, rounded)
            self._length = rounded
            self._max_entries = rounded // self.ENTRY_SIZE
            if self._entries > self._max_entries:
                self._entries = self._max_entries
                self._load_last_entry()
            return True

    def trim_to_valid_size(self) -> None:
        """Cut the preallocated tail off, leaving exactly the entries (done at roll and close)."""
        with self._lock:
            if self._writable and self._fd is not None:
                self.resize(self._entries * self.ENTRY_SIZE)

    def truncate(self) -> None:
        """Remove every entry (the file keeps its length)."""
        self._truncate_to_entries(0)

    def reset(self) -> None:
        """Remove every entry and grow the file back to ``max_index_size`` (before a rebuild)."""
        with self._lock:
            self.truncate()
            self.resize(self._max_index_size)

    def flush(self) -> None:
        """``fsync`` the file (Kafka forces its memory map)."""
        with self._lock:
            if self._fd is not None and self._writable:
                os.fsync(self._fd)

    def close(self) -> None:
        """Trim a writable index to its entries and close the file; idempotent."""
        with self._lock:
            if self._fd is None:
                return
            try:
                self.trim_to_valid_size()
            finally:
                self.close_handler()

    def close_handler(self) -> None:
        """Close the file without trimming it (Kafka's ``closeHandler``)."""
        with self._lock:
            if self._fd is not None:
                fd, self._fd = self._fd, None
                os.close(fd)

    def delete_if_exists(self) -> bool:
        """Close and delete the file; False if it did not exist."""
        with self._lock:
            self.close_handler()
            try:
                self._path.unlink()
            except FileNotFoundError:
                return False
            return True

    def rename_to(self, new_path: str | os.PathLike[str]) -> None:
        """Rename the file (atomically, as Kafka's ``atomicMoveWithFallback``); it stays open."""
        with self._lock:
            target = Path(new_path)
            try:
                os.replace(self._path, target)
            finally:
                self._path = target

    def update_parent_dir(self, parent_dir: str | os.PathLike[str]) -> None:
        """Record that the file now lives in ``parent_dir`` (the directory was renamed)."""
        self._path = Path(parent_dir) / self._path.name

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
            f"{type(self).__name__}(path={str(self._path)!r}, base_offset={self._base_offset}, "
            f"entries={self._entries}, max_entries={self._max_entries})"
        )

    # Reading ------------------------------------------------------------------------------------
    def _require_open(self) -> int:
        fd = self._fd
        if fd is None:
            raise IllegalStateError(f"index {self._path} is closed")
        return fd

    def _require_writable(self, what: str) -> int:
        fd = self._require_open()
        if not self._writable:
            raise IllegalStateError(f"cannot {what} read-only index {self._path}")
        return fd

    def _read(self, position: int, size: int) -> bytes:
        """Exactly ``size`` bytes at ``position``, or ``CorruptIndexError`` if the file is short."""
        fd = self._require_open()
        data = os.pread(fd, size, position)
        if len(data) != size:
            raise CorruptIndexError(
                f"index {self._path} is shorter than expected: wanted {size} bytes at position "
                f"{position}, got {len(data)} (was the file truncated by another process?)",
                path=str(self._path),
                position=position + len(data),
            )
        return data

    def _written_entries(self, slots: int) -> int:
        """How many of ``slots`` slots were written: the count less a trailing run of zero slots.

        Binary search for the first all-zero slot at index >= 1, assuming (as Kafka's writers
        guarantee) that unwritten slots form a suffix; a file where they do not is corrupt and
        ``sanity_check`` says so.
        """
        size = self.ENTRY_SIZE
        if slots <= 1:
            return slots
        zero = bytes(size)
        if self._read((slots - 1) * size, size) != zero:
            return slots
        lo, hi = 1, slots - 1  # the first zero slot is in [lo, hi]; slot hi is zero
        while lo < hi:
            mid = (lo + hi) // 2
            if self._read(mid * size, size) == zero:
                hi = mid
            else:
                lo = mid + 1
        if lo == 1 and self._read(0, size) == zero:
            return 0  # an untrimmed file of zeros: nothing was written
        return lo

    def _unpack_range(self, start: int, stop: int) -> list[tuple[int, ...]]:
        size = self.ENTRY_SIZE
        data = self._read(start * size, (stop - start) * size)
        return list(struct.iter_unpack(self._ENTRY_FORMAT, data))

    def _raw_at(self, slot: int) -> tuple[int, ...]:
        size = self.ENTRY_SIZE
        return struct.unpack(self._ENTRY_FORMAT, self._read(slot * size, size))

    @abstractmethod
    def _key(self, raw: tuple[int, ...]) -> int:
        """The search key of an unpacked entry."""

    @abstractmethod
    def _value(self, raw: tuple[int, ...]) -> int:
        """The searchable value of an unpacked entry (position, or absolute offset)."""

    def _largest_lower_bound_slot(self, target: int, *, by_value: bool = False) -> int:
        """The last slot whose key (or value) is <= ``target``, or -1 (LARGEST_LOWER_BOUND)."""
        return self._bisect(target, by_value=by_value, upper=False)

    def _smallest_upper_bound_slot(self, target: int, *, by_value: bool = False) -> int:
        """The first slot whose key (or value) is >= ``target``, or -1 (SMALLEST_UPPER_BOUND)."""
        return self._bisect(target, by_value=by_value, upper=True)

    def _bisect(self, target: int, *, by_value: bool, upper: bool) -> int:
        entries = self._entries
        if entries == 0:
            return -1
        field = self._value if by_value else self._key
        # Find the first slot whose field is > target (lower bound) or >= target (upper bound).
        lo, hi = 0, entries
        while hi - lo > _WINDOW:
            mid = (lo + hi) // 2
            found = field(self._raw_at(mid))
            if found < target or (not upper and found == target):
                lo = mid + 1
            else:
                hi = mid
        window = [field(raw) for raw in self._unpack_range(lo, hi)]
        if upper:
            slot = lo + bisect_left(window, target)
            return slot if slot < entries else -1
        return lo + bisect_right(window, target) - 1

    def _iter_raw(self) -> Iterator[tuple[int, tuple[int, ...]]]:
        """(slot, unpacked entry) for every entry, read in chunks."""
        entries = self._entries
        for start in range(0, entries, _CHUNK_ENTRIES):
            stop = min(entries, start + _CHUNK_ENTRIES)
            yield from enumerate(self._unpack_range(start, stop), start)

    def _check_entry_number(self, n: int) -> None:
        if not 0 <= n < self._entries:
            raise InvalidArgumentError(
                f"attempt to fetch entry {n} from index {self._path}, which has {self._entries} "
                "entries"
            )

    def _corrupt(self, message: str, position: int) -> CorruptIndexError:
        return CorruptIndexError(
            f"index {self._path} is corrupt at byte {position}: {message}",
            path=str(self._path),
            position=position,
        )

    def _check_length(self) -> None:
        if self._length % self.ENTRY_SIZE:
            raise self._corrupt(
                f"the file is {self._length} bytes, not a multiple of the {self.ENTRY_SIZE}-byte "
                "entry size",
                self._length - self._length % self.ENTRY_SIZE,
            )

    # Writing ------------------------------------------------------------------------------------
    def _write_entry(self, data: bytes) -> None:
        """Write one entry at the next slot (the caller holds the lock and checked for room)."""
        fd = self._require_writable("append to")
        position = self._entries * self.ENTRY_SIZE
        written = os.pwrite(fd, data, position)
        if written != len(data):  # pragma: no cover - regular files write fully or raise
            raise OSError(errno.EIO, f"short write to {self._path} at {position}")
        self._entries += 1

    def _truncate_to_entries(self, entries: int) -> None:
        """Keep the first ``entries`` entries and zero the slots dropped (see the module doc)."""
        with self._lock:
            fd = self._require_writable("truncate")
            if entries < self._entries:
                start = entries * self.ENTRY_SIZE
                end = self._entries * self.ENTRY_SIZE
                os.pwrite(fd, bytes(end - start), start)
            self._entries = entries
            self._load_last_entry()


_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
