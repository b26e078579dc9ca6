"""End-to-end tiering scenarios modelled on Kafka's tiered-storage integration tests and on
``RemoteLogManagerTest``, on real components (``_harness``; ``_cluster`` for several nodes).

- read_committed consumption across remote segments (OffloadAndTxnConsumeFromLeader);
- the copy sequence of one segment (KAFKA-FACTS 6.1 item 9, incl. the "stale topic" case);
- remote deletion by log start offset breach, before and after a leader change
  (DeleteSegmentsDueToLogStartOffsetBreach);
- followers: local retention gated by the follower task, bootstrap from remote storage
  (TierStateMachine), then leadership of the bootstrapped follower;
- unclean leader election: unreferenced remote segments;
- a flaky RSM for a whole run, ending with no orphan object;
- the reader pool, the KIP-956 quotas and the Prometheus metrics.
"""

from __future__ import annotations

import heapq
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tierlog.log.batch import (
    ControlRecordType,
    build_batch,
    build_control_batch,
    decode_control_record,
)
from tierlog.log.checkpoint import parse_leader_epoch_checkpoint
from tierlog.log.local_log import OffsetMovedToTieredStorageError
from tierlog.log.reader import iter_batches_with_records
from tierlog.log.record import Record
from tierlog.log.segment import FetchDataInfo
from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager
from tierlog.rlm.config import RemoteLogManagerConfig
from tierlog.rlm.manager import RemoteLogManager, RLMCopyTask, RLMExpirationTask
from tierlog.rlm.quota import LONG_MAX, CopyQuotaGate
from tierlog.rlm.remote_read import (
    RemoteReadRejectedError,
    RemoteStorageFetchInfo,
    trim_partial_batch,
)
from tierlog.spi import (
    CustomMetadata,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageException,
    RetriableRemoteStorageException,
)
from tierlog.storage.local import LocalTieredStorage

from ._cluster import Cluster
from ._harness import Harness, key_of, value_of

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DEADLINE_S = 60.0
"""How long a test waits for another thread before it fails: only a hung one takes this. The
harness's clock is manual, so no outcome depends on how fast the threads run."""


# Helpers ---------------------------------------------------------------------------------------
def metric(h: Harness, sample: str, **labels: str) -> float | None:
    """The value of one sample of the node's Prometheus exposition, or None if absent."""
    for family in text_string_to_metric_families(h.rlm.metrics.expose().decode()):
        for s in family.samples:
            if s.name == sample and s.labels == labels:
                return float(s.value)
    return None


def remote_of(h: Harness, *, finished_only: bool = True) -> list[RemoteLogSegmentMetadata]:
    """``h.remote_segments``, typed."""
    return cast(list[RemoteLogSegmentMetadata], h.remote_segments(finished_only=finished_only))


def btm(name: str) -> str:
    return f"kafka_server_brokertopicmetrics_{name}"


def fetch(h: Harness, offset: int, isolation: str, max_bytes: int = 64 * 1024) -> FetchDataInfo:
    """What a consumer's fetch at ``offset`` gets: remote below the local log start."""
    if offset < h.log.local_log_start_offset:
        return trim_partial_batch(
            h.rlm.read(
                RemoteStorageFetchInfo(
                    max_bytes=max_bytes,
                    min_one_message=True,
                    topic_id_partition=h.tp,
                    fetch_offset=offset,
                    isolation=isolation,
                )
            )
        )
    return h.log.read(offset, max_bytes, isolation)  # type: ignore[arg-type]


@dataclass
class Consumed:
    offset: int
    value: bytes | None
    batch_epoch: int


def consume(
    h: Harness, start: int = 0, isolation: str = "read_uncommitted", max_bytes: int = 64 * 1024
) -> list[Consumed]:
    """Every record a Kafka consumer delivers from ``start``, with ``isolation``.

    read_committed filters as Kafka's ``CompletedFetch`` does, with the aborted-transaction list
    of each fetch response on its own: a producer id becomes aborted when a batch reaches the
    first offset of one of its listed transactions, and stays so until its ABORT marker;
    control batches are never delivered.
    """
    committed = isolation == "read_committed"
    end = h.log.last_stable_offset if committed else h.log.high_watermark
    out: list[Consumed] = []
    offset = start
    while offset < end:
        info = fetch(h, offset, isolation, max_bytes)
        pending: list[tuple[int, int]] = []
        if committed:
            assert info.aborted_transactions is not None
            pending = sorted((t.first_offset, t.producer_id) for t in info.aborted_transactions)
        aborted: set[int] = set()
        progressed = False
        for _, header, records in iter_batches_with_records(bytes(info.records), verify_crc=True):
            if header.last_offset < offset:
                continue
            progressed = True
            deliver = not header.is_control
            if committed and header.has_producer_id:
                while pending and pending[0][0] <= header.last_offset:
                    aborted.add(heapq.heappop(pending)[1])
                if header.is_control:
                    if decode_control_record(records[0]).type == ControlRecordType.ABORT:
                        aborted.discard(header.producer_id)
                elif header.is_transactional and header.producer_id in aborted:
                    deliver = False
            if deliver:
                out.extend(
                    Consumed(r.offset, r.value, header.partition_leader_epoch)
                    for r in records
                    if r.offset >= offset
                )
            offset = header.next_offset
        assert progressed, f"no progress reading at {offset}"
    return out


def offsets(records: list[Consumed]) -> list[int]:
    return [r.offset for r in records]


def records_at(h: Harness, count: int) -> list[Record]:
    """``count`` records with the harness's content for the next offsets of ``h``'s log."""
    first = h.log.log_end_offset
    return [Record(i, h.clock.now, key_of(first + i), value_of(first + i)) for i in range(count)]


def produce_idempotent(h: Harness, pid: int, seq: int, count: int) -> None:
    batch = build_batch(records_at(h, count), producer_id=pid, producer_epoch=0, base_sequence=seq)
    info = h.log.append_as_leader(batch, h.epoch)
    assert not info.duplicate


def remote_files(rsm: LocalTieredStorage) -> set[Path]:
    return {p for p in rsm.storage_directory.rglob("*") if p.is_file()}


def finished_segment_files(h: Harness, rsm: LocalTieredStorage) -> set[Path]:
    return {p for s in remote_of(h) for p in rsm.segment_paths(s).values() if p.exists()}


