"""The console formatter prints Kafka's ``RemoteLogMetadataFormatter`` lines exactly.

The expected lines are those of Kafka's ``RemoteLogMetadataFormatterTest`` and lines printed by
Kafka 4.1.0's formatter (kafka-storage from Maven Central) for the records of ``test_serde``.
"""

from __future__ import annotations

import pytest

from tierlog.metadata.formatter import format_record, kafka_string
from tierlog.metadata.serde import (
    RemoteLogSegmentMetadataSnapshot,
    decode_record,
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
    TopicPartition,
    Uuid,
)

S = RemoteLogSegmentState
TOPIC_ID = Uuid.from_string("Bp9TDduJRGa9Q5rlvCJOxg")
SEGMENT_ID = RemoteLogSegmentId(
    TopicIdPartition(TOPIC_ID, "foo", 0), Uuid.from_bytes(bytes(range(1, 17)))
)
SEGMENT_ID_TEXT = (
    "RemoteLogSegmentId{topicIdPartition=Bp9TDduJRGa9Q5rlvCJOxg:foo-0, id=AQIDBAUGBwgJCgsMDQ4PEA}"
)


def test_remote_log_metadata_formatter_test() -> None:
    # RemoteLogMetadataFormatterTest.testFormat, with its random ids.
    topic_id = Uuid.random()
    segment_id = Uuid.random()
    tp0 = TopicIdPartition(topic_id, "foo", 0)
    metadata = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tp0, segment_id),
        0,
        100,
        -1,
        1,
        123,
        1024,
        {0: 0, 1: 20, 2: 80},
        CustomMetadata(bytes(10)),
        S.COPY_SEGMENT_STARTED,
        True,
    )
    expected = (
        "partition: 0, offset: 0, value: "
        f"RemoteLogSegmentMetadata{{remoteLogSegmentId=RemoteLogSegmentId{{topicIdPartition="
        f"{topic_id}:foo-0, id={segment_id}}}, "
        "startOffset=0, endOffset=100, brokerId=1, maxTimestampMs=-1, "
        "eventTimestampMs=123, segmentLeaderEpochs={0=0, 1=20, 2=80}, segmentSizeInBytes=1024, "
        "customMetadata=Optional[CustomMetadata{10 bytes}], "
        "state=COPY_SEGMENT_STARTED, txnIdxEmpty=true}"
    )
    assert format_record(0, 0, serialize(metadata)) == expected
    assert format_record(0, 0, metadata) == expected
    assert format_record(0, 0, decode_record(serialize(metadata))) == expected


