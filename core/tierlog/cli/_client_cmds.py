"""``tierlog produce``, ``consume``, ``topics`` and ``status``: a running node, over its HTTP API.

Usage (``--url`` defaults to ``$TIERLOG_URL``, else ``http://127.0.0.1:8405``, where ``tierlog
serve`` listens by default)::

    tierlog produce --topic T [--partition P] [--key K] [--compression C]
                    [--from-file F | VALUE ...]
    tierlog consume --topic T [--partition P] [--from-beginning | --offset N]
                    [--max-records N] [--isolation read_uncommitted|read_committed]
                    [--format text|json] [--follow]
    tierlog topics [list]
    tierlog topics create NAME [--partitions N] [--config KEY=VALUE ...]
    tierlog topics describe [NAME]
    tierlog topics alter NAME [--config KEY=VALUE ...] [--delete-config KEY ...]
    tierlog topics delete NAME
    tierlog status [--topic T] [--json]

``produce`` sends each VALUE, or each line of ``--from-file`` (``-`` for stdin) or of stdin,
as one record (line ends removed), in requests of up to 1000 records (one per line when stdin is
a terminal, so typed lines go at once), and prints where each request's records landed:
``T-P: offsets FIRST..LAST``. Without ``--partition`` the node partitions (by ``--key``, else
one partition per request).

``consume`` reads like ``kafka-console-consumer``: from the end unless ``--from-beginning`` or
``--offset N`` (which needs ``--partition``), every partition unless ``--partition``. It reads
with plain fetches, below the local log start through the node's remote storage read path,
backing off when the node says to (remote fetch quota, a retriable remote storage error) and
fetching again when a remote read expired on the node (``remote.fetch.max.wait.ms``). It
stops once every partition is read up to its high watermark (the last stable offset for
``read_committed``), or after ``--max-records``; ``--follow`` keeps polling instead. ``text``
prints each value (``null`` for none), ``json`` one object per record with partition, offset,
timestamp, key, value and headers (UTF-8 text, invalid bytes replaced).

``tierlog compact --topic T --partition P`` (``tierlog.cli._compact``) uses a node's API too:
one log-cleaner round on the node, its progress streamed back.

``topics describe`` and ``status --json`` print JSON; ``status`` prints one line per partition
with its offsets, local and remote segments, and copy lag, as ``segments/size`` with sizes in
binary units (``3/2.9 MiB``; ``--json`` has the exact bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO, Final

from tierlog.spi import InvalidArgumentError, RetriableRemoteStorageException

_PRODUCE_BATCH: Final = 1000
_PRODUCE_BATCH_BYTES: Final = 1024 * 1024
_POLL_INTERVAL_S: Final = 0.5
_MAX_RETRIES: Final = 30
_COMPRESSIONS: Final = ("none", "gzip", "snappy", "lz4", "zstd")


def _default_url() -> str:
    from tierlog.node.client import DEFAULT_URL

    return os.environ.get("TIERLOG_URL") or DEFAULT_URL


def _add_connection_args(parser: argparse.ArgumentParser, *, inherited: bool = False) -> None:
    """``--url`` and ``--timeout``; ``inherited``: on a sub-action, where a value given before
    the action (``topics --url U list``) must not be reset to the default."""
    default_url: Any = argparse.SUPPRESS if inherited else None
    default_timeout: Any = argparse.SUPPRESS if inherited else 30.0
    parser.add_argument(
        "--url",
        default=default_url,
        help="the node's HTTP API (default: $TIERLOG_URL or http://127.0.0.1:8405)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=default_timeout,
        metavar="SECONDS",
        help="per request (default 30)",
    )


def add_parser(commands: Any) -> None:
    """Register ``produce``, ``consume``, ``topics`` and ``status``."""
    _add_produce(commands)
    _add_consume(commands)
    _add_topics(commands)
    _add_status(commands)


def _client(args: argparse.Namespace) -> Any:
    from tierlog.node.client import TierlogClient

    return TierlogClient(
        getattr(args, "url", None) or _default_url(), getattr(args, "timeout", 30.0)
    )


# produce -----------------------------------------------------------------------------------------
def _add_produce(commands: Any) -> None:
    parser = commands.add_parser(
        "produce",
        help="send records to a topic of a running node",
        description="Send each VALUE, or each line of --from-file or stdin, as a record.",
    )
    _add_connection_args(parser)
    parser.add_argument("--topic", required=True, help="the topic to write to")
    parser.add_argument("--partition", type=int, help="default: the node's partitioner")
    parser.add_argument("--key", help="the key of every record (UTF-8)")
    parser.add_argument(
        "--compression",
        choices=_COMPRESSIONS,
        default="none",
        help="codec of the record batches the node writes (default none)",
    )
    parser.add_argument("--from-file", metavar="FILE", help="one record per line ('-': stdin)")
    parser.add_argument("values", nargs="*", metavar="VALUE", help="record values")
    parser.set_defaults(handler=run_produce)


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    for line in stream:
        yield line.removesuffix(b"\n").removesuffix(b"\r")


def _chunks(values: Iterable[bytes], per_line: bool) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    size = 0
    for value in values:
        chunk.append(value)
        size += len(value)
        if per_line or len(chunk) >= _PRODUCE_BATCH or size >= _PRODUCE_BATCH_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def run_produce(args: argparse.Namespace) -> int:
    if args.from_file is not None and args.values:
        raise InvalidArgumentError("give VALUE arguments or --from-file, not both")
    client = _client(args)
    key = None if args.key is None else args.key.encode("utf-8")
    stream: BinaryIO | None = None
    per_line = False
    if args.values:
        values: Iterable[bytes] = (v.encode("utf-8") for v in args.values)
    elif args.from_file not in (None, "-"):
        stream = open(args.from_file, "rb")  # noqa: SIM115 (closed below)
        values = _lines(stream)
    else:
        values = _lines(sys.stdin.buffer)
        per_line = sys.stdin.isatty()
    try:
        for chunk in _chunks(values, per_line):
            records = [(key, v) for v in chunk] if key is not None else chunk
            for r in client.produce(
                args.topic, records, partition=args.partition, compression=args.compression
            ):
                print(f"{r.topic}-{r.partition}: offsets {r.base_offset}..{r.last_offset}")
            sys.stdout.flush()
    finally:
        if stream is not None:
            stream.close()
    return 0


# consume -----------------------------------------------------------------------------------------
def _add_consume(commands: Any) -> None:
    parser = commands.add_parser(
        "consume",
        help="read records of a topic from a running node (tiered data included)",
        description="Print the records of a topic, like kafka-console-consumer.",
    )
    _add_connection_args(parser)
    parser.add_argument("--topic", required=True, help="the topic to read")
    parser.add_argument("--partition", type=int, help="default: every partition")
    start = parser.add_mutually_exclusive_group()
    start.add_argument(
        "--from-beginning", action="store_true", help="start at the log start offset"
    )
    start.add_argument("--offset", type=int, help="start at this offset (needs --partition)")
    parser.add_argument("--max-records", type=int, help="stop after this many records")
    parser.add_argument(
        "--isolation",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
        help="read_committed stops at the last stable offset and skips aborted transactions "
        "(default read_uncommitted)",
    )
    parser.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: each value on a line ('null' for none); json: one object per record with "
        "partition, offset, timestamp, key, value and headers (default text)",
    )
    parser.add_argument(
        "--follow", action="store_true", help="keep polling at the end instead of stopping"
    )
    parser.add_argument(
        "--max-bytes", type=int, default=1024 * 1024, help="per fetch (default 1 MiB)"
    )
    parser.set_defaults(handler=run_consume)


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", errors="replace")


def _print_record(fmt: str, topic: str, partition: int, record: Any) -> None:
    if fmt == "json":
        obj = {
            "topic": topic,
            "partition": partition,
            "offset": record.offset,
            "timestamp": record.timestamp,
            "key": _text(record.key),
            "value": _text(record.value),
            "headers": [[k, _text(v)] for k, v in record.headers],
        }
        sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    else:
        value = _text(record.value)
        sys.stdout.write(("null" if value is None else value) + "\n")


def run_consume(args: argparse.Namespace) -> int:
    from tierlog.node.client import ApiError

    if args.offset is not None and args.partition is None:
        raise InvalidArgumentError("--offset needs --partition")
    if args.offset is not None and args.offset < 0:
        raise InvalidArgumentError(f"--offset must be >= 0, got {args.offset}")
    if args.max_records is not None and args.max_records < 1:
        raise InvalidArgumentError(f"--max-records must be >= 1, got {args.max_records}")
    client = _client(args)
    if args.partition is not None:
        partitions = [args.partition]
    else:
        partitions = list(range(client.describe_topic(args.topic)["partitions"]))
    positions: dict[int, int] = {}
    for p in partitions:
        if args.offset is not None:
            positions[p] = args.offset
        else:
            spec = "earliest" if args.from_beginning else "latest"
            found = client.list_offsets(args.topic, p, spec)
            positions[p] = 0 if found is None else found.offset
    committed = args.isolation == "read_committed"
    printed = 0
    retries = 0
    caught_up: set[int] = set()
    while True:
        progressed = False
        for p in partitions:
            if p in caught_up and not args.follow:
                continue
            try:
                result = client.fetch(
                    args.topic,
                    p,
                    positions[p],
                    max_bytes=args.max_bytes,
                    isolation=args.isolation,
                )
            except (RetriableRemoteStorageException, ApiError) as e:
                if isinstance(e, ApiError) and not e.retriable:
                    raise
                retries += 1
                if retries > _MAX_RETRIES:
                    raise
                time.sleep(1.0)
                continue
            if result.remote_fetch_expired:
                # The node's remote read outlived remote.fetch.max.wait.ms: not the end of the
                # partition, fetch the same offset again (a bounded number of times in a row).
                retries += 1
                if retries > _MAX_RETRIES:
                    raise RetriableRemoteStorageException(
                        f"the remote reads of {args.topic}-{p} at offset {positions[p]} expired "
                        f"{retries - 1} times in a row (remote.fetch.max.wait.ms on the node)"
                    )
                time.sleep(0.1)
                continue
            retries = 0
            if result.throttled:
                time.sleep(0.1)
                continue
            for record in result.records:
                _print_record(args.format, args.topic, p, record)
                printed += 1
                if args.max_records is not None and printed >= args.max_records:
                    sys.stdout.flush()
                    return 0
            sys.stdout.flush()
            end = result.last_stable_offset if committed else result.high_watermark
            if result.next_offset > positions[p]:
                progressed = True
            if result.next_offset >= end or result.next_offset == positions[p]:
                caught_up.add(p)
            positions[p] = result.next_offset
        if not args.follow and len(caught_up) == len(partitions):
            return 0
        if args.follow and not progressed:
            time.sleep(_POLL_INTERVAL_S)


# topics ------------------------------------------------------------------------------------------
def _add_topics(commands: Any) -> None:
    parser = commands.add_parser(
        "topics",
        help="list, create, describe, alter and delete topics of a running node",
        description="Manage the topics of a running node (default action: list).",
    )
    _add_connection_args(parser)
    parser.set_defaults(handler=run_topics_list)
    actions = parser.add_subparsers(dest="topics_action", metavar="ACTION")

    listing = actions.add_parser("list", help="topic names, one per line")
    _add_connection_args(listing, inherited=True)
    listing.set_defaults(handler=run_topics_list)

    create = actions.add_parser("create", help="create a topic")
    _add_connection_args(create, inherited=True)
    create.add_argument("name", metavar="NAME", help="the new topic's name")
    create.add_argument("--partitions", type=int, help="default: the node's num.partitions")
    create.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="a topic config"
    )
    create.set_defaults(handler=run_topics_create)

    describe = actions.add_parser("describe", help="a topic (or all) and its partitions as JSON")
    _add_connection_args(describe, inherited=True)
    describe.add_argument(
        "name", nargs="?", metavar="NAME", help="the topic (default: every topic, as a list)"
    )
    describe.set_defaults(handler=run_topics_describe)

    alter = actions.add_parser("alter", help="set or remove topic config overrides")
    _add_connection_args(alter, inherited=True)
    alter.add_argument("name", metavar="NAME", help="the topic to change")
    alter.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a topic config override (repeatable)",
    )
    alter.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="remove an override: the node's default applies again (repeatable)",
    )
    alter.set_defaults(handler=run_topics_alter)

    delete = actions.add_parser("delete", help="delete a topic, remote data included")
    _add_connection_args(delete, inherited=True)
    delete.add_argument("name", metavar="NAME", help="the topic to delete")
    delete.set_defaults(handler=run_topics_delete)


def _key_values(items: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidArgumentError(f"--config {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def run_topics_list(args: argparse.Namespace) -> int:
    for name in _client(args).topics():
        print(name)
    return 0


def run_topics_create(args: argparse.Namespace) -> int:
    topic_id = _client(args).create_topic(args.name, args.partitions, _key_values(args.config))
    print(f"Created topic {args.name} ({topic_id}).")
    return 0


def run_topics_describe(args: argparse.Namespace) -> int:
    client = _client(args)
    names = [args.name] if args.name else list(client.topics())
    described = [client.describe_topic(name) for name in names]
    print(json.dumps(described[0] if args.name else described, indent=2))
    return 0


def run_topics_alter(args: argparse.Namespace) -> int:
    changes: dict[str, object] = dict(_key_values(args.config))
    changes.update({key: None for key in args.delete_config})
    if not changes:
        raise InvalidArgumentError("nothing to alter: give --config or --delete-config")
    configs = _client(args).alter_topic_config(args.name, changes)
    print(json.dumps(configs, indent=2, sort_keys=True))
    return 0


def run_topics_delete(args: argparse.Namespace) -> int:
    _client(args).delete_topic(args.name)
    print(f"Deleted topic {args.name}.")
    return 0


# status ------------------------------------------------------------------------------------------
def _add_status(commands: Any) -> None:
    parser = commands.add_parser(
        "status",
        help="offsets, segments and tiering state of a running node's partitions",
        description="One line per partition: log start, local log start, log end, high "
        "watermark, highest tiered offset, local and remote segments/bytes, copy lag.",
    )
    _add_connection_args(parser)
    parser.add_argument("--topic", help="only this topic")
    parser.add_argument("--json", action="store_true", help="PartitionStatus objects as JSON")
    parser.set_defaults(handler=run_status)


def human_bytes(n: int) -> str:
    """``n`` bytes for a reader: ``512 B``, ``3.0 KiB``, ``2.9 MiB``, ``1.2 GiB`` (binary units,
    one decimal). Text output only: ``--json`` keeps exact byte counts."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


_STATUS_COLUMNS: Final = (
    ("PARTITION", lambda s: f"{s.topic}-{s.partition}"),
    ("LOG-START", lambda s: s.log_start_offset),
    ("LOCAL-START", lambda s: s.local_log_start_offset),
    ("LOG-END", lambda s: s.log_end_offset),
    ("HW", lambda s: s.high_watermark),
    ("TIERED-TO", lambda s: s.highest_offset_in_remote_storage),
    ("LOCAL", lambda s: f"{s.local_segments}/{human_bytes(s.local_bytes)}"),
    ("REMOTE", lambda s: f"{s.remote_segments}/{human_bytes(s.remote_bytes)}"),
    ("COPY-LAG", lambda s: f"{s.copy_lag_segments}/{human_bytes(s.copy_lag_bytes)}"),
)


def run_status(args: argparse.Namespace) -> int:
    statuses = _client(args).status(args.topic)
    if args.json:
        print(json.dumps([s.to_json() for s in statuses], indent=2))
        return 0
    rows = [[title for title, _ in _STATUS_COLUMNS]]
    rows += [[str(cell(s)) for _, cell in _STATUS_COLUMNS] for s in statuses]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_STATUS_COLUMNS))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0
