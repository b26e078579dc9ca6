"""A tiered compacted topic on a ``Node`` (real ``local`` RSM and ``embedded`` RLMM): keyless
records refused, cleaned segments (with holes) tiered and dropped locally once cleaned, and a
consumer's fetches across the holes, remote then local, each survivor once and no stall where
compaction emptied the end of the last remote segment."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.log.batch import build_batch, read_batch_header
from tierlog.log.files import CLEANED_FILE_SUFFIX
from tierlog.log.local_log import InvalidRecordError, LocalLog
from tierlog.log.record import Record
from tierlog.log.segment import LogSegment
from tierlog.node import Node

HOUR = 3_600_000
TOPIC = {
    "cleanup.policy": "compact",
    "remote.storage.enable": "true",
    "local.retention.ms": str(HOUR),
    "retention.ms": "-1",
}
# What the "cleaner" below keeps of [0, 30): the tail of the last segment (25-29) goes, as
# tombstones past their delete horizon do.
KEPT = [2, 7, 13, 21, 24]


def node_props(tmp_path: Path) -> dict[str, object]:
    return {
        "log.dirs": tmp_path / "logs",
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": str(HOUR),
        "log.retention.check.interval.ms": str(HOUR),
        "remote.fetch.max.wait.ms": "120000",
    }


def clean_by_hand(log: LocalLog, kept: list[int]) -> None:
    """Replace the sealed segments by cleaned ones holding only the batches of ``kept``, as
    the cleaner's output is swapped in (``replace_segments``)."""
    old = log.sealed_segments()
    new = []
    for segment, nxt in zip(old, [*old[1:], log.active_segment], strict=True):
        cleaned = LogSegment.open(
            log.dir, segment.base_offset, log.config, suffix=CLEANED_FILE_SUFFIX
        )
        for offset in (o for o in kept if segment.base_offset <= o < nxt.base_offset):
            data = log.read(offset, 1, "log_end").records
            header = read_batch_header(data, 0)
            cleaned.append(header.last_offset, data, [header])
        cleaned.on_become_inactive_segment()
        cleaned.flush()
        new.append(cleaned)
    log.replace_segments(new, old)


def test_a_consumer_reads_a_cleaned_tiered_topic_across_its_holes(tmp_path: Path) -> None:
    with Node(node_props(tmp_path)) as node:
        node.create_topic("events", partitions=1, configs=TOPIC)
        # The tasks' first runs (at leadership) are over: the next ones are an hour away, so
        # nothing is copied before the segments are cleaned below.
        node.tier_now("events")
        with pytest.raises(InvalidRecordError, match="Compacted topic cannot accept message"):
            node.produce("events", [b"no key"], partition=0)
        log = node.log("events", 0)
        old = node.clock_ms() - 2 * HOUR  # past local.retention.ms
        for offset in range(33):
            if offset in (10, 20, 30):
                log.roll()
            record = Record(0, old, b"k%d" % (offset % 5), b"v%d" % offset)
            node.append_batches("events", 0, build_batch([record]))
        clean_by_hand(log, KEPT)
        assert [s.base_offset for s in log.segments] == [0, 10, 20, 30]
        node.tier_now("events")
        # Copied, but the cleaner offset is not recorded: the local segments stay.
        (status,) = node.status("events")
        assert status.remote_segments == 3
        assert log.local_log_start_offset == 0
        log.set_cleaner_offset(30)
        node.tier_now("events")
        assert log.local_log_start_offset == 30
        assert log.log_start_offset == 0

        seen: list[int] = []
        sources: list[bool] = []
        offset = 0
        while offset < log.high_watermark:
            result = node.fetch("events", 0, offset, max_bytes=1)
            assert result.records or result.next_offset > offset, f"stalled at {offset}"
            seen.extend(r.offset for r in result.records)
            sources.append(result.from_remote)
            offset = result.next_offset
        assert seen == [*KEPT, 30, 31, 32]
        assert True in sources and False in sources
        # The hole at the end of the last remote segment: the fetch goes on in the local log.
        result = node.fetch("events", 0, 25)
        assert [r.offset for r in result.records][:1] == [30]
        assert not result.from_remote
        # In a hole between remote segments: the next remote batch.
        result = node.fetch("events", 0, 8, max_bytes=1)
        assert [r.offset for r in result.records] == [13] and result.from_remote
