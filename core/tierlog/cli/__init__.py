"""The ``tierlog`` command.

Subcommands:

- ``plugins``: the installed RSM and RLMM plugins as JSON (and any that failed to load);
- ``conformance --rsm NAME | --rlmm NAME [--config k=v ...]``: run the conformance suite on a
  plugin, exit code is the verdict;
- ``metadata decode|encode|partition``: work with ``__remote_log_metadata`` records;
- ``log dump PATH``: print Kafka-format log files, like ``kafka-dump-log``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from tierlog._version import __version__
from tierlog.cli import _conformance, _log, _metadata, _plugins
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tierlog`` console script; returns the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, extra = parser.parse_known_args(args_list)
    if extra and args.command != "conformance":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
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


