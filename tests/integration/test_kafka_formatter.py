"""Kafka's own console formatter against tierlog's records and tierlog's dump (issue 11, section 3).

Two sources of ``__remote_log_metadata`` records, each read by both tools:

- tierlog's topic RLMM (``tierlog_rlmm_topic``) driven through its SPI on a test-private topic of
  three partitions: segments with custom metadata (none, empty, some bytes), several leader
  epochs, both ``txnIdxEmpty`` flags, their whole lifecycle, and a partition deletion;
- the broker's own RLMM on ``__remote_log_metadata``, after Kafka's tiered storage tiered a topic.

Kafka's reader is ``org.apache.kafka.tools.consumer.ConsoleConsumer`` with
``RemoteLogMetadataSerde$RemoteLogMetadataFormatter``, run from the broker's jars. It stops at the
first record it cannot decode, so every expected line coming out of it proves the record decoded.
Its lines must equal ``tierlog metadata dump``'s: the same set, and per partition the same order.
For the RLMM's records the lines are also known in advance (what each SPI call meant, at the
offset it must have been written to), so both tools are held to tierlog's intent, field by field.

Where the two differ on purpose (a record Kafka 4.3 cannot read: a version-1 record, a tombstone,
a bad frame), Kafka's formatter stops with its error and the dump goes on and says so.
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from services._common import Service
from services.kafka import run_kafka_class

from tierlog.cli import main
from tierlog.metadata import (
    decode_record,
    encode_record,
    format_record,
    kafka_string,
    metadata_partition,
    serialize,
)
from tierlog.spi import (
    CustomMetadata,
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
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
FORMATTER = (
    "org.apache.kafka.server.log.remote.metadata.storage.serialization."
    "RemoteLogMetadataSerde$RemoteLogMetadataFormatter"
)
REMOTE_LOG_METADATA = "__remote_log_metadata"
LINE = re.compile(r"^partition: (\d+), offset: (\d+), value: ")
T0 = 1_700_000_000_000
RLMM_PARTITIONS = 3

Line = tuple[int, int, str]
"""A formatter line with its partition and offset."""


# Helpers ----------------------------------------------------------------------------------------
def wait_for(condition: Callable[[], object], what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


def parse(text: str) -> list[Line]:
    """The formatter lines of a tool's output, with partition and offset (log lines skipped:
    Kafka's tools log to stdout too)."""
    lines = []
    for line in text.splitlines():
        match = LINE.match(line)
        if match:
            lines.append((int(match.group(1)), int(match.group(2)), line))
    return lines


def by_partition(lines: list[Line]) -> dict[int, list[Line]]:
    grouped: dict[int, list[Line]] = defaultdict(list)
    for line in lines:
        grouped[line[0]].append(line)
    return dict(grouped)


def run_console_consumer(
    bootstrap: str,
    topic: str,
    *,
    max_messages: int | None = None,
    idle_ms: int = 60_000,
    partition: int | None = None,
) -> tuple[list[Line], str]:
    """Kafka's console consumer with Kafka's formatter on ``topic`` (or one ``partition``) from
    the beginning, until ``max_messages``, ``idle_ms`` without a record or a record it cannot
    read: its formatter lines in its order, and all its output."""
    args = [
        *("--bootstrap-server", bootstrap, "--topic", topic),
        *("--formatter", FORMATTER, "--timeout-ms", str(idle_ms)),
    ]
    if partition is None:
        args.append("--from-beginning")
    else:
        args += ["--partition", str(partition), "--offset", "earliest"]
    if max_messages is not None:
        args += ["--max-messages", str(max_messages)]
    result = run_kafka_class(CONSOLE_CONSUMER, args, timeout=300, check=False)
    return parse(result.stdout), result.stdout + result.stderr


def kafka_formatter_lines(
    bootstrap: str, topic: str, *, max_messages: int | None = None, idle_ms: int = 60_000
) -> list[Line]:
    """Kafka's formatter lines of ``topic`` (see ``run_console_consumer``), which must have read
    every record it was given."""
    lines, output = run_console_consumer(
        bootstrap, topic, max_messages=max_messages, idle_ms=idle_ms
    )
    assert "Unknown error when running consumer" not in output, output[-4000:]
    return lines


def tierlog_dump_lines(
    capsys: pytest.CaptureFixture[str], bootstrap: str, topic: str
) -> list[Line]:
    capsys.readouterr()
    code = main(["metadata", "dump", "--bootstrap-servers", bootstrap, "--topic", topic])
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), err
    lines = parse(out)
    assert len(lines) == len(out.splitlines())
    return lines


