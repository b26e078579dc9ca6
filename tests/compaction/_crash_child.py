"""A compacted partition whose cleaning round or expiration is killed (SIGKILL) half-way.

The child half of ``test_crash.py``. It reopens a partition persisted under ``--root`` (the
``LocalLog`` in ``logs/``, the ``local`` RSM in ``remote/``, the ``embedded`` RLMM in ``rlmm/``,
Kafka's ``cleaner-offset-checkpoint`` beside the partition) as a restarted node would: the RLM
leads it and its copy task runs once, which finds the highest offset in remote storage and the
log start offset from the RLMM. Then it runs ``--steps`` in order and exits 0:

- ``clean``: one round of the node's log cleaner on the partition (``LogCleanerManager
  .clean_partition``, ``force``), through remote storage (``TieredCleaner``) on the engine
  ``--engine`` (this process, or Spark), at ``--now-ms`` and ``--epoch``;
- ``expire``: one run of the RLM's expiration task, the superseded delay 0, its clock
  ``EXPIRE_AFTER_MS`` after ``--now-ms`` (see ``EXPIRE_AFTER_MS`` for why);
- ``clean-local``: one round of the in-place cleaner on ``logs/table-0``, a compacted topic
  that is not tiered (``clean_partition_dir``, ``force``).

Nothing here injects a fault: the test sets ``TIERLOG_COMPACTION_KILL_AT`` (and
``TIERLOG_COMPACTION_KILL_ONCE``) in the child's environment, and the code under test kills
itself at that point (``tierlog.compaction.faults``). The same functions run in the test's
process for the reference rounds and the reruns that need no fresh process.

Run by path (``python tests/compaction/_crash_child.py --root ...``); a run that is not killed
prints a JSON summary on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tierlog.compaction.cleaner import CleanResult
from tierlog.compaction.config import CleanerConfig
from tierlog.compaction.engine import CleanEngine, PythonEngine
from tierlog.compaction.manager import CleanerTarget, LogCleanerManager
from tierlog.compaction.offline import clean_partition_dir
from tierlog.compaction.remote_io import StorageSpec, register_open
from tierlog.compaction.tiered import TieredCleaner, TieredCleanResult
from tierlog.log.batch import build_batch
from tierlog.log.cleaner_checkpoint import CleanerOffsetCheckpoints
from tierlog.log.local_log import LocalLog
from tierlog.log.record import Record
from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager
from tierlog.rlm.config import RemoteLogManagerConfig
from tierlog.rlm.manager import RemoteLogManager
from tierlog.spi import TopicIdPartition, TopicPartition, Uuid
from tierlog.storage.local import LocalTieredStorage

__all__ = [
    "BROKER_ID",
    "EXPIRE_AFTER_MS",
    "LOCAL_NAME",
    "LOCAL_TOPIC",
    "TIERED_NAME",
    "TIERED_TOPIC",
    "TIP",
    "Partition",
    "clean",
    "clean_local",
    "expire",
    "open_partition",
    "produce",
    "run",
]

TOPIC_ID: Final = Uuid.from_string("crashTestTopicId0000AA")
TIERED_NAME: Final = "topic-0"
TIP: Final = TopicIdPartition(TOPIC_ID, "topic", 0)
LOCAL_NAME: Final = "table-0"
BROKER_ID: Final = 0
DAY_MS: Final = 86_400_000

_SEGMENTS: Final[Mapping[str, object]] = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": 0.01,
    "min.compaction.lag.ms": 0,
    "delete.retention.ms": DAY_MS,
    "internal.segment.bytes": 1024,
    "segment.index.bytes": 4096,
    "index.interval.bytes": 100,
}
TIERED_TOPIC: Final[Mapping[str, object]] = {**_SEGMENTS, "remote.storage.enable": True}
"""A tiered compacted topic with ~1 KiB segments (two or three batches each)."""
LOCAL_TOPIC: Final[Mapping[str, object]] = dict(_SEGMENTS)
"""The same topic, not tiered: cleaned in place."""

EXPIRE_AFTER_MS: Final = DAY_MS
"""The expiration task's clock is this far past the round's ``now``. The cleaner stamps the
COPY_SEGMENT_FINISHED of a cleaned segment with the wall clock, not the round's ``now``, and the
expiration task waits until its own clock passes that stamp (plus the superseded delay, 0 here)
before it deletes the segment the cleaned one replaced: a day covers a test's real duration."""


