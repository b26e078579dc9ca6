"""``tierlog quickstart``: tiered storage end to end on this machine, verified record by record.

The README's first command. On the embedded defaults (``local`` RSM, ``embedded`` RLMM, both on
disk under the directory it prints) it runs a ``tierlog.Node`` in-process and:

1. writes the ``server.properties`` it uses, so that ``tierlog serve --config`` can reopen the
   same node afterwards;
2. produces ``--size-mib`` of deterministic records: each record's key names its partition and
   offset and its value is a function of them, so every record read back can be checked
   against what was written, byte for byte;
3. lets the node's *periodic* tasks (not a forced run) copy sealed segments to remote storage
   and local retention delete them, until the local log starts above offset 0;
4. consumes every partition from offset 0 through ``Node.fetch`` (remote storage below the local
   log start, local segments above), checking that offsets are contiguous and every record is
   the one written;
5. sets ``retention.bytes`` so that remote retention expires the oldest segments, waits for the
   log start offset to move, and checks the new first record;
6. prints a summary: records and MiB written, segments and bytes tiered, copy and remote read
   throughput, RSM requests per remote fetch, segments expired, final offsets, the config and
   the command to rerun it with ``serve`` (with ``--clean``, which removes the directory and
   its config, the settings only: there is nothing left to rerun).

It exits 0 only if every record was read back exactly; otherwise it names the first records
that were wrong (partition, offset, what differed) and exits 1.

``--compacted`` runs the second quickstart instead (``tierlog.cli._quickstart_compacted``): a
compacted tiered topic, compacted through remote storage (``--engine python|spark``), verified
the same way against what a cleaned log must hold.

**What "RSM requests per remote fetch" counts.** The node configures its own ``local`` RSM from
the config file, exactly as ``serve`` would; the quickstart then wraps the methods of that very
instance to count the calls the node makes (``fetch_log_segment`` and ``fetch_index``) while it
consumes, and divides by the number of fetches served from remote storage. Nothing is replaced,
so the count is what any RSM (an object store's ranged GETs) would see. Copies are timed by the
same wrapper: "copy throughput" is the bytes the RLM copied over the window from the start of
the first ``copy_log_segment_data`` to the end of the last (busy time in RSM copies is shown
too, as the window also holds waits for segments to fill).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import struct
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from tierlog.log.local_log import OffsetOutOfRangeError
from tierlog.node.config import NodeConfig
from tierlog.node.node import FetchResult, Node
from tierlog.progress import Progress
from tierlog.properties import format_properties
from tierlog.spi import (
    InvalidArgumentError,
    RemoteLogSegmentState,
    RemoteStorageManager,
    RemoteStorageNotReadyException,
    TierlogError,
    TopicPartition,
)

if TYPE_CHECKING:
    from tierlog.cli._quickstart_compacted import CompactedQuickstartResult

__all__ = ["QuickstartResult", "add_parser", "run", "run_quickstart"]

MIB: Final = 1 << 20
TOPIC: Final = "quickstart"
CONFIG_FILE: Final = "server.properties"
TASK_INTERVAL_MS: Final = 1000
"""RLM tasks and local retention every second: the quickstart watches the periodic tasks work,
and Kafka's defaults (30 s, 5 min) would make that a long wait."""
MAX_SEGMENT_BYTES: Final = 16 * MIB
MIN_SEGMENT_BYTES: Final = MIB  # Kafka's minimum log.segment.bytes
SEGMENTS_PER_PARTITION: Final = 16
LOCAL_RETENTION_SEGMENTS: Final = 2
FETCH_MAX_BYTES: Final = MIB
_PREFIX: Final = struct.Struct(">IQ")
_BLOCK_BYTES: Final = MIB
_SEED: Final = 405
_MAX_PROBLEMS: Final = 10
_PROGRESS_STEP: Final = 5.0
"""Percent between two progress lines off a terminal (on one, ``Progress`` draws a bar)."""


