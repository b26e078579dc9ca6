"""A tiered partition that kills itself (SIGKILL) at a named step of copy or delete.

The child half of ``test_faults.py``. It opens the ``_harness`` setup (``LocalLog`` + ``local``
RSM + ``embedded`` RLMM + ``RemoteLogManager``, tasks not scheduled) on ``--root``, resumes
from whatever the directory holds, and runs a deterministic workload: round ``r`` sets the
injected clock to ``NOW + r * STEP_MS``, appends ``PER_ROUND`` records, then runs one tiering
pass (copy task, expiration task, local retention). ``retention.ms`` makes the expiration task
delete remote segments a few rounds later; ``local.retention.bytes=1`` makes local retention
delete every segment the copy gate allows. Local retention also runs at every copy and delete
kill point (the log cleaner is concurrent with the RLM tasks) and first thing after a restart,
before the RLM knows what remote storage holds. With ``--quiesce`` it then runs passes at a
fixed clock until nothing changes.

Kill points are injected without touching production code: the real RSM, RLMM and log are
subclassed (and the RSM's module-level ``_copy_fd`` wrapped) so that the ``--nth`` time the
step named by ``--kill`` is reached, the process sends itself ``SIGKILL``. Every kill point is
listed in ``KILL_POINTS`` with what the process has durably done when it dies.

Files it keeps beside the partition (all appended or replaced with ``fsync``):

- ``clock``: the clock value, so a restart never goes back in time;
- ``ledger.jsonl``: the log end offset after each produced round (what must never be lost);
- ``audit.jsonl``: before every local segment deletion, the segments deleted with their offset
  ranges and the SHA-256 of their data and indexes, the log start offset, the highest offset in
  remote storage and the offset ranges of every ``COPY_SEGMENT_FINISHED`` remote segment at
  that moment.

Run as ``python -m tests.rlm._fault_child`` from the repository root or by path; a run that is
not killed prints a JSON summary on stdout and exits 0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from unittest import mock

from tierlog.log.files import DELETED_FILE_SUFFIX
from tierlog.log.local_log import LocalLog
from tierlog.log.segment import LogSegment
from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager
from tierlog.spi import (
    CustomMetadata,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.storage import local as local_storage
from tierlog.storage.local import LocalTieredStorage

try:  # as a module of a package: ``tests.rlm`` (python -m) or pytest's ``rlm``
    from . import _harness
except ImportError:  # run by path: this file's directory is sys.path[0]
    import _harness  # type: ignore[no-redef,import-not-found]

__all__ = [
    "KILL_POINTS",
    "NOW",
    "PER_ROUND",
    "RETENTION_MS",
    "STEP_MS",
    "TOPIC",
    "expected_timestamp",
    "read_lines",
    "run",
    "segment_digests",
]

NOW: Final = _harness.NOW
PER_ROUND: Final = 50
"""Records appended per round (in batches of ``PER_BATCH``): about one segment's worth."""
PER_BATCH: Final = 5
STEP_MS: Final = 1_000
"""The clock moves by this much between rounds."""
RETENTION_MS: Final = 3_500
"""Remote (total) retention: a segment expires 3.5 rounds after its newest record."""
TOPIC: Final[Mapping[str, object]] = {
    "retention.ms": RETENTION_MS,
    "local.retention.bytes": 1,
}
"""On top of ``_harness.DEFAULT_TOPIC`` (4 KiB segments): local retention deletes every
segment it may, so only the copy gate keeps a segment whose copy has not finished."""
MAX_QUIESCE_PASSES: Final = 30

KILL_POINTS: Final[Mapping[str, tuple[int, str]]] = {
    # name: (default nth hit in the first run, what is durable when the process dies)
    "copy.after_started": (5, "RLMM: COPY_SEGMENT_STARTED durable; the RSM has seen nothing"),
    "copy.rsm_before": (5, "RSM copy_log_segment_data entered, nothing written"),
    "copy.rsm_mid_log_write": (5, "RSM: half of the .log written to its hidden temporary file"),
    "copy.rsm_after_log": (5, "RSM: the .log renamed into place, no index written yet"),
    "copy.rsm_after": (5, "RSM: every file of the segment copied; FINISHED not written"),
    "copy.after_finished": (5, "RLMM: COPY_SEGMENT_FINISHED durable; highest offset not moved"),
    "local.after_highest_advanced": (
        5,
        "log: highest offset in remote storage advanced (memory only); no local deletion yet",
    ),
    "local.mid_delete_rename": (
        5,
        "log: the first segment of a local retention batch renamed *.deleted, nothing removed",
    ),
    "local.mid_delete": (
        5,
        "log: the first segment of a local retention batch deleted; the rest, the producer "
        "snapshots and the checkpoint not",
    ),
    "local.after_delete": (5, "log: a local retention batch fully done (checkpoint written)"),
    "delete.after_log_start_moved": (
        2,
        "log: the expiration task moved the log start offset (checkpointed); no remote delete",
    ),
    "delete.after_started": (2, "RLMM: DELETE_SEGMENT_STARTED durable; the data untouched"),
    "delete.rsm_before": (2, "RSM delete_log_segment_data entered, nothing removed"),
    "delete.rsm_mid": (2, "RSM: the .log removed, the index files not"),
    "delete.rsm_after": (2, "RSM: every file removed; DELETE_SEGMENT_FINISHED not written"),
    "delete.after_finished": (2, "RLMM: DELETE_SEGMENT_FINISHED durable"),
}


