"""``tierlog log dump``: Kafka's dump-log output for every file of a partition, JSON, checks.

Segments are written two ways: with tierlog's ``build_batch`` (every codec, transactional and
control batches, headers, null keys and values, LogAppendTime, a delete horizon) and with
kafka-python's ``DefaultRecordBatchBuilder``, an independent writer; both are dumped shallow and
deep, as text and JSON. Indexes come from tierlog's index APIs, correct and deliberately wrong.
Corrupt files must print what was readable, name the byte position and exit 1; usage errors
exit 2 before anything is printed.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

from tierlog.cli import main
from tierlog.log.batch import (
    ControlRecordType,
    TimestampType,
    build_batch,
    build_control_batch,
    set_base_offset,
    set_max_timestamp,
)
from tierlog.log.checkpoint import write_leader_epoch_checkpoint, write_partition_metadata
from tierlog.log.crc import crc32c
from tierlog.log.indexer import rebuild_indexes
from tierlog.log.offset_index import OffsetIndex
from tierlog.log.producer_snapshot import ProducerSnapshotEntry, write_producer_snapshot
from tierlog.log.reader import iter_batches, iter_batches_with_records
from tierlog.log.record import Record
from tierlog.log.recovery import OffsetsCheckpoint, write_offsets_checkpoint
from tierlog.log.time_index import TimeIndex
from tierlog.log.txn_index import AbortedTxn, TransactionIndex
from tierlog.spi import (
    CorruptRecordError,
    CustomMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    Uuid,
)

T0 = 1_700_000_000_000
LOG0 = "00000000000000000000.log"
INDEX0 = "00000000000000000000.index"
TIMEINDEX0 = "00000000000000000000.timeindex"


# --- helpers -----------------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["log", "dump", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = run(capsys, "--json", *argv)
    return code, json.loads(out), err


def tierlog_batches() -> list[bytes]:
    """Seven batches at offsets 0..13: every codec, transactions, control markers, headers."""
    return [
        build_batch(
            [
                Record(0, T0, b"k0", b"hello", (("h1", b"x"), ("h2", None))),
                Record(1, T0 + 1, None, b"null key"),
                Record(2, T0 + 2, b"k2", None),
            ],
            base_offset=0,
            partition_leader_epoch=0,
        ),
        build_batch(
            [Record(3, T0 + 3, b"k3", b"v3"), Record(4, T0 + 4, b"k4", b"v4")],
            base_offset=3,
            compression="gzip",
            producer_id=7,
            producer_epoch=2,
            base_sequence=10,
            is_transactional=True,
            partition_leader_epoch=1,
        ),
        build_batch(
            [Record(5, T0 + 5, b"k5", b"snappy " * 20), Record(6, T0 + 6, b"k6", b"")],
            base_offset=5,
            compression="snappy",
            partition_leader_epoch=1,
        ),
        build_batch(
            [Record(7, T0 + 7, b"k7", b"lz4 " * 30, (("trace", b"1"),))],
            base_offset=7,
            compression="lz4",
            timestamp_type=TimestampType.LOG_APPEND_TIME,
            log_append_time=T0 + 100,
            partition_leader_epoch=1,
        ),
        build_batch(
            [Record(8, T0 + 8, b"k8", b"zstd " * 30), Record(9, T0 + 9, b"k9", None)],
            base_offset=8,
            compression="zstd",
            delete_horizon_ms=T0 + 500,
            partition_leader_epoch=1,
        ),
        build_control_batch(
            ControlRecordType.COMMIT,
            3,
            base_offset=10,
            timestamp=T0 + 10,
            producer_id=7,
            producer_epoch=2,
            partition_leader_epoch=1,
        ),
        build_batch(
            [Record(11, T0 + 11, b"k11", b"aborted")],
            base_offset=11,
            producer_id=8,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
            partition_leader_epoch=1,
        )
        + build_control_batch(
            ControlRecordType.ABORT,
            4,
            base_offset=12,
            timestamp=T0 + 12,
            producer_id=8,
            producer_epoch=0,
            partition_leader_epoch=1,
        ),
    ]


def write_segment(directory: Path, batches: list[bytes], base: int = 0) -> Path:
    path = directory / f"{base:020d}.log"
    path.write_bytes(b"".join(batches))
    return path


def write_indexes(log: Path, base: int = 0) -> tuple[Path, Path]:
    """Indexes as a broker's recovery builds them (an entry for every batch but the first)."""
    index = log.with_suffix(".index")
    timeindex = log.with_suffix(".timeindex")
    with OffsetIndex(index, base, 1 << 16) as oi, TimeIndex(timeindex, base, 1 << 16) as ti:
        rebuild_indexes(
            (
                (p, h.base_offset, h.last_offset, h.max_timestamp, h.size_in_bytes)
                for p, h in iter_batches(log)
            ),
            oi,
            ti,
            0,
        )
    return index, timeindex


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    return write_segment(tmp_path, tierlog_batches())


def positions(log: Path) -> list[int]:
    return [p for p, _ in iter_batches(log)]


def batch_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("baseOffset: ")]


def record_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("| offset: ")]


# --- segments: text ----------------------------------------------------------------------------


def test_shallow_text_is_kafka_dump_log_format(
    capsys: pytest.CaptureFixture[str], segment: Path
) -> None:
    code, out, err = run(capsys, str(segment))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[:2] == [f"Dumping {segment}", "Log starting offset: 0"]
    headers = [h for _, h in iter_batches(segment)]
    first = headers[0]
    assert batch_lines(out)[0] == (
        "baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 "
        "producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false "
        "isControl: false deleteHorizonMs: OptionalLong.empty position: 0 "
        f"CreateTime: {T0 + 2} size: {first.size_in_bytes} magic: 2 compresscodec: none "
        f"crc: {first.crc} isvalid: true"
    )
    batches = batch_lines(out)
    assert len(batches) == len(headers) == 8
    assert not record_lines(out)
    codecs = [line.split("compresscodec: ")[1].split()[0] for line in batches]
    assert codecs == ["none", "gzip", "snappy", "lz4", "zstd", "none", "none", "none"]
    assert "baseSequence: 10 lastSequence: 11 producerId: 7 producerEpoch: 2" in batches[1]
    assert "isTransactional: true isControl: false" in batches[1]
    assert f"LogAppendTime: {T0 + 100}" in batches[3]
    assert f"deleteHorizonMs: OptionalLong[{T0 + 500}]" in batches[4]
    assert "isTransactional: true isControl: true" in batches[5]
    for line, (pos, h) in zip(batches, iter_batches(segment), strict=True):
        assert f" position: {pos} " in line and f" crc: {h.crc} isvalid: true" in line


def test_deep_text_prints_records_and_end_txn_markers(
    capsys: pytest.CaptureFixture[str], segment: Path
) -> None:
    code, out, err = run(capsys, "--deep", str(segment))
    assert (code, err) == (0, "")
    records = record_lines(out)
    assert len(records) == 13
    assert records[0] == (
        f"| offset: 0 CreateTime: {T0} keySize: 2 valueSize: 5 sequence: -1 headerKeys: [h1,h2]"
    )
    assert records[1] == (
        f"| offset: 1 CreateTime: {T0 + 1} keySize: -1 valueSize: 8 sequence: -1 headerKeys: []"
    )
    assert "keySize: 2 valueSize: -1" in records[2]
    assert "offset: 4 " in records[4] and "sequence: 11" in records[4]  # 10 + offset delta 1
    assert records[7] == (
        f"| offset: 7 LogAppendTime: {T0 + 100} keySize: 2 valueSize: 120 sequence: -1 "
        "headerKeys: [trace]"
    )
    assert records[10] == (
        f"| offset: 10 CreateTime: {T0 + 10} keySize: 4 valueSize: 6 sequence: -1 "
        "headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 3"
    )
    assert records[12].endswith("endTxnMarker: ABORT coordinatorEpoch: 4")
    # each batch line is followed by its records, as in Kafka
    lines = out.splitlines()
    assert lines[2].startswith("baseOffset: 0 ") and lines[3].startswith("| offset: 0 ")
    assert "key:" not in out and "payload:" not in out
    # --deep-iteration is Kafka's spelling
    assert run(capsys, "--deep-iteration", str(segment))[1] == out


def test_print_data_log_adds_keys_and_payloads_and_implies_deep(
    capsys: pytest.CaptureFixture[str], segment: Path
) -> None:
    code, out, _ = run(capsys, "--print-data-log", str(segment))
    assert code == 0
    records = record_lines(out)
    assert records[0].endswith("headerKeys: [h1,h2] key: k0 payload: hello")
    assert records[1].endswith("headerKeys: [] payload: null key")  # null key: no key part
    assert records[2].endswith("headerKeys: [] key: k2")  # null value: no payload part
    assert records[6].endswith("key: k6 payload: ")  # an empty value is not a null one
    assert records[10].endswith("endTxnMarker: COMMIT coordinatorEpoch: 3")  # no data
    assert records[5].endswith("key: k5 payload: " + "snappy " * 20)


