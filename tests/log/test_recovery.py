"""Loading a partition directory after a crash: ports of Kafka's ``LogLoaderTest`` scenarios.

A crash is simulated the way ``kill -9`` leaves a directory: the log's file handles are closed
without any write (``LocalLog.close_handlers``), so indexes stay preallocated and untrimmed, no
final snapshot or clean-shutdown mark is written, and the recovery point is the last flush (the
last roll). Damage is then done to the files directly, and the directory is reopened.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from tierlog.log.batch import ControlRecordType
from tierlog.log.checkpoint import (
    CorruptCheckpointError,
    read_leader_epoch_checkpoint,
    write_leader_epoch_checkpoint,
)
from tierlog.log.files import log_file, offset_index_file, producer_snapshot_file
from tierlog.log.local_log import LocalLog
from tierlog.log.recovery import (
    OFFSETS_CHECKPOINT_FILENAME,
    OffsetsCheckpoint,
    read_offsets_checkpoint,
    write_offsets_checkpoint,
)
from tierlog.log.segment import LogSegment
from tierlog.log.txn_index import AbortedTxn

from .test_local_log import (
    SMALL,
    Clock,
    all_records,
    batch,
    marker,
    txn_batch,
)

PROPS = {**SMALL, "internal.segment.bytes": 400}


def open_log(directory: Path, **kwargs: object) -> LocalLog:
    return LocalLog.open(directory, PROPS, clock=Clock(), sync=False, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "events-3"


def fill(log: LocalLog, count: int, epoch: int = 0, prefix: str = "v") -> None:
    for i in range(count):
        log.append_as_leader(batch(f"{prefix}-{i:03d}" * 3), epoch)


def crashed(log_dir: Path, count: int = 30, **kwargs: object) -> list[tuple[int, bytes | None]]:
    """A log with ``count`` batches in several segments, left as a crash leaves it."""
    log = open_log(log_dir, **kwargs)
    fill(log, count // 2, epoch=1)
    fill(log, count - count // 2, epoch=2, prefix="w")
    records = all_records(log)
    assert len(log.segments) > 3
    log.close_handlers()
    return records


def active_log_path(log_dir: Path) -> Path:
    return sorted(log_dir.glob("*.log"))[-1]


# Torn and corrupt tails ------------------------------------------------------------------------
def test_a_torn_tail_batch_is_truncated(log_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    records = crashed(log_dir)
    active = active_log_path(log_dir)
    size = active.stat().st_size
    partial = batch("torn" * 20)[:45]
    with open(active, "ab") as f:
        f.write(partial)
    with caplog.at_level(logging.WARNING):
        log = open_log(log_dir)
    assert log.recovery_report.truncated_bytes == len(partial)
    assert active.stat().st_size == size
    assert all_records(log) == records
    assert log.log_end_offset == len(records)
    assert any("Truncated" in r.getMessage() for r in caplog.records)
    info = log.append_as_leader(batch("after"), 2)
    assert info.first_offset == len(records)


def test_a_corrupt_last_batch_is_truncated(log_dir: Path) -> None:
    records = crashed(log_dir)
    active = active_log_path(log_dir)
    data = bytearray(active.read_bytes())
    data[-3] ^= 0x55  # inside the last batch's records: its CRC no longer matches
    active.write_bytes(bytes(data))
    log = open_log(log_dir)
    assert all_records(log) == records[:-1]
    assert log.log_end_offset == len(records) - 1
    assert log.recovery_report.truncated_bytes > 0


def test_corruption_mid_log_drops_everything_after_it(log_dir: Path) -> None:
    records = crashed(log_dir, flush_on_roll=False)  # recovery point 0: everything recovered
    segments = sorted(log_dir.glob("*.log"))
    victim = segments[1]
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(bytes(data))
    log = open_log(log_dir)
    kept = [s.base_offset for s in log.segments]
    assert kept == [int(segments[0].name[:20]), int(victim.name[:20])]
    surviving = all_records(log)
    assert surviving == records[: len(surviving)]
    assert 0 < len(surviving) < len(records)
    assert log.recovery_report.deleted_segments
    assert not any(p.name.endswith(".deleted") for p in log_dir.iterdir())
    # The epochs of the lost data are gone too.
    latest = log.leader_epoch_cache.latest_entry()
    assert latest is not None and latest.start_offset < log.log_end_offset


def test_a_zero_filled_tail_is_truncated(log_dir: Path) -> None:
    records = crashed(log_dir)
    with open(active_log_path(log_dir), "ab") as f:
        f.write(bytes(8192))
    log = open_log(log_dir)
    assert all_records(log) == records
    assert log.recovery_report.truncated_bytes == 8192


def test_only_segments_from_the_recovery_point_are_recovered(log_dir: Path) -> None:
    crashed(log_dir)
    checkpoint = read_offsets_checkpoint(log_dir)
    assert checkpoint is not None and not checkpoint.clean_shutdown
    active_base = int(active_log_path(log_dir).name[:20])
    assert checkpoint.recovery_point == active_base  # flushed at the last roll
    log = open_log(log_dir)
    assert log.recovery_report.recovered_segments == [active_base]


def test_clean_shutdown_skips_recovery(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 30)
    records = all_records(log)
    log.close()
    checkpoint = read_offsets_checkpoint(log_dir)
    assert checkpoint == OffsetsCheckpoint(30, 0, 0, True)
    reopened = open_log(log_dir)
    assert reopened.recovery_report.recovered_segments == []
    assert all_records(reopened) == records
    # Loading clears the mark: a crash from now on must recover again.
    assert read_offsets_checkpoint(log_dir) == OffsetsCheckpoint(30, 0, 0, False)


@pytest.mark.parametrize("tail", [bytes(100), b"\x00" * 11 + b"\x7f" + bytes(60)])
def test_damage_after_a_clean_shutdown_is_recovered_not_refused(
    log_dir: Path, tail: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """The clean-shutdown mark skips recovery, but the active segment was damaged since: the
    log still opens, keeps every record, and drops only the damage."""
    log = open_log(log_dir)
    fill(log, 30)
    records = all_records(log)
    log.close()
    with open(active_log_path(log_dir), "ab") as f:
        f.write(tail)
    with caplog.at_level(logging.WARNING):
        reopened = open_log(log_dir)
    assert all_records(reopened) == records
    assert reopened.log_end_offset == 30
    assert reopened.recovery_report.truncated_bytes == len(tail)
    assert "damaged although the last shutdown was clean" in caplog.text


def test_without_any_checkpoint_everything_is_recovered(log_dir: Path) -> None:
    # What a directory copied from a broker looks like to tierlog (no tierlog checkpoint).
    records = crashed(log_dir)
    (log_dir / OFFSETS_CHECKPOINT_FILENAME).unlink()
    log = open_log(log_dir)
    assert log.recovery_report.recovered_segments == [s.base_offset for s in log.segments]
    assert all_records(log) == records


# Indexes ---------------------------------------------------------------------------------------
def test_missing_indexes_are_rebuilt_identically(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 30)
    log.close()
    sealed = sorted(log_dir.glob("*.log"))[1]
    base = int(sealed.name[:20])
    index = offset_index_file(log_dir, base)
    time_index = index.with_suffix(".timeindex")
    expected = (index.read_bytes(), time_index.read_bytes())
    assert expected[0]  # the index has entries
    index.unlink()
    time_index.unlink()
    reopened = open_log(log_dir)
    assert reopened.recovery_report.rebuilt_index_segments == [base]
    assert (index.read_bytes(), time_index.read_bytes()) == expected
    assert len(all_records(reopened)) == 30


def test_corrupt_index_is_rebuilt(log_dir: Path) -> None:
    # Kafka's testCorruptIndexRebuild.
    log = open_log(log_dir)
    fill(log, 30)
    log.close()
    index = sorted(log_dir.glob("*.index"))[0]
    good = index.read_bytes()
    index.write_bytes(bytes(reversed(good)))
    reopened = open_log(log_dir)
    assert reopened.recovery_report.rebuilt_index_segments == [0]
    assert index.read_bytes() == good
    for offset in range(30):
        located = reopened.segments[0].translate_offset(offset)
        if offset < reopened.segments[1].base_offset:
            assert located is not None and located.offset == offset


def test_index_pointing_past_its_segment_is_rebuilt(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 30)
    log.close()
    first = sorted(log_dir.glob("*.log"))[0]
    with open(first, "r+b") as f:  # the log lost its tail behind the index's back
        f.truncate(first.stat().st_size // 3)
    reopened = open_log(log_dir)
    assert 0 in reopened.recovery_report.rebuilt_index_segments
    reopened.segments[0].offset_index.sanity_check(reopened.segments[0].size)


def test_untrimmed_preallocated_indexes(log_dir: Path) -> None:
    crashed(log_dir)
    active_base = int(active_log_path(log_dir).name[:20])
    active_index = offset_index_file(log_dir, active_base)
    assert active_index.stat().st_size == 4096  # a crash leaves it preallocated
    sealed_index = sorted(log_dir.glob("*.index"))[0]
    entries = sealed_index.read_bytes()
    with open(sealed_index, "ab") as f:  # as if the crash hit before the roll trimmed it
        f.write(bytes(4096 - len(entries)))
    log = open_log(log_dir)
    assert sealed_index.read_bytes() == entries  # trimmed on load
    assert log.segments[0].offset_index.entries == len(entries) // 8
    # The active segment is recovered and its index rebuilt, then preallocated again.
    assert active_index.stat().st_size == 4096
    assert log.active_segment.offset_index.entries == len(list(log.active_segment.offset_index))
    log.close()
    assert active_index.stat().st_size == log.active_segment.offset_index.entries * 8


def test_bogus_index_files_are_removed(log_dir: Path) -> None:
    # Kafka's testBogusIndexSegmentsAreRemoved.
    log = open_log(log_dir)
    fill(log, 5)
    log.close()
    orphan = offset_index_file(log_dir, 5000)
    orphan.write_bytes(bytes(16))
    orphan.with_suffix(".timeindex").write_bytes(bytes(24))
    orphan.with_suffix(".txnindex").write_bytes(b"")
    reopened = open_log(log_dir)
    assert not orphan.exists() and not orphan.with_suffix(".timeindex").exists()
    assert len(all_records(reopened)) == 5


# Leftovers of interrupted operations ----------------------------------------------------------
def test_deleted_and_tmp_leftovers_are_removed(log_dir: Path) -> None:
    # Kafka's testOpenDeletesObsoleteFiles.
    log = open_log(log_dir)
    fill(log, 5)
    log.close()
    leftovers = [
        log_file(log_dir, 0, ".deleted"),
        offset_index_file(log_dir, 0, ".deleted"),
        producer_snapshot_file(log_dir, 3, ".deleted"),
        log_dir / "leader-epoch-checkpoint.tmp",
        log_dir / (producer_snapshot_file(log_dir, 9).name + ".tmp"),
    ]
    for path in leftovers:
        path.write_bytes(b"junk")
    kraft = log_dir / "00000000000000000000-0000000000.checkpoint.deleted"
    kraft.write_bytes(b"")
    reopened = open_log(log_dir)
    assert not any(p.exists() for p in leftovers)
    assert kraft.exists()  # KRaft snapshots are left alone, as Kafka does
    assert len(all_records(reopened)) == 5


def _swap_in(log_dir: Path, source: LogSegment, base: int) -> None:
    """Write ``source``'s files as ``<base>.*.swap`` (what a cleaner leaves mid-swap)."""
    for src, kind in (
        (source.log_path, ".log"),
        (source.offset_index_path, ".index"),
        (source.time_index_path, ".timeindex"),
    ):
        (log_dir / f"{base:020d}{kind}.swap").write_bytes(src.read_bytes())


