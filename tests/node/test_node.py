"""``tierlog.Node``, the Python API, on real components: the ``local`` RSM, the ``embedded``
RLMM, real ``LocalLog`` s in a temporary ``log.dirs``.

Most tests drive tiering with ``tier_now`` on a node whose periodic tasks are hours apart, so
every step is deterministic; ``test_background_tasks_tier_and_cut_the_local_log`` is the one
that lets the periodic tasks do it on their own.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tierlog.log.batch import ControlRecordType, build_batch, build_control_batch
from tierlog.log.local_log import (
    InvalidRecordError,
    LocalLog,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from tierlog.log.log_config import LogConfig
from tierlog.log.reader import iter_batches_with_records
from tierlog.log.record import Record
from tierlog.node import LogDirError, Node, NodeConfig, ProducerRecord, UnknownTopicError
from tierlog.node.node import REMOTE_STORAGE_DIR, TOPICS_FILE, decode_fetched
from tierlog.rlm.scheduler import ScheduledTask
from tierlog.spi import (
    ConfigError,
    IllegalStateError,
    InvalidArgumentError,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TierlogError,
    Uuid,
)
from tierlog.storage.local import LocalTieredStorage

HOUR_MS = "3600000"

TIERED: dict[str, object] = {
    "remote.storage.enable": "true",
    "internal.segment.bytes": 2048,
    "local.retention.bytes": 1,
}
"""A tiered topic of ~2 KiB segments whose local log keeps only what is not yet copied."""


def node_props(tmp_path: Path, **extra: object) -> dict[str, object]:
    """A node with remote storage on and its periodic tasks an hour apart (``tier_now`` drives
    them), the embedded defaults under ``tmp_path / "logs"``."""
    props: dict[str, object] = {
        "log.dirs": tmp_path / "logs",
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": HOUR_MS,
        "log.retention.check.interval.ms": HOUR_MS,
        # A remote read slowed by a loaded machine must not expire into an empty answer here:
        # expiry has its own tests (test_remote_timeouts.py).
        "remote.fetch.max.wait.ms": "120000",
    }
    props.update({k.replace("_", "."): v for k, v in extra.items()})
    return props


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    with Node(node_props(tmp_path)) as n:
        yield n


def value_of(i: int) -> bytes:
    return f"value-{i:06d}-".encode() * 5


def produce_values(node: Node, topic: str, count: int, *, start: int = 0) -> None:
    """``count`` records ``value_of(i)`` to partition 0, a few per call (several batches)."""
    for base in range(start, start + count, 10):
        node.produce(
            topic, [value_of(i) for i in range(base, min(base + 10, start + count))], partition=0
        )


def fetch_all(
    node: Node, topic: str, partition: int = 0, *, start: int | None = None, **kwargs: Any
) -> tuple[list[Record], set[bool]]:
    """Every record from ``start`` (the log start) to the log end, and which kinds of read
    (remote or not) served them; offsets must be contiguous and every fetch must progress."""
    log = node.log(topic, partition)
    offset = log.log_start_offset if start is None else start
    records: list[Record] = []
    sources: set[bool] = set()
    while offset < log.log_end_offset:
        result = node.fetch(topic, partition, offset, **kwargs)
        assert result.next_offset > offset, f"no progress at {offset}"
        sources.add(result.from_remote)
        records.extend(result.records)
        offset = result.next_offset
    return records, sources


def remote_files(tmp_path: Path) -> list[Path]:
    root = tmp_path / "logs" / REMOTE_STORAGE_DIR
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def finished_segments(node: Node, topic: str, partition: int = 0) -> list[RemoteLogSegmentMetadata]:
    assert node.rlm is not None and node.rlmm is not None
    tp = node.rlm.topic_id_partition(node.log(topic, partition).topic_partition)
    return sorted(
        (
            s
            for s in node.rlmm.list_remote_log_segments(tp)
            if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ),
        key=lambda s: s.start_offset,
    )


def assert_no_overlap(segments: list[RemoteLogSegmentMetadata]) -> None:
    for a, b in itertools.pairwise(segments):
        assert a.end_offset < b.start_offset, f"{a} overlaps {b}"


DEADLINE_S = 60.0
"""How long a test waits for something that happens within a second on an idle machine."""


def wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


# Lifecycle -----------------------------------------------------------------------------------
def test_calls_before_start_and_after_close_are_refused(tmp_path: Path) -> None:
    node = Node(node_props(tmp_path))
    with pytest.raises(IllegalStateError, match="not started"):
        node.create_topic("t")
    with pytest.raises(IllegalStateError, match="not started"):
        node.produce("t", [b"x"])
    node.start()
    node.create_topic("t")
    node.close()
    node.close()  # idempotent
    with pytest.raises(IllegalStateError, match="closed"):
        node.fetch("t", 0, 0)
    with pytest.raises(IllegalStateError, match="closed"):
        node.start()


def test_a_log_dir_that_cannot_be_used_fails_the_start_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    node = Node(node_props(tmp_path, log_dirs=f"{tmp_path / 'ok'},{blocker / 'logs'}"))
    with pytest.raises(LogDirError, match=re.escape(f"Cannot create log directory {blocker}")) as e:
        node.start()
    assert e.value.path == blocker / "logs"
    assert isinstance(e.value, TierlogError)
    node.close()


def test_a_missing_log_dirs_warns_of_kafkas_default(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="tierlog.node.node"):
        node = Node({"node.id": 3})  # not started: /tmp/kafka-logs is not touched
    assert node.config.log_dirs == (Path("/tmp/kafka-logs"),)
    assert [r.getMessage() for r in caplog.records] == [
        "Neither log.dirs nor log.dir is set: using Kafka's default /tmp/kafka-logs (data "
        "under /tmp may not survive a reboot; set log.dirs)"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tierlog.node.node"):
        Node({"log.dir": tmp_path})
        Node({"log.dirs": tmp_path})
    assert caplog.records == []


# Topics --------------------------------------------------------------------------------------
def test_create_topic_persists_name_id_partitions_and_overrides(tmp_path: Path) -> None:
    with Node(node_props(tmp_path, num_partitions=2)) as node:
        topic_id = node.create_topic("events", configs={"retention.ms": 60_000})
        node.create_topic("three", partitions=3)
        topics = node.topics()
        assert topics["events"] == {
            "id": str(topic_id),
            "partitions": 2,
            "configs": {"retention.ms": "60000"},
        }
        assert topics["three"]["partitions"] == 3
        assert node.log("events", 1).config.retention_ms == 60_000
        assert node.log("three", 2).topic_id == Uuid.from_string(topics["three"]["id"])
        assert (tmp_path / "logs" / "events-1" / "partition.metadata").exists()
        on_disk = json.loads((tmp_path / "logs" / TOPICS_FILE).read_text())
        assert on_disk["topics"]["events"]["id"] == str(topic_id)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "x" * 250, "spa ce"])
def test_illegal_topic_names_are_refused(node: Node, name: str) -> None:
    with pytest.raises(InvalidArgumentError, match="invalid topic name"):
        node.create_topic(name)
    assert node.topics() == {}


def test_duplicate_topic_zero_partitions_and_bad_configs_are_refused(node: Node) -> None:
    node.create_topic("t")
    with pytest.raises(InvalidArgumentError, match="already exists"):
        node.create_topic("t")
    with pytest.raises(InvalidArgumentError, match="at least one partition"):
        node.create_topic("u", partitions=0)
    with pytest.raises(ConfigError, match=re.escape("retention.ms")):
        node.create_topic("u", configs={"retention.ms": "soon"})
    with pytest.raises(ConfigError, match=re.escape("no.such.key")):
        node.create_topic("u", configs={"no.such.key": "1"})
    assert list(node.topics()) == ["t"]


def test_alter_topic_config_applies_persists_and_removes_overrides(tmp_path: Path) -> None:
    with Node(node_props(tmp_path)) as node:
        node.create_topic("t", configs={"retention.ms": 60_000})
        node.alter_topic_config("t", {"retention.bytes": 4096, "retention.ms": ""})
        config = node.log("t", 0).config
        assert config.retention_bytes == 4096
        assert config.retention_ms == LogConfig().retention_ms  # override removed
        with pytest.raises(ConfigError, match=re.escape("retention.bytes")):
            node.alter_topic_config("t", {"retention.bytes": "lots"})
        assert node.log("t", 0).config.retention_bytes == 4096  # unchanged by the failure
        with pytest.raises(UnknownTopicError):
            node.alter_topic_config("nope", {"retention.ms": 1})
    with Node(node_props(tmp_path)) as node:
        assert node.topics()["t"]["configs"] == {"retention.bytes": "4096"}
        assert node.log("t", 0).config.retention_bytes == 4096


def test_delete_topic_removes_local_and_remote_data(tmp_path: Path) -> None:
    with Node(node_props(tmp_path)) as node:
        node.create_topic("gone", configs=TIERED)
        node.create_topic("kept", configs=TIERED)
        produce_values(node, "gone", 200)
        produce_values(node, "kept", 200)
        node.tier_now()
        gone_files = [p for p in remote_files(tmp_path) if "gone-0-" in p.parent.name]
        assert gone_files, "nothing was tiered"
        node.delete_topic("gone")
        left = remote_files(tmp_path)
        assert left and all("kept-0-" in p.parent.name for p in left)
        assert not (tmp_path / "logs" / "gone-0").exists()
        assert list(node.topics()) == ["kept"]
        with pytest.raises(UnknownTopicError):
            node.fetch("gone", 0, 0)
        node.delete_topic("kept")
        assert remote_files(tmp_path) == []
    with Node(node_props(tmp_path)) as node:  # and it stays deleted
        assert node.topics() == {}
        assert node.partitions() == []


def test_delete_topic_leaves_the_remote_storage_directory_empty(tmp_path: Path) -> None:
    with Node(node_props(tmp_path)) as node:
        node.create_topic("gone", configs=TIERED)
        produce_values(node, "gone", 200)
        node.tier_now()
        assert remote_files(tmp_path)
        node.delete_topic("gone")
    root = tmp_path / "logs" / REMOTE_STORAGE_DIR
    assert [p.relative_to(root) for p in root.rglob("*") if p.name != "kafka-tiered-storage"] == []


# Producing -----------------------------------------------------------------------------------
def test_produce_values_pairs_and_producer_records_read_back_exactly(node: Node) -> None:
    node.create_topic("t")
    headers = (("trace", b"abc"), ("empty", None))
    results = node.produce(
        "t",
        [
            b"plain",
            (b"k1", b"v1"),
            (None, b"no key"),
            (b"tombstone", None),
            ProducerRecord(b"full", key=b"k2", headers=headers, timestamp=1_234),
        ],
    )
    assert [(r.partition, r.base_offset, r.last_offset) for r in results] == [(0, 0, 4)]
    # keyed records pick partitions by key; with one partition all land in 0
    records = node.fetch("t", 0, 0).records
    assert [(r.offset, r.key, r.value) for r in records] == [
        (0, None, b"plain"),
        (1, b"k1", b"v1"),
        (2, None, b"no key"),
        (3, b"tombstone", None),
        (4, b"k2", b"full"),
    ]
    assert records[4].headers == headers
    assert records[4].timestamp == 1_234
    assert records[0].timestamp > 1_600_000_000_000  # the node's clock


def test_produce_refuses_what_is_not_a_record(node: Node) -> None:
    node.create_topic("t")
    with pytest.raises(InvalidArgumentError, match="ProducerRecord"):
        node.produce("t", ["text"])  # type: ignore[list-item]


# Kafka's UtilsTest.testMurmur2 vectors and the partition Kafka's DefaultPartitioner picks for
# them among 7 partitions: Utils.toPositive(murmur2(key)) % 7, toPositive being `h & 0x7fffffff`
# (not abs(): "21" would go to 6 with abs).
KAFKA_KEY_PARTITIONS = [
    (b"21", -973932308, 3),
    (b"foobar", -790332482, 0),
    (b"a-little-bit-long-string", -985981536, 1),
    (b"a-little-bit-longer-string", -1486304829, 0),
    (b"abc", 479470107, 4),
]


@pytest.mark.parametrize(("key", "murmur", "expected"), KAFKA_KEY_PARTITIONS)
def test_keyed_records_go_where_kafkas_partitioner_puts_them(
    node: Node, key: bytes, murmur: int, expected: int
) -> None:
    assert (murmur & 0x7FFFFFFF) % 7 == expected  # the table itself
    node.create_topic("t", partitions=7)
    (result,) = node.produce("t", [(key, b"v")])
    assert result.partition == expected
    assert node.fetch("t", expected, 0).records[0].key == key


def test_same_key_same_partition_and_unkeyed_calls_stay_together(tmp_path: Path) -> None:
    with Node(node_props(tmp_path)) as node:
        node.create_topic("t", partitions=5)
        keys = [f"key-{i}".encode() for i in range(40)]
        first = {k: node.produce("t", [(k, b"1")])[0].partition for k in keys}
        assert len(set(first.values())) > 1  # the keys do spread
        batch = node.produce("t", [(k, b"2") for k in keys])
        by_partition = {r.partition: r for r in batch}
        for k in keys:
            assert first[k] in by_partition
        # an unkeyed call lands in a single partition (Kafka's sticky partitioning)
        unkeyed = node.produce("t", [b"a", b"b", b"c"])
        assert len(unkeyed) == 1 and unkeyed[0].last_offset - unkeyed[0].base_offset == 2
    with Node(node_props(tmp_path)) as node:  # and after a restart
        assert {k: node.produce("t", [(k, b"3")])[0].partition for k in keys} == first


def test_explicit_partition_and_out_of_range_partition(node: Node) -> None:
    node.create_topic("t", partitions=2)
    (result,) = node.produce("t", [(b"k", b"v")], partition=1)
    assert result.partition == 1
    with pytest.raises(UnknownTopicError, match="no partition 2"):
        node.produce("t", [b"v"], partition=2)


def test_produce_auto_creates_topics_unless_disabled(tmp_path: Path) -> None:
    with Node(node_props(tmp_path, num_partitions=3)) as node:
        node.produce("auto", [b"v"])
        assert node.topics()["auto"]["partitions"] == 3
    with Node(node_props(tmp_path / "b", auto_create_topics_enable="false")) as node:
        with pytest.raises(UnknownTopicError, match="missing"):
            node.produce("missing", [b"v"])
        assert node.topics() == {}


def test_produce_batches_fit_max_message_bytes_and_small_segments(node: Node) -> None:
    """Many records in one call are cut into batches the log accepts: under ~64 KiB, under the
    topic's max.message.bytes and under a segment smaller than that."""
    node.create_topic("small-max", configs={"max.message.bytes": 5000})
    node.create_topic("small-segments", configs={"internal.segment.bytes": 3000})
    node.create_topic("default")
    values = [bytes([i % 256]) * 900 for i in range(200)]
    for topic, limit in (("small-max", 5000), ("small-segments", 3000), ("default", 65536)):
        node.produce(topic, values)
        sizes = []
        count = 0
        for segment in node.log(topic, 0).segments:
            for _, header, recs in iter_batches_with_records(segment.log_path):
                sizes.append(header.length + 12)
                count += len(recs)
        assert count == 200
        assert max(sizes) <= limit
        assert len(sizes) >= (200 * 900) // limit  # batches, not one record each
        assert [r.value for r in fetch_all(node, topic)[0]] == values
    with pytest.raises(RecordTooLargeError):
        node.produce("small-max", [b"x" * 6000])


