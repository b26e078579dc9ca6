"""Shallow and deep iteration over segment files and buffers; every bad input is typed."""

from __future__ import annotations

import io
import os
import struct
from pathlib import Path

import pytest

from tierlog.log.batch import (
    RECORD_BATCH_OVERHEAD,
    ControlRecordType,
    UnsupportedRecordFormatError,
    build_batch,
    build_control_batch,
    compute_crc,
)
from tierlog.log.compression import CompressionType, compress
from tierlog.log.reader import iter_batches, iter_batches_with_records, iter_records
from tierlog.log.record import Record
from tierlog.spi import CorruptRecordError, InvalidArgumentError


def make_segment(batches: int = 12, per_batch: int = 5) -> tuple[bytes, list[Record]]:
    """A segment cycling through every codec, with a control batch in the middle."""
    parts = []
    records: list[Record] = []
    offset = 0
    for i in range(batches):
        if i == batches // 2:
            parts.append(
                build_control_batch(
                    ControlRecordType.COMMIT,
                    3,
                    base_offset=offset,
                    timestamp=9,
                    producer_id=4,
                    producer_epoch=0,
                )
            )
            records.append(Record(offset, 9, b"\0\0\0\1", b"\0\0\0\0\0\3"))
            offset += 1
            continue
        recs = [
            Record(offset + j, 1000 + j, b"k%d" % (offset + j), os.urandom(30) * (j + 1))
            for j in range(per_batch)
        ]
        parts.append(
            build_batch(recs, base_offset=offset, compression=list(CompressionType)[i % 5])
        )
        records.extend(recs)
        offset += per_batch
    return b"".join(parts), records


def positions(segment: bytes) -> list[int]:
    pos, out = 0, []
    while pos < len(segment):
        out.append(pos)
        pos += 12 + struct.unpack_from(">i", segment, pos + 8)[0]
    return out


@pytest.fixture(scope="module")
def segment() -> tuple[bytes, list[Record]]:
    return make_segment()


def write(tmp_path: Path, data: bytes, name: str = "00000000000000000000.log") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("buffer_size", [61, 100, 1000, 1 << 20])
def test_file_and_buffer_give_the_same_batches(
    tmp_path: Path, segment: tuple[bytes, list[Record]], buffer_size: int
) -> None:
    data, records = segment
    path = write(tmp_path, data)
    from_file = list(iter_batches(path, buffer_size=buffer_size))
    from_buffer = list(iter_batches(data))
    assert from_file == from_buffer
    assert [p for p, _ in from_file] == positions(data)
    deep = list(iter_batches_with_records(path, buffer_size=buffer_size))
    assert [h for _, h, _ in deep] == [h for _, h in from_buffer]
    got = [r for _, _, rs in deep for r in rs]
    assert [r[:5] for r in got] == [r[:5] for r in records]
    assert [r[:5] for r in iter_records(str(path), buffer_size=buffer_size)] == [
        r[:5] for r in records
    ]
    assert [r[:5] for r in iter_records(bytearray(data))] == [r[:5] for r in records]


def test_file_objects_with_and_without_fileno(
    tmp_path: Path, segment: tuple[bytes, list[Record]]
) -> None:
    data, records = segment
    path = write(tmp_path, data)
    with open(path, "rb") as f:
        assert len(list(iter_batches(f))) == len(positions(data))
    assert len(list(iter_records(io.BytesIO(data), buffer_size=128))) == len(records)

    class ReadOnly(io.RawIOBase):  # no readinto, no fileno: read/seek/tell only
        def __init__(self, raw: bytes):
            self._b = io.BytesIO(raw)

        def read(self, n: int = -1) -> bytes:
            return self._b.read(n)

        def seek(self, pos: int, whence: int = 0) -> int:
            return self._b.seek(pos, whence)

        def tell(self) -> int:
            return self._b.tell()

    reader = ReadOnly(data)
    reader.readinto = None  # type: ignore[assignment,method-assign]
    assert len(list(iter_records(reader))) == len(records)  # type: ignore[arg-type]


def test_start_and_end(tmp_path: Path, segment: tuple[bytes, list[Record]]) -> None:
    data, _ = segment
    starts = positions(data)
    path = write(tmp_path, data)
    got = [p for p, _ in iter_batches(path, start=starts[3], end=starts[6])]
    assert got == starts[3:6]
    assert [p for p, _ in iter_batches(data, start=starts[3], end=starts[6])] == starts[3:6]
    with pytest.raises(InvalidArgumentError):
        iter_batches(path, start=-1)
    with pytest.raises(InvalidArgumentError):
        iter_batches(path, buffer_size=10)


def test_empty_file(tmp_path: Path) -> None:
    assert list(iter_batches(write(tmp_path, b""))) == []
    assert list(iter_records(b"")) == []


