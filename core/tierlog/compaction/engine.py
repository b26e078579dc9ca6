"""Who computes a round's two passes: this process (``PythonEngine``) or Spark.

A round (``cleaner``) is planned, its transactions decided and its output swapped in by the
caller; an engine does the heavy part in between, on plain picklable descriptions of the work:

- ``scan(tasks)``: read every segment of the round once (``scan.scan_segment``), build the
  offset map over the dirty range (key digest -> latest offset) and return the transaction
  events (in offset order) with counters. The engine keeps the map for ``rewrite``.
- ``rewrite(groups)``: rewrite each group's segments, in order, into one ``.cleaned`` segment in
  the group's directory (``rewrite.rewrite_segment`` into ``writer.CleanedSegmentWriter``), and
  yield one ``GroupOutput`` per group, in offset order.

An engine never swaps or deletes anything: what it writes is invisible until the caller swaps
it in, and a crash leaves only ``.cleaned`` files, which log recovery deletes.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tierlog.compaction.faults import fault_point
from tierlog.compaction.remote_io import (
    StorageSpec,
    cleaned_segment_id,
    download_segment,
    fetch_index_bytes,
    remove_tree,
    scratch_dir,
)
from tierlog.compaction.rewrite import RetentionContext, RewriteStats, rewrite_segment
from tierlog.compaction.scan import KeyMap, key_digest, scan_segment
from tierlog.compaction.summary import (
    DEFAULT_FALSE_POSITIVE_RATE,
    DEFAULT_SIZE_RATIO,
    BloomFilter,
    SummaryBuilder,
)
from tierlog.compaction.txn import AbortedIndex, TxnEvent
from tierlog.compaction.writer import CleanedSegmentWriter
from tierlog.log.checkpoint import encode_leader_epoch_checkpoint
from tierlog.log.log_config import LogConfig
from tierlog.log.segment import LogSegment
from tierlog.spi import (
    CustomMetadata,
    IndexType,
    InvalidArgumentError,
    LogSegmentData,
    RemoteLogSegmentMetadata,
)

__all__ = [
    "CleanEngine",
    "GroupOutput",
    "GroupTask",
    "Progress",
    "PythonEngine",
    "ScanOutcome",
    "SegmentTask",
    "UploadSpec",
    "rewrite_group",
]

Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``: phase "map" or "clean", counted in segments."""


@dataclass(frozen=True, slots=True)
class SegmentTask:
    """One source segment of a round: position in the round, offsets, and where to read it.

    ``path`` is a local file; a segment only in remote storage has ``remote`` (its metadata)
    and ``storage`` (how to reach the RSM) instead, and is downloaded into ``scratch``.
    """

    index: int
    base_offset: int
    next_offset: int
    """The next segment's base offset (or the round's end offset for the last one)."""
    path: str | None
    remote: RemoteLogSegmentMetadata | None = None
    storage: StorageSpec | None = None
    scratch: str | None = None

    def local_path(self) -> tuple[str, int]:
        """A local file holding the segment, and the bytes downloaded to get it.

        A local copy that local retention deleted since the round was planned is replaced by
        the remote one (the same bytes)."""
        if self.path is not None and (self.remote is None or os.path.exists(self.path)):
            return self.path, 0
        if self.remote is None or self.storage is None:
            raise InvalidArgumentError(
                f"segment task {self.index} has neither a path nor a remote source"
            )
        path, downloaded = download_segment(
            self.storage.open(), self.remote, scratch_dir(self.scratch)
        )
        return str(path), downloaded

    def release(self) -> None:
        """Delete the downloaded copy (after the rewrite)."""
        if self.remote is not None:
            target = scratch_dir(self.scratch) / f"{self.remote.remote_log_segment_id.id}.log"
            target.unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class UploadSpec:
    """A group whose output replaces a remote segment: what the upload needs."""

    storage: StorageSpec
    source: RemoteLogSegmentMetadata
    """The segment the output replaces (same offsets and leader epochs)."""
    leader_epoch: int
    cleaner_offsets: Mapping[int, int]
    broker_id: int
    event_timestamp_ms: int
    false_positive_rate: float = DEFAULT_FALSE_POSITIVE_RATE
    bloom_size_ratio: float = DEFAULT_SIZE_RATIO


