"""A mixed cluster: Kafka 4.3.1's own tiered storage and the compacted RLMM on one metadata topic.

A private broker (node 1) runs Kafka's tiered storage (``LocalTieredStorage`` and Kafka's
``TopicBasedRemoteLogMetadataManager`` on the 5 partitions of ``__remote_log_metadata``) and
tiers a topic of its own. The compacted RLMM joins as node 2 with ``__remote_log_metadata`` as
its projection topic and writes its keyed records for user partitions of its own, one of them
on the very metadata partition Kafka's topic uses, so that Kafka's consumer must read through
them. What must hold (issue 13, "Mixed clusters"):

- the compaction level is 0: the topic keeps Kafka's ``cleanup.policy=delete``, the RLMM sees
  broker 1 as a Kafka reader of the topic, and ``enable_compaction`` is refused naming it;
- Kafka keeps working: its topic's segments are still uploaded after our records (each upload
  waits until Kafka's own consumer has read its record back, so Kafka read past ours), and a
  consumer reads the whole topic from offset 0, served from remote storage once the local
  copies are gone; the broker logs no error of its metadata consumer;
- Kafka's console formatter (``RemoteLogMetadataFormatter``) decodes every record of the topic,
  Kafka's and ours, with exactly the fields tierlog decodes (Kafka's ``toString()`` line);
- no tombstone is ever written, not even after segment and partition deletions, nor by the
  cleanup manager, which finds orphan keys but writes nothing at level 0.

The compacted RLMM writes in Kafka transactions, and aborts the ones that fail. Kafka's TBRLMM
reads with the Java consumer's default ``isolation.level=read_uncommitted``, so a broker reading
the same topic applies the records of an aborted transaction as if they were committed, unless
the operator gives its RLMM's consumer ``read_committed``
(``rlmm.config.remote.log.metadata.consumer.isolation.level=read_committed`` in
``server.properties``: the plugin README's mixed-cluster step). The second test shows both
sides on a broker of each kind: an aborted DELETE_SEGMENT_STARTED of the segment holding offset
0 of Kafka's own topic makes a ``read_uncommitted`` broker stop serving that offset and delete
the segment from remote storage (its expiration task finishes what it takes for an interrupted
deletion); a ``read_committed`` broker ignores it, serves the offset, and applies the same
record once it comes committed.

A Kafka 4.3.1 broker marks a user partition it takes over ready only once its consumer has
processed a record at the metadata partition's end offset - 1; a commit marker is no record.
The third test has tierlog commit on every metadata partition, then creates a Kafka topic: the
broker takes its partition over on a metadata partition that ends in tierlog's commit, and
tiers it because the compacted RLMM follows its transactions with a position record
(``position.py``). The same topic then shows that every tierlog reader ignores those records:
a compacted and a topic RLMM bootstrapping from it, and a migration of a copy of it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from _scenario_support import (
    DEADLINE_S,
    Rec,
    assign,
    compacted_configs,
    describe_configs,
    open_node,
    read_records,
    wait_until,
)
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicCollection,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from services._common import Service
from services.kafka import run_kafka_class
from tierlog_rlmm_compacted import CompactedRemoteLogMetadataManager
from tierlog_rlmm_compacted.keys import MetadataKey
from tierlog_rlmm_compacted.migration import MigrationOptions, migrate
from tierlog_rlmm_compacted.position import POSITION_PARTITION, is_position
from tierlog_rlmm_compacted.topics import (
    KAFKA_METADATA_TOPIC,
    CompactionRefusedError,
    enable_compaction,
    kafka_readers,
)
from tierlog_rlmm_compacted.values import ProjectionValue, decode_value, encode_value
from tierlog_rlmm_topic import TopicBasedRemoteLogMetadataManager
from tierlog_rlmm_topic.client_factory import close_client

from tierlog.conformance.rlmm_suite import (
    DELETE_FINISHED,
    DELETE_STARTED,
    FINISHED,
    new_partition,
    segment,
    update_of,
)
from tierlog.metadata import format_record, metadata_partition
from tierlog.spi import (
    RemoteLogMetadata,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    Uuid,
)

pytestmark = pytest.mark.slow

METADATA_PARTITIONS = 5
OUR_NODE_ID = 2
KAFKA_TOPIC_CONFIG = {
    "remote.storage.enable": "true",
    # 16 KiB segments (segment.bytes has a 1 MiB minimum; Kafka's tests use the internal key).
    "internal.segment.bytes": "16384",
    # Local copies are deleted as soon as Kafka tiered them: reads of old offsets go remote.
    "local.retention.bytes": "1",
}
RECORDS_BEFORE, RECORDS_AFTER = 600, 900
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
FORMATTER = (
    "org.apache.kafka.server.log.remote.metadata.storage.serialization."
    "RemoteLogMetadataSerde$RemoteLogMetadataFormatter"
)
KAFKA_CONSUMER_TASK_ERROR = "Error occurred while processing the records"
"""What Kafka's ConsumerTask logs before it stops for good on a record it cannot process."""
KAFKA_RLMM_CONSUMER_ISOLATION = "rlmm.config.remote.log.metadata.consumer.isolation.level"
"""The broker's setting for its RLMM's consumer (``remote.log.metadata.manager.impl.prefix``
``rlmm.config.``, then Kafka's ``remote.log.metadata.consumer.`` prefix)."""
QUICK_TASKS = {"log.retention.check.interval.ms": "1000", "log.initial.task.delay.ms": "0"}
"""Local copies deleted within a second of being tiered (``local.retention.bytes=1``)."""


