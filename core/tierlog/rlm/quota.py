"""KIP-956 byte-rate quotas for copying to and fetching from remote storage, as Kafka computes them.

A broker bounds two aggregate byte rates, each with its own ``RLMQuotaManager``: segments
uploaded by the copy tasks (``RLMCopy``) and bytes read back by the remote-log readers
(``RLMFetch``). Both default to ``Long.MAX_VALUE`` bytes/s, i.e. no limit.

The arithmetic is a port of Kafka's metrics library, because a quota's observable behaviour
(when a copier waits, how long a fetch is shed) is decided by its details:

- ``SampledStat``: values are summed into at most ``window_num + 1`` samples (one extra slot holds
  the sample that overlaps the start of the monitored span). A sample is "complete" once
  ``window_size`` has passed since it started; the next record then recycles the following
  slot. Before every measurement, samples whose *last event* is ``window_num * window_size`` or
  more in the past are reset to start "now" with value 0.
- ``SimpleRate`` (the rate RLM quotas use): ``sum / max(now - oldest_sample_start, window_size)``.
  Kafka's plain ``Rate`` instead pads the elapsed time up to ``window_num - 1`` full windows, so
  the first burst looks small; ``SimpleRate`` only assumes one window, so a burst right after a
  quiet period is throttled at once. Note that "oldest sample" includes an empty sample created
  by a throttle check made before any record: it counts from the time of that check.
- ``Quota(bound, upper=True).acceptable(v)`` is ``v <= bound``; otherwise
  ``QuotaUtils.throttleTime`` = ``round((v - bound) / bound * window)`` with the same window as
  the rate, i.e. the delay after which the rate would fall back to the bound if nothing more
  were recorded. ``round`` is Java's ``Math.round`` (half up), not Python's (half to even).

``CopyQuotaGate`` reproduces the copy task's back-pressure loop (``RLMCopyTask.copyLogSegments``):
under one fair lock, a copier waits while the copy quota is exceeded, re-checking at least
every second (or when another copier records), then records the segment's size *before*
uploading it and wakes the other waiters. The fetch quota is not a gate: the read path asks
``throttle_time_ms()`` and sheds the read when it is positive (``ReplicaManager``).

Throttle time is reported like Kafka's ``RLMQuotaMetrics`` sensors (``remote-copy-throttle-time``,
``remote-fetch-throttle-time``): an average and a maximum over the broker's default metric
windows (``metrics.num.samples=2`` of ``metrics.sample.window.ms=30000``).

Clocks are callables returning milliseconds (Kafka's ``Time.milliseconds()``), so tests can move
time by hand.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Literal, get_args

__all__ = [
    "LONG_MAX",
    "CopyQuotaGate",
    "FairCondition",
    "FairLock",
    "QuotaType",
    "RLMQuotaManager",
    "ThrottleTimeStats",
    "java_round",
]

QuotaType = Literal["RLMCopy", "RLMFetch"]

LONG_MAX = 2**63 - 1
"""Kafka's default quota (``Long.MAX_VALUE`` bytes/s): no limit."""

_LONG_MIN = -(2**63)

# Kafka's broker-wide MetricConfig defaults (metrics.num.samples, metrics.sample.window.ms), which
# the throttle-time sensors of RLMQuotaMetrics inherit.
_DEFAULT_METRIC_SAMPLES = 2
_DEFAULT_METRIC_WINDOW_MS = 30_000
_PENDING_FOLD_AT = 256
"""Recorded byte counts ``RLMQuotaManager`` queues before the recording thread folds them."""