@dataclass
class Clock:
    """Milliseconds, set by the steps."""

    now: int

    def __call__(self) -> int:
        return self.now


@dataclass
class Partition:
    """A tiered compacted partition reopened by a restarted node (see the module docstring)."""

    root: Path
    clock: Clock
    log: LocalLog
    rsm: LocalTieredStorage
    rlmm: EmbeddedRemoteLogMetadataManager
    rlm: RemoteLogManager
    storage: StorageSpec

    @property
    def checkpoints(self) -> CleanerOffsetCheckpoints:
        return CleanerOffsetCheckpoints(self.log.dir.parent)

    def task(self, kind: str) -> Any:
        return next(t for t in self.rlm.tasks(TIP) if t.kind == kind)

    def close(self) -> None:
        self.rlm.close()
        self.log.close()
        self.rsm.close()
        self.rlmm.close()


def storage_dir(root: Path) -> Path:
    return root / "remote"


def open_rsm(root: Path) -> LocalTieredStorage:
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(storage_dir(root)), "node.id": str(BROKER_ID)})
    return rsm


def open_rlmm(root: Path) -> EmbeddedRemoteLogMetadataManager:
    rlmm = EmbeddedRemoteLogMetadataManager()
    rlmm.configure({"dir": str(root / "rlmm")})
    return rlmm


def open_log(root: Path, clock: Callable[[], int], *, tiered: bool = True) -> LocalLog:
    directory = root / "logs" / (TIERED_NAME if tiered else LOCAL_NAME)
    tp = TopicPartition(TIP.topic if tiered else "table", 0)
    return LocalLog.open(
        directory,
        TIERED_TOPIC if tiered else LOCAL_TOPIC,
        topic_id=TOPIC_ID if tiered else None,
        clock=clock,
        high_watermark_follows_leo=True,
        cleaner_offset=CleanerOffsetCheckpoints(directory.parent).get(tp),
    )


@contextmanager
def open_partition(root: Path, now_ms: int, *, epoch: int = 0) -> Iterator[Partition]:
    """The tiered partition on ``root``, led at ``epoch`` (a new epoch starts at the log end),
    its RLM's copy task run once."""
    clock = Clock(now_ms)
    rsm = open_rsm(root)
    rlmm = open_rlmm(root)
    log = open_log(root, clock)
    latest = log.latest_epoch()
    if latest is None or epoch > latest:
        log.assign_epoch_start_offset(epoch, log.log_end_offset)
    config, unknown = RemoteLogManagerConfig.from_props(
        {"remote.log.manager.task.interval.ms": 3_600_000}
    )
    assert not unknown, unknown
    rlm = RemoteLogManager(
        config,
        rsm,
        rlmm,
        broker_id=BROKER_ID,
        log_dir=root / "logs",
        clock_ms=clock,
        schedule_tasks=False,
    )
    rlm.superseded_delete_delay_ms = 0
    storage = StorageSpec.of("local", {"dir": str(storage_dir(root)), "node.id": str(BROKER_ID)})
    register_open(storage, rsm)
    partition = Partition(root, clock, log, rsm, rlmm, rlm, storage)
    try:
        rlm.on_leadership_change([log], [])
        copy = partition.task("copy task")
        copy.run()
        if copy.last_error is not None:
            raise copy.last_error
        yield partition
    finally:
        partition.close()


# The workload --------------------------------------------------------------------------------
def produce(log: LocalLog, now_ms: int, *, batches: int = 40, keys: int = 12) -> None:
    """``batches`` batches of 3 records over ``keys`` keys (tombstones among them, one the
    latest record of its key), timestamps just before ``now_ms``, then a roll: every record is
    in a sealed segment."""
    for i in range(batches):
        records = []
        for j in range(3):
            n = i * 3 + j
            key = f"k{n % keys}".encode()
            value = None if n % 13 == 11 else f"value-{n}-".encode() * 8
            records.append(Record(j, now_ms - 60_000 + n, key, value))
        log.append_as_leader(build_batch(records), 0)
    log.roll()