def value_of(i: int) -> bytes:
    return f"record-{i:06d}-".encode() + bytes(200)


def produce(servers: str, topic: str, numbers: range) -> None:
    # Small batches: a batch never spans two segments, so a larger one would not roll them.
    # Idempotent: the records land in the order produced (without it a batch retried after a
    # new topic's first NOT_LEADER error can land after the next one: record 17 at offset 0).
    producer = Producer(
        {
            "bootstrap.servers": servers,
            "linger.ms": 5,
            "batch.size": 4096,
            "acks": "all",
            "enable.idempotence": True,
        }
    )
    for i in numbers:
        producer.produce(topic, value_of(i), partition=0)
        if i % 200 == 0:
            producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0, "records of Kafka's topic still undelivered"


def create_kafka_topic(admin: AdminClient, name: str) -> TopicIdPartition:
    """Kafka's tiered topic (one partition); its partition with the topic id Kafka gave it."""
    for future in admin.create_topics([NewTopic(name, 1, 1, config=KAFKA_TOPIC_CONFIG)]).values():
        future.result(timeout=DEADLINE_S)
    wait_until(
        lambda: admin.list_topics(name, timeout=30).topics[name].error is None,
        f"topic {name} to be created",
    )
    (described,) = admin.describe_topics(TopicCollection([name])).values()
    found = described.result(timeout=DEADLINE_S).topic_id
    topic_id = Uuid(found.get_most_significant_bits(), found.get_least_significant_bits())
    return TopicIdPartition(topic_id, name, 0)


def event_of(record: Rec) -> RemoteLogMetadata:
    """A record of ``__remote_log_metadata``, Kafka's (null key) or ours (keyed), decoded."""
    assert record.value is not None, f"a tombstone at {record}"
    return decode_value(record.value).event


def tiered(records: list[Rec], tip: TopicIdPartition, *, from_offset: int = 0) -> int:
    """How many segments of ``tip`` Kafka finished uploading, by the records at or after
    ``from_offset`` of the metadata partition."""
    return sum(
        1
        for r in records
        if r.offset >= from_offset
        and isinstance(event := event_of(r), RemoteLogSegmentMetadataUpdate)
        and event.topic_id_partition.topic_id == tip.topic_id
        and event.state is FINISHED
    )


