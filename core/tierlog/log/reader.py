"""Iterate over the record batches of a segment file or a buffer, shallow or deep.

- ``iter_batches``: shallow, like Kafka's ``FileLogInputStream``: batch headers only (with their
  byte positions), optionally checking each CRC. This is what rebuilding an index, recovery and
  ``kafka-dump-log`` without ``--deep-iteration`` need, so it is built to approach disk speed.
- ``iter_batches_with_records`` / ``iter_records``: deep, every record decoded (decompressed).

A file is streamed, never loaded whole, in chunks of ``buffer_size`` bytes (1 MiB by default);
headers are unpacked in place with ``struct.Struct.unpack_from`` and CRCs computed over
``memoryview`` slices, so a scan copies each byte once (kernel to buffer). A batch larger than the
buffer is not allocated for a shallow scan: its CRC is computed while it streams through the
buffer. A deep scan allocates the batch only after its ``Length`` has been checked against what
remains of the file.

How the chunks are read is the only thing that differs between files (``_SyncChunks``,
``_ReadAhead``); one parsing loop serves both. A range of at least ``READ_AHEAD_MIN_CHUNKS``
chunks of a regular file (a path, or a file object with a working ``fileno()``) is read ahead on
a thread of the scan's own with ``os.preadv``: while the caller's thread checks the CRCs of chunk
k, the read of chunk k+1 (a copy from the page cache or a wait for the disk, both without the
GIL) runs on the other core. Anything else (a small range, ``BytesIO``, a platform without
``preadv``, a process confined to one CPU) is read with the file object's ``readinto`` on the
caller's thread. An abandoned scan (``close()``, an exception, a consumer that stops early) waits
for its read in flight and joins its thread before the file is closed.

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
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from queue import SimpleQueue
from typing import BinaryIO, Final, TypeAlias, cast

from tierlog.log.batch import (
    ATTRIBUTES_OFFSET,
    HEADER,
    HEADER_SIZE_UP_TO_MAGIC,
    LEGACY_RECORD_OVERHEAD_V0,
    LENGTH_FIELD,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
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
"""Bytes read at a time (a chunk). 1 MiB: syscalls cost nothing next to the copy, and a chunk still
sits in the CPU cache when its batches' CRCs are computed right after it is read (with 8 MiB the
page-cache scan measured up to 30% slower, for that reason)."""

READ_AHEAD_MIN_CHUNKS: Final = 4
"""The shortest range, in chunks, read ahead on a thread. Below it the scan reads on the caller's
thread: starting and joining a thread (~50 µs) and handing each chunk over would cost about what
overlapping a few chunk reads saves."""

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
            # ``_iterate_file`` joins its read-ahead before returning: no read outlives ``f``.
            yield from _iterate_file(f, path, scan, own_file=True)
        return
    name = getattr(source, "name", None)
    yield from _iterate_file(source, name if isinstance(name, str) else None, scan, own_file=False)


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


_Fill: TypeAlias = Callable[[int, int], tuple[bytearray, memoryview, int, int]]
"""``fill(off, filled) -> (buf, mv, off, filled)``: keep the unconsumed bytes ``off:filled`` of
the current buffer (fewer than ``buffer_size``: a partial batch) and append the next chunk.

