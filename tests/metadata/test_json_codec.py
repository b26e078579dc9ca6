"""The JSON form of the metadata records (``tierlog.metadata.json_codec``), which ``tierlog
metadata decode`` prints and ``encode`` reads: Kafka's field names, exact round trips through
the bytes, and errors that name the field."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings

import tierlog.metadata
from tierlog.metadata import json_codec, serde
from tierlog.metadata.json_codec import record_from_json, record_to_json
from tierlog.metadata.serde import DecodedRecord, decode_record, encode_record
from tierlog.spi import MetadataRecordError, RemoteLogSegmentMetadata

from .test_serde import KAFKA_VECTORS, WORKED, decoded_records


def test_the_mapping_lives_in_json_codec_and_the_package_still_exports_it() -> None:
    """serde.py is the binary serde only; ``tierlog.metadata`` keeps offering the mapping."""
    assert "record_to_json" not in serde.__all__
    assert "record_from_json" not in serde.__all__
    assert tierlog.metadata.record_to_json is json_codec.record_to_json
    assert tierlog.metadata.record_from_json is json_codec.record_from_json


def test_worked_example_json() -> None:
    assert record_to_json(decode_record(WORKED)) == {
        "apiKey": 0,
        "version": 0,
        "type": "RemoteLogSegmentMetadataRecord",
        "remoteLogSegmentId": {
            "topicIdPartition": {"name": "foo", "id": "Bp9TDduJRGa9Q5rlvCJOxg", "partition": 0},
            "id": "AQIDBAUGBwgJCgsMDQ4PEA",
        },
        "startOffset": 0,
        "endOffset": 99,
        "brokerId": 1,
        "maxTimestampMs": 1700000000000,
        "eventTimestampMs": 1700000001000,
        "segmentLeaderEpochs": [{"leaderEpoch": 0, "offset": 0}],
        "segmentSizeInBytes": 1024,
        "customMetadata": "cafe",
        "remoteLogSegmentState": "COPY_SEGMENT_STARTED",
        "txnIndexEmpty": True,
        "unknownTaggedFields": [],
    }


SEGMENT_FIELDS = [
    "startOffset",
    "endOffset",
    "brokerId",
    "maxTimestampMs",
    "eventTimestampMs",
    "segmentLeaderEpochs",
    "segmentSizeInBytes",
    "customMetadata",
    "remoteLogSegmentState",
    "txnIndexEmpty",
]


def test_keys_come_in_schema_order() -> None:
    """``decode`` prints the keys in this order (json.dumps keeps it): the schema's, the id
    first, the record's header before and its unknown tags after."""
    segment = record_to_json(decode_record(WORKED))
    assert list(segment) == [
        "apiKey",
        "version",
        "type",
        "remoteLogSegmentId",
        *SEGMENT_FIELDS,
        "unknownTaggedFields",
    ]
    snapshot = record_to_json(decode_record(bytes.fromhex(KAFKA_VECTORS[6][1])))
    assert list(snapshot) == [
        "apiKey",
        "version",
        "type",
        "segmentId",
        *SEGMENT_FIELDS,
        "unknownTaggedFields",
    ]


def test_json_of_the_other_record_types() -> None:
    update = record_to_json(decode_record(bytes.fromhex(KAFKA_VECTORS[4][1])))
    assert update == {
        "apiKey": 1,
        "version": 0,
        "type": "RemoteLogSegmentMetadataUpdateRecord",
        "remoteLogSegmentId": {
            "topicIdPartition": {"name": "foo", "id": "Bp9TDduJRGa9Q5rlvCJOxg", "partition": 0},
            "id": "AQIDBAUGBwgJCgsMDQ4PEA",
        },
        "brokerId": -1,
        "eventTimestampMs": 1700000003000,
        "customMetadata": None,
        "remoteLogSegmentState": "DELETE_SEGMENT_STARTED",
        "unknownTaggedFields": [],
    }
    delete = record_to_json(decode_record(bytes.fromhex(KAFKA_VECTORS[5][1])))
    assert delete == {
        "apiKey": 2,
        "version": 0,
        "type": "RemotePartitionDeleteMetadataRecord",
        "topicIdPartition": {"name": "foo", "id": "Bp9TDduJRGa9Q5rlvCJOxg", "partition": 7},
        "brokerId": 0,
        "eventTimestampMs": 1700000004000,
        "remotePartitionDeleteState": "DELETE_PARTITION_MARKED",
        "unknownTaggedFields": [],
    }
    snapshot = record_to_json(decode_record(bytes.fromhex(KAFKA_VECTORS[6][1])))
    assert snapshot["segmentId"] == "AQIDBAUGBwgJCgsMDQ4PEA"
    assert snapshot["segmentLeaderEpochs"] == [
        {"leaderEpoch": -1, "offset": 5},
        {"leaderEpoch": 7, "offset": 1 << 40},
    ]
    v1 = b"\x01\x00\x01" + WORKED[3:103] + bytes.fromhex("02000101010400000005")
    assert record_to_json(decode_record(v1))["unknownTaggedFields"] == [
        {"tag": 1, "data": "00000005"}
    ]


