"""Zigzag varints and varlongs against Kafka's ByteUtilsTest vectors and its overflow rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.log._varint import (
    ZIGZAG_1,
    ZIGZAG_2,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
    size_of_varlong,
)
from tierlog.spi import CorruptRecordError, InvalidArgumentError

# ByteUtilsTest.testVarintSerde / testVarlongSerde
VARINTS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (-8192, "ff7f"),
    (8192, "808001"),
    (-8193, "818001"),
    (1048575, "feff7f"),
    (-1048576, "ffff7f"),
    (1048576, "80808001"),
    (-1048577, "81808001"),
    (134217727, "feffff7f"),
    (-134217728, "ffffff7f"),
    (134217728, "8080808001"),
    (-134217729, "8180808001"),
    (2**31 - 1, "feffffff0f"),
    (-(2**31), "ffffffff0f"),
]
VARLONGS = [
    *VARINTS,
    (2**63 - 1, "feffffffffffffffff01"),
    (-(2**63), "ffffffffffffffffff01"),
    (2**35, "808080808002"),
]


@pytest.mark.parametrize(("value", "hex_"), VARINTS)
def test_varint_vectors(value: int, hex_: str) -> None:
    raw = bytes.fromhex(hex_)
    assert encode_varint(value) == raw
    assert decode_varint(raw) == (value, len(raw))
    assert size_of_varint(value) == len(raw)


@pytest.mark.parametrize(("value", "hex_"), VARLONGS)
def test_varlong_vectors(value: int, hex_: str) -> None:
    raw = bytes.fromhex(hex_)
    assert encode_varlong(value) == raw
    assert decode_varlong(b"\xaa" + raw, 1) == (value, len(raw) + 1)
    assert size_of_varlong(value) == len(raw)


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(value: int) -> None:
    raw = encode_varint(value)
    assert decode_varint(raw + b"\xff") == (value, len(raw))
    assert size_of_varint(value) == len(raw)


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(value: int) -> None:
    raw = encode_varlong(value)
    assert decode_varlong(raw) == (value, len(raw))
    assert size_of_varlong(value) == len(raw)


def test_fast_tables_agree_with_the_general_decoder() -> None:
    for b in range(0x80):
        assert ZIGZAG_1[b] == decode_varint(bytes([b]))[0]
    for b0 in range(0x80, 0x100):
        for b1 in range(0x80):
            assert ZIGZAG_2[b0 | b1 << 8] == decode_varint(bytes([b0, b1]))[0]


def test_too_long_varint_is_corrupt() -> None:
    # ByteUtilsTest.testInvalidVarint: the continuation bit of the 5th byte is set.
    with pytest.raises(CorruptRecordError, match="too long") as e:
        decode_varint(bytes.fromhex("ffffffffff01"), 0)
    assert e.value.position == 0
    with pytest.raises(CorruptRecordError, match="too long"):
        decode_varlong(bytes.fromhex("ffffffffffffffffffff01"))


def test_truncated_varint_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="past the end") as e:
        decode_varint(b"\x00\x80\x80", 1)
    assert e.value.position == 1


def test_high_bits_of_the_last_byte_are_dropped_as_in_java() -> None:
    # Java's int arithmetic drops bits beyond 32: 0x7f in byte 5 sets bits 28..34, 28..31 stay.
    assert decode_varint(bytes.fromhex("808080807f")) == (0x78000000, 5)
    assert decode_varint(bytes.fromhex("8000")) == (0, 2)  # overlong encodings are accepted


def test_out_of_range_values_are_refused() -> None:
    with pytest.raises(InvalidArgumentError):
        encode_varint(2**31)
    with pytest.raises(InvalidArgumentError):
        encode_varlong(-(2**63) - 1)