class CountingRSM(LocalTieredStorage):
    """The real local RSM, recording the calls it gets."""

    def __init__(self) -> None:
        super().__init__()
        self.copies: list[tuple[RemoteLogSegmentMetadata, LogSegmentData]] = []
        self.deletes: list[RemoteLogSegmentMetadata] = []
        self.fetches = 0

    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        log_segment_data: LogSegmentData,
    ) -> CustomMetadata | None:
        self.copies.append((remote_log_segment_metadata, log_segment_data))
        return super().copy_log_segment_data(remote_log_segment_metadata, log_segment_data)

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        self.fetches += 1
        return super().fetch_log_segment(remote_log_segment_metadata, start_position, end_position)

    def delete_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata
    ) -> None:
        self.deletes.append(remote_log_segment_metadata)
        super().delete_log_segment_data(remote_log_segment_metadata)


class CountingRLMM(EmbeddedRemoteLogMetadataManager):
    """The real embedded RLMM, recording the events published to it."""

    def __init__(self) -> None:
        super().__init__()
        self.added: list[RemoteLogSegmentMetadata] = []
        self.updates: list[RemoteLogSegmentMetadataUpdate] = []

    def add_remote_log_segment_metadata(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata
    ) -> Future[None]:
        self.added.append(remote_log_segment_metadata)
        return super().add_remote_log_segment_metadata(remote_log_segment_metadata)

    def update_remote_log_segment_metadata(
        self, remote_log_segment_metadata_update: RemoteLogSegmentMetadataUpdate
    ) -> Future[None]:
        self.updates.append(remote_log_segment_metadata_update)
        return super().update_remote_log_segment_metadata(remote_log_segment_metadata_update)


def counting_harness(root: Path, **kwargs: object) -> tuple[Harness, CountingRSM, CountingRLMM]:
    rsm = CountingRSM()
    rsm.configure({"dir": str(root / "remote")})
    rlmm = CountingRLMM()
    rlmm.configure({"dir": str(root / "rlmm")})
    return Harness(root, rsm=rsm, rlmm=rlmm, **kwargs), rsm, rlmm  # type: ignore[arg-type]


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    harness.close()