def test_swap_files_complete_an_interrupted_swap(log_dir: Path, tmp_path: Path) -> None:
    # A "cleaned" copy of segments 0 and the second one, as one segment, left as .swap files:
    # the loader deletes what they replace and renames them into place (Kafka's
    # testRecoveryAfterCrashDuringSplitPhase3/4 family).
    log = open_log(log_dir)
    fill(log, 30)
    records = all_records(log)
    bases = [s.base_offset for s in log.segments]
    log.close()
    scratch_dir = tmp_path / "scratch-0"
    scratch_dir.mkdir()
    merged = LogSegment(scratch_dir, 0, index_interval_bytes=64, max_index_size=4096)
    for seg_base in bases[:2]:
        data = log_file(log_dir, seg_base).read_bytes()
        reader = LogSegment(log_dir, seg_base)
        headers = [h for _, h in reader.batches()]
        reader.close_handlers()
        merged.append(headers[-1].last_offset, data, headers)
    merged.on_become_inactive_segment()
    _swap_in(log_dir, merged, 0)
    merged.close()
    reopened = open_log(log_dir)
    assert [s.base_offset for s in reopened.segments] == [0, *bases[2:]]
    assert sorted(reopened.recovery_report.swapped_in)[0].startswith("00000000000000000000")
    assert all_records(reopened) == records
    assert not any(p.name.endswith((".swap", ".cleaned")) for p in log_dir.iterdir())


