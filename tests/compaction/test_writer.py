"""``CleanedSegmentWriter``: the ``.cleaned`` segment a group of a round is written into.

Its files are named by the group's first base offset with the ``.cleaned`` suffix; its offset
and time indexes get entries by Kafka's ``LogSegment.append`` rule (an entry for a batch when
more than ``index.interval.bytes`` were appended since the last one, so never for the first
batch), checked here against a model of that rule written from the index files' bytes and
against ``tierlog.log.index_verify``; its transaction index holds exactly the entries given; it
is sealed with the final time index entry and the mtime of the group's last source segment.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from tierlog.compaction.rewrite import empty_batch_header
from tierlog.compaction.writer import CLEANED_SUFFIX, CleanedSegmentWriter
from tierlog.log.files import log_file, offset_index_file, time_index_file, transaction_index_file
from tierlog.log.index_verify import verify_offset_index, verify_time_index
from tierlog.log.log_config import LogConfig
from tierlog.log.segment import LogSegment
from tierlog.log.txn_index import AbortedTxn, decode_aborted_txns

from ._logs import NOW, Batch, data_batch, kv, read_buffer_batches, read_file_batches

MTIME = NOW - 123_456


def config(interval: int) -> LogConfig:
    return LogConfig.from_props({"index.interval.bytes": interval, "segment.index.bytes": 4096})


def expected_indexes(
    batches: list[Batch], base: int, interval: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Kafka's LogSegment.append index rule and onBecomeInactiveSegment, from the batches:
    (offset entries as (relative offset, position), time entries as (timestamp, relative
    offset))."""
    offset_entries: list[tuple[int, int]] = []
    time_entries: list[tuple[int, int]] = []
    since = 0
    max_ts, max_ts_offset = -1, base
    last_time = -1

    def time_append(ts: int, off: int) -> None:
        nonlocal last_time
        if ts > last_time:
            time_entries.append((ts, off - base))
            last_time = ts

    for b in batches:
        h = b.header
        if h.max_timestamp > max_ts:
            max_ts, max_ts_offset = h.max_timestamp, h.last_offset
        if since > interval:
            offset_entries.append((h.last_offset - base, b.position))
            time_append(max_ts, max_ts_offset)
            since = 0
        since += h.size_in_bytes
    time_append(max_ts, max_ts_offset)
    return offset_entries, time_entries


