"""Benchmark of the RemoteLogManager: copy throughput, catch-up reads, RSM requests per fetch.

Run: ``.venv/bin/python bench/rlm.py [--size-mib 1024] [--segment-mib 64] [--fetch-kib 1024]``
(``--quick``: every phase, ``--profile`` included, on 8 MiB in 1 MiB segments, one pass: a smoke
run whose figures mean nothing, written to ``--out`` or a temporary directory; ``--profile``:
cProfile one RLM copy pass and one warm read pass and print where the time goes).

A real partition is assembled as in ``tests/rlm/_harness.py``: a ``LocalLog`` (``segment.bytes``
= ``--segment-mib``, ``index.interval.bytes`` 4096, remote storage enabled) filled with
``append_as_leader`` from the JSON-like 16 KiB producer batches of ``bench/log_format.py`` up to
``--size-mib`` MiB and rolled, so every byte is in a sealed segment; the ``local`` RSM
(``LocalTieredStorage``, wrapped in a subclass that counts ``fetch_log_segment`` and
``fetch_index`` calls); the ``embedded`` RLMM; ``RemoteLogManager(schedule_tasks=False)``.

Figures, against the goals and the peers:

- **copy**: MB/s of segment bytes for one run of the RLM copy task over the N sealed segments
  (``RLMCopyTask.run``: candidates, ``segment_copy_inputs``, ``COPY_SEGMENT_STARTED`` durable in
  the RLMM, ``rsm.copy_log_segment_data``, ``COPY_SEGMENT_FINISHED`` durable, metrics), against
  calling ``rsm.copy_log_segment_data`` directly with the same ``LogSegmentData`` (built by
  ``log.segment_copy_inputs`` beforehand, fresh segment ids, no RLMM); goal ratio >= 0.9. Each
  RLM pass has a fresh RLMM and RLM (created outside the timed region), so it copies every
  segment. The passes alternate and the best of ``--repeat`` is kept; the local segments are in
  the page cache (just written); the remote copies of a pass are deleted (outside the timed
  region) before the next, so each pass writes fresh files, and ``os.sync`` runs before each
  pass. The ``local`` RSM ``fsync`` s every file it writes, in both paths; the RLMM's own
  ``fsync`` s (two records per segment) are the RLM's;
- **catch-up read**: a consumer reading the whole tiered range from offset 0 with
  ``--fetch-kib`` KiB fetches (``fetch.max.bytes``-like, 1 MiB), ``min_one_message``, through
  ``RemoteLogManager.read`` with a warm index cache: MB/s of the bytes returned, against raw
  ranged fetches of the same bytes (``rsm.fetch_log_segment(meta, start, end)`` over the byte
  ranges the RLM returned, each stream read fully); goal ratio >= 0.8. The first (untimed for the
  goal) pass starts from a cold index cache and records the fetch plan (offsets and ranges); the
  timed passes replay it, alternating, best of ``--repeat``; the consumer's own work (finding
  the next offset) is outside the timed loops. Files are in the page cache;
- **RSM requests per fetch** with a warm index cache (``fetch_log_segment`` and ``fetch_index``
  counted separately); goal 1. The cold pass's index fetches are reported too.

Writes ``bench/results/rlm.json`` (or ``--out``) and, if matplotlib is importable, ``rlm.png``
beside it.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, BinaryIO

# shared by every benchmark
from _report import drop_workdir, parse_args, pyplot, save_chart, verdict, write_results
from _segments import build_log, copy_metadata  # built as bench/rsm.py builds them
from log_format import MIB, make_batches  # the same generated records as the format bench

from tierlog.log.compression import CompressionType
from tierlog.log.crc import HARDWARE_ACCELERATED
from tierlog.log.local_log import LocalLog
from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager
from tierlog.rlm.config import RemoteLogManagerConfig
from tierlog.rlm.manager import RemoteLogManager, RLMCopyTask
from tierlog.rlm.remote_read import RemoteStorageFetchInfo
from tierlog.spi import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    Uuid,
)
from tierlog.storage.local import LocalTieredStorage

GOAL_COPY_RATIO = 0.9
GOAL_READ_RATIO = 0.8
GOAL_REQUESTS_PER_FETCH = 1.0
TOPIC_ID = Uuid.from_string("tierlogRLMbenchTopicIA")
BATCH_HEADER = 61  # RECORD_BATCH_OVERHEAD: a v2 batch header


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class CountingStorage(LocalTieredStorage):
    """The real ``local`` RSM, counting the fetches it serves."""

    def __init__(self) -> None:
        super().__init__()
        self.segment_fetches = 0
        self.index_fetches: Counter[IndexType] = Counter()

    def reset(self) -> None:
        self.segment_fetches = 0
        self.index_fetches.clear()

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        self.segment_fetches += 1
        return super().fetch_log_segment(remote_log_segment_metadata, start_position, end_position)

    def fetch_index(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata, index_type: IndexType
    ) -> BinaryIO:
        self.index_fetches[index_type] += 1
        return super().fetch_index(remote_log_segment_metadata, index_type)


# Building the partition ---------------------------------------------------------------------------
def new_rlm(
    work: Path, name: str, rsm: CountingStorage, local: LocalLog
) -> tuple[RemoteLogManager, EmbeddedRemoteLogMetadataManager]:
    """A fresh RLMM and RLM leading ``local`` (tasks not scheduled)."""
    rlmm = EmbeddedRemoteLogMetadataManager()
    rlmm.configure({"dir": str(work / f"rlmm-{name}")})
    config, unknown = RemoteLogManagerConfig.from_props(
        {"remote.log.manager.task.interval.ms": 3_600_000}
    )
    assert not unknown, unknown
    rlm = RemoteLogManager(
        config,
        rsm,
        rlmm,
        broker_id=0,
        log_dir=work / f"rlm-{name}",
        schedule_tasks=False,
    )
    rlm.on_leadership_change([local])
    return rlm, rlmm


def topic_id_partition(local: LocalLog) -> TopicIdPartition:
    tp = local.topic_partition
    return TopicIdPartition(TOPIC_ID, tp.topic, tp.partition)


# Copy ---------------------------------------------------------------------------------------------
class CopyBench:
    """Alternating passes of the RLM copy task and of direct RSM copies of the same segments."""

    def __init__(self, work: Path, rsm: CountingStorage, local: LocalLog) -> None:
        self.work = work
        self.rsm = rsm
        self.local = local
        self.tp = topic_id_partition(local)
        self.inputs = [local.segment_copy_inputs(s) for s in local.sealed_segments()]
        self.bytes = sum(i.size_in_bytes for i in self.inputs)
        self.passes = 0

    def _copy_task(self, rlm: RemoteLogManager) -> RLMCopyTask:
        task = next(t for t in rlm.tasks(self.tp) if isinstance(t, RLMCopyTask))
        return task

    def rlm_pass(
        self, *, keep: bool = False, profile: cProfile.Profile | None = None
    ) -> tuple[float, float, RemoteLogManager | None, EmbeddedRemoteLogMetadataManager | None]:
        """(wall s, CPU s) of one copy task run over every sealed segment; with ``keep`` the RLM
        and RLMM are returned open and the copies stay, otherwise they are deleted."""
        self.passes += 1
        rlm, rlmm = new_rlm(self.work, f"copy-{self.passes}", self.rsm, self.local)
        task = self._copy_task(rlm)
        os.sync()
        if profile is not None:
            profile.enable()
        t0 = time.perf_counter()
        c0 = time.process_time()
        task.run()
        wall = time.perf_counter() - t0
        cpu = time.process_time() - c0
        if profile is not None:
            profile.disable()
        if task.last_error is not None:
            raise RuntimeError(f"the copy task failed: {task.last_error!r}")
        if rlm.copied_segments != len(self.inputs):
            raise RuntimeError(
                f"the copy task copied {rlm.copied_segments} of {len(self.inputs)} segments"
            )
        if keep:
            return wall, cpu, rlm, rlmm
        for meta in rlmm.list_remote_log_segments(self.tp):
            self.rsm.delete_log_segment_data(meta)
        rlm.close()
        rlmm.close()
        return wall, cpu, None, None

    def direct_pass(self) -> tuple[float, float]:
        """(wall s, CPU s) of ``rsm.copy_log_segment_data`` over the same segments."""
        self.passes += 1
        work: list[tuple[RemoteLogSegmentMetadata, LogSegmentData]] = []
        for inputs in self.inputs:
            work.append((copy_metadata(inputs, self.tp), inputs.data))
        copy = self.rsm.copy_log_segment_data
        os.sync()
        t0 = time.perf_counter()
        c0 = time.process_time()
        for meta, data in work:
            copy(meta, data)
        wall = time.perf_counter() - t0
        cpu = time.process_time() - c0
        for meta, _ in work:
            self.rsm.delete_log_segment_data(meta)
        return wall, cpu


# Catch-up read ------------------------------------------------------------------------------------
def next_fetch_offset(records: bytes, fetch_offset: int) -> int:
    """What a consumer fetches next: after the last whole batch of ``records``."""
    view = memoryview(records)
    pos = 0
    end = len(records)
    nxt = fetch_offset
    while pos + BATCH_HEADER <= end:
        size = 12 + int.from_bytes(view[pos + 8 : pos + 12], "big")
        if pos + size > end:
            break
        base = int.from_bytes(view[pos : pos + 8], "big")
        nxt = base + int.from_bytes(view[pos + 23 : pos + 27], "big") + 1
        pos += size
    return nxt


class ReadBench:
    """A consumer catching up from offset 0 through ``RemoteLogManager.read``, and raw ranged
    fetches of the same bytes."""

    def __init__(
        self,
        rlm: RemoteLogManager,
        rlmm: EmbeddedRemoteLogMetadataManager,
        rsm: CountingStorage,
        local: LocalLog,
        fetch_bytes: int,
    ) -> None:
        self.rlm = rlm
        self.rsm = rsm
        self.tp = topic_id_partition(local)
        self.fetch_bytes = fetch_bytes
        self.end = local.highest_offset_in_remote_storage + 1
        self.segments = {
            m.start_offset: m
            for m in rlmm.list_remote_log_segments(self.tp)
            if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        }
        self.requests: list[RemoteStorageFetchInfo] = []  # the plan, from the cold pass
        self.ranges: list[tuple[RemoteLogSegmentMetadata, int, int]] = []
        self.bytes = 0

    def _request(self, offset: int) -> RemoteStorageFetchInfo:
        return RemoteStorageFetchInfo(
            max_bytes=self.fetch_bytes,
            min_one_message=True,
            topic_id_partition=self.tp,
            fetch_offset=offset,
        )

    def cold_pass(self) -> float:
        """The consumer from offset 0 to the end, index cache cold: records the fetch plan (the
        requests and the byte ranges returned); wall seconds of the reads."""
        requests: list[RemoteStorageFetchInfo] = []
        ranges: list[tuple[RemoteLogSegmentMetadata, int, int]] = []
        total = 0
        offset = 0
        elapsed = 0.0
        read = self.rlm.read
        while offset < self.end:
            request = self._request(offset)
            t0 = time.perf_counter()
            info = read(request)
            elapsed += time.perf_counter() - t0
            records = info.records
            if not records:
                raise RuntimeError(f"no records returned at offset {offset}")
            where = info.fetch_offset_metadata
            meta = self.segments[where.segment_base_offset]
            requests.append(request)
            ranges.append((meta, where.relative_position_in_segment, len(records)))
            total += len(records)
            nxt = next_fetch_offset(records, offset)
            if nxt <= offset:
                raise RuntimeError(f"no progress at offset {offset}")
            offset = nxt
        self.requests = requests
        self.ranges = ranges
        self.bytes = total
        return elapsed

    def rlm_pass(self) -> tuple[float, float]:
        """(wall s, CPU s) of replaying the plan's fetches through ``RemoteLogManager.read``."""
        read = self.rlm.read
        requests = self.requests
        t0 = time.perf_counter()
        c0 = time.process_time()
        for request in requests:
            read(request)
        return time.perf_counter() - t0, time.process_time() - c0

    def raw_pass(self) -> tuple[float, float]:
        """(wall s, CPU s) of ranged RSM fetches of the same bytes, each stream read fully.

        Each fetch's bytes are dropped before the next fetch, as the RLM pass drops each read's
        result: holding one while the next is read would make every read land in fresh memory
        (page faults the RLM pass does not pay)."""
        fetch = self.rsm.fetch_log_segment
        t0 = time.perf_counter()
        c0 = time.process_time()
        for meta, start, length in self.ranges:
            with fetch(meta, start, start + length - 1) as stream:
                got = len(stream.read(length))
            if got != length:
                raise RuntimeError(f"short raw read: {got} of {length} bytes")
        return time.perf_counter() - t0, time.process_time() - c0


