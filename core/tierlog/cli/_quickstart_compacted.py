"""``tierlog quickstart --compacted``: a compacted topic tiered, compacted through remote
storage, and verified record by record.

The second quickstart, on the same embedded defaults as the first (``local`` RSM, ``embedded``
RLMM, on disk under the directory it prints), with a ``tierlog.Node`` in-process and a topic
with ``cleanup.policy=compact`` and ``remote.storage.enable=true``. It:

1. writes the ``server.properties`` it uses (``tierlog serve --config`` reopens the node, and
   ``tierlog compact --topic`` then runs a round on it);
2. produces a changelog (phase 1): a few hot keys updated over and over, a new cold key every
   fourth record (written once, as rows of a table that mostly does not change), some updates
   being tombstones; every value is a function of its partition, key and version, so any
   record read back can be checked;
3. lets the node's periodic copy task tier every sealed segment (the active segment is rolled
   first, so that the whole history is in remote storage);
4. runs a cleaning round (``LogCleanerManager.clean_partition``, what ``Node.compact_now``
   runs, with progress) on the chosen engine: it reads the segments (still on local disk, or
   downloaded), uploads a cleaned segment for each, and publishes them; local retention then
   drops the local copies, now below the cleaner checkpoint (the quickstart waits for it: the
   local log starts at its end);
5. produces a few updates of a handful of keys and deletes one cold key (phase 2), tiers them,
   and runs a second round: the segments cleaned by the first round are read only if their
   Bloom filters may hold one of those keys (the rest are never downloaded), which the summary
   shows as Bloom skips;
6. waits for local retention to drop the local copies again, and for the expiration task to
   delete every remote segment the rounds replaced (after
   ``remote.log.compaction.superseded.delete.delay.ms``), and checks through the RSM that their
   data is gone;
7. consumes the whole topic from its log start, all of it from remote storage, checking that
   what is left is exactly the latest write of every key, tombstones included (``delete
   .retention.ms`` has not passed), and nothing older;
8. prints a summary: records and keys written, each round's figures (bytes read and written,
   downloaded and uploaded, Bloom skips, records kept and dropped), the remote size before and
   after, the replaced segments deleted, the reads, the config and the commands to go on.

The cleaner threads are off in its config (``log.cleaner.enable=false``): the quickstart runs
each round itself, so that what it shows and checks is the round it ran. Exit 0 only if every
check passed; otherwise the first problems are named and the data is kept.
"""

from __future__ import annotations

import random
import shutil
import struct
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

from tierlog.cli._compact import PhaseBars, summary_line
from tierlog.cli._quickstart import (
    CONFIG_FILE,
    MIB,
    MIN_SEGMENT_BYTES,
    TASK_INTERVAL_MS,
    MetadataChoice,
    _prepare_directory,
    _RsmCalls,
    _say,
)
from tierlog.compaction.tiered import TieredCleanResult, remote_chain
from tierlog.node.config import NodeConfig
from tierlog.node.http_api import compaction_json
from tierlog.node.node import FetchResult, Node
from tierlog.progress import Progress
from tierlog.properties import format_properties
from tierlog.spi import (
    InvalidArgumentError,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteResourceNotFoundException,
    RemoteStorageNotReadyException,
    TierlogError,
    TopicIdPartition,
    TopicPartition,
)

__all__ = ["COMPACTED_TOPIC", "CompactedQuickstartResult", "run_compacted_quickstart"]

