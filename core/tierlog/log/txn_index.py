"""The transaction index (``<base>.txnindex``): the aborted transactions a segment completes.

A ``read_committed`` fetch must tell the consumer which transactions in the fetched range were
aborted; the log finds them here instead of scanning batches. Each entry is Kafka's ``AbortedTxn``
message (``clients/.../message/AbortedTxn.json``, version 0, not flexible) prefixed with its
version, a fixed 34 bytes, big-endian::

    version int16 (=0) | producerId int64 | firstOffset int64 | lastOffset int64 |
    lastStableOffset int64

``lastOffset`` (the offset of the abort marker) strictly increases along the file. Unlike the
offset and time indexes, this file is not preallocated: it is created by the first append and
grows by one entry per aborted transaction; a segment without aborted transactions usually has no
file at all, which reads as empty.

Kafka's reader stops before a partial trailing entry and rejects an unknown version; so does this
one (``CorruptIndexError`` naming the file and position), and ``sanity_check`` also reports the
partial entry. Two deliberate differences: the last offset is read back from an existing file, so
the "strictly increasing" rule also holds across a reopen (Kafka forgets it), and appending to a
file that ends in a partial entry is refused instead of writing misaligned entries after it.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final, NamedTuple, Self

from tierlog.log.index import CorruptIndexError
from tierlog.spi import IllegalStateError, InvalidArgumentError

__all__ = [
    "ABORTED_TXN_SIZE",
    "ABORTED_TXN_VERSION",
    "AbortedTxn",
    "TransactionIndex",
    "TxnIndexSearchResult",
    "decode_aborted_txns",
]

_LOG = logging.getLogger(__name__)

ABORTED_TXN_VERSION: Final = 0
ABORTED_TXN_SIZE: Final = 34
_ENTRY: Final = struct.Struct(">hqqqq")
_MIN_INT64: Final = -(1 << 63)
_MAX_INT64: Final = (1 << 63) - 1
_CHUNK_ENTRIES: Final = 4096
_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: its producer, first and last offsets, and the LSO at the abort."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def __post_init__(self) -> None:
        for name in ("producer_id", "first_offset", "last_offset", "last_stable_offset"):
            value = getattr(self, name)
            if not _MIN_INT64 <= value <= _MAX_INT64:
                raise InvalidArgumentError(f"AbortedTxn.{name} must be an int64, got {value}")

    def to_bytes(self) -> bytes:
        """The 34-byte, version-prefixed entry Kafka writes."""
        return _ENTRY.pack(
            ABORTED_TXN_VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )

    @classmethod
    def from_bytes(cls, data: bytes, *, path: str | None = None, position: int = 0) -> AbortedTxn:
        """Decode one 34-byte entry; ``CorruptIndexError`` for a wrong size or version.

        ``path`` and ``position`` (of the entry in its file) only go into the error.
        """
        where = f" in {path}" if path else ""
        if len(data) != ABORTED_TXN_SIZE:
            raise CorruptIndexError(
                f"aborted transaction entry at position {position}{where} is {len(data)} bytes, "
                f"expected {ABORTED_TXN_SIZE}",
                path=path,
                position=position,
            )
        version, producer_id, first, last, lso = _ENTRY.unpack(data)
        if version != ABORTED_TXN_VERSION:
            raise CorruptIndexError(
                f"unexpected aborted transaction version {version} at position {position}{where}; "
                f"supported version range is {ABORTED_TXN_VERSION} to {ABORTED_TXN_VERSION}",
                path=path,
                position=position,
            )
        return cls(producer_id, first, last, lso)


class TxnIndexSearchResult(NamedTuple):
    """Aborted transactions overlapping a fetch, and whether later segments can be skipped.

    ``is_complete`` is true when an entry's last stable offset reached the fetch's upper bound:
    every transaction aborted later started at or after that bound, so later segments cannot
    hold one that overlaps the fetch.
    """

    aborted_transactions: list[AbortedTxn]
    is_complete: bool


def decode_aborted_txns(data: bytes, *, path: str | None = None) -> list[AbortedTxn]:
    """Decode a whole transaction index held in memory (a remote segment's, for instance).

    Strict: a length that is not a multiple of 34 is ``CorruptIndexError``, where the file reader
    would stop before the partial entry as Kafka does.
    """
    if len(data) % ABORTED_TXN_SIZE:
        where = f" {path}" if path else ""
        tail = len(data) - len(data) % ABORTED_TXN_SIZE
        raise CorruptIndexError(
            f"transaction index{where} is {len(data)} bytes, not a multiple of "
            f"{ABORTED_TXN_SIZE}: partial entry at position {tail}",
            path=path,
            position=tail,
        )
    view = memoryview(data)
    return [
        AbortedTxn.from_bytes(bytes(view[at : at + ABORTED_TXN_SIZE]), path=path, position=at)
        for at in range(0, len(data), ABORTED_TXN_SIZE)
    ]


class TransactionIndex:
    """A segment's aborted transactions, file-compatible with Kafka's ``TransactionIndex``.

    ``start_offset`` is the segment's base offset. The file is opened if it exists and created by
    the first ``append``. With ``writable=False`` nothing is ever created or changed.
    """

    def __init__(
        self, start_offset: int, path: str | os.PathLike[str], *, writable: bool = True
    ) -> None:
        self._start_offset = start_offset
        self._path = Path(path)
        self._writable = writable
        self._lock = threading.RLock()
        self._fd: int | None = None
        self._size = 0
        self._last_offset: int | None = None
        self._last_offset_known = True
        self._closed = False
        if self._path.exists():
            self._open(create=False)

    # Properties ---------------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self._path

    @property
    def start_offset(self) -> int:
        return self._start_offset

    @property
    def size_in_bytes(self) -> int:
        """Bytes in the file as this index knows it (0 when there is no file)."""
        return self._size

    # File management ----------------------------------------------------------------------------
    def _open(self, *, create: bool) -> int:
        flags = (os.O_RDWR if self._writable else os.O_RDONLY) | _O_CLOEXEC
        if create:
            flags |= os.O_CREAT
        fd = os.open(self._path, flags, 0o644)
        self._fd = fd
        self._size = os.fstat(fd).st_size
        # Read back lazily, at the first append: opening must not fail on a corrupt last entry.
        self._last_offset_known = self._size < ABORTED_TXN_SIZE
        self._last_offset = None
        return fd

    def _fd_or_none(self) -> int | None:
        if self._closed:
            raise IllegalStateError(f"transaction index {self._path} is closed")
        return self._fd

    def _require_fd(self) -> int:
        fd = self._fd_or_none()
        if fd is None:  # pragma: no cover - callers only get here after reading an entry
            raise IllegalStateError(f"transaction index {self._path} has no file")
        return fd

    def append(self, aborted_txn: AbortedTxn) -> None:
        """Add an entry; its last offset must be above the last one's (``InvalidArgumentError``)."""
        with self._lock:
            if not self._writable:
                raise IllegalStateError(f"cannot append to read-only index {self._path}")
            fd = self._fd_or_none()
            if fd is None:
                fd = self._open(create=True)
            if self._size % ABORTED_TXN_SIZE:
                raise self._corrupt(
                    f"the file is {self._size} bytes, not a multiple of {ABORTED_TXN_SIZE}; it "
                    "ends in a partial entry and must be rebuilt before appending",
                    self._size - self._size % ABORTED_TXN_SIZE,
                )
            if not self._last_offset_known:
                at = self._size - ABORTED_TXN_SIZE
                self._last_offset = self._entry_at(fd, at).last_offset
                self._last_offset_known = True
            if self._last_offset is not None and self._last_offset >= aborted_txn.last_offset:
                raise InvalidArgumentError(
                    "the last offset of appended transactions must increase sequentially, but "
                    f"{aborted_txn.last_offset} is not greater than current last offset "
                    f"{self._last_offset} of index {self._path}"
                )
            os.pwrite(fd, aborted_txn.to_bytes(), self._size)
            self._size += ABORTED_TXN_SIZE
            self._last_offset = aborted_txn.last_offset

    def flush(self) -> None:
        """``fsync`` the file if there is one."""
        with self._lock:
            fd = self._fd_or_none()
            if fd is not None and self._writable:
                os.fsync(fd)

    def reset(self) -> None:
        """Remove every entry (the file, if any, becomes empty)."""
        with self._lock:
            fd = self._fd_or_none()
            if fd is not None:
                self._require_writable("reset")
                os.ftruncate(fd, 0)
            self._size = 0
            self._last_offset = None
            self._last_offset_known = True

    def close(self) -> None:
        """Close the file; idempotent."""
        with self._lock:
            self._closed = True
            if self._fd is not None:
                fd, self._fd = self._fd, None
                os.close(fd)

    def delete_if_exists(self) -> bool:
        """Close and delete the file; False if it did not exist."""
        with self._lock:
            self.close()
            try:
                self._path.unlink()
            except FileNotFoundError:
                return False
            return True

    def rename_to(self, new_path: str | os.PathLike[str]) -> None:
        """Rename the file if it exists (it stays open) and remember the new name either way."""
        with self._lock:
            target = Path(new_path)
            try:
                if self._path.exists():
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
        return f"TransactionIndex(start_offset={self._start_offset}, path={str(self._path)!r})"

    # Reading ------------------------------------------------------------------------------------
    def _require_writable(self, what: str) -> None:
        if not self._writable:
            raise IllegalStateError(f"cannot {what} read-only index {self._path}")

    def _corrupt(self, message: str, position: int) -> CorruptIndexError:
        return CorruptIndexError(
            f"transaction index {self._path} is corrupt at byte {position}: {message}",
            path=str(self._path),
            position=position,
        )

    def _read(self, fd: int, position: int, size: int) -> bytes:
        data = os.pread(fd, size, position)
        if len(data) != size:
            raise self._corrupt(
                f"wanted {size} bytes, the file ended after {len(data)} (was it truncated by "
                "another process?)",
                position + len(data),
            )
        return data

    def _entry_at(self, fd: int, position: int) -> AbortedTxn:
        data = self._read(fd, position, ABORTED_TXN_SIZE)
        return AbortedTxn.from_bytes(data, path=str(self._path), position=position)

    def _iter_with_positions(self) -> Iterator[tuple[AbortedTxn, int]]:
        """Every complete entry and its byte position, read in chunks; a partial tail is skipped."""
        fd = self._fd_or_none()
        if fd is None:
            return
        self._refresh_size()
        end = self._size - self._size % ABORTED_TXN_SIZE
        chunk = _CHUNK_ENTRIES * ABORTED_TXN_SIZE
        path = str(self._path)
        for start in range(0, end, chunk):
            data = self._read(fd, start, min(chunk, end - start))
            for at in range(0, len(data), ABORTED_TXN_SIZE):
                entry = AbortedTxn.from_bytes(
                    data[at : at + ABORTED_TXN_SIZE], path=path, position=start + at
                )
                yield entry, start + at

    def __iter__(self) -> Iterator[AbortedTxn]:
        for entry, _ in self._iter_with_positions():
            yield entry

    def all_aborted_txns(self) -> list[AbortedTxn]:
        """Every entry in file order."""
        return list(self)

    def _refresh_size(self) -> None:
        """Another process (a live broker) may append to a file this index only reads."""
        fd = self._fd_or_none()
        if fd is not None and not self._writable:
            self._size = os.fstat(fd).st_size

    def is_empty(self) -> bool:
        """True when there is no complete entry (or no file)."""
        self._refresh_size()
        return self._size < ABORTED_TXN_SIZE

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``.

        Kafka's ``collectAbortedTxns``: an entry overlaps when its last offset is >= the fetch
        offset and its first offset is < the upper bound. The scan stops, with ``is_complete``,
        at the first entry whose last stable offset is >= the upper bound (that entry included if
        it overlaps); otherwise ``is_complete`` is false and the caller goes on to the next
        segment.
        """
        found: list[AbortedTxn] = []
        for entry, _ in self._iter_with_positions():
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose last offset is >= ``offset`` and everything after them."""
        with self._lock:
            new_last: int | None = None
            for entry, position in self._iter_with_positions():
                if entry.last_offset >= offset:
                    self._require_writable("truncate")
                    os.ftruncate(self._require_fd(), position)
                    self._size = position
                    self._last_offset = new_last
                    self._last_offset_known = True
                    return
                new_last = entry.last_offset

    def sanity_check(self) -> None:
        """Raise ``CorruptIndexError`` (file and byte position) for any inconsistency.

        Checked: every entry's version; a last offset below the segment's start offset (Kafka's
        check); last offsets strictly increasing; first offset <= last offset; and a partial
        entry at the end of the file.
        """
        prev_last: int | None = None
        for entry, position in self._iter_with_positions():
            if entry.last_offset < self._start_offset:
                raise self._corrupt(
                    f"last offset of aborted transaction {entry} is less than start offset "
                    f"{self._start_offset}",
                    position,
                )
            if entry.first_offset > entry.last_offset:
                raise self._corrupt(
                    f"aborted transaction {entry} has its first offset after its last offset",
                    position,
                )
            if prev_last is not None and entry.last_offset <= prev_last:
                raise self._corrupt(
                    f"aborted transaction {entry} has a last offset not above the previous "
                    f"entry's {prev_last}",
                    position,
                )
            prev_last = entry.last_offset
        if self._size % ABORTED_TXN_SIZE:
            tail = self._size - self._size % ABORTED_TXN_SIZE
            raise self._corrupt(
                f"the file is {self._size} bytes, not a multiple of {ABORTED_TXN_SIZE}: partial "
                "entry at the end",
                tail,
            )
