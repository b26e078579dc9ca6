"""Iterate over the record batches of a segment file or a buffer, shallow or deep.

- ``iter_batches``: shallow, like Kafka's ``FileLogInputStream``: batch headers only (with their
  byte positions), optionally checking each CRC. This is what rebuilding an index, recovery and
  ``kafka-dump-log`` without ``--deep-iteration`` need, so it is built to approach disk speed.
- ``iter_batches_with_records`` / ``iter_records``: deep, every record decoded (decompressed).

A file is streamed, never loaded whole: one reusable buffer (``buffer_size``, 1 MiB by default)
is filled with ``readinto``; headers are unpacked in place with ``struct.Struct.unpack_from``
and CRCs computed over ``memoryview`` slices, so a scan copies each byte once (kernel to buffer).
A batch larger than the buffer is not allocated for a shallow scan: its CRC is computed while it
streams through the buffer. A deep scan allocates the batch only after its ``Length`` has been
checked against what remains of the file.

The end of a file is its size when iteration starts (a segment being appended to is read up to
there). Nothing past it is ever read. A header that is cut short, a ``Length`` below the minimum
or beyond the end, a bad magic byte, a CRC mismatch or a malformed record raises
``CorruptRecordError`` naming the file and the byte position (recovery truncates a log there);
a legacy batch (magic 0 or 1) raises ``UnsupportedRecordFormatError``. Legacy message sets are
detected, not decoded.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, Final, TypeAlias, cast

from tierlog.log.batch import (
    ATTRIBUTES_OFFSET,
    HEADER,
    HEADER_SIZE_UP_TO_MAGIC,
    LEGACY_RECORD_OVERHEAD_V0,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    RecordBatch,
    bad_magic,
    check_batch_size,
    corrupt,
    crc_mismatch,
    decode_records,
    read_batch_header,
)
from tierlog.log.compression import DEFAULT_MAX_DECOMPRESSED_SIZE
from tierlog.log.crc import crc32c
from tierlog.log.record import Record
from tierlog.spi import InvalidArgumentError

DEFAULT_BUFFER_SIZE: Final = 1 << 20
"""Bytes read per ``readinto``. 1 MiB: syscalls cost nothing next to the copy, and a chunk still
sits in the CPU cache when its batches' CRCs are computed right after it is read (with 8 MiB the
page-cache scan measured up to 30% slower, for that reason)."""

Source: TypeAlias = "str | os.PathLike[str] | BinaryIO | bytes | bytearray | memoryview"
"""A segment file (path or binary file object open for reading) or a buffer holding batches."""

_tuple_new = tuple.__new__

_Item: TypeAlias = "tuple[int, RecordBatch] | tuple[int, RecordBatch, list[Record]]"


@dataclass(frozen=True, slots=True)
class _Scan:
    """What one iteration does: check CRCs, decode records, over which byte range."""

    verify: bool
    deep: bool
    start: int
    end: int | None
    buffer_size: int
    max_decompressed: int


def iter_batches(
    source: Source,
    *,
    verify_crc: bool = True,
    start: int = 0,
    end: int | None = None,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
) -> Iterator[tuple[int, RecordBatch]]:
    """Yield ``(position, header)`` for each batch from byte ``start`` to ``end`` (default: all).

    ``verify_crc`` checks each batch's CRC-32C (Kafka's ``ensureValid``); without it only the
    header's structure is checked.
    """
    return cast(
        Iterator[tuple[int, RecordBatch]],
        _iterate(source, _Scan(verify_crc, False, start, end, buffer_size, 0)),
    )


def iter_batches_with_records(
    source: Source,
    *,
    verify_crc: bool = True,
    start: int = 0,
    end: int | None = None,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Iterator[tuple[int, RecordBatch, list[Record]]]:
    """Yield ``(position, header, records)`` for each batch, every record decoded.

    Compressed batches are decompressed with the limit ``max_decompressed_size`` per batch.
    """
    return cast(
        Iterator[tuple[int, RecordBatch, list[Record]]],
        _iterate(source, _Scan(verify_crc, True, start, end, buffer_size, max_decompressed_size)),
    )


def iter_records(
    source: Source,
    *,
    verify_crc: bool = True,
    start: int = 0,
    end: int | None = None,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Iterator[Record]:
    """Yield every record of every batch, in log order."""
    for _, _, records in iter_batches_with_records(
        source,
        verify_crc=verify_crc,
        start=start,
        end=end,
        buffer_size=buffer_size,
        max_decompressed_size=max_decompressed_size,
    ):
        yield from records


def _iterate(source: Source, scan: _Scan) -> Iterator[_Item]:
    """Check the arguments now, then return the generator that opens and reads lazily."""
    if scan.buffer_size < RECORD_BATCH_OVERHEAD:
        raise InvalidArgumentError(
            f"buffer_size {scan.buffer_size} is below {RECORD_BATCH_OVERHEAD}"
        )
    if scan.start < 0 or (scan.end is not None and scan.end < scan.start):
        raise InvalidArgumentError(f"invalid range [{scan.start}, {scan.end})")
    return _generate(source, scan)


def _generate(source: Source, scan: _Scan) -> Iterator[_Item]:
    if isinstance(source, bytes | bytearray | memoryview):
        view = memoryview(source).cast("B")
        stop = len(view) if scan.end is None else min(scan.end, len(view))
        yield from _iterate_buffer(view, scan, stop)
        return
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        with open(path, "rb", buffering=0) as f:
            yield from _iterate_file(f, path, scan)
        return
    name = getattr(source, "name", None)
    yield from _iterate_file(source, name if isinstance(name, str) else None, scan)


def _iterate_buffer(view: memoryview, scan: _Scan, end: int) -> Iterator[_Item]:
    verify = scan.verify
    deep = scan.deep
    pos = scan.start
    while pos < end:
        header = read_batch_header(view, pos, end=end)
        size = LOG_OVERHEAD + header.length
        if verify:
            computed = crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size])
            if computed != header.crc:
                raise crc_mismatch(header.crc, computed, pos, None)
        if deep:
            records = decode_records(
                header,
                view[pos + RECORD_BATCH_OVERHEAD : pos + size],
                position=pos,
                max_decompressed_size=scan.max_decompressed,
            )
            yield pos, header, records
        else:
            yield pos, header
        pos += size


def _file_size(f: BinaryIO) -> int:
    try:
        return os.fstat(f.fileno()).st_size
    except (AttributeError, OSError, io.UnsupportedOperation):
        here = f.tell()
        size = f.seek(0, io.SEEK_END)
        f.seek(here)
        return size


def _readinto(f: BinaryIO) -> Callable[[memoryview], int]:
    """``f.readinto``, or an equivalent over ``f.read`` for file objects without it."""
    method = getattr(f, "readinto", None)
    if method is not None:
        return cast(Callable[[memoryview], int], method)

    def readinto(b: memoryview) -> int:
        data = f.read(len(b))
        b[: len(data)] = data
        return len(data)

    return readinto


def _iterate_file(f: BinaryIO, path: str | None, scan: _Scan) -> Iterator[_Item]:
    """The streaming loop. ``base`` is the file position of ``buf[0]``, ``filled`` how many
    bytes of ``buf`` are valid, ``off`` where the next batch starts in ``buf``."""
    verify = scan.verify
    deep = scan.deep
    max_decompressed = scan.max_decompressed
    buffer_size = scan.buffer_size
    start = scan.start
    size_now = _file_size(f)
    end = size_now if scan.end is None else min(scan.end, size_now)
    buf = bytearray(buffer_size)
    mv = memoryview(buf)
    readinto = _readinto(f)
    unpack_from = HEADER.unpack_from
    f.seek(start)
    base = start
    filled = 0
    off = 0
    pos = start

    def fill() -> int:
        """Move the unread tail to the front of the buffer and read until it is full or the
        file ends; return how many bytes are now available at ``off`` (which is 0)."""
        nonlocal base, filled, off
        if off:
            tail = filled - off
            if tail:
                buf[:tail] = buf[off:filled]
            base += off
            off = 0
            filled = tail
        limit = min(buffer_size, end - base)
        while filled < limit:
            n = readinto(mv[filled:limit])
            if not n:
                break
            filled += n
        return filled

    overhead = RECORD_BATCH_OVERHEAD
    min_length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD
    crc_from = ATTRIBUTES_OFFSET
    new = _tuple_new
    cls = RecordBatch
    while pos < end:
        avail = filled - off
        if avail < overhead:
            avail = fill()
            if avail < overhead:
                _check_short_header(buf, off, avail, end - pos, pos=pos, path=path)
        fields = unpack_from(buf, off)
        if fields[3] != MAGIC_V2:
            # Kafka checks the size before the magic: a zero-filled or torn tail is corruption.
            if not LEGACY_RECORD_OVERHEAD_V0 <= fields[1] <= end - pos - LOG_OVERHEAD:
                check_batch_size(fields[1], end - pos, pos, path)
            raise bad_magic(fields[3], pos, path)
        length = fields[1]
        if length < min_length or length > end - pos - LOG_OVERHEAD:
            check_batch_size(length, end - pos, pos, path)
        header: RecordBatch = new(cls, fields)
        size = LOG_OVERHEAD + length
        if size > avail and size <= buffer_size:
            avail = fill()
            if avail < size:
                raise corrupt(
                    f"file ends early: {avail} of the {size} bytes of the batch could be read",
                    pos,
                    path,
                )
        if size <= avail:
            if verify:
                computed = crc32c(mv[off + crc_from : off + size])
                if computed != fields[4]:
                    raise crc_mismatch(fields[4], computed, pos, path)
            if deep:
                records = decode_records(
                    header,
                    bytes(mv[off + overhead : off + size]),
                    path=path,
                    position=pos,
                    max_decompressed_size=max_decompressed,
                )
                yield pos, header, records
            else:
                yield pos, header
            off += size
        else:
            # A batch larger than the buffer: stream it through the buffer.
            block = _read_large_batch(
                readinto, mv, off, filled, header, pos=pos, path=path, verify=verify, deep=deep
            )
            base = pos + size
            filled = off = 0
            if deep:
                assert block is not None
                records = decode_records(
                    header, block, path=path, position=pos, max_decompressed_size=max_decompressed
                )
                yield pos, header, records
            else:
                yield pos, header
        pos += size


def _check_short_header(
    buf: bytearray, off: int, avail: int, remaining: int, *, pos: int, path: str | None
) -> None:
    """Raise the right error for fewer than 61 bytes left at ``pos`` (the file's last bytes).

    The magic byte is checked first when it is there, so a legacy batch shorter than a v2
    header is reported as legacy, not as truncated.
    """
    if avail < min(remaining, RECORD_BATCH_OVERHEAD):
        raise corrupt(
            f"file ends early: {avail} of the {remaining} bytes expected could be read", pos, path
        )
    if avail < HEADER_SIZE_UP_TO_MAGIC:
        raise corrupt(
            f"truncated record batch header ({avail} bytes, at least "
            f"{HEADER_SIZE_UP_TO_MAGIC} needed)",
            pos,
            path,
        )
    magic = buf[off + 16]
    if magic != MAGIC_V2:
        (length,) = struct.unpack_from(">i", buf, off + 8)
        if not LEGACY_RECORD_OVERHEAD_V0 <= length <= remaining - LOG_OVERHEAD:
            check_batch_size(length, remaining, pos, path)
        raise bad_magic(magic if magic < 128 else magic - 256, pos, path)
    raise corrupt(
        f"truncated record batch header ({avail} bytes, {RECORD_BATCH_OVERHEAD} needed)", pos, path
    )


def _read_large_batch(
    readinto: Callable[[memoryview], int],
    mv: memoryview,
    off: int,
    filled: int,
    header: RecordBatch,
    *,
    pos: int,
    path: str | None,
    verify: bool,
    deep: bool,
) -> bytes | None:
    """Consume a batch that does not fit in the buffer, starting with ``mv[off:filled]``.

    Checks the CRC as the bytes pass; returns the records block only for a deep scan (whose
    allocation ``size`` was checked against the file before this is called).
    """
    size = LOG_OVERHEAD + header.length
    crc = crc32c(mv[off + ATTRIBUTES_OFFSET : filled])
    parts: list[bytes] | None = [bytes(mv[off + RECORD_BATCH_OVERHEAD : filled])] if deep else None
    left = size - (filled - off)
    cap = len(mv)
    while left:
        want = min(cap, left)
        got = 0
        while got < want:
            n = readinto(mv[got:want])
            if not n:
                raise corrupt(
                    f"file ends early: {size - left + got} of the {size} bytes of the batch "
                    "could be read",
                    pos,
                    path,
                )
            got += n
        crc = crc32c(mv[:want], crc)
        if parts is not None:
            parts.append(bytes(mv[:want]))
        left -= want
    if verify and crc != header.crc:
        raise crc_mismatch(header.crc, crc, pos, path)
    return b"".join(parts) if parts is not None else None