# Profiling ----------------------------------------------------------------------------------------
def profile_report(profile: cProfile.Profile, title: str, limit: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.strip_dirs().sort_stats("tottime").print_stats(limit)
    return f"--- {title} (sorted by own time) ---\n{out.getvalue()}"


# Output -------------------------------------------------------------------------------------------


def chart(results: dict[str, Any], path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    c, r, q = results["copy"], results["read"], results["requests"]
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(14, 4.5))

    def bars(ax: Any, names: list[str], values: list[float], colors: list[str], fmt: str) -> None:
        ax.bar(names, values, color=colors)
        for i, v in enumerate(values):
            ax.text(i, v, format(v, fmt), ha="center", va="bottom")

    bars(
        ax1,
        ["direct RSM\ncopy", "RLM copy\ntask"],
        [c["direct_mb_per_s"], c["rlm_mb_per_s"]],
        ["#888", "#2a7"],
        ",.0f",
    )
    ax1.set_ylabel("MB/s")
    ax1.set_title(
        f"Copy {c['segments']} x {results['segment_mib']} MiB segments\n"
        f"ratio {c['ratio']:.2f} (goal >= {GOAL_COPY_RATIO})"
    )
    bars(
        ax2,
        ["raw ranged\nfetch", "RLM read\n(warm)", "RLM read\n(cold)"],
        [r["raw_mb_per_s"], r["rlm_mb_per_s"], r["cold_mb_per_s"]],
        ["#888", "#2a7", "#6c9"],
        ",.0f",
    )
    ax2.set_ylabel("MB/s")
    ax2.set_title(
        f"Catch-up read, {results['fetch_kib']} KiB fetches\n"
        f"ratio {r['ratio']:.2f} (goal >= {GOAL_READ_RATIO})"
    )
    bars(
        ax3,
        ["segment\n(warm)", "index\n(warm)", "segment\n(cold)", "index\n(cold)"],
        [
            q["warm_segment_fetches_per_fetch"],
            q["warm_index_fetches_per_fetch"],
            q["cold_segment_fetches_per_fetch"],
            q["cold_index_fetches_per_fetch"],
        ],
        ["#2a7", "#2a7", "#6c9", "#6c9"],
        ".3f",
    )
    ax3.axhline(GOAL_REQUESTS_PER_FETCH, color="C3", linestyle="--", label="goal (warm)")
    ax3.set_ylabel("RSM requests per fetch")
    ax3.set_title(
        f"RSM requests per fetch: {q['warm_requests_per_fetch']:.3f} warm "
        f"(goal {GOAL_REQUESTS_PER_FETCH:.0f})"
    )
    ax3.legend()
    return save_chart(fig, path, results)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="bytes tiered (MiB)")
    parser.add_argument("--segment-mib", type=int, default=64, help="segment.bytes (MiB, >= 1)")
    parser.add_argument("--fetch-kib", type=int, default=1024, help="bytes per fetch (KiB)")
    parser.add_argument("--batch-kib", type=int, default=16, help="producer batch size (KiB)")
    parser.add_argument("--pool-mib", type=int, default=16, help="distinct batches to cycle")
    parser.add_argument("--repeat", type=int, default=3, help="passes of each kind (best kept)")
    parser.add_argument("--profile", action="store_true", help="cProfile the RLM paths")
    args, out = parse_args(
        parser,
        {
            "size_mib": 8,
            "segment_mib": 1,
            "fetch_kib": 256,
            "pool_mib": 1,
            "repeat": 1,
            "profile": True,
        },
        argv,
    )
    if args.segment_mib < 1 or args.size_mib < args.segment_mib:
        parser.error("need --segment-mib >= 1 and --size-mib >= --segment-mib")
    size = args.size_mib * MIB
    segment_bytes = args.segment_mib * MIB
    fetch_bytes = args.fetch_kib * 1024
    workdir = Path(tempfile.mkdtemp(prefix="tierlog-rlm-bench-", dir=args.dir))
    results: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "crc32c_hardware": HARDWARE_ACCELERATED,
        "size_mib": args.size_mib,
        "segment_mib": args.segment_mib,
        "fetch_kib": args.fetch_kib,
        "batch_kib": args.batch_kib,
        "repeat": args.repeat,
    }
    profiles: list[str] = []
    started = time.perf_counter()
    rsm = CountingStorage()
    rsm.configure({"dir": str(workdir / "remote")})
    local: LocalLog | None = None
    rlm: RemoteLogManager | None = None
    rlmm: EmbeddedRemoteLogMetadataManager | None = None
    try:
        log(f"building a {args.pool_mib} MiB pool of {args.batch_kib} KiB batches ...")
        pool, _, _, _ = make_batches(
            random.Random(args.seed), CompressionType.NONE, args.pool_mib * MIB, args.batch_kib
        )
        log(f"building the log: {args.size_mib:,} MiB in {args.segment_mib} MiB segments ...")
        local, build_s = build_log(
            workdir / "logs" / "bench-0", pool, size, segment_bytes, topic_id=TOPIC_ID
        )
        del pool
        sealed = local.sealed_segments()
        results["log"] = {
            "segments": len(sealed),
            "bytes": sum(s.size for s in sealed),
            "records": local.log_end_offset,
            "build_seconds": build_s,
        }
        log(f"  {len(sealed)} sealed segments, {local.log_end_offset:,} records, {build_s:.1f} s")

        # Copy: alternate direct and RLM passes; the last RLM pass keeps its copies.
        copy = CopyBench(workdir, rsm, local)
        rlm_times: list[tuple[float, float]] = []
        direct_times: list[tuple[float, float]] = []
        for i in range(args.repeat):
            log(f"copying, pass {i + 1}/{args.repeat}: direct RSM ...")
            direct_times.append(copy.direct_pass())
            log(f"  {copy.bytes / direct_times[-1][0] / 1e6:,.0f} MB/s")
            last = i == args.repeat - 1
            log(f"copying, pass {i + 1}/{args.repeat}: RLM copy task ...")
            wall, cpu, rlm, rlmm = copy.rlm_pass(keep=last)
            rlm_times.append((wall, cpu))
            log(f"  {copy.bytes / wall / 1e6:,.0f} MB/s")
        assert rlm is not None and rlmm is not None
        if args.profile:
            log("profiling one more RLM copy pass ...")
            prof = cProfile.Profile()
            copy.rlm_pass(profile=prof)
            profiles.append(profile_report(prof, "RLM copy task", 25))
        best_rlm = min(rlm_times)
        best_direct = min(direct_times)
        results["copy"] = {
            "segments": len(copy.inputs),
            "bytes": copy.bytes,
            "rlm_seconds": best_rlm[0],
            "rlm_cpu_seconds": best_rlm[1],
            "direct_seconds": best_direct[0],
            "direct_cpu_seconds": best_direct[1],
            "rlm_mb_per_s": copy.bytes / best_rlm[0] / 1e6,
            "direct_mb_per_s": copy.bytes / best_direct[0] / 1e6,
            "rlm_passes_seconds": [t[0] for t in rlm_times],
            "direct_passes_seconds": [t[0] for t in direct_times],
            "ratio": best_direct[0] / best_rlm[0],
            "goal_ratio": GOAL_COPY_RATIO,
        }

        # Catch-up read: a cold pass records the plan, then warm RLM and raw passes alternate.
        reads = ReadBench(rlm, rlmm, rsm, local, fetch_bytes)
        log(f"reading from offset 0 with {args.fetch_kib} KiB fetches, cold index cache ...")
        rsm.reset()
        cold_s = reads.cold_pass()
        fetches = len(reads.requests)
        cold_segment = rsm.segment_fetches
        cold_index = dict(rsm.index_fetches)
        log(f"  {fetches:,} fetches, {reads.bytes / cold_s / 1e6:,.0f} MB/s")
        rlm_read: list[tuple[float, float]] = []
        raw_read: list[tuple[float, float]] = []
        warm_segment = warm_index = 0
        for i in range(args.repeat):
            log(f"reading, pass {i + 1}/{args.repeat}: raw ranged fetches ...")
            raw_read.append(reads.raw_pass())
            log(f"  {reads.bytes / raw_read[-1][0] / 1e6:,.0f} MB/s")
            log(f"reading, pass {i + 1}/{args.repeat}: RemoteLogManager.read (warm) ...")
            rsm.reset()
            rlm_read.append(reads.rlm_pass())
            warm_segment = rsm.segment_fetches
            warm_index = sum(rsm.index_fetches.values())
            log(f"  {reads.bytes / rlm_read[-1][0] / 1e6:,.0f} MB/s")
        if args.profile:
            log("profiling one more warm read pass ...")
            prof = cProfile.Profile()
            prof.enable()
            reads.rlm_pass()
            prof.disable()
            profiles.append(profile_report(prof, "RemoteLogManager.read, warm", 25))
        best_rlm_read = min(t[0] for t in rlm_read)
        best_raw_read = min(t[0] for t in raw_read)
        best_rlm_cpu = min(t[1] for t in rlm_read)
        best_raw_cpu = min(t[1] for t in raw_read)
        results["read"] = {
            "fetches": fetches,
            "bytes": reads.bytes,
            "tiered_bytes": copy.bytes,
            "rlm_seconds": best_rlm_read,
            "raw_seconds": best_raw_read,
            "cold_seconds": cold_s,
            "rlm_cpu_seconds": best_rlm_cpu,
            "raw_cpu_seconds": best_raw_cpu,
            "rlm_mb_per_s": reads.bytes / best_rlm_read / 1e6,
            "raw_mb_per_s": reads.bytes / best_raw_read / 1e6,
            "cold_mb_per_s": reads.bytes / cold_s / 1e6,
            "rlm_us_per_fetch": best_rlm_read / fetches * 1e6,
            "raw_us_per_fetch": best_raw_read / fetches * 1e6,
            "rlm_passes_seconds": [t[0] for t in rlm_read],
            "raw_passes_seconds": [t[0] for t in raw_read],
            "ratio": best_raw_read / best_rlm_read,
            "cpu_ratio": best_raw_cpu / best_rlm_cpu,
            "goal_ratio": GOAL_READ_RATIO,
        }
        segments = len(reads.segments)
        results["requests"] = {
            "fetches": fetches,
            "warm_segment_fetches_per_fetch": warm_segment / fetches,
            "warm_index_fetches_per_fetch": warm_index / fetches,
            "warm_requests_per_fetch": (warm_segment + warm_index) / fetches,
            "cold_segment_fetches_per_fetch": cold_segment / fetches,
            "cold_index_fetches_per_fetch": sum(cold_index.values()) / fetches,
            "cold_index_fetches": sum(cold_index.values()),
            "cold_index_fetches_by_type": {
                k.name: v for k, v in sorted(cold_index.items(), key=lambda kv: kv[0].name)
            },
            "cold_index_fetches_per_segment": sum(cold_index.values()) / segments,
            "goal_requests_per_fetch": GOAL_REQUESTS_PER_FETCH,
        }
    finally:
        if rlm is not None:
            rlm.close()
        if rlmm is not None:
            rlmm.close()
        if local is not None:
            local.close()
        rsm.close()
        drop_workdir(args, workdir)
    results["total_seconds"] = time.perf_counter() - started

    c, r, q = results["copy"], results["read"], results["requests"]
    print(
        f"\nRemoteLogManager — Python {results['python']}, {results['cpus']} CPUs, CRC-32C "
        f"hardware: {HARDWARE_ACCELERATED}; {args.size_mib:,} MiB tiered in {c['segments']} "
        f"segments of {args.segment_mib} MiB ({results['log']['records']:,} records, "
        f"{args.batch_kib} KiB batches); best of {args.repeat}, page cache warm"
    )
    rows = [
        (
            "copy (MB/s of segment bytes)",
            "RLM copy task",
            c["rlm_mb_per_s"],
            "direct RSM copy",
            c["direct_mb_per_s"],
            c["ratio"],
            f">= {GOAL_COPY_RATIO}",
            verdict(c["ratio"], GOAL_COPY_RATIO, quick=args.quick),
        ),
        (
            f"catch-up read, {args.fetch_kib} KiB fetches",
            "RLM.read, warm",
            r["rlm_mb_per_s"],
            "raw ranged fetch",
            r["raw_mb_per_s"],
            r["ratio"],
            f">= {GOAL_READ_RATIO}",
            verdict(r["ratio"], GOAL_READ_RATIO, quick=args.quick),
        ),
    ]
    header = (
        f"  {'figure':34s} {'tierlog':>16s} {'MB/s':>8s}  {'peer':>17s} {'MB/s':>8s}  "
        f"{'ratio':>6s}  {'goal':>7s}"
    )
    print(header)
    for figure, ours, ours_v, peer, peer_v, ratio, goal, ok in rows:
        print(
            f"  {figure:34s} {ours:>16s} {ours_v:>8,.0f}  {peer:>17s} {peer_v:>8,.0f}  "
            f"{ratio:>6.2f}  {goal:>7s}  {ok}"
        )
    print(
        f"  {'RSM requests per fetch, warm':34s} {'RLM.read':>16s} "
        f"{q['warm_requests_per_fetch']:>8.3f}  {'goal':>17s} {GOAL_REQUESTS_PER_FETCH:>8.0f}  "
        f"{'':>6s}  {'== 1':>7s}  "
        + verdict(
            q["warm_requests_per_fetch"], GOAL_REQUESTS_PER_FETCH, at_most=True, quick=args.quick
        )
    )
    print(
        f"  details: {q['fetches']:,} fetches; warm {q['warm_segment_fetches_per_fetch']:.3f} "
        f"fetch_log_segment + {q['warm_index_fetches_per_fetch']:.3f} fetch_index per fetch; "
        f"cold {q['cold_segment_fetches_per_fetch']:.3f} fetch_log_segment + "
        f"{q['cold_index_fetches_per_fetch']:.3f} fetch_index per fetch "
        f"({q['cold_index_fetches']} index fetches, {q['cold_index_fetches_per_segment']:.1f} "
        f"per segment: {', '.join(f'{k} {v}' for k, v in q['cold_index_fetches_by_type'].items())})"
    )
    print(
        f"  read per fetch: RLM {r['rlm_us_per_fetch']:,.0f} us, raw {r['raw_us_per_fetch']:,.0f} "
        f"us; CPU time ratio {r['cpu_ratio']:.2f} (RLM {r['rlm_cpu_seconds']:.2f} s, raw "
        f"{r['raw_cpu_seconds']:.2f} s)"
    )
    print(
        f"  cold index cache read {r['cold_mb_per_s']:,.0f} MB/s; bytes returned "
        f"{r['bytes'] / MIB:,.1f} MiB for {r['tiered_bytes'] / MIB:,.1f} MiB tiered (a fetch "
        "that ends inside a batch is fetched again from that batch)"
    )
    print(
        f"  copy CPU: RLM {c['rlm_cpu_seconds']:.2f} s, direct {c['direct_cpu_seconds']:.2f} s; "
        f"fsyncs of the RSM are in both, the RLMM's (2 records per segment) in the RLM's; "
        f"total run {results['total_seconds']:.0f} s"
    )
    for report in profiles:
        print()
        print(report)
    write_results(out, "rlm", results, chart, quick=args.quick)


if __name__ == "__main__":
    main()
