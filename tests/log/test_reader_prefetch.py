"""The read-ahead of ``iter_batches``: a file of enough chunks is read on a thread of the scan's own
(``_ReadAhead``), everything else on the caller's thread (``_SyncChunks``). Both must give the same
batches and the same errors, at the same positions, whatever the chunk boundaries cut; the thread
must never outlive its scan nor read past the end.

Small ``buffer_size`` values make files of tens of chunks: each test forces the other strategy by
raising ``READ_AHEAD_MIN_CHUNKS`` and checks which one ran by counting ``_ReadAhead`` instances.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.log import reader
from tierlog.log.batch import (
    RECORD_BATCH_OVERHEAD,
    UnsupportedRecordFormatError,
    build_batch,
    compute_crc,
)
from tierlog.log.reader import iter_batches, iter_batches_with_records
from tierlog.log.record import Record
from tierlog.spi import CorruptRecordError

CHUNK = 4096
THREAD_NAME = "tierlog-read-ahead"


def batch_of_size(total: int, offset: int = 0) -> bytes:
    """An uncompressed batch of exactly ``total`` bytes (61, or 72 and more)."""
    if total == RECORD_BATCH_OVERHEAD:
        return build_batch([], base_offset=offset)
    rng = random.Random(total)
    # Varint lengths step over some sizes: then a longer key, or a second record, reaches them.
    for first in ([], [Record(offset, 7, None, b"")]):
        for key in (b"k", b"kk"):
            value_size = total - RECORD_BATCH_OVERHEAD - 10
            for _ in range(4):
                value = Record(offset + len(first), 7, key, rng.randbytes(max(value_size, 0)))
                batch = build_batch([*first, value], base_offset=offset)
                if len(batch) == total:
                    return batch
                value_size += total - len(batch)
    raise AssertionError(f"no batch of {total} bytes")


def compressed_batch(offset: int, records: int, codec: str) -> bytes:
    """A batch of random values: it stays larger than ``CHUNK`` once compressed."""
    rng = random.Random(offset)
    return build_batch(
        [Record(offset + i, i, b"k%d" % i, rng.randbytes(700)) for i in range(records)],
        base_offset=offset,
        compression=codec,
    )


# Sizes around the chunk size (4095, 4096, 4097, twice and more), headers alone (61), many small
# batches in a row, and compressed batches larger than a chunk (for deep scans).
ASSORTED = [
    200, 4096, 61, 4095, 4097, 8192, 8193, 100, 100, 100, 61, 61, 30000, 1000, 2000, 3000,
    61, 5000, 72, 12000, 333, 4034, 4035, 4036, 61, 9000,
]  # fmt: skip


def assorted_segment(lead: int = 0) -> bytes:
    """``ASSORTED`` behind a first batch of ``200 + lead`` bytes: raising ``lead`` one byte at a
    time moves every chunk boundary one byte back through the batches after it."""
    parts = [batch_of_size(200 + lead)]
    offset = 1
    for i, size in enumerate(ASSORTED):
        parts.append(batch_of_size(size, offset))
        offset += 1
        if i % 9 == 4:
            parts.append(compressed_batch(offset, 12, ("zstd", "gzip", "lz4")[i % 3]))
            offset += 12
    return b"".join(parts)


def positions(data: bytes) -> list[int]:
    pos, out = 0, []
    while pos < len(data):
        out.append(pos)
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    return out


def read_ahead_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == THREAD_NAME and t.is_alive()}


class Counting(reader._ReadAhead):
    """``_ReadAhead`` counting its instances: which strategy a scan used."""

    created = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        type(self).created += 1
        super().__init__(*args, **kwargs)


@pytest.fixture(autouse=True)
def two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read-ahead is off for a process allowed one CPU only: these tests run it on any machine."""
    monkeypatch.setattr(reader, "_usable_cpus", lambda: 2)


@contextlib.contextmanager
def strategy(ahead: bool) -> Iterator[type[Counting]]:
    """Run the scans in the block with read-ahead (where the file allows it) or without."""
    saved = reader.READ_AHEAD_MIN_CHUNKS, reader._ReadAhead
    Counting.created = 0
    reader._ReadAhead = Counting  # type: ignore[misc]
    if not ahead:
        reader.READ_AHEAD_MIN_CHUNKS = 1 << 62  # type: ignore[misc]
    try:
        yield Counting
    finally:
        reader.READ_AHEAD_MIN_CHUNKS, reader._ReadAhead = saved  # type: ignore[misc]


