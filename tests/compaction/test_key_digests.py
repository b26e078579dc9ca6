"""Pass-1 key digests: the C walk, the pure twin and ``decode_records`` + ``hashlib`` agree.

``tierlog.log._speedups.key_digests`` must give the same offsets, digests and record count as
``key_digests_pure`` on every valid block and raise the same ``BlockError`` (message and offset)
on every corrupt one; ``batch_key_digests`` must select what ``decode_records`` decodes and fail
with the ``CorruptRecordError`` it raises. The extension is imported directly, so these tests run
whichever path ``TIERLOG_NO_SPEEDUPS`` selects for the rest of the suite, and they fail rather
than skip when it is not built (the test setup builds it with ``TIERLOG_REQUIRE_SPEEDUPS=1``).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib
import os
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.compaction import key_digests as kd
from tierlog.compaction.key_digests import KeyDigests, batch_key_digests, key_digests_pure
from tierlog.log._varint import INT32_MAX, INT64_MAX, INT64_MIN, encode_varint
from tierlog.log.batch import (
    HEADER,
    RECORD_BATCH_OVERHEAD,
    RecordBatch,
    build_batch,
    decode_records,
    read_batch_header,
)
from tierlog.log.compression import CompressionType, compress
from tierlog.log.record import BlockError, Record, decode_block_pure, encode_records
from tierlog.spi import CorruptRecordError

try:
    _speedups = importlib.import_module("tierlog.log._speedups")
except ImportError as e:  # pragma: no cover - the failure explains itself
    raise ImportError(
        "the C accelerator tierlog.log._speedups is not built: reinstall tierlog with a C "
        "compiler (pip install -e .; TIERLOG_REQUIRE_SPEEDUPS=1 makes a failed build an error)"
    ) from e

# Under TIERLOG_NO_SPEEDUPS=1, record.py did not configure the module; configuring is idempotent.
_speedups.configure(Record, BlockError, decode_block_pure)
if not hasattr(_speedups, "key_digests"):  # pragma: no cover - a build older than the source
    raise ImportError("tierlog.log._speedups has no key_digests: rebuild it (pip install -e .)")
key_digests_c: Callable[..., tuple[bytes, bytes, int]] = _speedups.key_digests

PATH = "/logs/t-0/00000000000000000000.log"
POSITION = 4096
MD5_EDGES = [0, 1, 55, 56, 63, 64, 65, 119, 120, 127, 128, 1000]
"""Key lengths around MD5's padding: one block up to 55 bytes, two from 56, and so on."""


def md5(key: bytes) -> bytes:
    return hashlib.md5(key, usedforsecurity=False).digest()


def expected(header: RecordBatch, data: bytes, end_offset: int) -> KeyDigests:
    """What pass 1 needs, from the record decoder and hashlib (independent of both walks)."""
    records = decode_records(header, memoryview(data)[RECORD_BATCH_OVERHEAD:])
    chosen = [r for r in records if r.key is not None and r.offset < end_offset]
    return KeyDigests(
        b"".join(struct.pack("<q", r.offset) for r in chosen),
        b"".join(md5(r.key) for r in chosen if r.key is not None),
        len(records),
    )


