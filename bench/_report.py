"""What every benchmark does with its figures: verdicts against the goals, the results as JSON,
and a chart, which people would rather look at.

A missing matplotlib only skips the chart (it is in the test extras, not in the core's
dependencies): the figures are printed and written as JSON either way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
"""Where the benchmarks write by default (committed: the figures the README quotes)."""


def verdict(value: float, goal: float, *, at_most: bool = False) -> str:
    """``OK`` when ``value`` meets ``goal`` (at least it, or with ``at_most`` at most it)."""
    ok = value <= goal if at_most else value >= goal
    return "OK" if ok else "MISSED"


def pyplot() -> ModuleType | None:
    """``matplotlib.pyplot`` on the non-interactive Agg backend, or None (said on stdout) when
    matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: chart skipped")
        return None
    return plt


def write_results(
    out: Path,
    name: str,
    results: dict[str, Any],
    chart: Callable[[dict[str, Any], Path], bool] | None = None,
) -> None:
    """``<out>/<name>.json`` and, when ``chart`` draws it, ``<out>/<name>.png``; each file
    written is named on stdout."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {path}")
    if chart is not None:
        image = out / f"{name}.png"
        if chart(results, image):
            print(f"wrote {image}")
