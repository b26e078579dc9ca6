"""``upload.rate.limit.bytes.per.second``: a token bucket on the stream an upload reads.

Limiting the *source* stream rather than the network keeps the limiter out of every SDK: the
backend can only send what it has read, so its sending rate follows, with at most its buffers
(part size x parallelism) of lead. One bucket is shared by every copy of an RSM instance, so
the limit holds for the broker's tiering as a whole, as Kafka's
``remote.log.manager.copy.max.bytes.per.second`` quota does.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = ["RateLimitedReader", "TokenBucket", "rate_limited"]

_MIN_BURST = 64 << 10


class TokenBucket:
    """``rate`` tokens (bytes) per second, up to ``burst`` saved up (default: 100 ms worth,
    at least 64 KiB). ``acquire`` may overdraw; the caller then sleeps the debt off, so a large
    read is paid for afterwards and concurrent readers share the rate fairly."""

    def __init__(
        self,
        rate: int,
        burst: int | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self.rate = rate
        self.burst = burst if burst is not None else max(_MIN_BURST, rate // 10)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(self.burst)
        self._updated = clock()

    def acquire(self, n: int) -> float:
        """Take ``n`` tokens, sleeping while the bucket is in debt; returns the time slept."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._updated) * self.rate)
            self._updated = now
            self._tokens -= n
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait


class RateLimitedReader(io.RawIOBase):
    """Reads ``source`` at most ``bucket.burst`` bytes at a time, paying the bucket for each."""

    def __init__(self, source: BinaryIO, bucket: TokenBucket) -> None:
        super().__init__()
        self._source = source
        self._bucket = bucket

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._bucket.burst)
        data = self._source.read(want)
        n = len(data)
        view[:n] = data
        if n:
            self._bucket.acquire(n)
        return n


def rate_limited(source: BinaryIO, bucket: TokenBucket | None) -> BinaryIO:
    """``source`` itself when there is no limit, else a buffered, limited reader of it whose
    ``read(n)`` returns ``n`` bytes unless at the end (as SDKs expect of a file)."""
    if bucket is None:
        return source
    return io.BufferedReader(RateLimitedReader(source, bucket), buffer_size=64 << 10)