# read_committed across remote segments (OffloadAndTxnConsumeFromLeader) ------------------------
class TxnWriter:
    """Appends plain records, transactional batches and markers to a leader's log, and keeps
    what a read_committed consumer must get (values name their offset)."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.seq: Counter[int] = Counter()
        self.open: dict[int, list[int]] = {}
        self.committed: list[int] = []
        self.aborted: list[int] = []
        self.markers: list[int] = []

    def _records(self, count: int) -> list[Record]:
        first = self.h.log.log_end_offset
        return [Record(i, self.h.clock.now, None, b"v%d" % (first + i)) for i in range(count)]

    def plain(self, count: int) -> None:
        first = self.h.log.log_end_offset
        self.h.log.append_as_leader(build_batch(self._records(count)), self.h.epoch)
        self.committed.extend(range(first, first + count))

    def txn(self, pid: int, count: int) -> None:
        first = self.h.log.log_end_offset
        batch = build_batch(
            self._records(count),
            producer_id=pid,
            producer_epoch=0,
            base_sequence=self.seq[pid],
            is_transactional=True,
        )
        self.h.log.append_as_leader(batch, self.h.epoch)
        self.seq[pid] += count
        self.open.setdefault(pid, []).extend(range(first, first + count))

    def end(self, pid: int, *, commit: bool) -> None:
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        self.markers.append(self.h.log.log_end_offset)
        marker = build_control_batch(
            kind, 0, timestamp=self.h.clock.now, producer_id=pid, producer_epoch=0
        )
        self.h.log.append_as_leader(marker, self.h.epoch, origin="coordinator")
        (self.committed if commit else self.aborted).extend(self.open.pop(pid))


def _write_transactions(h: Harness) -> TxnWriter:
    """Five sealed segments (rolled by hand) and an active one:

    - A [0, 9]: plain; T1 (pid 1) starts; T2 (pid 2) commits;
    - B [10, 16]: T3 (pid 3) aborts; T1 goes on;
    - C [17, 20]: T4 (pid 2) starts; T1 aborts, its marker two segments after its first data;
    - D [21, 26]: T4 aborts, its marker one segment after its data; T5 (pid 3) commits;
    - E [27, 29]: plain;  active [30, 31]: plain.
    """
    w = TxnWriter(h)
    w.plain(3)  # 0-2
    w.txn(1, 2)  # 3-4, T1
    w.txn(2, 2)  # 5-6, T2
    w.end(2, commit=True)  # 7
    w.plain(2)  # 8-9
    h.log.roll()
    w.txn(3, 3)  # 10-12, T3
    w.txn(1, 1)  # 13, T1
    w.end(3, commit=False)  # 14
    w.plain(2)  # 15-16
    h.log.roll()
    w.txn(2, 2)  # 17-18, T4
    w.end(1, commit=False)  # 19: aborts T1 (3-4, 13)
    w.plain(1)  # 20
    h.log.roll()
    w.end(2, commit=False)  # 21: aborts T4 (17-18)
    w.txn(3, 2)  # 22-23, T5
    w.end(3, commit=True)  # 24
    w.plain(2)  # 25-26
    h.log.roll()
    w.plain(3)  # 27-29
    h.log.roll()
    w.plain(2)  # 30-31
    assert not w.open
    assert [s.base_offset for s in h.log.segments] == [0, 10, 17, 21, 27, 30]
    return w


def test_read_committed_across_remote_segments_filters_exactly_the_aborted_records(
    tmp_path: Path,
) -> None:
    h, rsm, _ = counting_harness(tmp_path)
    try:
        h.lead()
        w = _write_transactions(h)
        assert h.log.last_stable_offset == h.log.log_end_offset == 32
        expected_committed = sorted(w.committed)
        data_offsets = sorted(w.committed + w.aborted)
        assert w.aborted == [10, 11, 12, 3, 4, 13, 17, 18]
        # The local view first: the oracle for the remote one.
        local = consume(h, 0, "read_committed")
        assert offsets(local) == expected_committed
        assert all(r.value == b"v%d" % r.offset for r in local)

        h.tier()
        remote = remote_of(h)
        assert [(s.start_offset, s.end_offset) for s in remote] == [
            (0, 9),
            (10, 16),
            (17, 20),
            (21, 26),
            (27, 29),
        ]
        # Only the segments holding an ABORT marker have a transaction index.
        assert [s.txn_idx_empty for s in remote] == [True, False, False, False, True]
        assert h.log.local_log_start_offset == 30

        fetches = rsm.fetches
        committed = consume(h, 0, "read_committed")
        assert offsets(committed) == expected_committed
        assert all(r.value == b"v%d" % r.offset for r in committed)
        assert rsm.fetches > fetches  # served by remote storage
        # Fetches of one batch each: every response must list the transactions it overlaps.
        for max_bytes in (300, 1):
            assert offsets(consume(h, 0, "read_committed", max_bytes)) == expected_committed
        uncommitted = consume(h, 0, "read_uncommitted")
        assert offsets(uncommitted) == data_offsets  # every data record, no marker
        # From the middle of the aborted T1 (its first offset is in an earlier segment): the
        # response must still list T1, or its record 13 would be delivered.
        assert offsets(consume(h, 13, "read_committed")) == [
            o for o in expected_committed if o >= 13
        ]
        assert offsets(consume(h, 17, "read_committed")) == [
            o for o in expected_committed if o >= 17
        ]
        # Each remote fetch lists the aborted transactions its data overlaps.
        aborted_at = {
            start: sorted(
                (t.producer_id, t.first_offset, t.last_offset)
                for t in fetch(h, start, "read_committed").aborted_transactions or []
            )
            for start in (0, 10, 17, 21, 27)
        }
        assert aborted_at == {
            0: [(1, 3, 19)],
            10: [(1, 3, 19), (3, 10, 14)],
            17: [(1, 3, 19), (2, 17, 21)],
            21: [(2, 17, 21)],
            27: [],
        }
    finally:
        h.close()


# The copy sequence of one segment (RemoteLogManagerTest, KAFKA-FACTS 6.1 item 9) ---------------
@pytest.mark.parametrize("stale", [False, True], ids=["lso-250", "stale-topic-lso-leo-150"])
def test_copy_sequence_of_one_segment(tmp_path: Path, stale: bool) -> None:
    """Epochs {0:0, 1:100, 2:200 (or 150)}, segment [0, 149], next segment at 150; LSO 250, or
    LSO = LEO = 150 when nothing was produced since the roll (a stale topic whose leader
    changed). The copy publishes COPY_SEGMENT_STARTED with epochs {0:0, 1:100}, hands exactly
    that metadata to the RSM once, publishes one COPY_SEGMENT_FINISHED and moves the highest
    offset in remote storage to 149."""
    h, rsm, rlmm = counting_harness(
        tmp_path, topic={"internal.segment.bytes": 1 << 20, "segment.index.bytes": 4096}
    )
    try:
        h.lead()
        h.produce(100)
        h.lead(1)
        h.produce(50)
        h.log.roll()
        if stale:
            h.lead(2)  # a new leader epoch, and no record since
        else:
            h.produce(50)
            h.lead(2)
            h.produce(50)
        lso = 150 if stale else 250
        assert h.log.last_stable_offset == h.log.log_end_offset == lso
        epochs = h.log.leader_epoch_cache.epoch_with_offsets()
        assert epochs == {0: 0, 1: 100, 2: 150 if stale else 200}
        segment = h.log.segments[0]
        assert (segment.base_offset, h.log.segments[1].base_offset) == (0, 150)

        h.rlm.run_once(h.tp)

        assert len(rlmm.added) == 1
        started = rlmm.added[0]
        assert started.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED
        assert (started.start_offset, started.end_offset) == (0, 149)
        assert started.segment_leader_epochs == {0: 0, 1: 100}
        assert started.segment_size_in_bytes == segment.size
        assert started.broker_id == 0
        assert started.max_timestamp_ms == segment.largest_timestamp()
        assert started.txn_idx_empty
        assert started.remote_log_segment_id.topic_id_partition == h.tp

        assert len(rsm.copies) == 1
        copied, data = rsm.copies[0]
        assert copied == started
        assert data.log_segment == segment.log_path
        assert data.offset_index == segment.offset_index_path
        assert data.time_index == segment.time_index_path
        assert data.transaction_index is None
        assert Path(data.producer_snapshot_index).name == "00000000000000000150.snapshot"
        checkpoint = parse_leader_epoch_checkpoint(bytes(data.leader_epoch_index))
        assert [(e.epoch, e.start_offset) for e in checkpoint] == [(0, 0), (1, 100)]

        assert len(rlmm.updates) == 1
        update = rlmm.updates[0]
        assert update.state == FINISHED
        assert update.remote_log_segment_id == started.remote_log_segment_id
        assert update.broker_id == 0
        assert h.log.highest_offset_in_remote_storage == 149
        assert [s.remote_log_segment_id for s in remote_of(h)] == [started.remote_log_segment_id]

        assert metric(h, btm("remotecopyrequests_total"), topic="topic") == 1
        assert metric(h, btm("remotecopyrequests_total")) == 1
        assert metric(h, btm("remotecopybytes_total"), topic="topic") == segment.size
        assert not metric(h, btm("remotecopyerrors_total"), topic="topic")
        # Nothing else to copy: the active segment never is.
        h.rlm.run_once(h.tp)
        assert len(rsm.copies) == 1
        assert metric(h, btm("remotecopylagsegments"), topic="topic") == 0
    finally:
        h.close()


# DeleteSegmentsDueToLogStartOffsetBreachTest -----------------------------------------------------
def _produce_one_per_batch(c: Cluster, leader: Harness, count: int, *, roll_every: int) -> None:
    """``count`` records, one per batch, replicated to the other nodes; a record at an offset
    multiple of ``roll_every`` starts a new segment on every node (Kafka's test: 2 batches per
    segment)."""
    followers = [n for n in c.nodes if n is not leader]
    for _ in range(count):
        end = leader.log.log_end_offset
        if end % roll_every == 0 and leader.log.active_segment.base_offset < end:
            for node in (leader, *followers):
                node.log.roll()
        leader.produce(1, per_batch=1)
        for f in followers:
            c.replicate(leader, f)


def test_delete_segments_due_to_log_start_offset_breach_before_and_after_a_leader_change(
    tmp_path: Path,
) -> None:
    rsm = CountingRSM()
    rsm.configure({"dir": str(tmp_path / "remote")})
    c = Cluster(tmp_path, nodes=2, rsm=rsm)
    try:
        b0, b1 = c.nodes
        b0.lead()
        c.follow(b1)
        _produce_one_per_batch(c, b0, 5, roll_every=2)  # k0..k4
        b0.tier()
        assert [(s.start_offset, s.end_offset) for s in remote_of(b0)] == [(0, 1), (2, 3)]
        assert b0.log.local_log_start_offset == 4

        # DeleteRecords up to 3: the remote segment entirely below it goes.
        assert b0.log.delete_records(3) == 3
        c.replicate(b0, b1)
        b0.rlm.run_once(b0.tp)
        assert [(s.start_offset, s.end_offset) for s in rsm.deletes] == [(0, 1)]
        assert [(s.start_offset, s.end_offset) for s in remote_of(b0)] == [(2, 3)]
        assert b0.log.leader_epoch_cache.epoch_with_offsets() == {0: 3}
        assert metric(b0, btm("remotedeleterequests_total"), topic="topic") == 1
        fetches = rsm.fetches
        assert [(r.offset, r.value) for r in consume(b0, 3)] == [(3, value_of(3)), (4, value_of(4))]
        assert rsm.fetches - fetches == 1

        # Leader change: epoch 1 on broker 1 from offset 5.
        c.follow(b0)
        b1.lead(1)
        _produce_one_per_batch(c, b1, 5, roll_every=2)  # k5..k9
        b1.tier()
        assert [(s.start_offset, s.end_offset, s.segment_leader_epochs) for s in remote_of(b1)] == [
            (2, 3, {0: 2}),
            (4, 5, {0: 4, 1: 5}),
            (6, 7, {1: 6}),
        ]
        assert b1.log.local_log_start_offset == 8

        # DeleteRecords up to 7 moves the earliest epoch from 0 to 1: the epoch-0 segment and
        # the one spanning epochs 0 and 1 go; [6, 7] holds offset 7 and stays.
        assert b1.log.delete_records(7) == 7
        assert b1.log.leader_epoch_cache.epoch_with_offsets() == {1: 7}
        b1.rlm.run_once(b1.tp)
        assert sorted((s.start_offset, s.end_offset) for s in rsm.deletes[1:]) == [(2, 3), (4, 5)]
        assert [(s.start_offset, s.end_offset) for s in remote_of(b1)] == [(6, 7)]
        assert metric(b1, btm("remotedeleterequests_total"), topic="topic") == 2
        fetches = rsm.fetches
        assert offsets(consume(b1, 7)) == [7, 8, 9]
        assert rsm.fetches - fetches == 1
        assert not remote_files(rsm) - finished_segment_files(b1, rsm)
    finally:
        c.close()


# Followers ---------------------------------------------------------------------------------------
def test_follower_local_retention_deletes_only_what_the_follower_task_knows_is_tiered(
    tmp_path: Path,
) -> None:
    c = Cluster(tmp_path, nodes=2)
    try:
        leader, follower = c.nodes
        leader.lead()
        c.follow(follower)
        assert [type(t).__name__ for t in follower.rlm.tasks(follower.tp)] == ["RLMFollowerTask"]
        leader.produce(300)
        c.replicate(leader, follower)
        assert [s.base_offset for s in follower.log.segments] == [
            s.base_offset for s in leader.log.segments
        ]
        follower.rlm.run_once(follower.tp)
        assert follower.log.highest_offset_in_remote_storage == -1
        assert follower.log.delete_retention_segments() == 0  # nothing is tiered yet

        leader.tier()
        tiered = remote_of(leader)
        highest = leader.log.highest_offset_in_remote_storage
        assert len(tiered) >= 3 and highest == tiered[-1].end_offset
        # Until its follower task runs, the follower does not know: it keeps everything.
        assert follower.log.delete_retention_segments() == 0
        follower.rlm.run_once(follower.tp)
        assert follower.log.highest_offset_in_remote_storage == highest
        assert follower.log.delete_retention_segments() == len(tiered)
        assert follower.log.local_log_start_offset == highest + 1
        assert follower.log.log_start_offset == 0
        assert remote_of(leader) == tiered  # a follower never copies

        # More data: the follower's local log start follows the leader's copies only.
        leader.produce(200)
        c.replicate(leader, follower)
        follower.rlm.run_once(follower.tp)
        follower.log.delete_retention_segments()
        assert follower.log.local_log_start_offset == highest + 1
        leader.tier()
        follower.rlm.run_once(follower.tp)
        follower.log.delete_retention_segments()
        new_highest = leader.log.highest_offset_in_remote_storage
        assert new_highest > highest
        assert follower.log.local_log_start_offset == new_highest + 1
        assert offsets(consume(follower, 0)) == list(range(500))  # remote, then local
    finally:
        c.close()


def test_empty_follower_bootstraps_from_remote_storage_then_leads(tmp_path: Path) -> None:
    """A replica added while the leader's local log no longer starts at 0 restarts after the
    last tiered segment with its epochs and producer state (Kafka's TierStateMachine); once
    leader, it copies from the right offset and an idempotent producer carries on."""
    c = Cluster(tmp_path, nodes=1)
    try:
        old = c.nodes[0]
        old.lead()
        pid = 77
        old.produce(40)
        produce_idempotent(old, pid, 0, 3)  # 40-42, sequences 0-2
        old.produce(60)
        old.lead(1)
        produce_idempotent(old, pid, 3, 2)  # 103-104, sequences 3-4
        old.produce(80)
        old.lead(2)
        old.produce(80)
        old.tier()
        tiered = remote_of(old)
        local_start = old.log.local_log_start_offset
        assert local_start == tiered[-1].end_offset + 1 > 200  # the producer's data is remote
        leader_epochs = old.log.leader_epoch_cache.epoch_with_offsets()
        assert leader_epochs == {0: 0, 1: 103, 2: 185}

        new = c.add_node()
        c.follow(new)
        with pytest.raises(OffsetMovedToTieredStorageError):
            c.replicate(old, new)
        next_offset = c.bootstrap_from_remote(old, new)
        assert next_offset == local_start
        log = new.log
        assert (log.log_start_offset, log.local_log_start_offset, log.log_end_offset) == (
            0,
            local_start,
            local_start,
        )
        assert log.leader_epoch_cache.epoch_with_offsets() == leader_epochs
        entry = log.producer_state_manager.last_entry(pid)
        assert entry is not None and entry.last_seq == 4
        assert (log.dir / f"{next_offset:020d}.snapshot").is_file()
        assert metric(new, btm("buildremotelogauxstaterequests_total"), topic="topic") == 1
        c.replicate(old, new)
        assert log.log_end_offset == old.log.log_end_offset == 265
        new.rlm.run_once(new.tp)  # follower task
        assert log.highest_offset_in_remote_storage == tiered[-1].end_offset
        assert offsets(consume(new, 0)) == list(range(265))

        # The bootstrapped follower becomes leader.
        c.follow(old)
        new.lead(3)
        retry = build_batch(
            [Record(i, new.clock.now, None, b"retry") for i in range(2)],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=3,
        )
        info = log.append_as_leader(retry, 3)
        assert info.duplicate and (info.first_offset, info.last_offset) == (103, 104)
        assert log.log_end_offset == 265
        produce_idempotent(new, pid, 5, 2)  # the next sequence is accepted
        info = log.append_as_leader(
            build_batch(records_at(new, 2), producer_id=pid, producer_epoch=0, base_sequence=5),
            3,
        )
        assert info.duplicate and log.log_end_offset == 267
        new.produce(200)
        c.replicate(new, old)
        new.tier()
        remote = remote_of(new)
        assert remote[: len(tiered)] == tiered  # nothing re-copied, nothing lost
        copied = remote[len(tiered) :]
        assert copied and copied[0].start_offset == local_start
        assert all(s.broker_id == new.rlm.broker_id for s in copied)
        assert [s.start_offset for s in remote[1:]] == [s.end_offset + 1 for s in remote[:-1]]
        assert max(copied[-1].segment_leader_epochs) == 3
        assert new.log.local_log_start_offset == copied[-1].end_offset + 1
        assert [(r.offset, r.value) for r in consume(new, 0)] == [
            (o, value_of(o)) for o in range(467)
        ]
        # The old leader, now a follower, learns the new highest offset from its task.
        old.rlm.run_once(old.tp)
        assert old.log.highest_offset_in_remote_storage == copied[-1].end_offset
        old.log.delete_retention_segments()
        assert old.log.local_log_start_offset == copied[-1].end_offset + 1
    finally:
        c.close()


def test_bootstrap_when_the_leader_local_log_starts_with_a_new_epoch(tmp_path: Path) -> None:
    """The leader's local log starts exactly where epoch 1 starts: the remote segment before it
    is found under epoch 0 (Kafka's OffsetsForLeaderEpoch(epoch - 1) step)."""
    c = Cluster(tmp_path, nodes=1)
    try:
        old = c.nodes[0]
        old.lead()
        old.produce(120)
        old.log.roll()
        old.lead(1)
        old.produce(30)
        old.tier()
        boundary = old.log.leader_epoch_cache.epoch_with_offsets()[1]
        assert old.log.local_log_start_offset == boundary == 120
        new = c.add_node()
        c.follow(new)
        assert c.bootstrap_from_remote(old, new) == boundary
        assert new.log.leader_epoch_cache.epoch_with_offsets() == {0: 0}
        c.replicate(old, new)
        assert new.log.leader_epoch_cache.epoch_with_offsets() == {0: 0, 1: 120}
        assert offsets(consume(new, 0)) == list(range(150))
    finally:
        c.close()


# Unclean leader election -------------------------------------------------------------------------
def test_unclean_leader_election_removes_unreferenced_segments_and_retention_ignores_them(
    tmp_path: Path,
) -> None:
    """Broker 0 tiers epoch-0 data; broker 1, which never replicated any of it, is elected
    uncleanly at epoch 1 and writes its own history from offset 0. The epoch-0 segments are no
    longer in the leader's lineage: size retention does not count them (it would delete the new
    leader's data otherwise) and the expiration task deletes them as unreferenced, without
    moving the log start offset."""
    rsm = CountingRSM()
    rsm.configure({"dir": str(tmp_path / "remote")})
    c = Cluster(tmp_path, nodes=2, rsm=rsm)
    try:
        b0, b1 = c.nodes
        b0.lead()
        c.follow(b1)
        b0.produce(250)
        b0.tier()
        lost = remote_of(b0)
        assert len(lost) >= 3 and all(s.segment_leader_epochs == {0: s.start_offset} for s in lost)

        c.follow(b0)
        b1.lead(1)  # unclean: its log is empty
        assert b1.log.leader_epoch_cache.epoch_with_offsets() == {1: 0}
        b1.produce(150)
        # retention.bytes: exactly the new leader's data. Counting the lost segments too
        # would breach it and delete the new leader's oldest segments.
        b1.log.update_config({**b1.topic_props, "retention.bytes": b1.log.size()})
        b1.rlm.run_once(b1.tp)

        remote = remote_of(b1)
        assert remote and all(s.segment_leader_epochs == {1: s.start_offset} for s in remote)
        assert remote[0].start_offset == 0
        assert remote[-1].end_offset == b1.log.active_segment.base_offset - 1
        assert {s.remote_log_segment_id for s in rsm.deletes} == {
            s.remote_log_segment_id for s in lost
        }
        assert len(rsm.deletes) == len(lost)
        assert list(b1.rlmm.list_remote_log_segments(b1.tp, 0)) == []
        assert b1.log.log_start_offset == 0
        assert remote_files(rsm) == finished_segment_files(b1, rsm)
        assert metric(b1, btm("remotedeleterequests_total"), topic="topic") == len(lost)

        b1.log.delete_retention_segments()
        assert b1.log.local_log_start_offset > 0
        records = consume(b1, 0)
        assert offsets(records) == list(range(150))
        assert {r.batch_epoch for r in records} == {1}  # the new leader's history only
    finally:
        c.close()


# A flaky remote storage for a whole run ----------------------------------------------------------
class FlakyRSM(LocalTieredStorage):
    """The real local RSM failing a share of its calls, from a seeded generator: half with a
    retriable, half with a non-retriable ``RemoteStorageException``. A failing copy fails
    either before writing anything or after writing every file; a failing delete either before
    or after removing the files."""

    def __init__(self, seed: int, rate: float) -> None:
        super().__init__()
        self.rng = random.Random(seed)
        self.rate = rate
        self.failures: Counter[str] = Counter()

    def _failure(self, op: str) -> RemoteStorageException | None:
        if self.rng.random() >= self.rate:
            return None
        retriable = self.rng.random() < 0.5
        self.failures[f"{op}-{'retriable' if retriable else 'fatal'}"] += 1
        if retriable:
            return RetriableRemoteStorageException(f"injected retriable failure of {op}")
        return RemoteStorageException(f"injected failure of {op}")

    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        log_segment_data: LogSegmentData,
    ) -> CustomMetadata | None:
        error = self._failure("copy")
        if error is None:
            return super().copy_log_segment_data(remote_log_segment_metadata, log_segment_data)
        if self.rng.random() < 0.5:
            super().copy_log_segment_data(remote_log_segment_metadata, log_segment_data)
            self.failures["copy-after-write"] += 1
        raise error

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        error = self._failure("fetch")
        if error is not None:
            raise error
        return super().fetch_log_segment(remote_log_segment_metadata, start_position, end_position)

    def fetch_index(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata, index_type: IndexType
    ) -> BinaryIO:
        error = self._failure("index")
        if error is not None:
            raise error
        return super().fetch_index(remote_log_segment_metadata, index_type)

    def delete_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata
    ) -> None:
        error = self._failure("delete")
        if error is None:
            super().delete_log_segment_data(remote_log_segment_metadata)
            return
        if self.rng.random() < 0.5:
            super().delete_log_segment_data(remote_log_segment_metadata)
        raise error


