"""Support of ``test_migration.py``: legacy histories, reading topics from outside, the command.

``legacy_history`` writes, through tierlog's ``topic`` RLMM (Kafka's TBRLMM format: null keys),
a history covering what a migration must carry over: several user partitions sharing metadata
partitions, finished copies with custom metadata and a transaction index, a segment the log
cleaner wrote (cleaner offsets), a copy in progress, a failed upload and its retry under the
same leader epoch and offsets, a failed copy cleaned up, expired segments (deletion finished,
deletion in progress), a partition whose deletion finished and one only marked for deletion.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from tierlog_rlmm_compacted.state import PartitionState, logical_state
from tierlog_rlmm_topic import TopicBasedRemoteLogMetadataManager

from tierlog.cli import main
from tierlog.conformance.rlmm_suite import (
    DELETE_FINISHED,
    DELETE_STARTED,
    FINISHED,
    segment,
    update_of,
)
from tierlog.metadata import metadata_partition
from tierlog.spi import (
    CustomMetadata,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    Uuid,
)

DEADLINE_S = 120.0
METADATA_PARTITIONS = 2


def wait_until(condition: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout} s", pytrace=False)
        time.sleep(0.05)


# The command ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str

    def line(self, prefix: str) -> str:
        """The summary line starting with ``prefix``."""
        for line in self.out.splitlines():
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no line {prefix!r} in:\n{self.out}\n{self.err}")


def migrate_cli(*args: str) -> Run:
    """``tierlog metadata migrate ARGS`` in process, with its output."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["metadata", "migrate", *args])
    return Run(code, out.getvalue(), err.getvalue())


# Reading from outside -------------------------------------------------------------------------
@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def read_topic(servers: str, topic: str) -> dict[int, list[Rec]]:
    """Every committed record of ``topic``, per partition, read with a bare consumer."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": "tierlog-migration-test-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    try:
        described = consumer.list_topics(topic, timeout=30).topics[topic]
        partitions = sorted(described.partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
            for p in partitions
        }
        records: dict[int, list[Rec]] = {p: [] for p in partitions}
        positions = dict.fromkeys(partitions, 0)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + DEADLINE_S
        while any(positions[p] < ends[p] for p in partitions):
            if time.monotonic() > deadline:
                pytest.fail(f"could not read {topic} to {ends}", pytrace=False)
            message = consumer.poll(0.5)
            if message is None:
                continue
            partition, offset = message.partition(), message.offset()
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF and offset is not None:
                    positions[partition] = max(positions[partition], offset)
                continue
            assert partition is not None and offset is not None
            positions[partition] = offset + 1
            if offset < ends[partition]:
                records[partition].append(
                    Rec(offset, message.key(), message.value(), tuple(message.headers() or ()))
                )
        return records
    finally:
        consumer.close()


def end_offsets(servers: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "tierlog-migration-ends"})
    try:
        described = consumer.list_topics(topic, timeout=30).topics[topic]
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
            for p in sorted(described.partitions)
        }
    finally:
        consumer.close()


def topic_configs(admin: AdminClient, topic: str) -> dict[str, str]:
    resource = ConfigResource("TOPIC", topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {name: entry.value for name, entry in entries.items()}


def produce(
    servers: str,
    topic: str,
    records: Sequence[tuple[int, bytes | None, bytes | None]],
    **config: Any,
) -> None:
    """``(partition, key, value)`` records, in order, as a plain idempotent producer writes them
    (``config``: more librdkafka settings)."""
    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True, **config})
    errors: list[Any] = []

    def delivered(error: KafkaError | None, _: object) -> None:
        if error is not None:
            errors.append(error)

    for partition, key, value in records:
        while True:
            try:
                producer.produce(
                    topic, value=value, key=key, partition=partition, on_delivery=delivered
                )
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(DEADLINE_S) == 0
    assert not errors, errors[:3]


# Legacy histories -----------------------------------------------------------------------------
def tip_on(
    metadata: int, topic: str, partition: int = 0, count: int = METADATA_PARTITIONS
) -> TopicIdPartition:
    """A user partition with a fresh topic id that Kafka's partitioner puts on ``metadata``."""
    while True:
        tip = TopicIdPartition(Uuid.random(), topic, partition)
        if metadata_partition(tip, count) == metadata:
            return tip


@dataclass
class History:
    """The user partitions of a legacy history and what they became."""

    live: list[TopicIdPartition] = field(default_factory=list)
    deleted: list[TopicIdPartition] = field(default_factory=list)
    keyed_values: int = 0
    """Keyed values a migration writes for it: one per live segment, one per delete marker."""
    markers: int = 0

    @property
    def tips(self) -> list[TopicIdPartition]:
        return self.live + self.deleted


def _done(rlmm: RemoteLogMetadataManager, *futures: Any) -> None:
    for future in futures:
        future.result(timeout=DEADLINE_S)


