"""The ``__remote_log_metadata`` serde writes and reads Kafka's exact bytes.

The hex vectors marked "Kafka 4.1.0" were produced by Kafka's own ``RemoteLogMetadataSerde``
(kafka-storage 4.1.0 from Maven Central) for the inputs written next to them; the worked example
is KAFKA-FACTS 1.5, checked field by field.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.metadata import serde
from tierlog.metadata.serde import (
    DecodedRecord,
    RemoteLogSegmentMetadataSnapshot,
    decode_record,
    deserialize,
    encode_record,
    serialize,
)
from tierlog.spi import (
    CustomMetadata,
    InvalidArgumentError,
    MetadataRecordError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    Uuid,
)

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
TOPIC_ID = Uuid.from_string("Bp9TDduJRGa9Q5rlvCJOxg")
TIP = TopicIdPartition(TOPIC_ID, "foo", 0)
SEGMENT_ID = RemoteLogSegmentId(TIP, Uuid.from_bytes(bytes(range(1, 17))))

# KAFKA-FACTS 1.5, one row per field.
WORKED_HEX = (
    "01"  # frame version
    "00"  # apiKey 0
    "00"  # version 0
    "04" "666f6f"  # TopicIdPartition.Name "foo"
    "069f530ddb894466bd439ae5bc224ec6"  # TopicIdPartition.Id
    "00000000"  # TopicIdPartition.Partition
    "00"  # TopicIdPartitionEntry tagged fields
    "0102030405060708090a0b0c0d0e0f10"  # RemoteLogSegmentIdEntry.Id
    "00"  # RemoteLogSegmentIdEntry tagged fields
    "0000000000000000"  # StartOffset 0
    "0000000000000063"  # EndOffset 99
    "00000001"  # BrokerId 1
    "0000018bcfe56800"  # MaxTimestampMs 1700000000000
    "0000018bcfe56be8"  # EventTimestampMs 1700000001000
    "02"  # SegmentLeaderEpochs: 1 element
    "00000000" "0000000000000000" "00"  # {LeaderEpoch 0, Offset 0, no tags}
    "00000400"  # SegmentSizeInBytes 1024
    "03" "cafe"  # CustomMetadata
    "00"  # RemoteLogSegmentState COPY_SEGMENT_STARTED
    "01" "000101"  # one tagged field: TxnIndexEmpty (tag 0, size 1) = true
)  # fmt: skip
WORKED = bytes.fromhex(WORKED_HEX)
WORKED_MODEL = RemoteLogSegmentMetadata(
    SEGMENT_ID,
    0,
    99,
    1700000000000,
    1,
    1700000001000,
    1024,
    {0: 0},
    CustomMetadata(b"\xca\xfe"),
    S.COPY_SEGMENT_STARTED,
    True,
)

# The shared prefix of every segment-id-carrying record below: "foo", topic id, partition 0,
# no tags, segment id, no tags.
SEGMENT_ID_HEX = (
    "04666f6f069f530ddb894466bd439ae5bc224ec600000000000102030405060708090a0b0c0d0e0f1000"
)

# Kafka 4.1.0 vectors: (model, hex).
KAFKA_VECTORS: list[tuple[object, str]] = [
    (WORKED_MODEL, WORKED_HEX),
    (
        RemoteLogSegmentMetadata(
            SEGMENT_ID, 0, 99, 1700000000000, 1, 1700000001000, 1024, {0: 0}, None
        ),
        "0100" "00" + SEGMENT_ID_HEX + "0000000000000000" "0000000000000063" "00000001"
        "0000018bcfe56800" "0000018bcfe56be8" "02" "00000000" "0000000000000000" "00"
        "00000400" "00" "00" "00",
    ),
    (
        RemoteLogSegmentMetadata(
            SEGMENT_ID, 0, 100, -1, 1, 123, 1024, {2: 80, 0: 0, 1: 20},
            CustomMetadata(b""), S.COPY_SEGMENT_FINISHED,
        ),
        "0100" "00" + SEGMENT_ID_HEX + "0000000000000000" "0000000000000064" "00000001"
        "ffffffffffffffff" "000000000000007b" "04" "00000000" "0000000000000000" "00"
        "00000001" "0000000000000014" "00" "00000002" "0000000000000050" "00"
        "00000400" "01" "01" "00",
    ),
    (
        RemoteLogSegmentMetadataUpdate(
            SEGMENT_ID, 1700000002000, CustomMetadata(bytes([0, 1, 2, 3])),
            S.COPY_SEGMENT_FINISHED, 2,
        ),
        "0101" "00" + SEGMENT_ID_HEX + "00000002" "0000018bcfe56fd0" "05" "00010203" "01" "00",
    ),
    (
        RemoteLogSegmentMetadataUpdate(
            SEGMENT_ID, 1700000003000, None, S.DELETE_SEGMENT_STARTED, -1
        ),
        "0101" "00" + SEGMENT_ID_HEX + "ffffffff" "0000018bcfe573b8" "00" "02" "00",
    ),
    (
        RemotePartitionDeleteMetadata(
            TopicIdPartition(TOPIC_ID, "foo", 7), P.DELETE_PARTITION_MARKED, 1700000004000, 0
        ),
        "0102" "00" "04666f6f" "069f530ddb894466bd439ae5bc224ec6" "00000007" "00"
        "00000000" "0000018bcfe577a0" "00" "00",
    ),
    (
        RemoteLogSegmentMetadataSnapshot(
            SEGMENT_ID.id, 5, 1 << 40, 9, 3, 10, 77, CustomMetadata(b"\x09"),
            S.DELETE_SEGMENT_FINISHED, {7: 1 << 40, -1: 5}, True,
        ),
        "0103" "00" "0102030405060708090a0b0c0d0e0f10" "0000000000000005" "0000010000000000"
        "00000003" "0000000000000009" "000000000000000a" "03" "ffffffff" "0000000000000005" "00"
        "00000007" "0000010000000000" "00" "0000004d" "0209" "03" "01000101",
    ),
]  # fmt: skip


# Hand-checked vectors -------------------------------------------------------------------------


def test_worked_example_serializes_to_the_107_bytes() -> None:
    assert len(WORKED) == 107
    assert serialize(WORKED_MODEL) == WORKED


def test_worked_example_deserializes_to_the_model() -> None:
    value = deserialize(WORKED)
    assert value == WORKED_MODEL
    assert isinstance(value, RemoteLogSegmentMetadata)
    assert value.state is S.COPY_SEGMENT_STARTED
    assert value.txn_idx_empty is True
    assert value.custom_metadata == CustomMetadata(b"\xca\xfe")
    assert dict(value.segment_leader_epochs) == {0: 0}
    assert value.topic_id_partition == TIP
    record = decode_record(WORKED)
    assert (record.api_key, record.version, record.unknown_tagged_fields) == (0, 0, ())
    assert record.type_name == "RemoteLogSegmentMetadataRecord"


@pytest.mark.parametrize(("model", "hex_"), KAFKA_VECTORS)
def test_kafka_vectors_both_directions(model: Any, hex_: str) -> None:
    data = bytes.fromhex(hex_)
    assert serialize(model).hex() == hex_
    assert deserialize(data) == model
    assert encode_record(decode_record(data)) == data
    assert serde._decode_general(data) == decode_record(data)


def test_custom_metadata_null_versus_empty() -> None:
    none = serialize(KAFKA_VECTORS[1][0])  # type: ignore[arg-type]
    assert len(none) == 102
    assert none[99] == 0x00  # null
    assert none[100:] == b"\x00\x00"  # state, no tags (TxnIndexEmpty false is not written)
    empty = deserialize(bytes.fromhex(KAFKA_VECTORS[2][1]))
    assert isinstance(empty, RemoteLogSegmentMetadata)
    assert empty.custom_metadata == CustomMetadata(b"")
    assert bytes.fromhex(KAFKA_VECTORS[2][1])[-3] == 0x01  # empty, not null
    assert deserialize(none).custom_metadata is None  # type: ignore[union-attr]


def test_update_and_partition_delete_layouts() -> None:
    update = serialize(
        RemoteLogSegmentMetadataUpdate(SEGMENT_ID, 5, None, S.DELETE_SEGMENT_FINISHED, 9)
    )
    assert update[:3] == b"\x01\x01\x00"
    assert update[3:45].hex() == SEGMENT_ID_HEX
    assert update[45:] == bytes.fromhex("000000090000000000000005000300")
    delete = serialize(
        RemotePartitionDeleteMetadata(
            TopicIdPartition(Uuid(0, 1), "bar", 2), P.DELETE_PARTITION_FINISHED, -7, 4
        )
    )
    assert delete == bytes.fromhex(
        "010200" "04626172" "00000000000000000000000000000001" "00000002" "00"
        "00000004" "fffffffffffffff9" "02" "00"
    )  # fmt: skip


def test_long_names_and_custom_metadata_use_multi_byte_varints() -> None:
    tip = TopicIdPartition(TOPIC_ID, "t" * 200, 0)
    model = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, Uuid(1, 2)), 0, 1, 0, 0, 0, 0, {0: 0}, CustomMetadata(b"x" * 300)
    )
    data = serialize(model)
    assert data[3:5] == bytes([0xC9, 0x01])  # 201 = len + 1
    assert bytes([0xAD, 0x02]) + b"x" * 300 in data  # 301
    assert deserialize(data) == model
    assert serde._decode_general(data) == decode_record(data)


def test_snapshot_create_and_equality() -> None:
    snapshot = RemoteLogSegmentMetadataSnapshot.create(WORKED_MODEL)
    assert snapshot.segment_id == SEGMENT_ID.id
    assert snapshot == deserialize(serialize(snapshot))
    assert hash(snapshot) == hash(RemoteLogSegmentMetadataSnapshot.create(WORKED_MODEL))
    with pytest.raises(InvalidArgumentError, match="segmentLeaderEpochs"):
        RemoteLogSegmentMetadataSnapshot(
            Uuid(1, 1), 0, 0, 0, 0, 0, 0, None, S.COPY_SEGMENT_STARTED, {}
        )


# Unknown tagged fields -------------------------------------------------------------------------


def _with_top_tags(record: bytes, version: int, section: str) -> bytes:
    """``record`` (empty top-level section) with another version and tagged-field section."""
    assert record[-1] == 0
    return record[:2] + bytes([version]) + record[3:-1] + bytes.fromhex(section)


def test_kafka_20033_v1_segment_record_keeps_broker_leader_epoch_tag() -> None:
    # v1 RemoteLogSegmentMetadataRecord: TxnIndexEmpty (tag 0) and BrokerLeaderEpoch = 5 (tag 1).
    v1 = b"\x01\x00\x01" + WORKED[3:103] + bytes.fromhex("02000101010400000005")
    record = decode_record(v1)
    assert record.version == 1
    assert record.value == WORKED_MODEL
    assert record.unknown_tagged_fields == ((1, b"\x00\x00\x00\x05"),)
    assert encode_record(record) == v1
    assert serialize(record.value) == WORKED  # the model alone is written as version 0


def test_kafka_20033_v1_update_record_keeps_its_tags() -> None:
    # v1 update: BrokerLeaderEpoch = 9 (tag 0) and EndOffset = 99 (tag 1), both unknown here.
    v0 = bytes.fromhex(KAFKA_VECTORS[3][1])
    v1 = _with_top_tags(v0, 1, "0200040000000901080000000000000063")
    record = decode_record(v1)
    assert record.value == KAFKA_VECTORS[3][0]
    assert record.unknown_tagged_fields == (
        (0, bytes.fromhex("00000009")),
        (1, bytes.fromhex("0000000000000063")),
    )
    assert encode_record(record) == v1


def test_unknown_top_level_tags_on_every_record_type() -> None:
    for _model, hex_ in KAFKA_VECTORS[1:]:
        data = bytes.fromhex(hex_)
        if data[-1] != 0:
            continue
        tagged = _with_top_tags(data, 0, "0205007f02abcd")
        record = decode_record(tagged)
        assert record.unknown_tagged_fields == ((5, b""), (127, b"\xab\xcd"))
        assert encode_record(record) == tagged
    snapshot_with_tags = bytes.fromhex(KAFKA_VECTORS[-1][1])[:-4] + bytes.fromhex(
        "02000101c80101ee"
    )  # TxnIndexEmpty and tag 200 (a two-byte varint)
    record = decode_record(snapshot_with_tags)
    assert record.unknown_tagged_fields == ((200, b"\xee"),)
    assert encode_record(record) == snapshot_with_tags


def test_unknown_tags_in_nested_structs_are_skipped() -> None:
    # Tags in TopicIdPartitionEntry (offset 27), RemoteLogSegmentIdEntry (offset 44) and the
    # epoch entry (offset 94); Kafka 4.1.0 reads these bytes to the worked example's model.
    nested = (
        WORKED[:27]
        + bytes.fromhex("010502abcd")
        + WORKED[28:44]
        + bytes.fromhex("0201000201ff")
        + WORKED[45:94]
        + bytes.fromhex("010703010203")
        + WORKED[95:]
    )
    record = decode_record(nested)
    assert record.value == WORKED_MODEL
    assert record.unknown_tagged_fields == ()
    assert encode_record(record) == WORKED  # nested unknown tags are not kept
    update = bytes.fromhex(KAFKA_VECTORS[3][1])
    update_nested = update[:27] + bytes.fromhex("010000") + update[28:]
    assert deserialize(update_nested) == KAFKA_VECTORS[3][0]
    delete = bytes.fromhex(KAFKA_VECTORS[5][1])
    delete_nested = delete[:27] + bytes.fromhex("01090100") + delete[28:]
    assert deserialize(delete_nested) == KAFKA_VECTORS[5][0]


def test_repeated_unknown_tags_are_kept() -> None:
    # Kafka's reader keeps every raw tagged field, a repeated one too.
    data = _with_top_tags(bytes.fromhex(KAFKA_VECTORS[4][1]), 0, "030301aa0301bb0400")
    record = decode_record(data)
    assert record.unknown_tagged_fields == ((3, b"\xaa"), (3, b"\xbb"), (4, b""))
    assert encode_record(record) == data


def test_tags_out_of_order_are_read_and_written_in_order() -> None:
    update = bytes.fromhex(KAFKA_VECTORS[4][1])
    record = decode_record(_with_top_tags(update, 0, "0209000300"))
    assert record.unknown_tagged_fields == ((9, b""), (3, b""))
    assert encode_record(record) == _with_top_tags(update, 0, "0203000900")


# Errors --------------------------------------------------------------------------------------


def _patched(data: bytes, offset: int, replacement: str) -> bytes:
    raw = bytes.fromhex(replacement)
    return data[:offset] + raw + data[offset + len(raw) :]


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"\x00" + WORKED[1:], "frame version 0"),
        (b"\x02" + WORKED[1:], "frame version 2"),
        (b"\x01\x04\x00" + WORKED[3:], "unknown apiKey 4"),
        (b"\x01\x80\x80\x02\x00" + WORKED[3:], "apiKey 32768 is too large"),
        (b"\x01\x00\x80\x80\x02" + WORKED[3:], "version 32768 is too large"),
        (b"\x81\x80\x80\x80\x80\x01", "longer than 5 bytes"),
        (WORKED + b"\x00", "Found 1 byte(s) of garbage after apiKey 0"),
        (WORKED + b"abc", "Found 3 byte(s) of garbage after apiKey 0"),
        (b"", "frame version at offset 0"),
        (b"\x01\x00", "version at offset 2"),
        (_patched(WORKED, 3, "00"), "non-nullable string RemoteLogSegmentId.TopicIdPartition.Name"),
        (_patched(WORKED, 81, "00"), "non-nullable array SegmentLeaderEpochs at offset 81"),
        (WORKED[:81] + b"\x01" + WORKED[95:], "segmentLeaderEpochs can not be null or empty"),
        (_patched(WORKED, 102, "04"), "invalid RemoteLogSegmentState id 4 at offset 102"),
        (_patched(WORKED, 102, "ff"), "invalid RemoteLogSegmentState id -1"),
        (_patched(WORKED, 45, "ffffffffffffffff"), "Unexpected start offset = -1"),
        (_patched(WORKED, 53, "0000000000000000"), None),  # end == start is valid
        (_patched(WORKED, 45, "0000000000000064"), "Unexpected end offset = 99"),
        (_patched(WORKED, 23, "ffffffff"), "partition must be >= 0"),
        (_patched(WORKED, 4, "ff"), "not valid UTF-8"),
        (WORKED[:103] + bytes.fromhex("0100020101"), "TxnIndexEmpty (tag 0)"),
        (_patched(WORKED, 81, "ffffffff0f"), "array SegmentLeaderEpochs at offset 81 has"),
        (_patched(WORKED, 3, "ffff03"), "has invalid length 65534"),
        (_patched(WORKED, 103, "ffffffff0f"), "announces 4294967295 tagged field(s)"),
        (
            _patched(bytes.fromhex(KAFKA_VECTORS[5][1]), 40, "03"),
            "invalid RemotePartitionDeleteState id 3 at offset 40",
        ),
        (
            _patched(bytes.fromhex(KAFKA_VECTORS[4][1]), 58, "09"),
            "invalid RemoteLogSegmentState id 9",
        ),
    ],
)
def test_malformed_records_raise_metadata_record_error(data: bytes, fragment: str | None) -> None:
    if fragment is None:
        decode_record(data)
        return
    with pytest.raises(MetadataRecordError, match=re.escape(fragment)):
        decode_record(data)
    with pytest.raises(MetadataRecordError, match=re.escape(fragment)):
        deserialize(data)


def test_wire_problems_are_reported_before_model_problems() -> None:
    # Kafka parses, then checks for garbage, then builds the model: the same order here.
    invalid_with_garbage = _patched(WORKED, 45, "ffffffffffffffff") + b"\x00"
    with pytest.raises(MetadataRecordError, match="garbage"):
        decode_record(invalid_with_garbage)
    bad_state_with_garbage = _patched(WORKED, 102, "07") + b"\x00"
    with pytest.raises(MetadataRecordError, match="garbage"):
        decode_record(bad_state_with_garbage)


def test_model_validation_failure_is_wrapped_with_the_cause() -> None:
    with pytest.raises(MetadataRecordError, match="invalid RemoteLogSegmentMetadataRecord") as info:
        decode_record(_patched(WORKED, 45, "ffffffffffffffff"))
    assert isinstance(info.value.__cause__, InvalidArgumentError)


@pytest.mark.parametrize("length", range(len(WORKED)))
def test_truncation_at_every_position_raises_metadata_record_error(length: int) -> None:
    with pytest.raises(MetadataRecordError, match=r"truncated record: .* at offset \d+"):
        decode_record(WORKED[:length])


@pytest.mark.parametrize("index", range(1, len(KAFKA_VECTORS)))
def test_truncation_of_every_vector_raises_metadata_record_error(index: int) -> None:
    data = bytes.fromhex(KAFKA_VECTORS[index][1])
    for length in range(len(data)):
        with pytest.raises(MetadataRecordError, match="truncated record"):
            decode_record(data[:length])


def test_truncation_names_the_field_and_offset() -> None:
    with pytest.raises(MetadataRecordError, match=r"StartOffset at offset 45 needs 8 byte\(s\)"):
        decode_record(WORKED[:50])
    with pytest.raises(MetadataRecordError, match="SegmentSizeInBytes at offset 95"):
        decode_record(WORKED[:97])
    with pytest.raises(MetadataRecordError, match="CustomMetadata at offset 100 needs 2"):
        decode_record(WORKED[:101])
    with pytest.raises(
        MetadataRecordError, match=re.escape("RemoteLogSegmentId.TopicIdPartition.Id")
    ):
        decode_record(WORKED[:10])


def test_null_value_is_refused() -> None:
    with pytest.raises(MetadataRecordError, match="tombstone"):
        decode_record(None)  # type: ignore[arg-type]


def test_bytearray_and_memoryview_are_accepted() -> None:
    assert deserialize(bytearray(WORKED)) == WORKED_MODEL
    assert deserialize(memoryview(WORKED)) == WORKED_MODEL


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([b"", b"\x01\x00\x00", b"\x01\x01\x00", b"\x01\x02\x00", b"\x01\x03\x00"]),
    st.binary(max_size=160),
)
def test_arbitrary_bytes_decode_or_raise_metadata_record_error(header: bytes, body: bytes) -> None:
    data = header + body
    try:
        record = decode_record(data)
    except MetadataRecordError:
        return
    assert encode_record(record)


@settings(max_examples=300)
@given(st.integers(0, 106), st.integers(0, 255))
def test_single_byte_corruption_never_leaks_another_exception(offset: int, value: int) -> None:
    data = WORKED[:offset] + bytes([value]) + WORKED[offset + 1 :]
    try:
        fast = decode_record(data)
    except MetadataRecordError as exc:
        with pytest.raises(MetadataRecordError) as general:
            serde._decode_general(data)
        assert str(general.value) == str(exc)
        return
    assert serde._decode_general(data) == fast


def test_serializing_an_unsupported_object_is_an_invalid_argument() -> None:
    with pytest.raises(InvalidArgumentError, match="no metadata record type for str"):
        serialize("not metadata")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        serialize(TIP)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("model", "fragment"),
    [
        (
            RemoteLogSegmentMetadata(SEGMENT_ID, 0, 1 << 63, 0, 0, 0, 0, {0: 0}),
            "EndOffset = 9223372036854775808 does not fit in an int64",
        ),
        (
            RemoteLogSegmentMetadata(SEGMENT_ID, 0, 1, 0, 1 << 31, 0, 0, {0: 0}),
            "BrokerId = 2147483648 does not fit in an int32",
        ),
        (
            RemoteLogSegmentMetadata(SEGMENT_ID, 0, 1, 0, 0, 0, -(1 << 31) - 1, {0: 0}),
            "SegmentSizeInBytes",
        ),
        (
            RemoteLogSegmentMetadata(SEGMENT_ID, 0, 1, 0, 0, 0, 0, {1 << 31: 0}),
            "SegmentLeaderEpochs leader epoch = 2147483648",
        ),
        (
            RemoteLogSegmentMetadata(
                RemoteLogSegmentId(TopicIdPartition(TOPIC_ID, "x" * 32768, 0), Uuid(1, 1)),
                0, 1, 0, 0, 0, 0, {0: 0},
            ),
            "RemoteLogSegmentId.TopicIdPartition.Name is 32768 UTF-8 bytes",
        ),
        (
            RemotePartitionDeleteMetadata(
                TopicIdPartition(TOPIC_ID, "foo", 1 << 31), P.DELETE_PARTITION_MARKED, 0, 0
            ),
            "TopicIdPartition.Partition = 2147483648",
        ),
        (
            RemoteLogSegmentMetadataUpdate(SEGMENT_ID, 1 << 64, None, S.COPY_SEGMENT_FINISHED, 0),
            "EventTimestampMs",
        ),
        (
            RemoteLogSegmentMetadataUpdate(SEGMENT_ID, 0, None, 1, 0),  # type: ignore[arg-type]
            "state must be a RemoteLogSegmentState",
        ),
        (
            RemoteLogSegmentMetadata(
                RemoteLogSegmentId(TopicIdPartition(TOPIC_ID, "\ud800", 0), Uuid(1, 1)),
                0, 1, 0, 0, 0, 0, {0: 0},
            ),
            "not encodable as UTF-8",
        ),
    ],
)  # fmt: skip
def test_values_that_do_not_fit_the_wire_types_name_the_field(model: Any, fragment: str) -> None:
    with pytest.raises(MetadataRecordError, match=re.escape(fragment)):
        serialize(model)


def test_decoded_record_checks_its_consistency() -> None:
    with pytest.raises(MetadataRecordError, match="apiKey 1 does not match"):
        DecodedRecord(1, 0, WORKED_MODEL)
    with pytest.raises(MetadataRecordError, match="tag 0 is a known field"):
        DecodedRecord(0, 0, WORKED_MODEL, ((0, b"\x01"),))
    with pytest.raises(MetadataRecordError, match="must be an unsigned 32-bit int"):
        DecodedRecord(0, 0, WORKED_MODEL, ((-1, b""),))
    with pytest.raises(MetadataRecordError, match="must be a \\(tag, bytes\\) pair"):
        DecodedRecord(0, 0, WORKED_MODEL, ((1, b"", 2),))  # type: ignore[arg-type]
    with pytest.raises(MetadataRecordError, match="tag 1 data must be bytes"):
        DecodedRecord(0, 0, WORKED_MODEL, ((1, "x"),))  # type: ignore[arg-type]
    with pytest.raises(MetadataRecordError, match="version must be in"):
        DecodedRecord(0, 1 << 15, WORKED_MODEL)
    with pytest.raises(MetadataRecordError, match="must be one of"):
        DecodedRecord(0, 0, TIP)  # type: ignore[arg-type]
    update = KAFKA_VECTORS[3][0]
    assert DecodedRecord(1, 0, update, ((0, b"\x05"),)).unknown_tagged_fields == ((0, b"\x05"),)  # type: ignore[arg-type]


# Round trips under hypothesis ------------------------------------------------------------------

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
uuids = st.builds(Uuid.from_int, st.integers(0, (1 << 128) - 1))
names = st.text(max_size=40) | st.sampled_from(
    ["foo", "__remote_log_metadata", "t\u00e9st-\U0001f600"]
)
topic_id_partitions = st.builds(TopicIdPartition, uuids, names, st.integers(0, (1 << 31) - 1))
segment_ids = st.builds(RemoteLogSegmentId, topic_id_partitions, uuids)
custom_metadata = st.none() | st.builds(CustomMetadata, st.binary(max_size=300))
epochs = st.dictionaries(INT32, INT64, min_size=1, max_size=8)
segment_states = st.sampled_from(list(S))


@st.composite
def segment_metadata(draw: st.DrawFn) -> RemoteLogSegmentMetadata:
    start = draw(st.integers(0, (1 << 63) - 1) | st.integers(0, 1000))
    end = draw(st.integers(start, (1 << 63) - 1))
    return RemoteLogSegmentMetadata(
        draw(segment_ids),
        start,
        end,
        draw(INT64),
        draw(INT32),
        draw(INT64),
        draw(INT32),
        draw(epochs),
        draw(custom_metadata),
        draw(segment_states),
        draw(st.booleans()),
    )


updates = st.builds(
    RemoteLogSegmentMetadataUpdate, segment_ids, INT64, custom_metadata, segment_states, INT32
)
partition_deletes = st.builds(
    RemotePartitionDeleteMetadata, topic_id_partitions, st.sampled_from(list(P)), INT64, INT32
)
snapshots = st.builds(
    RemoteLogSegmentMetadataSnapshot,
    uuids,
    INT64,
    INT64,
    INT64,
    INT32,
    INT64,
    INT32,
    custom_metadata,
    segment_states,
    epochs,
    st.booleans(),
)
metadata_values = segment_metadata() | updates | partition_deletes | snapshots
unknown_tags = st.dictionaries(
    st.integers(1, (1 << 32) - 1), st.binary(max_size=20), max_size=4
).map(lambda tags: tuple(sorted(tags.items())))


@st.composite
def decoded_records(draw: st.DrawFn) -> DecodedRecord:
    value = draw(metadata_values)
    tags = draw(unknown_tags)
    if isinstance(value, RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata):
        tags = draw(st.sampled_from([tags, ((0, b"\x07"), *tags)]))
    api_key = serde._api_key_of(value)
    assert api_key is not None
    if api_key == serde.SEGMENT_METADATA:  # tierlog's CleanerOffsets is known there
        tags = tuple(t for t in tags if t[0] != serde.CLEANER_OFFSETS_TAG)
    return DecodedRecord(api_key, draw(st.integers(0, 0x7FFF) | st.just(0)), value, tags)


@settings(max_examples=300)
@given(segment_metadata())
def test_segment_metadata_round_trips(model: RemoteLogSegmentMetadata) -> None:
    data = serialize(model)
    assert deserialize(data) == model
    assert encode_record(decode_record(data)) == data
    assert serde._decode_general(data) == decode_record(data)


@settings(max_examples=200)
@given(updates)
def test_updates_round_trip(model: RemoteLogSegmentMetadataUpdate) -> None:
    data = serialize(model)
    assert deserialize(data) == model
    assert serde._decode_general(data) == decode_record(data)


@settings(max_examples=200)
@given(partition_deletes)
def test_partition_deletes_round_trip(model: RemotePartitionDeleteMetadata) -> None:
    data = serialize(model)
    assert deserialize(data) == model
    assert encode_record(decode_record(data)) == data


@settings(max_examples=200)
@given(snapshots)
def test_snapshots_round_trip(model: RemoteLogSegmentMetadataSnapshot) -> None:
    data = serialize(model)
    assert deserialize(data) == model
    assert encode_record(decode_record(data)) == data


@settings(max_examples=300)
@given(decoded_records())
def test_decoded_records_round_trip_through_bytes(record: DecodedRecord) -> None:
    data = encode_record(record)
    assert decode_record(data) == record
    assert serde._decode_general(data) == record
    assert encode_record(decode_record(data)) == data
