"""``ScheduledPool``: Kafka's ``scheduleWithFixedDelay`` contract plus trigger, cancel, resize.

Real threads on a manual clock: when a task is due and how idle the threads were is decided by
``ManualClock``, which only the test moves, so no assertion depends on how fast a loaded
machine runs. Tests synchronise on events, barriers and ``wait_runs``; the deadlines of those
waits are generous bounds for a stalled machine, never measured times. Pools get a name unique
to the test so ``threading.enumerate()`` can find their threads.
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
DEADLINE_S = 60.0
"""How long a test waits for the pool's threads before it fails: only a hung pool takes this."""


class ManualClock:
    """Monotonic seconds that move only when the test says so (Kafka's ``MockTime``); a task's
    run may move it too, standing for the time the run took."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._now = 0.0

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


def wait_until(condition: Callable[[], bool], timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


def pool_threads(pool: ScheduledPool) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"{pool.name}-")]


def advance(pool: ScheduledPool, clock: ManualClock, seconds: float) -> None:
    """Move the clock and make the pool's waiting threads see it."""
    clock.advance(seconds)
    pool.wake_all()


def sync(pool: ScheduledPool) -> None:
    """Return once the (single) thread of ``pool`` has looked at every task due now: a task
    scheduled now runs only after those ahead of it in the queue were run or skipped."""
    assert pool.size == 1
    marker = pool.schedule_with_fixed_delay(lambda: None, 3600.0, name="sync marker")
    assert marker.wait_runs(1, DEADLINE_S)
    marker.cancel()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make_pool(clock: ManualClock) -> Iterator[Callable[[int], ScheduledPool]]:
    pools: list[ScheduledPool] = []

    def make(threads: int) -> ScheduledPool:
        pool = ScheduledPool(f"test-sched-{next(_names)}", threads, clock=clock)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        assert pool.close(timeout=DEADLINE_S)


def test_fixed_delay_counts_from_the_end_of_each_run_and_never_overlaps(
    make_pool: Callable[[int], ScheduledPool], clock: ManualClock
) -> None:
    pool = make_pool(3)
    lock = threading.Lock()
    starts: list[float] = []
    ends: list[float] = []
    active = 0
    max_active = 0
    entered = threading.Event()
    release = threading.Event()

    def run() -> None:
        nonlocal active, max_active
        with lock:
            active += 1
            max_active = max(max_active, active)
            starts.append(clock())
        entered.set()
        assert release.wait(DEADLINE_S)
        clock.advance(4.0)  # each run takes 4 s
        with lock:
            ends.append(clock())
            active -= 1

    task = pool.schedule_with_fixed_delay(run, 3.0)
    assert entered.wait(DEADLINE_S)
    # Triggers while it runs must not start a second, overlapping run on the other threads.
    for _ in range(10):
        task.trigger()
    assert task.running and task.next_run_at is None
    release.set()
    # The remembered trigger runs it once more right after the first run ended...
    assert task.wait_runs(2, DEADLINE_S)
    assert starts[1] == ends[0] == 4.0
    # ...and then the delay counts from the end of the last run, not from its start.
    assert task.next_run_at == ends[1] + 3.0 == 11.0
    advance(pool, clock, 3.0)
    assert task.wait_runs(3, DEADLINE_S)
    assert task.cancel(wait=True, timeout=DEADLINE_S)
    assert starts == [0.0, 4.0, 11.0]
    assert ends == [4.0, 8.0, 15.0]
    assert max_active == 1


def test_fixed_delay_without_triggers(
    make_pool: Callable[[int], ScheduledPool], clock: ManualClock
) -> None:
    pool = make_pool(2)
    starts: list[float] = []
    ends: list[float] = []

    def run() -> None:
        starts.append(clock())
        clock.advance(3.0)
        ends.append(clock())

    task = pool.schedule_with_fixed_delay(run, 2.0)
    for runs in range(1, 5):
        assert task.wait_runs(runs, DEADLINE_S)
        # From the end: a fixed rate would be due 2 s after the start, i.e. already overdue.
        assert task.next_run_at == ends[-1] + 2.0
        advance(pool, clock, 2.0)
    assert task.cancel(wait=True, timeout=DEADLINE_S)
    assert starts[:4] == [0.0, 5.0, 10.0, 15.0]
    assert ends[:4] == [3.0, 8.0, 13.0, 18.0]


