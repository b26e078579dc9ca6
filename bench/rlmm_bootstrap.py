"""Benchmark of the topic RLMM (``plugins/rlmm_topic``): bootstrap time and mutating-call latency.

Run: ``.venv/bin/python bench/rlmm_bootstrap.py [--sizes 10000,100000,1000000] [--calls 1000]``
(``--quick``: sizes 1,000 and 3,000 events, 30 calls, one pass: a smoke run whose figures mean
nothing, written to ``--out`` or a temporary directory). Needs Java 17 and Kafka's jars (Maven
the first time): the bench starts a real Apache Kafka 4.3.1 broker (``scripts/services/kafka.py``)
in a temporary directory and stops it at the end. These figures are the baseline the compacted
RLMM will have to beat.

The history. One metadata topic per run (``remote.log.metadata.topic.name``, tierlog's
extension, so nothing is shared with other runs), with Kafka's 50 partitions, one replica.
One user partition (the *target*) and ``--neighbours`` other user partitions of the same topic
that Kafka's partitioner puts in the **same metadata partition** share its history: a share
``--others-share`` (default 0.2) of the records belong to the neighbours, which the RLMM must
read, decode and skip, as on a real cluster where ~(partitions / 50) user partitions share each
metadata partition. Each user partition's events are a leader's lifecycle: per segment a
COPY_SEGMENT_STARTED add and a COPY_SEGMENT_FINISHED update, every 100th segment also the
deletion of the oldest (DELETE_SEGMENT_STARTED, DELETE_SEGMENT_FINISHED: ~2% of the events, as
``bench/metadata_cache.py``), a leader-epoch change now and then, custom metadata on 1%. They
are serialized with ``tierlog.metadata.serialize`` (Kafka's bytes) and written with a bare,
batching confluent-kafka producer at the metadata partition Kafka's partitioner gives
(``tierlog.metadata.metadata_partition``), null keys, no compression (TBRLMM's producer
compresses nothing), which is how a broker's topic looks. The history is written once and
grows: the sizes are checkpoints (``--sizes``: records in the metadata partition, the target's
and the neighbours' together), each measured before the next records are written. A size whose
write is projected to take longer than ``--max-write-s`` (300 s) on this machine is skipped with
the larger ones, and the output says so. On the project's 2-core machines none is: the
million-event history is written in 10-15 s and a full run takes 4-5 minutes (most of it the
three passes of each reader over a million records); ``--quick`` takes ~10 s, broker included.

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

Writes ``bench/results/rlmm_bootstrap.json`` (or ``--out``) and, if matplotlib is importable,
``rlmm_bootstrap.png`` beside it.
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
from pathlib import Path
from typing import Any

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
    """The lifecycle events of one user partition, serialized, in the order its leader writes
    them; deterministic for a seed. Counts the segments a cache holds after the events
    emitted so far (added, not yet DELETE_SEGMENT_FINISHED)."""

    def __init__(self, tip: TopicIdPartition, seed: int, *, deletes: bool = True) -> None:
        self.tip = tip
        self.seed = seed
        self.deletes = deletes
        self._rnd = random.Random(seed)
        self._pending: deque[tuple[bytes, int]] = deque()
        self._added = 0
        self._oldest = 0
        self._epoch = 0
        self.events = 0
        self.live = 0

    def segment_id(self, n: int) -> RemoteLogSegmentId:
        key = (self.seed << 40) + 2 * n
        return RemoteLogSegmentId(self.tip, Uuid(splitmix64(key), splitmix64(key + 1)))

    def next(self) -> bytes:
        if not self._pending:
            self._segment()
        value, live_delta = self._pending.popleft()
        self.events += 1
        self.live += live_delta
        return value

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
        )
        custom = CustomMetadata(rnd.randbytes(16)) if rnd.random() < 0.01 else None
        finish = RemoteLogSegmentMetadataUpdate(
            segment_id, ts + 500, custom, S.COPY_SEGMENT_FINISHED, 1
        )
        self._pending.append((serialize(add), 1))
        self._pending.append((serialize(finish), 0))
        if self.deletes and i % DELETE_EVERY == DELETE_EVERY - 1:
            oldest = self.segment_id(self._oldest)
            self._oldest += 1
            for state, live_delta in (
                (S.DELETE_SEGMENT_STARTED, 0),
                (S.DELETE_SEGMENT_FINISHED, -1),
            ):
                update = RemoteLogSegmentMetadataUpdate(oldest, ts + 1000, None, state, 1)
                self._pending.append((serialize(update), live_delta))


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


class HistoryWriter:
    """Appends a growing history to one metadata partition with a bulk producer."""

    def __init__(
        self,
        servers: str,
        topic: str,
        partition: int,
        target: Lifecycle,
        others: list[Lifecycle],
        others_share: float,
        seed: int,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.target = target
        self.others = others
        self.others_share = others_share if others else 0.0
        self._rnd = random.Random(seed ^ 0x5EED)
        self._turn = 0
        self.records = 0
        self.bytes = 0
        self.seconds = 0.0
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

    def grow_to(self, records: int) -> float:
        """Write records until the partition holds ``records``; the seconds it took."""
        count = records - self.records
        if count <= 0:
            return 0.0
        producer = self._producer
        topic, partition = self.topic, self.partition
        t0 = time.perf_counter()
        with Progress(f"write {count:,} events", total=count, unit="records") as progress:
            for n in range(count):
                if self.others_share and self._rnd.random() < self.others_share:
                    stream = self.others[self._turn % len(self.others)]
                    self._turn += 1
                else:
                    stream = self.target
                value = stream.next()
                self.bytes += len(value)
                while True:
                    try:
                        producer.produce(
                            topic, value, partition=partition, on_delivery=self._delivered
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)
                if n % 10_000 == 0:
                    producer.poll(0)
                    progress.update(n)
            remaining = producer.flush(120)
            progress.update(count)
        elapsed = time.perf_counter() - t0
        if remaining or self._failed:
            raise RuntimeError(
                f"the history writer lost records: {remaining} undelivered, "
                f"failures {self._failed[:3]}"
            )
        self.records = records
        self.seconds += elapsed
        return elapsed

    def close(self) -> None:
        self._producer.flush(30)
        self._producer.close()


# The bare consumer -------------------------------------------------------------------------------
Processor = Callable[[list[Message]], tuple[int, int, int]]
"""Handles a batch of messages; returns (records, value bytes, offset after the batch's last
record or EOF, -1 when none)."""


def read_bytes() -> Processor:
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
            records += 1
            size += len(value) if value is not None else 0
            after = (message.offset() or 0) + 1
        return records, size, after

    return process


def read_decode() -> Processor:
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
            assert value is not None
            deserialize(value)
            records += 1
            size += len(value)
            after = (message.offset() or 0) + 1
        return records, size, after

    return process


def read_decode_apply(target: TopicIdPartition) -> Processor:
    store = RemotePartitionMetadataStore()
    store.maybe_load_partition(target)
    handle = store.handle

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
            assert value is not None
            metadata = deserialize(value)
            if isinstance(metadata, RemoteLogMetadata) and metadata.topic_id_partition == target:
                handle(metadata)
            records += 1
            size += len(value)
            after = (message.offset() or 0) + 1
        return records, size, after

    return process


BARE_OVERRIDES = {"fetch.queue.backoff.ms": "10"}
"""Where the bare reader departs from the RLMM consumer's settings. librdkafka postpones the
next fetch by ``fetch.queue.backoff.ms`` (1000 by default) once ``queued.min.messages``
(100,000) are queued: a reader faster than ~100k records/s stalls (a bare reader of 1M records
spent 4.5 of its 6 s waiting so: 6.0 s against 0.95 s with 10 ms). 0 is worse than 10: the
fetcher then spins while the queue is full (a decoding reader burnt 14 s of CPU instead of 8).
The limit is the bare consumer at its best."""


def consumer_settings(config: TopicRlmmConfig, name: str) -> dict[str, Any]:
    """The RLMM consumer's librdkafka settings (but ``BARE_OVERRIDES``), under another client
    id and group."""
    settings: dict[str, Any] = dict(config.consumer) | BARE_OVERRIDES
    settings["client.id"] = settings["group.id"] = f"tierlog-bench-{name}"
    settings["logger"] = CLIENT_LOG
    return settings


def bare_read(
    config: TopicRlmmConfig, partition: int, processor: Processor, name: str
) -> dict[str, Any]:
    """Read ``partition`` of the topic from the beginning to its end offset."""
    topic = config.topic_name
    consumer = Consumer(consumer_settings(config, name))
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


# The RLMM ----------------------------------------------------------------------------------------
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


def create_topic(configs: Mapping[str, str]) -> TopicRlmmConfig:
    """Create the metadata topic as the RLMM would (``ensure_topic``), before any RLMM runs."""
    from tierlog_rlmm_topic.topic import ensure_topic

    config = TopicRlmmConfig.from_configs(configs)
    ensure_topic(AdminClient(dict(config.admin)), config)
    return config


def rlmm_ready(configs: Mapping[str, str], tip: TopicIdPartition, live: int) -> dict[str, Any]:
    """A fresh RLMM's time from assignment of ``tip`` to readiness."""
    rlmm = TopicBasedRemoteLogMetadataManager()
    rlmm.configure(configs)
    try:
        time.sleep(SETTLE_S)
        partition = metadata_partition(tip, rlmm.config.num_partitions)
        probe = Consumer(consumer_settings(rlmm.config, "probe"))
        try:  # what readiness waits for (read outside the clock)
            _, end = watermarks(probe, rlmm.config.topic_name, partition)
        finally:
            probe.close()
        rss = RssMeter()
        t0, cpu0 = time.perf_counter(), time.process_time()
        rlmm.on_partition_leadership_changes({tip}, set())
        while not rlmm.is_ready(tip):
            time.sleep(READY_POLL_S)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        rss.stop()
        segments = sum(1 for _ in rlmm.list_remote_log_segments(tip))
    finally:
        rlmm.close()
    if segments != live:
        raise RuntimeError(f"the RLMM holds {segments:,} segments of {tip}, expected {live:,}")
    return {
        "seconds": elapsed,
        "cpu_s": cpu,
        "records": end,
        "records_per_s": end / elapsed,
        "segments": segments,
        "rss_peak_delta": rss.peak_delta,
        "rss_kept_delta": rss.kept_delta,
    }


