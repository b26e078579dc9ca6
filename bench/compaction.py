"""Benchmark of compaction: tierlog's engines against Kafka's own LogCleaner on the same bytes.

Run: ``.venv/bin/python bench/compaction.py [--size-mib 1024] [--many-keys 6000000]`` (``--quick``:
every phase on a few MiB, Kafka's broker included, with Kafka's dedupe buffer scaled down so that
the many-keys phase still needs several Kafka rounds: a smoke run whose figures mean nothing,
written to ``--out`` or a temporary directory). Needs Java 17 and Kafka's jars
(``scripts/services/kafka.py``, Maven the first time) and the Spark extra (``pip install -e
'.[spark]'``). On the project's 2-core machines a run takes ~6 minutes at the default 1 GiB and ~3
more per extra GiB (``--quick``: about a minute).

**The input** is produced once to a real Apache Kafka 4.3.1 broker (``scripts/services/kafka.py``,
``log.cleaner.backoff.ms=100``, Kafka's cleaner defaults otherwise: one thread, a 128 MiB dedupe
buffer) into a compacted topic created with cleaning held off (``min.compaction.lag.ms`` of ten
years, as ``tests/integration/_cleaner_oracle.py`` does), by an idempotent confluent-kafka producer
(``--batch-kib`` 64 KiB batches, ``--codec`` none): ``--size-mib`` of records whose keys are drawn
uniformly from ``--keys`` (default: ~10 versions per key), values of 50-350 bytes of hex text,
``--tombstones`` (5%) of them tombstones. ``segment.bytes`` is ``--segment-kib`` (64 MiB: a segment
is a Spark task, so a 1 GiB log in Kafka's default 1 GiB segment would be one task),
``min.cleanable.dirty.ratio`` 0.01 (so that what a round cut short by the dedupe buffer leaves stays
eligible; tierlog gets the same topic configuration). The active segment is then rolled
(``segment.ms`` set to 1 ms and one more record appended), so that all the produced bytes are
cleanable, and the partition directory is copied with the high watermark and tierlog's
clean-shutdown checkpoint beside it: those **same bytes** are what Kafka cleans and what every
tierlog engine cleans (each on a fresh copy, in the page cache as Kafka's are).

**The peer**: cleaning is released on the broker (``min.compaction.lag.ms=0``) and Kafka's
LogCleaner cleans the topic; its throughput is read from the stats block it logs per round (``N MB
of log processed in S seconds``, ``Start size: ... (M messages)``; MB there are MiB), the round's
time also from the log timestamps of ``Beginning cleaning of log`` and of the stats block
(millisecond precision). The rounds are counted: more than one means the dedupe buffer filled.

**tierlog**: ``clean_partition_dir`` (one round) on a fresh copy each, timed as a whole (log opening
included) with the engine's two passes timed inside it (pass 2 without the swaps between groups):
(a) ``PythonEngine`` in this process; (b) ``SparkEngine`` on ``local[1]`` and (c) on ``local[2]``,
each in a child process of its own (a fresh JVM, ``--spark-driver-memory``, Spark's default JVM
options: no SerialGC or C1-only flags, which slow heavy work), the session start-up and a first job
that starts the Arrow Python workers (importing the engine, as on a session already in use) timed
apart from the clean. Records/s and MB/s count what the round's
pass 2 read (Kafka's ``Start size``). Ratios: Spark local[2] / Kafka (goal >= 0.5), Spark local[2] /
Python (goal >= 1), local[2] / local[1] (goal >= 1.6). tierlog's survivors are counted against
Kafka's ``End size`` messages. Each Spark run keeps Spark's event log, from which every stage of the
clean's jobs is reported: its call site, phase (pass 1 or 2), wall time, task count, the longest
task and the tasks that read nothing (empty partitions).

**Where the time goes**: the engines' pass 1 (scan) and pass 2 (rewrite) times, and, on the first
``--profile-mib`` of the input in this process, single-threaded, each layer of the scan that a Spark
task runs: reading the files, framing batches with their CRC, decoding records into objects (what
the scan no longer does, for comparison), the packed (offset, key MD5) arrays of
``iter_segment_digests``, and those as Arrow batches (``spark_engine._scan_batches``, what
``mapInArrow`` gets); the PythonEngine's pass 1 (``scan_segment``) beside them.

**Bloom filters**: a tiered partition (``LocalLog``, the ``local`` RSM, the ``embedded`` RLMM, as
``tests/compaction/test_tiered.py`` builds it) of ``--bloom-mib`` in ``--bloom-segment-kib``
segments, every key in two versions, with summaries at each false-positive rate of ``--bloom-fpr``
(0.01, tierlog's default, and 0.001: a partition each) and the filter floor
``--bloom-size-ratio`` (0.01, tierlog's default: a filter gets at least that share of its segment's
bytes, ``summary.bloom_shape``), plus one partition at the first rate with a ratio of 0 (filters
sized by the rate alone, for comparison), cleaned once through remote storage (every segment gets
its compaction summary), its local copies dropped by local retention; then one round per count of
``--bloom-dirty-keys`` (1, 10, 100; the ratio-0 partition only 10): new versions of that many keys,
all from ``--bloom-touched`` (2) old segments, tiered and cleaned, each by a new cleaner (nothing
cached: every summary of the chain is fetched, as by a new leader). The fraction downloaded counts
the segments *and the summaries* the round fetched, over the remote bytes in its range; beside it
the expectation from the filters actually uploaded (the touched segments, plus a false positive in
each other segment with probability 1 - (1 - p)^keys, p from the filter's m, k and keys, plus the
summaries), and the filters' bits per key. One last round on the first partition ignores the
summaries (a ``TieredCleaner`` whose ``_summary`` returns None: every segment is downloaded). The
goal (<= 10%) is judged at the default configuration with 10 dirty keys. PythonEngine.
``--only bloom`` runs this phase alone (no broker, no Spark) and writes ``compaction-bloom.json``
to ``--out`` or a temporary directory, never to ``bench/results/``.

**Many keys**: a second topic on the same broker with ``--many-keys`` keys (default 6,000,000: more
than the 5,033,164 a default dedupe buffer holds at load factor 0.9), each written once in order and
a third of them again, small values: Kafka's rounds counted from its log, and
``clean_partition_dir`` with ``SparkEngine`` on ``local[2]`` (a child process) mapping every key in
one round. Its topic has ``min.cleanable.dirty.ratio=0.01`` so that Kafka's later rounds are
eligible (tierlog gets the same configuration).

Writes ``bench/results/compaction.json`` (or ``--out``) and, if matplotlib is importable,
``compaction.png`` beside it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

# shared by every benchmark
from _report import (
    RESULTS,
    drop_workdir,
    parse_args,
    pyplot,
    save_chart,
    verdict,
    write_results,
)

from tierlog.compaction.engine import GroupOutput, GroupTask, PythonEngine, ScanOutcome
from tierlog.compaction.offline import clean_partition_dir
from tierlog.compaction.rewrite import RetentionContext
from tierlog.log.cleaner_checkpoint import write_offset_checkpoint
from tierlog.log.log_config import LogConfig
from tierlog.log.reader import iter_batches
from tierlog.log.recovery import OffsetsCheckpoint, write_offsets_checkpoint
from tierlog.progress import Progress
from tierlog.spi import TopicPartition

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO / "scripts"))

# mypy finds services with MYPYPATH=scripts; without it the module is Any (hence unused-ignore).
from services import kafka as kafka_service  # type: ignore[import-not-found,unused-ignore]  # noqa: E402

MIB = 1 << 20
GOAL_VS_KAFKA = 0.5
GOAL_VS_PYTHON = 1.0
GOAL_SCALING = 1.6
GOAL_BLOOM = 0.10
BLOOM_HEADLINE_KEYS = 10
"""The Bloom round judged against the goal: ten dirty keys (the sweep shows the others)."""
BLOOM_DEFAULT_RATIO = 0.01
"""tierlog's default ``remote.log.compaction.bloom.filter.size.ratio``."""
KAFKA_DEDUPE_BUFFER = 128 * MIB
KAFKA_LOAD_FACTOR = 0.9
KAFKA_MAP_ENTRY = 24
"""Bytes per slot of Kafka's ``SkimpyOffsetMap``: a 16-byte MD5 and an 8-byte offset."""
HOLD_LAG_MS = 10 * 365 * 86_400_000
"""``min.compaction.lag.ms`` that holds cleaning off: every segment is younger than that."""
KEY_FORMAT = b"key-%010d"
POOL_BYTES = 1 << 20
VALUE_SIZES = (50, 350)
MANY_KEYS_VALUE_SIZES = (8, 40)
MANY_KEYS_REPEAT = 1 / 3
CHECKPOINT_TIMEOUT_S = 1800.0
STALL_S = 120.0
"""Kafka's cleaner is taken as stuck when its checkpoint, rounds and round starts stay the same
this long (a round in progress logs nothing until it ends: a 1 GiB round takes well under)."""
SKIPPED_SUFFIXES = (".deleted", ".cleaned", ".swap", ".tmp")
QUICK_BUFFER = 2 * MIB
QUICK_LOAD_FACTOR = 0.01
"""Quick mode's dedupe buffer: 87,381 slots x 0.01 = 873 keys, so a few thousand keys need
several Kafka rounds (Kafka requires more than 1 MiB of buffer per cleaner thread)."""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def kafka_capacity(buffer_bytes: int, load_factor: float, threads: int = 1) -> int:
    """Keys Kafka's offset map holds (``SkimpyOffsetMap``: slots of 24 bytes, filled to the
    load factor)."""
    slots = min(buffer_bytes // threads, 2**31 - 1) // KAFKA_MAP_ENTRY
    return int(slots * load_factor)


# The workload ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    """What is produced to one topic: ``records`` keyed records, deterministic for ``seed``.

    ``sequential`` writes every key once in order first, then ``records - keys`` more versions
    of random keys; otherwise every record's key is drawn uniformly from ``keys``."""

    topic: str
    records: int
    keys: int
    value_sizes: tuple[int, int]
    tombstones: float
    sequential: bool
    seed: int

    def chunks(self, size: int = 100_000) -> Iterator[tuple[list[int], list[int], list[int]]]:
        """(keys, value lengths, value starts in the pool) per chunk; length -1: tombstone."""
        import numpy as np

        rng = np.random.default_rng(self.seed)
        low, high = self.value_sizes
        for start in range(0, self.records, size):
            n = min(size, self.records - start)
            if self.sequential:
                index = np.arange(start, start + n)
                keys = np.where(index < self.keys, index, rng.integers(0, self.keys, n))
            else:
                keys = rng.integers(0, self.keys, n)
            lengths = rng.integers(low, high + 1, n)
            lengths[rng.random(n) < self.tombstones] = -1
            starts = rng.integers(0, POOL_BYTES - high, n)
            yield keys.tolist(), lengths.tolist(), starts.tolist()


def value_pool(seed: int) -> bytes:
    """Hex text values are cut from: half random, so a codec shrinks it but not away."""
    import numpy as np

    return np.random.default_rng(seed).bytes(POOL_BYTES // 2).hex().encode()


def estimated_record_bytes(value_sizes: tuple[int, int], tombstones: float = 0.0) -> float:
    """A record's bytes in a batch: key, mean value (none for a tombstone), ~9 bytes of
    varints and attributes."""
    return len(KEY_FORMAT % 0) + (1 - tombstones) * sum(value_sizes) / 2 + 9


# Kafka -------------------------------------------------------------------------------------------
@dataclass
class Broker:
    """The broker under test, with a confluent-kafka admin client."""

    service: Any
    admin: Any

    @property
    def data(self) -> Path:
        return Path(self.service.directory) / "data"

    def partition_dir(self, topic: str) -> Path:
        return self.data / f"{topic}-0"

    def log_text(self) -> str:
        return Path(self.service.log_path).read_text(errors="replace")


def wait_for(condition: Callable[[], Any], what: str, timeout: float, interval: float = 0.1) -> Any:
    """Poll ``condition`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def create_topic(broker: Broker, topic: str, configs: Mapping[str, str]) -> None:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    futures = broker.admin.create_topics([NewTopic(topic, 1, 1, config=dict(configs))])
    futures[topic].result(60)

    def has_leader() -> bool:
        meta = broker.admin.list_topics(topic, timeout=30).topics.get(topic)
        return bool(
            meta and meta.error is None and meta.partitions and meta.partitions[0].leader >= 0
        )

    wait_for(has_leader, f"topic {topic} to have a leader", 60)


def alter_topic(broker: Broker, topic: str, changes: Mapping[str, str]) -> None:
    """Set topic configs and wait until the broker describes them."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in changes.items()
    ]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    for future in broker.admin.incremental_alter_configs([resource]).values():
        future.result(60)

    def applied() -> bool:
        described = broker.admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
        values = next(iter(described.values())).result(60)
        return all(values[k].value == v for k, v in changes.items())

    wait_for(applied, f"{topic} to have {dict(changes)}", 60)


def segment_bases(directory: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in directory.glob("*.log"))


def log_end_offset(directory: Path) -> int:
    """The offset after the last batch of the active segment."""
    active = segment_bases(directory)[-1]
    end = active
    for _, header in iter_batches(directory / f"{active:020d}.log", verify_crc=False):
        end = header.next_offset
    return end


def log_bytes(directory: Path, *, below: int | None = None) -> int:
    return sum(
        (directory / f"{b:020d}.log").stat().st_size
        for b in segment_bases(directory)
        if below is None or b < below
    )


@dataclass
class Produced:
    topic: str
    records: int
    keys: int
    seconds: float
    cleanable_bytes: int
    """Bytes of the sealed segments (all that was produced; the active one holds the roll)."""
    segments: int
    active_base: int
    log_end: int


def produce(broker: Broker, workload: Workload, pool: bytes, batch_kib: int, codec: str) -> float:
    """Produce ``workload`` (idempotent, acks=all); the seconds it took."""
    from confluent_kafka import Producer

    failures: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    producer = Producer(
        {
            "bootstrap.servers": broker.service.url,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": 20,
            "batch.size": batch_kib * 1024,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 256 * 1024,
            "on_delivery": delivered,
        }
    )
    send = producer.produce
    topic = workload.topic
    t0 = time.perf_counter()
    done = 0
    try:
        with Progress(f"produce {topic}", total=workload.records, unit="records") as progress:
            for keys, lengths, starts in workload.chunks():
                for key, length, start in zip(keys, lengths, starts, strict=True):
                    value = None if length < 0 else pool[start : start + length]
                    while True:
                        try:
                            send(topic, value, KEY_FORMAT % key, partition=0)
                            break
                        except BufferError:
                            producer.poll(0.05)
                producer.poll(0)
                done += len(keys)
                progress.update(done)
            remaining = producer.flush(300)
    finally:
        producer.close()
    if remaining or failures:
        raise RuntimeError(
            f"producing to {topic}: {remaining} undelivered, {len(failures)} failed "
            f"({failures[:3]})"
        )
    return time.perf_counter() - t0


def roll(broker: Broker, topic: str) -> int:
    """Seal the active segment (``segment.ms`` 1 ms, then one more record, which Kafka appends
    to a new segment); the new active segment's base."""
    from confluent_kafka import Producer

    directory = broker.partition_dir(topic)
    before = segment_bases(directory)[-1]
    alter_topic(broker, topic, {"segment.ms": "1"})
    producer = Producer({"bootstrap.servers": broker.service.url, "acks": "all"})
    deadline = time.monotonic() + 60
    try:
        while segment_bases(directory)[-1] == before:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}'s active segment {before} did not roll")
            producer.produce(topic, b"roll", b"roll", partition=0)
            if producer.flush(60):
                raise RuntimeError(f"the roll record of {topic} was not delivered")
    finally:
        producer.close()
    return segment_bases(directory)[-1]