def test_initial_delay(make_pool: Callable[[int], ScheduledPool], clock: ManualClock) -> None:
    pool = make_pool(1)
    ran = threading.Event()
    started_at: list[float] = []

    def run() -> None:
        started_at.append(clock())
        ran.set()

    task = pool.schedule_with_fixed_delay(run, 60.0, initial_delay_s=15.0)
    assert task.next_run_at == 15.0
    sync(pool)
    advance(pool, clock, 14.0)
    sync(pool)
    assert task.runs == 0 and not ran.is_set()
    advance(pool, clock, 1.0)
    assert ran.wait(DEADLINE_S)
    assert started_at == [15.0]
    # Without an initial delay the first run is immediate: no time passes.
    immediate = pool.schedule_with_fixed_delay(lambda: None, 60.0)
    assert immediate.wait_runs(1, DEADLINE_S)
    assert immediate.next_run_at == 15.0 + 60.0


def test_trigger_runs_now_and_a_trigger_during_a_run_gives_exactly_one_more(
    make_pool: Callable[[int], ScheduledPool],
) -> None:
    pool = make_pool(2)
    entered = threading.Event()
    release = threading.Event()

    def run() -> None:
        if not entered.is_set():
            entered.set()
            assert release.wait(DEADLINE_S)

    task = pool.schedule_with_fixed_delay(run, 60.0, initial_delay_s=60.0)
    assert task.runs == 0 and task.next_run_at == 60.0
    task.trigger()
    assert entered.wait(DEADLINE_S)
    assert task.running
    for _ in range(3):  # several triggers while running: remembered once
        pool.trigger(task)
    release.set()
    assert task.wait_runs(2, DEADLINE_S)
    # The second run rescheduled the task a full delay ahead: no third trigger was pending
    # (it would be due now), and the initial-delay entry went with the first triggered run.
    assert task.next_run_at == 60.0
    assert task.runs == 2


def test_cancel_stops_future_runs(
    make_pool: Callable[[int], ScheduledPool], clock: ManualClock
) -> None:
    pool = make_pool(1)
    task = pool.schedule_with_fixed_delay(lambda: None, 5.0)
    for runs in range(1, 4):
        assert task.wait_runs(runs, DEADLINE_S)
        advance(pool, clock, 5.0)
    assert task.cancel(wait=True, timeout=DEADLINE_S)
    assert task.cancelled and task.next_run_at is None
    runs = task.runs
    task.trigger()  # a trigger does not revive a cancelled task
    advance(pool, clock, 60.0)  # and neither does its due time passing
    sync(pool)
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
        release.wait(DEADLINE_S)
        finished.set()

    task = pool.schedule_with_fixed_delay(run, 60.0)
    assert entered.wait(DEADLINE_S)
    # A waiting cancel, from another thread: the run can only end once the test releases it.
    outcome: list[tuple[bool, bool]] = []

    def cancel() -> None:
        returned = task.cancel(wait=True, timeout=DEADLINE_S)
        outcome.append((returned, finished.is_set()))

    canceller = threading.Thread(target=cancel)
    canceller.start()
    wait_until(lambda: task.cancelled)  # the canceller is in cancel(), waiting for the run
    # A bounded wait that expires says so.
    assert task.cancel(wait=True, timeout=0.01) is False
    assert task.cancelled and task.running and outcome == []
    release.set()
    canceller.join(DEADLINE_S)
    assert not canceller.is_alive()
    assert outcome == [(True, True)]  # returned True, and only once the run had ended
    assert not task.running
    assert task.runs == 1


