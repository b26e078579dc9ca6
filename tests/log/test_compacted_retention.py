"""Local retention of compacted topics, policy by policy (``log_retention``):

- tiered ``compact,delete``: as a tiered delete topic (``local.retention.*``, copied first);
- tiered ``compact``: also only segments entirely below the cleaner offset (the KIP "Tiered
  Storage for compacted topics"); none while the cleaner offset is unknown;
- untiered ``compact``: only segments below the log start offset (Kafka);
- untiered ``compact,delete``: ``retention.ms``/``retention.bytes`` (Kafka).

Each log has three sealed segments ``[0, 10)``, ``[10, 20)``, ``[20, 30)`` of old records and an
active one; the clock is injected, so "old" is exact.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.log.batch import build_batch
from tierlog.log.local_log import LocalLog
from tierlog.log.record import Record

NOW = 1_700_000_000_000
HOUR = 3_600_000


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


def build(directory: Path, clock: Clock, **props: object) -> LocalLog:
    config: dict[str, object] = {"segment.index.bytes": 4096, "retention.ms": -1}
    config.update(props)
    log = LocalLog.open(directory, config, clock=clock, sync=False)
    for offset in range(32):
        if offset in (10, 20, 30):
            log.roll()
        log.append_as_leader(build_batch([Record(0, NOW, b"k%d" % (offset % 4), b"v")]), 0)
    log.update_high_watermark(log.log_end_offset)
    return log


def bases(log: LocalLog) -> list[int]:
    return [s.base_offset for s in log.segments]


TIERED_COMPACT: dict[str, object] = {
    "cleanup.policy": "compact",
    "remote.storage.enable": True,
    "local.retention.ms": HOUR,
}


def test_tiered_compact_keeps_what_the_cleaner_has_not_been_over(tmp_path: Path) -> None:
    clock = Clock()
    log = build(tmp_path / "events-0", clock, **TIERED_COMPACT)
    clock.now += 2 * HOUR  # every sealed segment is past local retention
    # Copied, old, but never cleaned: kept.
    assert log.delete_retention_segments(29) == 0
    assert bases(log) == [0, 10, 20, 30]
    # Cleaned up to 20: the segments whose last offset is below 20 go; the one holding 20 stays.
    log.set_cleaner_offset(20)
    assert log.delete_retention_segments() == 2
    assert bases(log) == [20, 30]
    assert (log.log_start_offset, log.local_log_start_offset) == (0, 20)  # the rest is remote
    log.close()


def test_tiered_compact_still_needs_the_copy_and_the_age(tmp_path: Path) -> None:
    clock = Clock()
    young = build(tmp_path / "events-0", clock, **TIERED_COMPACT)
    young.set_cleaner_offset(30)
    # Cleaned and copied, but younger than local.retention.ms.
    assert young.delete_retention_segments(29) == 0
    young.close()

    old = build(tmp_path / "events-1", clock, **TIERED_COMPACT)
    clock.now += 2 * HOUR
    old.set_cleaner_offset(30)
    # Cleaned and old, copied only up to 15: the copied gate stops at segment 10.
    assert old.delete_retention_segments(15) == 1
    assert bases(old) == [10, 20, 30]
    # The active segment is never cleaned, so retention never rolls it to delete it.
    assert old.delete_retention_segments(old.log_end_offset) == 2
    assert bases(old) == [30]
    assert old.active_segment.size > 0
    old.close()


def test_tiered_compact_by_local_size(tmp_path: Path) -> None:
    clock = Clock()
    props = {**TIERED_COMPACT, "local.retention.ms": -2, "local.retention.bytes": 1}
    log = build(tmp_path / "events-0", clock, **props)
    assert log.delete_retention_segments(29) == 0  # no cleaner offset
    log.set_cleaner_offset(10)
    assert log.delete_retention_segments() == 1
    assert bases(log) == [10, 20, 30]
    log.close()


@pytest.mark.parametrize("cleaner_offset", [None, 0, 30])
def test_tiered_compact_delete_is_a_tiered_delete_topic(
    tmp_path: Path, cleaner_offset: int | None
) -> None:
    """The cleaner offset plays no part: local retention and the copied gate decide."""
    clock = Clock()
    log = build(
        tmp_path / "events-0", clock, **{**TIERED_COMPACT, "cleanup.policy": "compact,delete"}
    )
    log.set_cleaner_offset(cleaner_offset)
    clock.now += 2 * HOUR
    assert log.delete_retention_segments(19) == 2
    assert bases(log) == [20, 30]
    assert log.local_log_start_offset == 20 and log.log_start_offset == 0
    log.close()


def test_untiered_compact_deletes_only_below_the_log_start(tmp_path: Path) -> None:
    clock = Clock()
    log = build(
        tmp_path / "events-0",
        clock,
        **{"cleanup.policy": "compact", "retention.ms": HOUR, "retention.bytes": 1},
    )
    log.set_cleaner_offset(30)
    clock.now += 2 * HOUR
    assert log.delete_retention_segments() == 0
    assert bases(log) == [0, 10, 20, 30]
    log.delete_records(15)  # the log start passes segment 0 only
    assert bases(log) == [10, 20, 30]
    assert log.delete_retention_segments() == 0
    log.close()


@pytest.mark.parametrize(
    ("props", "left"),
    [
        # Every segment is old, the active one too: it is rolled and deleted (Kafka).
        ({"retention.ms": HOUR}, [32]),
        # Whole segments, oldest first, while what goes still leaves the log >= the limit.
        ({"retention.bytes": 1000}, [10, 20, 30]),
    ],
)
def test_untiered_compact_delete_applies_total_retention(
    tmp_path: Path, props: dict[str, object], left: list[int]
) -> None:
    clock = Clock()
    log = build(tmp_path / "events-0", clock, **{"cleanup.policy": "compact,delete", **props})
    assert log.segments[0].size < 1000 < log.size() - log.segments[0].size
    clock.now += 2 * HOUR
    log.delete_retention_segments()
    assert bases(log) == left
    assert log.log_start_offset == left[0]  # untiered: the log start follows
    log.close()


def test_tiered_compact_with_copy_disabled_deletes_only_below_the_log_start(
    tmp_path: Path,
) -> None:
    """With ``remote.log.copy.disable`` local retention is total retention, and a compacted
    topic without ``delete`` keeps everything but what is below the log start (Kafka)."""
    clock = Clock()
    props = {**TIERED_COMPACT, "remote.log.copy.disable": True, "local.retention.ms": -2}
    log = build(tmp_path / "events-0", clock, **props)
    log.set_cleaner_offset(30)
    clock.now += 2 * HOUR
    assert log.delete_retention_segments(29) == 0
    assert bases(log) == [0, 10, 20, 30]
    log.close()
