"""Every benchmark under bench/ runs end to end in its ``--quick`` mode, so that none can rot.

Each runs as a script (as a person runs it), on tiny sizes but through every phase, and must
exit 0 having written its JSON, with the figures its chart and the README read, and its chart.
The figures themselves are not checked: at these sizes they mean nothing (the JSON says so).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# The figures each benchmark's JSON must hold: top-level keys, then keys inside some of them
# (a dotted path goes deeper).
EXPECTED: dict[str, dict[str, set[str]]] = {
    "log_append": {
        "": {"raw", "raw_fsync", "log", "log_no_flush", "ratios"},
        "log": {"mb_per_s", "batches", "records", "segments", "reopen_seconds"},
        "ratios": {"log_vs_raw", "log_vs_raw_fsync", "log_no_flush_vs_raw", "log_vs_raw_cpu"},
    },
    "log_format": {
        "": {"build", "append", "shallow", "deep"},
        "shallow": {"raw_mb_per_s", "scan_crc_mb_per_s", "ratio_crc", "ratio_no_crc"},
        "deep": {"none", "gzip", "snappy", "lz4", "zstd"},
    },
    "metadata_cache": {
        "": {"bytes_per_segment", "lookup_us", "remote_log_size", "fill_s", "segments_live"},
        "bytes_per_segment": {"tracemalloc", "rss_delta", "goal", "kafka_java", "ratio_to_kafka"},
        # Kafka's figure is measured on a JVM holding Kafka's own cache, in the same run.
        "bytes_per_segment.kafka_java": {"bytes", "measured", "runs", "jvm"},
        "bytes_per_segment.ratio_to_kafka": {"tracemalloc", "rss_delta"},
        "lookup_us": {"p50", "p99", "p999"},
        "remote_log_size": {"running_sum_us", "kip852_scan_us", "lineage_kip852_scan_us"},
    },
    "rlm": {
        "": {"log", "copy", "read", "requests"},
        "copy": {"rlm_mb_per_s", "direct_mb_per_s", "ratio"},
        "read": {"rlm_mb_per_s", "raw_mb_per_s", "cold_mb_per_s", "ratio"},
        "requests": {"warm_requests_per_fetch", "cold_index_fetches_per_fetch"},
    },
    "rsm": {
        "": {"backends", "errors", "size_mib", "memory_mib"},
    },
    "compaction": {
        "": {"input", "kafka", "tierlog", "ratios", "bloom", "many_keys", "breakdown"},
        "input": {"bytes", "records", "keys", "segments", "scale"},
        "kafka": {"rounds", "round_count", "several_rounds", "mb_per_s", "records_per_s"},
        "tierlog": {"python", "spark_local1", "spark_local2"},
        "tierlog.spark_local2": {"seconds", "mb_per_s", "records_per_s", "session_s", "stages"},
        "ratios": {"spark_vs_kafka", "spark_vs_python", "local2_vs_local1"},
        "bloom": {"remote_bytes", "with_filters", "without_filters", "fraction_with"},
        "many_keys": {"keys", "kafka_capacity", "kafka", "tierlog", "one_round"},
        "many_keys.tierlog": {"keys_mapped", "rounds"},
    },
    "rlmm_bootstrap": {
        "": {
            "sizes",
            "largest",
            "latency",
            "goal_ratio",
            "compacted_largest",
            "topic_sizes",
            "goal_speedup",
            "goal_records_per_live_segment",
        },
        "largest": {"events", "ready_s", "records_per_s", "bare_records_per_s", "ratio"},
        # The compacted RLMM over the same events (issue 13): both curves and their ratio.
        "compacted_largest": {
            "speedup",
            "legacy_ready_s",
            "compacted_ready_s",
            "compacted_records",
            "records_per_live_segment",
            "cleaned",
        },
        "latency": {"rlmm", "bare", "ratio"},
        "latency.rlmm": {"add", "update", "call"},
        "latency.bare": {"round_trip"},
    },
}
RSM_BACKEND_KEYS = {
    "": {"upload", "fetch", "gets", "memory", "request_counts"},
    "fetch": {"raw_mb_per_s", "rsm_mb_per_s", "ratio", "tuned", "tuning"},
}
RSM_TUNED_KEYS = {"peer", "raw_mb_per_s", "ratio"}
RSM_TUNED = {"gcs", "azure"}
"""The backends whose SDK downloads differently from the plugin by default (S3's does not)."""


def run_quick(name: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), "--quick", "--out", str(out), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def check_keys(results: dict[str, Any], expected: dict[str, set[str]]) -> None:
    for section, keys in expected.items():
        found = results
        for step in section.split(".") if section else ():
            found = found[step]
        missing = keys - set(found)
        assert not missing, f"{section or 'top level'} lacks {sorted(missing)}"


def check_run(name: str, out: Path) -> dict[str, Any]:
    """Run ``name`` quick into ``out``; its JSON after checking the run, the JSON and the
    chart."""
    done = run_quick(name, out)
    assert done.returncode == 0, f"{name}.py --quick failed:\n{done.stdout}\n{done.stderr}"
    assert "quick mode: figures are not meaningful" in done.stdout
    # Progress goes through tierlog.progress: plain lines off a terminal, no carriage returns.
    assert "\r" not in done.stderr
    results = json.loads((out / f"{name}.json").read_text())
    assert results["quick"] is True
    check_keys(results, EXPECTED[name])
    assert (out / f"{name}.png").read_bytes().startswith(PNG_MAGIC)
    return results


@pytest.mark.parametrize(
    "name", ["compaction", "log_append", "log_format", "metadata_cache", "rlm", "rlmm_bootstrap"]
)
def test_quick_run_writes_its_figures_and_chart(name: str, tmp_path: Path) -> None:
    check_run(name, tmp_path)


def _rsm_servers() -> dict[str, Callable[[], object]]:
    """How to find each object-store server the rsm benchmark starts (raises if missing)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from services.azurite import azurite_binary
        from services.fake_gcs import binary_path
        from services.seaweedfs import weed_binary
    finally:
        sys.path.remove(str(ROOT / "scripts"))

    def azurite() -> object:
        found = azurite_binary()
        if found is None:
            raise RuntimeError("Azurite is not installed")
        return found

    return {"s3": weed_binary, "gcs": binary_path, "azure": azurite}


def test_rsm_quick_runs_every_backend_whose_server_is_installed(tmp_path: Path) -> None:
    results = check_run("rsm", tmp_path)
    for backend, find in _rsm_servers().items():
        try:
            find()
        except RuntimeError:
            # Not installed here: the benchmark says so and goes on with the others.
            assert results["errors"][backend].startswith("server did not start")
            continue
        assert backend not in results["errors"], results["errors"][backend]
        check_keys(results["backends"][backend], RSM_BACKEND_KEYS)
        tuned = results["backends"][backend]["fetch"]["tuned"]
        if backend in RSM_TUNED:
            check_keys(tuned, {"": RSM_TUNED_KEYS})
        else:
            assert tuned is None


def test_quick_never_writes_to_bench_results() -> None:
    before = {p.name: p.stat().st_mtime_ns for p in (BENCH / "results").iterdir()}
    done = run_quick("log_append", BENCH / "results")
    assert done.returncode == 2
    assert "never writes to" in done.stderr
    after = {p.name: p.stat().st_mtime_ns for p in (BENCH / "results").iterdir()}
    assert after == before