def test_cancel_with_wait_from_inside_the_task_does_not_deadlock(
    make_pool: Callable[[int], ScheduledPool], clock: ManualClock
) -> None:
    pool = make_pool(1)
    results: list[bool] = []
    holder: list[ScheduledTask] = []
    ready = threading.Event()

    def run() -> None:
        assert ready.wait(DEADLINE_S)
        # Waiting here for the run to end would sit out the whole timeout and return False.
        results.append(holder[0].cancel(wait=True, timeout=DEADLINE_S))

    holder.append(pool.schedule_with_fixed_delay(run, 1.0))
    ready.set()
    assert holder[0].wait_runs(1, DEADLINE_S)
    assert results == [True]
    advance(pool, clock, 1.0)
    sync(pool)
    assert holder[0].runs == 1


def test_a_raising_task_stays_scheduled_and_its_thread_survives(
    make_pool: Callable[[int], ScheduledPool], clock: ManualClock
) -> None:
    pool = make_pool(1)
    threads = pool_threads(pool)
    assert len(threads) == 1

    def boom() -> None:
        raise RuntimeError("task failure")

    task = pool.schedule_with_fixed_delay(boom, 5.0)
    for runs in range(1, 4):
        assert task.wait_runs(runs, DEADLINE_S)
        assert task.next_run_at == clock() + 5.0
        advance(pool, clock, 5.0)
    assert not task.cancelled
    assert pool_threads(pool) == threads and threads[0].is_alive()
    # The same thread still runs other tasks.
    other = threading.Event()
    pool.schedule_with_fixed_delay(other.set, 60.0)
    assert other.wait(DEADLINE_S)


def test_resize_up_and_down(make_pool: Callable[[int], ScheduledPool]) -> None:
    pool = make_pool(1)
    barrier = threading.Barrier(3, timeout=DEADLINE_S)
    passed: list[str] = []

    def meet() -> None:
        barrier.wait()
        passed.append(threading.current_thread().name)

    pool.resize(3)
    assert pool.size == 3
    assert len(pool_threads(pool)) == 3
    # Three runs that can only end together: they need three threads at once.
    tasks = [pool.schedule_with_fixed_delay(meet, 60.0) for _ in range(3)]
    assert all(t.wait_runs(1, DEADLINE_S) for t in tasks)
    assert len(set(passed)) == 3

    pool.resize(1)
    assert pool.size == 1
    wait_until(lambda: len(pool_threads(pool)) == 1)
    names: set[str] = set()
    more = [
        pool.schedule_with_fixed_delay(lambda: names.add(threading.current_thread().name), 60.0)
        for _ in range(3)
    ]
    assert all(t.wait_runs(1, DEADLINE_S) for t in more)
    assert names == {pool_threads(pool)[0].name}
    with pytest.raises(InvalidArgumentError):
        pool.resize(0)


def test_shrinking_waits_for_the_runs_in_progress(
    make_pool: Callable[[int], ScheduledPool],
) -> None:
    pool = make_pool(2)
    release = threading.Event()
    entered = threading.Barrier(3, timeout=DEADLINE_S)

    def block() -> None:
        entered.wait()
        release.wait(DEADLINE_S)

    tasks = [pool.schedule_with_fixed_delay(block, 60.0) for _ in range(2)]
    entered.wait()
    pool.resize(1)
    # Both runs hold their threads until released: a run in progress is not interrupted, and
    # the surplus thread leaves only once its run is over.
    assert all(t.running for t in tasks)
    assert len(pool_threads(pool)) == 2
    release.set()
    wait_until(lambda: len(pool_threads(pool)) == 1)
    assert all(t.runs == 1 for t in tasks)


def test_idle_percent_reflects_work(
    make_pool: Callable[[int], ScheduledPool], clock: ManualClock
) -> None:
    pool = make_pool(1)
    advance(pool, clock, 5.0)
    assert pool.idle_percent() == 1.0

    # A run in progress counts as busy time, even before it ends.
    entered = threading.Event()
    release = threading.Event()

    def block() -> None:
        entered.set()
        release.wait(DEADLINE_S)

    task = pool.schedule_with_fixed_delay(block, 60.0)
    assert entered.wait(DEADLINE_S)
    pool.idle_percent()  # start a fresh measurement
    clock.advance(10.0)
    busy = pool.idle_percent()
    release.set()
    assert task.cancel(wait=True, timeout=DEADLINE_S)  # the run's end is accounted for
    assert busy == 0.0

    # Back to waiting: idle again, even while the thread has not woken up since.
    pool.idle_percent()
    clock.advance(10.0)
    assert pool.idle_percent() == 1.0
    # Nothing measured since the last call (no time passed): idle by convention.
    assert pool.idle_percent() == 1.0


