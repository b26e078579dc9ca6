"""Building blocks of the fault tests (``test_faults.py``), most of them the topic RLMM's.

The topic RLMM's fault support (``plugins/rlmm_topic/tests/_fault_support.py``: the write
stream on threads that records every call's outcome, the complete view of an RLMM's cache and
its diff, the checks of a topic against the calls) works unchanged on the compacted RLMM, a
subclass of the topic RLMM: it is loaded from that file here, under another module name, and
re-exported, not copied. What differs is added: the compacted RLMM's configuration, reading the
projection and audit topics (``read_committed``, keys included: ``_scenario_support``), the
consistency of the two topics, and the cluster operations of the leader-move tests.

Nothing here sleeps as an assertion: every wait is on a condition with a deadline.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

from _scenario_support import Rec, read_records
from confluent_kafka import ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from services.kafka import KafkaCluster, run_kafka_class
from tierlog_rlmm_compacted import CompactedRemoteLogMetadataManager, txn_producer
from tierlog_rlmm_compacted.values import decode_value

from tierlog.conformance.rlmm_suite import (
    DELETE_FINISHED,
    DELETE_STARTED,
    FINISHED,
    segment,
    update_of,
)
from tierlog.metadata import serde
from tierlog.spi import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    TopicIdPartition,
    Uuid,
)

_TOPIC_SUPPORT_PATH = (
    Path(__file__).resolve().parents[2] / "rlmm_topic" / "tests" / "_fault_support.py"
)


def _load_topic_support() -> ModuleType:
    """``plugins/rlmm_topic/tests/_fault_support.py`` as ``_rlmm_topic_fault_support`` (its
    own name would clash with this module's)."""
    name = "_rlmm_topic_fault_support"
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(name, _TOPIC_SUPPORT_PATH)
    assert spec is not None and spec.loader is not None, _TOPIC_SUPPORT_PATH
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_topic = _load_topic_support()
DEADLINE_S: float = _topic.DEADLINE_S
RESTART_DEADLINE_S: float = _topic.RESTART_DEADLINE_S
Call: Any = _topic.Call
CallHung: Any = _topic.CallHung
Writer: Any = _topic.Writer
cache_view: Callable[..., dict[tuple[Any, ...], Any]] = _topic.cache_view
diff_views: Callable[..., list[str]] = _topic.diff_views
check_topic_against_calls: Callable[..., None] = _topic.check_topic_against_calls
expected_segments: Callable[..., Any] = _topic.expected_segments
listed_by_id: Callable[..., Any] = _topic.listed_by_id

__all__ = [
    "DEADLINE_S",
    "RESTART_DEADLINE_S",
    "Call",
    "CallHung",
    "Writer",
    "cache_view",
    "check_topic_against_calls",
    "check_topics_agree",
    "diff_views",
    "elect_preferred",
    "expected_segments",
    "listed_by_id",
    "partition_state",
    "reassign",
]


# The two topics ------------------------------------------------------------------------------
def check_topics_agree(servers: str, topic: str, audit_topic: str) -> tuple[list[Rec], list[Rec]]:
    """The projection and audit topics, read ``read_committed``, describe the same events in
    the same order on every partition (each write puts both records in one transaction; the
    writers' histories here have no deletion, so no tombstone either): a write is in both or
    in neither. Returns (projection, audit) records."""
    projection = read_records(servers, topic)
    audit = read_records(servers, audit_topic)
    assert all(r.value is not None and r.key is not None for r in projection), (
        "a projection record without key or value (no deletion was written)"
    )
    assert all(r.key is None for r in audit), "an audit record with a key"

    def events(records: Sequence[Rec], decode: Callable[[bytes], Any]) -> dict[int, list[Any]]:
        out: dict[int, list[Any]] = {}
        for r in records:
            assert r.value is not None
            out.setdefault(r.partition, []).append(decode(r.value))
        return out

    mine = events(projection, lambda v: decode_value(v).event)
    theirs = events(audit, serde.deserialize)
    assert mine.keys() == theirs.keys(), (sorted(mine), sorted(theirs))
    for partition, listed in mine.items():
        assert listed == theirs[partition], (
            f"metadata partition {partition}: the projection's {len(listed)} events and the "
            f"audit's {len(theirs[partition])} differ"
        )
        for event in listed:
            assert isinstance(event, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate)
    return projection, audit


# The leader of a topic's partition 0, moved in the three-node cluster -------------------------
def partition_state(admin: AdminClient, topic: str) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, isr) of ``topic`` partition 0, as the cluster reports them."""
    described = admin.list_topics(topic=topic, timeout=30).topics[topic].partitions[0]
    return described.leader, list(described.replicas), list(described.isrs)


def elect_preferred(
    admin: AdminClient, topic: str, expected_leader: int, wait: Callable[..., None]
) -> None:
    """Run a preferred leader election of ``topic``-0 until ``expected_leader`` leads it."""

    def elected() -> bool:
        if partition_state(admin, topic)[0] == expected_leader:
            return True
        result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)])
        try:
            result.result(timeout=60)
        except Exception:  # not yet possible (the replica catching up): try again
            return False
        return partition_state(admin, topic)[0] == expected_leader

    wait(elected, f"node {expected_leader} leading {topic}-0", RESTART_DEADLINE_S, interval=1.0)


def reassign(
    cluster: KafkaCluster,
    directory: Path,
    moves: dict[str, list[int]],
    wait: Callable[..., None],
) -> None:
    """Reassign partition 0 of each topic of ``moves`` to its replicas (same set, new order)
    with Kafka's ReassignPartitionsCommand; wait until Kafka reports it complete."""
    plan = directory / f"reassign-{len(list(directory.glob('reassign-*')))}.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": topic, "partition": 0, "replicas": replicas}
                    for topic, replicas in moves.items()
                ],
            }
        )
    )
    tool = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
    common = [
        "--bootstrap-server",
        cluster.bootstrap_servers,
        "--reassignment-json-file",
        str(plan),
    ]
    run_kafka_class(tool, [*common, "--execute"])

    def completed() -> bool:
        result = run_kafka_class(tool, [*common, "--verify"], check=False)
        return result.returncode == 0 and "is still in progress" not in result.stdout

    wait(completed, f"the reassignment {moves}", RESTART_DEADLINE_S, interval=1.0)


