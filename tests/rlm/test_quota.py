"""KIP-956 quotas: throttle times to the millisecond as Kafka's SimpleRate and QuotaUtils give them.

Expected values are worked out by hand from Kafka's formulas: with ``S`` bytes in the live
samples, bound ``B`` and window ``W`` ms (``max(now - oldest sample start, window size)``), the
rate is ``S / (W / 1000)`` and the throttle time ``round((rate - B) / B * W)``, which is
``round(S * 1000 / B - W)``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import pytest

from tierlog.rlm.quota import (
    LONG_MAX,
    CopyQuotaGate,
    FairLock,
    RLMQuotaManager,
    ThrottleTimeStats,
    java_round,
)


class ManualClock:
    """Kafka's MockTime: milliseconds that only move when told to."""

    def __init__(self, start_ms: int = 0) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


DEADLINE_S = 60.0
"""How long a test waits for another thread before it fails: only a hung one takes this. Time
in the quotas is a ``ManualClock``: no outcome depends on how fast the threads run."""


def wait_until(condition: Callable[[], bool], timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


# RLMQuotaManagerTest ---------------------------------------------------------------------------
def test_quota_exceeded_as_in_kafka() -> None:
    # RLMQuotaManagerTest.testQuotaExceeded: 50 B/s, 11 windows of 1 s.
    clock = ManualClock(1_700_000_000_000)
    quota = RLMQuotaManager("RLMFetch", 50, 11, 1, clock=clock)
    assert quota.throttle_time_ms() == 0
    quota.record(500)
    clock.advance(1000)
    assert quota.throttle_time_ms() == 9_000  # 500 B over 1 s: 500*1000/50 - 1000
    clock.advance(8000)
    assert quota.throttle_time_ms() == 1_000  # over 9 s: 10000 - 9000
    clock.advance(1000)
    assert quota.throttle_time_ms() == 0  # 500 B over 10 s is exactly 50 B/s: acceptable


def test_quota_update_as_in_kafka() -> None:
    # RLMQuotaManagerTest.testQuotaUpdate, with the throttle times themselves.
    clock = ManualClock(1_000)
    quota = RLMQuotaManager("RLMFetch", 50, 11, 1, clock=clock)
    assert quota.throttle_time_ms() == 0
    quota.record(51)
    assert quota.throttle_time_ms() == 20  # (51 - 50) / 50 * 1000
    quota.update_quota(60)
    assert quota.bytes_per_second == 60
    assert quota.throttle_time_ms() == 0
    quota.update_quota(40)
    assert quota.throttle_time_ms() == 275  # (51 - 40) / 40 * 1000: the history was kept


def test_throttle_time_rounds_half_up_like_java() -> None:
    quota = RLMQuotaManager("RLMCopy", 16, clock=ManualClock())
    quota.record(17)
    # (17 - 16) / 16 * 1000 = 62.5 exactly: Math.round gives 63, Python's round would give 62.
    assert quota.throttle_time_ms() == 63


def test_simple_rate_divides_by_time_since_oldest_sample() -> None:
    clock = ManualClock()
    quota = RLMQuotaManager("RLMCopy", 50, clock=clock)
    quota.record(500)
    clock.advance(2500)
    # Kafka's plain Rate would assume 10 full windows (rate 50, no throttle); SimpleRate
    # divides by the 2.5 s actually elapsed.
    assert quota.byte_rate() == 200.0
    assert quota.throttle_time_ms() == 7_500  # 500*1000/50 - 2500


def test_samples_roll_through_window_num_plus_one_slots() -> None:
    clock = ManualClock()
    quota = RLMQuotaManager("RLMCopy", 50, window_num=2, window_size_seconds=1, clock=clock)
    for at in (0, 1000, 2000, 3000):
        clock.now_ms = at
        quota.record(100)
    # Slots: [3000: 100 (recycled), 1000: 100, 2000: 100]. At 3000 the 1000 sample is
    # 2 windows old and is reset; the oldest live sample starts at 2000.
    assert quota.byte_rate() == 200.0  # 200 B over max(3000 - 2000, 1000) ms
    assert quota.throttle_time_ms() == 3_000  # 200*1000/50 - 1000


def test_a_sample_overlapping_the_span_is_kept_in_the_extra_slot() -> None:
    clock = ManualClock()
    quota = RLMQuotaManager("RLMCopy", 50, window_num=2, window_size_seconds=1, clock=clock)
    for at in (0, 999, 1000, 2000):
        clock.now_ms = at
        quota.record(100)
    clock.now_ms = 2500
    # The sample started at 0 last saw an event at 999, less than 2 windows ago: it stays, in
    # the third slot, next to the samples of 1000 and 2000. With only window_num slots the
    # record at 2000 would have recycled it.
    assert quota.byte_rate() == 160.0  # 400 B over 2.5 s
    assert quota.throttle_time_ms() == 5_500  # 400*1000/50 - 2500


def test_samples_expire_window_num_windows_after_their_last_event() -> None:
    clock = ManualClock()
    quota = RLMQuotaManager("RLMCopy", 50, clock=clock)
    quota.record(1000)
    clock.now_ms = 10_999
    assert quota.throttle_time_ms() == 9_001  # 1000*1000/50 - 10999
    clock.now_ms = 11_000
    assert quota.throttle_time_ms() == 0  # 11 windows after the last event: purged


def test_a_check_before_the_first_record_opens_the_window() -> None:
    # Kafka's SampledStat.oldest() creates an empty sample when there is none; the rate then
    # counts from that check, not from the first record.
    clock = ManualClock()
    checked_first = RLMQuotaManager("RLMCopy", 10, clock=clock)
    assert checked_first.throttle_time_ms() == 0
    clock.now_ms = 5000
    checked_first.record(100)
    assert checked_first.throttle_time_ms() == 5_000  # 100*1000/10 - 5000
    fresh = RLMQuotaManager("RLMCopy", 10, clock=clock)
    fresh.record(100)
    assert fresh.throttle_time_ms() == 9_000  # 100*1000/10 - 1000


def test_unbounded_quota_never_throttles() -> None:
    clock = ManualClock()
    unbounded = RLMQuotaManager("RLMCopy", LONG_MAX, clock=clock)
    bounded = RLMQuotaManager("RLMCopy", 10**17, clock=clock)
    for quota in (unbounded, bounded):
        quota.record(10**18)
    assert unbounded.throttle_time_ms() == 0
    assert bounded.throttle_time_ms() == 9_000  # the same bytes do exceed a finite bound
    assert unbounded.byte_rate() == 1e18


def test_update_quota_to_unbounded_and_back() -> None:
    quota = RLMQuotaManager("RLMCopy", 100, clock=ManualClock())
    quota.record(200)
    assert quota.throttle_time_ms() == 1_000
    quota.update_quota(LONG_MAX)
    assert quota.throttle_time_ms() == 0
    quota.update_quota(100)
    assert quota.throttle_time_ms() == 1_000


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bytes_per_second": 0}, "bytes_per_second"),
        ({"window_num": 0}, "window_num"),
        ({"window_size_seconds": 0}, "window_size_seconds"),
    ],
)
def test_config_bounds_as_kafka_validates_them(kwargs: dict[str, int], message: str) -> None:
    args = {"bytes_per_second": 1, "window_num": 11, "window_size_seconds": 1} | kwargs
    with pytest.raises(ValueError, match=message):
        RLMQuotaManager(
            "RLMCopy", args["bytes_per_second"], args["window_num"], args["window_size_seconds"]
        )