def copy_partition(source: Path, target: Path) -> None:
    """Copy a partition directory's files (not those of a swap or deletion in progress)."""
    target.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        if path.is_file() and not path.name.endswith(SKIPPED_SUFFIXES):
            shutil.copy2(path, target / path.name)


def save_input(broker: Broker, topic: str, into: Path) -> Path:
    """Copy the partition as Kafka holds it into ``into/<topic>-0``, with what a broker keeps
    beside it: the high watermark (``replication-offset-checkpoint``, the log end: the
    producer waited for every record) and tierlog's clean-shutdown checkpoint, so tierlog loads
    the files as they are, as Kafka's cleaner works on the log as the broker holds it."""
    source = broker.partition_dir(topic)
    target = into / source.name
    copy_partition(source, target)
    end = log_end_offset(target)
    write_offset_checkpoint(
        into / "replication-offset-checkpoint", {TopicPartition(topic, 0): end}, sync=False
    )
    write_offsets_checkpoint(
        target,
        OffsetsCheckpoint(
            recovery_point=end, log_start_offset=0, high_watermark=end, clean_shutdown=True
        ),
        sync=False,
    )
    return target


def fresh_copy(input_dir: Path, into: Path) -> Path:
    """A copy of a saved input (its log directory: the partition and the high watermark)."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    shutil.copy2(input_dir.parent / "replication-offset-checkpoint", into)
    target = into / input_dir.name
    copy_partition(input_dir, target)
    return target


_TS = r"\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]"
_BEGIN = re.compile(_TS + r" INFO .*?Beginning cleaning of log (?P<log>\S+)")
_NUM = r"[\d,]+(?:\.\d+)?"
_BLOCK = re.compile(
    _TS + r" INFO [^\n]*\n\s*Log cleaner thread (?P<thread>\d+) cleaned log (?P<log>\S+) "
    r"\(dirty section = \[(?P<first>\d+), (?P<end>\d+)\]\)\n"
    rf"\s*(?P<mb>{_NUM}) MB of log processed in (?P<secs>{_NUM}) seconds "
    r"\((?P<rate>\S+) MB/sec\)\.\n"
    rf"\s*Indexed (?P<imb>{_NUM}) MB in (?P<isecs>{_NUM}) seconds [^\n]*\n"
    rf"\s*Buffer utilization: (?P<util>{_NUM})%\n"
    rf"\s*Cleaned (?P<cmb>{_NUM}) MB in (?P<csecs>{_NUM}) seconds [^\n]*\n"
    rf"\s*Start size: (?P<smb>{_NUM}) MB \((?P<smsg>[\d,]+) messages\)\n"
    rf"\s*End size: (?P<emb>{_NUM}) MB \((?P<emsg>[\d,]+) messages\)\n"
)


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _ms(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp() * 1000


@dataclass
class KafkaRound:
    """One round of Kafka's cleaner, as its stats block reports it."""

    first_dirty: int
    end: int
    mb: float
    """MiB of log processed (pass 2 bytes read: the ``Start size``)."""
    seconds: float
    """Kafka's own round time (one decimal)."""
    logged_ms: float | None
    """From the log timestamps of ``Beginning cleaning`` and of the stats block."""
    indexed_mb: float
    index_seconds: float
    buffer_utilization: float
    cleaned_seconds: float
    start_messages: int
    end_mb: float
    end_messages: int
    lines: list[str]
    """The stats block, as logged."""


def kafka_rounds(text: str, topic: str) -> list[KafkaRound]:
    """Every round Kafka's cleaner logged for partition 0 of ``topic``, in order."""
    name = f"{topic}-0"
    begins = [(m.start(), _ms(m["ts"])) for m in _BEGIN.finditer(text) if m["log"] == name]
    rounds = []
    for m in _BLOCK.finditer(text):
        if m["log"] != name:
            continue
        began = [ms for at, ms in begins if at < m.start()]
        logged = _ms(m["ts"]) - began[-1] if began else None
        rounds.append(
            KafkaRound(
                first_dirty=int(m["first"]),
                end=int(m["end"]),
                mb=_num(m["mb"]),
                seconds=_num(m["secs"]),
                logged_ms=logged,
                indexed_mb=_num(m["imb"]),
                index_seconds=_num(m["isecs"]),
                buffer_utilization=_num(m["util"]),
                cleaned_seconds=_num(m["csecs"]),
                start_messages=int(m["smsg"].replace(",", "")),
                end_mb=_num(m["emb"]),
                end_messages=int(m["emsg"].replace(",", "")),
                lines=[line.strip() for line in m.group(0).splitlines()[1:]],
            )
        )
    return rounds


