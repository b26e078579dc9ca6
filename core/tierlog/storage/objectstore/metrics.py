"""Metrics of an object-store RSM: requests, bytes, errors and throttles per backend and
operation, and cache hits and misses, exported for Prometheus.

``ObjectStoreMetrics`` is the ``RequestObserver`` the RSM hands its backend, so every HTTP
request the backend makes (each multipart part included) is counted where it happens. Each RSM
owns its ``CollectorRegistry`` (never the process-wide default), as ``RemoteStorageMetrics``
does, so several RSMs or tests in one process keep separate counts; ``expose()`` renders it in
Prometheus text format, and ``snapshot()`` gives the raw numbers (tests, ``tierlog status``).

Series (all counters):

- ``tierlog_objectstore_requests_total{backend, operation, outcome}``: outcome is ``ok``,
  ``not_found``, ``throttled`` or ``error``;
- ``tierlog_objectstore_sent_bytes_total{backend, operation}`` and
  ``tierlog_objectstore_received_bytes_total{backend, operation}``;
- ``tierlog_objectstore_errors_total{backend, operation}`` (outcome ``error``, throttles
  excluded) and ``tierlog_objectstore_throttles_total{backend, operation}``;
- ``tierlog_objectstore_cache_hits_total{backend, cache}`` and ``..._cache_misses_total``:
  cache is ``memory``, ``disk`` or ``manifest``.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, Metric

from tierlog.storage.objectstore.backend import Operation, Outcome

__all__ = ["MetricsSnapshot", "ObjectStoreMetrics"]


@dataclass(frozen=True)
class MetricsSnapshot:
    """Counts at one moment, keyed like the Prometheus labels."""

    requests: dict[tuple[str, str], int]
    """(operation, outcome) -> requests."""
    bytes_sent: dict[str, int]
    bytes_received: dict[str, int]
    cache_hits: dict[str, int]
    cache_misses: dict[str, int]

    def count(self, operation: str, outcome: str | None = None) -> int:
        """Requests of ``operation`` (with ``outcome``, or all outcomes)."""
        return sum(
            n
            for (op, out), n in self.requests.items()
            if op == operation and (outcome is None or out == outcome)
        )


class ObjectStoreMetrics:
    """Counts requests of one backend; a ``RequestObserver`` and a Prometheus collector."""

    def __init__(self, backend: str = "object store") -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self._requests: defaultdict[tuple[str, str], int] = defaultdict(int)
        self._sent: defaultdict[str, int] = defaultdict(int)
        self._received: defaultdict[str, int] = defaultdict(int)
        self._hits: defaultdict[str, int] = defaultdict(int)
        self._misses: defaultdict[str, int] = defaultdict(int)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def __call__(
        self,
        operation: Operation,
        *,
        outcome: Outcome,
        bytes_sent: int = 0,
        bytes_received: int = 0,
    ) -> None:
        with self._lock:
            self._requests[(operation, outcome)] += 1
            if bytes_sent:
                self._sent[operation] += bytes_sent
            if bytes_received:
                self._received[operation] += bytes_received

    def cache_hit(self, cache: str, n: int = 1) -> None:
        with self._lock:
            self._hits[cache] += n

    def cache_miss(self, cache: str, n: int = 1) -> None:
        with self._lock:
            self._misses[cache] += n

    def snapshot(self) -> MetricsSnapshot:
        with self._lock:
            return MetricsSnapshot(
                dict(self._requests),
                dict(self._sent),
                dict(self._received),
                dict(self._hits),
                dict(self._misses),
            )

    def collect(self) -> Iterable[Metric]:
        """Build every family (``prometheus_client`` Collector protocol)."""
        snap = self.snapshot()
        b = self.backend
        requests = CounterMetricFamily(
            "tierlog_objectstore_requests",
            "Requests to the object store",
            labels=["backend", "operation", "outcome"],
        )
        errors = CounterMetricFamily(
            "tierlog_objectstore_errors",
            "Failed requests (throttles excluded)",
            labels=["backend", "operation"],
        )
        throttles = CounterMetricFamily(
            "tierlog_objectstore_throttles",
            "Requests the store throttled",
            labels=["backend", "operation"],
        )
        failed: defaultdict[str, int] = defaultdict(int)
        throttled: defaultdict[str, int] = defaultdict(int)
        for (op, outcome), n in sorted(snap.requests.items()):
            requests.add_metric([b, op, outcome], n)
            if outcome == "error":
                failed[op] += n
            elif outcome == "throttled":
                throttled[op] += n
        for op, n in sorted(failed.items()):
            errors.add_metric([b, op], n)
        for op, n in sorted(throttled.items()):
            throttles.add_metric([b, op], n)
        sent = CounterMetricFamily(
            "tierlog_objectstore_sent_bytes",
            "Bytes sent to the store",
            labels=["backend", "operation"],
        )
        for op, n in sorted(snap.bytes_sent.items()):
            sent.add_metric([b, op], n)
        received = CounterMetricFamily(
            "tierlog_objectstore_received_bytes",
            "Bytes received from the store",
            labels=["backend", "operation"],
        )
        for op, n in sorted(snap.bytes_received.items()):
            received.add_metric([b, op], n)
        hits = CounterMetricFamily(
            "tierlog_objectstore_cache_hits", "Cache hits", labels=["backend", "cache"]
        )
        for cache, n in sorted(snap.cache_hits.items()):
            hits.add_metric([b, cache], n)
        misses = CounterMetricFamily(
            "tierlog_objectstore_cache_misses", "Cache misses", labels=["backend", "cache"]
        )
        for cache, n in sorted(snap.cache_misses.items()):
            misses.add_metric([b, cache], n)
        return [requests, errors, throttles, sent, received, hits, misses]

    def expose(self) -> bytes:
        """The registry in Prometheus text format 0.0.4."""
        return generate_latest(self.registry)
