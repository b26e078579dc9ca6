"""Write a fuzz target's seed inputs (its ``seeds()``) into a corpus directory.

Usage::

    .venv/bin/python fuzz/write_seeds.py TARGET CORPUS_DIR    # TARGET: fuzz_index, ...

libFuzzer starts from the files of ``CORPUS_DIR`` and adds the inputs it finds there, so a run
seeded with valid files reaches the deep parts of a format in seconds instead of hours.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def write_seeds(target: str, corpus: Path) -> int:
    """Write ``fuzz/<target>.py``'s seeds as ``seed-<n>`` files; returns how many."""
    path = Path(__file__).with_name(f"{target.removesuffix('.py')}.py")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"no fuzz target {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    corpus.mkdir(parents=True, exist_ok=True)
    seeds: list[bytes] = module.seeds()
    for n, seed in enumerate(seeds):
        (corpus / f"seed-{n}").write_bytes(seed)
    return len(seeds)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    print(f"{write_seeds(sys.argv[1], Path(sys.argv[2]))} seeds written to {sys.argv[2]}")