def assert_same_lines(kafka: list[Line], tierlog: list[Line]) -> None:
    """The same set of lines, and per partition the same order; tierlog's grouped by partition
    in partition order."""
    assert sorted(kafka) == sorted(tierlog)
    assert by_partition(kafka) == by_partition(tierlog)
    assert tierlog == sorted(tierlog)


# tierlog's RLMM on a private topic ----------------------------------------------------------------
def segment(
    where: TopicIdPartition,
    start: int,
    end: int,
    epochs: dict[int, int],
    custom: bytes | None,
    txn_idx_empty: bool,
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(where, Uuid.random()),
        start,
        end,
        T0 + 10 * end,
        where.partition + 1,
        T0 + 1000 + start,
        4096 * (end - start + 1),
        epochs,
        None if custom is None else CustomMetadata(custom),
        RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        txn_idx_empty,
    )


def update(
    metadata: RemoteLogSegmentMetadata,
    state: RemoteLogSegmentState,
    custom: bytes | None = None,
    *,
    at: int = 0,
) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        metadata.remote_log_segment_id,
        metadata.event_timestamp_ms + 100 + at,
        None if custom is None else CustomMetadata(custom),
        state,
        7,
    )


@pytest.fixture
def topic_rlmm(kafka_broker: Service, tmp_path: Path) -> Iterator[tuple[object, str]]:
    """tierlog's topic RLMM on a fresh metadata topic of three partitions (and the topic's
    name)."""
    from tierlog_rlmm_topic import TopicBasedRemoteLogMetadataManager

    name = f"tierlog-formatter-{uuid.uuid4().hex[:10]}"
    rlmm = TopicBasedRemoteLogMetadataManager()
    rlmm.configure(
        {
            "remote.log.metadata.common.client.bootstrap.servers": kafka_broker.url,
            "remote.log.metadata.topic.name": name,
            "remote.log.metadata.topic.num.partitions": str(RLMM_PARTITIONS),
            "remote.log.metadata.topic.replication.factor": "1",
            "remote.log.metadata.topic.min.isr": "1",
            "node.id": "1",
            "log.dir": str(tmp_path),
        }
    )
    try:
        yield rlmm, name
    finally:
        rlmm.close()


def spread_partitions() -> tuple[list[TopicIdPartition], TopicIdPartition]:
    """Partitions 0-2 of ``orders`` and partition 0 of ``payments``, with random topic ids whose
    records go to at least two of the metadata partitions."""
    while True:
        orders = [TopicIdPartition(Uuid.random(), "orders", 0)]
        orders += [TopicIdPartition(orders[0].topic_id, "orders", p) for p in (1, 2)]
        payments = TopicIdPartition(Uuid.random(), "payments", 0)
        if len({metadata_partition(tip, RLMM_PARTITIONS) for tip in [*orders, payments]}) > 1:
            return orders, payments


