"""A node's compacted topics: cleaned in place by the cleaner threads, or through remote storage.

Real node, embedded defaults (``local`` RSM, ``embedded`` RLMM), the in-process engine (the
Spark engine has its own tests). What a consumer reads afterwards is the check: the latest value
of every key, each once, with tombstones kept until their horizon, and reads of offsets that
compaction removed moving on to the next record, locally and from remote storage.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tierlog.compaction.tiered import TieredCleanResult
from tierlog.log.cleaner_checkpoint import CleanerOffsetCheckpoints
from tierlog.log.record import Record
from tierlog.node.node import Node
from tierlog.spi import TopicPartition

from .test_node import node_props

HOUR_MS = 3_600_000
KEYS = 20


def _props(tmp_path: Path, **extra: object) -> dict[str, object]:
    return node_props(
        tmp_path,
        log_cleaner_backoff_ms=50,
        remote_log_compaction_engine="python",
        **extra,
    )


def _produce(node: Node, topic: str, rounds: int) -> dict[bytes, bytes | None]:
    """``rounds`` batches of every key; returns the latest value of each key."""
    latest: dict[bytes, bytes | None] = {}
    for r in range(rounds):
        batch = []
        for k in range(KEYS):
            key = f"key-{k:02d}".encode()
            value = None if (k == 3 and r == rounds - 1) else f"v{r}-{k}".encode() * 8
            batch.append((key, value))
            latest[key] = value
        node.produce(topic, batch, partition=0)
    return latest


def _read_all(node: Node, topic: str) -> tuple[list[Record], set[bool]]:
    log = node.log(topic, 0)
    offset = log.log_start_offset
    records: list[Record] = []
    sources: set[bool] = set()
    while offset < log.log_end_offset:
        result = node.fetch(topic, 0, offset)
        assert result.next_offset > offset, f"no progress at {offset}"
        sources.add(result.from_remote)
        records.extend(r for r in result.records if r.offset >= offset)
        offset = result.next_offset
    return records, sources


def _latest_survivors(records: list[Record]) -> dict[bytes, bytes | None]:
    seen: dict[bytes, bytes | None] = {}
    for r in records:
        assert r.key is not None
        assert r.key not in seen, f"key {r.key!r} twice after cleaning"
        seen[r.key] = r.value
    return seen


def _wait(condition: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@pytest.fixture
def compacted_node(tmp_path: Path) -> Iterator[Node]:
    with Node(_props(tmp_path)) as node:
        yield node


def test_the_cleaner_threads_compact_a_local_topic(compacted_node: Node) -> None:
    node = compacted_node
    node.create_topic(
        "table",
        partitions=1,
        configs={
            "cleanup.policy": "compact",
            "internal.segment.bytes": 2048,
            "min.cleanable.dirty.ratio": 0.01,
        },
    )
    latest = _produce(node, "table", rounds=30)
    log = node.log("table", 0)
    log.roll()  # the last records leave the active segment, so every key is cleanable
    assert node.cleaner is not None
    # The node writes Kafka's checkpoint file for the partition once the round is done.
    checkpoints = CleanerOffsetCheckpoints(log.dir.parent)
    end = log.active_segment.base_offset
    _wait(lambda: checkpoints.get(TopicPartition("table", 0)) == end)
    assert log.cleaner_offset == end
    records, _ = _read_all(node, "table")
    assert _latest_survivors(records) == latest


def test_a_keyless_record_is_refused_by_a_compacted_topic(compacted_node: Node) -> None:
    node = compacted_node
    node.create_topic("table", partitions=1, configs={"cleanup.policy": "compact"})
    with pytest.raises(Exception, match="Compacted topic cannot accept message without key"):
        node.produce("table", [b"no key"], partition=0)
    assert node.log("table", 0).log_end_offset == 0


def test_a_tiered_compacted_topic_is_compacted_through_remote_storage(tmp_path: Path) -> None:
    props = _props(
        tmp_path, log_cleaner_enable="false", remote_log_compaction_superseded_delete_delay_ms=0
    )
    with Node(props) as node:
        node.create_topic(
            "table",
            partitions=1,
            configs={
                "cleanup.policy": "compact",
                "remote.storage.enable": "true",
                "local.retention.ms": 1,
                "internal.segment.bytes": 2048,
                "min.cleanable.dirty.ratio": 0.01,
            },
        )
        latest = _produce(node, "table", rounds=30)
        log = node.log("table", 0)
        log.roll()
        node.tier_now("table")
        assert log.highest_offset_in_remote_storage == log.active_segment.base_offset - 1
        result = node.compact_now("table", 0)
        assert result.cleaned
        assert isinstance(result, TieredCleanResult)
        assert result.end_offset == log.active_segment.base_offset
        # Local copies are below the cleaner offset and past local retention: they go, and
        # every read is served by the cleaned remote segments.
        node.run_local_retention()
        assert log.local_log_start_offset == log.active_segment.base_offset
        records, sources = _read_all(node, "table")
        assert sources == {True}
        assert _latest_survivors(records) == latest
        # The expiration task deletes the segments the cleaned ones replaced (delay 0 here),
        # never those readers are routed to.
        assert node.rlmm is not None
        tip = node.rlm.topic_id_partition(log.topic_partition) if node.rlm else None
        assert tip is not None
        before = list(node.rlmm.list_remote_log_segments(tip))
        assert len(before) == 2 * len(result.published)
        node.tier_now("table")
        after = list(node.rlmm.list_remote_log_segments(tip))
        assert {s.remote_log_segment_id for s in after} == {
            s.remote_log_segment_id for s in result.published
        }
        assert _latest_survivors(_read_all(node, "table")[0]) == latest
        # An offset compaction removed: the read starts at the next record still there.
        gone = next(o for o in range(result.end_offset) if o not in {r.offset for r in records})
        first = node.fetch("table", 0, gone)
        kept = [r for r in first.records if r.offset >= gone]
        assert kept and kept[0].offset == min(r.offset for r in records if r.offset > gone)
