"""What every benchmark does with its options and its figures: the quick mode, verdicts against
the goals, the results as JSON, and a chart, which people would rather look at.

``--quick`` runs every phase of a benchmark on tiny sizes, so that a test can run it in seconds
and a benchmark cannot rot; its figures mean nothing, so it never writes to ``bench/results/``
(a temporary directory unless ``--out`` names another), judges no goal, and says so on stdout,
in the JSON (``"quick": true``) and across the chart.

A missing matplotlib only skips the chart (it is in the ``bench`` extra, not in the core's
dependencies): the figures are printed and written as JSON either way.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
"""Where the benchmarks write by default (committed: the figures the README quotes)."""

QUICK_NOTE = "quick mode: figures are not meaningful"
"""Said wherever a quick run's figures show, in place of the verdicts."""


def parse_args(
    parser: argparse.ArgumentParser,
    quick: Mapping[str, Any],
    argv: Sequence[str] | None = None,
    *,
    workdir: bool = True,
) -> tuple[argparse.Namespace, Path]:
    """Add the options every benchmark has to ``parser``, parse ``argv``, and return the
    options and the results directory.

    The options: ``--seed``, ``--quick`` and ``--out``, and with ``workdir`` ``--dir`` and
    ``--keep`` (where the working files go, and keeping them). With ``--quick`` the options
    named in ``quick`` take its values (tiny sizes, whatever was given), the results go to
    ``--out`` or else a new temporary directory, never to ``bench/results/``, and the quick
    note is printed.
    """
    if workdir:
        parser.add_argument("--dir", type=Path, default=None, help="where to write (a new dir)")
        parser.add_argument("--keep", action="store_true", help="keep the working directory")
    parser.add_argument("--seed", type=int, default=405, help="of the generated data")
    sizes = ", ".join(
        f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in quick.items()
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke run of every phase at tiny sizes ({sizes}); its figures are not "
        "meaningful and are written to --out or a temporary directory, never bench/results/",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"results directory (default {RESULTS}; with --quick a temporary directory)",
    )
    args = parser.parse_args(argv)
    if not args.quick:
        return args, args.out if args.out is not None else RESULTS
    if args.out is not None and args.out.resolve().is_relative_to(RESULTS):
        parser.error(f"--quick never writes to {RESULTS}: its figures are not meaningful")
    for name, value in quick.items():
        setattr(args, name, value)
    out = args.out if args.out is not None else Path(tempfile.mkdtemp(prefix="tierlog-quick-"))
    print(f"{QUICK_NOTE} (a smoke run of every phase at tiny sizes); results go to {out}")
    return args, out


def drop_workdir(args: argparse.Namespace, workdir: Path) -> None:
    """Delete a benchmark's working directory, or with ``--keep`` say where it is."""
    if args.keep:
        print(f"kept {workdir}", file=sys.stderr, flush=True)
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def verdict(value: float, goal: float, *, at_most: bool = False, quick: bool = False) -> str:
    """``OK`` when ``value`` meets ``goal`` (at least it, or with ``at_most`` at most it);
    a quick run's figures are not judged."""
    if quick:
        return "not judged (quick mode)"
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


def save_chart(fig: Any, path: Path, results: Mapping[str, Any], *, dpi: int = 100) -> bool:
    """Lay out, mark a quick run's chart as such, write ``fig`` to ``path`` and close it."""
    if results.get("quick"):
        fig.suptitle(QUICK_NOTE, color="C3", fontweight="bold")
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return True


def write_results(
    out: Path,
    name: str,
    results: dict[str, Any],
    chart: Callable[[dict[str, Any], Path], bool] | None = None,
    *,
    quick: bool = False,
) -> None:
    """``<out>/<name>.json`` (``"quick"`` says whether the figures mean anything) and, when
    ``chart`` draws it, ``<out>/<name>.png``; each file written is named on stdout."""
    results["quick"] = quick
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {path}")
    if chart is not None:
        image = out / f"{name}.png"
        if chart(results, image):
            print(f"wrote {image}")
    if quick:
        print(QUICK_NOTE)
