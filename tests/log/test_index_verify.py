"""``tierlog.log.index_verify``: the findings of checking an index against its segment.

The dump's rendering of these is tested in ``tests/cli/test_log_dump.py``; here the structured
findings themselves: which check failed, for which entry, at which byte of the index, against
what value, and what the segment holds there.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tierlog.log.batch import TimestampType, build_batch, set_max_timestamp
from tierlog.log.index_verify import (
    Check,
    IndexMismatch,
    SegmentReadError,
    verify_offset_index,
    verify_time_index,
)
from tierlog.log.indexer import rebuild_indexes
from tierlog.log.offset_index import OffsetIndex
from tierlog.log.reader import iter_batches
from tierlog.log.record import Record
from tierlog.log.time_index import TimeIndex

T0 = 1_700_000_000_000


def _segment(directory: Path, base: int = 0, batches: int = 4) -> tuple[Path, list[int]]:
    """A segment of ``batches`` batches of two records each; returns it and the positions."""
    data = b"".join(
        build_batch(
            [
                Record(base + 2 * i, T0 + 2 * i, b"k", b"v" * 50),
                Record(base + 2 * i + 1, T0 + 2 * i + 1, b"k", b"v" * 50),
            ],
            base_offset=base + 2 * i,
        )
        for i in range(batches)
    )
    log = directory / f"{base:020d}.log"
    log.write_bytes(data)
    return log, [p for p, _ in iter_batches(log)]


def _offset_index(log: Path, base: int, raw: bytes) -> OffsetIndex:
    path = log.with_suffix(".index")
    path.write_bytes(raw)
    return OffsetIndex(path, base, writable=False)


def _time_index(log: Path, base: int, raw: bytes) -> TimeIndex:
    path = log.with_suffix(".timeindex")
    path.write_bytes(raw)
    return TimeIndex(path, base, writable=False)


def test_indexes_rebuilt_from_the_segment_have_no_findings(tmp_path: Path) -> None:
    log, _ = _segment(tmp_path, base=10)
    with (
        OffsetIndex(log.with_suffix(".index"), 10, 1 << 12) as oi,
        TimeIndex(log.with_suffix(".timeindex"), 10, 1 << 12) as ti,
    ):
        headers = [
            (p, h.base_offset, h.last_offset, h.max_timestamp, h.size_in_bytes)
            for p, h in iter_batches(log)
        ]
        rebuild_indexes(headers, oi, ti, 0)
        assert oi.entries == ti.entries == 3
        assert list(verify_offset_index(oi, log)) == []
        assert list(verify_time_index(ti, log)) == []
        assert list(verify_time_index(ti, log, deep=True)) == []


def test_offset_index_findings_name_entry_byte_and_segment_content(tmp_path: Path) -> None:
    log, pos = _segment(tmp_path)
    size = log.stat().st_size
    raw = struct.pack(
        ">10i",
        3, pos[1],  # right
        4, pos[2],  # the batch at pos[2] ends at 5
        5, pos[2] + 7,  # inside a batch
        6, size,  # past the end
        6, pos[3],  # not above the previous offset, nor its position (size)
    )  # fmt: skip
    with _offset_index(log, 0, raw) as index:
        found = list(verify_offset_index(index, log))
    assert [(f.kind, f.entry, f.position, f.offset) for f in found] == [
        (Check.LOG_OFFSET, 1, 8, 4),
        (Check.LOG_OFFSET, 2, 16, 5),
        (Check.LOG_OFFSET, 3, 24, 6),
        (Check.OFFSET_ORDER, 4, 32, 6),
        (Check.POSITION_ORDER, 4, 32, 6),
        (Check.LOG_OFFSET, 4, 32, 6),
    ]
    wrong, inside, past, order, position, last = found
    assert (wrong.segment_position, wrong.log_offset, wrong.reason) == (pos[2], 5, None)
    assert wrong.message == (
        f"index offset 4, log offset 5: the batch at position {pos[2]} of {log} ends at offset 5"
    )
    assert inside.log_offset is None and inside.reason is not None
    assert inside.reason.startswith(f"no record batch at position {pos[2] + 7}: ")
    assert inside.message == f"{inside.reason} (segment {log})"
    assert past.reason == f"position {size} is past the end of the {size}-byte segment"
    assert order.compared_with == 6 and order.message == (
        "offset 6 is not above the previous entry's 6"
    )
    assert (position.segment_position, position.compared_with) == (pos[3], size)
    assert (last.log_offset, last.compared_with) == (7, None)


def test_offset_index_entry_below_the_base_offset(tmp_path: Path) -> None:
    log, pos = _segment(tmp_path, base=100, batches=1)
    with _offset_index(log, 100, struct.pack(">ii", -1, pos[0])) as index:
        (below, log_offset) = verify_offset_index(index, log)
    assert isinstance(below, IndexMismatch)
    assert (below.kind, below.offset, below.compared_with) == (Check.BELOW_BASE_OFFSET, 99, 100)
    assert below.message == "offset 99 is below the base offset 100"
    assert (log_offset.kind, log_offset.log_offset) == (Check.LOG_OFFSET, 101)


def test_time_index_findings(tmp_path: Path) -> None:
    log, _ = _segment(tmp_path)
    raw = struct.pack(
        ">qiqiqiqi",
        T0 + 1, 1,  # right
        T0 + 50, 3,  # wrong timestamp: the batch ending at 3 has T0+3
        T0 + 60, 4,  # 4 is not the last offset of its batch (4-5)
        T0 + 70, 99,  # past the segment
    )  # fmt: skip
    with _time_index(log, 0, raw) as index:
        found = list(verify_time_index(index, log))
    assert all(isinstance(f, IndexMismatch) for f in found)
    assert [
        (f.kind, f.entry, f.position, f.timestamp, f.log_offset, f.log_timestamp)
        for f in found
        if isinstance(f, IndexMismatch)
    ] == [
        (Check.TIMESTAMP, 1, 12, T0 + 50, 3, T0 + 3),
        (Check.OFFSET_NOT_FOUND, 2, 24, T0 + 60, 5, T0 + 5),
        (Check.OFFSET_NOT_FOUND, 3, 36, T0 + 70, None, None),
    ]
    assert found[2].message == f"offset 99 is not in {log}: no batch ends at or after it"


def test_time_index_order_and_first_timestamp(tmp_path: Path) -> None:
    log, _ = _segment(tmp_path)
    raw = struct.pack(">qiqiqi", -1, 1, T0 + 3, 3, T0 + 1, 1)
    with _time_index(log, 0, raw) as index:
        found = [f for f in verify_time_index(index, log) if isinstance(f, IndexMismatch)]
    kinds = [(f.kind, f.entry, f.compared_with) for f in found]
    assert (Check.TIMESTAMP_ORDER, 0, -1) in kinds  # the first entry is compared with -1
    assert (Check.OFFSET_ORDER, 2, 3) in kinds
    assert (Check.TIMESTAMP_ORDER, 2, T0 + 3) in kinds
    # The walk restarts when the offsets go back: the batch ending at 1 is found again.
    assert not [f for f in found if f.entry == 2 and f.kind is Check.OFFSET_NOT_FOUND]


def test_time_index_past_an_unreadable_batch(tmp_path: Path) -> None:
    log, pos = _segment(tmp_path)
    with open(log, "r+b") as f:
        f.truncate(pos[3] + 70)
    with _time_index(log, 0, struct.pack(">qiqi", T0 + 1, 1, T0 + 7, 7)) as index:
        (found,) = verify_time_index(index, log)
    assert isinstance(found, IndexMismatch)
    assert (found.kind, found.entry, found.log_offset) == (Check.OFFSET_NOT_FOUND, 1, None)
    assert found.reason == f"the segment is unreadable from position {pos[3]}"
    assert "cannot be read past a corrupt batch" in found.message


def test_time_index_deep_compares_with_records_and_reports_undecodable_ones(
    tmp_path: Path,
) -> None:
    first = build_batch([Record(0, T0, b"k", b"v")])
    lying = bytearray(build_batch([Record(1, T0 + 1, b"k", b"v")], base_offset=1))
    set_max_timestamp(lying, TimestampType.CREATE_TIME, T0 + 1000)  # CRC recomputed
    log = tmp_path / f"{0:020d}.log"
    log.write_bytes(first + bytes(lying))
    raw = struct.pack(">qi", T0 + 1000, 1)
    with _time_index(log, 0, raw) as index:
        assert list(verify_time_index(index, log)) == []
        (found,) = verify_time_index(index, log, deep=True)
    assert isinstance(found, IndexMismatch)
    assert (found.kind, found.log_timestamp) == (Check.TIMESTAMP, T0 + 1)
    assert "holds records up to timestamp" in found.message

    # Garbage in the records of the indexed batch: a segment error, not an index mismatch.
    second = len(first)
    data = bytearray(log.read_bytes())
    data[second + 61 :] = b"\xff" * (len(data) - second - 61)
    log.write_bytes(bytes(data))
    with _time_index(log, 0, raw) as index:
        (error,) = verify_time_index(index, log, deep=True)
    assert isinstance(error, SegmentReadError)
    assert error.entry == 0 and error.position is not None
    assert error.message == str(error.error)


def test_missing_segment_raises(tmp_path: Path) -> None:
    log, pos = _segment(tmp_path)
    with _offset_index(log, 0, struct.pack(">ii", 1, pos[1])) as index:
        log.unlink()
        with pytest.raises(FileNotFoundError):
            list(verify_offset_index(index, log))