@dataclass(frozen=True, slots=True)
class GroupTask:
    """One output segment: the source segments it is rewritten from, in order."""

    base_offset: int
    sources: tuple[SegmentTask, ...]
    directory: str
    """Where ``<base>.log.cleaned`` is written."""
    last_modified_ms: int | None
    upload: UploadSpec | None = None
    """Set for a group whose output goes to remote storage instead of the local log."""


@dataclass(slots=True)
class ScanOutcome:
    """What the scan of a round found."""

    events: list[TxnEvent]
    keys_mapped: int
    bytes_read: int
    records_read: int = 0
    bytes_downloaded: int = 0


@dataclass(slots=True)
class GroupOutput:
    """A written ``.cleaned`` segment (or an uploaded one) and what it took."""

    base_offset: int
    size: int
    stats: RewriteStats = field(default_factory=RewriteStats)
    uploaded: RemoteLogSegmentMetadata | None = None
    """For an upload: the new segment's metadata (COPY_SEGMENT_STARTED, to be published)."""
    custom_metadata: CustomMetadata | None = None
    bytes_downloaded: int = 0


class CleanEngine(Protocol):
    """See the module docstring."""

    def scan(
        self,
        tasks: Sequence[SegmentTask],
        *,
        aborted: AbortedIndex,
        first_dirty_offset: int,
        end_offset: int,
        progress: Progress | None = None,
    ) -> ScanOutcome: ...

    def bloom_hits(self, blooms: Mapping[int, BloomFilter]) -> set[int]:
        """The keys of ``blooms`` (by task index) that may hold a key of the offset map."""
        ...

    def scan_more(
        self,
        tasks: Sequence[SegmentTask],
        *,
        aborted: AbortedIndex,
        end_offset: int,
        progress: Progress | None = None,
    ) -> ScanOutcome:
        """Read clean-section segments after ``scan`` (those the Bloom filters could not rule
        out): their transaction events, and their records for the superseded test; the offset
        map does not change (it covers the dirty range only)."""
        ...

    def rewrite(
        self,
        groups: Sequence[GroupTask],
        *,
        ctx: RetentionContext,
        config: LogConfig,
        progress: Progress | None = None,
    ) -> Iterator[GroupOutput]: ...


def rewrite_group(
    group: GroupTask,
    ctx: RetentionContext,
    config: LogConfig,
    superseded_in: Callable[[SegmentTask], Callable[[int, bytes], bool]],
    on_segment: Callable[[], None] | None = None,
) -> GroupOutput:
    """Rewrite one group into its ``.cleaned`` segment (any engine's unit of pass-2 work); for
    a group with ``upload``, write it in a scratch directory and upload it in place of the
    remote segment it replaces.

    ``superseded_in(task)`` gives the superseded test for the records of one source segment.
    """
    out = GroupOutput(group.base_offset, 0)
    upload = group.upload
    directory = group.directory
    if upload is not None:
        directory = tempfile.mkdtemp(prefix=f"{group.base_offset}-", dir=scratch_dir(directory))
    summary = (
        SummaryBuilder(upload.false_positive_rate, upload.bloom_size_ratio)
        if upload is not None
        else None
    )
    writer = CleanedSegmentWriter(directory, group.base_offset, config)
    try:
        for task in group.sources:
            test = superseded_in(task)
            path, downloaded = task.local_path()
            out.bytes_downloaded += downloaded
            for header, data, entry in rewrite_segment(path, ctx, test, out.stats, summary):
                writer.append(header, data, entry)
            task.release()
            if on_segment is not None:
                on_segment()
        segment = writer.finish(group.last_modified_ms)
        out.size = segment.size
        if upload is not None and summary is not None:
            out.uploaded, out.custom_metadata = _upload(segment, upload, summary, Path(directory))
        segment.close()
    except BaseException:
        writer.abort()
        raise
    finally:
        if upload is not None:
            remove_tree(Path(directory))
    return out