def test_swap_files_above_a_cleaned_file_are_an_incomplete_split(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 30)
    records = all_records(log)
    bases = [s.base_offset for s in log.segments]
    log.close()
    # A split that had not renamed all its parts: .cleaned at the lowest offset, .swap above.
    (log_dir / f"{bases[1]:020d}.log.cleaned").write_bytes(b"partial")
    (log_dir / f"{bases[2]:020d}.log.swap").write_bytes(b"partial")
    reopened = open_log(log_dir)
    assert all_records(reopened) == records
    assert not any(p.name.endswith((".swap", ".cleaned")) for p in log_dir.iterdir())


# State restored with the data ------------------------------------------------------------------
def test_producer_state_survives_a_crash(log_dir: Path) -> None:
    # Kafka's testProducerSnapshotsRecoveryAfterUncleanShutdown, in spirit.
    log = open_log(log_dir)
    for seq in range(20):
        log.append_as_leader(
            batch(f"idem-{seq}" * 5, producer_id=9, producer_epoch=0, base_sequence=seq), 0
        )
    log.append_as_leader(txn_batch(4, 0, "open-txn"), 0)
    open_offset = log.log_end_offset - 1
    log.append_as_leader(txn_batch(5, 0, "aborted"), 0)
    log.append_as_leader(marker(ControlRecordType.ABORT, 5), 0, origin="coordinator")
    log.close_handlers()
    reopened = open_log(log_dir)
    entry = reopened.producer_state_manager.last_entry(9)
    assert entry is not None and entry.last_seq == 19
    # The idempotent producer continues where it was; a retry is still recognised.
    retry = reopened.append_as_leader(
        batch("idem-19" * 5, producer_id=9, producer_epoch=0, base_sequence=19), 0
    )
    assert retry.duplicate
    reopened.append_as_leader(
        batch("idem-20", producer_id=9, producer_epoch=0, base_sequence=20), 0
    )
    reopened.update_high_watermark(reopened.log_end_offset)
    assert reopened.first_unstable_offset == open_offset
    assert reopened.last_stable_offset == open_offset
    aborted = [t for s in reopened.segments for t in s.txn_index.all_aborted_txns()]
    assert [(t.producer_id, t.last_stable_offset) for t in aborted] == [(5, open_offset)]


