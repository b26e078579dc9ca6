"""What the compacted RLMM's fault tests (``test_faults.py``) add to those both RLMM plugins
share (``services.rlmm_faults``, ``services.rlmm_suites``): the consistency of its two topics
(``check_topics_agree``, and ``audit_history``, the legacy history the shared checks read),
and the child process of the atomicity test (a node killed between produce and commit).

``cache_view`` and ``diff_views`` are re-exported for ``test_scenarios.py``. Nothing here sleeps
as an assertion: every wait is on a condition with a deadline.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from _scenario_support import Rec, read_records
from confluent_kafka import Producer
from services.rlmm_faults import cache_view, diff_views
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

__all__ = [
    "AUDIT_SUFFIX",
    "KILLED_EXIT_CODE",
    "audit_history",
    "cache_view",
    "check_topics_agree",
    "diff_views",
    "killed_writer_main",
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


AUDIT_SUFFIX = "-audit"
"""The tests' audit topic of a projection topic is named after it, with this suffix."""


def audit_history(servers: str, topic: str) -> list[Rec]:
    """The legacy history of the projection topic ``topic``: its audit topic, once
    ``check_topics_agree`` passed."""
    return check_topics_agree(servers, topic, topic + AUDIT_SUFFIX)[1]


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