def partition_of(tip: TopicIdPartition) -> int:
    return metadata_partition(tip, METADATA_PARTITIONS)


def start_tiering_broker(
    kafka_factory: Callable[..., Service],
    tmp_path: Path,
    properties: Mapping[str, str] = QUICK_TASKS,
) -> tuple[Service, AdminClient]:
    """A private broker running Kafka's own tiered storage and TBRLMM, and its admin client."""
    broker = kafka_factory(tiered_storage=tmp_path / "tiered-storage", properties=properties)
    return broker, AdminClient({"bootstrap.servers": broker.url})


def tier_new_topic(
    servers: str, admin: AdminClient, *, why: str = ""
) -> tuple[str, TopicIdPartition, int]:
    """A new Kafka topic whose first segments Kafka tiers (three at least, waited for): its
    name, its partition and the metadata partition that partition's records go to."""
    name = f"kafka-tiered-{uuid.uuid4().hex[:10]}"
    kafka_tip = create_kafka_topic(admin, name)
    shared = partition_of(kafka_tip)
    produce(servers, name, range(RECORDS_BEFORE))
    wait_until(
        lambda: tiered(read_records(servers, KAFKA_METADATA_TOPIC), kafka_tip) >= 3,
        f"Kafka to tier three segments of {name}{why.format(shared=shared)}",
        interval=1.0,
    )
    return name, kafka_tip, shared


def tier_more(
    servers: str, name: str, kafka_tip: TopicIdPartition, *, after: int, count: int, what: str
) -> None:
    """Produce more records to Kafka's topic and wait until Kafka tiered ``count`` segments
    whose metadata records come after offset ``after`` of the metadata partition they share."""
    shared = partition_of(kafka_tip)
    produce(servers, name, range(RECORDS_BEFORE, RECORDS_BEFORE + RECORDS_AFTER))
    wait_until(
        lambda: (
            tiered(
                [r for r in read_records(servers, KAFKA_METADATA_TOPIC) if r.partition == shared],
                kafka_tip,
                from_offset=after + 1,
            )
            >= count
        ),
        f"Kafka to tier {count} more segment(s) of {name}, {what}",
        interval=1.0,
    )


def partition_sharing(tip: TopicIdPartition, name: str) -> TopicIdPartition:
    """A new user partition whose metadata partition is ``tip``'s."""
    while True:
        candidate = new_partition(name, 0)
        if partition_of(candidate) == partition_of(tip):
            return candidate


def partition_not_sharing(tip: TopicIdPartition, name: str) -> TopicIdPartition:
    while True:
        candidate = new_partition(name, 0)
        if partition_of(candidate) != partition_of(tip):
            return candidate


def write_history(
    rlmm: RemoteLogMetadataManager,
    tips: list[TopicIdPartition],
    doomed: TopicIdPartition,
) -> None:
    """Through the RLMM, with ``broker_leader_epoch`` set: per partition of ``tips``, two
    finished uploads, a copy of the first finishing after the second (its value carries
    ``EpochHighestOffsets``), one in progress, a failed upload retried under the same key, the
    first segment deleted (under a new leader epoch); ``doomed`` deleted for good."""

    def publish(event: RemoteLogMetadata) -> None:
        if isinstance(event, RemoteLogSegmentMetadata):
            future = rlmm.add_remote_log_segment_metadata(event)
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            future = rlmm.update_remote_log_segment_metadata(event)
        else:
            assert isinstance(event, RemotePartitionDeleteMetadata)
            future = rlmm.put_remote_partition_delete_metadata(event)
        future.result(timeout=DEADLINE_S)

    def add(tip: TopicIdPartition, start: int, epoch: int = 0) -> RemoteLogSegmentMetadata:
        seg = segment(tip, start, start + 99, {epoch: start}, broker_id=OUR_NODE_ID)
        seg = replace(seg, broker_leader_epoch=epoch)
        publish(seg)
        return seg

    def update(seg: RemoteLogSegmentMetadata, state: RemoteLogSegmentState, epoch: int = 0) -> None:
        event = update_of(seg, state, broker_id=OUR_NODE_ID)
        publish(replace(event, broker_leader_epoch=epoch))

    for tip in tips:
        first, second = add(tip, 0), add(tip, 100)
        update(first, FINISHED)
        update(second, FINISHED)
        update(add(tip, 0), FINISHED)  # epoch 0 had copied up to 199: tag 20037
        add(tip, 200)  # in progress
        add(tip, 300)  # fails silently...
        update(add(tip, 300), FINISHED)  # ...and its retry supersedes it under the same key
        update(first, DELETE_STARTED, epoch=1)
        update(first, DELETE_FINISHED, epoch=1)
    kept = add(doomed, 0)
    update(kept, FINISHED)
    for state in (
        RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
        RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
    ):
        publish(
            RemotePartitionDeleteMetadata(
                doomed,
                state,
                kept.event_timestamp_ms + 1,
                OUR_NODE_ID,
                broker_leader_epoch=0,
                end_offset=100,
            )
        )


