"""``ScheduledPool``: Kafka's ``scheduleWithFixedDelay`` contract plus trigger, cancel, resize.

Real threads and real (short) delays: each test bounds its waits and finishes well under a
second. Pools get a name unique to the test so ``threading.enumerate()`` can find their threads.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tierlog.rlm.scheduler import ScheduledPool, ScheduledTask
from tierlog.spi import InvalidArgumentError

_names = itertools.count()


def wait_until(condition: Callable[[], bool], timeout_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


def pool_threads(pool: ScheduledPool) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"{pool.name}-")]


@pytest.fixture
def make_pool() -> Iterator[Callable[[int], ScheduledPool]]:
    pools: list[ScheduledPool] = []

    def make(threads: int) -> ScheduledPool:
        pool = ScheduledPool(f"test-sched-{next(_names)}", threads)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        assert pool.close(timeout=2.0)


def test_fixed_delay_counts_from_the_end_of_each_run_and_never_overlaps(
    make_pool: Callable[[int], ScheduledPool],
) -> None:
    pool = make_pool(3)
    lock = threading.Lock()
    starts: list[float] = []
    ends: list[float] = []
    active = 0
    max_active = 0

    def run() -> None:
        nonlocal active, max_active
        with lock:
            active += 1
            max_active = max(max_active, active)
            starts.append(time.monotonic())
        time.sleep(0.04)
        with lock:
            ends.append(time.monotonic())
            active -= 1

    task = pool.schedule_with_fixed_delay(run, 0.03)
    # Triggers while it runs must not start a second, overlapping run on the other threads.
    for _ in range(10):
        task.trigger()
        time.sleep(0.005)
    triggered_runs = task.runs
    assert task.wait_runs(triggered_runs + 3, timeout=2.0)
    assert task.cancel(wait=True, timeout=2.0)
    assert max_active == 1
    # A run that follows a trigger starts right after the previous one; once the triggers
    # stop, a run starts no earlier than the delay after the previous run *ended*.
    gaps = [start - end for end, start in zip(ends, starts[1:], strict=False)]
    assert all(gap >= 0 for gap in gaps)
    assert gaps[-1] >= 0.03
    assert min(gaps) < 0.03  # some run followed a trigger at once


def test_fixed_delay_without_triggers(make_pool: Callable[[int], ScheduledPool]) -> None:
    pool = make_pool(2)
    starts: list[float] = []
    ends: list[float] = []

    def run() -> None:
        starts.append(time.monotonic())
        time.sleep(0.03)
        ends.append(time.monotonic())

    task = pool.schedule_with_fixed_delay(run, 0.02)
    assert task.wait_runs(4, timeout=2.0)
    task.cancel(wait=True)
    for end, start in zip(ends, starts[1:], strict=False):
        assert start - end >= 0.02  # from the end: a fixed rate would start 0.02 after start


def test_initial_delay(make_pool: Callable[[int], ScheduledPool]) -> None:
    pool = make_pool(1)
    ran = threading.Event()
    started_at: list[float] = []

    def run() -> None:
        started_at.append(time.monotonic())
        ran.set()

    scheduled_at = time.monotonic()
    pool.schedule_with_fixed_delay(run, 60.0, initial_delay_s=0.15)
    assert not ran.wait(0.1)
    assert ran.wait(1.0)
    assert started_at[0] - scheduled_at >= 0.15
    # Without an initial delay the first run is immediate.
    immediate = threading.Event()
    pool.schedule_with_fixed_delay(immediate.set, 60.0)
    assert immediate.wait(0.5)


def test_trigger_runs_now_and_a_trigger_during_a_run_gives_exactly_one_more(
    make_pool: Callable[[int], ScheduledPool],
) -> None:
    pool = make_pool(2)
    entered = threading.Event()
    release = threading.Event()

    def run() -> None:
        if not entered.is_set():
            entered.set()
            assert release.wait(2.0)

    task = pool.schedule_with_fixed_delay(run, 60.0, initial_delay_s=60.0)
    time.sleep(0.03)
    assert task.runs == 0
    task.trigger()
    assert entered.wait(1.0)
    assert task.running
    for _ in range(3):  # several triggers while running: remembered once
        pool.trigger(task)
    release.set()
    assert task.wait_runs(2, timeout=1.0)
    time.sleep(0.1)
    assert task.runs == 2
    assert not task.running


def test_cancel_stops_future_runs(make_pool: Callable[[int], ScheduledPool]) -> None:
    pool = make_pool(2)
    task = pool.schedule_with_fixed_delay(lambda: None, 0.005)
    assert task.wait_runs(3, timeout=1.0)
    assert task.cancel(wait=True)
    assert task.cancelled
    runs = task.runs
    task.trigger()  # a trigger does not revive a cancelled task
    time.sleep(0.05)
    assert task.runs == runs
    assert "cancelled" in repr(task)


def test_cancel_with_wait_waits_for_the_run_in_progress(
    make_pool: Callable[[int], ScheduledPool],
) -> None:
    pool = make_pool(1)
    entered = threading.Event()
    release = threading.Event()
    finished = threading.Event()

    def run() -> None:
        entered.set()
        release.wait(2.0)
        finished.set()

    task = pool.schedule_with_fixed_delay(run, 60.0)
    assert entered.wait(1.0)
    # A bounded wait that expires says so, and the task is cancelled all the same.
    assert task.cancel(wait=True, timeout=0.05) is False
    assert task.cancelled and task.running
    timer = threading.Timer(0.05, release.set)
    timer.start()
    try:
        assert task.cancel(wait=True, timeout=2.0) is True
        assert finished.is_set()  # returned only once the run had ended
        assert not task.running
    finally:
        timer.cancel()
    assert task.runs == 1


def test_cancel_with_wait_from_inside_the_task_does_not_deadlock(
    make_pool: Callable[[int], ScheduledPool],
) -> None:
    pool = make_pool(1)
    results: list[bool] = []
    holder: list[ScheduledTask] = []
    ready = threading.Event()

    def run() -> None:
        ready.wait(1.0)
        results.append(holder[0].cancel(wait=True, timeout=1.0))

    holder.append(pool.schedule_with_fixed_delay(run, 0.001))
    started = time.monotonic()
    ready.set()
    assert holder[0].wait_runs(1, timeout=1.0)
    assert time.monotonic() - started < 0.9  # did not sit out its own timeout
    assert results == [True]
    time.sleep(0.03)
    assert holder[0].runs == 1


def test_a_raising_task_stays_scheduled_and_its_thread_survives(
    make_pool: Callable[[int], ScheduledPool],
) -> None:
    pool = make_pool(1)
    threads = pool_threads(pool)
    assert len(threads) == 1

    def boom() -> None:
        raise RuntimeError("task failure")

    task = pool.schedule_with_fixed_delay(boom, 0.005)
    assert task.wait_runs(3, timeout=1.0)
    assert not task.cancelled
    assert pool_threads(pool) == threads and threads[0].is_alive()
    # The same thread still runs other tasks.
    other = threading.Event()
    pool.schedule_with_fixed_delay(other.set, 60.0)
    assert other.wait(1.0)


def test_resize_up_and_down(make_pool: Callable[[int], ScheduledPool]) -> None:
    pool = make_pool(1)
    barrier = threading.Barrier(3, timeout=1.0)
    passed: list[str] = []

    def meet() -> None:
        barrier.wait()
        passed.append(threading.current_thread().name)

    pool.resize(3)
    assert pool.size == 3
    assert len(pool_threads(pool)) == 3
    # Three runs that can only end together: they need three threads at once.
    tasks = [pool.schedule_with_fixed_delay(meet, 60.0) for _ in range(3)]
    assert all(t.wait_runs(1, timeout=1.0) for t in tasks)
    assert len(set(passed)) == 3

    pool.resize(1)
    assert pool.size == 1
    wait_until(lambda: len(pool_threads(pool)) == 1)
    names: set[str] = set()
    more = [
        pool.schedule_with_fixed_delay(lambda: names.add(threading.current_thread().name), 60.0)
        for _ in range(3)
    ]
    assert all(t.wait_runs(1, timeout=1.0) for t in more)
    assert names == {pool_threads(pool)[0].name}
    with pytest.raises(InvalidArgumentError):
        pool.resize(0)


def test_shrinking_waits_for_the_runs_in_progress(
    make_pool: Callable[[int], ScheduledPool],
) -> None:
    pool = make_pool(2)
    release = threading.Event()
    entered = threading.Barrier(3, timeout=1.0)

    def block() -> None:
        entered.wait()
        release.wait(2.0)

    tasks = [pool.schedule_with_fixed_delay(block, 60.0) for _ in range(2)]
    entered.wait()
    pool.resize(1)
    time.sleep(0.03)
    assert all(t.running for t in tasks)  # a run in progress is not interrupted
    assert len(pool_threads(pool)) == 2
    release.set()
    wait_until(lambda: len(pool_threads(pool)) == 1)
    assert all(t.runs == 1 for t in tasks)


def test_idle_percent_reflects_work(make_pool: Callable[[int], ScheduledPool]) -> None:
    pool = make_pool(1)
    time.sleep(0.05)
    idle = pool.idle_percent()
    assert 0.9 <= idle <= 1.0

    # A run in progress counts as busy time, even before it ends.
    entered = threading.Event()
    release = threading.Event()

    def block() -> None:
        entered.set()
        release.wait(2.0)

    task = pool.schedule_with_fixed_delay(block, 60.0)
    assert entered.wait(1.0)
    pool.idle_percent()  # start a fresh measurement
    time.sleep(0.1)
    busy = pool.idle_percent()
    release.set()
    task.cancel(wait=True)
    assert 0.0 <= busy <= 0.1

    # Back to waiting: mostly idle again, even while the thread has not woken up yet.
    pool.idle_percent()
    time.sleep(0.1)
    assert 0.9 <= pool.idle_percent() <= 1.0


def test_idle_percent_with_several_threads(make_pool: Callable[[int], ScheduledPool]) -> None:
    pool = make_pool(2)
    entered = threading.Event()
    release = threading.Event()

    def block() -> None:
        entered.set()
        release.wait(2.0)

    task = pool.schedule_with_fixed_delay(block, 60.0)
    assert entered.wait(1.0)
    pool.idle_percent()
    time.sleep(0.1)
    half = pool.idle_percent()  # one thread busy, one waiting
    release.set()
    task.cancel(wait=True)
    assert 0.35 <= half <= 0.65


def test_close_ends_threads_and_cancels_every_task(
    make_pool: Callable[[int], ScheduledPool],
) -> None:
    pool = make_pool(3)
    assert len(pool_threads(pool)) == 3
    entered = threading.Event()
    release = threading.Event()
    finished = threading.Event()

    def block() -> None:
        entered.set()
        release.wait(2.0)
        finished.set()

    running = pool.schedule_with_fixed_delay(block, 0.01)
    waiting = pool.schedule_with_fixed_delay(lambda: None, 60.0, initial_delay_s=60.0)
    assert entered.wait(1.0)
    timer = threading.Timer(0.05, release.set)
    timer.start()
    try:
        assert pool.close(timeout=2.0)
    finally:
        timer.cancel()
    assert finished.is_set()  # the run in progress ended before close returned
    assert pool_threads(pool) == []
    assert waiting.cancelled and waiting.runs == 0
    assert running.cancelled and running.runs == 1
    with pytest.raises(InvalidArgumentError):
        pool.schedule_with_fixed_delay(lambda: None, 1.0)
    pool.trigger(waiting)  # no-op once closed
    pool.resize(4)  # starts no thread once closed
    assert pool_threads(pool) == []
    assert pool.close(timeout=1.0)  # idempotent


def test_close_with_a_timeout_reports_a_run_that_does_not_end(
    make_pool: Callable[[int], ScheduledPool],
) -> None:
    pool = make_pool(1)
    entered = threading.Event()
    release = threading.Event()

    def block() -> None:
        entered.set()
        release.wait(2.0)

    pool.schedule_with_fixed_delay(block, 60.0)
    assert entered.wait(1.0)
    assert pool.close(timeout=0.05) is False
    release.set()
    wait_until(lambda: pool_threads(pool) == [])


def test_close_from_inside_a_task_does_not_wait_for_itself(
    make_pool: Callable[[int], ScheduledPool],
) -> None:
    pool = make_pool(2)
    results: list[bool] = []
    done = threading.Event()

    def run() -> None:
        results.append(pool.close(timeout=1.0))
        done.set()

    started = time.monotonic()
    pool.schedule_with_fixed_delay(run, 60.0)
    assert done.wait(2.0)
    assert time.monotonic() - started < 0.9
    assert results == [True]
    wait_until(lambda: pool_threads(pool) == [])


def test_invalid_arguments() -> None:
    with pytest.raises(InvalidArgumentError):
        ScheduledPool("test-sched-invalid", 0)
    pool = ScheduledPool(f"test-sched-{next(_names)}", 1)
    with pool, pytest.raises(InvalidArgumentError):
        pool.schedule_with_fixed_delay(lambda: None, 0)
    assert pool_threads(pool) == []
