"""tierlog reads the tiered history of a real Kafka cluster (issue 11, section 3).

A private Kafka 4.3.1 broker runs Kafka's own tiered storage (``LocalTieredStorage`` and Kafka's
``TopicBasedRemoteLogMetadataManager``) and tiers a topic: several small segments, written under
two leader epochs (the broker is restarted in between, which moves the partition's leadership),
every codec, headers, and transactions committed and aborted. Then tierlog, as another node of
that cluster, opens the same history with nothing but its plugins: the ``topic`` RLMM
(``tierlog_rlmm_topic``) on the broker's ``__remote_log_metadata`` and the ``local`` RSM on the
``LocalTieredStorage`` directory.

What is compared, always against Kafka's own output:

- the segments tierlog's RLMM rebuilds (ids, start and end offsets, leader epochs, states, sizes,
  max timestamps, brokers, event times, custom metadata, ``txnIdxEmpty``), overall and per leader
  epoch, against the events Kafka's console consumer decodes with Kafka's
  ``RemoteLogMetadataFormatter``, folded as Kafka's cache folds them;
- the same segments against the files ``LocalTieredStorage`` wrote (segment id and start offset
  in the names, the segment's size on disk);
- every record Kafka tiered, read back through tierlog's ``RemoteLogReader`` (the RLMM's segment
  lookup by leader epoch, the ``RemoteIndexCache`` on the RSM's offset index, ranged fetches of
  the RSM), against what the broker serves a consumer from offset 0: offset, timestamp, key,
  value and headers, byte for byte; and with ``read_committed``, tierlog's aborted transactions
  (from the remote transaction indexes) filter exactly the records Kafka's consumer drops;
- what tierlog's RLM copy task would ship for the same local segments (tierlog's ``LocalLog``
  on a copy of Kafka's partition directory, ``segment_copy_inputs``) against what Kafka shipped:
  end offsets, leader epochs (one segment spans the restart), sizes, max timestamps, transaction
  index presence, and the bytes of every file, the leader epoch checkpoint text and the producer
  snapshot included;
- after ``DeleteRecords`` makes Kafka delete its first remote segments, tierlog's RLMM, still
  following the topic, drops the same ones (DELETE_SEGMENT_STARTED then _FINISHED) and the files
  are gone.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource, OffsetSpec
from services._common import Service
from services.kafka import restart_kafka
from tierlog_rlmm_topic import TopicBasedRemoteLogMetadataManager

from tierlog.log.batch import ControlRecordType, decode_control_record
from tierlog.log.checkpoint import parse_leader_epoch_checkpoint
from tierlog.log.local_log import LocalLog
from tierlog.log.reader import iter_batches, iter_batches_with_records
from tierlog.log.recovery import OffsetsCheckpoint, write_offsets_checkpoint
from tierlog.rlm.index_cache import RemoteIndexCache
from tierlog.rlm.remote_read import RemoteLogReader, RemoteStorageFetchInfo, trim_partial_batch
from tierlog.spi import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    Uuid,
)
from tierlog.storage.local import LocalTieredStorage

from ._broker import (
    DEADLINE_S,
    active_segment_base,
    admin_client,
    create_topic,
    list_offset,
    partition_dir,
    remote_partition_dir,
    unique_topic,
    wait_for,
)
from ._kafka_metadata import KafkaSegment, kafka_metadata_events, kafka_segments
from ._produce import produce_mix

SEGMENT_BYTES = 16_384
TOPIC_CONFIG = {"internal.segment.bytes": str(SEGMENT_BYTES), "index.interval.bytes": "1500"}
METADATA_PARTITIONS = 5
"""The broker's ``__remote_log_metadata`` partitions (``start_kafka``'s default)."""
TIERLOG_NODE_ID = 7
"""tierlog joins as another node of the cluster (the broker is node 1)."""
REMOTE_SUFFIXES = (".log", ".index", ".timeindex", ".leader_epoch_checkpoint", ".snapshot")


# --- Kafka's side ---------------------------------------------------------------------------------


def leader_epoch(broker: Service, topic: str) -> int | None:
    """The partition's leader epoch, once it has a leader."""
    with admin_client(broker) as admin:
        (described,) = admin.describe_topics([topic])
    (partition,) = described["partitions"]
    return int(partition["leader_epoch"]) if partition["leader_id"] >= 0 else None