COMPACTED_TOPIC: Final = "quickstart-compacted"
DEFAULT_SIZE_MIB: Final = 24
ENGINES: Final = ("python", "spark")
HOT_KEYS: Final = 64
"""Keys updated over and over in phase 1 (per partition)."""
PHASE2_KEYS: Final = 4
"""Hot keys phase 2 updates: few, so the second round's dirty keys touch few segments."""
COLD_EVERY: Final = 4
"""Phase 1 writes a new cold key (once) every this many records."""
TOMBSTONE_ONE_IN: Final = 20
"""About one hot update in this many is a tombstone."""
PHASE1_SHARE: Final = 0.8
SEGMENTS_PER_PARTITION: Final = 24
MAX_SEGMENT_BYTES: Final = 16 * MIB
LOCAL_RETENTION_MS: Final = 1000
SUPERSEDED_DELETE_DELAY_MS: Final = 1000
"""How long a replaced remote segment stays before the expiration task deletes it (Kafka's
``file.delete.delay.ms`` is a minute; a second is enough to watch it here)."""
_PREFIX: Final = struct.Struct(">IIQ")
_BLOCK_BYTES: Final = MIB
_SEED: Final = 12
_MAX_PROBLEMS: Final = 10
_PROGRESS_STEP: Final = 5.0


# The changelog ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Write:
    key: int
    version: int
    tombstone: bool


class _Changelog:
    """What a partition is written: ``writes[offset]`` (contiguous from 0), its keys' names and
    values. Key ``k`` is hot below ``HOT_KEYS`` and cold above; the value of a version is the
    partition, key and version (big-endian) then bytes of a fixed pseudo-random block."""

    def __init__(self, partition: int, record_bytes: int, block: bytes) -> None:
        self.partition = partition
        self.record_bytes = record_bytes
        self._block = block
        self._rng = random.Random(_SEED * 1_000_003 + partition)
        self.writes: list[_Write] = []
        self._versions: dict[int, int] = {}
        self._cold = HOT_KEYS
        self.phase2_keys = sorted(self._rng.sample(range(HOT_KEYS), PHASE2_KEYS))

    def key(self, k: int) -> bytes:
        kind = "hot" if k < HOT_KEYS else "cold"
        return f"{kind}-{self.partition}-{k:07d}".encode()

    def value(self, write: _Write) -> bytes | None:
        if write.tombstone:
            return None
        span = len(self._block) - self.record_bytes
        start = (write.key * 7919 + write.version * 104_729) % span
        body = self._block[start : start + self.record_bytes - _PREFIX.size]
        return _PREFIX.pack(self.partition, write.key, write.version) + body

    def _write(self, k: int, tombstone: bool) -> _Write:
        version = self._versions.get(k, -1) + 1
        self._versions[k] = version
        write = _Write(k, version, tombstone)
        self.writes.append(write)
        return write

    def phase1(self, count: int) -> list[_Write]:
        out = []
        for i in range(count):
            if i % COLD_EVERY == 0:
                out.append(self._write(self._cold, False))
                self._cold += 1
            else:
                k = self._rng.randrange(HOT_KEYS)
                out.append(self._write(k, self._rng.randrange(TOMBSTONE_ONE_IN) == 0))
        return out

    def phase2(self, count: int) -> list[_Write]:
        """Updates of ``phase2_keys`` only, and, half-way, the deletion of one cold key."""
        out = []
        for i in range(count):
            if i == count // 2 and self._cold > HOT_KEYS:
                out.append(self._write(self._rng.randrange(HOT_KEYS, self._cold), True))
                continue
            k = self._rng.choice(self.phase2_keys)
            out.append(self._write(k, self._rng.randrange(TOMBSTONE_ONE_IN) == 0))
        return out

    def survivors(self) -> list[int]:
        """The offset of each key's latest write, in offset order: what a fully cleaned log
        holds while no tombstone's ``delete.retention.ms`` has passed."""
        latest: dict[int, int] = {}
        for offset, write in enumerate(self.writes):
            latest[write.key] = offset
        return sorted(latest.values())

    def check(self, offset: int, key: bytes | None, value: bytes | None) -> str:
        """What is wrong with a record read at ``offset`` ("" if nothing)."""
        write = self.writes[offset]
        expected_key = self.key(write.key)
        if key != expected_key:
            return f"key is {key!r}, expected {expected_key!r}"
        expected = self.value(write)
        if value == expected:
            return ""
        if expected is None:
            return "a value where the tombstone was written"
        if value is None:
            return "a tombstone where a value was written"
        return f"value differs from version {write.version} of {expected_key!r}"


