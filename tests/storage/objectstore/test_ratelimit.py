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


def test_a_limited_stream_reads_everything_in_bounded_time() -> None:
    """1 MiB at 4 MiB/s: about 0.25 s less the 400 KiB burst; never much faster or slower."""
    data = bytes(range(256)) * 4096
    stream = rate_limited(io.BytesIO(data), TokenBucket(4 << 20))
    started = time.monotonic()
    got = b""
    while part := stream.read(256 << 10):
        assert len(part) == 256 << 10 or len(got) + len(part) == len(data), (
            "read(n) must give n bytes until the end, as SDKs expect of a file"
        )
        got += part
    elapsed = time.monotonic() - started
    assert got == data
    assert 0.1 < elapsed < 2.0, elapsed