def test_flaky_remote_storage_loses_nothing_and_leaves_no_orphan(tmp_path: Path) -> None:
    rsm = FlakyRSM(seed=9, rate=0.1)
    rsm.configure({"dir": str(tmp_path / "remote")})
    h = Harness(tmp_path, rsm=rsm, topic={"internal.segment.bytes": 1200})
    workload = random.Random(956)
    read_failures = 0
    try:
        h.lead()
        for round_ in range(30):
            h.produce(workload.randrange(20, 80))
            if round_ == 15:
                h.lead(1)  # a leader epoch change half-way
            h.tier()
            local_start = h.log.local_log_start_offset
            for _ in range(3 if local_start > 0 else 0):
                offset = workload.randrange(0, local_start)
                try:
                    info = fetch(h, offset, "read_uncommitted", max_bytes=1024)
                except RemoteStorageException:
                    read_failures += 1
                    continue
                got = [r for _, _, rs in iter_batches_with_records(bytes(info.records)) for r in rs]
                assert got[0].offset <= offset <= got[-1].offset
                assert all(r.value == value_of(r.offset) for r in got)
            h.clock.advance(40_000)  # past any backoff (30 s at most, +20% jitter)
        total = h.log.log_end_offset
        # The seed makes the run meet every kind of failure.
        kinds = ("copy", "delete", "fetch", "index")
        assert all(rsm.failures[f"{k}-{how}"] for k in kinds for how in ("retriable", "fatal"))
        assert rsm.failures["copy-after-write"] >= 1
        assert read_failures >= 1

        rsm.rate = 0.0  # the store recovers: one clean pass
        h.tier()
        h.clock.advance(40_000)
        h.tier()
        remote = remote_of(h)
        assert h.log.highest_offset_in_remote_storage == remote[-1].end_offset
        assert h.log.local_log_start_offset == h.log.active_segment.base_offset
        assert [s.start_offset for s in remote[1:]] == [s.end_offset + 1 for s in remote[:-1]]
        assert [(r.offset, r.value) for r in consume(h, 0)] == [
            (o, value_of(o)) for o in range(total)
        ]
        # No orphan: every object in the store belongs to a finished segment the RLMM lists,
        # and no half-done copy or deletion is left in the metadata either.
        assert remote_files(rsm) == finished_segment_files(h, rsm)
        states = Counter(s.state for s in h.rlmm.list_remote_log_segments(h.tp))
        assert set(states) == {FINISHED}, states
    finally:
        h.close()