_THROTTLE_SENSOR_NAMES: dict[str, str] = {
    "RLMCopy": "remote-copy-throttle-time",
    "RLMFetch": "remote-fetch-throttle-time",
}


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def java_round(value: float) -> int:
    """Java's ``Math.round(double)``: half up, NaN -> 0, saturating at the ``long`` range.

    Python's ``round`` rounds halves to even (``round(62.5) == 62``), Java gives 63; throttle
    times must match Kafka to the millisecond.
    """
    if math.isnan(value):
        return 0
    if value >= LONG_MAX:
        return LONG_MAX
    if value <= _LONG_MIN:
        return _LONG_MIN
    floor = math.floor(value)
    # value - floor is exact for doubles, so 0.49999999999999994 stays below one half.
    return floor + 1 if value - floor >= 0.5 else floor


class _Sample:
    """One window of a sampled statistic (Kafka's ``SampledStat.Sample``)."""

    __slots__ = ("event_count", "initial_value", "last_event_ms", "start_time_ms", "value")

    def __init__(self, initial_value: float, now_ms: int) -> None:
        self.initial_value = initial_value
        self.event_count = 0
        self.start_time_ms = now_ms
        self.last_event_ms = now_ms
        self.value = initial_value

    def reset(self, now_ms: int) -> None:
        self.event_count = 0
        self.start_time_ms = now_ms
        self.last_event_ms = now_ms
        self.value = self.initial_value

    def is_complete(self, time_ms: int, window_ms: int) -> bool:
        # Kafka also completes a sample after MetricConfig.eventWindow events; that limit is
        # Long.MAX_VALUE for every sensor involved here, so only the time criterion remains.
        return time_ms - self.start_time_ms >= window_ms