# Fetching ------------------------------------------------------------------------------------
def test_fetch_local_and_remote_return_exact_records(node: Node) -> None:
    node.create_topic("t", configs=TIERED)
    produce_values(node, "t", 300)
    node.tier_now()
    status = node.status("t")[0]
    assert status.local_log_start_offset > 0
    assert status.log_start_offset == 0

    remote = node.fetch("t", 0, 0)
    assert remote.from_remote and remote.records
    local = node.fetch("t", 0, status.local_log_start_offset)
    assert not local.from_remote and local.records

    records, sources = fetch_all(node, "t")
    assert sources == {True, False}
    assert [r.offset for r in records] == list(range(300))
    assert [r.value for r in records] == [value_of(i) for i in range(300)]

    # from the middle of a remote batch: the first record is the one asked for
    middle = node.fetch("t", 0, 5)
    assert middle.from_remote and middle.records[0].offset == 5
    assert node.fetch("t", 0, 300).records == []
    with pytest.raises(OffsetOutOfRangeError):
        node.fetch("t", 0, 301)
    with pytest.raises(UnknownTopicError):
        node.fetch("t", 1, 0)
    with pytest.raises(UnknownTopicError):
        node.fetch("nope", 0, 0)


def test_remote_retention_moves_the_log_start_and_deletes_remote_segments(
    tmp_path: Path, node: Node
) -> None:
    node.create_topic("t", configs=TIERED)
    produce_values(node, "t", 300)
    node.tier_now()
    before = finished_segments(node, "t")
    node.alter_topic_config("t", {"retention.bytes": 4096})
    node.tier_now()
    after = finished_segments(node, "t")
    log = node.log("t", 0)
    assert 0 < len(after) < len(before)
    assert log.log_start_offset == after[0].start_offset > 0
    with pytest.raises(OffsetOutOfRangeError):
        node.fetch("t", 0, 0)
    records, _ = fetch_all(node, "t")
    assert [r.offset for r in records] == list(range(log.log_start_offset, 300))
    assert len(remote_files(tmp_path)) < 6 * len(before)


