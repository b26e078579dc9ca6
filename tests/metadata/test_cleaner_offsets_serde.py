"""tierlog's CleanerOffsets tagged field (apiKey 0, tag 1272) in the binary serde.

The cleaner-offset vector of a segment the log cleaner wrote (KIP-1272) travels in the add
record as a tagged field: hand-built bytes pin its layout (a compact array of ``{LeaderEpoch,
Offset, [tags]}`` after ``TxnIndexEmpty`` and before higher unknown tags), records without it
keep their bytes, every malformed payload is a ``MetadataRecordError`` naming the field, and the
fast decoder agrees with the general one. That Kafka's own classes read such a record is in
``test_cleaner_offsets_kafka.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.metadata import _wire, serde
from tierlog.metadata.serde import (
    CLEANER_OFFSETS_TAG,
    DecodedRecord,
    RemoteLogSegmentMetadataSnapshot,
    decode_record,
    deserialize,
    encode_record,
    serialize,
)
from tierlog.spi import (
    CustomMetadata,
    MetadataRecordError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    Uuid,
)

TIP = TopicIdPartition(Uuid.from_string("Bp9TDduJRGa9Q5rlvCJOxg"), "foo", 0)
SEGMENT_ID = RemoteLogSegmentId(TIP, Uuid.from_bytes(bytes(range(1, 17))))

# KAFKA-FACTS 1.5's worked example up to its top-level tagged-field section.
BODY_HEX = (
    "010000"  # frame version 1, apiKey 0, version 0
    "04666f6f" "069f530ddb894466bd439ae5bc224ec6" "00000000" "00"  # TopicIdPartition
    "0102030405060708090a0b0c0d0e0f10" "00"  # RemoteLogSegmentIdEntry.Id, no tags
    "0000000000000000" "0000000000000063" "00000001"  # StartOffset 0, EndOffset 99, BrokerId 1
    "0000018bcfe56800" "0000018bcfe56be8"  # MaxTimestampMs, EventTimestampMs
    "02" "00000000" "0000000000000000" "00"  # SegmentLeaderEpochs {0: 0}
    "00000400" "03" "cafe" "00"  # size 1024, CustomMetadata cafe, COPY_SEGMENT_STARTED
)  # fmt: skip
# CleanerOffsets {0: 100, 1: 155}: a compact array of two 13-byte entries (27 bytes).
VECTOR_HEX = "030000000000000000000000640000000001000000000000009b00"
TAG_HEX = "f8091b" + VECTOR_HEX  # tag 1272 (two-byte varint), size 27, data
WORKED = bytes.fromhex(BODY_HEX + "02000101" + TAG_HEX)  # TxnIndexEmpty, then the vector


def worked_model(cleaner_offsets: Mapping[int, int] | None) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        SEGMENT_ID,
        0,
        99,
        1700000000000,
        1,
        1700000001000,
        1024,
        {0: 0},
        CustomMetadata(b"\xca\xfe"),
        RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        True,
        cleaner_offsets,
    )


def with_section(section_hex: str) -> bytes:
    """The worked example's body with the given top-level tagged-field section."""
    return bytes.fromhex(BODY_HEX + section_hex)


def vector_tag(entries_hex: str, count_marker: str) -> str:
    """A CleanerOffsets tag whose data is ``count_marker`` then ``entries_hex``."""
    data = bytes.fromhex(count_marker + entries_hex)
    return "f809" + _wire.uvarint(len(data)).hex() + data.hex()


# The layout -------------------------------------------------------------------------------------
def test_the_vector_is_tag_1272_after_txn_index_empty() -> None:
    assert CLEANER_OFFSETS_TAG == 1272
    assert serialize(worked_model({1: 155, 0: 100})) == WORKED
    value = deserialize(WORKED)
    assert value == worked_model({0: 100, 1: 155})
    assert isinstance(value, RemoteLogSegmentMetadata)
    assert value.cleaner_offsets is not None and list(value.cleaner_offsets.items()) == [
        (0, 100),
        (1, 155),
    ]
    record = decode_record(WORKED)
    assert record.unknown_tagged_fields == ()
    assert encode_record(record) == WORKED


