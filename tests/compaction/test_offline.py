"""``clean_partition_dir``: one round on a partition directory in Kafka's layout, offline.

The directory sits in a log directory holding Kafka's ``cleaner-offset-checkpoint`` (where the
last round stopped) and ``replication-offset-checkpoint`` (the high watermark, which bounds what
may be cleaned), both in ``OffsetCheckpointFile`` text written here by hand; the round reads
them, cleans, and writes the new cleaner checkpoint, keeping the other partitions' entries.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.compaction.offline import clean_partition_dir
from tierlog.log.local_log import LocalLog

from ._logs import (
    DAY,
    NOW,
    Clock,
    CompactedLog,
    kv,
    last_offsets_per_batch,
    log_batches,
    offsets_in_log,
)

TOPIC = "orders"


def checkpoint_text(*entries: tuple[str, int, int]) -> str:
    lines = ["0", str(len(entries)), *(f"{t} {p} {o}" for t, p, o in entries)]
    return "\n".join(lines) + "\n"


def parse_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    lines = path.read_text().splitlines()
    assert lines[0] == "0"
    assert int(lines[1]) == len(lines) - 2
    out = {}
    for line in lines[2:]:
        topic, partition, offset = line.split(" ")
        out[(topic, int(partition))] = int(offset)
    return out


def build(log_dir: Path, partition: int = 0, **props: object) -> Path:
    """A partition directory of 3 sealed segments (keys 0-3 rewritten) and an active one,
    written by a LocalLog that is then closed."""
    directory = log_dir / f"{TOPIC}-{partition}"
    c = CompactedLog.open(
        directory, clock=Clock(NOW), props={"internal.segment.bytes": 250, **props}
    )
    for i in range(12):
        c.put(kv(i % 4, i))
        if i % 4 == 3:
            c.roll()
    c.put(kv(9, 9))
    c.log.close()
    return directory


def reopen(directory: Path) -> LocalLog:
    return LocalLog.open(directory, {"cleanup.policy": "compact"}, sync=False, clock=Clock(NOW))


def test_cleans_and_writes_the_cleaner_checkpoint(tmp_path: Path) -> None:
    directory = build(tmp_path)
    (tmp_path / "cleaner-offset-checkpoint").write_text(
        checkpoint_text(("other", 3, 77), (TOPIC, 1, 5))
    )
    result = clean_partition_dir(directory, now_ms=NOW)
    assert result.cleaned
    assert (result.first_dirty_offset, result.end_offset) == (0, 12)
    assert parse_checkpoint(tmp_path / "cleaner-offset-checkpoint") == {
        ("other", 3): 77,
        (TOPIC, 1): 5,
        (TOPIC, 0): 12,
    }
    log = reopen(directory)
    try:
        assert offsets_in_log(log) == [8, 9, 10, 11, 12]
        assert log.log_end_offset == 13
    finally:
        log.close()


def test_high_watermark_from_the_replication_checkpoint_bounds_the_round(tmp_path: Path) -> None:
    directory = build(tmp_path)
    # The high watermark inside the third segment ([8, 12)): that whole segment is held back.
    (tmp_path / "replication-offset-checkpoint").write_text(
        checkpoint_text((TOPIC, 1, 2), (TOPIC, 0, 9), ("other", 0, 1))
    )
    result = clean_partition_dir(directory, now_ms=NOW)
    assert result.cleaned and result.end_offset == 8
    log = reopen(directory)
    try:
        # Keys 0-3 of [0, 8) lose to the second segment; [8, 13) is untouched.
        assert offsets_in_log(log) == [4, 5, 6, 7, 8, 9, 10, 11, 12]
    finally:
        log.close()
    assert parse_checkpoint(tmp_path / "cleaner-offset-checkpoint") == {(TOPIC, 0): 8}


def test_without_a_replication_checkpoint_entry_the_high_watermark_is_the_log_end(
    tmp_path: Path,
) -> None:
    directory = build(tmp_path)
    (tmp_path / "replication-offset-checkpoint").write_text(checkpoint_text((TOPIC, 5, 1)))
    assert clean_partition_dir(directory, now_ms=NOW).end_offset == 12


def test_starts_from_the_cleaner_checkpoint(tmp_path: Path) -> None:
    directory = build(tmp_path)
    (tmp_path / "cleaner-offset-checkpoint").write_text(checkpoint_text((TOPIC, 0, 8)))
    result = clean_partition_dir(directory, now_ms=NOW, config={"min.cleanable.dirty.ratio": 0.1})
    assert result.cleaned and result.first_dirty_offset == 8
    log = reopen(directory)
    try:
        assert offsets_in_log(log) == [8, 9, 10, 11, 12]
    finally:
        log.close()


def test_a_log_below_the_dirty_ratio_is_left_alone(tmp_path: Path) -> None:
    directory = build(tmp_path)
    (tmp_path / "cleaner-offset-checkpoint").write_text(checkpoint_text((TOPIC, 0, 8)))
    files = {p.name: p.read_bytes() for p in directory.iterdir() if p.suffix == ".log"}
    # One dirty segment of three: ratio 1/3, below Kafka's default 0.5.
    result = clean_partition_dir(directory, now_ms=NOW)
    assert not result.cleaned
    assert result.cleanable_ratio == pytest.approx(1 / 3, abs=0.05)
    assert {p.name: p.read_bytes() for p in directory.iterdir() if p.suffix == ".log"} == files
    assert parse_checkpoint(tmp_path / "cleaner-offset-checkpoint") == {(TOPIC, 0): 8}
    # force cleans anyway.
    assert clean_partition_dir(directory, now_ms=NOW, force=True).cleaned


def test_a_checkpoint_past_the_log_end_is_reset_and_written_back(tmp_path: Path) -> None:
    directory = build(tmp_path)
    (tmp_path / "cleaner-offset-checkpoint").write_text(checkpoint_text((TOPIC, 0, 500)))
    result = clean_partition_dir(directory, now_ms=NOW, config={"min.cleanable.dirty.ratio": 0.99})
    assert result.checkpoint_reset
    assert result.first_dirty_offset == 0
    assert result.cleaned  # a whole dirty log: ratio 1
    assert parse_checkpoint(tmp_path / "cleaner-offset-checkpoint") == {(TOPIC, 0): 12}


def test_a_reset_checkpoint_is_written_back_even_without_a_round(tmp_path: Path) -> None:
    directory = tmp_path / f"{TOPIC}-0"
    c = CompactedLog.open(directory, clock=Clock(NOW))
    c.put(kv(1, 1))
    c.log.close()
    (tmp_path / "cleaner-offset-checkpoint").write_text(checkpoint_text((TOPIC, 0, 500)))
    result = clean_partition_dir(directory, now_ms=NOW)
    assert not result.cleaned and result.checkpoint_reset
    assert parse_checkpoint(tmp_path / "cleaner-offset-checkpoint") == {(TOPIC, 0): 0}


def test_producer_state_follows_the_rounds_clock(tmp_path: Path) -> None:
    # A live producer's last batch stays (empty) in a round at NOW; a round a day later finds
    # the producer expired (producer.id.expiration.ms, 1 day) and drops it. The round's clock
    # decides, not the wall clock of the machine.
    directory = tmp_path / f"{TOPIC}-0"
    c = CompactedLog.open(directory, clock=Clock(NOW))
    c.idempotent(7, kv("a", 1), ts=NOW)
    c.put(kv("a", 2))
    c.roll()
    c.put(kv("z"))
    c.log.close()
    kept = clean_partition_dir(directory, now_ms=NOW + 1000)
    assert kept.cleaned
    log = reopen(directory)
    try:
        assert last_offsets_per_batch(log) == [0, 1, 2]
        assert log_batches(log)[0].header.producer_id == 7
        assert log_batches(log)[0].header.records_count == 0
    finally:
        log.close()
    (tmp_path / "cleaner-offset-checkpoint").unlink()
    later = clean_partition_dir(directory, now_ms=NOW + DAY + 1000)
    assert later.cleaned
    log = reopen(directory)
    try:
        assert last_offsets_per_batch(log) == [1, 2]
    finally:
        log.close()


def test_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        clean_partition_dir(tmp_path / f"{TOPIC}-3", now_ms=NOW)
    assert not (tmp_path / f"{TOPIC}-3").exists()
