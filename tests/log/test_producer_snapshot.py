"""Producer state snapshots, version 1 (KAFKA-FACTS 7.8, ``ProducerSnapshot.json``).

The CRC is checked against ``google-crc32c``, an implementation independent of the one tierlog
uses, so a wrong polynomial or range cannot pass by agreeing with itself.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.log.files import producer_snapshot_file
from tierlog.log.producer_snapshot import (
    PRODUCER_SNAPSHOT_ENTRY_SIZE,
    CorruptSnapshotError,
    ProducerSnapshotEntry,
    decode_producer_snapshot,
    encode_producer_snapshot,
    read_producer_snapshot,
    write_producer_snapshot,
)
from tierlog.spi import CorruptRecordError, InvalidArgumentError

ENTRY = ProducerSnapshotEntry(
    producer_id=1000,
    epoch=3,
    last_sequence=42,
    last_offset=99,
    offset_delta=4,
    timestamp=1_700_000_000_123,
    coordinator_epoch=7,
    current_txn_first_offset=90,
)


def _independent_crc(data: bytes) -> int:
    return int(google_crc32c.value(data))


def test_layout_byte_for_byte() -> None:
    data = encode_producer_snapshot([ENTRY, ProducerSnapshotEntry(-1, -1, -1, -1, 0, -1, -1)])
    body = struct.pack(">i", 2)
    body += bytes.fromhex(
        "00000000000003e8"  # producerId 1000
        "0003"  # epoch
        "0000002a"  # lastSequence 42
        "0000000000000063"  # lastOffset 99
        "00000004"  # offsetDelta
        "0000018bcfe5687b"  # timestamp
        "00000007"  # coordinatorEpoch
        "000000000000005a"  # currentTxnFirstOffset 90
    )
    body += bytes.fromhex(
        "ff" * 8 + "ffff" + "ff" * 4 + "ff" * 8 + "00000000" + "ff" * 8 + "ff" * 4 + "ff" * 8
    )
    # version int16 = 1 | crc uint32 over [6, end) | count | entries
    assert data == b"\x00\x01" + struct.pack(">I", _independent_crc(body)) + body
    assert len(data) == 10 + 2 * 46 and PRODUCER_SNAPSHOT_ENTRY_SIZE == 46


def test_empty_snapshot() -> None:
    data = encode_producer_snapshot([])
    count = b"\x00\x00\x00\x00"
    assert data == b"\x00\x01" + struct.pack(">I", _independent_crc(count)) + count
    assert decode_producer_snapshot(data) == []


def test_crc_covers_exactly_bytes_6_to_end() -> None:
    data = encode_producer_snapshot([ENTRY])
    (stored,) = struct.unpack_from(">I", data, 2)
    assert stored == _independent_crc(data[6:])
    assert stored != _independent_crc(data[2:]) and stored != _independent_crc(data[10:])
    # Flipping any bit from the count on is detected; the header bytes before it are not covered
    # by the CRC but are the version and the CRC themselves.
    for at in range(6, len(data)):
        damaged = bytearray(data)
        damaged[at] ^= 0x01
        with pytest.raises(CorruptSnapshotError):
            decode_producer_snapshot(bytes(damaged))


def test_write_and_read_file(tmp_path: Path) -> None:
    path = producer_snapshot_file(tmp_path, 1234)
    assert path.name == "00000000000000001234.snapshot"
    write_producer_snapshot(path, [ENTRY])
    assert path.read_bytes() == encode_producer_snapshot([ENTRY])
    assert read_producer_snapshot(path) == [ENTRY]
    write_producer_snapshot(path, [], sync=False)  # replaces atomically
    assert read_producer_snapshot(path) == []
    assert sorted(os.listdir(tmp_path)) == ["00000000000000001234.snapshot"]
    with pytest.raises(FileNotFoundError):
        read_producer_snapshot(tmp_path / "00000000000000000001.snapshot")


def _corrupt(data: bytes) -> CorruptSnapshotError:
    with pytest.raises(CorruptSnapshotError) as info:
        decode_producer_snapshot(data, path="p.snapshot")
    assert isinstance(info.value, CorruptRecordError)
    assert info.value.path == "p.snapshot" and "p.snapshot" in str(info.value)
    return info.value


def test_wrong_version() -> None:
    data = encode_producer_snapshot([ENTRY])
    for version in (0, 2, -1):
        error = _corrupt(struct.pack(">h", version) + data[2:])
        assert "unknown file version" in str(error) and error.position == 0


def test_truncated() -> None:
    data = encode_producer_snapshot([ENTRY, ENTRY])
    # Kafka's testLoadFromEmptySnapshotFile and testLoadFromTruncatedSnapshotFile.
    assert "truncated" in str(_corrupt(b""))
    assert "truncated" in str(_corrupt(data[:1]))
    assert "truncated" in str(_corrupt(data[:9]))
    error = _corrupt(data[: len(data) // 2])
    assert "truncated" in str(error) and error.position == len(data) // 2
    assert "truncated" in str(_corrupt(data[:-1]))


def test_crc_mismatch() -> None:
    data = bytearray(encode_producer_snapshot([ENTRY]))
    data[20:57] = bytes(37)  # Kafka's testLoadFromCorruptSnapshotFile writes 37 zero bytes
    error = _corrupt(bytes(data))
    assert "CRC" in str(error) and error.position == 2


def test_count_mismatch() -> None:
    data = encode_producer_snapshot([ENTRY, ENTRY])
    # One entry too few counted, CRC recomputed: the last entry is left over.
    body = struct.pack(">i", 1) + data[10:]
    error = _corrupt(b"\x00\x01" + struct.pack(">I", _independent_crc(body)) + body)
    assert "count mismatch" in str(error) and error.position == 10 + 46
    # Trailing garbage after a valid file breaks the CRC.
    assert "CRC" in str(_corrupt(data + b"\x00"))
    # A negative count is not an array.
    body = struct.pack(">i", -1)
    error = _corrupt(b"\x00\x01" + struct.pack(">I", _independent_crc(body)) + body)
    assert "negative entry count" in str(error)
    # A huge count is checked against the file before anything is allocated.
    body = struct.pack(">i", 2**31 - 1)
    assert "truncated" in str(
        _corrupt(b"\x00\x01" + struct.pack(">I", _independent_crc(body)) + body)
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("producer_id", 2**63),
        ("epoch", 2**15),
        ("last_sequence", -(2**31) - 1),
        ("offset_delta", 2**31),
        ("coordinator_epoch", 2**31),
        ("current_txn_first_offset", -(2**63) - 1),
        ("timestamp", "1"),
    ],
)
def test_entry_field_ranges(field: str, value: object) -> None:
    fields = {
        "producer_id": 1,
        "epoch": 0,
        "last_sequence": 0,
        "last_offset": 0,
        "offset_delta": 0,
        "timestamp": 0,
        "coordinator_epoch": 0,
        field: value,
    }
    with pytest.raises(InvalidArgumentError):
        ProducerSnapshotEntry(**fields)  # type: ignore[arg-type]


def _int(bits: int) -> st.SearchStrategy[int]:
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


entries = st.builds(
    ProducerSnapshotEntry,
    _int(64),
    _int(16),
    _int(32),
    _int(64),
    _int(32),
    _int(64),
    _int(32),
    _int(64),
)


@given(st.lists(entries, max_size=20))
def test_round_trip(items: list[ProducerSnapshotEntry]) -> None:
    data = encode_producer_snapshot(items)
    assert len(data) == 10 + 46 * len(items)
    assert struct.unpack_from(">I", data, 2)[0] == _independent_crc(data[6:])
    assert decode_producer_snapshot(data) == items


@settings(max_examples=300)
@given(st.binary(max_size=200), st.booleans())
def test_fuzz_only_corrupt_snapshot_error(data: bytes, fix_header: bool) -> None:
    if fix_header and len(data) >= 10:
        # Give random bodies a valid version and CRC so the parser gets past them.
        data = b"\x00\x01" + struct.pack(">I", _independent_crc(data[6:])) + data[6:]
    try:
        decode_producer_snapshot(data)
    except CorruptSnapshotError as error:
        assert error.position is not None and 0 <= error.position <= len(data)