def test_full_transaction_index_recovery(log_dir: Path) -> None:
    # Kafka's testFullTransactionIndexRecovery: every .txnindex deleted, full recovery.
    log = open_log(log_dir, flush_on_roll=False)
    expected: list[AbortedTxn] = []
    for round_ in range(6):
        pid = 100 + round_
        log.append_as_leader(txn_batch(pid, 0, "a" * 40, "b" * 40), 0)
        log.append_as_leader(batch("plain" * 10), 0)
        end = log.append_as_leader(
            marker(ControlRecordType.ABORT if round_ % 2 else ControlRecordType.COMMIT, pid),
            0,
            origin="coordinator",
        )
        if round_ % 2:
            first = end.first_offset - 3
            expected.append(AbortedTxn(pid, first, end.first_offset, end.first_offset + 1))
    log.close_handlers()
    for path in log_dir.glob("*.txnindex"):
        path.unlink()
    (log_dir / OFFSETS_CHECKPOINT_FILENAME).unlink()
    for path in log_dir.glob("*.snapshot"):
        path.unlink()
    reopened = open_log(log_dir)
    rebuilt = [t for s in reopened.segments for t in s.txn_index.all_aborted_txns()]
    assert rebuilt == expected


def test_leader_epochs_after_recovery(log_dir: Path) -> None:
    records = crashed(log_dir)
    # The checkpoint claims an epoch past the data (written before a crash lost the tail).
    entries = read_leader_epoch_checkpoint(log_dir / "leader-epoch-checkpoint")
    assert [e.epoch for e in entries] == [1, 2]
    write_leader_epoch_checkpoint(
        log_dir / "leader-epoch-checkpoint", [*entries, (7, len(records) + 50)]
    )
    log = open_log(log_dir)
    assert log.leader_epoch_cache.epoch_entries() == entries