def _upload(
    segment: LogSegment, spec: UploadSpec, summary: SummaryBuilder, directory: Path
) -> tuple[RemoteLogSegmentMetadata, CustomMetadata | None]:
    """Copy a cleaned segment to remote storage under its derived id (see ``remote_io``)."""
    rsm = spec.storage.open()
    source = spec.source
    snapshot = fetch_index_bytes(rsm, source, IndexType.PRODUCER_SNAPSHOT) or b""
    snapshot_path = directory / "producer.snapshot"
    snapshot_path.write_bytes(snapshot)
    epochs = fetch_index_bytes(rsm, source, IndexType.LEADER_EPOCH)
    if epochs is None:
        epochs = encode_leader_epoch_checkpoint(source.segment_leader_epochs.items())
    txn_empty = segment.txn_index.is_empty()
    built = summary.build()
    metadata = RemoteLogSegmentMetadata(
        cleaned_segment_id(source.remote_log_segment_id, spec.leader_epoch),
        source.start_offset,
        source.end_offset,
        max(built.largest_timestamp, -1),
        spec.broker_id,
        spec.event_timestamp_ms,
        segment.size,
        source.segment_leader_epochs,
        txn_idx_empty=txn_empty,
        cleaner_offsets=spec.cleaner_offsets,
        broker_leader_epoch=spec.leader_epoch,
    )
    data = LogSegmentData(
        log_segment=segment.log_path,
        offset_index=segment.offset_index_path,
        time_index=segment.time_index_path,
        transaction_index=None if txn_empty else segment.txn_index_path,
        producer_snapshot_index=snapshot_path,
        leader_epoch_index=epochs,
        compaction_summary=built.encode(),
    )
    custom = rsm.copy_log_segment_data(metadata, data)
    fault_point("upload.copied")
    return metadata, custom


class PythonEngine:
    """Both passes in this process, the offset map a dict (the reference engine)."""

    def __init__(self) -> None:
        self._map: KeyMap = {}

    def scan(
        self,
        tasks: Sequence[SegmentTask],
        *,
        aborted: AbortedIndex,
        first_dirty_offset: int,
        end_offset: int,
        progress: Progress | None = None,
    ) -> ScanOutcome:
        offset_map: KeyMap = {}
        outcome = ScanOutcome(events=[], keys_mapped=0, bytes_read=0)
        for done, task in enumerate(tasks, 1):
            dirty = task.next_offset > first_dirty_offset
            path, downloaded = task.local_path()
            outcome.bytes_downloaded += downloaded
            scan = scan_segment(
                path,
                aborted=aborted,
                first_dirty_offset=first_dirty_offset if dirty else None,
                end_offset=end_offset,
            )
            offset_map.update(scan.keys)
            outcome.events.extend(scan.events)
            outcome.bytes_read += scan.bytes_read
            outcome.records_read += scan.records_read
            if progress is not None:
                progress("map", done, len(tasks))
        self._map = offset_map
        outcome.keys_mapped = len(offset_map)
        return outcome

    def bloom_hits(self, blooms: Mapping[int, BloomFilter]) -> set[int]:
        digests = [key_digest(key) for key in self._map]
        return {index for index, bloom in blooms.items() if bloom.might_contain_any(digests)}

    def scan_more(
        self,
        tasks: Sequence[SegmentTask],
        *,
        aborted: AbortedIndex,
        end_offset: int,
        progress: Progress | None = None,
    ) -> ScanOutcome:
        outcome = ScanOutcome(events=[], keys_mapped=len(self._map), bytes_read=0)
        for done, task in enumerate(tasks, 1):
            path, downloaded = task.local_path()
            outcome.bytes_downloaded += downloaded
            scan = scan_segment(
                path, aborted=aborted, first_dirty_offset=None, end_offset=end_offset
            )
            outcome.events.extend(scan.events)
            outcome.bytes_read += scan.bytes_read
            if progress is not None:
                progress("map", done, len(tasks))
        return outcome

    def rewrite(
        self,
        groups: Sequence[GroupTask],
        *,
        ctx: RetentionContext,
        config: LogConfig,
        progress: Progress | None = None,
    ) -> Iterator[GroupOutput]:
        lookup = self._map.get

        def superseded(offset: int, key: bytes) -> bool:
            return lookup(key, -1) > offset

        total = sum(len(g.sources) for g in groups)
        done = 0

        def step() -> None:
            nonlocal done
            done += 1
            if progress is not None:
                progress("clean", done, total)

        for group in groups:
            yield rewrite_group(group, ctx, config, lambda _task: superseded, step)
