"""The Spark engine: a round's two passes as a Spark job (``tierlog[spark]``).

Same contract as ``engine.PythonEngine`` (see ``engine``), computed by a cluster. Spark moves
the data and schedules the tasks; the per-record work is vectorised in the Python tasks, and
what crosses into the JVM is a few large rows per task, never a row per record (a row per
record costs the JVM more than the whole scan costs Python):

- **scan**: one task per source segment (``mapInArrow``) reads the segment once and packs its
  keyed records (of batches that are neither control nor aborted) as ``(h1, h2, offset)``
  int64 triples, ``h1``/``h2`` the two halves of the key's MD5 digest (a key is its digest, as
  in Kafka's ``SkimpyOffsetMap``), split into ``buckets`` by ``h1``: one row per non-empty
  bucket. It also emits a row per transactional or control batch (the transaction events,
  collected by the driver: a few per transaction) and one with the segment's counters.
- **offset map**: the key rows are shuffled by bucket, and one task per bucket computes the
  latest offset of each digest over the dirty range (a sort of that bucket's triples). This is
  the distributed aggregation, ``max(offset)`` per key: nothing bounds the number of keys
  (Kafka's ``log.cleaner.dedupe.buffer.size`` makes it clean a large dirty range in several
  rounds; this is one round), and a task holds one bucket (about one segment's records).
- **lists**: pass 2 needs, per segment, a short list of offsets to decide by, and the bucket
  task makes them while it holds its part of the map. For a segment wholly in the dirty range
  every keyed record is in the map, so the list is its *winners*, the map's latest offsets that
  fall in it (a sorted search over the segment bases). For a segment of the clean section (the
  log's start) the list is its *losers*: its triples looked up in the map, kept where the map's
  offset is later. The map and the lists are what the round keeps (persisted), not the scanned
  records. Clean-section segments scanned later (``scan_more``: those the Bloom filters could
  not rule out) get their losers from a second shuffle of their key rows with the map.
- **rewrite**: one task per output group receives its segments' lists and rewrites them into
  the group's ``.cleaned`` segment (``engine.rewrite_group``). A task holds one group's lists and
  streams its segments batch by batch, so its memory depends on the group's size, not on how
  many segments the log has.

Executors read local segments from the log directory by path (they run where the log is, or
share its filesystem); nothing needs Hadoop or object-store jars. Functions shipped to
executors are module-level functions bound with ``functools.partial``, so they pickle by
reference and executors import them from the installed ``tierlog``.
"""

from __future__ import annotations

import functools
import pickle
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from tierlog.compaction.engine import (
    GroupOutput,
    GroupTask,
    Progress,
    ScanOutcome,
    SegmentTask,
    rewrite_group,
)
from tierlog.compaction.rewrite import RetentionContext
from tierlog.compaction.scan import iter_segment_digests
from tierlog.compaction.summary import BloomFilter
from tierlog.compaction.txn import AbortedIndex, MarkerKind, TxnEvent
from tierlog.log.log_config import LogConfig
from tierlog.log.txn_index import AbortedTxn

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    from numpy.typing import NDArray
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["SparkEngine"]

_KIND_KEYS = 0
"""One bucket of a segment's keyed records: ``blob`` packs ``a`` (h1, h2, offset) triples."""
_KIND_STATS = 1
"""A segment's counters: ``a`` bytes read, ``b`` records decoded, ``c`` bytes downloaded."""
_KIND_EVENT = 2
"""A transaction event, ``kind - _KIND_EVENT`` its ``MarkerKind``: ``a`` the batch's base
offset, ``b`` its last offset, ``c`` its producer id."""
_KIND_MAP = 8
"""One bucket of the offset map: ``blob`` packs ``a`` (h1, h2, latest offset) triples, sorted
by digest."""
_KIND_LIST = 9
"""A segment's winners (dirty) or losers (clean section): ``blob`` packs int64 offsets."""
_ROW_FIELDS = ("kind", "seg", "bucket", "a", "b", "c", "blob")
_ROWS_SCHEMA = "kind byte, seg int, bucket int, a long, b long, c long, blob binary"
_LISTS_SCHEMA = "group int, seg int, blob binary"
"""A segment's winners or losers (``blob``: int64 offsets), or, with a null ``blob``, only that
the segment belongs to the group."""
_TRIPLE = 3


def _triples(blobs: Sequence[bytes]) -> NDArray[np.int64]:
    import numpy as np

    return np.frombuffer(b"".join(blobs), dtype="<i8").reshape(-1, _TRIPLE)


