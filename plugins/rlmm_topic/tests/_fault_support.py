"""Building blocks of the fault tests (``test_faults.py``): a stream of metadata writes on a
thread that records what was acknowledged, an independent reading of the metadata topic, and a
complete view of an RLMM's cache to compare two instances with.

Nothing here sleeps as an assertion: every wait is on a condition with a deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass, field
from typing import Any, Final

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from tierlog_rlmm_topic import TopicBasedRemoteLogMetadataManager

from tierlog.conformance.rlmm_suite import FINISHED, segment, update_of
from tierlog.metadata import deserialize, serialize
from tierlog.spi import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteStorageException,
    TopicIdPartition,
    Uuid,
)

__all__ = [
    "CALL_DEADLINE_S",
    "DEADLINE_S",
    "RESTART_DEADLINE_S",
    "Call",
    "CallHung",
    "Record",
    "Writer",
    "cache_view",
    "check_topic_against_calls",
    "diff_views",
    "expected_segments",
    "listed_by_id",
    "open_rlmm",
    "read_topic",
    "rlmm_config",
    "wait_until",
]

DEADLINE_S: Final = 180.0
"""Waits for a condition on a healthy cluster (readiness, convergence)."""
RESTART_DEADLINE_S: Final = 420.0
"""Waits that span a broker restart on a loaded machine."""
CALL_DEADLINE_S: Final = 600.0
"""How long a single mutating call may take before it counts as hung: longer than librdkafka's
default delivery timeout (300 s) plus ``remote.log.metadata.consume.wait.ms`` (120 s), so a
call that fails the way it should is never reported as hung."""


def wait_until(
    condition: Callable[[], bool],
    what: str,
    timeout: float = DEADLINE_S,
    *,
    interval: float = 0.05,
    details: Callable[[], str] | None = None,
) -> None:
    """Wait for ``condition()``; fail the test naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            extra = f"\n{details()}" if details is not None else ""
            pytest.fail(f"{what} did not happen within {timeout:.0f} s{extra}", pytrace=False)
        time.sleep(interval)


# Configuration -----------------------------------------------------------------------------------
def rlmm_config(
    servers: str,
    topic: str,
    *,
    node_id: int,
    log_dir: str,
    partitions: int = 3,
    replication_factor: int = 1,
    min_isr: int = 1,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The plugin's ``rlmm.config.`` keys for a private metadata topic."""
    return {
        "remote.log.metadata.common.client.bootstrap.servers": servers,
        "remote.log.metadata.topic.name": topic,
        "remote.log.metadata.topic.num.partitions": str(partitions),
        "remote.log.metadata.topic.replication.factor": str(replication_factor),
        "remote.log.metadata.topic.min.isr": str(min_isr),
        "remote.log.metadata.initialization.retry.max.timeout.ms": "120000",
        "node.id": str(node_id),
        "log.dir": log_dir,
        **(extra or {}),
    }


def open_rlmm(
    configs: Mapping[str, str], opened: list[TopicBasedRemoteLogMetadataManager]
) -> TopicBasedRemoteLogMetadataManager:
    """A configured RLMM, appended to ``opened`` (closed by the test's fixture)."""
    rlmm = TopicBasedRemoteLogMetadataManager()
    opened.append(rlmm)
    rlmm.configure(configs)
    return rlmm


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

    rlmm: TopicBasedRemoteLogMetadataManager
    tips: Sequence[TopicIdPartition]
    batch: int = 5
    epoch: int = 0
    broker_id: int = 1
    call_deadline_s: float = CALL_DEADLINE_S
    calls: list[Call] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _next_offset: dict[TopicIdPartition, int] = field(default_factory=dict)

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
    ) -> None:
        """Wait until ``count`` calls issued after ``issued_after`` were acknowledged on every
        partition; with ``no_failure_after``, fail at once if a call issued then or later
        failed (rather than wait for the deadline)."""

        def enough() -> bool:
            if no_failure_after is not None:
                failed = [c for c in self.failed() if c.issued_at >= no_failure_after]
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

    def wait_failed(self, what: str, *, timeout: float) -> None:
        wait_until(lambda: bool(self.failed()), what, timeout, interval=0.1, details=self.summary)

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
            try:
                future.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeoutError:
                call.error = CallHung(
                    f"{call!r} did not complete within {self.call_deadline_s:.0f} s"
                )
            except Exception as exc:
                call.error = exc
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


# The topic, read independently -------------------------------------------------------------------
@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    value: bytes


