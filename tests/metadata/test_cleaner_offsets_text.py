"""The cleaner-offset vector in tierlog's text forms of a metadata record.

``json_codec`` (``tierlog metadata decode``/``encode``, the dump's ``--format json``) writes it as
``cleanerOffsets``, a list like ``segmentLeaderEpochs``, only for a segment that has one; the
formatter (``tierlog metadata dump``, ``decode --format kafka``) appends ``cleanerOffsets={..}``
to Kafka's line of such a segment and leaves every other line as Kafka prints it. The dump's
line printer is driven directly here (the dump against a broker and against Kafka's own
formatter is in ``test_cleaner_offsets_kafka.py``).
"""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any

import pytest

from tierlog.cli import main
from tierlog.cli._metadata_dump import LinePrinter, Selection
from tierlog.metadata.formatter import format_record, kafka_string
from tierlog.metadata.json_codec import record_from_json, record_to_json
from tierlog.metadata.serde import DecodedRecord, decode_record, encode_record, serialize
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
KAFKA_LINE = (  # Kafka's formatter line of PLAIN (RemoteLogMetadataFormatterTest's layout)
    "partition: 0, offset: 0, value: RemoteLogSegmentMetadata{remoteLogSegmentId="
    "RemoteLogSegmentId{topicIdPartition=Bp9TDduJRGa9Q5rlvCJOxg:foo-0, "
    "id=AQIDBAUGBwgJCgsMDQ4PEA}, startOffset=0, endOffset=100, brokerId=1, maxTimestampMs=-1, "
    "eventTimestampMs=123, segmentLeaderEpochs={0=0, 1=20, 2=80}, segmentSizeInBytes=1024, "
    "customMetadata=Optional[CustomMetadata{10 bytes}], state=COPY_SEGMENT_STARTED, "
    "txnIdxEmpty=true}"
)
PLAIN = RemoteLogSegmentMetadata(
    SEGMENT_ID,
    0,
    100,
    -1,
    1,
    123,
    1024,
    {0: 0, 1: 20, 2: 80},
    CustomMetadata(bytes(10)),
    RemoteLogSegmentState.COPY_SEGMENT_STARTED,
    True,
)
CLEANED = dataclasses.replace(PLAIN, cleaner_offsets={2: 99, 0: 19, 1: 79})


# JSON -------------------------------------------------------------------------------------------
def test_json_lists_the_vector_after_txn_index_empty() -> None:
    out = record_to_json(decode_record(serialize(CLEANED)))
    assert out["cleanerOffsets"] == [
        {"leaderEpoch": 0, "offset": 19},
        {"leaderEpoch": 1, "offset": 79},
        {"leaderEpoch": 2, "offset": 99},
    ]
    keys = list(out)
    assert keys.index("cleanerOffsets") == keys.index("txnIndexEmpty") + 1
    assert keys[-1] == "unknownTaggedFields"
    assert record_from_json(json.loads(json.dumps(out))) == decode_record(serialize(CLEANED))


def test_json_of_a_segment_without_a_vector_has_no_key() -> None:
    out = record_to_json(decode_record(serialize(PLAIN)))
    assert "cleanerOffsets" not in out
    assert record_from_json(out).value == PLAIN
    assert record_from_json(out | {"cleanerOffsets": None}).value == PLAIN


def cleaned_json(cleaner_offsets: Any) -> dict[str, Any]:
    return record_to_json(decode_record(serialize(PLAIN))) | {"cleanerOffsets": cleaner_offsets}


@pytest.mark.parametrize(
    ("cleaner_offsets", "problem"),
    [
        ([], "field cleanerOffsets is empty: a vector holds at least one epoch"),
        ({"0": 1}, "field cleanerOffsets must be an array, got object"),
        ([{"leaderEpoch": 0}], "missing field cleanerOffsets\\[0\\].offset"),
        ([{"leaderEpoch": "0", "offset": 1}], "field cleanerOffsets\\[0\\].leaderEpoch must be"),
        ([{"leaderEpoch": 1 << 31, "offset": 1}], "cleanerOffsets\\[0\\].leaderEpoch = 2147483648"),
        ([{"leaderEpoch": 0, "offset": 1 << 63}], "cleanerOffsets\\[0\\].offset = "),
        (
            [{"leaderEpoch": 0, "offset": 1}, {"leaderEpoch": 0, "offset": 2}],
            "cleanerOffsets\\[1\\]: leader epoch 0 appears more than once",
        ),
        ([{"leaderEpoch": 0, "offset": 1, "epoch": 0}], "unknown field\\(s\\) in cleanerOffsets"),
    ],
)
def test_a_bad_json_vector_names_the_field(cleaner_offsets: Any, problem: str) -> None:
    with pytest.raises(MetadataRecordError, match=problem):
        record_from_json(cleaned_json(cleaner_offsets))


