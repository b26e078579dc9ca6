"""``tierlog compact``: one log-cleaner round, on a running node's partition or offline.

Two forms, exactly one per call::

    tierlog compact --topic T --partition P [--url URL] [--no-force]
    tierlog compact DIR [--config KEY=VALUE ...] [--engine python|spark] [--force] ...

**On a node** (``--topic``/``--partition``) the round runs in the node (``POST
/topics/{t}/partitions/{p}/compact``, ``Node.compact_now``), on the node's engine
(``remote.log.compaction.engine``) and with the topic's configuration; a tiered partition is
cleaned through remote storage. It is forced by default (``--no-force``: only if the dirty ratio
reaches ``min.cleanable.dirty.ratio``, as the cleaner threads would): asking for a round is
asking for it now.

**Offline** (``DIR``, a Kafka-format partition directory) it is what Kafka's cleaner would do to
that log, run on demand (on a copy: no broker or node may have the directory open): the cleaner
checkpoint and the high watermark come from, and the new checkpoint goes to, the parent log
directory's files, as Kafka keeps them. The round runs in this process (``--engine python``) or
as a Spark job (``--engine spark``, ``tierlog[spark]``; local mode by default, any master with
``--spark-master``). Not forced by default, as the cleaner is not (``--force``).

Both forms show the passes' progress on stderr and print the same summary
(``tierlog.node.http_api.compaction_json``) to stdout, as text or JSON: a line like the end of
Kafka's cleaner stats, then every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, TextIO

from tierlog.cli._client_cmds import _default_url, human_bytes
from tierlog.compaction.engine import CleanEngine
from tierlog.progress import Progress as ProgressBar
from tierlog.spi import ConfigError, InvalidArgumentError

__all__ = ["PhaseBars", "add_parser", "print_summary", "run", "summary_line"]

_FORMS: Final = (
    "give either a partition directory (offline: tierlog compact DIR) or a node's partition "
    "(tierlog compact --topic T --partition P)"
)
_OFFLINE_ONLY: Final = ("config", "engine", "spark_master", "spark_conf", "now_ms")
_NODE_ONLY: Final = ("url", "timeout")


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "compact",
        help="run one log-cleaner round on a node's partition or a partition directory",
        description="Run one round of Kafka's log cleaner now. On a running node (--topic, "
        "--partition): the node runs it on its engine, through remote storage for a tiered "
        "topic, forced unless --no-force. Offline (DIR, a Kafka-format partition directory "
        "<log dir>/<topic>-<partition>): as a broker's cleaner would, the cleaner checkpoint "
        "and high watermark read from the log directory's checkpoint files and the new "
        "checkpoint written there; run it on a copy, never on a directory a broker or node "
        "has open. Progress goes to stderr, the round's summary to stdout.",
    )
    parser.add_argument("directory", type=Path, nargs="?", help="offline: the partition directory")
    parser.add_argument("--topic", help="on a node: the compacted topic")
    parser.add_argument("--partition", type=int, help="on a node: the partition")
    parser.add_argument(
        "--url",
        default=None,
        help="on a node: its HTTP API (default: $TIERLOG_URL or http://127.0.0.1:8405)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="on a node: the longest silence from the node (default 30; the node reports "
        "every few seconds while the round runs, so a long round is not cut short)",
    )
    parser.add_argument(
        "--force",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="clean even below min.cleanable.dirty.ratio when anything is cleanable "
        "(default: --force on a node, --no-force offline)",
    )
    parser.add_argument(
        "--config",
        action="append",
        type=_key_value,
        default=[],
        metavar="KEY=VALUE",
        help="offline: a topic config with Kafka's key (repeatable), e.g. delete.retention.ms=1000",
    )
    parser.add_argument(
        "--engine",
        choices=("python", "spark"),
        default=None,
        help="offline: compute the round in this process or as a Spark job (default: python)",
    )
    parser.add_argument(
        "--spark-master",
        default=None,
        help="offline: Spark master URL for --engine spark (default local[*])",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        type=_key_value,
        default=[],
        metavar="KEY=VALUE",
        help="offline: a Spark setting for --engine spark (repeatable)",
    )
    parser.add_argument(
        "--now-ms", type=int, default=None, help="offline: the round's clock (default: now)"
    )
    parser.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="print the summary as text (default) or JSON",
    )
    parser.set_defaults(handler=run)


def _given(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    """The options of ``names`` set on the command line (lists non-empty, others not None)."""
    return [
        "--" + name.replace("_", "-")
        for name in names
        if getattr(args, name, None) not in (None, [])
    ]


def _verb(options: list[str]) -> str:
    return "applies" if len(options) == 1 else "apply"


def _check_form(args: argparse.Namespace) -> str:
    """``"node"`` or ``"offline"``; a usage error names what is missing or misplaced."""
    on_node = args.topic is not None or args.partition is not None
    if args.directory is not None and on_node:
        raise InvalidArgumentError(f"a partition directory and --topic/--partition: {_FORMS}")
    if args.directory is None and not on_node:
        raise InvalidArgumentError(f"nothing to compact: {_FORMS}")
    if on_node:
        if args.topic is None or args.partition is None:
            missing = "--topic" if args.topic is None else "--partition"
            raise InvalidArgumentError(f"a node's partition needs {missing} too")
        misplaced = _given(args, _OFFLINE_ONLY)
        if misplaced:
            raise InvalidArgumentError(
                f"{', '.join(misplaced)} {_verb(misplaced)} to a partition directory (offline): "
                "on a node "
                "the round uses the node's engine (remote.log.compaction.engine) and the "
                "topic's configuration (tierlog topics alter)"
            )
        return "node"
    misplaced = _given(args, _NODE_ONLY)
    if misplaced:
        raise InvalidArgumentError(
            f"{', '.join(misplaced)} {_verb(misplaced)} to a node's partition (--topic, "
            "--partition), not to a partition directory"
        )
    if args.engine != "spark" and (args.spark_master or args.spark_conf):
        raise ConfigError("--spark-master and --spark-conf need --engine spark")
    return "offline"


# Progress and summary ----------------------------------------------------------------------------
class PhaseBars:
    """One progress bar per pass of a round ("map", then "clean"), on ``file`` (stderr)."""

    LABELS: Final = {"map": "pass 1: offset map", "clean": "pass 2: rewrite"}

    def __init__(self, file: TextIO | None = None, prefix: str = "") -> None:
        self._file = file
        self._prefix = prefix
        self._bars: dict[str, ProgressBar] = {}

    def __call__(self, phase: str, done: int, total: int) -> None:
        bar = self._bars.get(phase)
        if bar is None:
            for other in self._bars.values():
                other.close()
            label = self._prefix + self.LABELS.get(phase, phase)
            bar = ProgressBar(label, total=max(total, 1), unit="tasks", file=self._file)
            bar.__enter__()
            self._bars[phase] = bar
        bar.total = max(float(total), 1.0)
        bar.update(done)

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()


def _percent_less(before: int, after: int) -> float:
    return 100.0 * (1 - after / before) if before else 0.0


def summary_line(summary: Mapping[str, Any]) -> str:
    """One line for a reader, like the end of Kafka's cleaner stats block (plus the remote
    traffic of a tiered round)."""
    tp = f"{summary['topic']}-{summary['partition']}"
    section = f"[{summary['first_dirty_offset']}, {summary['end_offset']})"
    if not summary["cleaned"]:
        return (
            f"{tp}: not cleaned (dirty ratio {summary['dirty_ratio']:.3f}, dirty section {section})"
        )
    read, written = summary["bytes_read"], summary["bytes_written"]
    records, kept = summary["records_read"], summary["records_kept"]
    line = (
        f"{tp}: cleaned dirty section {section} in {summary['elapsed_s']:.1f} s: "
        f"{summary['keys_mapped']:,} keys; start {read:,} bytes ({records:,} records), end "
        f"{written:,} bytes ({kept:,} records): {_percent_less(read, written):.1f}% size "
        f"reduction ({_percent_less(records, kept):.1f}% fewer records)"
    )
    if summary.get("tiered"):
        line += (
            f"; remote storage: {human_bytes(summary['bytes_downloaded'])} downloaded, "
            f"{human_bytes(summary['bytes_uploaded'])} uploaded, "
            f"{summary['segments_skipped']} segment(s) skipped by their Bloom filters"
        )
    return line


def print_summary(summary: Mapping[str, Any], fmt: str, out: TextIO | None = None) -> None:
    """``summary`` (``compaction_json``) as ``json`` or as ``text``: its line, then (if the
    round cleaned) every figure."""
    out = sys.stdout if out is None else out
    if fmt == "json":
        print(json.dumps(summary, indent=2), file=out)
        return
    print(summary_line(summary), file=out)
    if not summary["cleaned"]:
        return
    rows = {k: v for k, v in summary.items() if k not in ("topic", "partition", "published")}
    if "published" in summary:
        rows["segments_published"] = len(summary["published"])
    width = max(len(k) for k in rows)
    for key, value in rows.items():
        text = "true" if value is True else "false" if value is False else value
        print(f"  {key:<{width}}  {text}", file=out)


# Running ---------------------------------------------------------------------------------------
@contextmanager
def _engine(args: argparse.Namespace) -> Iterator[CleanEngine | None]:
    if args.engine != "spark":
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


def _run_offline(args: argparse.Namespace) -> dict[str, Any]:
    from tierlog.compaction.offline import clean_partition_dir
    from tierlog.node.http_api import compaction_json

    bars = PhaseBars()
    try:
        with _engine(args) as engine:
            result = clean_partition_dir(
                args.directory,
                config=dict(args.config),
                now_ms=args.now_ms,
                force=bool(args.force),
                engine=engine,
                progress=bars,
            )
    finally:
        bars.close()
    return compaction_json(result)


def _run_on_node(args: argparse.Namespace) -> dict[str, Any]:
    from tierlog.node.client import TierlogClient

    client = TierlogClient(
        args.url or _default_url(), 30.0 if args.timeout is None else args.timeout
    )
    force = args.force is not False
    print(
        f"[compact] {args.topic}-{args.partition} on {client.base_url}: "
        f"one round{' (forced)' if force else ''}",
        file=sys.stderr,
        flush=True,
    )
    bars = PhaseBars()
    try:
        summary: dict[str, Any] = client.compact(
            args.topic, args.partition, force=force, progress=bars
        )
    finally:
        bars.close()
    return summary


def run(args: argparse.Namespace) -> int:
    summary = _run_on_node(args) if _check_form(args) == "node" else _run_offline(args)
    print_summary(summary, args.format)
    return 0
