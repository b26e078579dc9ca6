"""Test support shared by the two Kafka-topic RLMM plugins' suites: ``plugins/rlmm_topic``
(KIP-405's append-only topic) and ``plugins/rlmm_compacted`` (KAFKA-20033's keyed projection,
whose manager subclasses the topic RLMM's). Both are driven the same way through broker
restarts, leader moves and node restarts, and checked from outside the same way: one copy of
that machinery, here, for both.

- ``PluginUnderTest``: what the shared tests (``services.rlmm_suites``) need to know of a
  plugin: its registered name and manager class, the topics it writes for a metadata topic
  name, and how to read back the history it wrote in Kafka's legacy format.
- Nodes: ``Nodes`` (nodes of the plugin on a metadata topic of the test's own),
  ``node_configs``, ``open_node``, ``assign``, ``wait_gone``, ``check_gives_up``;
  ``wait_until`` and ``done`` wait on a condition or a future with a deadline (nothing here
  sleeps as an assertion).
- Topics read independently, with bare confluent-kafka consumers: ``read_records``,
  ``read_partition``.
- The write stream: ``Writer`` (threads writing segment lifecycles and recording every call's
  outcome), ``check_topic_against_calls``, ``expected_segments``, ``check_stream``.
- A whole cache's answers, to compare two nodes: ``cache_view``, ``diff_views``,
  ``assert_same_view``, ``offsets_of``.
- Histories: ``History`` (events published one at a time with the publishing leader's epoch),
  ``write_history`` (the restart tests' history), ``padding_tips``/``write_padding``.
- The three-node cluster: ``partition_state``, ``wait_state``, ``elect_preferred``,
  ``reassign``.

The plugins' tests import it as ``services.rlmm_faults``: their ``conftest.py`` puts
``<repo>/scripts`` on ``sys.path``, as for ``services.kafka_fixtures``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Final, TypedDict, Unpack

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from services._common import free_ports
from services.kafka import run_kafka_class
from tierlog.conformance import RemoteLogMetadataManagerCapabilities
from tierlog.conformance.rlmm_suite import (
    DELETE_FINISHED,
    DELETE_STARTED,
    FINISHED,
    new_partition,
    segment,
    update_of,
)
from tierlog.metadata import deserialize, metadata_partition, serialize
from tierlog.spi import (
    CustomMetadata,
    RemoteLogMetadata,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    TopicIdPartition,
    Uuid,
)

__all__ = [
    "ANY_TIME",
    "CALL_DEADLINE_S",
    "DEADLINE_S",
    "HISTORY_EPOCHS",
    "HISTORY_PARTITIONS",
    "RESTART_DEADLINE_S",
    "TOPIC_NAME_KEY",
    "Call",
    "CallHung",
    "History",
    "Layout",
    "Nodes",
    "PluginUnderTest",
    "Rec",
    "Writer",
    "assert_same_view",
    "assert_writes_applied",
    "assign",
    "cache_view",
    "check_gives_up",
    "check_stream",
    "check_topic_against_calls",
    "diff_views",
    "done",
    "elect_preferred",
    "expected_segments",
    "history_tips",
    "listed_by_id",
    "node_configs",
    "offsets_of",
    "open_node",
    "padding_tips",
    "partition_state",
    "private_topic",
    "read_legacy_topic",
    "read_partition",
    "read_records",
    "reassign",
    "sorted_segments",
    "wait_gone",
    "wait_state",
    "wait_until",
    "write_history",
    "write_padding",
]

DEADLINE_S: Final = 180.0
"""Waits for a condition on a healthy broker or cluster (readiness, a write, convergence)."""
RESTART_DEADLINE_S: Final = 420.0
"""Waits that span a broker restart on a loaded machine."""
CALL_DEADLINE_S: Final = 600.0
"""How long a single mutating call may take before it counts as hung: longer than librdkafka's
default delivery timeout (300 s) plus ``remote.log.metadata.consume.wait.ms`` (120 s), so a
call that fails the way it should is never reported as hung."""
ANY_TIME: Final = float("-inf")
"""``Writer.wait_acked(no_failure_after=ANY_TIME)``: no call may fail at all."""
TOPIC_NAME_KEY: Final = "remote.log.metadata.topic.name"

Opened = list[RemoteLogMetadataManager]


# Waiting -----------------------------------------------------------------------------------------
def wait_until(
    condition: Callable[[], bool],
    what: str,
    timeout: float = DEADLINE_S,
    *,
    interval: float = 0.05,
    details: Callable[[], str] | None = None,
) -> None:
    """Wait for ``condition()``; fail the test naming ``what`` after ``timeout`` seconds (with
    ``details()`` appended, when given)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            extra = f"\n{details()}" if details is not None else ""
            pytest.fail(f"{what} did not happen within {timeout:.0f} s{extra}", pytrace=False)
        time.sleep(interval)


def done(future: Future[None], timeout: float = DEADLINE_S) -> None:
    """Wait for a mutating call's future (it raises what the call failed with)."""
    future.result(timeout=timeout)