def test_without_a_vector_the_bytes_are_those_kafka_writes() -> None:
    plain = worked_model(None)
    assert serialize(plain) == with_section("01000101")  # KAFKA-FACTS 1.5, 107 bytes
    no_txn = dataclasses.replace(plain, txn_idx_empty=False)
    assert serialize(no_txn) == with_section("00")
    assert deserialize(with_section("00")) == no_txn
    assert deserialize(with_section("00")).cleaner_offsets is None  # type: ignore[union-attr]


def test_the_vector_alone_is_a_one_field_section() -> None:
    model = dataclasses.replace(worked_model({7: 0}), txn_idx_empty=False)
    data = serialize(model)
    expected = "01" + vector_tag("00000007000000000000000000", "02")
    assert data == with_section(expected)
    assert deserialize(data) == model


def test_unknown_tags_are_kept_on_both_sides_of_the_vector() -> None:
    # Tags 5 (below 1272) and 2000 (above), as a newer writer might add.
    section = "040001010501aa" + TAG_HEX + "d00f02bbcc"
    data = with_section(section)
    record = decode_record(data)
    assert record.value == worked_model({0: 100, 1: 155})
    assert record.unknown_tagged_fields == ((5, b"\xaa"), (2000, b"\xbb\xcc"))
    assert encode_record(record) == data
    assert serde._decode_general(data) == record


def test_a_decoded_record_cannot_carry_the_tag_raw() -> None:
    with pytest.raises(MetadataRecordError, match="tag 1272 is a known field"):
        DecodedRecord(0, 0, worked_model(None), ((CLEANER_OFFSETS_TAG, bytes.fromhex("01")),))


def test_other_record_types_keep_tag_1272_as_an_unknown_tag() -> None:
    snapshot = RemoteLogSegmentMetadataSnapshot.create(worked_model(None))
    plain = serialize(snapshot)
    assert plain.endswith(bytes.fromhex("01000101"))  # TxnIndexEmpty only
    data = plain[:-4] + bytes.fromhex("02000101" + TAG_HEX)
    record = decode_record(data)
    assert record.value == snapshot
    assert record.unknown_tagged_fields == ((CLEANER_OFFSETS_TAG, bytes.fromhex(VECTOR_HEX)),)
    assert encode_record(record) == data


def test_updates_keep_the_vector_of_the_add_record() -> None:
    model = worked_model({0: 100, 1: 155})
    update = RemoteLogSegmentMetadataUpdate(
        SEGMENT_ID, 1700000002000, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 2
    )
    assert deserialize(serialize(update)) == update
    finished = model.create_with_updates(update)
    assert finished.cleaner_offsets == {0: 100, 1: 155}
    assert deserialize(serialize(finished)) == finished


# Malformed vectors ------------------------------------------------------------------------------
ENTRY_0 = "00000000000000000000006400"
ENTRY_1 = "00000001000000000000009b00"


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ("01" + vector_tag("", "00"), "non-nullable array CleanerOffsets at offset 0 is null"),
        ("01" + vector_tag("", "01"), "the array is empty"),
        ("01" + vector_tag(ENTRY_0, "03"), "array CleanerOffsets at offset 0 has 2 element"),
        ("01" + vector_tag(ENTRY_0[:-2], "02"), "has 1 element"),
        ("01" + vector_tag(ENTRY_0 + "ee", "02"), "1 byte\\(s\\) after its last entry"),
        ("01" + vector_tag(ENTRY_1 + ENTRY_0, "03"), "leader epoch 0 after 1"),
        ("01" + vector_tag(ENTRY_0 + ENTRY_0, "03"), "leader epoch 0 after 0"),
        ("01" + vector_tag(ENTRY_0[:-2] + "010980", "02"), "CleanerOffsets\\[0\\] tag 9 size"),
        ("02" + TAG_HEX + TAG_HEX, "appears more than once"),
    ],
    ids=[
        "null",
        "empty",
        "count-beyond-data",
        "entry-cut-short",
        "trailing-byte",
        "descending",
        "repeated-epoch",
        "entry-tags-cut-short",
        "tag-twice",
    ],
)
def test_a_malformed_vector_names_the_field(section: str, problem: str) -> None:
    data = with_section(section)
    for decode in (decode_record, serde._decode_general):
        with pytest.raises(MetadataRecordError, match=problem) as caught:
            decode(data)
        assert "CleanerOffsets (tag 1272)" in str(caught.value)
        assert "RemoteLogSegmentMetadataRecord" in str(caught.value)


