"""``tierlog plugins``: what is installed, as JSON, in the manner of ``datasette plugins``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tierlog.spi.plugins import get_registry


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "plugins",
        help="list installed RSM and RLMM plugins as JSON",
        description="List the installed RemoteStorageManager (rsm) and "
        "RemoteLogMetadataManager (rlmm) plugins as JSON, including any that failed to load.",
    )
    parser.set_defaults(handler=run)


def plugins_as_json() -> list[dict[str, Any]]:
    """One object per registered class, then one per plugin that failed to load."""
    registry = get_registry()
    rows: list[dict[str, Any]] = []
    for table in (registry.storage_managers, registry.metadata_managers):
        for name in sorted(table):
            info = table[name]
            rows.append(
                {
                    "name": info.name,
                    "kind": info.kind,
                    "class": info.class_path,
                    "version": info.version,
                    "distribution": info.distribution,
                    "plugin": info.plugin,
                    "error": None,
                }
            )
    for failure in registry.failures:
        rows.append(
            {
                "name": failure.plugin,
                "kind": None,
                "class": None,
                "version": failure.version,
                "distribution": failure.distribution,
                "plugin": failure.plugin,
                "error": failure.error,
            }
        )
    return rows


def run(args: argparse.Namespace) -> int:
    print(json.dumps(plugins_as_json(), indent=2))
    return 0