# Topics, read independently ----------------------------------------------------------------------
@dataclass(frozen=True)
class Rec:
    """One record of a topic as an independent consumer saw it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None

    @property
    def key_text(self) -> str | None:
        return None if self.key is None else self.key.decode("ascii", "replace")


def read_records(
    servers: str,
    topic: str,
    *,
    isolation: str = "read_committed",
    partitions: Iterable[int] | None = None,
    timeout: float = DEADLINE_S,
) -> list[Rec]:
    """Every record of ``topic`` (of ``partitions``, or of all its partitions) up to its end
    when the read starts (for ``read_committed``: its last stable offset, which an open
    transaction holds back), in (partition, offset) order, read by a bare confluent-kafka
    consumer of its own."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"tierlog-rlmm-test-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        if partitions is None:
            partitions = consumer.list_topics(topic, timeout=60).topics[topic].partitions
        wanted = sorted(partitions)
        assert wanted, f"{topic} has no partitions"
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=60, cached=False)[1]
            for p in wanted
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in wanted])
        records: list[Rec] = []
        finished = {p for p in wanted if ends[p] == 0}
        deadline = time.monotonic() + timeout
        while len(finished) < len(wanted):
            if time.monotonic() > deadline:
                pytest.fail(
                    f"could not read {topic} ({isolation}) to its end offsets {ends} within "
                    f"{timeout:.0f} s (done: {sorted(finished)})",
                    pytrace=False,
                )
            message = consumer.poll(0.5)
            if message is None:
                continue
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    if offset >= ends[partition]:
                        finished.add(partition)
                    continue
                assert error.retriable(), f"reading {topic}: {error}"
                continue
            if offset < ends[partition]:
                records.append(Rec(partition, offset, message.key(), message.value()))
            if offset + 1 >= ends[partition]:
                finished.add(partition)
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def read_partition(
    servers: str, topic: str, partition: int, *, isolation: str = "read_committed"
) -> list[tuple[int, bytes | None, bytes | None]]:
    """``read_records`` of one partition, as ``(offset, key, value)``."""
    return [
        (r.offset, r.key, r.value)
        for r in read_records(servers, topic, isolation=isolation, partitions=[partition])
    ]


def read_legacy_topic(servers: str, topic: str) -> list[Rec]:
    """The topic RLMM's metadata topic, read whole: records in Kafka's format, null keys."""
    records = read_records(servers, topic, isolation="read_uncommitted")
    keyed = [r for r in records if r.key is not None or r.value is None]
    assert not keyed, f"records of {topic} with a key or without a value: {keyed[:10]}"
    return records


# Nodes -------------------------------------------------------------------------------------------
class Layout(TypedDict, total=False):
    """How a test's metadata topics are laid out; ``node_configs``'s defaults: 3 partitions,
    one replica, ``min.insync.replicas`` 1."""

    partitions: int
    replication_factor: int
    min_isr: int


def node_configs(
    servers: str,
    topic: str,
    *,
    node_id: int,
    extra: Mapping[str, str] | None = None,
    **layout: Unpack[Layout],
) -> dict[str, str]:
    """The topic RLMM's ``rlmm.config.`` keys (which the compacted RLMM reads too) for a
    metadata topic of the test's own, ``extra`` on top."""
    return {
        "remote.log.metadata.common.client.bootstrap.servers": servers,
        TOPIC_NAME_KEY: topic,
        "remote.log.metadata.topic.num.partitions": str(layout.get("partitions", 3)),
        "remote.log.metadata.topic.replication.factor": str(layout.get("replication_factor", 1)),
        "remote.log.metadata.topic.min.isr": str(layout.get("min_isr", 1)),
        "remote.log.metadata.initialization.retry.max.timeout.ms": "120000",
        "node.id": str(node_id),
        **(extra or {}),
    }


def open_node(
    configs: Mapping[str, str], opened: Opened, kind: type[RemoteLogMetadataManager]
) -> RemoteLogMetadataManager:
    """A configured ``kind`` RLMM, appended to ``opened`` (closed by the test's fixture)."""
    rlmm = kind()
    opened.append(rlmm)
    rlmm.configure(dict(configs))
    return rlmm


def check_gives_up(start: Callable[[str], object], error: type[Exception], *says: str) -> None:
    """``start(servers)``, pointed at a port nothing listens on with a 2 s limit, fails with
    ``error`` well within 30 s, and the error names the servers, the last error seen and each
    of ``says``."""
    (port,) = free_ports(1)
    servers = f"127.0.0.1:{port}"
    started = time.monotonic()
    with pytest.raises(error) as caught:
        start(servers)
    elapsed = time.monotonic() - started
    message = str(caught.value)
    for part in (servers, "last error", *says):
        assert part in message, f"{part!r} is not in the error: {message}"
    assert elapsed < 30, f"initialization took {elapsed:.1f}s with a 2 s limit"


def private_topic(plugin: PluginUnderTest) -> str:
    """A fresh metadata topic name for one test of ``plugin``."""
    return f"tierlog-rlmm-{plugin.name}-test-{uuid.uuid4().hex}"