@pytest.mark.slow
def test_the_topic_rlmms_records_read_the_same_in_kafkas_formatter(
    capsys: pytest.CaptureFixture[str],
    kafka_broker: Service,
    topic_rlmm: tuple[object, str],
) -> None:
    from tierlog_rlmm_topic import TopicBasedRemoteLogMetadataManager

    rlmm, name = topic_rlmm
    assert isinstance(rlmm, TopicBasedRemoteLogMetadataManager)
    orders, payments = spread_partitions()
    rlmm.on_partition_leadership_changes({*orders[:2], payments}, {orders[2]})
    wait_for(
        lambda: all(rlmm.is_ready(tip) for tip in [*orders, payments]),
        "the RLMM to be ready for its partitions",
    )

    events: list[tuple[TopicIdPartition, object]] = []

    def call(tip: TopicIdPartition, value: object, done: Future[None]) -> None:
        done.result(timeout=DEADLINE_S)  # one at a time: the topic's order is the calls' order
        events.append((tip, value))

    for tip in orders:
        custom = bytes(range(3 * (tip.partition + 1)))
        first = segment(tip, 0, 99, {0: 0, 2: 50, 5: 80}, custom, txn_idx_empty=True)
        second = segment(tip, 100, 249, {5: 100, 6: 180}, None, txn_idx_empty=False)
        third = segment(tip, 250, 250, {9: 250}, b"", txn_idx_empty=tip.partition % 2 == 0)
        for metadata in (first, second, third):
            call(tip, metadata, rlmm.add_remote_log_segment_metadata(metadata))
        for change in (
            update(first, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, custom + b"!"),
            update(second, RemoteLogSegmentState.COPY_SEGMENT_FINISHED),
            update(first, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, at=1),
            update(first, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, at=2),
            update(third, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, b"x"),
        ):
            call(tip, change, rlmm.update_remote_log_segment_metadata(change))
    gone = segment(payments, 0, 9, {0: 0}, b"\x00", txn_idx_empty=False)
    call(payments, gone, rlmm.add_remote_log_segment_metadata(gone))
    for state in RemotePartitionDeleteState:
        delete = RemotePartitionDeleteMetadata(payments, state, T0 + 50 + state.id, 3)
        call(payments, delete, rlmm.put_remote_partition_delete_metadata(delete))

    # What tierlog meant: each event at the next offset of the metadata partition of its user
    # partition, in Kafka's toString.
    next_offset: dict[int, int] = defaultdict(int)
    expected: list[Line] = []
    for tip, value in events:
        partition = metadata_partition(tip, RLMM_PARTITIONS)
        offset = next_offset[partition]
        next_offset[partition] += 1
        expected.append((partition, offset, format_record(partition, offset, value)))
    assert len(next_offset) > 1, "the events should span several metadata partitions"

    kafka = kafka_formatter_lines(kafka_broker.url, name, max_messages=len(events))
    tierlog = tierlog_dump_lines(capsys, kafka_broker.url, name)
    assert_same_lines(kafka, tierlog)
    assert tierlog == sorted(expected)

    # Each field as tierlog meant it, in Kafka's own words (not only through format_record).
    text = "\n".join(line for _, _, line in kafka)
    first_of_0 = events[0][1]
    assert isinstance(first_of_0, RemoteLogSegmentMetadata)
    assert (
        f"RemoteLogSegmentMetadata{{remoteLogSegmentId=RemoteLogSegmentId{{topicIdPartition="
        f"{orders[0].topic_id}:orders-0, id={first_of_0.remote_log_segment_id.id}}}, "
        f"startOffset=0, endOffset=99, brokerId=1, maxTimestampMs={T0 + 990}, "
        f"eventTimestampMs={T0 + 1000}, segmentLeaderEpochs={{0=0, 2=50, 5=80}}, "
        "segmentSizeInBytes=409600, customMetadata=Optional[CustomMetadata{3 bytes}], "
        "state=COPY_SEGMENT_STARTED, txnIdxEmpty=true}"
    ) in text
    assert "segmentLeaderEpochs={5=100, 6=180}, segmentSizeInBytes=614400, " in text
    assert "customMetadata=Optional.empty, state=COPY_SEGMENT_STARTED, txnIdxEmpty=false}" in text
    assert "customMetadata=Optional[CustomMetadata{0 bytes}]" in text
    assert "customMetadata=Optional[CustomMetadata{9 bytes}]" in text  # orders-2's first
    assert (
        f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId=RemoteLogSegmentId{{topicIdPartition="
        f"{orders[0].topic_id}:orders-0, id={first_of_0.remote_log_segment_id.id}}}, "
        "customMetadata=Optional[CustomMetadata{4 bytes}], state=COPY_SEGMENT_FINISHED, "
        f"eventTimestampMs={T0 + 1100}, brokerId=7}}"
    ) in text
    for state in RemoteLogSegmentState:
        assert f"state={state.name}," in text
    for state in RemotePartitionDeleteState:
        assert (
            f"RemotePartitionDeleteMetadata{{topicPartition={payments.topic_id}:payments-0, "
            f"state={state.name}, eventTimestampMs={T0 + 50 + state.id}, brokerId=3}}"
        ) in text
    assert {line.split(", value: ", 1)[1] for _, _, line in kafka} == {
        kafka_string(value) for _, value in events
    }


# The broker's own tiered storage ----------------------------------------------------------------
def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tierlog-formatter-test"})
    try:
        partitions = consumer.list_topics(topic, timeout=60).topics[topic].partitions
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=60)[1]
            for p in sorted(partitions)
        }
    finally:
        consumer.close()


def tiered_segments(capsys: pytest.CaptureFixture[str], bootstrap: str, topic_id: str) -> int:
    """How many segments of the topic are COPY_SEGMENT_FINISHED in ``__remote_log_metadata``."""
    capsys.readouterr()
    code = main(["metadata", "dump", "--bootstrap-servers", bootstrap, "--topic-id", topic_id])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out.count("state=COPY_SEGMENT_FINISHED")