def expected_timestamp(offset: int) -> int:
    """The timestamp of the record at ``offset``: rounds are whole, the clock is per round."""
    return NOW + (offset // PER_ROUND) * STEP_MS


def segment_digests(log: Path, offset_index: Path, time_index: Path) -> dict[str, str]:
    """SHA-256 of a segment's data and indexes, by the suffix the RSM stores them under."""
    return {
        suffix: hashlib.sha256(path.read_bytes()).hexdigest()
        for suffix, path in (
            (local_storage.LOG_SUFFIX, log),
            (local_storage.OFFSET_INDEX_SUFFIX, offset_index),
            (local_storage.TIME_INDEX_SUFFIX, time_index),
        )
    }


# Durable little files ------------------------------------------------------------------------
def _append_line(path: Path, entry: Mapping[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(entry, sort_keys=True) + "\n")
        out.flush()
        os.fsync(out.fileno())


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The entries of a ``.jsonl`` file this program appended (none if it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


class PersistedClock(_harness.Clock):
    """The harness clock, saved to ``path`` whenever it is set (replaced atomically)."""

    def __init__(self, path: Path) -> None:
        saved = int(path.read_text(encoding="ascii")) if path.exists() else NOW
        super().__init__(saved)
        self.path = path

    def set(self, now: int) -> None:
        if now < self.now:
            raise AssertionError(f"the clock would go back from {self.now} to {now}")
        self.now = now
        temp = self.path.with_name(self.path.name + ".tmp")
        with open(temp, "w", encoding="ascii") as out:
            out.write(str(now))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, self.path)


# Kill points ---------------------------------------------------------------------------------
@dataclass
class Killer:
    """Counts every kill point reached; dies at the ``nth`` hit of ``point``.

    ``interleave`` (local retention, once the log is open) runs at every copy and delete kill
    point before the kill check: a node's log cleaner runs concurrently with the RLM tasks,
    so local retention must be safe at every step of a copy or a deletion, not only after it.
    """

    point: str | None
    nth: int
    hits: Counter[str] = field(default_factory=Counter)
    interleave: Callable[[], object] | None = None
    _interleaving: bool = False

    def hit(self, point: str, before_kill: Callable[[], object] | None = None) -> None:
        """Reached ``point``: if it is the fatal hit, run ``before_kill`` (to leave a partial
        state), then ``SIGKILL`` this process: no ``finally``, no ``atexit``, no flush."""
        assert point in KILL_POINTS, point
        if (
            self.interleave is not None
            and not self._interleaving
            and not point.startswith("local.")
        ):
            self._interleaving = True
            try:
                self.interleave()
            finally:
                self._interleaving = False
        self.hits[point] += 1
        if point == self.point and self.hits[point] == self.nth:
            if before_kill is not None:
                before_kill()
            os.kill(os.getpid(), signal.SIGKILL)


class FaultStorage(LocalTieredStorage):
    """The real ``local`` RSM with kill points around and inside copy and delete."""

    def __init__(self, killer: Killer) -> None:
        super().__init__()
        self.killer = killer
        self.writing_log = False

    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        log_segment_data: LogSegmentData,
    ) -> CustomMetadata | None:
        self.killer.hit("copy.rsm_before")
        result = super().copy_log_segment_data(remote_log_segment_metadata, log_segment_data)
        self.killer.hit("copy.rsm_after")
        return result

    def _write_atomically(self, final: Path, source: Path | bytes) -> None:
        self.writing_log = final.name.endswith(local_storage.LOG_SUFFIX)
        try:
            super()._write_atomically(final, source)
        finally:
            self.writing_log = False
        if final.name.endswith(local_storage.LOG_SUFFIX):
            self.killer.hit("copy.rsm_after_log")

    def delete_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata
    ) -> None:
        self.killer.hit("delete.rsm_before")
        super().delete_log_segment_data(remote_log_segment_metadata)
        self.killer.hit("delete.rsm_after")

    def _remove(self, fileset: Any) -> int:  # type: ignore[override]
        # ``fileset.paths()`` starts with the .log: removed alone when this is the fatal hit.
        self.killer.hit("delete.rsm_mid", lambda: fileset.paths()[0].unlink(missing_ok=True))
        return int(LocalTieredStorage._remove(fileset))