def index_file_entries(
    directory: Path, base: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    raw_offsets = offset_index_file(directory, base).read_bytes()
    raw_times = time_index_file(directory, base).read_bytes()
    offsets = [struct.unpack_from(">ii", raw_offsets, i) for i in range(0, len(raw_offsets), 8)]
    times = [struct.unpack_from(">qi", raw_times, i) for i in range(0, len(raw_times), 12)]
    return offsets, times


def survivors() -> list[bytes]:
    """Batches as a clean leaves them: gaps in offsets, an emptied header, timestamps that go
    down and up, one batch much larger than the others."""
    empty_header = data_batch(30, kv("e"), pid=5, epoch=0, seq=0, ts=NOW - 60)
    return [
        data_batch(10, kv("a", "x" * 10), ts=NOW - 50),
        data_batch(12, kv("b", "y" * 200), ts=NOW - 70, offsets=[13], last_offset_delta=3),
        data_batch(20, kv("c"), kv("d"), ts=[NOW - 10, NOW - 90]),
        empty_batch_header(read_buffer_batches(empty_header)[0].header),
        data_batch(31, kv("f", "z" * 30), ts=NOW - 5),
        data_batch(40, kv("g"), ts=NOW - 20),
        data_batch(41, kv("h", "w" * 500), ts=NOW - 1),
    ]


def write(directory: Path, base: int, interval: int, batches: list[bytes], **kw: object) -> None:
    writer = CleanedSegmentWriter(directory, base, config(interval))
    entries = kw.get("entries", {})
    assert isinstance(entries, dict)
    for data in batches:
        (b,) = read_buffer_batches(data)
        writer.append(b.header, data, entries.get(b.header.base_offset))
    assert writer.batches == len(batches)
    assert writer.size == sum(len(d) for d in batches)
    segment = writer.finish(MTIME)
    segment.close()


@pytest.mark.parametrize("interval", [0, 1, 100, 300, 10_000])
def test_indexes_follow_the_index_interval_rule(tmp_path: Path, interval: int) -> None:
    batches = survivors()
    write(tmp_path, 10, interval, batches)
    log = log_file(tmp_path, 10, CLEANED_SUFFIX)
    assert log.read_bytes() == b"".join(batches)
    # Read back as the final segment files to compare the index bytes.
    for make in (log_file, offset_index_file, time_index_file):
        os.rename(make(tmp_path, 10, CLEANED_SUFFIX), make(tmp_path, 10))
    got = index_file_entries(tmp_path, 10)
    expected = expected_indexes(read_file_batches(log_file(tmp_path, 10)), 10, interval)
    assert got == expected
    # The first batch is never indexed.
    assert all(pos > 0 for _, pos in got[0])
    if interval == 0:
        assert len(got[0]) == len(batches) - 1
    if interval == 10_000:
        assert got[0] == []
        # Only the final time index entry: the largest timestamp and its batch's last offset.
        assert got[1] == [(NOW - 1, 41 - 10)]


def test_indexes_pass_the_index_verifier(tmp_path: Path) -> None:
    write(tmp_path, 10, 1, survivors())
    segment = LogSegment.open(tmp_path, 10, config(1), suffix=CLEANED_SUFFIX)
    try:
        assert segment.offset_index.entries > 0 and segment.time_index.entries > 0
        assert list(verify_offset_index(segment.offset_index, segment.log_path)) == []
        assert list(verify_time_index(segment.time_index, segment.log_path, deep=True)) == []
    finally:
        segment.close()


def test_cleaned_files_named_by_the_group_base_and_sealed(tmp_path: Path) -> None:
    entry = AbortedTxn(5, 3, 30, 3)
    write(tmp_path, 10, 1, survivors(), entries={30: entry})
    names = sorted(os.listdir(tmp_path))
    assert names == [
        "00000000000000000010.index.cleaned",
        "00000000000000000010.log.cleaned",
        "00000000000000000010.timeindex.cleaned",
        "00000000000000000010.txnindex.cleaned",
    ]
    # The transaction index holds exactly the entries the clean kept.
    txn = transaction_index_file(tmp_path, 10, CLEANED_SUFFIX).read_bytes()
    assert decode_aborted_txns(txn) == [entry]
    # The mtime of the group's last source segment.
    for make in (log_file, offset_index_file, time_index_file):
        assert os.stat(make(tmp_path, 10, CLEANED_SUFFIX)).st_mtime_ns // 1_000_000 == MTIME
    # Indexes are trimmed to their entries (not the preallocated segment.index.bytes).
    assert offset_index_file(tmp_path, 10, CLEANED_SUFFIX).stat().st_size % 8 == 0
    assert offset_index_file(tmp_path, 10, CLEANED_SUFFIX).stat().st_size < 4096
    assert time_index_file(tmp_path, 10, CLEANED_SUFFIX).stat().st_size < 4096


def test_no_transaction_index_entries_without_a_kept_abort(tmp_path: Path) -> None:
    write(tmp_path, 10, 1, survivors())
    path = transaction_index_file(tmp_path, 10, CLEANED_SUFFIX)
    assert not path.exists() or path.read_bytes() == b""


def test_an_empty_group_is_a_zero_byte_segment(tmp_path: Path) -> None:
    writer = CleanedSegmentWriter(tmp_path, 7, config(1))
    segment = writer.finish(MTIME)
    assert segment.size == 0 and writer.batches == 0
    segment.close()
    assert log_file(tmp_path, 7, CLEANED_SUFFIX).stat().st_size == 0
    assert offset_index_file(tmp_path, 7, CLEANED_SUFFIX).stat().st_size == 0


def test_stale_cleaned_files_are_replaced(tmp_path: Path) -> None:
    # A crashed attempt left a .cleaned segment: the writer starts from nothing.
    for make in (log_file, offset_index_file, time_index_file, transaction_index_file):
        make(tmp_path, 10, CLEANED_SUFFIX).write_bytes(b"\x01" * 48)
    batches = survivors()[:2]
    write(tmp_path, 10, 1, batches)
    assert log_file(tmp_path, 10, CLEANED_SUFFIX).read_bytes() == b"".join(batches)
    txn = transaction_index_file(tmp_path, 10, CLEANED_SUFFIX)
    assert not txn.exists() or txn.read_bytes() == b""


def test_batches_must_come_in_offset_order(tmp_path: Path) -> None:
    writer = CleanedSegmentWriter(tmp_path, 0, config(1))
    first = data_batch(5, kv("a"), kv("b"))
    (b,) = read_buffer_batches(first)
    writer.append(b.header, first, None)
    again = data_batch(6, kv("c"))
    (b2,) = read_buffer_batches(again)
    with pytest.raises(Exception, match="out of order"):
        writer.append(b2.header, again, None)
    writer.abort()


def test_abort_removes_what_was_written(tmp_path: Path) -> None:
    writer = CleanedSegmentWriter(tmp_path, 0, config(0))
    for i, data in enumerate(survivors()[:3]):
        (b,) = read_buffer_batches(data)
        writer.append(b.header, data, AbortedTxn(1, 0, i, 0))
    writer.abort()
    assert os.listdir(tmp_path) == []
