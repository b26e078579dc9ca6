"""Fault tests of the ``compacted`` RLMM against real Apache Kafka 4.3.1 brokers.

The shared fault tests (``services.rlmm_suites.RlmmFaultSuite``, those of the topic RLMM) on
the compacted RLMM, whose writes are Kafka transactions (projection record, audit copy and
tombstones), with its own checks on top:

- the broker restarted (SIGTERM, SIGKILL) while a stream of writes is in flight, for an outage
  shorter than the producer's delivery timeout and one longer: no acknowledged write lost,
  nothing written twice, writes after the restart succeed (the transactional producer is not
  left fenced or fatal), the projection and the audit topic hold the same events, and a fresh
  node's replay equals the writer's cache;
- a node closed and a new one started with the same node id (the same ``transactional.id``):
  it replays the same cache from a level-1 history (several leader epochs, an upload
  superseded under its key, deletions with their tombstones, invalid transitions, partition
  deletions), keeps writing, and replays it again after a stop and re-assignment;
- in the three-node cluster (topics with replication factor 3, ``min.insync.replicas`` 2): the
  leader of the projection and audit partitions moved during writes (reassignment and
  preferred election), and stopped and started again;
- two nodes, leader and follower of the same user partitions: the follower converges to the
  leader's cache, deletions and their tombstones included, and holds the same keys;
- atomicity: a node killed between producing a write's records and committing them (a child
  process ending with ``os._exit``) leaves neither the projection record nor the audit record
  nor the tombstones visible to ``read_committed`` readers, once the dangling transaction is
  aborted, by the node's restart (its ``transactional.id`` fences the dead producer) or by the
  transaction coordinator's timeout; nothing of it is applied by any node.

Every test uses topics of its own. Waits are on conditions with generous deadlines; no sleep
is an assertion and no timing is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from _fault_support import KILLED_EXIT_CODE
from _scenario_support import (
    DEADLINE_S,
    assign,
    compacted_configs,
    describe_record,
    legacy_replay,
    open_node,
    read_records,
    wait_until,
)
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from services._common import Service
from services.rlmm_faults import Nodes
from services.rlmm_suites import Node, RlmmFaultSuite, Tips
from tierlog_rlmm_compacted import CompactedRemoteLogMetadataManager
from tierlog_rlmm_compacted.keys import MetadataKey

from tierlog.conformance.rlmm_suite import DELETE_FINISHED, DELETE_STARTED, new_partition
from tierlog.metadata import serde
from tierlog.spi import (
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    TopicIdPartition,
)

Opened = list[RemoteLogMetadataManager]
TESTS_DIR = Path(__file__).resolve().parent
SCRIPTS_DIR = TESTS_DIR.parents[2] / "scripts"


def private_topic() -> str:
    return f"tierlog-compacted-fault-{uuid.uuid4().hex}"


def compacted(rlmm: RemoteLogMetadataManager) -> CompactedRemoteLogMetadataManager:
    assert isinstance(rlmm, CompactedRemoteLogMetadataManager)
    return rlmm


# 1-4. The shared fault tests ------------------------------------------------------------------
class TestFaults(RlmmFaultSuite):
    """The shared fault tests on the compacted RLMM (``rlmm_plugin`` in ``conftest.py``): its
    history written at level 1 leaves tombstones, and two nodes that agree hold the same keys."""

    def check_history(self, rlmm: Node, nodes: Nodes, tips: Mapping[str, TopicIdPartition]) -> None:
        """A projection topic the RLMM created is compacted (level 1): the deletions of the
        history tombstoned the keys of both partitions that had segments deleted."""
        assert compacted(rlmm).level == 1
        tombstones = [r for r in read_records(nodes.servers, nodes.topic) if r.value is None]
        tombstoned = {MetadataKey.parse(r.key).topic_id for r in tombstones if r.key is not None}
        assert {tips["deleting"].topic_id, tips["gone"].topic_id} <= tombstoned

    def check_converged(self, leader: Node, follower: Node, nodes: Nodes, tips: Tips) -> None:
        """The deletions at level 1 wrote tombstones (three segments' and the partition
        deleted for good's), and the two nodes' projection states (keys and what they
        describe) are the same."""
        tombstones = [r for r in read_records(nodes.servers, nodes.topic) if r.value is None]
        assert len(tombstones) >= 3 * 2 + 1, "deletions at level 1 write tombstones"
        assert {tip: compacted(leader).applier.keys(tip) for tip in tips} == {
            tip: compacted(follower).applier.keys(tip) for tip in tips
        }, "the two nodes' projection states (keys and what they describe) differ"


# 5. A node killed in the middle of a transaction ----------------------------------------------
def _end_offset(servers: str, topic: str, isolation: str) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"tierlog-offsets-{uuid.uuid4().hex}",
            "isolation.level": isolation,
        }
    )
    try:
        high: int = consumer.get_watermark_offsets(
            KafkaTopicPartition(topic, 0), timeout=60, cached=False
        )[1]
        return high
    finally:
        consumer.close()


def stable_offset(servers: str, topic: str) -> int:
    """The last stable offset of ``topic``-0: where ``read_committed`` readers stop."""
    return _end_offset(servers, topic, "read_committed")


def high_watermark(servers: str, topic: str) -> int:
    return _end_offset(servers, topic, "read_uncommitted")


def run_killed_writer(configs: dict[str, str], tip: TopicIdPartition) -> list[tuple[str, bytes]]:
    """Run ``_fault_support.killed_writer_main`` in a child process; the events it wrote (its
    ``EVENT``/``ARMED`` lines: label, Kafka's bytes of the event). It must end killed."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(SCRIPTS_DIR)]))
    result = subprocess.run(
        [
            sys.executable,
            str(TESTS_DIR / "_fault_support.py"),
            json.dumps(configs),
            str(tip.topic_id),
            tip.topic,
            str(tip.partition),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert result.returncode == KILLED_EXIT_CODE, (
        f"the child exited with {result.returncode}\n{result.stdout[-3000:]}\n"
        f"{result.stderr[-3000:]}"
    )
    lines = [ln.split() for ln in result.stdout.splitlines() if ln.startswith(("EVENT", "ARMED"))]
    return [(label, bytes.fromhex(data)) for label, data in lines]


@pytest.mark.parametrize("abort_by", ["restart", "coordinator-timeout"])
def test_a_write_killed_before_its_commit_is_seen_by_no_reader(
    kafka_broker: Service, delete_topics: list[str], opened: Opened, abort_by: str
) -> None:
    """A child process runs a compacted node which commits five writes, then produces the
    records of a sixth (DELETE_SEGMENT_FINISHED: its projection value, its audit copy, two
    tombstones) and is killed before committing them. The records are in the log (a
    ``read_uncommitted`` reader sees them) but in no ``read_committed`` reading: not while the
    transaction dangles (the last stable offset stops before it), not after it is aborted,
    either by the node restarted with the same node id (``init_transactions`` fences the dead
    producer and aborts its transaction) or, with nobody restarting, by the transaction
    coordinator once ``transaction.timeout.ms`` (10 s here) passed. No node applies it (the
    restarted one, a follower, a legacy replay of the audit topic: the segment stays in
    DELETE_SEGMENT_STARTED); the restarted node then writes the deletion again, committed."""
    topic = private_topic()
    audit = f"{topic}-audit"
    delete_topics.extend((topic, audit))
    servers = kafka_broker.url
    timeout = {"remote.log.metadata.producer.transaction.timeout.ms": "10000"}

    def configs(node_id: int) -> dict[str, str]:
        return compacted_configs(servers, topic, audit, node_id=node_id, extra=timeout)

    tip = new_partition("killed", 0)
    written = run_killed_writer(configs(1), tip)
    assert [label for label, _ in written] == ["EVENT"] * 5 + ["ARMED"]
    events = [serde.deserialize(data) for _, data in written]
    committed, killed = events[:5], events[5]
    assert isinstance(killed, RemoteLogSegmentMetadataUpdate)
    assert killed.state is DELETE_FINISHED
    first = committed[0]
    assert isinstance(first, RemoteLogSegmentMetadata)

    def projection_events(isolation: str) -> list[str]:
        records = read_records(servers, topic, isolation=isolation)
        return [describe_record(r) for r in records]

    def audit_events(isolation: str) -> list[object]:
        return [
            serde.deserialize(r.value)
            for r in read_records(servers, audit, isolation=isolation)
            if r.value is not None
        ]

    # The dead node's records are in the log, inside a transaction nobody committed.
    uncommitted = projection_events("read_uncommitted")
    assert len(uncommitted) == 5 + 3, uncommitted  # the value and two tombstones
    assert sum(text.endswith("=> null") for text in uncommitted) == 2
    assert audit_events("read_uncommitted") == events
    assert audit_events("read_committed") == committed
    assert projection_events("read_committed") == uncommitted[:5]

    # A node assigned while the transaction dangles is ready (it reads up to the last stable
    # offset) and has not applied it.
    follower = open_node(configs(3), opened)
    assign(follower, [tip], follower=True)
    if abort_by == "coordinator-timeout":
        wait_until(
            lambda: stable_offset(servers, topic) == high_watermark(servers, topic),
            "the coordinator aborting the dead node's transaction",
        )
    restarted = open_node(configs(1), opened)
    wait_until(
        lambda: stable_offset(servers, topic) == high_watermark(servers, topic),
        "the dead node's transaction to end",
    )
    assign(restarted, [tip])

    # Aborted: in no read_committed reading, applied by nobody.
    assert audit_events("read_committed") == committed
    assert projection_events("read_committed") == uncommitted[:5]
    legacy = legacy_replay(servers, audit, [tip], opened, node_id=4)
    for node in (restarted, follower, legacy):
        states = {m.remote_log_segment_id.id: m.state for m in node.list_remote_log_segments(tip)}
        assert states[first.remote_log_segment_id.id] is DELETE_STARTED, node
        assert len(states) == 2

    # The restarted node writes the deletion again; this time it commits.
    done = replace(killed, event_timestamp_ms=killed.event_timestamp_ms + 1, broker_leader_epoch=1)
    restarted.update_remote_log_segment_metadata(done).result(timeout=DEADLINE_S)
    assert audit_events("read_committed") == [*committed, done]
    after = projection_events("read_committed")
    assert len(after) == 5 + 3 and sum(text.endswith("=> null") for text in after) == 2
    wait_until(
        lambda: len(list(follower.list_remote_log_segments(tip))) == 1,
        "the follower applying the committed deletion",
    )
    assert len(list(restarted.list_remote_log_segments(tip))) == 1
