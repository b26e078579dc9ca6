"""The ``tierlog`` command.

Subcommands:

- ``plugins``: the installed RSM and RLMM plugins as JSON (and any that failed to load);
- ``conformance --rsm NAME | --rlmm NAME [--config k=v ...]``: run the conformance suite on a
  plugin, exit code is the verdict;
- ``metadata decode|encode|partition|dump|migrate``: work with ``__remote_log_metadata`` records,
  dump a metadata topic, migrate a legacy topic to the compacted RLMM's keyed projection;
- ``log dump PATH``: print Kafka-format log files, like ``kafka-dump-log``;
- ``serve --config FILE [--override k=v ...]``: run a node with its HTTP API and metrics until
  SIGTERM/SIGINT (``tierlog.cli._serve``);
- ``produce``, ``consume``, ``topics [list|create|describe|alter|delete]``, ``status``: use a
  running node through its HTTP API (``--url``, default ``$TIERLOG_URL`` or
  ``http://127.0.0.1:8405``; ``tierlog.cli._client_cmds``);
- ``quickstart``: the end-to-end demo on the embedded defaults (``tierlog.cli._quickstart``);
- ``compact DIR`` | ``compact --topic T --partition P``: one log-cleaner round on a partition
  directory, offline, or on a running node (``tierlog.cli._compact``).

Exit codes: 0 success, 1 a failed check or an I/O failure (a broken pipe, an address in use),
2 a usage or tierlog error (the message is on stderr as ``tierlog: error: ...``), 130
interrupted by Ctrl-C.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from tierlog._version import __version__
from tierlog.cli import (
    _client_cmds,
    _compact,
    _conformance,
    _log,
    _metadata,
    _plugins,
    _quickstart,
    _serve,
)
from tierlog.spi import TierlogError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tierlog",
        description="Kafka tiered storage (KIP-405) in Python.",
    )
    parser.add_argument("--version", action="version", version=f"tierlog {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="log more (repeat for debug)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _plugins.add_parser(commands)
    _conformance.add_parser(commands)
    _metadata.add_parser(commands)
    _log.add_parser(commands)
    _serve.add_parser(commands)
    _client_cmds.add_parser(commands)
    _quickstart.add_parser(commands)
    _compact.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tierlog`` console script; returns the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, extra = parser.parse_known_args(args_list)
    if extra and args.command != "conformance":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "configures_logging", False):
        # ``serve`` sets up logging itself, from its configuration file.
        level = logging.WARNING - 10 * min(args.verbose, 2)
        logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "conformance":
            return int(args.handler(args, extra))
        return int(args.handler(args))
    except TierlogError as exc:
        print(f"tierlog: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 1
    except KeyboardInterrupt:  # Ctrl-C ends ``consume --follow``: no traceback for that
        return 130