The bytes now at ``off:filled`` of the returned buffer (possibly another one) are the kept tail
followed by what was read: at least ``min(buffer_size, end - position of the tail)`` of them
unless the file shrank. Reading nothing more (the end, or a file cut short) returns the tail
alone; the caller then raises or stops."""


class _SyncChunks:
    """Read with the file object's own ``readinto``, on the caller's thread, into one buffer.

    The tail is moved to the front of the buffer and the rest of the buffer is filled. This works
    for any file object (``BytesIO``, an object with ``read`` only) and moves its position.
    """

    __slots__ = ("_buf", "_end", "_mv", "_pos", "_readinto", "_size")

    def __init__(self, f: BinaryIO, start: int, end: int, buffer_size: int) -> None:
        self._buf = bytearray(buffer_size)
        self._mv = memoryview(self._buf)
        self._readinto = _readinto(f)
        self._size = buffer_size
        self._end = end
        self._pos = start
        """The file position of the next byte to read: ``filled`` is there in the buffer."""
        f.seek(start)

    def fill(self, off: int, filled: int) -> tuple[bytearray, memoryview, int, int]:
        buf = self._buf
        mv = self._mv
        tail = filled - off
        if off and tail:
            buf[:tail] = buf[off:filled]
        filled = tail
        limit = min(self._size, self._end - self._pos + tail)
        readinto = self._readinto
        while filled < limit:
            n = readinto(mv[filled:limit])
            if not n:
                break
            filled += n
        self._pos += filled - tail
        return buf, mv, 0, filled

    def close(self) -> None:
        pass


class _ReadAhead:
    """Read chunk k+1 on a thread while the caller parses chunk k.

    Two buffers of ``2 * buffer_size`` bytes alternate: chunk k is read with ``os.preadv`` (an
    explicit offset: no shared file position) into ``bufs[k % 2][buffer_size:]``, and the
    unconsumed tail of chunk k-1 (a partial batch, shorter than ``buffer_size``) is copied to just
    before it, beside the read and never over it. Once that copy is done chunk k-1's buffer is
    free, so the read of chunk k+1 is queued there *before* waiting for chunk k: the thread goes
    from one read straight to the next, and it needs the GIL only while the caller waits.

    Why a thread per scan, not a shared ``ThreadPoolExecutor``: a scan of at least
    ``READ_AHEAD_MIN_CHUNKS`` chunks pays ~50 µs once for it, where an executor costs a ``Future``
    and a ``Condition`` round trip per chunk (on the 1 GiB page-cache benchmark the scan with CRC
    measured 0.53 of the raw read that way, 0.69 with this thread and two ``SimpleQueue``); its
    reads never queue behind another scan's; and its life is the scan's, so ``close`` can join
    it (nothing keeps running after a scan ends, which a test can see).
    It is a daemon so that a scan suspended and never closed cannot keep the interpreter from
    exiting: the thread then only waits on a queue. A file object's descriptor is duplicated, so
    the caller closing it before the scan cannot leave a read against a closed (or reused) fd.
    """

    __slots__ = (
        "_bufs",
        "_chunk",
        "_close_fd",
        "_count",
        "_end",
        "_eof",
        "_fd",
        "_jobs",
        "_next",
        "_results",
        "_start",
        "_thread",
        "_views",
    )

    def __init__(self, fd: int, start: int, end: int, buffer_size: int, *, close_fd: bool) -> None:
        self._fd = fd
        self._close_fd = close_fd
        self._chunk = buffer_size
        self._start = start
        self._end = end
        self._count = (end - start + buffer_size - 1) // buffer_size
        self._bufs = (bytearray(2 * buffer_size), bytearray(2 * buffer_size))
        self._views = (memoryview(self._bufs[0]), memoryview(self._bufs[1]))
        self._next = 0
        """The chunk the next ``fill`` hands over."""
        self._eof = False
        """A chunk came back short (the file shrank): nothing after it is contiguous."""
        self._jobs: SimpleQueue[tuple[memoryview, int] | None] = SimpleQueue()
        self._results: SimpleQueue[int | BaseException] = SimpleQueue()
        self._thread = threading.Thread(
            target=_read_ahead_worker,
            args=(fd, self._jobs, self._results),
            name="tierlog-read-ahead",
            daemon=True,
        )
        self._thread.start()
        self._submit(0)

    def _submit(self, k: int) -> None:
        offset = self._start + k * self._chunk
        length = min(self._chunk, self._end - offset)
        self._jobs.put((self._views[k & 1][self._chunk : self._chunk + length], offset))

    def _wait(self) -> int:
        """The byte count of the oldest queued read (re-raising its error)."""
        result = self._results.get()
        if isinstance(result, BaseException):
            raise result
        return result

    def fill(self, off: int, filled: int) -> tuple[bytearray, memoryview, int, int]:
        k = self._next
        prev = (k + 1) & 1  # chunk k-1's buffer, holding off:filled; chunk k+1 goes there
        if self._eof or k == self._count:
            return self._bufs[prev], self._views[prev], off, filled
        head = self._chunk
        cur = k & 1
        buf = self._bufs[cur]
        tail = filled - off
        if tail:
            buf[head - tail : head] = self._views[prev][off:filled]
        if k + 1 < self._count:
            self._submit(k + 1)
        n = self._wait()
        if n < min(head, self._end - self._start - k * head):
            self._eof = True
        self._next = k + 1
        return buf, self._views[cur], head - tail, head + n

    def close(self) -> None:
        """Stop the thread after the reads still queued (at most two) and join it, then close
        the fd if it is a duplicate: the file can then be closed, truncated or deleted.

        Joining rather than counting the reads in flight: nothing can be miscounted (by an
        interrupted wait, say) into a wait that never ends or a read left running.
        """
        self._jobs.put(None)
        try:
            self._thread.join()
        finally:
            if self._close_fd:
                os.close(self._fd)


def _read_ahead_worker(
    fd: int,
    jobs: SimpleQueue[tuple[memoryview, int] | None],
    results: SimpleQueue[int | BaseException],
) -> None:
    """The read-ahead thread: fill each queued view from its offset, in order, until ``None``.

    Every job gets exactly one result (a byte count, or the exception), in order, so the scan
    never waits for a result that will not come.
    """
    while (job := jobs.get()) is not None:
        view, offset = job
        del job
        result: int | BaseException
        try:
            got = 0
            want = len(view)
            while got < want:
                n = os.preadv(fd, [view[got:]], offset + got)
                if not n:
                    break
                got += n
            result = got
        except BaseException as e:  # handed to the scan, which raises it
            result = e
        del view
        results.put(result)


def _usable_cpus() -> int:
    """The CPUs this process may run on: with one, a read-ahead thread would only take turns
    with the scan, and each hand-over costs two context switches (25% slower, measured)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _open_chunks(
    f: BinaryIO, start: int, end: int, buffer_size: int, *, own_file: bool
) -> _SyncChunks | _ReadAhead:
    """Read ahead on a thread when it can pay (see ``_ReadAhead``), else on the caller's."""
    if (
        end - start >= READ_AHEAD_MIN_CHUNKS * buffer_size
        and hasattr(os, "preadv")
        and _usable_cpus() > 1
    ):
        try:
            fd = f.fileno()
            regular = f.readable() and stat.S_ISREG(os.fstat(fd).st_mode)
        except (AttributeError, OSError, ValueError):  # BytesIO, pipes, closed files...
            regular = False
        if regular:
            if not own_file:
                fd = os.dup(fd)
            try:
                return _ReadAhead(fd, start, end, buffer_size, close_fd=not own_file)
            except RuntimeError:  # no thread can be started (at interpreter shutdown, say)
                if not own_file:
                    os.close(fd)
            except BaseException:
                if not own_file:
                    os.close(fd)
                raise
    return _SyncChunks(f, start, end, buffer_size)


