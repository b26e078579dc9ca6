"""Benchmark of the record batch format: shallow scan, deep decode, build and append.

Run: ``.venv/bin/python bench/log_format.py [--size-mib 1024] [--deep-mib 32] [--cold] [--pure]``
(``--quick``: every phase, ``--pure`` included, on a 4 MiB segment and 1 MiB per codec, one
pass: a smoke run whose figures mean nothing, written to ``--out`` or a temporary directory).

The segment is generated under a temporary directory (``--dir`` to choose where; deleted unless
``--keep``) the way producers fill a real one: batches of about ``--batch-kib`` KiB of records
(16 KiB is the producer's default ``batch.size``), each record a ~150-byte JSON-like event with a
16-byte key, one record in ten with a header, offsets assigned on append as the local log
assigns them (``set_base_offset`` + ``set_partition_leader_epoch`` on each batch).

Figures, against the goals and the peers:

- **shallow scan with CRC check** of the whole segment (``iter_batches``): MB/s, and its ratio to
  reading the same file raw (``readinto`` of 1 MiB or 8 MiB chunks, whichever is faster: the
  physical limit) in the same run;
  goal >= 0.5. Also without the CRC check. The passes alternate and the best of ``--repeat`` is
  kept; the file is in the page cache unless ``--cold`` drops it before each pass
  (``posix_fadvise(DONTNEED)``), so by default the ratio measures CPU overhead at memory speed,
  the strictest case;
- **deep decode**: records/s of ``iter_batches_with_records`` against kafka-python's
  ``DefaultRecordBatch`` (CRC validated, every record iterated) on the same ``--deep-mib`` MiB of
  batches, for every codec; goal >= 3x. Measured in CPU time (``time.process_time``), the
  sample cut in 8 parts each timed ``--repeat`` times alternating the decoders, best kept, so
  other processes on the machine disturb the ratio less. tierlog decodes records with its C
  accelerator when it is built (``tierlog.log.record.SPEEDUPS``; the report says which decoder
  ran); ``--pure`` also times the pure-Python decoder on the same batches, for comparison;
- **build**: ``build_batch`` MB/s and records/s (uncompressed and per codec);
- **append**: stamping offsets and leader epoch into built batches and writing them, MB/s.

Writes ``bench/results/log_format.json`` (or ``--out``) and, if matplotlib is importable,
``log_format.png`` beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# shared by every benchmark
from _report import drop_workdir, parse_args, pyplot, save_chart, verdict, write_results

from tierlog.log import batch as batch_module
from tierlog.log import record as record_module
from tierlog.log.batch import build_batch, set_base_offset, set_partition_leader_epoch
from tierlog.log.compression import CompressionType
from tierlog.log.crc import HARDWARE_ACCELERATED
from tierlog.log.reader import iter_batches, iter_batches_with_records
from tierlog.log.record import Record
from tierlog.progress import Progress

MIB = 1 << 20
GOAL_SHALLOW_RATIO = 0.5
GOAL_DEEP_RATIO = 3.0
EVENTS = ["click", "view", "purchase", "signup", "logout", "search", "share", "comment"]
COUNTRIES = ["fr", "de", "us", "jp", "br", "in", "ng", "au", "ca", "kr"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def make_records(rng: random.Random, first_offset: int, ts: int, batch_bytes: int) -> list[Record]:
    """Records of one producer batch: ~batch_bytes of JSON-like events."""
    out: list[Record] = []
    size = 0
    offset = first_offset
    while size < batch_bytes:
        user = rng.randrange(1_000_000)
        value = (
            f'{{"user":{user},"event":"{rng.choice(EVENTS)}","country":"{rng.choice(COUNTRIES)}",'
            f'"amount":{rng.random() * 1000:.2f},"session":"{rng.getrandbits(64):016x}",'
            f'"ts":{ts},"page":"/p/{rng.randrange(5000)}","ok":{str(rng.random() < 0.9).lower()}}}'
        ).encode()
        headers: tuple[tuple[str, bytes | None], ...] = (
            (("trace-id", rng.getrandbits(64).to_bytes(8, "big")),) if offset % 10 == 0 else ()
        )
        out.append(Record(offset, ts, b"user-%011d" % user, value, headers))
        size += len(value) + 30
        offset += 1
        ts += rng.randrange(3)
    return out


def make_batches(
    rng: random.Random, codec: CompressionType, total: int, batch_kib: int
) -> tuple[list[bytes], int, int, float]:
    """Build batches until ``total`` bytes: (batches, records, input bytes, build seconds)."""
    batches: list[bytes] = []
    size = records = raw = 0
    ts = 1_700_000_000_000
    elapsed = 0.0
    while size < total:
        recs = make_records(rng, 0, ts, batch_kib * 1024)
        t0 = time.perf_counter()
        batch = build_batch(recs, compression=codec)
        elapsed += time.perf_counter() - t0
        batches.append(batch)
        size += len(batch)
        records += len(recs)
        raw += sum(len(r.value or b"") + len(r.key or b"") for r in recs)
        ts += 5
    return batches, records, raw, elapsed


def write_segment(path: Path, pool: list[bytes], size: int) -> tuple[int, int, float]:
    """Append copies of ``pool`` (stamping offsets and epoch) until ``size`` bytes."""
    written = 0
    offset = 0
    batches = 0
    elapsed = 0.0
    with open(path, "wb", buffering=0) as f, Progress("append", size, unit="bytes") as progress:
        while written < size:
            buf = bytearray(pool[batches % len(pool)])
            t0 = time.perf_counter()
            set_base_offset(buf, offset)
            set_partition_leader_epoch(buf, 3)
            f.write(buf)
            elapsed += time.perf_counter() - t0
            offset += int.from_bytes(buf[57:61], "big")
            written += len(buf)
            batches += 1
            progress.update(written)  # outside the timed region
        t0 = time.perf_counter()
        os.fsync(f.fileno())
        elapsed += time.perf_counter() - t0
    return written, batches, elapsed


def drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def raw_read(path: Path, chunk: int) -> int:
    buf = bytearray(chunk)
    mv = memoryview(buf)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(mv):
            total += n
    return total


def shallow(path: Path, verify: bool) -> int:
    n = 0
    for _ in iter_batches(path, verify_crc=verify):
        n += 1
    return n


def best_wall(
    fns: dict[str, Callable[[], object]], repeat: int, cold: Path | None
) -> dict[str, float]:
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            if cold is not None:
                drop_cache(cold)
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def best_cpu(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.process_time()
            fn()
            best[name] = min(best[name], time.process_time() - t0)
    return best


DECODER = "C accelerator" if record_module.SPEEDUPS else "pure Python"
"""The record decoder tierlog uses in this process (``TIERLOG_NO_SPEEDUPS=1`` rules C out)."""


@contextlib.contextmanager
def pure_decoder() -> Iterator[None]:
    """Make the batch layer decode records with the pure-Python decoder for a while."""
    saved = batch_module.decode_block
    batch_module.decode_block = record_module.decode_block_pure
    try:
        yield
    finally:
        batch_module.decode_block = saved


def deep_compare(
    batches: list[bytes], repeat: int, groups: int = 8, pure: bool = False
) -> dict[str, float]:
    """Records/s of both decoders over the same batches.

    The batches are cut into ``groups``; each group is timed ``repeat`` times for each decoder,
    alternating, and the best times are summed: a burst of load from other processes then spoils
    one short sample, not a whole figure. With ``pure``, tierlog's pure-Python record decoder is
    timed too (``tierlog_pure_records_per_s``, ``ratio_pure``).
    """
    records = sum(int.from_bytes(b[57:61], "big") for b in batches)
    size = (len(batches) + groups - 1) // groups
    chunks = [batches[i : i + size] for i in range(0, len(batches), size)]
    try:
        from kafka.record.default_records import DefaultRecordBatch
    except ImportError:
        DefaultRecordBatch = None  # noqa: N806
        log("  kafka-python is not installed: no deep-decode ratio")

    def ours(data: bytes) -> None:
        for _, _, recs in iter_batches_with_records(data):
            for _ in recs:
                pass

    def theirs(chunk: list[bytes]) -> None:
        for raw in chunk:
            batch = DefaultRecordBatch(raw)
            if not batch.validate_crc():
                raise AssertionError("kafka-python rejects the CRC")
            for _ in batch:
                pass

    def ours_pure(data: bytes) -> None:
        with pure_decoder():
            ours(data)

    total = {"tierlog": 0.0, "kafka-python": 0.0, "tierlog-pure": 0.0}
    for chunk in chunks:
        joined = b"".join(chunk)
        fns: dict[str, Callable[[], object]] = {"tierlog": lambda joined=joined: ours(joined)}
        if DefaultRecordBatch is not None:
            fns["kafka-python"] = lambda chunk=chunk: theirs(chunk)
        if pure:
            fns["tierlog-pure"] = lambda joined=joined: ours_pure(joined)
        for name, secs in best_cpu(fns, repeat).items():
            total[name] += secs
    out = {
        "records": records,
        "bytes": sum(map(len, batches)),
        "tierlog_records_per_s": records / total["tierlog"],
    }
    if DefaultRecordBatch is not None:
        out["kafka_python_records_per_s"] = records / total["kafka-python"]
        out["ratio"] = total["kafka-python"] / total["tierlog"]
    if pure:
        out["tierlog_pure_records_per_s"] = records / total["tierlog-pure"]
        if DefaultRecordBatch is not None:
            out["ratio_pure"] = total["kafka-python"] / total["tierlog-pure"]
    return out


def chart(results: dict[str, Any], path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    s = results["shallow"]
    names = ["raw read", "scan + CRC", "scan, no CRC"]
    values = [s["raw_mb_per_s"], s["scan_crc_mb_per_s"], s["scan_no_crc_mb_per_s"]]
    ax1.bar(names, values, color=["#888", "#2a7", "#6c9"])
    ax1.set_ylabel("MB/s")
    ax1.set_title(
        f"Shallow scan of {s['size_mib']:,} MiB "
        f"(ratio {s['ratio_crc']:.2f}, goal {GOAL_SHALLOW_RATIO})"
    )
    deep = results["deep"]
    codecs = list(deep)
    ours = [deep[c]["tierlog_records_per_s"] / 1e3 for c in codecs]
    theirs = [deep[c].get("kafka_python_records_per_s", 0) / 1e3 for c in codecs]
    x = range(len(codecs))
    ax2.bar([i - 0.2 for i in x], ours, 0.4, label="tierlog", color="#2a7")
    ax2.bar([i + 0.2 for i in x], theirs, 0.4, label="kafka-python", color="#888")
    for i, c in enumerate(codecs):
        if "ratio" in deep[c]:
            ax2.text(i, ours[i], f"{deep[c]['ratio']:.1f}x", ha="center", va="bottom")
    ax2.set_xticks(list(x), codecs)
    ax2.set_ylabel("thousand records/s")
    ax2.set_title(f"Deep decode (goal {GOAL_DEEP_RATIO}x kafka-python)")
    ax2.legend()
    return save_chart(fig, path, results)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="segment size (default 1024)")
    parser.add_argument("--deep-mib", type=int, default=16, help="deep-decode sample per codec")
    parser.add_argument("--batch-kib", type=int, default=16, help="records per batch, in KiB")
    parser.add_argument("--repeat", type=int, default=5, help="passes per figure, best kept")
    parser.add_argument("--cold", action="store_true", help="drop the file from the page cache")
    parser.add_argument(
        "--pure", action="store_true", help="also time tierlog's pure-Python record decoder"
    )
    args, out = parse_args(parser, {"size_mib": 4, "deep_mib": 1, "repeat": 1, "pure": True}, argv)
    rng = random.Random(args.seed)
    size = args.size_mib * MIB
    workdir = Path(tempfile.mkdtemp(prefix="tierlog-bench-", dir=args.dir))
    path = workdir / "00000000000000000000.log"
    results: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "crc32c_hardware": HARDWARE_ACCELERATED,
        "record_decoder": DECODER,
        "batch_kib": args.batch_kib,
        "cold_cache": args.cold,
    }
    try:
        log(f"building batches ({args.deep_mib} MiB per codec) ...")
        build: dict[str, Any] = {}
        samples: dict[str, list[bytes]] = {}
        for codec in CompressionType:
            batches, records, raw, secs = make_batches(
                rng, codec, args.deep_mib * MIB, args.batch_kib
            )
            built = sum(map(len, batches))
            samples[codec.kafka_name] = batches
            build[codec.kafka_name] = {
                "records_per_s": records / secs,
                "input_mb_per_s": raw / secs / 1e6,
                "output_mb_per_s": built / secs / 1e6,
                "compression_ratio": raw / built,
            }
            log(
                f"  {codec.kafka_name:6s} {records / secs:>10,.0f} records/s "
                f"{raw / secs / 1e6:7.1f} MB/s in  {built / secs / 1e6:7.1f} MB/s out"
            )
        results["build"] = build

        log(f"appending a {args.size_mib:,} MiB segment to {path} ...")
        written, nbatches, secs = write_segment(path, samples["none"], size)
        results["append"] = {"mb_per_s": written / secs / 1e6, "batches": nbatches}
        log(f"  append (stamp + write + fsync): {written / secs / 1e6:,.0f} MB/s")

        log("shallow scan ...")
        t = best_wall(
            {
                "raw_1m": lambda: raw_read(path, MIB),
                "raw_8m": lambda: raw_read(path, 8 * MIB),
                "crc": lambda: shallow(path, True),
                "no_crc": lambda: shallow(path, False),
            },
            args.repeat,
            path if args.cold else None,
        )
        t["raw"] = min(t["raw_1m"], t["raw_8m"])
        results["shallow"] = {
            "size_mib": args.size_mib,
            "batches": nbatches,
            "raw_mb_per_s": written / t["raw"] / 1e6,
            "scan_crc_mb_per_s": written / t["crc"] / 1e6,
            "scan_no_crc_mb_per_s": written / t["no_crc"] / 1e6,
            "ratio_crc": t["raw"] / t["crc"],
            "ratio_no_crc": t["raw"] / t["no_crc"],
            "goal_ratio": GOAL_SHALLOW_RATIO,
        }

        log("deep decode ...")
        results["deep"] = {}
        for name, batches in samples.items():
            results["deep"][name] = deep_compare(batches, args.repeat, pure=args.pure)
            d = results["deep"][name]
            log(
                f"  {name:6s} {d['tierlog_records_per_s']:>10,.0f} records/s  "
                f"ratio {d.get('ratio', 0):.2f}"
            )
    finally:
        drop_workdir(args, workdir)

    s = results["shallow"]
    print(
        f"\nrecord batches v2 — Python {results['python']}, {results['cpus']} CPUs, "
        f"CRC-32C hardware: {HARDWARE_ACCELERATED}, {args.batch_kib} KiB batches"
    )
    print(
        f"shallow scan of {args.size_mib:,} MiB ({s['batches']:,} batches, "
        f"{'cold' if args.cold else 'page'} cache):"
    )
    print(f"  raw read            {s['raw_mb_per_s']:>9,.0f} MB/s")
    print(
        f"  scan + CRC          {s['scan_crc_mb_per_s']:>9,.0f} MB/s   ratio {s['ratio_crc']:.2f} "
        f"(goal >= {GOAL_SHALLOW_RATIO}) "
        f"{verdict(s['ratio_crc'], GOAL_SHALLOW_RATIO, quick=args.quick)}"
    )
    print(
        f"  scan, no CRC        {s['scan_no_crc_mb_per_s']:>9,.0f} MB/s   "
        f"ratio {s['ratio_no_crc']:.2f}"
    )
    print(
        f"deep decode ({args.deep_mib} MiB per codec, CPU time), tierlog vs kafka-python "
        f"(record decoder: {DECODER}):"
    )
    for name, d in results["deep"].items():
        ratio = d.get("ratio")
        judged = (
            ""
            if ratio is None
            else f"ratio {ratio:.2f} (goal >= {GOAL_DEEP_RATIO}) "
            + verdict(ratio, GOAL_DEEP_RATIO, quick=args.quick)
        )
        print(
            f"  {name:6s} {d['tierlog_records_per_s']:>10,.0f} vs "
            f"{d.get('kafka_python_records_per_s', 0):>9,.0f} records/s   {judged}"
        )
        if "tierlog_pure_records_per_s" in d:
            print(
                f"    pure {d['tierlog_pure_records_per_s']:>10,.0f} records/s "
                f"(pure-Python decoder)           ratio {d.get('ratio_pure', 0):.2f}"
            )
    print("build (build_batch):")
    for name, b in results["build"].items():
        print(
            f"  {name:6s} {b['records_per_s']:>10,.0f} records/s "
            f"{b['input_mb_per_s']:7.1f} MB/s of keys+values, "
            f"compression ratio {b['compression_ratio']:.2f}"
        )
    print(
        "append (stamp offsets + leader epoch, write, fsync): "
        f"{results['append']['mb_per_s']:,.0f} MB/s"
    )

    write_results(out, "log_format", results, chart, quick=args.quick)


if __name__ == "__main__":
    main()
