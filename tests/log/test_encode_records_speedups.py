"""The C ``encode_records`` writes the same bytes and raises the same errors as the pure encoder.

``tierlog.log._speedups.encode_records`` must return exactly what ``record.encode_records_pure``
returns (the block byte for byte, the count, the last offset delta, the max timestamp) and, on
input the pure encoder rejects, raise its exception (same type, same message), for lists, tuples
and one-shot iterators of records. The pure encoder's bytes are themselves checked against the
decoder and a hand-written record here, so agreement is not agreement on a wrong layout.

These tests import the extension directly, so they run (and must pass) whichever encoder
``TIERLOG_NO_SPEEDUPS`` selects for the rest of the suite; they fail rather than skip when the
extension is not built (the test setup builds it with ``TIERLOG_REQUIRE_SPEEDUPS=1``).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.log import record
from tierlog.log._varint import INT32_MAX, INT64_MAX, INT64_MIN
from tierlog.log.record import (
    NO_TIMESTAMP,
    BlockError,
    Record,
    decode_block_pure,
    encode_records_pure,
)
from tierlog.spi import InvalidArgumentError

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
_speedups.configure_encode(encode_records_pure)
encode_c: Callable[..., tuple[bytes, int, int, int]] = _speedups.encode_records

R: Any = Record
"""``Record`` untyped: tests build records with wrong field types on purpose."""

DELETE_HORIZON = 1_732_000_000_000 + 86_400_000
"""A delete horizon (now + delete.retention.ms) as compaction makes it the base timestamp."""


def outcome(encode: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """What an encoder did, comparable between the two: its result with types, or its error."""
    try:
        result = encode(*args, **kwargs)
    except Exception as e:  # whatever the pure encoder raises is the contract
        return ("error", type(e), str(e), e.args)
    return ("ok", type(result), tuple(map(type, result)), result)


def assert_agree(records: Iterable[Any], *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """C and pure encoders agree on ``records`` given as a list, a tuple and an iterator."""
    items = list(records)
    expected = outcome(encode_records_pure, items, *args, **kwargs)
    assert outcome(encode_c, items, *args, **kwargs) == expected
    assert outcome(encode_c, tuple(items), *args, **kwargs) == expected
    assert outcome(encode_c, iter(items), *args, **kwargs) == expected
    assert outcome(encode_c, (r for r in items), *args, **kwargs) == expected
    return expected


# --- valid input: the same bytes ---------------------------------------------------------------

# Header keys: text, and keys that are not UTF-8 (decoded with surrogateescape, as read back).
header_keys = st.one_of(
    st.text(max_size=12),
    st.binary(max_size=12).map(lambda b: b.decode("utf-8", "surrogateescape")),
)
payloads = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(max_size=100),
    # Lengths that need 2- and 3-byte varints.
    st.builds(lambda chunk, n: chunk * n, st.binary(min_size=1, max_size=8), st.integers(1, 4000)),
)
header_lists = st.one_of(
    st.just(()),
    st.lists(
        st.tuples(header_keys, st.one_of(st.none(), st.just(b""), st.binary(max_size=40))),
        max_size=4,
    ).map(tuple),
    st.lists(st.tuples(st.just("h"), st.binary(max_size=4)), max_size=2),  # a list, not a tuple
)
timestamps = st.one_of(
    st.just(NO_TIMESTAMP), st.integers(0, 1 << 20), st.integers(0, 1 << 46), st.just(INT64_MAX)
)


@st.composite
def record_lists(draw: st.DrawFn) -> tuple[list[Record], int, int]:
    """Records with increasing offsets (gaps up to int32), and the bases to encode them on."""
    base_offset = draw(st.one_of(st.integers(0, 1 << 62), st.just(INT64_MAX - INT32_MAX)))
    offset = base_offset + draw(st.one_of(st.just(0), st.integers(0, 1 << 20)))
    records = []
    for i in range(draw(st.integers(0, 12))):
        if i:
            offset += draw(st.one_of(st.just(1), st.integers(1, 1 << 12), st.integers(1, 1 << 30)))
        if offset - base_offset > INT32_MAX:
            break
        key, value = draw(payloads), draw(payloads)
        headers: Any = draw(header_lists)  # a list of headers too, which Python accepts
        records.append(Record(offset, draw(timestamps), key, value, headers))
    base_ts = draw(
        st.one_of(
            st.just(NO_TIMESTAMP),
            st.just(records[0].timestamp if records else NO_TIMESTAMP),
            st.just(DELETE_HORIZON),  # every delta large, and negative for -1 timestamps
            st.integers(0, 1 << 46),
            st.just(INT64_MIN),  # deltas past int64 for some records: the pure error
        )
    )
    return records, base_offset, base_ts


@given(case=record_lists())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_same_bytes_on_random_records(case: tuple[list[Record], int, int]) -> None:
    records, base_offset, base_ts = case
    result = assert_agree(records, base_offset, base_ts)
    # Only a timestamp delta beyond int64 (INT64_MAX over a base of -1, anything over INT64_MIN)
    # is an error here.
    fits = all(INT64_MIN <= r.timestamp - base_ts <= INT64_MAX for r in records)
    assert result[0] == ("ok" if fits else "error"), result


def _decoded(block: bytes, count: int, base_offset: int, base_ts: int) -> list[Record]:
    return decode_block_pure(block, count, base_offset, base_ts, None)


def test_extremes_round_trip() -> None:
    """Deltas at int32 max, long values, odd headers: C equals pure and decodes back."""
    big = bytes(range(256)) * 70  # 17920 bytes: a 3-byte length varint (> 2^14)
    huge = b"\x5a" * ((1 << 21) + 3)  # a 4-byte length varint (> 2^21)
    records = [
        Record(100, NO_TIMESTAMP, None, None),
        Record(101, 0, b"", b"", (("", b""),)),
        Record(102, DELETE_HORIZON, b"k" * 200, big, (("\udcff\udc80x", None), ("é€𝄞", b"v"))),
        R(100 + (1 << 14), 7, None, huge, [("h", None)]),
        Record(100 + INT32_MAX - 2, NO_TIMESTAMP, b"key", b"value"),
        Record(100 + INT32_MAX - 1, INT64_MAX, b"key", b"value"),
        Record(100 + INT32_MAX, 1, b"last", None, ()),
    ]
    for base_ts in (0, 1, DELETE_HORIZON, INT64_MAX):  # each delta fits in a varlong
        expected = encode_records_pure(records, 100, base_ts)
        assert encode_c(records, 100, base_ts) == expected
        assert encode_c(iter(records), 100, base_ts) == expected
        block, count, last_delta, max_ts = expected
        assert (count, last_delta, max_ts) == (7, INT32_MAX, INT64_MAX)
        back = _decoded(block, count, 100, base_ts)
        assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in back] == [
            (r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in records
        ]


def test_layout_of_one_record_by_hand() -> None:
    """Kafka's DefaultRecord, written out by hand for one record."""
    r = Record(5, 1_000_000, b"ab", None, (("h\udcff", b"xyz"),))
    body = b"".join(
        [
            b"\x00",  # attributes
            b"\x80\x89\x7a",  # timestamp delta 1_000_000 - 0, zigzag 2_000_000
            b"\x04",  # offset delta 2
            b"\x04ab",  # key length 2, key
            b"\x01",  # value null (-1)
            b"\x02",  # one header
            b"\x04h\xff",  # key of 2 bytes: "h" and the escaped byte 0xFF
            b"\x06xyz",  # value of 3 bytes
        ]
    )
    expected = (bytes([len(body) * 2]) + body, 1, 2, 1_000_000)
    assert encode_records_pure([r], 3, 0) == expected
    assert encode_c([r], 3, 0) == expected