# Bootstrap ---------------------------------------------------------------------------------------
KINDS = ("bytes", "decode", "apply", "rlmm")


def measure_size(
    config: TopicRlmmConfig,
    configs: Mapping[str, str],
    writer: HistoryWriter,
    repeat: int,
) -> dict[str, Any]:
    target = writer.target.tip
    partition = writer.partition
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    # Untimed: the first reader of new records would pay for what the broker does once.
    bare_read(config, partition, read_bytes(), "warmup")
    for r in range(repeat):
        for kind in KINDS:
            log(f"  pass {r + 1}/{repeat}: {kind} ...")
            if kind == "rlmm":
                run = rlmm_ready(configs, target, writer.target.live)
            else:
                processor = (
                    read_bytes()
                    if kind == "bytes"
                    else read_decode()
                    if kind == "decode"
                    else read_decode_apply(target)
                )
                run = bare_read(config, partition, processor, kind)
                if run["records"] != writer.records:
                    raise RuntimeError(f"{kind}: read {run['records']:,} of {writer.records:,}")
            log(f"    {run['records']:,} records in {run['seconds']:.3f} s")
            runs[kind].append(run)
    best = {kind: min(found, key=lambda run: float(run["seconds"])) for kind, found in runs.items()}

    def peak(kind: str) -> int | None:
        values = [run["rss_peak_delta"] for run in runs[kind] if run["rss_peak_delta"] is not None]
        return max(values) if values else None

    rate = {kind: float(best[kind]["records_per_s"]) for kind in KINDS}
    # CPU time of this process per record read (every thread, librdkafka's included), the
    # least of the passes: less sensitive than the wall clock to other work on the machine.
    cpu = {kind: min(float(run["cpu_s"]) for run in runs[kind]) for kind in KINDS}
    cpu_us = {kind: cpu[kind] / writer.records * 1e6 for kind in KINDS}
    return {
        "events": writer.records,
        "target_events": writer.target.events,
        "other_events": sum(o.events for o in writer.others),
        "target_live_segments": writer.target.live,
        "value_bytes": writer.bytes,
        "write_s": writer.seconds,
        "bare": {
            kind: best[kind] | {"runs_s": [run["seconds"] for run in runs[kind]]}
            for kind in ("bytes", "decode", "apply")
        },
        "rlmm": best["rlmm"]
        | {
            "runs_s": [run["seconds"] for run in runs["rlmm"]],
            "rss_peak_delta_max": peak("rlmm"),
            "rss_kept_delta_max": max(
                (
                    run["rss_kept_delta"]
                    for run in runs["rlmm"]
                    if run["rss_kept_delta"] is not None
                ),
                default=None,
            ),
        },
        "ratio": {
            "vs_bytes": rate["rlmm"] / rate["bytes"],
            "vs_decode": rate["rlmm"] / rate["decode"],
            "vs_apply": rate["rlmm"] / rate["apply"],
            "cpu_vs_bytes": cpu["bytes"] / cpu["rlmm"],
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
    consumer = Consumer(consumer_settings(config, "roundtrip"))
    delivered: list[int] = []

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            raise RuntimeError(f"bare produce failed: {error.str()}")
        delivered.append(message.offset() or 0)

    def round_trip() -> float:
        value = bare_stream.next()
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
        add = deserialize(rlmm_stream.next())
        finish = deserialize(rlmm_stream.next())
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
    lat = results["latency"]
    rc, bt = lat["rlmm"]["call"], lat["bare"]["round_trip"]
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
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
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
    return save_chart(fig, path, results, dpi=110)


# Main --------------------------------------------------------------------------------------------
def parse_sizes(text: str) -> list[int]:
    sizes = sorted({int(s.replace("_", "")) for s in text.split(",") if s.strip()})
    if not sizes or sizes[0] <= 0:
        raise argparse.ArgumentTypeError(f"sizes must be positive integers, got {text!r}")
    return sizes


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
    parser.add_argument("--repeat", type=int, default=3, help="passes of each reader (best kept)")
    parser.add_argument("--calls", type=int, default=1000, help="add + update calls timed")
    parser.add_argument(
        "--max-write-s",
        type=float,
        default=300.0,
        help="skip a size whose write is projected to take longer (seconds)",
    )
    args, out = parse_args(parser, {"sizes": [1000, 3000], "calls": 30, "repeat": 1}, argv)
    workdir = Path(tempfile.mkdtemp(prefix="tierlog-rlmm-bench-", dir=args.dir))
    started = time.perf_counter()
    results: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "kafka_version": kafka_service.KAFKA_VERSION,
        "goal_ratio": GOAL_RATIO,
        "metadata_partitions": METADATA_PARTITIONS,
        "neighbours": args.neighbours,
        "others_share": args.others_share if args.neighbours else 0.0,
        "repeat": args.repeat,
        "requested_sizes": args.sizes,
        # Other work on the machine slows every reader alike; said beside the figures.
        "load_average_start": os.getloadavg(),
        "sizes": [],
        "skipped": [],
    }
    service = None
    writer: HistoryWriter | None = None
    try:
        log("starting Apache Kafka ...")
        t0 = time.perf_counter()
        service = kafka_service.start_kafka(workdir / "kafka")
        results["broker_start_s"] = time.perf_counter() - t0
        servers = service.url
        log(f"  broker at {servers} in {results['broker_start_s']:.1f} s")
        topic = f"tierlog-bench-rlmm-{uuid.uuid4().hex[:12]}"
        configs = rlmm_configs(servers, topic, workdir / "rlmm")
        config = create_topic(configs)
        rnd = random.Random(args.seed)
        target_tip = TopicIdPartition(
            Uuid(rnd.getrandbits(63) | 1, rnd.getrandbits(64)), "bench", 0
        )
        partition = metadata_partition(target_tip, config.num_partitions)
        others = [
            Lifecycle(tip, args.seed + 1 + i)
            for i, tip in enumerate(
                neighbours_of(target_tip, args.neighbours, config.num_partitions)
            )
        ]
        writer = HistoryWriter(
            servers, topic, partition, Lifecycle(target_tip, args.seed), others,
            args.others_share, args.seed,
        )  # fmt: skip
        results["topic"] = topic
        results["metadata_partition"] = partition
        log("latency of mutating calls ...")
        results["latency"] = latency(servers, workdir, args.calls, args.seed)
        for i, size in enumerate(args.sizes):
            if writer.records and writer.seconds:
                projected = (size - writer.records) * writer.seconds / writer.records
                if projected > args.max_write_s:
                    reason = (
                        f"writing {size - writer.records:,} more events was projected to take "
                        f"{projected:.0f} s on this machine "
                        f"(> --max-write-s {args.max_write_s:.0f})"
                    )
                    log(f"skipping {size:,} and larger: {reason}")
                    results["skipped"] = [{"events": s, "reason": reason} for s in args.sizes[i:]]
                    break
            log(f"size {size:,}: writing the history ...")
            write_s = writer.grow_to(size)
            log(f"  {size:,} records in the metadata partition ({write_s:.1f} s for this step)")
            results["sizes"].append(measure_size(config, configs, writer, args.repeat))
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
    results["total_seconds"] = time.perf_counter() - started
    results["load_average_end"] = os.getloadavg()
    print_table(results, quick=args.quick)
    write_results(out, "rlmm_bootstrap", results, chart, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