class _SampledStat:
    """Kafka's ``SampledStat`` with the sample bookkeeping kept exactly (not thread-safe)."""

    def __init__(self, initial_value: float, num_samples: int, window_ms: int) -> None:
        self._initial_value = initial_value
        self._num_samples = num_samples
        self._window_ms = window_ms
        self._current = 0
        self._samples: list[_Sample] = []

    def record(self, value: float, time_ms: int) -> None:
        # Inlined _current_sample and is_complete: every remote read records here.
        samples = self._samples
        sample = samples[self._current] if samples else self._current_sample(time_ms)
        if time_ms - sample.start_time_ms >= self._window_ms:
            sample = self._advance(time_ms)
        self._update(sample, value)
        sample.event_count += 1
        sample.last_event_ms = time_ms

    def measure(self, now_ms: int) -> float:
        self.purge_obsolete_samples(now_ms)
        return self._combine(self._samples)

    def oldest(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(self._initial_value, now_ms))
        return min(self._samples, key=lambda s: s.start_time_ms)

    def purge_obsolete_samples(self, now_ms: int) -> None:
        # A sample is kept while its last event lies inside the monitored span, even when the
        # sample itself started before it.
        expire_age = self._num_samples * self._window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire_age:
                sample.reset(now_ms)

    def _current_sample(self, time_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(self._initial_value, time_ms))
        return self._samples[self._current]

    def _advance(self, time_ms: int) -> _Sample:
        # One more slot than configured samples: the "overlapping" sample of purge_obsolete.
        self._current = (self._current + 1) % (self._num_samples + 1)
        if self._current >= len(self._samples):
            sample = _Sample(self._initial_value, time_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(time_ms)
        return sample

    def _update(self, sample: _Sample, value: float) -> None:
        raise NotImplementedError

    def _combine(self, samples: list[_Sample]) -> float:
        raise NotImplementedError


class _WindowedSum(_SampledStat):
    def __init__(self, num_samples: int, window_ms: int) -> None:
        super().__init__(0.0, num_samples, window_ms)

    def _update(self, sample: _Sample, value: float) -> None:
        sample.value += value

    def record(self, value: float, time_ms: int) -> None:
        # _SampledStat.record with _update inlined: a rate records on every remote read.
        samples = self._samples
        sample = samples[self._current] if samples else self._current_sample(time_ms)
        if time_ms - sample.start_time_ms >= self._window_ms:
            sample = self._advance(time_ms)
        sample.value += value
        sample.event_count += 1
        sample.last_event_ms = time_ms

    def _combine(self, samples: list[_Sample]) -> float:
        return sum((s.value for s in samples), 0.0)


class _Avg(_SampledStat):
    def __init__(self, num_samples: int, window_ms: int) -> None:
        super().__init__(0.0, num_samples, window_ms)

    def _update(self, sample: _Sample, value: float) -> None:
        sample.value += value

    def _combine(self, samples: list[_Sample]) -> float:
        count = sum(s.event_count for s in samples)
        return math.nan if count == 0 else sum((s.value for s in samples), 0.0) / count


class _Max(_SampledStat):
    def __init__(self, num_samples: int, window_ms: int) -> None:
        super().__init__(-math.inf, num_samples, window_ms)

    def _update(self, sample: _Sample, value: float) -> None:
        sample.value = max(sample.value, value)

    def _combine(self, samples: list[_Sample]) -> float:
        count = sum(s.event_count for s in samples)
        return math.nan if count == 0 else max((s.value for s in samples), default=-math.inf)


class _SimpleRate:
    """Kafka's ``SimpleRate`` (per second) over a ``WindowedSum``."""

    def __init__(self, num_samples: int, window_ms: int) -> None:
        self._window_ms = window_ms
        self._stat = _WindowedSum(num_samples, window_ms)
        self.record: Callable[[float, int], None] = self._stat.record  # a call less per read

    def measure(self, now_ms: int) -> float:
        total = self._stat.measure(now_ms)
        return total / (self.window_size(now_ms) / 1000.0)

    def window_size(self, now_ms: int) -> int:
        self._stat.purge_obsolete_samples(now_ms)
        elapsed = now_ms - self._stat.oldest(now_ms).start_time_ms
        return max(elapsed, self._window_ms)


class ThrottleTimeStats:
    """Average and maximum of recorded throttle times (Kafka's ``RLMQuotaMetrics`` sensor).

    Kafka exposes them as ``<name>-avg`` and ``<name>-max`` in group ``RemoteLogManager``; both
    are NaN while no throttle was recorded in the monitored windows. Thread-safe.
    """

    def __init__(
        self,
        name: str,
        *,
        window_num: int = _DEFAULT_METRIC_SAMPLES,
        window_size_ms: int = _DEFAULT_METRIC_WINDOW_MS,
        clock: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        if window_num < 1 or window_size_ms < 1:
            raise ValueError("window_num and window_size_ms must be >= 1")
        self.name = name
        self._clock = clock
        self._lock = threading.Lock()
        self._avg = _Avg(window_num, window_size_ms)
        self._max = _Max(window_num, window_size_ms)

    def record(self, throttle_time_ms: float) -> None:
        """Add one throttle observation, in milliseconds."""
        with self._lock:
            now = self._clock()
            self._avg.record(float(throttle_time_ms), now)
            self._max.record(float(throttle_time_ms), now)

    def avg(self) -> float:
        """``<name>-avg``: mean of the observations still inside the windows, else NaN."""
        with self._lock:
            return self._avg.measure(self._clock())

    def max(self) -> float:
        """``<name>-max``: largest observation still inside the windows, else NaN."""
        with self._lock:
            return self._max.measure(self._clock())


class RLMQuotaManager:
    """One KIP-956 byte-rate quota (Kafka's ``RLMQuotaManager``). Thread-safe.

    ``record`` adds bytes; ``throttle_time_ms`` says how long the caller should hold off (0 when
    the measured rate is within the bound). ``throttle_stats`` is the matching throttle-time
    sensor (``remote-copy-throttle-time`` or ``remote-fetch-throttle-time``), recorded by the
    component that actually throttles.
    """

    def __init__(
        self,
        quota_type: QuotaType,
        bytes_per_second: int,
        window_num: int = 11,
        window_size_seconds: int = 1,
        clock: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        if quota_type not in get_args(QuotaType):
            raise ValueError(f"quota_type must be one of {get_args(QuotaType)}, not {quota_type!r}")
        # The bounds of Kafka's config definitions (atLeast(1) for all three keys).
        _check_bound(bytes_per_second)
        if window_num < 1:
            raise ValueError(f"window_num must be >= 1, not {window_num}")
        if window_size_seconds < 1:
            raise ValueError(f"window_size_seconds must be >= 1, not {window_size_seconds}")
        self.quota_type: QuotaType = quota_type
        self.window_num = window_num
        self.window_size_seconds = window_size_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._bound = bytes_per_second
        self._rate = _SimpleRate(window_num, window_size_seconds * 1000)
        self._pending: deque[tuple[int, float]] = deque()  # see record
        self.throttle_stats = ThrottleTimeStats(_THROTTLE_SENSOR_NAMES[quota_type], clock=clock)

    @property
    def bytes_per_second(self) -> int:
        """The current bound."""
        with self._lock:
            return self._bound

    def update_quota(self, bytes_per_second: int) -> None:
        """Change the bound (dynamic broker config); the recorded history is kept, as in Kafka."""
        _check_bound(bytes_per_second)
        with self._lock:
            self._bound = bytes_per_second

    def record(self, num_bytes: float) -> None:
        """Count ``num_bytes`` against the quota now (never checks the quota itself).

        Queued with the time, not applied: every remote read records here, so recording is one
        append; whatever measures the rate (``byte_rate``, ``throttle_time_ms``) folds the
        queue first, and so does the recording thread once it holds ``_PENDING_FOLD_AT``.
        """
        pending = self._pending
        clock = self._clock
        # The default clock inlined: a frame less on every remote read.
        now = time.time_ns() // 1_000_000 if clock is _wall_clock_ms else clock()
        pending.append((now, float(num_bytes)))
        if len(pending) >= _PENDING_FOLD_AT:
            with self._lock:
                self._fold_locked()

    def _fold_locked(self) -> None:
        pending = self._pending
        record = self._rate.record
        while pending:  # every fold holds the lock: nothing else pops
            time_ms, value = pending.popleft()
            record(value, time_ms)

    def byte_rate(self) -> float:
        """The measured rate in bytes/s (Kafka's ``byte-rate`` metric of group ``RLMCopy``...)."""
        with self._lock:
            self._fold_locked()
            return self._rate.measure(self._clock())

    def throttle_time_ms(self) -> int:
        """Milliseconds until the rate is back within the bound if nothing more is recorded.

        0 while within quota. An unbounded quota (``Long.MAX_VALUE``) answers 0 at once: no
        byte rate can exceed it, so Kafka's check could only ever pass.
        """
        with self._lock:
            bound = self._bound
            if bound >= LONG_MAX:
                return 0
            self._fold_locked()
            now = self._clock()
            value = self._rate.measure(now)
            if value <= bound:
                return 0
            window_ms = self._rate.window_size(now)
            return java_round((value - bound) / bound * window_ms)

    def record_throttle(self, throttle_time_ms: float) -> None:
        """Record a throttle into ``throttle_stats`` (what ReplicaManager does on a shed fetch)."""
        self.throttle_stats.record(throttle_time_ms)


def _check_bound(bytes_per_second: int) -> None:
    if bytes_per_second < 1:
        raise ValueError(f"bytes_per_second must be >= 1, not {bytes_per_second}")


class FairLock:
    """A non-reentrant lock granted in arrival order (Java's ``new ReentrantLock(true)``).

    ``threading.Lock`` makes no ordering promise, so a copier that keeps re-checking the quota
    could starve others. Here a releasing thread hands the lock straight to the longest waiter.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._owner: int | None = None
        self._queue: deque[tuple[int, threading.Event]] = deque()

    def acquire(self) -> None:
        me = threading.get_ident()
        with self._mutex:
            if self._owner == me:
                raise RuntimeError("FairLock is not reentrant")
            if self._owner is None and not self._queue:
                self._owner = me
                return
            handed_over = threading.Event()
            self._queue.append((me, handed_over))
        handed_over.wait()

    def release(self) -> None:
        with self._mutex:
            if self._owner != threading.get_ident():
                raise RuntimeError("FairLock released by a thread that does not own it")
            if self._queue:
                self._owner, handed_over = self._queue.popleft()
                handed_over.set()
            else:
                self._owner = None

    def owned(self) -> bool:
        """Whether the calling thread holds the lock."""
        with self._mutex:
            return self._owner == threading.get_ident()

    def queue_length(self) -> int:
        """Threads waiting for the lock (diagnostics and tests)."""
        with self._mutex:
            return len(self._queue)

    def __enter__(self) -> FairLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class FairCondition:
    """A condition variable over a ``FairLock`` (Java's ``lock.newCondition()``).

    A woken (or timed-out) waiter re-enters the lock's queue behind threads already waiting
    for it, as ``Condition.await`` does with a fair lock.
    """

    def __init__(self, lock: FairLock) -> None:
        self.lock = lock
        self._waiters: deque[threading.Lock] = deque()

    def wait(self, timeout_s: float) -> bool:
        """Release the lock, wait for a notification or ``timeout_s``, take the lock back."""
        if not self.lock.owned():
            raise RuntimeError("wait() on a FairCondition whose lock is not held")
        waiter = threading.Lock()
        waiter.acquire()
        self._waiters.append(waiter)
        self.lock.release()
        try:
            notified = waiter.acquire(True, timeout_s)
        finally:
            self.lock.acquire()
        if not notified:
            # ValueError: notified between the timeout and re-taking the lock.
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
        return notified

    def notify_all(self) -> None:
        """Wake every waiter; the caller must hold the lock."""
        if not self.lock.owned():
            raise RuntimeError("notify_all() on a FairCondition whose lock is not held")
        while self._waiters:
            self._waiters.popleft().release()


class CopyQuotaGate:
    """The copy tasks' back-pressure on the ``RLMCopy`` quota (``RLMCopyTask``, KIP-956).

    Kafka records a segment's full size *before* uploading it, so one large segment may push
    the rate far above the bound; later copiers then wait until the rate falls back.
    """

    def __init__(
        self,
        quota: RLMQuotaManager,
        throttle_stats: ThrottleTimeStats | None = None,
        *,
        wait_timeout_s: float = 1.0,
    ) -> None:
        """``wait_timeout_s`` is Kafka's ``quotaTimeout()`` (1 s): the longest a waiter sleeps
        before re-checking, since no one signals when the rate merely decays with time."""
        if wait_timeout_s <= 0:
            raise ValueError("wait_timeout_s must be > 0")
        self.quota = quota
        self.throttle_stats = throttle_stats if throttle_stats is not None else quota.throttle_stats
        self._wait_timeout_s = wait_timeout_s
        self._lock = FairLock()
        self._condition = FairCondition(self._lock)

    def acquire(self, segment_bytes: int, should_stop: Callable[[], bool]) -> bool:
        """Wait while the copy quota is exceeded, then record ``segment_bytes`` and return True.

        Each check that finds the quota exceeded records its throttle time, as Kafka does.
        Returns False without recording if ``should_stop()`` becomes true while waiting (the
        copy task was cancelled: Kafka interrupts the thread, which leaves ``await``).
        """
        with self._lock:
            throttle_ms = self.quota.throttle_time_ms()
            while throttle_ms > 0:
                if should_stop():
                    return False
                self.throttle_stats.record(throttle_ms)
                self._condition.wait(self._wait_timeout_s)
                if should_stop():
                    return False
                throttle_ms = self.quota.throttle_time_ms()
            self.quota.record(segment_bytes)
            # Other copiers re-check now rather than at their next timeout.
            self._condition.notify_all()
            return True

    def wake_all(self) -> None:
        """Make every waiter re-check now (e.g. after cancelling tasks or raising the quota)."""
        with self._lock:
            self._condition.notify_all()
