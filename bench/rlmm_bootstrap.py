"""Benchmark of the RLMMs' bootstrap: the topic RLMM (``plugins/rlmm_topic``) against a bare
consumer, and the compacted RLMM (``plugins/rlmm_compacted``, KAFKA-20033) against the topic RLMM
over the same events; the topics' size as the history grows; the topic RLMM's mutating-call
latency.

Run: ``.venv/bin/python bench/rlmm_bootstrap.py [--sizes 10000,100000,1000000] [--live 1000]
[--calls 1000]`` (``--quick``: sizes 1,000 and 3,000 events, 50 live segments, 30 calls, one
pass: a smoke run whose figures mean nothing, written to ``--out`` or a temporary directory).
Needs Java 17 and Kafka's jars (Maven the first time): the bench starts a real Apache Kafka 4.3.1
broker (``scripts/services/kafka.py``) in a temporary directory and stops it at the end.

The history. One metadata topic per run (``remote.log.metadata.topic.name``, tierlog's
extension, so nothing is shared with other runs), with Kafka's 50 partitions, one replica.
One user partition (the *target*) and ``--neighbours`` other user partitions of the same topic
that Kafka's partitioner puts in the **same metadata partition** share its history: a share
``--others-share`` (default 0.2) of the records belong to the neighbours, which the RLMM must
read, decode and skip, as on a real cluster where ~(partitions / 50) user partitions share each
metadata partition. Each user partition's events are a leader's lifecycle: per segment a
COPY_SEGMENT_STARTED add and a COPY_SEGMENT_FINISHED update, and the deletion of the oldest
segment (DELETE_SEGMENT_STARTED, DELETE_SEGMENT_FINISHED) whenever more than ``--live``
(default 1000) segments are live: a retention that keeps the partition's remote size steady, so
the history grows while the live segments do not (``--live 0``: the first baseline's history,
the oldest deleted after every 100th segment, ~2% of the events, as ``bench/metadata_cache.py``;
its live segments grow with it); a leader-epoch change now and then, custom metadata on 1%;
every event carries the leader's epoch as ``broker_leader_epoch``, as tierlog's RLM publishes
it. They are serialized with ``tierlog.metadata.serialize`` (Kafka's bytes) and written with a
bare, batching confluent-kafka producer at the metadata partition Kafka's partitioner gives
(``tierlog.metadata.metadata_partition``), null keys, no compression (TBRLMM's producer
compresses nothing), which is how a broker's topic looks. The history is written once and
grows: the sizes are checkpoints (``--sizes``: records in the metadata partition, the target's
and the neighbours' together), each measured before the next records are written. A size whose
write is projected to take longer than ``--max-write-s`` (1800 s) on this machine is skipped
with the larger ones, and the output says so. Writing is dominated by the projection (below):
its planner costs ~0.3 ms of Python per event (``plan_write``, then decoding and applying the
records it planned), the legacy bytes ~10 us, so the million-event history takes ~5 minutes to
write on a quiet 2-core machine (up to three times that when other work shares it) and a full
run 10-15 minutes; ``--quick`` ~1 minute, broker included.

The same events, as the compacted RLMM writes them, go to a second topic of the same broker,
the **projection**, created as the compacted RLMM creates it (``topics.ensure_topics``: level 1,
``cleanup.policy=compact``, 50 partitions) but with compaction settings a bench can wait for
(``PROJECTION_CONFIGS``, passed as ``remote.log.metadata.topic.config.*`` overrides so that the
RLMM finds the topic as configured): ``segment.ms=2000`` (the cleaner never touches the active
segment; the default rolls hourly), ``delete.retention.ms=1000`` (tombstones live a day by
default), ``min.cleanable.dirty.ratio=0.1`` (the default) and ``max.compaction.lag.ms=2000``:
removing a tombstone takes a second cleaning round after its delete horizon, and a round needs a
dirty ratio above 0.1, which the few records written to roll the last segment never reach; a
dirty segment older than ``max.compaction.lag.ms`` makes the log eligible whatever its ratio.
Each event is planned by ``ProjectionApplier.plan_write`` (level 1: key, value, tombstones) on an
offline applier hosting the metadata partition's user partitions, which then applies the records
it planned, projection record first, then tombstones, as the RLMM's own consumer does before its
next write (as ``tests/_history.py``'s ``Node``); the records go, with the same bulk producer
(not in transactions: a ``read_committed`` reader reads them alike), to the same partition
number. At each size the bench waits for the broker's log cleaner (``Topics.wait_cleaned``):
it writes a marker record (a DELETE_PARTITION_MARKED of a user partition that does not exist,
same metadata partition, always the same key, skipped by the readers) whenever ``segment.ms``
has passed since the last append, which rolls the active segment, and reads the partition until
it holds one record per live key and no tombstone (the markers aside), or
``--clean-deadline-s`` (300 s) passes; the output says which.

Topic size over time. At each size and at the 1-2-5 points between them, after writing: both
topics' records (the legacy partition's end minus begin offsets, checked against the events
written; the projection's counted by reading it, since compaction leaves offset gaps) and bytes
(the partition's ``.log`` files in the broker's log directory), the projection as the cleaner
left it while the history was written; at each size also after the wait. The legacy topic grows
with the history; the compacted one with the live segments.

Bootstrap, at each size, in the same run, against the same broker (records in its page cache
for every reader alike), each best of ``--repeat`` passes (default 3), the kinds alternating:

- **the limit: a bare confluent-kafka consumer** assigned to the metadata partition from the
  beginning and reading up to the end offset read at its start, with the RLMM's own consumer
  settings (``TopicRlmmConfig.consumer``: the same fetch and queue sizes, partition EOF on) but
  ``fetch.queue.backoff.ms=10`` (librdkafka's 1000 ms default stalls a reader faster than
  ~100k records/s: it would cap the limit, not the RLMM, which is far slower) and the RLMM's
  loop (``poll`` then ``consume(1000, 0)``), touching every value (``Message.value()``) and
  nothing else: the **bytes**. The clock starts before the end-offset lookup and the
  assignment (the RLMM's clock includes both) with the connection and topic metadata already
  known (the RLMM's consumer thread looks them up at ``configure``). An untimed read comes
  first, so that no timed pass is the broker's first. The goal: the RLMM's records/s >= 0.8 x
  this.
- two bare loops that show where the time goes, not goals: the same consumer also
  **decoding** each value (``serde.deserialize``, what the RLMM's applier does first), and
  decoding **and applying** the target's events to a ``RemotePartitionMetadataStore`` in the
  reading thread (the RLMM's work with none of its machinery).
- **the RLMM**: a fresh ``TopicBasedRemoteLogMetadataManager`` configured (untimed: topic
  check, clients, its consumer thread, then 0.5 s for that thread to look up the topic's
  leaders), then timed from ``on_partition_leadership_changes({target}, set())`` until
  ``is_ready(target)`` (polled every millisecond). Records read: every record of the metadata
  partition below the end offset captured at assignment, which readiness requires. Checked:
  the cache then lists exactly the target's live segments. Memory: the peak RSS growth during
  the replay (``VmHWM`` reset through ``/proc/self/clear_refs``) and the RSS kept after it
  (the cache), for information.
- **a bare consumer reading the projection** to its end, as the first: its floor; and the same
  consumer **decoding and applying** every record with a ``ProjectionApplier`` (keys, tagged
  values, tombstones; the target's applied to its store), as the third for the legacy topic.
- **the compacted RLMM**: a fresh ``CompactedRemoteLogMetadataManager`` on the projection,
  configured (untimed: topic checks, compaction level, transactional producer, its consumer
  thread, 0.5 s) and timed exactly as the topic RLMM, from ``on_partition_leadership_changes``
  to ``is_ready``. Records read: the records of the projection partition below the end offset
  captured at assignment, counted by reading them (untimed). Checked: it lists exactly the live
  segments, each equal in every compared field to what the topic RLMM of the same size listed
  after replaying every event. The goals (issue 13): at most 3 records read per live segment
  (of every user partition of the metadata partition: the reader reads them all), and a
  bootstrap at least 10x faster than the topic RLMM's at the largest size.

Latency of a mutating call, ``--calls`` times (1,000) on a second private topic: the RLMM, with
a user partition assigned and ready, calls ``add_remote_log_segment_metadata``
(COPY_SEGMENT_STARTED) and then ``update_remote_log_segment_metadata``
(COPY_SEGMENT_FINISHED), each waited for through its future (read-your-writes: produced,
acknowledged, and applied by its own consumer). Against a bare round trip with the RLMM's client
settings (idempotent ``acks=all`` producer, ``linger.ms`` as configured, the consumer already
assigned at the end of a metadata partition of its own): ``produce`` of the same kind of record,
``poll`` until its delivery report, then ``poll`` of the consumer until it returns that record;
two round trips per RLMM add + update, interleaved with them. p50/p99 of each. This phase
runs first, on the fresh broker.

Beside the wall-clock figures, the CPU time of this process per record read by each reader
(every thread, librdkafka's included; the least of the passes), which other work on the
machine disturbs less than the wall clock (the load average at start and end is recorded too):
where the RLMM's time goes, record by record.

Writes ``bench/results/rlmm_bootstrap.json`` (or ``--out``: per size ``rlmm``, ``compacted``,
``ratio.legacy_vs_compacted``, ``topics`` (after the cleaner); ``topic_sizes``, the samples as
the history grew; ``compacted_largest``) and, if matplotlib is importable, ``rlmm_bootstrap.png``
beside it (first row: the topic RLMM against the bare consumer, latency; second row: both RLMMs'
bootstrap, the topics' records and bytes against the history's size).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import platform
import random
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final

# shared by every benchmark
from _report import drop_workdir, parse_args, pyplot, save_chart, verdict, write_results
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from tierlog_rlmm_compacted.config import AUDIT_ENABLE, TOPIC_CONFIG_PREFIX, CompactedRlmmConfig
from tierlog_rlmm_compacted.manager import CompactedRemoteLogMetadataManager
from tierlog_rlmm_compacted.projection import ProjectionApplier
from tierlog_rlmm_compacted.topics import ensure_topics
from tierlog_rlmm_topic import TopicBasedRemoteLogMetadataManager
from tierlog_rlmm_topic.config import (
    COMMON_CLIENT_PREFIX,
    INIT_RETRY_MAX_TIMEOUT_MS,
    LOG_DIR,
    MIN_ISR,
    NODE_ID,
    NUM_PARTITIONS,
    REPLICATION_FACTOR,
    TOPIC_NAME,
    TopicRlmmConfig,
)

from tierlog.metadata import (
    RemotePartitionMetadataStore,
    deserialize,
    metadata_partition,
    serialize,
)
from tierlog.progress import Progress
from tierlog.spi import (
    CustomMetadata,
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    Uuid,
)

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO / "scripts"))

# mypy finds services with MYPYPATH=scripts; without it the module is Any (hence unused-ignore).
from services import kafka as kafka_service  # type: ignore[import-not-found,unused-ignore]  # noqa: E402

GOAL_RATIO = 0.8
"""The RLMM's records/s over the bare consumer's, while becoming ready."""
METADATA_PARTITIONS = 50
"""Kafka's default ``remote.log.metadata.topic.num.partitions``."""
DELETE_EVERY = 100
RECORDS_PER_SEGMENT = 250_000
EPOCH_CHANGE_EVERY = 1000
GIB = 1 << 30
BATCH = 1000
"""Messages per ``consume`` after a ``poll``: the RLMM consumer task's batch."""
POLL_S = 0.1
SETTLE_S = 0.5
"""After ``configure``: the RLMM's consumer thread looks the topic's leaders up."""
READY_POLL_S = 0.001
CALL_TIMEOUT_S = 60.0
DEFAULT_SIZES = "10000,100000,1000000"
DEFAULT_LIVE = 1000
GOAL_SPEEDUP = 10.0
"""The topic RLMM's bootstrap seconds over the compacted RLMM's, at the largest history."""
GOAL_RECORDS_PER_LIVE = 3.0
"""Records the compacted RLMM reads to become ready, per live segment."""
PROJECTION_CONFIGS: Final[Mapping[str, str]] = {
    "segment.ms": "2000",
    "delete.retention.ms": "1000",
    "min.cleanable.dirty.ratio": "0.1",
    "max.compaction.lag.ms": "2000",
}
"""The projection topic's compaction settings in the bench (the RLMM's defaults roll hourly and
keep tombstones a day); see the module docstring."""
ROLL_MARGIN_S = 0.2
"""Past ``segment.ms`` before a marker is written to roll the projection's active segment."""
CLEAN_POLL_S = 0.25
CLEAN_DEADLINE_S = 300.0
PROGRESS_EVERY_S = 5.0
MASK64 = (1 << 64) - 1