def test_empty_input() -> None:
    records: Iterable[Record]
    for records in ([], (), iter([])):
        assert encode_c(records, 0, 0) == (b"", 0, -1, -1)
    # No record, no arithmetic: the bases are not even looked at.
    odd: Any = "x"
    assert encode_c([], 1 << 70, odd) == encode_records_pure([], 1 << 70, odd) == (b"", 0, -1, -1)


def test_many_records_grow_the_buffer() -> None:
    records = [Record(i * 3, i, b"key-%d" % i, b"v" * (i % 300), ()) for i in range(5000)]
    expected = encode_records_pure(records, 0, DELETE_HORIZON)
    assert encode_c(records, 0, DELETE_HORIZON) == expected
    assert encode_c((r for r in records), 0, DELETE_HORIZON) == expected


# --- input the pure encoder rejects, or that is off the fast path -----------------------------


class OddRecord(Record):
    """A Record subclass: off the fast path (its fields could be properties)."""

    __slots__ = ()

    @property
    def key(self) -> bytes | None:
        return b"odd"


REJECTED: list[tuple[str, list[Any], Any, Any]] = [
    ("offset repeated", [R(1, 0, b"a", b"b"), R(1, 0, b"a", b"b")], 0, 0),
    ("offset going back", [R(5, 0, None, None), R(4, 0, None, None)], 0, 0),
    ("offset below the base", [R(9, 0, None, None)], 10, 0),
    ("delta past int32", [R(INT32_MAX + 1, 0, None, None)], 0, 0),
    ("delta past int32 later", [R(0, 0, None, None), R(INT32_MAX + 11, 0, None, None)], 10, 0),
    ("offset past int64", [R(1 << 64, 0, None, None)], 0, 0),
    ("offset delta past int64", [R(INT64_MAX, 0, None, None)], INT64_MIN, 0),
    ("timestamp -2", [R(0, -2, None, None)], 0, 0),
    ("timestamp int64 min", [R(0, 0, None, None), R(1, INT64_MIN, None, None)], 0, 0),
    ("timestamp delta past a varlong", [R(0, INT64_MAX, None, None)], 0, -1),
    ("timestamp delta past a varlong, base int64 min", [R(0, 0, None, None)], 0, INT64_MIN),
    ("timestamp past int64", [R(0, 1 << 64, None, None)], 0, 0),
    ("None header key", [R(0, 0, None, None, (("a", None), (None, b"x")))], 0, 0),
    ("bytes header key", [R(0, 0, None, None, ((b"k", b"v"),))], 0, 0),
    ("int header key", [R(0, 0, None, None, ((7, b"v"),))], 0, 0),
    ("lone surrogate in a header key", [R(0, 0, None, None, (("a\ud800", b"v"),))], 0, 0),
    ("str header value", [R(0, 0, None, None, (("k", "v"),))], 0, 0),
    ("int header value", [R(0, 0, None, None, (("k", 5),))], 0, 0),
    ("header of one item", [R(0, 0, None, None, (("k",),))], 0, 0),
    ("header of three items", [R(0, 0, None, None, (("k", b"v", b"w"),))], 0, 0),
    ("header not a tuple", [R(0, 0, None, None, ("kv",))], 0, 0),
    ("headers an int", [R(0, 0, None, None, 5)], 0, 0),
    ("headers a generator", [R(0, 0, None, None, (h for h in [("a", b"b")]))], 0, 0),  # no len
    ("str key", [R(0, 0, "key", b"v")], 0, 0),
    ("int key", [R(0, 0, 3, b"v")], 0, 0),
    ("str value", [R(0, 0, b"k", "value")], 0, 0),
    ("int value", [R(0, 0, b"k", 12)], 0, 0),
    ("a plain tuple", [R(0, 0, None, None), (1, 0, None, None, ())], 0, 0),
    ("None for a record", [None], 0, 0),
    ("short Record", [tuple.__new__(Record, (0, 0))], 0, 0),
    ("float offset", [R(0.0, 0, None, None)], 0, 0),
    ("float base offset", [R(0, 0, None, None)], 0.5, 0),
    ("str base timestamp", [R(0, 0, None, None)], 0, "0"),
    ("base offset past int64", [R(0, 0, None, None)], 1 << 64, 0),
]


