"""Faults: a process killed (SIGKILL) at each step of copy and of delete, then restarted.

Each test runs ``_fault_child`` (a separate Python process) on a fresh directory until it
kills itself at one of its ``KILL_POINTS`` (return code -9), checks that the kill left the
partial state the point names, restarts the node in this process (the child's ``run`` without
kill point: the same classes reopened on the same directories, leader in a new epoch, more
records, tiering passes until nothing changes), then reopens the directories with the plain
harness and checks:

1. nothing lost: every record from the log start offset to the end is read back with its key,
   value and timestamp (remote below the local log start, local above), the log end offset is
   what was produced, and the log start offset never passed a record that retention keeps;
2. no local segment was deleted before its copy finished: the children audited every local
   deletion (``audit.jsonl``, written with ``fsync`` before the first file is touched), and
   every deleted offset was then covered by a ``COPY_SEGMENT_FINISHED`` segment (or below the
   log start offset, remote retention having deleted it); every offset below the local log
   start is still covered by a finished copy;
3. dangling states are cleaned: the RLMM lists only ``COPY_SEGMENT_FINISHED`` segments, the
   RSM directory holds exactly their files (no partial copy, no temporary file), the log
   directory no ``*.deleted`` leftover;
4. the remote copy of every finished segment still local is byte for byte the local segment
   (data and indexes); every other one is complete and valid.
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tierlog.log.reader import iter_batches_with_records
from tierlog.log.recovery import read_offsets_checkpoint
from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager
from tierlog.spi import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.storage.local import LocalTieredStorage

from ._fault_child import (
    KILL_POINTS,
    PER_ROUND,
    RETENTION_MS,
    TOPIC,
    expected_timestamp,
    read_lines,
    run,
    segment_digests,
)
from ._harness import TOPIC_ID, Clock, Harness, key_of, value_of

CHILD = Path(__file__).with_name("_fault_child.py")
FIRST_ROUNDS = 10
"""At most this many rounds in the first run: every kill point is reached before the end."""
EXTRA_ROUNDS = 2
"""The restart produces this many more rounds, then tiers until nothing changes. Few, so that
what the kill left is still within remote retention at the end: a dangling state must be
cleaned by the cleanup meant for it, not merely expire."""
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED


class OrphanTempFileError(AssertionError):
    """Remote storage holds a temporary file of an interrupted write: deleting the superseded
    copy must remove it too (``LocalTieredStorage._remove``)."""


# Running the child ---------------------------------------------------------------------------
def _child(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _kill(root: Path, point: str, *args: str) -> None:
    killed = _child(root, "--kill", point, *args)
    _check_audit(root)
    assert killed.returncode == -signal.SIGKILL, (
        f"the child did not die at {point} (rc {killed.returncode}):\n"
        f"{killed.stdout}\n{killed.stderr}"
    )


def _restart(root: Path, epoch: int) -> dict[str, Any]:
    """The restart, in this process: the same program without kill point (a child costs a
    second of imports), the node coming back as leader in a new epoch. Checks that nothing
    produced before the kill was lost from the log."""
    produced = _produced_leo(root)
    rounds = produced // PER_ROUND + EXTRA_ROUNDS
    summary = run(root, rounds=rounds, epoch=epoch, quiesce=True)
    assert summary["start_log_end_offset"] >= produced, "records were lost in the crash"
    assert summary["log_end_offset"] == rounds * PER_ROUND
    assert summary["task_errors"] == []
    return summary


def _produced_leo(root: Path) -> int:
    ledger = read_lines(root / "ledger.jsonl")
    return max((e["leo"] for e in ledger), default=0)


# What a kill left ----------------------------------------------------------------------------
@contextmanager
def _metadata(root: Path) -> Iterator[list[RemoteLogSegmentMetadata]]:
    """The RLMM's segments as a restarted node loads them (replaying the record logs)."""
    rlmm = EmbeddedRemoteLogMetadataManager()
    rlmm.configure({"dir": str(root / "rlmm")})
    try:
        tp = _tp()
        rlmm.on_partition_leadership_changes({tp}, set())
        yield list(rlmm.list_remote_log_segments(tp))
    finally:
        rlmm.close()


def _tp() -> TopicIdPartition:
    return TopicIdPartition(TOPIC_ID, "topic", 0)


def _remote_dir(root: Path) -> Path:
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(root / "remote")})
    try:
        return rsm.storage_directory / rsm.partition_directory_name(_tp())
    finally:
        rsm.close()


def _names(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()} if directory.is_dir() else set()


def _prefix(segment: RemoteLogSegmentMetadata) -> str:
    return LocalTieredStorage.segment_file_prefix(
        segment.remote_log_segment_id, segment.start_offset
    )


