"""Kafka's own view of ``__remote_log_metadata``: its console consumer with Kafka's formatter.

``kafka_metadata_events`` runs ``org.apache.kafka.tools.consumer.ConsoleConsumer`` with
``RemoteLogMetadataSerde$RemoteLogMetadataFormatter`` from the broker's jars and parses each
``partition: P, offset: O, value: <toString()>`` line; ``kafka_segments`` folds a partition's
events into the segments Kafka's ``RemoteLogMetadataCache`` holds (a segment's fields from its
``RemoteLogSegmentMetadata``, its state from the last update; DELETE_SEGMENT_FINISHED ones gone).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from services.kafka import run_kafka_class

CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
FORMATTER = (
    "org.apache.kafka.server.log.remote.metadata.storage.serialization."
    "RemoteLogMetadataSerde$RemoteLogMetadataFormatter"
)

_LINE = re.compile(r"partition: (\d+), offset: (\d+), value: (\w+)\{(.*)\}")
_SEGMENT_ID = re.compile(
    r"remoteLogSegmentId=RemoteLogSegmentId\{topicIdPartition=([^:]+):(.+)-(\d+), id=([^}]+)\}"
)
_EPOCHS = re.compile(r"segmentLeaderEpochs=\{([^}]*)\}")
_FIELD = re.compile(r"(\w+)=([^,{}]+)")


@dataclass(frozen=True)
class Event:
    """One record of ``__remote_log_metadata`` as Kafka's formatter printed it."""

    partition: int
    offset: int
    kind: str
    """``RemoteLogSegmentMetadata``, ``RemoteLogSegmentMetadataUpdate``, ..."""
    topic_id: str
    topic: str
    topic_partition: int
    segment_id: str | None
    fields: dict[str, Any]
    line: str


def _value(text: str) -> Any:
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        return text


def parse_formatter_line(line: str) -> Event:
    match = _LINE.fullmatch(line)
    assert match is not None, f"unexpected line from Kafka's formatter: {line!r}"
    partition, offset, kind, body = int(match[1]), int(match[2]), match[3], match[4]
    segment = _SEGMENT_ID.search(body)
    if segment is not None:
        topic_id, topic, topic_partition, segment_id = (
            segment[1],
            segment[2],
            int(segment[3]),
            segment[4],
        )
        rest = body[segment.end() :]
    else:  # RemotePartitionDeleteMetadata{topicIdPartition=ID:topic-0, ...}
        tip = re.search(r"topicIdPartition=([^:]+):(.+)-(\d+),", body)
        assert tip is not None, line
        topic_id, topic, topic_partition, segment_id = tip[1], tip[2], int(tip[3]), None
        rest = body[tip.end() :]
    fields: dict[str, Any] = {}
    epochs = _EPOCHS.search(rest)
    if epochs is not None:
        fields["segmentLeaderEpochs"] = {
            int(e): int(o) for e, o in (pair.split("=") for pair in epochs[1].split(", ") if pair)
        }
        rest = rest[: epochs.start()] + rest[epochs.end() :]
    for key, value in _FIELD.findall(rest):
        fields[key] = _value(value)
    return Event(
        partition, offset, kind, topic_id, topic, topic_partition, segment_id, fields, line
    )


def kafka_metadata_events(bootstrap: str, *, timeout_ms: int = 10_000) -> list[Event]:
    """Every record of ``__remote_log_metadata``, decoded by Kafka's formatter.

    The console consumer exits once no record came for ``timeout_ms`` (logging a
    ``TimeoutException``, which is how it ends); a record it cannot decode would stop it with
    another exception. Every record it processed must have given a line.
    """
    result = run_kafka_class(
        CONSOLE_CONSUMER,
        [
            "--bootstrap-server", bootstrap,
            "--topic", "__remote_log_metadata",
            "--from-beginning",
            "--formatter", FORMATTER,
            "--timeout-ms", str(timeout_ms),
        ],
        check=False,
        timeout=300,
    )  # fmt: skip
    output = result.stdout.split("\n")
    errors = [ln for ln in output if "Exception" in ln and "TimeoutException" not in ln]
    assert not errors, result.stdout[-4000:]
    lines = [ln for ln in output if ln.startswith("partition: ")]
    processed = re.search(r"Processed a total of (\d+) messages", result.stderr)
    assert processed is not None, result.stderr[-4000:]
    assert int(processed[1]) == len(lines), result.stdout[-4000:]
    return [parse_formatter_line(line) for line in lines]


@dataclass(frozen=True)
class KafkaSegment:
    """A remote segment as Kafka's cache holds it after its events."""

    segment_id: str
    start_offset: int
    end_offset: int
    leader_epochs: dict[int, int]
    size: int
    max_timestamp_ms: int
    custom_metadata: str
    txn_idx_empty: bool
    state: str
    broker_id: int
    event_timestamp_ms: int
    events: tuple[str, ...]


def kafka_segments(events: list[Event], topic_id: str, partition: int = 0) -> list[KafkaSegment]:
    """The partition's segments after its events, in start offset order; a segment whose last
    state is DELETE_SEGMENT_FINISHED is gone, as from Kafka's cache."""
    segments: dict[str, KafkaSegment] = {}
    for event in sorted(events, key=lambda e: (e.partition, e.offset)):
        if (event.topic_id, event.topic_partition) != (topic_id, partition):
            continue
        f = event.fields
        assert event.segment_id is not None, event.line
        if event.kind == "RemoteLogSegmentMetadata":
            segments[event.segment_id] = KafkaSegment(
                segment_id=event.segment_id,
                start_offset=f["startOffset"],
                end_offset=f["endOffset"],
                leader_epochs=f["segmentLeaderEpochs"],
                size=f["segmentSizeInBytes"],
                max_timestamp_ms=f["maxTimestampMs"],
                custom_metadata=f["customMetadata"],
                txn_idx_empty=f["txnIdxEmpty"],
                state=f["state"],
                broker_id=f["brokerId"],
                event_timestamp_ms=f["eventTimestampMs"],
                events=(f["state"],),
            )
        else:
            assert event.kind == "RemoteLogSegmentMetadataUpdate", event.line
            before = segments[event.segment_id]
            segments[event.segment_id] = replace(
                before,
                state=f["state"],
                custom_metadata=f["customMetadata"],
                broker_id=f["brokerId"],
                event_timestamp_ms=f["eventTimestampMs"],
                events=(*before.events, f["state"]),
            )
    live = [s for s in segments.values() if s.state != "DELETE_SEGMENT_FINISHED"]
    return sorted(live, key=lambda s: (s.start_offset, s.segment_id))