def test_lost_epoch_checkpoint_is_rebuilt_from_recovered_segments(log_dir: Path) -> None:
    crashed(log_dir, flush_on_roll=False)
    expected = read_leader_epoch_checkpoint(log_dir / "leader-epoch-checkpoint")
    (log_dir / "leader-epoch-checkpoint").unlink()
    log = open_log(log_dir)
    assert log.leader_epoch_cache.epoch_entries() == expected


def test_log_end_below_log_start_deletes_everything(log_dir: Path) -> None:
    # Kafka's testLogEndLessThanStartAfterReopen: segment files were deleted by hand.
    log = open_log(log_dir)
    fill(log, 10)
    log.close()
    write_offsets_checkpoint(log_dir, OffsetsCheckpoint(10, 500, 10, False))
    reopened = open_log(log_dir)
    assert [s.base_offset for s in reopened.segments] == [500]
    assert (reopened.log_start_offset, reopened.log_end_offset) == (500, 500)
    assert reopened.leader_epoch_cache.epoch_entries() == []


def test_recover_with_empty_active_segment(log_dir: Path) -> None:
    # Kafka's testRecoverWithEmptyActiveSegment.
    log = open_log(log_dir)
    fill(log, 3)
    log.roll()
    log.close_handlers()
    reopened = open_log(log_dir)
    assert [s.base_offset for s in reopened.segments] == [0, 3]
    assert reopened.log_end_offset == 3
    assert reopened.append_as_leader(batch("x"), 0).first_offset == 3


def test_reopen_then_truncate(log_dir: Path) -> None:
    # Kafka's testReopenThenTruncate.
    log = open_log(log_dir)
    fill(log, 30)
    log.close()
    reopened = open_log(log_dir)
    reopened.truncate_to(3)
    assert reopened.log_end_offset == 3
    assert [s.base_offset for s in reopened.segments] == [0]
    reopened.close()
    again = open_log(log_dir)
    assert again.log_end_offset == 3


def test_crash_after_truncation_keeps_the_truncation(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 30)
    log.truncate_to(20)
    log.close_handlers()
    reopened = open_log(log_dir)
    assert reopened.log_end_offset == 20
    assert [o for o, _ in all_records(reopened)] == list(range(20))


