"""Benchmark of appending to the local log: throughput with index maintenance and rolling.

Run: ``.venv/bin/python bench/log_append.py [--size-mib 1024] [--segment-mib 128]``
(``--quick``: every phase on 4 MiB in 1 MiB segments, a smoke run whose figures mean nothing,
written to ``--out`` or a temporary directory).

A pool of producer batches (``--batch-kib`` KiB each, 16 KiB like the producer's default
``batch.size``; the JSON-like records of ``bench/log_format.py``) is built once, then appended
to a fresh partition directory with ``LocalLog.append_as_leader`` until ``--size-mib`` MiB are
written. Each append is what a leader does for a produce request: validate the batch (CRC, size,
offsets/count, timestamps), assign offsets and stamp the leader epoch in place, check producer
state, roll when ``segment.bytes`` is reached (trimming the sealed segment's indexes, writing a
producer snapshot, ``fsync``-ing the sealed segment), write the batch and maintain the offset and
time indexes every ``index.interval.bytes`` (4096, Kafka's default).

Figures, all measured in the same run on the same bytes:

- **raw write**: ``os.write`` of the pool's bytes to one file (the physical limit: page cache);
- **raw write + fsync per segment**: the same with an ``fsync`` every ``--segment-mib`` MiB, the
  durability the log gives by flushing each segment it seals;
- **LocalLog**: ``append_as_leader`` (default: flush on roll), and with ``flush_on_roll=False``;
- ratios of the log to the raw writes (wall clock, and CPU time, which other processes on the
  machine disturb less), and the time to reopen the directory after ``close``.

Writes ``bench/results/log_append.json`` (or ``--out``) and, if matplotlib is importable,
``log_append.png`` beside it.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# shared by every benchmark
from _report import drop_workdir, parse_args, pyplot, save_chart, write_results
from log_format import MIB, make_batches  # the same generated records as the format bench

from tierlog.log.compression import CompressionType
from tierlog.log.crc import HARDWARE_ACCELERATED
from tierlog.log.local_log import LocalLog
from tierlog.progress import Progress

NOW_MS = 1_700_000_100_000  # just after the generated records' timestamps


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def raw_write(
    path: Path, pool: list[bytes], size: int, fsync_every: int | None
) -> tuple[float, float]:
    """Wall and CPU seconds to write ``size`` bytes of the pool to ``path`` (``fsync`` every N
    bytes)."""
    written = since_sync = 0
    i = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        c0 = time.process_time()
        while written < size:
            data = pool[i % len(pool)]
            os.write(fd, data)
            written += len(data)
            since_sync += len(data)
            if fsync_every is not None and since_sync >= fsync_every:
                os.fsync(fd)
                since_sync = 0
            i += 1
        if fsync_every is not None:
            os.fsync(fd)
        return time.perf_counter() - t0, time.process_time() - c0
    finally:
        os.close(fd)


def log_append(
    directory: Path, pool: list[bytes], size: int, segment_bytes: int, flush_on_roll: bool
) -> dict[str, Any]:
    """Append ``size`` bytes of the pool with ``append_as_leader``; figures of the run."""
    config = {"segment.bytes": segment_bytes, "index.interval.bytes": 4096}
    local = LocalLog.open(directory, config, clock=lambda: NOW_MS, flush_on_roll=flush_on_roll)
    written = batches = 0
    step = next_report = max(size // 100, 1)  # the progress is updated every 1 % only
    with Progress("append", total=size, unit="bytes") as progress:
        t0 = time.perf_counter()
        c0 = time.process_time()
        while written < size:
            data = pool[batches % len(pool)]
            local.append_as_leader(data, 3)
            written += len(data)
            batches += 1
            if written >= next_report:
                progress.update(written)
                next_report += step
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - c0
    segments = local.segments
    out = {
        "seconds": elapsed,
        "cpu_seconds": cpu,
        "mb_per_s": written / elapsed / 1e6,
        "mb_per_cpu_s": written / cpu / 1e6,
        "batches_per_s": batches / elapsed,
        "records_per_s": local.log_end_offset / elapsed,
        "bytes": written,
        "batches": batches,
        "records": local.log_end_offset,
        "segments": len(segments),
        "offset_index_entries": sum(s.offset_index.entries for s in segments),
        "time_index_entries": sum(s.time_index.entries for s in segments),
        "flush_on_roll": flush_on_roll,
    }
    t0 = time.perf_counter()
    local.close()
    out["close_seconds"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    reopened = LocalLog.open(directory, config, clock=lambda: NOW_MS)
    out["reopen_seconds"] = time.perf_counter() - t0
    assert reopened.log_end_offset == out["records"]
    reopened.close()
    return out


def chart(results: dict[str, Any], path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    names = [
        "raw write",
        "raw write\n+ fsync/segment",
        "LocalLog\n(flush on roll)",
        "LocalLog\n(no flush)",
    ]
    values = [
        results["raw"]["mb_per_s"],
        results["raw_fsync"]["mb_per_s"],
        results["log"]["mb_per_s"],
        results["log_no_flush"]["mb_per_s"],
    ]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.bar(names, values, color=["#888", "#aaa", "#2a7", "#6c9"])
    for i, v in enumerate(values):
        ax.text(i, v, f"{v:,.0f}", ha="center", va="bottom")
    ax.set_ylabel("MB/s")
    r = results["ratios"]
    ax.set_title(
        f"Append {results['size_mib']:,} MiB in {results['batch_kib']} KiB batches, "
        f"{results['segment_mib']} MiB segments\n"
        f"ratio to raw write {r['log_vs_raw']:.2f}, to raw write + fsync "
        f"{r['log_vs_raw_fsync']:.2f}"
    )
    return save_chart(fig, path, results)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="bytes appended (MiB)")
    parser.add_argument("--segment-mib", type=int, default=128, help="segment.bytes (MiB)")
    parser.add_argument("--batch-kib", type=int, default=16, help="producer batch size (KiB)")
    parser.add_argument("--pool-mib", type=int, default=32, help="distinct batches to cycle")
    args, out = parse_args(parser, {"size_mib": 4, "segment_mib": 1, "pool_mib": 1}, argv)
    size = args.size_mib * MIB
    segment_bytes = args.segment_mib * MIB
    workdir = Path(tempfile.mkdtemp(prefix="tierlog-append-", dir=args.dir))
    results: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "crc32c_hardware": HARDWARE_ACCELERATED,
        "size_mib": args.size_mib,
        "segment_mib": args.segment_mib,
        "batch_kib": args.batch_kib,
    }
    try:
        log(f"building a {args.pool_mib} MiB pool of {args.batch_kib} KiB batches ...")
        pool, _, _, _ = make_batches(
            random.Random(args.seed), CompressionType.NONE, args.pool_mib * MIB, args.batch_kib
        )
        results["pool_batches"] = len(pool)
        log("raw write ...")
        secs, cpu = raw_write(workdir / "raw.bin", pool, size, None)
        results["raw"] = {
            "seconds": secs,
            "mb_per_s": size / secs / 1e6,
            "mb_per_cpu_s": size / cpu / 1e6,
        }
        (workdir / "raw.bin").unlink()
        log("raw write + fsync per segment ...")
        secs, cpu = raw_write(workdir / "raw.bin", pool, size, segment_bytes)
        results["raw_fsync"] = {
            "seconds": secs,
            "mb_per_s": size / secs / 1e6,
            "mb_per_cpu_s": size / cpu / 1e6,
        }
        (workdir / "raw.bin").unlink()
        log("LocalLog.append_as_leader (flush on roll) ...")
        results["log"] = log_append(workdir / "bench-0", pool, size, segment_bytes, True)
        if not args.keep:
            shutil.rmtree(workdir / "bench-0")
        log("LocalLog.append_as_leader (no flush on roll) ...")
        results["log_no_flush"] = log_append(workdir / "bench-1", pool, size, segment_bytes, False)
    finally:
        drop_workdir(args, workdir)

    raw, raw_fsync = results["raw"]["mb_per_s"], results["raw_fsync"]["mb_per_s"]
    flushed, unflushed = results["log"], results["log_no_flush"]
    results["ratios"] = {
        "log_vs_raw": flushed["mb_per_s"] / raw,
        "log_vs_raw_fsync": flushed["mb_per_s"] / raw_fsync,
        "log_no_flush_vs_raw": unflushed["mb_per_s"] / raw,
        "log_vs_raw_cpu": flushed["mb_per_cpu_s"] / results["raw"]["mb_per_cpu_s"],
    }
    r = results["ratios"]
    print(
        f"\nlocal log append — Python {results['python']}, {results['cpus']} CPUs, "
        f"{args.size_mib:,} MiB in {args.batch_kib} KiB batches ({flushed['batches']:,} "
        f"batches, {flushed['records']:,} records), {args.segment_mib} MiB segments "
        f"({flushed['segments']} segments)"
    )
    print(f"  raw write                       {raw:>8,.0f} MB/s")
    print(f"  raw write + fsync per segment   {raw_fsync:>8,.0f} MB/s")
    print(
        f"  LocalLog, flush on roll         {flushed['mb_per_s']:>8,.0f} MB/s  "
        f"{flushed['batches_per_s']:>9,.0f} batches/s  {flushed['records_per_s']:>10,.0f} "
        f"records/s   ratio {r['log_vs_raw']:.2f} to raw write, "
        f"{r['log_vs_raw_fsync']:.2f} to raw write + fsync"
    )
    print(
        f"  LocalLog, no flush on roll      {unflushed['mb_per_s']:>8,.0f} MB/s  "
        f"{unflushed['batches_per_s']:>9,.0f} batches/s   ratio {r['log_no_flush_vs_raw']:.2f} "
        "to raw write"
    )
    print(
        f"  CPU: LocalLog {flushed['mb_per_cpu_s']:,.0f} MB per CPU-second, raw write "
        f"{results['raw']['mb_per_cpu_s']:,.0f} (ratio {r['log_vs_raw_cpu']:.2f}); the "
        "machine is shared, so wall-clock figures vary between runs"
    )
    print(
        f"  index entries: {flushed['offset_index_entries']:,} offset, "
        f"{flushed['time_index_entries']:,} time; close {flushed['close_seconds'] * 1000:,.0f} ms, "
        f"reopen after clean close {flushed['reopen_seconds'] * 1000:,.0f} ms"
    )
    write_results(out, "log_append", results, chart, quick=args.quick)


if __name__ == "__main__":
    main()
