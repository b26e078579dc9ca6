"""When a replay shows progress (``ReplayMeter``), with a fake clock (no broker needed)."""

from __future__ import annotations

import io

from tierlog_rlmm_topic.replay import ReplayMeter, ReplayProgressSettings

from tierlog.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def meter(records: int, seconds: float) -> tuple[ReplayMeter, Clock, list[Progress], io.StringIO]:
    clock = Clock()
    shown: list[Progress] = []
    output = io.StringIO()

    def factory(description: str, total: float) -> Progress:
        progress = Progress(description, total, unit="records", file=output, monotonic=clock)
        shown.append(progress)
        return progress

    settings = ReplayProgressSettings(
        records_threshold=records, seconds_threshold=seconds, factory=factory
    )
    return ReplayMeter("md", settings, clock), clock, shown, output


def test_a_short_replay_shows_nothing() -> None:
    replay, _, shown, _ = meter(records=1000, seconds=5)
    replay.add(0, 0, 10)
    replay.position(0, 10)
    replay.update(ready=1, loading=0)
    assert shown == [] and replay.shown == 0 and not replay.active


def test_many_records_show_at_once() -> None:
    replay, _, shown, output = meter(records=1000, seconds=5)
    replay.add(0, 0, 600)
    replay.add(1, 100, 600)
    replay.update(ready=0, loading=2)
    (progress,) = shown
    assert progress.total == 1100
    replay.position(0, 600)
    replay.update(ready=1, loading=1)
    assert progress.done == 600
    assert progress.description == "replaying md: 1/2 partitions ready"
    replay.position(1, 600)
    replay.update(ready=2, loading=0)
    assert progress.done == 1100 and not replay.active
    assert "1,100 / 1,100 records" in output.getvalue()


def test_a_slow_replay_shows_after_the_delay() -> None:
    replay, clock, shown, _ = meter(records=1_000_000, seconds=5)
    replay.add(3, 0, 50)
    replay.update(ready=0, loading=1)
    assert shown == []
    clock.now += 6
    replay.position(3, 20)
    replay.update(ready=0, loading=1)
    (progress,) = shown
    assert progress.done == 20
    replay.drop(3)  # stopped on an unreadable record: the rest is not expected
    replay.update(ready=0, loading=0)
    assert not replay.active
