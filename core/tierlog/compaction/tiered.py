"""One cleaning round of a compacted partition whose history is in remote storage.

The leader of a tiered compacted partition runs it (the RLM schedules it; ``tierlog compact``
runs it on demand). What it cleans and how, and why:

- **The log it sees** is the chain of remote segments a reader would get, from the log start
  offset to the highest offset in remote storage: each segment is the one the RLMM routes the
  offset to (a cleaned one once a round replaced it). Local segments not yet copied are left to
  later rounds: they are the uncleanable tail, as an active segment is for Kafka's cleaner, so
  the local and remote copies of a segment never disagree on its boundaries.
- **Planning** is Kafka's (``plan``) on those segments, their sizes from the RLMM: the dirty
  ratio is cleanable bytes over the log's remote bytes. The first dirty offset is the cleaner
  offset the RLMM resolves from the newest cleaner-offset vector (the previous leader's, after a
  leadership change, as the KIP says), or the node's checkpoint file when no cleaned segment
  exists yet.
- **Reading**: a segment still on local disk is read from there; any other is downloaded
  through the RSM. Clean-section segments whose compaction summary says nothing in them can
  change and whose Bloom filter holds no dirty key are not downloaded at all. The summaries are
  downloads too: each is fetched once per segment id (segments never change) and its bytes are
  counted in the next round of its partition (``summary_bytes_downloaded``), whoever fetched it
  (the cleaner manager plans every partition to pick one).
- **Output**: each rewritten segment is uploaded under a new id with the same offsets and leader
  epochs as the one it replaces (so the RLMM routes reads to it), with its summary, and
  published (COPY_SEGMENT_STARTED, COPY_SEGMENT_FINISHED) in offset order, carrying the round's
  cleaner-offset vector: what this leader resolved for earlier epochs, and the round's end
  offset for its own. Publishing in offset order keeps any interrupted round safe: every state a
  reader can see is a prefix of cleaned segments followed by segments not yet cleaned, which
  still hold every record that superseded what the prefix dropped.
- **Nothing is deleted here**: the replaced segments become unreferenced and the expiration
  task deletes them once the segment replacing them is valid (``superseded_segments``).

Local copies of replaced segments are not rewritten: local retention removes them (for
``cleanup.policy=compact`` only once they are below the cleaner checkpoint); until then reads of
those offsets are served, uncompacted, from the local log, which is the same data.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tierlog.compaction.cleaner import CleanResult
from tierlog.compaction.engine import (
    CleanEngine,
    GroupTask,
    PythonEngine,
    SegmentTask,
    UploadSpec,
)
from tierlog.compaction.faults import fault_point
from tierlog.compaction.plan import LogToClean, SegmentInfo, cleanable_offsets, log_to_clean
from tierlog.compaction.remote_io import StorageSpec, cleaned_segment_id, fetch_index_bytes
from tierlog.compaction.rewrite import RetentionContext
from tierlog.compaction.summary import (
    DEFAULT_FALSE_POSITIVE_RATE,
    DEFAULT_SIZE_RATIO,
    SegmentSummary,
)
from tierlog.compaction.txn import AbortedIndex, TxnEvent, decide_transactions
from tierlog.log.local_log import LocalLog
from tierlog.log.txn_index import AbortedTxn, decode_aborted_txns
from tierlog.spi import (
    CorruptRecordError,
    IndexType,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
)

__all__ = [
    "TieredCleanResult",
    "TieredCleaner",
    "remote_chain",
    "resolve_cleaner_offsets",
    "superseded_segments",
]

_LOG = logging.getLogger(__name__)


def remote_chain(
    rlmm: RemoteLogMetadataManager, tip: TopicIdPartition, log: LocalLog
) -> list[RemoteLogSegmentMetadata]:
    """The remote segments a reader gets, in offset order, from the log start offset to the
    highest offset in remote storage (each one the RLMM routes its offsets to)."""
    chain: list[RemoteLogSegmentMetadata] = []
    offset = log.log_start_offset
    highest = log.highest_offset_in_remote_storage
    epochs = log.leader_epoch_cache
    while offset <= highest:
        epoch = epochs.epoch_for_offset(offset)
        if epoch is None:
            break
        segment = rlmm.remote_log_segment_metadata(tip, epoch, offset)
        if segment is None or segment.end_offset < offset:
            break
        chain.append(segment)
        offset = segment.end_offset + 1
    return chain


def _generation(vector: Mapping[int, int]) -> tuple[int, int]:
    top = max(vector)
    return (top, vector[top])


def resolve_cleaner_offsets(chain: Sequence[RemoteLogSegmentMetadata]) -> dict[int, int]:
    """The cleaner-offset vector of the newest *complete* round among the routed segments
    (empty if none): what each leader epoch's cleaner reached, as the latest cleaning leader
    recorded it.

    A round publishes its segments in offset order and always rewrites the dirty segments, the
    last of which ends just below the round's end offset; so a round whose segment holding
    ``end - 1`` is not (at least) of its generation was interrupted, and the previous complete
    round's vector is the truth: a rerun then redoes the whole interrupted round.
    """
    by_generation: dict[tuple[int, int], Mapping[int, int]] = {}
    for segment in chain:
        if segment.cleaner_offsets:
            by_generation.setdefault(_generation(segment.cleaner_offsets), segment.cleaner_offsets)
    if not by_generation:
        return {}
    start = chain[0].start_offset
    for generation in sorted(by_generation, reverse=True):
        last = generation[1] - 1
        if last < start:
            return dict(by_generation[generation])
        holder = next((s for s in chain if s.start_offset <= last <= s.end_offset), None)
        if holder is None or (
            holder.cleaner_offsets and _generation(holder.cleaner_offsets) >= generation
        ):
            return dict(by_generation[generation])
    return {}


def round_vector(
    resolved: Mapping[int, int], lineage: Sequence[int], leader_epoch: int, end_offset: int
) -> dict[int, int]:
    """The vector a round of ``leader_epoch`` publishes: every earlier epoch of its lineage with
    the offset resolved for it (an epoch whose leader never cleaned inherits the offset before
    it), and its own epoch with the round's end offset."""
    vector: dict[int, int] = {}
    carried = 0
    for epoch in sorted(set(lineage) | set(resolved)):
        if epoch >= leader_epoch:
            break
        carried = resolved.get(epoch, carried)
        vector[epoch] = carried
    vector[leader_epoch] = end_offset
    return vector