def kafka_formatter_lines(servers: str, ends: dict[int, int]) -> list[str]:
    """The lines Kafka's console consumer prints for ``__remote_log_metadata`` with Kafka's
    formatter, below ``ends`` per partition. It stops at the first record it cannot decode
    (with that exception in its output); otherwise it exits once idle for 10 s."""
    result = run_kafka_class(
        CONSOLE_CONSUMER,
        [
            "--bootstrap-server", servers,
            "--topic", KAFKA_METADATA_TOPIC,
            "--from-beginning",
            "--formatter", FORMATTER,
            "--timeout-ms", "10000",
        ],
        check=False,
        timeout=300,
    )  # fmt: skip
    output = result.stdout.splitlines()
    errors = [ln for ln in output if "Exception" in ln and "TimeoutException" not in ln]
    assert not errors, result.stdout[-4000:] + result.stderr[-4000:]
    lines = [ln for ln in output if ln.startswith("partition: ")]
    processed = re.search(r"Processed a total of (\d+) messages", result.stderr)
    assert processed is not None and int(processed[1]) == len(lines), result.stderr[-4000:]
    below = []
    for line in lines:
        match = re.match(r"partition: (\d+), offset: (\d+), ", line)
        assert match is not None, line
        if int(match[2]) < ends.get(int(match[1]), 0):
            below.append(line)
    return below


def read_whole_topic(servers: str, topic: str, end: int) -> list[bytes | None]:
    """Kafka's topic from offset 0 to ``end``, as a consumer of the broker reads it."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"tierlog-mixed-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    values: list[bytes | None] = []
    try:
        consumer.assign([KafkaTopicPartition(topic, 0, OFFSET_BEGINNING)])

        def read() -> bool:
            for message in consumer.consume(500, timeout=0.5):
                error = message.error()
                if error is not None:
                    assert error.retriable() or error.code() == KafkaError._PARTITION_EOF, error
                    continue
                assert message.offset() == len(values), "a gap in Kafka's topic"
                values.append(message.value())
            return len(values) >= end

        wait_until(read, f"a consumer reading {topic} from offset 0 to {end}", interval=0)
    finally:
        consumer.close()
    return values


def local_log_start(broker: Service, topic: str) -> int:
    """The base offset of the broker's oldest local segment of ``topic``-0."""
    directory = broker.directory / "data" / f"{topic}-0"
    bases = [int(p.name[:20]) for p in directory.glob("*.log")]
    return min(bases) if bases else 0