# A node killed in the middle of a transaction (run in a child process) ------------------------
KILLED_EXIT_CODE = 17
"""The exit status of the child once it produced the armed write's records."""


def killed_writer_main(argv: Sequence[str]) -> None:
    """The child process of the atomicity test: ``argv`` = configs (JSON), topic id, topic
    name, partition. It runs a compacted RLMM node that writes, committed, the add and
    COPY_SEGMENT_FINISHED of two segments and DELETE_SEGMENT_STARTED of the first, printing
    each event (``EVENT <hex of Kafka's bytes>``); then it arms its producer and writes
    DELETE_SEGMENT_FINISHED of the first (``ARMED <hex>``): the producer sends the write's
    records (projection value, audit copy, tombstones) inside the transaction, waits until the
    broker has them, and the process ends with ``os._exit`` instead of committing: the
    transaction stays open on the broker, as when a node dies between produce and commit."""
    armed = threading.Event()

    class DyingProducer(Producer):
        def commit_transaction(self, *args: Any) -> None:
            if armed.is_set():
                assert self.flush(60) == 0, "the armed write's records were not delivered"
                sys.stdout.flush()
                os._exit(KILLED_EXIT_CODE)
            super().commit_transaction(*args)

    real_new_client = txn_producer.new_client  # type: ignore[attr-defined]

    def new_client(factory: Any, configs: Any, role: str) -> Any:
        return real_new_client(DyingProducer if factory is Producer else factory, configs, role)

    txn_producer.new_client = new_client  # type: ignore[attr-defined]

    configs = json.loads(argv[0])
    tip = TopicIdPartition(Uuid.from_string(argv[1]), argv[2], int(argv[3]))
    rlmm = CompactedRemoteLogMetadataManager()
    rlmm.configure(configs)
    rlmm.on_partition_leadership_changes({tip}, set())
    deadline = time.monotonic() + 120
    while not rlmm.is_ready(tip):
        assert time.monotonic() < deadline, "the child's node never became ready"
        time.sleep(0.05)

    def write(event: Any, label: str = "EVENT") -> None:
        print(label, serde.serialize(event).hex(), flush=True)
        if isinstance(event, RemoteLogSegmentMetadata):
            future = rlmm.add_remote_log_segment_metadata(event)
        else:
            future = rlmm.update_remote_log_segment_metadata(event)
        future.result(timeout=120)

    first = replace(segment(tip, 0, 99, {0: 0}, broker_id=5), broker_leader_epoch=0)
    second = replace(segment(tip, 100, 199, {0: 100}, broker_id=5), broker_leader_epoch=0)
    for seg in (first, second):
        write(seg)
        write(replace(update_of(seg, FINISHED, broker_id=5), broker_leader_epoch=0))
    write(replace(update_of(first, DELETE_STARTED, broker_id=5), broker_leader_epoch=1))
    armed.set()
    write(replace(update_of(first, DELETE_FINISHED, broker_id=5), broker_leader_epoch=1), "ARMED")
    raise AssertionError("the armed write completed: the transaction was committed")


if __name__ == "__main__":
    killed_writer_main(sys.argv[1:])