# Result ----------------------------------------------------------------------------------------
@dataclass
class RoundFigures:
    """One round of one partition: its summary (``compaction_json``) and the clean-section
    segments it could have read (for the Bloom figure)."""

    round: int
    summary: dict[str, Any]
    clean_segments: int


@dataclass
class CompactedQuickstartResult:
    """What a run did and measured; ``ok`` only if every check passed."""

    directory: Path
    config_path: Path
    config_text: str
    size_mib: float
    record_bytes: int
    partitions: int
    engine: str
    segment_bytes: int
    problems: list[str] = field(default_factory=list)
    records_written: int = 0
    keys_written: int = 0
    tombstones_written: int = 0
    bytes_written: int = 0
    produce_s: float = 0.0
    segments_tiered: int = 0
    bytes_tiered: int = 0
    rounds: list[RoundFigures] = field(default_factory=list)
    remote_bytes_after: int = 0
    """Bytes of the routed remote segments after the second round (``bytes_tiered`` is what
    the copies uploaded, before any round)."""
    replaced_segments: int = 0
    replaced_deleted: int = 0
    local_copies_dropped: bool = False
    expected_survivors: int = 0
    records_verified: int = 0
    tombstones_verified: int = 0
    records_from_remote: int = 0
    remote_fetches: int = 0
    rsm_segment_reads: int = 0
    consume_s: float = 0.0
    wall_s: float = 0.0
    kept: bool = True
    removed: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.records_verified == self.expected_survivors > 0

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def _total(self, name: str, round_no: int | None = None) -> int:
        return sum(
            int(r.summary.get(name, 0))
            for r in self.rounds
            if round_no is None or r.round == round_no
        )

    def summary(self) -> str:
        """The table printed at the end (stdout)."""
        reduction = (
            100.0 * (1 - self.remote_bytes_after / self.bytes_tiered) if self.bytes_tiered else 0.0
        )
        rows = [
            (
                "records written",
                f"{self.records_written:,} x {self.record_bytes} B values, "
                f"{self.keys_written:,} keys ({HOT_KEYS} hot per partition), "
                f"{self.tombstones_written:,} tombstones, in {self.partitions} partition(s), "
                f"{self.produce_s:.1f} s",
            ),
            (
                "segments tiered",
                f"{self.segments_tiered} ({self.bytes_tiered / MIB:.1f} MiB, segments of "
                f"{self.segment_bytes // MIB} MiB)",
            ),
        ]
        for n in sorted({r.round for r in self.rounds}):
            read, written = self._total("bytes_read", n), self._total("bytes_written", n)
            clean = sum(r.clean_segments for r in self.rounds if r.round == n)
            rows.append(
                (
                    f"round {n} ({self.engine})",
                    f"{self._total('segments_read', n)} segments read, "
                    f"{read / MIB:.1f} -> {written / MIB:.1f} MiB, "
                    f"{self._total('records_kept', n):,} records kept, "
                    f"{self._total('records_dropped', n):,} dropped",
                )
            )
            rows.append(
                (
                    f"round {n} remote",
                    f"{self._total('bytes_downloaded', n) / MIB:.2f} MiB downloaded, "
                    f"{self._total('bytes_uploaded', n) / MIB:.2f} MiB uploaded, Bloom "
                    f"skips: {self._total('segments_skipped', n)} of {clean} cleaned segments",
                )
            )
        rows += [
            (
                "remote size",
                f"{self.bytes_tiered / MIB:.1f} MiB tiered -> {self.remote_bytes_after / MIB:.1f} "
                f"MiB after the rounds ({reduction:.1f}% size reduction)",
            ),
            (
                "replaced segments",
                f"{self.replaced_deleted} of {self.replaced_segments} deleted by the expiration "
                "task (their data gone from the RSM)",
            ),
            (
                "local copies",
                "dropped by local retention (the local log starts at its end)"
                if self.local_copies_dropped
                else "NOT all dropped",
            ),
            (
                "records verified",
                f"{self.records_verified:,} of {self.expected_survivors:,} latest writes "
                f"({self.tombstones_verified:,} tombstones), each key once, in "
                f"{self.consume_s:.1f} s",
            ),
            (
                "remote reads",
                f"{self.records_from_remote:,} records from remote storage in "
                f"{self.remote_fetches} fetches ({self.rsm_segment_reads} RSM segment reads)",
            ),
            ("wall time", f"{self.wall_s:.1f} s"),
        ]
        width = max(len(name) for name, _ in rows)
        verdict = (
            "quickstart --compacted OK: the latest write of every key, and nothing older, "
            "read back from remote storage"
            if self.ok
            else "quickstart --compacted FAILED"
        )
        lines = [verdict, ""]
        lines += [f"  {name.ljust(width)}  {value}" for name, value in rows]
        if self.problems:
            lines += ["", "Problems:"] + [f"  - {p}" for p in self.problems]
        config_lines = [line for line in self.config_text.splitlines() if line.strip()]
        if self.kept:
            lines += ["", f"Config ({self.config_path}):"]
            lines += [f"  {line}" for line in config_lines if not line.startswith("#")]
            lines += [
                "",
                f"Rerun this node with: tierlog serve --config {self.config_path}",
                "and compact on demand with: "
                f"tierlog compact --topic {COMPACTED_TOPIC} --partition 0",
            ]
        else:
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
    phase1: int
    phase2: int
    segment_bytes: int