def _iterate_file(f: BinaryIO, path: str | None, scan: _Scan, *, own_file: bool) -> Iterator[_Item]:
    """The streaming loop, one for every way of reading: ``buf``/``mv`` is the current buffer,
    ``filled`` where its valid bytes end, ``off`` where the next batch starts in it (at file
    position ``pos``); ``fill`` appends the next chunk to the unconsumed bytes. ``own_file``: the
    scan opened ``f`` (from a path) and closes it after this returns, else it is the caller's."""
    verify = scan.verify
    deep = scan.deep
    max_decompressed = scan.max_decompressed
    buffer_size = scan.buffer_size
    start = scan.start
    size_now = _file_size(f)
    end = size_now if scan.end is None else min(scan.end, size_now)
    chunks = _open_chunks(f, start, end, buffer_size, own_file=own_file)
    fill = chunks.fill
    unpack_from = HEADER.unpack_from
    buf = bytearray()  # nothing read yet: the first pass of the loop fills
    mv = memoryview(buf)
    off = filled = 0
    pos = start
    overhead = RECORD_BATCH_OVERHEAD
    min_length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD
    crc_from = ATTRIBUTES_OFFSET
    new = _tuple_new
    cls = RecordBatch
    try:
        while pos < end:
            avail = filled - off
            if avail < overhead:
                buf, mv, off, filled = fill(off, filled)
                avail = filled - off
                if avail < overhead:
                    _check_short_header(buf, off, avail, end - pos, pos=pos, path=path)
            fields = unpack_from(buf, off)
            if fields[3] != MAGIC_V2:
                # Kafka checks the size before the magic: a zero-filled or torn tail is
                # corruption.
                if not LEGACY_RECORD_OVERHEAD_V0 <= fields[1] <= end - pos - LOG_OVERHEAD:
                    check_batch_size(fields[1], end - pos, pos, path)
                raise bad_magic(fields[3], pos, path)
            length = fields[1]
            if length < min_length or length > end - pos - LOG_OVERHEAD:
                check_batch_size(length, end - pos, pos, path)
            header: RecordBatch = new(cls, fields)
            size = LOG_OVERHEAD + length
            if size > avail and size <= buffer_size:
                buf, mv, off, filled = fill(off, filled)
                avail = filled - off
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
                block, buf, mv, off, filled = _stream_large_batch(
                    fill,
                    buf,
                    mv,
                    off,
                    filled,
                    header=header,
                    pos=pos,
                    path=path,
                    verify=verify,
                    deep=deep,
                )
                if block is not None:
                    records = decode_records(
                        header,
                        block,
                        path=path,
                        position=pos,
                        max_decompressed_size=max_decompressed,
                    )
                    yield pos, header, records
                else:
                    yield pos, header
            pos += size
    finally:
        chunks.close()


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
    magic = buf[off + MAGIC_OFFSET]
    if magic != MAGIC_V2:
        (length,) = LENGTH_FIELD.unpack_from(buf, off + LENGTH_OFFSET)
        if not LEGACY_RECORD_OVERHEAD_V0 <= length <= remaining - LOG_OVERHEAD:
            check_batch_size(length, remaining, pos, path)
        raise bad_magic(magic if magic < 128 else magic - 256, pos, path)
    raise corrupt(
        f"truncated record batch header ({avail} bytes, {RECORD_BATCH_OVERHEAD} needed)", pos, path
    )


