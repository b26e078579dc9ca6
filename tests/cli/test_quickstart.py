"""``tierlog quickstart``: a small run end to end, its config reopened as ``serve`` would, and
runs that must fail because remote data was damaged after tiering."""

from __future__ import annotations

import io
import re
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from tierlog.cli import main
from tierlog.cli._quickstart import TOPIC, QuickstartResult, run_quickstart
from tierlog.log.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, LOG_OVERHEAD
from tierlog.log.crc import crc32c
from tierlog.log.reader import iter_batches_with_records
from tierlog.node import Node, NodeConfig
from tierlog.node.node import REMOTE_STORAGE_DIR

SIZE_MIB = 8


def quickstart(
    directory: Path, hook: Callable[[Node], None] | None = None
) -> tuple[QuickstartResult, str]:
    err = io.StringIO()
    result = run_quickstart(directory, size_mib=SIZE_MIB, err=err, after_tiering=hook)
    return result, err.getvalue()


def test_a_small_quickstart_tiers_verifies_expires_and_leaves_a_config_for_serve(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "qs"
    tiered_files: list[Path] = []
    result, progress = quickstart(directory, lambda node: tiered_files.extend(remote_logs(node)))
    assert result.problems == []
    assert result.ok and result.exit_code == 0
    assert result.records_written == SIZE_MIB * 1024  # 1 KiB records
    assert result.records_verified == result.records_written
    assert result.segments_tiered > 0 and result.bytes_tiered > 0
    assert result.local_log_cut
    (final,) = result.final
    assert 0 < final.log_start_offset < final.local_log_start_offset < final.log_end_offset
    assert final.log_end_offset == result.records_written
    assert result.segments_expired > 0
    assert result.remote_fetches > 0
    assert result.rsm_segment_reads >= result.remote_fetches  # one ranged read each, at least
    assert result.copy_window_s > 0 and result.remote_read_s > 0

    summary = result.summary()
    assert summary.startswith("quickstart OK")
    for needle in (
        "segments tiered",
        "copy throughput",
        "RSM requests/fetch",
        "segments expired",
        f"tierlog serve --config {directory / 'server.properties'}",
    ):
        assert needle in summary
    for phase in ("[produce]", "[tier]", "[consume]", "[expire]"):
        assert phase in progress
    # Produce and consume report through tierlog.progress (plain lines off a terminal).
    for phase in ("produce", "consume"):
        done = rf"^\[{phase}\] 100\.0%  {SIZE_MIB}\.0 / {SIZE_MIB}\.0 MiB  [\d.,]+ MiB/s$"
        assert re.search(done, progress, re.MULTILINE), progress
        milestones = [line for line in progress.splitlines() if line.startswith(f"[{phase}]")]
        assert 2 <= len(milestones) <= 21  # every 5 %, not every chunk
    # The deletions are reported once, after remote retention ran, and it is the real number:
    # the remote segment files that are gone.
    left = list((directory / "logs" / REMOTE_STORAGE_DIR).rglob("*.log"))
    deleted = len(tiered_files) - len(left)
    assert deleted == result.segments_expired > 0
    (deleted_line,) = [line for line in progress.splitlines() if "segments deleted" in line]
    assert deleted_line.startswith(f"[expire] {deleted} remote segments deleted, log starts at ")
    assert " 0 remote segments deleted" not in progress

    # The config is valid as it stands, and it reopens the same node with the same data.
    config = NodeConfig.from_file(result.config_path)
    assert config.unknown_keys == ()
    assert config.rlm.remote_log_storage_system_enable
    assert config.log_dirs == (directory / "logs",)
    with Node(config) as node:
        assert node.topics()[TOPIC]["configs"]["remote.storage.enable"] == "true"
        earliest = node.list_offsets(TOPIC, 0, "earliest")
        assert earliest is not None and earliest.offset == final.log_start_offset
        first = node.fetch(TOPIC, 0, final.log_start_offset, timeout_s=120)
        assert first.from_remote
        assert first.records[0].key == f"0-{final.log_start_offset}".encode()


def remote_logs(node: Node) -> list[Path]:
    return list((node.config.log_dirs[0] / REMOTE_STORAGE_DIR).rglob("*.log"))


def remote_segment_at_zero(node: Node) -> Path:
    root = node.config.log_dirs[0] / REMOTE_STORAGE_DIR
    (path,) = root.rglob(f"{0:020d}-*.log")
    return path


def rewrite_record_keeping_the_crc_valid(offset: int) -> Callable[[Node], None]:
    """Change one byte of record ``offset``'s value in its remote segment and fix the batch
    CRC: storage-level checks pass, only comparing with what was written can tell."""

    def hook(node: Node) -> None:
        path = remote_segment_at_zero(node)
        data = bytearray(path.read_bytes())
        for pos, header, records in iter_batches_with_records(path):
            if header.base_offset <= offset <= header.last_offset:
                (record,) = [r for r in records if r.offset == offset]
                assert record.value is not None
                end = pos + LOG_OVERHEAD + header.length
                at = data.index(record.value, pos, end) + 100
                data[at] ^= 0xFF
                crc = crc32c(bytes(data[pos + ATTRIBUTES_OFFSET : end]))
                struct.pack_into(">I", data, pos + CRC_OFFSET, crc)
                path.write_bytes(bytes(data))
                return
        raise AssertionError(f"no batch holds offset {offset}")

    return hook


def flip_a_byte(node: Node) -> None:
    """Damage the first remote segment without fixing its CRC."""
    path = remote_segment_at_zero(node)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_record_changed_in_remote_storage_fails_the_run_by_name(tmp_path: Path) -> None:
    result, _ = quickstart(tmp_path / "qs", rewrite_record_keeping_the_crc_valid(321))
    assert not result.ok and result.exit_code == 1
    assert result.problems == [
        "partition 0 offset 321: value differs from what was written at byte 100 of 1024"
    ]
    assert result.records_verified == result.records_written - 1
    assert result.segments_expired == 0  # no expiry step after a failed read-back
    summary = result.summary()
    assert summary.startswith("quickstart FAILED")
    assert "partition 0 offset 321" in summary


def test_a_corrupt_remote_batch_fails_the_run_naming_where(tmp_path: Path) -> None:
    result, _ = quickstart(tmp_path / "qs", flip_a_byte)
    assert not result.ok and result.exit_code == 1
    (problem,) = result.problems
    assert "CorruptRecordError" in problem
    # the run narrows the failing read down to the batch: every record before it was verified
    assert problem.startswith(
        f"partition 0: the batch at offset {result.records_verified} cannot be read: "
    )
    assert 0 < result.records_verified < result.records_written


def test_cli_runs_and_cleans_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "new"
    code = main(["quickstart", "--dir", str(directory), "--size-mib", "6", "--clean"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert out.startswith("quickstart OK")
    assert "[consume]" in err
    assert not directory.exists()
    # Nothing is left to rerun: the summary shows the settings it ran with, and no command or
    # comment sending the user to the removed config file.
    assert "Config it ran with (removed by --clean):" in out
    assert "log.segment.bytes=" in out
    assert "rerun" not in out.lower() and "tierlog serve" not in out
    assert out.rstrip().endswith(f"{directory} was removed (--clean).")


def test_summary_after_clean_of_a_given_directory_names_what_was_removed(tmp_path: Path) -> None:
    config_path = tmp_path / "server.properties"
    result = QuickstartResult(
        tmp_path,
        config_path,
        f"# Rerun it with\n#   tierlog serve --config {config_path}\nnode.id=0\n",
        size_mib=8,
        record_bytes=1024,
        partitions=1,
        records_written=1,
        records_verified=1,
        kept=False,
        removed=[tmp_path / "logs", config_path],
    )
    summary = result.summary()
    assert "rerun" not in summary.lower() and "tierlog serve" not in summary
    assert "  node.id=0" in summary
    assert summary.endswith(f"{tmp_path / 'logs'} and {config_path} were removed (--clean).")
    kept = QuickstartResult(
        tmp_path, config_path, "node.id=0\n", 8, 1024, 1, records_written=1, records_verified=1
    ).summary()
    assert kept.endswith(f"Rerun this node with: tierlog serve --config {config_path}")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--size-mib", "1"], "too small"),
        (["--size-mib", "64", "--partitions", "0"], "--partitions"),
        (["--record-bytes", "4"], "--record-bytes"),
    ],
)
def test_cli_refuses_runs_that_could_not_show_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code = main(["quickstart", "--dir", str(tmp_path / "qs"), *args])
    _, err = capsys.readouterr()
    assert code == 2 and message in err
    assert not (tmp_path / "qs").exists()


def test_cli_refuses_a_directory_that_is_not_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "something").write_text("x")
    code = main(["quickstart", "--dir", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code == 2 and "not empty" in err
    assert [p.name for p in tmp_path.iterdir()] == ["something"]
