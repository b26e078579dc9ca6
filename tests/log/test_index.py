"""Offset, time and transaction indexes: Kafka's bytes, lookups, preallocation and sanity.

The cases named after Kafka tests are ports of ``OffsetIndexTest``, ``TimeIndexTest`` and
``TransactionIndexTest`` (storage/src/test/java/org/apache/kafka/storage/internals/log); the
byte vectors are KAFKA-FACTS section 7.
"""

from __future__ import annotations

import contextlib
import os
import random
import struct
import uuid
from bisect import bisect_left, bisect_right
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.log.index import (
    CorruptIndexError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
    OffsetPosition,
    TimestampOffset,
)
from tierlog.log.indexer import BatchIndexInfo, SegmentIndexer, rebuild_indexes
from tierlog.log.offset_index import OffsetIndex
from tierlog.log.time_index import TimeIndex
from tierlog.log.txn_index import (
    AbortedTxn,
    TransactionIndex,
    TxnIndexSearchResult,
    decode_aborted_txns,
)
from tierlog.spi import CorruptRecordError, IllegalStateError, InvalidArgumentError

BASE_OFFSET = 45
FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _offset_entries(data: bytes) -> list[tuple[int, int]]:
    return list(struct.iter_unpack(">ii", data))


# Offset index: bytes and files -----------------------------------------------------------------
def test_offset_index_entry_layout(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    with OffsetIndex(path, 100, 1024) as index:
        index.append(105, 4096)
        index.append(100 + 2**31 - 1, 2**31 - 1)
    # relativeOffset int32 | position int32, big-endian; trimmed on close.
    assert path.read_bytes() == bytes.fromhex(
        "00000005 00001000 7fffffff 7fffffff".replace(" ", "")
    )


def test_new_offset_index_is_preallocated_and_trimmed_on_close(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0, 1003)  # rounded down to a multiple of 8
    assert path.stat().st_size == 1000
    assert (index.length, index.max_entries, index.entries) == (1000, 125, 0)
    index.append(3, 10)
    assert path.stat().st_size == 1000  # entries live in memory until trimmed
    index.trim_to_valid_size()
    assert path.stat().st_size == 8 and index.max_entries == 1 and index.is_full()
    assert index.resize(80) and path.stat().st_size == 80 and not index.is_full()
    assert not index.resize(87)  # rounds to 80: unchanged
    index.close()
    assert path.read_bytes() == struct.pack(">ii", 3, 10)
    index.close()  # idempotent


def test_max_index_size_below_one_entry_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        OffsetIndex(tmp_path / "0.index", 0, 7)
    assert not (tmp_path / "0.index").exists()
    with pytest.raises(InvalidArgumentError):
        TimeIndex(tmp_path / "0.timeindex", 0, 11)


def test_reopen_takes_length_over_entry_size(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    path.write_bytes(struct.pack(">iiii", 1, 10, 2, 20))
    with OffsetIndex(path, 0, writable=False) as index:
        assert (index.entries, index.max_entries, index.last_offset) == (2, 2, 2)
        assert list(index) == [(1, 10), (2, 20)]


def test_untrimmed_file_reopened_finds_written_entries(tmp_path: Path) -> None:
    """A crashed broker's active index ends in zero slots; they are not entries."""
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 1000, 8 * 4096)
    for i in range(1, 1001):
        index.append(1000 + i, i * 100)
    index.close_handler()  # no trim: the crash
    assert path.stat().st_size == 8 * 4096
    for writable in (False, True):
        with OffsetIndex(path, 1000, 8 * 4096, writable=writable) as reopened:
            assert reopened.entries == 1000 and reopened.max_entries == 4096
            assert reopened.last_offset == 2000
            assert reopened.lookup(10**9) == (2000, 100_000)
            reopened.sanity_check()
            if writable:
                reopened.append(2001, 100_100)  # appends after the real entries
    assert path.stat().st_size == 8 * 1001


def test_untrimmed_file_of_zeros_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "0.timeindex"
    TimeIndex(path, 7, 12 * 100).close_handler()
    with TimeIndex(path, 7, writable=False) as index:
        assert index.entries == 0 and index.last_entry == (-1, 7)
        assert index.lookup(10**12) == (-1, 7)


def test_single_zero_entry_of_a_trimmed_file_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    with OffsetIndex(path, 5, 80) as index:
        index.append(5, 0)
    assert path.stat().st_size == 8
    with OffsetIndex(path, 5, writable=False) as reopened:
        assert reopened.entries == 1 and reopened.entry(0) == (5, 0)


def test_read_only_index(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        OffsetIndex(tmp_path / "missing.index", 0, writable=False)
    assert not (tmp_path / "missing.index").exists()
    path = tmp_path / "0.index"
    with OffsetIndex(path, 0, 80) as index:
        index.append(1, 1)
    with OffsetIndex(path, 0, writable=False) as index:
        before = path.read_bytes()
        with pytest.raises(IllegalStateError):
            index.truncate_to(0)
        with pytest.raises(IllegalStateError):
            index.resize(800)
        index.close()
        assert path.read_bytes() == before
        with pytest.raises(IllegalStateError):
            index.lookup(1)


def test_truncation_zeroes_dropped_slots(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0, 800)
    for i in range(1, 11):
        index.append(i, i)
    index.truncate_to(6)
    index.close_handler()  # crash after truncation
    with OffsetIndex(path, 0, writable=False) as reopened:
        assert reopened.entries == 5 and reopened.last_offset == 5


def test_rename_delete_and_parent_dir(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", 0, 80)
    index.append(1, 1)
    index.rename_to(tmp_path / "0.index.deleted")
    assert index.path.name == "0.index.deleted" and index.path.exists()
    index.append(2, 2)
    assert index.lookup(2) == (2, 2)
    assert index.delete_if_exists()
    assert not index.delete_if_exists()
    other = tmp_path / "sub"
    other.mkdir()
    index.update_parent_dir(other)
    assert index.path == other / "0.index.deleted"


# OffsetIndexTest -------------------------------------------------------------------------------
@pytest.fixture
def offset_index(tmp_path: Path) -> OffsetIndex:
    return OffsetIndex(tmp_path / "test.index", BASE_OFFSET, 30 * 8)


def _monotonic_seq(rng: random.Random, base: int, length: int) -> list[int]:
    seq, last = [], base
    for _ in range(length):
        last += rng.randint(1, 15)
        seq.append(last)
    return seq


def test_random_lookup(offset_index: OffsetIndex) -> None:
    index = offset_index
    assert index.lookup(92) == (BASE_OFFSET, 0), "not present value should return physical offset 0"
    rng = random.Random(42)
    offsets = _monotonic_seq(rng, BASE_OFFSET + 1, index.max_entries)
    positions = _monotonic_seq(rng, 0, index.max_entries)
    for offset, position in zip(offsets, positions, strict=True):
        index.append(offset, position)
    for offset, position in zip(offsets, positions, strict=True):
        assert index.lookup(offset) == (offset, position)
    for target in rng.sample(range(BASE_OFFSET, offsets[-1]), 30):
        slot = bisect_right(offsets, target) - 1
        expected = (BASE_OFFSET, 0) if slot < 0 else (offsets[slot], positions[slot])
        assert index.lookup(target) == expected


def test_lookup_extreme_cases(offset_index: OffsetIndex) -> None:
    index = offset_index
    assert index.lookup(BASE_OFFSET) == (BASE_OFFSET, 0), "lookup on empty file"
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i + 1, i)
    assert index.lookup(BASE_OFFSET) == (BASE_OFFSET, 0)
    assert index.lookup(BASE_OFFSET + index.max_entries) == (
        BASE_OFFSET + index.max_entries,
        index.max_entries - 1,
    )
    assert index.lookup(2**62) == (BASE_OFFSET + index.max_entries, index.max_entries - 1)


def test_entry(offset_index: OffsetIndex) -> None:
    for i in range(offset_index.max_entries):
        offset_index.append(BASE_OFFSET + i, i)
    for i in range(offset_index.max_entries):
        assert offset_index.entry(i) == OffsetPosition(BASE_OFFSET + i, i)


def test_entry_overflow(offset_index: OffsetIndex) -> None:
    with pytest.raises(InvalidArgumentError):
        offset_index.entry(0)
    offset_index.append(BASE_OFFSET + 1, 0)
    for n in (-1, 1):
        with pytest.raises(InvalidArgumentError):
            offset_index.entry(n)


def test_append_too_many(offset_index: OffsetIndex) -> None:
    for i in range(offset_index.max_entries):
        offset_index.append(BASE_OFFSET + i + 1, i)
    assert offset_index.is_full()
    with pytest.raises(InvalidArgumentError) as info:
        offset_index.append(offset_index.max_entries + 1, 1)
    assert type(info.value) is InvalidArgumentError


def test_append_out_of_order(offset_index: OffsetIndex) -> None:
    offset_index.append(51, 0)
    with pytest.raises(InvalidOffsetError):
        offset_index.append(50, 1)
    with pytest.raises(InvalidOffsetError):
        offset_index.append(51, 1)


def test_append_overflow_and_bad_position(offset_index: OffsetIndex) -> None:
    with pytest.raises(IndexOffsetOverflowError):
        offset_index.append(BASE_OFFSET - 1, 0)
    with pytest.raises(IndexOffsetOverflowError):
        offset_index.append(BASE_OFFSET + 2**31, 0)
    assert offset_index.can_append_offset(BASE_OFFSET + 2**31 - 1)
    assert not offset_index.can_append_offset(BASE_OFFSET + 2**31)
    for position in (-1, 2**31):
        with pytest.raises(InvalidArgumentError):
            offset_index.append(BASE_OFFSET + 1, position)
    assert offset_index.entries == 0


def test_fetch_upper_bound_offset(offset_index: OffsetIndex) -> None:
    first = OffsetPosition(BASE_OFFSET, 0)
    second = OffsetPosition(BASE_OFFSET + 1, 10)
    third = OffsetPosition(BASE_OFFSET + 2, 23)
    fourth = OffsetPosition(BASE_OFFSET + 3, 37)
    assert offset_index.fetch_upper_bound_offset(first, 5) is None
    for entry in (first, second, third, fourth):
        offset_index.append(*entry)
    assert offset_index.fetch_upper_bound_offset(first, 5) == second
    assert offset_index.fetch_upper_bound_offset(first, 10) == second
    assert offset_index.fetch_upper_bound_offset(first, 23) == third
    assert offset_index.fetch_upper_bound_offset(first, 22) == third
    assert offset_index.fetch_upper_bound_offset(second, 24) == fourth
    assert offset_index.fetch_upper_bound_offset(fourth, 1) is None
    assert offset_index.fetch_upper_bound_offset(first, 200) is None
    assert offset_index.fetch_upper_bound_offset(second, 200) is None


def test_reopen(offset_index: OffsetIndex) -> None:
    first, sec = OffsetPosition(51, 0), OffsetPosition(52, 1)
    offset_index.append(*first)
    offset_index.append(*sec)
    offset_index.close()
    reopened = OffsetIndex(offset_index.path, BASE_OFFSET)
    assert reopened.lookup(first.offset) == first
    assert reopened.lookup(sec.offset) == sec
    assert reopened.last_offset == sec.offset
    assert reopened.entries == 2
    with pytest.raises(InvalidArgumentError):  # trimmed: full
        reopened.append(53, 1)
    reopened.close()


def test_truncate(tmp_path: Path) -> None:
    with OffsetIndex(tmp_path / "t.index", 0, 10 * 8) as idx:
        idx.truncate()
        for i in range(1, 10):
            idx.append(i, i)
        idx.truncate_to(12)
        assert idx.lookup(10) == (9, 9), "index should be unchanged by truncate past the end"
        assert idx.last_offset == 9
        idx.append(10, 10)
        idx.truncate_to(10)
        assert idx.lookup(10) == (9, 9), "index should be unchanged by truncate at the end"
        assert idx.last_offset == 9
        idx.append(10, 10)
        idx.truncate_to(9)
        assert idx.lookup(10) == (8, 8), "index should truncate off last entry"
        assert idx.last_offset == 8
        idx.append(9, 9)
        idx.truncate_to(5)
        assert idx.lookup(10) == (4, 4)
        assert idx.last_offset == 4
        idx.append(5, 5)
        idx.truncate()
        assert idx.entries == 0, "full truncation should leave no entries"
        assert idx.last_offset == 0


def test_sanity_last_offset_equal_to_base_offset(tmp_path: Path) -> None:
    with OffsetIndex(tmp_path / "t.index", 20, 10 * 8) as idx:
        idx.append(20, 0)
        idx.sanity_check()


def test_reset(offset_index: OffsetIndex) -> None:
    offset_index.append(BASE_OFFSET + 1, 1)
    offset_index.trim_to_valid_size()
    offset_index.reset()
    assert offset_index.entries == 0 and offset_index.max_entries == 30
    assert offset_index.path.stat().st_size == 240


def test_lookup_reads_a_few_kib_of_a_large_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Binary search by positioned reads: a 2 MiB index is not read whole for a lookup."""
    count = 262_144
    path = tmp_path / "big.index"
    path.write_bytes(b"".join(struct.pack(">ii", 3 * i + 1, 100 * i) for i in range(count)))
    with OffsetIndex(path, 0, writable=False) as index:
        assert index.entries == count
        read: list[int] = []
        real_pread = os.pread

        def counting_pread(fd: int, size: int, offset: int) -> bytes:
            read.append(size)
            return real_pread(fd, size, offset)

        monkeypatch.setattr(os, "pread", counting_pread)
        rng = random.Random(7)
        for target in [0, 1, 2, 3 * count, 3 * count - 2, *rng.sample(range(3 * count + 5), 200)]:
            read.clear()
            slot = (target - 1) // 3 if target >= 1 else -1
            slot = min(slot, count - 1)
            expected = (0, 0) if slot < 0 else (3 * slot + 1, 100 * slot)
            assert index.lookup(target) == expected
            assert sum(read) <= 8 * 512 + 8 * 20, sum(read)
        monkeypatch.undo()
        index.sanity_check(segment_size=100 * count)


# Offset index: sanity checks -------------------------------------------------------------------
def _index_file(tmp_path: Path, entries: list[tuple[int, int]], tail: bytes = b"") -> Path:
    path = tmp_path / "00000000000000000100.index"
    path.write_bytes(b"".join(struct.pack(">ii", *e) for e in entries) + tail)
    return path


@pytest.mark.parametrize(
    ("entries", "tail", "position", "words"),
    [
        ([(1, 10), (2, 20)], b"\x00\x00\x00", 16, "not a multiple of the 8-byte"),
        ([(1, 10), (-1, 20)], b"", 8, "below the base offset"),
        ([(-5, 10)], b"", 0, "below the base offset"),
        ([(1, 10), (3, 20), (2, 30)], b"", 16, "not above the previous"),
        ([(1, 10), (1, 20)], b"", 8, "not above the previous"),
        ([(1, 10), (2, 10)], b"", 12, "position 10, not above"),
        ([(1, -1)], b"", 4, "negative position"),
        ([(1, 10), (2, 5000)], b"", 12, "past the end of its 4096-byte segment"),
    ],
)
def test_offset_index_sanity_failures(
    tmp_path: Path, entries: list[tuple[int, int]], tail: bytes, position: int, words: str
) -> None:
    path = _index_file(tmp_path, entries, tail)
    with (
        OffsetIndex(path, 100, writable=False) as index,
        pytest.raises(CorruptIndexError) as info,
    ):
        index.sanity_check(segment_size=4096)
    assert info.value.position == position
    assert info.value.path == str(path)
    assert str(path) in str(info.value) and words in str(info.value)
    assert isinstance(info.value, CorruptRecordError)


def test_file_shrunk_under_the_reader(tmp_path: Path) -> None:
    path = _index_file(tmp_path, [(i, i * 10) for i in range(1, 100)])
    with OffsetIndex(path, 100, writable=False) as index:
        os.truncate(path, 80)
        with pytest.raises(CorruptIndexError) as info:
            index.lookup(10**6)
        assert info.value.path == str(path)


# Time index (TimeIndexTest) --------------------------------------------------------------------
MAX_ENTRIES = 30


@pytest.fixture
def time_index(tmp_path: Path) -> TimeIndex:
    return TimeIndex(tmp_path / "test.timeindex", BASE_OFFSET, MAX_ENTRIES * 12)


def _append_entries(index: TimeIndex, count: int) -> None:
    for i in range(1, count + 1):
        index.maybe_append(i * 10, i * 10 + BASE_OFFSET)


def test_time_index_entry_layout(tmp_path: Path) -> None:
    path = tmp_path / "0.timeindex"
    with TimeIndex(path, 100, 120) as index:
        index.maybe_append(1_700_000_000_000, 105)
    # timestamp int64 | relativeOffset int32, big-endian.
    assert path.read_bytes() == bytes.fromhex("0000018bcfe5680000000005")


def test_time_lookup(time_index: TimeIndex) -> None:
    assert time_index.lookup(100) == TimestampOffset(-1, BASE_OFFSET)
    _append_entries(time_index, MAX_ENTRIES - 1)
    assert time_index.lookup(9) == (-1, BASE_OFFSET)
    assert time_index.lookup(25) == (20, 65)
    assert time_index.lookup(30) == (30, 75)
    assert time_index.lookup(10**15) == (290, 335)


def test_time_entry(time_index: TimeIndex) -> None:
    _append_entries(time_index, MAX_ENTRIES - 1)
    assert time_index.entry(0) == (10, 55)
    assert time_index.entry(1) == (20, 65)
    assert time_index.entry(2) == (30, 75)
    assert time_index.entry(3) == (40, 85)


def test_time_entry_overflow(time_index: TimeIndex) -> None:
    with pytest.raises(InvalidArgumentError):
        time_index.entry(0)


def test_time_truncate(time_index: TimeIndex) -> None:
    _append_entries(time_index, MAX_ENTRIES - 1)
    time_index.truncate()
    assert time_index.entries == 0
    _append_entries(time_index, MAX_ENTRIES - 1)
    time_index.truncate_to(10 + BASE_OFFSET)
    assert time_index.entries == 0
    _append_entries(time_index, 5)
    time_index.truncate_to(36 + BASE_OFFSET)  # between entries: keep (30, 75)
    assert time_index.entries == 3 and time_index.last_entry == (30, 75)
    time_index.truncate_to(30 + BASE_OFFSET)  # exact entry offset: drop it
    assert time_index.entries == 2 and time_index.last_entry == (20, 65)


def test_time_append(time_index: TimeIndex) -> None:
    _append_entries(time_index, MAX_ENTRIES - 1)
    with pytest.raises(InvalidArgumentError):
        time_index.maybe_append(10000, 1000)
    with pytest.raises(InvalidOffsetError):
        time_index.maybe_append(10000, (MAX_ENTRIES - 2) * 10, True)
    time_index.maybe_append(10000, 1000, True)
    assert time_index.entries == MAX_ENTRIES
    with pytest.raises(InvalidArgumentError):  # no slot at all left
        time_index.maybe_append(10001, 1001, True)


def test_time_append_rules(time_index: TimeIndex) -> None:
    time_index.maybe_append(-1, BASE_OFFSET)  # no timestamp: nothing kept
    assert time_index.entries == 0
    time_index.maybe_append(100, BASE_OFFSET + 10)
    time_index.maybe_append(100, BASE_OFFSET + 10)  # the same entry again: ignored
    time_index.maybe_append(100, BASE_OFFSET + 11)  # same timestamp: ignored
    assert time_index.entries == 1
    with pytest.raises(IllegalStateError):
        time_index.maybe_append(99, BASE_OFFSET + 12)


def test_time_is_full_reserves_one_slot(time_index: TimeIndex) -> None:
    assert not time_index.is_full()
    _append_entries(time_index, MAX_ENTRIES - 1)
    assert time_index.is_full()


def test_time_last_entry(time_index: TimeIndex) -> None:
    assert time_index.last_entry == (-1, BASE_OFFSET)
    time_index.maybe_append(1, 1 + BASE_OFFSET)
    assert time_index.last_entry == (1, BASE_OFFSET + 1)


def test_time_resize(time_index: TimeIndex) -> None:
    assert not time_index.resize(MAX_ENTRIES * 12)
    assert time_index.resize(MAX_ENTRIES // 2 * 12)
    assert time_index.resize(MAX_ENTRIES * 2 * 12)


def test_time_resize_below_entries_drops_them(time_index: TimeIndex) -> None:
    _append_entries(time_index, 10)
    assert time_index.resize(5 * 12)
    assert time_index.entries == 5 and time_index.last_entry == (50, 95)


def test_time_sanity_check(tmp_path: Path, time_index: TimeIndex) -> None:
    time_index.sanity_check()
    _append_entries(time_index, 5)
    time_index.sanity_check()
    time_index.close()
    good = time_index.path.read_bytes()

    def corrupt(data: bytes) -> CorruptIndexError:
        time_index.path.write_bytes(data)
        with (
            TimeIndex(time_index.path, BASE_OFFSET, writable=False) as index,
            pytest.raises(CorruptIndexError) as info,
        ):
            index.sanity_check()
        return info.value

    last = len(good) - 12
    # Last offset below the base offset.
    error = corrupt(good[:last] + struct.pack(">qi", 60, -1))
    assert error.position == last + 8 and "below the base offset" in str(error)
    # Last timestamp below the first.
    error = corrupt(good[:last] + struct.pack(">qi", 5, 50))
    assert error.position == last and "timestamp 5" in str(error)
    # Length not a multiple of 12.
    error = corrupt(good[:-1])
    assert error.position == last and "not a multiple of the 12-byte" in str(error)
    # Offsets going back.
    error = corrupt(good[:last] + struct.pack(">qi", 60, 1))
    assert error.position == last + 8
    corrupt_free = good
    time_index.path.write_bytes(corrupt_free)
    with TimeIndex(time_index.path, BASE_OFFSET, writable=False) as index:
        index.sanity_check()


# Property tests: lookups are a search over the entries ----------------------------------------
def _sorted_unique(values: list[int]) -> list[int]:
    return sorted(set(values))


@FUZZ
@given(
    data=st.data(),
    count=st.integers(0, 1500),
    base=st.integers(0, 2**40),
)
def test_offset_lookup_matches_brute_force(
    tmp_path: Path, data: st.DataObject, count: int, base: int
) -> None:
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    relatives = sorted(rng.sample(range(0, 10 * count + 1), count))
    positions = sorted(rng.sample(range(0, 2**31 - 1), count))
    path = tmp_path / f"p{uuid.uuid4().hex}.index"
    with OffsetIndex(path, base, 8 * (count + 1)) as index:
        for rel, pos in zip(relatives, positions, strict=True):
            index.append(base + rel, pos)
        offsets = [base + r for r in relatives]
        targets = data.draw(st.lists(st.integers(base - 5, base + 10 * count + 5), max_size=20))
        for target in [*targets, *offsets[:3], *offsets[-3:]]:
            slot = bisect_right(offsets, target) - 1
            expected = (base, 0) if slot < 0 else (offsets[slot], positions[slot])
            assert index.lookup(target) == expected
        for size_target in data.draw(st.lists(st.integers(0, 2**31), max_size=10)):
            slot = bisect_left(positions, size_target)
            expected_upper = None if slot == count else (offsets[slot], positions[slot])
            assert (
                index.fetch_upper_bound_offset(OffsetPosition(base, 0), size_target)
                == expected_upper
            )
        cut = data.draw(st.integers(base - 1, base + 10 * count + 2))
        index.truncate_to(cut)
        assert list(index) == [(o, p) for o, p in zip(offsets, positions, strict=True) if o < cut]
        index.sanity_check()
    path.unlink()


@FUZZ
@given(data=st.data(), count=st.integers(0, 1500))
def test_time_lookup_matches_brute_force(tmp_path: Path, data: st.DataObject, count: int) -> None:
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    timestamps = sorted(rng.sample(range(0, 2**45), count))
    relatives = sorted(rng.choices(range(0, 2**20), k=count))
    path = tmp_path / f"t{uuid.uuid4().hex}.timeindex"
    with TimeIndex(path, 1000, 12 * (count + 2)) as index:
        for ts, rel in zip(timestamps, relatives, strict=True):
            index.maybe_append(ts, 1000 + rel)
        assert index.entries == count
        for target in [*data.draw(st.lists(st.integers(-5, 2**45), max_size=20)), *timestamps[:2]]:
            slot = bisect_right(timestamps, target) - 1
            expected = (-1, 1000) if slot < 0 else (timestamps[slot], 1000 + relatives[slot])
            assert index.lookup(target) == expected
        index.sanity_check()
    path.unlink()


@st.composite
def index_bytes(draw: st.DrawFn, entry_size: int) -> bytes:
    kind = draw(st.sampled_from(["random", "sorted", "zero_tail"]))
    if kind == "random":
        return draw(st.binary(max_size=entry_size * 40))
    count = draw(st.integers(0, 40))
    values = sorted(draw(st.lists(st.integers(0, 2**31 - 1), min_size=count, max_size=count)))
    if entry_size == 8:
        body = b"".join(struct.pack(">ii", v, v) for v in values)
    else:
        body = b"".join(struct.pack(">qi", v, v) for v in values)
    tail = bytes(entry_size * draw(st.integers(0, 10))) if kind == "zero_tail" else b""
    junk = draw(st.binary(max_size=entry_size - 1))
    return body + tail + junk


@FUZZ
@given(
    content=st.one_of(index_bytes(8), index_bytes(12)),
    targets=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5),
)
def test_random_index_files_only_raise_corrupt_index_error(
    tmp_path: Path, content: bytes, targets: list[int]
) -> None:
    for cls, name in ((OffsetIndex, "f.index"), (TimeIndex, "f.timeindex")):
        path = tmp_path / name
        path.write_bytes(content)
        with cls(path, 100, writable=False) as index:
            for target in targets:
                index.lookup(target)
            list(index)
            try:
                index.sanity_check()
            except CorruptIndexError as error:
                assert error.path == str(path)
                assert error.position is not None and 0 <= error.position <= len(content)


# Rebuilding from batch headers -----------------------------------------------------------------
def _kafka_append(
    batches: list[BatchIndexInfo], interval: int, base: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Kafka's LogSegment.append/recover index logic, transcribed from Java, on plain lists."""
    offset_entries: list[tuple[int, int]] = []
    time_entries: list[tuple[int, int]] = []
    max_ts, max_ts_offset = -1, base
    bytes_since = 0
    for batch in batches:
        if batch.max_timestamp > max_ts:
            max_ts, max_ts_offset = batch.max_timestamp, batch.last_offset
        if bytes_since > interval:
            offset_entries.append((batch.last_offset, batch.position))
            if max_ts > (time_entries[-1][0] if time_entries else -1):
                time_entries.append((max_ts, max_ts_offset))
            bytes_since = 0
        bytes_since += batch.size_in_bytes
    if max_ts > (time_entries[-1][0] if time_entries else -1):
        time_entries.append((max_ts, max_ts_offset))
    return offset_entries, time_entries


@st.composite
def segment_batches(draw: st.DrawFn, base: int = 1000) -> list[BatchIndexInfo]:
    count = draw(st.integers(0, 60))
    batches, position, offset = [], 0, base
    for _ in range(count):
        records = draw(st.integers(1, 5))
        size = draw(st.integers(61, 3000))
        ts = draw(st.integers(-1, 10_000))
        batches.append(BatchIndexInfo(position, offset, offset + records - 1, ts, size))
        position += size
        offset += records + draw(st.integers(0, 3))  # compaction leaves gaps
    return batches


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=segment_batches(), interval=st.sampled_from([0, 100, 4096, 10**9]))
def test_rebuild_matches_kafka(
    tmp_path: Path, batches: list[BatchIndexInfo], interval: int
) -> None:
    offset_path, time_path = tmp_path / "r.index", tmp_path / "r.timeindex"
    for p in (offset_path, time_path):
        p.unlink(missing_ok=True)
    with OffsetIndex(offset_path, 1000, 8 * 100) as oi, TimeIndex(time_path, 1000, 12 * 100) as ti:
        oi.append(1000 + 10**6, 1)  # garbage a rebuild must drop
        result = rebuild_indexes(batches, oi, ti, interval)
        expected_offsets, expected_times = _kafka_append(batches, interval, 1000)
        assert list(oi) == expected_offsets
        assert list(ti) == expected_times
        assert result.batches == len(batches)
        assert result.valid_bytes == (
            batches[-1].position + batches[-1].size_in_bytes if batches else 0
        )
        oi.sanity_check(segment_size=result.valid_bytes)
        ti.sanity_check()
        # Trimmed like Kafka's recovery.
        assert offset_path.stat().st_size == 8 * len(expected_offsets)
        assert time_path.stat().st_size == 12 * len(expected_times)
        # Every lookup lands on a batch at or before the target's batch.
        for batch in batches:
            found = oi.lookup(batch.last_offset)
            assert found.position <= batch.position


def test_rebuild_example(tmp_path: Path) -> None:
    batches = [
        BatchIndexInfo(0, 0, 4, 100, 1000),
        BatchIndexInfo(1000, 5, 9, 90, 1000),
        BatchIndexInfo(2000, 10, 14, 300, 1000),
        BatchIndexInfo(3000, 15, 19, 200, 1000),
        BatchIndexInfo(4000, 20, 24, 250, 1000),
    ]
    with (
        OffsetIndex(tmp_path / "0.index", 0, 800) as oi,
        TimeIndex(tmp_path / "0.timeindex", 0, 1200) as ti,
    ):
        result = rebuild_indexes(batches, oi, ti, 1500)
        # 1000 B (not > 1500), 2000 B > 1500 -> entry for the third batch; then again 2 later.
        assert list(oi) == [(14, 2000), (24, 4000)]
        assert list(ti) == [(300, 14)]
        assert result.max_timestamp_and_offset == (300, 14)
        assert (
            oi.lookup(12) == (0, 0) and oi.lookup(14) == (14, 2000) and oi.lookup(23) == (14, 2000)
        )


def test_rebuild_with_plain_tuples_and_bad_input(tmp_path: Path) -> None:
    with (
        OffsetIndex(tmp_path / "0.index", 0, 800) as oi,
        TimeIndex(tmp_path / "0.timeindex", 0, 1200) as ti,
    ):
        rebuild_indexes([(0, 0, 0, 5, 100), (100, 1, 1, 6, 100)], oi, ti, 0)
        assert list(oi) == [(1, 100)]
        with pytest.raises(InvalidArgumentError):
            rebuild_indexes([(10, 0, 0, 5, 100)], oi, ti, 0)  # does not start at 0
        with pytest.raises(InvalidArgumentError):
            rebuild_indexes([(0, 0, 0, 5, 100), (150, 1, 1, 6, 100)], oi, ti, 0)  # gap
        with pytest.raises(InvalidArgumentError):
            rebuild_indexes([(0, 0, 0, 5)], oi, ti, 0)  # type: ignore[list-item]
        with pytest.raises(IndexOffsetOverflowError):
            rebuild_indexes([(0, 0, 2**31, 5, 100)], oi, ti, 0)
        with pytest.raises(InvalidArgumentError):
            rebuild_indexes([], oi, ti, -1)


def test_rebuild_into_a_full_index_raises_like_kafka(tmp_path: Path) -> None:
    batches = [BatchIndexInfo(i * 100, i, i, i, 100) for i in range(10)]
    with (
        OffsetIndex(tmp_path / "0.index", 0, 16) as oi,
        TimeIndex(tmp_path / "0.timeindex", 0, 1200) as ti,
        pytest.raises(InvalidArgumentError),
    ):
        rebuild_indexes(batches, oi, ti, 0)


def test_segment_indexer_seeded_like_an_active_segment(tmp_path: Path) -> None:
    with (
        OffsetIndex(tmp_path / "0.index", 0, 800) as oi,
        TimeIndex(tmp_path / "0.timeindex", 0, 1200) as ti,
    ):
        ti.maybe_append(500, 3)
        indexer = SegmentIndexer(oi, ti, 10, bytes_since_last_index_entry=50)
        assert indexer.max_timestamp_and_offset == (500, 3)
        indexer.append(400, 9, 100, 60)  # older timestamp: max stays (500, 3)
        assert list(oi) == [(9, 400)] and list(ti) == [(500, 3)]
        indexer.append(460, 12, 600, 60)
        indexer.on_become_inactive()
        assert list(ti) == [(500, 3), (600, 12)]
        with pytest.raises(InvalidArgumentError):
            indexer.append(0, 13, 0, 0)


# Transaction index -----------------------------------------------------------------------------
def test_aborted_txn_bytes_kafka_facts_7_6() -> None:
    expected = bytes.fromhex("00000000000000000007000000000000000a0000000000000014000000000000000a")
    txn = AbortedTxn(producer_id=7, first_offset=10, last_offset=20, last_stable_offset=10)
    assert txn.to_bytes() == expected
    assert AbortedTxn.from_bytes(expected) == txn


def test_transaction_index_file_bytes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    with TransactionIndex(0, path) as index:
        assert not path.exists()  # created by the first append, as in Kafka
        assert index.is_empty() and index.all_aborted_txns() == []
        index.append(AbortedTxn(7, 10, 20, 10))
        index.append(AbortedTxn(983493, 137, 299, 200))
    assert path.read_bytes() == AbortedTxn(7, 10, 20, 10).to_bytes() + struct.pack(
        ">hqqqq", 0, 983493, 137, 299, 200
    )


def test_aborted_txn_field_ranges() -> None:
    AbortedTxn(-(2**63), 0, 2**63 - 1, -1)
    with pytest.raises(InvalidArgumentError):
        AbortedTxn(2**63, 0, 0, 0)


TXNS = [
    AbortedTxn(0, 0, 10, 11),
    AbortedTxn(1, 5, 15, 13),
    AbortedTxn(2, 18, 35, 25),
    AbortedTxn(3, 32, 50, 40),
]


@pytest.fixture
def txn_index(tmp_path: Path) -> TransactionIndex:
    return TransactionIndex(0, tmp_path / "t.txnindex")


def test_position_set_correctly_when_opened(txn_index: TransactionIndex) -> None:
    for txn in TXNS:
        txn_index.append(txn)
    txn_index.close()
    reopened = TransactionIndex(0, txn_index.path)
    another = AbortedTxn(3, 50, 60, 55)
    reopened.append(another)
    assert reopened.all_aborted_txns() == [*TXNS, another]


def test_last_offset_checked_across_reopen(txn_index: TransactionIndex) -> None:
    for txn in TXNS:
        txn_index.append(txn)
    txn_index.close()
    with TransactionIndex(0, txn_index.path) as reopened, pytest.raises(InvalidArgumentError):
        reopened.append(AbortedTxn(9, 40, 50, 45))


def test_txn_sanity_check(txn_index: TransactionIndex) -> None:
    for txn in TXNS:
        txn_index.append(txn)
    txn_index.sanity_check()
    txn_index.close()
    with (
        TransactionIndex(100, txn_index.path) as reopened,
        pytest.raises(CorruptIndexError) as info,
    ):
        reopened.sanity_check()
    assert info.value.position == 0 and "less than start offset 100" in str(info.value)


def test_last_offset_must_increase(txn_index: TransactionIndex) -> None:
    txn_index.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(InvalidArgumentError):
        txn_index.append(AbortedTxn(0, 0, 15, 11))
    with pytest.raises(InvalidArgumentError):
        txn_index.append(AbortedTxn(0, 0, 10, 11))


def test_collect_aborted_transactions(txn_index: TransactionIndex) -> None:
    for txn in TXNS:
        txn_index.append(txn)
    assert txn_index.collect_aborted_txns(0, 100) == TxnIndexSearchResult(TXNS, False)
    assert txn_index.collect_aborted_txns(0, 32) == (TXNS[:3], True)
    assert txn_index.collect_aborted_txns(0, 35) == (TXNS, True)
    assert txn_index.collect_aborted_txns(10, 35) == (TXNS, True)
    assert txn_index.collect_aborted_txns(11, 35) == (TXNS[1:], True)
    assert txn_index.collect_aborted_txns(20, 41) == (TXNS[2:], False)


def test_txn_truncate(txn_index: TransactionIndex) -> None:
    txns = [
        AbortedTxn(0, 0, 10, 2),
        AbortedTxn(1, 5, 15, 16),
        AbortedTxn(2, 18, 35, 25),
        AbortedTxn(3, 32, 50, 40),
    ]
    for txn in txns:
        txn_index.append(txn)
    txn_index.truncate_to(51)
    assert txn_index.collect_aborted_txns(0, 100).aborted_transactions == txns
    txn_index.truncate_to(50)
    assert txn_index.collect_aborted_txns(0, 100).aborted_transactions == txns[:3]
    assert txn_index.path.stat().st_size == 3 * 34
    txn_index.append(AbortedTxn(4, 36, 40, 38))  # last offset is back to 35
    txn_index.reset()
    assert txn_index.collect_aborted_txns(0, 100).aborted_transactions == []
    assert txn_index.path.stat().st_size == 0
    txn_index.append(AbortedTxn(0, 0, 1, 0))


def test_txn_rename_and_parent_dir(tmp_path: Path, txn_index: TransactionIndex) -> None:
    txn_index.append(AbortedTxn(0, 0, 10, 2))
    renamed = tmp_path / "renamed.txnindex"
    txn_index.rename_to(renamed)
    txn_index.append(AbortedTxn(1, 5, 15, 16))
    assert [
        t.first_offset for t in txn_index.collect_aborted_txns(0, 100).aborted_transactions
    ] == [0, 5]
    assert renamed.stat().st_size == 68
    parent = tmp_path / "parent"
    parent.mkdir()
    txn_index.update_parent_dir(parent)
    assert txn_index.path.parent == parent


def test_txn_flush_delete_and_empty(tmp_path: Path) -> None:
    path = tmp_path / "new.txnindex"
    with TransactionIndex(0, path) as index:
        index.flush()
        assert index.is_empty()
        index.append(AbortedTxn(0, 0, 10, 2))
        index.flush()
        assert path.stat().st_size == 34 and not index.is_empty()
        assert index.delete_if_exists()
        assert not path.exists()
    with pytest.raises(IllegalStateError):
        index.append(AbortedTxn(0, 0, 11, 2))


def test_txn_bad_version_and_partial_entry(tmp_path: Path) -> None:
    path = tmp_path / "bad.txnindex"
    good = AbortedTxn(1, 2, 3, 4).to_bytes()
    path.write_bytes(good + struct.pack(">h", 1) + good[2:])
    with TransactionIndex(0, path, writable=False) as index:
        with pytest.raises(CorruptIndexError) as info:
            index.all_aborted_txns()
        assert info.value.position == 34 and "version 1" in str(info.value)
    path.write_bytes(good + good[:10])
    with TransactionIndex(0, path) as index:
        assert index.all_aborted_txns() == [AbortedTxn(1, 2, 3, 4)]  # Kafka skips the tail
        with pytest.raises(CorruptIndexError) as info:
            index.sanity_check()
        assert info.value.position == 34
        with pytest.raises(CorruptIndexError):
            index.append(AbortedTxn(1, 5, 6, 7))
        index.reset()
        index.append(AbortedTxn(1, 5, 6, 7))


@pytest.mark.parametrize(
    ("txns", "words"),
    [
        ([AbortedTxn(1, 20, 10, 0)], "first offset after its last offset"),
        ([AbortedTxn(1, 0, 10, 0), AbortedTxn(1, 0, 10, 0)], "not above the previous"),
    ],
)
def test_txn_sanity_failures(tmp_path: Path, txns: list[AbortedTxn], words: str) -> None:
    path = tmp_path / "x.txnindex"
    path.write_bytes(b"".join(t.to_bytes() for t in txns))
    with (
        TransactionIndex(0, path, writable=False) as index,
        pytest.raises(CorruptIndexError) as info,
    ):
        index.sanity_check()
    assert words in str(info.value) and str(path) in str(info.value)


def test_read_only_txn_index(tmp_path: Path) -> None:
    path = tmp_path / "ro.txnindex"
    with TransactionIndex(0, path, writable=False) as index:
        assert index.is_empty()
        with pytest.raises(IllegalStateError):
            index.append(AbortedTxn(0, 0, 1, 0))
    assert not path.exists()
    path.write_bytes(TXNS[0].to_bytes())
    with TransactionIndex(0, path, writable=False) as index:
        assert index.all_aborted_txns() == TXNS[:1]
        with open(path, "ab") as out:  # a broker appends meanwhile
            out.write(TXNS[1].to_bytes())
        assert index.all_aborted_txns() == TXNS[:2]
        with pytest.raises(IllegalStateError):
            index.truncate_to(0)


def test_decode_aborted_txns() -> None:
    data = b"".join(t.to_bytes() for t in TXNS)
    assert decode_aborted_txns(data) == TXNS
    with pytest.raises(CorruptIndexError) as info:
        decode_aborted_txns(data[:-1], path="remote")
    assert info.value.position == 3 * 34 and info.value.path == "remote"


@st.composite
def txn_lists(draw: st.DrawFn) -> list[AbortedTxn]:
    count = draw(st.integers(0, 30))
    txns, last = [], -1
    for _ in range(count):
        last += draw(st.integers(1, 20))
        first = last - draw(st.integers(0, 30))
        lso = draw(st.integers(max(0, first - 5), last + 10))
        txns.append(AbortedTxn(draw(st.integers(0, 100)), first, last, lso))
    return txns


@FUZZ
@given(txns=txn_lists(), fetch=st.integers(-5, 700), size=st.integers(0, 200))
def test_collect_matches_kafka_loop(
    tmp_path: Path, txns: list[AbortedTxn], fetch: int, size: int
) -> None:
    path = tmp_path / f"{uuid.uuid4().hex}.txnindex"
    upper = fetch + size
    with TransactionIndex(-100, path) as index:
        for txn in txns:
            index.append(txn)
        found, complete = [], False
        for txn in txns:
            if txn.last_offset >= fetch and txn.first_offset < upper:
                found.append(txn)
            if txn.last_stable_offset >= upper:
                complete = True
                break
        assert index.collect_aborted_txns(fetch, upper) == (found, complete)
        assert decode_aborted_txns(path.read_bytes() if txns else b"") == txns
        assert path.exists() == bool(txns)


@FUZZ
@given(content=st.binary(max_size=34 * 6))
def test_random_txn_index_files_only_raise_corrupt_index_error(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "fuzz.txnindex"
    path.write_bytes(content)
    with TransactionIndex(0, path, writable=False) as index:
        for call in (
            index.all_aborted_txns,
            index.sanity_check,
            lambda: index.collect_aborted_txns(0, 10),
        ):
            try:
                call()
            except CorruptIndexError as error:
                assert error.path == str(path)
    with contextlib.suppress(CorruptIndexError):
        decode_aborted_txns(content)