def legacy_history(rlmm: TopicBasedRemoteLogMetadataManager) -> History:
    """Write the module docstring's history through ``rlmm`` (configured on a topic of
    ``METADATA_PARTITIONS`` partitions)."""
    a = tip_on(0, "orders")
    b = tip_on(0, "payments")
    c = tip_on(1, "clicks")
    d = tip_on(0, "gone")  # deleted; on metadata partition 0 with a and b (readiness)
    e = tip_on(1, "leaving")  # marked for deletion only
    history = History(live=[a, b, c, e], deleted=[d])
    rlmm.on_partition_leadership_changes({a, b, c, d, e}, set())
    wait_until(lambda: all(rlmm.is_ready(t) for t in history.tips), "the legacy RLMM's readiness")
    add, upd = rlmm.add_remote_log_segment_metadata, rlmm.update_remote_log_segment_metadata

    def copied(metadata: Any, custom: CustomMetadata | None = None) -> Any:
        _done(rlmm, add(metadata))
        _done(rlmm, upd(update_of(metadata, FINISHED, custom_metadata=custom)))
        return metadata

    # a: expired segments, a failed upload and its retry, a cleaned segment, one in progress.
    a1 = copied(segment(a, 0, 99, {0: 0}), CustomMetadata(b"a1"))
    a2 = copied(segment(a, 100, 199, {0: 100, 1: 150}))
    a3_failed = segment(a, 200, 299, {1: 200})
    _done(rlmm, add(a3_failed))
    copied(segment(a, 200, 299, {1: 200}, txn_idx_empty=True))
    copied(segment(a, 300, 349, {2: 300}, cleaner_offsets={1: 250, 2: 320}))
    _done(rlmm, add(segment(a, 350, 399, {2: 350})))
    for state in (DELETE_STARTED, DELETE_FINISHED):
        _done(rlmm, upd(update_of(a1, state)))
    _done(rlmm, upd(update_of(a2, DELETE_STARTED)))
    # b: a failed copy cleaned up, another broker's segment with custom metadata.
    copied(segment(b, 0, 49, {3: 0}))
    b2 = segment(b, 50, 99, {3: 50})
    _done(rlmm, add(b2))
    for state in (DELETE_STARTED, DELETE_FINISHED):
        _done(rlmm, upd(update_of(b2, state)))
    copied(segment(b, 100, 149, {4: 100}, broker_id=3), CustomMetadata(b"\x00\x01"))
    # c: two plain segments, then two uploads of the same offsets (a leadership change during
    # the upload, both finishing: seed scenario 2); the reads go to the one that finished last,
    # which has the smaller id (an order by id would route them to the other).
    copied(segment(c, 0, 9, {0: 0}))
    copied(segment(c, 10, 19, {0: 10}))
    first, last = sorted((Uuid.random(), Uuid.random()), key=str, reverse=True)
    finished_first = with_id(segment(c, 20, 29, {0: 20}), first)
    finished_last = with_id(segment(c, 20, 29, {0: 20}), last)
    _done(rlmm, add(finished_last), add(finished_first))
    _done(rlmm, upd(update_of(finished_first, FINISHED)))
    _done(rlmm, upd(update_of(finished_last, FINISHED)))
    assert rlmm.remote_log_segment_metadata(c, 0, 25) == rlmm.remote_log_segment_metadata(c, 0, 20)
    served = rlmm.remote_log_segment_metadata(c, 0, 20)
    assert served is not None and served.remote_log_segment_id.id == last
    # d: a finished partition deletion.
    d1 = copied(segment(d, 0, 9, {0: 0}))
    _done(
        rlmm,
        rlmm.put_remote_partition_delete_metadata(
            _delete(d, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
        ),
    )
    for state in (DELETE_STARTED, DELETE_FINISHED):
        _done(rlmm, upd(update_of(d1, state)))
    for pstate in (
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
        RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
    ):
        _done(rlmm, rlmm.put_remote_partition_delete_metadata(_delete(d, pstate)))
    # e: marked for deletion, a segment left.
    copied(segment(e, 0, 9, {5: 0}))
    _done(
        rlmm,
        rlmm.put_remote_partition_delete_metadata(
            _delete(e, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
        ),
    )
    # a: a2 (deleting), the failed upload, its retry, the cleaned one, the one in progress;
    # b: two; c: four; e: one and its marker; d: its marker.
    history.keyed_values = 5 + 2 + 4 + 2 + 1
    history.markers = 2
    return history


def with_id(metadata: RemoteLogSegmentMetadata, segment_id: Uuid) -> RemoteLogSegmentMetadata:
    return replace(
        metadata,
        remote_log_segment_id=RemoteLogSegmentId(metadata.topic_id_partition, segment_id),
    )


def _delete(
    tip: TopicIdPartition, state: RemotePartitionDeleteState
) -> RemotePartitionDeleteMetadata:
    return RemotePartitionDeleteMetadata(tip, state, int(time.time() * 1000), 1)


def states(reader: Any, tips: Sequence[TopicIdPartition]) -> dict[TopicIdPartition, PartitionState]:
    return {tip: logical_state(reader, tip) for tip in tips}


@contextmanager
def closing(*managers: RemoteLogMetadataManager) -> Iterator[None]:
    try:
        yield
    finally:
        for manager in managers:
            manager.close()