def test_quota_type_and_updates_are_validated() -> None:
    with pytest.raises(ValueError, match="quota_type"):
        RLMQuotaManager("RLMDelete", 1)  # type: ignore[arg-type]
    quota = RLMQuotaManager("RLMFetch", 5)
    with pytest.raises(ValueError, match="bytes_per_second"):
        quota.update_quota(0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (62.5, 63),
        (2.4999, 2),
        (-0.5, 0),
        (-1.5, -1),
        (0.49999999999999994, 0),
        (math.nan, 0),
        (math.inf, LONG_MAX),
        (-math.inf, -(2**63)),
        (1e300, LONG_MAX),
    ],
)
def test_java_round(value: float, expected: int) -> None:
    assert java_round(value) == expected


def test_concurrent_records_are_all_counted() -> None:
    quota = RLMQuotaManager("RLMCopy", 1, clock=ManualClock())

    def record_many() -> None:
        for _ in range(2000):
            quota.record(1)

    threads = [threading.Thread(target=record_many) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_S)
        assert not thread.is_alive()
    assert quota.byte_rate() == 16_000.0  # all in one sample, over the 1 s minimum window


# Throttle-time sensor (RLMQuotaMetrics) --------------------------------------------------------
def test_throttle_time_avg_and_max_over_the_broker_metric_windows() -> None:
    clock = ManualClock()
    stats = ThrottleTimeStats("remote-copy-throttle-time", clock=clock)
    assert math.isnan(stats.avg())
    assert math.isnan(stats.max())
    stats.record(100)
    clock.now_ms = 30_000  # next 30 s window
    stats.record(300)
    assert stats.avg() == 200.0
    assert stats.max() == 300.0
    clock.now_ms = 60_000  # the first sample is 2 windows old
    assert stats.avg() == 300.0
    assert stats.max() == 300.0
    clock.now_ms = 90_000
    assert math.isnan(stats.avg())
    assert math.isnan(stats.max())