@pytest.mark.parametrize(
    ("records", "base_offset", "base_ts"),
    [case[1:] for case in REJECTED],
    ids=[case[0] for case in REJECTED],
)
def test_rejected_input_raises_the_pure_error(
    records: list[Any], base_offset: Any, base_ts: Any
) -> None:
    # Several cases put valid records before the bad one: the C code has encoded them when it
    # hands over.
    result = assert_agree(records, base_offset, base_ts)
    assert result[0] == "error", result


ACCEPTED_OFF_THE_FAST_PATH: list[tuple[str, list[Any], Any, Any]] = [
    ("bytearray and memoryview payloads", [R(0, 0, bytearray(b"k"), memoryview(b"val"))], 0, 0),
    ("bytes subclass key", [R(0, 0, type("B", (bytes,), {})(b"k"), None)], 0, 0),
    ("str subclass header key", [R(0, 0, None, None, ((type("S", (str,), {})("k"), b""),))], 0, 0),
    ("list header", [R(0, 0, None, None, (["k", b"v"],))], 0, 0),
    ("headers None", [R(0, 0, None, None, None)], 0, 0),  # falsy: no headers, in Python
    ("bool offset and timestamp", [R(True, True, None, None)], 0, 0),
    ("Record subclass", [R(0, 0, b"k", None), OddRecord(1, 0, None, None)], 0, 0),
    ("bool base offset", [R(1, 0, None, None)], True, 0),
    ("timestamp past int64, base too", [R(0, 1 << 64, None, None)], 0, 1 << 64),
]