def superseded_segments(
    rlmm: RemoteLogMetadataManager, tip: TopicIdPartition, chain: Sequence[RemoteLogSegmentMetadata]
) -> list[RemoteLogSegmentMetadata]:
    """Finished segments no reader is routed to that a routed segment with the same offsets
    makes garbage: one a cleaned segment replaced, or a cleaned segment that lost (an older
    generation, or a zombie leader's fenced output). What the expiration task may delete."""
    routed = {s.remote_log_segment_id for s in chain}
    by_range = {(s.start_offset, s.end_offset): s for s in chain}
    out = []
    for segment in rlmm.list_remote_log_segments(tip):
        if segment.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            continue
        if segment.remote_log_segment_id in routed:
            continue
        winner = by_range.get((segment.start_offset, segment.end_offset))
        if winner is not None and (winner.cleaner_offsets or segment.cleaner_offsets):
            out.append(segment)
    return out


@dataclass(slots=True)
class TieredCleanResult(CleanResult):
    """A tiered round's figures: ``CleanResult`` plus remote traffic and Bloom skips."""

    bytes_downloaded: int = 0
    bytes_uploaded: int = 0
    resolved_checkpoint: int | None = None
    """The cleaner offset the RLMM's newest complete round gives (the checkpoint the node
    adopts even when this round had nothing to do)."""
    orphans_deleted: int = 0
    """Uploads of an interrupted round of an earlier epoch that were never published."""
    segments_skipped: int = 0
    """Clean-section segments the Bloom filters ruled out (not downloaded)."""
    summary_bytes_downloaded: int = 0
    """Bytes of the compaction summaries fetched for the round (not in ``bytes_downloaded``):
    the price of the skips, every summary of the chain when none was cached yet."""
    remote_bytes: int = 0
    """Bytes of the remote segments in the round's range."""
    published: list[RemoteLogSegmentMetadata] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Prepared:
    chain: list[RemoteLogSegmentMetadata]
    resolved: dict[int, int]
    summaries: dict[RemoteLogSegmentId, SegmentSummary | None]
    plan: LogToClean


