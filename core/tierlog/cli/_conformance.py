"""``tierlog conformance``: run the shipped suite on an installed plugin.

The suite is ordinary pytest; this command only points pytest at the suite module inside the
package (``tierlog/conformance/_selected.py``) with the plugin chosen by name. Arguments after
``--`` go to pytest unchanged (``-x``, ``-k name``, ``-q``...).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from tierlog.spi import ConfigError, PluginError


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "conformance",
        help="run the conformance suite on an RSM or RLMM plugin",
        description="Run tierlog's conformance suite on a plugin; the exit code is the verdict "
        "(0 passed, 1 failed). Extra arguments after -- are passed to pytest.",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--rsm", metavar="NAME", help="RemoteStorageManager: name or module:Class")
    target.add_argument(
        "--rlmm", metavar="NAME", help="RemoteLogMetadataManager: name or module:Class"
    )
    parser.add_argument(
        "--config",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="plugin configuration (repeatable); default: the plugin's conformance_config()",
    )
    parser.add_argument(
        "--quick", action="store_true", help="skip the large-data tests (256 MiB segment)"
    )
    parser.set_defaults(handler=run)


def pytest_arguments(args: argparse.Namespace, extra: list[str]) -> list[str]:
    """The pytest command line that runs the suite for ``args``."""
    from tierlog.conformance._base import resolve_plugin_class

    # Locate the suite without importing it: modules pytest will load must not be imported
    # before pytest.main, or pytest cannot rewrite their asserts.
    spec = importlib.util.find_spec("tierlog.conformance")
    if spec is None or spec.origin is None:  # pragma: no cover - broken installation
        raise PluginError("the tierlog.conformance package is not installed")
    module = Path(spec.origin).with_name("_selected.py")
    # Like `python -m`, let `module:Class` name a module of the current directory.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    kind, name = ("rsm", args.rsm) if args.rsm else ("rlmm", args.rlmm)
    # Fail fast with one clear message instead of the same error in every test (and say so
    # when the name is a plugin of the other kind).
    plugin_class = resolve_plugin_class(kind, name, flag_prefix="--")
    suite = (
        "TestSelectedRemoteStorageManager"
        if kind == "rsm"
        else "TestSelectedRemoteLogMetadataManager"
    )
    argv = [f"{module}::{suite}", f"--tierlog-{kind}", name]
    for item in args.config:
        key, sep, _ = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--config expects KEY=VALUE, got {item!r}")
        argv += ["--tierlog-config", item]
    if not args.config and getattr(plugin_class, "conformance_config", None) is None:
        raise ConfigError(
            f"{plugin_class.__module__}:{plugin_class.__qualname__} has no conformance_config() "
            "classmethod: give its configuration with --config KEY=VALUE (repeatable)"
        )
    if args.quick:
        argv += ["-m", "not tierlog_large"]
    passthrough = extra[1:] if extra[:1] == ["--"] else extra
    # tierlog itself is imported before pytest starts, so pytest cannot rewrite its asserts;
    # the suite's assertions carry their own messages, so the warning is noise.
    quiet = ["-W", "ignore::pytest.PytestAssertRewriteWarning"]
    return [*argv, "-p", "no:cacheprovider", *quiet, *passthrough]


def run(args: argparse.Namespace, extra: list[str]) -> int:
    try:
        import pytest
    except ImportError:  # pragma: no cover - depends on the environment
        print("tierlog conformance needs pytest: pip install 'tierlog[conformance]'")
        return 2
    return int(pytest.main(pytest_arguments(args, extra)))