@pytest.mark.parametrize("clean", [True, False])
def test_a_corrupt_offsets_checkpoint_means_recovering_every_segment(
    log_dir: Path, caplog: pytest.LogCaptureFixture, clean: bool
) -> None:
    """Kafka resets the recovery point to 0 when its checkpoint cannot be read: nothing is lost,
    every segment is recovered, and the checkpoint is written anew."""
    log = open_log(log_dir)
    fill(log, 20, epoch=1)
    log.update_high_watermark(log.log_end_offset)
    records = all_records(log)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 3
    if clean:
        log.close()
    else:
        log.close_handlers()
    path = log_dir / OFFSETS_CHECKPOINT_FILENAME
    path.write_text(
        "0\n4\nrecovery-point 7\nlog-start-offset 0\nhigh-watermark x\nclean-shutdown 1\n"
    )
    with caplog.at_level(logging.WARNING):
        reopened = open_log(log_dir)
    assert all_records(reopened) == records
    assert reopened.recovery_report.recovered_segments == bases
    discarded = reopened.recovery_report.discarded_checkpoint
    assert discarded is not None
    assert discarded == (
        f"malformed offsets checkpoint {path}: line 5 'high-watermark x': the value of "
        "high-watermark is not an integer"
    )
    assert any(discarded in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    # The high watermark is not known any more: it restarts at the log start, as in Kafka.
    assert reopened.high_watermark == reopened.log_start_offset == 0
    assert read_offsets_checkpoint(log_dir) == OffsetsCheckpoint(
        reopened.recovery_point, 0, 0, False
    )
    reopened.close()
    assert open_log(log_dir).recovery_report.discarded_checkpoint is None


@pytest.mark.parametrize(
    ("content", "line", "what"),
    [
        (b"", 1, "the file is empty (expected the version)"),
        (b"zero\n", 1, "line 1 'zero': the version is not an integer"),
        (b"1\n0\n", 1, "line 1 '1': unknown version 1, expected 0"),
        (b"0\n", 2, "the file ends before line 2 (expected the number of entries)"),
        (b"0\n9\nnonsense\n", 2, "line 2 '9': 9 entries announced, 1 found"),
        (b"0\n1\nnonsense\n", 3, "line 3 'nonsense': expected '<name> <value>'"),
        (
            b"0\n1\nrecovery-point 1_0\n",
            3,
            "line 3 'recovery-point 1_0': the value of recovery-point is not an integer",
        ),
        (b"0\n1\nrecovery-point \xff\n", 3, "line 3 is not ASCII text (byte 19)"),
    ],
)
def test_a_malformed_offsets_checkpoint_names_file_line_and_fault(
    tmp_path: Path, content: bytes, line: int, what: str
) -> None:
    path = tmp_path / OFFSETS_CHECKPOINT_FILENAME
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError) as info:
        read_offsets_checkpoint(tmp_path)
    assert str(info.value) == f"malformed offsets checkpoint {path}: {what}"
    assert (info.value.path, info.value.line) == (str(path), line)
    assert "\n" not in str(info.value)


def test_an_offsets_checkpoint_without_an_entry_names_it(tmp_path: Path) -> None:
    path = tmp_path / OFFSETS_CHECKPOINT_FILENAME
    path.write_text("0\n3\nrecovery-point 1\nlog-start-offset 0\nfuture-entry 5\n")
    with pytest.raises(CorruptCheckpointError, match="no 'high-watermark', 'clean-shutdown' entry"):
        read_offsets_checkpoint(tmp_path)
    path.write_text(
        "0\n5\nrecovery-point 1\nlog-start-offset 0\nfuture-entry 5\nhigh-watermark 1\n"
        "clean-shutdown 0\n"
    )
    assert read_offsets_checkpoint(tmp_path) == OffsetsCheckpoint(1, 0, 1, False)


def test_repeated_crashes_lose_nothing(log_dir: Path) -> None:
    expected: list[tuple[int, bytes | None]] = []
    for round_ in range(5):
        log = open_log(log_dir)
        assert all_records(log) == expected
        fill(log, 7, epoch=round_, prefix=f"r{round_}")
        expected = all_records(log)
        with open(active_log_path(log_dir), "ab") as f:
            f.write(os.urandom(40))
        log.close_handlers()
    final = open_log(log_dir)
    assert all_records(final) == expected
    assert [e.epoch for e in final.leader_epoch_cache.epoch_entries()] == [0, 1, 2, 3, 4]


def test_an_impossible_base_offset_names_file_and_position(log_dir: Path) -> None:
    """A flipped bit in a BaseOffset (outside the CRC) cannot be indexed: the error says where."""
    from tierlog.log.segment import LogSegmentOffsetOverflowError

    crashed(log_dir)
    path = active_log_path(log_dir)
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01  # the first batch's BaseOffset jumps by 2^56
    path.write_bytes(bytes(data))
    with pytest.raises(LogSegmentOffsetOverflowError) as info:
        open_log(log_dir)
    assert info.value.position == 0
    assert f"position 0 of {path}" in str(info.value)