class _FailingCleanup(LocalTieredStorage):
    """The real local RSM whose ``fail_copy_at``-th copy fails (non-retriable) after writing
    every file, and whose delete of that partial copy fails too."""

    def __init__(self, fail_copy_at: int) -> None:
        super().__init__()
        self.fail_copy_at = fail_copy_at
        self.copies = 0
        self.failed: RemoteLogSegmentMetadata | None = None

    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        log_segment_data: LogSegmentData,
    ) -> CustomMetadata | None:
        self.copies += 1
        result = super().copy_log_segment_data(remote_log_segment_metadata, log_segment_data)
        if self.copies == self.fail_copy_at:
            self.failed = remote_log_segment_metadata
            raise RemoteStorageException("bucket policy changed mid-upload")
        return result

    def delete_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata
    ) -> None:
        if self.failed is not None and remote_log_segment_metadata == self.failed:
            self.failed = None
            raise RetriableRemoteStorageException("throttled")
        super().delete_log_segment_data(remote_log_segment_metadata)


def test_failed_cleanup_of_a_failed_copy_is_retried_behind_retained_segments(
    tmp_path: Path,
) -> None:
    """The copy of the second segment fails after writing its objects and the deletion of that
    partial copy fails too: DELETE_SEGMENT_STARTED stays. With infinite retention the retention
    scan stops at the first (retained) segment and never reaches it; the expiration task must
    still finish that deletion, or its objects stay in the store for ever."""
    rsm = _FailingCleanup(fail_copy_at=2)
    rsm.configure({"dir": str(tmp_path / "remote")})
    h = Harness(tmp_path, rsm=rsm)
    try:
        h.lead()
        h.produce(150)
        copy, expiration = h.rlm.tasks(h.tp)
        assert isinstance(copy, RLMCopyTask) and isinstance(expiration, RLMExpirationTask)
        copy.run()
        states = Counter(s.state for s in remote_of(h, finished_only=False))
        assert states == {FINISHED: 1, RemoteLogSegmentState.DELETE_SEGMENT_STARTED: 1}
        assert remote_files(rsm) != finished_segment_files(h, rsm)  # the partial copy's objects
        expiration.run()
        assert remote_of(h, finished_only=False) == remote_of(h)
        assert remote_files(rsm) == finished_segment_files(h, rsm)
        h.clock.advance(60_000)
        h.tier()
        assert {s.state for s in remote_of(h, finished_only=False)} == {FINISHED}
        assert remote_files(rsm) == finished_segment_files(h, rsm)
        assert offsets(consume(h, 0)) == list(range(150))
    finally:
        h.close()


