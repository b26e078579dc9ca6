"""Kafka 4.3.1's own code reads a metadata record carrying tierlog's CleanerOffsets tag (1272).

A cleaned segment's add record must stay readable by every Kafka broker, console formatter and
TopicBasedRemoteLogMetadataManager on the same ``__remote_log_metadata``. Two checks, both on
Kafka's real jars (``scripts/services/kafka.py``):

- Kafka's classes in one JVM, no broker: a small Java program (written to a temporary file and
  run by Java's source launcher through ``run_kafka_class``) feeds each record to
  ``RemoteLogMetadataSerde$RemoteLogMetadataFormatter``, to the generated
  ``RemoteLogSegmentMetadataRecord`` (which keeps tag 1272 as a raw unknown tagged field) and to
  ``RemoteLogMetadataSerde.serialize(deserialize(...))`` (Kafka writes the segment back without
  the tag). The formatter's line is tierlog's line of the same segment without its vector.
- A real topic: tierlog's topic RLMM writes cleaned and copied segments; Kafka's console consumer
  with Kafka's formatter reads every record (it stops at the first it cannot decode), its lines
  are ``tierlog metadata dump``'s without the ``cleanerOffsets`` suffix, and a second RLMM that
  replays the topic returns each vector as it was added.
"""

from __future__ import annotations

import dataclasses
import re
import struct
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from services._common import Service
from services.kafka import run_kafka_class

from tierlog.cli import main
from tierlog.metadata import format_record, metadata_partition, serialize
from tierlog.metadata.serde import CLEANER_OFFSETS_TAG, decode_record, encode_record
from tierlog.spi import (
    CustomMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    Uuid,
)

DEADLINE_S = 120.0
T0 = 1_700_000_000_000
STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
FORMATTER = (
    "org.apache.kafka.server.log.remote.metadata.storage.serialization."
    "RemoteLogMetadataSerde$RemoteLogMetadataFormatter"
)
LINE = re.compile(r"^partition: (\d+), offset: (\d+), value: ")
SUFFIX = re.compile(r", cleanerOffsets=\{[^}]*\}\}$")

KAFKA_READS_JAVA = """
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.types.RawTaggedField;
import org.apache.kafka.server.log.remote.metadata.storage.generated.RemoteLogSegmentMetadataRecord;
import org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde;

/** Hex apiKey-0 record values on stdin, one a line; for each, three lines from Kafka's classes. */
public class KafkaReads {
    public static void main(String[] args) throws Exception {
        HexFormat hex = HexFormat.of();
        RemoteLogMetadataSerde serde = new RemoteLogMetadataSerde();
        RemoteLogMetadataSerde.RemoteLogMetadataFormatter formatter =
            new RemoteLogMetadataSerde.RemoteLogMetadataFormatter();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        long offset = 0;
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            byte[] value = hex.parseHex(line.strip());
            formatter.writeTo(new ConsumerRecord<>("md", 0, offset++, null, value), System.out);
            RemoteLogSegmentMetadataRecord message = new RemoteLogSegmentMetadataRecord(
                new ByteBufferAccessor(ByteBuffer.wrap(value, 3, value.length - 3)), value[2]);
            List<String> tags = new ArrayList<>();
            for (RawTaggedField field : message.unknownTaggedFields()) {
                tags.add(field.tag() + "=" + hex.formatHex(field.data()));
            }
            System.out.println("unknown tags: " + String.join(" ", tags));
            System.out.println("written again: "
                + hex.formatHex(serde.serialize(serde.deserialize(value))));
        }
    }
}
"""


def cleaned(
    where: TopicIdPartition,
    start: int,
    end: int,
    epochs: dict[int, int],
    vector: dict[int, int] | None,
    *,
    custom: bytes | None = None,
    txn_idx_empty: bool = False,
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(where, Uuid.random()),
        start,
        end,
        T0 + end,
        3,
        T0 + 1000 + start,
        512 * (end - start + 1),
        epochs,
        None if custom is None else CustomMetadata(custom),
        STARTED,
        txn_idx_empty,
        vector,
    )


