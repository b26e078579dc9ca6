"""Record batch v2: byte layout (KAFKA-FACTS 7.2/7.3), attributes, control batches, stamping."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.log.batch import (
    ATTRIBUTES_OFFSET,
    CRC_FIELD,
    CRC_OFFSET,
    HEADER,
    HEADER_BOUNDS,
    HEADER_SIZE_UP_TO_MAGIC,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_AND_MAGIC,
    LENGTH_FIELD,
    LENGTH_MAGIC_ATTRIBUTES,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    MIN_BATCH_LENGTH,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD,
    ControlRecord,
    ControlRecordType,
    RecordBatch,
    TimestampType,
    UnsupportedRecordFormatError,
    assign_offsets,
    build_batch,
    build_control_batch,
    compute_crc,
    decode_batch,
    decode_control_record,
    increment_sequence,
    read_batch_header,
    set_base_offset,
    set_max_timestamp,
    set_partition_leader_epoch,
    verify_crc,
)
from tierlog.log.compression import CompressionType
from tierlog.log.record import NO_TIMESTAMP, Record
from tierlog.spi import CorruptRecordError, InvalidArgumentError

from ._record_helpers import content, record_lists, reference_crc32c

# Two records written by hand from KAFKA-FACTS 7.3:
#   r0: attributes 00, tsDelta 0 -> 00, offsetDelta 0 -> 00, key "k" -> 02 6b,
#       value "v0" -> 04 76 30, 1 header -> 02, "h" -> 02 68, "x" -> 02 78   (13 bytes -> 1a)
#   r1: attributes 00, tsDelta 5 -> 0a, offsetDelta 1 -> 02, null key 01, null value 01,
#       0 headers 00                                                         (6 bytes -> 0c)
RECORDS_BLOCK = bytes.fromhex("1a 00 00 00 02 6b 04 76 30 02 02 68 02 780c 00 0a 02 01 01 00")


def hand_built_batch() -> bytes:
    """The v2 header of KAFKA-FACTS 7.2 written field by field, CRC-32C by the reference code."""
    after_crc = (
        bytes.fromhex("0010")  # attributes: transactional, CREATE_TIME, no compression
        + bytes.fromhex("00000001")  # LastOffsetDelta
        + (1000).to_bytes(8, "big")  # BaseTimestamp
        + (1005).to_bytes(8, "big")  # MaxTimestamp
        + (1234).to_bytes(8, "big")  # ProducerId
        + bytes.fromhex("0003")  # ProducerEpoch
        + bytes.fromhex("0000000a")  # BaseSequence
        + bytes.fromhex("00000002")  # RecordsCount
        + RECORDS_BLOCK
    )
    return (
        (5).to_bytes(8, "big")  # BaseOffset
        + (49 + len(RECORDS_BLOCK)).to_bytes(4, "big")  # Length: bytes after this field
        + (7).to_bytes(4, "big")  # PartitionLeaderEpoch
        + b"\x02"  # Magic
        + reference_crc32c(after_crc).to_bytes(4, "big")
        + after_crc
    )


EXAMPLE_RECORDS = [
    Record(5, 1000, b"k", b"v0", (("h", b"x"),)),
    Record(6, 1005, None, None),
]


def build_example() -> bytes:
    return build_batch(
        EXAMPLE_RECORDS,
        base_offset=5,
        partition_leader_epoch=7,
        producer_id=1234,
        producer_epoch=3,
        base_sequence=10,
        is_transactional=True,
    )


def test_reference_crc32c_is_castagnoli() -> None:
    assert reference_crc32c(b"123456789") == 0xE3069283


def test_builder_writes_the_documented_layout() -> None:
    expected = hand_built_batch()
    assert len(expected) == 82
    assert build_example() == expected


def test_decoder_reads_the_documented_layout() -> None:
    header, records = decode_batch(hand_built_batch())
    assert header == RecordBatch(
        base_offset=5,
        length=70,
        partition_leader_epoch=7,
        magic=2,
        crc=header.crc,
        attributes=0x10,
        last_offset_delta=1,
        base_timestamp=1000,
        max_timestamp=1005,
        producer_id=1234,
        producer_epoch=3,
        base_sequence=10,
        records_count=2,
    )
    assert header.crc == reference_crc32c(hand_built_batch()[21:])
    assert header.compression == CompressionType.NONE
    assert header.timestamp_type == TimestampType.CREATE_TIME
    assert header.is_transactional and not header.is_control and not header.has_delete_horizon
    assert header.delete_horizon_ms is None
    assert (header.last_offset, header.next_offset, header.size_in_bytes) == (6, 7, 82)
    assert header.last_sequence == 11 and header.has_producer_id
    assert records == [
        Record(5, 1000, b"k", b"v0", (("h", b"x"),), 0, 0),
        Record(6, 1005, None, None, (), 1, 5),
    ]


def test_header_struct_offsets_match_kafka() -> None:
    assert HEADER.size == RECORD_BATCH_OVERHEAD == 61
    # DefaultRecordBatch: CRC at 17, attributes at 21, ..., records count at 57.
    offsets = [0, 8, 12, 16, 17, 21, 23, 27, 35, 43, 51, 53, 57]
    sizes = [struct.calcsize(">" + c) for c in "qiibIhiqqqhii"]
    assert [sum(sizes[:i]) for i in range(13)] == offsets


def test_named_offsets_and_partial_structs_read_the_header_fields() -> None:
    """Every offset and partial ``Struct`` that other modules read headers with agrees with
    ``HEADER``: a header of distinct field values reads back field by field."""
    fields = (
        -5_000_000_000,  # BaseOffset
        70,  # Length
        -7,  # PartitionLeaderEpoch
        2,  # Magic
        0xDEADBEEF,  # CRC
        0x35,  # Attributes
        123_456,  # LastOffsetDelta
        1_000,  # BaseTimestamp
        -9_000_000_000,  # MaxTimestamp
        42,  # ProducerId
        3,  # ProducerEpoch
        10,  # BaseSequence
        2,  # RecordsCount
    )
    buf = HEADER.pack(*fields)
    base, length, epoch, magic, crc, attributes, delta, _, max_ts = fields[:9]
    assert (LOG_OVERHEAD, HEADER_SIZE_UP_TO_MAGIC) == (LENGTH_OFFSET + 4, MAGIC_OFFSET + 1)
    assert MIN_BATCH_LENGTH == 49
    assert LENGTH_FIELD.unpack_from(buf, LENGTH_OFFSET) == (length,)
    assert struct.unpack_from(">i", buf, PARTITION_LEADER_EPOCH_OFFSET) == (epoch,)
    assert buf[MAGIC_OFFSET] == magic
    assert CRC_FIELD.unpack_from(buf, CRC_OFFSET) == (crc,)
    assert struct.unpack_from(">h", buf, ATTRIBUTES_OFFSET) == (attributes,)
    assert struct.unpack_from(">i", buf, LAST_OFFSET_DELTA_OFFSET) == (delta,)
    assert struct.unpack_from(">q", buf, MAX_TIMESTAMP_OFFSET) == (max_ts,)
    assert LENGTH_AND_MAGIC.unpack_from(buf, LENGTH_OFFSET) == (length, magic)
    assert LENGTH_MAGIC_ATTRIBUTES.unpack_from(buf, LENGTH_OFFSET) == (length, magic, attributes)
    assert LENGTH_OFFSET + LENGTH_MAGIC_ATTRIBUTES.size == ATTRIBUTES_OFFSET + 2
    assert HEADER_BOUNDS.unpack_from(buf) == (base, length, magic, delta)


def test_attribute_bits() -> None:
    rec = [Record(0, 10, None, b"v")]
    cases = [
        ({"compression": CompressionType.ZSTD}, 0x04),
        ({"timestamp_type": TimestampType.LOG_APPEND_TIME, "log_append_time": 99}, 0x08),
        ({"is_transactional": True, "producer_id": 1}, 0x10),
        ({"is_control": True}, 0x20),
        ({"delete_horizon_ms": 5}, 0x40),
        ({"compression": "lz4", "is_transactional": True, "producer_id": 1}, 0x13),
    ]
    for kwargs, attributes in cases:
        header = read_batch_header(build_batch(rec, **kwargs))  # type: ignore[arg-type]
        assert header.attributes == attributes, kwargs


def test_log_append_time_overrides_record_timestamps() -> None:
    batch = build_batch(
        [Record(0, 10, None, b"a"), Record(1, 20, None, b"b")],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=777,
    )
    header, records = decode_batch(batch)
    assert header.max_timestamp == 777 and header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in records] == [777, 777]
    assert [r.timestamp_delta for r in records] == [0, 10]


def test_delete_horizon_is_the_base_timestamp() -> None:
    batch = build_batch([Record(3, 100, b"k", None)], base_offset=3, delete_horizon_ms=50)
    header, records = decode_batch(batch)
    assert header.has_delete_horizon and header.delete_horizon_ms == 50 == header.base_timestamp
    assert records[0].timestamp == 100 and records[0].timestamp_delta == 50


def test_compacted_batch_keeps_gaps_and_last_offset_delta() -> None:
    records = [Record(100, 1, b"a", b"1"), Record(104, 2, b"b", b"2")]
    batch = build_batch(records, base_offset=100, last_offset_delta=9, max_timestamp=5)
    header, out = decode_batch(batch)
    assert header.last_offset == 109 and header.max_timestamp == 5
    assert [r.offset_delta for r in out] == [0, 4] and content(out) == content(records)


def test_empty_batch_like_write_empty_header() -> None:
    batch = build_batch(
        [],
        base_offset=40,
        compression="gzip",
        last_offset_delta=3,
        producer_id=9,
        producer_epoch=1,
        base_sequence=4,
        max_timestamp=123,
    )
    header, records = decode_batch(batch)
    assert records == [] and len(batch) == RECORD_BATCH_OVERHEAD
    assert header.compression == CompressionType.NONE and header.records_count == 0
    assert (header.last_offset, header.base_timestamp, header.max_timestamp) == (43, -1, 123)


@pytest.mark.parametrize("marker", [ControlRecordType.COMMIT, ControlRecordType.ABORT])
def test_control_batch_layout(marker: ControlRecordType) -> None:
    batch = build_control_batch(
        marker,
        17,
        base_offset=50,
        timestamp=1000,
        producer_id=8,
        producer_epoch=2,
        partition_leader_epoch=3,
    )
    header, (record,) = decode_batch(batch)
    assert header.is_control and header.is_transactional and header.base_sequence == -1
    assert header.compression == CompressionType.NONE and header.records_count == 1
    assert (header.producer_id, header.producer_epoch, header.partition_leader_epoch) == (8, 2, 3)
    # ControlRecordTypeSchema v0 key, EndTxnMarker v0 value
    assert record.key == bytes.fromhex("0000") + int(marker).to_bytes(2, "big")
    assert record.value == bytes.fromhex("0000 00000011")
    assert decode_control_record(record) == ControlRecord(marker, 0, 17)
    # withEndTransactionMarker: 61 + endTxnMarkerValueSize() = 61 + (1 + 16): length varint,
    # attributes, tsDelta, offsetDelta, key length, 4-byte key, value length, 6-byte value, 0
    assert len(batch) == 61 + 17


def test_decode_control_record_rules() -> None:
    def rec(key: bytes | None, value: bytes | None) -> Record:
        return Record(0, 0, key, value)

    # a newer key version parses as version 0; unknown types are UNKNOWN; others carry no epoch
    assert decode_control_record(rec(bytes.fromhex("0001 0001"), bytes.fromhex("0005 00000002")))
    assert decode_control_record(rec(bytes.fromhex("0000 0063"), None)) == ControlRecord(
        ControlRecordType.UNKNOWN, 0, None
    )
    assert decode_control_record(rec(bytes.fromhex("0000 0002"), b"")).type == (
        ControlRecordType.LEADER_CHANGE
    )
    for key, value in [
        (None, b""),
        (b"\0\0\0", b""),
        (bytes.fromhex("ffff 0001"), bytes.fromhex("0000 00000001")),
        (bytes.fromhex("0000 0001"), None),
        (bytes.fromhex("0000 0001"), b"\0\0\0"),
        (bytes.fromhex("0000 0000"), bytes.fromhex("ffff 00000001")),
    ]:
        with pytest.raises(CorruptRecordError):
            decode_control_record(rec(key, value))
    with pytest.raises(InvalidArgumentError):
        build_control_batch(
            ControlRecordType.LEADER_CHANGE, 0, timestamp=0, producer_id=1, producer_epoch=0
        )


def test_stamping_outside_the_crc_keeps_it_valid() -> None:
    buf = bytearray(build_example())
    crc_before = bytes(buf[17:21])
    set_base_offset(buf, 1 << 40)
    set_partition_leader_epoch(buf, 12)
    assert bytes(buf[17:21]) == crc_before
    verify_crc(buf)
    header, records = decode_batch(buf)
    assert header.partition_leader_epoch == 12
    assert [r.offset for r in records] == [1 << 40, (1 << 40) + 1]


def test_set_max_timestamp_recomputes_the_crc() -> None:
    buf = bytearray(build_example())
    set_max_timestamp(buf, TimestampType.LOG_APPEND_TIME, 5555)
    verify_crc(buf)
    header, records = decode_batch(buf)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME and header.max_timestamp == 5555
    assert header.is_transactional  # other attribute bits untouched
    assert [r.timestamp for r in records] == [5555, 5555]
    unchanged = bytes(buf)
    set_max_timestamp(buf, TimestampType.LOG_APPEND_TIME, 5555)
    assert bytes(buf) == unchanged


def test_assign_offsets_over_several_batches() -> None:
    a = build_batch([Record(0, 1, None, b"a"), Record(1, 1, None, b"b")])
    b = build_batch([Record(0, 1, None, b"c")], compression="snappy")
    buf = bytearray(a + b)
    assert assign_offsets(buf, 100, partition_leader_epoch=4) == 103
    first, records_a = decode_batch(buf)
    second, records_b = decode_batch(buf, len(a))
    assert [r.offset for r in records_a + records_b] == [100, 101, 102]
    assert first.partition_leader_epoch == second.partition_leader_epoch == 4
    bad = bytearray(a + b"\0" * 10)
    with pytest.raises(CorruptRecordError):
        assign_offsets(bad, 7)
    assert bytes(bad[:8]) == bytes(8)  # untouched


def test_stamping_refuses_what_is_not_a_v2_batch() -> None:
    with pytest.raises(InvalidArgumentError):
        set_base_offset(bytearray(10), 1)
    legacy = bytearray(build_example())
    legacy[16] = 1
    with pytest.raises(InvalidArgumentError):
        set_partition_leader_epoch(legacy, 1)


def test_builder_validates_like_memory_records_builder() -> None:
    with pytest.raises(InvalidArgumentError, match="does not follow"):
        build_batch([Record(5, 0, None, None), Record(5, 0, None, None)], base_offset=5)
    with pytest.raises(InvalidArgumentError, match="does not follow"):
        build_batch([Record(4, 0, None, None)], base_offset=5)
    with pytest.raises(InvalidArgumentError, match="negative timestamp"):
        build_batch([Record(0, -2, None, None)])
    with pytest.raises(InvalidArgumentError, match="producer id"):
        build_batch([Record(0, 0, None, None)], is_transactional=True)
    with pytest.raises(InvalidArgumentError, match="producer_epoch"):
        build_batch([Record(0, 0, None, None)], producer_epoch=1 << 15)
    with pytest.raises(InvalidArgumentError, match="null header key"):
        build_batch([Record(0, 0, None, None, ((None, b""),))])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="unknown compression"):
        build_batch([], compression="lzma")


def test_invalid_utf8_header_keys_survive_a_round_trip() -> None:
    # Kafka accepts any bytes as a header key; surrogateescape keeps them exact.
    raw = build_batch([Record(0, 0, None, None, (("ok", b"1"),))])
    patched = bytearray(raw.replace(b"\x04ok", b"\x04\xff\xfe"))
    struct.pack_into(">I", patched, 17, compute_crc(patched))
    _, (record,) = decode_batch(patched)
    assert record.headers[0][0].encode("utf-8", "surrogateescape") == b"\xff\xfe"
    assert build_batch([record._replace(offset_delta=None)]) == bytes(patched)


def test_legacy_magic_is_reported_not_decoded() -> None:
    buf = bytearray(build_example())
    for magic in (0, 1):
        buf[16] = magic
        with pytest.raises(UnsupportedRecordFormatError, match=f"magic {magic} .legacy") as e:
            read_batch_header(buf, path="/data/t-0/00000000000000000000.log")
        assert e.value.position == 0 and e.value.magic == magic
        assert "of /data/t-0/00000000000000000000.log is not supported" in str(e.value)
    buf[16] = 3
    with pytest.raises(CorruptRecordError, match="invalid magic byte 3"):
        read_batch_header(buf)


def test_unknown_compression_id_is_corrupt() -> None:
    buf = bytearray(build_batch([Record(0, 0, None, b"v")]))
    buf[22] |= 0x07
    struct.pack_into(">I", buf, 17, compute_crc(buf))
    header = read_batch_header(buf)
    assert header.compression_id == 7
    with pytest.raises(CorruptRecordError, match="unknown compression type id 7"):
        _ = header.compression
    with pytest.raises(CorruptRecordError, match="unknown compression type id 7"):
        decode_batch(buf)


def test_increment_sequence_wraps() -> None:
    assert increment_sequence(5, 3) == 8
    assert increment_sequence(2**31 - 2, 3) == 1


@pytest.mark.parametrize("codec", list(CompressionType))
@given(records=record_lists(), data=st.data())
@settings(max_examples=40, deadline=None)
def test_round_trip(codec: CompressionType, records: list[Record], data: st.DataObject) -> None:
    kwargs = data.draw(
        st.fixed_dictionaries(
            {},
            optional={
                "timestamp_type": st.sampled_from(list(TimestampType)[1:]),
                "partition_leader_epoch": st.integers(-1, 2**31 - 1),
                "producer_epoch": st.integers(-1, 2**15 - 1),
                "base_sequence": st.integers(-1, 2**31 - 1),
                "is_control": st.booleans(),
            },
        )
    )
    transactional = data.draw(st.booleans())
    producer_id = data.draw(st.integers(0 if transactional else -1, 2**63 - 1))
    base = records[0].offset
    batch = build_batch(
        records,
        base_offset=base,
        compression=codec,
        is_transactional=transactional,
        producer_id=producer_id,
        **kwargs,
    )
    header, out = decode_batch(batch)
    assert header.records_count == len(records) and header.base_offset == base
    assert header.compression == (codec if records else CompressionType.NONE)
    assert header.is_transactional == transactional and header.producer_id == producer_id
    assert header.last_offset == records[-1].offset
    assert header.max_timestamp == max([NO_TIMESTAMP] + [r.timestamp for r in records])
    if header.timestamp_type == TimestampType.CREATE_TIME:
        assert content(out) == content(records)
    assert [r.offset_delta for r in out] == [r.offset - base for r in records]
    if header.timestamp_type == TimestampType.CREATE_TIME and codec == CompressionType.NONE:
        # re-encoding what was read gives the same bytes
        again = build_batch(
            out,
            base_offset=base,
            compression=codec,
            is_transactional=transactional,
            producer_id=producer_id,
            **kwargs,
        )
        assert again == batch
