"""``tierlog metadata dump --bootstrap-servers``: a metadata topic on a real Apache Kafka 4.3.1
broker, printed in the layout of Kafka's console formatter.

Known records are written with ``tierlog.metadata.serialize`` by a bare confluent-kafka producer
to a test-private topic of three partitions, each at the partition Kafka's
``RemoteLogMetadataTopicPartitioner`` picks for it, as an RLMM would; the expected lines are
``format_record`` of what was written, at the offsets the broker acknowledged. The dump must give
exactly those lines, grouped per partition in offset order, and honour its filters, its JSON
form, the keys of keyed records (the compacted RLMM's, KAFKA-20033) and their tombstones, its
client settings (a SASL/PLAIN broker through ``--command-config``), a record that does
not decode (a line in its place, the rest still shown, exit 1) and an unreachable cluster (one
line, exit 2). The comparison with Kafka's own formatter is in
``tests/integration/test_kafka_formatter.py``; the reader itself, ``client_config`` and the JAAS
line are tested in ``tests/metadata/test_topic_reader.py``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from services._common import Service, free_ports
from services.kafka import create_topic

from tierlog.cli import _metadata_dump, main
from tierlog.cli._metadata_dump import MISSING_CLIENT
from tierlog.metadata import (
    RemoteLogSegmentMetadataSnapshot,
    client_config,
    decode_record,
    encode_record,
    format_record,
    metadata_partition,
    record_to_json,
    serialize,
)
from tierlog.metadata.formatter import format_key, key_text
from tierlog.spi import (
    CustomMetadata,
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

DEADLINE_S = 120.0
METADATA_PARTITIONS = 3
T0 = 1_700_000_000_000
ORDERS = Uuid.from_string("Bp9TDduJRGa9Q5rlvCJOxg")
PAYMENTS = Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAQ")
CORRUPT = bytes.fromhex("000000")  # frame version 0: Kafka and tierlog both refuse it


# Talking to the broker --------------------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def produce(
    bootstrap: str, topic: str, records: Sequence[tuple[int, bytes | None, bytes | None]]
) -> list[Written]:
    """Write ``(partition, key, value)`` in order (one at a time, so offsets follow the list);
    the acknowledged partition and offset of each."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    written: list[Written] = []
    for partition, key, value in records:
        acked: list[tuple[int, int]] = []

        def report(err: object, msg: object, acked: list[tuple[int, int]] = acked) -> None:
            assert err is None, err
            acked.append((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

        producer.produce(topic, value=value, key=key, partition=partition, on_delivery=report)
        assert producer.flush(DEADLINE_S) == 0
        ((got_partition, offset),) = acked
        written.append(Written(got_partition, offset, key, value))
    return written


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# The known records ------------------------------------------------------------------------------
def tip(topic_id: Uuid, name: str, partition: int) -> TopicIdPartition:
    return TopicIdPartition(topic_id, name, partition)


def segment(
    where: TopicIdPartition,
    start: int,
    end: int,
    epochs: dict[int, int],
    *,
    custom: bytes | None = None,
    txn_idx_empty: bool = False,
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(where, Uuid.random()),
        start,
        end,
        T0 + end,
        1,
        T0 + 1000 + start,
        1024 * (end - start + 1),
        epochs,
        None if custom is None else CustomMetadata(custom),
        RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        txn_idx_empty,
    )


def finished(metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        metadata.remote_log_segment_id,
        metadata.event_timestamp_ms + 5,
        metadata.custom_metadata,
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        2,
    )


def known_records() -> list[object]:
    """Segments of four partitions of ``orders`` (custom metadata, several epochs, both
    txn-index flags), a copy finished, a partition deletion of ``payments``, a snapshot."""
    values: list[object] = []
    for partition in range(4):
        first = segment(
            tip(ORDERS, "orders", partition),
            0,
            99,
            {0: 0, 3: 40, 7: 90},
            custom=bytes(range(partition + 1)),
            txn_idx_empty=partition % 2 == 0,
        )
        second = segment(tip(ORDERS, "orders", partition), 100, 199, {7: 100})
        values += [first, finished(first), second]
    payments = tip(PAYMENTS, "payments", 0)
    values.append(segment(payments, 0, 9, {0: 0}, custom=b""))
    for state in RemotePartitionDeleteState:
        values.append(RemotePartitionDeleteMetadata(payments, state, T0 + state.id, 1))
    values.append(
        RemoteLogSegmentMetadataSnapshot.create(segment(tip(ORDERS, "orders", 0), 5, 6, {1: 5}))
    )
    return values


def placed(value: object) -> int:
    """The metadata partition an RLMM writes ``value`` to (snapshots, which name no partition,
    to partition 0)."""
    where = getattr(value, "topic_id_partition", None)
    return 0 if where is None else metadata_partition(where, METADATA_PARTITIONS)


@dataclass(frozen=True)
class DumpTopic:
    bootstrap: str
    name: str
    written: list[Written]
    values: list[object]

    def lines(self, keep: Callable[[Written, object], bool] = lambda w, v: True) -> list[str]:
        """The expected kafka-format lines of the records ``keep`` selects, partition by
        partition in offset order."""
        chosen = sorted(
            (w.partition, w.offset, v)
            for w, v in zip(self.written, self.values, strict=True)
            if keep(w, v)
        )
        return [format_record(p, o, v) for p, o, v in chosen]


@pytest.fixture(scope="module")
def dump_topic(kafka_broker: Service) -> DumpTopic:
    name = unique_topic("tierlog-dump")
    create_topic(kafka_broker.url, name, METADATA_PARTITIONS)
    values = known_records()
    written = produce(kafka_broker.url, name, [(placed(v), None, serialize(v)) for v in values])  # type: ignore[arg-type]
    return DumpTopic(kafka_broker.url, name, written, values)


def dump(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    code = main(["metadata", "dump", *argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def of(value: object, topic_id: Uuid | None = None, partition: int | None = None) -> bool:
    where = getattr(value, "topic_id_partition", None)
    if where is None:
        return False
    return (topic_id is None or where.topic_id == topic_id) and (
        partition is None or where.partition == partition
    )


# The dump ---------------------------------------------------------------------------------------
def test_every_record_in_kafka_formatter_lines_per_partition_in_offset_order(
    capsys: pytest.CaptureFixture[str], dump_topic: DumpTopic
) -> None:
    code, lines, err = dump(
        capsys, "--bootstrap-servers", dump_topic.bootstrap, "--topic", dump_topic.name
    )
    assert (code, err) == (0, "")
    assert lines == dump_topic.lines()
    assert len(lines) == len(dump_topic.values)
    partitions = [int(line.split(",")[0].removeprefix("partition: ")) for line in lines]
    assert partitions == sorted(partitions)
    assert set(partitions) == {w.partition for w in dump_topic.written}


def test_the_lines_show_each_field(
    capsys: pytest.CaptureFixture[str], dump_topic: DumpTopic
) -> None:
    code, lines, _ = dump(
        capsys, "--bootstrap-servers", dump_topic.bootstrap, "--topic", dump_topic.name
    )
    assert code == 0
    text = "\n".join(lines)
    first = dump_topic.values[0]
    assert isinstance(first, RemoteLogSegmentMetadata)
    assert (
        f"value: RemoteLogSegmentMetadata{{remoteLogSegmentId=RemoteLogSegmentId{{"
        f"topicIdPartition={ORDERS}:orders-0, id={first.remote_log_segment_id.id}}}, "
        f"startOffset=0, endOffset=99, brokerId=1, maxTimestampMs={T0 + 99}, "
        f"eventTimestampMs={T0 + 1000}, segmentLeaderEpochs={{0=0, 3=40, 7=90}}, "
        f"segmentSizeInBytes=102400, customMetadata=Optional[CustomMetadata{{1 bytes}}], "
        f"state=COPY_SEGMENT_STARTED, txnIdxEmpty=true}}"
    ) in text
    assert "customMetadata=Optional.empty" in text
    assert "customMetadata=Optional[CustomMetadata{0 bytes}]" in text
    assert "txnIdxEmpty=false" in text
    assert "state=COPY_SEGMENT_FINISHED, eventTimestampMs=" in text
    for state in RemotePartitionDeleteState:
        assert f"topicPartition={PAYMENTS}:payments-0, state={state.name}" in text
    assert "value: RemoteLogSegmentMetadataSnapshot{segmentId=" in text


def test_topic_id_keeps_the_records_of_that_topic(
    capsys: pytest.CaptureFixture[str], dump_topic: DumpTopic
) -> None:
    code, lines, err = dump(
        capsys,
        *("--bootstrap-servers", dump_topic.bootstrap, "--topic", dump_topic.name),
        *("--topic-id", str(PAYMENTS)),
    )
    assert (code, err) == (0, "")
    assert lines == dump_topic.lines(lambda w, v: of(v, PAYMENTS))
    assert len(lines) == 4


@pytest.mark.parametrize("partition", range(4))
def test_topic_id_and_partition_read_the_mapped_metadata_partition(
    capsys: pytest.CaptureFixture[str], dump_topic: DumpTopic, partition: int
) -> None:
    code, lines, err = dump(
        capsys,
        *("--bootstrap-servers", dump_topic.bootstrap, "--topic", dump_topic.name),
        *("--topic-id", str(ORDERS), "--partition", str(partition)),
    )
    assert (code, err) == (0, "")
    assert lines == dump_topic.lines(lambda w, v: of(v, ORDERS, partition))
    assert len(lines) == 3
    mapped = metadata_partition(tip(ORDERS, "", partition), METADATA_PARTITIONS)
    assert all(line.startswith(f"partition: {mapped}, ") for line in lines)
    # The same with the partition count given; and a count that maps it elsewhere.
    assert dump(
        capsys,
        *("--bootstrap-servers", dump_topic.bootstrap, "--topic", dump_topic.name),
        *("--topic-id", str(ORDERS), "--partition", str(partition)),
        *("--metadata-partitions", str(METADATA_PARTITIONS), "--metadata-partition", str(mapped)),
    ) == (0, lines, "")


def test_partition_without_topic_id_keeps_that_partition_of_every_topic(
    capsys: pytest.CaptureFixture[str], dump_topic: DumpTopic
) -> None:
    code, lines, _ = dump(
        capsys,
        *("--bootstrap-servers", dump_topic.bootstrap, "--topic", dump_topic.name),
        *("--partition", "0"),
    )
    assert code == 0
    assert lines == dump_topic.lines(lambda w, v: of(v, partition=0))
    assert any("payments-0" in line for line in lines)
    assert any("orders-0" in line for line in lines)


@pytest.mark.parametrize("metadata_partition_number", range(METADATA_PARTITIONS))
def test_metadata_partition_reads_that_partition_only(
    capsys: pytest.CaptureFixture[str], dump_topic: DumpTopic, metadata_partition_number: int
) -> None:
    code, lines, _ = dump(
        capsys,
        *("--bootstrap-servers", dump_topic.bootstrap, "--topic", dump_topic.name),
        *("--metadata-partition", str(metadata_partition_number)),
    )
    assert code == 0
    assert lines == dump_topic.lines(lambda w, v: w.partition == metadata_partition_number)


def test_json_is_the_decode_json_with_partition_and_offset(
    capsys: pytest.CaptureFixture[str], dump_topic: DumpTopic
) -> None:
    code, lines, err = dump(
        capsys,
        *("--bootstrap-servers", dump_topic.bootstrap, "--topic", dump_topic.name),
        *("--format", "json"),
    )
    assert (code, err) == (0, "")
    expected = [
        {"partition": w.partition, "offset": w.offset, **record_to_json(decode_record(w.value))}  # type: ignore[arg-type]
        for w in sorted(dump_topic.written, key=lambda w: (w.partition, w.offset))
    ]
    assert [json.loads(line) for line in lines] == expected
    # ... and each object, without partition and offset, encodes back to the record's bytes.
    for line in lines[:3]:
        obj = json.loads(line)
        del obj["partition"], obj["offset"]
        assert main(["metadata", "encode", json.dumps(obj)]) == 0
    encoded = capsys.readouterr().out.split()
    firsts = sorted(dump_topic.written, key=lambda w: (w.partition, w.offset))[:3]
    assert encoded == [w.value.hex() for w in firsts]  # type: ignore[union-attr]


def test_json_with_filters(capsys: pytest.CaptureFixture[str], dump_topic: DumpTopic) -> None:
    code, lines, _ = dump(
        capsys,
        *("--bootstrap-servers", dump_topic.bootstrap, "--topic", dump_topic.name),
        *("--format", "json", "--topic-id", str(ORDERS), "--partition", "2"),
    )
    assert code == 0
    objs = [json.loads(line) for line in lines]
    assert len(objs) == 3
    assert {o["remoteLogSegmentId"]["topicIdPartition"]["partition"] for o in objs} == {2}


# Records that do not decode, tombstones ---------------------------------------------------------
@pytest.fixture(scope="module")
def broken_topic(kafka_broker: Service) -> DumpTopic:
    """A good record, one that does not decode, a tombstone with a key, a good record on
    partition 0; a good record of ``orders``-0 on its own metadata partition; a record that does
    not decode on another partition."""
    name = unique_topic("tierlog-dump-broken")
    create_topic(kafka_broker.url, name, METADATA_PARTITIONS)
    good = [segment(tip(ORDERS, "orders", 0), 0, 9, {0: 0}) for _ in range(3)]
    home = metadata_partition(tip(ORDERS, "", 0), METADATA_PARTITIONS)
    other = (home + 1) % METADATA_PARTITIONS
    rows = [
        (other, None, serialize(good[0])),
        (other, None, CORRUPT),
        (other, b"key-1", None),
        (other, None, serialize(good[1])),
        (home, None, serialize(good[2])),
    ]
    written = produce(kafka_broker.url, name, rows)
    values: list[object] = [good[0], None, None, good[1], good[2]]
    return DumpTopic(kafka_broker.url, name, written, values)


def corrupt_reason() -> str:
    with pytest.raises(MetadataRecordError) as info:
        decode_record(CORRUPT)
    return str(info.value)


def test_a_record_that_does_not_decode_is_a_line_and_the_rest_is_shown(
    capsys: pytest.CaptureFixture[str], broken_topic: DumpTopic
) -> None:
    code, lines, err = dump(
        capsys, "--bootstrap-servers", broken_topic.bootstrap, "--topic", broken_topic.name
    )
    bad = broken_topic.written[1]
    reason = corrupt_reason()
    expected = []
    for w, value in sorted(
        zip(broken_topic.written, broken_topic.values, strict=True),
        key=lambda wv: (wv[0].partition, wv[0].offset),
    ):
        if w is bad:
            expected.append(f"partition: {w.partition}, offset: {w.offset}, error: {reason}")
        elif value is None:
            expected.append(
                f"partition: {w.partition}, offset: {w.offset}, key: key-1, value: null"
            )
        else:
            expected.append(format_record(w.partition, w.offset, value))
    assert code == 1
    assert lines == expected
    assert err.splitlines() == [
        f"tierlog: 1 record(s) of {broken_topic.name} have a null value (a tombstone): Kafka's "
        "RemoteLogMetadataFormatter and a Kafka 4.3 broker's RLMM cannot read them",
        f"tierlog: error: 1 record(s) of {broken_topic.name} did not decode (the first at "
        f"partition {bad.partition}, offset {bad.offset}: {reason})",
    ]


def test_a_record_that_does_not_decode_in_json(
    capsys: pytest.CaptureFixture[str], broken_topic: DumpTopic
) -> None:
    code, lines, _ = dump(
        capsys,
        *("--bootstrap-servers", broken_topic.bootstrap, "--topic", broken_topic.name),
        *("--format", "json"),
    )
    assert code == 1
    objs = {(o["partition"], o["offset"]): o for o in map(json.loads, lines)}
    bad, tombstone = broken_topic.written[1], broken_topic.written[2]
    assert objs[bad.partition, bad.offset] == {
        "partition": bad.partition,
        "offset": bad.offset,
        "error": corrupt_reason(),
    }
    assert objs[tombstone.partition, tombstone.offset] == {
        "partition": tombstone.partition,
        "offset": tombstone.offset,
        "key": b"key-1".hex(),
        "key_text": "key-1",
        "value": None,
    }
    assert len(objs) == 5


def test_filters_read_only_the_mapped_partition_so_a_bad_record_elsewhere_is_not_seen(
    capsys: pytest.CaptureFixture[str], broken_topic: DumpTopic
) -> None:
    """A record that does not decode is shown whatever the filters: its absence here proves
    that the other metadata partitions were not read."""
    code, lines, err = dump(
        capsys,
        *("--bootstrap-servers", broken_topic.bootstrap, "--topic", broken_topic.name),
        *("--topic-id", str(ORDERS), "--partition", "0"),
    )
    assert (code, err) == (0, "")
    home = broken_topic.written[4]
    assert lines == [format_record(home.partition, home.offset, broken_topic.values[4])]


def test_with_topic_id_a_bad_record_on_a_read_partition_still_shows(
    capsys: pytest.CaptureFixture[str], broken_topic: DumpTopic
) -> None:
    code, lines, _ = dump(
        capsys,
        *("--bootstrap-servers", broken_topic.bootstrap, "--topic", broken_topic.name),
        *("--topic-id", str(PAYMENTS)),
    )
    bad = broken_topic.written[1]
    assert code == 1
    assert len(lines) == 1
    assert lines[0].startswith(f"partition: {bad.partition}, offset: {bad.offset}, error: ")


# Keyed records: the compacted RLMM's projection topic (KAFKA-20033) -----------------------------
def compacted_key(where: TopicIdPartition, end_offset: int, epoch: int) -> bytes:
    return f"{where.topic_id}:{where.partition}:{end_offset}:{epoch}".encode()


@pytest.fixture(scope="module")
def keyed_topic(kafka_broker: Service) -> DumpTopic:
    """What a compacted RLMM's projection topic holds, each record on the metadata partition of
    its user partition: keyed adds and updates (one value with tags a Kafka reader skips), a
    partition-delete marker keyed by the log end offset, keyed tombstones, a legacy record
    without a key, and on ``orders``-0's partition a tombstone whose key is not UTF-8 and a
    record whose key holds a line break."""
    name = unique_topic("tierlog-dump-keyed")
    create_topic(kafka_broker.url, name, METADATA_PARTITIONS)
    orders0, orders1 = tip(ORDERS, "orders", 0), tip(ORDERS, "orders", 1)
    payments = tip(PAYMENTS, "payments", 0)
    first = segment(orders0, 0, 99, {0: 0, 3: 40})
    tagged = encode_record(
        dataclasses.replace(
            decode_record(serialize(finished(first))),
            unknown_tagged_fields=((20033, (3).to_bytes(4, "big")),),
        )
    )
    other = segment(orders1, 0, 49, {2: 0})
    legacy = segment(orders1, 50, 59, {2: 50})
    delete = RemotePartitionDeleteMetadata(
        payments, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, T0, 1
    )
    rows: list[tuple[object, bytes | None, bytes | None]] = [
        (first, compacted_key(orders0, 99, 3), serialize(first)),
        (finished(first), compacted_key(orders0, 99, 3), tagged),
        (other, compacted_key(orders1, 49, 2), serialize(other)),
        (None, compacted_key(orders1, 49, 2), None),
        (legacy, None, serialize(legacy)),
        (delete, compacted_key(payments, 1000, 0), serialize(delete)),
        (None, compacted_key(payments, 9, 0), None),
        (None, b"\xff\xfeorders", None),
        (first, b"line\nbreak", serialize(first)),
    ]
    home0 = metadata_partition(orders0, METADATA_PARTITIONS)
    placement = [
        home0,
        home0,
        metadata_partition(orders1, METADATA_PARTITIONS),
        metadata_partition(orders1, METADATA_PARTITIONS),
        metadata_partition(orders1, METADATA_PARTITIONS),
        metadata_partition(payments, METADATA_PARTITIONS),
        metadata_partition(payments, METADATA_PARTITIONS),
        home0,
        home0,
    ]
    written = produce(
        kafka_broker.url,
        name,
        [(p, key, value) for p, (_, key, value) in zip(placement, rows, strict=True)],
    )
    return DumpTopic(kafka_broker.url, name, written, [value for value, _, _ in rows])


def keyed_line(w: Written, value: object) -> str:
    """The expected kafka-format line of a keyed topic's record, written out by hand."""
    head = f"partition: {w.partition}, offset: {w.offset}, "
    if w.key is None:
        return format_record(w.partition, w.offset, value)
    shown = {
        b"\xff\xfeorders": "0x" + b"\xff\xfeorders".hex(),
        b"line\nbreak": "0x6c696e650a627265616b",
    }
    key = shown[w.key] if w.key in shown else w.key.decode()
    if value is None:
        return f"{head}key: {key}, value: null"
    return head + f"key: {key}, " + format_record(w.partition, w.offset, value).removeprefix(head)


def test_a_keyed_record_shows_its_key_before_its_value(
    capsys: pytest.CaptureFixture[str], keyed_topic: DumpTopic
) -> None:
    code, lines, err = dump(
        capsys, "--bootstrap-servers", keyed_topic.bootstrap, "--topic", keyed_topic.name
    )
    assert code == 0
    expected = [
        keyed_line(w, v)
        for w, v in sorted(
            zip(keyed_topic.written, keyed_topic.values, strict=True),
            key=lambda wv: (wv[0].partition, wv[0].offset),
        )
    ]
    assert lines == expected
    assert len(lines) == len(keyed_topic.written)
    text = "\n".join(lines)
    assert f"key: {ORDERS}:0:99:3, value: RemoteLogSegmentMetadata{{" in text
    assert f"key: {ORDERS}:0:99:3, value: RemoteLogSegmentMetadataUpdate{{" in text
    assert f"key: {PAYMENTS}:0:1000:0, value: RemotePartitionDeleteMetadata{{" in text
    assert f"key: {ORDERS}:1:49:2, value: null" in text
    assert "key: 0xfffe6f7264657273, value: null" in text
    # The legacy record keeps Kafka's exact line; the tagged update's line is the plain one's.
    legacy = keyed_topic.written[4]
    assert format_record(legacy.partition, legacy.offset, keyed_topic.values[4]) in lines
    assert err.splitlines() == [
        f"tierlog: 3 record(s) of {keyed_topic.name} have a null value (a tombstone): Kafka's "
        "RemoteLogMetadataFormatter and a Kafka 4.3 broker's RLMM cannot read them"
    ]


def test_keyed_records_in_json_have_the_key_in_hex_and_as_text(
    capsys: pytest.CaptureFixture[str], keyed_topic: DumpTopic
) -> None:
    code, lines, _ = dump(
        capsys,
        *("--bootstrap-servers", keyed_topic.bootstrap, "--topic", keyed_topic.name),
        *("--format", "json"),
    )
    assert code == 0
    objs = {(o["partition"], o["offset"]): o for o in map(json.loads, lines)}
    assert len(objs) == len(keyed_topic.written)
    for w in keyed_topic.written:
        obj = objs[w.partition, w.offset]
        if w.key is None:
            assert "key" not in obj and "key_text" not in obj
            continue
        assert obj["key"] == w.key.hex()
        if w.key == b"\xff\xfeorders":
            assert "key_text" not in obj
        else:
            assert obj["key_text"] == w.key.decode()
        if w.value is None:
            assert obj["value"] is None
        else:
            rest = {
                k: v for k, v in obj.items() if k not in ("partition", "offset", "key", "key_text")
            }
            assert rest == record_to_json(decode_record(w.value))
    update = keyed_topic.written[1]
    assert objs[update.partition, update.offset]["unknownTaggedFields"] == [
        {"tag": 20033, "data": "00000003"}
    ]


@pytest.mark.parametrize(
    ("argv", "kept"),
    [
        (("--topic-id", str(ORDERS), "--partition", "1"), {2, 3, 4}),
        (("--topic-id", str(ORDERS), "--partition", "0"), {0, 1, 8}),
        (("--topic-id", str(PAYMENTS)), {5, 6}),
        (("--partition", "0"), {0, 1, 5, 6, 8}),
    ],
)
def test_filters_keep_the_tombstones_whose_compacted_key_names_a_kept_partition(
    capsys: pytest.CaptureFixture[str],
    keyed_topic: DumpTopic,
    argv: tuple[str, ...],
    kept: set[int],
) -> None:
    """A tombstone has no value to name its topic; a compacted RLMM key names it (topic id and
    partition), so the filters keep the tombstones of the partitions they keep. A tombstone
    whose key is not such a key (index 7) names no topic and is left out."""
    code, lines, _ = dump(
        capsys,
        *("--bootstrap-servers", keyed_topic.bootstrap, "--topic", keyed_topic.name),
        *argv,
    )
    assert code == 0
    chosen = sorted(
        (
            wv
            for i, wv in enumerate(zip(keyed_topic.written, keyed_topic.values, strict=True))
            if i in kept
        ),
        key=lambda wv: (wv[0].partition, wv[0].offset),
    )
    assert lines == [keyed_line(w, v) for w, v in chosen]


def test_format_key_shows_utf8_text_or_hex() -> None:
    assert format_key(b"T8fJ9Kz3RyWxP2mQ4nL7vB:0:1999:5") == "T8fJ9Kz3RyWxP2mQ4nL7vB:0:1999:5"
    assert format_key("clé".encode()) == "clé"
    assert format_key(b"\xc3") == "0xc3"  # a truncated UTF-8 sequence
    assert format_key(b"a\tb") == "0x610962"  # a tab or a line break would break the line
    assert format_key(b"") == "0x"
    assert key_text(b"a\nb") == "a\nb" and key_text(b"\xc3") is None
    assert format_record(
        0, 1, finished(segment(tip(ORDERS, "orders", 0), 0, 9, {0: 0})), key=b"k"
    ).startswith("partition: 0, offset: 1, key: k, value: RemoteLogSegmentMetadataUpdate{")


@pytest.mark.parametrize(
    ("key", "place"),
    [
        (f"{ORDERS}:3:1999:5".encode(), (ORDERS, 3)),
        (f"{PAYMENTS}:0:-1:0".encode(), (PAYMENTS, 0)),  # a partition deletion of an empty log
        (f"{ORDERS}:2147483648:1:1".encode(), None),  # not a partition number
        (f"{ORDERS}:3:1999".encode(), None),
        (f"{ORDERS}:3:1999:5:7".encode(), None),
        (f"{ORDERS}:x:1999:5".encode(), None),
        (b"AAAAAAAAAAAAAAAAAAAAA_:0:1:1", None),  # not a canonical Uuid
        (b"key-1", None),
        (b"\xff:0:1:1", None),
    ],
)
def test_compacted_key_place(key: bytes, place: tuple[Uuid, int] | None) -> None:
    assert _metadata_dump.compacted_key_place(key) == place


def test_a_record_of_a_later_version_is_shown_and_noted(
    capsys: pytest.CaptureFixture[str],
    kafka_broker: Service,
) -> None:
    """A KAFKA-20033 version-1 record decodes in tierlog (its line is version 0's) but not in
    Kafka 4.3 (tests/integration/test_kafka_formatter.py shows it): noted on stderr, exit 0."""
    name = unique_topic("tierlog-dump-v1")
    create_topic(kafka_broker.url, name, 1)
    value = segment(tip(ORDERS, "orders", 0), 0, 9, {0: 0})
    v1 = encode_record(dataclasses.replace(decode_record(serialize(value)), version=1))
    written = produce(kafka_broker.url, name, [(0, None, serialize(value)), (0, None, v1)])
    code, lines, err = dump(capsys, "--bootstrap-servers", kafka_broker.url, "--topic", name)
    assert code == 0
    assert lines == [format_record(0, w.offset, value) for w in written]
    assert err == (
        f"tierlog: 1 record(s) of {name} have a version above 0 (the first at partition 0, "
        f"offset {written[1].offset}: version 1): their lines look like version 0's, but Kafka "
        "4.3's RemoteLogMetadataFormatter and RLMM cannot read them (\"Can't read version 1 of "
        '...Entry")\n'
    )
    code, lines, _ = dump(
        capsys, "--bootstrap-servers", kafka_broker.url, "--topic", name, "--format", "json"
    )
    assert [json.loads(line)["version"] for line in lines] == [0, 1]


def test_long_dumps_show_progress_on_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, dump_topic: DumpTopic
) -> None:
    monkeypatch.setattr(_metadata_dump, "PROGRESS_MIN_RECORDS", 1)
    code, lines, err = dump(
        capsys, "--bootstrap-servers", dump_topic.bootstrap, "--topic", dump_topic.name
    )
    assert code == 0
    assert lines == dump_topic.lines()
    total = len(dump_topic.values)
    assert err.splitlines()[-1].startswith(f"[dump] 100.0%  {total} / {total} records  ")


# Errors -----------------------------------------------------------------------------------------
def test_an_unreachable_cluster_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    (port,) = free_ports(1)
    code, lines, err = dump(capsys, "--bootstrap-servers", f"127.0.0.1:{port}", "--timeout", "2")
    assert (code, lines) == (2, [])
    assert err.count("\n") == 1
    assert err.startswith(
        f"tierlog: error: no answer from the Kafka cluster at 127.0.0.1:{port} within 2 s ("
    )
    assert "Connection refused" in err


def test_a_missing_topic_is_an_error(
    capsys: pytest.CaptureFixture[str],
    kafka_broker: Service,
) -> None:
    code, lines, err = dump(
        capsys, "--bootstrap-servers", kafka_broker.url, "--topic", "no-such-topic-here"
    )
    assert (code, lines) == (2, [])
    assert err == f"tierlog: error: topic no-such-topic-here does not exist at {kafka_broker.url}\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--metadata-partitions", "5"],
            "--metadata-partitions places a user partition: it needs --topic-id and --partition",
        ),
        (
            ["--topic-id", str(ORDERS), "--metadata-partitions", "5"],
            "--metadata-partitions places a user partition: it needs --topic-id and --partition",
        ),
        (["--partition", "-1"], "--partition must be in 0..2147483647, got -1"),
        (["--metadata-partition", "-2"], "--metadata-partition must be in 0..2147483647, got -2"),
        (
            ["--topic-id", str(ORDERS), "--partition", "0", "--metadata-partitions", "0"],
            "--metadata-partitions must be in 1..2147483647, got 0",
        ),
    ],
)
def test_bad_arguments_are_refused_before_connecting(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    (port,) = free_ports(1)
    code, lines, err = dump(capsys, "--bootstrap-servers", f"127.0.0.1:{port}", *argv)
    assert (code, lines, err) == (2, [], f"tierlog: error: {message}\n")


def test_a_bad_topic_id_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, err = dump(capsys, "--bootstrap-servers", "127.0.0.1:1", "--topic-id", "nope")
    assert (code, lines) == (2, [])
    assert err.startswith("tierlog: error: ") and err.count("\n") == 1


def test_partitions_the_topic_does_not_have(
    capsys: pytest.CaptureFixture[str], dump_topic: DumpTopic
) -> None:
    base = ("--bootstrap-servers", dump_topic.bootstrap, "--topic", dump_topic.name)
    code, _, err = dump(capsys, *base, "--metadata-partition", "3")
    assert (code, err) == (
        2,
        f"tierlog: error: --metadata-partition 3: {dump_topic.name} has 3 partitions (0..2)\n",
    )
    # 50 metadata partitions (Kafka's default) map orders-p beyond this topic's 3 for some p.
    partition = next(p for p in range(100) if metadata_partition(tip(ORDERS, "", p), 50) >= 3)
    mapped = metadata_partition(tip(ORDERS, "", partition), 50)
    code, _, err = dump(
        capsys,
        *base,
        *("--topic-id", str(ORDERS), "--partition", str(partition), "--metadata-partitions", "50"),
    )
    assert (code, err) == (
        2,
        f"tierlog: error: topic id {ORDERS} partition {partition} is on metadata partition "
        f"{mapped} of 50, but {dump_topic.name} has 3 partitions\n",
    )
    home = metadata_partition(tip(ORDERS, "", 0), METADATA_PARTITIONS)
    elsewhere = (home + 1) % METADATA_PARTITIONS
    code, _, err = dump(
        capsys,
        *base,
        *("--topic-id", str(ORDERS), "--partition", "0", "--metadata-partition", str(elsewhere)),
    )
    assert (code, err) == (
        2,
        f"tierlog: error: topic id {ORDERS} partition 0 is on metadata partition {home} of 3, "
        f"not on --metadata-partition {elsewhere}\n",
    )


def test_without_confluent_kafka_the_command_says_what_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # import fails
    code, lines, err = dump(capsys, "--bootstrap-servers", "127.0.0.1:9092")
    assert (code, lines) == (2, [])
    assert err == f"tierlog: error: {MISSING_CLIENT}\n"
    assert MISSING_CLIENT == (
        "tierlog metadata dump --bootstrap-servers needs confluent-kafka: pip install "
        "plugins/rlmm_topic (or pip install confluent-kafka)"
    )


# --follow ---------------------------------------------------------------------------------------
def _lines_of(process: subprocess.Popen[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _take(lines: queue.Queue[str], count: int) -> list[str]:
    return [lines.get(timeout=DEADLINE_S) for _ in range(count)]


def test_follow_prints_the_dump_then_new_records(kafka_broker: Service) -> None:
    name = unique_topic("tierlog-dump-follow")
    create_topic(kafka_broker.url, name, METADATA_PARTITIONS)
    first = segment(tip(ORDERS, "orders", 1), 0, 9, {0: 0})
    before = produce(kafka_broker.url, name, [(placed(first), None, serialize(first))])
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "tierlog.cli", "metadata", "dump", "--follow"),
            *("--bootstrap-servers", kafka_broker.url, "--topic", name),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = _lines_of(process)
        assert _take(lines, 1) == [format_record(before[0].partition, before[0].offset, first)]
        later = finished(first)
        other = segment(tip(PAYMENTS, "payments", 3), 0, 9, {0: 0})
        after = produce(
            kafka_broker.url,
            name,
            [(placed(later), None, serialize(later)), (placed(other), None, serialize(other))],
        )
        expected = [
            format_record(w.partition, w.offset, v)
            for w, v in zip(after, [later, other], strict=True)
        ]
        assert sorted(_take(lines, 2)) == sorted(expected)
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=180)
    assert process.returncode == 130, err


# --command-config -------------------------------------------------------------------------------
def test_command_config_with_a_plaintext_cluster(
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    dump_topic: DumpTopic,
    tmp_path: Path,
) -> None:
    config = tmp_path / "client.properties"
    config.write_text(
        "# as given to kafka-console-consumer --command-config\n"
        "security.protocol=PLAINTEXT\nclient.id=dump-test\nrequest.timeout.ms=30000\n"
    )
    with caplog.at_level(logging.WARNING):
        code, lines, _ = dump(
            capsys,
            *("--bootstrap-servers", dump_topic.bootstrap, "--topic", dump_topic.name),
            *("--command-config", str(config)),
        )
    assert code == 0
    assert lines == dump_topic.lines()
    assert "ignored (not a client security setting): request.timeout.ms" in caplog.text


def test_a_missing_command_config_file_is_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nope.properties"
    code, _, err = dump(
        capsys, "--bootstrap-servers", "127.0.0.1:1", "--command-config", str(missing)
    )
    assert code == 2
    assert err.startswith(f"tierlog: error: cannot read properties file {missing}")


PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
    'password="alice-secret";'
)


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A private broker whose client listener wants SASL/PLAIN (users admin and alice)."""
    from services.kafka import start_kafka

    server_jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" user_admin="admin-secret" '
        'user_alice="alice-secret";'
    )
    service = start_kafka(
        tmp_path_factory.mktemp("kafka-sasl"),
        properties={
            "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.plaintext.plain.sasl.jaas.config": server_jaas,
        },
    )
    yield service
    service.stop(timeout=20)


@pytest.mark.slow
def test_command_config_with_sasl_plain_jaas(
    capsys: pytest.CaptureFixture[str], sasl_broker: Service, tmp_path: Path
) -> None:
    """A Kafka tool's properties file, JAAS line and all, reads a SASL/PLAIN cluster; a wrong
    password is a one-line error."""
    secured = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": PLAIN_JAAS,
    }
    name = unique_topic("tierlog-dump-sasl")
    admin = AdminClient(
        {"bootstrap.servers": sasl_broker.url, **client_config(secured)}  # type: ignore[arg-type]
    )
    for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
        future.result(timeout=DEADLINE_S)
    value = segment(tip(ORDERS, "orders", 0), 0, 9, {0: 0}, custom=b"abc")
    producer = Producer({"bootstrap.servers": sasl_broker.url, **client_config(secured)})
    producer.produce(name, serialize(value), partition=0)
    assert producer.flush(DEADLINE_S) == 0

    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        '    username="alice" \\\n    password="alice-secret";\n'
    )
    argv = ("--bootstrap-servers", sasl_broker.url, "--topic", name, "--timeout", "60")
    code, lines, err = dump(capsys, *argv, "--command-config", str(config))
    assert (code, err) == (0, "")
    assert lines == [format_record(0, 0, value)]

    config.write_text(config.read_text().replace("alice-secret", "wrong"))
    code, lines, err = dump(
        capsys, *argv[:-1], "10", "--command-config", str(config)
    )  # fmt: skip
    assert (code, lines) == (2, [])
    assert err.count("\n") == 1
    assert err.startswith(
        f"tierlog: error: the Kafka cluster at {sasl_broker.url} refused the client's security "
        "settings (--command-config): "
    )
    assert "SASL authentication error" in err


def test_the_command_runs_from_its_module_entry_point() -> None:
    """``python -m tierlog.cli metadata dump --help`` (what the --follow test runs)."""
    result = subprocess.run(
        [sys.executable, "-m", "tierlog.cli", "metadata", "dump", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert "--bootstrap-servers" in result.stdout and "--follow" in result.stdout