KAFKA_LINES = [
    (
        RemoteLogSegmentMetadata(
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
        ),
        f"RemoteLogSegmentMetadata{{remoteLogSegmentId={SEGMENT_ID_TEXT}, startOffset=0, "
        "endOffset=99, brokerId=1, maxTimestampMs=1700000000000, "
        "eventTimestampMs=1700000001000, segmentLeaderEpochs={0=0}, segmentSizeInBytes=1024, "
        "customMetadata=Optional[CustomMetadata{2 bytes}], state=COPY_SEGMENT_STARTED, "
        "txnIdxEmpty=true}",
    ),
    (
        RemoteLogSegmentMetadata(
            SEGMENT_ID, 0, 99, 1700000000000, 1, 1700000001000, 1024, {0: 0}, None
        ),
        f"RemoteLogSegmentMetadata{{remoteLogSegmentId={SEGMENT_ID_TEXT}, startOffset=0, "
        "endOffset=99, brokerId=1, maxTimestampMs=1700000000000, "
        "eventTimestampMs=1700000001000, segmentLeaderEpochs={0=0}, segmentSizeInBytes=1024, "
        "customMetadata=Optional.empty, state=COPY_SEGMENT_STARTED, txnIdxEmpty=false}",
    ),
    (
        RemoteLogSegmentMetadata(
            SEGMENT_ID,
            0,
            100,
            -1,
            1,
            123,
            1024,
            {2: 80, 0: 0, 1: 20},
            CustomMetadata(b""),
            S.COPY_SEGMENT_FINISHED,
        ),
        f"RemoteLogSegmentMetadata{{remoteLogSegmentId={SEGMENT_ID_TEXT}, startOffset=0, "
        "endOffset=100, brokerId=1, maxTimestampMs=-1, eventTimestampMs=123, "
        "segmentLeaderEpochs={0=0, 1=20, 2=80}, segmentSizeInBytes=1024, "
        "customMetadata=Optional[CustomMetadata{0 bytes}], state=COPY_SEGMENT_FINISHED, "
        "txnIdxEmpty=false}",
    ),
    (
        RemoteLogSegmentMetadataUpdate(
            SEGMENT_ID, 1700000002000, CustomMetadata(bytes(4)), S.COPY_SEGMENT_FINISHED, 2
        ),
        f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId={SEGMENT_ID_TEXT}, "
        "customMetadata=Optional[CustomMetadata{4 bytes}], state=COPY_SEGMENT_FINISHED, "
        "eventTimestampMs=1700000002000, brokerId=2}",
    ),
    (
        RemoteLogSegmentMetadataUpdate(
            SEGMENT_ID, 1700000003000, None, S.DELETE_SEGMENT_STARTED, -1
        ),
        f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId={SEGMENT_ID_TEXT}, "
        "customMetadata=Optional.empty, state=DELETE_SEGMENT_STARTED, "
        "eventTimestampMs=1700000003000, brokerId=-1}",
    ),
    (
        RemotePartitionDeleteMetadata(
            TopicIdPartition(TOPIC_ID, "foo", 7),
            RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
            1700000004000,
            0,
        ),
        "RemotePartitionDeleteMetadata{topicPartition=Bp9TDduJRGa9Q5rlvCJOxg:foo-7, "
        "state=DELETE_PARTITION_MARKED, eventTimestampMs=1700000004000, brokerId=0}",
    ),
]


@pytest.mark.parametrize(("value", "text"), KAFKA_LINES)
def test_lines_match_kafka(value: object, text: str) -> None:
    assert kafka_string(value) == text
    line = format_record(3, 42, serialize(value))  # type: ignore[arg-type]
    assert line == f"partition: 3, offset: 42, value: {text}"


def test_snapshot_string_matches_kafka() -> None:
    snapshot = RemoteLogSegmentMetadataSnapshot(
        SEGMENT_ID.id,
        5,
        1 << 40,
        9,
        3,
        10,
        77,
        CustomMetadata(b"\x09"),
        S.DELETE_SEGMENT_FINISHED,
        {7: 1 << 40, -1: 5},
        True,
    )
    expected = (
        "RemoteLogSegmentMetadataSnapshot{segmentId=AQIDBAUGBwgJCgsMDQ4PEA, startOffset=5, "
        "endOffset=1099511627776, maxTimestampMs=9, segmentLeaderEpochs={-1=5, 7=1099511627776}, "
        "segmentSizeInBytes=77, customMetadata=Optional[CustomMetadata{1 bytes}], "
        "state=DELETE_SEGMENT_FINISHED, txnIdxEmpty=true}"
    )
    assert kafka_string(snapshot) == expected
    assert format_record(0, 1, serialize(snapshot)) == f"partition: 0, offset: 1, value: {expected}"


def test_parts_use_kafkas_strings() -> None:
    assert kafka_string(SEGMENT_ID) == SEGMENT_ID_TEXT
    assert kafka_string(SEGMENT_ID.topic_id_partition) == "Bp9TDduJRGa9Q5rlvCJOxg:foo-0"
    assert kafka_string(TopicPartition("foo", 3)) == "foo-3"
    assert kafka_string(Uuid(0, 1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert kafka_string(CustomMetadata(b"abc")) == "CustomMetadata{3 bytes}"
    assert kafka_string(S.DELETE_SEGMENT_FINISHED) == "DELETE_SEGMENT_FINISHED"
    assert kafka_string(True) == "true"
    assert kafka_string(-5) == "-5"
    assert kafka_string(None) == "null"


def test_unsupported_objects_and_bad_values_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="no Kafka string form for float"):
        kafka_string(1.5)
    with pytest.raises(MetadataRecordError, match="tombstone"):
        format_record(0, 0, None)
    with pytest.raises(MetadataRecordError, match="frame version 0"):
        format_record(0, 0, b"\x00\x00\x00")