# --- segments: JSON ----------------------------------------------------------------------------


def test_json_shallow_and_deep_match_the_reader(
    capsys: pytest.CaptureFixture[str], segment: Path
) -> None:
    code, doc, err = run_json(capsys, str(segment))
    assert (code, err) == (0, "")
    assert doc["version"] == 1 and doc["ok"] is True
    (file,) = doc["files"]
    assert file["kind"] == "log" and file["path"] == str(segment) and file["baseOffset"] == 0
    assert file["validBytes"] == segment.stat().st_size and file["trailingBytes"] == 0
    assert file["errors"] == []
    expected = list(iter_batches_with_records(segment))
    assert len(file["batches"]) == len(expected)
    for got, (pos, h, _) in zip(file["batches"], expected, strict=True):
        assert "records" not in got
        assert got == {
            "baseOffset": h.base_offset,
            "lastOffset": h.last_offset,
            "count": h.records_count,
            "baseSequence": h.base_sequence,
            "lastSequence": h.last_sequence,
            "producerId": h.producer_id,
            "producerEpoch": h.producer_epoch,
            "partitionLeaderEpoch": h.partition_leader_epoch,
            "isTransactional": h.is_transactional,
            "isControl": h.is_control,
            "deleteHorizonMs": h.delete_horizon_ms,
            "position": pos,
            "timestampType": (
                "LogAppendTime"
                if h.timestamp_type == TimestampType.LOG_APPEND_TIME
                else "CreateTime"
            ),
            "maxTimestamp": h.max_timestamp,
            "size": h.size_in_bytes,
            "magic": 2,
            "compressCodec": h.compression.kafka_name,
            "crc": h.crc,
            "isValid": True,
        }
    assert file["batches"][4]["deleteHorizonMs"] == T0 + 500

    code, doc, _ = run_json(capsys, "--deep", "--print-data-log", str(segment))
    assert code == 0
    batches = doc["files"][0]["batches"]
    for got, (_, _, records) in zip(batches, expected, strict=True):
        assert [r["offset"] for r in got["records"]] == [r.offset for r in records]
        assert [r["timestamp"] for r in got["records"]] == [r.timestamp for r in records]
        assert [r["headerKeys"] for r in got["records"]] == [
            [k for k, _ in r.headers] for r in records
        ]
    first = batches[0]["records"]
    assert first[0] == {
        "offset": 0,
        "timestamp": T0,
        "keySize": 2,
        "valueSize": 5,
        "sequence": -1,
        "headerKeys": ["h1", "h2"],
        "key": "k0",
        "payload": "hello",
    }
    assert first[1]["key"] is None and first[2]["payload"] is None
    assert batches[1]["records"][1]["sequence"] == 11
    commit = batches[5]["records"][0]
    assert commit["controlType"] == "COMMIT" and commit["coordinatorEpoch"] == 3
    assert "key" not in commit and "payload" not in commit
    assert batches[7]["records"][0]["controlType"] == "ABORT"


# --- kafka-python's writer ---------------------------------------------------------------------


def kafka_python_segment(directory: Path, base: int) -> tuple[Path, list[list[tuple[Any, ...]]]]:
    """A segment of kafka-python batches, one per codec it has here, offsets from ``base``."""
    kafka_records = pytest.importorskip("kafka.record.default_records")
    kafka_codec = pytest.importorskip("kafka.codec")
    codecs = [
        (0, True),
        (1, kafka_codec.has_gzip()),
        (2, kafka_codec.has_snappy()),
        (3, kafka_codec.has_lz4()),
        (4, kafka_codec.has_zstd()),
    ]
    raw = bytearray()
    expected: list[list[tuple[Any, ...]]] = []
    offset = base
    for codec, available in codecs:
        if not available:
            continue
        transactional = codec % 2 == 1
        builder = kafka_records.DefaultRecordBatchBuilder(
            magic=2,
            compression_type=codec,
            is_transactional=transactional,
            producer_id=42 if transactional else -1,
            producer_epoch=1 if transactional else -1,
            base_sequence=5 if transactional else -1,
            batch_size=1 << 20,
        )
        rows = []
        for i in range(4):
            key = None if i == 0 else f"key-{codec}-{i}".encode()
            value = None if i == 3 else f"value {codec} {i} ".encode() * (i + 1)
            headers = [("hdr", b"v"), ("other", None)] if i == 1 else []
            builder.append(i, T0 + 10 * codec + i, key, value, headers)
            rows.append((offset + i, T0 + 10 * codec + i, key, value, [h for h, _ in headers]))
        batch = builder.build()
        set_base_offset(batch, offset)
        raw += batch
        expected.append(rows)
        offset += 4
    path = directory / f"{base:020d}.log"
    path.write_bytes(bytes(raw))
    return path, expected


def test_kafka_python_segment_dumps_as_text(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log, expected = kafka_python_segment(tmp_path, 100)
    code, out, err = run(capsys, "--print-data-log", str(log))
    assert (code, err) == (0, "")
    assert out.splitlines()[1] == "Log starting offset: 100"
    batches = batch_lines(out)
    assert len(batches) == len(expected)
    assert all(line.endswith("isvalid: true") for line in batches)
    assert "producerId: 42 producerEpoch: 1" in batches[1] and "lastSequence: 8" in batches[1]
    records = record_lines(out)
    rows = [row for batch in expected for row in batch]
    assert len(records) == len(rows)
    for line, (offset, ts, key, value, header_keys) in zip(records, rows, strict=True):
        prefix = (
            f"| offset: {offset} CreateTime: {ts} keySize: {-1 if key is None else len(key)} "
            f"valueSize: {-1 if value is None else len(value)} "
        )
        assert line.startswith(prefix), line
        assert f"headerKeys: [{','.join(header_keys)}]" in line
        assert (" key: " in line) == (key is not None)
        if key is not None:
            assert f" key: {key.decode()}" in line
        if value is not None:
            assert line.endswith(f"payload: {value.decode()}")


def test_kafka_python_segment_dumps_as_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log, expected = kafka_python_segment(tmp_path, 100)
    code, doc, _ = run_json(capsys, str(log))
    assert code == 0
    shallow = doc["files"][0]["batches"]
    assert [b["baseOffset"] for b in shallow] == [rows[0][0] for rows in expected]
    assert all(b["isValid"] and "records" not in b for b in shallow)
    code, doc, _ = run_json(capsys, "--deep", "--print-data-log", str(log))
    assert code == 0 and doc["ok"] is True
    for batch, rows in zip(doc["files"][0]["batches"], expected, strict=True):
        got = [
            (r["offset"], r["timestamp"], r["key"], r["payload"], r["headerKeys"])
            for r in batch["records"]
        ]
        assert got == [
            (o, ts, None if k is None else k.decode(), None if v is None else v.decode(), h)
            for o, ts, k, v, h in rows
        ]


# --- indexes -----------------------------------------------------------------------------------


def test_index_dumps_list_entries(capsys: pytest.CaptureFixture[str], segment: Path) -> None:
    index, timeindex = write_indexes(segment)
    with OffsetIndex(index, 0, writable=False) as oi:
        entries = list(oi)
    with TimeIndex(timeindex, 0, writable=False) as ti:
        times = list(ti)
    # the LogAppendTime batch (offset 7) holds the largest timestamp: no time entry after it
    assert len(entries) == 7 and [t.offset for t in times] == [4, 6, 7]
    code, out, err = run(capsys, str(index), str(timeindex))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"Dumping {index}",
        *(f"offset: {e.offset} position: {e.position}" for e in entries),
        f"Dumping {timeindex}",
        *(f"timestamp: {t.timestamp} offset: {t.offset}" for t in times),
    ]
    code, doc, _ = run_json(capsys, str(index), str(timeindex))
    assert code == 0
    assert doc["files"][0]["kind"] == "offset-index"
    assert doc["files"][0]["entries"] == [
        {"offset": e.offset, "position": e.position} for e in entries
    ]
    assert doc["files"][1]["kind"] == "time-index"
    assert doc["files"][1]["entries"] == [
        {"timestamp": t.timestamp, "offset": t.offset} for t in times
    ]


def test_empty_index_is_reported_as_kafka_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    index = tmp_path / INDEX0
    index.write_bytes(b"")
    code, out, _ = run(capsys, str(index))
    assert code == 0 and out.splitlines() == [f"Dumping {index}", f"{index} is empty."]


def test_verify_index_passes_on_correct_indexes(
    capsys: pytest.CaptureFixture[str], segment: Path
) -> None:
    index, timeindex = write_indexes(segment)
    code, out, err = run(capsys, "--verify-index", str(index), str(timeindex))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"Dumping {index}",
        f"Verified 7 entries against {segment}",
        f"Dumping {timeindex}",
        f"Verified 3 entries against {segment}",
    ]
    code, doc, _ = run_json(capsys, "--verify-index-only", str(index), str(timeindex))
    assert code == 0 and doc["ok"] is True
    assert [f["entriesChecked"] for f in doc["files"]] == [7, 3]
    for file in doc["files"]:
        assert file["mismatches"] == [] and file["errors"] == []
        assert file["segment"] == str(segment) and "entries" not in file


