"""Reads across the holes compaction leaves in a local log: an offset compacted away returns the
next batch, within a segment and across a segment boundary (the hole is the end of a segment),
for a consumer (``read_uncommitted``, ``read_committed``) and for a follower (``log_end``, then
``append_as_follower``), as Kafka's fetch does.

The log is built as a cleaner leaves it, with ``build_batch``: records keep their offsets, a
batch may have gaps between its records and a ``last_offset_delta`` past its last record, and a
segment may end before the next one's base offset.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.log.batch import build_batch
from tierlog.log.local_log import LocalLog
from tierlog.log.reader import iter_batches_with_records
from tierlog.log.record import Record

NOW = 1_700_000_000_000
CONFIG: dict[str, object] = {
    "cleanup.policy": "compact",
    "segment.index.bytes": 4096,
    "index.interval.bytes": 1,
}

# (offsets of the surviving records, last offset of the batch): batches as a cleaner leaves them.
SEGMENT_0 = [([0, 2], 3), ([5], 5), ([6], 6)]  # ends at 6; offsets 7-9 were compacted away
SEGMENT_10 = [([11, 13], 14), ([17], 19)]  # starts after a hole, ends with an empty tail
ACTIVE_20 = [([20], 20), ([22, 23], 23)]
SURVIVORS = [0, 2, 5, 6, 11, 13, 17, 20, 22, 23]


def batch(offsets: list[int], last: int, epoch: int = 0) -> bytes:
    records = [Record(o, NOW + o, b"k%d" % o, b"v%d" % o) for o in offsets]
    return build_batch(
        records,
        base_offset=offsets[0],
        last_offset_delta=last - offsets[0],
        partition_leader_epoch=epoch,
    )


def build(directory: Path) -> LocalLog:
    log = LocalLog.open(directory, CONFIG, clock=lambda: NOW, sync=False)
    for offsets, last in SEGMENT_0:
        log.append_as_follower(batch(offsets, last), 0)
    log.roll(10)
    for offsets, last in SEGMENT_10:
        log.append_as_follower(batch(offsets, last), 0)
    log.roll(20)
    for offsets, last in ACTIVE_20:
        log.append_as_follower(batch(offsets, last), 0)
    log.update_high_watermark(log.log_end_offset)
    return log


def first_batch(log: LocalLog, offset: int, isolation: str) -> tuple[int, int]:
    """(base, last offset) of the first batch a read at ``offset`` returns."""
    info = log.read(offset, 1, isolation)  # type: ignore[arg-type]
    header = next(info.batches())
    return header.base_offset, header.last_offset


def first_record(log: LocalLog, offset: int, isolation: str) -> int | None:
    """The first record a consumer gets from ``offset`` on (skipping the records below it and
    moving past each batch's last offset, as Kafka's consumer does)."""
    position = offset
    while position < log.log_end_offset:
        data = log.read(position, 1, isolation).records  # type: ignore[arg-type]
        for _, header, records in iter_batches_with_records(data):
            for record in records:
                if record.offset >= offset:
                    return record.offset
            position = header.last_offset + 1
    return None


BATCHES = [(o[0], last) for o, last in SEGMENT_0 + SEGMENT_10 + ACTIVE_20]


def test_the_log_has_the_holes_it_was_built_with(tmp_path: Path) -> None:
    log = build(tmp_path / "events-0")
    assert [s.base_offset for s in log.segments] == [0, 10, 20]
    assert [s.read_next_offset() for s in log.segments] == [7, 20, 24]
    assert log.log_end_offset == 24
    log.close()


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed", "log_end"])
def test_an_offset_compacted_away_reads_the_next_batch(tmp_path: Path, isolation: str) -> None:
    log = build(tmp_path / "events-0")
    for offset in range(log.log_end_offset):
        # The batch holding the offset, or the next one: the first whose last offset reaches it.
        assert first_batch(log, offset, isolation) == min(b for b in BATCHES if b[1] >= offset), (
            offset
        )
        expected = min(o for o in SURVIVORS if o >= offset)
        assert first_record(log, offset, isolation) == expected, offset
    # The hole at the end of segment 0 (7, 8, 9): the read continues in segment 10, whose
    # first batch starts after a hole too (10).
    info = log.read(8, 1, isolation)  # type: ignore[arg-type]
    assert info.fetch_offset_metadata.segment_base_offset == 10
    assert [h.base_offset for h in info.batches()] == [11]
    if isolation == "read_committed":
        assert info.aborted_transactions == []
    # Past the last record, inside the last batch's empty tail (18, 19): that batch.
    assert [h.base_offset for h in log.read(18, 1, isolation).batches()] == [17]  # type: ignore[arg-type]
    assert log.read(log.log_end_offset, 1, isolation).records == b""  # type: ignore[arg-type]
    log.close()


def test_a_consumer_reads_every_survivor_once(tmp_path: Path) -> None:
    log = build(tmp_path / "events-0")
    seen: list[int] = []
    offset = 0
    while offset < log.high_watermark:
        data = log.read(offset, 64, "read_uncommitted").records
        assert data, f"no progress at {offset}"
        for _, header, records in iter_batches_with_records(data):
            seen.extend(r.offset for r in records if r.offset >= offset)
            offset = header.last_offset + 1
    assert seen == SURVIVORS
    log.close()


def test_a_follower_replicates_the_holes(tmp_path: Path) -> None:
    """A follower fetches from its log end (``log_end``) and appends what it gets: the batches,
    holes and empty tails included, land at the same offsets; it rolls where it is told to."""
    leader = build(tmp_path / "leader" / "events-0")
    follower = LocalLog.open(tmp_path / "follower" / "events-0", CONFIG, sync=False)
    fetches = 0
    while follower.log_end_offset < leader.log_end_offset:
        info = leader.read(follower.log_end_offset, 1, "log_end")
        assert info.records, f"no batch at {follower.log_end_offset}"
        follower.append_as_follower(info.records, 0)
        fetches += 1
    assert fetches == 7  # one per batch, the holes skipped
    assert follower.log_end_offset == leader.log_end_offset == 24

    def batches(log: LocalLog) -> list[bytes]:
        data = log.read(0, 1 << 20, "log_end").records
        out = []
        offset = 0
        while data:
            for _, header, _ in iter_batches_with_records(data):
                offset = header.last_offset + 1
            out.append(data)
            data = log.read(offset, 1 << 20, "log_end").records if offset < 24 else b""
        return out

    assert b"".join(batches(follower)) == b"".join(batches(leader))
    leader.close()
    follower.close()