def _rows(
    kind: Any,
    seg: Any,
    bucket: Any,
    *,
    a: Any = 0,
    b: Any = 0,
    c: Any = 0,
    blobs: Sequence[bytes | None],
) -> pa.RecordBatch:
    import numpy as np
    import pyarrow as pa

    n = len(blobs)

    def column(values: Any, dtype: Any) -> pa.Array:
        return pa.array(
            np.full(n, values, dtype) if np.isscalar(values) else np.asarray(values, dtype)
        )

    return pa.RecordBatch.from_arrays(
        [
            column(kind, np.int8),
            column(seg, np.int32),
            column(bucket, np.int32),
            column(a, np.int64),
            column(b, np.int64),
            column(c, np.int64),
            pa.array(blobs, pa.binary()),
        ],
        names=["kind", "seg", "bucket", "a", "b", "c", "blob"],
    )


def _scan_batches(
    tasks: Sequence[SegmentTask],
    aborted_entries: Sequence[AbortedTxn],
    end_offset: int,
    buckets: int,
    batches: Iterable[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Executor side of the scan: the rows of every segment task in the partition."""
    import numpy as np

    aborted = AbortedIndex(aborted_entries)
    by_index = {t.index: t for t in tasks}
    for batch in batches:
        for seg in batch.column("index").to_pylist():
            task = by_index[seg]
            path, downloaded = task.local_path()
            offsets: list[bytes] = []
            digests: list[bytes] = []
            events: list[TxnEvent] = []
            size = records = 0
            for found in iter_segment_digests(path, aborted=aborted, end_offset=end_offset):
                size += found.size
                records += found.records
                if found.event is not None:
                    events.append(found.event)
                if found.offsets:
                    offsets.append(found.offsets)
                    digests.append(found.digests)
            if offsets:
                table = np.empty((sum(len(o) for o in offsets) // 8, _TRIPLE), np.int64)
                table[:, :2] = np.frombuffer(b"".join(digests), "<i8").reshape(-1, 2)
                table[:, 2] = np.frombuffer(b"".join(offsets), "<i8")
                bucket_of = table[:, 0].view(np.uint64) % np.uint64(buckets)
                order = np.argsort(bucket_of, kind="stable")
                ids, starts, counts = np.unique(
                    bucket_of[order], return_index=True, return_counts=True
                )
                table = table[order]
                yield _rows(
                    _KIND_KEYS,
                    seg,
                    ids.astype(np.int32),
                    a=counts,
                    blobs=[
                        table[at : at + n].tobytes() for at, n in zip(starts, counts, strict=True)
                    ],
                )
            if events:
                yield _rows(
                    [_KIND_EVENT + int(e.marker) for e in events],
                    seg,
                    -1,
                    a=[e.base_offset for e in events],
                    b=[e.last_offset for e in events],
                    c=[e.producer_id for e in events],
                    blobs=[None] * len(events),
                )
            yield _rows(_KIND_STATS, seg, -1, a=[size], b=[records], c=[downloaded], blobs=[None])


def _by_bucket(batches: Iterable[pa.RecordBatch]) -> dict[int, dict[int, list[tuple[Any, ...]]]]:
    """A partition's rows: bucket -> kind -> [(kind, seg, bucket, a, b, c, blob)]."""
    out: dict[int, dict[int, list[tuple[Any, ...]]]] = {}
    for batch in batches:
        columns = [batch.column(name).to_pylist() for name in _ROW_FIELDS]
        for row in zip(*columns, strict=True):
            out.setdefault(row[2], {}).setdefault(row[0], []).append(row)
    return out


def _lookup(latest: NDArray[np.int64], keys: NDArray[np.int64]) -> NDArray[np.int64]:
    """For each (h1, h2) of ``keys``, its latest offset in the sorted map ``latest`` (-1: none)."""
    import numpy as np

    h1 = latest[:, 0]
    lo = np.searchsorted(h1, keys[:, 0], side="left")
    hi = np.searchsorted(h1, keys[:, 0], side="right")
    found = np.full(len(keys), -1, np.int64)
    single = hi - lo == 1
    at = lo[single]
    match = latest[at, 1] == keys[single, 1]
    found[np.flatnonzero(single)[match]] = latest[at[match], 2]
    for i in np.flatnonzero(hi - lo > 1):  # digests sharing their first half: vanishingly rare
        for j in range(lo[i], hi[i]):
            if latest[j, 1] == keys[i, 1]:
                found[i] = latest[j, 2]
    return found


class _Round(NamedTuple):
    """What the executors need to know of a round to sort its offsets into lists."""

    first_dirty_offset: int
    dirty_bases: tuple[int, ...]
    """The dirty segments' base offsets, sorted, and the end of the last one."""
    dirty_segments: tuple[int, ...]
    """Their task indexes, in the same order."""
    clean_segments: frozenset[int]
    """The task indexes of the clean section's segments."""


def _winners(latest: NDArray[np.int64], round_: _Round) -> Iterator[tuple[int, bytes]]:
    """(segment, packed offsets): the map's latest offsets, by the dirty segment they are in."""
    import numpy as np

    if not len(latest) or not round_.dirty_segments:
        return
    starts = np.asarray(round_.dirty_bases, np.int64)
    segs = np.asarray(round_.dirty_segments, np.int32)
    offsets = latest[:, 2]
    at = np.searchsorted(starts, offsets, side="right") - 1
    inside = (at >= 0) & (at < len(segs))
    offsets, in_seg = offsets[inside], segs[at[inside]]
    order = np.argsort(in_seg, kind="stable")
    ids, first, counts = np.unique(in_seg[order], return_index=True, return_counts=True)
    offsets = offsets[order]
    for seg, f, n in zip(ids.tolist(), first, counts, strict=True):
        yield seg, offsets[f : f + n].tobytes()


def _losers(
    latest: NDArray[np.int64], rows: Sequence[tuple[Any, ...]], round_: _Round
) -> Iterator[tuple[int, bytes]]:
    """(segment, packed offsets): the records of clean-section key rows that the map supersedes."""
    if not len(latest):
        return
    for row in rows:
        seg = row[1]
        if seg in round_.clean_segments:
            keys = _triples([row[6]])
            losers = keys[keys[:, 2] < _lookup(latest, keys), 2]
            if len(losers):
                yield seg, losers.tobytes()


def _list_rows(lists: Sequence[tuple[int, bytes]]) -> pa.RecordBatch:
    return _rows(_KIND_LIST, [seg for seg, _ in lists], -1, blobs=[blob for _, blob in lists])


def _latest_per_digest(table: NDArray[np.int64]) -> NDArray[np.int64]:
    """The (h1, h2, max offset) of each digest in ``table``'s triples, sorted by digest.

    Sorted on ``h1`` alone (a quarter of the cost of sorting on three columns), each run of
    equal ``h1`` is one key unless two keys share a digest's first half, which a check of the
    run's ``h2`` bounds catches (then the triples are sorted on all three)."""
    import numpy as np

    if not len(table):
        return np.zeros((0, _TRIPLE), np.int64)
    table = table[np.argsort(table[:, 0])]
    starts = np.flatnonzero(np.r_[True, table[1:, 0] != table[:-1, 0]])
    h2 = table[:, 1]
    if np.array_equal(np.minimum.reduceat(h2, starts), np.maximum.reduceat(h2, starts)):
        latest = table[starts].copy()
        latest[:, 2] = np.maximum.reduceat(table[:, 2], starts)
        return latest
    table = table[np.lexsort((table[:, 2], table[:, 1], table[:, 0]))]
    last = np.r_[(table[1:, 0] != table[:-1, 0]) | (table[1:, 1] != table[:-1, 1]), True]
    return np.ascontiguousarray(table[last])


def _map_buckets(round_: _Round, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Executor side of the offset map, per bucket: each digest's latest offset over the dirty
    range (a ``_KIND_MAP`` row, sorted by digest), the dirty segments' winners and the clean
    section's losers among this bucket's keys (``_KIND_LIST`` rows); the scan's other rows
    (counters, events) pass through."""

    for bucket, kinds in _by_bucket(batches).items():
        if bucket < 0:
            for kind, rows in kinds.items():
                yield _rows(
                    kind,
                    [r[1] for r in rows],
                    -1,
                    a=[r[3] for r in rows],
                    b=[r[4] for r in rows],
                    c=[r[5] for r in rows],
                    blobs=[None] * len(rows),
                )
            continue
        key_rows = kinds.get(_KIND_KEYS, [])
        table = _triples([r[6] for r in key_rows])
        table = table[table[:, 2] >= round_.first_dirty_offset]
        latest = _latest_per_digest(table)
        if len(latest):
            yield _rows(_KIND_MAP, -1, bucket, a=[len(latest)], blobs=[latest.tobytes()])
        lists = [*_winners(latest, round_), *_losers(latest, key_rows, round_)]
        if lists:
            yield _list_rows(lists)


def _more_losers(round_: _Round, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Executor side, per bucket: the losers of clean-section segments scanned after the map
    was built (``scan_more``), from the map's bucket and their key rows."""
    for kinds in _by_bucket(batches).values():
        maps = kinds.get(_KIND_MAP, [])
        latest = _triples([r[6] for r in maps])
        lists = list(_losers(latest, kinds.get(_KIND_KEYS, []), round_))
        if lists:
            yield _list_rows(lists)


def _tag_groups(
    group_of: Mapping[int, int], batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Executor side: each list row with the output group of its segment."""
    import pyarrow as pa

    for batch in batches:
        segs = batch.column("seg").to_pylist()
        keep = [i for i, seg in enumerate(segs) if seg in group_of]
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([group_of[segs[i]] for i in keep], pa.int32()),
                pa.array([segs[i] for i in keep], pa.int32()),
                batch.column("blob").take(pa.array(keep, pa.int64())),
            ],
            names=["group", "seg", "blob"],
        )


def _rewrite_schema() -> Any:
    from pyspark.sql import types as st

    return st.StructType(
        [
            st.StructField("group", st.IntegerType(), False),
            st.StructField("base_offset", st.LongType(), False),
            st.StructField("size", st.LongType(), False),
            st.StructField("bytes_read", st.LongType(), False),
            st.StructField("bytes_written", st.LongType(), False),
            st.StructField("records_read", st.LongType(), False),
            st.StructField("records_written", st.LongType(), False),
            st.StructField("batches_read", st.LongType(), False),
            st.StructField("batches_written", st.LongType(), False),
            st.StructField("invalid_records", st.LongType(), False),
            st.StructField("tombstones_kept", st.LongType(), False),
            st.StructField("downloaded", st.LongType(), False),
            st.StructField("uploaded", st.BinaryType(), True),
        ]
    )


_STAT_FIELDS = (
    "bytes_read",
    "bytes_written",
    "records_read",
    "records_written",
    "batches_read",
    "batches_written",
    "invalid_records",
    "tombstones_kept",
)


def _rewrite_batches(
    groups: Sequence[GroupTask],
    ctx: RetentionContext,
    config: LogConfig,
    first_dirty_offset: int,
    batches: Iterable[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Executor side of pass 2: rewrite every group whose rows are in this partition.

    A row is (group, segment, offsets): the winners of a dirty segment, the losers of a
    clean-section one, or null offsets that only say the group is this partition's."""
    import numpy as np
    import pyarrow as pa

    superseded: dict[int, dict[int, set[int]]] = {}
    for batch in batches:
        for g, seg, blob in zip(
            batch.column("group").to_pylist(),
            batch.column("seg").to_pylist(),
            batch.column("blob").to_pylist(),
            strict=True,
        ):
            offsets = superseded.setdefault(g, {}).setdefault(seg, set())
            if blob:
                offsets.update(np.frombuffer(blob, "<i8").tolist())
    for g in sorted(superseded):
        group = groups[g]
        by_seg = superseded[g]

        def test_for(task: SegmentTask, by_seg: dict[int, set[int]] = by_seg) -> Any:
            offsets = by_seg.get(task.index, set())
            if task.base_offset >= first_dirty_offset:
                return lambda offset, _key: offset not in offsets  # the winners
            return lambda offset, _key: offset in offsets  # the losers

        out = rewrite_group(group, ctx, config, test_for)
        stats = out.stats
        uploaded = (
            None
            if out.uploaded is None
            else pickle.dumps((out.uploaded, out.custom_metadata), protocol=5)
        )
        yield pa.RecordBatch.from_pylist(
            [
                {
                    "group": g,
                    "base_offset": out.base_offset,
                    "size": out.size,
                    **{name: getattr(stats, name) for name in _STAT_FIELDS},
                    "downloaded": out.bytes_downloaded,
                    "uploaded": uploaded,
                }
            ],
            schema=pa.schema(
                [("group", pa.int32()), ("base_offset", pa.int64()), ("size", pa.int64())]
                + [(name, pa.int64()) for name in _STAT_FIELDS]
                + [("downloaded", pa.int64()), ("uploaded", pa.binary())]
            ),
        )


def _bloom_hits(
    blooms: Sequence[tuple[int, bytes, int, int]], batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Executor side of the Bloom test: which filters a partition's map buckets may hit."""
    import pyarrow as pa

    filters = [(i, BloomFilter(bits, m, k)) for i, bits, m, k in blooms]
    hits: set[int] = set()
    for batch in batches:
        for blob in batch.column("blob").to_pylist():
            raw = _triples([blob])[:, :2].tobytes()
            digests = [raw[at : at + 16] for at in range(0, len(raw), 16)]
            for i, bloom in filters:
                if i not in hits and bloom.might_contain_any(digests):
                    hits.add(i)
    yield pa.RecordBatch.from_arrays([pa.array(sorted(hits), pa.int32())], names=["seg"])


class _JobProgress:
    """Reports a Spark job group's task progress to a ``Progress`` callback from a thread."""

    def __init__(self, spark: SparkSession, group: str, phase: str, progress: Progress) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._group = group
        self._phase = phase
        self._progress = progress
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="tierlog-spark-progress", daemon=True
        )
        self._last = (-1, -1)

    def __enter__(self) -> _JobProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._poll()

    def _poll(self) -> None:
        done = total = 0
        for job_id in self._tracker.getJobIdsForGroup(self._group):
            job = self._tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                stage = self._tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
        if total and (done, total) != self._last:
            self._last = (done, total)
            self._progress(self._phase, done, total)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self._poll()


class SparkEngine:
    """Both passes on a Spark session (see the module docstring)."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._mapped: DataFrame | None = None
        """The offset map's buckets and the first scan's lists (persisted)."""
        self._more: list[DataFrame] = []
        """The rows of the clean-section segments scanned after the map (persisted)."""
        self._more_segments: set[int] = set()
        self._persisted: list[DataFrame] = []
        self._round: _Round | None = None
        self._buckets = 1
        self._job = 0

    def _group(self, phase: str) -> str:
        self._job += 1
        group = f"tierlog-compaction-{id(self)}-{self._job}-{phase}"
        self._spark.sparkContext.setJobGroup(group, f"tierlog compaction: {phase}")
        return group

    def _tracked(self, phase: str, progress: Progress | None) -> Any:
        group = self._group(phase)
        if progress is None:
            return _NullContext()
        return _JobProgress(self._spark, group, phase, progress)

    def _persist(self, df: DataFrame) -> DataFrame:
        from pyspark import StorageLevel

        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self._persisted.append(df)
        return df

    def _scanned(
        self, tasks: Sequence[SegmentTask], aborted: AbortedIndex, end_offset: int
    ) -> DataFrame:
        task_df = self._spark.createDataFrame([(t.index,) for t in tasks], "index int")
        task_df = task_df.repartition(max(1, len(tasks)), "index")
        fn = functools.partial(
            _scan_batches, tuple(tasks), tuple(aborted.entries), end_offset, self._buckets
        )
        return task_df.mapInArrow(fn, _ROWS_SCHEMA)

    def _by_bucket(self, df: DataFrame) -> DataFrame:
        return df.repartition(self._buckets, "bucket")

    @staticmethod
    def _gather(rows: DataFrame) -> ScanOutcome:
        """Run ``rows`` and gather the counters, transaction events and map sizes in them."""
        from pyspark.sql import functions as sf

        outcome = ScanOutcome(events=[], keys_mapped=0, bytes_read=0)
        small = rows.where(~sf.col("kind").isin(_KIND_KEYS, _KIND_LIST))
        for kind, a, b, c in small.select("kind", "a", "b", "c").collect():
            if kind == _KIND_MAP:
                outcome.keys_mapped += a
            elif kind == _KIND_STATS:
                outcome.bytes_read += a
                outcome.records_read += b
                outcome.bytes_downloaded += c
            else:
                outcome.events.append(TxnEvent(a, b, c, MarkerKind(kind - _KIND_EVENT)))
        outcome.events.sort(key=lambda e: e.base_offset)
        return outcome

    def scan(
        self,
        tasks: Sequence[SegmentTask],
        *,
        aborted: AbortedIndex,
        first_dirty_offset: int,
        end_offset: int,
        progress: Progress | None = None,
    ) -> ScanOutcome:
        self.release()
        dirty = sorted(
            (t for t in tasks if t.base_offset >= first_dirty_offset), key=lambda t: t.base_offset
        )
        self._round = _Round(
            first_dirty_offset,
            tuple(t.base_offset for t in dirty) + ((dirty[-1].next_offset,) if dirty else ()),
            tuple(t.index for t in dirty),
            frozenset(t.index for t in tasks if t.base_offset < first_dirty_offset),
        )
        # About a segment's records per bucket, and work for every core.
        parallelism = self._spark.sparkContext.defaultParallelism
        self._buckets = max(1, len(tasks), parallelism)
        with self._tracked("map", progress):
            scanned = self._scanned(tasks, aborted, end_offset)
            fn = functools.partial(_map_buckets, self._round)
            self._mapped = self._persist(self._by_bucket(scanned).mapInArrow(fn, _ROWS_SCHEMA))
            return self._gather(self._mapped)

    def bloom_hits(self, blooms: Mapping[int, BloomFilter]) -> set[int]:
        from pyspark.sql import functions as sf

        if self._mapped is None:
            raise RuntimeError("SparkEngine.bloom_hits called before scan")
        if not blooms:
            return set()
        packed = tuple((i, b.bits, b.m, b.k) for i, b in blooms.items())
        fn = functools.partial(_bloom_hits, packed)
        maps = self._mapped.where(sf.col("kind") == _KIND_MAP).select("blob")
        return {int(r[0]) for r in maps.mapInArrow(fn, "seg int").distinct().collect()}

    def scan_more(
        self,
        tasks: Sequence[SegmentTask],
        *,
        aborted: AbortedIndex,
        end_offset: int,
        progress: Progress | None = None,
    ) -> ScanOutcome:
        from pyspark.sql import functions as sf

        if self._mapped is None:
            raise RuntimeError("SparkEngine.scan_more called before scan")
        if not tasks:
            return ScanOutcome(events=[], keys_mapped=0, bytes_read=0)
        with self._tracked("map", progress):
            scanned = self._persist(self._scanned(tasks, aborted, end_offset))
            outcome = self._gather(scanned)
        self._more.append(scanned.where(sf.col("kind") == _KIND_KEYS))
        self._more_segments.update(t.index for t in tasks)
        return outcome

    def _lists(self, groups: Sequence[GroupTask]) -> DataFrame:
        """(group, seg, offsets) rows: the winners of the dirty segments, the losers of the
        others, and one null row per segment so that every group has a row."""
        from pyspark.sql import functions as sf

        assert self._mapped is not None and self._round is not None
        lists = self._mapped.where(sf.col("kind") == _KIND_LIST)
        if self._more:
            inputs = self._mapped.where(sf.col("kind") == _KIND_MAP)
            for more in self._more:
                inputs = inputs.unionByName(more)
            later = self._round._replace(clean_segments=frozenset(self._more_segments))
            fn = functools.partial(_more_losers, later)
            lists = lists.unionByName(self._by_bucket(inputs).mapInArrow(fn, _ROWS_SCHEMA))
        group_of = {t.index: g for g, group in enumerate(groups) for t in group.sources}
        tagged = lists.mapInArrow(functools.partial(_tag_groups, group_of), _LISTS_SCHEMA)
        membership = self._spark.createDataFrame(
            [(g, seg, None) for seg, g in group_of.items()], _LISTS_SCHEMA
        )
        return tagged.unionByName(membership)

    def rewrite(
        self,
        groups: Sequence[GroupTask],
        *,
        ctx: RetentionContext,
        config: LogConfig,
        progress: Progress | None = None,
    ) -> Iterator[GroupOutput]:
        if self._mapped is None or self._round is None:
            raise RuntimeError("SparkEngine.rewrite called before scan")
        rows = self._lists(groups).repartition(max(1, len(groups)), "group")
        first_dirty = self._round.first_dirty_offset
        fn = functools.partial(_rewrite_batches, tuple(groups), ctx, config, first_dirty)
        with self._tracked("clean", progress):
            written = rows.mapInArrow(fn, _rewrite_schema())
            results = sorted(written.collect(), key=lambda r: r["base_offset"])
        self.release()
        for r in results:
            out = GroupOutput(int(r["base_offset"]), int(r["size"]))
            for name in _STAT_FIELDS:
                setattr(out.stats, name, int(r[name]))
            out.bytes_downloaded = int(r["downloaded"])
            if r["uploaded"] is not None:
                out.uploaded, out.custom_metadata = pickle.loads(r["uploaded"])
            yield out

    def release(self) -> None:
        """Drop the cached data of the last round."""
        for df in self._persisted:
            df.unpersist()
        self._persisted = []
        self._mapped = None
        self._more = []
        self._more_segments = set()
        self._round = None


class _NullContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