def kafka_report(err: str) -> list[str]:
    """The index verification report: stderr without tierlog's own error and note lines."""
    return [line for line in err.splitlines() if not line.startswith("tierlog: ")]


def test_verify_index_reports_offset_index_mismatches_as_kafka_does(
    capsys: pytest.CaptureFixture[str], segment: Path
) -> None:
    pos = positions(segment)
    size = segment.stat().st_size
    index = segment.with_suffix(".index")
    with OffsetIndex(index, 0, 1 << 12) as oi:
        oi.append(4, pos[1])  # right
        oi.append(6, pos[2])  # right
        oi.append(8, pos[3])  # wrong: the batch at pos[3] ends at offset 7
        oi.append(9, pos[3] + 5)  # not the start of a batch
        oi.append(10, size + 100)  # past the end of the segment
    code, out, err = run(capsys, "--verify-index", str(index))
    assert code == 1
    assert out.splitlines() == [f"Dumping {index}", f"Verified 5 entries against {segment}"]
    lines = err.splitlines()
    assert lines[:2] == [f"Mismatches in :{index.absolute()}", "  Index offset: 8, log offset: 7"]
    assert lines[2].startswith(
        f"  Index offset: 9, log offset: -1 (no record batch at position {pos[3] + 5}: "
    )
    assert lines[3:] == [
        f"  Index offset: 10, log offset: -1 (position {size + 100} is past the end of the "
        f"{size}-byte segment)"
    ]

    code, doc, err = run_json(capsys, "--verify-index", str(index))
    assert (code, err) == (1, "")
    assert doc["ok"] is False
    file = doc["files"][0]
    assert file["entriesChecked"] == 5
    assert [(m["check"], m["entry"], m["offset"], m["logOffset"]) for m in file["mismatches"]] == [
        ("log-offset", 2, 8, 7),
        ("log-offset", 3, 9, None),
        ("log-offset", 4, 10, None),
    ]
    assert file["mismatches"][0]["message"] == (
        f"index offset 8, log offset 7: the batch at position {pos[3]} of {segment} ends at "
        "offset 7"
    )


def test_verify_index_flags_a_batch_that_overflows_its_segment(
    capsys: pytest.CaptureFixture[str], segment: Path
) -> None:
    """The last batch is cut short: the index entries pointing at it are mismatches (Kafka's tool
    throws NoSuchElementException there), next to the log's own "invalid bytes" error."""
    pos = positions(segment)
    index, _ = write_indexes(segment)
    timeindex = segment.with_suffix(".timeindex")
    timeindex.write_bytes(struct.pack(">qiqiqi", T0 + 4, 4, T0 + 6, 6, T0 + 12, 12))
    assert run(capsys, "--verify-index", str(segment))[0] == 0  # whole, the segment matches
    last = segment.stat().st_size - pos[-1]
    with open(segment, "r+b") as f:
        f.truncate(pos[-1] + 70)  # the 61-byte header is whole, the records are not
    code, out, err = run(capsys, "--verify-index", str(segment))
    assert code == 1
    assert f"Found 70 invalid bytes at the end of {segment.name}" in out
    assert err.startswith("tierlog: error: truncated record batch")
    assert kafka_report(err) == [
        f"Mismatches in :{index.absolute()}",
        f"  Index offset: 12, log offset: -1 (the batch at position {pos[-1]} overflows the "
        f"segment: it is {last} bytes, 70 remain)",
        f"The following indexed offsets are not found in :{timeindex.absolute()}",
        f"Indexed offset: 12, found log offset: -1 (the segment is unreadable from position "
        f"{pos[-1]})",
    ]
    code, doc, _ = run_json(capsys, "--verify-index", str(index), str(timeindex))
    assert code == 1
    (offset_miss,) = doc["files"][0]["mismatches"]
    assert offset_miss["check"] == "log-offset"
    assert "overflows the segment" in offset_miss["message"]
    (time_miss,) = doc["files"][1]["mismatches"]
    assert time_miss["check"] == "offset-not-found" and time_miss["logOffset"] is None
    assert "cannot be read past a corrupt batch" in time_miss["message"]
    with open(segment, "r+b") as f:
        f.truncate(pos[-1] + 30)  # not even a whole header
    code, _, err = run(capsys, "--verify-index", str(index))
    assert code == 1
    assert kafka_report(err)[1].startswith(
        f"  Index offset: 12, log offset: -1 (no record batch at position {pos[-1]}: only 30 "
        "bytes remain, no batch header"
    )


def test_verify_index_goes_on_after_a_negative_or_end_position(
    capsys: pytest.CaptureFixture[str], segment: Path
) -> None:
    """A negative position is a mismatch like any other: the entries after it are still checked
    (it used to end the index's verification with an OS error)."""
    pos = positions(segment)
    size = segment.stat().st_size
    index = segment.with_suffix(".index")
    index.write_bytes(struct.pack(">8i", 2, pos[0], 4, -5, 6, pos[2], 7, size))
    code, out, err = run(capsys, "--verify-index", str(index))
    assert code == 1
    assert f"Verified 4 entries against {segment}" in out
    assert kafka_report(err) == [
        f"Mismatches in :{index.absolute()}",
        "  Index offset: 4, log offset: -1 (position -5 is negative)",
        f"  Index offset: 7, log offset: -1 (position {size} is past the end of the {size}-byte "
        "segment)",
        f"Found out of order position in :{index.absolute()}",
        f"  Index offset: 4, position: -5, Previously indexed position: {pos[0]}",
    ]
    assert not err.startswith("tierlog: error")


def test_verify_index_reports_time_index_mismatches_as_kafka_does(
    capsys: pytest.CaptureFixture[str], segment: Path
) -> None:
    timeindex = segment.with_suffix(".timeindex")
    with TimeIndex(timeindex, 0, 1 << 12) as ti:
        ti.maybe_append(T0 + 4, 4)  # right: the batch ending at 4 has max timestamp T0+4
        ti.maybe_append(T0 + 50, 6)  # wrong timestamp: the batch ending at 6 has T0+6
        ti.maybe_append(T0 + 60, 8)  # offset 8 is not the last offset of its batch (8-9)
        ti.maybe_append(T0 + 70, 99)  # beyond the segment
    code, _, err = run(capsys, "--verify-index", str(timeindex))
    assert code == 1
    path = timeindex.absolute()
    assert err.splitlines() == [
        f"Found timestamp mismatch in :{path}",
        f"  Index timestamp: {T0 + 50}, log timestamp: {T0 + 6}",
        f"The following indexed offsets are not found in :{path}",
        "Indexed offset: 8, found log offset: 9",
        "Indexed offset: 99, found log offset: -1",
    ]
    code, doc, _ = run_json(capsys, "--verify-index", str(timeindex))
    assert code == 1
    assert [
        (m["check"], m["entry"], m["logOffset"], m["logTimestamp"])
        for m in doc["files"][0]["mismatches"]
    ] == [
        ("timestamp", 1, 6, T0 + 6),
        ("offset-not-found", 2, 9, T0 + 9),
        ("offset-not-found", 3, None, None),
    ]
    assert doc["files"][0]["mismatches"][0]["message"] == (
        f"index timestamp {T0 + 50}, log timestamp {T0 + 6}: the batch of {segment} ending at "
        f"offset 6 has max timestamp {T0 + 6}"
    )


def test_verify_index_catches_order_problems(
    capsys: pytest.CaptureFixture[str], segment: Path
) -> None:
    """Entries out of order (written raw: the index API refuses them) are named."""
    pos = positions(segment)
    index = segment.with_suffix(".index")
    index.write_bytes(struct.pack(">iiii", 4, pos[1], 2, pos[0]))
    code, _, err = run(capsys, "--verify-index", str(index))
    assert code == 1
    assert err.splitlines() == [
        f"Found out of order offset in :{index.absolute()}",
        "  Index offset: 2, Previously indexed offset: 4",
        f"Found out of order position in :{index.absolute()}",
        f"  Index offset: 2, position: {pos[0]}, Previously indexed position: {pos[1]}",
    ]
    timeindex = segment.with_suffix(".timeindex")
    timeindex.write_bytes(struct.pack(">qiqi", T0 + 6, 6, T0 + 4, 4))
    code, _, err = run(capsys, "--verify-index", str(timeindex))
    assert code == 1
    # the batch ending at 4 is found again: the walk restarts when offsets go backwards
    assert err.splitlines() == [
        f"Found out of order timestamp in :{timeindex.absolute()}",
        f"  Index timestamp: {T0 + 4}, Previously indexed timestamp: {T0 + 6}",
        f"Found out of order offset in :{timeindex.absolute()}",
        "  Index offset: 4, Previously indexed offset: 6",
    ]


