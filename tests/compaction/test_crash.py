"""Compaction killed (SIGKILL) at every step that leaves state behind, then rerun (issue 12).

A compacted partition is built once (``initial``): a tiered topic (``_crash_child.TIERED_TOPIC``,
~1 KiB segments, every sealed segment copied to the ``local`` RSM and finished in the
``embedded`` RLMM, local copies kept) and a topic of the same records that is not tiered. The
reference (``reference``) runs, on a copy, a cleaning round through remote storage, the RLM's
expiration task (superseded delay 0) and an in-place round on the local topic, never
interrupted. Each test copies the initial state, runs ``_crash_child`` (a separate process)
with ``TIERLOG_COMPACTION_KILL_AT=<point>@<n>`` so that the code under test kills itself
there, asserts it died of SIGKILL, and checks, reopening everything in this process:

1. **no record lost**: reading the partition from the log start (the remote chain
   ``tiered.remote_chain`` gives, fetched from the RSM, then the local log past the highest
   offset in remote storage; for the in-place cleaner, the local log) returns every record the
   reference keeps (so, for every key, its latest record), and every record read (offset, key,
   value) is one the original log had at that offset; the chain covers the log start to the
   highest remote offset without a gap;
2. **none visible twice**: offsets strictly increase across the whole read;
3. **the kill happened where named**: the partial state the point leaves (an uploaded object
   the RLMM does not know, a COPY_SEGMENT_STARTED, n cleaned segments published, a
   DELETE_SEGMENT_STARTED with or without its data, a ``.cleaned`` file);

then reruns the child without the kill (same ``now``; ``clean`` then ``expire``) and checks
**convergence**: the records read equal the reference's, the remote chain has the reference's
segment boundaries and every segment in it is a cleaned one, the RLMM lists only the routed
segments, all COPY_SEGMENT_FINISHED (no COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED left
over, nothing superseded kept), the RSM directory holds exactly the files of those segments (no
object the RLMM does not know, no temporary file), and the cleaner checkpoint file says what
the reference's says. For the in-place cleaner: no ``.cleaned``, ``.swap`` or ``.deleted`` file
is left and the checkpoint matches.

Spark, local: an executor's Python worker killed right after its upload (Spark retries the
task on ``local[2,4]``, the round completes and equals the reference), and the driver killed
after the second publication, then rerun on Spark.

Spark, on the real standalone cluster of ``spark_standalone_cluster`` (marked ``spark``,
``slow`` and ``xdist_group(STANDALONE_GROUP)``: one pytest worker runs them on one cluster):

- the driver (``_crash_child`` on ``spark://...``) killed at every point a Spark round passes on
  its driver (``CLUSTER_DRIVER_KILLS``: the first publication started with every cleaned
  segment uploaded, two and all published, the expiration task's deletion started and its data
  deleted); the partial state is checked knowing that Spark's executors upload every segment
  before the first publication; the cluster must stop the dead driver's executors (a separate
  JVM per worker) before a new driver reruns the round on the cluster, which converges;
- an executor JVM (``CoarseGrainedExecutorBackend``, found by ``SparkCluster.executors``)
  killed from this process the moment the first object of a cleaned segment appears in the
  RSM, the driver in this process: the worker starts a new executor, Spark reruns the lost
  tasks and the lost shuffle output on it, and the round completes equal to the reference;
  had Spark given up, the test checks no loss and that a rerun on the cluster converges
  instead. The kill lands anywhere in an upload, also inside the RSM's write of a file.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import pytest
from services.spark import ExecutorProcess, SparkCluster, work_dir
from services.spark_fixtures import (
    LOCAL_MASTER,
    STANDALONE_GROUP,
    TEST_JAVA_OPTIONS,
    SparkSessions,
)

from rlm._tiering import tier
from tierlog.compaction.faults import KILL_AT, KILL_ONCE
from tierlog.compaction.tiered import remote_chain
from tierlog.log.cleaner_checkpoint import CleanerOffsetCheckpoints
from tierlog.log.local_log import LocalLog
from tierlog.log.reader import iter_batches_with_records
from tierlog.spi import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicPartition

from . import _crash_child as child
from ._crash_child import LOCAL_NAME, LOCAL_TOPIC, TIP, open_partition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CHILD = Path(__file__).with_name("_crash_child.py")
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
LAST = -1
"""``nth`` meaning the last time the point is reached in an uninterrupted round."""
CHILD_TIMEOUT_S = 120.0
SPARK_CHILD_TIMEOUT_S = 600.0
"""A Spark child starts a JVM (10-20 s on two busy cores) and waits for it to go."""


class Rec(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None


# Reading what a restarted node sees -----------------------------------------------------------
def _records(data: bytes | Path) -> list[Rec]:
    return [
        Rec(r.offset, r.key, r.value)
        for _, header, records in iter_batches_with_records(data, verify_crc=True)
        if not header.is_control
        for r in records
    ]


def _storage_files(root: Path) -> list[Path]:
    base = child.storage_dir(root)
    return sorted(p for p in base.rglob("*") if p.is_file()) if base.exists() else []


def _object_id(path: Path) -> str:
    """The segment id in ``<startOffset:020d>-<segmentId><suffix>`` (the local RSM's layout)."""
    return path.name[21:].split(".", 1)[0]


@dataclass
class TieredView:
    """The tiered partition as a restarted node finds it."""

    records: list[Rec]
    chain: list[RemoteLogSegmentMetadata]
    segments: list[RemoteLogSegmentMetadata]
    """Every segment the RLMM lists, in any state."""
    files: list[Path]
    checkpoint: int | None
    log_start_offset: int
    highest_remote_offset: int

    def ids(self, *states: RemoteLogSegmentState) -> set[str]:
        return {
            str(s.remote_log_segment_id.id)
            for s in self.segments
            if not states or s.state in states
        }

    def cleaned(self, state: RemoteLogSegmentState) -> int:
        return sum(1 for s in self.segments if s.state is state and s.cleaner_offsets)

    @property
    def temp_files(self) -> list[Path]:
        return [p for p in self.files if p.name.startswith(".")]

    @property
    def unknown_objects(self) -> set[str]:
        """Ids of RSM objects the RLMM does not list (an upload never published)."""
        return {_object_id(p) for p in self.files if not p.name.startswith(".")} - self.ids()

    def has_data(self, segment: RemoteLogSegmentMetadata) -> bool:
        wanted = str(segment.remote_log_segment_id.id)
        return any(_object_id(p) == wanted and p.name.endswith(".log") for p in self.files)


def read_tiered(root: Path, now_ms: int) -> TieredView:
    """Reopen the tiered partition (RLM leads it, its copy task seeds the highest remote offset)
    and read it: the remote chain from the log start, fetched from the RSM, then the local log
    past the highest offset in remote storage."""
    with open_partition(root, now_ms) as p:
        log = p.log
        chain = remote_chain(p.rlmm, TIP, log)
        highest = log.highest_offset_in_remote_storage
        records: list[Rec] = []
        for segment in chain:
            with p.rsm.fetch_log_segment(segment, 0) as stream:
                data = stream.read()
            got = _records(data)
            outside = [
                r.offset for r in got if not segment.start_offset <= r.offset <= segment.end_offset
            ]
            assert not outside, f"{segment} holds offsets {outside} outside its range"
            records.extend(got)
        for local in log.segments:
            records.extend(r for r in _records(local.log_path) if r.offset > highest)
        return TieredView(
            records=records,
            chain=chain,
            segments=list(p.rlmm.list_remote_log_segments(TIP)),
            files=_storage_files(root),
            checkpoint=p.checkpoints.get(TopicPartition(TIP.topic, TIP.partition)),
            log_start_offset=log.log_start_offset,
            highest_remote_offset=highest,
        )


@dataclass
class LocalView:
    records: list[Rec]
    leftovers: list[str]
    checkpoint: int | None


def read_local(root: Path, now_ms: int) -> LocalView:
    """Reopen the non-tiered partition (log recovery runs) and read every segment."""
    directory = root / "logs" / LOCAL_NAME
    log = LocalLog.open(directory, LOCAL_TOPIC, clock=lambda: now_ms, create=False)
    try:
        records = [r for s in log.segments for r in _records(s.log_path)]
        leftovers = sorted(
            n.name
            for n in directory.iterdir()
            if n.name.endswith((".cleaned", ".swap", ".deleted"))
        )
    finally:
        log.close()
    checkpoint = CleanerOffsetCheckpoints(directory.parent).get(TopicPartition("table", 0))
    return LocalView(records, leftovers, checkpoint)


# The initial state and the reference ----------------------------------------------------------
@dataclass
class Initial:
    root: Path
    now_ms: int
    original: dict[int, Rec]
    """Every record of the tiered log before any cleaning, by offset."""
    local_original: dict[int, Rec]

    def copy(self, target: Path) -> Path:
        shutil.copytree(self.root, target)
        return target


@dataclass
class Reference:
    tiered: TieredView
    local: LocalView
    published: int
    """Cleaned segments an uninterrupted round publishes."""
    local_groups: int
    """Groups the in-place round swaps in."""
    boundaries: list[tuple[int, int]]
    """The offset ranges of the remote chain's segments."""


@pytest.fixture(scope="module")
def initial(tmp_path_factory: pytest.TempPathFactory) -> Initial:
    """The tiered and the local partition before any cleaning (see the module docstring)."""
    root = tmp_path_factory.mktemp("initial")
    now_ms = time.time_ns() // 1_000_000
    log = child.open_log(root, lambda: now_ms)
    rsm = child.open_rsm(root)
    rlmm = child.open_rlmm(root)
    try:
        child.produce(log, now_ms)
        rlmm.on_partition_leadership_changes({TIP}, set())
        copied = tier(log, rsm, rlmm, tip=TIP, now=now_ms)
        assert len(copied) >= 8 and log.highest_offset_in_remote_storage == log.log_end_offset - 1
        original = {r.offset: r for s in log.segments for r in _records(s.log_path)}
    finally:
        log.close()
        rlmm.close()
        rsm.close()
    local = child.open_log(root, lambda: now_ms, tiered=False)
    try:
        child.produce(local, now_ms)
        local_original = {r.offset: r for s in local.segments for r in _records(s.log_path)}
    finally:
        local.close()
    return Initial(root, now_ms, original, local_original)


@pytest.fixture(scope="module")
def reference(initial: Initial, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """The uninterrupted rounds on a copy of the initial state (in this process)."""
    root = initial.copy(tmp_path_factory.mktemp("reference") / "state")
    summary = child.run(root, ["clean", "expire", "clean-local"], now_ms=initial.now_ms)
    tiered = read_tiered(root, initial.now_ms)
    local = read_local(root, initial.now_ms)
    # The reference is a real cleaning: records and whole segments went, every remote segment
    # was replaced and the replaced ones deleted, a tombstone is kept (its horizon is a day).
    assert summary["cleaned"] and summary["local_cleaned"]
    for view, original in ((tiered, initial.original), (local, initial.local_original)):
        check_no_loss_no_duplicate(view.records, original, [])
        assert len(view.records) < len(original) / 2
    assert any(r.value is None for r in tiered.records)
    assert tiered.ids() == {str(s.remote_log_segment_id.id) for s in tiered.chain}
    assert all(s.cleaner_offsets for s in tiered.chain)
    assert tiered.checkpoint == summary["end_offset"] == max(initial.original) + 1
    assert summary["local_segments_written"] >= 3
    # Cleaning through remote storage keeps what the in-place cleaner keeps (which
    # tests/integration/test_cleaner_oracle.py checks against Kafka's own LogCleaner).
    assert tiered.records == local.records
    return Reference(
        tiered,
        local,
        published=summary["published"],
        local_groups=summary["local_segments_written"],
        boundaries=[(s.start_offset, s.end_offset) for s in tiered.chain],
    )


# Running the child ----------------------------------------------------------------------------
@dataclass
class ChildRun:
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return f"rc {self.returncode}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr[-4000:]}"


def _run_child(
    root: Path,
    steps: Sequence[str],
    now_ms: int,
    *,
    kill: str | None = None,
    epoch: int = 0,
    extra_args: Sequence[str] = (),
    timeout_s: float = CHILD_TIMEOUT_S,
) -> ChildRun:
    """Run ``_crash_child`` in its own process group; returns once every process holding its
    output is gone (a Spark driver's JVM exits when the driver dies: its stdin closes)."""
    env = {k: v for k, v in os.environ.items() if k not in (KILL_AT, KILL_ONCE)}
    if kill is not None:
        env[KILL_AT] = kill
    proc = subprocess.Popen(
        [
            sys.executable,
            str(CHILD),
            "--root",
            str(root),
            "--steps",
            ",".join(steps),
            "--now-ms",
            str(now_ms),
            "--epoch",
            str(epoch),
            *extra_args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this test started, nothing else
        stdout, stderr = proc.communicate()
        raise AssertionError(f"the child did not finish in {timeout_s} s:\n{stderr[-4000:]}") from e
    return ChildRun(proc.returncode, stdout, stderr)


def _kill(
    root: Path,
    steps: Sequence[str],
    now_ms: int,
    point: str,
    *,
    extra_args: Sequence[str] = (),
    timeout_s: float = CHILD_TIMEOUT_S,
) -> None:
    """Run the child with ``point`` as its kill point; it must die of SIGKILL."""
    run = _run_child(root, steps, now_ms, kill=point, extra_args=extra_args, timeout_s=timeout_s)
    assert run.returncode == -signal.SIGKILL, f"the child did not die at {point}: {run.describe()}"


def _rerun(
    root: Path,
    steps: Sequence[str],
    now_ms: int,
    *,
    epoch: int = 0,
    extra_args: Sequence[str] = (),
    timeout_s: float = CHILD_TIMEOUT_S,
) -> None:
    """Run the child without a kill point (a restarted node); it must succeed."""
    run = _run_child(root, steps, now_ms, epoch=epoch, extra_args=extra_args, timeout_s=timeout_s)
    assert run.returncode == 0, f"the rerun failed: {run.describe()}"


# The invariants -------------------------------------------------------------------------------
def check_no_loss_no_duplicate(
    records: Sequence[Rec], original: Mapping[int, Rec], kept: Sequence[Rec]
) -> None:
    """Invariants 1 and 2 of the module docstring."""
    offsets = [r.offset for r in records]
    twice = [b for a, b in itertools.pairwise(offsets) if b <= a]
    assert not twice, f"offsets read twice or out of order: {twice[:10]}"
    foreign = [r for r in records if original.get(r.offset) != r]
    assert not foreign, f"records the original log did not have: {foreign[:5]}"
    seen = set(records)
    lost = [r for r in kept if r not in seen]
    assert not lost, f"{len(lost)} records lost (the reference keeps them): {lost[:5]}"


def check_tiered_read(view: TieredView, initial: Initial, reference: Reference) -> None:
    assert view.log_start_offset == 0
    expected = view.log_start_offset
    for segment in view.chain:
        assert segment.start_offset == expected, f"the remote chain has a gap at {expected}"
        expected = segment.end_offset + 1
    assert expected == view.highest_remote_offset + 1, "the chain stops short"
    check_no_loss_no_duplicate(view.records, initial.original, reference.tiered.records)


def convergence_problems(view: TieredView, reference: Reference) -> list[str]:
    """What keeps the tiered partition from the reference's end state (see the module
    docstring), every problem at once: one crash often shows several."""
    problems = []
    reference_records = set(reference.tiered.records)
    extra = [r for r in view.records if r not in reference_records]
    missing = [r for r in reference.tiered.records if r not in set(view.records)]
    if extra or missing:
        problems.append(
            f"records differ from the reference: {len(extra)} the reference dropped are still "
            f"read (offsets {[r.offset for r in extra][:12]}...), {len(missing)} missing"
        )
    boundaries = [(s.start_offset, s.end_offset) for s in view.chain]
    if boundaries != reference.boundaries:
        problems.append(f"remote chain {boundaries}, the reference's {reference.boundaries}")
    uncleaned = [(s.start_offset, s.end_offset) for s in view.chain if not s.cleaner_offsets]
    if uncleaned:
        problems.append(f"segments the rerun left uncleaned: {uncleaned}")
    states = sorted(
        (s.start_offset, s.state.name) for s in view.segments if s.state is not FINISHED
    )
    if states:
        problems.append(f"segments left in an intermediate state: {states}")
    routed = {str(s.remote_log_segment_id.id) for s in view.chain}
    if view.ids() != routed:
        problems.append(f"unrouted segments kept: {sorted(view.ids() - routed)}")
    if view.temp_files:
        problems.append(f"temporary files left in the RSM: {view.temp_files}")
    if view.unknown_objects:
        problems.append(
            f"RSM objects the RLMM does not know (leaked): {sorted(view.unknown_objects)}"
        )
    no_data = [(s.start_offset, s.end_offset) for s in view.chain if not view.has_data(s)]
    if no_data:
        problems.append(f"routed segments without data: {no_data}")
    if view.checkpoint != reference.tiered.checkpoint:
        problems.append(
            f"cleaner checkpoint {view.checkpoint}, the reference's {reference.tiered.checkpoint}"
        )
    return problems


def check_converged(view: TieredView, reference: Reference) -> None:
    problems = convergence_problems(view, reference)
    assert not problems, "the rerun did not converge:\n- " + "\n- ".join(problems)


def check_kill_left(
    view: TieredView, point: str, nth: int, total: int, *, uploads_first: bool = False
) -> None:
    """Invariant 3: the partial state the point names. The Python engine uploads and publishes
    one segment at a time, in offset order; the Spark engine's executors upload every cleaned
    segment before the driver publishes the first (``uploads_first``), so the segments not yet
    published are already in the RSM."""
    finished, started = view.cleaned(FINISHED), view.cleaned(STARTED)
    deleting = [s for s in view.segments if s.state is DELETE_STARTED]
    unpublished = total - nth if uploads_first else 0
    if point == "upload.copied":
        assert not uploads_first, "Spark uploads on executors: that point does not stop a driver"
        assert (finished, started, len(view.unknown_objects)) == (nth - 1, 0, 1)
    elif point == "publish.started":
        assert (finished, started, len(view.unknown_objects)) == (nth - 1, 1, unpublished)
    elif point == "publish.finished":
        assert (finished, started, len(view.unknown_objects)) == (nth, 0, unpublished)
    else:
        assert (finished, started) == (total, 0)
        assert len(deleting) == 1, deleting
        assert not deleting[0].cleaner_offsets, "the expiration deletes a cleaned segment"
        assert view.has_data(deleting[0]) == (point == "delete.started")


# Kills through remote storage, in-process engine -----------------------------------------------
TIERED_KILLS = [
    ("upload.copied", 1),
    ("upload.copied", 2),
    ("upload.copied", LAST),
    ("publish.started", 1),
    ("publish.started", LAST),
    ("publish.finished", 1),
    ("publish.finished", LAST),
    ("delete.started", 1),
    ("delete.started", 2),
    ("delete.data", 1),
]


def _point_id(value: tuple[str, int]) -> str:
    point, nth = value
    return f"{point}@{'last' if nth == LAST else nth}"


@pytest.mark.parametrize("kill", TIERED_KILLS, ids=_point_id)
def test_a_killed_tiered_round_loses_nothing_and_a_rerun_converges(
    kill: tuple[str, int], initial: Initial, reference: Reference, tmp_path: Path
) -> None:
    point, nth = kill
    nth = reference.published if nth == LAST else nth
    root = initial.copy(tmp_path / "state")
    _kill(root, ["clean", "expire"], initial.now_ms, f"{point}@{nth}")

    after_kill = read_tiered(root, initial.now_ms)
    check_kill_left(after_kill, point, nth, reference.published)
    check_tiered_read(after_kill, initial, reference)

    _rerun(root, ["clean", "expire"], initial.now_ms)
    rerun = read_tiered(root, initial.now_ms)
    check_tiered_read(rerun, initial, reference)
    check_converged(rerun, reference)


@pytest.mark.parametrize(
    "kill",
    [("upload.copied", 1), ("publish.started", 1), ("publish.finished", LAST), ("delete.data", 1)],
    ids=_point_id,
)
def test_a_rerun_by_a_restarted_leader_in_a_new_epoch_converges(
    kill: tuple[str, int], initial: Initial, reference: Reference, tmp_path: Path
) -> None:
    """A node that restarts after the kill leads in a new epoch (``Node._lead``): the cleaned
    segments it writes get other ids than the dead attempt's, which must still not be left
    behind."""
    point, nth = kill
    nth = reference.published if nth == LAST else nth
    root = initial.copy(tmp_path / "state")
    _kill(root, ["clean", "expire"], initial.now_ms, f"{point}@{nth}")
    _rerun(root, ["clean", "expire"], initial.now_ms, epoch=1)
    rerun = read_tiered(root, initial.now_ms)
    check_tiered_read(rerun, initial, reference)
    check_converged(rerun, reference)


# The in-place cleaner ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "nth", [1, 2, LAST], ids=lambda n: f"swap.cleaned@{'last' if n == LAST else n}"
)
def test_a_killed_in_place_round_loses_nothing_and_a_rerun_converges(
    nth: int, initial: Initial, reference: Reference, tmp_path: Path
) -> None:
    nth = reference.local_groups if nth == LAST else nth
    root = initial.copy(tmp_path / "state")
    directory = root / "logs" / LOCAL_NAME
    _kill(root, ["clean-local"], initial.now_ms, f"swap.cleaned@{nth}")
    # The group was written and not swapped in: its .cleaned files are there.
    assert any(p.name.endswith(".cleaned") for p in directory.iterdir())

    after_kill = read_local(root, initial.now_ms)
    assert after_kill.leftovers == [], "log recovery leaves the interrupted round's files"
    check_no_loss_no_duplicate(after_kill.records, initial.local_original, reference.local.records)
    assert after_kill.checkpoint is None

    _rerun(root, ["clean-local"], initial.now_ms)
    rerun = read_local(root, initial.now_ms)
    assert rerun.records == reference.local.records
    assert rerun.leftovers == []
    assert rerun.checkpoint == reference.local.checkpoint


# Spark -------------------------------------------------------------------------------------------
def _spark_conf(directory: Path) -> dict[str, str]:
    """The test sessions' settings (``services.spark_fixtures``) for a session of our own."""
    return {
        "spark.driver.extraJavaOptions": TEST_JAVA_OPTIONS,
        "spark.executor.extraJavaOptions": TEST_JAVA_OPTIONS,
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.warehouse.dir": str(directory / "warehouse"),
    }


@pytest.mark.spark
def test_an_executor_killed_after_its_upload_is_retried_and_the_round_completes(
    initial: Initial,
    reference: Reference,
    tmp_path: Path,
    spark_sessions: SparkSessions,
) -> None:
    """A Python worker dies (SIGKILL) right after it uploaded a cleaned segment, before
    returning it to the driver; ``local[2,4]`` retries the task (plain ``local[N]`` never
    retries), which uploads the segment again under the same id, and the round completes.

    The kill point reaches the workers through ``spark.executorEnv.*`` of a session started
    here: a worker inherits the environment of the JVM, fixed when this pytest worker's first
    session started it, plus those settings."""
    from tierlog.compaction.spark_engine import SparkEngine
    from tierlog.compaction.spark_session import SparkSettings, spark_session, stop_spark_session

    root = initial.copy(tmp_path / "state")
    marker = tmp_path / "killed-once"
    master = "local[2,4]"
    conf = {
        **_spark_conf(tmp_path),
        f"spark.executorEnv.{KILL_AT}": "upload.copied",
        f"spark.executorEnv.{KILL_ONCE}": str(marker),
    }
    spark_sessions.stop()
    try:
        session = spark_session(SparkSettings(master=master, app_name="tierlog-crash", conf=conf))
        summary = child.run(
            root, ["clean", "expire"], now_ms=initial.now_ms, engine=SparkEngine(session)
        )
    finally:
        stop_spark_session()  # the next test's session must not inherit the kill point
    assert marker.exists(), "no worker reached the kill point"
    assert summary["cleaned"] and summary["published"] == reference.published
    view = read_tiered(root, initial.now_ms)
    check_tiered_read(view, initial, reference)
    check_converged(view, reference)


def _spark_args(master: str, directory: Path) -> list[str]:
    """The child's arguments for a round as a Spark job on ``master``."""
    args = ["--engine", "spark", "--spark-master", master]
    for key, value in _spark_conf(directory).items():
        args += ["--spark-conf", f"{key}={value}"]
    return args


def _kill_driver_and_rerun(
    initial: Initial,
    reference: Reference,
    directory: Path,
    master: str,
    kill: tuple[str, int],
    *,
    after_kill: Callable[[], None] | None = None,
) -> None:
    """Kill the driver (the child running the round as a Spark job on ``master``) at ``kill``,
    check what it left, run ``after_kill``, then rerun it on ``master``: it must converge."""
    point, nth = kill
    nth = reference.published if nth == LAST else nth
    root = initial.copy(directory / "state")
    spark_args = _spark_args(master, directory)
    _kill(
        root,
        ["clean", "expire"],
        initial.now_ms,
        f"{point}@{nth}",
        extra_args=spark_args,
        timeout_s=SPARK_CHILD_TIMEOUT_S,
    )
    after = read_tiered(root, initial.now_ms)
    check_kill_left(after, point, nth, reference.published, uploads_first=True)
    check_tiered_read(after, initial, reference)
    if after_kill is not None:
        after_kill()

    _rerun(
        root,
        ["clean", "expire"],
        initial.now_ms,
        extra_args=spark_args,
        timeout_s=SPARK_CHILD_TIMEOUT_S,
    )
    rerun = read_tiered(root, initial.now_ms)
    check_tiered_read(rerun, initial, reference)
    check_converged(rerun, reference)


@pytest.mark.spark
def test_a_driver_killed_between_publications_loses_nothing_and_a_rerun_converges(
    initial: Initial, reference: Reference, tmp_path: Path
) -> None:
    """The driver (a child process running the round on ``local[2]``) dies after the second
    publication: every cleaned segment was uploaded by the executors, two are published."""
    _kill_driver_and_rerun(initial, reference, tmp_path, LOCAL_MASTER, ("publish.finished", 2))


# Spark standalone cluster ------------------------------------------------------------------------
standalone = pytest.mark.xdist_group(STANDALONE_GROUP)
GONE_TIMEOUT_S = 60.0
"""How long the cluster may take to notice a dead driver or executor (a heartbeat or a closed
connection; seconds on two busy cores)."""

CLUSTER_DRIVER_KILLS = [
    ("publish.started", 1),
    ("publish.finished", 2),
    ("publish.finished", LAST),
    ("delete.started", 1),
    ("delete.data", 1),
]
"""Every point a Spark round passes on its driver: the executors uploaded every cleaned segment
and the first publication started (nothing finished yet), two and then all of them published
(the checkpoint not yet written), the expiration task's deletion of a replaced segment started
and its data deleted. ``upload.copied`` is on the executors (the next test)."""


def _wait_for(what: str, condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not after {timeout_s} s"
        time.sleep(0.1)


def _app_ids(cluster: SparkCluster) -> set[str]:
    """Every application the cluster's workers ran an executor of (their work directories)."""
    return {p.name for w in cluster.workers if work_dir(w).is_dir() for p in work_dir(w).iterdir()}


@pytest.mark.spark
@pytest.mark.slow
@standalone
@pytest.mark.parametrize("kill", CLUSTER_DRIVER_KILLS, ids=_point_id)
def test_a_driver_on_the_cluster_killed_loses_nothing_and_a_rerun_on_the_cluster_converges(
    kill: tuple[str, int],
    initial: Initial,
    reference: Reference,
    tmp_path: Path,
    spark_standalone_cluster: SparkCluster,
) -> None:
    """The driver, a child process running the round on the standalone cluster, dies at
    ``kill``. Its executors are separate JVMs the worker started: the cluster must stop them
    once it sees the driver gone (no executor of the dead attempt is left to upload behind the
    rerun's back) before a new driver reruns the round on the cluster."""
    cluster = spark_standalone_cluster
    before = _app_ids(cluster)

    def dead_apps_stopped() -> None:
        dead = _app_ids(cluster) - before
        assert len(dead) == 1, f"the killed driver ran {sorted(dead)} on the cluster"
        _wait_for(
            f"executors of the killed driver's {dead}",
            lambda: not [e for e in cluster.executors() if e.app_id in dead],
            GONE_TIMEOUT_S,
        )

    _kill_driver_and_rerun(
        initial, reference, tmp_path, cluster.url, kill, after_kill=dead_apps_stopped
    )


@dataclass
class ExecutorKill:
    executor: ExecutorProcess
    uploaded: int
    """Cleaned segments whose upload had completed when the executor was killed."""


class _ExecutorKiller(threading.Thread):
    """Kills (SIGKILL) the application's executor JVM as soon as a new object appears in the
    partition's RSM directory, i.e. while the rewrite tasks upload cleaned segments. If the round
    has not ended ``timeout_s`` after that, cancels its jobs (the test then fails)."""

    def __init__(
        self,
        cluster: SparkCluster,
        spark: SparkSession,
        directory: Path,
        *,
        timeout_s: float,
    ) -> None:
        super().__init__(name="executor-killer", daemon=True)
        self.cluster = cluster
        self.spark = spark
        self.app_id = spark.sparkContext.applicationId
        self.directory = directory
        self.before = {e.name for e in os.scandir(directory)}
        self.timeout_s = timeout_s
        self.done = threading.Event()
        """Set by the test when the round has ended (either way)."""
        self.kill: ExecutorKill | None = None
        self.error: BaseException | None = None
        self.cancelled = False

    def _new_objects(self) -> list[str]:
        return [e.name for e in os.scandir(self.directory) if e.name not in self.before]

    def run(self) -> None:
        try:
            deadline = time.monotonic() + self.timeout_s
            executors = self.cluster.executors(self.app_id)
            while not executors:
                if self.done.is_set() or time.monotonic() > deadline:
                    return
                time.sleep(0.05)
                executors = self.cluster.executors(self.app_id)
            assert len(executors) == 1, f"expected one executor on one worker: {executors}"
            while not self._new_objects():
                if self.done.wait(0.005) or time.monotonic() > deadline:
                    return
            os.kill(executors[0].pid, signal.SIGKILL)
            uploaded = [n for n in self._new_objects() if n.endswith(".log") and n[0] != "."]
            self.kill = ExecutorKill(executors[0], len(uploaded))
            if not self.done.wait(self.timeout_s):
                self.cancelled = True
                self.spark.sparkContext.cancelAllJobs()
        except BaseException as e:  # reported by the test
            self.error = e


def _partition_dir(root: Path) -> Path:
    """The tiered partition's directory in the local RSM (every object is in it)."""
    (directory,) = {p.parent for p in _storage_files(root)}
    return directory


@pytest.mark.spark
@pytest.mark.slow
@standalone
def test_an_executor_jvm_killed_during_the_rewrite_is_replaced_and_nothing_is_lost(
    initial: Initial,
    reference: Reference,
    tmp_path: Path,
    spark_sessions: SparkSessions,
    spark_standalone_cluster: SparkCluster,
    record_property: Callable[[str, object], None],
) -> None:
    """kill -9 of the executor JVM (``CoarseGrainedExecutorBackend``, with its Python workers
    under it) while the rewrite tasks upload cleaned segments; the driver runs in this process.

    The worker reports the executor dead and the master has it start a new one for the
    application (``spark.deploy.maxExecutorRetries``, 10). The tasks the dead executor ran, and
    the shuffle output it held, are lost: Spark reruns them on the new executor (a task may fail
    ``spark.task.maxFailures`` times, 4 on a cluster), which uploads the same segments again
    under the same ids. Either the round completes, equal to the reference, on the new
    executor; or, if Spark gives up, the round fails and nothing was published wrongly: no
    record lost or doubled, and a rerun on the cluster converges. The test records which
    happened (``outcome``) and checks that case's evidence."""
    from tierlog.compaction.spark_engine import SparkEngine

    cluster = spark_standalone_cluster
    root = initial.copy(tmp_path / "state")
    spark = spark_sessions.get(cluster.url)
    killer = _ExecutorKiller(cluster, spark, _partition_dir(root), timeout_s=SPARK_CHILD_TIMEOUT_S)
    killer.start()
    failure: Exception | None = None
    summary: dict[str, object] = {}
    try:
        summary = child.run(
            root, ["clean", "expire"], now_ms=initial.now_ms, engine=SparkEngine(spark)
        )
    except Exception as e:  # Spark gave up: py4j's error carrying the SparkException
        failure = e
    finally:
        killer.done.set()
        killer.join()
    if killer.error is not None:
        raise killer.error
    assert not killer.cancelled, f"the round did not end {SPARK_CHILD_TIMEOUT_S} s after the kill"
    kill = killer.kill
    assert kill is not None, "the round ran no upload on an executor the test could find"
    assert kill.uploaded < reference.published, "the kill came after every upload"
    dead = kill.executor
    _wait_for(f"the killed executor {dead.pid} to go", lambda: not dead.alive(), GONE_TIMEOUT_S)
    worker_log = dead.worker.log_path.read_text(errors="replace")
    assert f"Executor {dead.app_id}/{dead.executor_id} finished with state" in worker_log

    outcome = "completed" if failure is None else "gave up"
    record_property("outcome", outcome)
    record_property("uploads_before_the_kill", kill.uploaded)
    # A write the kill cut short leaves its hidden temporary file, which nothing but the
    # segment's deletion removes (reported; convergence fails on it).
    record_property(
        "temp_files_after_the_round", [p.name for p in _storage_files(root) if p.name[0] == "."]
    )
    if failure is None:
        # The rewrite went on on an executor the worker started after the kill.
        replacements = [
            e for e in cluster.executors(dead.app_id) if int(e.executor_id) > int(dead.executor_id)
        ]
        assert replacements, f"no executor replaced {dead} (outcome {outcome})"
        ran = (replacements[0].directory / "stderr").read_text(errors="replace")
        assert "Running task" in ran, f"the new executor ran no task:\n{ran[-2000:]}"
        assert summary["cleaned"] and summary["published"] == reference.published
        view = read_tiered(root, initial.now_ms)
        check_tiered_read(view, initial, reference)
        check_converged(view, reference)
        return

    # Spark gave up: the round failed before publishing, or part-way through.
    spark_sessions.stop()  # a new application for the rerun
    view = read_tiered(root, initial.now_ms)
    check_tiered_read(view, initial, reference)
    summary = child.run(
        root,
        ["clean", "expire"],
        now_ms=initial.now_ms,
        engine=SparkEngine(spark_sessions.get(cluster.url)),
    )
    rerun = read_tiered(root, initial.now_ms)
    check_tiered_read(rerun, initial, reference)
    check_converged(rerun, reference)
