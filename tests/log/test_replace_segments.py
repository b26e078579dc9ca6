"""``LocalLog.replace_segments``: Kafka's crash-safe swap of cleaned segments into a log.

A compacted log of three sealed segments ``[0, 10)``, ``[10, 20)``, ``[20, 30)`` and an active one
is "cleaned" into two segments (bases 0 and 20) written as a cleaner writes them: ``.cleaned``
files, batches copied with their offsets (so the new segments have holes), indexes rebuilt by
``LogSegment.append``, flushed. The swap is checked as it completes, under concurrent reads, with
bad arguments, and stopped at every durable step as a crash would stop it: the log reopened by
the loader holds exactly the old records or exactly the cleaned ones, never a mix.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tierlog.log.batch import build_batch, read_batch_header
from tierlog.log.files import CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX
from tierlog.log.local_log import LocalLog
from tierlog.log.reader import iter_batches_with_records
from tierlog.log.record import Record
from tierlog.log.segment import LogSegment
from tierlog.spi import IllegalStateError, InvalidArgumentError

NOW = 1_700_000_000_000
CONFIG: dict[str, object] = {
    "cleanup.policy": "compact",
    "segment.index.bytes": 4096,
    "index.interval.bytes": 64,
}
Content = list[tuple[int, bytes | None, bytes | None]]


class SimulatedCrash(Exception):
    """Raised where the process would have died."""


class CrashingLog(LocalLog):
    """A log whose swap stops at ``crash_at`` (step, base offset), as a ``kill -9`` would."""

    crash_at: tuple[str, int] | None = None
    steps: list[tuple[str, int]]

    def _on_swap_step(self, step: str, base_offset: int) -> None:
        self.steps.append((step, base_offset))
        if (step, base_offset) == self.crash_at:
            raise SimulatedCrash(f"{step} {base_offset}")


def key_of(offset: int) -> bytes:
    """Every third offset rewrites one hot key; the others have keys of their own."""
    return b"hot" if offset % 3 == 0 else b"k%d" % offset


def open_log(directory: Path) -> CrashingLog:
    log = CrashingLog.open(directory, CONFIG, clock=lambda: NOW, sync=False)
    assert isinstance(log, CrashingLog)
    log.steps = []
    return log


def build_log(directory: Path) -> CrashingLog:
    log = open_log(directory)
    for offset in range(35):
        if offset in (10, 20, 30):
            log.roll()
        record = Record(0, NOW + offset, key_of(offset), b"v%d" % offset)
        log.append_as_leader(build_batch([record]), 0)
    log.update_high_watermark(log.log_end_offset)
    return log


def contents(log: LocalLog, start: int = 0) -> Content:
    out: Content = []
    offset = start
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20, "log_end").records
        if not data:
            break
        for _, header, records in iter_batches_with_records(data):
            out.extend((r.offset, r.key, r.value) for r in records if r.offset >= offset)
            offset = header.last_offset + 1
    return out


def survivors(old: Content, end: int) -> Content:
    """What a cleaner keeps of ``[0, end)``: the latest record of each key."""
    latest = {key: offset for offset, key, _ in old if offset < end}
    return [r for r in old if r[0] >= end or latest[r[1]] == r[0]]


def write_cleaned(log: LocalLog, base: int, offsets: list[int]) -> LogSegment:
    """A ``.cleaned`` segment holding the batches of ``offsets``, as a cleaner writes one."""
    segment = LogSegment.open(log.dir, base, log.config, suffix=CLEANED_FILE_SUFFIX)
    for offset in offsets:
        data = log.read(offset, 1, "log_end").records
        header = read_batch_header(data, 0)
        assert header.base_offset == offset
        segment.append(header.last_offset, data, [header])
    segment.on_become_inactive_segment()
    segment.flush()
    return segment


def clean(log: LocalLog) -> tuple[list[LogSegment], list[LogSegment], Content]:
    """Two cleaned segments for the three sealed ones, the old segments, the expected content."""
    expected = survivors(contents(log), 30)
    kept = [offset for offset, _, _ in expected if offset < 30]
    new = [
        write_cleaned(log, 0, [o for o in kept if o < 20]),
        write_cleaned(log, 20, [o for o in kept if o >= 20]),
    ]
    return new, log.segments[:3], expected


def leftovers(directory: Path) -> list[str]:
    return sorted(
        p.name
        for p in directory.iterdir()
        if p.name.endswith((".cleaned", ".swap", ".deleted", ".tmp"))
    )


def test_cleaned_segments_take_the_place_of_the_old_ones(tmp_path: Path) -> None:
    log = build_log(tmp_path / "events-0")
    new, old, expected = clean(log)
    snapshots_before = sorted(p.name for p in log.dir.glob("*.snapshot"))
    assert snapshots_before == [f"{o:020d}.snapshot" for o in (10, 20, 30)]
    removed = log.replace_segments(new, old)
    assert [s.base_offset for s in removed] == [10]  # 0 and 20 have same-base replacements
    assert [s.base_offset for s in log.segments] == [0, 20, 30]
    assert log.segments[0] is new[0] and log.segments[1] is new[1]
    assert contents(log) == expected
    assert leftovers(log.dir) == []
    assert all(s.deleted() for s in old)
    # The producer snapshot of the removed segment went; the others stay.
    assert sorted(p.name for p in log.dir.glob("*.snapshot")) == [
        f"{o:020d}.snapshot" for o in (20, 30)
    ]
    assert log.steps == [
        ("swap", 20),
        ("swap", 0),
        ("deleted", 0),
        ("removed", 0),
        ("deleted", 10),
        ("removed", 10),
        ("deleted", 20),
        ("removed", 20),
        ("final", 0),
        ("final", 20),
    ]
    # The offsets do not move and the log goes on.
    assert (log.log_start_offset, log.log_end_offset) == (0, 35)
    log.append_as_leader(build_batch([Record(0, NOW, b"k", b"after")]), 0)
    log.close()
    reopened = open_log(tmp_path / "events-0")
    assert contents(reopened) == [*expected, (35, b"k", b"after")]
    assert reopened.recovery_report.swapped_in == []
    reopened.close()


def test_a_read_in_a_hole_returns_the_next_batch(tmp_path: Path) -> None:
    log = build_log(tmp_path / "events-0")
    new, old, expected = clean(log)
    log.replace_segments(new, old)
    kept = {offset for offset, _, _ in expected}
    for offset in range(35):
        first = contents(log, offset)[0][0]
        assert first == min(o for o in kept if o >= offset)
    log.close()


STEPS = [
    ("swap", 20),
    ("swap", 0),
    ("deleted", 0),
    ("removed", 0),
    ("deleted", 10),
    ("removed", 10),
    ("deleted", 20),
    ("removed", 20),
    ("final", 0),
    ("final", 20),
]


@pytest.mark.parametrize("crash_at", [None, *STEPS], ids=lambda s: "before" if s is None else s)
def test_a_crash_at_each_step_recovers_the_old_or_the_new_log(
    tmp_path: Path, crash_at: tuple[str, int] | None
) -> None:
    """Until the lowest new segment is ``.swap`` the swap is rolled back (the ``.cleaned`` file
    left marks it incomplete); from then on the loader completes it."""
    directory = tmp_path / "events-0"
    log = build_log(directory)
    old_content = contents(log)
    new, old, expected = clean(log)
    if crash_at is not None:
        log.crash_at = crash_at
        with pytest.raises(SimulatedCrash):
            log.replace_segments(new, old)
    log.close_handlers()
    for segment in new:
        segment.close_handlers()
    reopened = open_log(directory)
    rolled_back = crash_at is None or crash_at == ("swap", 20)
    assert contents(reopened) == (old_content if rolled_back else expected)
    assert [s.base_offset for s in reopened.segments] == (
        [0, 10, 20, 30] if rolled_back else [0, 20, 30]
    )
    assert leftovers(directory) == []
    assert reopened.log_end_offset == 35
    reopened.append_as_leader(build_batch([Record(0, NOW, b"k", b"after")]), 0)
    assert contents(reopened, 35) == [(35, b"k", b"after")]
    reopened.close()


def test_a_crash_inside_a_segment_rename_is_recovered(tmp_path: Path) -> None:
    """Files of one segment are renamed one by one: a crash between them leaves a segment with
    some files under each suffix. Before the lowest new segment is complete, the swap rolls
    back; after every old segment went, it completes."""
    # The lowest new segment's .log is .swap but its indexes are still .cleaned: rolled back.
    directory = tmp_path / "a" / "events-0"
    log = build_log(directory)
    old_content = contents(log)
    new, old, _ = clean(log)
    log.crash_at = ("swap", 20)
    with pytest.raises(SimulatedCrash):
        log.replace_segments(new, old)
    log.close_handlers()
    for segment in new:
        segment.close_handlers()
    cleaned_log = new[0].log_path
    cleaned_log.rename(
        cleaned_log.with_name(cleaned_log.name[: -len(CLEANED_FILE_SUFFIX)] + ".swap")
    )
    reopened = open_log(directory)
    assert contents(reopened) == old_content
    assert leftovers(directory) == []
    reopened.close()

    # Every old segment is gone, the lowest new segment's .log has its final name but its
    # indexes are still .swap: completed.
    directory = tmp_path / "b" / "events-0"
    log = build_log(directory)
    new, old, expected = clean(log)
    log.crash_at = ("removed", 20)
    with pytest.raises(SimulatedCrash):
        log.replace_segments(new, old)
    log.close_handlers()
    for segment in new:
        segment.close_handlers()
    swapped = new[0].log_path
    assert swapped.name.endswith(SWAP_FILE_SUFFIX)
    swapped.rename(swapped.with_name(swapped.name[: -len(SWAP_FILE_SUFFIX)]))
    reopened = open_log(directory)
    assert contents(reopened) == expected
    assert leftovers(directory) == []
    reopened.close()


def test_bad_arguments_change_nothing(tmp_path: Path) -> None:
    log = build_log(tmp_path / "events-0")
    before = contents(log)
    new, old, _ = clean(log)
    files = sorted(p.name for p in log.dir.iterdir())
    with pytest.raises(InvalidArgumentError, match="at least one new segment"):
        log.replace_segments([], old)
    with pytest.raises(IllegalStateError, match="active segment 30"):
        log.replace_segments(new, [*old, log.active_segment])
    with pytest.raises(InvalidArgumentError, match=r"consecutive: \[10\] would be left"):
        log.replace_segments(new, [old[0], old[2]])  # 10 must be replaced too
    with pytest.raises(IllegalStateError, match=r"segments \[5\] they replace are not in the"):
        log.replace_segments(new, [*old, LogSegment.open(tmp_path, 5, log.config)])
    overlapping = write_cleaned(log, 10, [10])
    with pytest.raises(InvalidArgumentError, match=r"overlapping another cleaned segment"):
        log.replace_segments([*new, overlapping], old)  # 10 is also in the segment at 0
    overlapping.delete_if_exists()
    with pytest.raises(InvalidArgumentError, match=r"cleaned segment 20 holds offsets up to 29"):
        log.replace_segments(new, old[:2])  # the new segment at 20 covers more than [0, 20)
    with pytest.raises(InvalidArgumentError, match=r"is not a \.cleaned segment"):
        log.replace_segments([log.segments[1]], old[:1])
    assert sorted(p.name for p in log.dir.iterdir()) == files
    assert contents(log) == before
    assert log.steps == []
    log.replace_segments(new, old)  # the same call with the right segments works
    assert [s.base_offset for s in log.segments] == [0, 20, 30]
    log.close()


def test_a_segment_retention_removed_meanwhile_refuses_the_swap(tmp_path: Path) -> None:
    """Kafka skips an old segment retention deleted during the clean; tierlog refuses the swap
    (the cleaned data may cover what the log dropped) and the round is redone."""
    log = build_log(tmp_path / "events-0")
    new, old, _ = clean(log)
    log.delete_records(10)  # the log start passes segment 0, which goes
    assert [s.base_offset for s in log.segments] == [10, 20, 30]
    with pytest.raises(IllegalStateError, match=r"\[0\]"):
        log.replace_segments(new, old)
    assert all(s.has_suffix(CLEANED_FILE_SUFFIX) for s in new)
    for segment in new:
        segment.delete_if_exists()
    log.close()


def test_reads_during_the_swap_see_the_old_or_the_new_segments(tmp_path: Path) -> None:
    """A read returns batches of one segment, under the log's lock: each read during the swap
    is a slice of the old log or of the new one, never of neither."""
    log = build_log(tmp_path / "events-0")
    old_content = contents(log)
    new, old, expected = clean(log)
    offsets = (0, 5, 12, 21, 29)

    def from_(content: Content, offset: int) -> Content:
        return [r for r in content if r[0] >= offset]

    seen: list[tuple[int, str]] = []
    errors: list[BaseException] = []
    progress = threading.Condition()
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                for offset in offsets:
                    data = log.read(offset, 1 << 20, "log_end").records
                    got = [
                        (r.offset, r.key, r.value)
                        for _, _, records in iter_batches_with_records(data)
                        for r in records
                        if r.offset >= offset
                    ]
                    is_old = bool(got) and got == from_(old_content, offset)[: len(got)]
                    is_new = bool(got) and got == from_(expected, offset)[: len(got)]
                    if not is_old and not is_new:
                        raise AssertionError(f"read at {offset} gave {got}")
                    kind = "both" if is_old and is_new else "old" if is_old else "new"
                    with progress:
                        seen.append((offset, kind))
                        progress.notify_all()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
            with progress:
                progress.notify_all()

    thread = threading.Thread(target=reader)
    thread.start()
    with progress:
        assert progress.wait_for(lambda: len(seen) >= 10 or errors, timeout=60)
    log.replace_segments(new, old)
    with progress:
        done = progress.wait_for(
            lambda: errors or all(kind != "old" for _, kind in seen[-2 * len(offsets) :]),
            timeout=60,
        )
    stop.set()
    thread.join(timeout=60)
    assert not errors
    assert done
    assert seen[0] == (0, "old")
    log.close()
