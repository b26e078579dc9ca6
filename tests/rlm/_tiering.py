"""Test helpers for the remote read path: real segments, tiered into a real RSM and RLMM.

``tier`` does for a ``LocalLog``'s sealed segments what the RLM copy task does (Kafka's
``copyLogSegment``): add the metadata as ``COPY_SEGMENT_STARTED``, copy the files with the RSM,
update the metadata to ``COPY_SEGMENT_FINISHED``, advance the log's highest offset in remote
storage. Everything is real: the ``local`` RSM (wrapped in a subclass that counts requests, not a
mock) and the ``embedded`` RLMM, on segments a ``LocalLog`` wrote.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from tierlog.log.batch import ControlRecordType, build_batch, build_control_batch
from tierlog.log.local_log import LocalLog
from tierlog.log.record import Record
from tierlog.log.segment import LogSegment
from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager
from tierlog.spi import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    Uuid,
)
from tierlog.storage.local import LocalTieredStorage

NOW = 1_700_000_000_000
TOPIC_ID = Uuid.from_string("RuB4a0pkRrS8hgDZ5Jrp_A")
TIP = TopicIdPartition(TOPIC_ID, "topic", 0)
BROKER_ID = 0

SMALL_SEGMENTS: dict[str, object] = {
    "remote.storage.enable": True,
    "internal.segment.bytes": 600,
    "segment.index.bytes": 4096,
    "index.interval.bytes": 100,
}
"""A tiered topic whose segments hold a handful of batches, with an offset index entry about
every 100 bytes, so reads cross batches, index entries and segments."""


class Clock:
    """Milliseconds, moved by hand."""

    def __init__(self, now: int = NOW) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@dataclass(frozen=True)
class SegmentRequest:
    segment_id: Uuid
    start: int
    end: int | None


class CountingStorage(LocalTieredStorage):
    """The ``local`` RSM, recording every ``fetch_log_segment`` and ``fetch_index`` call."""

    def __init__(self) -> None:
        super().__init__()
        self._count_lock = threading.Lock()
        self.segment_requests: list[SegmentRequest] = []
        self.index_requests: list[tuple[Uuid, IndexType]] = []

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        with self._count_lock:
            self.segment_requests.append(
                SegmentRequest(
                    remote_log_segment_metadata.remote_log_segment_id.id,
                    start_position,
                    end_position,
                )
            )
        return super().fetch_log_segment(remote_log_segment_metadata, start_position, end_position)

    def fetch_index(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata, index_type: IndexType
    ) -> BinaryIO:
        with self._count_lock:
            self.index_requests.append(
                (remote_log_segment_metadata.remote_log_segment_id.id, index_type)
            )
        return super().fetch_index(remote_log_segment_metadata, index_type)

    def index_fetches(self, index_type: IndexType | None = None) -> int:
        with self._count_lock:
            return sum(1 for _, t in self.index_requests if index_type in (None, t))

    def reset_counts(self) -> None:
        with self._count_lock:
            self.segment_requests.clear()
            self.index_requests.clear()


def open_rsm(directory: Path) -> CountingStorage:
    rsm = CountingStorage()
    rsm.configure({"dir": str(directory), "node.id": str(BROKER_ID)})
    return rsm


def open_rlmm(directory: Path, *tips: TopicIdPartition) -> EmbeddedRemoteLogMetadataManager:
    rlmm = EmbeddedRemoteLogMetadataManager()
    rlmm.configure({"dir": str(directory)})
    rlmm.on_partition_leadership_changes(set(tips or (TIP,)), set())
    return rlmm


def open_log(directory: Path, clock: Clock, **props: object) -> LocalLog:
    """A tiered log with small segments (``SMALL_SEGMENTS``, overridden by ``props``)."""
    config = {**SMALL_SEGMENTS, **props}
    return LocalLog.open(
        directory,
        config,
        clock=clock,
        sync=False,
        topic_id=TOPIC_ID,
        high_watermark_follows_leo=True,
    )


# Building data ---------------------------------------------------------------------------------
def batch(*values: str, ts: int = NOW - 10_000, **kwargs: object) -> bytes:
    """A producer's batch of ``values`` (offsets are assigned by the log)."""
    records = [Record(i, ts + i, None, v.encode()) for i, v in enumerate(values)]
    return build_batch(records, **kwargs)  # type: ignore[arg-type]


