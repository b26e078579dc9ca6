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

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tierlog.compaction.rewrite import RetentionContext, RewriteStats, rewrite_segment
from tierlog.compaction.scan import KeyMap, key_digest, scan_segment
from tierlog.compaction.txn import AbortedIndex, TxnEvent
from tierlog.compaction.writer import CleanedSegmentWriter
from tierlog.log.log_config import LogConfig

__all__ = [
    "CleanEngine",
    "GroupOutput",
    "GroupTask",
    "Progress",
    "PythonEngine",
    "ScanOutcome",
    "SegmentTask",
    "rewrite_group",
]

Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``: phase "map" or "clean", counted in segments."""


@dataclass(frozen=True, slots=True)
class SegmentTask:
    """One source segment of a round: position in the round, offsets, and where to read it."""

    index: int
    base_offset: int
    next_offset: int
    """The next segment's base offset (or the round's end offset for the last one)."""
    path: str


@dataclass(frozen=True, slots=True)
class GroupTask:
    """One output segment: the source segments it is rewritten from, in order."""

    base_offset: int
    sources: tuple[SegmentTask, ...]
    directory: str
    """Where ``<base>.log.cleaned`` is written."""
    last_modified_ms: int | None


@dataclass(slots=True)
class ScanOutcome:
    """What the scan of a round found."""

    events: list[TxnEvent]
    keys_mapped: int
    bytes_read: int
    records_read: int = 0


@dataclass(slots=True)
class GroupOutput:
    """A written ``.cleaned`` segment and what it took."""

    base_offset: int
    size: int
    stats: RewriteStats = field(default_factory=RewriteStats)


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
    """Rewrite one group into its ``.cleaned`` segment (any engine's unit of pass-2 work).

    ``superseded_in(task)`` gives the superseded test for the records of one source segment.
    """
    out = GroupOutput(group.base_offset, 0)
    writer = CleanedSegmentWriter(group.directory, group.base_offset, config)
    try:
        for task in group.sources:
            test = superseded_in(task)
            for header, data, entry in rewrite_segment(task.path, ctx, test, out.stats):
                writer.append(header, data, entry)
            if on_segment is not None:
                on_segment()
        segment = writer.finish(group.last_modified_ms)
        out.size = segment.size
        segment.close()
    except BaseException:
        writer.abort()
        raise
    return out


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
            scan = scan_segment(
                task.path,
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
            return lookup(key_digest(key), -1) > offset

        total = sum(len(g.sources) for g in groups)
        done = 0

        def step() -> None:
            nonlocal done
            done += 1
            if progress is not None:
                progress("clean", done, total)

        for group in groups:
            yield rewrite_group(group, ctx, config, lambda _task: superseded, step)