def test_verify_index_makes_the_checks_kafka_leaves_to_the_sanity_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Offsets below the base offset, and a first timestamp not above -1 (Kafka's
    ``prevTimestamp`` starts at ``NO_TIMESTAMP``)."""
    log = write_segment(
        tmp_path, [build_batch([Record(100, T0, b"k", b"v")], base_offset=100)], base=100
    )
    index = log.with_suffix(".index")
    index.write_bytes(struct.pack(">ii", -1, 0))  # relative -1: offset 99
    timeindex = log.with_suffix(".timeindex")
    timeindex.write_bytes(struct.pack(">qi", -1, 0))  # timestamp -1, offset 100
    code, _, err = run(capsys, "--verify-index", str(index), str(timeindex))
    assert code == 1
    assert err.splitlines() == [
        f"Mismatches in :{index.absolute()}",
        "  Index offset: 99, log offset: 100",
        f"Found timestamp mismatch in :{timeindex.absolute()}",
        f"  Index timestamp: -1, log timestamp: {T0}",
        f"Found out of order timestamp in :{timeindex.absolute()}",
        "  Index timestamp: -1, Previously indexed timestamp: -1",
        f"Found offset below the base offset in :{index.absolute()}",
        "  Index offset: 99, base offset: 100",
    ]
    code, doc, _ = run_json(capsys, "--verify-index", str(index), str(timeindex))
    assert [m["check"] for f in doc["files"] for m in f["mismatches"]] == [
        "below-base-offset",
        "log-offset",
        "timestamp-order",
        "timestamp",
    ]


def test_verify_index_deep_compares_timestamps_with_the_records(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A batch whose header max timestamp is not its records' largest: the broker indexes the
    header's, Kafka's tool compares the records' (``--deep`` here)."""
    first = build_batch([Record(0, T0, b"k", b"v")])
    lying = bytearray(build_batch([Record(1, T0 + 1, b"k", b"v")], base_offset=1))
    set_max_timestamp(lying, TimestampType.CREATE_TIME, T0 + 1000)  # CRC recomputed
    log = write_segment(tmp_path, [first, bytes(lying)])
    _, timeindex = write_indexes(log)
    code, _, err = run(capsys, "--verify-index", str(timeindex))
    assert (code, err) == (0, "")
    code, _, err = run(capsys, "--verify-index", "--deep", str(timeindex))
    assert code == 1
    assert err.splitlines() == [
        f"Found timestamp mismatch in :{timeindex.absolute()}",
        f"  Index timestamp: {T0 + 1000}, log timestamp: {T0 + 1}",
    ]
    code, doc, _ = run_json(capsys, "--verify-index", "--deep", str(timeindex))
    (mismatch,) = doc["files"][0]["mismatches"]
    assert mismatch["logTimestamp"] == T0 + 1 and "holds records up to" in mismatch["message"]


def test_verify_index_of_a_log_and_of_a_directory(
    capsys: pytest.CaptureFixture[str], segment: Path
) -> None:
    index, timeindex = write_indexes(segment)
    code, out, err = run(capsys, "--verify-index", str(segment))
    assert (code, err) == (0, "")
    assert [line for line in out.splitlines() if line.startswith(("Dumping", "Verified"))] == [
        f"Dumping {segment}",
        f"Dumping {index}",
        f"Verified 7 entries against {segment}",
        f"Dumping {timeindex}",
        f"Verified 3 entries against {segment}",
    ]
    assert len(batch_lines(out)) == 8  # the log itself is still dumped
    # break the time indexes of two segments: the report comes after every dump, grouped by
    # check, then by file in dump order
    second = write_segment(
        segment.parent, [build_batch([Record(20, T0 + 20, b"k", b"v")], base_offset=20)], base=20
    )
    _, timeindex2 = write_indexes(second, base=20)
    timeindex2.write_bytes(struct.pack(">qi", T0 + 21, 0))  # relative offset 0: 20
    with TimeIndex(timeindex, 0, writable=False) as ti:
        last = ti.last_entry
    with open(timeindex, "r+b") as f:
        f.seek(-12, os.SEEK_END)
        f.write(struct.pack(">qi", last.timestamp + 1, last.offset))
    index.write_bytes(index.read_bytes()[:8] + struct.pack(">ii", 6, 0))
    code, out, err = run(capsys, "--verify-index", str(segment.parent))
    assert code == 1
    assert err.splitlines() == [
        f"Mismatches in :{index.absolute()}",
        "  Index offset: 6, log offset: 2",
        f"Found timestamp mismatch in :{timeindex.absolute()}",
        f"  Index timestamp: {last.timestamp + 1}, log timestamp: {last.timestamp}",
        f"Found timestamp mismatch in :{timeindex2.absolute()}",
        f"  Index timestamp: {T0 + 21}, log timestamp: {T0 + 20}",
        f"Found out of order position in :{index.absolute()}",
        f"  Index offset: 6, position: 0, Previously indexed position: {positions(segment)[1]}",
    ]
    # indexes are verified, not listed, and the report is not on stdout
    assert not [line for line in out.splitlines() if line.startswith(("offset:", "timestamp:"))]
    assert "Index" not in out


def test_verify_index_exit_code_is_documented(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["log", "dump", "--help"])
    assert exit_info.value.code == 0
    help_text = "".join(capsys.readouterr().out.split())  # whatever argparse's line breaks
    assert "1corruptionorindexmismatchfound(unlikekafka-dump-log,whichexits0" in help_text
    assert "maketheexitcode1(kafka-dump-logexits0)" in help_text


def test_verify_index_without_segment_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    index = tmp_path / INDEX0
    with OffsetIndex(index, 0, 64) as oi:
        oi.append(3, 100)
    code, _, err = run(capsys, "--verify-index", str(index))
    assert code == 1 and "its segment file does not exist" in err


def test_index_sanity_check(capsys: pytest.CaptureFixture[str], segment: Path) -> None:
    index, timeindex = write_indexes(segment)
    code, out, err = run(capsys, "--index-sanity-check", str(index), str(timeindex))
    assert (code, err) == (0, "")
    assert f"{index} passed sanity check." in out and f"{timeindex} passed sanity check." in out
    index.write_bytes(struct.pack(">iiii", 4, 100, 3, 200))  # offsets go backwards
    code, doc, _ = run_json(capsys, "--index-sanity-check", str(index))
    assert code == 1
    (file,) = doc["files"]
    assert file["sanityCheck"] == "failed" and file["errors"][0]["position"] == 8
    assert "not above the previous entry's" in file["errors"][0]["message"]