def _plan(size_mib: float, record_bytes: int, partitions: int) -> _Plan:
    """Segments of about 1/24 of a partition (1 to 16 MiB); 80% of the records in phase 1."""
    if record_bytes < _PREFIX.size + 4:
        raise InvalidArgumentError(f"--record-bytes must be at least {_PREFIX.size + 4}")
    if record_bytes > 512 * 1024:
        raise InvalidArgumentError("--record-bytes must be at most 524288 (512 KiB)")
    if partitions < 1:
        raise InvalidArgumentError("--partitions must be at least 1")
    per_partition = size_mib * MIB / partitions
    segment = int(per_partition / SEGMENTS_PER_PARTITION) // MIB * MIB
    segment = max(MIN_SEGMENT_BYTES, min(MAX_SEGMENT_BYTES, segment))
    needed = 6 * segment
    if per_partition < needed:
        raise InvalidArgumentError(
            f"--size-mib {size_mib:g} is too small for {partitions} partition(s) with "
            f"--compacted: each needs at least {needed // MIB} MiB, so that each phase fills "
            "segments to tier and compact"
        )
    records = int(per_partition) // record_bytes
    phase1 = int(records * PHASE1_SHARE)
    return _Plan(phase1, records - phase1, segment)


def _config_props(
    log_dir: Path, partitions: int, segment: int, engine: str, metadata: MetadataChoice
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
        "log.cleaner.enable": False,
        "remote.log.compaction.engine": engine,
        "remote.log.compaction.superseded.delete.delay.ms": SUPERSEDED_DELETE_DELAY_MS,
    }


TOPIC_CONFIGS: Final = {
    "cleanup.policy": "compact",
    "remote.storage.enable": "true",
    "local.retention.ms": str(LOCAL_RETENTION_MS),
}
"""The topic: compacted and tiered, local copies kept a second once the cleaner is past them."""