def _install_copy_fd_kill_point(rsm: FaultStorage) -> None:
    """Wrap the RSM module's ``_copy_fd`` (the byte copy into the temporary file) so that the
    fatal hit writes half of the ``.log`` and dies before the ``fsync`` and the rename."""
    real = local_storage._copy_fd

    def copy_fd(src: int, dst: int) -> None:
        if rsm.writing_log:

            def write_half() -> None:
                size = os.fstat(src).st_size
                os.sendfile(dst, src, 0, size // 2)

            rsm.killer.hit("copy.rsm_mid_log_write", write_half)
        real(src, dst)

    local_storage._copy_fd = copy_fd


class FaultMetadataManager(EmbeddedRemoteLogMetadataManager):
    """The real ``embedded`` RLMM; kill points right after a write is durable and applied."""

    _UPDATE_POINTS: Final[Mapping[RemoteLogSegmentState, str]] = {
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED: "copy.after_finished",
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED: "delete.after_started",
        RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: "delete.after_finished",
    }

    def __init__(self, killer: Killer) -> None:
        super().__init__()
        self.killer = killer

    def add_remote_log_segment_metadata(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata
    ) -> Future[None]:
        future = super().add_remote_log_segment_metadata(remote_log_segment_metadata)
        future.result()
        self.killer.hit("copy.after_started")
        return future

    def update_remote_log_segment_metadata(
        self, remote_log_segment_metadata_update: RemoteLogSegmentMetadataUpdate
    ) -> Future[None]:
        update = remote_log_segment_metadata_update
        future = super().update_remote_log_segment_metadata(update)
        future.result()
        self.killer.hit(self._UPDATE_POINTS[update.state])
        return future


@dataclass
class AuditContext:
    killer: Killer
    audit_path: Path
    rlmm: EmbeddedRemoteLogMetadataManager
    tp: TopicIdPartition


class AuditedLocalLog(LocalLog):
    """The real ``LocalLog``: audits every local segment deletion (before it starts) and has
    kill points around local retention and the log start offset."""

    fault: AuditContext | None = None

    def update_highest_offset_in_remote_storage(self, offset: int) -> None:
        before = self.highest_offset_in_remote_storage
        super().update_highest_offset_in_remote_storage(offset)
        if self.fault is not None and self.highest_offset_in_remote_storage > before:
            self.fault.killer.hit("local.after_highest_advanced")

    def update_log_start_offset_from_remote_tier(self, remote_log_start_offset: int) -> None:
        before = self.log_start_offset
        super().update_log_start_offset_from_remote_tier(remote_log_start_offset)
        if self.fault is not None and self.log_start_offset > before:
            self.fault.killer.hit("delete.after_log_start_moved")

    def delete_retention_segments(
        self, highest_offset_in_remote_storage: int | None = None, *, now: int | None = None
    ) -> int:
        deleted = super().delete_retention_segments(highest_offset_in_remote_storage, now=now)
        if self.fault is not None and deleted > 0:
            self.fault.killer.hit("local.after_delete")
        return deleted

    def _remove_and_delete_segments(self, segments: Iterable[LogSegment]) -> None:
        doomed = list(segments)
        fault = self.fault
        if fault is None or not doomed:
            super()._remove_and_delete_segments(doomed)
            return
        self._audit(fault, doomed)
        first = doomed[0]
        fault.killer.hit(
            "local.mid_delete_rename",
            lambda: first.change_file_suffixes("", DELETED_FILE_SUFFIX),
        )
        super()._remove_and_delete_segments([first])
        fault.killer.hit("local.mid_delete")
        super()._remove_and_delete_segments(doomed[1:])

    def _audit(self, fault: AuditContext, doomed: list[LogSegment]) -> None:
        bases = [s.base_offset for s in self.segments]
        deleted = []
        for segment in doomed:
            i = bases.index(segment.base_offset)
            end = bases[i + 1] - 1 if i + 1 < len(bases) else self.log_end_offset - 1
            deleted.append(
                {
                    "first": segment.base_offset,
                    "last": end,
                    "sha256": segment_digests(
                        segment.log_path, segment.offset_index_path, segment.time_index_path
                    ),
                }
            )
        finished = sorted(
            [s.start_offset, s.end_offset]
            for s in fault.rlmm.list_remote_log_segments(fault.tp)
            if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        )
        _append_line(
            fault.audit_path,
            {
                "pid": os.getpid(),
                "deleted": deleted,
                "log_start_offset": self.log_start_offset,
                "highest_offset_in_remote_storage": self.highest_offset_in_remote_storage,
                "finished": finished,
            },
        )


# The workload --------------------------------------------------------------------------------
def open_partition(root: Path, killer: Killer, clock: _harness.Clock) -> _harness.Harness:
    """The harness on ``root`` with the fault-injecting RSM, RLMM and log."""
    rsm = FaultStorage(killer)
    rsm.configure({"dir": str(root / "remote")})
    if killer.point == "copy.rsm_mid_log_write":
        _install_copy_fd_kill_point(rsm)
    rlmm = FaultMetadataManager(killer)
    rlmm.configure({"dir": str(root / "rlmm")})
    with mock.patch.object(_harness, "LocalLog", AuditedLocalLog):
        h = _harness.Harness(root, clock=clock, topic=TOPIC, rsm=rsm, rlmm=rlmm)
    assert isinstance(h.log, AuditedLocalLog)
    h.log.fault = AuditContext(killer, root / "audit.jsonl", rlmm, h.tp)
    killer.interleave = h.log.delete_retention_segments
    return h


def tier(h: _harness.Harness) -> None:
    """One copy + expiration pass, then local retention (``Harness.tier``)."""
    h.rlm.run_once(h.tp)
    h.log.delete_retention_segments()


def _state(h: _harness.Harness) -> tuple[object, ...]:
    listing = sorted(
        (str(s.remote_log_segment_id.id), s.state.name)
        for s in h.rlmm.list_remote_log_segments(h.tp)
    )
    return (
        tuple(listing),
        tuple(s.base_offset for s in h.log.segments),
        h.log.log_start_offset,
        h.log.local_log_start_offset,
        h.log.highest_offset_in_remote_storage,
    )


def run(
    root: Path,
    *,
    kill: str | None = None,
    nth: int = 0,
    rounds: int,
    epoch: int = 0,
    quiesce: bool = False,
) -> dict[str, Any]:
    """Resume the partition on ``root`` and run the workload up to ``rounds`` (dying at the
    ``nth`` hit of ``kill``); with ``quiesce``, tier until nothing changes. Returns a summary.
    Also callable in-process (a restart without kill point)."""
    killer = Killer(kill, nth)
    clock = PersistedClock(root / "clock")
    h = open_partition(root, killer, clock)
    try:
        start_leo = h.log.log_end_offset
        if start_leo % PER_ROUND:
            raise AssertionError(f"the log end offset {start_leo} is not a whole round")
        # The log cleaner may run before the RLM knows what is in remote storage.
        h.log.delete_retention_segments()
        h.lead(epoch)
        for r in range(start_leo // PER_ROUND, rounds):
            clock.set(NOW + r * STEP_MS)
            h.produce(PER_ROUND, per_batch=PER_BATCH)
            _append_line(root / "ledger.jsonl", {"round": r, "leo": h.log.log_end_offset})
            tier(h)
        passes = 0
        if quiesce:
            before = _state(h)
            while True:
                passes += 1
                tier(h)
                after = _state(h)
                if after == before:
                    break
                if passes >= MAX_QUIESCE_PASSES:
                    raise AssertionError(f"no quiescence after {passes} passes: {after}")
                before = after
        errors = [
            f"{task.kind}: {task.last_error!r}"
            for task in h.rlm.tasks(h.tp)
            if task.last_error is not None
        ]
        return {
            "start_log_end_offset": start_leo,
            "log_end_offset": h.log.log_end_offset,
            "log_start_offset": h.log.log_start_offset,
            "local_log_start_offset": h.log.local_log_start_offset,
            "quiesce_passes": passes,
            "task_errors": errors,
            "hits": dict(killer.hits),
            "clock": clock.now,
        }
    finally:
        h.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--kill", choices=sorted(KILL_POINTS), default=None)
    parser.add_argument("--nth", type=int, default=None, help="die at this hit (default: ours)")
    parser.add_argument("--rounds", type=int, required=True, help="produce up to this round")
    parser.add_argument("--epoch", type=int, default=0, help="lead at this leader epoch")
    parser.add_argument("--quiesce", action="store_true", help="then tier until nothing changes")
    args = parser.parse_args(argv)
    nth = args.nth if args.nth is not None else KILL_POINTS[args.kill][0] if args.kill else 0
    args.root.mkdir(parents=True, exist_ok=True)
    summary = run(
        args.root,
        kill=args.kill,
        nth=nth,
        rounds=args.rounds,
        epoch=args.epoch,
        quiesce=args.quiesce,
    )
    json.dump(summary, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