def test_kafka_tiers_on_while_the_compacted_rlmm_writes_keyed_records(
    kafka_factory: Callable[..., Service],
    opened: list[RemoteLogMetadataManager],
    tmp_path: Path,
) -> None:
    broker, admin = start_tiering_broker(kafka_factory, tmp_path)
    servers = broker.url
    # Kafka tiers the first records of its topic.
    name, kafka_tip, shared = tier_new_topic(servers, admin)

    # The compacted RLMM joins: level 0, Kafka's broker known as a reader of the topic.
    audit = f"tierlog-mixed-audit-{uuid.uuid4().hex[:10]}"
    configs = compacted_configs(
        servers, KAFKA_METADATA_TOPIC, audit, node_id=OUR_NODE_ID, partitions=METADATA_PARTITIONS
    )
    rlmm = open_node(configs, opened)
    assert isinstance(rlmm, CompactedRemoteLogMetadataManager)
    assert kafka_readers(admin, KAFKA_METADATA_TOPIC, 30) == [1]
    assert rlmm.level == 0
    assert describe_configs(admin, KAFKA_METADATA_TOPIC)["cleanup.policy"] == "delete"
    with pytest.raises(CompactionRefusedError) as refused:
        enable_compaction(admin, rlmm.compacted_config, timeout=30)
    assert refused.value.brokers == [1]
    assert "[1]" in str(refused.value)
    assert rlmm.refresh_level() == 0
    assert describe_configs(admin, KAFKA_METADATA_TOPIC)["cleanup.policy"] == "delete"

    # Its keyed records, on Kafka's metadata partition and on another one; deletions too.
    ours = [partition_sharing(kafka_tip, "ours-shared"), partition_not_sharing(kafka_tip, "ours")]
    doomed = partition_sharing(kafka_tip, "ours-doomed")
    assign(rlmm, [*ours, doomed])
    write_history(rlmm, ours, doomed)
    orphans = {tip: rlmm.applier.orphan_keys(tip) for tip in ours}
    assert all(orphans.values()), "the deleted segments' keys should be orphans by now"
    assert rlmm.cleanup.run_once() == 0, "the cleanup manager tombstoned at level 0"
    assert {tip: rlmm.applier.orphan_keys(tip) for tip in ours} == orphans
    after_ours = read_records(servers, KAFKA_METADATA_TOPIC)
    ours_end = max(r.offset for r in after_ours if r.partition == shared and r.key is not None)
    assert any(r.partition != shared and r.key is not None for r in after_ours)

    # Kafka keeps tiering: uploads whose records come after ours on the shared partition.
    tier_more(servers, name, kafka_tip, after=ours_end, count=3, what="after our records")
    total = RECORDS_BEFORE + RECORDS_AFTER
    wait_until(
        lambda: local_log_start(broker, name) > 0,
        f"Kafka to delete the local copies of {name}'s first segments",
        interval=1.0,
    )
    assert read_whole_topic(servers, name, total) == [value_of(i) for i in range(total)]
    assert KAFKA_CONSUMER_TASK_ERROR not in broker.log_path.read_text(errors="replace")

    # Every record of the topic: no tombstone; Kafka's formatter decodes each as tierlog does.
    records = read_records(servers, KAFKA_METADATA_TOPIC, isolation="read_uncommitted")
    assert all(r.value is not None for r in records), "a tombstone in a level-0 topic"
    keyed = [r for r in records if r.key is not None]
    assert any(r.value and decode_value(r.value).highest_offsets == ((0, 199),) for r in keyed)
    assert {r.partition for r in keyed} == {partition_of(tip) for tip in [*ours, doomed]}
    assert any(r.key is None for r in records if r.partition == shared)
    ends: dict[int, int] = {}
    for r in records:
        ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
    kafka = kafka_formatter_lines(servers, ends)
    tierlog = [format_record(r.partition, r.offset, event_of(r)) for r in records]
    assert sorted(kafka) == sorted(tierlog)
    assert len(kafka) == len(records)


