"""The Spark engine's per-bucket arithmetic (``spark_engine``), without Spark: the offset map of
a bucket, the lookup of clean-section keys in it, and the winners of the dirty segments.

Digests here are drawn from a tiny range on purpose, so that many keys share a digest's first
half (``h1``): the engine sorts on ``h1`` alone and must notice when a run of equal ``h1`` holds
two keys. Each case is checked against a dict built record by record."""

from __future__ import annotations

import numpy as np
import pytest

from tierlog.compaction.spark_engine import _latest_per_digest, _lookup, _Round, _winners


def _expected(table: np.ndarray) -> dict[tuple[int, int], int]:
    out: dict[tuple[int, int], int] = {}
    for h1, h2, offset in table.tolist():
        out[(h1, h2)] = max(out.get((h1, h2), -1), offset)
    return out


@pytest.mark.parametrize("seed", range(40))
def test_latest_offset_per_digest_and_lookup_match_a_dict(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400))
    spread = int(rng.choice([2, 5, 1 << 40]))  # 2, 5: h1 shared by different keys
    keys = rng.integers(-spread, spread, (n, 2))
    table = np.column_stack([keys, rng.permutation(n)]).astype(np.int64)
    latest = _latest_per_digest(table)
    expected = _expected(table)
    assert {(a, b): c for a, b, c in latest.tolist()} == expected
    assert len(latest) == len(expected)
    assert latest[:, 0].tolist() == sorted(latest[:, 0].tolist())
    probes = np.column_stack([rng.integers(-spread - 1, spread + 1, (60, 2)), np.zeros(60)]).astype(
        np.int64
    )
    found = _lookup(latest, probes)
    assert found.tolist() == [expected.get((a, b), -1) for a, b, _ in probes.tolist()]


def test_winners_fall_in_the_dirty_segment_that_holds_them() -> None:
    latest = np.array([[1, 1, 5], [2, 2, 10], [3, 3, 19], [4, 4, 20], [5, 5, 3]], np.int64)
    round_ = _Round(
        first_dirty_offset=5,
        dirty_bases=(5, 10, 20),
        dirty_segments=(7, 8),
        clean_segments=frozenset({6}),
    )
    lists = {seg: np.frombuffer(blob, "<i8").tolist() for seg, blob in _winners(latest, round_)}
    # 3 is below the dirty range (a straddling segment's record), 20 is past its end.
    assert lists == {7: [5], 8: [10, 19]}