def test_disabling_remote_storage_needs_delete_on_disable(tmp_path: Path, node: Node) -> None:
    node.create_topic("t", configs=TIERED)
    produce_values(node, "t", 200)
    node.tier_now()
    local_start = node.log("t", 0).local_log_start_offset
    with pytest.raises(ConfigError, match=re.escape("remote.log.delete.on.disable")):
        node.alter_topic_config("t", {"remote.storage.enable": "false"})
    assert node.log("t", 0).remote_log_enabled
    assert remote_files(tmp_path)
    node.alter_topic_config(
        "t", {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    )
    log = node.log("t", 0)
    assert not log.remote_log_enabled
    assert remote_files(tmp_path) == []
    assert log.log_start_offset == local_start
    records, sources = fetch_all(node, "t")
    assert sources == {False}
    assert [r.offset for r in records] == list(range(local_start, 200))


# read_committed --------------------------------------------------------------------------------
def txn_batch(pid: int, seq: int, *values: bytes) -> bytes:
    now = int(time.time() * 1000)
    return build_batch(
        [Record(i, now, None, v) for i, v in enumerate(values)],
        is_transactional=True,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
    )


def marker(kind: ControlRecordType, pid: int) -> bytes:
    return build_control_batch(
        kind, 0, timestamp=int(time.time() * 1000), producer_id=pid, producer_epoch=0
    )


def write_transactions(node: Node, topic: str) -> tuple[list[bytes], list[bytes]]:
    """Interleaved transactions of producers 1 (aborted) and 2 (committed) and plain records;
    returns (every data value in order, the committed view)."""
    node.produce(topic, [b"plain-0"], partition=0)
    node.append_batches(topic, 0, txn_batch(1, 0, b"abort-a", b"abort-b"))
    node.append_batches(topic, 0, txn_batch(2, 0, b"commit-a"))
    node.append_batches(topic, 0, txn_batch(1, 2, b"abort-c"))
    node.append_batches(topic, 0, marker(ControlRecordType.ABORT, 1), origin="coordinator")
    node.append_batches(topic, 0, txn_batch(2, 1, b"commit-b"))
    node.append_batches(topic, 0, marker(ControlRecordType.COMMIT, 2), origin="coordinator")
    node.produce(topic, [b"plain-1"], partition=0)
    everything = [
        b"plain-0",
        b"abort-a",
        b"abort-b",
        b"commit-a",
        b"abort-c",
        b"commit-b",
        b"plain-1",
    ]
    committed = [b"plain-0", b"commit-a", b"commit-b", b"plain-1"]
    return everything, committed


def test_control_markers_need_coordinator_origin(node: Node) -> None:
    node.create_topic("t")
    node.append_batches("t", 0, txn_batch(1, 0, b"x"))
    with pytest.raises(InvalidRecordError):
        node.append_batches("t", 0, marker(ControlRecordType.ABORT, 1))
    with pytest.raises(InvalidArgumentError, match="origin"):
        node.append_batches("t", 0, b"", origin="replication")  # type: ignore[arg-type]


def test_read_committed_drops_aborted_transactions_locally(node: Node) -> None:
    node.create_topic("t")
    everything, committed = write_transactions(node, "t")
    uncommitted = node.fetch("t", 0, 0)
    assert [r.value for r in uncommitted.records] == everything  # markers are not records
    result = node.fetch("t", 0, 0, isolation="read_committed")
    assert [r.value for r in result.records] == committed
    assert [a.producer_id for a in result.aborted_transactions] == [1]
    # a client decoding the raw batches itself gets the same answer
    again, next_offset = decode_fetched(result.batches, 0, result.aborted_transactions)
    assert [r.value for r in again] == committed and next_offset == result.next_offset


def test_read_committed_drops_aborted_transactions_from_remote(node: Node) -> None:
    node.create_topic("t", configs={**TIERED, "internal.segment.bytes": 200})
    everything, committed = write_transactions(node, "t")
    node.produce("t", [b"tail"], partition=0)  # seals the segment of the last plain record
    node.tier_now()
    assert node.log("t", 0).local_log_start_offset > 8  # every transaction is remote
    records, sources = fetch_all(node, "t", isolation="read_committed")
    assert sources == {True, False}
    assert [r.value for r in records] == [*committed, b"tail"]
    records, _ = fetch_all(node, "t")
    assert [r.value for r in records] == [*everything, b"tail"]


def test_open_transaction_is_invisible_to_read_committed(node: Node) -> None:
    node.create_topic("t")
    node.produce("t", [b"before"], partition=0)
    node.append_batches("t", 0, txn_batch(7, 0, b"pending"))
    node.produce("t", [b"after"], partition=0)
    result = node.fetch("t", 0, 0, isolation="read_committed")
    assert [r.value for r in result.records] == [b"before"]
    assert result.last_stable_offset == 1
    assert node.status("t")[0].last_stable_offset == 1


# ListOffsets -----------------------------------------------------------------------------------
def test_list_offsets_every_spec_and_timestamps_remote_and_local(node: Node) -> None:
    node.create_topic("t", configs=TIERED)
    tiered = node.list_offsets("t", 0, "latest-tiered")
    assert tiered is not None and tiered.offset == -1
    base = int(time.time() * 1000) - 1_000_000
    for start in range(0, 300, 10):
        node.produce(
            "t",
            [
                ProducerRecord(value_of(i), timestamp=base + 1000 * i)
                for i in range(start, start + 10)
            ],
            partition=0,
        )
    node.tier_now()
    log = node.log("t", 0)
    local_start = log.local_log_start_offset
    assert local_start > 0

    def offset_of(spec: Any) -> int | None:
        found = node.list_offsets("t", 0, spec)
        return None if found is None else found.offset

    assert offset_of("earliest") == 0
    assert offset_of("latest") == 300
    assert offset_of("earliest-local") == local_start
    assert offset_of("latest-tiered") == log.highest_offset_in_remote_storage == local_start - 1
    assert offset_of(base + 1000 * 7) == 7  # remote
    assert offset_of(base + 1000 * 7 - 500) == 7  # between records: the next one
    assert offset_of(base + 1000 * (local_start + 3)) == local_start + 3  # local
    found = node.list_offsets("t", 0, base + 1000 * 42)
    assert found is not None and found.timestamp == base + 42_000 and found.leader_epoch == 0
    assert node.list_offsets("t", 0, base + 1000 * 300) is None  # after every record
    assert offset_of(0) == 0
    with pytest.raises(InvalidArgumentError, match="offset spec"):
        node.list_offsets("t", 0, "newest")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="offset spec"):
        node.list_offsets("t", 0, -7)
    with pytest.raises(UnknownTopicError):
        node.list_offsets("nope", 0, "earliest")