@pytest.mark.parametrize(
    ("records", "base_offset", "base_ts"),
    [case[1:] for case in ACCEPTED_OFF_THE_FAST_PATH],
    ids=[case[0] for case in ACCEPTED_OFF_THE_FAST_PATH],
)
def test_unusual_input_gets_the_pure_result(
    records: list[Any], base_offset: Any, base_ts: Any
) -> None:
    expected = outcome(encode_records_pure, records, base_offset, base_ts)
    assert expected[0] == "ok"
    assert outcome(encode_c, list(records), base_offset, base_ts) == expected
    assert outcome(encode_c, iter(records), base_offset, base_ts) == expected


def test_arguments_off_the_fast_path() -> None:
    records = [R(3, 4, b"k", b"v")]
    expected = outcome(encode_records_pure, records, 3, 0)
    assert outcome(encode_c, records, base_offset=3, base_timestamp=0) == expected
    assert outcome(encode_c, records=records, base_offset=3, base_timestamp=0) == expected
    for args in ((records,), (records, 3), (records, 3, 0, 1), ()):
        assert outcome(encode_c, *args) == outcome(encode_records_pure, *args)
        assert outcome(encode_c, *args)[0] == "error"
    assert outcome(encode_c, 5, 0, 0) == outcome(encode_records_pure, 5, 0, 0)  # not iterable
    assert outcome(encode_c, None, 0, 0)[0] == "error"


def test_iterator_errors_and_consumption_match() -> None:
    """A failing iterator raises its own error unless a bad record came first; either way the
    iterator is left where the pure encoder leaves it."""

    def failing(records: list[Any]) -> Iterator[Any]:
        yield from records
        raise OSError("source went away")

    good = [R(0, 0, b"a", None), R(1, 0, b"b", None)]
    for encode in (encode_c, encode_records_pure):
        with pytest.raises(OSError, match="source went away"):
            encode(failing(good), 0, 0)
        with pytest.raises(InvalidArgumentError, match="invalid negative timestamp -5"):
            encode(failing([*good, R(2, -5, None, None)]), 0, 0)

    def remaining(encode: Callable[..., Any]) -> list[Any]:
        it = iter([*good, R(1, 0, None, None), R(7, 0, None, None), R(8, 0, None, None)])
        with pytest.raises(InvalidArgumentError):
            encode(it, 0, 0)
        return list(it)

    expected = [R(7, 0, None, None), R(8, 0, None, None)]
    assert remaining(encode_c) == remaining(encode_records_pure) == expected