def txn_batch(pid: int, seq: int, *values: str, epoch: int = 0, ts: int = NOW - 10_000) -> bytes:
    return batch(
        *values,
        ts=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )


def marker(kind: ControlRecordType, pid: int, epoch: int = 0) -> bytes:
    return build_control_batch(kind, 0, timestamp=NOW, producer_id=pid, producer_epoch=epoch)


def fill(
    log: LocalLog,
    count: int,
    *,
    epoch: int = 0,
    ts: int = NOW - 10_000,
    values_per_batch: int = 1,
    size: int = 30,
) -> None:
    """Append ``count`` batches of ``values_per_batch`` values of ``size`` bytes, each record's
    value naming its offset (``v<offset>``) and its timestamp ``ts + offset``."""
    for _ in range(count):
        first = log.log_end_offset
        records = [
            Record(i, ts + first + i, None, f"v{first + i}".ljust(size, ".").encode())
            for i in range(values_per_batch)
        ]
        log.append_as_leader(build_batch(records), epoch)


# Tiering ---------------------------------------------------------------------------------------
@dataclass
class Tiered:
    """What ``tier`` copied: the finished metadata of each segment, in offset order."""

    segments: list[RemoteLogSegmentMetadata] = field(default_factory=list)

    def covering(self, offset: int) -> RemoteLogSegmentMetadata:
        return next(s for s in self.segments if s.start_offset <= offset <= s.end_offset)


def tier(
    log: LocalLog,
    rsm: LocalTieredStorage,
    rlmm: EmbeddedRemoteLogMetadataManager,
    segments: Iterable[LogSegment] | None = None,
    *,
    tip: TopicIdPartition = TIP,
    now: int = NOW,
    finish: bool = True,
) -> list[RemoteLogSegmentMetadata]:
    """Copy ``segments`` (default: every sealed segment above the highest offset already in
    remote storage) as the RLM copy task does; the metadata of each, ``COPY_SEGMENT_FINISHED``
    unless ``finish`` is false (then left ``COPY_SEGMENT_STARTED``)."""
    if segments is None:
        highest = log.highest_offset_in_remote_storage
        segments = [s for s in log.sealed_segments() if s.base_offset > highest]
    copied: list[RemoteLogSegmentMetadata] = []
    for segment in segments:
        inputs = log.segment_copy_inputs(segment)
        metadata = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(tip),
            inputs.start_offset,
            inputs.end_offset,
            inputs.largest_timestamp,
            BROKER_ID,
            now,
            inputs.size_in_bytes,
            inputs.segment_leader_epochs,
            txn_idx_empty=inputs.txn_index_empty,
        )
        rlmm.add_remote_log_segment_metadata(metadata).result()
        custom = rsm.copy_log_segment_data(metadata, inputs.data)
        if finish:
            update = RemoteLogSegmentMetadataUpdate(
                metadata.remote_log_segment_id,
                now,
                custom,
                RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                BROKER_ID,
            )
            rlmm.update_remote_log_segment_metadata(update).result()
            metadata = metadata.create_with_updates(update)
            log.update_highest_offset_in_remote_storage(inputs.end_offset)
        copied.append(metadata)
    return copied


def delete_remote(
    rsm: LocalTieredStorage,
    rlmm: EmbeddedRemoteLogMetadataManager,
    metadata: RemoteLogSegmentMetadata,
    *,
    now: int = NOW,
    publish: bool = True,
) -> None:
    """Delete a segment as the expiration task does (DELETE_STARTED, data, DELETE_FINISHED);
    with ``publish=False`` only the data goes (a deletion racing a reader's lookup)."""
    states = (
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
        RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,
    )
    if publish:
        rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                metadata.remote_log_segment_id, now, None, states[0], BROKER_ID
            )
        ).result()
    rsm.delete_log_segment_data(metadata)
    if publish:
        rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                metadata.remote_log_segment_id, now, None, states[1], BROKER_ID
            )
        ).result()


def offsets_of(records: bytes | bytearray) -> list[int]:
    """The offsets of the records in the whole batches of ``records`` (a partial tail ignored)."""
    from tierlog.log.reader import iter_batches_with_records
    from tierlog.log.segment import batch_spans

    whole = bytes(records[: batch_spans(records)])
    return [r.offset for _, _, rs in iter_batches_with_records(whole) for r in rs]


def segment_bases(log: LocalLog) -> Sequence[int]:
    return [s.base_offset for s in log.segments]