def run_compacted_quickstart(
    directory: Path | None = None,
    *,
    size_mib: float = DEFAULT_SIZE_MIB,
    record_bytes: int = 1024,
    partitions: int = 1,
    engine: str = "python",
    keep: bool = True,
    err: TextIO | None = None,
    timeout_s: float | None = None,
    metadata: MetadataChoice | None = None,
    after_compaction: Callable[[Node], None] | None = None,
    extra_props: Mapping[str, object] | None = None,
) -> CompactedQuickstartResult:
    """Run the compacted quickstart (module docstring) and return what it measured.

    ``engine`` is ``python`` (the node's process) or ``spark`` (``tierlog[spark]``, local
    mode). ``timeout_s`` bounds each wait for the periodic tasks (default: 60 s plus 1 s per 10
    MiB). ``after_compaction`` is called with the running node once both rounds ran, before
    anything is checked (tests use it to damage remote data and see the run fail).
    ``extra_props`` are added to the node's configuration (tests: the Spark master of their
    session). Invalid options raise ``InvalidArgumentError``; a wrong record is a problem in
    the result.
    """
    err = sys.stderr if err is None else err
    started = time.monotonic()
    if engine not in ENGINES:
        raise InvalidArgumentError(f"--engine {engine}: must be one of {', '.join(ENGINES)}")
    plan = _plan(size_mib, record_bytes, partitions)
    directory, created = _prepare_directory(directory)
    wait_s = timeout_s if timeout_s is not None else 60.0 + size_mib / 10
    config_path = directory / CONFIG_FILE
    metadata = metadata or MetadataChoice()
    props = _config_props(directory / "logs", partitions, plan.segment_bytes, engine, metadata)
    props |= dict(extra_props or {})
    config_text = format_properties(
        props,
        comments=[
            f"Written by `tierlog quickstart --compacted`: a node with the {metadata.describe()},",
            "tiering every second, its cleaner threads off (the quickstart ran each round).",
            f"Rerun it with `tierlog serve --config {config_path}`, and compact with",
            f"`tierlog compact --topic {COMPACTED_TOPIC} --partition 0`, or set",
            "log.cleaner.enable=true to let the cleaner threads do it.",
        ],
    )
    config_path.write_text(config_text, encoding="utf-8")
    config = NodeConfig.from_file(config_path)
    result = CompactedQuickstartResult(
        directory,
        config_path,
        config_text,
        size_mib,
        record_bytes,
        partitions,
        engine,
        plan.segment_bytes,
    )
    _say(err, f"tierlog quickstart --compacted in {directory} (config {config_path})")
    _say(
        err,
        f"  {size_mib:g} MiB of {record_bytes}-byte records in {partitions} partition(s) of "
        f"{COMPACTED_TOPIC} (cleanup.policy=compact, tiered): {HOT_KEYS} hot keys updated "
        f"over and over, a new cold key every {COLD_EVERY} records, tombstones; segments of "
        f"{plan.segment_bytes // MIB} MiB; the {engine} engine",
    )
    block = random.Random(_SEED).randbytes(_BLOCK_BYTES + record_bytes)
    logs = [_Changelog(p, record_bytes, block) for p in range(partitions)]
    with Node(config) as node:
        assert node.rsm is not None and node.rlm is not None
        calls = _RsmCalls(node.rsm)
        node.create_topic(COMPACTED_TOPIC, partitions, TOPIC_CONFIGS)
        run = _Run(node, logs, result, err, wait_s)
        run.phase(1, [log.phase1(plan.phase1) for log in logs])
        result.segments_tiered = node.rlm.copied_segments
        result.bytes_tiered = node.rlm.copied_bytes
        if not result.problems:
            run.phase(2, [log.phase2(plan.phase2) for log in logs])
        result.segments_tiered = node.rlm.copied_segments
        result.bytes_tiered = node.rlm.copied_bytes
        result.remote_bytes_after = sum(
            s.segment_size_in_bytes for p in range(partitions) for s in run.chain(p)
        )
        if after_compaction is not None:
            after_compaction(node)
        if not result.problems:
            run.wait_for_expiration()
        before = calls.snapshot()
        if not result.problems:
            run.consume()
        result.rsm_segment_reads = (calls.snapshot() - before)["fetch_log_segment"]
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