def test_batch_larger_than_the_buffer_streams(tmp_path: Path) -> None:
    big = [Record(i, 0, None, os.urandom(5000)) for i in range(40)]
    moved = [r._replace(offset=r.offset + 40) for r in big]
    data = build_batch(big) + build_batch(moved, base_offset=40, compression="zstd")
    path = write(tmp_path, data)
    for verify in (True, False):
        heads = list(iter_batches(path, buffer_size=4096, verify_crc=verify))
        assert [p for p, _ in heads] == positions(data)
    records = list(iter_records(path, buffer_size=4096))
    assert [r.value for r in records] == [r.value for r in big] * 2
    corrupt_tail = bytearray(data)
    corrupt_tail[150_000] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC mismatch") as e:
        list(iter_batches(write(tmp_path, bytes(corrupt_tail), "c.log"), buffer_size=4096))
    assert e.value.position == 0


# --- bad input: each raises CorruptRecordError naming the file and the byte position ---------


def expect_corrupt(
    tmp_path: Path, data: bytes, position: int, match: str, *, deep: bool = False
) -> None:
    path = write(tmp_path, data, "bad.log")
    for buffer_size in (64, 1 << 20):
        for source in (path, data):
            it = (
                iter_batches_with_records(source, buffer_size=buffer_size)
                if deep
                else iter_batches(source, buffer_size=buffer_size)
            )
            with pytest.raises(CorruptRecordError, match=match) as e:
                list(it)
            assert e.value.position == position, (source, buffer_size, str(e.value))
            if source is path:
                assert e.value.path == str(path)
                assert f"at position {position} of {path}" in str(e.value)


def one_batch(records: int = 3, compression: str = "none") -> bytes:
    return build_batch(
        [Record(i, i, b"key", b"value %d" % i, (("h", b"v"),)) for i in range(records)],
        compression=compression,
    )


def recrc(buf: bytearray, pos: int = 0) -> bytes:
    struct.pack_into(">I", buf, pos + 17, compute_crc(buf, pos))
    return bytes(buf)


def test_truncated_header(tmp_path: Path) -> None:
    first = one_batch()
    expect_corrupt(tmp_path, first + one_batch()[:10], len(first), "truncated record batch header")
    expect_corrupt(tmp_path, first + one_batch()[:40], len(first), r"header \(40 bytes, 61")


def test_truncated_batch(tmp_path: Path) -> None:
    first = one_batch()
    data = first + one_batch()[:-1]
    expect_corrupt(tmp_path, data, len(first), "truncated record batch: it claims")


@pytest.mark.parametrize("length", [-1, 0, 48, 2**31 - 1])
def test_impossible_length(tmp_path: Path, length: int) -> None:
    buf = bytearray(one_batch())
    struct.pack_into(">i", buf, 8, length)
    match = "smaller than the minimum" if length < 49 else "truncated record batch"
    expect_corrupt(tmp_path, bytes(buf), 0, match)


def test_huge_length_allocates_nothing(tmp_path: Path) -> None:
    buf = bytearray(one_batch())
    struct.pack_into(">i", buf, 8, 2**31 - 1)  # would be a 2 GiB allocation
    path = write(tmp_path, bytes(buf))
    with pytest.raises(CorruptRecordError, match="claims 2147483659 bytes but only"):
        list(iter_batches_with_records(path))


@pytest.mark.parametrize("magic", [3, 0x7F, 0xFF])
def test_bad_magic(tmp_path: Path, magic: int) -> None:
    buf = bytearray(one_batch() * 2)
    at = len(buf) // 2
    buf[at + 16] = magic
    expect_corrupt(tmp_path, bytes(buf), at, "invalid magic byte")


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_magic_is_detected(tmp_path: Path, magic: int) -> None:
    # A magic-1 message set entry: offset, size, crc, magic, attributes, timestamp, key, value.
    body = bytes([magic, 0]) + (b"\0" * 8 if magic else b"") + b"\xff\xff\xff\xff" + b"\0\0\0\1x"
    legacy = (7).to_bytes(8, "big") + (len(body) + 4).to_bytes(4, "big") + b"\0\0\0\0" + body
    path = write(tmp_path, one_batch() + legacy)
    with pytest.raises(UnsupportedRecordFormatError) as e:
        list(iter_batches(path))
    assert e.value.magic == magic and e.value.position == len(one_batch())
    assert str(e.value).startswith(
        f"magic {magic} (legacy message format) at position {len(one_batch())} of {path} "
        "is not supported"
    )
    assert not isinstance(e.value, CorruptRecordError)


def test_crc_mismatch(tmp_path: Path) -> None:
    first = one_batch()
    buf = bytearray(first + one_batch())
    buf[len(first) + 70] ^= 0x40
    expect_corrupt(tmp_path, bytes(buf), len(first), "CRC mismatch")
    # the leader epoch and the base offset are outside the CRC: no mismatch
    buf = bytearray(first)
    buf[12] ^= 0xFF
    buf[3] ^= 0xFF
    assert len(list(iter_batches(bytes(buf)))) == 1


