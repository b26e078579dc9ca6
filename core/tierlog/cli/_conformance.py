"""``tierlog conformance``: run the shipped suite on an installed plugin.

The suite is ordinary pytest; this command only points pytest at the suite module inside the
package (``tierlog/conformance/_selected.py``) with the plugin chosen by name. Arguments after
``--`` go to pytest unchanged (``-x``, ``-k name``, ``-q``...).

Before pytest starts, the command builds and configures the plugin once with the configuration
the tests will use (the plugin's ``conformance_config()`` with ``--config`` on top): a wrong key
or value then ends the run with the plugin's one ``ConfigError`` message instead of the same
error in every one of some sixty tests.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tierlog.spi import ConfigError, PluginError, TierlogError

_LOG = logging.getLogger(__name__)


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "conformance",
        help="run the conformance suite on an RSM or RLMM plugin",
        description="Run tierlog's conformance suite on a plugin; the exit code is the verdict "
        "(0 passed, 1 failed, 2 the plugin or its configuration was refused before any test). "
        "Extra arguments after -- are passed to pytest.",
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
        help="plugin configuration (repeatable), on top of the plugin's conformance_config()",
    )
    parser.add_argument(
        "--quick", action="store_true", help="skip the large-data tests (256 MiB segment)"
    )
    parser.set_defaults(handler=run)


def pytest_arguments(args: argparse.Namespace, extra: list[str]) -> list[str]:
    """The pytest command line that runs the suite for ``args``, once the plugin and its
    configuration have been checked (``PluginError``/``ConfigError`` otherwise)."""
    from tierlog.conformance._base import parse_key_values, resolve_plugin_class

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
    # Fail fast with one clear message instead of the same error in every test.
    plugin_class = resolve_plugin_class(kind, name, flag_prefix="--")
    given = parse_key_values(args.config, "--config")
    check_configuration(plugin_class, given, f"{kind} {name!r}")
    suite = (
        "TestSelectedRemoteStorageManager"
        if kind == "rsm"
        else "TestSelectedRemoteLogMetadataManager"
    )
    argv = [f"{module}::{suite}", f"--tierlog-{kind}", name]
    for item in args.config:
        argv += ["--tierlog-config", item]
    if args.quick:
        argv += ["-m", "not tierlog_large"]
    passthrough = extra[1:] if extra[:1] == ["--"] else extra
    # tierlog itself is imported before pytest starts, so pytest cannot rewrite its asserts;
    # the suite's assertions carry their own messages, so the warning is noise.
    quiet = ["-W", "ignore::pytest.PytestAssertRewriteWarning"]
    return [*argv, "-p", "no:cacheprovider", *quiet, *passthrough]


def check_configuration(plugin_class: type, given: Mapping[str, str], label: str) -> None:
    """Build and configure ``plugin_class`` once, as every test will, and close it.

    The configuration is the one the suite's tests get: the plugin's ``conformance_config()``
    (made in a temporary directory removed afterwards) with ``given`` on top; the keys
    ``given`` replaces are reported on stderr, in one line. A plugin that refuses it raises
    ``ConfigError`` with the plugin's own message (which names the key or value); any other
    failure of ``configure`` is reported the same way, in one line (``-vv`` logs the
    traceback).
    """
    from tierlog.conformance._base import overlay_config, plugin_conformance_config

    with tempfile.TemporaryDirectory(prefix="tierlog-conformance-check-") as tmp:
        declared = plugin_conformance_config(plugin_class, Path(tmp))
        if declared is None and not given:
            raise ConfigError(
                f"{plugin_class.__module__}:{plugin_class.__qualname__} has no "
                "conformance_config() classmethod: give its configuration with "
                "--config KEY=VALUE (repeatable)"
            )
        config, overridden = overlay_config(declared or {}, given)
        if overridden:
            print(
                f"tierlog conformance: --config overrides {', '.join(overridden)} of "
                f"{plugin_class.__qualname__}.conformance_config()",
                file=sys.stderr,
            )
        try:
            _configure_and_close(plugin_class, config)
        except TierlogError as exc:
            raise ConfigError(f"{label} refused its configuration: {exc}") from exc
        except Exception as exc:  # a plugin bug: still one line, not one per test
            _LOG.debug("configure() of %s failed", label, exc_info=True)
            raise ConfigError(
                f"{label} failed to configure: {type(exc).__name__}: {exc} (a plugin "
                "should raise ConfigError naming the key; tierlog -vv shows the traceback)"
            ) from exc


def _configure_and_close(plugin_class: type, config: Mapping[str, str]) -> None:
    """``cls()``, ``configure(config)`` and ``close()``, as Kafka builds a plugin; a failure of
    ``close`` is only logged, since the suite's own tests judge ``close``."""
    instance = plugin_class()
    try:
        instance.configure(dict(config))
    finally:
        try:
            instance.close()
        except Exception:
            _LOG.debug("close() after the configuration check failed", exc_info=True)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    try:
        import pytest
    except ImportError:  # pragma: no cover - depends on the environment
        print("tierlog conformance needs pytest: pip install 'tierlog[conformance]'")
        return 2
    return int(pytest.main(pytest_arguments(args, extra)))