def cleaner_checkpoint(broker: Broker, topic: str) -> int | None:
    path = broker.data / "cleaner-offset-checkpoint"
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    for line in lines[2:]:
        parts = line.split(" ")
        if len(parts) == 3 and parts[0] == topic and parts[1] == "0":
            return int(parts[2])
    return None


def kafka_clean(broker: Broker, produced: Produced) -> dict[str, Any]:
    """Release cleaning of the topic and wait for Kafka's cleaner to reach its active segment;
    its rounds, from its log."""
    topic = produced.topic
    load = OtherLoad()
    t0 = time.perf_counter()
    alter_topic(broker, topic, {"min.compaction.lag.ms": "0"})
    seen: list[tuple[int, int, int]] = []
    last_change = time.monotonic()
    with Progress(
        f"Kafka's LogCleaner on {topic}", total=produced.active_base, unit="offsets"
    ) as progress:

        def done() -> bool:
            nonlocal last_change
            text = broker.log_text()
            checkpoint = cleaner_checkpoint(broker, topic) or 0
            rounds = kafka_rounds(text, topic)
            state = (checkpoint, len(rounds), text.count(f"Beginning cleaning of log {topic}-0"))
            if state != (seen[-1] if seen else None):
                seen.append(state)
                last_change = time.monotonic()
                progress.update(min(checkpoint, produced.active_base))
            elif time.monotonic() - last_change > STALL_S:
                raise RuntimeError(
                    f"Kafka's cleaner stopped at {checkpoint} on {topic} (active segment "
                    f"{produced.active_base}) after {len(rounds)} rounds: nothing for "
                    f"{STALL_S:.0f} s"
                )
            return checkpoint >= produced.active_base and bool(
                rounds and rounds[-1].end >= produced.active_base
            )

        wait_for(done, f"Kafka's cleaner to clean {topic}", CHECKPOINT_TIMEOUT_S, 0.2)
    wall = time.perf_counter() - t0
    machine = load.stop()
    rounds = kafka_rounds(broker.log_text(), topic)
    seconds = sum(r.seconds for r in rounds)
    logged = [r.logged_ms for r in rounds]
    logged_s = sum(ms for ms in logged if ms is not None) / 1000 if None not in logged else None
    # Throughput of a complete clean: the input (every produced record, all in the sealed
    # segments) over every round's time (a later round re-reads what earlier ones kept). Kafka's
    # own figure (0.1 s steps) unless it is too coarse to divide by.
    timed = seconds if seconds >= 1.0 else logged_s
    return {
        "rounds": [asdict(r) for r in rounds],
        "round_count": len(rounds),
        "several_rounds": len(rounds) > 1,
        "seconds": seconds,
        "logged_seconds": logged_s,
        "release_to_checkpoint_s": wall,
        "mb_read": sum(r.mb for r in rounds),
        "records_read": sum(r.start_messages for r in rounds),
        "bytes": produced.cleanable_bytes,
        "records": produced.records,
        "end_messages": rounds[-1].end_messages,
        "timed_seconds": timed,
        "mb_per_s": produced.cleanable_bytes / 1e6 / timed if timed else None,
        "records_per_s": produced.records / timed if timed else None,
        "first_round_own_mb_per_s": (
            rounds[0].mb / rounds[0].seconds if rounds[0].seconds else None
        ),
        **machine,
    }


# Other work on the machine ----------------------------------------------------------------------
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _busy_cpu_s() -> float | None:
    """CPU seconds every CPU of the machine has been busy since boot (``/proc/stat``)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(fields) - fields[3] - fields[4]) / _CLOCK_TICKS  # less idle and iowait


def _tree_cpu_s(root: int) -> float:
    """CPU seconds of ``root`` and its descendants (each with its reaped children's), which
    is the work this benchmark makes the machine do: the broker, the JVMs, Python workers."""
    parent: dict[int, int] = {}
    spent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        parent[int(entry.name)] = int(fields[1])
        spent[int(entry.name)] = sum(int(v) for v in fields[11:15])
    tree, frontier = {root}, [root]
    while frontier:
        frontier = [pid for pid, ppid in parent.items() if ppid in frontier and pid not in tree]
        tree.update(frontier)
    return sum(spent.get(pid, 0) for pid in tree) / _CLOCK_TICKS


class OtherLoad:
    """How much of the machine other processes used during a measurement: the CPU seconds the
    machine was busy less those of this process tree, as a share of every CPU over the wall
    time. Other work on a 2-core machine slows every figure; the share says by how much it
    could have."""

    def __init__(self, root: int | None = None) -> None:
        self.root = os.getpid() if root is None else root
        self.wall = time.perf_counter()
        self.busy = _busy_cpu_s()
        self.ours = _tree_cpu_s(self.root)

    def stop(self) -> dict[str, float | None]:
        wall = time.perf_counter() - self.wall
        busy = _busy_cpu_s()
        ours = _tree_cpu_s(self.root) - self.ours
        if busy is None or self.busy is None or wall <= 0:
            return {"ours_cpu_s": ours, "other_cpu_s": None, "other_share": None}
        other = max(0.0, busy - self.busy - ours)
        return {
            "ours_cpu_s": ours,
            "other_cpu_s": other,
            "other_share": other / ((os.cpu_count() or 1) * wall),
        }


# tierlog -----------------------------------------------------------------------------------------
class TimedEngine:
    """An engine whose two passes are timed (the rewrite without the time the caller spends
    between groups, swapping them in)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.scan_s = 0.0
        self.rewrite_s = 0.0

    def scan(self, tasks: Sequence[Any], **kwargs: Any) -> ScanOutcome:
        t0 = time.perf_counter()
        try:
            return self.inner.scan(tasks, **kwargs)  # type: ignore[no-any-return]
        finally:
            self.scan_s += time.perf_counter() - t0

    def bloom_hits(self, blooms: Mapping[int, Any]) -> set[int]:
        return self.inner.bloom_hits(blooms)  # type: ignore[no-any-return]

    def scan_more(self, tasks: Sequence[Any], **kwargs: Any) -> ScanOutcome:
        t0 = time.perf_counter()
        try:
            return self.inner.scan_more(tasks, **kwargs)  # type: ignore[no-any-return]
        finally:
            self.scan_s += time.perf_counter() - t0

    def rewrite(
        self,
        groups: Sequence[GroupTask],
        *,
        ctx: RetentionContext,
        config: LogConfig,
        progress: Any = None,
    ) -> Iterator[GroupOutput]:
        outputs = self.inner.rewrite(groups, ctx=ctx, config=config, progress=progress)
        while True:
            t0 = time.perf_counter()
            try:
                out = next(outputs)
            except StopIteration:
                self.rewrite_s += time.perf_counter() - t0
                return
            self.rewrite_s += time.perf_counter() - t0
            yield out


class PhaseProgress:
    """The clean's ``progress(phase, done, total)`` as one progress line set per phase."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._phase: str | None = None
        self._bar: Progress | None = None

    def __call__(self, phase: str, done: int, total: int) -> None:
        if phase != self._phase:
            self.close()
            self._phase = phase
            name = "pass 1 (offset map)" if phase == "map" else "pass 2 (rewrite)"
            self._bar = Progress(f"{self.label}: {name}", total=total, unit="tasks").__enter__()
        assert self._bar is not None
        # A Spark phase counts the tasks of its stages, which appear as they are planned.
        self._bar.total = max(float(total), self._bar.total)
        self._bar.update(done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def run_clean(
    directory: Path, config: Mapping[str, str], engine: Any, label: str
) -> dict[str, Any]:
    """``clean_partition_dir`` on ``directory`` with ``engine``, timed; its figures."""
    timed = TimedEngine(engine)
    progress = PhaseProgress(label)
    load = OtherLoad()
    t0 = time.perf_counter()
    try:
        result = clean_partition_dir(
            directory, config=dict(config), engine=timed, progress=progress
        )
    finally:
        progress.close()
    seconds = time.perf_counter() - t0
    machine = load.stop()
    if not result.cleaned:
        raise RuntimeError(f"{label}: the round did not clean ({result.summary_line()})")
    stats = result.stats
    log(f"  {label}: {result.summary_line()}; {seconds:.1f} s in all")
    return {
        "seconds": seconds,
        "round_s": result.elapsed_s,
        "scan_s": timed.scan_s,
        "rewrite_s": timed.rewrite_s,
        "other_s": seconds - timed.scan_s - timed.rewrite_s,
        "bytes_read": stats.bytes_read,
        "bytes_written": stats.bytes_written,
        "records_read": stats.records_read,
        "records_written": stats.records_written,
        "keys_mapped": result.keys_mapped,
        "rounds": 1,
        "first_dirty_offset": result.first_dirty_offset,
        "end_offset": result.end_offset,
        "segments_read": result.segments_read,
        "segments_written": result.segments_written,
        "mb_per_s": stats.bytes_read / 1e6 / seconds,
        "records_per_s": stats.records_read / seconds,
        **machine,
    }


# Spark, in child processes -----------------------------------------------------------------------
def _warm_up(batches: Any) -> Any:
    """A first job's task: starts an Arrow Python worker, which imports the engine (pyarrow,
    numpy, tierlog), as the round's tasks would on a session already in use."""
    import tierlog.compaction.spark_engine  # noqa: F401

    yield from batches