# Status --------------------------------------------------------------------------------------
def test_status_reports_offsets_sizes_and_tiering(node: Node) -> None:
    node.create_topic("tiered", configs=TIERED)
    node.create_topic("local", partitions=2)
    produce_values(node, "tiered", 200)
    node.produce("local", [b"x"] * 5, partition=1)
    node.tier_now()
    tiered, local0, local1 = (
        node.status("tiered")[0],
        *node.status("local"),
    )
    log = node.log("tiered", 0)
    segments = finished_segments(node, "tiered")
    assert tiered.topic == "tiered" and tiered.partition == 0
    assert tiered.topic_id == str(log.topic_id)
    assert tiered.leader_epoch == 0
    assert (tiered.log_start_offset, tiered.log_end_offset, tiered.high_watermark) == (0, 200, 200)
    assert tiered.last_stable_offset == 200
    assert tiered.local_log_start_offset == log.local_log_start_offset > 0
    assert tiered.highest_offset_in_remote_storage == tiered.local_log_start_offset - 1
    assert tiered.remote_segments == len(segments) > 0
    assert tiered.remote_bytes == sum(s.segment_size_in_bytes for s in segments)
    assert tiered.local_segments == len(log.segments)
    assert tiered.local_bytes == sum(s.size for s in log.segments)
    assert (tiered.copy_lag_bytes, tiered.copy_lag_segments) == (0, 0)
    assert tiered.remote_storage_enabled
    assert sorted(t["kind"] for t in tiered.tasks) == ["copy task", "expiration task"]
    assert all(t["failures"] == 0 and t["last_error"] is None for t in tiered.tasks)
    assert (local0.partition, local0.log_end_offset) == (0, 0)
    assert (local1.partition, local1.log_end_offset) == (1, 5)
    assert not local1.remote_storage_enabled and local1.tasks == []
    assert (local1.remote_segments, local1.remote_bytes) == (0, 0)
    assert len(node.status()) == 3
    json.dumps([s.to_json() for s in node.status()])  # serialisable for /status