def _files_of(segment: RemoteLogSegmentMetadata, names: set[str]) -> set[str]:
    return {n for n in names if n.startswith(_prefix(segment))}


def _check_partial_state(root: Path, point: str) -> None:
    """The kill left what the point says: otherwise the test would not test the point."""
    names = _names(_remote_dir(root))
    log_names = _names(root / "logs-0" / "topic-0")
    with _metadata(root) as segments:
        finished = [s for s in segments if s.state is FINISHED]
        started = [s for s in segments if s.state is STARTED]
        deleting = [s for s in segments if s.state is DELETE_STARTED]
    temps = {n for n in names if n.endswith(".tmp")}
    if point in ("copy.after_started", "copy.rsm_before"):
        assert len(started) == 1 and not _files_of(started[0], names) and not temps
    elif point == "copy.rsm_mid_log_write":
        assert len(started) == 1 and not _files_of(started[0], names)
        assert len(temps) == 1 and _prefix(started[0]) in next(iter(temps))
    elif point == "copy.rsm_after_log":
        assert len(started) == 1
        assert {n[len(_prefix(started[0])) :] for n in _files_of(started[0], names)} == {".log"}
    elif point == "copy.rsm_after":
        assert len(started) == 1 and len(_files_of(started[0], names)) == 5
    elif point in ("delete.after_started", "delete.rsm_before"):
        assert len(deleting) == 1 and len(_files_of(deleting[0], names)) == 5
    elif point == "delete.rsm_mid":
        assert len(deleting) == 1
        left = {n[len(_prefix(deleting[0])) :] for n in _files_of(deleting[0], names)}
        assert ".log" not in left and ".index" in left
    elif point == "delete.rsm_after":
        assert len(deleting) == 1 and not _files_of(deleting[0], names)
    elif point.startswith("local.") and point != "local.after_highest_advanced":
        # The audit was written before the batch's first file was touched.
        batch = [d["first"] for d in read_lines(root / "audit.jsonl")[-1]["deleted"]]
        present = {b for b in batch if f"{b:020d}.log" in log_names}
        renamed = {b for b in batch if f"{b:020d}.log.deleted" in log_names}
        if point == "local.mid_delete_rename":
            assert renamed == {batch[0]} and present == set(batch[1:])
        elif point == "local.mid_delete":
            assert not renamed and present == set(batch[1:])
        else:
            assert not renamed and not present
    elif point in ("copy.after_finished", "local.after_highest_advanced", "delete.after_finished"):
        # Durably clean: every file belongs to a finished copy (only memory is behind).
        assert not started and not deleting
        assert set().union(*(_files_of(s, names) for s in finished)) == names
    elif point == "delete.after_log_start_moved":
        checkpoint = read_offsets_checkpoint(root / "logs-0" / "topic-0")
        assert checkpoint is not None and not deleting
        assert any(s.end_offset < checkpoint.log_start_offset for s in finished)
    else:
        raise AssertionError(f"no check for {point}")


# The checks after the restart ----------------------------------------------------------------
def _covered(offset_ranges: list[list[int]], first: int, last: int) -> bool:
    """Whether ``[first, last]`` is covered by the union of ``offset_ranges``."""
    need = first
    for start, end in sorted(offset_ranges):
        if start > need:
            break
        need = max(need, end + 1)
        if need > last:
            return True
    return need > last


def _check_audit(root: Path) -> int:
    """Every audited local deletion removed only offsets already in a finished copy (or below
    the log start offset then). Returns how many deletions were audited."""
    audit = read_lines(root / "audit.jsonl")
    for entry in audit:
        allowed = [*entry["finished"]]
        if entry["log_start_offset"] > 0:
            allowed.append([0, entry["log_start_offset"] - 1])
        for deleted in entry["deleted"]:
            first, last = deleted["first"], deleted["last"]
            assert _covered(allowed, first, last), (
                f"local segment [{first}, {last}] deleted before its copy finished: {entry}"
            )
    return len(audit)


