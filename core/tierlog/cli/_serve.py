"""``tierlog serve``: run a node and its HTTP API (with the metrics) until SIGTERM or SIGINT.

Usage::

    tierlog serve --config server.properties [--override key=value ...]
                  [--rlmm NAME] [--bootstrap-servers HOST:PORT]
                  [--progress-interval SECONDS] [--ready-file PATH]

The configuration is a ``server.properties`` file as ``kafka-server-start`` reads
(``tierlog.node.config``); ``--override`` replaces a key, as Kafka's does. ``--rlmm topic
--bootstrap-servers H:P`` is short for the two keys that put the metadata on a Kafka cluster's
``__remote_log_metadata`` (the ``rlmm_topic`` plugin); an ``--override`` of the same key wins.
Logging goes to stderr in ``tierlog.log.format`` (``text`` or ``json``) at
``tierlog.log.level`` (``-v``: debug).

Once the API listens, the first line on stdout is ``Listening on http://HOST:PORT`` (also
logged), so a script that set ``tierlog.http.port=0`` learns the port; ``--ready-file`` also
writes the URL alone to a file (atomically: the file appears complete or not at all). While the
node runs, one progress line per topic summary is logged at most every ``--progress-interval``
seconds (default 10; 0 turns it off), and only when something changed: the topic's log end
offset (summed over partitions), local and remote segments and bytes, and the copy lag.

SIGTERM or SIGINT stops the API first (no request reaches a closing node; requests in progress
get a few seconds to finish), then the node, which closes its logs cleanly (the next start does
not recover them); the exit code is then 0. A second signal during that shutdown exits at once
with code 1 (the logs are then recovered at the next start). A configuration error exits with
code 2 and a message naming the key, as does a log directory that cannot be created, listed or
written (the message names the directory and the reason); an address already in use exits with
code 1. Without ``log.dirs`` (or ``log.dir``) the node uses Kafka's default ``/tmp/kafka-logs``
and logs a warning saying so.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from tierlog.cli._client_cmds import human_bytes
from tierlog.spi import ConfigError

if TYPE_CHECKING:
    from tierlog.node.node import Node, PartitionStatus

_LOG = logging.getLogger(__name__)


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "serve",
        help="run a node: its partitions, tiering, the HTTP API and the metrics",
        description="Run a tierlog node from a server.properties file, with its HTTP API and "
        "Prometheus metrics, until SIGTERM or SIGINT.",
    )
    parser.add_argument("--config", required=True, metavar="FILE", help="server.properties")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="replace a configuration key (repeatable), as kafka-server-start's --override",
    )
    parser.add_argument(
        "--rlmm",
        metavar="NAME",
        help="the metadata manager (remote.log.metadata.manager.class.name), e.g. embedded or "
        "topic; --override wins over it",
    )
    parser.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT[,...]",
        help="the Kafka cluster of the topic RLMM "
        "(rlmm.config.remote.log.metadata.common.client.bootstrap.servers)",
    )
    parser.add_argument(
        "--progress-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="log a progress line at most this often (default 10; 0 disables)",
    )
    parser.add_argument(
        "--ready-file",
        metavar="PATH",
        help="write the API's URL to PATH once it listens (for scripts and tests)",
    )
    parser.set_defaults(handler=run, configures_logging=True)


def progress_line(statuses: Iterable[PartitionStatus]) -> str:
    """One line summarising every topic: ``topic: leo=N local=S segs/B remote=S segs/B
    lag=B/S segs``, topics separated by ``; ``."""
    topics: dict[str, dict[str, int]] = {}
    for s in statuses:
        t = topics.setdefault(
            s.topic,
            {k: 0 for k in ("leo", "ls", "lb", "rs", "rb", "lagb", "lags")},
        )
        t["leo"] += s.log_end_offset
        t["ls"] += s.local_segments
        t["lb"] += s.local_bytes
        t["rs"] += s.remote_segments
        t["rb"] += s.remote_bytes
        t["lagb"] += s.copy_lag_bytes
        t["lags"] += s.copy_lag_segments
    if not topics:
        return "progress: no topics"
    parts = [
        f"{name}: leo={t['leo']} local={t['ls']} segs/{human_bytes(t['lb'])} "
        f"remote={t['rs']} segs/{human_bytes(t['rb'])} "
        f"copy lag={human_bytes(t['lagb'])}/{t['lags']} segs"
        for name, t in sorted(topics.items())
    ]
    return "progress: " + "; ".join(parts)


RLMM_CLASS_KEY = "remote.log.metadata.manager.class.name"
RLMM_PREFIX_KEY = "remote.log.metadata.manager.impl.prefix"
BOOTSTRAP_SERVERS_SUFFIX = "remote.log.metadata.common.client.bootstrap.servers"


def shorthand_overrides(
    props: dict[str, str], rlmm: str | None, bootstrap_servers: str | None
) -> dict[str, str]:
    """The keys ``--rlmm`` and ``--bootstrap-servers`` stand for (the latter under the
    configured ``remote.log.metadata.manager.impl.prefix``, ``rlmm.config.`` by default)."""
    overrides: dict[str, str] = {}
    if rlmm is not None:
        overrides[RLMM_CLASS_KEY] = rlmm
    if bootstrap_servers is not None:
        prefix = props.get(RLMM_PREFIX_KEY, "rlmm.config.")
        overrides[f"{prefix}{BOOTSTRAP_SERVERS_SUFFIX}"] = bootstrap_servers
    return overrides


def _configure_logging(props: dict[str, str], verbose: int) -> None:
    from tierlog.logging_setup import configure_logging

    fmt = props.get("tierlog.log.format", "text").strip()
    level = props.get("tierlog.log.level", "INFO").strip()
    if fmt not in ("text", "json"):
        raise ConfigError(
            f"Invalid value {fmt} for configuration tierlog.log.format: must be text or json"
        )
    try:
        configure_logging(level, "json" if fmt == "json" else "text")
    except ValueError as e:
        raise ConfigError(f"Invalid value {level} for configuration tierlog.log.level: {e}") from e
    if verbose:
        configure_logging("DEBUG", "json" if fmt == "json" else "text")
    # The listening line and progress are serve's own output: shown even at a WARNING level.
    _LOG.setLevel(logging.INFO)


def _write_ready_file(path: str, url: str) -> None:
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(url + "\n", encoding="utf-8")
    os.replace(tmp, target)


def run(args: argparse.Namespace) -> int:
    from tierlog.node.config import NodeConfig
    from tierlog.node.http_api import HttpApi
    from tierlog.node.node import Node
    from tierlog.properties import load_properties, parse_overrides

    if args.progress_interval < 0:
        print("tierlog: error: --progress-interval must be >= 0", file=sys.stderr)
        return 2
    props = load_properties(args.config)  # ConfigError if unreadable: main prints it
    props.update(shorthand_overrides(props, args.rlmm, args.bootstrap_servers))
    props.update(parse_overrides(args.override))
    _configure_logging(props, args.verbose)
    config = NodeConfig.from_props(props, source=args.config)  # ConfigError: main prints it

    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            # A second signal while stopping: the user does not want to wait any longer.
            print("tierlog: forced exit during shutdown", file=sys.stderr, flush=True)
            os._exit(1)
        received.append(signum)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        node = Node(config)
        try:
            # Closed even when start() fails half-way (plugins opened, a log not loadable).
            node.start()
            api = HttpApi(node, config.http_host, config.http_port)
            try:
                api.start()
            except OSError as e:
                print(
                    f"tierlog: error: cannot listen on {config.http_host}:{config.http_port} "
                    f"(tierlog.http.host/tierlog.http.port): {e.strerror or e}",
                    file=sys.stderr,
                )
                return 1
            try:
                print(f"Listening on {api.url}", flush=True)
                _LOG.info("Listening on %s (metrics at %s/metrics)", api.url, api.url)
                if args.ready_file:
                    try:
                        _write_ready_file(args.ready_file, api.url)
                    except OSError as e:
                        print(
                            f"tierlog: error: cannot write --ready-file {args.ready_file}: "
                            f"{e.strerror or e}",
                            file=sys.stderr,
                        )
                        return 1
                _run_until_stopped(node, stop, args.progress_interval)
                name = signal.Signals(received[0]).name if received else "a stop request"
                _LOG.info("Stopping on %s", name)
            finally:
                api.close()  # first: no request may reach a closing node
        finally:
            node.close()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    _LOG.info("Stopped")
    return 0


def _run_until_stopped(node: Node, stop: threading.Event, interval: float) -> None:
    """Wait for a signal, logging progress; wakes at least every second so that a signal is
    acted on promptly whatever the interval."""
    last_line = None
    next_progress = time.monotonic() + interval
    while not stop.is_set():
        now = time.monotonic()
        if interval > 0 and now >= next_progress:
            try:
                line = progress_line(node.status())
            except Exception:  # progress must never stop the node
                _LOG.debug("Progress failed", exc_info=True)
            else:
                if line != last_line:
                    _LOG.info("%s", line)
                    last_line = line
            next_progress = now + interval
        wait = 1.0 if interval <= 0 else min(1.0, max(0.0, next_progress - time.monotonic()))
        stop.wait(wait)