S = RemoteLogSegmentState


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def splitmix64(x: int) -> int:
    """A 64-bit mixer: random-looking, reproducible ids."""
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


CLIENT_LOG = logging.getLogger("rlmm_bootstrap.librdkafka")
"""The bench's own clients log here (errors only: a broker just started logs retries)."""
CLIENT_LOG.setLevel(logging.ERROR)


def watermarks(consumer: Consumer, topic: str, partition: int) -> tuple[int, int]:
    """The partition's (begin, end) offsets, retried while a new topic elects its leaders."""
    deadline = time.monotonic() + 60
    while True:
        try:
            begin, end = consumer.get_watermark_offsets(
                KafkaTopicPartition(topic, partition), timeout=30, cached=False
            )
            return begin, end
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Reset ``VmHWM`` to the current RSS (Linux >= 4.0); whether it worked."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class RssMeter:
    """The peak RSS growth over a phase, and the growth kept at its end (bytes; None where
    /proc cannot tell)."""

    def __init__(self) -> None:
        gc.collect()
        self.reset = reset_peak_rss()
        self.before = _status_kib("VmRSS")
        self.peak_delta: int | None = None
        self.kept_delta: int | None = None

    def stop(self) -> None:
        peak, now = _status_kib("VmHWM"), _status_kib("VmRSS")
        if self.before is not None and now is not None:
            self.kept_delta = (now - self.before) * 1024
            if self.reset and peak is not None:
                self.peak_delta = (peak - self.before) * 1024


