"""``tierlog quickstart --compacted``: a small run end to end (in process, and as Spark jobs),
its config reopened and compacted again through ``tierlog compact`` on the node, and runs that
must fail: a record changed in a cleaned remote segment, replaced segments never deleted."""

from __future__ import annotations

import io
import json
import re
import struct
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

from tierlog.cli import main
from tierlog.cli._quickstart_compacted import (
    COMPACTED_TOPIC,
    HOT_KEYS,
    CompactedQuickstartResult,
    run_compacted_quickstart,
)
from tierlog.compaction.tiered import remote_chain
from tierlog.log.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, LOG_OVERHEAD
from tierlog.log.crc import crc32c
from tierlog.log.reader import iter_batches_with_records
from tierlog.node import Node, NodeConfig
from tierlog.node.http_api import HttpApi
from tierlog.node.node import REMOTE_STORAGE_DIR
from tierlog.spi import TopicPartition
from tierlog.storage.local import LocalTieredStorage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SIZE_MIB = 8
PHASES = ("[produce phase 1]", "[tier]", "[round 1 pass 1: offset map]", "[compact] round 1:")
PHASES += ("[produce phase 2]", "[round 2 pass 2: rewrite]", "[compact] round 2:", "[local]")
PHASES += ("[expire]", "[consume]")


def quickstart(directory: Path, **kwargs: object) -> tuple[CompactedQuickstartResult, str]:
    err = io.StringIO()
    result = run_compacted_quickstart(directory, size_mib=SIZE_MIB, err=err, **kwargs)  # type: ignore[arg-type]
    return result, err.getvalue()


def check_a_good_run(result: CompactedQuickstartResult, progress: str) -> None:
    assert result.problems == []
    assert result.ok and result.exit_code == 0
    assert result.records_written == SIZE_MIB * 1024  # 1 KiB records
    assert result.tombstones_written > 0
    # Every key's latest write survives (tombstones too: delete.retention.ms is a day).
    assert result.expected_survivors == result.keys_written > HOT_KEYS
    assert result.records_verified == result.records_from_remote == result.keys_written
    assert result.remote_fetches > 0 and result.rsm_segment_reads >= result.remote_fetches
    assert result.local_copies_dropped
    first, second = result.rounds
    assert (first.round, second.round) == (1, 2)
    assert first.summary["cleaned"] and second.summary["cleaned"]
    # Round 1 read the local copies; round 2 downloaded only what the Bloom filters let
    # through, and skipped most of the segments round 1 cleaned.
    assert first.summary["bytes_downloaded"] == 0 and first.clean_segments == 0
    assert first.summary["bytes_uploaded"] > 0
    assert 0 < second.summary["segments_skipped"] < second.clean_segments
    assert second.summary["bytes_downloaded"] > 0
    written = first.summary["segments_written"] + second.summary["segments_written"]
    assert result.replaced_segments == result.replaced_deleted == written
    assert 0 < result.remote_bytes_after < result.bytes_tiered / 2
    summary = result.summary()
    assert summary.startswith("quickstart --compacted OK")
    for needle in ("round 2 remote", "Bloom skips: ", "size reduction", "replaced segments"):
        assert needle in summary
    for phase in PHASES:
        assert phase in progress, phase