def test_each_quota_has_its_kafka_throttle_sensor() -> None:
    copy = RLMQuotaManager("RLMCopy", 1)
    fetch = RLMQuotaManager("RLMFetch", 1)
    assert copy.throttle_stats.name == "remote-copy-throttle-time"
    assert fetch.throttle_stats.name == "remote-fetch-throttle-time"
    fetch.record_throttle(42)
    assert fetch.throttle_stats.max() == 42.0
    assert math.isnan(copy.throttle_stats.max())


# CopyQuotaGate ---------------------------------------------------------------------------------
def _start_acquire(
    gate: CopyQuotaGate, num_bytes: int, should_stop: Callable[[], bool]
) -> tuple[threading.Thread, list[bool]]:
    result: list[bool] = []
    thread = threading.Thread(
        target=lambda: result.append(gate.acquire(num_bytes, should_stop)), daemon=True
    )
    thread.start()
    return thread, result


def test_gate_blocks_a_copier_until_the_window_allows() -> None:
    clock = ManualClock()
    quota = RLMQuotaManager("RLMCopy", 100, clock=clock)
    gate = CopyQuotaGate(quota, wait_timeout_s=0.01)
    assert gate.acquire(500, lambda: False)  # under quota: records at once
    assert quota.throttle_time_ms() == 4_000  # 500*1000/100 - 1000

    checks = 0

    def should_stop() -> bool:  # asked twice per check of the quota
        nonlocal checks
        checks += 1
        return False

    thread, result = _start_acquire(gate, 100, should_stop)
    wait_until(lambda: quota.throttle_stats.max() == 4000.0)  # it found the quota exceeded
    wait_until(lambda: checks >= 10)  # it re-checked several times (every 10 ms)...
    assert thread.is_alive()  # ...and still waits: the clock has not moved
    assert result == []

    clock.now_ms = 5_000  # 500*1000/100 - 5000 = 0
    thread.join(DEADLINE_S)
    assert result == [True]
    assert quota.byte_rate() == 120.0  # 600 B over 5 s: the second segment was recorded
    assert gate.throttle_stats is quota.throttle_stats
    assert quota.throttle_stats.avg() == 4000.0