def tier_with_two_epochs(broker: Service, topic: str) -> int:
    """Produce, restart the broker (a new leader epoch), produce again, and wait until Kafka
    tiered every segment but the active one; returns the last tiered offset."""
    produce_mix(broker, topic)
    first = leader_epoch(broker, topic)
    assert first is not None
    restart_kafka(broker)
    wait_for(
        lambda: (leader_epoch(broker, topic) or -1) > first,
        f"a leader epoch above {first} after the restart",
    )
    produce_mix(broker, topic)
    active = active_segment_base(partition_dir(broker, topic))
    wait_for(
        lambda: list_offset(broker, topic, OffsetSpec.LATEST_TIERED) >= active - 1,
        f"Kafka to tier {topic} up to offset {active - 1}",
    )
    return list_offset(broker, topic, OffsetSpec.LATEST_TIERED)


Row = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]
"""A record as compared: offset, timestamp, key, value, headers."""


def consume(broker: Service, topic: str, end_offset: int, *, isolation: str) -> list[Row]:
    """What the broker serves a consumer from offset 0 to ``end_offset`` (exclusive)."""
    consumer = KafkaConsumer(
        bootstrap_servers=broker.url,
        enable_auto_commit=False,
        isolation_level=isolation,
        fetch_max_wait_ms=200,
    )
    tp = TopicPartition(topic, 0)
    rows: list[Row] = []
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)

        def caught_up() -> bool:
            for batch in consumer.poll(timeout_ms=500).values():
                rows.extend((r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch)
            return consumer.position(tp) >= end_offset

        wait_for(caught_up, f"a {isolation} consumer to read {topic} up to {end_offset}")
    finally:
        consumer.close()
    return [row for row in rows if row[0] < end_offset]


# --- tierlog's side -------------------------------------------------------------------------------


@pytest.fixture
def tierlog_history(tmp_path: Path) -> Iterator[Callable[[Service], tuple[Any, Any]]]:
    """``open(broker)`` gives tierlog's topic RLMM and local RSM on the broker's history."""
    opened: list[Any] = []

    def open_history(broker: Service) -> tuple[TopicBasedRemoteLogMetadataManager, Any]:
        rlmm = TopicBasedRemoteLogMetadataManager()
        opened.append(rlmm)
        rlmm.configure(
            {
                "remote.log.metadata.common.client.bootstrap.servers": broker.url,
                "remote.log.metadata.topic.num.partitions": str(METADATA_PARTITIONS),
                "remote.log.metadata.topic.replication.factor": "1",
                "remote.log.metadata.topic.min.isr": "1",
                "node.id": str(TIERLOG_NODE_ID),
                "log.dir": str(tmp_path / "tierlog-node"),
            }
        )
        rsm = LocalTieredStorage()
        opened.append(rsm)
        rsm.configure({"dir": str(broker.extra["tiered_storage"])})
        return rlmm, rsm

    yield open_history
    for resource in reversed(opened):
        resource.close()


def segment_view(s: RemoteLogSegmentMetadata) -> dict[str, Any]:
    return {
        "id": str(s.remote_log_segment_id.id),
        "start": s.start_offset,
        "end": s.end_offset,
        "epochs": dict(s.segment_leader_epochs),
        "state": s.state.name,
        "size": s.segment_size_in_bytes,
        "maxTimestampMs": s.max_timestamp_ms,
        "brokerId": s.broker_id,
        "eventTimestampMs": s.event_timestamp_ms,
        "customMetadata": s.custom_metadata,
        "txnIdxEmpty": s.txn_idx_empty,
    }


def kafka_view(k: KafkaSegment) -> dict[str, Any]:
    assert k.custom_metadata == "Optional.empty"  # LocalTieredStorage returns none
    return {
        "id": k.segment_id,
        "start": k.start_offset,
        "end": k.end_offset,
        "epochs": k.leader_epochs,
        "state": k.state,
        "size": k.size,
        "maxTimestampMs": k.max_timestamp_ms,
        "brokerId": k.broker_id,
        "eventTimestampMs": k.event_timestamp_ms,
        "customMetadata": None,
        "txnIdxEmpty": k.txn_idx_empty,
    }


def assert_segments_agree(
    broker: Service,
    rlmm: TopicBasedRemoteLogMetadataManager,
    rsm: LocalTieredStorage,
    tip: TopicIdPartition,
) -> list[RemoteLogSegmentMetadata]:
    """tierlog's segments against Kafka's formatter and LocalTieredStorage's files; returns the
    finished ones (COPY_SEGMENT_FINISHED) by start offset.

    Every live segment counts, including a copy the broker's restart interrupted: Kafka leaves
    it in COPY_SEGMENT_STARTED and copies the same offsets again under a new segment id, so two
    segments may start at one offset. Both lists are ordered by (start offset, segment id)."""
    ours = sorted(
        rlmm.list_remote_log_segments(tip),
        key=lambda s: (s.start_offset, str(s.remote_log_segment_id.id)),
    )
    events = kafka_metadata_events(broker.url)
    theirs = sorted(
        kafka_segments(events, str(tip.topic_id)), key=lambda k: (k.start_offset, k.segment_id)
    )
    assert [segment_view(s) for s in ours] == [kafka_view(k) for k in theirs]

    # Per leader epoch, as Kafka's cache lists them: the segments holding the epoch by start
    # offset, a finished copy before an unfinished one at the same start (Kafka appends the
    # unreferenced ones and sorts stably).
    for epoch in sorted({e for k in theirs for e in k.leader_epochs}):
        listed = rlmm.list_remote_log_segments(tip, epoch)
        expected = sorted(
            (k for k in theirs if epoch in k.leader_epochs),
            key=lambda k: (k.start_offset, k.state != "COPY_SEGMENT_FINISHED"),
        )
        assert [str(s.remote_log_segment_id.id) for s in listed] == [
            k.segment_id for k in expected
        ], epoch

    # The files LocalTieredStorage wrote: a full set per finished segment, named by start
    # offset and segment id, the segment's size on disk; nothing for a deleted segment (an
    # interrupted copy may or may not have left its files).
    finished = [s for s in ours if s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    directory = remote_partition_dir(broker, tip.topic, str(tip.topic_id))
    logs = {p.name for p in directory.iterdir() if p.name.endswith(".log")}
    name = "{0.start_offset:020d}-{0.remote_log_segment_id.id}.log".format
    assert {name(s) for s in finished} <= logs <= {name(s) for s in ours}
    for segment in finished:
        paths = rsm.segment_paths(segment)
        for suffix in REMOTE_SUFFIXES:
            assert paths[suffix].parent == directory and paths[suffix].is_file(), paths[suffix]
        assert paths[".log"].stat().st_size == segment.segment_size_in_bytes
        assert paths[".txnindex"].is_file() == (not segment.txn_idx_empty)
    return finished


def aux_state_log(
    directory: Path, rsm: LocalTieredStorage, tip: TopicIdPartition, last: RemoteLogSegmentMetadata
) -> LocalLog:
    """An empty local log of the partition starting after ``last``, with the leader epochs and
    producer state of the remote data before it: what a follower builds from the remote
    segment's leader epoch checkpoint and producer snapshot (Kafka's
    ``buildRemoteLogAuxState``)."""
    log = LocalLog.open(directory / f"{tip.topic}-{tip.partition}", {}, topic_id=tip.topic_id)
    with rsm.fetch_index(last, IndexType.LEADER_EPOCH) as stream:
        epochs = parse_leader_epoch_checkpoint(stream.read())
    with rsm.fetch_index(last, IndexType.PRODUCER_SNAPSHOT) as stream:
        snapshot = stream.read()
    log.restore_remote_aux_state(
        last.end_offset + 1, log_start_offset=0, leader_epochs=epochs, producer_snapshot=snapshot
    )
    return log


def read_through_tierlog(
    reader: RemoteLogReader, tip: TopicIdPartition, end_offset: int, *, isolation: str
) -> list[Row]:
    """Every record from offset 0 to ``end_offset`` (exclusive), fetch after fetch as a consumer
    reads, through tierlog's remote read path. With ``read_committed`` each fetch's aborted
    transactions drop their records as Kafka's consumer drops them (``CompletedFetch``: a
    producer is aborted from its aborted transaction's first offset to its ABORT marker)."""
    rows: list[Row] = []
    offset = 0
    while offset < end_offset:
        info = trim_partial_batch(
            reader.read(
                RemoteStorageFetchInfo(
                    max_bytes=64 * 1024,
                    min_one_message=True,
                    topic_id_partition=tip,
                    fetch_offset=offset,
                    isolation=isolation,
                )
            )
        )
        assert info.records, f"no records at offset {offset} of {tip}"
        pending = sorted(info.aborted_transactions or (), key=lambda t: t.first_offset)
        aborted: set[int] = set()
        for _, header, records in iter_batches_with_records(info.records):
            offset = header.last_offset + 1
            while pending and pending[0].first_offset <= header.last_offset:
                aborted.add(pending.pop(0).producer_id)
            if header.is_control:
                if decode_control_record(records[0]).type is ControlRecordType.ABORT:
                    aborted.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborted:
                continue
            rows.extend(
                (r.offset, r.timestamp, r.key, r.value, list(r.headers))
                for r in records
                if r.offset < end_offset
            )
    return rows


def assert_tierlog_copies_the_same(
    kafka_local: Path, segments: list[RemoteLogSegmentMetadata], rsm: LocalTieredStorage
) -> None:
    """tierlog's ``LocalLog`` on a copy of Kafka's partition directory: what its RLM copy task
    would ship for each segment Kafka tiered (``segment_copy_inputs``) is what Kafka shipped,
    as Kafka's metadata and LocalTieredStorage's files show it: offsets, leader epochs, size,
    max timestamp, transaction index, and the bytes of every file, the leader epoch checkpoint
    text and the producer snapshot included."""
    # Kafka's files as they are, as Kafka loads its own directory after a clean shutdown: the
    # copy was taken from a running broker, and a recovery would rebuild the indexes of the
    # segments after the recovery point (the same entries, except the one Kafka appends to the
    # time index when a segment stops being active, here at the restart).
    log_end = active_segment_base(kafka_local)
    for _, header in iter_batches(kafka_local / f"{log_end:020d}.log"):
        log_end = header.last_offset + 1
    write_offsets_checkpoint(
        kafka_local,
        OffsetsCheckpoint(
            recovery_point=log_end, log_start_offset=0, high_watermark=log_end, clean_shutdown=True
        ),
    )
    log = LocalLog.open(kafka_local, TOPIC_CONFIG)
    try:
        for segment in segments:
            inputs = log.segment_copy_inputs(segment.start_offset)
            what = f"segment {segment.start_offset}-{segment.end_offset}"
            assert inputs.end_offset == segment.end_offset, what
            assert inputs.segment_leader_epochs == dict(segment.segment_leader_epochs), what
            assert inputs.size_in_bytes == segment.segment_size_in_bytes, what
            assert inputs.largest_timestamp == segment.max_timestamp_ms, what
            assert inputs.txn_index_empty == segment.txn_idx_empty, what
            stored = rsm.segment_paths(segment)
            data = inputs.data
            sources: dict[str, Path | bytes | None] = {
                ".log": data.log_segment,
                ".index": data.offset_index,
                ".timeindex": data.time_index,
                ".txnindex": data.transaction_index,
                ".snapshot": data.producer_snapshot_index,
                ".leader_epoch_checkpoint": bytes(data.leader_epoch_index),
            }
            for suffix, source in sources.items():
                if source is None:
                    assert not stored[suffix].exists(), (what, suffix)
                    continue
                ours = source if isinstance(source, bytes) else source.read_bytes()
                assert ours == stored[suffix].read_bytes(), (what, suffix)
    finally:
        log.close()


@pytest.mark.slow
def test_tierlog_reads_the_history_kafka_tiered(
    kafka_factory: Callable[..., Service], tierlog_history: Callable[..., Any], tmp_path: Path
) -> None:
    broker = kafka_factory(
        tiered_storage=tmp_path / "tiered-storage",
        # Local segments Kafka tiered are deleted within seconds (local.retention.bytes=1), so
        # the consumer below is served from the remote tier by Kafka's own read path.
        properties={"log.retention.check.interval.ms": "1000", "log.initial.task.delay.ms": "0"},
    )
    topic = unique_topic("history")
    topic_id = create_topic(broker, topic, {"remote.storage.enable": "true", **TOPIC_CONFIG})
    last_tiered = tier_with_two_epochs(broker, topic)
    # Kafka's local log as it was when it tiered (kept until local retention is set below).
    local_copy = tmp_path / "kafka-local" / f"{topic}-0"
    shutil.copytree(partition_dir(broker, topic), local_copy)

    rlmm, rsm = tierlog_history(broker)
    tip = TopicIdPartition(Uuid.from_string(topic_id), topic, 0)
    rlmm.on_partition_leadership_changes({tip}, set())
    wait_for(lambda: rlmm.is_ready(tip), f"tierlog's RLMM to replay {tip}")

    # The segments.
    segments = assert_segments_agree(broker, rlmm, rsm, tip)
    assert len(segments) >= 6
    assert segments[0].start_offset == 0 and segments[-1].end_offset == last_tiered
    assert all(s.state.name == "COPY_SEGMENT_FINISHED" for s in segments)
    epochs = {e for s in segments for e in s.segment_leader_epochs}
    assert len(epochs) >= 2, epochs
    assert any(len(s.segment_leader_epochs) == 1 for s in segments)
    assert any(not s.txn_idx_empty for s in segments)
    assert all(b.start_offset == a.end_offset + 1 for a, b in itertools.pairwise(segments))

    # What tierlog's RLM would copy for the same local segments is what Kafka copied.
    assert_tierlog_copies_the_same(local_copy, segments, rsm)

    # The records, through tierlog's remote read path, against what the broker serves from its
    # remote tier (once its local copies are gone).
    with admin_client(broker) as admin:
        admin.alter_configs(
            [ConfigResource("TOPIC", topic, {"local.retention.bytes": "1"})], incremental=True
        )
    wait_for(
        lambda: list_offset(broker, topic, OffsetSpec.EARLIEST_LOCAL) > last_tiered,
        "Kafka to delete the local copies of the tiered segments",
    )
    log = aux_state_log(tmp_path / "tierlog-log", rsm, tip, segments[-1])
    index_cache = RemoteIndexCache(rsm, tmp_path / "tierlog-log")
    try:
        reader = RemoteLogReader(rsm, rlmm, index_cache, log, verify_crc=True)
        counts = {}
        for isolation in ("read_uncommitted", "read_committed"):
            ours = read_through_tierlog(reader, tip, last_tiered + 1, isolation=isolation)
            theirs = consume(broker, topic, last_tiered + 1, isolation=isolation)
            assert len(ours) == len(theirs), isolation
            for mine, kafka in zip(ours, theirs, strict=True):
                assert mine == kafka, isolation
            counts[isolation] = len(ours)
        assert counts["read_committed"] < counts["read_uncommitted"]  # aborted records dropped
    finally:
        index_cache.close()
        log.close()

    # Kafka deletes its first remote segments below a new log start offset; tierlog's RLMM,
    # still following the topic, drops the same ones.
    new_start = segments[2].start_offset
    with admin_client(broker) as admin:
        admin.delete_records({TopicPartition(topic, 0): new_start})
    gone = {str(s.remote_log_segment_id.id) for s in segments[:2]}

    def dropped() -> bool:
        listed = {str(s.remote_log_segment_id.id) for s in rlmm.list_remote_log_segments(tip)}
        return not gone & listed

    wait_for(dropped, "tierlog's RLMM to drop the segments Kafka deleted", timeout=DEADLINE_S)
    remaining = assert_segments_agree(broker, rlmm, rsm, tip)
    assert [str(s.remote_log_segment_id.id) for s in remaining] == [
        str(s.remote_log_segment_id.id) for s in segments[2:]
    ]