# The steps -----------------------------------------------------------------------------------
def clean(
    partition: Partition, *, epoch: int, engine: CleanEngine | None = None
) -> TieredCleanResult:
    """One forced round of the node's cleaner (through remote storage) at the clock's ``now``."""
    log = partition.log
    cleaner = TieredCleaner(
        partition.rlmm,
        partition.rsm,
        partition.storage,
        broker_id=BROKER_ID,
        scratch=str(partition.root / "scratch"),
    )
    target = CleanerTarget(TIP, log, epoch, partition.checkpoints)
    manager = LogCleanerManager(
        CleanerConfig(log_cleaner_enable=False, remote_log_compaction_engine="python"),
        lambda: [target],
        cleaner,
        clock=partition.clock,
        engine=engine or PythonEngine(),
    )
    result = manager.clean_partition(TIP.topic, TIP.partition, force=True)
    assert isinstance(result, TieredCleanResult)
    return result


def expire(partition: Partition, now_ms: int) -> None:
    """One run of the expiration task at ``now_ms + EXPIRE_AFTER_MS``; its error is raised."""
    partition.clock.now = now_ms + EXPIRE_AFTER_MS
    task = partition.task("expiration task")
    task.run()
    if task.last_error is not None:
        raise task.last_error


def clean_local(root: Path, now_ms: int) -> CleanResult:
    """One forced in-place round on the non-tiered partition (checkpoint file updated)."""
    return clean_partition_dir(
        root / "logs" / LOCAL_NAME, config=LOCAL_TOPIC, now_ms=now_ms, force=True
    )


def spark_engine(master: str, conf: Mapping[str, str]) -> CleanEngine:
    """A Spark engine on a session this process starts (``tierlog[spark]``)."""
    from tierlog.compaction.spark_engine import SparkEngine
    from tierlog.compaction.spark_session import SparkSettings, spark_session

    return SparkEngine(
        spark_session(SparkSettings(master=master, app_name="tierlog-crash", conf=dict(conf)))
    )


def run(
    root: Path,
    steps: Sequence[str],
    *,
    now_ms: int,
    epoch: int = 0,
    engine: CleanEngine | None = None,
) -> dict[str, Any]:
    """Run ``steps`` on ``root`` (see the module docstring); returns a summary."""
    summary: dict[str, Any] = {}
    tiered = [s for s in steps if s != "clean-local"]
    if tiered:
        with open_partition(root, now_ms, epoch=epoch) as partition:
            for step in tiered:
                if step == "clean":
                    result = clean(partition, epoch=epoch, engine=engine)
                    summary["cleaned"] = result.cleaned
                    summary["end_offset"] = result.end_offset
                    summary["published"] = len(result.published)
                elif step == "expire":
                    expire(partition, now_ms)
                else:
                    raise SystemExit(f"unknown step {step!r}")
    if "clean-local" in steps:
        local = clean_local(root, now_ms)
        summary["local_cleaned"] = local.cleaned
        summary["local_end_offset"] = local.end_offset
        summary["local_segments_written"] = local.segments_written
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument(
        "--steps", required=True, help="comma-separated: clean, expire, clean-local"
    )
    parser.add_argument("--now-ms", type=int, required=True)
    parser.add_argument("--epoch", type=int, default=0)
    parser.add_argument("--engine", choices=("python", "spark"), default="python")
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    engine = None
    if args.engine == "spark":
        conf = dict(item.split("=", 1) for item in args.spark_conf)
        engine = spark_engine(args.spark_master, conf)
    try:
        summary = run(
            args.root, args.steps.split(","), now_ms=args.now_ms, epoch=args.epoch, engine=engine
        )
    finally:
        if engine is not None:
            from tierlog.compaction.spark_session import stop_spark_session

            stop_spark_session()
    json.dump(summary, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