def test_partial_index_entry_is_reported(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    index = tmp_path / INDEX0
    index.write_bytes(struct.pack(">ii", 3, 100) + b"\x00\x00\x00")
    code, out, err = run(capsys, str(index))
    assert code == 1
    assert "offset: 3 position: 100" in out
    assert "partial entry at position 8" in err


# --- other files -------------------------------------------------------------------------------


def test_txn_index_dump(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    with TransactionIndex(0, path) as index:
        index.append(AbortedTxn(7, 10, 20, 10))
        index.append(AbortedTxn(8, 15, 30, 10))
    code, out, _ = run(capsys, str(path))
    assert code == 0
    assert out.splitlines()[1:] == [
        "version: 0 producerId: 7 firstOffset: 10 lastOffset: 20 lastStableOffset: 10",
        "version: 0 producerId: 8 firstOffset: 15 lastOffset: 30 lastStableOffset: 10",
    ]
    code, doc, _ = run_json(capsys, str(path))
    assert doc["files"][0]["entries"][1] == {
        "version": 0,
        "producerId": 8,
        "firstOffset": 15,
        "lastOffset": 30,
        "lastStableOffset": 10,
    }
    with open(path, "ab") as f:
        f.write(b"\x00" * 5)
    code, out, err = run(capsys, str(path))
    assert code == 1 and len(out.splitlines()) == 3 and "partial entry at position 68" in err


def test_producer_snapshot_dump(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000014.snapshot"
    write_producer_snapshot(
        path,
        [
            ProducerSnapshotEntry(7, 2, 11, 4, 1, T0 + 4, 3, 3),
            ProducerSnapshotEntry(9, 0, -1, -1, 0, T0, -1, -1),
        ],
        sync=False,
    )
    code, out, _ = run(capsys, str(path))
    assert code == 0
    assert out.splitlines()[1:] == [
        "producerId: 7 producerEpoch: 2 coordinatorEpoch: 3 currentTxnFirstOffset: "
        f"OptionalLong[3] lastTimestamp: {T0 + 4} firstSequence: 10 lastSequence: 11 "
        f"lastOffset: 4 offsetDelta: 1 timestamp: {T0 + 4}",
        "producerId: 9 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        f"OptionalLong.empty lastTimestamp: {T0}",
    ]
    code, doc, _ = run_json(capsys, str(path))
    first, second = doc["files"][0]["entries"]
    assert first["currentTxnFirstOffset"] == 3 and first["firstSequence"] == 10
    assert second["currentTxnFirstOffset"] is None and second["firstSequence"] is None
    path.write_bytes(path.read_bytes()[:-3])
    code, out, err = run(capsys, str(path))
    assert code == 1 and "truncated" in err and str(path) in err


def test_checkpoint_and_partition_metadata_dump(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    checkpoint = tmp_path / "leader-epoch-checkpoint"
    write_leader_epoch_checkpoint(checkpoint, [(0, 0), (1, 3)], sync=False)
    metadata = tmp_path / "partition.metadata"
    topic_id = Uuid.random()
    write_partition_metadata(metadata, topic_id, sync=False)
    code, out, _ = run(capsys, str(checkpoint), str(metadata))
    assert code == 0
    assert out.splitlines() == [
        f"Dumping {checkpoint}",
        "epoch: 0 startOffset: 0",
        "epoch: 1 startOffset: 3",
        f"Dumping {metadata}",
        f"version: 0 topicId: {topic_id}",
    ]
    code, doc, _ = run_json(capsys, str(checkpoint), str(metadata))
    assert doc["files"][0]["entries"] == [
        {"epoch": 0, "startOffset": 0},
        {"epoch": 1, "startOffset": 3},
    ]
    assert doc["files"][1] == {
        "kind": "partition-metadata",
        "path": str(metadata),
        "version": 0,
        "topicId": str(topic_id),
        "errors": [],
    }
    checkpoint.write_text("0\n3\n0 0\n")
    code, _, err = run(capsys, str(checkpoint))
    assert code == 1 and "expected [3] entries" in err


def test_partition_directory_in_offset_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    batches = tierlog_batches()
    first = write_segment(tmp_path, batches[:3])
    second = write_segment(tmp_path, batches[3:], base=7)
    write_indexes(first)
    write_indexes(second, base=7)
    with TransactionIndex(7, tmp_path / "00000000000000000007.txnindex") as txn:
        txn.append(AbortedTxn(8, 11, 12, 11))
    write_producer_snapshot(tmp_path / "00000000000000000007.snapshot", [], sync=False)
    write_leader_epoch_checkpoint(
        tmp_path / "leader-epoch-checkpoint", [(0, 0), (1, 3)], sync=False
    )
    write_partition_metadata(tmp_path / "partition.metadata", Uuid.random(), sync=False)
    write_offsets_checkpoint(tmp_path, OffsetsCheckpoint(13, 0, 13, True), sync=False)
    (tmp_path / "leader-epoch-checkpoint.tmp").write_text("junk")
    code, out, err = run(capsys, str(tmp_path))
    assert code == 0
    assert [line.split("/")[-1] for line in out.splitlines() if line.startswith("Dumping")] == [
        "partition.metadata",
        "leader-epoch-checkpoint",
        "tierlog-offsets-checkpoint",
        "00000000000000000000.log",
        "00000000000000000000.index",
        "00000000000000000000.timeindex",
        "00000000000000000007.log",
        "00000000000000000007.index",
        "00000000000000000007.timeindex",
        "00000000000000000007.txnindex",
        "00000000000000000007.snapshot",
    ]
    assert "Log starting offset: 7" in out
    assert "recoveryPoint: 13 logStartOffset: 0 highWatermark: 13 cleanShutdown: true" in out
    assert err == (
        f"tierlog: note: skipping {tmp_path / 'leader-epoch-checkpoint.tmp'}: an unfinished "
        "atomic write of leader-epoch-checkpoint (a crash came before its rename; recovery "
        "deletes it unread)\n"
    )
    code, doc, _ = run_json(capsys, "--deep", str(tmp_path))
    assert code == 0 and len(doc["files"]) == 11
    assert [f["kind"] for f in doc["files"]][:4] == [
        "partition-metadata",
        "leader-epoch-checkpoint",
        "offsets-checkpoint",
        "log",
    ]
    assert [s["path"] for s in doc["skipped"]] == [str(tmp_path / "leader-epoch-checkpoint.tmp")]


def test_offsets_checkpoint_dump(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    write_offsets_checkpoint(tmp_path, OffsetsCheckpoint(10, 2, 8, False), sync=False)
    path = tmp_path / "tierlog-offsets-checkpoint"
    code, out, err = run(capsys, str(path))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"Dumping {path}",
        "recoveryPoint: 10 logStartOffset: 2 highWatermark: 8 cleanShutdown: false",
    ]
    code, doc, _ = run_json(capsys, str(path))
    assert doc["files"] == [
        {
            "kind": "offsets-checkpoint",
            "path": str(path),
            "recoveryPoint": 10,
            "logStartOffset": 2,
            "highWatermark": 8,
            "cleanShutdown": False,
            "errors": [],
        }
    ]
    path.write_text("0\n4\nrecovery-point 10\nlog-start-offset 2\nhigh-watermark x\n")
    code, out, err = run(capsys, str(path))
    assert (code, out) == (1, f"Dumping {path}\n")
    assert err.startswith(f"tierlog: error: malformed offsets checkpoint {path}")


@pytest.mark.parametrize(
    ("content", "what", "position"),
    [
        (b"\x00\x17garbage\n", "line 1 '\\x00\\x17garbage': the version is not an integer", 0),
        (
            b"0\n4\nrecovery-point 10\nlog-start-offset 2\nhigh-watermark x\nclean-shutdown 0\n",
            "line 5 'high-watermark x': the value of high-watermark is not an integer",
            41,
        ),
        (b"0\n4\nrecovery-point 10\n", "line 2 '4': 4 entries announced, 1 found", 2),
    ],
)
def test_garbage_offsets_checkpoint_is_one_clear_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, what: str, position: int
) -> None:
    """Not Python's ``invalid literal for int()``: the file, the line and what is wrong."""
    path = tmp_path / "tierlog-offsets-checkpoint"
    path.write_bytes(content)
    code, out, err = run(capsys, str(path))
    assert (code, out) == (1, f"Dumping {path}\n")
    assert err == f"tierlog: error: malformed offsets checkpoint {path}: {what}\n"
    code, doc, _ = run_json(capsys, str(path))
    assert code == 1 and doc["ok"] is False
    assert doc["files"][0]["errors"] == [
        {"message": f"malformed offsets checkpoint {path}: {what}", "position": position}
    ]


def test_local_log_directory_dumps_every_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A directory written by ``LocalLog`` (rolls, producer snapshots, epochs, the offsets
    checkpoint) dumps file by file, nothing skipped, and its indexes verify."""
    from tierlog.log.local_log import LocalLog
    from tierlog.log.recovery import read_offsets_checkpoint

    directory = tmp_path / "topic-0"
    log = LocalLog.open(
        directory,
        {"segment.index.bytes": 4096, "index.interval.bytes": 64},
        clock=lambda: T0 + 1000,
        sync=False,
        topic_id=Uuid.random(),
    )
    for epoch in range(3):
        records = [Record(i, T0 + i, None, b"x" * 100) for i in range(3)]
        log.append_as_leader(
            build_batch(records, producer_id=5, producer_epoch=0, base_sequence=3 * epoch),
            leader_epoch=epoch,
        )
        log.roll()
    log.append_as_leader(build_batch([Record(0, T0, None, b"last")]), leader_epoch=3)
    log.close()
    code, out, err = run(capsys, "--verify-index", str(directory))
    assert (code, err) == (0, "")
    dumped = {line.split("/")[-1] for line in out.splitlines() if line.startswith("Dumping")}
    assert dumped == {p.name for p in directory.iterdir()}
    assert "tierlog-offsets-checkpoint" in dumped and any(n.endswith(".snapshot") for n in dumped)
    code, doc, _ = run_json(capsys, str(directory))
    (checkpoint,) = [f for f in doc["files"] if f["kind"] == "offsets-checkpoint"]
    expected = read_offsets_checkpoint(directory)
    assert expected is not None
    assert (
        checkpoint["recoveryPoint"],
        checkpoint["highWatermark"],
        checkpoint["cleanShutdown"],
    ) == (expected.recovery_point, expected.high_watermark, expected.clean_shutdown)
    assert doc["skipped"] == []


def test_leftovers_of_interrupted_operations_in_a_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``.deleted``/``.cleaned``/``.swap`` files are dumped after the live ones (and verified
    against the segment of the same suffix); ``.tmp`` files and unknown entries are skipped."""
    batches = tierlog_batches()
    live = write_segment(tmp_path, batches[:3])
    write_indexes(live)
    stale = write_segment(tmp_path, batches[3:], base=7)
    write_indexes(stale, base=7)
    for suffix in (".log", ".index", ".timeindex"):  # a deletion under way
        os.rename(stale.with_suffix(suffix), tmp_path / f"00000000000000000007{suffix}.deleted")
    swap = tmp_path / "00000000000000000000.log.swap"  # a clean about to be swapped in
    shutil.copyfile(live, swap)
    shutil.copyfile(live.with_suffix(".index"), tmp_path / "00000000000000000000.index.swap")
    cleaned = tmp_path / "00000000000000000000.log.cleaned"
    cleaned.write_bytes(b"")
    snapshot_deleted = tmp_path / "00000000000000000003.snapshot.deleted"
    write_producer_snapshot(snapshot_deleted, [], sync=False)
    (tmp_path / "tierlog-offsets-checkpoint.tmp").write_text("0\n")
    (tmp_path / "00000000000000000007.snapshot.tmp").write_bytes(b"\x00")
    (tmp_path / "00000000000000000000-0000000001.checkpoint").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "subdir").mkdir()

    code, out, err = run(capsys, "--verify-index", str(tmp_path))
    assert code == 0, err
    assert [line.split("/")[-1] for line in out.splitlines() if line.startswith("Dumping")] == [
        "00000000000000000000.log",
        "00000000000000000000.log.swap",
        "00000000000000000000.log.cleaned",
        "00000000000000000000.index",
        "00000000000000000000.index.swap",
        "00000000000000000000.timeindex",
        "00000000000000000003.snapshot.deleted",
        "00000000000000000007.log.deleted",
        "00000000000000000007.index.deleted",
        "00000000000000000007.timeindex.deleted",
    ]
    assert f"Verified 4 entries against {tmp_path / '00000000000000000007.log.deleted'}" in out
    assert f"Verified 2 entries against {swap}" in out
    assert err.splitlines() == [
        f"tierlog: note: skipping {tmp_path / p}: {reason}"
        for p, reason in [
            (
                "00000000000000000000-0000000001.checkpoint",
                "a KRaft metadata snapshot, not a file of a topic partition",
            ),
            (
                "00000000000000000007.snapshot.tmp",
                "an unfinished atomic write of 00000000000000000007.snapshot (a crash came before "
                "its rename; recovery deletes it unread)",
            ),
            ("notes.txt", "not a file Kafka or tierlog keeps in a partition directory"),
            ("subdir", "a directory"),
            (
                "tierlog-offsets-checkpoint.tmp",
                "an unfinished atomic write of tierlog-offsets-checkpoint (a crash came before its "
                "rename; recovery deletes it unread)",
            ),
        ]
    ]
    code, doc, _ = run_json(capsys, str(tmp_path))
    assert code == 0
    assert [(f["path"].split("/")[-1], f.get("suffix")) for f in doc["files"]][:3] == [
        ("00000000000000000000.log", None),
        ("00000000000000000000.log.swap", ".swap"),
        ("00000000000000000000.log.cleaned", ".cleaned"),
    ]
    assert [(s["path"].split("/")[-1], s["reason"]) for s in doc["skipped"]][3] == (
        "subdir",
        "a directory",
    )


def test_suffixed_index_is_verified_only_against_its_suffixed_segment(
    capsys: pytest.CaptureFixture[str], segment: Path
) -> None:
    """An index renamed ``.deleted`` is not checked against a live segment that took its name."""
    index, _ = write_indexes(segment)
    deleted = index.with_name(index.name + ".deleted")
    os.rename(index, deleted)
    code, _, err = run(capsys, "--verify-index", str(deleted))
    assert code == 1 and "its segment file does not exist" in err


def test_empty_directory_is_not_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "README").write_text("x")
    code, out, err = run(capsys, str(tmp_path))
    assert (code, out) == (0, "")
    assert err.splitlines() == [
        f"tierlog: note: skipping {tmp_path / 'README'}: not a file Kafka or tierlog keeps in a "
        "partition directory",
        "tierlog: note: nothing to dump: no segment, index, checkpoint or snapshot file was found",
    ]
    code, doc, _ = run_json(capsys, str(tmp_path))
    assert code == 0 and doc["files"] == [] and doc["ok"] is True
    assert doc["skipped"] == [
        {
            "path": str(tmp_path / "README"),
            "reason": "not a file Kafka or tierlog keeps in a partition directory",
        }
    ]


def test_remote_storage_layout_names(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Files in the ``local`` RSM's layout (``<offset>-<segmentId>.<kind>``) dump and verify."""
    stem = f"{0:020d}-{Uuid.random()}"
    local = write_segment(tmp_path, tierlog_batches())
    write_indexes(local)
    for suffix in (".log", ".index", ".timeindex"):
        os.rename(local.with_suffix(suffix), tmp_path / f"{stem}{suffix}")
    write_leader_epoch_checkpoint(
        tmp_path / f"{stem}.leader_epoch_checkpoint", [(1, 0)], sync=False
    )
    code, out, err = run(capsys, "--verify-index", str(tmp_path / f"{stem}.log"))
    assert (code, err) == (0, "")
    assert "Log starting offset: 0" in out
    assert out.count("Verified 7 entries") == 1 and out.count("Verified 3 entries") == 1
    code, out, _ = run(capsys, str(tmp_path / f"{stem}.leader_epoch_checkpoint"))
    assert code == 0 and "epoch: 1 startOffset: 0" in out


# --- the embedded RLMM's record logs ----------------------------------------------------------


TOPIC_ID = Uuid.from_string("Bp9TDduJRGa9Q5rlvCJOxg")


def rlmm_events(
    directory: Path,
) -> tuple[RemoteLogSegmentMetadata, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate]:
    """Two segments added and one finished, through a real embedded RLMM in ``directory`` (one
    metadata partition, so all land in ``__remote_log_metadata-0.log``); the events written."""
    from tierlog.spi.plugins import get_registry

    tip = TopicIdPartition(TOPIC_ID, "orders", 3)
    rlmm = get_registry().create_metadata_manager(
        "embedded", {"dir": str(directory), "remote.log.metadata.topic.num.partitions": "1"}
    )
    try:
        rlmm.on_partition_leadership_changes({tip}, set())
        first = RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tip, Uuid.from_string("AQIDBAUGBwgJCgsMDQ4PEA")),
            0,
            99,
            T0 + 99,
            1,
            T0 + 1000,
            4096,
            {0: 0, 1: 50},
        )
        second = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(tip), 100, 149, T0 + 149, 1, T0 + 2000, 2048, {1: 100}
        )
        done = RemoteLogSegmentMetadataUpdate(
            first.remote_log_segment_id,
            T0 + 3000,
            CustomMetadata(b"\xca\xfe"),
            RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            1,
        )
        rlmm.add_remote_log_segment_metadata(first).result()
        rlmm.add_remote_log_segment_metadata(second).result()
        rlmm.update_remote_log_segment_metadata(done).result()
    finally:
        rlmm.close()
    return first, second, done