Outcome = tuple[list[Any], tuple[type[Exception], str, int | None] | None]


def outcome(items: Iterable[Any]) -> Outcome:
    """What a scan yields, then the error that ends it (type, message, position), if any."""
    got: list[Any] = []
    try:
        for item in items:
            got.append(item)
    except (CorruptRecordError, UnsupportedRecordFormatError) as e:
        return got, (type(e), str(e), e.position)
    return got, None


def both(scan: Callable[[], Iterable[Any]], *, expect_ahead: bool = True) -> Outcome:
    """The outcome of ``scan`` with and without read-ahead, which must be the same."""
    before = read_ahead_threads()
    with strategy(True) as counting:
        ahead = outcome(scan())
        assert counting.created == (1 if expect_ahead else 0)
    with strategy(False) as counting:
        sync = outcome(scan())
        assert counting.created == 0
    assert ahead == sync
    assert not read_ahead_threads() - before
    return ahead


def write(tmp_path: Path, data: bytes, name: str = "00000000000000000000.log") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# --- same batches as the other paths ------------------------------------------------------------


def test_every_chunk_boundary_position(tmp_path: Path) -> None:
    """With the lead batch one byte longer each time, each chunk boundary falls at every byte of
    the header (and body) of the batches after it, of every size class."""
    for lead in range(0, 150):
        data = assorted_segment(lead)
        assert len(data) > 30 * CHUNK
        path = write(tmp_path, data)
        expected = list(iter_batches(data))
        assert [p for p, _ in expected] == positions(data)
        got, error = both(lambda path=path: iter_batches(path, buffer_size=CHUNK))
        assert error is None
        assert got == expected
        if lead % 10 == 0:
            got, error = both(
                lambda path=path: iter_batches(path, buffer_size=CHUNK, verify_crc=False)
            )
            assert (got, error) == (expected, None)
            deep, error = both(lambda path=path: iter_batches_with_records(path, buffer_size=CHUNK))
            assert error is None
            assert deep == list(iter_batches_with_records(data))


@pytest.mark.parametrize("buffer_size", [61, 1000, CHUNK, 5000, 1 << 20])
def test_buffer_sizes(tmp_path: Path, buffer_size: int) -> None:
    data = assorted_segment(5)
    path = write(tmp_path, data)
    ahead = len(data) >= reader.READ_AHEAD_MIN_CHUNKS * buffer_size
    got, error = both(lambda: iter_batches(path, buffer_size=buffer_size), expect_ahead=ahead)
    assert (got, error) == (list(iter_batches(data)), None)
    deep, error = both(
        lambda: iter_batches_with_records(path, buffer_size=buffer_size), expect_ahead=ahead
    )
    assert (deep, error) == (list(iter_batches_with_records(data)), None)


def test_start_and_end(tmp_path: Path) -> None:
    data = assorted_segment(17)
    path = write(tmp_path, data)
    starts = positions(data)
    rng = random.Random(5)
    ranges = [(starts[i], starts[j]) for i, j in [(0, -1), (3, 20), (7, 9), (1, 2), (10, 29)]]
    ranges += [(starts[i], starts[i] + n) for i in (2, 13, 24) for n in (30, 61, 4096, 20000)]
    ranges += [(starts[i], None) for i in (5, 17, 28)]
    ranges += [(s, s + rng.randrange(1, 60000)) for s in rng.sample(starts, 8)]
    for start, end in ranges:
        stop = len(data) if end is None else min(end, len(data))
        ahead = stop - start >= reader.READ_AHEAD_MIN_CHUNKS * CHUNK
        got, error = both(
            lambda start=start, end=end: iter_batches(
                path, buffer_size=CHUNK, start=start, end=end
            ),
            expect_ahead=ahead,
        )
        from_buffer = outcome(iter_batches(data, start=start, end=end))
        assert got == from_buffer[0], (start, end)
        assert (error is None) == (from_buffer[1] is None), (start, end)
        if error is not None:
            # ``end`` cuts a batch: reported where it starts, as for a file ending there
            assert error[0] is CorruptRecordError and error[2] == got_end(got, start), (start, end)