def test_a_small_compacted_quickstart_compacts_through_remote_storage_and_verifies(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "qs"
    result, progress = quickstart(directory)
    check_a_good_run(result, progress)
    # Independently of the RLMM: the remote store holds one segment per offset range tiered,
    # the replaced ones are gone.
    remote = list((directory / "logs" / REMOTE_STORAGE_DIR).rglob("*.log"))
    assert len(remote) == result.segments_tiered
    assert f"tierlog serve --config {result.config_path}" in result.summary()
    assert f"tierlog compact --topic {COMPACTED_TOPIC} --partition 0" in result.summary()

    # The config reopens the node as `tierlog serve` would, and `tierlog compact` on it runs.
    config = NodeConfig.from_file(result.config_path)
    assert config.unknown_keys == ()
    assert not config.cleaner.log_cleaner_enable
    assert config.cleaner.remote_log_compaction_engine == "python"
    with Node(config) as node, HttpApi(node, "127.0.0.1", 0) as api:
        assert node.topics()[COMPACTED_TOPIC]["configs"]["cleanup.policy"] == "compact"
        node.produce(COMPACTED_TOPIC, [(b"hot-0-0000000", b"after the quickstart")], partition=0)
        node.log(COMPACTED_TOPIC, 0).roll()
        node.tier_now(COMPACTED_TOPIC)
        args = ["compact", "--topic", COMPACTED_TOPIC, "--partition", "0", "--url", api.url]
        out = io.StringIO()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("sys.stdout", out)
            assert main([*args, "--format", "json"]) == 0
        summary = json.loads(out.getvalue())
        assert summary["cleaned"] and summary["tiered"] and summary["keys_mapped"] == 1
        assert summary["segments_skipped"] > 0


def rewrite_a_cleaned_value(node: Node) -> int:
    """Change one byte of the first value in the first routed (cleaned) remote segment that
    has one, and fix the batch CRC: only comparing with what was written can tell. Returns
    the record's offset."""
    assert node.rlm is not None and node.rlmm is not None
    rsm = cast(LocalTieredStorage, node.rsm)
    tip = node.rlm.topic_id_partition(TopicPartition(COMPACTED_TOPIC, 0))
    for segment in remote_chain(node.rlmm, tip, node.log(COMPACTED_TOPIC, 0)):
        path = rsm.segment_paths(segment)[".log"]
        data = bytearray(path.read_bytes())
        for pos, header, records in iter_batches_with_records(path):
            record = next((r for r in records if r.value), None)
            if record is None or record.value is None:
                continue
            end = pos + LOG_OVERHEAD + header.length
            at = data.index(record.value, pos, end) + 20
            data[at] ^= 0xFF
            crc = crc32c(bytes(data[pos + ATTRIBUTES_OFFSET : end]))
            struct.pack_into(">I", data, pos + CRC_OFFSET, crc)
            path.write_bytes(bytes(data))
            return record.offset
    raise AssertionError("no cleaned segment holds a value")


def test_a_value_changed_in_a_cleaned_remote_segment_fails_the_run_by_name(
    tmp_path: Path,
) -> None:
    damaged: list[int] = []
    result, _ = quickstart(
        tmp_path / "qs", after_compaction=lambda node: damaged.append(rewrite_a_cleaned_value(node))
    )
    assert not result.ok and result.exit_code == 1
    (offset,) = damaged
    (problem,) = result.problems
    assert re.fullmatch(
        rf"partition 0 offset {offset}: value differs from version \d+ of b'(hot|cold)-0-\d+'",
        problem,
    )
    assert result.records_verified == result.expected_survivors - 1
    assert result.summary().startswith("quickstart --compacted FAILED")


def test_replaced_segments_left_in_remote_storage_fail_the_run(tmp_path: Path) -> None:
    an_hour = {"remote.log.compaction.superseded.delete.delay.ms": 3_600_000}
    result, progress = quickstart(tmp_path / "qs", extra_props=an_hour, timeout_s=10)
    assert not result.ok
    assert result.problems == [
        f"the expiration task did not delete {result.replaced_segments} replaced remote "
        "segments within 10 s"
    ]
    assert result.replaced_segments > 0 and result.replaced_deleted == 0
    assert f"[expire] 0 of {result.replaced_segments} replaced remote segments" in progress


@pytest.mark.spark
def test_the_rounds_run_as_spark_jobs(tmp_path: Path, spark_local: SparkSession) -> None:
    master = spark_local.sparkContext.master  # the test session: the node's rounds use it
    result, progress = quickstart(
        tmp_path / "qs",
        engine="spark",
        extra_props={"remote.log.compaction.spark.master": master},
    )
    check_a_good_run(result, progress)
    assert "remote.log.compaction.engine=spark" in result.config_text
    assert "round 1 (spark)" in result.summary()


def test_the_cli_runs_and_cleans_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "qs"
    args = ["quickstart", "--compacted", "--size-mib", str(SIZE_MIB), "--dir", str(directory)]
    assert main([*args, "--clean"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("quickstart --compacted OK")
    assert f"{directory} was removed (--clean)." in out
    assert "remote.log.compaction.engine=python" in out
    assert "[compact] round 2:" in err
    assert not directory.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--engine", "spark"], "--engine applies to --compacted only"),
        (["--compacted", "--size-mib", "4"], "is too small for 1 partition(s) with --compacted"),
        (["--compacted", "--record-bytes", "10"], "--record-bytes must be at least"),
    ],
)
def test_the_cli_refuses_runs_that_could_not_show_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["quickstart", "--dir", str(tmp_path / "qs"), *args]) == 2
    assert message in capsys.readouterr().err