def _stream_large_batch(
    fill: _Fill,
    buf: bytearray,
    mv: memoryview,
    off: int,
    filled: int,
    *,
    header: RecordBatch,
    pos: int,
    path: str | None,
    verify: bool,
    deep: bool,
) -> tuple[bytearray | None, bytearray, memoryview, int, int]:
    """Consume a batch that does not fit in the buffer, starting with ``mv[off:filled]``, chunk
    after chunk; return its records block (deep scans only) and the new ``buf, mv, off, filled``
    (``off`` just past the batch).

    Checks the CRC as the bytes pass. The block is allocated only for a deep scan, whose ``Length``
    was checked against the file before this is called: a corrupt length allocates nothing.
    """
    size = LOG_OVERHEAD + header.length
    have = filled - off
    crc = crc32c(mv[off + ATTRIBUTES_OFFSET : filled]) if verify else 0
    block: bytearray | None = None
    if deep:
        block = bytearray(size - RECORD_BATCH_OVERHEAD)
        block[: have - RECORD_BATCH_OVERHEAD] = mv[off + RECORD_BATCH_OVERHEAD : filled]
    while have < size:
        buf, mv, off, filled = fill(filled, filled)
        n = min(filled - off, size - have)
        if not n:
            raise corrupt(
                f"file ends early: {have} of the {size} bytes of the batch could be read",
                pos,
                path,
            )
        piece = mv[off : off + n]
        if verify:
            crc = crc32c(piece, crc)
        if block is not None:
            at = have - RECORD_BATCH_OVERHEAD
            block[at : at + n] = piece
        have += n
        off += n
    if verify and crc != header.crc:
        raise crc_mismatch(header.crc, crc, pos, path)
    return block, buf, mv, off, filled