def got_end(got: list[tuple[int, Any]], start: int) -> int:
    """The position after the last batch of ``got``: where a scan stopped."""
    if not got:
        return start
    pos, header = got[-1]
    return int(pos + 12 + header.length)


def test_file_objects(tmp_path: Path) -> None:
    """A file object with a regular file behind it is read ahead through a duplicate of its fd,
    without moving its position; ``BytesIO`` is read synchronously."""
    import io

    data = assorted_segment(3)
    path = write(tmp_path, data)
    expected = list(iter_batches(data))
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    for buffering in (0, -1):
        with open(path, "rb", buffering=buffering) as f:
            f.seek(123)
            got, error = both(lambda f=f: iter_batches(f, buffer_size=CHUNK))
            assert (got, error) == (expected, None)
    got, error = both(lambda: iter_batches(io.BytesIO(data), buffer_size=CHUNK), expect_ahead=False)
    assert (got, error) == (expected, None)
    if fds is not None:
        assert len(os.listdir("/proc/self/fd")) == fds


def test_one_cpu_reads_on_the_callers_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, assorted_segment(0))
    assert reader._usable_cpus() == 2  # the fixture's
    monkeypatch.setattr(reader, "_usable_cpus", lambda: 1)
    with strategy(True) as counting:
        assert outcome(iter_batches(path, buffer_size=CHUNK)) == outcome(iter_batches(path))
        assert counting.created == 0
    monkeypatch.undo()
    assert reader._usable_cpus() >= 1  # the real one


# --- errors: same type, message and position as without read-ahead -----------------------------


def containing(data: bytes, byte: int) -> int:
    """Where the batch holding ``data[byte]`` starts."""
    return max(p for p in positions(data) if p <= byte)


def corrupted(data: bytes, at: int, how: str) -> bytes:
    """``data`` with the batch at ``at`` damaged: its header, or a byte of the third chunk."""
    buf = bytearray(data)
    if how == "crc":
        buf[max(at + 70, 2 * CHUNK + 10)] ^= 0x10
    elif how == "magic":
        buf[at + 16] = 3
    elif how == "legacy":
        buf[at + 16] = 1
    elif how == "long":
        struct.pack_into(">i", buf, at + 8, len(data))
    elif how == "short":
        struct.pack_into(">i", buf, at + 8, 20)
    elif how == "records":  # a count the records block cannot hold, CRC fixed: deep scans only
        struct.pack_into(">i", buf, at + 57, 2)
        struct.pack_into(">I", buf, at + 17, compute_crc(buf, at))
    return bytes(buf)


@pytest.mark.parametrize(
    ("how", "match"),
    [
        ("crc", "CRC mismatch"),
        ("magic", "invalid magic byte 3"),
        ("legacy", "legacy message format"),
        ("long", "truncated record batch: it claims"),
        ("short", "smaller than the minimum"),
        ("records", "declares 2 records"),
    ],
)
@pytest.mark.parametrize("which", ["inside", "straddling"])
def test_corruption_in_the_third_chunk(tmp_path: Path, how: str, match: str, which: str) -> None:
    """A batch starting in the third chunk, or one straddling its start (header in the second
    chunk, end in the third): the error names it whatever the chunks did."""
    data = assorted_segment(40)
    inside = next(p for p in positions(data) if 2 * CHUNK < p < 3 * CHUNK - 100)
    at = inside if which == "inside" else containing(data, 2 * CHUNK)
    assert at < 2 * CHUNK or which == "inside"
    path = write(tmp_path, corrupted(data, at, how), "bad.log")
    for deep in (False, True):
        if how == "records" and not deep:
            continue
        got, error = both(
            lambda deep=deep: (iter_batches_with_records if deep else iter_batches)(
                path, buffer_size=CHUNK
            )
        )
        # a missing record is reported where it should start: the end of the batch
        where = positions(data)[positions(data).index(at) + 1] if how == "records" else at
        assert error is not None and error[2] == where, (error, where)
        assert match in error[1] and f"at position {where} of {path}" in error[1]
        assert [p for p, *_ in got] == [p for p in positions(data) if p < at]