def test_tags_inside_an_entry_are_skipped_as_in_segment_leader_epochs() -> None:
    entry_with_tag = "000000000000000000000064010901ff"
    data = with_section("01" + vector_tag(entry_with_tag, "02"))
    assert deserialize(data) == dataclasses.replace(worked_model({0: 100}), txn_idx_empty=False)


@pytest.mark.parametrize(
    ("vector", "problem"),
    [
        ({1 << 31: 0}, "CleanerOffsets leader epoch = 2147483648 does not fit in an int32"),
        ({0: 1 << 63}, "CleanerOffsets offset of epoch 0 = 9223372036854775808 does not fit"),
        ({0: "x"}, "CleanerOffsets offset of epoch 0 must be an int64"),
    ],
)
def test_a_vector_that_does_not_fit_the_wire_is_refused(
    vector: dict[int, object], problem: str
) -> None:
    model = worked_model(vector)  # type: ignore[arg-type]
    with pytest.raises(
        MetadataRecordError, match=f"cannot encode RemoteLogSegmentMetadataRecord: {problem}"
    ):
        serialize(model)


# Round trips ------------------------------------------------------------------------------------
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
vectors = st.none() | st.dictionaries(INT32, INT64, min_size=1, max_size=6)
unknown_tags = st.dictionaries(
    st.integers(1, (1 << 32) - 1).filter(lambda tag: tag != CLEANER_OFFSETS_TAG),
    st.binary(max_size=8),
    max_size=3,
).map(lambda tags: tuple(sorted(tags.items())))


@st.composite
def cleaned_segments(draw: st.DrawFn) -> RemoteLogSegmentMetadata:
    start = draw(st.integers(0, 1 << 40))
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(
            TopicIdPartition(Uuid.random(), draw(st.text(max_size=12)), draw(st.integers(0, 99))),
            Uuid.random(),
        ),
        start,
        draw(st.integers(start, 1 << 41)),
        draw(INT64),
        draw(INT32),
        draw(INT64),
        draw(INT32),
        draw(st.dictionaries(INT32, INT64, min_size=1, max_size=4)),
        draw(st.none() | st.builds(CustomMetadata, st.binary(max_size=20))),
        draw(st.sampled_from(list(RemoteLogSegmentState))),
        draw(st.booleans()),
        draw(vectors),
    )


@settings(max_examples=300)
@given(cleaned_segments(), unknown_tags, st.integers(0, 0x7FFF))
def test_records_with_and_without_a_vector_round_trip(
    model: RemoteLogSegmentMetadata, tags: tuple[tuple[int, bytes], ...], version: int
) -> None:
    data = serialize(model)
    assert deserialize(data) == model
    assert serde._decode_general(data) == decode_record(data)
    assert encode_record(decode_record(data)) == data
    record = DecodedRecord(0, version, model, tags)
    encoded = encode_record(record)
    assert decode_record(encoded) == record
    assert serde._decode_general(encoded) == record
    without = serialize(dataclasses.replace(model, cleaner_offsets=None))
    if model.cleaner_offsets is None:
        assert data == without
    else:  # the same fields, then a section with one more tagged field
        section = 4 if model.txn_idx_empty else 1
        assert data[: len(without) - section] == without[:-section]
        assert data[len(without) - section] == without[-section] + 1  # the field count


def test_the_fast_decoder_reads_a_cleaned_segment_without_falling_back() -> None:
    """A compacted topic's replay decodes a cleaned segment's record per upload: the fast path
    takes it (unknown tags beside the vector still go to the general decoder)."""
    fast = serde._fast_segment(WORKED, 0)
    assert fast is not None and fast == serde._decode_general(WORKED)
    with_unknown = with_section("030001010501aa" + TAG_HEX)
    assert serde._fast_segment(with_unknown, 0) is None
    assert decode_record(with_unknown).unknown_tagged_fields == ((5, b"\xaa"),)
