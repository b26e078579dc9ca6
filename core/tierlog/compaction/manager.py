"""A node's log cleaner: Kafka's cleaner threads over the node's compacted partitions.

``log.cleaner.threads`` threads each loop as Kafka's ``CleanerThread`` does: take the eligible
compacted log with the highest dirty ratio that no other thread is cleaning, run one round on
it, and when nothing is eligible sleep ``log.cleaner.backoff.ms``. A round is one partition and
one job. A partition whose topic is tiered is cleaned through remote storage
(``tiered.TieredCleaner``); any other compacted partition in place (``cleaner.clean_local_log``).
The node owns the checkpoint files: after a round the partition's entry in its log directory's
``cleaner-offset-checkpoint`` moves to the round's end offset.

The engine is made once, on first use: a Spark session (``remote.log.compaction.engine``) costs
seconds to start, and a node whose topics are not compacted never pays for it.

A round that fails (a remote storage outage, a corrupt segment) is logged and the partition sits
out one backoff, as Kafka's cleaner does with a partition that threw; nothing it wrote is
visible (see ``cleaner`` and ``tiered`` for why).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tierlog.compaction.cleaner import CleanResult, clean_local_log, plan_local_log
from tierlog.compaction.config import CleanerConfig
from tierlog.compaction.engine import CleanEngine, Progress, PythonEngine
from tierlog.compaction.plan import LogToClean
from tierlog.compaction.tiered import TieredCleaner, TieredCleanResult
from tierlog.log.cleaner_checkpoint import CleanerOffsetCheckpoints
from tierlog.log.local_log import LocalLog
from tierlog.spi import IllegalStateError, InvalidArgumentError, TierlogError, TopicIdPartition

__all__ = ["CleanerTarget", "LogCleanerManager"]

_LOG = logging.getLogger(__name__)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class CleanerTarget:
    """A partition the node leads: its log, leader epoch, and its log directory's checkpoints."""

    tp: TopicIdPartition
    log: LocalLog
    leader_epoch: int
    checkpoints: CleanerOffsetCheckpoints