@contextlib.contextmanager
def pure_path() -> Iterator[None]:
    """``batch_key_digests`` with the pure twin, whatever the accelerator."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kd, "key_digests", key_digests_pure)
        yield


def both_paths(header: RecordBatch, data: bytes, **kwargs: Any) -> Any:
    """The outcome of ``batch_key_digests`` on the C path, asserted equal on the pure one."""

    def run() -> Any:
        try:
            return batch_key_digests(header, data, **kwargs)
        except CorruptRecordError as e:
            return ("error", str(e), e.path, e.position)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kd, "key_digests", key_digests_c)
        fast = run()
    with pure_path():
        assert run() == fast
    return fast


def outcome(function: Callable[..., Any], *args: Any) -> Any:
    try:
        return function(*args)
    except BlockError as e:
        return ("error", type(e), str(e), e.offset)


def assert_agree(*args: Any) -> Any:
    """The C walk and the pure twin give the same result or the same ``BlockError``."""
    result = outcome(key_digests_pure, *args)
    assert outcome(key_digests_c, *args) == result
    return result


def raw_batch(
    block: bytes, count: int, *, base_offset: int = 100, codec: int = 0, compressed: bool = False
) -> tuple[RecordBatch, bytes]:
    """A batch around an arbitrary records block (no CRC: nothing here checks it), compressed
    with ``codec`` unless it is an unknown one or the block is ``compressed`` already."""
    known = 0 < codec <= CompressionType.ZSTD and not compressed
    payload = compress(CompressionType(codec), block) if known else block
    data = (
        HEADER.pack(
            base_offset,
            RECORD_BATCH_OVERHEAD - 12 + len(payload),
            -1,
            2,
            0,
            codec,
            max(count - 1, 0),
            0,
            0,
            -1,
            -1,
            -1,
            count,
        )
        + payload
    )
    return read_batch_header(data), data


# --- MD5 -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "size", [*MD5_EDGES, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, (1 << 20) + 56]
)
def test_digest_is_md5_at_the_padding_edges(size: int) -> None:
    key = bytes((i * 131 + size) & 0xFF for i in range(size))
    block, count, _, _ = encode_records([Record(7, 0, key, b"v")], 7, 0)
    offsets, digests, decoded = key_digests_c(block, count, 7, 8)
    assert (offsets, digests, decoded) == (struct.pack("<q", 7), md5(key), 1)
    assert key_digests_pure(block, count, 7, 8) == (offsets, digests, decoded)


def test_digest_is_md5_of_every_byte_value() -> None:
    keys = [bytes([b]) * n for b in (0x00, 0x80, 0xFF) for n in (1, 3, 60, 64, 200)]
    records = [Record(i, 0, key, None) for i, key in enumerate(keys)]
    block, count, _, _ = encode_records(records, 0, 0)
    _, digests, _ = key_digests_c(block, count, 0, len(keys))
    assert digests == b"".join(map(md5, keys))


def test_digests_of_keys_of_every_length_up_to_two_blocks() -> None:
    # Short keys are hashed several at a time, long ones alone: mixed, every position counts.
    for first in range(6):
        keys = [bytes(range(first, first + n)) for n in range(first, 131)]
        records = [Record(i, 0, key, None) for i, key in enumerate(keys)]
        block, count, _, _ = encode_records(records, 0, 0)
        for end in (len(keys), len(keys) - 1, 3):
            offsets, digests, decoded = key_digests_c(block, count, 0, end)
            assert decoded == len(keys)
            assert offsets == struct.pack(f"<{end}q", *range(end))
            assert digests == b"".join(map(md5, keys[:end]))


# --- generated batches -----------------------------------------------------------------------

keys = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(max_size=40),
    st.sampled_from(MD5_EDGES).map(lambda n: b"k" * n),
    st.builds(lambda chunk, n: chunk * n, st.binary(min_size=1, max_size=8), st.integers(1, 3000)),
)
values = st.one_of(st.none(), st.just(b""), st.binary(max_size=100))
headers = st.lists(
    st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=20))), max_size=3
).map(tuple)
codecs = st.sampled_from(list(CompressionType))


@st.composite
def batches(draw: st.DrawFn) -> tuple[RecordBatch, bytes]:
    """A batch from ``build_batch``: any codec, null/empty/long keys, headers, offset gaps."""
    base_offset = draw(st.integers(0, 1 << 50))
    offset = base_offset
    records = []
    for i in range(draw(st.integers(0, 12))):
        if i:
            offset += draw(st.one_of(st.just(1), st.integers(1, 1 << 20)))
        records.append(Record(offset, 1000 + i, draw(keys), draw(values), draw(headers)))
    data = build_batch(records, base_offset=base_offset, compression=draw(codecs))
    return read_batch_header(data), data


@given(batch=batches(), cut=st.integers(-2, 14), data=st.data())
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_agree_with_decode_records_on_valid_batches(
    batch: tuple[RecordBatch, bytes], cut: int, data: st.DataObject
) -> None:
    header, raw = batch
    # The end offset falls before, inside or after the batch (cutting it in the middle).
    records = decode_records(header, memoryview(raw)[RECORD_BATCH_OVERHEAD:])
    offsets = [r.offset for r in records] or [header.base_offset]
    end_offset = data.draw(
        st.one_of(
            st.sampled_from(offsets).map(lambda o: o + (cut % 3) - 1),
            st.just(header.base_offset + cut),
        )
    )
    result = both_paths(header, raw, end_offset=end_offset, path=PATH, position=POSITION)
    assert result == expected(header, raw, end_offset)
    assert len(result.offsets) * 2 == len(result.digests)


def test_keys_null_empty_and_past_the_end() -> None:
    records = [
        Record(10, 0, None, b"keyless"),
        Record(11, 0, b"", b"empty key"),
        Record(12, 0, b"a", None, (("h", b"x"), ("n", None))),
        Record(14, 0, b"b", b"v"),
        Record(15, 0, b"c", b"past the end"),
    ]
    for codec in CompressionType:
        data = build_batch(records, base_offset=10, compression=codec)
        result = both_paths(read_batch_header(data), data, end_offset=15)
        assert result == KeyDigests(
            struct.pack("<3q", 11, 12, 14), md5(b"") + md5(b"a") + md5(b"b"), 5
        )


def test_empty_batch_yields_nothing() -> None:
    data = build_batch([], base_offset=5)
    assert both_paths(read_batch_header(data), data, end_offset=100) == KeyDigests(b"", b"", 0)
    # Its block is not read: garbage after a zero count is not looked at, as in decode_records.
    header, raw = raw_batch(b"\xff\xff", 0)
    assert both_paths(header, raw, end_offset=100) == KeyDigests(b"", b"", 0)
    assert decode_records(header, memoryview(raw)[RECORD_BATCH_OVERHEAD:]) == []


def test_end_offsets_beyond_int64() -> None:
    block, count, _, _ = encode_records([Record(0, 0, b"a", None), Record(1, 0, b"b", None)], 0, 0)
    everything = (struct.pack("<2q", 0, 1), md5(b"a") + md5(b"b"), 2)
    assert assert_agree(block, count, 0, 1 << 70) == everything
    assert assert_agree(block, count, 0, INT64_MAX) == everything
    assert assert_agree(block, count, 0, -(1 << 70)) == (b"", b"", 2)
    assert assert_agree(block, count, 0, 1) == (struct.pack("<q", 0), md5(b"a"), 2)


def test_offsets_at_the_int64_limits() -> None:
    block, count, _, _ = encode_records(
        [Record(0, 0, b"a", None), Record(INT32_MAX, 0, b"b", None)], 0, 0
    )
    top = INT64_MAX - INT32_MAX
    # The last offset that fits is kept; past it, only an end offset beyond int64 selects one.
    assert assert_agree(block, count, top, 1 << 64) == (
        struct.pack("<2q", top, INT64_MAX),
        md5(b"a") + md5(b"b"),
        2,
    )
    assert assert_agree(block, count, top + 1, INT64_MAX) == (
        struct.pack("<q", top + 1),
        md5(b"a"),
        2,
    )
    result = assert_agree(block, count, top + 1, 1 << 64)
    assert result[:3] == (
        "error",
        BlockError,
        f"record 1 has the offset {1 << 63}, beyond the int64 range",
    )
    # A negative offset delta below the smallest base offset (a corrupt batch).
    below = raw_record(body(offset=encode_varint(-1), key=encode_varint(1) + b"k"))
    result = assert_agree(below, 1, INT64_MIN, 0)
    assert result == (
        "error",
        BlockError,
        f"record 0 has the offset {INT64_MIN - 1}, beyond the int64 range",
        0,
    )
    assert assert_agree(below, 1, INT64_MIN, -(1 << 70)) == (b"", b"", 1)
    # A record without a key never needs its offset packed.
    keyless = raw_record(body(offset=encode_varint(-1)))
    assert assert_agree(keyless, 1, INT64_MIN, 0) == (b"", b"", 1)


def test_buffers_of_every_kind() -> None:
    block, count, _, _ = encode_records([Record(3, 0, b"key", b"v", (("h", b"x"),))], 3, 0)
    want = (struct.pack("<q", 3), md5(b"key"), 1)
    assert key_digests_c(block, count, 3, 4) == want
    assert key_digests_c(bytearray(block), count, 3, 4) == want
    assert key_digests_c(memoryview(b"xx" + block)[2:], count, 3, 4) == want
    assert key_digests_pure(memoryview(block), count, 3, 4) == want


def test_bad_arguments_are_type_errors() -> None:
    block, count, _, _ = encode_records([Record(0, 0, b"k", None)], 0, 0)
    with pytest.raises(TypeError, match="4 arguments"):
        key_digests_c(block, count, 0)
    with pytest.raises(TypeError, match="must be ints"):
        key_digests_c(block, count, 0, 1.5)
    with pytest.raises(TypeError):
        key_digests_c("not bytes", count, 0, 1)
    with pytest.raises(OverflowError):
        key_digests_c(block, count, 1 << 64, 1)
    with pytest.raises(BufferError):
        key_digests_c(memoryview(bytes(16)).cast("B", (4, 4))[::2], count, 0, 1)


# --- corrupt blocks ----------------------------------------------------------------------------


def raw_record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


def body(
    *,
    ts: bytes = b"\x00",
    offset: bytes = b"\x00",
    key: bytes = b"\x01",
    value: bytes = b"\x01",
    headers: bytes = b"\x00",
) -> bytes:
    """A record body (attributes byte first) from already encoded fields."""
    return b"\x00" + ts + offset + key + value + headers


GOOD = raw_record(body(key=encode_varint(3) + b"abc", value=encode_varint(2) + b"xy"))
HEADER_FIELD = encode_varint(1) + b"h" + encode_varint(1) + b"v"

CORRUPT: list[tuple[str, bytes, int, str]] = [
    ("count too high", GOOD * 2 + bytes(14), 3, "record length 0 is impossible"),
    ("declares more", GOOD * 2, 3, "declares 3 records but its records block holds 2"),
    ("leftover bytes", GOOD * 2, 1, r"\d+ bytes remain after the 1 records"),
    ("fields too short", raw_record(body() + b"\x00"), 1, "record body is 7 bytes but"),
    ("truncated record", GOOD[:-1], 1, "record length"),
    ("varint runs past", GOOD + b"\x80\x80", 2, "varint runs past the end of its buffer"),
    ("over-long varint", b"\xff\xff\xff\xff\xff\x01" + bytes(20), 1, "varint is too long"),
    ("garbage varint", GOOD + b"\x80\x80\x80\x80\x80\x80", 2, "varint is too long"),
    ("length too small", raw_record(b"\x00" * 5) + bytes(2), 1, "record length 5 is impossible"),
    ("negative length", b"\x01" + bytes(10), 1, "record length -1 is impossible"),
    ("over-long varlong", raw_record(body(ts=b"\xff" * 10 + b"\x01")), 1, "varlong is too long"),
    (
        "varlong runs past",
        encode_varint(7) + b"\x00" + b"\xff" * 6,
        1,
        "varlong runs past the end of its buffer",
    ),
    (
        "key past the block",
        raw_record(body(key=encode_varint(40) + b"ab")),
        1,
        "record runs past the end",
    ),
    (
        "fields past the record",
        encode_varint(6) + body(key=encode_varint(3) + b"abc"),
        1,
        "record body is 6 bytes but fields take 9",
    ),
    (
        "value of a huge length",
        raw_record(body(value=encode_varint(INT32_MAX))),
        1,
        "record runs past the end",
    ),
    (
        "negative header count",
        raw_record(body(headers=encode_varint(-1) + b"\x00")),
        1,
        "invalid number of record headers -1",
    ),
    (
        "header count too large",
        raw_record(body(headers=encode_varint(9) + HEADER_FIELD)),
        1,
        "invalid number of record headers 9",
    ),
    (
        "negative header key size",
        raw_record(body(headers=encode_varint(1) + encode_varint(-1) + b"\x01")),
        1,
        "invalid negative header key size -1",
    ),
    (
        "header key past the record",
        raw_record(body(headers=encode_varint(1) + encode_varint(5) + b"h\x01")),
        1,
        "header key of 5 bytes runs past its record",
    ),
    (
        "header value past the block",
        raw_record(body(headers=encode_varint(1) + b"\x02h" + encode_varint(50))),
        1,
        "record body is",
    ),
    (
        "header count truncated",
        encode_varint(6) + body(headers=b"\x80"),
        1,
        "varint runs past the end of its buffer",
    ),
    (
        "second header missing",
        raw_record(body(headers=encode_varint(2) + HEADER_FIELD)) + b"\x00",
        1,
        "record",
    ),
    ("over-long header key size", raw_record(body(headers=b"\x02" + b"\xff" * 6)), 1, "too long"),
]


@pytest.mark.parametrize(
    ("name", "block", "count", "message"), CORRUPT, ids=[c[0] for c in CORRUPT]
)
def test_corrupt_blocks_raise_what_decode_block_raises(
    name: str, block: bytes, count: int, message: str
) -> None:
    result = assert_agree(block, count, 100, 1 << 40)
    assert result[0] == "error", name
    with pytest.raises(BlockError, match=message):
        key_digests_c(block, count, 100, 1 << 40)
    with pytest.raises(BlockError) as decoded:
        decode_block_pure(block, count, 100, 0, None)
    assert (str(decoded.value), decoded.value.offset) == result[2:]


@pytest.mark.parametrize("codec", list(CompressionType))
@pytest.mark.parametrize(
    ("name", "block", "count", "message"), CORRUPT, ids=[c[0] for c in CORRUPT]
)
def test_corrupt_batches_raise_what_decode_records_raises(
    codec: CompressionType, name: str, block: bytes, count: int, message: str
) -> None:
    header, data = raw_batch(block, count, codec=codec)
    result = both_paths(header, data, end_offset=1 << 40, path=PATH, position=POSITION)
    with pytest.raises(CorruptRecordError) as decoded:
        decode_records(
            header, memoryview(data)[RECORD_BATCH_OVERHEAD:], path=PATH, position=POSITION
        )
    assert result == ("error", str(decoded.value), PATH, decoded.value.position), name


def test_batch_level_errors() -> None:
    cases = [
        raw_batch(GOOD, -1),  # negative count
        raw_batch(GOOD, 2),  # more records than 7-byte minimums fit in the block
        raw_batch(GOOD, 1, codec=5),  # unknown codec id
        raw_batch(GOOD, 1, codec=CompressionType.GZIP, compressed=True),  # not a gzip stream
        raw_batch(GOOD, 1, codec=CompressionType.LZ4, compressed=True),  # not an lz4 frame
    ]
    for header, data in cases:
        result = both_paths(header, data, end_offset=10, path=PATH, position=POSITION)
        with pytest.raises(CorruptRecordError) as decoded:
            decode_records(
                header, memoryview(data)[RECORD_BATCH_OVERHEAD:], path=PATH, position=POSITION
            )
        assert result == ("error", str(decoded.value), PATH, POSITION)
        assert PATH in result[1]


def test_decompression_limit_is_enforced() -> None:
    data = build_batch([Record(0, 0, b"k", bytes(10_000))], compression=CompressionType.ZSTD)
    header = read_batch_header(data)
    result = both_paths(header, data, end_offset=1, path=PATH, max_decompressed_size=1000)
    assert result[0] == "error"
    with pytest.raises(CorruptRecordError) as decoded:
        decode_records(
            header, memoryview(data)[RECORD_BATCH_OVERHEAD:], path=PATH, max_decompressed_size=1000
        )
    assert result[1] == str(decoded.value)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[bytes, int]:
    """A valid block damaged: bytes changed, cut, inserted, with the count off or not."""
    header, raw = draw(batches())
    records = decode_records(header, memoryview(raw)[RECORD_BATCH_OVERHEAD:])
    block, count, _, _ = encode_records(records, header.base_offset, 0)
    data = bytearray(block)
    for _ in range(draw(st.integers(0, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["set", "cut", "insert", "truncate"]))
        byte = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0x81, 0xFF, 0xFE, 0x02]))
        if op == "set":
            data[at] = byte
        elif op == "cut":
            del data[at]
        elif op == "insert":
            data.insert(at, byte)
        else:
            del data[at:]
    count += draw(st.sampled_from([0, 0, 0, 1, -1, 5]))
    return bytes(data), count


@given(m=mutated(), end_offset=st.integers(-1, 1 << 51))
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_agree_on_mutated_blocks(m: tuple[bytes, int], end_offset: int) -> None:
    data, count = m
    assert_agree(data, count, 1 << 40, end_offset)


@given(data=st.binary(max_size=64), count=st.integers(-2, 12))
@settings(max_examples=300, deadline=None)
def test_agree_on_random_bytes(data: bytes, count: int) -> None:
    assert_agree(data, count, 0, 1 << 62)


def test_no_reference_leaks() -> None:
    """Walking, failing or not, leaves no objects behind (refcounts on every error path)."""
    cases: list[tuple[bytes, int, int, int]] = [(c[1], c[2], 100, 1 << 40) for c in CORRUPT]
    good, n, _, _ = encode_records(
        [Record(i, i, b"k" * i if i % 3 else None, b"v", (("h", b"x"),)) for i in range(20)], 0, 0
    )
    cases += [(good, n, 0, 10), (good, n, 0, 1 << 70), (good, n, INT64_MAX - 5, 1 << 70)]

    def run() -> None:
        for data, count, base, end in cases:
            with contextlib.suppress(BlockError):
                key_digests_c(data, count, base, end)

    for _ in range(200):
        run()
    gc.collect()
    before = sys.getallocatedblocks()
    for _ in range(2000):
        run()
    gc.collect()
    assert sys.getallocatedblocks() - before < 200


# --- which path is in use ----------------------------------------------------------------------


def test_key_digests_is_the_accelerator_unless_ruled_out() -> None:
    ruled_out = os.environ.get("TIERLOG_NO_SPEEDUPS", "") not in ("", "0")
    assert kd.KEY_DIGESTS_ACCELERATED is not ruled_out
    assert (kd.key_digests is key_digests_pure) is ruled_out


@pytest.mark.parametrize(("value", "accelerated"), [("1", False), ("0", True)])
def test_environment_selects_the_path(value: str, accelerated: bool) -> None:
    env = {**os.environ, "TIERLOG_NO_SPEEDUPS": value}
    code = "from tierlog.compaction import key_digests as k; print(k.KEY_DIGESTS_ACCELERATED)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == str(accelerated)
