"""A partition tiered by a real RemoteLogManager: local log, `local` RSM and `embedded` RLMM.

Shared by the RLM scenario tests. Nothing is mocked: the log writes Kafka segments in a temp
directory, the RSM copies them to another, the RLMM persists its records; the clock is injected
so retention by time and backoff are deterministic. Tasks are not scheduled
(``schedule_tasks=False``): tests drive them with ``run_once`` and see every step.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from tierlog.log.batch import build_batch
from tierlog.log.local_log import LocalLog
from tierlog.log.reader import iter_batches_with_records
from tierlog.log.record import Record
from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager
from tierlog.rlm.config import RemoteLogManagerConfig
from tierlog.rlm.manager import RemoteLogManager
from tierlog.rlm.remote_read import RemoteStorageFetchInfo, trim_partial_batch
from tierlog.spi import RemoteLogSegmentState, RemoteStorageManager, TopicIdPartition, Uuid
from tierlog.storage.local import LocalTieredStorage

NOW = 1_700_000_000_000
TOPIC_ID = Uuid.from_string("tierlogRLMtestTopicIdA")


class Clock:
    """Milliseconds, moved by hand."""

    def __init__(self, now: int = NOW) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def value_of(offset: int) -> bytes:
    """Deterministic record content, so any record read back can be checked."""
    return b"value-%08d-" % offset + bytes((offset * 7 + i) % 251 for i in range(40))


def key_of(offset: int) -> bytes:
    return b"key-%d" % offset


DEFAULT_TOPIC: dict[str, object] = {
    "remote.storage.enable": True,
    "internal.segment.bytes": 4096,
    "segment.index.bytes": 1024,
    "index.interval.bytes": 256,
    "retention.ms": -1,
    "retention.bytes": -1,
    "local.retention.bytes": 1,
}


class Harness:
    """One partition ``topic-0`` led by ``rlm`` on node 0."""

    def __init__(
        self,
        root: Path,
        *,
        clock: Clock | None = None,
        topic: Mapping[str, object] | None = None,
        rlm: Mapping[str, object] | None = None,
        rsm: RemoteStorageManager | None = None,
        rlmm: EmbeddedRemoteLogMetadataManager | None = None,
        broker_id: int = 0,
        log_name: str = "topic-0",
    ) -> None:
        self.root = root
        self.clock = clock or Clock()
        self.log_dir = root / f"logs-{broker_id}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if rsm is None:
            local = LocalTieredStorage()
            local.configure({"dir": str(root / "remote")})
            rsm = local
        self.rsm = rsm
        if rlmm is None:
            rlmm = EmbeddedRemoteLogMetadataManager()
            rlmm.configure({"dir": str(root / "rlmm")})
        self.rlmm = rlmm
        self.topic_props = {**DEFAULT_TOPIC, **(topic or {})}
        self.log = LocalLog.open(
            self.log_dir / log_name,
            self.topic_props,
            topic_id=TOPIC_ID,
            clock=self.clock,
            sync=False,
            high_watermark_follows_leo=True,
        )
        self.tp = TopicIdPartition(TOPIC_ID, self.log.topic_partition.topic, 0)
        props: dict[str, object] = {"remote.log.manager.task.interval.ms": 3_600_000}
        props.update(rlm or {})
        config, unknown = RemoteLogManagerConfig.from_props(props)
        assert not unknown, unknown
        self.rlm = RemoteLogManager(
            config,
            self.rsm,
            self.rlmm,
            broker_id=broker_id,
            log_dir=self.log_dir,
            clock_ms=self.clock,
            schedule_tasks=False,
        )
        self.epoch = 0
        self.next_value = 0

    # Producing -----------------------------------------------------------------------------------
    def produce(self, count: int, *, per_batch: int = 5, epoch: int | None = None) -> None:
        """Append ``count`` records (``per_batch`` per batch) as leader in ``epoch``."""
        epoch = self.epoch if epoch is None else epoch
        done = 0
        while done < count:
            n = min(per_batch, count - done)
            first = self.log.log_end_offset
            # A producer's batch starts at offset 0; the log assigns the real offsets.
            records = [
                Record(i, self.clock.now, key_of(first + i), value_of(first + i)) for i in range(n)
            ]
            self.log.append_as_leader(build_batch(records), epoch)
            done += n

    def lead(self, epoch: int | None = None) -> None:
        """Become leader (at ``epoch``: the log records the epoch's start at its end offset)."""
        if epoch is not None:
            self.epoch = epoch
        self.log.assign_epoch_start_offset(self.epoch, self.log.log_end_offset)
        self.rlm.on_leadership_change([self.log], [])

    def tier(self) -> None:
        """One copy + expiration pass, then local retention (what a node does periodically)."""
        self.rlm.run_once(self.tp)
        self.log.delete_retention_segments()

    # Inspecting ----------------------------------------------------------------------------------
    def remote_segments(self, *, finished_only: bool = True) -> list[object]:
        segments = list(self.rlmm.list_remote_log_segments(self.tp))
        if finished_only:
            segments = [
                s for s in segments if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
            ]
        return sorted(segments, key=lambda s: s.start_offset)  # type: ignore[attr-defined]

    def consume(self, start: int = 0, *, isolation: str = "read_uncommitted") -> Iterator[Record]:
        """Every record from ``start`` to the high watermark: remote below the local log start,
        local above, as a consumer sees it."""
        offset = start
        while offset < self.log.high_watermark:
            if offset < self.log.local_log_start_offset:
                info = trim_partial_batch(
                    self.rlm.read(
                        RemoteStorageFetchInfo(
                            max_bytes=64 * 1024,
                            min_one_message=True,
                            topic_id_partition=self.tp,
                            fetch_offset=offset,
                            isolation=isolation,
                        )
                    )
                )
            else:
                info = self.log.read(offset, 64 * 1024, isolation)  # type: ignore[arg-type]
            data = bytes(info.records)
            progressed = False
            for _, header, records in iter_batches_with_records(data, verify_crc=True):
                for r in records:
                    if r.offset >= offset:
                        yield r
                        offset = r.offset + 1
                        progressed = True
                if header.last_offset + 1 > offset:
                    offset = header.last_offset + 1
                    progressed = True
            assert progressed, f"no progress reading at {offset}"

    def close(self) -> None:
        self.rlm.close()
        self.log.close()
        self.rsm.close()
        self.rlmm.close()