# The history ------------------------------------------------------------------------------------
class Lifecycle:
    """The lifecycle events of one user partition, in the order its leader writes them;
    deterministic for a seed. Counts the segments a cache holds after the events emitted so
    far (added, not yet DELETE_SEGMENT_FINISHED), and knows their ids.

    Deletions, oldest segment first: with ``live`` > 0, whenever more than ``live`` segments
    are live (a retention keeping the partition's remote size steady); with ``live`` 0, after
    every ``DELETE_EVERY``-th segment (the baseline's history, whose live segments grow with
    it); none without ``deletes``. Every event carries the leader's current epoch as
    ``broker_leader_epoch``, as tierlog's RLM publishes it (not in Kafka's legacy bytes)."""

    def __init__(
        self, tip: TopicIdPartition, seed: int, *, live: int = 0, deletes: bool = True
    ) -> None:
        if live < 0:
            raise ValueError(f"live must be >= 0, got {live}")
        self.tip = tip
        self.seed = seed
        self.live_cap = live
        self.deletes = deletes
        self._rnd = random.Random(seed)
        self._pending: deque[tuple[RemoteLogMetadata, int]] = deque()
        self._added = 0
        self._oldest = 0
        self._epoch = 0
        self._emitted_adds = 0
        self._emitted_deletes = 0
        self.events = 0
        self.live = 0

    def segment_id(self, n: int) -> RemoteLogSegmentId:
        key = (self.seed << 40) + 2 * n
        return RemoteLogSegmentId(self.tip, Uuid(splitmix64(key), splitmix64(key + 1)))

    def live_ids(self) -> set[RemoteLogSegmentId]:
        """The segments a cache lists after the events emitted so far (deletions go oldest
        first, so they are a range of segment numbers)."""
        return {self.segment_id(n) for n in range(self._emitted_deletes, self._emitted_adds)}

    def next(self) -> RemoteLogMetadata:
        if not self._pending:
            self._segment()
        event, live_delta = self._pending.popleft()
        self.events += 1
        self.live += live_delta
        if live_delta > 0:
            self._emitted_adds += 1
        elif live_delta < 0:
            self._emitted_deletes += 1
        return event

    def _segment(self) -> None:
        rnd = self._rnd
        i = self._added
        self._added += 1
        start = i * RECORDS_PER_SEGMENT
        end = start + RECORDS_PER_SEGMENT - 1
        epochs = {self._epoch: start}
        if rnd.randrange(EPOCH_CHANGE_EVERY) == 0:
            self._epoch += 1
            epochs[self._epoch] = start + rnd.randrange(1, RECORDS_PER_SEGMENT)
        segment_id = self.segment_id(i)
        ts = 1_700_000_000_000 + i * 60_000
        add = RemoteLogSegmentMetadata(
            segment_id,
            start,
            end,
            ts,
            1,
            ts,
            GIB + rnd.randrange(-GIB // 10, GIB // 10),
            epochs,
            None,
            S.COPY_SEGMENT_STARTED,
            rnd.random() < 0.9,
            broker_leader_epoch=self._epoch,
        )
        custom = CustomMetadata(rnd.randbytes(16)) if rnd.random() < 0.01 else None
        finish = RemoteLogSegmentMetadataUpdate(
            segment_id, ts + 500, custom, S.COPY_SEGMENT_FINISHED, 1, self._epoch
        )
        self._pending.append((add, 1))
        self._pending.append((finish, 0))
        if not self.deletes:
            return
        if self.live_cap:
            expire = self._added - self._oldest - self.live_cap
        else:
            expire = 1 if i % DELETE_EVERY == DELETE_EVERY - 1 else 0
        for _ in range(max(0, expire)):
            oldest = self.segment_id(self._oldest)
            self._oldest += 1
            for state, live_delta in (
                (S.DELETE_SEGMENT_STARTED, 0),
                (S.DELETE_SEGMENT_FINISHED, -1),
            ):
                update = RemoteLogSegmentMetadataUpdate(
                    oldest, ts + 1000, None, state, 1, self._epoch
                )
                self._pending.append((update, live_delta))


def neighbours_of(tip: TopicIdPartition, count: int, partitions: int) -> list[TopicIdPartition]:
    """``count`` other partitions of ``tip``'s topic in the same metadata partition."""
    wanted = metadata_partition(tip, partitions)
    found: list[TopicIdPartition] = []
    candidate = tip.partition
    while len(found) < count:
        candidate += 1
        other = TopicIdPartition(tip.topic_id, tip.topic, candidate)
        if metadata_partition(other, partitions) == wanted:
            found.append(other)
    return found


class Projection:
    """The compacted RLMM's writes of the same history, planned offline.

    A ``ProjectionApplier`` hosting every user partition of the metadata partition plans each
    event (``plan_write`` at level 1: key, value, tombstones) and then applies the records it
    planned, projection record first, then the tombstones, as the RLMM's own consumer would
    before its next write (``tests/_history.py``'s ``Node`` does the same). ``marker`` is the
    one record the bench adds: the DELETE_PARTITION_MARKED marker of a user partition that
    does not exist, in the same metadata partition, always under the same key (compaction keeps
    one), written to roll the active segment so that the cleaner reaches the history's end; a
    reader hosting the bench's partitions skips it."""

    def __init__(self, topic: str, tips: list[TopicIdPartition], partitions: int) -> None:
        self.topic = topic
        self.tips = tips
        self.applier = ProjectionApplier(RemotePartitionMetadataStore())
        for tip in tips:
            self.applier.load(tip)
            self.applier.mark_initialized(tip)
        self.tombstones = 0
        self.seconds = 0.0
        wanted = metadata_partition(tips[0], partitions)
        ghost = next(
            tip
            for tip in (
                TopicIdPartition(Uuid(splitmix64(n) | 1, splitmix64(~n & MASK64)), "ghost", 0)
                for n in range(1, 1_000_000)
            )
            if metadata_partition(tip, partitions) == wanted
        )
        planner = ProjectionApplier(RemotePartitionMetadataStore())
        planner.load(ghost)
        planned = planner.plan_write(
            RemotePartitionDeleteMetadata(
                ghost,
                RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
                1_700_000_000_000,
                1,
                broker_leader_epoch=0,
                end_offset=0,
            ),
            tombstones=True,
        )
        self.marker_key = planned.key.encode()
        self.marker_value = planned.value

    def plan(self, event: RemoteLogMetadata) -> tuple[list[tuple[bytes, bytes | None]], bytes]:
        """The records (key, value; None for a tombstone) that publish ``event`` on the
        projection, and Kafka's legacy bytes of it (the audit value: what the topic RLMM
        writes)."""
        t0 = time.perf_counter()
        applier = self.applier
        planned = applier.plan_write(event, tombstones=True)
        records: list[tuple[bytes, bytes | None]] = [(planned.key.encode(), planned.value)]
        records += [(key.encode(), None) for key in planned.tombstones]
        self.tombstones += len(planned.tombstones)
        for key, value in records:
            applier.apply(applier.decode(key, value))
        self.seconds += time.perf_counter() - t0
        return records, planned.audit_value

    def live_keys(self) -> int:
        """The keys a fully compacted projection holds for the bench's partitions: one record
        each (the marker aside)."""
        return sum(len(self.applier.keys(tip)) for tip in self.tips)


class HistoryWriter:
    """Appends a growing history to one metadata partition with a bulk producer: each event
    in Kafka's legacy bytes (null key) to the legacy topic and, with a ``projection``, the
    records the compacted RLMM writes for it to the projection topic, same partition number
    (both topics have the same partition count and partitioner)."""

    def __init__(
        self,
        servers: str,
        topic: str,
        partition: int,
        target: Lifecycle,
        others: list[Lifecycle],
        others_share: float,
        seed: int,
        projection: Projection | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.target = target
        self.others = others
        self.others_share = others_share if others else 0.0
        self.projection = projection
        self._rnd = random.Random(seed ^ 0x5EED)
        self._turn = 0
        self.records = 0
        self.bytes = 0
        self.seconds = 0.0
        self.projection_records = 0
        self.projection_bytes = 0
        self.markers = 0
        self.last_append = 0.0
        """``time.time()`` after the last flush: every record written is older."""
        self._producer = Producer(
            {
                "bootstrap.servers": servers,
                "acks": "all",
                "enable.idempotence": True,
                "compression.type": "none",
                "linger.ms": 50,
                "batch.size": 1_000_000,
                "queue.buffering.max.messages": 1_000_000,
                "queue.buffering.max.kbytes": 1 << 20,
                "logger": CLIENT_LOG,
            }
        )
        self._failed: list[str] = []

    def _delivered(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self._failed.append(f"{error.name()}: {error.str()}")

    def _produce(self, topic: str, value: bytes | None, key: bytes | None = None) -> None:
        while True:
            try:
                self._producer.produce(
                    topic, value, key, partition=self.partition, on_delivery=self._delivered
                )
                return
            except BufferError:
                self._producer.poll(0.05)

    def _flush(self) -> None:
        remaining = self._producer.flush(120)
        self.last_append = time.time()
        if remaining or self._failed:
            raise RuntimeError(
                f"the history writer lost records: {remaining} undelivered, "
                f"failures {self._failed[:3]}"
            )

    def grow_to(self, records: int) -> float:
        """Write events until the legacy partition holds ``records`` (and the projection the
        same events); the seconds it took."""
        count = records - self.records
        if count <= 0:
            return 0.0
        projection = self.projection
        t0 = time.perf_counter()
        with Progress(f"write {count:,} events", total=count, unit="records") as progress:
            for n in range(count):
                if self.others_share and self._rnd.random() < self.others_share:
                    stream = self.others[self._turn % len(self.others)]
                    self._turn += 1
                else:
                    stream = self.target
                event = stream.next()
                if projection is None:
                    value = serialize(event)
                else:
                    planned, value = projection.plan(event)
                    for key, record in planned:
                        self._produce(projection.topic, record, key)
                        self.projection_bytes += len(key) + (len(record) if record else 0)
                    self.projection_records += len(planned)
                self.bytes += len(value)
                self._produce(self.topic, value)
                if n % 10_000 == 0:
                    self._producer.poll(0)
                    progress.update(n)
            self._flush()
            progress.update(count)
        elapsed = time.perf_counter() - t0
        self.records = records
        self.seconds += elapsed
        return elapsed

    def write_marker(self) -> None:
        """One projection marker (``Projection``), flushed."""
        assert self.projection is not None
        self._produce(
            self.projection.topic, self.projection.marker_value, self.projection.marker_key
        )
        self._flush()
        self.markers += 1

    def live(self) -> int:
        """Live segments of every user partition of the metadata partition."""
        return self.target.live + sum(o.live for o in self.others)

    def close(self) -> None:
        self._producer.flush(30)
        self._producer.close()


# The bare consumer -------------------------------------------------------------------------------
Processor = Callable[[list[Message]], tuple[int, int, int]]
"""Handles a batch of messages; returns (records, value bytes, offset after the batch's last
record or EOF, -1 when none)."""
Step = Callable[[Message, bytes | None], None]
"""A bare reader's work on one record beyond reading it: the message and its value (None for a
tombstone)."""


def reader(step: Step | None = None) -> Processor:
    """The loop of every bare reader: each record of a batch read and its value touched (the
    **bytes**), then ``step`` run on it; a partition EOF says where the partition ends. The
    readers differ only by their ``step``, so their figures differ only by what it costs
    (``read_bytes`` has none, and pays a test of ``None`` per record for it)."""

    def process(batch: list[Message]) -> tuple[int, int, int]:
        records = size = 0
        after = -1
        for message in batch:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    after = max(after, message.offset() or 0)
                continue
            value = message.value()
            if step is not None:
                step(message, value)
            records += 1
            size += len(value) if value is not None else 0
            after = (message.offset() or 0) + 1
        return records, size, after

    return process


def read_bytes() -> Processor:
    """Every value touched, nothing else: the limit."""
    return reader()


def read_decode() -> Processor:
    """Every value decoded from Kafka's legacy bytes (``serde.deserialize``), what the RLMM's
    applier does first."""

    def decode(_message: Message, value: bytes | None) -> None:
        assert value is not None
        deserialize(value)

    return reader(decode)


def read_decode_apply(target: TopicIdPartition) -> Processor:
    """``read_decode``, the target's events then applied to a ``RemotePartitionMetadataStore``
    (the RLMM's work with none of its machinery)."""
    store = RemotePartitionMetadataStore()
    store.maybe_load_partition(target)
    handle = store.handle

    def decode_apply(_message: Message, value: bytes | None) -> None:
        assert value is not None
        metadata = deserialize(value)
        if isinstance(metadata, RemoteLogMetadata) and metadata.topic_id_partition == target:
            handle(metadata)

    return reader(decode_apply)


def read_projection_apply(target: TopicIdPartition) -> Processor:
    """``read_decode_apply`` for the projection: every record decoded by a
    ``ProjectionApplier`` (keys, tagged values, tombstones), the target's applied to its
    store."""
    applier = ProjectionApplier(RemotePartitionMetadataStore())
    applier.load(target)
    decode, apply = applier.decode, applier.apply

    def decode_apply(message: Message, value: bytes | None) -> None:
        event = decode(message.key(), value)
        if event.topic_id_partition == target:
            apply(event)

    return reader(decode_apply)


@dataclass
class Counted:
    """What a read of a projection partition found."""

    records: int = 0
    tombstones: int = 0
    markers: int = 0
    """The bench's marker records (``Projection``)."""


def read_count(marker_key: bytes, counted: Counted) -> Processor:
    """``read_bytes`` that also counts records, tombstones and markers into ``counted``."""

    def count(message: Message, value: bytes | None) -> None:
        counted.records += 1
        if value is None:
            counted.tombstones += 1
        elif message.key() == marker_key:
            counted.markers += 1

    return reader(count)


BARE_OVERRIDES = {"fetch.queue.backoff.ms": "10"}
"""Where the bare reader departs from the RLMM consumer's settings. librdkafka postpones the
next fetch by ``fetch.queue.backoff.ms`` (1000 by default) once ``queued.min.messages``
(100,000) are queued: a reader faster than ~100k records/s stalls (a bare reader of 1M records
spent 4.5 of its 6 s waiting so: 6.0 s against 0.95 s with 10 ms). 0 is worse than 10: the
fetcher then spins while the queue is full (a decoding reader burnt 14 s of CPU instead of 8).
The limit is the bare consumer at its best."""


def consumer_settings(consumer: Mapping[str, str], name: str) -> dict[str, Any]:
    """An RLMM consumer's librdkafka settings (but ``BARE_OVERRIDES``), under another client
    id and group."""
    settings: dict[str, Any] = dict(consumer) | BARE_OVERRIDES
    settings["client.id"] = settings["group.id"] = f"tierlog-bench-{name}"
    settings["logger"] = CLIENT_LOG
    return settings


def bare_read(
    topic: str, consumer_config: Mapping[str, str], partition: int, processor: Processor, name: str
) -> dict[str, Any]:
    """Read ``partition`` of ``topic`` from the beginning to its end offset, with an RLMM's
    consumer settings (``consumer_settings``)."""
    consumer = Consumer(consumer_settings(consumer_config, name))
    try:
        consumer.list_topics(topic, timeout=30)  # connected, leaders known (untimed)
        rss = RssMeter()
        t0, cpu0 = time.perf_counter(), time.process_time()
        _, end = watermarks(consumer, topic, partition)
        consumer.assign([KafkaTopicPartition(topic, partition, OFFSET_BEGINNING)])
        records = size = 0
        position = 0
        while position < end:
            first = consumer.poll(POLL_S)
            if first is None:
                continue
            n, b, after = processor([first, *consumer.consume(BATCH, 0)])
            records += n
            size += b
            position = max(position, after)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        rss.stop()
    finally:
        consumer.close()
    return {
        "seconds": elapsed,
        "cpu_s": cpu,
        "records": records,
        "end_offset": end,
        "value_bytes": size,
        "records_per_s": records / elapsed,
        "mb_per_s": size / elapsed / 1e6,
        "rss_peak_delta": rss.peak_delta,
    }


# The RLMMs ---------------------------------------------------------------------------------------
def rlmm_configs(servers: str, topic: str, log_dir: Path) -> dict[str, str]:
    return {
        f"{COMMON_CLIENT_PREFIX}bootstrap.servers": servers,
        TOPIC_NAME: topic,
        NUM_PARTITIONS: str(METADATA_PARTITIONS),
        REPLICATION_FACTOR: "1",
        MIN_ISR: "1",
        NODE_ID: "1",
        LOG_DIR: str(log_dir),
        INIT_RETRY_MAX_TIMEOUT_MS: "60000",
    }


def compacted_configs(servers: str, topic: str, log_dir: Path) -> dict[str, str]:
    """The compacted RLMM's: the projection topic ``topic`` with the bench's compaction
    settings (``PROJECTION_CONFIGS``, as ``remote.log.metadata.topic.config.*`` overrides, so
    that the RLMM finds the topic as configured), no audit topic (a reader never reads it)."""
    configs = rlmm_configs(servers, topic, log_dir)
    configs |= {TOPIC_CONFIG_PREFIX + name: value for name, value in PROJECTION_CONFIGS.items()}
    configs[AUDIT_ENABLE] = "false"
    return configs


def create_topic(configs: Mapping[str, str]) -> TopicRlmmConfig:
    """Create the metadata topic as the RLMM would (``ensure_topic``), before any RLMM runs."""
    from tierlog_rlmm_topic.topic import ensure_topic

    config = TopicRlmmConfig.from_configs(configs)
    ensure_topic(AdminClient(dict(config.admin)), config)
    return config


def create_projection_topic(configs: Mapping[str, str]) -> CompactedRlmmConfig:
    """Create the projection topic as the compacted RLMM would (``topics.ensure_topics``:
    level 1, its compaction defaults under the bench's overrides), before any RLMM runs."""
    config = CompactedRlmmConfig.from_configs(configs)
    level = ensure_topics(AdminClient(dict(config.base.admin)), config)
    if level != 1:
        raise RuntimeError(f"the projection topic {config.base.topic_name} is at level {level}")
    return config


Listing = list[RemoteLogSegmentMetadata]


def listing_of(rlmm: TopicBasedRemoteLogMetadataManager, tip: TopicIdPartition) -> Listing:
    return sorted(
        rlmm.list_remote_log_segments(tip),
        key=lambda s: (s.start_offset, s.remote_log_segment_id.id.bytes),
    )


def rlmm_ready(
    kind: type[TopicBasedRemoteLogMetadataManager],
    configs: Mapping[str, str],
    tip: TopicIdPartition,
    live: set[RemoteLogSegmentId],
    count: Callable[[], tuple[int, int]] | None = None,
) -> tuple[dict[str, Any], Listing]:
    """A fresh RLMM's time from assignment of ``tip`` to readiness, and what it then lists
    (checked: exactly the ``live`` segments). Records read: every record below the end offset
    read at assignment, which readiness waits for: the end offset itself on a topic that is
    not compacted; on a compacted one, ``count()`` (records, end offset) reads them."""
    rlmm = kind()
    rlmm.configure(configs)
    try:
        time.sleep(SETTLE_S)
        partition = metadata_partition(tip, rlmm.config.num_partitions)
        probe = Consumer(consumer_settings(rlmm.config.consumer, "probe"))
        try:  # what readiness waits for (read outside the clock)
            _, end = watermarks(probe, rlmm.config.topic_name, partition)
        finally:
            probe.close()
        records = end
        if count is not None:
            records, counted_end = count()
            if counted_end != end:
                raise RuntimeError(
                    f"{rlmm.config.topic_name} grew during the bench: end offset {end:,}, "
                    f"then {counted_end:,}"
                )
        rss = RssMeter()
        t0, cpu0 = time.perf_counter(), time.process_time()
        rlmm.on_partition_leadership_changes({tip}, set())
        while not rlmm.is_ready(tip):
            time.sleep(READY_POLL_S)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        rss.stop()
        listing = listing_of(rlmm, tip)
    finally:
        rlmm.close()
    listed = {s.remote_log_segment_id for s in listing}
    if listed != live:
        raise RuntimeError(
            f"{kind.__name__} lists {len(listed):,} segments of {tip}, expected the "
            f"{len(live):,} live ones: {len(listed - live):,} extra, "
            f"{len(live - listed):,} missing"
        )
    return {
        "seconds": elapsed,
        "cpu_s": cpu,
        "records": records,
        "end_offset": end,
        "records_per_s": records / elapsed,
        "segments": len(listing),
        "rss_peak_delta": rss.peak_delta,
        "rss_kept_delta": rss.kept_delta,
    }, listing


def same_listing(legacy: Listing, compacted: Listing) -> None:
    """The compacted RLMM's cache answers as the topic RLMM's, which replayed every event:
    the same segments with every compared field (offsets, epochs, size, timestamps, custom
    metadata, txn-index flag, state)."""
    for a, b in zip(legacy, compacted, strict=False):
        if a != b:
            raise RuntimeError(
                f"the compacted RLMM lists another segment than the topic RLMM:\n  topic RLMM:  "
                f"{a}\n  compacted:   {b}"
            )
    if len(legacy) != len(compacted):
        raise RuntimeError(
            f"the topic RLMM lists {len(legacy):,} segments, the compacted RLMM {len(compacted):,}"
        )


# The topics' size --------------------------------------------------------------------------------
def log_bytes(data_dir: Path, topic: str, partition: int) -> int:
    """The bytes of the partition's ``.log`` files in the broker's log directory (the records;
    the measure of the log cleaner's dirty ratio), retried while the cleaner swaps files."""
    directory = data_dir / f"{topic}-{partition}"
    if not directory.is_dir():
        raise RuntimeError(f"no log directory {directory} for {topic}-{partition}")
    for _ in range(100):
        try:
            return sum(p.stat().st_size for p in directory.glob("*.log"))
        except FileNotFoundError:
            continue  # a cleaned segment replaced another between the listing and the stat
    raise RuntimeError(f"the files of {directory} kept changing")


class Topics:
    """Both topics of the run, where their records are, and how to count them."""

    def __init__(
        self,
        legacy: TopicRlmmConfig,
        projection: CompactedRlmmConfig,
        writer: HistoryWriter,
        data_dir: Path,
    ) -> None:
        self.legacy = legacy
        self.projection = projection
        self.writer = writer
        self.data_dir = data_dir
        assert writer.projection is not None
        self.marker_key = writer.projection.marker_key

    def count_projection(self) -> tuple[Counted, dict[str, Any]]:
        """Read the projection partition to its end: records, tombstones, markers."""
        counted = Counted()
        run = bare_read(
            self.projection.base.topic_name,
            self.projection.consumer,
            self.writer.partition,
            read_count(self.marker_key, counted),
            "count",
        )
        return counted, run

    def count(self) -> tuple[int, int]:
        """(records, end offset) of the projection partition (``rlmm_ready``'s ``count``)."""
        counted, run = self.count_projection()
        return counted.records, int(run["end_offset"])

    def sample(self) -> dict[str, Any]:
        """Both topics' records and bytes now (the projection as the cleaner left it so far)."""
        writer = self.writer
        consumer = Consumer(consumer_settings(self.legacy.consumer, "sizes"))
        try:
            begin, end = watermarks(consumer, self.legacy.topic_name, writer.partition)
        finally:
            consumer.close()
        if end - begin != writer.records:
            raise RuntimeError(f"the legacy partition holds {end - begin:,} of {writer.records:,}")
        counted, run = self.count_projection()
        return {
            "events": writer.records,
            "live_segments": writer.live(),
            "legacy": {
                "records": end - begin,
                "bytes": log_bytes(self.data_dir, self.legacy.topic_name, writer.partition),
            },
            "compacted": {
                "records": counted.records,
                "tombstones": counted.tombstones,
                "markers": counted.markers,
                "end_offset": run["end_offset"],
                "bytes": log_bytes(
                    self.data_dir, self.projection.base.topic_name, writer.partition
                ),
            },
        }

    def wait_cleaned(self, deadline_s: float) -> dict[str, Any]:
        """Roll the projection's active segment and wait for the broker's log cleaner to
        compact it: one record per live key, no tombstone (markers aside).

        Rolls happen on an append once ``segment.ms`` has passed since the active segment's
        first record, so a marker is written whenever that much has passed since the last
        append: the first rolls the history's tail into reach of the cleaner; the cleaner
        keeps the tombstones of that round (it stamps their delete horizon,
        ``delete.retention.ms`` later); a later round removes them, which the next marker
        makes possible (a dirty segment older than ``max.compaction.lag.ms`` makes the log
        eligible whatever its dirty ratio). Until the condition holds or ``deadline_s`` passes,
        with a line of progress every few seconds."""
        writer = self.writer
        assert writer.projection is not None
        expected = writer.projection.live_keys()
        roll_s = int(PROJECTION_CONFIGS["segment.ms"]) / 1000 + ROLL_MARGIN_S
        t0 = time.monotonic()
        said = t0
        markers_before = writer.markers
        polls = 0
        while True:
            if time.time() - writer.last_append >= roll_s:
                writer.write_marker()
            counted, _ = self.count_projection()
            polls += 1
            done = counted.tombstones == 0 and counted.records - counted.markers == expected
            waited = time.monotonic() - t0
            if done or waited > deadline_s:
                break
            if time.monotonic() - said >= PROGRESS_EVERY_S:
                said = time.monotonic()
                log(
                    f"  cleaning: {counted.records:,} records ({counted.tombstones:,} tombstones, "
                    f"{counted.markers} markers) for {expected:,} live keys, {waited:.0f} s"
                )
            time.sleep(CLEAN_POLL_S)
        if not done:
            log(
                f"  the cleaner did not finish within {deadline_s:.0f} s: {counted.records:,} "
                f"records, {counted.tombstones:,} tombstones for {expected:,} live keys"
            )
        sample = self.sample()
        return sample | {
            "cleaned": done,
            "wait_s": waited,
            "polls": polls,
            "expected_keys": expected,
            "markers_written": writer.markers - markers_before,
        }


# Bootstrap ---------------------------------------------------------------------------------------
KINDS = ("bytes", "decode", "apply", "rlmm", "compacted_bytes", "compacted_apply", "compacted")
LEGACY_BARE = ("bytes", "decode", "apply")


def measure_size(
    config: TopicRlmmConfig,
    configs: Mapping[str, str],
    compacted: Mapping[str, str],
    topics: Topics,
    repeat: int,
) -> dict[str, Any]:
    writer = topics.writer
    target = writer.target.tip
    partition = writer.partition
    live = writer.target.live_ids()
    legacy_readers: dict[str, Callable[[], Processor]] = {
        "bytes": read_bytes,
        "decode": read_decode,
        "apply": lambda: read_decode_apply(target),
    }
    # Both RLMMs are measured alike: they differ by class, configuration, and how the records
    # below the end offset are counted (a compacted topic has offset gaps).
    managers = {
        "rlmm": partial(rlmm_ready, TopicBasedRemoteLogMetadataManager, configs),
        "compacted": partial(
            rlmm_ready, CompactedRemoteLogMetadataManager, compacted, count=topics.count
        ),
    }
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    # Untimed: the first reader of new records would pay for what the broker does once.
    bare_read(config.topic_name, config.consumer, partition, read_bytes(), "warmup")
    topics.count_projection()
    listings: dict[str, Listing] = {}
    for r in range(repeat):
        for kind in KINDS:
            log(f"  pass {r + 1}/{repeat}: {kind} ...")
            if kind in managers:
                run, listings[kind] = managers[kind](target, live)
                if kind != "rlmm":  # the topic RLMM replayed every event: the reference
                    same_listing(listings["rlmm"], listings[kind])
            elif kind == "compacted_bytes":
                _, run = topics.count_projection()
            elif kind == "compacted_apply":
                run = bare_read(
                    topics.projection.base.topic_name,
                    topics.projection.consumer,
                    partition,
                    read_projection_apply(target),
                    kind,
                )
            else:
                processor = legacy_readers[kind]()
                run = bare_read(config.topic_name, config.consumer, partition, processor, kind)
                if run["records"] != writer.records:
                    raise RuntimeError(f"{kind}: read {run['records']:,} of {writer.records:,}")
            log(f"    {run['records']:,} records in {run['seconds']:.3f} s")
            runs[kind].append(run)
    best = {kind: min(found, key=lambda run: float(run["seconds"])) for kind, found in runs.items()}

    def passes(kind: str) -> dict[str, Any]:
        """The best pass of ``kind``, with the seconds of every pass."""
        return best[kind] | {"runs_s": [run["seconds"] for run in runs[kind]]}

    def largest(kind: str, field: str) -> int | None:
        values = [run[field] for run in runs[kind] if run[field] is not None]
        return max(values) if values else None

    def manager_passes(kind: str) -> dict[str, Any]:
        """``passes`` of an RLMM, with the largest RSS growth of its passes."""
        return passes(kind) | {
            "rss_peak_delta_max": largest(kind, "rss_peak_delta"),
            "rss_kept_delta_max": largest(kind, "rss_kept_delta"),
        }

    rate = {kind: float(best[kind]["records_per_s"]) for kind in KINDS}
    # CPU time of this process per record read (every thread, librdkafka's included), the
    # least of the passes: less sensitive than the wall clock to other work on the machine.
    cpu = {kind: min(float(run["cpu_s"]) for run in runs[kind]) for kind in KINDS}
    cpu_us = {kind: cpu[kind] / max(1, int(best[kind]["records"])) * 1e6 for kind in KINDS}
    live_all = writer.live()
    read = int(best["compacted"]["records"])
    return {
        "events": writer.records,
        "target_events": writer.target.events,
        "other_events": sum(o.events for o in writer.others),
        "target_live_segments": writer.target.live,
        "live_segments": live_all,
        "value_bytes": writer.bytes,
        "write_s": writer.seconds,
        "projection_plan_s": writer.projection.seconds if writer.projection else None,
        "projection_records_written": writer.projection_records,
        "projection_tombstones_written": (
            writer.projection.tombstones if writer.projection else None
        ),
        "bare": {kind: passes(kind) for kind in LEGACY_BARE},
        "rlmm": manager_passes("rlmm"),
        "compacted": manager_passes("compacted")
        | {
            "records_per_live_segment": read / max(1, live_all),
            "records_per_target_live_segment": read / max(1, writer.target.live),
            "bare": passes("compacted_bytes"),
            "bare_apply": passes("compacted_apply"),
        },
        "ratio": {
            "vs_bytes": rate["rlmm"] / rate["bytes"],
            "vs_decode": rate["rlmm"] / rate["decode"],
            "vs_apply": rate["rlmm"] / rate["apply"],
            "cpu_vs_bytes": cpu["bytes"] / cpu["rlmm"],
            "legacy_vs_compacted": float(best["rlmm"]["seconds"])
            / float(best["compacted"]["seconds"]),
            "legacy_vs_compacted_cpu": cpu["rlmm"] / cpu["compacted"],
            "records_legacy_vs_compacted": int(best["rlmm"]["records"]) / max(1, read),
        },
        "cpu_us_per_record": cpu_us,
    }


# Latency -----------------------------------------------------------------------------------------
def latency(servers: str, workdir: Path, calls: int, seed: int) -> dict[str, Any]:
    """p50/p99 of the RLMM's add and update until applied, against bare round trips."""
    topic = f"tierlog-bench-rlmm-latency-{uuid.uuid4().hex[:12]}"
    configs = rlmm_configs(servers, topic, workdir / "latency")
    rlmm = TopicBasedRemoteLogMetadataManager()
    rlmm.configure(configs)
    config = rlmm.config
    rnd = random.Random(seed)
    topic_id = Uuid(rnd.getrandbits(63) | 1, rnd.getrandbits(64))
    tip = TopicIdPartition(topic_id, "latency", 0)
    rlmm_partition = metadata_partition(tip, config.num_partitions)
    # The bare round trips go to another metadata partition: the RLMM never reads them.
    bare_tip = next(
        TopicIdPartition(topic_id, "latency", p)
        for p in range(1, 10_000)
        if metadata_partition(TopicIdPartition(topic_id, "latency", p), config.num_partitions)
        != rlmm_partition
    )
    bare_partition = metadata_partition(bare_tip, config.num_partitions)
    # add + update pairs only: each call of the loop is one of each.
    rlmm_stream = Lifecycle(tip, seed, deletes=False)
    bare_stream = Lifecycle(bare_tip, seed + 1, deletes=False)
    producer_settings: dict[str, Any] = dict(config.producer)
    producer_settings["client.id"] = "tierlog-bench-roundtrip"
    producer_settings["logger"] = CLIENT_LOG
    producer = Producer(producer_settings)
    consumer = Consumer(consumer_settings(config.consumer, "roundtrip"))
    delivered: list[int] = []

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            raise RuntimeError(f"bare produce failed: {error.str()}")
        delivered.append(message.offset() or 0)

    def round_trip() -> float:
        value = serialize(bare_stream.next())
        t0 = time.perf_counter()
        delivered.clear()
        producer.produce(topic, value, partition=bare_partition, on_delivery=on_delivery)
        while not delivered:
            producer.poll(CALL_TIMEOUT_S)
        offset = delivered[0]
        while True:
            message = consumer.poll(CALL_TIMEOUT_S)
            if message is None:
                raise RuntimeError("the bare consumer did not see its record")
            if message.error() is None and message.offset() == offset:
                return time.perf_counter() - t0

    def rlmm_calls() -> tuple[float, float]:
        add = rlmm_stream.next()
        finish = rlmm_stream.next()
        assert isinstance(add, RemoteLogSegmentMetadata)
        assert isinstance(finish, RemoteLogSegmentMetadataUpdate)
        t0 = time.perf_counter()
        rlmm.add_remote_log_segment_metadata(add).result(CALL_TIMEOUT_S)
        t1 = time.perf_counter()
        rlmm.update_remote_log_segment_metadata(finish).result(CALL_TIMEOUT_S)
        return t1 - t0, time.perf_counter() - t1

    try:
        rlmm.on_partition_leadership_changes({tip}, set())
        deadline = time.monotonic() + 60
        while not rlmm.is_ready(tip):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the latency RLMM did not become ready for {tip}")
            time.sleep(0.01)
        consumer.list_topics(topic, timeout=30)
        _, end = watermarks(consumer, topic, bare_partition)
        consumer.assign([KafkaTopicPartition(topic, bare_partition, end)])
        warmup = max(5, calls // 50)
        for _ in range(warmup):
            round_trip()
            rlmm_calls()
        adds: list[float] = []
        updates: list[float] = []
        trips: list[float] = []
        with Progress(f"{calls:,} add+update calls", total=calls, unit="calls") as progress:
            for n in range(calls):
                trips.append(round_trip())
                add_s, update_s = rlmm_calls()
                adds.append(add_s)
                updates.append(update_s)
                trips.append(round_trip())
                if n % 10 == 0:
                    progress.update(n)
            progress.update(calls)
    finally:
        rlmm.close()
        consumer.close()
        producer.flush(10)
        producer.close()

    def summary(values: list[float]) -> dict[str, float]:
        ordered = sorted(v * 1000 for v in values)
        return {
            "p50": percentile(ordered, 0.50),
            "p99": percentile(ordered, 0.99),
            "max": ordered[-1],
            "mean": sum(ordered) / len(ordered),
        }

    rlmm_call = summary(adds + updates)
    bare = summary(trips)
    return {
        "calls": calls,
        "warmup": warmup,
        "unit": "ms",
        "linger_ms": config.producer.get("linger.ms", "librdkafka default"),
        "rlmm": {"add": summary(adds), "update": summary(updates), "call": rlmm_call},
        "bare": {"round_trip": bare, "round_trips": len(trips)},
        "ratio": {
            "p50": rlmm_call["p50"] / bare["p50"],
            "p99": rlmm_call["p99"] / bare["p99"],
        },
    }


# Report ------------------------------------------------------------------------------------------
def mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 2**20:,.0f} MiB"


def kib(value: int) -> str:
    return f"{value / 1024:,.0f} KiB"


def print_compacted(results: dict[str, Any], *, quick: bool) -> None:
    """Both curves (the topic RLMM and the compacted RLMM over the same events), their ratio
    and the topics' size as the history grew."""
    print()
    print(
        f"Compacted RLMM (KAFKA-20033) vs the topic RLMM, the same events (at most "
        f"{results['live']:,} live segments per user partition, --live), each until ready for "
        f"the target; the projection fully compacted by the broker's log cleaner "
        f"({', '.join(f'{k}={v}' for k, v in results['projection_configs'].items())})"
    )
    print(
        f"{'events':>10} {'live':>6} {'topic RLMM: records':>20} {'ready':>8} "
        f"{'compacted: records':>19} {'/live':>6} {'ready':>8} {'speedup':>8}  verdicts "
        f"(records/live <= {GOAL_RECORDS_PER_LIVE}; speedup >= {GOAL_SPEEDUP}x at the largest)"
    )
    largest = results["sizes"][-1]["events"] if results["sizes"] else None
    for size in results["sizes"]:
        legacy, compacted = size["rlmm"], size["compacted"]
        per_live = compacted["records_per_live_segment"]
        speedup = size["ratio"]["legacy_vs_compacted"]
        verdicts = verdict(per_live, GOAL_RECORDS_PER_LIVE, at_most=True, quick=quick)
        if size["events"] == largest:
            verdicts += ", " + verdict(speedup, GOAL_SPEEDUP, quick=quick)
        print(
            f"{size['events']:>10,} {size['live_segments']:>6,} {legacy['records']:>20,} "
            f"{legacy['seconds']:>7.3f}s {compacted['records']:>19,} {per_live:>6.2f} "
            f"{compacted['seconds']:>7.3f}s {speedup:>7.1f}x  {verdicts}"
        )
    print(
        "  live = live segments of every user partition of the metadata partition (the "
        "target's and its neighbours'); records = records of the metadata partition read to "
        "become ready; /live = compacted records per live segment; speedup = topic RLMM "
        f"seconds over compacted RLMM seconds; best of {results['repeat']} passes each"
    )
    for size in results["sizes"]:
        c, t = size["compacted"], size["topics"]
        print(
            f"  {size['events']:>10,} events: projection bare read {c['bare']['seconds']:.3f} s, "
            f"+ decode and apply {c['bare_apply']['seconds']:.3f} s; "
            f"RLMM CPU {size['ratio']['legacy_vs_compacted_cpu']:.1f}x less; cleaner "
            f"{'done' if t['cleaned'] else 'NOT done'} in {t['wait_s']:.1f} s "
            f"({t['markers_written']} markers); writing the projection "
            f"({size['projection_records_written']:,} records, "
            f"{size['projection_tombstones_written']:,} tombstones) planned in "
            f"{size['projection_plan_s']:.1f} s of the {size['write_s']:.1f} s"
        )
    print()
    print(
        f"Topic size as the history grows (metadata partition {results['metadata_partition']}; "
        "records, and bytes of the .log files; * = after the cleaner finished)"
    )
    print(
        f"{'events':>10} {'live':>6} {'legacy records':>15} {'bytes':>11} "
        f"{'compacted records':>18} {'tombstones':>11} {'bytes':>11} {'legacy/compacted':>17}"
    )
    rows = [(s, "") for s in results["topic_sizes"]]
    rows += [(size["topics"], "*") for size in results["sizes"]]
    rows.sort(key=lambda row: (row[0]["events"], row[1]))
    for sample, mark in rows:
        legacy, compacted = sample["legacy"], sample["compacted"]
        print(
            f"{sample['events']:>10,} {sample['live_segments']:>6,} {legacy['records']:>15,} "
            f"{kib(legacy['bytes']):>11} {compacted['records']:>17,}{mark:1} "
            f"{compacted['tombstones']:>11,} {kib(compacted['bytes']):>11} "
            f"{legacy['records'] / max(1, compacted['records']):>16.1f}x"
        )


def print_table(results: dict[str, Any], *, quick: bool) -> None:
    print()
    print(
        f"Topic RLMM bootstrap on Apache Kafka {results['kafka_version']} (one broker, "
        f"{results['cpus']} CPUs): time to become ready for one user partition "
        f"({results['neighbours']} neighbours share its metadata partition, "
        f"{results['others_share']:.0%} of the records)"
    )
    header = (
        f"{'events':>10} {'bare bytes':>17} {'+decode':>17} {'+apply':>17} "
        f"{'RLMM ready':>17} {'ratio':>6}  verdict (goal >= {GOAL_RATIO})"
    )
    print(header)
    for size in results["sizes"]:
        cells = []
        for found in (
            size["bare"]["bytes"],
            size["bare"]["decode"],
            size["bare"]["apply"],
            size["rlmm"],
        ):
            cells.append(f"{found['seconds']:7.2f}s {found['records_per_s'] / 1e3:6.0f}k/s")
        ratio = size["ratio"]["vs_bytes"]
        print(
            f"{size['events']:>10,} "
            + " ".join(f"{c:>17}" for c in cells)
            + f" {ratio:6.2f}  {verdict(ratio, GOAL_RATIO, quick=quick)}"
        )
    for skipped in results["skipped"]:
        print(f"{skipped['events']:>10,} skipped: {skipped['reason']}")
    print(
        "  bare bytes = a bare confluent-kafka consumer reading the metadata partition to its end "
        "(the limit); +decode = also serde.deserialize of every value; +apply = also applying "
        "the target's events to a RemotePartitionMetadataStore in that loop; ratio = RLMM "
        "records/s over bare bytes records/s; best of "
        f"{results['repeat']} passes each"
    )
    for size in results["sizes"]:
        r = size["rlmm"]
        print(
            f"  {size['events']:>10,} events: RLMM vs +decode {size['ratio']['vs_decode']:.2f}, "
            f"vs +apply {size['ratio']['vs_apply']:.2f}; by CPU time vs bare bytes "
            f"{size['ratio']['cpu_vs_bytes']:.2f} (CPU us/record: "
            + ", ".join(f"{k} {v:.1f}" for k, v in size["cpu_us_per_record"].items())
            + f"); {r['segments']:,} segments cached; "
            f"RSS peak +{mib(r['rss_peak_delta_max'])}, kept +{mib(r['rss_kept_delta_max'])} "
            f"(bare bytes peak +{mib(size['bare']['bytes']['rss_peak_delta'])}); "
            f"write {size['write_s']:.1f} s in all"
        )
    print_compacted(results, quick=quick)
    lat = results["latency"]
    rc, bt = lat["rlmm"]["call"], lat["bare"]["round_trip"]
    print()
    print(
        f"mutating calls ({lat['calls']:,} add + {lat['calls']:,} update, each until applied): "
        f"p50 {rc['p50']:.2f} ms, p99 {rc['p99']:.2f} ms (add p50 "
        f"{lat['rlmm']['add']['p50']:.2f}/p99 {lat['rlmm']['add']['p99']:.2f}, update p50 "
        f"{lat['rlmm']['update']['p50']:.2f}/p99 {lat['rlmm']['update']['p99']:.2f}); "
        f"bare produce + consume round trip: p50 {bt['p50']:.2f} ms, p99 {bt['p99']:.2f} ms "
        f"(RLMM/bare: p50 {lat['ratio']['p50']:.2f}x, p99 {lat['ratio']['p99']:.2f}x)"
    )
    load = ", ".join(
        f"{a:.1f}" for a in (*results["load_average_start"], *results["load_average_end"])
    )
    print(
        f"total run {results['total_seconds']:.0f} s (broker start "
        f"{results['broker_start_s']:.1f} s); load average (1, 5, 15 min) at start and end: {load}"
    )


def chart(results: dict[str, Any], path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    sizes = results["sizes"]
    events = [s["events"] for s in sizes]
    fig, rows = plt.subplots(2, 3, figsize=(16, 9.6))
    axes = rows[0]
    series: tuple[tuple[str, Callable[[dict[str, Any]], dict[str, Any]], str, str], ...] = (
        ("bare consumer: bytes (the limit)", lambda s: s["bare"]["bytes"], "C0", "-"),
        ("bare + decode", lambda s: s["bare"]["decode"], "C9", "--"),
        ("bare + decode + apply", lambda s: s["bare"]["apply"], "C7", ":"),
        ("RLMM until ready", lambda s: s["rlmm"], "C1", "-"),
    )
    ax = axes[0]
    for label, pick, color, style in series:
        ax.plot(events, [pick(s)["seconds"] for s in sizes], marker="o", color=color,
                linestyle=style, label=label)  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("records in the metadata partition")
    ax.set_ylabel("seconds")
    ax.set_title("time to read the history / become ready")
    ax.legend(fontsize=8)
    ax = axes[1]
    for label, pick, color, style in series:
        ax.plot(events, [pick(s)["records_per_s"] / 1e3 for s in sizes], marker="o", color=color,
                linestyle=style, label=label)  # fmt: skip
    ax.plot(events, [GOAL_RATIO * s["bare"]["bytes"]["records_per_s"] / 1e3 for s in sizes],
            color="C2", linestyle="--", label=f"goal: {GOAL_RATIO} x the limit")  # fmt: skip
    for s in sizes:
        where = (s["events"], s["rlmm"]["records_per_s"] / 1e3)
        ax.annotate(f"{s['ratio']['vs_bytes']:.2f}", where, textcoords="offset points",
                    xytext=(0, 6), ha="center", fontsize=8, color="C1")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("records in the metadata partition")
    ax.set_ylabel("thousand records/s")
    ax.set_title("replay throughput (RLMM/limit annotated)")
    ax.legend(fontsize=8)
    ax = axes[2]
    lat = results["latency"]
    labels = ["RLMM add", "RLMM update", "bare produce\n+ consume"]
    found = [lat["rlmm"]["add"], lat["rlmm"]["update"], lat["bare"]["round_trip"]]
    x = range(len(labels))
    w = 0.38
    ax.bar([i - w / 2 for i in x], [f["p50"] for f in found], w, label="p50", color="C0")
    ax.bar([i + w / 2 for i in x], [f["p99"] for f in found], w, label="p99", color="C3")
    for i, f in enumerate(found):
        ax.text(i - w / 2, f["p50"], f"{f['p50']:.1f}", ha="center", va="bottom", fontsize=8)
        ax.text(i + w / 2, f["p99"], f"{f['p99']:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(x), labels)
    ax.set_ylabel("ms")
    ax.set_title(f"mutating call until applied ({lat['calls']:,} each)")
    ax.legend(fontsize=8)
    compacted_panels(results, rows[1])
    return save_chart(fig, path, results, dpi=110)


def compacted_panels(results: dict[str, Any], axes: Any) -> None:
    """The chart's second row: bootstrap time of both RLMMs, then the topics' records and
    bytes, against the history's size."""
    sizes = results["sizes"]
    events = [s["events"] for s in sizes]
    ax = axes[0]
    ax.plot(events, [s["rlmm"]["seconds"] for s in sizes], marker="o", color="C1",
            label="topic RLMM (every event)")  # fmt: skip
    ax.plot(events, [s["compacted"]["seconds"] for s in sizes], marker="o", color="C2",
            label="compacted RLMM (compacted projection)")  # fmt: skip
    ax.plot(events, [s["compacted"]["bare"]["seconds"] for s in sizes], marker=".", color="C0",
            linestyle=":", label="bare consumer reading the projection")  # fmt: skip
    ax.plot(events, [s["compacted"]["bare_apply"]["seconds"] for s in sizes], marker=".",
            color="C7", linestyle=":", label="... + ProjectionApplier decode, apply")  # fmt: skip
    for s in sizes:
        speedup = s["ratio"]["legacy_vs_compacted"]
        ax.annotate(f"{speedup:.0f}x" if speedup >= 10 else f"{speedup:.1f}x",
                    (s["events"], s["compacted"]["seconds"]), textcoords="offset points",
                    xytext=(0, -12), ha="center", fontsize=8, color="C2")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("events in the metadata partition (history)")
    ax.set_ylabel("seconds")
    ax.set_title(f"bootstrap until ready ({results['live']:,} live/partition; speedup annotated)")
    ax.legend(fontsize=8)
    samples = sorted(results["topic_sizes"], key=lambda s: s["events"])
    history = [s["events"] for s in samples]
    cleaned = [s["topics"] for s in sizes]
    for ax, what, unit, scale in (
        (axes[1], "records", "records", 1.0),
        (axes[2], "bytes", "MiB (.log files)", 2.0**-20),
    ):
        ax.plot(history, [s["legacy"][what] * scale for s in samples], marker=".", color="C1",
                label="legacy topic (null keys)")  # fmt: skip
        ax.plot(history, [s["compacted"][what] * scale for s in samples], marker=".",
                color="C2", linestyle="--", label="projection, as the cleaner left it")  # fmt: skip
        ax.plot(events, [c["compacted"][what] * scale for c in cleaned], marker="o", color="C2",
                linestyle="none", label="projection, compacted (bootstrap)")  # fmt: skip
        if what == "records":
            ax.plot(history, [s["live_segments"] for s in samples], color="C7", linestyle=":",
                    label="live segments")  # fmt: skip
            ax.plot(history, [GOAL_RECORDS_PER_LIVE * s["live_segments"] for s in samples],
                    color="C3", linestyle=":",
                    label=f"goal: {GOAL_RECORDS_PER_LIVE} x live segments")  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("events in the metadata partition (history)")
        ax.set_ylabel(unit)
        ax.set_title(f"topic {what} as the history grows")
        ax.legend(fontsize=8)


# Main --------------------------------------------------------------------------------------------
def parse_sizes(text: str) -> list[int]:
    sizes = sorted({int(s.replace("_", "")) for s in text.split(",") if s.strip()})
    if not sizes or sizes[0] <= 0:
        raise argparse.ArgumentTypeError(f"sizes must be positive integers, got {text!r}")
    return sizes


def sample_points(sizes: list[int]) -> list[int]:
    """Where the topics' size is sampled: the 1-2-5 series from a tenth of the first size
    (at least 1,000) up to the last size, and the sizes themselves."""
    low = max(1000, sizes[0] // 10)
    points = set(sizes)
    decade = 1
    while decade <= sizes[-1]:
        points.update(p for p in (decade, 2 * decade, 5 * decade) if low <= p <= sizes[-1])
        decade *= 10
    return sorted(points)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        default=parse_sizes(DEFAULT_SIZES),
        help=f"records in the metadata partition at each measurement (default {DEFAULT_SIZES})",
    )
    parser.add_argument(
        "--neighbours", type=int, default=3, help="other user partitions sharing it"
    )
    parser.add_argument(
        "--others-share", type=float, default=0.2, help="share of the records that are theirs"
    )
    parser.add_argument(
        "--live",
        type=int,
        default=DEFAULT_LIVE,
        help=f"live segments per user partition (default {DEFAULT_LIVE}): the oldest is "
        f"deleted whenever there are more; 0: the oldest after every {DELETE_EVERY}th segment "
        "(the first baseline's history, whose live segments grow with it)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="passes of each reader (best kept)")
    parser.add_argument("--calls", type=int, default=1000, help="add + update calls timed")
    parser.add_argument(
        "--max-write-s",
        type=float,
        default=1800.0,
        help="skip a size whose write is projected to take longer (seconds)",
    )
    parser.add_argument(
        "--clean-deadline-s",
        type=float,
        default=CLEAN_DEADLINE_S,
        help="longest wait for the log cleaner to compact the projection at a size (seconds)",
    )
    args, out = parse_args(
        parser, {"sizes": [1000, 3000], "calls": 30, "repeat": 1, "live": 50}, argv
    )
    if args.live < 0:
        parser.error(f"--live must be >= 0, got {args.live}")
    workdir = Path(tempfile.mkdtemp(prefix="tierlog-rlmm-bench-", dir=args.dir))
    started = time.perf_counter()
    results: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "kafka_version": kafka_service.KAFKA_VERSION,
        "goal_ratio": GOAL_RATIO,
        "goal_speedup": GOAL_SPEEDUP,
        "goal_records_per_live_segment": GOAL_RECORDS_PER_LIVE,
        "metadata_partitions": METADATA_PARTITIONS,
        "neighbours": args.neighbours,
        "others_share": args.others_share if args.neighbours else 0.0,
        "live": args.live,
        "projection_configs": PROJECTION_CONFIGS,
        "repeat": args.repeat,
        "requested_sizes": args.sizes,
        # Other work on the machine slows every reader alike; said beside the figures.
        "load_average_start": os.getloadavg(),
        "sizes": [],
        "topic_sizes": [],
        "skipped": [],
    }
    service = None
    writer: HistoryWriter | None = None
    try:
        log("starting Apache Kafka ...")
        t0 = time.perf_counter()
        kafka_dir = workdir / "kafka"
        service = kafka_service.start_kafka(kafka_dir)
        results["broker_start_s"] = time.perf_counter() - t0
        servers = service.url
        log(f"  broker at {servers} in {results['broker_start_s']:.1f} s")
        run_id = uuid.uuid4().hex[:12]
        topic = f"tierlog-bench-rlmm-{run_id}"
        configs = rlmm_configs(servers, topic, workdir / "rlmm")
        config = create_topic(configs)
        compacted = compacted_configs(servers, f"tierlog-bench-rlmm-compacted-{run_id}",
                                      workdir / "rlmm-compacted")  # fmt: skip
        projection_config = create_projection_topic(compacted)
        rnd = random.Random(args.seed)
        target_tip = TopicIdPartition(
            Uuid(rnd.getrandbits(63) | 1, rnd.getrandbits(64)), "bench", 0
        )
        partition = metadata_partition(target_tip, config.num_partitions)
        neighbours = neighbours_of(target_tip, args.neighbours, config.num_partitions)
        others = [
            Lifecycle(tip, args.seed + 1 + i, live=args.live) for i, tip in enumerate(neighbours)
        ]
        projection = Projection(
            projection_config.base.topic_name, [target_tip, *neighbours], config.num_partitions
        )
        writer = HistoryWriter(
            servers, topic, partition, Lifecycle(target_tip, args.seed, live=args.live), others,
            args.others_share, args.seed, projection,
        )  # fmt: skip
        topics = Topics(config, projection_config, writer, kafka_dir / "data")
        results["topic"] = topic
        results["projection_topic"] = projection_config.base.topic_name
        results["metadata_partition"] = partition
        log("latency of mutating calls ...")
        results["latency"] = latency(servers, workdir, args.calls, args.seed)
        for point in sample_points(args.sizes):
            size = next(s for s in args.sizes if s >= point)
            if writer.records and writer.seconds:
                projected = (size - writer.records) * writer.seconds / writer.records
                if projected > args.max_write_s:
                    reason = (
                        f"writing {size - writer.records:,} more events was projected to take "
                        f"{projected:.0f} s on this machine "
                        f"(> --max-write-s {args.max_write_s:.0f})"
                    )
                    log(f"skipping {size:,} and larger: {reason}")
                    results["skipped"] = [
                        {"events": s, "reason": reason} for s in args.sizes if s >= size
                    ]
                    break
            log(f"{point:,} events: writing the history ...")
            write_s = writer.grow_to(point)
            log(f"  {point:,} records in the metadata partition ({write_s:.1f} s for this step)")
            results["topic_sizes"].append(topics.sample())
            if point != size:
                continue
            log(f"size {size:,}: waiting for the log cleaner to compact the projection ...")
            cleaned = topics.wait_cleaned(args.clean_deadline_s)
            measured = measure_size(config, configs, compacted, topics, args.repeat)
            results["sizes"].append(measured | {"topics": cleaned})
    finally:
        if writer is not None:
            writer.close()
        if service is not None:
            service.stop()
        drop_workdir(args, workdir)
    largest = results["sizes"][-1]
    results["largest"] = {
        "events": largest["events"],
        "ready_s": largest["rlmm"]["seconds"],
        "records_per_s": largest["rlmm"]["records_per_s"],
        "bare_records_per_s": largest["bare"]["bytes"]["records_per_s"],
        "ratio": largest["ratio"]["vs_bytes"],
    }
    results["compacted_largest"] = {
        "events": largest["events"],
        "live_segments": largest["live_segments"],
        "legacy_ready_s": largest["rlmm"]["seconds"],
        "compacted_ready_s": largest["compacted"]["seconds"],
        "speedup": largest["ratio"]["legacy_vs_compacted"],
        "legacy_records": largest["rlmm"]["records"],
        "compacted_records": largest["compacted"]["records"],
        "records_per_live_segment": largest["compacted"]["records_per_live_segment"],
        "cleaned": largest["topics"]["cleaned"],
        "legacy_bytes": largest["topics"]["legacy"]["bytes"],
        "compacted_bytes": largest["topics"]["compacted"]["bytes"],
    }
    results["total_seconds"] = time.perf_counter() - started
    results["load_average_end"] = os.getloadavg()
    print_table(results, quick=args.quick)
    write_results(out, "rlmm_bootstrap", results, chart, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