def read_topic(servers: str, topic: str, partitions: int) -> list[Record]:
    """Every record of ``topic`` up to its current end offsets, read with a bare consumer."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": "tierlog-fault-test-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=60, cached=False)[1]
            for p in range(partitions)
        }
        records: list[Record] = []
        position = dict.fromkeys(ends, 0)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + DEADLINE_S
        while any(position[p] < ends[p] for p in ends):
            if time.monotonic() > deadline:
                pytest.fail(f"could not read {topic} to {ends} (at {position})", pytrace=False)
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.retriable() or error.code() == KafkaError._PARTITION_EOF, error
                continue
            partition, offset, value = message.partition(), message.offset(), message.value()
            assert partition is not None and offset is not None and value is not None
            if offset < ends[partition]:
                records.append(Record(partition, offset, value))
            position[partition] = offset + 1
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def expected_segments(
    records: Iterable[Record],
) -> dict[TopicIdPartition, dict[Uuid, RemoteLogSegmentMetadata]]:
    """The segments the topic's history leaves, by user partition and segment id: each add,
    with the updates that follow it in its metadata partition applied in order. Only for
    histories of valid transitions without deletions (the writer's)."""
    result: dict[TopicIdPartition, dict[Uuid, RemoteLogSegmentMetadata]] = {}
    for record in records:
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


def check_topic_against_calls(records: Sequence[Record], calls: Sequence[Call]) -> None:
    """The topic holds every acknowledged call's record, nothing the writer did not issue, and
    no record twice."""
    decoded = [(r, deserialize(r.value)) for r in records]
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


def listed_by_id(
    rlmm: TopicBasedRemoteLogMetadataManager, tip: TopicIdPartition
) -> dict[Uuid, RemoteLogSegmentMetadata]:
    return {m.remote_log_segment_id.id: m for m in rlmm.list_remote_log_segments(tip)}


# A view of the whole cache -----------------------------------------------------------------------
def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("returns", call())
    except RemoteStorageException as exc:
        return ("raises", type(exc).__name__)


def _order_key(m: RemoteLogSegmentMetadata) -> tuple[int, int, str]:
    return (m.start_offset, m.end_offset, str(m.remote_log_segment_id.id))


def cache_view(
    rlmm: TopicBasedRemoteLogMetadataManager,
    tips: Iterable[TopicIdPartition],
    epochs: Iterable[int],
    offsets: Iterable[int],
) -> dict[tuple[Any, ...], Any]:
    """What every read of the RLMM answers for ``tips``: readiness; all segments (sorted: the
    order is unspecified); per epoch the listing (in the order given), the highest offset and
    the size; per epoch and offset the segment lookup and the next segment with a transaction
    index. A partition whose listing raises (unknown, deleted) is recorded by that error."""
    epochs, offsets = sorted(set(epochs)), sorted(set(offsets))
    view: dict[tuple[Any, ...], Any] = {}
    # Every lookup that finds nothing logs a WARNING (as Kafka's cache): not worth showing.
    cache_log = logging.getLogger("tierlog.metadata.cache")
    level = cache_log.level
    cache_log.setLevel(logging.ERROR)
    try:
        _fill_view(view, rlmm, tips, epochs, offsets)
    finally:
        cache_log.setLevel(level)
    return view


def _fill_view(
    view: dict[tuple[Any, ...], Any],
    rlmm: TopicBasedRemoteLogMetadataManager,
    tips: Iterable[TopicIdPartition],
    epochs: list[int],
    offsets: list[int],
) -> None:
    for tip in tips:
        view[(tip, "is_ready")] = rlmm.is_ready(tip)
        listed = _outcome(
            lambda tip=tip: sorted(rlmm.list_remote_log_segments(tip), key=_order_key)
        )
        view[(tip, "list")] = listed
        if listed[0] == "raises":
            continue
        for epoch in epochs:
            view[(tip, "list", epoch)] = _outcome(
                lambda tip=tip, epoch=epoch: list(rlmm.list_remote_log_segments(tip, epoch))
            )
            view[(tip, "highest", epoch)] = _outcome(
                lambda tip=tip, epoch=epoch: rlmm.highest_offset_for_epoch(tip, epoch)
            )
            view[(tip, "size", epoch)] = _outcome(
                lambda tip=tip, epoch=epoch: rlmm.remote_log_size(tip, epoch)
            )
            for offset in offsets:
                view[(tip, "lookup", epoch, offset)] = _outcome(
                    lambda tip=tip, epoch=epoch, offset=offset: rlmm.remote_log_segment_metadata(
                        tip, epoch, offset
                    )
                )
                view[(tip, "txn", epoch, offset)] = _outcome(
                    lambda tip=tip, epoch=epoch, offset=offset: rlmm.next_segment_with_txn_index(
                        tip, epoch, offset
                    )
                )


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
