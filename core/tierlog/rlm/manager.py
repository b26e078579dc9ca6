"""The RemoteLogManager: leadership, the copy/expiration/follower tasks, reads from remote storage.

Kafka's ``RemoteLogManager`` (KIP-405) for one node. Leadership is given to it, as Kafka's
``ReplicaManager`` gives it: ``on_leadership_change(leaders, followers)`` with the partitions'
``LocalLog`` s. Then, every ``remote.log.manager.task.interval.ms``:

- a leader's **copy task** (copier pool) uploads its sealed segments below the last stable
  offset, in order: ``COPY_SEGMENT_STARTED`` is durable in the RLMM before the RSM sees a byte,
  ``COPY_SEGMENT_FINISHED`` before the log's highest offset in remote storage moves, and only
  that lets local retention delete the segment. A crash at any point leaves either the local
  segment or a finished copy, never neither. A non-retriable RSM failure deletes the partial
  copy; a retriable one leaves the ``COPY_SEGMENT_STARTED`` record dangling (the expiration task
  will not delete it while it is being copied, and a later copy of the same offsets under a new
  segment id supersedes it) and the task backs off (``remote.log.manager.task.retry.*``);
- a leader's **expiration task** (expiration pool) applies remote retention
  (``tierlog.rlm.retention``): the log start offset moves first, then each expired segment goes
  through ``DELETE_SEGMENT_STARTED`` -> RSM delete -> ``DELETE_SEGMENT_FINISHED``. A compacted
  topic is tiered like any other (a tierlog extension: Kafka refuses remote storage for it); its
  remote segments expire by ``retention.ms``/``retention.bytes`` only with ``compact,delete``
  (the KIP "Tiered Storage for compacted topics": with ``compact`` alone only compaction and the
  log start offset remove data);
- a follower's **follower task** (follower pool) keeps its highest offset in remote storage up
  to date from the RLMM, so its local retention never deletes what the leader has not tiered.

Reads below the local log start go through ``read``/``async_read`` (``tierlog.rlm.remote_read``);
``build_remote_log_aux_state`` is the follower bootstrap of Kafka's ``TierStateMachine``.

Deliberate differences from Kafka: the retry settings ``remote.log.manager.task.retry.*`` (which
Kafka defines but does not use) drive an exponential backoff with jitter between failed runs of a
task; ``trigger_*`` methods run a task now (for the node's API and for tests).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from tierlog.compaction.faults import fault_point
from tierlog.compaction.tiered import remote_chain, superseded_segments
from tierlog.log.checkpoint import parse_leader_epoch_checkpoint
from tierlog.log.local_log import LocalLog
from tierlog.log.segment import FetchDataInfo, TimestampAndOffset
from tierlog.rlm.candidates import CopyCandidate, candidate_log_segments, copy_lag
from tierlog.rlm.config import RemoteLogManagerConfig
from tierlog.rlm.index_cache import RemoteIndexCache
from tierlog.rlm.lineage import find_highest_remote_offset, find_log_start_offset
from tierlog.rlm.metrics import RemoteStorageMetrics
from tierlog.rlm.quota import CopyQuotaGate, RLMQuotaManager
from tierlog.rlm.remote_read import RemoteLogReader, RemoteReaderPool, RemoteStorageFetchInfo
from tierlog.rlm.retention import (
    REASON_DANGLING_DELETE,
    plan_remote_retention,
    remote_log_stats,
)
from tierlog.rlm.scheduler import ScheduledPool, ScheduledTask
from tierlog.spi import (
    IllegalStateError,
    IndexType,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageException,
    RemoteStorageManager,
    RemoteStorageNotReadyException,
    RetriableRemoteStorageException,
    TopicIdPartition,
    TopicPartition,
)

__all__ = [
    "CustomMetadataSizeLimitExceededError",
    "RemoteLogManager",
]

_LOG = logging.getLogger(__name__)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class CustomMetadataSizeLimitExceededError(RemoteStorageException):
    """The RSM returned custom metadata larger than
    ``remote.log.metadata.custom.metadata.max.bytes`` (Kafka's
    ``CustomMetadataSizeLimitExceededException``): the copy was deleted and the partition's copy
    task cancelled until an operator raises the limit or fixes the plugin."""


# Tasks -----------------------------------------------------------------------------------------
class _RLMTask:
    """A periodic task for one partition (Kafka's ``RLMTask``): skipped while cancelled or while
    the RLMM is not ready for the partition; a failing run backs off exponentially."""

    kind = "task"

    def __init__(self, rlm: RemoteLogManager, tp: TopicIdPartition, log: LocalLog) -> None:
        self.rlm = rlm
        self.tp = tp
        self.log = log
        self._cancelled = False
        self._run_lock = threading.Lock()
        self.scheduled: ScheduledTask | None = None
        self.failures = 0
        self.retry_at_ms = 0
        self.last_error: BaseException | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self, *, wait: bool = False) -> None:
        self._cancelled = True
        if self.scheduled is not None:
            self.scheduled.cancel(wait=wait)

    def run(self) -> None:
        """One run; never raises (a pool thread must survive any task).

        Runs of one task are serialized: ``run_once`` on a caller's thread waits for a
        scheduled run in progress (two copy runs at once would upload the same segment twice).
        """
        with self._run_lock:
            self._run()

    def _run(self) -> None:
        if self._cancelled:
            return
        now = self.rlm.clock_ms()
        if now < self.retry_at_ms:
            _LOG.debug(
                "Skipping %s for %s: backing off until %d", self.kind, self.tp, self.retry_at_ms
            )
            return
        if not self.rlm.rlmm.is_ready(self.tp):
            _LOG.debug("Skipping %s for %s: remote log metadata not ready", self.kind, self.tp)
            return
        try:
            self.execute()
        except RetriableRemoteStorageException as e:
            self._failed(e, retriable=True)
        except Exception as e:
            self._failed(e, retriable=False)
        else:
            self.failures = 0
            self.retry_at_ms = 0
            self.last_error = None

    def _failed(self, error: BaseException, *, retriable: bool) -> None:
        self.failures += 1
        self.last_error = error
        backoff = self.rlm.retry_backoff_ms(self.failures)
        self.retry_at_ms = self.rlm.clock_ms() + backoff
        if self._cancelled:
            return
        extra = {"topic": self.tp.topic, "partition": self.tp.partition, "task": self.kind}
        if retriable:
            _LOG.info(
                "%s for %s failed (retriable, attempt %d), retrying in %d ms: %s",
                self.kind,
                self.tp,
                self.failures,
                backoff,
                error,
                extra=extra,
            )
        else:
            _LOG.warning(
                "%s for %s failed (attempt %d), retrying in %d ms",
                self.kind,
                self.tp,
                self.failures,
                backoff,
                exc_info=error,
                extra=extra,
            )

    def execute(self) -> None:
        raise NotImplementedError


class RLMCopyTask(_RLMTask):
    """Uploads the leader's sealed segments (Kafka's ``RLMCopyTask``)."""

    kind = "copy task"

    def __init__(self, rlm: RemoteLogManager, tp: TopicIdPartition, log: LocalLog) -> None:
        super().__init__(rlm, tp, log)
        self.copied_offset: tuple[int, int] | None = None
        self.log_start_offset_updated = False

    def cancel(self, *, wait: bool = False) -> None:
        """A run waiting on the copy quota leaves at once rather than at its next re-check
        (Kafka interrupts the copier thread)."""
        self._cancelled = True
        self.rlm.copy_quota_gate.wake_all()
        super().cancel(wait=wait)

    def execute(self) -> None:
        if not self.log_start_offset_updated:
            start = find_log_start_offset(
                self.rlm.rlmm, self.tp, self.log.leader_epoch_cache, self.log.local_log_start_offset
            )
            self.log.update_log_start_offset_from_remote_tier(start)
            self.log_start_offset_updated = True
        if self.copied_offset is None:
            offset, epoch = find_highest_remote_offset(
                self.rlm.rlmm, self.tp, self.log.leader_epoch_cache, self.log.log_end_offset
            )
            self.copied_offset = (offset, epoch)
            self.log.update_highest_offset_in_remote_storage(offset)
            _LOG.info(
                "Found the highest copied remote offset %d (epoch %d) for %s",
                offset,
                epoch,
                self.tp,
            )
        self.copy_log_segments_to_remote()

    def copy_log_segments_to_remote(self) -> None:
        assert self.copied_offset is not None
        log = self.log
        lso = log.last_stable_offset
        if lso < 0:
            _LOG.warning(
                "lastStableOffset for partition %s is %d, which should not be negative",
                self.tp,
                lso,
            )
            return
        copied = self.copied_offset[0]
        if lso > 0 and copied < lso:
            from_offset = max(copied + 1, log.log_start_offset)
            candidates = candidate_log_segments(log, from_offset, lso, now_ms=self.rlm.clock_ms())
            _LOG.debug(
                "%d candidate segments to copy for %s from offset %d",
                len(candidates),
                self.tp,
                from_offset,
            )
            for candidate in candidates:
                if self._cancelled:
                    _LOG.info(
                        "Skipping copying the rest of the segments of %s: the task is cancelled",
                        self.tp,
                    )
                    return
                if not self.rlm.copy_quota_gate.acquire(
                    candidate.segment.size, lambda: self._cancelled
                ):
                    return
                segment_id = RemoteLogSegmentId.generate_new(self.tp)
                self.rlm.segment_ids_being_copied_add(segment_id)
                try:
                    self.copy_log_segment(candidate, segment_id)
                finally:
                    self.rlm.segment_ids_being_copied_discard(segment_id)
        lag_bytes, lag_segments = copy_lag(log)
        self.rlm.metrics.set_copy_lag(self.tp.topic, self.tp.partition, lag_bytes, lag_segments)

    def copy_log_segment(self, candidate: CopyCandidate, segment_id: RemoteLogSegmentId) -> None:
        """Kafka's ``copyLogSegment``: STARTED -> RSM copy -> FINISHED -> highest offset moves."""
        rlm = self.rlm
        inputs = self.log.segment_copy_inputs(candidate.segment)
        metadata = RemoteLogSegmentMetadata(
            remote_log_segment_id=segment_id,
            start_offset=inputs.start_offset,
            end_offset=inputs.end_offset,
            max_timestamp_ms=inputs.largest_timestamp,
            broker_id=rlm.broker_id,
            event_timestamp_ms=rlm.clock_ms(),
            segment_size_in_bytes=inputs.size_in_bytes,
            segment_leader_epochs=inputs.segment_leader_epochs,
            state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
            txn_idx_empty=inputs.txn_index_empty,
            broker_leader_epoch=self.log.latest_epoch(),
        )
        extra = {
            "topic": self.tp.topic,
            "partition": self.tp.partition,
            "segment_id": str(segment_id.id),
            "start_offset": inputs.start_offset,
            "end_offset": inputs.end_offset,
        }
        rlm.rlmm.add_remote_log_segment_metadata(metadata).result()
        rlm.metrics.record_copy_request(self.tp.topic)
        _LOG.info(
            "Copying %s to remote storage as %s",
            candidate.segment.log_path.name,
            segment_id.id,
            extra=extra,
        )
        started = time.monotonic()
        try:
            custom = rlm.rsm.copy_log_segment_data(metadata, inputs.data)
        except RetriableRemoteStorageException:
            rlm.metrics.record_copy_error(self.tp.topic)
            raise
        except RemoteStorageException:
            rlm.metrics.record_copy_error(self.tp.topic)
            _LOG.warning("Copy of %s failed: deleting the partial copy", segment_id.id, extra=extra)
            rlm.delete_remote_log_segment(metadata, lambda: False, self.log.latest_epoch())
            raise
        except Exception as e:
            # A plugin that raises something else broke the contract; treat it as a
            # non-retriable storage failure so the partial copy is cleaned up.
            rlm.metrics.record_copy_error(self.tp.topic)
            rlm.delete_remote_log_segment(metadata, lambda: False, self.log.latest_epoch())
            raise RemoteStorageException(f"copy of segment {segment_id.id} failed: {e!r}") from e
        limit = rlm.config.remote_log_metadata_custom_metadata_max_bytes
        if custom is not None and len(custom.value) > limit:
            rlm.metrics.record_copy_error(self.tp.topic)
            rlm.delete_remote_log_segment(metadata, lambda: False, self.log.latest_epoch())
            self.cancel()
            raise CustomMetadataSizeLimitExceededError(
                f"custom metadata of segment {segment_id.id} of {self.tp} is "
                f"{len(custom.value)} bytes, above remote.log.metadata.custom.metadata.max.bytes="
                f"{limit}: the copy was deleted and copying for the partition is stopped"
            )
        rlm.rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                segment_id,
                rlm.clock_ms(),
                custom,
                RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                rlm.broker_id,
                self.log.latest_epoch(),
            )
        ).result()
        elapsed = time.monotonic() - started
        rlm.metrics.record_copy_bytes(self.tp.topic, inputs.size_in_bytes)
        rlm._count_copied(inputs.size_in_bytes)
        last_epoch = max(inputs.segment_leader_epochs) if inputs.segment_leader_epochs else -1
        self.copied_offset = (inputs.end_offset, last_epoch)
        self.log.update_highest_offset_in_remote_storage(inputs.end_offset)
        _LOG.info(
            "Copied %s to remote storage in %.3f s (%d bytes)",
            candidate.segment.log_path.name,
            elapsed,
            inputs.size_in_bytes,
            extra=extra,
        )


