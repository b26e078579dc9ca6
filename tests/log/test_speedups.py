"""The C accelerator of ``decode_block`` agrees with the pure-Python decoder on every input.

``tierlog.log._speedups.decode_block`` must give the same records (same types, same values, same
hash) and raise the same ``BlockError`` (message and offset) as ``record.decode_block_pure``,
on generated valid blocks and on corrupt ones. These tests import the extension directly, so they
run (and must pass) whichever decoder ``TIERLOG_NO_SPEEDUPS`` selects for the rest of the suite.
They fail rather than skip when the extension is not built: the test setup (``scripts/test``)
builds it with ``TIERLOG_REQUIRE_SPEEDUPS=1``.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.log import record
from tierlog.log._varint import INT32_MAX, encode_varint
from tierlog.log.record import (
    NO_TIMESTAMP,
    BlockError,
    Record,
    decode_block_pure,
    encode_records,
)

try:
    _speedups = importlib.import_module("tierlog.log._speedups")
except ImportError as e:  # pragma: no cover - the failure explains itself
    raise ImportError(
        "the C accelerator tierlog.log._speedups is not built: reinstall tierlog with a C "
        "compiler (pip install -e '.[test]'; TIERLOG_REQUIRE_SPEEDUPS=1 makes a failed build an "
        "error)"
    ) from e

# Under TIERLOG_NO_SPEEDUPS=1, record.py did not configure the module; configuring is idempotent.
_speedups.configure(Record, BlockError, decode_block_pure)
decode_block_c: Callable[..., list[Record]] = _speedups.decode_block

Outcome = tuple[Any, ...]


def outcome(decode: Callable[..., list[Record]], *args: Any, **kwargs: Any) -> Outcome:
    """What a decoder did, comparable between the two: records with types, or the error."""
    try:
        records = decode(*args, **kwargs)
    except Exception as e:  # BlockError, or what the pure decoder raises on odd arguments
        return ("error", type(e), str(e), getattr(e, "offset", None), e.__suppress_context__)
    described = []
    for r in records:
        assert type(r) is Record and len(r) == 7
        described.append(
            (
                tuple(r),
                tuple(map(type, r)),
                tuple(tuple(map(type, h)) for h in r.headers),
                _hash(r),
            )
        )
    return ("ok", type(records), described)


def _hash(r: Record) -> int | None:
    try:
        return hash(r)
    except TypeError:  # bytearray keys, when the pure decoder reads a bytearray
        return None


def assert_agree(*args: Any, **kwargs: Any) -> Outcome:
    """Both decoders give the same outcome; returns it."""
    expected = outcome(decode_block_pure, *args, **kwargs)
    assert outcome(decode_block_c, *args, **kwargs) == expected
    return expected


# --- generated records ---------------------------------------------------------------------

header_keys = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=12),
    # Kafka accepts any bytes as a header key: not UTF-8, read with surrogateescape.
    st.binary(max_size=12).map(lambda b: b.decode("utf-8", "surrogateescape")),
)
payloads = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(max_size=200),
    # Large ones need 2- and 3-byte length varints.
    st.builds(lambda chunk, n: chunk * n, st.binary(min_size=1, max_size=8), st.integers(1, 5000)),
)
headers = st.lists(
    st.tuples(header_keys, st.one_of(st.none(), st.just(b""), st.binary(max_size=40))),
    max_size=4,
).map(tuple)


@st.composite
def blocks(draw: st.DrawFn) -> tuple[bytes, int, int, int]:
    """A records block from ``encode_records``: ``(block, count, base_offset, base_ts)``."""
    base_offset = draw(st.integers(0, 1 << 62))
    base_ts = draw(st.one_of(st.just(NO_TIMESTAMP), st.integers(0, 1 << 45)))
    n = draw(st.integers(0, 8))
    offset = base_offset
    records = []
    for i in range(n):
        if i:
            # Deltas up to int32 max: every varint width of the offset delta.
            offset += draw(st.one_of(st.just(1), st.integers(1, 1 << 20)))
        if offset - base_offset > INT32_MAX:
            break
        # Timestamps below the base (negative deltas) and far from it (long varlongs).
        ts = draw(st.one_of(st.just(NO_TIMESTAMP), st.integers(0, 1 << 46)))
        records.append(Record(offset, ts, draw(payloads), draw(payloads), draw(headers)))
    block, count, _, _ = encode_records(records, base_offset, base_ts)
    return block, count, base_offset, base_ts


int64 = st.integers(-(1 << 63), (1 << 63) - 1)
log_append_times = st.one_of(st.none(), st.integers(-1, 1 << 45))


@given(b=blocks(), log_append_time=log_append_times)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_agree_on_valid_blocks(b: tuple[bytes, int, int, int], log_append_time: int | None) -> None:
    block, count, base_offset, base_ts = b
    result = assert_agree(block, count, base_offset, base_ts, log_append_time)
    assert result[0] == "ok" and len(result[2]) == count


@given(b=blocks(), base_offset=int64, base_ts=int64, log_append_time=log_append_times)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_agree_on_any_base(
    b: tuple[bytes, int, int, int], base_offset: int, base_ts: int, log_append_time: int | None
) -> None:
    # Bases near the int64 limits: offsets and timestamps past them are Python ints, as in Python.
    block, count, _, _ = b
    assert_agree(block, count, base_offset, base_ts, log_append_time)


def test_sums_past_int64_are_exact() -> None:
    block, count, _, _ = encode_records(
        [Record(5, 10, b"k", b"v"), Record(6 + INT32_MAX - 1, 0, None, None)], 5, 10
    )
    top = (1 << 63) - 1
    result = decode_block_c(block, count, top, top, None)
    assert [r.offset for r in result] == [top, top + INT32_MAX]
    assert [r.timestamp for r in result] == [top, top - 10]
    assert_agree(block, count, -(1 << 63), -(1 << 63), None)


def test_arguments_off_the_fast_path_go_to_the_pure_decoder() -> None:
    block, count, _, _ = encode_records([Record(3, 7, b"key", b"value", (("h", b"x"),))], 3, 7)
    assert_agree(bytearray(block), count, 3, 7, None)  # slices are bytearrays, as in Python
    assert_agree(memoryview(block), count, 3, 7, None)
    assert_agree(block, count, 1 << 80, -(1 << 70), None)  # bases beyond int64
    assert_agree(block, True, 3, 7, None)  # bool is not an exact int
    assert_agree(block, count, 3, 7, log_append_time=99)
    assert_agree(data=block, count=count, base_offset=3, base_timestamp=7, log_append_time=None)
    with pytest.raises(TypeError):
        decode_block_c(block, count, 3, 7)
    with pytest.raises(TypeError):
        decode_block_pure(block, count, 3, 7)  # type: ignore[call-arg]


def test_records_are_proper_named_tuples() -> None:
    block, count, _, _ = encode_records([Record(0, 5, b"k", None, (("a", None),))], 0, 0)
    (r,) = decode_block_c(block, count, 0, 0, None)
    assert r == Record(0, 5, b"k", None, (("a", None),), 0, 5)
    assert r._replace(key=b"z").key == b"z"
    assert hash(r) == hash(tuple(r))  # no stale cached hash (CPython 3.14 caches tuple hashes)
    assert gc.is_tracked(r)
    assert {r: 1}[Record(*r)] == 1


def test_configure_refuses_what_it_cannot_fill() -> None:
    class Short(NamedTuple):
        a: int

    class Loose(tuple[int, ...]):  # a tuple subclass with a __dict__
        pass

    for cls in (Short, Loose, list, int):
        with pytest.raises(TypeError, match="record_type"):
            _speedups.configure(cls, BlockError, decode_block_pure)
    with pytest.raises(TypeError):
        _speedups.configure(Record, BlockError, None)
    assert decode_block_c(b"", 0, 0, 0, None) == []  # still configured as before


# --- corrupt blocks ------------------------------------------------------------------------


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
HEADER = encode_varint(1) + b"h" + encode_varint(1) + b"v"

CORRUPT: list[tuple[str, bytes, int, str]] = [
    ("empty block", b"", 1, "declares 1 records but its records block holds 0"),
    ("count too high", GOOD + GOOD, 3, "declares 3 records but its records block holds 2"),
    ("leftover bytes", GOOD + GOOD, 1, r"\d+ bytes remain after the 1 records"),
    ("leftover, negative count", GOOD, -1, r"\d+ bytes remain after the -1 records"),
    ("truncated", GOOD[:-1], 1, "record length"),
    ("truncated in a 2-byte varint", b"\x80", 1, "record runs past the end"),
    ("varint runs past", b"\x80\x80", 1, "varint runs past the end of its buffer"),
    ("over-long varint", b"\xff\xff\xff\xff\xff\x01" + bytes(20), 1, "varint is too long"),
    ("length too small", raw_record(b"\x00" * 5), 1, "record length 5 is impossible"),
    ("negative length", b"\x01" + bytes(10), 1, "record length -1 is impossible"),
    ("length past the block", b"\x28" + bytes(10), 1, "record length 20 is impossible"),
    (
        "over-long varlong",
        raw_record(body(ts=b"\xff" * 10 + b"\x01")),
        1,
        "varlong is too long .* its byte 10",
    ),
    (
        "varlong runs past",
        encode_varint(7) + b"\x00" + b"\xff" * 6,
        1,
        "varlong runs past the end of its buffer",
    ),
    (
        "key past the block",
        raw_record(body(key=encode_varint(4) + b"ab")),
        1,
        "record runs past the end",
    ),
    (
        "fields past the record",
        encode_varint(6) + body(key=encode_varint(3) + b"abc"),
        1,
        "record body is 6 bytes but fields take 9",
    ),
    ("key cut by the block", raw_record(body(key=encode_varint(9)))[:-3], 1, "record"),
    (
        "value of a huge length",
        raw_record(body(value=encode_varint(INT32_MAX))),
        1,
        "record runs past the end",
    ),
    ("fields too short", raw_record(body() + b"\x00\x00"), 1, "record body is 8 bytes but"),
    (
        "negative header count",
        raw_record(body(headers=encode_varint(-1) + b"\x00")),
        1,
        "invalid number of record headers -1",
    ),
    (
        "header count too large",
        raw_record(body(headers=encode_varint(9) + HEADER)),
        1,
        "invalid number of record headers 9",
    ),
    (
        "huge header count",
        raw_record(body(headers=encode_varint(INT32_MAX))),
        1,
        "invalid number of record headers",
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
        raw_record(body(headers=encode_varint(2) + HEADER)) + b"\x00",
        1,
        "record",
    ),
    ("over-long header key size", raw_record(body(headers=b"\x02" + b"\xff" * 6)), 1, "too long"),
    ("second record bad", GOOD + b"\x80\x80\x80\x80\x80\x80", 2, "varint is too long"),
]


@pytest.mark.parametrize(("name", "data", "count", "message"), CORRUPT, ids=[c[0] for c in CORRUPT])
def test_agree_on_corrupt_blocks(name: str, data: bytes, count: int, message: str) -> None:
    result = assert_agree(data, count, 100, 1000, None)
    assert result[0] == "error", name
    with pytest.raises(BlockError, match=message):
        decode_block_c(data, count, 100, 1000, None)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[bytes, int]:
    """A valid block damaged: bytes changed, cut, inserted, with the count off or not."""
    block, count, _, _ = draw(blocks())
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


@given(m=mutated(), log_append_time=log_append_times)
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_agree_on_mutated_blocks(m: tuple[bytes, int], log_append_time: int | None) -> None:
    data, count = m
    assert_agree(data, count, 1 << 40, 1 << 41, log_append_time)


@given(data=st.binary(max_size=64), count=st.integers(-2, 12))
@settings(max_examples=500, deadline=None)
def test_agree_on_random_bytes(data: bytes, count: int) -> None:
    assert_agree(data, count, 0, 0, None)


def test_no_reference_leaks() -> None:
    """Decoding, failing or not, leaves no objects behind (refcounts on every error path)."""
    cases = [(c[1], c[2]) for c in CORRUPT]
    good, n, _, _ = encode_records(
        [Record(i, i, b"k", b"v" * i, (("h", b"x"), ("\udcff", None))) for i in range(20)], 0, 0
    )
    cases.append((good, n))

    def run() -> None:
        for data, count in cases:
            with contextlib.suppress(BlockError):
                decode_block_c(data, count, 7, 7, None)

    for _ in range(200):
        run()
    gc.collect()
    before = sys.getallocatedblocks()
    for _ in range(2000):
        run()
    gc.collect()
    assert sys.getallocatedblocks() - before < 200


# --- which decoder is in use ---------------------------------------------------------------


def test_decode_block_is_the_accelerator_unless_ruled_out() -> None:
    ruled_out = os.environ.get("TIERLOG_NO_SPEEDUPS", "") not in ("", "0")
    assert record.SPEEDUPS is not ruled_out
    assert (record.decode_block is decode_block_pure) is ruled_out


@pytest.mark.parametrize(("value", "speedups"), [("1", False), ("0", True), (None, True)])
def test_environment_selects_the_decoder(value: str | None, speedups: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TIERLOG_NO_SPEEDUPS"}
    if value is not None:
        env["TIERLOG_NO_SPEEDUPS"] = value
    code = (
        "from tierlog.log import record as r; "
        "print(r.SPEEDUPS, r.decode_block is r.decode_block_pure)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [str(speedups), str(not speedups)]
