"""Cross-check with kafka-python, an independent pure-Python implementation of batches v2.

Both directions, for every codec kafka-python supports (gzip, snappy, lz4, zstd), with keys,
null keys and values, headers and transactional flags: what tierlog writes decodes (with a valid
CRC) in kafka-python, and what kafka-python builds decodes in tierlog.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.log.batch import (
    ControlRecordType,
    TimestampType,
    build_batch,
    build_control_batch,
    decode_batch,
    decode_control_record,
    set_base_offset,
    verify_crc,
)
from tierlog.log.compression import CompressionType
from tierlog.log.reader import iter_batches_with_records
from tierlog.log.record import Record

from ._record_helpers import record_lists

kafka_records = pytest.importorskip("kafka.record.default_records")
memory_records = pytest.importorskip("kafka.record.memory_records")
kafka_codec = pytest.importorskip("kafka.codec")

CODECS = list(CompressionType)
KP_CODEC = {c: int(c) for c in CompressionType}  # kafka-python uses Kafka's ids


def supported(codec: CompressionType) -> bool:
    return {
        CompressionType.NONE: True,
        CompressionType.GZIP: kafka_codec.has_gzip(),
        CompressionType.SNAPPY: kafka_codec.has_snappy(),
        CompressionType.LZ4: kafka_codec.has_lz4(),
        CompressionType.ZSTD: kafka_codec.has_zstd(),
    }[codec]


def kp_view(batch: object) -> list[tuple[object, ...]]:
    return [
        (r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers))
        for r in batch  # type: ignore[attr-defined]
    ]


def sample(n: int = 20) -> list[Record]:
    out = []
    for i in range(n):
        key = None if i % 4 == 0 else b"key-%d" % i
        value = None if i % 5 == 1 else (b"value %d " % i) * (i % 7)
        headers = tuple((f"h{j}", None if j == 1 else b"x" * j) for j in range(i % 3))
        out.append(Record(1000 + i, 1_700_000_000_000 + 3 * i, key, value, headers))
    return out


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("transactional", [False, True])
def test_tierlog_batches_decode_in_kafka_python(
    codec: CompressionType, transactional: bool
) -> None:
    if not supported(codec):
        pytest.skip(f"kafka-python has no {codec.kafka_name} library here")
    records = sample()
    raw = build_batch(
        records,
        base_offset=1000,
        compression=codec,
        producer_id=77 if transactional else -1,
        producer_epoch=5 if transactional else -1,
        base_sequence=11 if transactional else -1,
        is_transactional=transactional,
        partition_leader_epoch=9,
    )
    batch = kafka_records.DefaultRecordBatch(raw)
    assert batch.validate_crc()
    assert batch.base_offset == 1000 and batch.last_offset == 1019 and batch.next_offset == 1020
    assert batch.leader_epoch == 9 and batch.magic == 2
    assert batch.compression_type == int(codec)
    assert batch.is_transactional == transactional and not batch.is_control_batch
    assert batch.timestamp_type == 0
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        (77, 5, 11) if transactional else (-1, -1, -1)
    )
    assert batch.records_count == 20 and batch.size_in_bytes == len(raw)
    assert batch.max_timestamp == records[-1].timestamp
    assert kp_view(batch) == [tuple(r[:5]) for r in records]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("transactional", [False, True])
def test_kafka_python_batches_decode_in_tierlog(
    codec: CompressionType, transactional: bool
) -> None:
    if not supported(codec):
        pytest.skip(f"kafka-python has no {codec.kafka_name} library here")
    builder = kafka_records.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=KP_CODEC[codec],
        is_transactional=transactional,
        producer_id=123 if transactional else -1,
        producer_epoch=4 if transactional else -1,
        base_sequence=0 if transactional else -1,
        batch_size=1 << 20,
    )
    records = sample()
    for i, r in enumerate(records):
        # kafka-python writes offset deltas from 0 (the broker assigns the base offset)
        assert builder.append(i, r.timestamp, r.key, r.value, list(r.headers)) is not None
    raw = bytearray(builder.build())
    header, decoded = decode_batch(raw)
    # kafka-python sends uncompressed when compression does not pay; here it does
    assert header.compression == codec
    assert header.is_transactional == transactional and not header.is_control
    assert header.producer_id == (123 if transactional else -1)
    assert header.records_count == 20 and header.last_offset_delta == 19
    assert header.timestamp_type == TimestampType.CREATE_TIME
    assert [r[1:5] for r in decoded] == [tuple(r[1:5]) for r in records]
    # the broker's stamping: base offset and leader epoch are outside the CRC
    set_base_offset(raw, 1000)
    verify_crc(raw)
    _, stamped = decode_batch(raw)
    assert [r.offset for r in stamped] == [r.offset for r in records]


@pytest.mark.parametrize("marker", [ControlRecordType.COMMIT, ControlRecordType.ABORT])
def test_control_batches_decode_in_kafka_python(marker: ControlRecordType) -> None:
    raw = build_control_batch(
        marker, 6, base_offset=40, timestamp=123, producer_id=8, producer_epoch=1
    )
    batch = kafka_records.DefaultRecordBatch(raw)
    assert batch.validate_crc() and batch.is_control_batch and batch.is_transactional
    (record,) = list(batch)
    assert record.offset == 40 and record.type == int(marker) and record.version == 0
    assert record.commit == (marker == ControlRecordType.COMMIT)
    assert decode_control_record(Record(40, 123, record.key, record.value)).coordinator_epoch == 6


def test_segments_of_many_batches_both_ways() -> None:
    # tierlog -> kafka-python's MemoryRecords (batch after batch)
    parts, offset = [], 0
    for i, codec in enumerate(c for c in CODECS if supported(c)):
        recs = [r._replace(offset=offset + j) for j, r in enumerate(sample(5 + i))]
        parts.append(build_batch(recs, base_offset=offset, compression=codec))
        offset += len(recs)
    segment = b"".join(parts)
    mr = memory_records.MemoryRecords(segment)
    seen = []
    while mr.has_next():
        batch = mr.next_batch()
        assert batch.validate_crc()
        seen.extend(r.offset for r in batch)
    assert seen == list(range(offset))
    assert [r.offset for _, _, rs in iter_batches_with_records(segment) for r in rs] == seen


@pytest.mark.parametrize("codec", CODECS)
@given(records=record_lists(max_size=8), transactional=st.booleans())
@settings(max_examples=15, deadline=None)
def test_random_records_round_trip_through_kafka_python(
    codec: CompressionType, records: list[Record], transactional: bool
) -> None:
    if not supported(codec):
        pytest.skip(f"kafka-python has no {codec.kafka_name} library here")
    base = records[0].offset
    raw = build_batch(
        records,
        base_offset=base,
        compression=codec,
        is_transactional=transactional,
        producer_id=1 if transactional else -1,
    )
    batch = kafka_records.DefaultRecordBatch(raw)
    assert batch.validate_crc()
    assert kp_view(batch) == [tuple(r[:5]) for r in records]

    builder = kafka_records.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=KP_CODEC[codec],
        is_transactional=transactional,
        producer_id=1 if transactional else -1,
        producer_epoch=0 if transactional else -1,
        base_sequence=0 if transactional else -1,
        batch_size=1 << 20,
    )
    ts0 = records[0].timestamp
    for r in records:
        # kafka-python's builder takes timestamps >= 0 only as given; NO_TIMESTAMP stays -1
        builder.append(
            r.offset - base,
            r.timestamp if r.timestamp >= 0 else ts0,
            r.key,
            r.value,
            list(r.headers),
        )
    header, decoded = decode_batch(bytes(builder.build()))
    assert header.is_transactional == transactional
    assert [(r.offset_delta, r.key, r.value, r.headers) for r in decoded] == [
        (r.offset - base, r.key, r.value, r.headers) for r in records
    ]
