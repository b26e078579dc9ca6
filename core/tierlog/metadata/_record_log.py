"""An append-only, crash-safe file of records: the embedded RLMM's stand-in for one partition of
Kafka's ``__remote_log_metadata`` topic.

File format
-----------
The file is a sequence of entries and nothing else (no file header)::

    entry   = length:uint32  crc:uint32  payload:length bytes
    length  = number of payload bytes, big-endian, 1 <= length <= MAX_PAYLOAD_BYTES
    crc     = zlib.crc32(payload), big-endian

An entry's *offset* is its index in the file (0, 1, 2, ...), like a Kafka record's offset in its
partition. The payload is opaque here; the embedded RLMM stores the Kafka-format record value of
``tierlog.metadata.serde`` in it, exactly the bytes a broker would produce to the topic.

Why each rule:

- The length comes first so a reader can skip an entry without reading it, and the CRC covers the
  payload so a reader can tell a complete entry from a torn or damaged one.
- Empty payloads are refused: a file tail of zero bytes (what some file systems leave after a
  crash that extended the file but not its data) would otherwise read as valid empty entries.
- ``append`` writes every entry of a batch with one ``pwrite`` and then ``fsync``s before it
  returns, so an acknowledged entry survives a crash. When the file is created its directory is
  ``fsync``ed too, or the file itself could vanish.

Recovery
--------
Opening a file scans it. The first entry that is not valid (a header or payload cut short by the
end of the file, a length of 0 or above ``MAX_PAYLOAD_BYTES``, or a CRC mismatch) is where a
crash interrupted a write, *unless* valid-looking data follows it:

- if no complete, CRC-valid entry starts anywhere after that position, the rest of the file is a
  torn tail of a write that was never acknowledged: it is truncated, with a WARNING naming the
  file, the position and the number of bytes dropped, and appends continue from there;
- otherwise the damage is in the middle of acknowledged data: ``CorruptRecordError`` names the file
  and the position, and the file is left untouched. Silently dropping the good entries after it
  would lose metadata, so an operator has to look.

Reads stream the file through a buffer (never the whole file in memory) and re-check every CRC,
so damage that happens after opening is reported too.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from tierlog._durable import fsync_directory
from tierlog.spi import CorruptRecordError, IllegalStateError, InvalidArgumentError

_LOG = logging.getLogger(__name__)

HEADER: Final = struct.Struct(">II")
"""``length``, ``crc``: the 8-byte header in front of every payload."""

MAX_PAYLOAD_BYTES: Final = 64 * 1024 * 1024
"""Larger lengths are impossible (a metadata record is a few hundred bytes) and mark damage."""

_READ_CHUNK: Final = 1 << 20
_INDEX_INTERVAL: Final = 1024
"""Keep the position of every 1024th entry so ``read(from_offset)`` seeks close to its start."""


def frame(payload: bytes) -> bytes:
    """One entry as it is written to the file."""
    if not payload:
        raise InvalidArgumentError("a record log entry needs a non-empty payload")
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise InvalidArgumentError(
            f"a record log entry holds at most {MAX_PAYLOAD_BYTES} bytes, got {len(payload)}"
        )
    return HEADER.pack(len(payload), zlib.crc32(payload)) + payload


class _Reader:
    """Buffered positional reads of ``[position, end)`` of an open file descriptor."""

    def __init__(self, fd: int, position: int, end: int) -> None:
        self._fd = fd
        self._buf = b""
        self._buf_start = position
        self._end = end

    def read_at(self, position: int, size: int) -> bytes:
        """``size`` bytes at ``position``, fewer only at ``end``."""
        stop = min(position + size, self._end)
        if position < self._buf_start or stop > self._buf_start + len(self._buf):
            want = max(stop - position, _READ_CHUNK)
            want = min(want, self._end - position)
            self._buf = os.pread(self._fd, want, position) if want > 0 else b""
            self._buf_start = position
        lo = position - self._buf_start
        return self._buf[lo : lo + (stop - position)]


def _entry_at(reader: _Reader, position: int, end: int) -> int | None:
    """The size of the valid entry starting at ``position``, or ``None`` if there is none."""
    header = reader.read_at(position, HEADER.size)
    if len(header) < HEADER.size:
        return None
    length: int
    crc: int
    length, crc = HEADER.unpack(header)
    if length == 0 or length > MAX_PAYLOAD_BYTES or position + HEADER.size + length > end:
        return None
    payload = reader.read_at(position + HEADER.size, length)
    if zlib.crc32(payload) != crc:
        return None
    return HEADER.size + length


class RecordLog:
    """One append-only record file (see the module docstring for the format and recovery).

    Thread-safe: appends are serialised by a lock; any number of ``read`` iterators may run
    beside them, each seeing the entries that were complete when it started.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        self._lock = threading.Lock()
        self._closed = False
        self._failed: str | None = None
        created = not self._path.exists()
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if created:
                fsync_directory(self._path.parent)
            self._size, self._count, self._index = self._recover()
        except BaseException:
            os.close(self._fd)
            raise

    # Recovery ----------------------------------------------------------------------------------
    def _recover(self) -> tuple[int, int, list[int]]:
        """Scan the file; truncate a torn tail or raise ``CorruptRecordError``."""
        end = os.fstat(self._fd).st_size
        reader = _Reader(self._fd, 0, end)
        index: list[int] = []
        position = 0
        count = 0
        while position < end:
            size = _entry_at(reader, position, end)
            if size is None:
                break
            if count % _INDEX_INTERVAL == 0:
                index.append(position)
            position += size
            count += 1
        if position < end:
            later = self._find_valid_entry_after(position, end)
            if later is not None:
                raise CorruptRecordError(
                    f"record log {self._path} is corrupt at byte {position} (entry {count}): "
                    f"the entry there is invalid but a valid entry follows at byte {later}; "
                    "the file was left untouched"
                )
            _LOG.warning(
                "record log %s: truncating a torn tail at byte %d (entry %d), dropping %d "
                "byte(s) of an incomplete write",
                self._path,
                position,
                count,
                end - position,
            )
            os.ftruncate(self._fd, position)
            os.fsync(self._fd)
        return position, count, index

    def _find_valid_entry_after(self, bad: int, end: int) -> int | None:
        """The first position after ``bad`` where a complete, CRC-valid entry starts."""
        reader = _Reader(self._fd, bad + 1, end)
        for candidate in range(bad + 1, end - HEADER.size + 1):
            if _entry_at(reader, candidate, end) is not None:
                return candidate
        return None

    # Properties --------------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self._path

    @property
    def next_offset(self) -> int:
        """The offset the next appended entry will get (the number of entries)."""
        with self._lock:
            return self._count

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return self._size

    # Writing -----------------------------------------------------------------------------------
    def append(self, payloads: Sequence[bytes]) -> int:
        """Append ``payloads`` in order, ``fsync``, and return the offset of the last one.

        On a write or fsync error the file is cut back to its previous end (so no partial entry
        is left for later appends to bury) and the log refuses further appends: after a failed
        fsync the kernel may already have dropped the data, so only a reopen (which re-scans the
        file) can say what is on disk.
        """
        if not payloads:
            raise InvalidArgumentError("append needs at least one payload")
        data = b"".join(frame(p) for p in payloads)
        with self._lock:
            self._check_writable()
            start = self._size
            try:
                written = 0
                while written < len(data):
                    written += os.pwrite(self._fd, data[written:], start + written)
                os.fsync(self._fd)
            except OSError as exc:
                self._failed = f"{type(exc).__name__}: {exc}"
                try:
                    os.ftruncate(self._fd, start)
                except OSError:  # pragma: no cover - nothing more can be done
                    _LOG.exception("record log %s: cannot cut back a failed append", self._path)
                raise
            position = start
            for payload in payloads:
                if self._count % _INDEX_INTERVAL == 0:
                    self._index.append(position)
                position += HEADER.size + len(payload)
                self._count += 1
            self._size = position
            return self._count - 1

    def _check_writable(self) -> None:
        if self._closed:
            raise IllegalStateError(f"record log {self._path} is closed")
        if self._failed is not None:
            raise IllegalStateError(
                f"record log {self._path} refused appends after an earlier write failed "
                f"({self._failed}); reopen it to recover"
            )

    # Reading -----------------------------------------------------------------------------------
    def read(self, from_offset: int = 0) -> Iterator[tuple[int, bytes]]:
        """``(offset, payload)`` of every entry from ``from_offset`` that existed when called.

        The iterator holds its own file descriptor and reads in chunks, so it may be consumed
        while other threads append, and a large log is never loaded whole.
        """
        if from_offset < 0:
            raise InvalidArgumentError(f"from_offset must be >= 0, got {from_offset}")
        with self._lock:
            if self._closed:
                raise IllegalStateError(f"record log {self._path} is closed")
            end = self._size
            count = self._count
            slot = min(from_offset // _INDEX_INTERVAL, len(self._index) - 1)
            position = self._index[slot] if slot >= 0 else 0
            offset = slot * _INDEX_INTERVAL if slot >= 0 else 0
        return self._iterate(position, offset, from_offset, end, count)

    def _iterate(
        self, position: int, offset: int, from_offset: int, end: int, count: int
    ) -> Iterator[tuple[int, bytes]]:
        fd = os.open(self._path, os.O_RDONLY)
        try:
            reader = _Reader(fd, position, end)
            while offset < count:
                header = reader.read_at(position, HEADER.size)
                if len(header) < HEADER.size:
                    raise CorruptRecordError(
                        f"record log {self._path} is shorter than expected at byte {position}"
                    )
                length, crc = HEADER.unpack(header)
                if offset >= from_offset:
                    payload = reader.read_at(position + HEADER.size, length)
                    if len(payload) != length or zlib.crc32(payload) != crc:
                        raise CorruptRecordError(
                            f"record log {self._path} is corrupt at byte {position} "
                            f"(entry {offset}): CRC or length mismatch on read"
                        )
                    yield offset, payload
                position += HEADER.size + length
                offset += 1
        finally:
            os.close(fd)

    # Lifecycle ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the file; idempotent. Iterators already started keep their own descriptor."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            os.close(self._fd)

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
        return f"RecordLog({str(self._path)!r}, entries={self._count})"