def test_gate_returns_false_without_recording_when_stopped() -> None:
    clock = ManualClock()
    quota = RLMQuotaManager("RLMCopy", 100, clock=clock)
    gate = CopyQuotaGate(quota, wait_timeout_s=0.01)
    gate.acquire(500, lambda: False)
    stop = threading.Event()
    thread, result = _start_acquire(gate, 100, stop.is_set)
    wait_until(lambda: not math.isnan(quota.throttle_stats.max()))
    stop.set()
    thread.join(DEADLINE_S)
    assert result == [False]
    assert quota.byte_rate() == 500.0  # the cancelled copy was not counted


def test_wake_all_rechecks_before_the_timeout() -> None:
    clock = ManualClock()
    quota = RLMQuotaManager("RLMCopy", 100, clock=clock)
    # Only a notification can wake it within the test's deadline.
    gate = CopyQuotaGate(quota, wait_timeout_s=3600)
    gate.acquire(500, lambda: False)
    thread, result = _start_acquire(gate, 100, lambda: False)
    wait_until(lambda: not math.isnan(quota.throttle_stats.max()))
    quota.update_quota(LONG_MAX)
    gate.wake_all()
    thread.join(DEADLINE_S)
    assert result == [True]


def test_a_recording_copier_wakes_the_waiters() -> None:
    clock = ManualClock()
    quota = RLMQuotaManager("RLMCopy", 100, clock=clock)
    gate = CopyQuotaGate(quota, wait_timeout_s=3600)
    gate.acquire(500, lambda: False)
    thread, result = _start_acquire(gate, 100, lambda: False)
    wait_until(lambda: not math.isnan(quota.throttle_stats.max()))
    # With a higher bound a newcomer passes at once; its record must wake the waiter, which
    # would otherwise sleep for an hour.
    quota.update_quota(1_000_000)
    assert gate.acquire(1, lambda: False)
    thread.join(DEADLINE_S)
    assert result == [True]


def test_gate_rejects_a_non_positive_timeout() -> None:
    with pytest.raises(ValueError, match="wait_timeout_s"):
        CopyQuotaGate(RLMQuotaManager("RLMCopy", 1), wait_timeout_s=0)


# FairLock --------------------------------------------------------------------------------------
def test_fair_lock_is_granted_in_arrival_order() -> None:
    lock = FairLock()
    order: list[int] = []
    lock.acquire()
    threads = []

    def queued(expected: int) -> Callable[[], bool]:
        return lambda: lock.queue_length() == expected

    for index in range(5):

        def take(index: int = index) -> None:
            with lock:
                order.append(index)

        thread = threading.Thread(target=take, daemon=True)
        thread.start()
        threads.append(thread)
        wait_until(queued(index + 1))
    lock.release()
    for thread in threads:
        thread.join(DEADLINE_S)
    assert order == [0, 1, 2, 3, 4]


def test_fair_lock_misuse_is_refused() -> None:
    lock = FairLock()
    with pytest.raises(RuntimeError, match="does not own"):
        lock.release()
    lock.acquire()
    with pytest.raises(RuntimeError, match="reentrant"):
        lock.acquire()
    lock.release()


def test_a_record_counts_at_the_time_it_was_made_not_when_it_is_measured() -> None:
    """Records are queued and folded when the rate is measured: each must keep its own time.
    Folded with the measuring time, an old record would still count."""
    clock = ManualClock(1_700_000_000_000)
    quota = RLMQuotaManager("RLMFetch", 50, 11, 1, clock=clock)
    quota.record(500)
    clock.advance(30_000)  # beyond the 11 windows of 1 s
    quota.record(100)
    assert quota.byte_rate() == 100.0  # only the recent 100 B, over the 1 s minimum window
    assert quota.throttle_time_ms() == 1_000