@pytest.mark.slow
def test_the_brokers_tiered_storage_records_dump_the_same_in_both_tools(
    capsys: pytest.CaptureFixture[str], kafka_broker: Service
) -> None:
    name = f"tierlog-formatter-tiered-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": kafka_broker.url})
    configs = {
        "remote.storage.enable": "true",
        "segment.bytes": "1048576",
        "local.retention.bytes": "1",
    }
    for future in admin.create_topics([NewTopic(name, 2, 1, config=configs)]).values():
        future.result(timeout=DEADLINE_S)
    wait_for(
        lambda: admin.list_topics(name, timeout=30).topics[name].error is None,
        f"topic {name} to be created",
    )
    (described,) = admin.describe_topics(TopicCollection([name])).values()
    # confluent-kafka prints a Uuid in standard base64; Kafka (and tierlog) in base64url.
    found = described.result(timeout=DEADLINE_S).topic_id
    topic_id = str(Uuid(found.get_most_significant_bits(), found.get_least_significant_bits()))
    producer = Producer({"bootstrap.servers": kafka_broker.url, "linger.ms": 20})
    payload = bytes(1000)
    for i in range(2 * 4000):  # 3.8 MiB per partition: three or more 1 MiB segments rolled each
        producer.produce(name, payload, partition=i % 2)
        if i % 500 == 0:
            producer.poll(0)
    undelivered = producer.flush(DEADLINE_S)
    assert undelivered == 0, f"{undelivered} records still undelivered after {DEADLINE_S} s"
    wait_for(
        lambda: tiered_segments(capsys, kafka_broker.url, topic_id) >= 2 * 3,
        f"Kafka to tier three segments of each partition of {name}",
    )

    # The broker may still be tiering other tests' topics: compare what is below the end offsets
    # of now, which both tools read in full (Kafka's until it is idle for 15 s).
    ends = end_offsets(kafka_broker.url, REMOTE_LOG_METADATA)

    def below_ends(lines: list[Line]) -> list[Line]:
        return [line for line in lines if line[1] < ends.get(line[0], 0)]

    tierlog = below_ends(tierlog_dump_lines(capsys, kafka_broker.url, REMOTE_LOG_METADATA))
    kafka = below_ends(kafka_formatter_lines(kafka_broker.url, REMOTE_LOG_METADATA, idle_ms=15_000))
    assert len(tierlog) == sum(ends.values())
    assert_same_lines(kafka, tierlog)
    assert f"{topic_id}:{name}-0" in "\n".join(line for _, _, line in kafka)


# Where the two readers differ on purpose ---------------------------------------------------------
@pytest.mark.slow
def test_records_kafka_cannot_read_stop_its_formatter_and_are_flagged_by_the_dump(
    capsys: pytest.CaptureFixture[str], kafka_broker: Service
) -> None:
    """After one good record each, metadata partition 0 holds a version-1 record (KAFKA-20033's,
    which tierlog reads), 1 a tombstone, 2 a record of frame version 0. Kafka's formatter shows
    the good record and stops on the next with its own error; tierlog's dump shows the good
    record as Kafka does and goes on: the version-1 record as a line and a note, the tombstone
    as ``value: null`` and a note, the bad frame as an error line (exit 1)."""
    name = f"tierlog-formatter-unreadable-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": kafka_broker.url})
    for future in admin.create_topics([NewTopic(name, 3, 1)]).values():
        future.result(timeout=DEADLINE_S)
    wait_for(
        lambda: len(admin.list_topics(name, timeout=30).topics[name].partitions) == 3,
        f"topic {name} to be created",
    )
    tip = TopicIdPartition(Uuid.random(), "orders", 0)
    good = segment(tip, 0, 9, {0: 0}, b"ab", txn_idx_empty=True)
    v1 = encode_record(dataclasses.replace(decode_record(serialize(good)), version=1))
    producer = Producer({"bootstrap.servers": kafka_broker.url, "acks": "all"})
    for partition, value in [
        (0, serialize(good)), (0, v1),
        (1, serialize(good)), (1, None),
        (2, serialize(good)), (2, bytes.fromhex("000000")),
    ]:  # fmt: skip
        producer.produce(name, value, partition=partition)
    assert producer.flush(DEADLINE_S) == 0

    kafka_errors = {
        0: "Can't read version 1 of RemoteLogSegmentIdEntry",
        1: "NullPointerException",
        2: "Could not deserialize metadata record with frame version 0",
    }
    capsys.readouterr()
    code = main(["metadata", "dump", "--bootstrap-servers", kafka_broker.url, "--topic", name])
    out, err = capsys.readouterr()
    assert code == 1
    tierlog = by_partition(parse(out))
    for partition, kafka_error in kafka_errors.items():
        kafka, output = run_console_consumer(
            kafka_broker.url, name, partition=partition, max_messages=2, idle_ms=30_000
        )
        assert kafka_error in output, output[-4000:]
        assert kafka == [(partition, 0, format_record(partition, 0, good))]
        assert tierlog[partition][:1] == kafka
    assert tierlog[0][1:] == [(0, 1, format_record(0, 1, good))]
    assert tierlog[1][1:] == [(1, 1, "partition: 1, offset: 1, value: null")]
    assert out.splitlines()[-1].startswith("partition: 2, offset: 1, error: ")
    assert "have a null value (a tombstone)" in err
    assert "have a version above 0" in err
    assert "did not decode (the first at partition 2, offset 1: " in err