def first_record(servers: str, topic: str) -> bytes | KafkaError:
    """What the broker serves at offset 0 of ``topic``-0: the record's value, or the error of
    the fetch. No offset reset (``auto.offset.reset=error``): an offset the broker cannot serve
    is an error here, not a silent jump."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"tierlog-mixed-first-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
        }
    )
    found: list[bytes | KafkaError] = []
    try:
        consumer.assign([KafkaTopicPartition(topic, 0, 0)])

        def read() -> bool:
            message = consumer.poll(0.5)
            if message is None:
                return False
            error = message.error()
            if error is not None:
                if error.retriable():
                    return False
                found.append(error)
                return True
            assert message.offset() == 0, f"the first record read is at {message.offset()}"
            value = message.value()
            assert value is not None
            found.append(value)
            return True

        wait_until(read, f"the broker to answer a fetch of {topic}-0 at offset 0", interval=0)
    finally:
        consumer.close()
    return found[0]


def first_segment(records: list[Rec], tip: TopicIdPartition) -> RemoteLogSegmentMetadata:
    """Kafka's add record of the segment of ``tip`` that starts at offset 0 and whose copy
    finished, from the records of the metadata partition."""
    finished = {
        event.remote_log_segment_id
        for r in records
        if isinstance(event := event_of(r), RemoteLogSegmentMetadataUpdate)
        and event.state is FINISHED
    }
    (found,) = [
        event
        for r in records
        if isinstance(event := event_of(r), RemoteLogSegmentMetadata)
        and event.topic_id_partition.topic_id == tip.topic_id
        and event.start_offset == 0
        and event.remote_log_segment_id in finished
    ]
    return found


def broker_deleted(records: list[Rec], seg: RemoteLogSegmentMetadata, broker_id: int) -> bool:
    """Whether the broker published the DELETE_SEGMENT_FINISHED of ``seg`` (its own record:
    null key, its broker id)."""
    return any(
        r.key is None
        and isinstance(event := event_of(r), RemoteLogSegmentMetadataUpdate)
        and event.remote_log_segment_id == seg.remote_log_segment_id
        and event.state is DELETE_FINISHED
        and event.broker_id == broker_id
        for r in records
    )


def transact(servers: str, record: tuple[int, bytes, bytes], *, commit: bool) -> int:
    """Produce ``record`` (metadata partition, key, value) to ``__remote_log_metadata`` in one
    transaction of a producer of its own, committed or aborted; its offset."""
    partition, key, value = record
    producer = Producer(
        {
            "bootstrap.servers": servers,
            "transactional.id": f"tierlog-mixed-txn-{uuid.uuid4().hex}",
            "acks": "all",
        }
    )
    offsets: list[int] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        assert error is None, error
        offset = message.offset()
        assert offset is not None
        offsets.append(offset)

    try:
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce(
            KAFKA_METADATA_TOPIC, value, key, partition=partition, on_delivery=delivered
        )
        assert producer.flush(60) == 0
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
    finally:
        close_client(producer)
    assert len(offsets) == 1
    return offsets[0]


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_a_kafka_broker_applies_an_aborted_transaction_unless_its_rlmm_reads_committed(
    kafka_factory: Callable[..., Service], tmp_path: Path, isolation: str
) -> None:
    # read_uncommitted is Kafka's default: the broker is started without the setting.
    properties = dict(QUICK_TASKS)
    if isolation == "read_committed":
        properties[KAFKA_RLMM_CONSUMER_ISOLATION] = "read_committed"
    broker, admin = start_tiering_broker(kafka_factory, tmp_path, properties)
    servers = broker.url
    # Kafka tiers its first segments and deletes their local copies: offset 0 is served remotely.
    name, kafka_tip, shared = tier_new_topic(servers, admin)
    wait_until(
        lambda: local_log_start(broker, name) > 0,
        f"Kafka to delete the local copies of {name}'s first segments",
        interval=1.0,
    )
    assert first_record(servers, name) == value_of(0)

    # A keyed DELETE_SEGMENT_STARTED of that segment, as the compacted RLMM writes it, aborted.
    seg = first_segment(read_records(servers, KAFKA_METADATA_TOPIC), kafka_tip)
    deletion = update_of(
        seg, DELETE_STARTED, custom_metadata=seg.custom_metadata, broker_id=OUR_NODE_ID
    )
    record = (
        shared,
        MetadataKey.of(kafka_tip, seg.end_offset, 0).encode(),
        encode_value(ProjectionValue(deletion, 0, seg.end_offset, seg)),
    )
    aborted = transact(servers, record, commit=False)
    in_log = read_records(servers, KAFKA_METADATA_TOPIC, isolation="read_uncommitted")
    assert any(r.partition == shared and r.offset == aborted for r in in_log)
    committed = read_records(servers, KAFKA_METADATA_TOPIC)
    assert not any(r.partition == shared and r.offset == aborted for r in committed)

    # Kafka tiers a segment whose records come after the aborted one: each upload waits until
    # the broker's consumer has read its record back, so it has read past the aborted record.
    tier_more(
        servers, name, kafka_tip, after=aborted, count=1, what="after the aborted transaction"
    )

    if isolation == "read_uncommitted":
        # The broker applied the aborted deletion: offset 0 is served by no segment any more,
        # and its expiration task deletes the segment from remote storage (data loss).
        served = first_record(servers, name)
        assert isinstance(served, KafkaError), "a read_uncommitted broker still serves offset 0"
        assert served.code() == KafkaError._AUTO_OFFSET_RESET, served
        wait_until(
            lambda: broker_deleted(read_records(servers, KAFKA_METADATA_TOPIC), seg, 1),
            f"the broker to delete segment {seg.remote_log_segment_id} from remote storage",
            interval=1.0,
        )
        return

    # read_committed: the aborted deletion was skipped; the broker serves offset 0 as before.
    served = first_record(servers, name)
    assert served == value_of(0), f"a read_committed broker applied an aborted deletion: {served}"
    assert not broker_deleted(read_records(servers, KAFKA_METADATA_TOPIC), seg, 1)
    # The same record committed is applied: what was skipped was the abort, not the record.
    transact(servers, record, commit=True)
    wait_until(
        lambda: broker_deleted(read_records(servers, KAFKA_METADATA_TOPIC), seg, 1),
        f"the broker to apply the committed deletion of segment {seg.remote_log_segment_id}",
        interval=1.0,
    )
    served = first_record(servers, name)
    assert isinstance(served, KafkaError), "offset 0 still served after a committed deletion"
    assert served.code() == KafkaError._AUTO_OFFSET_RESET, served
    assert KAFKA_CONSUMER_TASK_ERROR not in broker.log_path.read_text(errors="replace")


# Readiness after our commit ----------------------------------------------------------------------
def partition_on(metadata: int, name: str) -> TopicIdPartition:
    """A new user partition of ours whose metadata partition is ``metadata``."""
    while True:
        candidate = new_partition(name, 0)
        if partition_of(candidate) == metadata:
            return candidate


def positions_of(records: list[Rec]) -> dict[int, list[int]]:
    """The offsets of the position records, per metadata partition."""
    found: dict[int, list[int]] = {}
    for r in records:
        if r.key is None and is_position(event_of(r)):
            found.setdefault(r.partition, []).append(r.offset)
    return found


def test_kafka_takes_over_a_partition_whose_metadata_partition_ended_in_our_commit(
    kafka_factory: Callable[..., Service],
    opened: list[RemoteLogMetadataManager],
    tmp_path: Path,
) -> None:
    broker, admin = start_tiering_broker(kafka_factory, tmp_path)
    servers = broker.url
    audit = f"tierlog-mixed-audit-{uuid.uuid4().hex[:10]}"
    configs = compacted_configs(
        servers, KAFKA_METADATA_TOPIC, audit, node_id=OUR_NODE_ID, partitions=METADATA_PARTITIONS
    )
    rlmm = open_node(configs, opened)
    assert isinstance(rlmm, CompactedRemoteLogMetadataManager)
    assert rlmm.level == 0 and rlmm.positions is not None

    # One committed write of ours on every metadata partition, so that the partition of the
    # topic created next (its id, hence its metadata partition, is drawn at creation) is on a
    # metadata partition whose last entry is our commit marker.
    ours = [partition_on(p, "ours") for p in range(METADATA_PARTITIONS)]
    assign(rlmm, ours)
    segments = {}
    for tip in ours:
        seg = segment(tip, 0, 99, {0: 0}, broker_id=OUR_NODE_ID)
        rlmm.add_remote_log_segment_metadata(seg).result(timeout=DEADLINE_S)
        segments[tip] = seg

    # The broker takes over a new tiered partition at once, and tiers it.
    _, kafka_tip, shared = tier_new_topic(
        servers, admin, why=", taken over on metadata partition {shared} after our commit there"
    )
    assert KAFKA_CONSUMER_TASK_ERROR not in broker.log_path.read_text(errors="replace")

    # One position record per metadata partition, after our record and before Kafka's.
    records = read_records(servers, KAFKA_METADATA_TOPIC, isolation="read_uncommitted")
    positions = positions_of(records)
    assert sorted(positions) == list(range(METADATA_PARTITIONS))
    assert all(len(offsets) == 1 for offsets in positions.values()), positions
    for partition, (offset,) in positions.items():
        keyed = [r.offset for r in records if r.partition == partition and r.key is not None]
        assert keyed and max(keyed) < offset, f"partition {partition}: {keyed} vs {offset}"
    kafka_first = min(
        r.offset
        for r in records
        if r.partition == shared and event_of(r).topic_id_partition == kafka_tip
    )
    assert positions[shared][0] < kafka_first
    position = decode_value(next(r.value for r in records if r.key is None and r.value)).event
    assert isinstance(position, RemotePartitionDeleteMetadata)

    # tierlog's readers bootstrap through the position records and never list them: a second
    # compacted node and a topic RLMM (read_committed, as the README's step 2 asks).
    follower = open_node({**configs, "node.id": "3"}, opened)
    legacy = open_node(
        {
            **configs,
            "node.id": "4",
            "remote.log.metadata.consumer.isolation.level": "read_committed",
        },
        opened,
        TopicBasedRemoteLogMetadataManager,
    )
    for reader in (follower, legacy):
        assign(reader, [*ours, kafka_tip], follower=True)
        for tip, seg in segments.items():
            assert list(reader.list_remote_log_segments(tip)) == [seg]
        assert len(list(reader.list_remote_log_segments(kafka_tip))) >= 3
        assert isinstance(reader, TopicBasedRemoteLogMetadataManager)
        assert not reader.is_ready(POSITION_PARTITION), "the reserved partition is never hosted"

    # A migration of a copy of the topic leaves them out: not replayed, planned nor copied.
    copy = f"tierlog-mixed-copy-{uuid.uuid4().hex[:10]}"
    for future in admin.create_topics(
        [NewTopic(copy, METADATA_PARTITIONS, 1, config={"retention.ms": "-1"})]
    ).values():
        future.result(timeout=DEADLINE_S)
    source = read_records(servers, KAFKA_METADATA_TOPIC)
    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True})
    for r in source:
        producer.produce(copy, r.value, r.key, partition=r.partition)
    assert producer.flush(DEADLINE_S) == 0
    report = migrate(
        MigrationOptions(servers, topic=copy, audit_topic=f"{copy}-audit", timeout_s=60)
    )
    assert report.verified, report.failures
    assert report.positions == sum(len(o) for o in positions_of(source).values()) >= 5
    assert report.legacy_records == sum(1 for r in source if r.key is None) - report.positions
    assert report.user_partitions == len(ours) + 1, "ours and Kafka's; never the reserved one"
    audit_copies = read_records(servers, f"{copy}-audit")
    assert len(audit_copies) == report.audit_copied == report.legacy_records
    assert not positions_of(audit_copies), "a position record copied to the audit topic"