class LogCleanerManager:
    """See the module docstring."""

    def __init__(
        self,
        config: CleanerConfig,
        targets: Callable[[], Sequence[CleanerTarget]],
        tiered: TieredCleaner | None = None,
        *,
        clock: Callable[[], int] = _wall_clock_ms,
        engine: CleanEngine | None = None,
    ) -> None:
        self.config = config
        self._targets = targets
        self._tiered = tiered
        self._clock = clock
        self._engine = engine
        self._engine_lock = threading.Lock()
        self._lock = threading.Condition()
        self._busy: set[TopicIdPartition] = set()
        self._backoff_until: dict[TopicIdPartition, int] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.rounds = 0
        """Rounds that cleaned something (for tests and status)."""
        self.last_results: dict[TopicIdPartition, CleanResult] = {}

    # Engine --------------------------------------------------------------------------------------
    def engine(self) -> CleanEngine:
        """The engine rounds run on (made on first use)."""
        with self._engine_lock:
            if self._engine is None:
                if self.config.engine == "spark":
                    from tierlog.compaction.spark_engine import SparkEngine
                    from tierlog.compaction.spark_session import spark_session

                    self._engine = SparkEngine(spark_session(self.config.spark))
                else:
                    self._engine = PythonEngine()
            return self._engine

    # Planning ------------------------------------------------------------------------------------
    def _is_tiered(self, target: CleanerTarget) -> bool:
        return self._tiered is not None and target.log.remote_log_enabled

    def plan(self, target: CleanerTarget, now_ms: int) -> LogToClean:
        checkpoint = target.checkpoints.get(target.tp.topic_partition)
        if self._is_tiered(target):
            assert self._tiered is not None
            return self._tiered.plan(
                target.log, target.tp, checkpoint=checkpoint, now_ms=now_ms
            ).plan
        return plan_local_log(target.log, checkpoint=checkpoint, now_ms=now_ms)

    def _filthiest(self, now_ms: int) -> CleanerTarget | None:
        best: tuple[float, CleanerTarget] | None = None
        for target in self._targets():
            log = target.log
            if not log.config.compact or log.closed or target.tp in self._busy:
                continue
            if self._backoff_until.get(target.tp, 0) > now_ms:
                continue
            try:
                plan = self.plan(target, now_ms)
            except TierlogError as e:
                _LOG.warning("Cannot plan a clean of %s: %s", target.tp, e)
                continue
            if not plan.eligible(log.config.min_cleanable_dirty_ratio):
                continue
            if best is None or plan.cleanable_ratio > best[0]:
                best = (plan.cleanable_ratio, target)
        return None if best is None else best[1]

    # Rounds --------------------------------------------------------------------------------------
    def _run(self, target: CleanerTarget, *, force: bool, progress: Progress | None) -> CleanResult:
        now = self._clock()
        checkpoint = target.checkpoints.get(target.tp.topic_partition)
        result: CleanResult
        if self._is_tiered(target):
            assert self._tiered is not None
            result = self._tiered.clean(
                target.log,
                target.tp,
                leader_epoch=target.leader_epoch,
                checkpoint=checkpoint,
                now_ms=now,
                force=force,
                engine=self.engine(),
                progress=progress,
            )
        else:
            result = clean_local_log(
                target.log,
                checkpoint=checkpoint,
                now_ms=now,
                force=force,
                engine=self.engine(),
                progress=progress,
            )
            if result.cleaned:
                target.log.set_cleaner_offset(result.end_offset)
        if result.cleaned:
            target.checkpoints.update(target.tp.topic_partition, result.end_offset)
            self.rounds += 1
        elif isinstance(result, TieredCleanResult) and result.resolved_checkpoint is not None:
            # Nothing to clean, but the RLMM says how far cleaning got (a round finished by an
            # earlier leader, or a run killed after its last publication): adopt it.
            resolved = result.resolved_checkpoint
            if checkpoint != resolved:
                target.checkpoints.update(target.tp.topic_partition, resolved)
            if target.log.cleaner_offset != resolved:
                target.log.set_cleaner_offset(resolved)
        elif result.checkpoint_reset:
            target.checkpoints.update(target.tp.topic_partition, result.first_dirty_offset)
        self.last_results[target.tp] = result
        return result

    def clean_once(self) -> CleanResult | None:
        """Clean the filthiest eligible log once; None when no log was eligible."""
        now = self._clock()
        with self._lock:
            target = self._filthiest(now)
            if target is None:
                return None
            self._busy.add(target.tp)
        try:
            return self._run(target, force=False, progress=None)
        except Exception as e:
            _LOG.warning("Cleaning %s failed (retried after a backoff): %s", target.tp, e)
            with self._lock:
                self._backoff_until[target.tp] = self._clock() + self.config.log_cleaner_backoff_ms
            return None
        finally:
            with self._lock:
                self._busy.discard(target.tp)
                self._lock.notify_all()

    def clean_partition(
        self,
        topic: str,
        partition: int,
        *,
        force: bool = True,
        timeout_s: float = 600.0,
        progress: Progress | None = None,
    ) -> CleanResult:
        """Clean one partition now (``tierlog compact`` on a node), waiting for a round a
        cleaner thread may be running on it; ``force`` cleans below the dirty ratio too."""
        target = next(
            (t for t in self._targets() if (t.tp.topic, t.tp.partition) == (topic, partition)),
            None,
        )
        if target is None:
            raise InvalidArgumentError(f"this node does not lead {topic}-{partition}")
        if not target.log.config.compact:
            raise InvalidArgumentError(
                f"{topic} is not a compacted topic (cleanup.policy="
                f"{','.join(target.log.config.cleanup_policy)})"
            )
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while target.tp in self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise IllegalStateError(f"{target.tp} stayed busy for {timeout_s} s")
                self._lock.wait(remaining)
            self._busy.add(target.tp)
        try:
            return self._run(target, force=force, progress=progress)
        finally:
            with self._lock:
                self._busy.discard(target.tp)
                self._lock.notify_all()

    # Threads -------------------------------------------------------------------------------------
    def start(self) -> None:
        if not self.config.log_cleaner_enable or self._threads:
            return
        for i in range(self.config.log_cleaner_threads):
            thread = threading.Thread(
                target=self._loop, name=f"tierlog-log-cleaner-thread-{i}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _loop(self) -> None:
        backoff = self.config.log_cleaner_backoff_ms / 1000
        while not self._stop.is_set():
            try:
                result = self.clean_once()
            except Exception:
                _LOG.exception("Log cleaner round failed")
                result = None
            if result is None:
                self._stop.wait(backoff)

    def stop(self) -> None:
        """Stop the threads (a round in progress finishes first) and the engine's session."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._threads.clear()
        engine = self._engine
        release = getattr(engine, "release", None)
        if callable(release):
            release()