# Records ---------------------------------------------------------------------------------------
class _Records:
    """Record ``(partition, offset)``: key ``b"<partition>-<offset>"``, value the partition and
    offset (big-endian) then ``record_bytes - 12`` bytes of a fixed pseudo-random block at a
    position derived from both. Cheap to generate and to check, and no two records alike."""

    def __init__(self, record_bytes: int) -> None:
        self.record_bytes = record_bytes
        self._block = random.Random(_SEED).randbytes(_BLOCK_BYTES + record_bytes)
        self._span = _BLOCK_BYTES

    def key(self, partition: int, offset: int) -> bytes:
        return f"{partition}-{offset}".encode()

    def value(self, partition: int, offset: int) -> bytes:
        start = (offset * 7919 + partition * 104_729) % self._span
        body = self._block[start : start + self.record_bytes - _PREFIX.size]
        return _PREFIX.pack(partition, offset) + body

    def check(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> str:
        """What is wrong with a record read back at ``(partition, offset)`` ("" if nothing)."""
        expected_key = self.key(partition, offset)
        if key != expected_key:
            return f"key is {key!r}, expected {expected_key!r}"
        expected = self.value(partition, offset)
        if value == expected:
            return ""
        if value is None:
            return "value is null"
        if len(value) != len(expected):
            return f"value is {len(value)} bytes, expected {len(expected)}"
        at = next(i for i, (a, b) in enumerate(zip(value, expected, strict=True)) if a != b)
        return f"value differs from what was written at byte {at} of {len(value)}"


# Counting the node's RSM calls -----------------------------------------------------------------
class _RsmCalls:
    """Counts and times the calls made to one RSM instance, by wrapping its methods in place
    (module docstring): the node, its RLM, reader and index cache all hold this instance."""

    _COUNTED: Final = (
        "fetch_log_segment",
        "fetch_index",
        "copy_log_segment_data",
        "delete_log_segment_data",
    )

    def __init__(self, rsm: RemoteStorageManager) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.copy_busy_s = 0.0
        self.first_copy_start: float | None = None
        self.last_copy_end: float | None = None
        for name in self._COUNTED:
            setattr(rsm, name, self._wrap(name, getattr(rsm, name)))

    def _wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            with self._lock:
                self.calls[name] += 1
                if name == "copy_log_segment_data" and self.first_copy_start is None:
                    self.first_copy_start = started
            try:
                return method(*args, **kwargs)
            finally:
                if name == "copy_log_segment_data":
                    ended = time.monotonic()
                    with self._lock:
                        self.copy_busy_s += ended - started
                        self.last_copy_end = ended

        return counted

    def snapshot(self) -> Counter[str]:
        """The calls so far (a copy: the RLM's threads keep counting)."""
        with self._lock:
            return Counter(self.calls)

    def copy_times(self) -> tuple[float, float]:
        """(window from the first copy's start to the last copy's end, time inside copies)."""
        with self._lock:
            if self.first_copy_start is None or self.last_copy_end is None:
                return 0.0, self.copy_busy_s
            return self.last_copy_end - self.first_copy_start, self.copy_busy_s


def _say(err: TextIO, line: str) -> None:
    print(line, file=err, flush=True)


# Result ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionOffsets:
    partition: int
    log_start_offset: int
    local_log_start_offset: int
    log_end_offset: int
    remote_segments: int
    local_segments: int


@dataclass
class QuickstartResult:
    """What a run did and measured; ``ok`` only if every record was read back exactly."""

    directory: Path
    config_path: Path
    config_text: str
    size_mib: float
    record_bytes: int
    partitions: int
    problems: list[str] = field(default_factory=list)
    records_written: int = 0
    bytes_written: int = 0
    produce_s: float = 0.0
    segments_tiered: int = 0
    bytes_tiered: int = 0
    copy_window_s: float = 0.0
    copy_busy_s: float = 0.0
    tier_wait_s: float = 0.0
    local_log_cut: bool = False
    records_verified: int = 0
    consume_s: float = 0.0
    remote_fetches: int = 0
    remote_bytes_read: int = 0
    remote_read_s: float = 0.0
    rsm_reads: int = 0
    rsm_segment_reads: int = 0
    rsm_index_fetches: int = 0
    retention_bytes: int = 0
    segments_expired: int = 0
    expired_records: int = 0
    final: list[PartitionOffsets] = field(default_factory=list)
    wall_s: float = 0.0
    kept: bool = True
    removed: list[Path] = field(default_factory=list)
    """What ``--clean`` removed (the directory, or the data and config in a directory given)."""

    @property
    def ok(self) -> bool:
        return not self.problems and self.records_verified == self.records_written > 0

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def summary(self) -> str:
        """The table printed at the end (stdout)."""

        def rate(num_bytes: int, seconds: float) -> str:
            return f"{num_bytes / MIB / seconds:.1f} MiB/s" if seconds > 0 else "n/a"

        per_fetch = self.rsm_reads / self.remote_fetches if self.remote_fetches else 0.0
        rows = [
            (
                "records written",
                f"{self.records_written:,} x {self.record_bytes} B values "
                f"in {self.partitions} partition(s)",
            ),
            (
                "MiB written",
                f"{self.bytes_written / MIB:.1f} MiB in {self.produce_s:.1f} s "
                f"({rate(self.bytes_written, self.produce_s)})",
            ),
            (
                "segments tiered",
                f"{self.segments_tiered} ({self.bytes_tiered / MIB:.1f} MiB); "
                f"local log cut: {'yes' if self.local_log_cut else 'NO'} "
                f"({self.tier_wait_s:.1f} s after the last write)",
            ),
            (
                "copy throughput",
                f"{rate(self.bytes_tiered, self.copy_window_s)} over the "
                f"{self.copy_window_s:.1f} s copy window "
                f"({rate(self.bytes_tiered, self.copy_busy_s)} in RSM copies)",
            ),
            (
                "records verified",
                f"{self.records_verified:,} of {self.records_written:,} in {self.consume_s:.1f} s",
            ),
            (
                "remote reads",
                f"{self.remote_fetches} fetches, "
                f"{self.remote_bytes_read / MIB:.1f} MiB, "
                f"{rate(self.remote_bytes_read, self.remote_read_s)}",
            ),
            (
                "RSM requests/fetch",
                f"{per_fetch:.2f} ({self.rsm_segment_reads} segment reads + "
                f"{self.rsm_index_fetches} index fetches for {self.remote_fetches} remote fetches)",
            ),
            (
                "segments expired",
                f"{self.segments_expired} (retention.bytes="
                f"{self.retention_bytes}; {self.expired_records:,} records before the log start)",
            ),
        ]
        for p in self.final:
            rows.append(
                (
                    f"partition {p.partition}",
                    f"log start {p.log_start_offset:,}, local start {p.local_log_start_offset:,}, "
                    f"end {p.log_end_offset:,}; {p.remote_segments} remote + "
                    f"{p.local_segments} local segments",
                )
            )
        rows.append(("wall time", f"{self.wall_s:.1f} s"))
        width = max(len(name) for name, _ in rows)
        verdict = (
            "quickstart OK: every record read back exactly" if self.ok else "quickstart FAILED"
        )
        lines = [verdict, ""]
        lines += [f"  {name.ljust(width)}  {value}" for name, value in rows]
        if self.problems:
            lines += ["", "Problems:"] + [f"  - {p}" for p in self.problems]
        config_lines = [line for line in self.config_text.splitlines() if line.strip()]
        if self.kept:
            lines += ["", f"Config ({self.config_path}):"]
            lines += [f"  {line}" for line in config_lines]
            lines += ["", f"Rerun this node with: tierlog serve --config {self.config_path}"]
        else:
            # The file is gone with the data: its comment's "Rerun it with" would send the user
            # to a file that no longer exists.
            lines += ["", "Config it ran with (removed by --clean):"]
            lines += [f"  {line}" for line in config_lines if not line.startswith("#")]
            removed = " and ".join(str(p) for p in self.removed) or str(self.directory)
            lines += [
                "",
                f"{removed} {'were' if len(self.removed) > 1 else 'was'} removed (--clean).",
            ]
        return "\n".join(lines)


# The run ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Plan:
    """How much a run writes and the segment and local retention sizes that make it tier."""

    per_partition: int
    partitions: int
    segment_bytes: int
    local_retention_bytes: int


def _plan(size_mib: float, record_bytes: int, partitions: int) -> _Plan:
    """Segments of 1/16 of a partition (1 to 16 MiB), a local retention of two segments."""
    if record_bytes < _PREFIX.size + 4:
        raise InvalidArgumentError(f"--record-bytes must be at least {_PREFIX.size + 4}")
    if record_bytes > 512 * 1024:
        raise InvalidArgumentError("--record-bytes must be at most 524288 (512 KiB)")
    if partitions < 1:
        raise InvalidArgumentError("--partitions must be at least 1")
    per_partition = size_mib * MIB / partitions
    segment = int(per_partition / SEGMENTS_PER_PARTITION) // MIB * MIB
    segment = max(MIN_SEGMENT_BYTES, min(MAX_SEGMENT_BYTES, segment))
    needed = (LOCAL_RETENTION_SEGMENTS + 3) * segment
    if per_partition < needed:
        raise InvalidArgumentError(
            f"--size-mib {size_mib:g} is too small for {partitions} partition(s): each needs at "
            f"least {needed // MIB} MiB so that segments are tiered and the local log is cut"
        )
    return _Plan(
        int(per_partition) // record_bytes,
        partitions,
        segment,
        LOCAL_RETENTION_SEGMENTS * segment,
    )


BOOTSTRAP_SERVERS_KEY: Final = "rlmm.config.remote.log.metadata.common.client.bootstrap.servers"
"""Where the ``topic`` RLMM finds its Kafka cluster (Kafka's key, with the RLMM prefix)."""

TOPIC_RLMM_QUICKSTART_DEFAULTS: Final = {
    "rlmm.config.remote.log.metadata.topic.replication.factor": 1,
    "rlmm.config.remote.log.metadata.topic.min.isr": 1,
}
"""A quickstart runs against whatever cluster it is given, often a single broker: the metadata
topic it creates (if absent) is not replicated unless ``--rlmm-config`` says otherwise."""


@dataclass(frozen=True)
class MetadataChoice:
    """Which RLMM the quickstart's node uses: ``embedded`` (the default, nothing else needed)
    or ``topic`` (Kafka's ``__remote_log_metadata`` on a real cluster, the ``rlmm_topic``
    plugin), with extra ``rlmm.config.`` keys."""

    name: str = "embedded"
    bootstrap_servers: str | None = None
    config: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.name not in ("embedded", "topic"):
            raise InvalidArgumentError(f"--rlmm {self.name}: must be embedded or topic")
        if self.name == "topic" and not self.bootstrap_servers:
            raise InvalidArgumentError(
                "--rlmm topic needs --bootstrap-servers HOST:PORT (the Kafka cluster that "
                "holds __remote_log_metadata)"
            )
        if self.name == "embedded" and (self.bootstrap_servers or self.config):
            raise InvalidArgumentError(
                "--bootstrap-servers and --rlmm-config apply to --rlmm topic only"
            )

    def props(self) -> dict[str, object]:
        """The node's RLMM keys."""
        props: dict[str, object] = {"remote.log.metadata.manager.class.name": self.name}
        if self.name == "topic":
            props[BOOTSTRAP_SERVERS_KEY] = self.bootstrap_servers
            props |= TOPIC_RLMM_QUICKSTART_DEFAULTS
            for key, value in self.config:
                props[f"rlmm.config.{key.removeprefix('rlmm.config.')}"] = value
        return props

    def describe(self) -> str:
        if self.name == "embedded":
            return "local RSM and embedded RLMM under log.dirs"
        return f"local RSM, topic RLMM on the Kafka cluster at {self.bootstrap_servers}"


def _config_props(
    log_dir: Path, partitions: int, segment: int, local: int, metadata: MetadataChoice
) -> dict[str, object]:
    return {
        "node.id": 0,
        "log.dirs": str(log_dir),
        "num.partitions": partitions,
        "remote.log.storage.system.enable": True,
        "remote.log.storage.manager.class.name": "local",
        **metadata.props(),
        "remote.log.manager.task.interval.ms": TASK_INTERVAL_MS,
        "log.retention.check.interval.ms": TASK_INTERVAL_MS,
        "log.segment.bytes": segment,
        "log.local.retention.bytes": local,
    }


def _prepare_directory(directory: Path | None) -> tuple[Path, bool]:
    if directory is None:
        return Path(tempfile.mkdtemp(prefix="tierlog-quickstart-")), True
    directory = directory.expanduser()
    if directory.exists():
        if not directory.is_dir():
            raise InvalidArgumentError(f"--dir {directory} is not a directory")
        if any(directory.iterdir()):
            raise InvalidArgumentError(
                f"--dir {directory} is not empty: give a new or empty directory (a quickstart "
                "always starts from nothing, so that every record it reads is one it wrote)"
            )
        return directory, False
    directory.mkdir(parents=True)
    return directory, True


def run_quickstart(
    directory: Path | None = None,
    *,
    size_mib: float = 256,
    record_bytes: int = 1024,
    partitions: int = 1,
    keep: bool = True,
    err: TextIO | None = None,
    timeout_s: float | None = None,
    after_tiering: Callable[[Node], None] | None = None,
    metadata: MetadataChoice | None = None,
) -> QuickstartResult:
    """Run the quickstart (module docstring) and return what it measured.

    ``timeout_s`` bounds each wait for the periodic tasks (default: 60 s plus 1 s per 10 MiB).
    ``after_tiering`` is called with the running node once the local log has been cut, before
    anything is read back (tests use it to damage remote data and see the run fail).
    ``metadata`` chooses the RLMM (default: ``embedded``). Invalid
    options raise ``InvalidArgumentError``; a record read back wrong is a problem in the result,
    not an exception.
    """
    err = sys.stderr if err is None else err
    started = time.monotonic()
    plan = _plan(size_mib, record_bytes, partitions)
    segment, local = plan.segment_bytes, plan.local_retention_bytes
    directory, created = _prepare_directory(directory)
    wait_s = timeout_s if timeout_s is not None else 60.0 + size_mib / 10
    config_path = directory / CONFIG_FILE
    metadata = metadata or MetadataChoice()
    props = _config_props(directory / "logs", partitions, segment, local, metadata)
    config_text = format_properties(
        props,
        comments=[
            f"Written by `tierlog quickstart`: a node with the {metadata.describe()},",
            "tiering every second. Rerun it with",
            f"  tierlog serve --config {config_path}",
        ],
    )
    config_path.write_text(config_text, encoding="utf-8")
    config = NodeConfig.from_file(config_path)
    result = QuickstartResult(
        directory, config_path, config_text, size_mib, record_bytes, partitions
    )
    _say(err, f"tierlog quickstart in {directory} (config {config_path})")
    _say(
        err,
        f"  {size_mib:g} MiB of {record_bytes}-byte records in {partitions} partition(s); "
        f"segments of {segment // MIB} MiB, local retention {local // MIB} MiB",
    )
    records = _Records(record_bytes)
    with Node(config) as node:
        assert node.rsm is not None and node.rlm is not None
        calls = _RsmCalls(node.rsm)
        node.create_topic(TOPIC, partitions, {"remote.storage.enable": "true"})
        _produce(node, records, plan, result, err)
        _wait_for_tiering(node, result, local, wait_s, err)
        result.segments_tiered = node.rlm.copied_segments
        result.bytes_tiered = node.rlm.copied_bytes
        result.copy_window_s, result.copy_busy_s = calls.copy_times()
        if after_tiering is not None:
            after_tiering(node)
        before = calls.snapshot()
        _consume(node, records, plan, result, err)
        read = calls.snapshot() - before
        result.rsm_segment_reads = read["fetch_log_segment"]
        result.rsm_index_fetches = read["fetch_index"]
        result.rsm_reads = result.rsm_segment_reads + result.rsm_index_fetches
        if result.ok:
            _expire(node, records, result, wait_s, err)
        result.final = _offsets(node)
    result.wall_s = time.monotonic() - started
    if not keep and result.ok:
        if created:
            shutil.rmtree(directory, ignore_errors=True)
            result.removed = [directory]
        else:
            shutil.rmtree(directory / "logs", ignore_errors=True)
            config_path.unlink(missing_ok=True)
            result.removed = [directory / "logs", config_path]
        result.kept = False
    return result


def _produce(
    node: Node, records: _Records, plan: _Plan, result: QuickstartResult, err: TextIO
) -> None:
    per_partition, partitions = plan.per_partition, plan.partitions
    chunk = max(1, (256 * 1024) // records.record_bytes)
    total = per_partition * partitions * records.record_bytes
    started = time.monotonic()
    with Progress("produce", total, unit="bytes", file=err, step=_PROGRESS_STEP) as progress:
        for base in range(0, per_partition, chunk):
            end = min(base + chunk, per_partition)
            for p in range(partitions):
                batch = [(records.key(p, o), records.value(p, o)) for o in range(base, end)]
                (written,) = node.produce(TOPIC, batch, partition=p)
                if written.base_offset != base:
                    raise TierlogError(
                        f"partition {p}: the node appended at offset {written.base_offset}, "
                        f"expected {base}"
                    )
                result.records_written += end - base
                result.bytes_written += (end - base) * records.record_bytes
            progress.update(result.bytes_written)
    result.produce_s = time.monotonic() - started


def _wait_for_tiering(
    node: Node, result: QuickstartResult, local: int, wait_s: float, err: TextIO
) -> None:
    """Until every partition's sealed segments are copied and local retention has cut its log:
    the periodic tasks' work, watched, never forced."""
    started = time.monotonic()
    deadline = started + wait_s
    last_line = ""
    while True:
        statuses = node.status(TOPIC)
        done = all(
            s.local_log_start_offset > 0
            and s.copy_lag_segments == 0
            and s.local_bytes <= local + 2 * node.log(TOPIC, s.partition).config.segment_size
            for s in statuses
        )
        remote = sum(s.remote_segments for s in statuses)
        lag = sum(s.copy_lag_segments for s in statuses)
        local_mb = sum(s.local_bytes for s in statuses) / MIB
        line = (
            f"[tier] {remote} segments in remote storage, {lag} waiting to be copied, "
            f"{local_mb:.1f} MiB local, local log starts at "
            + ", ".join(f"{s.local_log_start_offset:,}" for s in statuses)
        )
        if line != last_line:
            _say(err, line)
            last_line = line
        if done:
            break
        if time.monotonic() > deadline:
            result.problems.append(
                f"the periodic tasks did not tier the topic and cut the local log within "
                f"{wait_s:.0f} s ({line[7:]})"
            )
            break
        time.sleep(0.1)
    result.tier_wait_s = time.monotonic() - started
    result.local_log_cut = not result.problems


def _fetch(
    node: Node, partition: int, offset: int, deadline: float, max_bytes: int = FETCH_MAX_BYTES
) -> FetchResult:
    """``Node.fetch`` retried while remote reads are shed (quota) or expire, or metadata is not
    ready."""
    while True:
        try:
            fetched = node.fetch(TOPIC, partition, offset, max_bytes=max_bytes, timeout_s=60)
        except RemoteStorageNotReadyException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
            continue
        retry = fetched.throttled or fetched.remote_fetch_expired
        if not retry or time.monotonic() > deadline:
            return fetched
        time.sleep(0.05)


def _consume(
    node: Node, records: _Records, plan: _Plan, result: QuickstartResult, err: TextIO
) -> None:
    """Read every partition from offset 0 and check every record (module docstring)."""
    per_partition, partitions = plan.per_partition, plan.partitions
    total = per_partition * partitions * records.record_bytes
    started = time.monotonic()
    with Progress("consume", total, unit="bytes", file=err, step=_PROGRESS_STEP) as progress:
        _consume_partitions(node, records, plan, result, progress)
    result.consume_s = time.monotonic() - started
    if result.records_verified != result.records_written and not result.problems:
        result.problems.append(
            f"{result.records_verified} records verified of {result.records_written} written"
        )


def _consume_partitions(
    node: Node, records: _Records, plan: _Plan, result: QuickstartResult, progress: Progress
) -> None:
    per_partition, partitions = plan.per_partition, plan.partitions
    for p in range(partitions):
        expected = 0
        max_bytes = FETCH_MAX_BYTES
        while expected < per_partition and len(result.problems) < _MAX_PROBLEMS:
            t0 = time.monotonic()
            try:
                fetched = _fetch(node, p, expected, t0 + 60, max_bytes)
            except TierlogError as e:
                if max_bytes > 1:
                    # Narrow it down: one batch per fetch from here to the one that fails.
                    max_bytes = 1
                    continue
                result.problems.append(
                    f"partition {p}: the batch at offset {expected} cannot be read: "
                    f"{type(e).__name__}: {e}"
                )
                break
            elapsed = time.monotonic() - t0
            if fetched.from_remote and not (fetched.throttled or fetched.remote_fetch_expired):
                result.remote_fetches += 1
                result.remote_bytes_read += len(fetched.batches)
                result.remote_read_s += elapsed
            if not fetched.records:
                result.problems.append(
                    f"partition {p}: no record at offset {expected} "
                    f"(throttled={fetched.throttled}, next offset {fetched.next_offset})"
                )
                break
            for rec in fetched.records:
                if rec.offset != expected:
                    result.problems.append(
                        f"partition {p}: offset {rec.offset} follows {expected - 1}: "
                        f"records {expected}..{rec.offset - 1} are missing"
                    )
                    expected = rec.offset
                wrong = records.check(p, rec.offset, rec.key, rec.value)
                if wrong:
                    result.problems.append(f"partition {p} offset {rec.offset}: {wrong}")
                else:
                    result.records_verified += 1
                expected = rec.offset + 1
            progress.update(result.records_verified * records.record_bytes)


def _expire(
    node: Node, records: _Records, result: QuickstartResult, wait_s: float, err: TextIO
) -> None:
    """Bound the topic's total size so that remote retention expires the oldest segments."""
    assert node.rlm is not None
    statuses = node.status(TOPIC)
    smallest = min(s.remote_bytes + s.local_bytes for s in statuses)
    local = node.log(TOPIC, 0).config.local_retention_bytes
    result.retention_bytes = max(local, smallest // 2)
    deleted_before = node.rlm.deleted_segments
    _say(err, f"[expire] setting retention.bytes={result.retention_bytes} on {TOPIC}")
    node.alter_topic_config(TOPIC, {"retention.bytes": result.retention_bytes})
    started = time.monotonic()
    deadline = started + wait_s
    last_line = ""
    while True:
        statuses = node.status(TOPIC)
        # Only the log start while waiting: the deletions are counted once retention ran.
        line = "[expire] waiting for remote retention, log starts at " + ", ".join(
            f"{s.log_start_offset:,}" for s in statuses
        )
        if line != last_line:
            _say(err, line)
            last_line = line
        if (
            node.rlm.deleted_segments > deleted_before
            and all(s.log_start_offset > 0 for s in statuses)
            and not any(_awaiting_deletion(node, s.partition, s.log_start_offset) for s in statuses)
        ):
            break
        if time.monotonic() > deadline:
            result.problems.append(
                f"remote retention did not expire any segment within {wait_s:.0f} s"
            )
            return
        time.sleep(0.1)
    _wait_for_expiration_runs(node, deadline)
    result.segments_expired = node.rlm.deleted_segments - deleted_before
    _say(
        err,
        f"[expire] {result.segments_expired} remote segments deleted, log starts at "
        + ", ".join(f"{s.log_start_offset:,}" for s in statuses),
    )
    for s in statuses:
        result.expired_records += s.log_start_offset
        start = s.log_start_offset
        first = _fetch(node, s.partition, start, time.monotonic() + 60).records
        if not first or first[0].offset != start:
            result.problems.append(
                f"partition {s.partition}: no record at the new log start {start}"
            )
        else:
            wrong = records.check(s.partition, start, first[0].key, first[0].value)
            if wrong:
                result.problems.append(f"partition {s.partition} offset {start}: {wrong}")
        with contextlib.suppress(OffsetOutOfRangeError):
            node.fetch(TOPIC, s.partition, start - 1)
            result.problems.append(
                f"partition {s.partition}: offset {start - 1}, below the log start, is still "
                "readable after expiry"
            )


def _wait_for_expiration_runs(node: Node, deadline: float) -> None:
    """Let the topic's expiration runs in progress end. A run counts its deletions
    (``RemoteLogManager.deleted_segments``) after publishing them, so a count read while it
    still runs may miss its last ones; once it ended, the count is the real number."""
    assert node.rlm is not None
    for tp in node.partitions():
        if tp.topic != TOPIC:
            continue
        for task in node.rlm.tasks(tp):
            scheduled = task.scheduled
            if task.kind != "expiration task" or scheduled is None:
                continue
            runs = scheduled.runs  # before ``running``: a run ending in between is counted
            if scheduled.running:
                scheduled.wait_runs(runs + 1, max(0.0, deadline - time.monotonic()))


def _awaiting_deletion(node: Node, partition: int, log_start_offset: int) -> bool:
    """Whether a remote segment wholly below the log start is still listed: the expiration
    task moves the log start first, then deletes segments one by one."""
    assert node.rlm is not None and node.rlmm is not None
    tp = node.rlm.topic_id_partition(TopicPartition(TOPIC, partition))
    return any(
        s.end_offset < log_start_offset
        and s.state is not RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
        for s in node.rlmm.list_remote_log_segments(tp)
    )


def _offsets(node: Node) -> list[PartitionOffsets]:
    return [
        PartitionOffsets(
            s.partition,
            s.log_start_offset,
            s.local_log_start_offset,
            s.log_end_offset,
            s.remote_segments,
            s.local_segments,
        )
        for s in node.status(TOPIC)
    ]


# Command line ----------------------------------------------------------------------------------
def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "quickstart",
        help="write, tier, read back and expire a topic on the embedded defaults",
        description="Run a tierlog node in-process on the embedded defaults (local RSM, "
        "embedded RLMM): write a topic, let the node tier it until local retention cuts the "
        "local log, consume everything from offset 0 verifying every record, let remote "
        "retention expire the oldest segments, and print a summary with the config to rerun "
        "with `tierlog serve`. With --compacted, the same for a compacted topic, compacted "
        "through remote storage. Exit status 0 only if every record was read back exactly.",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="new or empty directory for the config and the data "
        "(default: a new temporary directory, kept and printed)",
    )
    parser.add_argument(
        "--size-mib",
        type=float,
        default=None,
        help="MiB of record values to write (default 256; 24 with --compacted)",
    )
    parser.add_argument(
        "--record-bytes", type=int, default=1024, help="bytes per record value (default 1024)"
    )
    parser.add_argument(
        "--partitions", type=int, default=1, help="partitions of the topic (default 1)"
    )
    parser.add_argument(
        "--rlmm",
        choices=("embedded", "topic"),
        default="embedded",
        help="the metadata manager: embedded (default, local files) or topic (Kafka's "
        "__remote_log_metadata on a real cluster; needs the rlmm_topic plugin)",
    )
    parser.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT[,...]",
        help="--rlmm topic: the Kafka cluster holding __remote_log_metadata",
    )
    parser.add_argument(
        "--rlmm-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="--rlmm topic: an rlmm.config. key (prefix optional), e.g. "
        "remote.log.metadata.topic.replication.factor=3 (repeatable)",
    )
    parser.add_argument(
        "--compacted",
        action="store_true",
        help="the compacted quickstart: a cleanup.policy=compact topic tiered, compacted "
        "through remote storage in two rounds (Bloom filters skipping what the second cannot "
        "change), its local copies and replaced remote segments deleted, and every key's "
        "latest write read back from remote storage",
    )
    parser.add_argument(
        "--engine",
        choices=("python", "spark"),
        default=None,
        help="--compacted: run the rounds in the node's process (default) or as Spark jobs "
        "(tierlog[spark], local mode)",
    )
    keep = parser.add_mutually_exclusive_group()
    keep.add_argument(
        "--keep",
        dest="keep",
        action="store_true",
        default=True,
        help="keep the directory to rerun with `tierlog serve` (default)",
    )
    keep.add_argument(
        "--clean",
        dest="keep",
        action="store_false",
        help="remove what the quickstart wrote when it succeeds (kept on failure)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tierlog.properties import parse_overrides

    metadata = MetadataChoice(
        args.rlmm,
        args.bootstrap_servers,
        tuple(parse_overrides(args.rlmm_config).items()),
    )
    result: QuickstartResult | CompactedQuickstartResult
    if args.compacted:
        from tierlog.cli._quickstart_compacted import DEFAULT_SIZE_MIB, run_compacted_quickstart

        result = run_compacted_quickstart(
            args.dir,
            size_mib=DEFAULT_SIZE_MIB if args.size_mib is None else args.size_mib,
            record_bytes=args.record_bytes,
            partitions=args.partitions,
            engine=args.engine or "python",
            keep=args.keep,
            metadata=metadata,
        )
    else:
        if args.engine is not None:
            raise InvalidArgumentError("--engine applies to --compacted only")
        result = run_quickstart(
            args.dir,
            size_mib=256 if args.size_mib is None else args.size_mib,
            record_bytes=args.record_bytes,
            partitions=args.partitions,
            keep=args.keep,
            metadata=metadata,
        )
    print(result.summary())
    if not result.ok:
        print(
            f"tierlog: quickstart failed: {result.problems[0] if result.problems else 'see above'}"
            f" (data kept in {result.directory})",
            file=sys.stderr,
        )
    return result.exit_code