def spark_child(spec_path: Path) -> int:
    """Run the Spark cleans of ``spec_path`` (JSON: runs, each a master, a directory, the
    topic config) in this process, a session each (the JVM is shared: only the first
    session's JVM options count), with Spark's event log on; write the figures beside it."""
    from tierlog.compaction.spark_engine import SparkEngine
    from tierlog.compaction.spark_session import (
        SparkSettings,
        local_threads,
        spark_session,
        stop_spark_session,
    )

    spec = json.loads(spec_path.read_text())
    events = spec_path.parent / "events"
    events.mkdir(exist_ok=True)
    conf = {
        **spec["conf"],
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.compress": "false",
    }
    results = []
    for n, run in enumerate(spec["runs"]):
        master = run["master"]
        t0 = time.perf_counter()
        spark = spark_session(
            SparkSettings(master=master, app_name="tierlog-bench-compaction", conf=conf)
        )
        session_s = time.perf_counter() - t0
        spark.sparkContext.setLogLevel("ERROR")
        threads = local_threads(master) or 2
        t0 = time.perf_counter()
        warm = spark.createDataFrame([(i,) for i in range(2 * threads)], "x int")
        warm.repartition(2 * threads).mapInArrow(_warm_up, "x int").collect()
        first_job_s = time.perf_counter() - t0
        log(f"  {run['label']}: session {session_s:.1f} s, first job {first_job_s:.1f} s")
        figures = run_clean(Path(run["dir"]), run["config"], SparkEngine(spark), run["label"])
        stop_spark_session()  # closes the event log
        figures.update(
            master=master,
            session_s=session_s,
            first_job_s=first_job_s,
            reused_jvm=n > 0,
            stages=spark_stages(newest(events)),
        )
        results.append(figures)
    (spec_path.parent / "results.json").write_text(json.dumps(results))
    return 0


def newest(directory: Path) -> Path:
    return max(directory.iterdir(), key=lambda p: p.stat().st_mtime_ns)


def spark_stages(event_log: Path) -> list[dict[str, Any]]:
    """Every stage of a Spark application's event log, in order: its job group's phase (the
    engine names its job groups ``...-map`` and ``...-clean``), its call site, wall time and
    its tasks' times (longest, sum, the JVM's CPU in them) and how many read no record (empty
    partitions)."""
    groups: dict[int, str] = {}
    stages: dict[int, dict[str, Any]] = {}
    tasks: dict[int, list[tuple[float, int, float]]] = {}
    # Spark 4 rolls its event log: a directory of events_<n>_<app> files.
    files = (
        sorted(event_log.glob("events_*"), key=lambda p: int(p.name.split("_")[1]))
        if event_log.is_dir()
        else [event_log]
    )
    for line in (line for path in files for line in path.read_text().splitlines()):
        if line:
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerJobStart":
                group = (event.get("Properties") or {}).get("spark.jobGroup.id") or ""
                for stage in event["Stage IDs"]:
                    groups[stage] = group.rsplit("-", 1)[-1] if group else "other"
            elif kind == "SparkListenerStageCompleted":
                info = event["Stage Info"]
                stages[info["Stage ID"]] = info
            elif kind == "SparkListenerTaskEnd":
                task, metrics = event["Task Info"], event.get("Task Metrics") or {}
                read = (metrics.get("Shuffle Read Metrics") or {}).get("Total Records Read", 0)
                read += (metrics.get("Input Metrics") or {}).get("Records Read", 0)
                ms = task["Finish Time"] - task["Launch Time"]
                cpu_ms = metrics.get("Executor CPU Time", 0) / 1e6
                tasks.setdefault(event["Stage ID"], []).append((ms, read, cpu_ms))
    out = []
    for stage_id, info in sorted(stages.items(), key=lambda s: s[1].get("Submission Time", 0)):
        if "Completion Time" not in info or "Submission Time" not in info:
            continue
        times = tasks.get(stage_id, [])
        out.append(
            {
                "stage": stage_id,
                "phase": groups.get(stage_id, "other"),
                "name": re.sub(r" at \S*/", " at ", info["Stage Name"]),
                "seconds": (info["Completion Time"] - info["Submission Time"]) / 1000,
                "tasks": info["Number of Tasks"],
                "task_max_s": max((ms for ms, _, _ in times), default=0) / 1000,
                "task_sum_s": sum(ms for ms, _, _ in times) / 1000,
                # The JVM's CPU time in the tasks: a Python task's own work is in its Python
                # worker, so the rest of its time is Python (or waiting).
                "task_jvm_cpu_s": sum(cpu for _, _, cpu in times) / 1000,
                "empty_tasks": sum(1 for _, read, _ in times if read == 0),
            }
        )
    return out