class RLMExpirationTask(_RLMTask):
    """Applies remote retention (Kafka's ``RLMExpirationTask``)."""

    kind = "expiration task"

    def __init__(self, rlm: RemoteLogManager, tp: TopicIdPartition, log: LocalLog) -> None:
        super().__init__(rlm, tp, log)
        self.all_segments_valid = False
        """Once every remote segment was found within the lineage, size retention trusts the
        RLMM's total instead of re-checking each segment (Kafka's ``isAllSegmentsValid``)."""
        self._size_percent_registered = False

    def cancel(self, *, wait: bool = False) -> None:
        """Also drop the partition's ``RetentionSizeInPercent`` and ``LocalRetentionSizeInPercent``
        gauges, as Kafka's ``RLMExpirationTask.cancel`` does (no stale value after a leadership
        change)."""
        self._cancelled = True
        self.all_segments_valid = False
        labels: dict[str, str | int] = {"topic": self.tp.topic, "partition": self.tp.partition}
        for name in ("RetentionSizeInPercent", "LocalRetentionSizeInPercent"):
            self.rlm.metrics.unregister_gauge_callback(name, labels)
        self._size_percent_registered = False
        super().cancel(wait=wait)

    def _set_size_percent(
        self, total_size: int, retention_size: int, local_size: int, local_retention: int
    ) -> None:
        """Kafka's ``calculateSizeInPercent``: 0 where the limit is not positive."""
        if self._cancelled:
            return
        self._size_percent_registered = True
        self.rlm.metrics.set_retention_percent(
            self.tp.topic,
            self.tp.partition,
            total_size * 100 // retention_size if retention_size > 0 else 0,
            local_size * 100 // local_retention if local_retention > 0 else 0,
        )

    def execute(self) -> None:
        rlm = self.rlm
        log = self.log
        config = log.config
        if not self._size_percent_registered:
            # Kafka registers both gauges (at 0) on the task's first run.
            self._set_size_percent(0, 0, 0, 0)
        started = time.monotonic()
        stats = remote_log_stats(rlm.rlmm.list_remote_log_segments(self.tp))
        computation_ms = (time.monotonic() - started) * 1000
        rlm.metrics.set_remote_log_size(
            self.tp.topic, self.tp.partition, stats.size, stats.count, computation_ms
        )
        if stats.count == 0:
            size = log.size()
            self._set_size_percent(
                size, config.retention_bytes, size, config.effective_local_retention_bytes
            )
            return
        if log.highest_offset_in_remote_storage < 0:
            # KAFKA-20732: a new leader's copy task may not have run yet; without the seed, the
            # segments already in remote storage would count as local in the size breach.
            offset, _ = find_highest_remote_offset(
                rlm.rlmm, self.tp, log.leader_epoch_cache, log.log_end_offset
            )
            log.update_highest_offset_in_remote_storage(offset)
        plan = plan_remote_retention(
            rlm.rlmm,
            self.tp,
            epoch_cache_entries=log.leader_epoch_cache.epoch_with_offsets(),
            log_end_offset=log.log_end_offset,
            log_start_offset=log.log_start_offset,
            only_local_log_segments_size=log.only_local_log_segments_size(),
            # cleanup.policy=compact without delete: nothing expires by time or size.
            retention_ms=-1 if config.compact and not config.delete else config.retention_ms,
            retention_bytes=(
                -1 if config.compact and not config.delete else config.retention_bytes
            ),
            now_ms=rlm.clock_ms(),
            segment_ids_being_copied=rlm.segment_ids_being_copied(),
            assume_all_segments_valid=self.all_segments_valid,
        )
        if plan.all_segments_valid is not None:
            # None: the check did not run (the total was within retention.bytes, or the
            # cached answer was used), which says nothing new; Kafka keeps its cache then.
            self.all_segments_valid = plan.all_segments_valid
        if plan.retention_size_total is not None:
            self._set_size_percent(
                plan.retention_size_total,
                config.retention_bytes,
                log.size(),
                config.effective_local_retention_bytes,
            )
        if plan.new_log_start_offset is not None:
            # Before deleting: a follower that takes over must not serve what is being deleted.
            log.update_log_start_offset_from_remote_tier(plan.new_log_start_offset)
        pending = list(plan.to_delete) + list(plan.unreferenced)
        reasons = dict(plan.reasons)
        superseded = self._superseded_copies(pending)
        reasons.update((s.remote_log_segment_id, "superseded copy") for s in superseded)
        pending += superseded
        replaced = self._replaced_by_cleaning(pending)
        reasons.update((s.remote_log_segment_id, "replaced by a cleaned segment") for s in replaced)
        pending += replaced
        dangling = self._dangling_deletes(pending)
        reasons.update((s.remote_log_segment_id, REASON_DANGLING_DELETE) for s in dangling)
        pending += dangling
        lag_bytes = sum(s.segment_size_in_bytes for s in pending)
        lag_segments = len(pending)
        rlm.metrics.set_delete_lag(self.tp.topic, self.tp.partition, lag_bytes, lag_segments)
        for segment in pending:
            if self._cancelled:
                return
            reason = reasons[segment.remote_log_segment_id]
            _LOG.info(
                "Deleting remote segment %s [%d, %d] of %s: %s",
                segment.remote_log_segment_id.id,
                segment.start_offset,
                segment.end_offset,
                self.tp,
                reason,
                extra={
                    "topic": self.tp.topic,
                    "partition": self.tp.partition,
                    "segment_id": str(segment.remote_log_segment_id.id),
                    "reason": reason,
                },
            )
            if not rlm.delete_remote_log_segment(
                segment, lambda: self._cancelled, self.log.latest_epoch()
            ):
                return
            lag_bytes -= segment.segment_size_in_bytes
            lag_segments -= 1
            rlm.metrics.set_delete_lag(self.tp.topic, self.tp.partition, lag_bytes, lag_segments)

    def _superseded_copies(
        self, already: list[RemoteLogSegmentMetadata]
    ) -> list[RemoteLogSegmentMetadata]:
        """Copies left in ``COPY_SEGMENT_STARTED`` (a crash or a retriable failure mid-copy)
        whose offsets a finished copy now covers: their data, if any, is garbage.

        Kafka leaves them until remote retention reaches them; tierlog deletes them as soon as
        a finished copy supersedes them, so a crash loop cannot pile up orphaned objects. Safe
        against a zombie leader still copying one: once marked ``DELETE_SEGMENT_STARTED`` its
        ``COPY_SEGMENT_FINISHED`` is an invalid transition that every RLMM drops.
        """
        highest = self.log.highest_offset_in_remote_storage
        if highest < 0:
            return []
        being_copied = self.rlm.segment_ids_being_copied()
        planned = {s.remote_log_segment_id for s in already}
        return [
            s
            for s in self.rlm.rlmm.list_remote_log_segments(self.tp)
            if s.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED
            and s.end_offset <= highest
            and s.remote_log_segment_id not in being_copied
            and s.remote_log_segment_id not in planned
        ]

    def _replaced_by_cleaning(
        self, already: list[RemoteLogSegmentMetadata]
    ) -> list[RemoteLogSegmentMetadata]:
        """Segments of a compacted topic that lost to a routed one of the same offsets (replaced
        by a cleaned segment, or a cleaned segment that is older or a zombie's:
        ``compaction.tiered.superseded_segments``), once the winner has been the one readers get
        for ``superseded_delete_delay_ms``.

        The cleaner never deletes: it only uploads and publishes. Deleting here, from the
        leader's view of the lineage, keeps a zombie leader's rewrite from deleting what the
        current leader still routes to (the replacement must be valid in this node's RLMM, and
        a newer leader's vector invalidates a zombie's segments, which puts the replaced
        segment back in the chain), and the delay lets a read that looked the old segment up
        just before the swap finish.
        """
        log = self.log
        if not log.config.compact or log.highest_offset_in_remote_storage < 0:
            return []
        chain = remote_chain(self.rlm.rlmm, self.tp, log)
        replacement = {(s.start_offset, s.end_offset): s for s in chain}
        planned = {s.remote_log_segment_id for s in already}
        now = self.rlm.clock_ms()
        delay = self.rlm.superseded_delete_delay_ms
        return [
            s
            for s in superseded_segments(self.rlm.rlmm, self.tp, chain)
            if s.remote_log_segment_id not in planned
            and max(
                replacement[(s.start_offset, s.end_offset)].event_timestamp_ms,
                s.event_timestamp_ms,
            )
            + delay
            <= now
        ]

    def _dangling_deletes(
        self, already: list[RemoteLogSegmentMetadata]
    ) -> list[RemoteLogSegmentMetadata]:
        """Segments left in ``DELETE_SEGMENT_STARTED`` (a deletion that failed or crashed
        half-way, e.g. the cleanup of a failed copy) that the retention scan did not reach.

        Kafka retries such a deletion only when its scan gets to the segment, and the scan
        stops at the first segment it keeps: a failed cleanup of a copy above that point would
        leave its objects in the store for as long as the data is retained, or forever.
        ``DELETE_SEGMENT_STARTED`` is final, so retrying the deletion at once is always safe.
        A segment whose copy task is still cleaning it up is left to that task.
        """
        being_copied = self.rlm.segment_ids_being_copied()
        planned = {s.remote_log_segment_id for s in already}
        return [
            s
            for s in self.rlm.rlmm.list_remote_log_segments(self.tp)
            if s.state == RemoteLogSegmentState.DELETE_SEGMENT_STARTED
            and s.remote_log_segment_id not in being_copied
            and s.remote_log_segment_id not in planned
        ]