@dataclass(slots=True)
class TieredCleaner:
    """Runs rounds for one node's tiered compacted partitions (see the module docstring)."""

    rlmm: RemoteLogMetadataManager
    rsm: RemoteStorageManager
    storage: StorageSpec
    broker_id: int
    scratch: str | None = None
    false_positive_rate: float = DEFAULT_FALSE_POSITIVE_RATE
    bloom_size_ratio: float = DEFAULT_SIZE_RATIO
    """The Bloom filters' floor as a share of their segment's bytes (``summary.bloom_shape``)."""
    summaries: dict[RemoteLogSegmentId, SegmentSummary | None] = field(default_factory=dict)
    """Compaction summaries already fetched, by segment id (segments never change)."""
    swept: set[tuple[TopicIdPartition, int]] = field(default_factory=set)
    """(partition, leader epoch) whose earlier epochs' unpublished uploads were swept."""
    round_now_ms: int | None = None
    summary_bytes_pending: dict[TopicIdPartition, int] = field(default_factory=dict)
    """Bytes of summaries fetched since the partition's last round (``_summary``)."""

    def _summary(self, segment: RemoteLogSegmentMetadata) -> SegmentSummary | None:
        key = segment.remote_log_segment_id
        if key not in self.summaries:
            data = fetch_index_bytes(self.rsm, segment, IndexType.COMPACTION_SUMMARY)
            summary = None
            if data is not None:
                tip = segment.topic_id_partition
                self.summary_bytes_pending[tip] = self.summary_bytes_pending.get(tip, 0) + len(data)
                try:
                    summary = SegmentSummary.decode(data)
                except CorruptRecordError as e:
                    _LOG.warning("Ignoring the compaction summary of %s: %s", key, e)
            self.summaries[key] = summary
        return self.summaries[key]

    def _aborted(
        self, chain: Sequence[RemoteLogSegmentMetadata], log: LocalLog, end_offset: int
    ) -> list[AbortedTxn]:
        entries: list[AbortedTxn] = []
        for segment in chain:
            if segment.start_offset >= end_offset or segment.txn_idx_empty:
                continue
            data = fetch_index_bytes(self.rsm, segment, IndexType.TRANSACTION)
            if data:
                entries.extend(decode_aborted_txns(data))
        for local in log.segments:
            entries.extend(
                e for e in local.txn_index.all_aborted_txns() if e.first_offset < end_offset
            )
        return [e for e in entries if e.first_offset < end_offset]

    def plan(
        self, log: LocalLog, tip: TopicIdPartition, *, checkpoint: int | None, now_ms: int
    ) -> _Prepared:
        """The round's plan for ``log`` without running it (the cleaner manager compares the
        dirty ratios of its logs with it)."""
        config = log.config
        chain = remote_chain(self.rlmm, tip, log)
        resolved = resolve_cleaner_offsets(chain)
        if resolved:
            checkpoint = resolved[max(resolved)]
        chain_end = chain[-1].end_offset + 1 if chain else log.log_start_offset
        summaries = {s.remote_log_segment_id: self._summary(s) for s in chain}
        infos = []
        for segment in chain:
            summary = summaries[segment.remote_log_segment_id]
            infos.append(
                SegmentInfo(
                    base_offset=segment.start_offset,
                    size=segment.segment_size_in_bytes,
                    largest_timestamp=segment.max_timestamp_ms,
                    first_batch_timestamp=(
                        None if summary is None else summary.first_batch_timestamp
                    ),
                    remote=True,
                )
            )
        cleanable = cleanable_offsets(
            infos,
            checkpoint=checkpoint,
            log_start_offset=log.log_start_offset,
            log_end_offset=log.log_end_offset,
            last_stable_offset=log.last_stable_offset,
            active_segment_base=chain_end,
            min_compaction_lag_ms=config.min_compaction_lag_ms,
            max_compaction_lag_ms=config.max_compaction_lag_ms,
            now_ms=now_ms,
        )
        return _Prepared(chain, resolved, summaries, log_to_clean(infos, cleanable, chain_end))

    def clean(
        self,
        log: LocalLog,
        tip: TopicIdPartition,
        *,
        leader_epoch: int,
        checkpoint: int | None,
        now_ms: int | None = None,
        force: bool = False,
        engine: CleanEngine | None = None,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> TieredCleanResult:
        """One round for ``log`` (led by this node under ``leader_epoch``)."""
        started = time.monotonic()
        now = int(time.time() * 1000) if now_ms is None else now_ms
        config = log.config
        prepared = self.plan(log, tip, checkpoint=checkpoint, now_ms=now)
        chain, resolved, summaries, plan = (
            prepared.chain,
            prepared.resolved,
            prepared.summaries,
            prepared.plan,
        )
        result = TieredCleanResult(
            topic_partition=log.topic_partition,
            cleaned=False,
            first_dirty_offset=plan.first_dirty_offset,
            end_offset=plan.first_uncleanable_offset,
            cleanable_ratio=plan.cleanable_ratio,
            checkpoint_reset=plan.checkpoint_reset,
            resolved_checkpoint=resolved[max(resolved)] if resolved else None,
        )
        self.round_now_ms = now
        result.summary_bytes_downloaded = self.summary_bytes_pending.pop(tip, 0)
        if not chain or not (
            plan.eligible(config.min_cleanable_dirty_ratio) or (force and plan.cleanable_bytes > 0)
        ):
            return result
        engine = engine or PythonEngine()
        end_offset = plan.first_uncleanable_offset
        first_dirty = plan.first_dirty_offset
        in_range = [s for s in chain if s.start_offset < end_offset]
        result.remote_bytes = sum(s.segment_size_in_bytes for s in in_range)
        local_by_base = {
            seg.base_offset: seg
            for seg in log.segments
            if seg.base_offset >= log.local_log_start_offset
        }
        local_bases = sorted(local_by_base)
        tasks: list[SegmentTask] = []
        for i, segment in enumerate(in_range):
            next_offset = segment.end_offset + 1
            local = local_by_base.get(segment.start_offset)
            local_ok = (
                local is not None
                and segment.start_offset != local_bases[-1]
                and next_offset in local_by_base
            )
            tasks.append(
                SegmentTask(
                    index=i,
                    base_offset=segment.start_offset,
                    next_offset=next_offset,
                    path=str(local.log_path) if local is not None and local_ok else None,
                    remote=segment,
                    storage=self.storage,
                    scratch=self.scratch,
                )
            )
        aborted = AbortedIndex(self._aborted(chain, log, end_offset))

        dirty = [t for t in tasks if t.next_offset > first_dirty]
        clean = [t for t in tasks if t.next_offset <= first_dirty]
        scanned = engine.scan(
            dirty,
            aborted=aborted,
            first_dirty_offset=first_dirty,
            end_offset=end_offset,
            progress=progress,
        )
        events: list[TxnEvent] = list(scanned.events)
        result.keys_mapped = scanned.keys_mapped
        result.map_bytes_read = scanned.bytes_read
        result.bytes_downloaded = scanned.bytes_downloaded
        blooms = {}
        must_read: list[SegmentTask] = []
        for task in clean:
            assert task.remote is not None
            summary = summaries[task.remote.remote_log_segment_id]
            if summary is None or summary.changeable(now):
                must_read.append(task)
            else:
                blooms[task.index] = summary.bloom
        hits = engine.bloom_hits(blooms) if blooms else set()
        must_read.extend(t for t in clean if t.index in hits)
        must_read.sort(key=lambda t: t.index)
        result.segments_skipped = len(clean) - len(must_read)
        more = engine.scan_more(
            must_read, aborted=aborted, end_offset=end_offset, progress=progress
        )
        events.extend(more.events)
        events.sort(key=lambda e: e.base_offset)
        result.map_bytes_read += more.bytes_read
        result.bytes_downloaded += more.bytes_downloaded

        vector = round_vector(
            resolved,
            [e.epoch for e in log.leader_epoch_cache.epoch_entries()],
            leader_epoch,
            end_offset,
        )
        ctx = RetentionContext(
            now_ms=now,
            delete_retention_ms=config.delete_retention_ms,
            first_uncleanable_offset=end_offset,
            map_latest_offset=end_offset - 1,
            producers=log.last_records_of_active_producers(),
            decisions=decide_transactions(events, aborted.entries),
        )
        rewrite = sorted(dirty + must_read, key=lambda t: t.index)
        groups = [
            GroupTask(
                base_offset=task.base_offset,
                sources=(task,),
                directory=self.scratch or "",
                last_modified_ms=None,
                upload=UploadSpec(
                    storage=self.storage,
                    source=task.remote,
                    leader_epoch=leader_epoch,
                    cleaner_offsets=vector,
                    broker_id=self.broker_id,
                    event_timestamp_ms=now,
                    false_positive_rate=self.false_positive_rate,
                    bloom_size_ratio=self.bloom_size_ratio,
                ),
            )
            for task in rewrite
            if task.remote is not None
        ]
        for written in engine.rewrite(groups, ctx=ctx, config=config, progress=progress):
            result.stats.add(written.stats)
            result.bytes_downloaded += written.bytes_downloaded
            if written.uploaded is None:
                continue
            self._publish(written.uploaded, written.custom_metadata)
            result.published.append(written.uploaded)
            result.bytes_uploaded += written.uploaded.segment_size_in_bytes
            result.segments_written += 1
        if result.published:
            # After this epoch's vectors are published: a zombie's upload that lands later is
            # fenced as it arrives, so deleting unpublished uploads cannot pull data from under
            # a segment readers are routed to.
            result.orphans_deleted = self._sweep_orphans(log, tip, chain, resolved, leader_epoch)
        result.segments_read = len(rewrite)
        result.cleaned = True
        result.end_offset = end_offset
        log.set_cleaner_offset(end_offset)
        result.elapsed_s = time.monotonic() - started
        _LOG.info(
            "%s; %d of %d clean segments skipped by their Bloom filters, %d bytes downloaded "
            "(and %d of compaction summaries), %d uploaded",
            result.summary_line(),
            result.segments_skipped,
            len(clean),
            result.bytes_downloaded,
            result.summary_bytes_downloaded,
            result.bytes_uploaded,
        )
        return result

    def _sweep_orphans(
        self,
        log: LocalLog,
        tip: TopicIdPartition,
        chain: Sequence[RemoteLogSegmentMetadata],
        resolved: Mapping[int, int],
        leader_epoch: int,
    ) -> int:
        """Once per leader epoch, after its first publication: delete what an earlier epoch's
        interrupted round uploaded and never published. Those objects sit under ids derived
        from a segment of the chain this round started from and that epoch
        (``cleaned_segment_id``), which a new leader's rounds never reuse, so nothing else would
        ever delete them. Looks at the (at most three) epochs before this one, from the
        newest one that cleaned."""
        key = (tip, leader_epoch)
        if key in self.swept:
            return 0
        self.swept.add(key)
        floor = max(resolved) if resolved else -1
        lineage = [e.epoch for e in log.leader_epoch_cache.epoch_entries()]
        epochs = sorted(e for e in set(lineage) if floor <= e < leader_epoch)[-3:]
        if not epochs or not chain:
            return 0
        known = {s.remote_log_segment_id for s in self.rlmm.list_remote_log_segments(tip)}
        deleted = 0
        for segment in chain:
            for epoch in epochs:
                orphan = cleaned_segment_id(segment.remote_log_segment_id, epoch)
                if orphan in known:
                    continue
                self.rsm.delete_log_segment_data(
                    dataclasses.replace(segment, remote_log_segment_id=orphan)
                )
                deleted += 1
        return deleted

    def _publish(self, metadata: RemoteLogSegmentMetadata, custom: object) -> None:
        """COPY_SEGMENT_STARTED then COPY_SEGMENT_FINISHED, each visible before the next step;
        an id an interrupted attempt already published is finished, not added again."""
        existing = self._state_of(metadata)
        if existing is RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            return
        if existing is None:
            self.rlmm.add_remote_log_segment_metadata(metadata).result()
            fault_point("publish.started")
        self.rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                metadata.remote_log_segment_id,
                int(time.time() * 1000) if self.round_now_ms is None else self.round_now_ms,
                custom,  # type: ignore[arg-type]
                RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                self.broker_id,
                metadata.broker_leader_epoch,
            )
        ).result()
        fault_point("publish.finished")

    def _state_of(self, metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentState | None:
        epoch = next(iter(metadata.segment_leader_epochs))
        for segment in self.rlmm.list_remote_log_segments(metadata.topic_id_partition, epoch):
            if segment.remote_log_segment_id == metadata.remote_log_segment_id:
                return segment.state
        return None