def run_spark(
    runs: list[dict[str, Any]], conf: Mapping[str, str], workdir: Path
) -> list[dict[str, Any]]:
    """Run ``runs`` in one child process (see ``spark_child``); their figures."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec = workdir / "spec.json"
    spec.write_text(json.dumps({"runs": runs, "conf": dict(conf)}))
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--spark-child", str(spec)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the Spark child process failed ({done.returncode}); see above")
    figures: list[dict[str, Any]] = json.loads((workdir / "results.json").read_text())
    return figures


# Where the time goes -----------------------------------------------------------------------------
def breakdown(input_dir: Path, limit_bytes: int, end_offset: int) -> dict[str, Any]:
    """Each layer of a scan task, single-threaded, on the first segments of the input up to
    ``limit_bytes`` (see the module docstring)."""
    import pyarrow as pa

    from tierlog.compaction.engine import SegmentTask
    from tierlog.compaction.scan import (
        iter_raw_batches,
        iter_segment_digests,
        records_of,
        scan_segment,
    )
    from tierlog.compaction.spark_engine import _scan_batches
    from tierlog.compaction.txn import AbortedIndex

    bases = [b for b in segment_bases(input_dir) if b < end_offset]
    paths: list[Path] = []
    total = 0
    for base in bases:
        if total >= limit_bytes:
            break
        path = input_dir / f"{base:020d}.log"
        paths.append(path)
        total += path.stat().st_size
    all_paths = list(paths)
    aborted = AbortedIndex([])
    records = 0

    def read() -> None:
        for path in paths:
            with path.open("rb", buffering=0) as f:
                while f.read(MIB):
                    pass

    def frame() -> None:
        for path in paths:
            for _ in iter_raw_batches(path):
                pass

    def decode() -> None:
        nonlocal records
        records = 0
        for path in paths:
            for header, data in iter_raw_batches(path):
                records += len(records_of(header, data))

    def digests() -> None:
        for path in paths:
            for _ in iter_segment_digests(path, aborted=aborted, end_offset=end_offset):
                pass

    def arrow() -> None:
        tasks = tuple(
            SegmentTask(index=i, base_offset=int(p.name[:20]), next_offset=end_offset, path=str(p))
            for i, p in enumerate(paths)
        )
        batch = pa.RecordBatch.from_arrays([pa.array(range(len(tasks)), pa.int32())], ["index"])
        for _ in _scan_batches(tasks, (), end_offset, len(tasks), [batch]):
            pass

    def python_scan() -> None:
        for path in paths:
            scan_segment(path, aborted=aborted, first_dirty_offset=0, end_offset=end_offset)

    # Untimed: the first Arrow arrays of a process pay for pyarrow's lazy initialisation.
    first = paths[:1]
    paths = first
    arrow()
    paths = all_paths
    steps: list[tuple[str, str, Callable[[], None]]] = [
        ("read", "read the files (page cache)", read),
        ("frame", "+ frame batches, CRC (iter_raw_batches)", frame),
        ("decode", "+ decode records (records_of)", decode),
        ("digests", "frame + (offset, key MD5) arrays (iter_segment_digests)", digests),
        ("arrow", "+ Arrow batches (spark_engine._scan_batches)", arrow),
        ("python_scan", "PythonEngine pass 1 (scan_segment)", python_scan),
    ]
    out: dict[str, Any] = {"bytes": total, "segments": len(paths), "steps": {}}
    with Progress("where the time goes", total=len(steps), unit="steps") as progress:
        for name, label, step in steps:
            t0 = time.perf_counter()
            step()
            seconds = time.perf_counter() - t0
            out["steps"][name] = {"label": label, "seconds": seconds}
            progress.advance()
    out["records"] = records
    for step in out["steps"].values():
        step["mb_per_s"] = total / 1e6 / step["seconds"]
        step["us_per_record"] = step["seconds"] * 1e6 / records if records else None
    return out


# Bloom filters -----------------------------------------------------------------------------------
def bloom_phase(
    workdir: Path,
    size: int,
    segment_bytes: int,
    dirty_keys: Sequence[int],
    touched: int,
    fprs: Sequence[float],
    seed: int,
    ratio: float = BLOOM_DEFAULT_RATIO,
) -> dict[str, Any]:
    """Bytes downloaded by rounds whose dirty keys touch ``touched`` old segments: for each
    false-positive rate (filters floored at ``ratio`` of their segment), one partition cleaned
    once, then one round per dirty-key count (in order, each on the previous round's output, as
    a topic's successive rounds); on the first partition a last round ignores the summaries
    (every segment is downloaded); then a partition at the first rate and a ratio of 0 (filters
    sized by the rate alone) with the headline key count, for comparison."""
    rounds = []
    partitions = [(fpr, ratio, list(dirty_keys)) for fpr in fprs]
    if ratio != 0:
        partitions.append((fprs[0], 0.0, [BLOOM_HEADLINE_KEYS]))
    for n, (fpr, part_ratio, sweep) in enumerate(partitions):
        filters = [True] * len(sweep) + ([False] if n == 0 else [])
        counts = sweep + ([max(sweep)] if n == 0 else [])
        rounds.extend(
            bloom_rounds(
                workdir / f"fpr-{fpr}-ratio-{part_ratio}",
                size,
                segment_bytes,
                counts,
                filters,
                touched,
                fpr,
                seed,
                part_ratio,
            )
        )
    default = [r for r in rounds if r["filters"] and r["fpr"] == fprs[0] and r["ratio"] == ratio]
    headline = next((r for r in default if r["dirty_keys"] == BLOOM_HEADLINE_KEYS), default[0])
    without = next(r for r in rounds if not r["filters"])
    rate_only = next(
        (r for r in rounds if r["filters"] and r["ratio"] == 0 and r["fpr"] == fprs[0]), None
    )
    return {
        "segment_bytes": segment_bytes,
        "segments": headline["segments"],
        "touched_segments": touched,
        "rounds": rounds,
        "dirty_keys": headline["dirty_keys"],
        "false_positive_rate": headline["fpr"],
        "size_ratio": ratio,
        "remote_bytes": headline["remote_bytes"],
        "with_filters": headline,
        "without_filters": without,
        "ratio_zero": rate_only,
        "fraction_with": headline["fraction"],
        "fraction_without": without["fraction"],
        "goal_ratio": headline["fraction"] / GOAL_BLOOM,
    }


def bloom_rounds(
    directory: Path,
    size: int,
    segment_bytes: int,
    dirty_keys: Sequence[int],
    use: Sequence[bool],
    touched: int,
    fpr: float,
    seed: int,
    ratio: float = BLOOM_DEFAULT_RATIO,
) -> list[dict[str, Any]]:
    import random

    from tierlog.compaction.remote_io import StorageSpec, register_open
    from tierlog.compaction.tiered import TieredCleaner, remote_chain
    from tierlog.log.batch import build_batch
    from tierlog.log.local_log import LocalLog
    from tierlog.log.record import Record
    from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager
    from tierlog.spi import TopicIdPartition, Uuid
    from tierlog.storage.local import LocalTieredStorage

    class NoFilters(TieredCleaner):
        """Ignores every compaction summary: each clean segment is downloaded."""

        def _summary(self, segment: Any) -> None:
            return None

    now = [1_700_000_000_000]
    topic_id = Uuid.from_string("RuB4a0pkRrS8hgDZ5Jrp_A")
    tip = TopicIdPartition(topic_id, "bloom", 0)
    config: dict[str, object] = {
        "cleanup.policy": "compact",
        "remote.storage.enable": True,
        "segment.bytes" if segment_bytes >= MIB else "internal.segment.bytes": segment_bytes,
        "min.cleanable.dirty.ratio": 0.01,
        "delete.retention.ms": 86_400_000,
        "local.retention.ms": 1000,
    }
    log_ = LocalLog.open(
        directory / "log" / "bloom-0",
        config,
        clock=lambda: now[0],
        sync=False,
        topic_id=topic_id,
        high_watermark_follows_leo=True,
    )
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(directory / "remote"), "node.id": "0"})
    rlmm = EmbeddedRemoteLogMetadataManager()
    rlmm.configure({"dir": str(directory / "rlmm")})
    rlmm.on_partition_leadership_changes({tip}, set())
    spec = StorageSpec.of("local", {"dir": str(directory / "remote"), "node.id": "0"})
    register_open(spec, rsm)

    def cleaner(use_filters: bool) -> TieredCleaner:
        kind = TieredCleaner if use_filters else NoFilters
        return kind(
            rlmm,
            rsm,
            spec,
            broker_id=0,
            scratch=str(directory / "scratch"),
            false_positive_rate=fpr,
            bloom_size_ratio=ratio,
        )

    rng = random.Random(seed)
    pool = value_pool(seed)
    out = []
    try:
        # Every key in two consecutive versions: round 1 halves the log, nothing is shared
        # between segments, so a dirty key lives in exactly one old segment. Timestamps in the
        # past (local retention keeps a segment with future timestamps).
        n = 0
        past = now[0] - 3_600_000
        with Progress(
            f"bloom (fpr {fpr}, ratio {ratio}): build", total=size, unit="bytes"
        ) as progress:
            while log_.size() < size:
                records = []
                for j in range(100):
                    start = rng.randrange(POOL_BYTES - 200)
                    key = KEY_FORMAT % (n // 2)
                    records.append(Record(j, past + n // 100, key, pool[start : start + 150]))
                    n += 1
                log_.append_as_leader(build_batch(records), 0)
                progress.update(log_.size())
        log_.roll()
        tier(log_, rsm, rlmm, tip, now[0])
        first = cleaner(True).clean(
            log_,
            tip,
            leader_epoch=0,
            checkpoint=None,
            now_ms=now[0],
            force=True,
            engine=PythonEngine(),
        )
        old = remote_chain(rlmm, tip, log_)
        filters = bloom_filters_of(rsm, old, fpr, ratio)
        now[0] += 100_000
        log_.delete_retention_segments(now=now[0])
        for count, use_filters in zip(dirty_keys, use, strict=True):
            # New versions of keys of ``touched`` old segments, spread over the log.
            picks = [old[(i + 1) * len(old) // (touched + 1)] for i in range(touched)]
            records = []
            for i in range(count):
                segment = picks[i % touched]
                offset = segment.start_offset + rng.randrange(
                    segment.end_offset - segment.start_offset
                )
                records.append(Record(i, now[0] - 1000, KEY_FORMAT % (offset // 2), b"new"))
            log_.append_as_leader(build_batch(records), 0)
            log_.roll()
            tier(log_, rsm, rlmm, tip, now[0])
            t0 = time.perf_counter()
            result = cleaner(use_filters).clean(
                log_,
                tip,
                leader_epoch=0,
                checkpoint=None,
                now_ms=now[0],
                force=True,
                engine=PythonEngine(),
            )
            seconds = time.perf_counter() - t0
            now[0] += 1000
            chain = remote_chain(rlmm, tip, log_)
            hit = min(touched, count)
            # The touched segments, plus a false positive in each other one with probability
            # 1 - (1 - p)^keys (p of each filter as uploaded), plus the summaries fetched;
            # summaries ignored: everything.
            false_hits = sum(1 - (1 - p) ** count for p in filters["rates"]) / len(old)
            expected = (
                hit / len(old)
                + (1 - hit / len(old)) * false_hits
                + filters["summary_bytes"] / result.remote_bytes
                if use_filters
                else 1.0
            )
            total = result.bytes_downloaded + result.summary_bytes_downloaded
            figures = {
                "fpr": fpr,
                "ratio": ratio,
                "filters": use_filters,
                "dirty_keys": count,
                "segments": len(chain),
                "first_round_bytes_downloaded": first.bytes_downloaded,
                "remote_bytes": result.remote_bytes,
                "bytes_downloaded": result.bytes_downloaded,
                "summary_bytes_downloaded": result.summary_bytes_downloaded,
                "fraction": total / result.remote_bytes,
                "segment_fraction": result.bytes_downloaded / result.remote_bytes,
                "summary_fraction": result.summary_bytes_downloaded / result.remote_bytes,
                "expected_fraction": expected,
                "bits_per_key": filters["bits_per_key"],
                "hashes": filters["hashes"],
                "per_key_fpr": filters["mean_rate"],
                "filter_share": filters["filter_share"],
                "shaped_as_configured": filters["as_configured"],
                "segments_skipped": result.segments_skipped,
                "segments_read": result.segments_read,
                "seconds": seconds,
                "local_segments": len(log_.segments),
            }
            out.append(figures)
            kind = f"filters at {fpr}, ratio {ratio}" if use_filters else "no filters"
            log(
                f"  bloom: {kind}, {count} dirty keys: {result.bytes_downloaded:,} + "
                f"{result.summary_bytes_downloaded:,} (summaries) of {result.remote_bytes:,} "
                f"remote bytes downloaded ({figures['fraction']:.1%}), "
                f"{result.segments_skipped} segments skipped, {seconds:.1f} s"
            )
    finally:
        log_.close()
        rlmm.close()
    return out


def bloom_filters_of(rsm: Any, chain: Sequence[Any], fpr: float, ratio: float) -> dict[str, Any]:
    """The filters round 1 uploaded, as a round sees them: bits per key and hashes (means), each
    filter's expected per-key false-positive rate ``(1 - e^(-kn/m))^k``, their bytes against
    their segments', and whether each has the shape ``bloom_shape`` gives for the configured
    rate and ratio (False: the configuration did not reach the summary builder)."""
    import math

    from tierlog.compaction.remote_io import fetch_index_bytes
    from tierlog.compaction.summary import SegmentSummary, bloom_shape
    from tierlog.spi import IndexType

    rates, bits, hashes = [], [], []
    summary_bytes = filter_bytes = segment_bytes = 0
    as_configured = True
    for segment in chain:
        data = fetch_index_bytes(rsm, segment, IndexType.COMPACTION_SUMMARY)
        if data is None:
            raise RuntimeError(f"segment {segment.remote_log_segment_id} has no summary")
        summary = SegmentSummary.decode(data)
        bloom, n = summary.bloom, max(summary.key_count, 1)
        rates.append((1 - math.exp(-bloom.k * n / bloom.m)) ** bloom.k)
        bits.append(bloom.m / n)
        hashes.append(bloom.k)
        summary_bytes += len(data)
        filter_bytes += len(bloom.bits)
        segment_bytes += segment.segment_size_in_bytes
        shape = bloom_shape(summary.key_count, fpr, segment.segment_size_in_bytes, ratio)
        as_configured &= (bloom.m, bloom.k) == shape
    if not as_configured:
        log(
            f"  bloom: WARNING: the uploaded filters are not shaped for fpr {fpr}, ratio {ratio}"
            " (the ratio does not reach the summary builder in this tree)"
        )
    return {
        "rates": rates,
        "mean_rate": sum(rates) / len(rates),
        "bits_per_key": sum(bits) / len(bits),
        "hashes": sum(hashes) / len(hashes),
        "summary_bytes": summary_bytes,
        "filter_share": filter_bytes / segment_bytes,
        "as_configured": as_configured,
    }


def tier(log_: Any, rsm: Any, rlmm: Any, tip: Any, now: int) -> None:
    """Copy the sealed segments above the highest offset in remote storage, as the RLM copy
    task does (metadata started, files copied, metadata finished)."""
    from tierlog.spi import (
        RemoteLogSegmentId,
        RemoteLogSegmentMetadata,
        RemoteLogSegmentMetadataUpdate,
        RemoteLogSegmentState,
    )

    highest = log_.highest_offset_in_remote_storage
    for segment in [s for s in log_.sealed_segments() if s.base_offset > highest]:
        inputs = log_.segment_copy_inputs(segment)
        metadata = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(tip),
            inputs.start_offset,
            inputs.end_offset,
            inputs.largest_timestamp,
            0,
            now,
            inputs.size_in_bytes,
            inputs.segment_leader_epochs,
            txn_idx_empty=inputs.txn_index_empty,
        )
        rlmm.add_remote_log_segment_metadata(metadata).result()
        custom = rsm.copy_log_segment_data(metadata, inputs.data)
        rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                metadata.remote_log_segment_id,
                now,
                custom,
                RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                0,
            )
        ).result()
        log_.update_highest_offset_in_remote_storage(inputs.end_offset)


# Sizes -------------------------------------------------------------------------------------------
def mem_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def plan_sizes(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The input sizes this machine allows, and why a requested one was scaled down.

    Disk: Kafka's copy of each input, the saved input and one working copy with its cleaned
    output at a time, plus the Bloom partitions (two, each local and remote): ~4x the main input
    and the many-keys input. Memory: the Spark driver, the broker and a Python offset map of the
    many-keys input (~150 bytes a key)."""
    requested = args.size_mib * MIB
    many_bytes = int(
        args.many_keys * (1 + MANY_KEYS_REPEAT) * estimated_record_bytes(MANY_KEYS_VALUE_SIZES)
    )
    fixed = 4 * many_bytes + 3 * len(args.bloom_fpr) * args.bloom_mib * MIB + 2 * 1024 * MIB
    free = shutil.disk_usage(workdir).free
    size, reasons = requested, []
    if fixed + 4 * size > free:
        size = max(64 * MIB, (free - fixed) // 4)
        reasons.append(
            f"disk: {free / 2**30:.1f} GiB free in {workdir}, the run needs ~4x the input"
        )
    available = mem_available()
    needed = (int(args.spark_driver_memory.rstrip("gG")) + 1) * 2**30 + 150 * args.many_keys
    if available is not None and needed > available:
        reasons.append(
            f"memory: {available / 2**30:.1f} GiB available, the run needs "
            f"~{needed / 2**30:.1f} GiB (Spark driver, broker, offset maps)"
        )
    if args.quick:
        reasons.append("--quick")
    elif args.size_mib != DEFAULT_SIZE_MIB:
        reasons.append(f"--size-mib {args.size_mib} (default {DEFAULT_SIZE_MIB})")
    return {
        "requested_bytes": DEFAULT_SIZE_MIB * MIB,
        "bytes": size,
        "scaled": size < DEFAULT_SIZE_MIB * MIB,
        "reasons": reasons,
        "disk_free": free,
        "mem_available": available,
    }


DEFAULT_SIZE_MIB = 1024


# Report ------------------------------------------------------------------------------------------
def rate(figures: Mapping[str, Any]) -> str:
    return (
        f"{figures['records_per_s'] / 1e3:8,.0f}k rec/s {figures['mb_per_s']:7,.1f} MB/s"
        if figures.get("records_per_s")
        else "n/a"
    )


def share(figures: Mapping[str, Any]) -> str:
    """The share of the machine other processes used during a measurement."""
    other = figures.get("other_share")
    return f"{'n/a':>6}" if other is None else f"{other:6.0%}"


def print_report(results: dict[str, Any], *, quick: bool) -> None:
    inp, kafka, tl, ratios = (
        results["input"],
        results["kafka"],
        results["tierlog"],
        results["ratios"],
    )
    print()
    print(
        f"Compaction of one partition, Kafka {results['kafka_version']} LogCleaner vs tierlog "
        f"({results['cpus']} CPUs, Python {results['python']})"
    )
    scale = inp["scale"]
    note = "; ".join(scale["reasons"]) if scale["reasons"] else "as requested"
    print(
        f"input: {inp['bytes'] / MIB:,.0f} MiB in {inp['segments']} segments of "
        f"{inp['segment_bytes'] / MIB:,.2f} MiB, {inp['records']:,} records, {inp['keys']:,} keys "
        f"(~{inp['records'] / inp['keys']:.1f} versions each), {inp['tombstones']:.0%} "
        f"tombstones, codec {inp['codec']}, {inp['batch_kib']} KiB batches; produced in "
        f"{inp['produce_s']:.0f} s"
    )
    if scale["scaled"] or scale["reasons"]:
        print(
            f"  size: {scale['bytes'] / MIB:,.0f} MiB (default "
            f"{scale['requested_bytes'] / MIB:,.0f} MiB): {note}"
        )
    print(f"{'':32} {'seconds':>8} {'throughput':>33} {'others':>6}  pass 1 / pass 2 / other (s)")
    print(
        f"{'Kafka LogCleaner':32} {kafka['timed_seconds']:8.1f} {rate(kafka):>33} "
        f"{share(kafka)}  "
        + " + ".join(
            f"round {i + 1}: index {r['index_seconds']:.1f} / clean {r['cleaned_seconds']:.1f}"
            for i, r in enumerate(kafka["rounds"])
        )
    )
    for name, label in (
        ("python", "tierlog PythonEngine"),
        ("spark_local1", "tierlog Spark local[1]"),
        ("spark_local2", "tierlog Spark local[2]"),
    ):
        f = tl[name]
        extra = (
            f"; session start {f['session_s']:.1f} s + first job {f['first_job_s']:.1f} s "
            "(not in the time)"
            if "session_s" in f
            else ""
        )
        print(
            f"{label:32} {f['seconds']:8.1f} {rate(f):>33} {share(f)}  {f['scan_s']:.1f} / "
            f"{f['rewrite_s']:.1f} / {f['other_s']:.1f}{extra}"
        )
    print(
        "  others = the share of the machine's CPU time other processes used meanwhile (work "
        "outside this benchmark slows every figure); pass 2 without the swaps between groups"
    )
    print(
        f"  Kafka: {kafka['round_count']} round(s) "
        f"({'several: the dedupe buffer filled' if kafka['several_rounds'] else 'one'}); "
        f"survivors: Kafka {kafka['end_messages']:,} records, tierlog "
        f"{tl['python']['records_written']:,} (Python), "
        f"{tl['spark_local2']['records_written']:,} (Spark)"
    )
    for block in kafka["rounds"]:
        print("  Kafka's stats block: " + " | ".join(block["lines"]))
    for key, label, goal in (
        ("spark_vs_kafka", "Spark local[2] / Kafka LogCleaner", GOAL_VS_KAFKA),
        ("spark_vs_python", "Spark local[2] / PythonEngine", GOAL_VS_PYTHON),
        ("local2_vs_local1", "Spark local[2] / local[1]", GOAL_SCALING),
        ("python_vs_kafka", "PythonEngine / Kafka LogCleaner", None),
    ):
        value = ratios[key]
        judged = "" if goal is None else f"  goal >= {goal}: {verdict(value, goal, quick=quick)}"
        print(f"  {label:38} {value:6.2f}x{judged}")
    for name in ("spark_local1", "spark_local2"):
        stages = tl[name].get("stages") or []
        job = sum(st["seconds"] for st in stages if st["phase"] in ("map", "clean"))
        print(f"  {name} Spark stages ({job:.1f} s in the clean's jobs), longest first:")
        for st in sorted(stages, key=lambda st: -st["seconds"])[:6]:
            print(
                f"    {st['phase']:5} {st['name'][:60]:60} {st['seconds']:6.1f} s, {st['tasks']:3} "
                f"tasks ({st['empty_tasks']} empty), longest {st['task_max_s']:.1f} s, sum "
                f"{st['task_sum_s']:.1f} s (JVM CPU {st.get('task_jvm_cpu_s', 0):.1f} s)"
            )
    prof = results["breakdown"]
    if prof:
        print(
            f"where a scan task's time goes (one thread, first {prof['bytes'] / MIB:,.0f} MiB, "
            f"{prof['records']:,} records):"
        )
        for step in prof["steps"].values():
            us = step["us_per_record"]
            print(
                f"  {step['label']:48} {step['seconds']:7.2f} s {step['mb_per_s']:8.1f} MB/s"
                + (f" {us:6.2f} us/record" if us is not None else "")
            )
    print_bloom(results["bloom"], quick=quick)
    many = results["many_keys"]
    mk, mt = many["kafka"], many["tierlog"]
    one_round = float(mt["keys_mapped"] > many["kafka_capacity"] and mt["rounds"] == 1)
    print(
        f"many keys: {many['keys']:,} keys in {many['records']:,} records "
        f"({many['bytes'] / MIB:,.0f} MiB); Kafka's offset map holds {many['kafka_capacity']:,} "
        f"keys ({many['kafka_buffer_bytes'] / MIB:,.0f} MiB, load factor "
        f"{many['kafka_load_factor']}): Kafka cleaned in {mk['round_count']} rounds, "
        f"{mk['timed_seconds']:.1f} s of cleaning; tierlog Spark local[2] mapped "
        f"{mt['keys_mapped']:,} keys in {mt['rounds']} round, {mt['seconds']:.1f} s  "
        f"{verdict(one_round, 1.0, quick=quick)}"
    )
    print(
        f"total run {results['total_seconds']:.0f} s; load average at start and end: "
        + ", ".join(
            f"{a:.1f}" for a in (*results["load_average_start"], *results["load_average_end"])
        )
    )


def print_bloom(bloom: Mapping[str, Any], *, quick: bool) -> None:
    """The Bloom phase's rounds: what each downloaded (segments and summaries) of the remote
    bytes, beside what its filters predict, and the headline against the goal."""
    w = bloom["with_filters"]
    print(
        f"Bloom filters: {bloom['segments']} remote segments of ~"
        f"{bloom['segment_bytes'] / MIB / 2:,.1f} MiB (after round 1); each later round's dirty "
        f"keys touch {bloom['touched_segments']} of them. Downloaded (segments + summaries), of "
        "the remote bytes:"
    )
    for r in bloom["rounds"]:
        kind = (
            f"fpr {r['fpr']:<6} ratio {r['ratio']:<5}"
            if r["filters"]
            else "no filters (summaries ignored)"
        )
        shape = (
            f" {r['bits_per_key']:4.1f} bits/key k {r['hashes']:4.1f} p {r['per_key_fpr']:.2%}"
            f" filters {r['filter_share']:.2%} of segments"
            + ("" if r["shaped_as_configured"] else " NOT AS CONFIGURED")
            if r["filters"]
            else ""
        )
        print(
            f"  {kind:30} {r['dirty_keys']:4} dirty keys: {r['bytes_downloaded'] / MIB:7,.2f} + "
            f"{r['summary_bytes_downloaded'] / MIB:5,.2f} of {r['remote_bytes'] / MIB:,.1f} MiB "
            f"= {r['fraction']:6.1%} (expected {r['expected_fraction']:6.1%}), "
            f"{r['segments_skipped']} segments skipped;{shape}"
        )
    print(
        f"  goal <= {GOAL_BLOOM:.0%} at the default fpr {w['fpr']}, ratio {w['ratio']} with "
        f"{w['dirty_keys']} dirty keys: {w['fraction']:.1%} ({w['segment_fraction']:.1%} "
        f"segments + {w['summary_fraction']:.1%} summaries; {w['fraction'] / GOAL_BLOOM:.2f} of "
        f"the goal) {verdict(w['fraction'], GOAL_BLOOM, at_most=True, quick=quick)}"
    )


def chart_bloom(ax: Any, bloom: Mapping[str, Any]) -> None:
    """Fraction downloaded per dirty-key count: a bar per (rate, ratio) of filters, the ratio-0
    comparison and the round that ignores the summaries."""
    counts = sorted({r["dirty_keys"] for r in bloom["rounds"]})
    configs = sorted(
        {(r["fpr"], r["ratio"]) for r in bloom["rounds"] if r["filters"]},
        key=lambda c: (-c[1], -c[0]),
    )
    width = 0.8 / (len(configs) + 1)
    for i, (fpr, ratio) in enumerate(configs):
        by_count = {
            r["dirty_keys"]: r
            for r in bloom["rounds"]
            if r["filters"] and r["fpr"] == fpr and r["ratio"] == ratio
        }
        xs = [j + i * width for j, c in enumerate(counts) if c in by_count]
        ys = [100 * by_count[c]["fraction"] for c in counts if c in by_count]
        ax.bar(
            xs, ys, width, label=f"fpr {fpr}, ratio {ratio}", color=("C2", "C0", "C4", "C1")[i % 4]
        )
        for x, y in zip(xs, ys, strict=True):
            ax.text(x, y, f"{y:.1f}%", ha="center", va="bottom", fontsize=7)
    without = bloom["without_filters"]
    x = counts.index(without["dirty_keys"]) + len(configs) * width
    ax.bar([x], [100 * without["fraction"]], width, color="C7", label="summaries ignored")
    ax.set_xticks(
        [j + width * len(configs) / 2 for j in range(len(counts))], [str(c) for c in counts]
    )
    ax.set_xlabel("dirty keys in the round")
    ax.axhline(100 * GOAL_BLOOM, color="C3", linestyle="--", label=f"goal <= {GOAL_BLOOM:.0%}")
    ax.set_ylabel("% of the remote bytes downloaded (segments + summaries)")
    ax.set_title(
        f"Bloom filters: keys in {bloom['touched_segments']} of {bloom['segments']} segments"
    )
    ax.legend(fontsize=8)


def chart_bloom_only(results: dict[str, Any], path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(1, 1, figsize=(7, 5))
    chart_bloom(ax, results["bloom"])
    return save_chart(fig, path, results, dpi=100)


def chart(results: dict[str, Any], path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    kafka, tl = results["kafka"], results["tierlog"]
    fig, axes = plt.subplots(1, 4, figsize=(20, 5))
    names = ["Kafka\nLogCleaner", "tierlog\nPython", "Spark\nlocal[1]", "Spark\nlocal[2]"]
    figures = [kafka, tl["python"], tl["spark_local1"], tl["spark_local2"]]
    ax = axes[0]
    values = [(f.get("records_per_s") or 0) / 1e3 for f in figures]
    bars = ax.bar(names, values, color=["C3", "C0", "C1", "C2"])
    for bar, f in zip(bars, figures, strict=True):
        ax.text(
            bar.get_x() + bar.get_width() / 2,
            bar.get_height(),
            f"{(f.get('mb_per_s') or 0):.0f} MB/s",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    if kafka.get("records_per_s"):
        ax.axhline(
            GOAL_VS_KAFKA * kafka["records_per_s"] / 1e3,
            color="C3",
            linestyle="--",
            label=f"goal: {GOAL_VS_KAFKA} x Kafka",
        )
        ax.legend(fontsize=8)
    ax.set_ylabel("thousand records/s (pass-2 records read)")
    ax.set_title(
        f"cleaning {results['input']['bytes'] / MIB:,.0f} MiB (Kafka: {kafka['round_count']} "
        "round(s), tierlog: 1)"
    )
    ax = axes[1]
    parts = [
        ("pass 1 (offset map)", "scan_s", "C0"),
        ("pass 2 (rewrite)", "rewrite_s", "C1"),
        ("open, plan, swap", "other_s", "C7"),
    ]
    labels = names[1:]
    bottoms = [0.0] * 3
    for label, key, color in parts:
        heights = [f[key] for f in figures[1:]]
        ax.bar(labels, heights, bottom=bottoms, color=color, label=label)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    starts = [
        0.0,
        tl["spark_local1"]["session_s"] + tl["spark_local1"]["first_job_s"],
        tl["spark_local2"]["session_s"] + tl["spark_local2"]["first_job_s"],
    ]
    ax.bar(
        labels,
        starts,
        bottom=bottoms,
        color="white",
        edgecolor="C7",
        hatch="//",
        label="Spark start-up (not timed)",
    )
    index = sum(r["index_seconds"] for r in kafka["rounds"])
    clean = sum(r["cleaned_seconds"] for r in kafka["rounds"])
    ax.bar(["Kafka"], [index], color="C0")
    ax.bar(["Kafka"], [clean], bottom=[index], color="C1")
    ax.set_ylabel("seconds")
    ax.set_title("where the time goes")
    ax.legend(fontsize=8)
    chart_bloom(axes[2], results["bloom"])
    ax = axes[3]
    many = results["many_keys"]
    rounds = [many["kafka"]["round_count"], many["tierlog"]["rounds"]]
    seconds = [many["kafka"]["timed_seconds"] or 0.0, many["tierlog"]["seconds"]]
    ax.bar(["Kafka\nLogCleaner", "tierlog Spark\nlocal[2]"], rounds, color=["C3", "C2"])
    for i, (r, sec) in enumerate(zip(rounds, seconds, strict=True)):
        ax.text(i, r, f"{r} round(s), {sec:.0f} s", ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("cleaning rounds for the whole dirty range")
    ax.set_title(f"{many['keys']:,} keys; Kafka's map holds {many['kafka_capacity']:,}")
    return save_chart(fig, path, results, dpi=100)


# Main --------------------------------------------------------------------------------------------
def topic_config(segment_bytes: int, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The topic's configuration with Kafka's keys (``internal.segment.bytes`` below Kafka's
    1 MiB minimum of ``segment.bytes``), as both cleaners get it."""
    key = "segment.bytes" if segment_bytes >= MIB else "internal.segment.bytes"
    return {"cleanup.policy": "compact", key: str(segment_bytes), **(extra or {})}


def produce_input(
    broker: Broker,
    workload: Workload,
    config: Mapping[str, str],
    args: argparse.Namespace,
    pool: bytes,
    into: Path,
) -> tuple[Produced, Path]:
    """Create the topic with cleaning held off, produce, seal, save a copy of the partition."""
    create_topic(broker, workload.topic, {**config, "min.compaction.lag.ms": str(HOLD_LAG_MS)})
    seconds = produce(broker, workload, pool, args.batch_kib, args.codec)
    active = roll(broker, workload.topic)
    saved = save_input(broker, workload.topic, into)
    produced = Produced(
        topic=workload.topic,
        records=workload.records,
        keys=workload.keys,
        seconds=seconds,
        cleanable_bytes=log_bytes(saved, below=active),
        segments=len([b for b in segment_bases(saved) if b < active]),
        active_base=active,
        log_end=log_end_offset(saved),
    )
    log(
        f"  {workload.topic}: {produced.records:,} records, "
        f"{produced.cleanable_bytes / MIB:,.1f} MiB in {produced.segments} sealed segments, "
        f"{seconds:.1f} s"
    )
    return produced, saved


def parse_ints(text: str) -> list[int]:
    values = sorted({int(v) for v in text.split(",") if v.strip()})
    if not values or values[0] <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def parse_floats(text: str) -> list[float]:
    values = [float(v) for v in text.split(",") if v.strip()]
    if not values or not all(0 < v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected rates in (0, 1), got {text!r}")
    return values


def _terminated(signum: int, _frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C, so the broker and the working files go too."""
    raise SystemExit(128 + signum)


def bloom_only(args: argparse.Namespace, out: Path) -> int:
    """``--only bloom``: the Bloom phase alone, its figures in ``compaction-bloom.json`` beside
    no others. Never in ``bench/results/`` (the full run's figures live there)."""
    if out.resolve().is_relative_to(RESULTS):
        out = Path(tempfile.mkdtemp(prefix="tierlog-compaction-bloom-"))
    workdir = Path(tempfile.mkdtemp(prefix="tierlog-compaction-bench-", dir=args.dir))
    started = time.perf_counter()
    results: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_start": os.getloadavg(),
        "goals": {"bloom_fraction_at_most": GOAL_BLOOM},
    }
    try:
        log("Bloom filters ...")
        results["bloom"] = bloom_phase(
            workdir / "bloom",
            args.bloom_mib * MIB,
            args.bloom_segment_kib * 1024,
            args.bloom_dirty_keys,
            args.bloom_touched,
            args.bloom_fpr,
            args.seed,
            args.bloom_size_ratio,
        )
    finally:
        drop_workdir(args, workdir)
    results["total_seconds"] = time.perf_counter() - started
    results["load_average_end"] = os.getloadavg()
    print()
    print_bloom(results["bloom"], quick=args.quick)
    write_results(out, "compaction-bloom", results, chart_bloom_only, quick=args.quick)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGTERM, _terminated)
    if argv[:1] == ["--spark-child"]:
        return spark_child(Path(argv[1]))
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--size-mib", type=int, default=DEFAULT_SIZE_MIB, help="main input")
    parser.add_argument("--segment-kib", type=int, default=64 * 1024, help="segment.bytes")
    parser.add_argument(
        "--keys",
        type=int,
        default=None,
        help="distinct keys of the main input (default: ~10 versions a key)",
    )
    parser.add_argument("--tombstones", type=float, default=0.05, help="share of tombstones")
    parser.add_argument("--codec", default="none", help="the producer's compression.type")
    parser.add_argument("--batch-kib", type=int, default=64, help="the producer's batch.size")
    parser.add_argument(
        "--many-keys",
        type=int,
        default=6_000_000,
        help="keys of the many-keys input (Kafka's default map holds 5,033,164)",
    )
    parser.add_argument("--spark-driver-memory", default="4g", help="spark.driver.memory")
    parser.add_argument(
        "--profile-mib", type=int, default=256, help="input read by the time breakdown (0: none)"
    )
    parser.add_argument("--bloom-mib", type=int, default=128, help="tiered partition size")
    parser.add_argument("--bloom-segment-kib", type=int, default=2048, help="its segments")
    parser.add_argument(
        "--bloom-dirty-keys",
        type=parse_ints,
        default=parse_ints("1,10,100"),
        help="dirty keys of the rounds after the first (one round each)",
    )
    parser.add_argument(
        "--bloom-fpr",
        type=parse_floats,
        default=parse_floats("0.01,0.001"),
        help="Bloom false-positive rates, the first tierlog's default (a partition each)",
    )
    parser.add_argument(
        "--bloom-touched", type=int, default=2, help="old segments round 2's keys come from"
    )
    parser.add_argument(
        "--bloom-size-ratio",
        type=float,
        default=BLOOM_DEFAULT_RATIO,
        help="the filters' floor as a share of their segment (a ratio-0 partition is added)",
    )
    parser.add_argument(
        "--only",
        choices=("bloom",),
        default=None,
        help="run one phase alone (bloom: no broker, no Spark), results to --out or a "
        "temporary directory as compaction-bloom.json",
    )
    quick = {
        "size_mib": 2,
        "segment_kib": 256,
        "many_keys": 2000,
        "profile_mib": 1,
        "bloom_mib": 1,
        "bloom_segment_kib": 64,
        "bloom_dirty_keys": [1, 10],
        "spark_driver_memory": "1g",
    }
    args, out = parse_args(parser, quick, argv)
    if args.only == "bloom":
        return bloom_only(args, out)
    workdir = Path(tempfile.mkdtemp(prefix="tierlog-compaction-bench-", dir=args.dir))
    started = time.perf_counter()
    scale = plan_sizes(args, workdir)
    for reason in scale["reasons"]:
        log(f"size: {reason}")
    size = scale["bytes"]
    segment_bytes = args.segment_kib * 1024
    records = int(size / estimated_record_bytes(VALUE_SIZES, args.tombstones))
    keys = args.keys or max(1, records // 10)
    buffer, load_factor = KAFKA_DEDUPE_BUFFER, KAFKA_LOAD_FACTOR
    broker_props = {"log.cleaner.backoff.ms": "100"}
    if args.quick:
        buffer, load_factor = QUICK_BUFFER, QUICK_LOAD_FACTOR
        broker_props |= {
            "log.cleaner.dedupe.buffer.size": str(buffer),
            "log.cleaner.io.buffer.load.factor": str(load_factor),
        }
    capacity = kafka_capacity(buffer, load_factor)
    # A round that ends early (the dedupe buffer filled) leaves a dirty remainder that must
    # stay eligible for the next round.
    main_config = topic_config(segment_bytes, {"min.cleanable.dirty.ratio": "0.01"})
    many_config = main_config
    results: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "kafka_version": kafka_service.KAFKA_VERSION,
        "load_average_start": os.getloadavg(),
        "goals": {
            "spark_vs_kafka": GOAL_VS_KAFKA,
            "spark_vs_python": GOAL_VS_PYTHON,
            "local2_vs_local1": GOAL_SCALING,
            "bloom_fraction_at_most": GOAL_BLOOM,
        },
        "broker_properties": broker_props,
        "spark_conf": {"spark.driver.memory": args.spark_driver_memory},
    }
    pool = value_pool(args.seed)
    main_load = Workload(
        "bench-main", records, keys, VALUE_SIZES, args.tombstones, False, args.seed
    )
    many_records = int(args.many_keys * (1 + MANY_KEYS_REPEAT))
    many_load = Workload(
        "bench-many-keys",
        many_records,
        args.many_keys,
        MANY_KEYS_VALUE_SIZES,
        0.0,
        True,
        args.seed + 1,
    )
    service = None
    broker: Broker | None = None
    try:
        from confluent_kafka.admin import AdminClient

        log("starting Apache Kafka ...")
        t0 = time.perf_counter()
        service = kafka_service.start_kafka(workdir / "kafka", properties=broker_props, heap="1g")
        results["broker_start_s"] = time.perf_counter() - t0
        broker = Broker(service, AdminClient({"bootstrap.servers": service.url}))
        log(f"  broker at {service.url} in {results['broker_start_s']:.1f} s")
        main_in, main_dir = produce_input(
            broker, main_load, main_config, args, pool, workdir / "input" / "main"
        )
        many_in, many_dir = produce_input(
            broker, many_load, many_config, args, pool, workdir / "input" / "many"
        )
        log("Kafka's LogCleaner ...")
        kafka_main = kafka_clean(broker, main_in)
        kafka_many = kafka_clean(broker, many_in)
    finally:
        # The admin client has no close(): dropped, it stops reconnecting to a broker gone.
        broker = None
        gc.collect()
        if service is not None:
            service.stop()
            shutil.rmtree(workdir / "kafka" / "data", ignore_errors=True)
    results["input"] = {
        "scale": scale,
        "bytes": main_in.cleanable_bytes,
        "records": main_in.records + 0,
        "keys": keys,
        "segments": main_in.segments,
        "segment_bytes": segment_bytes,
        "tombstones": args.tombstones,
        "codec": args.codec,
        "batch_kib": args.batch_kib,
        "value_bytes": list(VALUE_SIZES),
        "produce_s": main_in.seconds,
    }
    results["kafka"] = kafka_main
    try:
        if args.profile_mib:
            log("where the time goes ...")
            results["breakdown"] = breakdown(main_dir, args.profile_mib * MIB, main_in.active_base)
        else:
            results["breakdown"] = None
        log("tierlog PythonEngine ...")
        work = workdir / "work"
        python = run_clean(
            fresh_copy(main_dir, work / "python"),
            main_config,
            PythonEngine(),
            "tierlog PythonEngine",
        )
        shutil.rmtree(work / "python")
        conf = {"spark.driver.memory": args.spark_driver_memory}
        runs = [
            ("spark_local1", "local[1]", main_dir, main_config, "tierlog Spark local[1]"),
            ("spark_local2", "local[2]", main_dir, main_config, "tierlog Spark local[2]"),
            ("many_keys", "local[2]", many_dir, many_config, "tierlog Spark local[2], many keys"),
        ]
        spark: dict[str, dict[str, Any]] = {}
        if args.quick:  # one JVM for all: start-up dominates tiny inputs
            specs = []
            for name, master, source, config, label in runs:
                copy = fresh_copy(source, work / name)
                specs.append({"master": master, "dir": str(copy), "config": config, "label": label})
            log("tierlog SparkEngine (one child process) ...")
            for (name, *_), figures in zip(
                runs, run_spark(specs, conf, work / "spark"), strict=True
            ):
                spark[name] = figures
        else:  # a JVM each, so that no run profits from another's warm JIT
            for name, master, source, config, label in runs:
                log(f"{label} (child process) ...")
                copy = fresh_copy(source, work / name)
                spec = {"master": master, "dir": str(copy), "config": config, "label": label}
                (spark[name],) = run_spark([spec], conf, work / f"spark-{name}")
                shutil.rmtree(work / name)
        log("Bloom filters ...")
        results["bloom"] = bloom_phase(
            workdir / "bloom",
            args.bloom_mib * MIB,
            args.bloom_segment_kib * 1024,
            args.bloom_dirty_keys,
            args.bloom_touched,
            args.bloom_fpr,
            args.seed,
            args.bloom_size_ratio,
        )
    finally:
        drop_workdir(args, workdir)
    results["tierlog"] = {
        "python": python,
        "spark_local1": spark["spark_local1"],
        "spark_local2": spark["spark_local2"],
    }
    local1, local2 = spark["spark_local1"], spark["spark_local2"]
    kafka_rps = kafka_main["records_per_s"]
    results["ratios"] = {
        "spark_vs_kafka": local2["records_per_s"] / kafka_rps,
        "spark_vs_python": local2["records_per_s"] / python["records_per_s"],
        "local2_vs_local1": local2["records_per_s"] / local1["records_per_s"],
        "python_vs_kafka": python["records_per_s"] / kafka_rps,
        "local1_vs_kafka": local1["records_per_s"] / kafka_rps,
    }
    results["many_keys"] = {
        "keys": args.many_keys,
        "records": many_in.records,
        "bytes": many_in.cleanable_bytes,
        "kafka_buffer_bytes": buffer,
        "kafka_load_factor": load_factor,
        "kafka_capacity": capacity,
        "scaled_buffer": args.quick,
        "kafka": kafka_many,
        "tierlog": spark["many_keys"],
        "one_round": spark["many_keys"]["keys_mapped"] > capacity,
    }
    results["total_seconds"] = time.perf_counter() - started
    results["load_average_end"] = os.getloadavg()
    print_report(results, quick=args.quick)
    write_results(out, "compaction", results, chart, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
