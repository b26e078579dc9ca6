"""The upload rate limit: a token bucket on the uploaded stream."""

from __future__ import annotations

import io
import time

from tierlog.storage.objectstore.ratelimit import TokenBucket, rate_limited


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.now += seconds


def test_a_bucket_lets_the_burst_through_then_paces_at_the_rate() -> None:
    t = FakeTime()
    bucket = TokenBucket(1000, burst=100, clock=t.clock, sleep=t.sleep)
    bucket.acquire(100)
    assert t.slept == 0
    for _ in range(10):
        bucket.acquire(100)
    assert abs(t.slept - 1.0) < 1e-9  # 1000 bytes beyond the burst at 1000 bytes/s


def test_idle_time_refills_the_bucket_up_to_the_burst_only() -> None:
    t = FakeTime()
    bucket = TokenBucket(1000, burst=100, clock=t.clock, sleep=t.sleep)
    t.now += 60  # a minute idle saves at most one burst
    bucket.acquire(300)
    assert abs(t.slept - 0.2) < 1e-9


def test_no_limit_returns_the_source_itself() -> None:
    source = io.BytesIO(b"abc")
    assert rate_limited(source, None) is source


def test_a_limited_stream_reads_everything_and_pays_for_all_but_the_burst() -> None:
    """1 MiB at 4 MiB/s: the 400 KiB burst is free, the rest sleeps exactly its time at the
    rate, whatever the chunking of the reads."""
    t = FakeTime()
    data = bytes(range(256)) * 4096
    bucket = TokenBucket(4 << 20, clock=t.clock, sleep=t.sleep)
    assert bucket.burst == (4 << 20) // 10
    stream = rate_limited(io.BytesIO(data), bucket)
    got = b""
    while part := stream.read(256 << 10):
        assert len(part) == 256 << 10 or len(got) + len(part) == len(data), (
            "read(n) must give n bytes until the end, as SDKs expect of a file"
        )
        got += part
    assert got == data
    assert abs(t.slept - (len(data) - bucket.burst) / (4 << 20)) < 1e-9


def test_the_default_clock_is_real_time() -> None:
    """Without an injected clock the bucket paces on the monotonic clock and really sleeps;
    only a lower bound holds on a machine that may be slow."""
    bucket = TokenBucket(1 << 20, burst=64 << 10)
    started = time.monotonic()
    slept = bucket.acquire((64 << 10) + (100 << 10))  # the burst, then 100 KiB of debt
    assert slept > 0
    assert time.monotonic() - started >= slept * 0.99