# The plugin under test ---------------------------------------------------------------------------
@dataclass(frozen=True)
class PluginUnderTest:
    """A Kafka-topic RLMM plugin as the shared tests see it. Each plugin's ``conftest.py``
    returns its own from the ``rlmm_plugin`` fixture."""

    name: str
    """The name it is registered under (``tierlog_register_metadata_managers``)."""
    manager: type[RemoteLogMetadataManager]
    owner: str
    """How its messages name it: ``topic RLMM``, ``compacted RLMM``."""
    companion_topics: Mapping[str, str] = field(default_factory=dict)
    """Topics it writes besides the metadata topic: configuration key -> suffix appended to
    the metadata topic's name (the compacted RLMM's audit topic)."""
    legacy_records: Callable[[str, str], list[Rec]] = read_legacy_topic
    """``(servers, metadata topic)``: the history it wrote, in Kafka's legacy format, read
    once its own checks of its topics passed (for the compacted RLMM: the audit topic, once
    the projection agrees with it)."""

    @property
    def topic_keys(self) -> tuple[str, ...]:
        """The configuration keys naming its topics."""
        return (TOPIC_NAME_KEY, *self.companion_topics)

    def topics(self, topic: str) -> list[str]:
        """Every topic it writes for the metadata topic ``topic``."""
        return [topic, *(topic + suffix for suffix in self.companion_topics.values())]

    def configs(
        self,
        servers: str,
        topic: str,
        *,
        node_id: int,
        extra: Mapping[str, str] | None = None,
        **layout: Unpack[Layout],
    ) -> dict[str, str]:
        """A node's ``rlmm.config.`` keys for the metadata topic ``topic`` (and its
        companions)."""
        own = {key: topic + suffix for key, suffix in self.companion_topics.items()}
        return node_configs(
            servers, topic, node_id=node_id, extra={**own, **(extra or {})}, **layout
        )

    @property
    def keeps_superseded_uploads(self) -> bool:
        """Its conformance capability of that name: whether an upload in progress stays listed
        when another add of the same end offset and leader epoch comes (Kafka's cache), or is
        superseded by it (the compacted RLMM's keys)."""
        declared: Any = getattr(self.manager, "conformance_capabilities", None)
        capabilities = RemoteLogMetadataManagerCapabilities() if declared is None else declared()
        return capabilities.keeps_superseded_uploads is True


@dataclass(frozen=True)
class Nodes:
    """Nodes of the plugin under test on one cluster, all on the same metadata topic of the
    test's own (and its companions), laid out as ``layout`` says; every node opened is closed
    by the test's ``opened`` fixture."""

    plugin: PluginUnderTest
    servers: str
    topic: str
    opened: Opened
    extra: Mapping[str, str] = field(default_factory=dict)
    layout: Layout = field(default_factory=Layout)

    def configs(self, node_id: int) -> dict[str, str]:
        return self.plugin.configs(
            self.servers, self.topic, node_id=node_id, extra=self.extra, **self.layout
        )

    def open(self, node_id: int) -> RemoteLogMetadataManager:
        """A configured node (``node.id`` ``node_id``)."""
        return open_node(self.configs(node_id), self.opened, self.plugin.manager)

    def legacy_records(self) -> list[Rec]:
        """The legacy history of the topic (``PluginUnderTest.legacy_records``)."""
        return self.plugin.legacy_records(self.servers, self.topic)


# A node's partitions -----------------------------------------------------------------------------
def assign(
    rlmm: RemoteLogMetadataManager,
    tips: Iterable[TopicIdPartition],
    *,
    follower: bool = False,
    wait: bool = True,
) -> None:
    """Assign ``tips`` (as leader unless ``follower``) and wait until each is ready."""
    tips = set(tips)
    if follower:
        rlmm.on_partition_leadership_changes(set(), tips)
    else:
        rlmm.on_partition_leadership_changes(tips, set())
    if wait:
        wait_until(
            lambda: all(rlmm.is_ready(tip) for tip in tips), f"readiness of {tips}", interval=0.01
        )


def wait_gone(rlmm: RemoteLogMetadataManager, tip: TopicIdPartition) -> None:
    """Wait until the node has replayed the partition's finished deletion (reads: not found)."""

    def not_found() -> bool:
        try:
            rlmm.list_remote_log_segments(tip)
        except RemoteResourceNotFoundException:
            return True
        except RemoteStorageException:
            return False
        return False

    wait_until(not_found, f"the replay of {tip}'s finished deletion")


def listed_by_id(
    rlmm: RemoteLogMetadataManager, tip: TopicIdPartition
) -> dict[Uuid, RemoteLogSegmentMetadata]:
    return {m.remote_log_segment_id.id: m for m in rlmm.list_remote_log_segments(tip)}


# The write stream --------------------------------------------------------------------------------
class CallHung(Exception):
    """A mutating call whose future did not complete within ``CALL_DEADLINE_S``."""