class RLMFollowerTask(_RLMTask):
    """Keeps a follower's highest offset in remote storage current (Kafka's ``RLMFollowerTask``)."""

    kind = "follower task"

    def execute(self) -> None:
        offset, _ = find_highest_remote_offset(
            self.rlm.rlmm, self.tp, self.log.leader_epoch_cache, self.log.log_end_offset
        )
        self.log.update_highest_offset_in_remote_storage(offset)


@dataclass
class _PartitionTasks:
    """A partition's tasks: copy and expiration while this node leads it, follower while it
    follows; the log they were made for (a new ``LocalLog`` for the partition replaces them)."""

    log: LocalLog
    copy: RLMCopyTask | None = None
    expiration: RLMExpirationTask | None = None
    follower: RLMFollowerTask | None = None


# The manager -----------------------------------------------------------------------------------
class RemoteLogManager:
    """Tiering for the partitions of one node (module docstring).

    ``rsm`` and ``rlmm`` are configured plugin instances; the manager closes them in ``close``
    only if ``own_plugins`` is true. ``log_dir`` holds the ``remote-log-index-cache``. With
    ``schedule_tasks=False`` tasks are created but run only through ``run_once`` (tests, tools
    that drive tiering step by step).

    ``clock_ms`` (wall-clock milliseconds) stamps metadata events and decides retention by time,
    task backoff and the KIP-956 quotas' windows, as Kafka's ``time`` does for all of them: a
    test's manual clock then makes a throttled copier wait until the test moves it, not until
    real time has passed.
    """

    def __init__(
        self,
        config: RemoteLogManagerConfig,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
        *,
        broker_id: int,
        log_dir: str | Path,
        metrics: RemoteStorageMetrics | None = None,
        clock_ms: Callable[[], int] = _wall_clock_ms,
        own_plugins: bool = False,
        rng: random.Random | None = None,
        schedule_tasks: bool = True,
    ) -> None:
        self.config = config
        self.rsm = rsm
        self.rlmm = rlmm
        self.broker_id = broker_id
        self.clock_ms = clock_ms
        self.superseded_delete_delay_ms = 60_000
        """How long a remote segment a cleaned one replaced is kept before the expiration task
        deletes it (the node sets ``remote.log.compaction.superseded.delete.delay.ms``)."""
        self.metrics = metrics if metrics is not None else RemoteStorageMetrics()
        self._own_plugins = own_plugins
        self._schedule_tasks = schedule_tasks
        self._rng = rng or random.Random()
        self._lock = threading.RLock()
        self._partitions: dict[TopicIdPartition, _PartitionTasks] = {}
        self._topic_ids: dict[TopicPartition, TopicIdPartition] = {}
        self._being_copied: set[RemoteLogSegmentId] = set()
        self._being_copied_lock = threading.Lock()
        self._closed = False
        # The totals behind copied_bytes, copied_segments and deleted_segments: bumped by the
        # copier and expiration pools' threads at once, so only under _counters_lock.
        self._counters_lock = threading.Lock()
        self._copied_bytes = 0
        self._copied_segments = 0
        self._deleted_segments = 0
        self.index_cache = RemoteIndexCache(
            rsm,
            Path(log_dir),
            max_size_bytes=config.remote_log_index_file_cache_total_size_bytes,
            ttl_ms=config.remote_log_index_file_cache_ttl_ms,
        )
        self.copy_quota = RLMQuotaManager(
            "RLMCopy",
            config.remote_log_manager_copy_max_bytes_per_second,
            window_num=config.remote_log_manager_copy_quota_window_num,
            window_size_seconds=config.remote_log_manager_copy_quota_window_size_seconds,
            clock=clock_ms,
        )
        self.fetch_quota = RLMQuotaManager(
            "RLMFetch",
            config.remote_log_manager_fetch_max_bytes_per_second,
            window_num=config.remote_log_manager_fetch_quota_window_num,
            window_size_seconds=config.remote_log_manager_fetch_quota_window_size_seconds,
            clock=clock_ms,
        )
        self.copy_quota_gate = CopyQuotaGate(self.copy_quota)
        self.metrics.bind_quota(self.copy_quota)
        self.metrics.bind_quota(self.fetch_quota)
        self.reader = RemoteLogReader(
            rsm,
            rlmm,
            self.index_cache,
            log_for=self._log_or_none,
            metrics=self.metrics,
            fetch_quota=self.fetch_quota,
        )
        self.reader_pool = RemoteReaderPool(
            self.read,
            threads=config.remote_log_reader_threads,
            max_pending_tasks=config.remote_log_reader_max_pending_tasks,
        )
        interval = config.remote_log_manager_task_interval_ms
        if interval <= 0:
            raise IllegalStateError("remote.log.manager.task.interval.ms must be > 0")
        self._interval_s = interval / 1000
        self.copier_pool = ScheduledPool(
            "kafka-rlm-copy-thread-pool", config.remote_log_manager_copier_thread_pool_size
        )
        self.expiration_pool = ScheduledPool(
            "kafka-rlm-expiration-thread-pool",
            config.remote_log_manager_expiration_thread_pool_size,
        )
        self.follower_pool = ScheduledPool(
            "kafka-rlm-follower-thread-pool", config.remote_log_manager_follower_thread_pool_size
        )
        self.metrics.register_gauge_callback(
            "RemoteLogManagerTasksAvgIdlePercent", {}, self._tasks_idle_percent
        )
        self.metrics.register_gauge_callback(
            "RemoteLogReaderTaskQueueSize", {}, lambda: float(self.reader_pool.queue_size)
        )
        self.metrics.register_gauge_callback(
            "RemoteLogReaderAvgIdlePercent", {}, lambda: self.reader_pool.idle_percent
        )

    # Totals ---------------------------------------------------------------------------------------
    @property
    def copied_bytes(self) -> int:
        """Bytes of the segments this manager copied to remote storage (``COPY_SEGMENT_FINISHED``
        published) since it was created: what ``tierlog quickstart`` reports as tiered."""
        with self._counters_lock:
            return self._copied_bytes

    @property
    def copied_segments(self) -> int:
        """Segments this manager copied to remote storage since it was created."""
        with self._counters_lock:
            return self._copied_segments

    @property
    def deleted_segments(self) -> int:
        """Remote segments this manager deleted (``DELETE_SEGMENT_FINISHED`` published) since it
        was created: expired ones, partial copies cleaned up, those of deleted partitions."""
        with self._counters_lock:
            return self._deleted_segments

    def _count_copied(self, size_in_bytes: int) -> None:
        # ``+=`` on an attribute is a read, an add and a write: two copier threads could both
        # read the old total and one copy would be lost.
        with self._counters_lock:
            self._copied_segments += 1
            self._copied_bytes += size_in_bytes

    def _count_deleted(self, segments: int) -> None:
        with self._counters_lock:
            self._deleted_segments += segments

    # Leadership -----------------------------------------------------------------------------------
    def on_leadership_change(
        self, leaders: Iterable[LocalLog], followers: Iterable[LocalLog] = ()
    ) -> None:
        """This node leads ``leaders`` and follows ``followers`` (their logs are open).

        Only logs with remote storage enabled are kept (``LocalLog.remote_log_enabled``); each
        must have a topic id. The RLMM hears of the change first, then tasks are installed:
        copy (unless ``remote.log.copy.disable``) and expiration for leaders, follower otherwise.
        """
        leader_logs = {self._tp_of(log): log for log in leaders if log.remote_log_enabled}
        follower_logs = {self._tp_of(log): log for log in followers if log.remote_log_enabled}
        if not leader_logs and not follower_logs:
            return
        with self._lock:
            self._check_open()
            for tp in (*leader_logs, *follower_logs):
                self._topic_ids[TopicPartition(tp.topic, tp.partition)] = tp
            self.rlmm.on_partition_leadership_changes(set(leader_logs), set(follower_logs))
            for tp, log in follower_logs.items():
                state = self._state(tp, log)
                for task in (state.copy, state.expiration):
                    if task is not None:
                        task.cancel()
                state.copy = state.expiration = None
                if state.follower is None:
                    state.follower = RLMFollowerTask(self, tp, log)
                    self._schedule(state.follower, self.follower_pool)
            for tp, log in leader_logs.items():
                state = self._state(tp, log)
                if state.follower is not None:
                    state.follower.cancel()
                    state.follower = None
                if log.config.remote_log_copy_disable:
                    if state.copy is not None:
                        _LOG.info("Stopping the copy task of %s: remote.log.copy.disable=true", tp)
                        state.copy.cancel()
                        state.copy = None
                elif state.copy is None or state.copy.cancelled:
                    state.copy = RLMCopyTask(self, tp, log)
                    self._schedule(state.copy, self.copier_pool)
                if state.expiration is None:
                    state.expiration = RLMExpirationTask(self, tp, log)
                    self._schedule(state.expiration, self.expiration_pool)

    def stop_partitions(
        self,
        partitions: Iterable[TopicPartition | TopicIdPartition],
        *,
        delete_remote: bool = False,
    ) -> dict[TopicPartition, BaseException]:
        """Stop tiering these partitions (waiting for runs in progress), remove their metrics
        and, with ``delete_remote``, delete all their remote segments; the RLMM then releases
        them. Returns the partitions whose stop failed, with the error (Kafka's error handler)."""
        errors: dict[TopicPartition, BaseException] = {}
        stopped: set[TopicIdPartition] = set()
        for p in partitions:
            key = TopicPartition(p.topic, p.partition)
            with self._lock:
                tp = self._topic_ids.get(key)
                state = self._partitions.pop(tp, None) if tp is not None else None
            if tp is None or state is None:
                _LOG.warning("stop_partitions: %s is not managed by the remote log manager", key)
                continue
            try:
                for task in (state.copy, state.expiration, state.follower):
                    if task is not None:
                        task.cancel(wait=True)
                self.metrics.remove_partition(tp.topic, tp.partition)
                if delete_remote:
                    self.delete_remote_log_partition(tp, state.log.latest_epoch())
            except Exception as e:
                _LOG.error("Error while stopping %s", tp, exc_info=e)
                errors[key] = e
            stopped.add(tp)
        with self._lock:
            for tp in stopped:
                self._topic_ids.pop(TopicPartition(tp.topic, tp.partition), None)
        if stopped:
            self.rlmm.on_stop_partitions(stopped)
        return errors

    def delete_remote_log_partition(
        self, tp: TopicIdPartition, leader_epoch: int | None = None
    ) -> int:
        """Delete every remote segment of ``tp`` (Kafka's ``deleteRemoteLogPartition``): all
        ``DELETE_SEGMENT_STARTED`` first, then the data, then all ``DELETE_SEGMENT_FINISHED``;
        the events carry ``leader_epoch`` (the deleting leader's). Returns the number of
        segments deleted."""
        segments = list(self.rlmm.list_remote_log_segments(tp))
        futures = [
            self.rlmm.update_remote_log_segment_metadata(
                self._update(s, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, leader_epoch)
            )
            for s in segments
            if s.state != RemoteLogSegmentState.DELETE_SEGMENT_STARTED
        ]
        for f in futures:
            f.result()
        for s in segments:
            self.rsm.delete_log_segment_data(s)
            self.metrics.record_delete(tp.topic)
        self.index_cache.remove_all([s.remote_log_segment_id.id for s in segments])
        for f in [
            self.rlmm.update_remote_log_segment_metadata(
                self._update(s, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, leader_epoch)
            )
            for s in segments
        ]:
            f.result()
        self.rsm.delete_partition(tp)
        self._count_deleted(len(segments))
        return len(segments)

    # Shared by the tasks --------------------------------------------------------------------------
    def delete_remote_log_segment(
        self,
        segment: RemoteLogSegmentMetadata,
        is_cancelled: Callable[[], bool],
        leader_epoch: int | None = None,
    ) -> bool:
        """DELETE_SEGMENT_STARTED -> RSM delete -> DELETE_SEGMENT_FINISHED (Kafka's
        ``deleteRemoteLogSegment``), the events carrying ``leader_epoch`` (the deleting
        leader's). False if cancelled before it started."""
        if is_cancelled():
            return False
        topic = segment.remote_log_segment_id.topic_id_partition.topic
        try:
            if segment.state != RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
                self.rlmm.update_remote_log_segment_metadata(
                    self._update(
                        segment, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, leader_epoch
                    )
                ).result()
            fault_point("delete.started")
            self.rsm.delete_log_segment_data(segment)
            fault_point("delete.data")
            self.index_cache.remove(segment.remote_log_segment_id.id)
            self.rlmm.update_remote_log_segment_metadata(
                self._update(segment, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, leader_epoch)
            ).result()
        except Exception:
            self.metrics.record_delete_error(topic)
            raise
        self.metrics.record_delete(topic)
        self._count_deleted(1)
        return True

    def _update(
        self,
        segment: RemoteLogSegmentMetadata,
        state: RemoteLogSegmentState,
        leader_epoch: int | None,
    ) -> RemoteLogSegmentMetadataUpdate:
        return RemoteLogSegmentMetadataUpdate(
            segment.remote_log_segment_id,
            self.clock_ms(),
            segment.custom_metadata,
            state,
            self.broker_id,
            leader_epoch,
        )

    def segment_ids_being_copied(self) -> frozenset[RemoteLogSegmentId]:
        with self._being_copied_lock:
            return frozenset(self._being_copied)

    def segment_ids_being_copied_add(self, segment_id: RemoteLogSegmentId) -> None:
        with self._being_copied_lock:
            self._being_copied.add(segment_id)

    def segment_ids_being_copied_discard(self, segment_id: RemoteLogSegmentId) -> None:
        with self._being_copied_lock:
            self._being_copied.discard(segment_id)

    def retry_backoff_ms(self, failures: int) -> int:
        """Exponential backoff with jitter: ``backoff.ms * 2^(failures-1)`` capped at
        ``backoff.max.ms``, times a random factor in ``[1 - jitter, 1 + jitter]``."""
        base = self.config.remote_log_manager_task_retry_backoff_ms
        cap = self.config.remote_log_manager_task_retry_backoff_max_ms
        jitter = self.config.remote_log_manager_task_retry_jitter
        raw = min(cap, base * (2 ** min(max(failures - 1, 0), 62)))
        factor = 1.0 + self._rng.uniform(-jitter, jitter) if jitter > 0 else 1.0
        return max(0, int(raw * factor))

    # Reads ----------------------------------------------------------------------------------------
    def read(self, fetch_info: RemoteStorageFetchInfo) -> FetchDataInfo:
        """Read below the local log start, on the calling thread (``RemoteLogReader.read``),
        with a failure while the RLMM is not ready for the partition turned into
        ``RemoteStorageNotReadyException``.

        Readiness is asked only when a read fails: a segment found in a not-yet-ready RLMM is
        still the right data (segments are immutable), only a miss can be an artefact of
        unfinished replay, and a warm read then skips a lock round trip in the RLMM. The
        embedded RLMM waits up to 100 ms for a partition still replaying before it says so,
        as Kafka's store does; ``async_read`` asks first, so the reader pool's threads never
        wait on a partition that is not ready.
        """
        try:
            return self.reader.read(fetch_info)
        except Exception as exc:
            if isinstance(exc, RemoteStorageNotReadyException):
                raise
            tp = fetch_info.topic_id_partition
            if not self.rlmm.is_ready(tp):
                raise _not_ready(tp) from exc
            raise

    def async_read(self, fetch_info: RemoteStorageFetchInfo) -> Future[FetchDataInfo]:
        """Queue a read on the bounded reader pool; a full pool raises at once."""
        self._require_ready(fetch_info.topic_id_partition)
        return self.reader_pool.submit(fetch_info)

    def fetch_throttle_time_ms(self) -> int:
        """> 0 when the fetch quota is exhausted: the caller sheds the remote read (KIP-956),
        returning no data for the partition, and the throttle time is recorded (as Kafka's
        ``ReplicaManager`` records it)."""
        throttle = self.fetch_quota.throttle_time_ms()
        if throttle > 0:
            self.fetch_quota.record_throttle(throttle)
        return throttle

    def find_offset_by_timestamp(
        self, tp: TopicPartition | TopicIdPartition, timestamp: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        """ListOffsets by timestamp over the remote segments (then the local log)."""
        tidp = self.topic_id_partition(tp)
        self._require_ready(tidp)
        log = self._log_for(tidp)
        return self.reader.find_offset_by_timestamp(
            tidp, timestamp, starting_offset, log.leader_epoch_cache, log
        )

    def topic_id_partition(self, tp: TopicPartition | TopicIdPartition) -> TopicIdPartition:
        if isinstance(tp, TopicIdPartition):
            return tp
        with self._lock:
            found = self._topic_ids.get(tp)
        if found is None:
            raise IllegalStateError(f"partition {tp} is not managed by the remote log manager")
        return found

    # Follower bootstrap ---------------------------------------------------------------------------
    def build_remote_log_aux_state(
        self,
        log: LocalLog,
        *,
        target_epoch: int,
        leader_local_log_start_offset: int,
        leader_log_start_offset: int,
    ) -> int:
        """A follower whose next offset is only in remote storage restarts its log after the
        remote segment holding ``leader_local_log_start_offset - 1`` (in ``target_epoch``),
        with the leader epochs and producer state of that segment (Kafka's
        ``TierStateMachine.buildRemoteLogAuxState``). Returns the offset to fetch from next."""
        tp = self._tp_of(log)
        if not log.remote_log_enabled:
            raise RemoteStorageException(
                f"Couldn't build the state from remote store for partition {tp}, as remote log "
                "storage is not yet enabled"
            )
        try:
            if not self.rlmm.is_ready(tp):
                raise RemoteStorageNotReadyException(
                    f"RemoteLogManager is not ready for partition: {tp}"
                )
            target = leader_local_log_start_offset - 1
            segment = self.rlmm.remote_log_segment_metadata(tp, target_epoch, target)
            if segment is None:
                raise RemoteStorageException(
                    f"Couldn't build the state from remote store for partition: {tp}, "
                    f"targetEpoch: {target_epoch}, leaderLocalLogStartOffset: "
                    f"{leader_local_log_start_offset}, leaderLogStartOffset: "
                    f"{leader_log_start_offset}, as the previous remote log segment metadata "
                    "was not found"
                )
            with self.rsm.fetch_index(segment, IndexType.LEADER_EPOCH) as stream:
                epochs = parse_leader_epoch_checkpoint(stream.read())
            with self.rsm.fetch_index(segment, IndexType.PRODUCER_SNAPSHOT) as stream:
                snapshot = stream.read()
            next_offset = segment.end_offset + 1
            log.restore_remote_aux_state(
                next_offset,
                log_start_offset=leader_log_start_offset,
                leader_epochs=epochs,
                producer_snapshot=snapshot,
            )
        except Exception:
            self.metrics.record_aux_state_error(tp.topic)
            raise
        self.metrics.record_aux_state(tp.topic)
        _LOG.info(
            "Built the remote log auxiliary state of %s up to offset %d (%d epochs)",
            tp,
            next_offset,
            len(epochs),
        )
        return next_offset

    # Triggers and introspection -------------------------------------------------------------------
    def tasks(self, tp: TopicPartition | TopicIdPartition) -> list[_RLMTask]:
        """The live tasks of a partition (copy, expiration, follower), for status and tests."""
        with self._lock:
            state = self._partitions.get(self.topic_id_partition(tp))
            if state is None:
                return []
            return [t for t in (state.copy, state.expiration, state.follower) if t is not None]

    def trigger(self, tp: TopicPartition | TopicIdPartition | None = None) -> None:
        """Run the tasks of ``tp`` (or of every partition) as soon as a thread is free."""
        with self._lock:
            states = (
                list(self._partitions.values())
                if tp is None
                else [self._partitions[self.topic_id_partition(tp)]]
            )
        for state in states:
            for task in (state.copy, state.expiration, state.follower):
                if task is not None and task.scheduled is not None:
                    task.scheduled.trigger()

    def run_once(self, tp: TopicPartition | TopicIdPartition) -> None:
        """Run the partition's tasks on the calling thread, copy before expiration (tests, the
        quickstart's final pass). Errors are handled as in a scheduled run."""
        for task in self.tasks(tp):
            task.run()

    @property
    def partitions(self) -> list[TopicIdPartition]:
        with self._lock:
            return list(self._partitions)

    # Internals ------------------------------------------------------------------------------------
    def _tp_of(self, log: LocalLog) -> TopicIdPartition:
        if log.topic_id is None:
            raise IllegalStateError(
                f"the log of {log.topic_partition} has no topic id (partition.metadata): "
                "remote storage needs one"
            )
        return TopicIdPartition(
            log.topic_id, log.topic_partition.topic, log.topic_partition.partition
        )

    def _state(self, tp: TopicIdPartition, log: LocalLog) -> _PartitionTasks:
        state = self._partitions.get(tp)
        if state is None or state.log is not log:
            if state is not None:
                for task in (state.copy, state.expiration, state.follower):
                    if task is not None:
                        task.cancel()
            state = _PartitionTasks(log)
            self._partitions[tp] = state
        return state

    def _schedule(self, task: _RLMTask, pool: ScheduledPool) -> None:
        if not self._schedule_tasks:
            return
        task.scheduled = pool.schedule_with_fixed_delay(
            task.run, self._interval_s, name=f"{task.kind} {task.tp}"
        )

    def _log_or_none(self, tp: TopicIdPartition) -> LocalLog | None:
        # Every remote read asks: one dict lookup, atomic without the lock (the dict is only
        # ever mutated in place, under the lock).
        state = self._partitions.get(tp)
        return None if state is None else state.log

    def _log_for(self, tp: TopicIdPartition) -> LocalLog:
        with self._lock:
            state = self._partitions.get(tp)
        if state is None:
            raise IllegalStateError(f"partition {tp} is not managed by the remote log manager")
        return state.log

    def _require_ready(self, tp: TopicIdPartition) -> None:
        if not self.rlmm.is_ready(tp):
            raise _not_ready(tp)

    def _tasks_idle_percent(self) -> float:
        pools = (self.copier_pool, self.expiration_pool, self.follower_pool)
        return sum(p.idle_percent() for p in pools) / len(pools)

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the remote log manager is closed")

    def close(self) -> None:
        """Cancel every task, wait for runs in progress, stop the pools and the index cache;
        close the plugins if this manager owns them. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            states = list(self._partitions.values())
        for state in states:
            for task in (state.copy, state.expiration, state.follower):
                if task is not None:
                    task.cancel()
        for pool in (self.copier_pool, self.expiration_pool, self.follower_pool):
            pool.close()
        self.reader_pool.close()
        self.index_cache.close()
        if self._own_plugins:
            self.rsm.close()
            self.rlmm.close()

    def __enter__(self) -> RemoteLogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _not_ready(tp: TopicIdPartition) -> RemoteStorageNotReadyException:
    return RemoteStorageNotReadyException(
        f"remote log metadata of {tp} is not ready yet; retry later"
    )
