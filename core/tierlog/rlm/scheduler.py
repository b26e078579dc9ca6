"""A fixed-size pool of threads running periodic tasks with a fixed delay between runs.

Kafka runs each RLM task with ``ScheduledThreadPoolExecutor.scheduleWithFixedDelay(task, 0,
remote.log.manager.task.interval.ms)`` on one of three pools (copier, expiration, follower), so
that a slow upload for one partition does not delay the others beyond the pool's width and a
task never overlaps itself: the next run is scheduled ``delay`` after the previous one *ends*.
``ScheduledPool`` gives the same contract in Python, with what tierlog also needs:

- ``trigger`` runs a task now (the node's HTTP API and tests use it to tier without waiting a
  full interval); a task already running is not started twice, the trigger is remembered;
- ``ScheduledTask.cancel`` stops future runs; ``cancel(wait=True)`` also waits for a run in
  progress (``stop_partitions`` must not return while a copy still writes for the partition);
- ``resize`` changes the number of threads (Kafka's pools are resizable by dynamic config);
- ``idle_percent`` is the share of time the threads were waiting, for
  ``RemoteLogManagerTasksAvgIdlePercent``;
- ``ScheduledTask.next_run_at`` says when a task is due next (Java's ``ScheduledFuture.getDelay``).

Time comes from an injectable ``clock`` (``time.monotonic`` by default, as for the upload
``TokenBucket``): it decides when a task is due and measures ``idle_percent``, so tests drive both
with a manual clock (and ``wake_all`` after moving it) instead of sleeping and measuring. The
timeouts of the calls that wait for threads (``cancel(wait=True)``, ``wait_runs``, ``close``)
are real time: they bound a wait for a thread, which no manual clock would ever end.

Exceptions escaping a run are logged and the task stays scheduled, as Kafka's ``RLMTask.run``
swallows them (the task decides what is worth retrying).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Final

from tierlog.spi import InvalidArgumentError

__all__ = ["ScheduledPool", "ScheduledTask"]

_LOG = logging.getLogger(__name__)
_FOREVER: Final = float("inf")


class ScheduledTask:
    """One periodic task of a ``ScheduledPool``; ``cancel()`` ends it."""

    __slots__ = (
        "_cancelled",
        "_done",
        "_fn",
        "_pool",
        "_running",
        "_triggered",
        "delay_s",
        "name",
        "runs",
    )

    def __init__(self, pool: ScheduledPool, fn: Callable[[], None], delay_s: float, name: str):
        self._pool = pool
        self._fn = fn
        self.delay_s = delay_s
        self.name = name
        self._cancelled = False
        self._running = False
        self._triggered = False
        self._done = threading.Condition(pool._lock)
        self.runs = 0
        """Completed runs (including runs that raised)."""

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def running(self) -> bool:
        return self._running

    @property
    def next_run_at(self) -> float | None:
        """When the task is due next, on the pool's clock; None while no run is scheduled (it is
        running and reschedules itself when it ends, or it is cancelled)."""
        with self._pool._lock:
            if self._cancelled:
                return None
            return min((at for at, _, task in self._pool._heap if task is self), default=None)

    def cancel(self, *, wait: bool = False, timeout: float | None = None) -> bool:
        """Stop future runs. With ``wait``, also wait for a run in progress to end (unless
        called from that run's own thread); returns False if it did not end in ``timeout``."""
        with self._pool._lock:
            self._cancelled = True
            self._pool._wakeup.notify_all()
            if not wait or threading.current_thread() in self._pool._threads_running(self):
                return True
            return self._done.wait_for(lambda: not self._running, timeout)

    def trigger(self) -> None:
        """Run as soon as a thread is free (``ScheduledPool.trigger``)."""
        self._pool.trigger(self)

    def wait_runs(self, count: int, timeout: float | None = None) -> bool:
        """Wait until ``count`` runs have completed in total; False on timeout."""
        with self._pool._lock:
            return self._done.wait_for(lambda: self.runs >= count, timeout)

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else "running" if self._running else "scheduled"
        return f"ScheduledTask({self.name!r}, every {self.delay_s}s, {state}, runs={self.runs})"


class ScheduledPool:
    """``threads`` worker threads named ``<name>-<n>`` running ``ScheduledTask`` s.

    ``clock`` gives monotonic seconds (module docstring).
    """

    def __init__(
        self, name: str, threads: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if threads < 1:
            raise InvalidArgumentError(
                f"thread pool {name!r} needs at least 1 thread, got {threads}"
            )
        self.name = name
        self._clock = clock
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, ScheduledTask]] = []
        self._seq = itertools.count()
        self._size = threads
        self._workers: dict[threading.Thread, ScheduledTask | None] = {}
        # When each worker entered its current state (waiting or running): idle_percent
        # counts the time of a wait or a run still in progress, not only of finished ones.
        self._since: dict[threading.Thread, float] = {}
        self._ended: list[threading.Thread] = []  # workers gone, their threads not yet joined
        self._closed = False
        self._ids = itertools.count()
        self._idle_s = 0.0
        self._busy_s = 0.0
        with self._lock:
            for _ in range(threads):
                self._spawn()

    # Scheduling ---------------------------------------------------------------------------------
    def schedule_with_fixed_delay(
        self,
        fn: Callable[[], None],
        delay_s: float,
        *,
        initial_delay_s: float = 0.0,
        name: str = "",
    ) -> ScheduledTask:
        """Run ``fn`` after ``initial_delay_s``, then ``delay_s`` after each run ends."""
        if delay_s <= 0:
            raise InvalidArgumentError(f"delay must be > 0, got {delay_s}")
        task = ScheduledTask(self, fn, delay_s, name or getattr(fn, "__name__", "task"))
        with self._lock:
            if self._closed:
                raise InvalidArgumentError(f"thread pool {self.name!r} is closed")
            self._push(self._clock() + max(0.0, initial_delay_s), task)
        return task

    def trigger(self, task: ScheduledTask) -> None:
        """Run ``task`` as soon as a thread is free; if it is running, once more right after."""
        with self._lock:
            if task._cancelled or self._closed:
                return
            if task._running:
                task._triggered = True
                return
            self._push(self._clock(), task)

    def wake_all(self) -> None:
        """Make the waiting threads look at the clock again.

        A thread with nothing due waits for as long as the first task is away, measured when
        it started waiting; a clock that jumps ahead (a test's manual clock) makes tasks due
        that no thread would run before that wait ends.
        """
        with self._lock:
            self._wakeup.notify_all()

    def _push(self, at: float, task: ScheduledTask) -> None:
        # A task may sit in the heap several times (a trigger before its scheduled run); the
        # worker skips an entry whose task is running, and a run reschedules the task once.
        heapq.heappush(self._heap, (at, next(self._seq), task))
        self._wakeup.notify()

    # Pool size -----------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self._size

    def resize(self, threads: int) -> None:
        """Grow at once; shrink as surplus threads finish their current run."""
        if threads < 1:
            raise InvalidArgumentError(f"thread pool {self.name!r} needs at least 1 thread")
        with self._lock:
            self._size = threads
            while not self._closed and len(self._workers) < threads:
                self._spawn()
            self._wakeup.notify_all()

    def idle_percent(self) -> float:
        """Share of thread time spent waiting since the last call, in [0, 1]."""
        with self._lock:
            for thread, task in self._workers.items():
                self._account(thread, busy=task is not None)
            total = self._idle_s + self._busy_s
            idle = 1.0 if total <= 0 else self._idle_s / total
            self._idle_s = self._busy_s = 0.0
            return idle

    def _spawn(self) -> None:
        thread = threading.Thread(
            target=self._work, name=f"{self.name}-{next(self._ids)}", daemon=True
        )
        self._workers[thread] = None
        self._since[thread] = self._clock()
        thread.start()

    def _account(self, thread: threading.Thread, *, busy: bool) -> None:
        """Add the time ``thread`` spent in its current state to the idle or busy total."""
        now = self._clock()
        elapsed = now - self._since[thread]
        self._since[thread] = now
        if busy:
            self._busy_s += elapsed
        else:
            self._idle_s += elapsed

    def _threads_running(self, task: ScheduledTask) -> list[threading.Thread]:
        return [t for t, running in self._workers.items() if running is task]

    # Workers -------------------------------------------------------------------------------------
    def _work(self) -> None:
        me = threading.current_thread()
        with self._lock:
            while True:
                if self._closed or len(self._workers) > self._size:
                    self._account(me, busy=False)
                    del self._workers[me]
                    del self._since[me]
                    self._ended = [t for t in self._ended if t.is_alive()]
                    self._ended.append(me)
                    self._wakeup.notify_all()
                    return
                task = self._next_due()
                if task is None:
                    timeout = self._time_to_next()
                    self._wakeup.wait(None if timeout == _FOREVER else timeout)
                    continue
                self._account(me, busy=False)
                task._running = True
                self._workers[me] = task
                self._lock.release()
                try:
                    task._fn()
                except BaseException:  # a task's failure must not kill the pool's thread
                    _LOG.exception(
                        "Task %s of pool %s failed; it stays scheduled", task.name, self.name
                    )
                finally:
                    self._lock.acquire()
                    self._account(me, busy=True)
                    self._workers[me] = None
                    task._running = False
                    task.runs += 1
                    if not task._cancelled and not self._closed:
                        if task._triggered:
                            task._triggered = False
                            self._push(self._clock(), task)
                        else:
                            self._push(self._clock() + task.delay_s, task)
                    task._done.notify_all()

    def _next_due(self) -> ScheduledTask | None:
        now = self._clock()
        while self._heap:
            at, _, task = self._heap[0]
            if task._cancelled:
                heapq.heappop(self._heap)
                continue
            if at > now:
                return None
            heapq.heappop(self._heap)
            if task._running:
                task._triggered = True
                continue
            # Drop duplicate entries of the same task: the run reschedules it.
            self._heap = [e for e in self._heap if e[2] is not task]
            heapq.heapify(self._heap)
            return task
        return None

    def _time_to_next(self) -> float:
        if not self._heap:
            return _FOREVER
        return max(0.0, self._heap[0][0] - self._clock())

    # Shutdown ------------------------------------------------------------------------------------
    def close(self, timeout: float | None = 30.0) -> bool:
        """Cancel every task, let runs in progress end, stop the threads. True if all ended.

        Called from a task's own run, it waits for the other threads only: that one ends
        when the run returns. ``timeout`` is real time, whatever the pool's clock."""
        deadline = None if timeout is None else time.monotonic() + timeout
        me = threading.current_thread()
        with self._lock:
            self._closed = True
            for _, _, task in self._heap:
                task._cancelled = True
            for running in self._workers.values():
                if running is not None:
                    running._cancelled = True
            self._heap.clear()
            self._wakeup.notify_all()
            while any(thread is not me for thread in self._workers):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._wakeup.wait(left)
            ending = [t for t in self._ended if t is not me]
            self._ended.clear()
        # A worker leaves the pool just before its thread ends: join it, so that no thread of
        # the pool is alive once close() returns True.
        for thread in ending:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                return False
        return True

    def __enter__(self) -> ScheduledPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