class _Run:
    """The steps of one run on its node (module docstring)."""

    def __init__(
        self,
        node: Node,
        logs: list[_Changelog],
        result: CompactedQuickstartResult,
        err: TextIO,
        wait_s: float,
    ) -> None:
        self.node = node
        self.logs = logs
        self.result = result
        self.err = err
        self.wait_s = wait_s
        self.replaced: dict[Any, RemoteLogSegmentMetadata] = {}
        """Every routed remote segment seen before a round, by id: those no longer routed at
        the end are the ones the rounds replaced."""

    def tip(self, partition: int) -> TopicIdPartition:
        assert self.node.rlm is not None
        return self.node.rlm.topic_id_partition(TopicPartition(COMPACTED_TOPIC, partition))

    def chain(self, partition: int) -> list[RemoteLogSegmentMetadata]:
        """The remote segments a reader is routed to, in offset order."""
        assert self.node.rlmm is not None
        log = self.node.log(COMPACTED_TOPIC, partition)
        return remote_chain(self.node.rlmm, self.tip(partition), log)

    def problem(self, text: str) -> None:
        if len(self.result.problems) < _MAX_PROBLEMS:
            self.result.problems.append(text)

    # Phases ------------------------------------------------------------------------------------
    def phase(self, number: int, writes: list[list[_Write]]) -> None:
        """Produce ``writes`` (per partition), roll, tier, and run a round on each partition."""
        self.produce(number, writes)
        for p in range(len(self.logs)):
            # The last writes leave the active segment, so that the copy task tiers them too.
            self.node.log(COMPACTED_TOPIC, p).roll()
        self.wait_for_tiering(number)
        if self.result.problems:
            return
        for p in range(len(self.logs)):
            chain = self.chain(p)
            self.replaced.update((s.remote_log_segment_id, s) for s in chain)
            self.clean(number, p, chain)
        if not self.result.problems:
            # Before anything else: the next round then finds the segments this one cleaned
            # in remote storage only, and downloads what it reads of them.
            self.wait_for_local_retention()

    def produce(self, number: int, writes: list[list[_Write]]) -> None:
        result = self.result
        chunk = max(1, (256 * 1024) // result.record_bytes)
        total = sum(len(w) for w in writes) * result.record_bytes
        done = 0
        started = time.monotonic()
        with Progress(
            f"produce phase {number}", total, unit="bytes", file=self.err, step=_PROGRESS_STEP
        ) as progress:
            longest = max(len(w) for w in writes)
            for base in range(0, longest, chunk):
                for log, part in zip(self.logs, writes, strict=True):
                    batch_writes = part[base : base + chunk]
                    if not batch_writes:
                        continue
                    first = len(log.writes) - len(part) + base
                    batch = [(log.key(w.key), log.value(w)) for w in batch_writes]
                    (written,) = self.node.produce(COMPACTED_TOPIC, batch, partition=log.partition)
                    if written.base_offset != first:
                        raise TierlogError(
                            f"partition {log.partition}: the node appended at offset "
                            f"{written.base_offset}, expected {first}"
                        )
                    result.records_written += len(batch)
                    result.tombstones_written += sum(w.tombstone for w in batch_writes)
                    done += len(batch) * result.record_bytes
                progress.update(done)
        result.bytes_written += done
        result.keys_written = sum(len({w.key for w in log.writes}) for log in self.logs)
        result.produce_s += time.monotonic() - started

    def wait_for_tiering(self, number: int) -> None:
        """Until the copy task has tiered every sealed segment (the whole log: the active
        segment is empty), watched, never forced."""
        deadline = time.monotonic() + self.wait_s
        last_line = ""
        while True:
            statuses = self.node.status(COMPACTED_TOPIC)
            line = "[tier] tiered up to offset " + ", ".join(
                f"{s.highest_offset_in_remote_storage:,} of {s.log_end_offset - 1:,}"
                for s in statuses
            )
            if line != last_line:
                _say(self.err, line)
                last_line = line
            if all(s.highest_offset_in_remote_storage == s.log_end_offset - 1 for s in statuses):
                return
            if time.monotonic() > deadline:
                self.problem(
                    f"phase {number}: the copy task did not tier the topic within "
                    f"{self.wait_s:.0f} s ({line[7:]})"
                )
                return
            time.sleep(0.1)

    def clean(self, number: int, partition: int, chain: list[RemoteLogSegmentMetadata]) -> None:
        """One round on ``partition`` (forced, as ``tierlog compact`` asks), with progress."""
        cleaner = self.node.cleaner
        assert cleaner is not None
        bars = PhaseBars(self.err, prefix=f"round {number} ")
        try:
            cleaned = cleaner.clean_partition(COMPACTED_TOPIC, partition, progress=bars)
        finally:
            bars.close()
        summary = compaction_json(cleaned)
        clean = sum(1 for s in chain if s.end_offset < summary["first_dirty_offset"])
        self.result.rounds.append(RoundFigures(number, summary, clean))
        _say(self.err, f"[compact] round {number}: {summary_line(summary)}")
        if not isinstance(cleaned, TieredCleanResult) or not cleaned.cleaned:
            self.problem(
                f"round {number} on partition {partition} cleaned nothing through remote "
                f"storage: {summary_line(summary)}"
            )
        elif cleaned.end_offset != self.node.log(COMPACTED_TOPIC, partition).log_end_offset:
            self.problem(
                f"round {number} on partition {partition} stopped at offset "
                f"{cleaned.end_offset}, not at the end of the tiered log"
            )
        elif number > 1 and clean >= 4 and not cleaned.segments_skipped:
            self.problem(
                f"round {number} on partition {partition} read all {clean} cleaned segments: "
                f"no Bloom filter ruled out any, though only {PHASE2_KEYS + 1} keys changed"
            )

    # After the rounds --------------------------------------------------------------------------
    def wait_for_local_retention(self) -> None:
        """Until local retention has dropped every local copy (all below the cleaner
        checkpoint after a round): the local log starts at its end."""
        deadline = time.monotonic() + self.wait_s
        last_line = ""
        while True:
            statuses = self.node.status(COMPACTED_TOPIC)
            line = "[local] local log starts at " + ", ".join(
                f"{s.local_log_start_offset:,} of {s.log_end_offset:,}" for s in statuses
            )
            if line != last_line:
                _say(self.err, line)
                last_line = line
            if all(s.local_log_start_offset == s.log_end_offset for s in statuses):
                self.result.local_copies_dropped = True
                return
            if time.monotonic() > deadline:
                self.problem(
                    f"local retention did not drop the local copies within {self.wait_s:.0f} s "
                    f"({line[8:]})"
                )
                return
            time.sleep(0.1)

    def wait_for_expiration(self) -> None:
        """Until the expiration task has deleted every segment the rounds replaced; then their
        data must be gone from the RSM too."""
        assert self.node.rlmm is not None and self.node.rsm is not None
        routed = {s.remote_log_segment_id for p in range(len(self.logs)) for s in self.chain(p)}
        replaced = {k: v for k, v in self.replaced.items() if k not in routed}
        written = sum(int(r.summary["segments_written"]) for r in self.result.rounds)
        self.result.replaced_segments = len(replaced)
        if len(replaced) != written:
            self.problem(
                f"the rounds published {written} cleaned segments but {len(replaced)} remote "
                "segments are no longer routed"
            )
        deadline = time.monotonic() + self.wait_s
        last_line = ""
        while True:
            listed = {
                s.remote_log_segment_id
                for p in range(len(self.logs))
                for s in self.node.rlmm.list_remote_log_segments(self.tip(p))
                if s.state is not RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
            }
            left = [k for k in replaced if k in listed]
            line = (
                f"[expire] {len(replaced) - len(left)} of {len(replaced)} replaced remote "
                "segments deleted by the expiration task"
            )
            if line != last_line:
                _say(self.err, line)
                last_line = line
            if not left:
                break
            if time.monotonic() > deadline:
                self.problem(
                    f"the expiration task did not delete {len(left)} replaced remote segments "
                    f"within {self.wait_s:.0f} s"
                )
                return
            time.sleep(0.1)
        gone = 0
        for metadata in replaced.values():
            try:
                self.node.rsm.fetch_log_segment(metadata, 0).close()
            except RemoteResourceNotFoundException:
                gone += 1
            else:
                self.problem(
                    f"replaced segment {metadata.remote_log_segment_id.id} "
                    f"[{metadata.start_offset}, {metadata.end_offset}] is still in the RSM"
                )
        self.result.replaced_deleted = gone

    def consume(self) -> None:
        """Read every partition from its log start: exactly the latest write of each key."""
        result = self.result
        expected = [log.survivors() for log in self.logs]
        result.expected_survivors = sum(len(e) for e in expected)
        started = time.monotonic()
        with Progress(
            "consume", result.expected_survivors, unit="records", file=self.err, step=25.0
        ) as progress:
            for log, survivors in zip(self.logs, expected, strict=True):
                self._consume_partition(log, survivors, progress)
        result.consume_s = time.monotonic() - started

    def _consume_partition(self, log: _Changelog, survivors: list[int], progress: Progress) -> None:
        result, p = self.result, log.partition
        plog = self.node.log(COMPACTED_TOPIC, p)
        offset, end = plog.log_start_offset, plog.log_end_offset
        at = 0  # index in survivors of the next record expected
        while offset < end and len(result.problems) < _MAX_PROBLEMS:
            try:
                fetched = self._fetch(p, offset)
            except TierlogError as e:
                self.problem(f"partition {p}: the read at offset {offset} failed: {e}")
                return
            records = [r for r in fetched.records if r.offset >= offset]
            if fetched.next_offset <= offset and not records:
                self.problem(f"partition {p}: no progress reading at offset {offset}")
                return
            if records:
                result.remote_fetches += fetched.from_remote
                if fetched.from_remote:
                    result.records_from_remote += len(records)
                else:
                    self.problem(
                        f"partition {p}: offsets {records[0].offset}..{records[-1].offset} were "
                        "read from the local log, not remote storage"
                    )
            for rec in records:
                want = survivors[at] if at < len(survivors) else None
                if rec.offset != want:
                    if want is not None and rec.offset > want:
                        self.problem(
                            f"partition {p}: the latest write of "
                            f"{log.key(log.writes[want].key)!r} (offset {want}) is missing"
                        )
                    else:
                        w = log.writes[rec.offset]
                        self.problem(
                            f"partition {p}: offset {rec.offset} (version {w.version} of "
                            f"{log.key(w.key)!r}) survived, though a later write replaced it"
                        )
                    # Resynchronise on this record.
                    while at < len(survivors) and survivors[at] < rec.offset:
                        at += 1
                    if at < len(survivors) and survivors[at] == rec.offset:
                        at += 1
                    continue
                at += 1
                wrong = log.check(rec.offset, rec.key, rec.value)
                if wrong:
                    self.problem(f"partition {p} offset {rec.offset}: {wrong}")
                    continue
                result.records_verified += 1
                result.tombstones_verified += rec.value is None
            progress.update(result.records_verified)
            offset = max(fetched.next_offset, records[-1].offset + 1 if records else offset)
        if at < len(survivors) and len(result.problems) < _MAX_PROBLEMS:
            self.problem(
                f"partition {p}: {len(survivors) - at} latest writes missing from offset "
                f"{survivors[at]} on"
            )

    def _fetch(self, partition: int, offset: int) -> FetchResult:
        """``Node.fetch``, again while remote reads are shed, expire or are not ready."""
        deadline = time.monotonic() + 60
        while True:
            try:
                fetched = self.node.fetch(COMPACTED_TOPIC, partition, offset, timeout_s=60)
            except RemoteStorageNotReadyException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
                continue
            if not (fetched.throttled or fetched.remote_fetch_expired):
                return fetched
            if time.monotonic() > deadline:
                raise TierlogError(f"remote reads at offset {offset} kept being shed or expiring")
            time.sleep(0.05)
