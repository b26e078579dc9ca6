"""``tierlog compact``: one cleaning round on a Kafka-format partition directory, offline.

What Kafka's cleaner would do to that log, run on demand (on a copy: no broker or node may have
the directory open): the cleaner checkpoint and the high watermark come from, and the new
checkpoint goes to, the parent log directory's files, as Kafka keeps them. The round runs in this
process (``--engine python``) or as a Spark job (``--engine spark``, ``tierlog[spark]``; local
mode by default, any master with ``--spark-master``). Progress goes to stderr; the summary (bytes
and records read and written, keys mapped, segments) to stdout, as text or JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tierlog.compaction.engine import CleanEngine, Progress
from tierlog.compaction.offline import clean_partition_dir
from tierlog.progress import Progress as ProgressBar
from tierlog.spi import ConfigError

__all__ = ["add_parser", "run"]


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "compact",
        help="run one log-cleaner round on a partition directory (offline)",
        description="Run one round of Kafka's log cleaner on a Kafka-format partition directory "
        "(<log dir>/<topic>-<partition>), as a broker's cleaner would: the cleaner checkpoint "
        "and high watermark are read from the log directory's checkpoint files and the new "
        "checkpoint is written there. Run it on a copy, never on a directory a broker or "
        "node has open.",
    )
    parser.add_argument("directory", type=Path, help="the partition directory")
    parser.add_argument(
        "--config",
        action="append",
        type=_key_value,
        default=[],
        metavar="KEY=VALUE",
        help="a topic config with Kafka's key (repeatable), e.g. delete.retention.ms=1000",
    )
    parser.add_argument(
        "--engine",
        choices=("python", "spark"),
        default="python",
        help="compute the round in this process or as a Spark job (default: python)",
    )
    parser.add_argument(
        "--spark-master",
        default=None,
        help="Spark master URL for --engine spark (default local[*])",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        type=_key_value,
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for --engine spark (repeatable)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="clean even below min.cleanable.dirty.ratio when anything is cleanable",
    )
    parser.add_argument(
        "--now-ms", type=int, default=None, help="the round's clock (default: the wall clock)"
    )
    parser.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="print the summary as text (default) or JSON",
    )
    parser.set_defaults(handler=run)


@contextmanager
def _engine(args: argparse.Namespace) -> Iterator[CleanEngine | None]:
    if args.engine == "python":
        if args.spark_master or args.spark_conf:
            raise ConfigError("--spark-master and --spark-conf need --engine spark")
        yield None
        return
    from tierlog.compaction.spark_engine import SparkEngine
    from tierlog.compaction.spark_session import SparkSettings, spark_session

    props: dict[str, object] = {}
    if args.spark_master:
        props["remote.log.compaction.spark.master"] = args.spark_master
    for key, value in args.spark_conf:
        props[f"remote.log.compaction.spark.conf.{key}"] = value
    session = spark_session(SparkSettings.from_props(props))
    try:
        yield SparkEngine(session)
    finally:
        session.stop()


class _PhaseBars:
    """One progress bar per phase ("map", "clean"), on stderr."""

    def __init__(self) -> None:
        self._bars: dict[str, ProgressBar] = {}

    def __call__(self, phase: str, done: int, total: int) -> None:
        bar = self._bars.get(phase)
        if bar is None:
            for other in self._bars.values():
                other.close()
            label = {"map": "pass 1: offset map", "clean": "pass 2: rewrite"}.get(phase, phase)
            bar = ProgressBar(label, total=total, unit="tasks", file=sys.stderr)
            bar.__enter__()
            self._bars[phase] = bar
        bar.total = max(float(total), 1.0)
        bar.update(done)

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()


def run(args: argparse.Namespace) -> int:
    config: dict[str, object] = dict(args.config)
    bars = _PhaseBars()
    progress: Progress = bars
    try:
        with _engine(args) as engine:
            result = clean_partition_dir(
                args.directory,
                config=config,
                now_ms=args.now_ms,
                force=args.force,
                engine=engine,
                progress=progress,
            )
    finally:
        bars.close()
    s = result.stats
    summary = {
        "topic_partition": str(result.topic_partition),
        "cleaned": result.cleaned,
        "dirty_ratio": round(result.cleanable_ratio, 6),
        "first_dirty_offset": result.first_dirty_offset,
        "end_offset": result.end_offset,
        "keys_mapped": result.keys_mapped,
        "segments_read": result.segments_read,
        "segments_written": result.segments_written,
        "bytes_read": s.bytes_read,
        "bytes_written": s.bytes_written,
        "records_read": s.records_read,
        "records_kept": s.records_written,
        "records_dropped": s.records_read - s.records_written,
        "tombstones_kept": s.tombstones_kept,
        "invalid_records": s.invalid_records,
        "elapsed_s": round(result.elapsed_s, 3),
    }
    if args.format == "json":
        print(json.dumps(summary, indent=2))
    else:
        print(result.summary_line())
        if result.cleaned:
            width = max(len(k) for k in summary)
            for key, value in summary.items():
                print(f"  {key:<{width}}  {value}")
    return 0