def _verify(root: Path, summary: dict[str, Any]) -> None:
    h = Harness(root, clock=Clock(summary["clock"]), topic=TOPIC)
    try:
        h.rlm.on_leadership_change([h.log], [])
        log = h.log
        listing = list(h.rlmm.list_remote_log_segments(h.tp))
        finished = sorted((s for s in listing if s.state is FINISHED), key=lambda s: s.start_offset)

        # 3. Dangling states cleaned.
        assert [s for s in listing if s.state is not FINISHED] == [], "dangling RLMM states"
        remote_dir = _remote_dir(root)
        expected = {
            _prefix(s) + suffix
            for s in finished
            for suffix in (".log", ".index", ".timeindex", ".leader_epoch_checkpoint", ".snapshot")
        }
        actual = _names(remote_dir)
        temp_files = {n for n in actual if n.startswith(".") and n.endswith(".tmp")}
        assert actual - temp_files - expected == set(), "orphan files in remote storage"
        assert expected - actual == set(), "files missing in remote storage"
        leftovers = [
            n for n in _names(log.dir) if n.endswith((".deleted", ".tmp", ".cleaned", ".swap"))
        ]
        assert leftovers == []

        # 1. Nothing lost.
        end = summary["log_end_offset"]
        assert log.log_end_offset == end and log.high_watermark == end
        start = log.log_start_offset
        assert start > 0, "remote retention deleted nothing: the workload is too short"
        cutoff = summary["clock"] - RETENTION_MS
        first_kept = next(o for o in range(end) if expected_timestamp(o) >= cutoff)
        assert start <= first_kept, f"the log start {start} passed unexpired offset {first_kept}"
        records = list(h.consume(start))
        assert [r.offset for r in records] == list(range(start, end))
        for r in records:
            assert (r.key, r.value, r.timestamp) == (
                key_of(r.offset),
                value_of(r.offset),
                expected_timestamp(r.offset),
            ), f"record {r.offset} differs"

        # 2. No local segment deleted before its copy finished.
        assert _check_audit(root) > 0, "no local deletion was audited"
        ranges = [[s.start_offset, s.end_offset] for s in finished]
        local_start = log.local_log_start_offset
        assert local_start > start, "nothing is only in remote storage"
        assert _covered(ranges, start, local_start - 1)

        # 4. Remote data matches its source: the local segment if it is still there, else the
        # digests the audit took just before deleting it.
        local_by_base = {s.base_offset: s for s in log.segments}
        audited = {
            d["first"]: d for entry in read_lines(root / "audit.jsonl") for d in entry["deleted"]
        }
        for s in finished:
            with h.rsm.fetch_log_segment(s, 0) as f:
                data = f.read()
            assert len(data) == s.segment_size_in_bytes
            offsets = [
                r.offset
                for _, _, recs in iter_batches_with_records(data, verify_crc=True)
                for r in recs
            ]
            assert offsets == list(range(s.start_offset, s.end_offset + 1))
            remote = {".log": hashlib.sha256(data).hexdigest()}
            for suffix, index_type in (
                (".index", IndexType.OFFSET),
                (".timeindex", IndexType.TIMESTAMP),
            ):
                with h.rsm.fetch_index(s, index_type) as f:
                    remote[suffix] = hashlib.sha256(f.read()).hexdigest()
            source = local_by_base.get(s.start_offset)
            if source is not None:
                expected_digests = segment_digests(
                    source.log_path, source.offset_index_path, source.time_index_path
                )
            else:
                deleted = audited.get(s.start_offset)
                assert deleted is not None, f"the source of {s} was deleted without audit"
                assert deleted["last"] == s.end_offset
                expected_digests = deleted["sha256"]
            assert remote == expected_digests, f"remote copy of [{s.start_offset}, {s.end_offset}]"

        # 3: no temporary file of an interrupted write left.
        if temp_files:
            raise OrphanTempFileError(f"temporary files left in {remote_dir}: {temp_files}")
    finally:
        h.close()


# The tests -----------------------------------------------------------------------------------
def _param(point: str) -> Any:
    return pytest.param(point, id=point)


@pytest.mark.parametrize("point", [_param(p) for p in KILL_POINTS])
def test_killed_at_a_step_then_restarted(tmp_path: Path, point: str) -> None:
    _kill(tmp_path, point, "--rounds", str(FIRST_ROUNDS))
    _check_partial_state(tmp_path, point)

    summary = _restart(tmp_path, epoch=1)

    _verify(tmp_path, summary)


@pytest.mark.parametrize(
    "point",
    [
        _param("copy.rsm_after_log"),
        _param("delete.rsm_mid"),
    ],
)
def test_crash_loop_at_a_step_then_restarted(tmp_path: Path, point: str) -> None:
    """Killed at the same step again by the next run (at its first hit): the same segment is
    left half copied (or half deleted) twice, and the clean restart removes both."""
    _kill(tmp_path, point, "--rounds", str(FIRST_ROUNDS))
    rounds = _produced_leo(tmp_path) // PER_ROUND + 1
    _kill(tmp_path, point, "--nth", "1", "--rounds", str(rounds), "--epoch", "1")
    with _metadata(tmp_path) as segments:
        dangling = [s for s in segments if s.state is not FINISHED]
    if point.startswith("copy."):  # a new copy of the same segment, under a new id
        assert [s.state for s in dangling] == [STARTED, STARTED]
        assert len({(s.start_offset, s.end_offset) for s in dangling}) == 1
    else:  # a deletion (the same one retried, or another) interrupted again
        assert dangling and all(s.state is DELETE_STARTED for s in dangling)

    summary = _restart(tmp_path, epoch=2)

    _verify(tmp_path, summary)