# Restart -------------------------------------------------------------------------------------
def epoch_of_batch_at(node: Node, topic: str, offset: int) -> int:
    """The partition leader epoch stamped on the batch holding ``offset``."""
    for _, header, _ in iter_batches_with_records(node.fetch(topic, 0, offset).batches):
        if header.base_offset <= offset <= header.last_offset:
            return header.partition_leader_epoch
    raise AssertionError(f"no batch holds offset {offset}")


def test_restart_bumps_the_epoch_keeps_data_and_resumes_tiering(tmp_path: Path) -> None:
    props = node_props(tmp_path)
    with Node(props) as node:
        node.create_topic("t", configs=TIERED)
        node.create_topic("plain")
        produce_values(node, "t", 150)
        node.produce("plain", [b"p"])
        node.tier_now()
        first = finished_segments(node, "t")
        assert first
        assert node.status("t")[0].leader_epoch == 0
    with Node(props) as node:
        status = node.status("t")[0]
        assert status.leader_epoch == 1
        assert status.log_end_offset == 150
        assert set(node.topics()) == {"t", "plain"}
        records, sources = fetch_all(node, "t")
        assert [r.value for r in records] == [value_of(i) for i in range(150)]
        assert True in sources
        produce_values(node, "t", 150, start=150)
        assert epoch_of_batch_at(node, "t", 149) == 0
        assert epoch_of_batch_at(node, "t", 150) == 1
        node.tier_now()
        second = finished_segments(node, "t")
        # what was tiered before is still there, once; the rest follows it without overlap
        assert [s.remote_log_segment_id for s in second[: len(first)]] == [
            s.remote_log_segment_id for s in first
        ]
        assert len(second) > len(first)
        assert_no_overlap(second)
        assert node.rlm is not None and node.rlm.copied_segments == len(second) - len(first)
        assert second[-1].segment_leader_epochs.get(1) is not None
    with Node(props) as node:  # a start with no append in between still bumps the epoch
        assert node.status("t")[0].leader_epoch == 2
        assert node.status("plain")[0].leader_epoch == 2
        records, _ = fetch_all(node, "t")
        assert [r.value for r in records] == [value_of(i) for i in range(300)]