def test_an_update_record_has_no_vector_in_json() -> None:
    update = RemoteLogSegmentMetadataUpdate(
        SEGMENT_ID, 5, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1
    )
    out = record_to_json(decode_record(serialize(update)))
    assert "cleanerOffsets" not in out
    with pytest.raises(MetadataRecordError, match="unknown field\\(s\\) in the record"):
        record_from_json(out | {"cleanerOffsets": [{"leaderEpoch": 0, "offset": 1}]})


def test_the_cli_decodes_and_encodes_the_vector(capsys: pytest.CaptureFixture[str]) -> None:
    data = serialize(CLEANED)
    assert main(["metadata", "decode", data.hex()]) == 0
    printed = capsys.readouterr().out
    assert json.loads(printed)["cleanerOffsets"][2] == {"leaderEpoch": 2, "offset": 99}
    assert main(["metadata", "encode", printed]) == 0
    assert capsys.readouterr().out.strip() == data.hex()
    assert main(["metadata", "decode", "--format", "kafka", data.hex()]) == 0
    assert capsys.readouterr().out.rstrip("\n") == format_record(0, 0, CLEANED)


# Kafka's line -----------------------------------------------------------------------------------
def test_kafkas_line_is_unchanged_without_a_vector() -> None:
    assert format_record(0, 0, serialize(PLAIN)) == KAFKA_LINE


def test_a_vector_is_appended_in_java_map_form() -> None:
    line = format_record(0, 0, serialize(CLEANED))
    assert line == KAFKA_LINE[:-1] + ", cleanerOffsets={0=19, 1=79, 2=99}}"
    assert kafka_string(CLEANED).endswith("txnIdxEmpty=true, cleanerOffsets={0=19, 1=79, 2=99}}")
    single = dataclasses.replace(PLAIN, txn_idx_empty=False, cleaner_offsets={7: 0})
    assert kafka_string(single).endswith("txnIdxEmpty=false, cleanerOffsets={7=0}}")


def test_the_dump_prints_the_vector_in_both_formats() -> None:
    later = dataclasses.replace(CLEANED, cleaner_offsets={0: 19, 3: 400})
    values = [serialize(CLEANED), serialize(PLAIN), serialize(later)]
    kafka = LinePrinter("kafka", Selection(), io.StringIO())
    lines = [kafka.line(1, offset, None, value) for offset, value in enumerate(values)]
    assert lines == [
        format_record(1, 0, CLEANED),
        format_record(1, 1, PLAIN),
        format_record(1, 2, later),
    ]
    assert lines[0] is not None and lines[0].endswith(", cleanerOffsets={0=19, 1=79, 2=99}}")
    assert lines[2] is not None and lines[2].endswith(", cleanerOffsets={0=19, 3=400}}")
    assert kafka.stats.errors == [] and kafka.stats.newer_versions == []

    as_json = LinePrinter("json", Selection(topic_id=TIP.topic_id), io.StringIO())
    rows = [json.loads(as_json.line(1, o, b"k", v) or "null") for o, v in enumerate(values)]
    assert [row.get("cleanerOffsets") for row in rows] == [
        [{"leaderEpoch": e, "offset": o} for e, o in [(0, 19), (1, 79), (2, 99)]],
        None,
        [{"leaderEpoch": 0, "offset": 19}, {"leaderEpoch": 3, "offset": 400}],
    ]
    decoded = record_from_json(
        {k: v for k, v in rows[0].items() if k not in ("partition", "offset", "key", "key_text")}
    )
    assert isinstance(decoded, DecodedRecord) and encode_record(decoded) == values[0]