def test_json_defaults_and_numeric_states() -> None:
    minimal = {
        "apiKey": 1,
        "version": 0,
        "remoteLogSegmentId": {
            "topicIdPartition": {"name": "foo", "id": "Bp9TDduJRGa9Q5rlvCJOxg", "partition": 0},
            "id": "AQIDBAUGBwgJCgsMDQ4PEA",
        },
        "brokerId": -1,
        "eventTimestampMs": 1700000003000,
        "remoteLogSegmentState": 2,
    }
    assert encode_record(record_from_json(minimal)) == bytes.fromhex(KAFKA_VECTORS[4][1])


@settings(max_examples=300)
@given(decoded_records())
def test_json_round_trips_exactly(record: DecodedRecord) -> None:
    obj = record_to_json(record)
    assert record_from_json(obj) == record
    assert record_from_json(json.loads(json.dumps(obj))) == record
    assert encode_record(record_from_json(obj)) == encode_record(record)


def _worked_json() -> dict[str, Any]:
    return record_to_json(decode_record(WORKED))


def _edit(path: str, value: Any = ..., delete: bool = False) -> dict[str, Any]:
    obj = _worked_json()
    *parents, last = path.split(".")
    target: Any = obj
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if delete:
        del target[last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return obj


@pytest.mark.parametrize(
    ("obj", "fragment"),
    [
        ([], "the record must be a JSON object, got array"),
        (_edit("apiKey", delete=True), "missing field apiKey"),
        (_edit("apiKey", 9), "unknown apiKey 9"),
        (_edit("apiKey", "0"), "field apiKey must be an integer (int16), got string '0'"),
        (_edit("version", -1), "field version = -1 is out of range [0, 32767]"),
        (
            _edit("type", "Nope"),
            "field type is 'Nope' but apiKey 0 is RemoteLogSegmentMetadataRecord",
        ),
        (_edit("startOffset", delete=True), "missing field startOffset"),
        (_edit("startOffset", 1.5), "field startOffset must be an integer (int64), got number 1.5"),
        (_edit("startOffset", True), "field startOffset must be an integer (int64), got boolean"),
        (_edit("startOffset", -5), "Unexpected start offset = -5"),
        (_edit("brokerId", 1 << 31), "field brokerId = 2147483648 is out of range"),
        (_edit("endOffset", 1 << 63), "field endOffset = 9223372036854775808 is out of range"),
        (_edit("remoteLogSegmentId.id", "short"), "field remoteLogSegmentId.id: invalid Uuid"),
        (
            _edit("remoteLogSegmentId.topicIdPartition", "x"),
            "remoteLogSegmentId.topicIdPartition must be a JSON object, got string",
        ),
        (
            _edit("remoteLogSegmentId.topicIdPartition.name", delete=True),
            "missing field remoteLogSegmentId.topicIdPartition.name",
        ),
        (
            _edit("remoteLogSegmentId.topicIdPartition.partition", -1),
            "remoteLogSegmentId.topicIdPartition.partition = -1 is out of range",
        ),
        (
            _edit("remoteLogSegmentId.topicIdPartition.extra", 1),
            "unknown field(s) in remoteLogSegmentId.topicIdPartition: extra",
        ),
        (
            _edit("segmentLeaderEpochs", {}),
            "field segmentLeaderEpochs must be an array, got object",
        ),
        (_edit("segmentLeaderEpochs", []), "segmentLeaderEpochs can not be null or empty"),
        (
            _edit("segmentLeaderEpochs.0.offset", delete=True),
            "missing field segmentLeaderEpochs[0].offset",
        ),
        (
            _edit(
                "segmentLeaderEpochs",
                [{"leaderEpoch": 1, "offset": 0}, {"leaderEpoch": 1, "offset": 5}],
            ),
            "leader epoch 1 appears more than once",
        ),
        (_edit("customMetadata", "xyz"), "field customMetadata is not a hex string: 'xyz'"),
        (_edit("customMetadata", 5), "field customMetadata must be a hex string, got number"),
        (
            _edit("remoteLogSegmentState", "COPIED"),
            "field remoteLogSegmentState must be a RemoteLogSegmentState name or id",
        ),
        (
            _edit("remoteLogSegmentState", 7),
            "field remoteLogSegmentState must be a RemoteLogSegmentState",
        ),
        (_edit("txnIndexEmpty", 1), "field txnIndexEmpty must be true or false, got number 1"),
        (_edit("startOfset", 0), "unknown field(s) in the record: startOfset"),
        (_edit("unknownTaggedFields", [{"tag": 0, "data": ""}]), "tag 0 is a known field"),
        (
            _edit("unknownTaggedFields", [{"tag": 1 << 32, "data": ""}]),
            "does not fit an unsigned 32-bit varint",
        ),
        (_edit("unknownTaggedFields", [{"tag": 1}]), "missing field unknownTaggedFields[0].data"),
        (
            _edit("unknownTaggedFields", [{"tag": 1, "data": "zz"}]),
            "unknownTaggedFields[0].data is not a hex string",
        ),
    ],
)
def test_json_errors_name_the_field(obj: Any, fragment: str) -> None:
    with pytest.raises(MetadataRecordError, match=re.escape(fragment)):
        record_from_json(obj)


def test_json_optional_fields_default() -> None:
    obj = _worked_json()
    for key in ("type", "customMetadata", "txnIndexEmpty", "unknownTaggedFields"):
        del obj[key]
    record = record_from_json(obj)
    assert isinstance(record.value, RemoteLogSegmentMetadata)
    assert record.value.custom_metadata is None
    assert record.value.txn_idx_empty is False
    assert record.unknown_tagged_fields == ()