def test_records_count_too_high_or_too_low(tmp_path: Path) -> None:
    buf = bytearray(one_batch(3))
    struct.pack_into(">i", buf, 57, 4)
    # reported where the missing fourth record should start: the end of the batch
    expect_corrupt(
        tmp_path,
        recrc(buf),
        len(buf),
        "declares 4 records but its records block holds 3",
        deep=True,
    )
    struct.pack_into(">i", buf, 57, 2)
    expect_corrupt(
        tmp_path,
        recrc(buf),
        len(buf) - (len(buf) - RECORD_BATCH_OVERHEAD) // 3,
        "bytes remain after the 2 records",
        deep=True,
    )
    struct.pack_into(">i", buf, 57, -1)
    expect_corrupt(tmp_path, recrc(buf), 0, "invalid record count -1", deep=True)
    struct.pack_into(">i", buf, 57, 2**31 - 1)
    expect_corrupt(tmp_path, recrc(buf), 0, "cannot fit", deep=True)


def test_compressed_count_mismatch(tmp_path: Path) -> None:
    buf = bytearray(one_batch(3, "gzip"))
    struct.pack_into(">i", buf, 57, 4)
    expect_corrupt(tmp_path, recrc(buf), 0, "decompressed records block", deep=True)


def test_varint_overflow(tmp_path: Path) -> None:
    buf = bytearray(one_batch(1))
    buf[RECORD_BATCH_OVERHEAD + 2 : RECORD_BATCH_OVERHEAD + 12] = b"\xff" * 10  # timestamp delta
    expect_corrupt(
        tmp_path, recrc(buf), RECORD_BATCH_OVERHEAD + 2, "varlong is too long", deep=True
    )


def test_compressed_payload_that_does_not_decompress(tmp_path: Path) -> None:
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        buf = bytearray(one_batch(3, codec))
        buf[RECORD_BATCH_OVERHEAD + 6 :] = b"\xaa" * (len(buf) - RECORD_BATCH_OVERHEAD - 6)
        expect_corrupt(tmp_path, recrc(buf), 0, codec, deep=True)


def test_record_running_past_its_batch(tmp_path: Path) -> None:
    buf = bytearray(one_batch(1))
    buf[RECORD_BATCH_OVERHEAD] = 0x7E  # record length 63, the block is shorter
    expect_corrupt(
        tmp_path, recrc(buf), RECORD_BATCH_OVERHEAD, "record length 63 is impossible", deep=True
    )
    buf = bytearray(one_batch(1))
    buf[RECORD_BATCH_OVERHEAD + 4] = 0x7E  # key length 63 runs past the record
    expect_corrupt(tmp_path, recrc(buf), RECORD_BATCH_OVERHEAD, "record", deep=True)


def test_record_headers(tmp_path: Path) -> None:
    buf = bytearray(one_batch(1))
    at = bytes(buf).index(b"\x02\x02h\x02v")  # header count 1, key "h", value "v"
    buf[at] = 0x01  # -1 headers
    expect_corrupt(tmp_path, recrc(buf), at, "invalid number of record headers -1", deep=True)
    buf[at : at + 2] = b"\x02\x01"  # key length -1
    expect_corrupt(tmp_path, recrc(buf), at + 1, "negative header key size", deep=True)


def test_file_shrinking_while_read(tmp_path: Path, segment: tuple[bytes, list[Record]]) -> None:
    data, _ = segment
    path = write(tmp_path, data)
    it = iter_batches(path, buffer_size=64)
    next(it)
    os.truncate(path, 100)
    with pytest.raises(CorruptRecordError, match="file ends early"):
        list(it)


def test_reading_never_passes_the_end(tmp_path: Path, segment: tuple[bytes, list[Record]]) -> None:
    data, _ = segment
    reads: list[tuple[int, int]] = []

    class Spy(io.BytesIO):
        def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
            start = self.tell()
            n = super().readinto(b)
            reads.append((start, start + n))
            return n

    cut = positions(data)[5]
    spy = Spy(data + b"beyond the end given")
    assert len(list(iter_batches(spy, end=cut, buffer_size=100))) == 5
    assert max(end for _, end in reads) <= cut


def test_compressed_blocks_are_bounded() -> None:
    bomb = build_batch([Record(0, 0, None, bytes(1 << 20))], compression="zstd")
    assert len(bomb) < 200
    with pytest.raises(CorruptRecordError, match="more than 1000 bytes"):
        list(iter_records(bomb, max_decompressed_size=1000))
    assert len(list(iter_records(bomb))) == 1


def test_empty_batch_payload_is_not_decoded() -> None:
    # Kafka's iterator returns nothing for a batch whose count is 0, whatever its block holds.
    batch = bytearray(build_batch([], compression="gzip") + compress(CompressionType.LZ4, b"x"))
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    assert list(iter_records(recrc(batch))) == []


@pytest.mark.parametrize("tail", [12, 30, 100])
def test_zero_filled_tail_is_corruption_not_legacy(tmp_path: Path, tail: int) -> None:
    """A preallocated or torn tail of zeros has Length 0: Kafka checks the size before the magic,
    so recovery can truncate it instead of refusing the log as legacy."""
    from tierlog.log.batch import build_batch
    from tierlog.log.record import Record
    from tierlog.spi import CorruptRecordError

    batch = build_batch([Record(0, 1, b"k", b"v")], base_offset=0)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(batch + bytes(tail))
    with pytest.raises(CorruptRecordError) as info:
        list(iter_batches(path))
    assert info.value.position == len(batch)