def test_exact_messages() -> None:
    """Spot checks that the errors compared above are the pure encoder's own words."""
    with pytest.raises(InvalidArgumentError, match=r"^invalid null header key found in headers$"):
        encode_c([R(0, 0, None, None, ((None, b"x"),))], 0, 0)
    with pytest.raises(
        InvalidArgumentError, match=r"^record offset 4 does not follow offset 5 within an int32"
    ):
        encode_c([R(5, 0, None, None), R(4, 0, None, None)], 0, 0)
    with pytest.raises(InvalidArgumentError, match="does not fit in a varlong"):
        encode_c([R(0, INT64_MAX, None, None)], 0, -1)
    with pytest.raises(UnicodeEncodeError, match="surrogates not allowed"):
        encode_c([R(0, 0, None, None, (("\ud800", None),))], 0, 0)


# --- configuration, leaks, selection -----------------------------------------------------------


def test_configure_encode_checks_its_argument() -> None:
    with pytest.raises(TypeError, match="configure_encode"):
        _speedups.configure_encode(None)
    with pytest.raises(TypeError, match="configure_encode"):
        _speedups.configure_encode()
    assert encode_c([R(0, 0, None, None)], 0, 0) == encode_records_pure([R(0, 0, None, None)], 0, 0)


def test_no_reference_leaks() -> None:
    """Encoding, handing over or failing leaves no objects behind."""
    good = [R(i, i, b"k", b"v" * i, (("h", b"x"), ("\udcff", None))) for i in range(20)]
    cases: list[tuple[Any, Any, Any]] = [(case[1], case[2], case[3]) for case in REJECTED]
    cases += [(case[1], case[2], case[3]) for case in ACCEPTED_OFF_THE_FAST_PATH[:4]]
    cases.append((good, 0, DELETE_HORIZON))

    def run() -> None:
        for records, base_offset, base_ts in cases:
            for recs in (records, iter(records)):
                with contextlib.suppress(Exception):
                    encode_c(recs, base_offset, base_ts)

    for _ in range(100):
        run()
    gc.collect()
    before = sys.getallocatedblocks()
    for _ in range(1000):
        run()
    gc.collect()
    assert sys.getallocatedblocks() - before < 200


def test_encode_records_is_the_accelerator_unless_ruled_out() -> None:
    ruled_out = os.environ.get("TIERLOG_NO_SPEEDUPS", "") not in ("", "0")
    assert (record.encode_records is encode_records_pure) is ruled_out
    assert (record.encode_records is encode_c) is not ruled_out


@pytest.mark.parametrize(("value", "speedups"), [("1", False), (None, True)])
def test_environment_selects_the_encoder(value: str | None, speedups: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TIERLOG_NO_SPEEDUPS"}
    if value is not None:
        env["TIERLOG_NO_SPEEDUPS"] = value
    code = "from tierlog.log import record as r; print(r.encode_records is r.encode_records_pure)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [str(not speedups)]


def test_an_accelerator_built_from_older_sources_leaves_the_pure_encoder() -> None:
    """A stale ``_speedups`` from before ``encode_records`` existed must not break the import of
    ``tierlog.log.record``: the C decoder is used and the pure encoder."""
    script = (
        "import types, tierlog.log._accel as accel\n"
        "old = types.ModuleType('tierlog.log._speedups')\n"
        "old.decode_block = accel.SPEEDUPS_MODULE.decode_block\n"
        "old.configure = accel.SPEEDUPS_MODULE.configure\n"
        "accel.SPEEDUPS_MODULE = old\n"
        "from tierlog.log import record as r\n"
        "assert r.SPEEDUPS and r.decode_block is old.decode_block\n"
        "assert r.encode_records is r.encode_records_pure\n"
        "print('pure')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TIERLOG_NO_SPEEDUPS"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pure"