# The reader pool ---------------------------------------------------------------------------------
class _GatedFetch(LocalTieredStorage):
    """The real local RSM whose segment fetches wait for ``gate`` while ``closed`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False
        self.gate = threading.Event()
        self.entered = threading.Event()

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        if self.closed:
            self.entered.set()
            assert self.gate.wait(DEADLINE_S)
        return super().fetch_log_segment(remote_log_segment_metadata, start_position, end_position)


def test_async_reads_and_a_full_reader_pool_rejects_with_a_retriable_error(
    tmp_path: Path,
) -> None:
    rsm = _GatedFetch()
    rsm.configure({"dir": str(tmp_path / "remote")})
    h = Harness(
        tmp_path,
        rsm=rsm,
        rlm={"remote.log.reader.threads": 1, "remote.log.reader.max.pending.tasks": 1},
    )
    try:
        h.lead()
        h.produce(200)
        h.tier()

        def request(offset: int) -> RemoteStorageFetchInfo:
            return RemoteStorageFetchInfo(4096, True, h.tp, offset, "read_committed")

        future = h.rlm.async_read(request(7))
        info = future.result(timeout=DEADLINE_S)
        assert info.records == h.rlm.read(request(7)).records
        assert info.aborted_transactions == []
        first = next(r for _, _, rs in iter_batches_with_records(bytes(info.records)) for r in rs)
        assert first.offset <= 7

        rsm.closed = True
        running = h.rlm.async_read(request(0))  # takes the only thread
        assert rsm.entered.wait(DEADLINE_S)
        queued = h.rlm.async_read(request(10))  # takes the only pending slot
        queue = "kafka_log_remote_remotestoragethreadpool_remotelogreadertaskqueuesize"
        assert metric(h, queue) == 1
        with pytest.raises(RemoteReadRejectedError) as rejected:
            h.rlm.async_read(request(20))
        assert isinstance(rejected.value, RetriableRemoteStorageException)
        assert h.rlm.reader_pool.rejected_count == 1
        rsm.gate.set()
        assert running.result(timeout=DEADLINE_S).records
        assert queued.result(timeout=DEADLINE_S).records
        # The burst is over: reads are accepted again.
        assert h.rlm.async_read(request(20)).result(timeout=DEADLINE_S).records
    finally:
        rsm.gate.set()
        h.close()


# KIP-956 quotas ----------------------------------------------------------------------------------
def wait_until(condition: Callable[[], bool], timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)


def test_fetch_quota_exceeded_after_remote_reads(tmp_path: Path) -> None:
    h = Harness(tmp_path, rlm={"remote.log.manager.fetch.max.bytes.per.second": 1000})
    try:
        h.lead()
        h.produce(200)
        h.tier()
        assert h.rlm.fetch_throttle_time_ms() == 0
        assert offsets(consume(h, 0)) == list(range(200))  # several KB from remote storage
        throttle = h.rlm.fetch_throttle_time_ms()
        assert throttle > 0  # the node sheds remote reads now (KIP-956)
        assert metric(h, "kafka_server_remotelogmanager_remote_fetch_throttle_time_max") == throttle
        rate = metric(h, "kafka_server_rlmfetch_byte_rate")
        assert rate is not None and rate > 1000
        # Local reads are not throttled by the remote fetch quota.
        assert h.log.read(h.log.local_log_start_offset, 1024).records
    finally:
        h.close()


def _start_copy_run(h: Harness) -> tuple[threading.Thread, threading.Event]:
    done = threading.Event()

    def run() -> None:
        h.rlm.run_once(h.tp)
        done.set()

    thread = threading.Thread(target=run, name="test-copier")
    thread.start()
    # The first segment is copied at once (nothing recorded yet); the copier then waits on the
    # quota, recording its throttle time. The quota runs on the harness's manual clock: the
    # rate cannot fall back below the bound, so the copier waits until the test acts.
    wait_until(lambda: h.rlm.copy_quota.throttle_stats.max() > 0)
    return thread, done


def test_copy_quota_makes_the_copy_task_wait(tmp_path: Path) -> None:
    h = Harness(tmp_path, rlm={"remote.log.manager.copy.max.bytes.per.second": 100})
    try:
        h.lead()
        h.produce(200)
        sealed = len(h.log.sealed_segments())
        assert sealed >= 3
        thread, done = _start_copy_run(h)
        try:
            assert not done.is_set()
            assert h.rlm.copied_segments == 1
            assert len(remote_of(h)) == 1
            throttle = metric(h, "kafka_server_remotelogmanager_remote_copy_throttle_time_max")
            assert throttle is not None and throttle > 1000
            # Raising the quota (dynamic config) lets the waiting copier go on.
            h.rlm.copy_quota.update_quota(LONG_MAX)
            h.rlm.copy_quota_gate.wake_all()
            assert done.wait(DEADLINE_S)
        finally:
            h.rlm.copy_quota.update_quota(LONG_MAX)
            h.rlm.copy_quota_gate.wake_all()
            thread.join(DEADLINE_S)
        assert not thread.is_alive()
        assert h.rlm.copied_segments == sealed
    finally:
        h.close()


def test_stopping_a_partition_releases_a_copier_waiting_on_the_quota(tmp_path: Path) -> None:
    h = Harness(tmp_path, rlm={"remote.log.manager.copy.max.bytes.per.second": 100})
    try:
        h.lead()
        h.produce(200)
        # A waiting copier re-checks the quota only every hour: within the test's deadline,
        # only the cancellation's wake-up can release it.
        h.rlm.copy_quota_gate = CopyQuotaGate(h.rlm.copy_quota, wait_timeout_s=3600.0)
        thread, done = _start_copy_run(h)
        try:
            assert h.rlm.stop_partitions([h.tp]) == {}
            assert done.wait(DEADLINE_S)
        finally:
            h.rlm.copy_quota.update_quota(LONG_MAX)
            h.rlm.copy_quota_gate.wake_all()
            thread.join(DEADLINE_S)
        assert not thread.is_alive()
        assert h.rlm.copied_segments == 1  # nothing copied after the stop
    finally:
        h.close()


# Metrics -----------------------------------------------------------------------------------------
def test_metrics_after_copies_fetches_and_deletes_then_stop_partitions(tmp_path: Path) -> None:
    h, rsm, _ = counting_harness(tmp_path)
    try:
        h.lead()
        h.produce(300)
        h.tier()
        remote = remote_of(h)
        sizes = [s.segment_size_in_bytes for s in remote]
        assert len(rsm.copies) == len(remote) >= 4
        for labels in ({"topic": "topic"}, {}):
            assert metric(h, btm("remotecopyrequests_total"), **labels) == len(remote)
            assert metric(h, btm("remotecopybytes_total"), **labels) == sum(sizes)
        assert metric(h, btm("remotelogsizebytes"), topic="topic") == sum(sizes)
        assert metric(h, btm("remotelogmetadatacount"), topic="topic") == len(remote)
        assert metric(h, btm("remotecopylagsegments"), topic="topic") == 0
        assert metric(h, btm("remotecopylagbytes"), topic="topic") == 0
        percent = "kafka_log_remote_remotelogmanager_retentionsizein_percent"
        local_percent = "kafka_log_remote_remotelogmanager_localretentionsizein_percent"
        labels = {"topic": "topic", "partition": "0"}
        assert metric(h, percent, **labels) == 0  # retention.bytes=-1

        reads = fetched = 0
        offset = 0
        while offset < h.log.local_log_start_offset:
            info = h.rlm.read(RemoteStorageFetchInfo(2048, True, h.tp, offset))
            reads += 1
            fetched += len(info.records)
            batches = iter_batches_with_records(bytes(trim_partial_batch(info).records))
            offset = max(header.next_offset for _, header, _ in batches)
        assert metric(h, btm("remotefetchrequests_total"), topic="topic") == reads
        assert metric(h, btm("remotefetchbytes_total"), topic="topic") == fetched
        assert not metric(h, btm("remotefetcherrors_total"), topic="topic")
        timer = "kafka_log_remote_remotelogmanager_remotelogreaderfetchrateandtimems_count"
        assert metric(h, timer) == reads

        # Size retention: keep all but the two oldest remote segments.
        only_local = h.log.only_local_log_segments_size()
        retention = only_local + sum(sizes[2:])
        h.log.update_config({**h.topic_props, "retention.bytes": retention})
        h.rlm.run_once(h.tp)
        assert [(s.start_offset, s.end_offset) for s in rsm.deletes] == [
            (s.start_offset, s.end_offset) for s in remote[:2]
        ]
        assert metric(h, btm("remotedeleterequests_total"), topic="topic") == 2
        assert metric(h, btm("remotedeleterequests_total")) == 2
        assert metric(h, btm("remotedeletelagsegments"), topic="topic") == 0
        assert metric(h, btm("remotedeletelagbytes"), topic="topic") == 0
        assert metric(h, percent, **labels) == (only_local + sum(sizes)) * 100 // retention
        assert metric(h, local_percent, **labels) == h.log.size() * 100 // 1
        h.rlm.run_once(h.tp)  # the sizes after the deletions
        assert metric(h, btm("remotelogsizebytes"), topic="topic") == sum(sizes[2:])
        assert metric(h, btm("remotelogmetadatacount"), topic="topic") == len(remote) - 2
        assert metric(h, percent, **labels) == (only_local + sum(sizes[2:])) * 100 // retention

        assert h.rlm.stop_partitions([h.tp]) == {}
        # The partition's gauges are gone (the topic's sums fall to 0); its meters stay.
        for gauge in ("remotelogsizebytes", "remotelogmetadatacount", "remotecopylagbytes"):
            assert metric(h, btm(gauge), topic="topic") == 0
            assert metric(h, btm(gauge)) == 0
        assert metric(h, percent, **labels) is None
        assert metric(h, local_percent, **labels) is None
        assert metric(h, btm("remotecopyrequests_total"), topic="topic") == len(remote)
    finally:
        h.close()


def test_leadership_loss_drops_the_retention_percent_gauges(tmp_path: Path) -> None:
    h = Harness(tmp_path, topic={"retention.bytes": 1 << 30})
    try:
        h.lead()
        h.produce(200)
        h.tier()
        labels = {"topic": "topic", "partition": "0"}
        percent = "kafka_log_remote_remotelogmanager_retentionsizein_percent"
        assert metric(h, percent, **labels) == h.log.size() * 100 // (1 << 30) == 0
        h.produce(10)
        h.rlm.on_leadership_change([], [h.log])  # now a follower: no expiration task
        assert metric(h, percent, **labels) is None
    finally:
        h.close()


def test_expiration_task_keeps_its_all_segments_valid_cache(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    try:
        h.lead()
        h.produce(300)
        h.tier()
        expiration = next(t for t in h.rlm.tasks(h.tp) if isinstance(t, RLMExpirationTask))
        remote = remote_of(h)
        keep = sum(s.segment_size_in_bytes for s in remote[1:])
        h.log.update_config(
            {**h.topic_props, "retention.bytes": h.log.only_local_log_segments_size() + keep}
        )
        h.rlm.run_once(h.tp)  # a breach: every segment checked, all in the lineage
        assert len(remote_of(h)) == len(remote) - 1
        assert expiration.all_segments_valid
        h.rlm.run_once(h.tp)  # within retention: nothing checked, nothing learnt
        assert expiration.all_segments_valid
    finally:
        h.close()


# Scheduled tasks ---------------------------------------------------------------------------------
class _GatedCopy(LocalTieredStorage):
    """The real local RSM whose copies wait for ``gate`` while ``closed`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False
        self.gate = threading.Event()
        self.entered = threading.Event()

    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        log_segment_data: LogSegmentData,
    ) -> CustomMetadata | None:
        if self.closed:
            self.entered.set()
            assert self.gate.wait(DEADLINE_S)
        return super().copy_log_segment_data(remote_log_segment_metadata, log_segment_data)


def test_scheduled_tasks_trigger_and_stop_partitions_waits_for_a_copy_in_progress(
    tmp_path: Path,
) -> None:
    """The same manager with its pools: leadership schedules the tasks (first run at once),
    ``trigger`` runs them again before the interval, and ``stop_partitions`` does not return
    while the partition's copy still writes."""
    rsm = _GatedCopy()
    rsm.configure({"dir": str(tmp_path / "remote")})
    h = Harness(tmp_path, rsm=rsm)
    config, _ = RemoteLogManagerConfig.from_props(
        {"remote.log.manager.task.interval.ms": 3_600_000}
    )
    rlm = RemoteLogManager(config, rsm, h.rlmm, broker_id=0, log_dir=h.log_dir, clock_ms=h.clock)
    try:
        h.produce(200)
        h.log.assign_epoch_start_offset(0, 0)
        rlm.on_leadership_change([h.log])
        copy = next(t for t in rlm.tasks(h.tp) if isinstance(t, RLMCopyTask))
        assert copy.scheduled is not None and copy.scheduled.wait_runs(1, timeout=DEADLINE_S)
        sealed = len(h.log.sealed_segments())
        assert rlm.copied_segments == sealed
        h.produce(100)
        rlm.trigger(h.tp)
        assert copy.scheduled.wait_runs(2, timeout=DEADLINE_S)
        assert rlm.copied_segments == len(h.log.sealed_segments()) > sealed

        rsm.closed = True
        h.produce(100)
        rlm.trigger(h.tp)
        assert rsm.entered.wait(DEADLINE_S)
        stopper = threading.Thread(target=rlm.stop_partitions, args=([h.tp],))
        stopper.start()
        wait_until(lambda: copy.cancelled)  # stop_partitions has cancelled the copy task...
        assert stopper.is_alive()  # ...and waits for its copy in progress, held at the gate
        before = rlm.copied_segments
        rsm.gate.set()
        stopper.join(DEADLINE_S)
        assert not stopper.is_alive()
        assert not copy.scheduled.running
        assert rlm.copied_segments == before + 1  # that copy finished; no other one started
        assert rlm.partitions == []
    finally:
        rsm.gate.set()
        rlm.close()
        h.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("kafka-rlm-")]