def test_existing_partition_dirs_without_topics_file_are_adopted(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    topic_id = Uuid.random()
    for partition in (0, 2):
        with LocalLog.open(log_dir / f"adopted-{partition}", LogConfig(), topic_id=topic_id) as log:
            log.assign_epoch_start_offset(4, 0)
            log.append_as_leader(build_batch([Record(0, 1_000, None, f"p{partition}".encode())]), 4)
    with LocalLog.open(log_dir / "__consumer_offsets-0", LogConfig(), topic_id=Uuid.random()):
        pass
    (log_dir / "stray-0").mkdir()  # no partition.metadata: not a partition
    with Node(node_props(tmp_path)) as node:
        assert node.topics() == {"adopted": {"id": str(topic_id), "partitions": 3, "configs": {}}}
        assert node.status("adopted")[0].leader_epoch == 5
        assert [r.value for r in node.fetch("adopted", 0, 0).records] == [b"p0"]
        assert node.fetch("adopted", 1, 0).records == []
        assert [r.value for r in node.fetch("adopted", 2, 0).records] == [b"p2"]
        node.produce("adopted", [b"more"], partition=0)
    saved = json.loads((log_dir / TOPICS_FILE).read_text())
    assert set(saved["topics"]) == {"adopted"}


# Errors --------------------------------------------------------------------------------------
def test_unknown_topics_and_partitions(node: Node) -> None:
    node.create_topic("t")
    for call in (
        lambda: node.fetch("nope", 0, 0),
        lambda: node.list_offsets("nope", 0, "latest"),
        lambda: node.log("t", 1),
        lambda: node.delete_topic("nope"),
        lambda: node.alter_topic_config("nope", {}),
        lambda: node.append_batches("nope", 0, b""),
    ):
        with pytest.raises(UnknownTopicError):
            call()
    assert node.status("nope") == []


def test_remote_storage_topic_is_refused_without_the_system_switch(tmp_path: Path) -> None:
    props = node_props(tmp_path)
    props["remote.log.storage.system.enable"] = "false"
    with Node(props) as node:
        assert node.rlm is None
        with pytest.raises(ConfigError, match=re.escape("remote.storage.enable")):
            node.create_topic("t", configs={"remote.storage.enable": "true"})
        assert node.topics() == {}
        node.create_topic("u")
        with pytest.raises(ConfigError, match=re.escape("remote.storage.enable")):
            node.alter_topic_config("u", {"remote.storage.enable": "true"})
        assert not node.log("u", 0).remote_log_enabled
        node.tier_now()  # nothing to do, and no error
    assert not (tmp_path / "logs" / REMOTE_STORAGE_DIR).exists()


# Background tasks and quotas -------------------------------------------------------------------
def test_background_tasks_tier_and_cut_the_local_log(tmp_path: Path) -> None:
    props = node_props(tmp_path)
    props["remote.log.manager.task.interval.ms"] = "100"
    props["log.retention.check.interval.ms"] = "100"
    with Node(props) as node:
        node.create_topic("t", configs=TIERED)
        produce_values(node, "t", 300)

        def tiered() -> bool:
            s = node.status("t")[0]
            cut = s.local_log_start_offset > 0 and s.local_segments <= 2
            return cut and s.copy_lag_segments == 0

        wait_for(tiered, DEADLINE_S, "the periodic tasks to tier and cut the local log")
        segments = finished_segments(node, "t")
        assert_no_overlap(segments)
        assert segments[0].start_offset == 0
        records, sources = fetch_all(node, "t")
        assert True in sources
        assert [r.value for r in records] == [value_of(i) for i in range(300)]


def test_remote_fetch_is_shed_when_the_fetch_quota_is_exhausted(tmp_path: Path) -> None:
    props = node_props(tmp_path)
    props["remote.log.manager.fetch.max.bytes.per.second"] = "1"
    with Node(props) as node:
        node.create_topic("t", configs=TIERED)
        produce_values(node, "t", 200)
        node.tier_now()
        first = node.fetch("t", 0, 0)
        assert first.from_remote and first.records and not first.throttled
        second = node.fetch("t", 0, first.next_offset)
        assert second.throttled and second.from_remote
        assert second.records == [] and second.next_offset == first.next_offset
        local = node.fetch("t", 0, node.log("t", 0).local_log_start_offset)
        assert local.records and not local.throttled


def test_tier_now_does_not_race_the_periodic_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tier_now`` while the scheduled copy task is in the middle of a copy: each segment is
    still uploaded once (two copy runs at once would upload the same segment twice).

    The copy in flight is held until ``tier_now`` waits for the copy task's runs, so
    ``tier_now`` is called, triggers and starts waiting while that copy is in progress,
    whatever the machine's load; it must then wait for the run after it."""
    gate = GatedStorage.create(tmp_path)
    props = node_props(tmp_path)
    props["remote.log.manager.task.interval.ms"] = "100"
    wait_runs = ScheduledTask.wait_runs
    periodic: ScheduledTask | None = None

    def release_then_wait_runs(
        task: ScheduledTask, count: int, timeout: float | None = None
    ) -> bool:
        if task is periodic:
            gate.release.set()  # tier_now waits: let the copy in flight end
        return wait_runs(task, count, timeout)

    monkeypatch.setattr(ScheduledTask, "wait_runs", release_then_wait_runs)
    try:
        with Node(props, rsm=gate) as node:
            node.create_topic("t", configs=TIERED)
            produce_values(node, "t", 100)
            assert gate.entered.wait(DEADLINE_S), "the periodic copy never started"
            assert node.rlm is not None
            tp = node.rlm.topic_id_partition(node.log("t", 0).topic_partition)
            (periodic,) = [t.scheduled for t in node.rlm.tasks(tp) if t.kind == "copy task"]
            assert periodic is not None and periodic.running
            runs_before = periodic.runs  # the run in flight is held: it cannot end meanwhile
            node.tier_now()
            assert gate.release.is_set(), "tier_now returned without waiting for the copy task"
            # The run in flight, then one that started after tier_now was called: it copied
            # every segment there is to copy.
            assert periodic.runs >= runs_before + 2
            assert node.status("t")[0].copy_lag_segments == 0
            wait_for(lambda: not periodic.running, DEADLINE_S, "the periodic copy run to end")
            segments = finished_segments(node, "t")
            local_start = node.log("t", 0).local_log_start_offset
            assert segments and segments[-1].end_offset == local_start - 1
            assert_no_overlap(segments)
    finally:
        gate.release.set()
        gate.close()


class GatedStorage(LocalTieredStorage):
    """The ``local`` RSM whose first copy waits (at most 60 s) until ``release`` is set, so a
    test can act while a copy is in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()
        self._first = True
        self._first_lock = threading.Lock()

    @classmethod
    def create(cls, tmp_path: Path) -> GatedStorage:
        rsm = cls()
        rsm.configure({"dir": str(tmp_path / "logs" / REMOTE_STORAGE_DIR)})
        return rsm

    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        log_segment_data: LogSegmentData,
    ) -> Any:
        with self._first_lock:
            first, self._first = self._first, False
        if first:
            self.entered.set()
            self.release.wait(DEADLINE_S)
        return super().copy_log_segment_data(remote_log_segment_metadata, log_segment_data)


class ReleasingLock:
    """Wraps a task's run lock: an acquire that finds the lock taken calls ``on_contended``
    (which lets the run holding it go on) before waiting for it."""

    def __init__(self, lock: Any, on_contended: Any) -> None:
        self.lock = lock
        self.on_contended = on_contended
        self.contended = False

    def __enter__(self) -> ReleasingLock:
        if not self.lock.acquire(blocking=False):
            self.contended = True
            self.on_contended()
            self.lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_rlm_run_once_during_a_periodic_copy_uploads_each_segment_once(tmp_path: Path) -> None:
    """``run_once`` on the caller's thread while the scheduled copy run is in flight: it waits
    for that run (the copy task's run lock) instead of copying the same segments at once. The
    copy in flight is held until ``run_once`` has found the run lock taken, whatever the load."""
    gate = GatedStorage.create(tmp_path)
    props = node_props(tmp_path)
    props["remote.log.manager.task.interval.ms"] = "100"
    try:
        with Node(props, rsm=gate) as node:
            node.create_topic("t", configs=TIERED)
            produce_values(node, "t", 100)
            assert gate.entered.wait(DEADLINE_S), "the periodic copy never started"
            assert node.rlm is not None
            tp = node.rlm.topic_id_partition(node.log("t", 0).topic_partition)
            (copy_task,) = [t for t in node.rlm.tasks(tp) if t.kind == "copy task"]
            periodic = copy_task.scheduled
            assert periodic is not None and periodic.running
            # The run in flight entered the original lock: it releases that one when it ends.
            run_lock = ReleasingLock(copy_task._run_lock, gate.release.set)
            copy_task._run_lock = run_lock  # type: ignore[assignment]
            node.rlm.run_once(tp)
            assert run_lock.contended, "run_once did not find the periodic run in progress"
            assert gate.release.is_set()
            wait_for(lambda: not periodic.running, DEADLINE_S, "the periodic copy run to end")
            assert_no_overlap(finished_segments(node, "t"))
    finally:
        gate.release.set()
        gate.close()


def test_node_takes_a_mapping_or_a_node_config(tmp_path: Path) -> None:
    props: Mapping[str, object] = node_props(tmp_path)
    with Node(NodeConfig.from_props(props)) as a:
        a.create_topic("t")
    with Node(props) as b:
        assert list(b.topics()) == ["t"]
