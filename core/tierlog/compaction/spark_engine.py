"""The Spark engine: a round's two passes as a Spark job (``tierlog[spark]``).

Same contract as ``engine.PythonEngine`` (see ``engine``), computed by a cluster:

- **scan**: one task per source segment (``mapInArrow``) reads the segment once and emits Arrow
  rows: one per keyed record of a batch that is neither control nor aborted (segment, key
  key, offset), one per transactional or control batch (the transaction events, collected by
  the driver: a few per transaction), and one with the segment's counters. The offset map is a
  distributed aggregation, ``max(offset)`` per key over the dirty range: nothing bounds the
  number of keys (Kafka's ``log.cleaner.dedupe.buffer.size`` makes it clean a large dirty range
  in several rounds; this is one round). Joining every record row with the map gives the
  superseded records, grouped per segment.
- **rewrite**: one task per output group receives the superseded offsets of its segments and
  rewrites them into the group's ``.cleaned`` segment (``engine.rewrite_group``). A task holds
  one group's superseded offsets and streams its segments batch by batch, so its memory depends
  on the group's size, not on how many segments the log has.

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
from typing import TYPE_CHECKING, Any

from tierlog.compaction.engine import (
    GroupOutput,
    GroupTask,
    Progress,
    ScanOutcome,
    SegmentTask,
    rewrite_group,
)
from tierlog.compaction.rewrite import RetentionContext
from tierlog.compaction.scan import iter_segment_rows, key_digest
from tierlog.compaction.summary import BloomFilter
from tierlog.compaction.txn import AbortedIndex, MarkerKind, TxnEvent
from tierlog.log.log_config import LogConfig
from tierlog.log.txn_index import AbortedTxn

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["SparkEngine"]

_ROWS_PER_BATCH = 1 << 16
_KIND_KEY = 0
_KIND_EVENT = 1
_KIND_STATS = 2


def _scan_schema() -> Any:
    from pyspark.sql import types as st

    return st.StructType(
        [
            st.StructField("kind", st.ByteType(), False),
            st.StructField("seg", st.IntegerType(), False),
            st.StructField("key", st.BinaryType(), True),
            st.StructField("offset", st.LongType(), True),
            st.StructField("last", st.LongType(), True),
            st.StructField("pid", st.LongType(), True),
            st.StructField("marker", st.ByteType(), True),
            st.StructField("bytes", st.LongType(), True),
            st.StructField("records", st.LongType(), True),
            st.StructField("downloaded", st.LongType(), True),
        ]
    )


def _scan_batches(
    tasks: Sequence[SegmentTask],
    aborted_entries: Sequence[AbortedTxn],
    first_dirty_offset: int,
    end_offset: int,
    batches: Iterable[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Executor side of the scan: the rows of every segment task in the partition.

    A segment entirely in the dirty range sends one row per key, its latest offset in the
    segment: every other record of that key in it is superseded whatever the map says, and a
    segment of a compacted topic holds far fewer keys than records. Any other segment sends a
    row per keyed record (Kafka keeps a clean-section record unless the dirty range has its key,
    duplicates included)."""
    import pyarrow as pa

    aborted = AbortedIndex(aborted_entries)
    names = [
        "kind",
        "seg",
        "key",
        "offset",
        "last",
        "pid",
        "marker",
        "bytes",
        "records",
        "downloaded",
    ]

    def key_batch(seg: int, keys: list[bytes], offsets: list[int]) -> pa.RecordBatch:
        n = len(keys)
        return pa.RecordBatch.from_arrays(
            [
                pa.array([_KIND_KEY] * n, pa.int8()),
                pa.array([seg] * n, pa.int32()),
                pa.array(keys, pa.binary()),
                pa.array(offsets, pa.int64()),
                pa.nulls(n, pa.int64()),
                pa.nulls(n, pa.int64()),
                pa.nulls(n, pa.int8()),
                pa.nulls(n, pa.int64()),
                pa.nulls(n, pa.int64()),
                pa.nulls(n, pa.int64()),
            ],
            names=names,
        )

    def event_batch(seg: int, events: list[TxnEvent]) -> pa.RecordBatch:
        n = len(events)
        return pa.RecordBatch.from_arrays(
            [
                pa.array([_KIND_EVENT] * n, pa.int8()),
                pa.array([seg] * n, pa.int32()),
                pa.nulls(n, pa.binary()),
                pa.array([e.base_offset for e in events], pa.int64()),
                pa.array([e.last_offset for e in events], pa.int64()),
                pa.array([e.producer_id for e in events], pa.int64()),
                pa.array([int(e.marker) for e in events], pa.int8()),
                pa.nulls(n, pa.int64()),
                pa.nulls(n, pa.int64()),
                pa.nulls(n, pa.int64()),
            ],
            names=names,
        )

    def stats_batch(seg: int, size: int, records: int, downloaded: int) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [
                pa.array([_KIND_STATS], pa.int8()),
                pa.array([seg], pa.int32()),
                pa.nulls(1, pa.binary()),
                pa.nulls(1, pa.int64()),
                pa.nulls(1, pa.int64()),
                pa.nulls(1, pa.int64()),
                pa.nulls(1, pa.int8()),
                pa.array([size], pa.int64()),
                pa.array([records], pa.int64()),
                pa.array([downloaded], pa.int64()),
            ],
            names=names,
        )

    by_index = {t.index: t for t in tasks}
    for batch in batches:
        for seg in batch.column("index").to_pylist():
            task = by_index[seg]
            path, downloaded = task.local_path()
            digests: list[bytes] = []
            offsets: list[int] = []
            events: list[TxnEvent] = []
            latest_in_segment: dict[bytes, int] | None = (
                {} if task.base_offset >= first_dirty_offset else None
            )
            size = records = 0
            for rows in iter_segment_rows(path, aborted=aborted, end_offset=end_offset):
                size += rows.size
                records += rows.records
                if rows.event is not None:
                    events.append(rows.event)
                if not rows.keys:
                    continue
                if latest_in_segment is not None:
                    latest_in_segment.update(zip(rows.keys, rows.offsets, strict=True))
                    continue
                digests.extend(rows.keys)
                offsets.extend(rows.offsets)
                if len(digests) >= _ROWS_PER_BATCH:
                    yield key_batch(seg, digests, offsets)
                    digests, offsets = [], []
            if latest_in_segment:
                items = list(latest_in_segment.items())
                for at in range(0, len(items), _ROWS_PER_BATCH):
                    chunk = items[at : at + _ROWS_PER_BATCH]
                    yield key_batch(seg, [d for d, _ in chunk], [o for _, o in chunk])
            if digests:
                yield key_batch(seg, digests, offsets)
            if events:
                yield event_batch(seg, events)
            yield stats_batch(seg, size, records, downloaded)


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
    """Executor side of pass 2: rewrite every group whose rows are in this partition."""
    import pyarrow as pa

    superseded: dict[int, dict[int, set[int]]] = {}
    for batch in batches:
        for g, seg, offs in zip(
            batch.column("group").to_pylist(),
            batch.column("seg").to_pylist(),
            batch.column("offsets").to_pylist(),
            strict=True,
        ):
            superseded.setdefault(g, {})[seg] = set(offs or ())
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
    """Executor side of the Bloom test: which filters a partition's dirty keys may hit."""
    import pyarrow as pa

    filters = [(i, BloomFilter(bits, m, k)) for i, bits, m, k in blooms]
    hits: set[int] = set()
    for batch in batches:
        digests = [key_digest(key) for key in batch.column("key").to_pylist()]
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
        self._superseded: DataFrame | None = None
        self._keys: DataFrame | None = None
        self._latest: DataFrame | None = None
        self._persisted: list[DataFrame] = []
        self._first_dirty = 0
        self._dirty_segments: set[int] = set()
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

    def _scan_job(
        self, tasks: Sequence[SegmentTask], aborted: AbortedIndex, end_offset: int
    ) -> DataFrame:
        from pyspark import StorageLevel

        task_df = self._spark.createDataFrame([(t.index,) for t in tasks], "index int")
        task_df = task_df.repartition(max(1, len(tasks)), "index")
        fn = functools.partial(
            _scan_batches, tuple(tasks), tuple(aborted.entries), self._first_dirty, end_offset
        )
        scanned = task_df.mapInArrow(fn, _scan_schema()).persist(StorageLevel.MEMORY_AND_DISK)
        self._persisted.append(scanned)
        return scanned

    @staticmethod
    def _collect(scanned: DataFrame) -> tuple[list[TxnEvent], Any]:
        from pyspark.sql import functions as sf

        counters = (
            scanned.where(sf.col("kind") == _KIND_STATS)
            .agg(
                sf.sum("bytes").alias("bytes"),
                sf.sum("records").alias("records"),
                sf.sum("downloaded").alias("downloaded"),
            )
            .collect()[0]
        )
        event_rows = (
            scanned.where(sf.col("kind") == _KIND_EVENT)
            .select(sf.col("offset"), "last", "pid", "marker")
            .orderBy(sf.col("offset"))
            .collect()
        )
        events = [TxnEvent(r[0], r[1], r[2], MarkerKind(r[3])) for r in event_rows]
        return events, counters

    def _update_superseded(self) -> None:
        """Per segment, the offsets pass 2 needs: for a segment wholly in the dirty range the
        records that win (every other keyed record of it is superseded), for any other segment
        the records that lose. Both are the short list once a log has been cleaned."""
        from pyspark.sql import functions as sf

        assert self._keys is not None and self._latest is not None
        dirty = (
            sf.col("seg").isin(sorted(self._dirty_segments))
            if self._dirty_segments
            else (sf.lit(False))
        )
        self._superseded = (
            self._keys.join(self._latest, "key")
            .where(
                (dirty & (sf.col("offset") == sf.col("latest")))
                | (~dirty & (sf.col("offset") < sf.col("latest")))
            )
            .groupBy("seg")
            .agg(sf.collect_list("offset").alias("offsets"))
        )

    def scan(
        self,
        tasks: Sequence[SegmentTask],
        *,
        aborted: AbortedIndex,
        first_dirty_offset: int,
        end_offset: int,
        progress: Progress | None = None,
    ) -> ScanOutcome:
        from pyspark.sql import functions as sf

        self.release()
        self._first_dirty = first_dirty_offset
        self._dirty_segments = {t.index for t in tasks if t.base_offset >= first_dirty_offset}
        scanned = self._scan_job(tasks, aborted, end_offset)
        with self._tracked("map", progress):
            events, counters = self._collect(scanned)
            keys = scanned.where(sf.col("kind") == _KIND_KEY).select("seg", "key", sf.col("offset"))
            latest = (
                keys.where(sf.col("offset") >= first_dirty_offset)
                .groupBy("key")
                .agg(sf.max("offset").alias("latest"))
            )
            self._keys, self._latest = keys, latest
            keys_mapped = latest.count()
        self._update_superseded()
        return ScanOutcome(
            events=events,
            keys_mapped=int(keys_mapped),
            bytes_read=int(counters["bytes"] or 0),
            records_read=int(counters["records"] or 0),
            bytes_downloaded=int(counters["downloaded"] or 0),
        )

    def bloom_hits(self, blooms: Mapping[int, BloomFilter]) -> set[int]:
        if self._latest is None:
            raise RuntimeError("SparkEngine.bloom_hits called before scan")
        if not blooms:
            return set()
        packed = tuple((i, b.bits, b.m, b.k) for i, b in blooms.items())
        fn = functools.partial(_bloom_hits, packed)
        schema = "seg int"
        rows = self._latest.select("key").mapInArrow(fn, schema).distinct().collect()
        return {int(r[0]) for r in rows}

    def scan_more(
        self,
        tasks: Sequence[SegmentTask],
        *,
        aborted: AbortedIndex,
        end_offset: int,
        progress: Progress | None = None,
    ) -> ScanOutcome:
        from pyspark.sql import functions as sf

        if self._keys is None:
            raise RuntimeError("SparkEngine.scan_more called before scan")
        if not tasks:
            return ScanOutcome(events=[], keys_mapped=0, bytes_read=0)
        scanned = self._scan_job(tasks, aborted, end_offset)
        with self._tracked("map", progress):
            events, counters = self._collect(scanned)
        more = scanned.where(sf.col("kind") == _KIND_KEY).select("seg", "key", sf.col("offset"))
        self._keys = self._keys.unionByName(more)
        self._update_superseded()
        return ScanOutcome(
            events=events,
            keys_mapped=0,
            bytes_read=int(counters["bytes"] or 0),
            records_read=int(counters["records"] or 0),
            bytes_downloaded=int(counters["downloaded"] or 0),
        )

    def rewrite(
        self,
        groups: Sequence[GroupTask],
        *,
        ctx: RetentionContext,
        config: LogConfig,
        progress: Progress | None = None,
    ) -> Iterator[GroupOutput]:
        if self._superseded is None:
            raise RuntimeError("SparkEngine.rewrite called before scan")
        spark = self._spark
        membership = spark.createDataFrame(
            [(g, t.index) for g, group in enumerate(groups) for t in group.sources],
            "group int, seg int",
        )
        rows = membership.join(self._superseded, "seg", "left").repartition(
            max(1, len(groups)), "group"
        )
        fn = functools.partial(_rewrite_batches, tuple(groups), ctx, config, self._first_dirty)
        with self._tracked("clean", progress):
            written = rows.select("group", "seg", "offsets").mapInArrow(fn, _rewrite_schema())
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
        """Drop the cached scans of the last round."""
        for df in self._persisted:
            df.unpersist()
        self._persisted = []
        self._keys = self._latest = self._superseded = None


class _NullContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