def frames(path: Path) -> list[tuple[int, int, int]]:
    """``(position, length, crc)`` of each entry, read independently of the dump."""
    data, out, pos = path.read_bytes(), [], 0
    while pos < len(data):
        length, crc = struct.unpack_from(">II", data, pos)
        out.append((pos, length, crc))
        pos += 8 + length
    return out


def test_embedded_rlmm_record_log_dump(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Every record with its position, offset and CRC, and its value as Kafka's console
    formatter prints it."""
    events = rlmm_events(tmp_path)
    path = tmp_path / "__remote_log_metadata-0.log"
    framed = frames(path)
    assert len(framed) == 3
    code, out, err = run(capsys, str(path))
    assert (code, err) == (0, "")
    segment_id = events[0].remote_log_segment_id.id
    assert out.splitlines()[:3] == [
        f"Dumping {path}",
        f"position: 0 offset: 0 length: {framed[0][1]} crc: {framed[0][2]} isvalid: true",
        "partition: 0, offset: 0, value: RemoteLogSegmentMetadata{remoteLogSegmentId="
        f"RemoteLogSegmentId{{topicIdPartition={TOPIC_ID}:orders-3, id={segment_id}}}, "
        f"startOffset=0, endOffset=99, brokerId=1, maxTimestampMs={T0 + 99}, "
        f"eventTimestampMs={T0 + 1000}, segmentLeaderEpochs={{0=0, 1=50}}, "
        "segmentSizeInBytes=4096, customMetadata=Optional.empty, state=COPY_SEGMENT_STARTED, "
        "txnIdxEmpty=false}",
    ]
    lines = out.splitlines()[1:]
    assert (
        lines[2::2]
        == [
            f"position: {pos} offset: {n} length: {length} crc: {crc} isvalid: true"
            for n, (pos, length, crc) in enumerate(framed)
        ][1:]
    )
    assert lines[3].startswith("partition: 0, offset: 1, value: RemoteLogSegmentMetadata{")
    assert "startOffset=100, endOffset=149" in lines[3]
    assert lines[5] == (
        "partition: 0, offset: 2, value: RemoteLogSegmentMetadataUpdate{remoteLogSegmentId="
        f"RemoteLogSegmentId{{topicIdPartition={TOPIC_ID}:orders-3, id={segment_id}}}, "
        "customMetadata=Optional[CustomMetadata{2 bytes}], state=COPY_SEGMENT_FINISHED, "
        f"eventTimestampMs={T0 + 3000}, brokerId=1}}"
    )

    code, doc, err = run_json(capsys, str(path))
    assert (code, err, doc["ok"]) == (0, "", True)
    (file,) = doc["files"]
    assert {k: v for k, v in file.items() if k != "records"} == {
        "kind": "remote-log-metadata",
        "path": str(path),
        "partition": 0,
        "validBytes": path.stat().st_size,
        "trailingBytes": 0,
        "errors": [],
    }
    records = file["records"]
    assert [(r["offset"], r["position"], r["length"], r["crc"], r["isValid"]) for r in records] == [
        (n, pos, length, crc, True) for n, (pos, length, crc) in enumerate(framed)
    ]
    assert [r["value"]["type"] for r in records] == [
        "RemoteLogSegmentMetadataRecord",
        "RemoteLogSegmentMetadataRecord",
        "RemoteLogSegmentMetadataUpdateRecord",
    ]
    first = records[0]["value"]
    assert (first["startOffset"], first["endOffset"], first["segmentSizeInBytes"]) == (0, 99, 4096)
    assert first["remoteLogSegmentId"]["topicIdPartition"] == {
        "name": "orders",
        "id": str(TOPIC_ID),
        "partition": 3,
    }
    assert records[2]["value"]["customMetadata"] == "cafe"
    assert [r["formatted"] for r in records] == out.splitlines()[2::2]


def test_embedded_rlmm_directory_dump(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The RLMM's directory: its record logs in partition order; its settings and lock file are
    skipped with their reason."""
    rlmm_events(tmp_path)
    log0 = tmp_path / "__remote_log_metadata-0.log"
    shutil.copy(log0, tmp_path / "__remote_log_metadata-10.log")
    shutil.copy(log0, tmp_path / "__remote_log_metadata-2.log")
    code, out, err = run(capsys, str(tmp_path))
    assert code == 0
    assert [line for line in out.splitlines() if line.startswith("Dumping")] == [
        f"Dumping {tmp_path / name}"
        for name in (
            "__remote_log_metadata-0.log",
            "__remote_log_metadata-2.log",
            "__remote_log_metadata-10.log",
        )
    ]
    assert sum(line.startswith("partition: 10, offset: ") for line in out.splitlines()) == 3
    assert f"skipping {tmp_path / 'rlmm.properties'}: the embedded RLMM's settings" in err
    code, doc, _ = run_json(capsys, str(tmp_path))
    assert [(f["kind"], f["partition"]) for f in doc["files"]] == [
        ("remote-log-metadata", 0),
        ("remote-log-metadata", 2),
        ("remote-log-metadata", 10),
    ]


def test_embedded_rlmm_flipped_byte_is_a_checksum_failure(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rlmm_events(tmp_path)
    path = tmp_path / "__remote_log_metadata-0.log"
    framed = frames(path)
    position, length, stored = framed[1]
    data = bytearray(path.read_bytes())
    data[position + 8 + length // 2] ^= 0x40  # inside entry 1's payload
    path.write_bytes(bytes(data))
    computed = zlib.crc32(bytes(data[position + 8 : position + 8 + length]))
    code, out, err = run(capsys, str(path))
    assert code == 1
    assert err == (
        f"tierlog: error: record log entry 1 CRC mismatch (stored 0x{stored:08x}, computed "
        f"0x{computed:08x}) at position {position} of {path}\n"
    )
    lines = out.splitlines()
    assert f"position: {position} offset: 1 length: {length} crc: {stored} isvalid: false" in lines
    assert not any(line.startswith("partition: 0, offset: 1,") for line in lines)
    assert lines[-1].startswith("partition: 0, offset: 2, value: RemoteLogSegmentMetadataUpdate{")
    code, doc, _ = run_json(capsys, str(path))
    file = doc["files"][0]
    assert [r["isValid"] for r in file["records"]] == [True, False, True]
    assert file["records"][1]["value"] is None
    assert file["errors"] == [{"message": err[len("tierlog: error: ") : -1], "position": position}]
    assert file["trailingBytes"] == 0


def test_embedded_rlmm_truncated_file_is_reported_and_left_alone(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A torn last entry: what precedes it is printed, the tail is named, and the file is not
    repaired (the RLMM's own open would truncate it)."""
    rlmm_events(tmp_path)
    path = tmp_path / "__remote_log_metadata-0.log"
    position, length, _ = frames(path)[2]
    with open(path, "r+b") as f:
        f.truncate(position + 8 + 5)
    size = path.stat().st_size
    code, out, err = run(capsys, str(path))
    assert code == 1
    assert out.splitlines()[-1] == f"Found 13 invalid bytes at the end of {path.name}"
    assert sum(line.startswith("partition: 0, offset: ") for line in out.splitlines()) == 2
    assert err == (
        f"tierlog: error: truncated record log entry 2: its payload is {length} bytes, 5 remain "
        f"at position {position} of {path}\n"
    )
    assert path.stat().st_size == size
    with open(path, "r+b") as f:
        f.truncate(position + 3)
    code, out, err = run(capsys, str(path))
    assert code == 1
    assert err == (
        "tierlog: error: truncated record log entry 2: 3 of the 8 header bytes remain at "
        f"position {position} of {path}\n"
    )
    code, doc, _ = run_json(capsys, str(path))
    file = doc["files"][0]
    assert (file["validBytes"], file["trailingBytes"]) == (position, 3)
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(struct.pack(">II", 0, 0))
    code, _, err = run(capsys, str(path))
    assert code == 1
    assert err.startswith("tierlog: error: invalid length 0 of record log entry 2 (1 to ")


def test_embedded_rlmm_undecodable_value_is_reported(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A sound frame whose value is not a metadata record (a valid CRC over garbage)."""
    path = tmp_path / "__remote_log_metadata-4.log"
    payload = b"\x00\x63\x00garbage"
    path.write_bytes(struct.pack(">II", len(payload), zlib.crc32(payload)) + payload)
    code, out, err = run(capsys, str(path))
    assert code == 1
    assert out.splitlines()[1:] == [
        f"position: 0 offset: 0 length: {len(payload)} crc: {zlib.crc32(payload)} isvalid: true"
    ]
    assert err.startswith("tierlog: error: ")
    assert err.endswith(f"(the value of record log entry 0 at position 0 of {path})\n")


# --- corrupt input -----------------------------------------------------------------------------


def test_bad_crc_prints_every_batch_and_exits_1(
    capsys: pytest.CaptureFixture[str], segment: Path
) -> None:
    data = bytearray(segment.read_bytes())
    pos = positions(segment)
    at = data.index(b"hello")
    data[at] ^= 0x01  # "iello": inside batch 0, after its CRC
    segment.write_bytes(bytes(data))
    code, out, err = run(capsys, "--deep", "--print-data-log", str(segment))
    assert code == 1
    batches = batch_lines(out)
    assert len(batches) == 8
    assert batches[0].endswith("isvalid: false")
    assert all(line.endswith("isvalid: true") for line in batches[1:])
    assert "payload: iello" in out  # Kafka also prints the records of an invalid batch
    assert err.startswith("tierlog: error: record batch CRC mismatch")
    assert f"at position {pos[0]} of {segment}" in err
    code, doc, _ = run_json(capsys, str(segment))
    assert code == 1 and doc["ok"] is False
    file = doc["files"][0]
    assert [b["isValid"] for b in file["batches"]] == [False] + [True] * 7
    assert file["errors"][0]["position"] == 0 and "CRC mismatch" in file["errors"][0]["message"]


def test_bad_crc_of_a_batch_larger_than_the_read_buffer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    big = build_batch([Record(0, T0, b"k", b"x" * (3 << 20))])
    tail = build_batch([Record(1, T0 + 1, b"k", b"v")], base_offset=1)
    data = bytearray(big + tail)
    data[len(big) // 2] ^= 0xFF
    log = write_segment(tmp_path, [bytes(data)])
    code, out, err = run(capsys, str(log))
    assert code == 1
    lines = batch_lines(out)
    assert lines[0].endswith("isvalid: false") and lines[1].endswith("isvalid: true")
    assert "at position 0 of" in err


def test_truncated_tail_prints_what_was_readable(
    capsys: pytest.CaptureFixture[str], segment: Path
) -> None:
    data = segment.read_bytes()
    pos = positions(segment)
    segment.write_bytes(data[: pos[-1] + 30])
    code, out, err = run(capsys, "--deep", str(segment))
    assert code == 1
    assert len(batch_lines(out)) == 7
    assert out.splitlines()[-1] == f"Found 30 invalid bytes at the end of {segment.name}"
    assert err.startswith("tierlog: error: ") and f"at position {pos[-1]} of {segment}" in err
    assert "Traceback" not in err
    code, doc, _ = run_json(capsys, str(segment))
    file = doc["files"][0]
    assert code == 1 and len(file["batches"]) == 7
    assert file["validBytes"] == pos[-1] and file["trailingBytes"] == 30
    assert file["errors"][0]["position"] == pos[-1]


def test_unknown_magic_is_printed_and_the_dump_goes_on(
    capsys: pytest.CaptureFixture[str], segment: Path
) -> None:
    """A batch whose magic byte is above 2 but whose length frames it is printed as Kafka's
    ``DumpLogSegments`` prints it (a v2 batch with ``magic: 7``, ``isvalid`` from its CRC, which
    does not cover the magic byte) and the batches after it follow; tierlog also reports it, so
    the exit code is 1 (Kafka's tool exits 0). The integration test
    ``test_unknown_magic_is_printed_and_skipped_as_kafka_does`` runs Kafka's tool on such a file."""
    pos = positions(segment)
    _, clean_out, _ = run(capsys, "--deep", "--print-data-log", str(segment))
    data = bytearray(segment.read_bytes())
    data[pos[2] + 16] = 7
    segment.write_bytes(bytes(data))
    message = "invalid magic byte 7 (expected 2) in record batch " + (
        f"at position {pos[2]} of {segment}"
    )

    code, out, err = run(capsys, "--deep", "--print-data-log", str(segment))
    assert code == 1
    lines = batch_lines(out)
    assert len(lines) == 8  # the old behaviour stopped here: 2 batches, then "Found N invalid"
    assert f"position: {pos[2]} " in lines[2] and " magic: 7 " in lines[2]
    assert lines[2].endswith("isvalid: true")
    # Everything else is the undamaged file's dump, records of the odd batch included.
    assert out == clean_out.replace(lines[2].replace(" magic: 7 ", " magic: 2 "), lines[2])
    assert "invalid bytes" not in out
    assert err == f"tierlog: error: {message}\n"

    code, doc, _ = run_json(capsys, str(segment))
    assert code == 1 and doc["ok"] is False
    file = doc["files"][0]
    assert [b["position"] for b in file["batches"]] == pos
    assert [b["magic"] for b in file["batches"]] == [2, 2, 7, 2, 2, 2, 2, 2]
    assert all(b["isValid"] for b in file["batches"])
    assert file["errors"] == [{"message": message, "position": pos[2]}]
    assert (file["validBytes"], file["trailingBytes"]) == (len(data), 0)

    # The log's own reader (recovery, appends) still stops there, as Kafka's recovery does.
    with pytest.raises(CorruptRecordError, match="invalid magic byte 7"):
        list(iter_batches(segment))


def test_unknown_magic_with_a_bad_crc_is_both_errors(
    capsys: pytest.CaptureFixture[str], segment: Path
) -> None:
    pos = positions(segment)
    data = bytearray(segment.read_bytes())
    data[pos[3] + 16] = 9
    data[pos[4] - 1] ^= 0xFF  # the last byte of batch 3: its CRC fails too
    segment.write_bytes(bytes(data))
    code, out, err = run(capsys, str(segment))
    assert code == 1
    lines = batch_lines(out)
    assert len(lines) == 8 and all(" magic: 2 " in ln for i, ln in enumerate(lines) if i != 3)
    assert " magic: 9 " in lines[3] and lines[3].endswith("isvalid: false")
    errors = err.splitlines()
    assert len(errors) == 2
    assert errors[0].startswith("tierlog: error: invalid magic byte 9")
    assert errors[1].startswith("tierlog: error: record batch CRC mismatch")
    assert all(f"at position {pos[3]} of {segment}" in e for e in errors)


@pytest.mark.parametrize(
    ("magic", "length"),
    [(7, 20), (7, 1 << 20), (0xC8, None), (0x80, None)],
    ids=["length-below-a-v2-header", "length-past-the-end", "negative-200", "negative-128"],
)
def test_bad_magic_without_a_v2_frame_stops_at_its_position(
    capsys: pytest.CaptureFixture[str], segment: Path, magic: int, length: int | None
) -> None:
    """No v2 frame to go on with (Kafka's tool stops there or dies): ``Found N invalid bytes``."""
    pos = positions(segment)
    data = bytearray(segment.read_bytes())
    data[pos[2] + 16] = magic
    if length is not None:
        struct.pack_into(">i", data, pos[2] + 8, length)
    segment.write_bytes(bytes(data))
    code, out, err = run(capsys, str(segment))
    assert code == 1
    assert len(batch_lines(out)) == 2
    assert out.splitlines()[-1] == (
        f"Found {len(data) - pos[2]} invalid bytes at the end of {segment.name}"
    )
    assert f"at position {pos[2]} of {segment}" in err and len(err.splitlines()) == 1


def test_legacy_message_format_gives_the_typed_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    body = struct.pack(">bbqi", 1, 0, T0, -1) + struct.pack(">i", 5) + b"hello"
    message = struct.pack(">I", crc32c(body)) + body
    log = tmp_path / LOG0
    log.write_bytes(struct.pack(">qi", 0, len(message)) + message)
    code, out, err = run(capsys, str(log))
    assert code == 1
    assert out.splitlines() == [f"Dumping {log}", "Log starting offset: 0"]
    assert "magic 1 (legacy message format) at position 0 of" in err
    assert "record batches v2" in err and "Traceback" not in err


def test_undecodable_records_are_reported_and_the_dump_goes_on(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = bytearray(build_batch([Record(0, T0, b"k", b"v")]))
    struct.pack_into(">i", bad, 57, 50)  # RecordsCount: 50 records cannot fit
    struct.pack_into(">I", bad, 17, crc32c(bytes(bad[21:])))  # with a valid CRC
    good = build_batch([Record(1, T0 + 1, b"k", b"v")], base_offset=1)
    log = write_segment(tmp_path, [bytes(bad), good])
    code, out, err = run(capsys, "--deep", str(log))
    assert code == 1
    assert len(batch_lines(out)) == 2 and len(record_lines(out)) == 1
    assert "record count 50 cannot fit" in err and "at position 0 of" in err
    code, doc, _ = run_json(capsys, "--deep", str(log))
    assert doc["files"][0]["batches"][0]["records"] is None
    assert len(doc["files"][0]["batches"][1]["records"]) == 1
    code, out, err = run(capsys, str(log))  # shallow: nothing wrong with the frames
    assert (code, err) == (0, "")


def test_unknown_codec_id_is_reported_shallow_and_deep(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = bytearray(build_batch([Record(0, T0, b"k", b"v")]))
    struct.pack_into(">h", bad, 21, 6)  # attributes: compression id 6 does not exist
    struct.pack_into(">I", bad, 17, crc32c(bytes(bad[21:])))
    log = write_segment(tmp_path, [bytes(bad)])
    code, out, err = run(capsys, str(log))
    assert code == 1 and "compresscodec: unknown(6) crc:" in out
    assert "unknown compression type id 6 in record batch at position 0 of" in err
    code, out, err = run(capsys, "--deep", str(log))
    assert code == 1 and err.count("unknown compression type id 6") == 1


def test_suffixed_files_dump_when_named(capsys: pytest.CaptureFixture[str], segment: Path) -> None:
    deleted = segment.with_name(segment.name + ".deleted")
    os.rename(segment, deleted)
    code, out, _ = run(capsys, str(deleted))
    assert code == 0 and len(batch_lines(out)) == 8
    code, doc, _ = run_json(capsys, str(deleted))
    assert doc["files"][0]["suffix"] == ".deleted" and doc["files"][0]["kind"] == "log"


# --- usage errors and the entry point ----------------------------------------------------------


def test_unknown_file_kind_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, segment: Path
) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    code, out, err = run(capsys, str(segment), str(other))
    assert (code, out) == (2, "")
    assert err.startswith(f"tierlog: error: cannot tell what {other} holds from its name")
    assert ".timeindex" in err
    code, out, err = run(capsys, str(tmp_path / "missing.log"))
    assert (code, out) == (2, "")
    assert "no such file or directory" in err
    temp = tmp_path / "leader-epoch-checkpoint.tmp"
    temp.write_text("0\n0\n")
    code, out, err = run(capsys, str(temp))
    assert (code, out) == (2, "")
    assert err == (
        f"tierlog: error: {temp} is an unfinished atomic write of leader-epoch-checkpoint (a "
        "crash came before its rename; recovery deletes it unread); to read it anyway, copy it "
        "to a file named leader-epoch-checkpoint in another directory and dump that\n"
    )


def test_python_m_entry_point(segment: Path) -> None:
    write_indexes(segment)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tierlog.cli",
            "log",
            "dump",
            "--json",
            "--deep",
            "--verify-index",
            str(segment),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [f["kind"] for f in doc["files"]] == ["log", "offset-index", "time-index"]
    assert doc["ok"] is True
