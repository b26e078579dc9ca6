"""The local log of a partition directory: appends, reads, offsets, retention, truncation.

Scenarios follow Kafka's ``UnifiedLogTest`` / ``LocalLogTest`` (named where ported); the data is
built with ``tierlog.log.batch`` and checked independently by re-reading the files (and once with
kafka-python's parser). A hypothesis state machine compares the log with a plain model.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tierlog.log.batch import (
    ControlRecordType,
    TimestampType,
    UnsupportedRecordFormatError,
    build_batch,
    build_control_batch,
    decode_control_record,
)
from tierlog.log.checkpoint import parse_leader_epoch_checkpoint, read_partition_metadata
from tierlog.log.files import producer_snapshot_file
from tierlog.log.local_log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    InconsistentTopicIdError,
    InvalidRecordError,
    InvalidTimestampError,
    LocalLog,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from tierlog.log.log_config import LogConfig
from tierlog.log.producer_state import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
)
from tierlog.log.reader import iter_batches, iter_batches_with_records, iter_records
from tierlog.log.record import Record
from tierlog.log.txn_index import AbortedTxn
from tierlog.spi import ConfigError, CorruptRecordError, IllegalStateError, Uuid

NOW = 1_700_000_000_000
TOPIC_ID = Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAQ")


class Clock:
    def __init__(self, now: int = NOW) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def sleep(self, ms: int) -> None:
        self.now += ms


SMALL: dict[str, object] = {
    "segment.index.bytes": 4096,
    "index.interval.bytes": 64,
}


def open_log(
    directory: Path, clock: Clock | None = None, *, topic_id: Uuid | None = None, **props: object
) -> LocalLog:
    config = {**SMALL, **{k.replace("_", "."): v for k, v in props.items()}}
    return LocalLog.open(directory, config, clock=clock or Clock(), sync=False, topic_id=topic_id)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


def batch(*values: bytes | str, ts: int = NOW - 1000, **kwargs: object) -> bytes:
    """A producer's batch (base offset 0) of ``values``."""
    records = [
        Record(i, ts, None, v.encode() if isinstance(v, str) else v) for i, v in enumerate(values)
    ]
    return build_batch(records, **kwargs)  # type: ignore[arg-type]


def txn_batch(pid: int, seq: int, *values: str, epoch: int = 0) -> bytes:
    return batch(
        *values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
    )


