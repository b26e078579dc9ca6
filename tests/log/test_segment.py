"""Log segments: ports of Kafka's ``LogSegmentTest`` plus rolling, reading and deletion rules.

Kafka's ``v1Records(offset, ...)`` writes one legacy message per value (each its own "batch");
tierlog writes batches v2 only, so ``v1`` here builds one single-record v2 batch per value, with
the same offsets and timestamps (``offset * 10``), which keeps Kafka's index-count expectations.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tierlog.log.batch import (
    ControlRecordType,
    build_batch,
    build_control_batch,
)
from tierlog.log.index import CorruptIndexError, TimestampOffset
from tierlog.log.leader_epoch_cache import LeaderEpochFileCache
from tierlog.log.log_config import LogConfig
from tierlog.log.producer_state import ProducerStateEntry, ProducerStateManager
from tierlog.log.reader import iter_batches, iter_records
from tierlog.log.record import Record
from tierlog.log.segment import (
    LogOffsetMetadata,
    LogSegment,
    LogSegmentOffsetOverflowError,
    LogSegments,
    RollParams,
    batch_spans,
)
from tierlog.log.txn_index import AbortedTxn
from tierlog.spi import InvalidArgumentError

INT_MAX = 2**31 - 1


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def sleep(self, ms: int) -> None:
        self.now += ms


def v1(offset: int, *values: str) -> bytes:
    """One single-record batch per value at consecutive offsets, timestamps ``offset * 10``."""
    return b"".join(
        build_batch([Record(offset + i, offset * 10, None, v.encode())], base_offset=offset + i)
        for i, v in enumerate(values)
    )


def v2(offset: int, *values: str, ts: int | None = None, epoch: int = -1) -> bytes:
    """One batch with all the values, at ``offset``."""
    stamp = offset * 10 if ts is None else ts
    return build_batch(
        [Record(offset + i, stamp, None, v.encode()) for i, v in enumerate(values)],
        base_offset=offset,
        partition_leader_epoch=epoch,
    )


def values_of(data: bytes) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for r in iter_records(data)]


@pytest.fixture
def segments() -> list[LogSegment]:
    created: list[LogSegment] = []
    yield created
    for seg in created:
        seg.close_handlers()


@pytest.fixture
def make(tmp_path: Path, segments: list[LogSegment]):  # type: ignore[no-untyped-def]
    def factory(
        base: int, index_interval: int = 10, clock: Clock | None = None, max_index: int = 1500
    ) -> LogSegment:
        seg = LogSegment(
            tmp_path,
            base,
            index_interval_bytes=index_interval,
            max_index_size=max_index,
            clock=clock,
        )
        segments.append(seg)
        return seg

    return factory


def new_psm(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path, clock=lambda: 0, sync=False)


def epochs(tmp_path: Path) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint", sync=False)


# Appending -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("base", "largest"),
    [
        (0, -(2**31)),
        (0, 2**31),
        (1, 0),
        (100, 10),
        (2**31, 0),
        (2**31, 2**32),
    ],
)
def test_append_for_log_segment_offset_overflow(make, base: int, largest: int) -> None:  # type: ignore[no-untyped-def]
    seg = make(base)
    with pytest.raises(LogSegmentOffsetOverflowError):
        seg.append(largest, v1(0, "hello"))
    assert seg.size == 0


def test_append_writes_bytes_and_the_headers_must_match(make) -> None:  # type: ignore[no-untyped-def]
    seg = make(40)
    data = v1(40, "a", "b")
    seg.append(41, data)
    assert seg.log_path.read_bytes() == data
    with pytest.raises(InvalidArgumentError):
        seg.append(42, v1(42, "c"), batches=[])


# Reading ---------------------------------------------------------------------------------------
def test_read_on_empty_segment(make) -> None:  # type: ignore[no-untyped-def]
    assert make(40).read(40, 300) is None


def test_read_before_first_offset(make) -> None:  # type: ignore[no-untyped-def]
    seg = make(40)
    ms = v1(50, "hello", "there", "little", "bee")
    seg.append(53, ms)
    read = seg.read(41, 300)
    assert read is not None and read.records == ms


def test_read_from_middle_of_batch(make) -> None:  # type: ignore[no-untyped-def]
    seg = make(40)
    seg.append(53, v2(50, "hello", "there", "little", "bee"))
    read = seg.read(52, 300)
    assert read is not None
    assert read.fetch_offset_metadata.message_offset == 50


def test_read_after_last(make) -> None:  # type: ignore[no-untyped-def]
    seg = make(40)
    seg.append(51, v1(50, "hello", "there"))
    assert seg.read(52, 200) is None


def test_read_from_gap(make) -> None:  # type: ignore[no-untyped-def]
    seg = make(40)
    seg.append(51, v1(50, "hello", "there"))
    ms2 = v1(60, "alpha", "beta")
    seg.append(61, ms2)
    read = seg.read(55, 200)
    assert read is not None and read.records == ms2


@pytest.mark.parametrize("min_one_message", [True, False])
def test_read_when_max_position_is_zero(make, min_one_message: bool) -> None:  # type: ignore[no-untyped-def]
    # Kafka's "no max position" case: nothing may be exposed, the metadata is still given.
    seg = make(40)
    first = v1(50, "hello")
    seg.append(51, v1(50, "hello", "there"))
    read = seg.read(50, 1, 0, min_one_message)
    assert read is not None
    assert read.fetch_offset_metadata == LogOffsetMetadata(50, 40, 0)
    assert read.records == b""
    read = seg.read(51, 1, 0, min_one_message)
    assert read is not None
    assert read.fetch_offset_metadata == LogOffsetMetadata(51, 40, len(first))
    assert seg.read(52, 1, 0, min_one_message) is None
    assert seg.read(53, 1, 0, min_one_message) is None


def test_read_min_one_message_and_whole_batches(make) -> None:  # type: ignore[no-untyped-def]
    seg = make(0)
    batches = [v2(i * 3, "x" * 30, "y" * 30, "z") for i in range(5)]
    for i, b in enumerate(batches):
        seg.append(i * 3 + 2, b)
    size = len(batches[0])
    # A budget that cuts the third batch gives two whole batches, never a partial one.
    read = seg.read(0, 2 * size + size // 2)
    assert read is not None and read.records == batches[0] + batches[1]
    # Smaller than one batch: nothing, marked incomplete, unless min_one_message.
    read = seg.read(4, size - 1)
    assert read is not None and read.records == b"" and read.first_entry_incomplete
    read = seg.read(4, size - 1, min_one_message=True)
    assert read is not None and read.records == batches[1]
    assert not read.first_entry_incomplete
    # max_position bounds what is exposed (a high watermark inside the segment).
    read = seg.read(0, 10_000, max_position=3 * size)
    assert read is not None and read.records == b"".join(batches[:3])
    assert [h.base_offset for h in read.batches()] == [0, 3, 6]
    assert batch_spans(read.records + b"\x00" * 20) == 3 * size


def test_translate_offset_uses_the_index_then_scans(make) -> None:  # type: ignore[no-untyped-def]
    seg = make(0, index_interval=100)
    positions = []
    for i in range(50):
        positions.append(seg.size)
        seg.append(i, v1(i, f"value-{i}"))
    assert seg.offset_index.entries > 5
    for i in range(50):
        found = seg.translate_offset(i)
        assert found is not None and (found.offset, found.position) == (i, positions[i])
    assert seg.translate_offset(50) is None
    # A starting position past the index entry is honoured.
    found = seg.translate_offset(10, positions[20])
    assert found is not None and found.offset == 20


def test_truncate(make) -> None:  # type: ignore[no-untyped-def]
    seg = make(40)
    offset = 40
    for _ in range(30):
        ms1 = v1(offset, "hello")
        seg.append(offset, ms1)
        ms2 = v1(offset + 1, "hello")
        seg.append(offset + 1, ms2)
        read = seg.read(offset, 10000)
        assert read is not None and read.records == ms1 + ms2
        seg.truncate_to(offset + 1)
        read = seg.read(offset, 10000)
        assert read is not None and read.records == ms1
        offset += 1


def test_truncate_empty_segment(make, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # A follower truncating to an empty segment must not be rolled for a "full" index.
    max_segment_ms = 300000
    clock = Clock()
    seg = make(0, clock=clock)
    _ = seg.time_index, seg.offset_index
    seg.close()
    reopened = make(0, clock=clock)
    assert reopened.time_index.size_in_bytes() == 0
    assert reopened.offset_index.size_in_bytes() == 0
    clock.sleep(500)
    reopened.truncate_to(57)
    assert reopened.time_waited_for_roll(clock(), -1) == 0
    assert not reopened.time_index.is_full()
    assert not reopened.offset_index.is_full()
    params = RollParams(max_segment_ms, INT_MAX, -1, 100, 1024, clock())
    assert not reopened.should_roll(params)
    clock.sleep(max_segment_ms + 1)
    assert reopened.time_waited_for_roll(clock(), -1) == max_segment_ms + 1
    assert not reopened.should_roll(RollParams(max_segment_ms, INT_MAX, -1, 100, 1024, clock()))
    assert reopened.should_roll(
        RollParams(max_segment_ms, INT_MAX, -1, INT_MAX + 200, 1024, clock())
    )


def test_reload_largest_timestamp_and_next_offset_after_truncation(make) -> None:  # type: ignore[no-untyped-def]
    num = 30
    seg = make(40, index_interval=2 * len(v1(0, "hello")) - 1)
    offset = 40
    for _ in range(num):
        seg.append(offset, v1(offset, "hello"))
        offset += 1
    assert seg.read_next_offset() == offset
    assert seg.time_index.entries == num // 2 - 1
    seg.truncate_to(41)
    assert seg.time_index.entries == 0
    assert seg.largest_timestamp() == 400
    assert seg.read_next_offset() == 41


def test_truncate_full(make) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    seg = make(40, clock=clock)
    seg.append(
        41,
        build_batch(
            [Record(40, -1, None, b"hello"), Record(41, -1, None, b"there")], base_offset=40
        ),
    )
    clock.sleep(500)
    assert seg.time_waited_for_roll(clock(), -1) == 500
    seg.truncate_to(0)
    assert seg.time_waited_for_roll(clock(), -1) == 0
    assert not seg.time_index.is_full() and not seg.offset_index.is_full()
    assert seg.read(0, 1024) is None
    seg.append(41, v1(40, "hello", "there"))


def test_find_offset_by_timestamp(make) -> None:  # type: ignore[no-untyped-def]
    size = len(v1(0, "msg00"))
    seg = make(40, index_interval=size * 2 - 1)
    for i in range(40, 50):
        seg.append(i, v1(i, f"msg{i}"))
    assert seg.largest_timestamp() == 490

    def found(ts: int) -> int | None:
        hit = seg.find_offset_by_timestamp(ts, 0)
        return None if hit is None else hit.offset

    assert (found(420), found(421)) == (42, 43)  # indexed timestamps
    assert (found(430), found(431)) == (43, 44)  # not indexed
    assert found(491) is None
    assert found(401) == 41
    assert found(399) == 40
    hit = seg.find_offset_by_timestamp(420, 45)
    assert hit is not None and (hit.offset, hit.timestamp, hit.leader_epoch) == (45, 450, None)


def test_next_offset_calculation(make) -> None:  # type: ignore[no-untyped-def]
    seg = make(40)
    assert seg.read_next_offset() == 40
    seg.append(52, v1(50, "hello", "there", "you"))
    assert seg.read_next_offset() == 53


def test_change_file_suffixes(make) -> None:  # type: ignore[no-untyped-def]
    seg = make(40)
    log, index, time_index = seg.log_path, seg.offset_index_path, seg.time_index_path
    assert not index.exists() and not time_index.exists()  # created lazily
    seg.change_file_suffixes("", ".deleted")
    assert not seg.offset_index_path.exists() and not seg.time_index_path.exists()
    assert seg.log_path == log.with_name(log.name + ".deleted")
    assert seg.offset_index_path == index.with_name(index.name + ".deleted")
    assert seg.time_index_path == time_index.with_name(time_index.name + ".deleted")
    assert seg.log_path.exists() and not log.exists()
    _ = seg.offset_index
    assert seg.offset_index_path.exists()
    _ = seg.time_index
    assert seg.time_index_path.exists()
    assert seg.has_suffix(".deleted")


def _nonsense(path: Path, position: int, size: int, rng: random.Random) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(bytes(rng.randrange(255) for _ in range(size)))


def test_recovery_fixes_corrupt_index(make, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    seg = make(0)
    for i in range(100):
        seg.append(i, v1(i, str(i)))
    index = seg.offset_index_path
    _nonsense(index, 5, index.stat().st_size - 5, random.Random(1))
    seg.recover(new_psm(tmp_path), epochs(tmp_path))
    for i in range(100):
        read = seg.read(i, 1, None, True)
        assert read is not None and values_of(read.records)[0][0] == i
    seg.offset_index.sanity_check(seg.size)


def test_recover_transaction_index(make, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    seg = make(100)
    pid1, pid2, epoch, leader_epoch = 5, 10, 0, 15

    def txn(offset: int, pid: int) -> bytes:
        return build_batch(
            [Record(offset, 0, None, b"a"), Record(offset + 1, 0, None, b"b")],
            base_offset=offset,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=100,
            is_transactional=True,
            partition_leader_epoch=leader_epoch,
        )

    seg.append(101, txn(100, pid1))
    seg.append(103, txn(102, pid2))
    seg.append(
        105,
        build_batch(
            [Record(104, 0, None, b"a"), Record(105, 0, None, b"b")],
            base_offset=104,
            partition_leader_epoch=leader_epoch,
        ),
    )
    seg.append(
        106,
        build_control_batch(
            ControlRecordType.ABORT,
            0,
            base_offset=106,
            timestamp=-1,
            producer_id=pid2,
            producer_epoch=epoch,
        ),
    )
    seg.append(
        107,
        build_control_batch(
            ControlRecordType.COMMIT,
            0,
            base_offset=107,
            timestamp=-1,
            producer_id=pid1,
            producer_epoch=epoch,
        ),
    )
    psm = new_psm(tmp_path)
    seg.recover(psm, epochs(tmp_path))
    assert psm.map_end_offset == 108
    assert seg.txn_index.all_aborted_txns() == [AbortedTxn(pid2, 102, 106, 100)]

    # Again, as if pid2's transaction had begun in an earlier segment.
    psm = new_psm(tmp_path)
    entry = ProducerStateEntry(pid2, epoch, 0, -1, 75)
    entry.add_batch(epoch, 10, 10, 5, -1)
    psm.load_producer_entry(entry)
    seg.recover(psm, epochs(tmp_path))
    assert psm.map_end_offset == 108
    assert seg.txn_index.all_aborted_txns() == [AbortedTxn(pid2, 75, 106, 100)]


def test_recovery_rebuilds_epoch_cache(make, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    seg = make(0)
    cache = epochs(tmp_path)
    for offset, epoch in ((104, 0), (106, 1), (108, 1), (110, 2)):
        seg.append(offset + 1, v2(offset, "a", "b", epoch=epoch))
    seg.recover(new_psm(tmp_path), cache)
    assert [tuple(e) for e in cache.epoch_entries()] == [(0, 104), (1, 106), (2, 110)]


def test_recovery_fixes_corrupt_time_index(make, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    seg = make(0)
    for i in range(100):
        seg.append(i, v1(i, str(i)))
    ti = seg.time_index_path
    _nonsense(ti, 5, ti.stat().st_size - 5, random.Random(2))
    seg.recover(new_psm(tmp_path), epochs(tmp_path))
    for i in range(100):
        hit = seg.find_offset_by_timestamp(i * 10, 0)
        assert hit is not None and hit.offset == i
        if i < 99:
            hit = seg.find_offset_by_timestamp(i * 10 + 1, 0)
            assert hit is not None and hit.offset == i + 1


@pytest.mark.parametrize("seed", range(10))
def test_recovery_with_corrupt_message(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    n = 20
    seg = LogSegment(tmp_path, 0, index_interval_bytes=10, max_index_size=1500)
    try:
        for i in range(n):
            seg.append(i, v1(i, str(i)))
        begin = rng.randrange(n)
        located = seg.translate_offset(begin)
        assert located is not None
        position = located.position + rng.randrange(15)
        _nonsense(seg.log_path, position, seg.size - position, rng)
        truncated = seg.recover(new_psm(tmp_path), epochs(tmp_path))
        assert truncated > 0
        assert [h.last_offset for _, h in iter_batches(seg.log_path)] == list(range(begin))
        assert seg.read_next_offset() == begin
    finally:
        seg.delete_if_exists()


def test_recovery_of_a_zero_filled_tail(make, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # A crash after the file grew but before the data landed leaves zeros; they read as a
    # "magic 0" batch with an impossible size, which is a torn write, not a legacy batch.
    seg = make(0)
    seg.append(1, v1(0, "a", "b"))
    size = seg.size
    with open(seg.log_path, "ab") as f:
        f.write(bytes(4096))
    reopened = make(0)
    assert reopened.size == size + 4096
    assert reopened.recover(new_psm(tmp_path), epochs(tmp_path)) == 4096
    assert reopened.read_next_offset() == 2


def test_should_truncate_even_if_offset_points_to_a_gap(make) -> None:  # type: ignore[no-untyped-def]
    seg = make(40)
    seg.append(40, build_batch([Record(40, 40000, None, b"first message")], base_offset=40))
    seg.append(43, build_batch([Record(43, 43000, None, b"after gap")], base_offset=43))
    seg.truncate_to(41)
    read = seg.read(40, 10000)
    assert read is not None
    assert [h.base_offset for h in read.batches()] == [40]


def test_get_first_batch_timestamp(make) -> None:  # type: ignore[no-untyped-def]
    seg = make(1)
    assert seg.first_batch_timestamp() is None
    seg.append(1, build_batch([Record(1, 1000, None, b"one")], base_offset=1))
    assert seg.first_batch_timestamp() == 1000


def test_index_for_multiple_batches_in_one_append(make) -> None:  # type: ignore[no-untyped-def]
    seg = make(0, index_interval=1)
    both = b"".join(build_batch([Record(o, o, b"key1", b"value1")], base_offset=o) for o in (0, 1))
    seg.append(1, both)
    seg.append(2, build_batch([Record(2, 2, b"key1", b"value1")], base_offset=2))
    assert [seg.offset_index.entry(i).offset for i in range(seg.offset_index.entries)] == [1, 2]
    assert list(seg.time_index) == [TimestampOffset(1, 1), TimestampOffset(2, 2)]


def test_non_monotonic_timestamp_for_multiple_batches(make) -> None:  # type: ignore[no-untyped-def]
    seg = make(0, index_interval=1)
    data = b"".join(
        build_batch([Record(o, ts, b"key1", b"value1")], base_offset=o)
        for o, ts in ((0, 1), (1, 0), (2, 2))
    )
    seg.append(2, data)
    assert [seg.offset_index.entry(i).offset for i in range(seg.offset_index.entries)] == [1, 2]
    assert list(seg.time_index) == [TimestampOffset(1, 0), TimestampOffset(2, 2)]


# Rolling and lifecycle -------------------------------------------------------------------------
def test_should_roll_by_size_time_index_and_overflow(make) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    seg = make(0, clock=clock, max_index=24)
    assert not seg.should_roll(RollParams(1000, 100, -1, 5, 50, clock()))
    seg.append(0, v1(0, "x" * 40))
    size = seg.size
    # segment.bytes: would the append make it too big?
    assert seg.should_roll(RollParams(10**9, size + 10, -1, 5, 11, clock()))
    assert not seg.should_roll(RollParams(10**9, size + 10, -1, 5, 10, clock()))
    # segment.ms, by the first batch's timestamp against the new batch's
    assert seg.should_roll(RollParams(100, 10**9, 101, 5, 1, clock()))
    assert not seg.should_roll(RollParams(100, 10**9, 100, 5, 1, clock()))
    # offset overflow
    assert seg.should_roll(RollParams(10**9, 10**9, -1, INT_MAX + 1, 1, clock()))
    # a full time index (24 bytes: 2 slots, the last reserved for the roll)
    assert not seg.time_index.is_full()
    seg.append(1, v1(1, "y"))
    assert seg.time_index.is_full() and not seg.offset_index.is_full()
    assert seg.should_roll(RollParams(10**9, 10**9, -1, 5, 1, clock()))


def test_roll_jitter_is_taken_off_segment_ms(tmp_path: Path) -> None:
    config = LogConfig(segment_ms=1000, segment_jitter_ms=500)
    for i in range(20):
        (tmp_path / str(i)).mkdir()
        seg = LogSegment.open(tmp_path / str(i), 0, config)
        assert 0 <= seg.roll_jitter_ms < 500
        seg.append(0, v1(0, "a"))  # first batch timestamp 0
        assert seg.should_roll(RollParams(1000, 10**9, 1000 - seg.roll_jitter_ms + 1, 1, 1, 0))
        assert not seg.should_roll(RollParams(1000, 10**9, 1000 - seg.roll_jitter_ms, 1, 1, 0))
        seg.close()


def test_on_become_inactive_trims_and_writes_the_final_time_entry(make) -> None:  # type: ignore[no-untyped-def]
    seg = make(0, index_interval=10**6)
    for i in range(5):
        seg.append(i, build_batch([Record(i, 100 + i, None, b"v")], base_offset=i))
    assert seg.time_index.entries == 0  # below the index interval
    assert seg.offset_index_path.stat().st_size == 1496
    seg.on_become_inactive_segment()
    assert list(seg.time_index) == [TimestampOffset(104, 4)]
    assert seg.offset_index_path.stat().st_size == 0
    assert seg.time_index_path.stat().st_size == 12


def test_close_trims_and_reopen_reads(make, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    seg = make(40)
    ms = v1(40, "hello", "there", "you")
    seg.append(42, ms)
    entries = seg.offset_index.entries
    seg.close()
    assert seg.closed
    assert seg.offset_index_path.stat().st_size == entries * 8
    reopened = make(40)
    assert reopened.size == len(ms)
    read = reopened.read(40, 1000)
    assert read is not None and read.records == ms
    assert reopened.largest_record_timestamp() == 400
    reopened.sanity_check()


def test_delete_renames_then_deletes(make, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    seg = make(40)
    seg.append(40, v1(40, "x"))
    _ = seg.offset_index, seg.time_index
    seg.delete()
    assert seg.deleted()
    assert os.listdir(tmp_path) == []
    assert seg.log_path.name.endswith(".log.deleted")


def test_sanity_check_reports_missing_and_corrupt_indexes(make) -> None:  # type: ignore[no-untyped-def]
    seg = make(0)
    with pytest.raises(FileNotFoundError):
        seg.sanity_check()
    for i in range(20):
        seg.append(i, v1(i, "x"))
    seg.sanity_check()
    seg._truncate_log(50)  # the index now points past the end of the log
    with pytest.raises(CorruptIndexError):
        seg.sanity_check()


def test_log_segments_values_never_fails_a_reader_between_two_updates(make) -> None:  # type: ignore[no-untyped-def]
    """``values()`` is read without the log's lock (a status query while retention deletes):
    a reader running between the two halves of an ``add`` or a ``remove`` (here, called from
    inside the map's own update) sees the segment or not, never a ``KeyError``."""
    segs = LogSegments([make(b) for b in (0, 10, 20)])
    seen: list[list[int]] = []

    class Spying(dict[int, LogSegment]):
        def __setitem__(self, key: int, value: LogSegment) -> None:
            seen.append([s.base_offset for s in segs.values()])  # just before the map changes
            super().__setitem__(key, value)

        def pop(self, key: int, *default: LogSegment | None) -> LogSegment | None:  # type: ignore[override]
            segment = super().pop(key, *default)
            seen.append([s.base_offset for s in segs.values()])  # just after the map changed
            return segment

    segs._by_base = Spying(segs._by_base)
    segs.add(make(30))
    segs.remove(10)
    assert seen == [[0, 10, 20], [0, 20, 30]]
    assert [s.base_offset for s in segs.values()] == [0, 20, 30]
    # A base offset listed whose segment is gone (a reader between the list and the map) is
    # skipped, not a KeyError.
    segs._bases.insert(1, 5)
    assert [s.base_offset for s in segs.values()] == [0, 20, 30]


def test_log_segments_container(make) -> None:  # type: ignore[no-untyped-def]
    segs = LogSegments([make(b) for b in (0, 10, 20, 30)])
    assert segs.base_offsets == [0, 10, 20, 30]
    assert segs.floor_segment(15).base_offset == 10  # type: ignore[union-attr]
    assert segs.floor_segment(-1) is None
    assert segs.higher_segment(10).base_offset == 20  # type: ignore[union-attr]
    assert segs.lower_segment(10).base_offset == 0  # type: ignore[union-attr]
    assert [s.base_offset for s in segs.values(15, 25)] == [10, 20]
    assert [s.base_offset for s in segs.values(10, 10)] == []
    assert [s.base_offset for s in segs.values(-5, 11)] == [0, 10]
    assert [s.base_offset for s in segs.non_active_segments_from(5)] == [0, 10, 20]
    assert segs.non_active_segments_from(31) == []
    with pytest.raises(InvalidArgumentError):
        segs.values(20, 10)
    removed = segs.remove(20)
    assert removed is not None and segs.base_offsets == [0, 10, 30]
    assert segs.active_segment.base_offset == 30
