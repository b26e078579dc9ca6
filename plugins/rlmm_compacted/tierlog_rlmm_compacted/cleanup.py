"""The cleanup manager: tombstones the projection's orphan keys in the background (KAFKA-20033).

Writes already tombstone what they make obsolete (``ProjectionApplier.plan_write``), but only at
level 1: keys left behind before compaction was turned on (a migrated history, a level-0
period), keys of segments a bootstrapping reader forgot, and the segment keys of a partition
whose deletion finished stay in the topic until something tombstones them. That is this
manager's job: every ``remote.log.metadata.cleanup.interval.ms`` (and on demand: ``run_once``),
at level 1 only, for each partition this node leads that is ready, it asks the applier for the
partition's orphan keys (``ProjectionApplier.orphan_keys``: keys of segments deleted or no
longer in the cache, but for the displacement markers still needed; every segment key of a
partition whose deletion finished) and tombstones them through the writes' own transactional
path, waiting until this node's consumer applied them. A displacement marker (the history of a
deleted copy that displaced copies still finished) becomes an orphan once those copies are
deleted or routed again; when they have another end offset than the marker, no write's
tombstones reach it, and this scan is what removes it.

Why it is safe:

- **idempotent**: a tombstone applied removes its key from the applier's state, so the next
  scan does not find it again; ``run_once`` waits for that before it returns;
- **two nodes**: only keys describing terminal segments are tombstoned, and only the leader of
  epoch L writes new values under keys of epoch L, so a former leader's scan cannot hide a live
  value; the scan covers the partitions this node leads only;
- **concurrent writes**: a partition with a write in flight (produced, not yet applied here) is
  skipped until the next scan: the applier's state is about to change. Writes and scans of one
  partition are planned and queued under one lock (the writer's), in order.

The manager does not know Kafka: the RLMM gives it the applier, the leader set, readiness, the
level and the transactional write of tombstones (``TombstoneWriter``).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Collection
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Final, Protocol

from tierlog.spi import InvalidArgumentError, TopicIdPartition
from tierlog_rlmm_compacted.keys import MetadataKey

__all__ = ["CleanupManager", "TombstoneWriter"]

_LOG = logging.getLogger(__name__)

_WAIT_S: Final = 120.0
"""How long ``run_once`` waits for one partition's tombstones to be applied, by default."""


class TombstoneWriter(Protocol):
    """How the cleanup manager writes: the compacted RLMM's transactional path."""

    def __call__(
        self, tip: TopicIdPartition, select: Callable[[], list[MetadataKey]]
    ) -> tuple[int, Future[None]] | None:
        """Unless ``tip`` has a write in flight (then None: skipped), call ``select()`` under
        the write lock and tombstone the keys it gives in one transaction; the count and a
        future completed once this node's consumer applied them."""
        ...


class CleanupManager:
    """Periodic orphan-key cleanup; see the module docstring.

    ``partitions()`` gives the partitions this node leads; ``is_ready(tip)`` whether their
    state is replayed; ``level()`` the current compaction level. ``start()`` runs ``run_once``
    every ``interval_ms`` on a thread of its own until ``close()``.
    """

    def __init__(
        self,
        *,
        orphan_keys: Callable[[TopicIdPartition], list[MetadataKey]],
        partitions: Callable[[], Collection[TopicIdPartition]],
        is_ready: Callable[[TopicIdPartition], bool],
        level: Callable[[], int],
        write: TombstoneWriter,
        interval_ms: int,
        wait_s: float = _WAIT_S,
        name: str = "rlmm-cleanup",
    ) -> None:
        if interval_ms < 1:
            raise InvalidArgumentError(f"cleanup interval must be at least 1 ms: {interval_ms}")
        self._orphan_keys = orphan_keys
        self._partitions = partitions
        self._is_ready = is_ready
        self._level = level
        self._write = write
        self._interval_s = interval_ms / 1000
        self._wait_s = wait_s
        self._stop = threading.Event()
        self._run_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._started = False

    def start(self) -> None:
        """Run the periodic scan (first after one interval)."""
        self._started = True
        self._thread.start()

    def close(self, timeout: float = 30.0) -> None:
        """Stop the periodic scan (a scan running finishes its partition); idempotent."""
        self._stop.set()
        if self._started and self._thread.is_alive():
            self._thread.join(timeout)

    def run_once(self) -> int:
        """One scan: tombstone the orphan keys of every led, ready partition (level 1 only)
        and wait until they are applied; how many tombstones were written. A partition with a
        write in flight is skipped; a partition whose tombstones fail is logged at WARNING and
        left for the next scan."""
        with self._run_lock:
            if self._level() < 1:
                _LOG.debug("cleanup skipped: the projection is at compaction level 0")
                return 0
            written = 0
            pending: list[tuple[TopicIdPartition, int, Future[None]]] = []
            skipped: list[TopicIdPartition] = []
            for tip in sorted(self._partitions(), key=str):
                if self._stop.is_set():
                    break
                if not self._is_ready(tip):
                    continue
                outcome = self._write(tip, functools.partial(self._orphan_keys, tip))
                if outcome is None:
                    skipped.append(tip)
                elif outcome[0]:
                    pending.append((tip, *outcome))
            for tip, count, future in pending:
                try:
                    future.result(timeout=self._wait_s)
                except FutureTimeoutError:
                    _LOG.warning(
                        "cleanup of %s: %d tombstone(s) not applied within %.0f s",
                        tip,
                        count,
                        self._wait_s,
                    )
                    continue
                except Exception as exc:
                    _LOG.warning("cleanup of %s: tombstones not written: %s", tip, exc)
                    continue
                written += count
                _LOG.info("cleanup of %s: %d orphan key(s) tombstoned", tip, count)
            if skipped:
                _LOG.debug("cleanup skipped %s: writes in flight", skipped)
            return written

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.run_once()
            except Exception:  # the next interval tries again
                _LOG.exception("the remote log metadata cleanup failed")