def test_idle_percent_with_several_threads(
    make_pool: Callable[[int], ScheduledPool], clock: ManualClock
) -> None:
    pool = make_pool(2)
    entered = threading.Event()
    release = threading.Event()

    def block() -> None:
        entered.set()
        release.wait(DEADLINE_S)

    task = pool.schedule_with_fixed_delay(block, 60.0)
    assert entered.wait(DEADLINE_S)
    pool.idle_percent()
    clock.advance(10.0)
    half = pool.idle_percent()  # one thread busy, one waiting
    clock.advance(10.0)
    release.set()
    assert task.cancel(wait=True, timeout=DEADLINE_S)
    assert half == 0.5
    clock.advance(20.0)
    # Busy for the first 10 s of these 30, on one thread of two: 50 idle of 60 thread-seconds.
    assert pool.idle_percent() == 50.0 / 60.0


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
        release.wait(DEADLINE_S)
        finished.set()

    running = pool.schedule_with_fixed_delay(block, 0.01)
    waiting = pool.schedule_with_fixed_delay(lambda: None, 60.0, initial_delay_s=60.0)
    assert entered.wait(DEADLINE_S)
    closed: list[tuple[bool, bool]] = []

    def close() -> None:
        returned = pool.close(timeout=DEADLINE_S)
        closed.append((returned, finished.is_set()))

    closer = threading.Thread(target=close)
    closer.start()
    wait_until(lambda: running.cancelled)  # close() has begun: it cancels every task first
    release.set()
    closer.join(DEADLINE_S)
    assert closed == [(True, True)]  # the run in progress ended before close returned
    assert pool_threads(pool) == []
    assert waiting.cancelled and waiting.runs == 0
    assert running.cancelled and running.runs == 1
    with pytest.raises(InvalidArgumentError):
        pool.schedule_with_fixed_delay(lambda: None, 1.0)
    pool.trigger(waiting)  # no-op once closed
    pool.resize(4)  # starts no thread once closed
    assert pool_threads(pool) == []
    assert pool.close(timeout=DEADLINE_S)  # idempotent


def test_close_with_a_timeout_reports_a_run_that_does_not_end(
    make_pool: Callable[[int], ScheduledPool],
) -> None:
    pool = make_pool(1)
    entered = threading.Event()
    release = threading.Event()

    def block() -> None:
        entered.set()
        release.wait(DEADLINE_S)

    pool.schedule_with_fixed_delay(block, 60.0)
    assert entered.wait(DEADLINE_S)
    assert pool.close(timeout=0.01) is False  # the run cannot end before release
    release.set()
    wait_until(lambda: pool_threads(pool) == [])


def test_close_from_inside_a_task_does_not_wait_for_itself(
    make_pool: Callable[[int], ScheduledPool],
) -> None:
    pool = make_pool(2)
    results: list[bool] = []
    done = threading.Event()

    def run() -> None:
        # Waiting for its own thread would sit out the whole timeout and return False.
        results.append(pool.close(timeout=DEADLINE_S))
        done.set()

    pool.schedule_with_fixed_delay(run, 60.0)
    assert done.wait(DEADLINE_S)
    assert results == [True]
    wait_until(lambda: pool_threads(pool) == [])


def test_invalid_arguments() -> None:
    with pytest.raises(InvalidArgumentError):
        ScheduledPool("test-sched-invalid", 0)
    pool = ScheduledPool(f"test-sched-{next(_names)}", 1)
    with pool, pytest.raises(InvalidArgumentError):
        pool.schedule_with_fixed_delay(lambda: None, 0)
    assert pool_threads(pool) == []