def test_crc_of_a_batch_larger_than_the_buffer_across_chunks(tmp_path: Path) -> None:
    data = assorted_segment(40)
    at = containing(data, 3 * CHUNK)
    batch_size = positions(data)[positions(data).index(at) + 1] - at
    assert at < 3 * CHUNK - 100 and batch_size > CHUNK  # streamed through the buffer
    buf = bytearray(data)
    buf[3 * CHUNK] ^= 0x10  # in the fourth chunk: the CRC spans three fills
    path = write(tmp_path, bytes(buf))
    _, error = both(lambda: iter_batches(path, buffer_size=CHUNK))
    assert error is not None and error[0] is CorruptRecordError and error[2] == at
    assert "CRC mismatch" in error[1]


def test_file_cut_anywhere(tmp_path: Path) -> None:
    data = assorted_segment(9)
    rng = random.Random(3)
    cuts = [p + d for p in rng.sample(positions(data)[6:], 10) for d in (0, 1, 20, 61, 70)]
    for cut in cuts:
        path = write(tmp_path, data[:cut])
        got, error = both(
            lambda path=path: iter_batches(path, buffer_size=CHUNK),
            expect_ahead=cut >= reader.READ_AHEAD_MIN_CHUNKS * CHUNK,
        )
        ends = [p for p in positions(data) if p < cut]
        if cut in positions(data):
            assert error is None and [p for p, _ in got] == ends
        else:
            assert error is not None and error[2] == ends[-1], (cut, error)


@given(
    sizes=st.lists(
        st.one_of(st.just(61), st.integers(72, 3 * 1024), st.integers(3 * 1024, 9 * 1024)),
        min_size=1,
        max_size=30,
    ),
    buffer_size=st.integers(256, 4096),
    first=st.integers(0, 29),
    flip=st.one_of(st.none(), st.integers(0, 1 << 20)),
    deep=st.booleans(),
)
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_read_ahead_is_invisible(
    tmp_path: Path,
    sizes: list[int],
    buffer_size: int,
    first: int,
    flip: int | None,
    deep: bool,
) -> None:
    """Any layout, chunk size, start and (maybe) one flipped byte: the same outcome both ways."""
    clean = b"".join(batch_of_size(s, i) for i, s in enumerate(sizes))
    buf = bytearray(clean)
    if flip is not None:
        buf[flip % len(buf)] ^= 0x5A
    data = bytes(buf)
    path = write(tmp_path, data)
    starts = positions(clean)
    start = starts[first % len(starts)]
    ahead = len(data) - start >= reader.READ_AHEAD_MIN_CHUNKS * buffer_size
    scan = iter_batches_with_records if deep else iter_batches
    got = both(lambda: scan(path, buffer_size=buffer_size, start=start), expect_ahead=ahead)
    from_buffer = outcome(scan(data, start=start))
    assert got[0] == from_buffer[0]
    assert (got[1] is None) == (from_buffer[1] is None)
    if got[1] is not None and from_buffer[1] is not None:
        assert got[1][0] is from_buffer[1][0] and got[1][2] == from_buffer[1][2]


# --- the thread's life, the file's end ----------------------------------------------------------


def test_early_close_joins_the_thread(tmp_path: Path) -> None:
    data = assorted_segment(1)
    path = write(tmp_path, data)
    before = read_ahead_threads()
    it = iter_batches(path, buffer_size=CHUNK)
    next(it)
    mine = read_ahead_threads() - before
    assert len(mine) == 1
    it.close()
    assert not any(t.is_alive() for t in mine)
    os.truncate(path, 0)
    path.unlink()

    path = write(tmp_path, data)
    for n, _ in enumerate(iter_batches(path, buffer_size=CHUNK)):
        if n == 3:
            assert read_ahead_threads() - before
            break
    assert not read_ahead_threads() - before
    path.unlink()

    path = write(tmp_path, data)
    with pytest.raises(ZeroDivisionError):
        for _ in iter_batches_with_records(path, buffer_size=CHUNK):
            1 / 0  # noqa: B018
    assert not read_ahead_threads() - before
    path.unlink()