@dataclass(eq=False)
class Call:
    """One mutating call of the writer and how it ended."""

    kind: str  # "add" or "update"
    tip: TopicIdPartition
    event: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate
    issued_at: float
    payload: bytes
    finished_at: float | None = None
    error: BaseException | None = None

    @property
    def acked(self) -> bool:
        return self.finished_at is not None and self.error is None

    @property
    def segment_id(self) -> Uuid:
        return self.event.remote_log_segment_id.id

    def __repr__(self) -> str:
        state = self.event.state.name
        outcome = (
            "pending" if self.finished_at is None else repr(self.error) if self.error else "ok"
        )
        return f"<{self.kind} {state} of {self.segment_id} ({self.tip.topic}): {outcome}>"


@dataclass(eq=False)
class Writer:
    """Writes a stream of segment lifecycles on one thread per user partition.

    Each thread repeats: ``batch`` adds (COPY_SEGMENT_STARTED, consecutive offsets in
    ``epoch``), all in flight at once; then, for each add that was acknowledged, its update to
    COPY_SEGMENT_FINISHED, all in flight at once. A failed add gets no update (as the RLM's
    copy task, which starts over with a new segment id). Every call is recorded in ``calls``
    with its outcome; a call that neither succeeds nor fails within ``call_deadline_s`` is
    recorded as ``CallHung``.
    """

    rlmm: RemoteLogMetadataManager
    tips: Sequence[TopicIdPartition]
    batch: int = 5
    epoch: int = 0
    broker_id: int = 1
    call_deadline_s: float = CALL_DEADLINE_S
    calls: list[Call] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Writer:
        for tip in self.tips:
            thread = threading.Thread(
                target=self._run, args=(tip,), name=f"writer-{tip.topic}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        return self

    def stop(self, timeout: float = CALL_DEADLINE_S + 60) -> None:
        """Stop issuing calls and wait for those in flight."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        alive = [t.name for t in self._threads if t.is_alive()]
        assert not alive, f"writer threads did not finish: {alive}"

    def snapshot(self) -> list[Call]:
        with self._lock:
            return list(self.calls)

    def acked(self, *, issued_after: float | None = None) -> list[Call]:
        return [
            c
            for c in self.snapshot()
            if c.acked and (issued_after is None or c.issued_at >= issued_after)
        ]

    def failed(self) -> list[Call]:
        return [c for c in self.snapshot() if c.finished_at is not None and c.error is not None]

    def wait_acked(
        self,
        count: int,
        what: str,
        *,
        issued_after: float | None = None,
        timeout: float,
        no_failure_after: float | None = None,
        excused: Callable[[Call], bool] = lambda call: False,
    ) -> None:
        """Wait until ``count`` calls issued after ``issued_after`` were acknowledged on every
        partition; with ``no_failure_after``, fail at once if a call issued then or later
        failed (rather than wait for the deadline), unless ``excused(call)``."""

        def enough() -> bool:
            if no_failure_after is not None:
                failed = [
                    c for c in self.failed() if c.issued_at >= no_failure_after and not excused(c)
                ]
                if failed:
                    pytest.fail(
                        f"while waiting for {what}: {len(failed)} calls failed: {failed[:5]}",
                        pytrace=False,
                    )
            acked = Counter(c.tip for c in self.acked(issued_after=issued_after))
            if all(acked[tip] >= count for tip in self.tips):
                return True
            assert any(t.is_alive() for t in self._threads), "every writer thread stopped"
            return False

        wait_until(enough, what, timeout, interval=0.1, details=self.summary)

    def wait_acked_since(self, since: float, what: str, count: int = 10) -> None:
        """``count`` calls issued at ``since`` or later acknowledged on every partition, and
        no call failed at all."""
        self.wait_acked(
            count,
            what,
            issued_after=since,
            timeout=RESTART_DEADLINE_S,
            no_failure_after=ANY_TIME,
        )

    def wait_failed(self, what: str, *, timeout: float) -> None:
        wait_until(lambda: bool(self.failed()), what, timeout, interval=0.1, details=self.summary)

    def assert_no_failed_call(self) -> None:
        failed = self.failed()
        assert not failed, (
            f"{len(failed)} calls failed while the cluster kept a quorum of in-sync replicas: "
            f"{failed[:10]}"
        )

    def summary(self) -> str:
        calls = self.snapshot()
        acked = sum(c.acked for c in calls)
        failed = [c for c in calls if c.finished_at is not None and c.error is not None]
        pending = sum(c.finished_at is None for c in calls)
        return (
            f"writer: {len(calls)} calls, {acked} acknowledged, {len(failed)} failed "
            f"({failed[:5]}), {pending} pending"
        )

    # The thread ----------------------------------------------------------------------------------
    def _issue(
        self,
        kind: str,
        tip: TopicIdPartition,
        event: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate,
    ) -> tuple[Call, Future[None] | None]:
        call = Call(kind, tip, event, time.monotonic(), serialize(event))
        with self._lock:
            self.calls.append(call)
        try:
            if isinstance(event, RemoteLogSegmentMetadata):
                future = self.rlmm.add_remote_log_segment_metadata(event)
            else:
                future = self.rlmm.update_remote_log_segment_metadata(event)
        except Exception as exc:  # refused synchronously: recorded, judged by the test
            call.error = exc
            call.finished_at = time.monotonic()
            return call, None
        return call, future

    def _settle(self, issued: list[tuple[Call, Future[None] | None]]) -> None:
        deadline = time.monotonic() + self.call_deadline_s
        for call, future in issued:
            if future is None:
                continue
            # wait() then exception(): a future that failed with a TimeoutError of its own
            # (ConsumeTimeoutError is one) is not a call that hung.
            wait([future], timeout=max(0.0, deadline - time.monotonic()))
            if not future.done():
                call.error = CallHung(
                    f"{call!r} did not complete within {self.call_deadline_s:.0f} s"
                )
            else:
                call.error = future.exception()
            call.finished_at = time.monotonic()

    def _run(self, tip: TopicIdPartition) -> None:
        offset = 0
        while not self._stop.is_set():
            segments = []
            for _ in range(self.batch):
                segments.append(
                    segment(tip, offset, offset + 9, {self.epoch: offset}, broker_id=self.broker_id)
                )
                offset += 10
            adds = [self._issue("add", tip, seg) for seg in segments]
            self._settle(adds)
            if all(future is None for _, future in adds):
                self._stop.wait(0.1)  # every call refused at once: do not spin
            updates = [
                self._issue("update", tip, update_of(call.event.remote_log_segment_id, FINISHED))
                for call, _ in adds
                if call.acked
            ]
            self._settle(updates)
            if any(isinstance(call.error, CallHung) for call, _ in adds + updates):
                return  # the test fails on it; do not pile up more hung calls


def expected_segments(
    records: Iterable[Rec],
) -> dict[TopicIdPartition, dict[Uuid, RemoteLogSegmentMetadata]]:
    """The segments a legacy history leaves, by user partition and segment id: each add, with
    the updates that follow it in its metadata partition applied in order. Only for histories
    of valid transitions without deletions (the writer's)."""
    result: dict[TopicIdPartition, dict[Uuid, RemoteLogSegmentMetadata]] = {}
    for record in records:
        assert record.value is not None, f"a record without a value at {record}"
        event = deserialize(record.value)
        if isinstance(event, RemoteLogSegmentMetadata):
            result.setdefault(event.topic_id_partition, {})[event.remote_log_segment_id.id] = event
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            segments = result.setdefault(event.topic_id_partition, {})
            key = event.remote_log_segment_id.id
            assert key in segments, f"update before its add at {record}"
            segments[key] = segments[key].create_with_updates(event)
        else:
            raise AssertionError(f"unexpected event {event!r} at {record}")
    return result


def check_topic_against_calls(records: Sequence[Rec], calls: Sequence[Call]) -> None:
    """The legacy history holds every acknowledged call's record, nothing the writer did not
    issue, and no record twice."""
    empty = [r for r in records if r.value is None]
    assert not empty, f"records without a value in a legacy history: {empty[:10]}"
    decoded = [(r, deserialize(r.value)) for r in records if r.value is not None]
    counts = Counter(r.value for r in records)
    duplicates = [(r.partition, r.offset, event) for r, event in decoded if counts[r.value] > 1]
    assert not duplicates, (
        f"{len(duplicates)} records of the metadata topic are written more than once "
        f"(partition, offset, event): {duplicates[:10]}"
    )
    issued = {c.payload for c in calls}
    foreign = [(r.partition, r.offset, event) for r, event in decoded if r.value not in issued]
    assert not foreign, f"records nobody wrote: {foreign[:10]}"
    present = set(counts)
    lost = [c for c in calls if c.acked and c.payload not in present]
    assert not lost, (
        f"{len(lost)} acknowledged writes are missing from the metadata topic: {lost[:10]}"
    )


def assert_writes_applied(rlmm: RemoteLogMetadataManager, calls: Iterable[Call]) -> None:
    """Every acknowledged add is in the cache, with at least the state of its acknowledged
    update (the writer's history has no deletion)."""
    listed: dict[TopicIdPartition, dict[Uuid, RemoteLogSegmentMetadata]] = {}
    missing = []
    for call in calls:
        if not call.acked:
            continue
        if call.tip not in listed:
            listed[call.tip] = listed_by_id(rlmm, call.tip)
        found = listed[call.tip].get(call.segment_id)
        if found is None or (call.kind == "update" and found.state is not FINISHED):
            missing.append((call, found))
    assert not missing, f"acknowledged writes not in the cache: {missing[:10]}"


def check_stream(nodes: Nodes, writer: Writer, rlmm: RemoteLogMetadataManager) -> None:
    """The checks of the broker-restart and cluster tests, once the writer (node 1 of
    ``nodes``) stopped: the plugin's topics are consistent (``PluginUnderTest.legacy_records``);
    the legacy history holds every acknowledged call once and nothing else; the writer's cache
    is what that history says (acknowledged writes included); a fresh node (node 2) replaying
    the topics answers every read as the writer does."""
    calls = writer.snapshot()
    print(writer.summary())  # shown with -rP: how much the test exercised
    assert all(c.finished_at is not None for c in calls), "the writer stopped with calls pending"
    records = nodes.legacy_records()
    check_topic_against_calls(records, calls)
    in_topic = {r.value for r in records}
    failed = [c for c in calls if c.error is not None]
    persisted = sum(c.payload in in_topic for c in failed)
    print(f"{persisted} of {len(failed)} failed call(s) were written all the same")
    expected = expected_segments(records)
    tips = list(writer.tips)
    # A failed write may still have reached the topic ("possibly persisted"): the writer's
    # consumer applies it whenever it reads it, so wait for the cache to match the topic.
    wait_until(
        lambda: all(listed_by_id(rlmm, tip) == expected.get(tip, {}) for tip in tips),
        "the writer's cache matching the metadata topic",
        details=lambda: "\n".join(
            f"{tip}: cache {len(listed_by_id(rlmm, tip))} segments, topic "
            f"{len(expected.get(tip, {}))}"
            for tip in tips
        ),
    )
    assert_writes_applied(rlmm, calls)

    reader = nodes.open(2)
    assign(reader, tips, follower=True)
    assert_writes_applied(reader, calls)
    offsets = offsets_of(m for segments in expected.values() for m in segments.values())
    epochs = {writer.epoch, writer.epoch + 1}
    assert_same_view(
        cache_view(rlmm, tips, epochs, offsets),
        cache_view(reader, tips, epochs, offsets),
        "a fresh node's replay against the writer",
    )


# A view of the whole cache -----------------------------------------------------------------------
View = dict[tuple[Any, ...], Any]


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("returns", call())
    except RemoteStorageException as exc:
        return ("raises", type(exc).__name__)


def _order_key(m: RemoteLogSegmentMetadata) -> tuple[int, int, str]:
    return (m.start_offset, m.end_offset, str(m.remote_log_segment_id.id))


def cache_view(
    rlmm: RemoteLogMetadataManager,
    tips: Iterable[TopicIdPartition],
    epochs: Iterable[int],
    offsets: Iterable[int],
) -> View:
    """What every read of the RLMM answers for ``tips``: readiness; all segments (sorted: the
    order is unspecified); per epoch the listing (in the order given), the highest offset and
    the size; per epoch and offset the segment lookup and the next segment with a transaction
    index. A partition whose listing raises (unknown, deleted) is recorded by that error."""
    view: View = {}
    # Every lookup that finds nothing logs a WARNING (as Kafka's cache): not worth showing.
    cache_log = logging.getLogger("tierlog.metadata.cache")
    level = cache_log.level
    cache_log.setLevel(logging.ERROR)
    try:
        _fill_view(view, rlmm, tips, sorted(set(epochs)), sorted(set(offsets)))
    finally:
        cache_log.setLevel(level)
    return view


def _fill_view(
    view: View,
    rlmm: RemoteLogMetadataManager,
    tips: Iterable[TopicIdPartition],
    epochs: list[int],
    offsets: list[int],
) -> None:
    for tip in tips:
        view[(tip, "is_ready")] = rlmm.is_ready(tip)
        listed = _outcome(partial(_sorted_listing, rlmm, tip))
        view[(tip, "list")] = listed
        if listed[0] == "raises":
            continue
        for epoch in epochs:
            view[(tip, "list", epoch)] = _outcome(partial(_listing, rlmm, tip, epoch))
            view[(tip, "highest", epoch)] = _outcome(
                partial(rlmm.highest_offset_for_epoch, tip, epoch)
            )
            view[(tip, "size", epoch)] = _outcome(partial(rlmm.remote_log_size, tip, epoch))
            for offset in offsets:
                view[(tip, "lookup", epoch, offset)] = _outcome(
                    partial(rlmm.remote_log_segment_metadata, tip, epoch, offset)
                )
                view[(tip, "txn", epoch, offset)] = _outcome(
                    partial(rlmm.next_segment_with_txn_index, tip, epoch, offset)
                )


def _sorted_listing(
    rlmm: RemoteLogMetadataManager, tip: TopicIdPartition
) -> list[RemoteLogSegmentMetadata]:
    return sorted(rlmm.list_remote_log_segments(tip), key=_order_key)


def _listing(
    rlmm: RemoteLogMetadataManager, tip: TopicIdPartition, epoch: int
) -> list[RemoteLogSegmentMetadata]:
    return list(rlmm.list_remote_log_segments(tip, epoch))


def diff_views(
    expected: Mapping[tuple[Any, ...], Any], actual: Mapping[tuple[Any, ...], Any], limit: int = 12
) -> list[str]:
    """The reads that differ, described (at most ``limit``)."""
    diffs = []
    for key in sorted(set(expected) | set(actual), key=repr):
        if expected.get(key, "<absent>") != actual.get(key, "<absent>"):
            tip, *query = key
            diffs.append(
                f"{tip.topic}-{tip.partition} {query}:\n"
                f"    expected {expected.get(key, '<absent>')!r}\n"
                f"    actual   {actual.get(key, '<absent>')!r}"
            )
    if len(diffs) > limit:
        diffs = [*diffs[:limit], f"... and {len(diffs) - limit} more"]
    return diffs


def assert_same_view(
    expected: Mapping[tuple[Any, ...], Any], actual: Mapping[tuple[Any, ...], Any], what: str
) -> None:
    diffs = diff_views(expected, actual)
    assert not diffs, f"{what}: {len(diffs)} read(s) differ\n" + "\n".join(diffs)


def sorted_segments(
    rlmm: RemoteLogMetadataManager, tip: TopicIdPartition
) -> list[RemoteLogSegmentMetadata]:
    """``list_remote_log_segments(tip)`` in the order ``cache_view`` sorts it."""
    result: list[RemoteLogSegmentMetadata] = cache_view(rlmm, [tip], (), ())[(tip, "list")][1]
    return result


def offsets_of(segments: Iterable[RemoteLogSegmentMetadata], limit: int = 400) -> set[int]:
    """The offsets worth looking up: around the bounds and epoch starts of every segment, or
    of ``limit`` segments spread over the offsets when there are more."""
    ordered = sorted(segments, key=lambda m: (m.start_offset, m.end_offset))
    if len(ordered) > limit:
        ordered = [ordered[i * len(ordered) // limit] for i in range(limit)] + ordered[-1:]
    offsets = {0}
    for m in ordered:
        offsets |= {
            m.start_offset,
            m.end_offset,
            m.end_offset + 1,
            (m.start_offset + m.end_offset) // 2,
        }
        for start in m.segment_leader_epochs.values():
            offsets |= {start - 1, start} if start > 0 else {start}
    return offsets


# Histories ---------------------------------------------------------------------------------------
class History:
    """Writes events through one RLMM, waiting for each, with ``broker_leader_epoch`` set (the
    publishing leader's epoch: what the compacted RLMM keys its records by; Kafka's legacy
    format has no place for it, so the topic RLMM writes the same records without it)."""

    def __init__(self, rlmm: RemoteLogMetadataManager) -> None:
        self.rlmm = rlmm
        self.added: list[RemoteLogSegmentMetadata] = []

    def publish(self, event: RemoteLogMetadata) -> None:
        if isinstance(event, RemoteLogSegmentMetadata):
            future = self.rlmm.add_remote_log_segment_metadata(event)
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            future = self.rlmm.update_remote_log_segment_metadata(event)
        else:
            assert isinstance(event, RemotePartitionDeleteMetadata)
            future = self.rlmm.put_remote_partition_delete_metadata(event)
        done(future)

    def add(
        self,
        tip: TopicIdPartition,
        start: int,
        end: int,
        epochs: dict[int, int],
        *,
        epoch: int,
        **kwargs: Any,
    ) -> RemoteLogSegmentMetadata:
        seg = replace(segment(tip, start, end, epochs, **kwargs), broker_leader_epoch=epoch)
        self.publish(seg)
        self.added.append(seg)
        return seg

    def update(
        self,
        seg: RemoteLogSegmentMetadata,
        state: RemoteLogSegmentState,
        *,
        epoch: int,
        custom: CustomMetadata | None = None,
    ) -> None:
        event = update_of(seg, state, custom_metadata=custom)
        self.publish(replace(event, broker_leader_epoch=epoch))

    def delete_partition(
        self, tip: TopicIdPartition, *states: RemotePartitionDeleteState, epoch: int, end: int
    ) -> None:
        for state in states:
            self.publish(
                RemotePartitionDeleteMetadata(
                    tip,
                    state,
                    int(time.time() * 1000),
                    1,
                    broker_leader_epoch=epoch,
                    end_offset=end,
                )
            )


HISTORY_PARTITIONS: Final = ("multi", "deleting", "marked", "gone", "empty", "spare-1", "spare-2")
HISTORY_EPOCHS: Final = range(-1, 6)


def history_tips() -> dict[str, TopicIdPartition]:
    """A user partition of each name of ``HISTORY_PARTITIONS``."""
    return {name: new_partition(name, n) for n, name in enumerate(HISTORY_PARTITIONS)}


def write_history(
    history: History, tips: Mapping[str, TopicIdPartition], *, keeps_superseded_uploads: bool
) -> None:
    """A history of several leader epochs: overlapping copies (a cleaned-like copy replacing a
    segment, an upload of the same offsets by the next leader), a copy in progress added twice,
    deletions (with their tombstones in a compacted projection), invalid transitions (written,
    then dropped by every cache) and partition deletions. Where the plugin does not keep
    superseded uploads, the copy in progress first supersedes a failed upload under its key
    (seed scenario 3); elsewhere both would stay listed, as in Kafka's cache."""
    h = history
    multi = tips["multi"]
    a = h.add(multi, 0, 99, {0: 0}, epoch=0, txn_idx_empty=True)
    h.update(a, FINISHED, epoch=0)
    b = h.add(multi, 100, 199, {0: 100, 1: 150}, epoch=1)
    h.update(b, FINISHED, epoch=1)
    c = h.add(multi, 100, 249, {0: 100, 1: 150}, epoch=1, txn_idx_empty=True)  # replaces b
    h.update(c, FINISHED, epoch=1)
    d = h.add(multi, 250, 349, {1: 250, 2: 300}, epoch=2, size=3000)
    h.update(d, FINISHED, epoch=2)
    if not keeps_superseded_uploads:
        h.add(multi, 350, 449, {2: 350}, epoch=2)  # fails silently, superseded by the next
    e = h.add(multi, 350, 449, {2: 350}, epoch=2)  # a copy in progress...
    h.publish(replace(e, broker_id=7, event_timestamp_ms=e.event_timestamp_ms + 1))  # ...again
    f = h.add(multi, 450, 549, {3: 450}, epoch=3, size=77)
    h.update(f, FINISHED, epoch=3, custom=CustomMetadata(b"custom"))
    h.publish(a)  # COPY_SEGMENT_FINISHED -> STARTED: invalid, written and dropped
    again = h.add(multi, 450, 549, {3: 450}, epoch=4)  # the next leader copies f's range too
    h.update(again, FINISHED, epoch=4)
    h.update(d, DELETE_FINISHED, epoch=4)  # FINISHED -> DELETE_FINISHED: invalid, dropped

    deleting = tips["deleting"]
    g = h.add(deleting, 0, 99, {0: 0}, epoch=0)
    h.update(g, FINISHED, epoch=0)
    i = h.add(deleting, 100, 199, {0: 100}, epoch=0)
    h.update(i, FINISHED, epoch=0)
    j = h.add(deleting, 200, 299, {1: 200}, epoch=1)
    h.update(j, FINISHED, epoch=1)
    h.update(g, DELETE_STARTED, epoch=2)
    h.update(g, DELETE_FINISHED, epoch=2)  # tombstones g's keys
    h.update(i, DELETE_STARTED, epoch=2)  # stays listed
    h.update(j, DELETE_STARTED, epoch=2)
    h.update(j, FINISHED, epoch=2)  # DELETE_STARTED -> FINISHED: invalid, dropped

    marked = tips["marked"]
    k = h.add(marked, 0, 99, {0: 0}, epoch=0)
    h.update(k, FINISHED, epoch=0)
    h.delete_partition(
        marked,
        RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
        epoch=0,
        end=100,
    )

    gone = tips["gone"]
    m = h.add(gone, 0, 99, {0: 0}, epoch=0)
    h.update(m, FINISHED, epoch=0)
    h.add(gone, 100, 199, {0: 100}, epoch=0)
    h.delete_partition(
        gone,
        RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
        RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
        epoch=0,
        end=200,
    )  # the last one tombstones every segment key of the partition in a compacted projection


PADDING_PER_PARTITION: Final = 1500
"""Records written to each metadata partition before a history: more than the consumer reads
in one batch (1000), so that a replay marking partitions ready too early is caught."""


def padding_tips(partitions: int = 3) -> list[TopicIdPartition]:
    """One user partition on each metadata partition."""
    found: dict[int, TopicIdPartition] = {}
    while len(found) < partitions:
        tip = new_partition("padding", len(found))
        found.setdefault(metadata_partition(tip, partitions), tip)
    return list(found.values())


def write_padding(rlmm: RemoteLogMetadataManager, tips: list[TopicIdPartition]) -> None:
    futures = [
        rlmm.add_remote_log_segment_metadata(segment(tip, n * 10, n * 10 + 9, {0: n * 10}))
        for n in range(PADDING_PER_PARTITION)
        for tip in tips
    ]
    for future in futures:
        done(future)


# The leader of a topic's partition 0, moved in the three-node cluster ----------------------------
def partition_state(admin: AdminClient, topic: str) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, isr) of ``topic`` partition 0, as the cluster reports them."""
    described = admin.list_topics(topic=topic, timeout=30).topics[topic].partitions[0]
    return described.leader, list(described.replicas), list(described.isrs)


def wait_state(
    admin: AdminClient,
    topic: str,
    condition: Callable[[int, list[int], list[int]], bool],
    what: str,
) -> None:
    """Wait until ``condition(leader, replicas, isr)`` holds for ``topic``-0."""

    def check() -> bool:
        try:
            return condition(*partition_state(admin, topic))
        except Exception:  # a node going away: ask again
            return False

    wait_until(
        check,
        what,
        RESTART_DEADLINE_S,
        interval=0.5,
        details=lambda: f"(leader, replicas, isr) = {partition_state(admin, topic)}",
    )


def elect_preferred(admin: AdminClient, topic: str, expected_leader: int) -> None:
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

    wait_until(
        elected, f"node {expected_leader} leading {topic}-0", RESTART_DEADLINE_S, interval=1.0
    )


def reassign(servers: str, directory: Path, moves: Mapping[str, list[int]]) -> None:
    """Reassign partition 0 of each topic of ``moves`` to its replicas (same set, new order)
    with Kafka's ReassignPartitionsCommand; wait until Kafka reports every move complete."""
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
        servers,
        "--reassignment-json-file",
        str(plan),
    ]
    run_kafka_class(tool, [*common, "--execute"])

    def completed() -> bool:
        result = run_kafka_class(tool, [*common, "--verify"], check=False)
        return (
            result.returncode == 0
            and "is completed" in result.stdout
            and "is still in progress" not in result.stdout
        )

    wait_until(completed, f"the reassignment {dict(moves)}", RESTART_DEADLINE_S, interval=1.0)