def without_vector(metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
    return dataclasses.replace(metadata, cleaner_offsets=None)


# Kafka's classes, no broker ---------------------------------------------------------------------
def test_kafkas_serde_and_formatter_skip_the_tag(tmp_path: Path) -> None:
    tip = TopicIdPartition(Uuid.random(), "orders", 4)
    segments = [
        cleaned(tip, 0, 99, {0: 0, 1: 60}, {0: 59, 1: 99}, custom=b"\x01\x02", txn_idx_empty=True),
        cleaned(tip, 100, 199, {1: 100}, {0: 59, 1: 199, 2: 150}),
        cleaned(tip, 200, 299, {2: 200}, None, txn_idx_empty=True),  # a copied segment
    ]
    values = [serialize(m) for m in segments]
    # The first again with unknown tags on both sides of 1272, as a newer writer would add.
    first = decode_record(values[0])
    values.append(
        encode_record(dataclasses.replace(first, unknown_tagged_fields=((5, b"\xaa"), (4000, b""))))
    )
    source = tmp_path / "KafkaReads.java"
    source.write_text(KAFKA_READS_JAVA)
    result = run_kafka_class(str(source), [], input_text="".join(f"{v.hex()}\n" for v in values))
    lines = [line for line in result.stdout.splitlines() if line]
    assert len(lines) == 3 * len(values), result.stdout + result.stderr

    expected = [*segments, segments[0]]
    for offset, metadata in enumerate(expected):
        formatted, tags, written = lines[3 * offset : 3 * offset + 3]
        plain = without_vector(metadata)
        assert formatted == format_record(0, offset, plain)
        assert SUFFIX.sub("}", format_record(0, offset, metadata)) == formatted
        assert written == f"written again: {serialize(plain).hex()}"
        want = [f"{CLEANER_OFFSETS_TAG}={vector_data(metadata.cleaner_offsets).hex()}"]
        if metadata.cleaner_offsets is None:
            want = []
        if offset == 3:
            want = ["5=aa", *want, "4000="]
        assert tags == "unknown tags: " + " ".join(want)


def vector_data(vector: Mapping[int, int] | None) -> bytes:
    """The data of tag 1272, built by hand: a compact array of (int32, int64, no tags)."""
    if vector is None:
        return b""
    entries = b"".join(struct.pack(">iqB", e, o, 0) for e, o in sorted(vector.items()))
    return bytes([len(vector) + 1]) + entries


# A real topic -----------------------------------------------------------------------------------
def wait_for(condition: Callable[[], object], what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def topic_rlmm(bootstrap: str, topic: str, log_dir: Path) -> object:
    from tierlog_rlmm_topic import TopicBasedRemoteLogMetadataManager

    rlmm = TopicBasedRemoteLogMetadataManager()
    rlmm.configure(
        {
            "remote.log.metadata.common.client.bootstrap.servers": bootstrap,
            "remote.log.metadata.topic.name": topic,
            "remote.log.metadata.topic.num.partitions": "2",
            "remote.log.metadata.topic.replication.factor": "1",
            "remote.log.metadata.topic.min.isr": "1",
            "node.id": "1",
            "log.dir": str(log_dir),
        }
    )
    return rlmm


def test_a_topic_with_vectors_reads_in_kafka_and_replays_in_tierlog(
    kafka_broker: Service, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tierlog_rlmm_topic import TopicBasedRemoteLogMetadataManager

    name = f"tierlog-cleaner-offsets-{uuid.uuid4().hex[:10]}"
    tip = TopicIdPartition(Uuid.random(), "compacted", 0)
    partition = metadata_partition(tip, 2)
    copied = cleaned(tip, 0, 99, {0: 0, 1: 40}, None, txn_idx_empty=True)
    first_clean = cleaned(tip, 0, 99, {0: 0, 1: 40}, {0: 39, 1: 99}, custom=b"c")
    next_clean = cleaned(tip, 100, 149, {1: 100}, {0: 39, 1: 149})
    adds = [copied, first_clean, next_clean]

    writer = topic_rlmm(kafka_broker.url, name, tmp_path / "writer")
    assert isinstance(writer, TopicBasedRemoteLogMetadataManager)
    try:
        writer.on_partition_leadership_changes({tip}, set())
        wait_for(lambda: writer.is_ready(tip), "the writing RLMM to be ready")
        events: list[object] = []
        for metadata in adds:
            writer.add_remote_log_segment_metadata(metadata).result(timeout=DEADLINE_S)
            update = RemoteLogSegmentMetadataUpdate(
                metadata.remote_log_segment_id, metadata.event_timestamp_ms + 1, None, FINISHED, 3
            )
            writer.update_remote_log_segment_metadata(update).result(timeout=DEADLINE_S)
            events += [metadata, update]
        written = {m.remote_log_segment_id: m for m in writer.list_remote_log_segments(tip)}
    finally:
        writer.close()
    assert {k: v.cleaner_offsets for k, v in written.items()} == {
        m.remote_log_segment_id: m.cleaner_offsets for m in adds
    }

    expected = [format_record(partition, offset, e) for offset, e in enumerate(events)]
    assert main(["metadata", "dump", "--bootstrap-servers", kafka_broker.url, "--topic", name]) == 0
    dumped = capsys.readouterr().out.splitlines()
    assert dumped == expected
    assert dumped[2].endswith(", cleanerOffsets={0=39, 1=99}}")

    kafka = run_kafka_class(
        CONSOLE_CONSUMER,
        [
            *("--bootstrap-server", kafka_broker.url, "--topic", name, "--from-beginning"),
            *("--formatter", FORMATTER, "--max-messages", str(len(events))),
            *("--timeout-ms", "60000"),
        ],
        timeout=300,
        check=False,
    )
    kafka_lines = [line for line in kafka.stdout.splitlines() if LINE.match(line)]
    assert "Unknown error when running consumer" not in kafka.stdout + kafka.stderr, kafka.stderr
    assert kafka_lines == [SUFFIX.sub("}", line) for line in dumped]
    assert sum(1 for line in dumped if SUFFIX.search(line)) == 2

    # A second node replays the topic from the beginning: every vector comes back.
    reader = topic_rlmm(kafka_broker.url, name, tmp_path / "reader")
    assert isinstance(reader, TopicBasedRemoteLogMetadataManager)
    try:
        reader.on_partition_leadership_changes(set(), {tip})
        wait_for(lambda: reader.is_ready(tip), "the replaying RLMM to be ready")
        replayed = {m.remote_log_segment_id: m for m in reader.list_remote_log_segments(tip)}
        assert replayed == written
        assert {k: v.cleaner_offsets for k, v in replayed.items()} == {
            m.remote_log_segment_id: m.cleaner_offsets for m in adds
        }
        served = reader.remote_log_segment_metadata(tip, 1, 120)
        assert served is not None and served.cleaner_offsets == {0: 39, 1: 149}
    finally:
        reader.close()