def test_caller_closing_its_file_first(tmp_path: Path) -> None:
    """The scan reads through its own duplicate of the fd: closing the caller's file object
    early leaves no read on a closed (or reused) fd, and the scan's close releases everything."""
    data = assorted_segment(2)
    path = write(tmp_path, data)
    before = read_ahead_threads()
    fd_dir = "/proc/self/fd"
    fds = len(os.listdir(fd_dir)) if os.path.isdir(fd_dir) else None
    with open(path, "rb") as f:
        it = iter_batches(f, buffer_size=CHUNK)
        first = next(it)
    assert first == (0, next(iter_batches(data))[1])
    it.close()
    assert not read_ahead_threads() - before
    if fds is not None:
        assert len(os.listdir(fd_dir)) == fds
    path.unlink()


def test_a_growing_file_is_read_up_to_its_size_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = assorted_segment(4)
    path = write(tmp_path, data)
    reads: list[tuple[int, int]] = []
    preadv = os.preadv

    def spy(fd: int, buffers: list[memoryview], offset: int, *args: int) -> int:
        n = preadv(fd, buffers, offset, *args)
        reads.append((offset, offset + n))
        return n

    monkeypatch.setattr(os, "preadv", spy)
    with strategy(True) as counting:
        it = iter_batches(path, buffer_size=CHUNK)
        got = [next(it)]
        with open(path, "ab") as f:
            f.write(assorted_segment(0))
        got += list(it)
        assert counting.created == 1
    assert [p for p, _ in got] == positions(data)
    assert reads and max(stop for _, stop in reads) == len(data)

    reads.clear()
    cut = positions(data)[25] + 10
    with strategy(True) as counting:
        with pytest.raises(CorruptRecordError, match="truncated record batch"):
            list(iter_batches(path, buffer_size=CHUNK, end=cut))
        assert counting.created == 1
    assert max(stop for _, stop in reads) <= cut


def test_a_read_error_is_raised_and_stops_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, assorted_segment(6))
    calls = 0
    preadv = os.preadv

    def failing(fd: int, buffers: list[memoryview], offset: int, *args: int) -> int:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise OSError(errno.EIO, "I/O error")
        return preadv(fd, buffers, offset, *args)

    monkeypatch.setattr(os, "preadv", failing)
    before = read_ahead_threads()
    with pytest.raises(OSError, match="I/O error") as e:
        list(iter_batches(path, buffer_size=CHUNK))
    assert e.value.errno == errno.EIO
    assert not read_ahead_threads() - before


def test_a_file_shrinking_under_the_read_ahead(tmp_path: Path) -> None:
    data = assorted_segment(8)
    path = write(tmp_path, data)
    before = read_ahead_threads()
    it = iter_batches(path, buffer_size=CHUNK)
    got = [next(it)]
    os.truncate(path, 6000)
    with pytest.raises(CorruptRecordError, match="file ends early") as e:
        for item in it:
            got.append(item)
    assert not read_ahead_threads() - before
    # what was read before the cut is still right; the error is at the first batch past it
    assert [p for p, _ in got] == positions(data)[: len(got)]
    assert e.value.position == got_end(got, 0)
    assert e.value.position is not None and e.value.position <= 2 * CHUNK


def test_nothing_is_spliced_after_a_short_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of the third chunk that stops early (the file was cut) ends the data there, even if
    the file has grown back by the time the fourth chunk is read: bytes from further on must not
    be appended as if they followed."""
    data = assorted_segment(11)
    path = write(tmp_path, data)
    cut = 2 * CHUNK + 1000
    preadv = os.preadv

    def cut_once(fd: int, buffers: list[memoryview], offset: int, *args: int) -> int:
        if offset == 2 * CHUNK:  # the third chunk: its first 1000 bytes, then "end of file"
            return preadv(fd, [buffers[0][:1000]], offset)
        if offset == cut:
            return 0
        return preadv(fd, buffers, offset, *args)

    monkeypatch.setattr(os, "preadv", cut_once)
    with strategy(True) as counting:
        got, error = outcome(iter_batches(path, buffer_size=CHUNK))
        assert counting.created == 1
    ends = [*positions(data)[1:], len(data)]
    complete = [p for p, q in zip(positions(data), ends, strict=True) if q <= cut]
    assert [p for p, _ in got] == complete
    assert error is not None and error[0] is CorruptRecordError
    assert "file ends early" in error[1] and error[2] == got_end(got, 0)