def marker(kind: ControlRecordType, pid: int, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_control_batch(
        kind, coordinator_epoch, timestamp=NOW, producer_id=pid, producer_epoch=epoch
    )


def all_records(log: LocalLog, isolation: str = "log_end") -> list[tuple[int, bytes | None]]:
    """Every record readable from the log start, in order, as (offset, value)."""
    out: list[tuple[int, bytes | None]] = []
    offset = log.log_start_offset
    while True:
        info = log.read(offset, 1000, isolation)  # type: ignore[arg-type]
        if not info.records:
            return out
        for _, header, records in iter_batches_with_records(info.records):
            if not header.is_control:
                out.extend((r.offset, r.value) for r in records if r.offset >= log.log_start_offset)
            offset = header.next_offset


def file_batches(log: LocalLog) -> Iterator[tuple[int, object]]:
    for segment in log.segments:
        for _, header in iter_batches(segment.log_path):
            yield segment.base_offset, header


# Configuration ---------------------------------------------------------------------------------
def test_config_defaults_are_kafkas() -> None:
    config = LogConfig()
    assert config.segment_size == 1 << 30
    assert config.segment_ms == 7 * 24 * 3600 * 1000
    assert config.segment_index_bytes == 10 * 1024 * 1024
    assert config.index_interval_bytes == 4096
    assert (config.retention_ms, config.retention_bytes) == (604800000, -1)
    assert (config.local_retention_ms, config.local_retention_bytes) == (-2, -2)
    assert (config.effective_local_retention_ms, config.effective_local_retention_bytes) == (
        604800000,
        -1,
    )
    assert config.max_message_bytes == 1048588
    assert not config.remote_storage_enable
    assert config.message_timestamp_type == "CreateTime"


def test_config_from_properties_strings() -> None:
    config = LogConfig.from_props(
        {
            "segment.bytes": " 2097152 ",
            "remote.storage.enable": "TRUE",
            "local.retention.ms": "1000",
            "retention.ms": "5000",
            "cleanup.policy": "delete",
            "compression.type": "zstd",  # a Kafka key this log does not use
        }
    )
    assert config.segment_bytes == 2097152
    assert config.remote_storage_enable
    assert config.effective_local_retention_ms == 1000
    assert config.ignored == {"compression.type": "zstd"}
    assert config.to_props()["compression.type"] == "zstd"
    assert config.with_overrides({"local.retention.ms": 2000}).local_retention_ms == 2000


@pytest.mark.parametrize(
    ("props", "key"),
    [
        ({"segment.bytes": 1024}, "segment.bytes"),
        ({"segment.bytes": "big"}, "segment.bytes"),
        ({"segment.ms": 0}, "segment.ms"),
        ({"segment.index.bytes": 4}, "segment.index.bytes"),
        ({"index.interval.bytes": -1}, "index.interval.bytes"),
        ({"retention.ms": -2}, "retention.ms"),
        ({"local.retention.bytes": -3}, "local.retention.bytes"),
        ({"message.timestamp.type": "WallClock"}, "message.timestamp.type"),
        ({"remote.storage.enable": "yes"}, "remote.storage.enable"),
        ({"cleanup.policy": "shred"}, "cleanup.policy"),
        (
            {"remote.storage.enable": True, "retention.ms": 1000, "local.retention.ms": 2000},
            "local.retention.ms",
        ),
        (
            {"remote.storage.enable": True, "retention.bytes": 100, "local.retention.bytes": 200},
            "local.retention.bytes",
        ),
        (
            {"remote.storage.enable": True, "retention.bytes": 100, "local.retention.bytes": -1},
            "local.retention.bytes",
        ),
        ({"min.compaction.lag.ms": -1}, "min.compaction.lag.ms"),
        ({"max.compaction.lag.ms": 0}, "max.compaction.lag.ms"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio"),
        ({"delete.retention.ms": -1}, "delete.retention.ms"),
        (
            {
                "remote.storage.enable": True,
                "remote.log.copy.disable": True,
                "local.retention.ms": 5,
            },
            "local.retention.ms",
        ),
    ],
)
def test_config_errors_name_the_key(props: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=f"for configuration {key}"):
        LogConfig.from_props(props)


def test_config_unknown_key_and_unchecked_local_retention() -> None:
    with pytest.raises(ConfigError, match=r"Unknown topic config name: segment\.byte"):
        LogConfig.from_props({"segment.byte": 1})
    # Without remote storage local retention is not used, and Kafka does not check it.
    LogConfig.from_props({"retention.ms": 1000, "local.retention.ms": 2000})
    LogConfig.from_props(
        {"remote.storage.enable": True, "retention.ms": -1, "local.retention.ms": 2000}
    )


# Appending -------------------------------------------------------------------------------------
def test_append_as_leader_assigns_offsets_and_stamps_epoch(log_dir: Path) -> None:
    log = open_log(log_dir, topic_id=TOPIC_ID)
    first = log.append_as_leader(batch("a", "b", "c"), leader_epoch=5)
    second = log.append_as_leader([batch("d"), batch("e", "f")], leader_epoch=5)
    assert (first.first_offset, first.last_offset, first.last_leader_epoch) == (0, 2, 5)
    assert (second.first_offset, second.last_offset, second.num_batches) == (3, 5, 2)
    assert log.log_end_offset == 6
    headers = [h for _, h in file_batches(log)]
    assert [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in headers] == [  # type: ignore[attr-defined]
        (0, 2, 5),
        (3, 3, 5),
        (4, 5, 5),
    ]
    # CRCs stay valid: offsets and epochs are outside the CRC.
    assert [r.offset for r in iter_records(log.segments[0].log_path)] == list(range(6))
    assert log.leader_epoch_cache.epoch_entries() == [(5, 0)]
    log.append_as_leader(batch("g"), leader_epoch=7)
    assert log.leader_epoch_cache.epoch_entries() == [(5, 0), (7, 6)]
    assert parse_leader_epoch_checkpoint((log_dir / "leader-epoch-checkpoint").read_bytes()) == [
        (5, 0),
        (7, 6),
    ]
    assert read_partition_metadata(log_dir / "partition.metadata").topic_id == TOPIC_ID
    log.close()


def test_log_append_time_is_stamped(log_dir: Path, clock: Clock) -> None:
    log = open_log(log_dir, clock, message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(batch("a", "b", ts=5), leader_epoch=0)
    assert info.log_append_time == NOW
    header = next(h for _, h in file_batches(log))
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME  # type: ignore[attr-defined]
    assert [r.timestamp for r in iter_records(log.segments[0].log_path)] == [NOW, NOW]
    with pytest.raises(InvalidRecordError, match="LogAppendTime"):
        log.append_as_leader(
            batch("x", timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=1), 0
        )


def test_append_validation_errors_write_nothing(log_dir: Path, clock: Clock) -> None:
    log = open_log(log_dir, clock, max_message_bytes=200)
    good = batch("ok")
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="corrupt"):
        log.append_as_leader(bytes(corrupt), 0)
    legacy = bytearray(good)
    legacy[16] = 1
    with pytest.raises(UnsupportedRecordFormatError):
        log.append_as_leader(bytes(legacy), 0)
    with pytest.raises(InvalidRecordError, match="baseOffset"):
        log.append_as_leader(build_batch([Record(7, NOW, None, b"x")], base_offset=7), 0)
    with pytest.raises(InvalidRecordError, match="control records"):
        log.append_as_leader(marker(ControlRecordType.COMMIT, 1), 0)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(batch("x" * 300), 0)
    with pytest.raises(InvalidRecordError, match=r"Inconsistent"):
        log.append_as_leader(build_batch([Record(0, NOW, None, b"x")], last_offset_delta=3), 0)
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(batch("future", ts=NOW + 3600 * 1000 + 1), 0)
    with pytest.raises(InvalidRecordError, match="sequence"):
        log.append_as_leader(batch("x", producer_id=1, producer_epoch=0, base_sequence=-1), 0)
    assert log.log_end_offset == 0 and log.size() == 0
    log.append_as_leader(good, 0)
    assert log.log_end_offset == 1


def test_timestamp_before_max_ms_checks_every_record(log_dir: Path, clock: Clock) -> None:
    log = open_log(log_dir, clock, message_timestamp_before_max_ms=60_000)
    records = [Record(0, NOW, None, b"new"), Record(1, NOW - 120_000, None, b"old")]
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(build_batch(records), 0)


def test_append_larger_than_segment_is_refused(log_dir: Path) -> None:
    log = open_log(log_dir, internal_segment_bytes=100)
    with pytest.raises(RecordBatchTooLargeError):
        log.append_as_leader(batch("x" * 200), 0)


def test_append_as_follower_keeps_offsets(log_dir: Path) -> None:
    log = open_log(log_dir)
    data = build_batch(
        [Record(10, NOW, None, b"a"), Record(12, NOW, None, b"b")],
        base_offset=10,
        partition_leader_epoch=3,
    )
    info = log.append_as_follower(data, leader_epoch=3)
    assert (info.first_offset, info.last_offset, log.log_end_offset) == (10, 12, 13)
    assert log.leader_epoch_cache.epoch_entries() == [(3, 10)]
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(data, 3)
    out_of_order = build_batch([Record(20, NOW, None, b"a")], base_offset=20) + build_batch(
        [Record(15, NOW, None, b"b")], base_offset=15
    )
    with pytest.raises(OffsetsOutOfOrderError):
        log.append_as_follower(out_of_order, 3)
    # A batch from a newer leader than the replica knows is skipped with what follows
    # (KAFKA-18723); a trailing partial batch (a fetch cut mid-batch) is dropped.
    newer = build_batch([Record(14, NOW, None, b"n")], base_offset=14, partition_leader_epoch=9)
    ok = build_batch([Record(13, NOW, None, b"c")], base_offset=13, partition_leader_epoch=3)
    info = log.append_as_follower(ok + newer, leader_epoch=3)
    assert (info.last_offset, log.log_end_offset) == (13, 14)
    info = log.append_as_follower(newer[:30], leader_epoch=9)
    assert info.valid_bytes == 0 and log.log_end_offset == 14
    assert [r.offset for r in iter_records(log.segments[0].log_path)] == [10, 12, 13]


# Rolling ---------------------------------------------------------------------------------------
def test_roll_by_segment_bytes(log_dir: Path) -> None:
    log = open_log(log_dir, internal_segment_bytes=300)
    for i in range(10):
        log.append_as_leader(batch(f"value-{i:03d}" * 5), 0)
    sizes = [s.size for s in log.segments]
    assert len(sizes) > 2 and all(0 < s <= 300 for s in sizes)
    bases = [s.base_offset for s in log.segments]
    assert bases == sorted(bases) and bases[0] == 0
    # A producer snapshot at each roll, named by the new segment's base offset.
    for base in bases[1:]:
        assert producer_snapshot_file(log_dir, base).exists()
    # Sealed segments' indexes are trimmed, the active one's preallocated.
    for seg in log.segments[:-1]:
        assert seg.offset_index_path.stat().st_size == seg.offset_index.entries * 8
    assert log.active_segment.offset_index_path.stat().st_size == 4096
    assert log.recovery_point == bases[-1]


def test_roll_by_segment_ms_uses_record_timestamps(log_dir: Path, clock: Clock) -> None:
    log = open_log(log_dir, clock, segment_ms=1000)
    log.append_as_leader(batch("a", ts=NOW - 5000), 0)
    log.append_as_leader(batch("b", ts=NOW - 4001), 0)  # 999 ms after the first batch
    assert len(log.segments) == 1
    log.append_as_leader(batch("c", ts=NOW - 3999), 0)  # 1001 ms after
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_by_segment_ms_without_timestamps_uses_the_wall_clock(
    log_dir: Path, clock: Clock
) -> None:
    log = open_log(log_dir, clock, segment_ms=1000)
    log.append_as_leader(batch("a", ts=-1), 0)
    clock.sleep(1000)
    log.append_as_leader(batch("b", ts=-1), 0)
    assert len(log.segments) == 1
    clock.sleep(1)
    log.append_as_leader(batch("c", ts=-1), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_when_the_offset_index_is_full(log_dir: Path) -> None:
    log = open_log(log_dir, segment_index_bytes=32, index_interval_bytes=0)
    for i in range(12):
        log.append_as_leader(batch(str(i)), 0)
    # 32 bytes: 4 offset index slots, 2 time index slots (one usable): the time index fills
    # first; every sealed segment ends with its index full.
    assert len(log.segments) > 3
    for seg in log.segments[:-1]:
        assert seg.time_index.entries >= 1
    assert all_records(log) == [(i, str(i).encode()) for i in range(12)]


def test_roll_on_offset_overflow(log_dir: Path) -> None:
    log = open_log(log_dir)
    log.append_as_follower(build_batch([Record(0, NOW, None, b"a")]), 0)
    far = 2**31 + 10
    log.append_as_follower(build_batch([Record(far, NOW, None, b"b")], base_offset=far), 0)
    assert [s.base_offset for s in log.segments] == [0, far]
    assert all_records(log) == [(0, b"a"), (far, b"b")]


def test_roll_empty_active_segment_is_recreated(log_dir: Path) -> None:
    # Kafka's testRollEmptyActiveSegment / KAFKA-6388.
    log = open_log(log_dir)
    log.append_as_leader(batch("a"), 0)
    first = log.roll()
    assert first.base_offset == 1
    again = log.roll()
    assert again.base_offset == 1 and again is not first
    assert [s.base_offset for s in log.segments] == [0, 1]
    # A follower's next batch may start later: the new segment starts there.
    assert log.roll(5).base_offset == 5


# Producer state through the log ---------------------------------------------------------------
def test_duplicate_batch_returns_original_offsets(log_dir: Path) -> None:
    log = open_log(log_dir)
    idem = batch("a", "b", producer_id=7, producer_epoch=0, base_sequence=0)
    first = log.append_as_leader(idem, 0)
    log.append_as_leader(batch("c", producer_id=7, producer_epoch=0, base_sequence=2), 0)
    retry = log.append_as_leader(idem, 0)
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert log.log_end_offset == 3
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch("d", producer_id=7, producer_epoch=0, base_sequence=9), 0)
    log.append_as_leader(batch("e", producer_id=7, producer_epoch=1, base_sequence=0), 0)
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(batch("f", producer_id=7, producer_epoch=0, base_sequence=3), 0)
    assert log.log_end_offset == 4


def _interleaved_transactions(log: LocalLog) -> None:
    """Producer A (pid 1) aborts, B (pid 2) commits, interleaved with plain records."""
    log.append_as_leader(batch("plain-0"), 0)  # 0
    log.append_as_leader(txn_batch(1, 0, "A-1", "A-2"), 0)  # 1-2
    log.append_as_leader(txn_batch(2, 0, "B-3"), 0)  # 3
    log.append_as_leader(batch("plain-4"), 0)  # 4
    log.append_as_leader(txn_batch(1, 2, "A-5"), 0)  # 5
    log.append_as_leader(txn_batch(2, 1, "B-6"), 0)  # 6
    log.append_as_leader(marker(ControlRecordType.ABORT, 1), 0, origin="coordinator")  # 7
    log.append_as_leader(batch("plain-8"), 0)  # 8
    log.append_as_leader(marker(ControlRecordType.COMMIT, 2), 0, origin="coordinator")  # 9
    log.append_as_leader(batch("plain-10"), 0)  # 10


def committed_view(log: LocalLog) -> list[bytes | None]:
    """What a read_committed consumer delivers: aborted records and markers dropped."""
    out: list[bytes | None] = []
    offset = log.log_start_offset
    aborted: dict[int, int] = {}
    while True:
        info = log.read(offset, 10_000, "read_committed")
        assert info.aborted_transactions is not None
        for txn in info.aborted_transactions:
            aborted.setdefault(txn.producer_id, txn.first_offset)
        if not info.records:
            return out
        for _, header, records in iter_batches_with_records(info.records):
            offset = header.next_offset
            if header.is_control:
                if decode_control_record(records[0]).type == ControlRecordType.ABORT:
                    aborted.pop(header.producer_id, None)
                continue
            pid = header.producer_id
            if header.is_transactional and pid in aborted and header.base_offset >= aborted[pid]:
                continue
            out.extend(r.value for r in records)


@pytest.mark.parametrize("segment_bytes", [None, 200])
def test_read_committed_with_aborted_transactions(log_dir: Path, segment_bytes: int | None) -> None:
    props = {} if segment_bytes is None else {"internal_segment_bytes": segment_bytes}
    log = open_log(log_dir, **props)  # type: ignore[arg-type]
    _interleaved_transactions(log)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 11
    info = log.read(0, 100_000, "read_committed")
    assert info.aborted_transactions == [AbortedTxn(1, 1, 7, 3)]
    values = committed_view(log)
    assert values == [b"plain-0", b"B-3", b"plain-4", b"B-6", b"plain-8", b"plain-10"]
    uncommitted = [v for _, v in all_records(log, "read_uncommitted")]
    assert b"A-1" in uncommitted and len(uncommitted) == 9
    # The transaction index holds the abort, with the LSO at the time (B's txn was open at 3).
    aborted = [t for seg in log.segments for t in seg.txn_index.all_aborted_txns()]
    assert aborted == [AbortedTxn(1, 1, 7, 3)]
    # A read starting after the abort does not report it.
    later = log.read(8, 100_000, "read_committed")
    assert later.aborted_transactions == []


def test_last_stable_offset_with_an_open_transaction(log_dir: Path) -> None:
    log = open_log(log_dir)
    log.append_as_leader(batch("a", "b"), 0)  # 0-1
    log.append_as_leader(txn_batch(3, 0, "t1"), 0)  # 2
    log.append_as_leader(batch("c"), 0)  # 3
    log.update_high_watermark(log.log_end_offset)
    assert log.high_watermark == 4
    assert log.first_unstable_offset == 2
    assert log.last_stable_offset == 2
    info = log.read(0, 100_000, "read_committed")
    assert [r.offset for r in iter_records(info.records)] == [0, 1]
    assert log.read(2, 100_000, "read_committed").records == b""
    log.append_as_leader(marker(ControlRecordType.COMMIT, 3), 0, origin="coordinator")  # 4
    # The marker is above the high watermark: the transaction still holds the LSO.
    assert log.last_stable_offset == 2
    log.update_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset is None
    assert log.last_stable_offset == log.high_watermark == 5
    assert [v for _, v in all_records(log, "read_committed")] == [b"a", b"b", b"t1", b"c"]


def test_reads_stop_at_the_high_watermark(log_dir: Path) -> None:
    log = open_log(log_dir)
    for i in range(6):
        log.append_as_leader(batch(str(i)), 0)
    assert log.high_watermark == 0
    assert log.read(0, 1000).records == b""  # nothing committed yet
    log.update_high_watermark(3)
    assert [o for o, _ in all_records(log, "read_uncommitted")] == [0, 1, 2]
    assert [o for o, _ in all_records(log, "log_end")] == list(range(6))
    assert log.update_high_watermark(100) == 6  # bounded by the log end
    with pytest.raises(OffsetOutOfRangeError):
        log.read(7, 100)
    at_end = log.read(6, 100)
    assert at_end.records == b"" and at_end.fetch_offset_metadata.message_offset == 6


def test_high_watermark_can_follow_the_log_end(log_dir: Path) -> None:
    log = LocalLog.open(log_dir, SMALL, clock=Clock(), sync=False, high_watermark_follows_leo=True)
    log.append_as_leader(batch("a"), 0)
    assert log.high_watermark == 1 == log.last_stable_offset


def test_read_max_bytes_and_min_one_message(log_dir: Path) -> None:
    log = open_log(log_dir, internal_segment_bytes=1000)
    for i in range(20):
        log.append_as_leader(batch(f"v{i}" * 10), 0)
    log.update_high_watermark(log.log_end_offset)
    one = len(batch("v0" * 10))
    info = log.read(5, one * 3 + 10)
    assert [h.base_offset for h in info.batches()] == [5, 6, 7]
    assert log.read(5, 10, min_one_message=False).records == b""
    assert log.read(5, 10, min_one_message=False).first_entry_incomplete
    assert [h.base_offset for h in log.read(5, 10).batches()] == [5]
    # A read never crosses into the next segment: it stops at the segment's end.
    seg_end = log.segments[1].base_offset
    info = log.read(seg_end - 1, 100_000)
    assert [h.base_offset for h in info.batches()] == [seg_end - 1]


def test_fetch_offset_by_timestamp(log_dir: Path) -> None:
    log = open_log(log_dir, internal_segment_bytes=300)
    for i in range(10):
        log.append_as_leader(batch(f"v{i}", ts=NOW - 10_000 + i * 100), 3)
    hit = log.fetch_offset_by_timestamp(NOW - 10_000 + 450)
    assert hit is not None and (hit.offset, hit.leader_epoch) == (5, 3)
    assert log.fetch_offset_by_timestamp(NOW) is None
    earliest = log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP)
    latest = log.fetch_offset_by_timestamp(LATEST_TIMESTAMP)
    local = log.fetch_offset_by_timestamp(EARLIEST_LOCAL_TIMESTAMP)
    assert earliest is not None and latest is not None and local is not None
    assert (earliest.offset, latest.offset, local.offset) == (0, 10, 0)


# Log start offset, retention ------------------------------------------------------------------
def test_delete_records_advances_the_log_start(log_dir: Path) -> None:
    log = open_log(log_dir, internal_segment_bytes=300)
    for i in range(20):
        log.append_as_leader(batch(f"value-{i}"), 0)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(5)  # above the high watermark
    log.update_high_watermark(log.log_end_offset)
    second = log.segments[1].base_offset
    assert log.delete_records(second + 1) == second + 1
    assert log.log_start_offset == second + 1
    assert log.segments[0].base_offset == second  # the segment holding it stays
    with pytest.raises(OffsetOutOfRangeError):
        log.read(second, 100)
    assert all_records(log)[0] == (second + 1, f"value-{second + 1}".encode())
    log.close()
    reopened = open_log(log_dir, internal_segment_bytes=300)
    assert reopened.log_start_offset == second + 1


def _fill(log: LocalLog, count: int, ts: int = NOW - 1000) -> None:
    for i in range(count):
        log.append_as_leader(batch(f"record-{i:04d}", ts=ts), 0)


def test_retention_by_time_without_remote_storage(log_dir: Path, clock: Clock) -> None:
    log = open_log(log_dir, clock, internal_segment_bytes=300, retention_ms=10_000)
    _fill(log, 10, ts=NOW - 20_000)
    _fill(log, 5, ts=NOW - 100)
    assert log.delete_retention_segments() == 0  # nothing is below the high watermark yet
    log.update_high_watermark(log.log_end_offset)
    deleted = log.delete_retention_segments()
    assert deleted > 0
    assert log.log_start_offset == log.segments[0].base_offset == log.local_log_start_offset
    assert [o for o, _ in all_records(log)] == list(range(log.log_start_offset, 15))
    assert all(s.largest_timestamp() > NOW - 10_000 for s in log.segments)
    assert not any(p.name.endswith(".deleted") for p in log_dir.iterdir())


def test_retention_by_size_without_remote_storage(log_dir: Path) -> None:
    log = open_log(log_dir, internal_segment_bytes=300, retention_bytes=700)
    _fill(log, 30)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_retention_segments() > 0
    assert log.size() <= 700 + 300
    assert log.size() >= 700 - 300


def tiered(log_dir: Path, clock: Clock, **props: object) -> LocalLog:
    return open_log(log_dir, clock, remote_storage_enable=True, internal_segment_bytes=300, **props)


def test_local_retention_by_bytes_stops_at_the_highest_remote_offset(
    log_dir: Path, clock: Clock
) -> None:
    log = tiered(log_dir, clock, local_retention_bytes=300, retention_bytes=100_000)
    _fill(log, 30)
    log.update_high_watermark(log.log_end_offset)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 5
    # Nothing copied yet: nothing may be deleted locally.
    assert log.delete_retention_segments(-1) == 0
    assert [s.base_offset for s in log.segments] == bases
    # Segments up to the second are in remote storage (its last offset = third base - 1).
    assert log.delete_retention_segments(bases[2] - 1) == 2
    assert [s.base_offset for s in log.segments] == bases[2:]
    assert log.local_log_start_offset == bases[2]
    assert log.log_start_offset == 0  # the remote data is still part of the log
    with pytest.raises(OffsetMovedToTieredStorageError):
        log.read(0, 100)
    # A remote offset in the middle of a segment does not make it deletable.
    assert log.delete_retention_segments(bases[3] + 1) == 1
    assert log.segments[0].base_offset == bases[3]
    # The active segment is never deleted.
    assert log.delete_retention_segments(log.log_end_offset) >= 1
    assert log.active_segment.base_offset >= bases[-1]


def test_local_retention_by_time(log_dir: Path, clock: Clock) -> None:
    log = tiered(log_dir, clock, local_retention_ms=1000, retention_ms=100_000)
    _fill(log, 20, ts=NOW - 5000)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_retention_segments(-1) == 0
    bases = [s.base_offset for s in log.segments]
    # Every segment breaches local retention; only the copied ones go. The active segment,
    # which breaches too, is rolled so it can be copied and deleted later.
    assert log.delete_retention_segments(bases[-1] - 1) == len(bases) - 1
    assert log.segments[0].base_offset == bases[-1]
    assert log.active_segment.size == 0
    assert log.local_log_start_offset == bases[-1]
    assert log.log_start_offset == 0


def test_local_retention_uses_total_retention_when_not_tiered(log_dir: Path, clock: Clock) -> None:
    # Without remote storage local.retention.* is ignored, retention.* applies.
    log = open_log(log_dir, clock, internal_segment_bytes=300, local_retention_ms=1)
    _fill(log, 10, ts=NOW - 5000)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_retention_segments(-1) == 0


def test_remote_log_start_offset_updates(log_dir: Path, clock: Clock) -> None:
    log = tiered(log_dir, clock)
    _fill(log, 10)
    log.update_high_watermark(log.log_end_offset)
    log.update_log_start_offset_from_remote_tier(3)
    assert log.log_start_offset == 3
    log.update_highest_offset_in_remote_storage(5)
    log.update_highest_offset_in_remote_storage(2)
    assert log.highest_offset_in_remote_storage == 5


# Truncation ------------------------------------------------------------------------------------
def test_truncate_to(log_dir: Path) -> None:
    log = open_log(log_dir, internal_segment_bytes=300)
    for i in range(10):
        log.append_as_leader(batch(f"value-{i}"), 1 if i < 5 else 2)
    log.append_as_leader(batch("x1", "x2", "x3"), 3)  # 10-12
    log.update_high_watermark(log.log_end_offset)
    assert log.leader_epoch_cache.epoch_entries() == [(1, 0), (2, 5), (3, 10)]
    assert not log.truncate_to(13)
    assert log.truncate_to(11)  # the batch holding 11 goes whole
    assert log.log_end_offset == 11
    assert [o for o, _ in all_records(log)] == list(range(10))
    # As in Kafka the log end is the target although the batch went whole, so epoch 3 (which
    # started at 10 < 11) stays.
    assert log.leader_epoch_cache.epoch_entries() == [(1, 0), (2, 5), (3, 10)]
    assert log.high_watermark == 11
    assert log.truncate_to(4)
    assert log.leader_epoch_cache.epoch_entries() == [(1, 0)]
    assert [o for o, _ in all_records(log)] == [0, 1, 2, 3]
    assert [s.base_offset for s in log.segments] == [0, 4]  # segment 4 kept, emptied
    assert sorted(p.name for p in log_dir.glob("*.snapshot")) == ["00000000000000000004.snapshot"]
    info = log.append_as_leader(batch("again"), 4)
    assert info.first_offset == 4


def test_truncate_rebuilds_producer_state(log_dir: Path) -> None:
    log = open_log(log_dir)
    log.append_as_leader(batch("a", producer_id=5, producer_epoch=0, base_sequence=0), 0)
    log.append_as_leader(batch("b", producer_id=5, producer_epoch=0, base_sequence=1), 0)
    log.truncate_to(1)
    entry = log.producer_state_manager.last_entry(5)
    assert entry is not None and entry.last_seq == 0
    log.append_as_leader(batch("b", producer_id=5, producer_epoch=0, base_sequence=1), 0)


def test_truncate_fully_and_start_at(log_dir: Path) -> None:
    log = open_log(log_dir, internal_segment_bytes=300)
    _fill(log, 20)
    log.truncate_fully_and_start_at(100)
    assert [s.base_offset for s in log.segments] == [100]
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    assert log.leader_epoch_cache.epoch_entries() == []
    assert sorted(p.name for p in log_dir.iterdir() if p.suffix in (".log", ".snapshot")) == [
        "00000000000000000100.log"
    ]
    info = log.append_as_leader(batch("x"), 9)
    assert info.first_offset == 100
    assert log.leader_epoch_cache.epoch_entries() == [(9, 100)]


# Tiering inputs --------------------------------------------------------------------------------
def test_segment_copy_inputs(log_dir: Path, clock: Clock) -> None:
    log = tiered(log_dir, clock)
    log.append_as_leader(batch("a" * 50), 0)  # 0
    log.append_as_leader(txn_batch(1, 0, "t" * 50), 0)  # 1
    log.append_as_leader(batch("b" * 50), 2)  # 2, epoch 2
    log.append_as_leader(marker(ControlRecordType.ABORT, 1), 2, origin="coordinator")  # 3
    log.append_as_leader(batch("c" * 50), 4)  # 4+
    log.append_as_leader(batch("d" * 50), 4)
    log.append_as_leader(batch("e" * 50), 4)
    segments = log.segments
    assert len(segments) >= 3
    with pytest.raises(IllegalStateError):
        log.segment_copy_inputs(log.active_segment)
    second = segments[1]
    nxt = segments[2].base_offset
    inputs = log.segment_copy_inputs(second)
    assert (inputs.start_offset, inputs.end_offset) == (second.base_offset, nxt - 1)
    data = inputs.data
    assert data.log_segment == second.log_path
    assert data.offset_index.exists() and data.time_index.exists()
    assert data.producer_snapshot_index == producer_snapshot_file(log_dir, nxt)
    entries = parse_leader_epoch_checkpoint(data.leader_epoch_index)
    # The epoch index shipped covers every epoch up to the segment's end (Kafka's
    # epochEntriesInRange(-1, next base)); the metadata epochs are clamped to the segment.
    assert entries == log.leader_epoch_cache.epoch_entries_in_range(-1, nxt)
    assert entries[0] == (0, 0)
    first_epoch = log.leader_epoch_cache.epoch_for_offset(second.base_offset)
    assert next(iter(inputs.segment_leader_epochs.items())) == (first_epoch, second.base_offset)
    has_abort = any(t.last_offset == 3 for t in second.txn_index.all_aborted_txns())
    assert inputs.txn_index_empty is not has_abort
    assert (data.transaction_index is None) is (not has_abort)
    assert inputs.size_in_bytes == second.size
    # A missing snapshot (a directory loaded from elsewhere) is rebuilt from the log.
    data.producer_snapshot_index.unlink()
    log.producer_state_manager.remove_and_mark_snapshot_for_deletion(nxt)
    rebuilt = log.segment_copy_inputs(second.base_offset).data.producer_snapshot_index
    assert rebuilt.exists() and rebuilt.name == producer_snapshot_file(log_dir, nxt).name


def test_topic_id_must_match_partition_metadata(log_dir: Path) -> None:
    open_log(log_dir, topic_id=TOPIC_ID).close()
    other = Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAg")
    with pytest.raises(InconsistentTopicIdError):
        open_log(log_dir, topic_id=other)
    reopened = open_log(log_dir)
    assert reopened.topic_id == TOPIC_ID


def test_directory_name_gives_the_partition(tmp_path: Path) -> None:
    log = open_log(tmp_path / "my-topic.v2-17")
    assert (log.topic_partition.topic, log.topic_partition.partition) == ("my-topic.v2", 17)
    with pytest.raises(ValueError):
        open_log(tmp_path / "notapartition")


def test_close_is_clean_and_reopen_keeps_everything(log_dir: Path) -> None:
    log = open_log(log_dir, internal_segment_bytes=400)
    _interleaved_transactions(log)
    log.update_high_watermark(9)
    before = all_records(log)
    log.close()
    log.close()
    with pytest.raises(IllegalStateError):
        log.append_as_leader(batch("x"), 0)
    reopened = open_log(log_dir, internal_segment_bytes=400)
    assert reopened.recovery_report.recovered_segments == []
    assert all_records(reopened) == before
    assert reopened.high_watermark == 9
    # B's commit marker (offset 9) is not below the high watermark yet: its transaction holds
    # the LSO. Snapshots do not record completed transactions, so after a reload (as in Kafka)
    # only open transactions count and the LSO is the high watermark.
    assert log.last_stable_offset == 3
    assert reopened.first_unstable_offset is None and reopened.last_stable_offset == 9
    assert reopened.producer_state_manager.last_entry(2) is not None
    reopened.update_high_watermark(10)
    assert reopened.last_stable_offset == 10


# Interoperability ------------------------------------------------------------------------------
def test_kafka_python_reads_every_batch(log_dir: Path) -> None:
    default_records = pytest.importorskip("kafka.record.default_records")
    log = open_log(log_dir, internal_segment_bytes=500)
    _interleaved_transactions(log)
    for i in range(10):
        log.append_as_leader(
            build_batch(
                [
                    Record(j, NOW, f"k{j}".encode(), None if j % 3 == 0 else b"v" * j)
                    for j in range(4)
                ],
                compression="gzip" if i % 2 else "none",
            ),
            6,
        )
    expected = list(iter_records(b"".join(s.log_path.read_bytes() for s in log.segments)))
    seen = []
    for segment in log.segments:
        data = segment.log_path.read_bytes()
        pos = 0
        while pos < len(data):
            size = 12 + int.from_bytes(data[pos + 8 : pos + 12], "big")
            kp = default_records.DefaultRecordBatch(data[pos : pos + size])
            assert kp.validate_crc()
            assert kp.base_offset >= segment.base_offset
            for r in kp:
                seen.append((r.offset, r.timestamp, r.key, r.value))
            pos += size
    assert seen == [(r.offset, r.timestamp, r.key, r.value) for r in expected]
    assert len(seen) == 11 + 40  # 9 data records and 2 markers, then 10 batches of 4


# A model check ---------------------------------------------------------------------------------
class LocalLogMachine(RuleBasedStateMachine):
    """Random appends, rolls, truncations, deletions, retention and reopenings against a list
    of batches: the log must return exactly the model's records, with the model's offsets."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name) / "model-0"
        self.props = {**SMALL, "internal.segment.bytes": 500, "retention.bytes": 1200}
        self.clock = Clock()
        self.log = self._open()
        self.batches: list[tuple[int, list[bytes]]] = []  # (base offset, values)
        self.log_start = 0
        self.leo = 0
        self.counter = 0

    def _open(self) -> LocalLog:
        return LocalLog.open(
            self.dir, self.props, clock=self.clock, sync=False, flush_on_roll=False
        )

    def teardown(self) -> None:
        self.log.close_handlers()
        self.tmp.cleanup()

    @rule(n=st.integers(1, 4), size=st.integers(1, 60), epoch=st.integers(0, 3))
    def append(self, n: int, size: int, epoch: int) -> None:
        values = []
        for _ in range(n):
            self.counter += 1
            values.append(f"{self.counter}:".encode() + b"x" * size)
        latest = self.log.latest_epoch() or 0
        info = self.log.append_as_leader(batch(*values), max(epoch, latest))
        assert info.first_offset == self.leo
        self.batches.append((self.leo, values))
        self.leo += n

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        # Followers truncate at batch boundaries (a target inside a batch removes the whole
        # batch but, as in Kafka, leaves the log end at the target until the next reload).
        bounds = [b for b, _ in self.batches if b >= self.log_start] + [self.leo]
        target = data.draw(st.sampled_from(bounds))
        self.log.truncate_to(target)
        if target < self.leo:
            keep = [(b, v) for b, v in self.batches if b + len(v) - 1 < target]
            self.batches = keep
            self.leo = target
            self.log_start = min(self.log_start, target)

    @precondition(lambda self: self.leo > self.log_start)
    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        self.log.update_high_watermark(self.leo)
        target = data.draw(st.integers(self.log_start, self.leo))
        self.log.delete_records(target)
        self.log_start = max(self.log_start, target)

    @rule()
    def retention(self) -> None:
        self.log.update_high_watermark(self.leo)
        self.log.delete_retention_segments()
        self.log_start = max(self.log_start, self.log.log_start_offset)

    @rule(crash=st.booleans())
    def reopen(self, crash: bool) -> None:
        if crash:
            self.log.close_handlers()
        else:
            self.log.close()
        self.log = self._open()

    @rule(garbage=st.binary(min_size=1, max_size=80))
    def crash_with_a_torn_tail(self, garbage: bytes) -> None:
        # kill -9 in the middle of a write: the tail is garbage, recovery must cut exactly it.
        path = self.log.active_segment.log_path
        self.log.close_handlers()
        with open(path, "ab") as f:
            f.write(garbage)
        self.log = self._open()

    @invariant()
    def matches_the_model(self) -> None:
        log = self.log
        assert log.log_end_offset == self.leo
        assert log.log_start_offset == self.log_start
        expected = [
            (b + i, v)
            for b, values in self.batches
            for i, v in enumerate(values)
            if b + i >= self.log_start
        ]
        assert all_records(log) == expected
        bases = [s.base_offset for s in log.segments]
        assert bases == sorted(set(bases))
        assert bases[0] <= max(self.log_start, bases[0])


TestLocalLogMachine = LocalLogMachine.TestCase
TestLocalLogMachine.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.slow
class TestLocalLogMachineLong(LocalLogMachine.TestCase):  # type: ignore[name-defined,misc]
    settings = settings(max_examples=300, stateful_step_count=40, deadline=None)


def test_no_leftover_files_after_deletes(log_dir: Path) -> None:
    log = open_log(log_dir, internal_segment_bytes=300, retention_bytes=300)
    _fill(log, 40)
    log.update_high_watermark(log.log_end_offset)
    log.delete_retention_segments()
    names = os.listdir(log_dir)
    assert not [n for n in names if n.endswith((".deleted", ".tmp"))]
    bases = {s.base_offset for s in log.segments}
    snapshot_offsets = {int(n.split(".")[0]) for n in names if n.endswith(".snapshot")}
    assert snapshot_offsets <= bases | {log.log_end_offset}
