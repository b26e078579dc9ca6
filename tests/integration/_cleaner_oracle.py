"""Kafka's LogCleaner as the oracle of tierlog's cleaner: the same log cleaned by both, round by
round (issue 12, section 4).

**Kafka's half** (``run_kafka_rounds``) runs on a private 4.3.1 broker whose cleaner is quick to
react (``log.cleaner.backoff.ms=100``). A compacted topic (one partition, small segments) is
created with cleaning held off (``min.compaction.lag.ms`` ten years: no segment is old enough).
Each round then goes:

1. hold cleaning (from round 2 on) and produce the round's phase of the workload
   (``_produce_compacted``), which rolls the active segment with a record larger than a segment:
   what the phase produced is then in sealed segments, cleanable (in round 3 a transaction is
   open across the roll and ends in the new active segment);
2. copy what tierlog needs: the whole partition directory in round 1, afterwards only the files of
   the segments from the previous round's active one on (the new data; the rest of tierlog's log
   is its own previous output), with the high watermark;
3. if the topic's tombstones are meant to expire, wait on the clock until the previous round's
   delete horizon has passed;
4. release cleaning (``min.compaction.lag.ms=0``) and wait until Kafka's
   ``cleaner-offset-checkpoint`` reaches the active segment's base, which Kafka writes once the
   round's segments are swapped in; then copy the cleaned partition directory.

The broker log's stats block (``cleaned log T-0 (dirty section = [a, b])``) shows that exactly one
round ran per step. Kafka's clock at a round's start is read back from what the round stamped:
every round keeps new tombstones, whose delete horizon is that clock plus ``delete.retention.ms``.

**tierlog's half** (``run_tierlog_rounds``) cleans its own copy with ``clean_partition_dir``: round
1 on Kafka's input, each later round on its previous output plus Kafka's new segment files, with
the high watermark in ``replication-offset-checkpoint`` and ``now_ms`` set to Kafka's clock of the
same round, so that every decision that depends on time (is a horizon past?) is made at the same
instant and the horizons it stamps have Kafka's values. Kafka's cleaner works on the log as the
broker holds it, never recovered; so the copy gets tierlog's clean-shutdown checkpoint
(``tierlog-offsets-checkpoint``) with the log end, and tierlog loads the files as they are instead
of rebuilding their indexes.

**Views** compared between the two: ``survivors`` (every segment, batch and record left, read
with tierlog's reader), the transaction indexes, the cleaner checkpoint, and what Kafka's
``DumpLogSegments`` reports about the files.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kafka.admin import ConfigResource, ConfigResourceType, OffsetSpec
from services._common import Service

from tierlog.compaction.offline import CleanSummary, clean_partition_dir
from tierlog.log.batch import ControlRecordType, RecordBatch, decode_control_record
from tierlog.log.reader import iter_batches, iter_batches_with_records
from tierlog.log.record import Record
from tierlog.log.recovery import OffsetsCheckpoint, write_offsets_checkpoint
from tierlog.log.txn_index import AbortedTxn, TransactionIndex

from ._broker import (
    active_segment_base,
    admin_client,
    create_topic,
    list_offset,
    partition_dir,
    wait_for,
)
from ._produce_compacted import produce_phase

SEGMENT_BYTES = 16_384
"""``internal.segment.bytes``: Kafka's test-only override of ``segment.bytes`` (whose minimum is
1 MiB) so that the workload fills several segments."""

TOPIC_CONFIG: Mapping[str, str] = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.01",
    "internal.segment.bytes": str(SEGMENT_BYTES),
    "segment.index.bytes": "1536",
    "index.interval.bytes": "100",
}
"""The topic's configuration while cleaning is allowed (plus ``delete.retention.ms``): dense
indexes (an entry every 100 bytes, so most batches have one) of a few KiB at most (the active
segment's are preallocated to that size). Not so small that the index clauses of Kafka's segment
grouping bind: then a cleaned group can hold more time-index entries than its sources did, and
Kafka 4.3.1's cleaner fails with "Attempt to append to a full time index" and marks the partition
uncleanable (seen with ``segment.index.bytes=64``)."""

HOLD_LAG_MS = 10 * 365 * 86_400_000
"""``min.compaction.lag.ms`` that holds cleaning off: every segment is younger than that."""

BROKER_PROPERTIES: Mapping[str, str] = {"log.cleaner.backoff.ms": "100"}
"""A cleaner thread with nothing to do looks again after 100 ms (default 15 s)."""

ROUNDS = 3
"""Three rounds: an aborted transaction's marker needs three to go (kept and indexed, stamped,
deleted)."""

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
SKIPPED_SUFFIXES = (".deleted", ".cleaned", ".swap", ".tmp")
"""Files a copy leaves out: segments Kafka swapped out and will delete after
``file.delete.delay.ms``, and the temporary files of a swap or checkpoint in progress."""

_STATS = re.compile(
    r"Log cleaner thread \d+ cleaned log (?P<log>\S+) \(dirty section = \[(?P<first>\d+), "
    r"(?P<end>\d+)\]\)"
)


# --- Kafka's offset checkpoint files --------------------------------------------------------------


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """A Kafka offset checkpoint file (``cleaner-offset-checkpoint``,
    ``replication-offset-checkpoint``): a version line ``0``, the entry count, then one
    ``topic partition offset`` line per entry. A missing or empty file (a broker creates it
    empty at start) has no entries."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    if not lines:
        return {}
    assert lines[:1] == ["0"], f"{path}: version line {lines[:1]}"
    assert int(lines[1]) == len(lines) - 2, f"{path}: count {lines[1]} for {len(lines) - 2} lines"
    entries = {}
    for line in lines[2:]:
        topic, partition, offset = line.split(" ")
        entries[(topic, int(partition))] = int(offset)
    return entries


def write_offset_checkpoint(path: Path, entries: Mapping[tuple[str, int], int]) -> None:
    """Write a Kafka offset checkpoint file (the format ``read_offset_checkpoint`` reads)."""
    body = "".join(f"{t} {p} {o}\n" for (t, p), o in sorted(entries.items()))
    path.write_text(f"0\n{len(entries)}\n{body}")


# --- survivors ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordView:
    """A record that survived, as compared: what a consumer sees of it."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


@dataclass(frozen=True)
class BatchView:
    """A batch that survived, every header field a cleaner decides or must keep.

    ``size`` and ``crc`` are not compared (a rebuilt compressed batch is only as long as the
    codec library makes it); ``delete_horizon_ms`` is, since both cleaners run a round at the
    same clock.
    """

    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    control: bool
    records_count: int
    codec: str
    timestamp_type: str
    max_timestamp: int
    partition_leader_epoch: int
    delete_horizon_ms: int | None
    marker: str | None
    """For a control batch with a record: ``ABORT`` or ``COMMIT`` and the coordinator epoch."""
    size: int = field(compare=False)
    crc: int = field(compare=False)
    records: tuple[RecordView, ...] = field(compare=False, repr=False)


@dataclass(frozen=True)
class SegmentView:
    base_offset: int
    batches: tuple[BatchView, ...]
    log_bytes: int = field(compare=False)
    index_bytes: int = field(compare=False)
    timeindex_bytes: int = field(compare=False)


@dataclass(frozen=True)
class Survivors:
    """Everything left in a partition directory, segment by segment."""

    segments: tuple[SegmentView, ...]

    @property
    def batches(self) -> list[BatchView]:
        return [b for s in self.segments for b in s.batches]

    @property
    def records(self) -> list[RecordView]:
        return [r for b in self.batches for r in b.records]

    @property
    def layout(self) -> list[tuple[int, int, int]]:
        """Each segment as (base offset, first batch base, last batch last offset)."""
        return [
            (s.base_offset, s.batches[0].base_offset, s.batches[-1].last_offset)
            if s.batches
            else (s.base_offset, -1, -1)
            for s in self.segments
        ]

    def horizons(self) -> set[int]:
        return {b.delete_horizon_ms for b in self.batches if b.delete_horizon_ms is not None}

    def below(self, offset: int) -> Survivors:
        """The segments whose base is below ``offset`` (the cleaned ones, for an active base)."""
        return Survivors(tuple(s for s in self.segments if s.base_offset < offset))


def _marker(batch: RecordBatch, records: list[Record]) -> str | None:
    if not batch.is_control or not records:
        return None
    control = decode_control_record(records[0])
    kind = control.type.name if control.type != ControlRecordType.UNKNOWN else "UNKNOWN"
    return f"{kind}/{control.coordinator_epoch}"


def batch_view(batch: RecordBatch, records: list[Record]) -> BatchView:
    return BatchView(
        base_offset=batch.base_offset,
        last_offset=batch.last_offset,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        transactional=batch.is_transactional,
        control=batch.is_control,
        records_count=batch.records_count,
        codec=batch.compression.kafka_name,
        timestamp_type=batch.timestamp_type.name,
        max_timestamp=batch.max_timestamp,
        partition_leader_epoch=batch.partition_leader_epoch,
        delete_horizon_ms=batch.delete_horizon_ms,
        marker=_marker(batch, records),
        size=batch.size_in_bytes,
        crc=batch.crc,
        records=tuple(
            RecordView(r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for r in records
        ),
    )


def segment_bases(directory: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in directory.glob("*.log"))


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def survivors(directory: Path) -> Survivors:
    """Every segment of the partition directory, with every batch and record, read (and each CRC
    checked) by tierlog's reader."""
    segments = []
    for base in segment_bases(directory):
        log = directory / f"{base:020d}.log"
        batches = tuple(batch_view(b, r) for _, b, r in iter_batches_with_records(log))
        segments.append(
            SegmentView(
                base,
                batches,
                log_bytes=_size(log),
                index_bytes=_size(log.with_suffix(".index")),
                timeindex_bytes=_size(log.with_suffix(".timeindex")),
            )
        )
    return Survivors(tuple(segments))


def txn_indexes(directory: Path) -> dict[int, list[AbortedTxn]]:
    """The aborted transactions of each segment's ``.txnindex`` (segments without entries left
    out), read with tierlog's ``TransactionIndex``."""
    out = {}
    for base in segment_bases(directory):
        path = directory / f"{base:020d}.txnindex"
        if not path.exists():
            continue
        index = TransactionIndex(base, path, writable=False)
        try:
            entries = index.all_aborted_txns()
        finally:
            index.close()
        if entries:
            out[base] = entries
    return out


def log_end_offset(directory: Path) -> int:
    """The offset after the last batch of the active segment (its base if it is empty)."""
    end = active_segment_base(directory)
    for _, header in iter_batches(directory / f"{end:020d}.log"):
        end = header.next_offset
    return end


# --- copying partition directories ----------------------------------------------------------------


def _copied(name: str) -> bool:
    return not name.endswith(SKIPPED_SUFFIXES)


def copy_partition(source: Path, target: Path, *, from_base: int = 0) -> list[str]:
    """Copy the partition's files into ``target`` (created if needed, files overwritten): every
    file of the segments whose base is at least ``from_base`` (``.log``, indexes, producer
    snapshot) and the partition's own files. Returns the names copied."""
    target.mkdir(parents=True, exist_ok=True)
    names = []
    for path in sorted(source.iterdir()):
        if not path.is_file() or not _copied(path.name):
            continue
        head = path.name[:20]
        if head.isdigit() and len(head) == 20 and int(head) < from_base:
            continue
        shutil.copy2(path, target / path.name)
        names.append(path.name)
    return names


# --- Kafka's half ---------------------------------------------------------------------------------


@dataclass
class KafkaRound:
    """One cleaning round of Kafka's cleaner, and the files tierlog needs to run the same round.

    Paths are relative to the run's directory (the run is saved as JSON and shared by the
    pytest workers).
    """

    number: int
    input_dir: str
    """Round 1: a copy of the whole partition before cleaning; later rounds: the files of the
    segments from the previous round's active one on (the data produced since)."""
    input_files: list[str]
    high_watermark: int
    active_base: int
    """The active segment's base when cleaning was released: the round's first uncleanable
    offset."""
    cleaned_dir: str
    """A copy of the partition directory after the round."""
    checkpoint: int
    """Kafka's ``cleaner-offset-checkpoint`` entry after the round."""
    dirty_section: tuple[int, int]
    """[first dirty offset, end offset) from the stats block Kafka's cleaner logged."""
    now_ms: int
    """Kafka's clock at the round's start (its newest delete horizon less the retention)."""
    released_at_ms: int
    observed_at_ms: int
    previous_horizon_ms: int | None
    """The newest delete horizon before the round (None in round 1)."""


@dataclass
class KafkaRun:
    name: str
    """The scenario's name (its files are in a directory of that name)."""
    topic: str
    delete_retention_ms: int
    expire: bool
    """Whether each round started after the previous round's horizons (tombstones and markers
    expire), or before them (they are kept and their horizons carried over)."""
    config: dict[str, str]
    """The topic's configuration while Kafka cleaned, as tierlog gets it."""
    rounds: list[KafkaRound]
    directory: str = ""
    """Where the run's files are (set when loaded, not saved)."""

    def path(self, relative: str) -> Path:
        return Path(self.directory) / relative

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("directory")
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], directory: Path) -> KafkaRun:
        rounds = [
            KafkaRound(**{**r, "dirty_section": tuple(r["dirty_section"])}) for r in data["rounds"]
        ]
        fields = {k: v for k, v in data.items() if k != "rounds"}
        return cls(**fields, rounds=rounds, directory=str(directory))


def alter_topic_result(broker: Service, topic: str, changes: Mapping[str, str]) -> str:
    """Set topic configs (IncrementalAlterConfigs); kafka-python's answer for the topic: ``OK``
    or ``[Error CODE] Name: message``."""
    with admin_client(broker) as admin:
        result = admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs=dict(changes))],
            raise_on_unknown=False,
        )
    return str(result["topic"][topic])


def alter_topic(broker: Service, topic: str, changes: Mapping[str, str]) -> None:
    """Change topic configs, then wait until the broker describes the new values (its log
    picks them up from the same metadata)."""
    result = alter_topic_result(broker, topic, changes)
    assert result == "OK", f"altering {topic} with {dict(changes)}: {result}"
    with admin_client(broker) as admin:

        def applied() -> bool:
            described = admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="modified"
            )
            values = {k: v.get("value") for k, v in described["topic"][topic].items()}
            return all(values.get(k) == v for k, v in changes.items())

        wait_for(applied, f"{topic} to have {dict(changes)}", interval=0.1)


def cleaner_checkpoint(broker: Service, topic: str) -> int | None:
    """Kafka's cleaner checkpoint for partition 0 of ``topic`` (None before its first round)."""
    path = broker.directory / "data" / CLEANER_CHECKPOINT
    return read_offset_checkpoint(path).get((topic, 0))


def cleaner_rounds(broker: Service, topic: str) -> list[tuple[int, int]]:
    """The dirty sections of the rounds Kafka's cleaner logged for partition 0 of ``topic``."""
    text = broker.log_path.read_text(errors="replace")
    return [
        (int(m["first"]), int(m["end"])) for m in _STATS.finditer(text) if m["log"] == f"{topic}-0"
    ]


def wait_for_clock(at_ms: int, what: str) -> None:
    """Wait until the wall clock reaches ``at_ms``."""
    wait_for(lambda: time.time() * 1000 >= at_ms, what, timeout=120, interval=0.05)


def release_cleaning(broker: Service, topic: str, active: int) -> tuple[int, tuple[int, int]]:
    """Allow cleaning (``min.compaction.lag.ms=0``) and wait for Kafka's round: its checkpoint
    at ``active`` (the active segment's base: everything before is cleanable) and its stats
    block, exactly one. Returns the checkpoint and the round's dirty section."""
    logged = len(cleaner_rounds(broker, topic))
    alter_topic(broker, topic, {"min.compaction.lag.ms": "0"})

    def checkpointed() -> int | None:
        checkpoint = cleaner_checkpoint(broker, topic)
        return checkpoint if checkpoint is not None and checkpoint >= active else None

    checkpoint = wait_for(checkpointed, f"Kafka's cleaner to clean {topic} up to {active}")

    def stats_logged() -> list[tuple[int, int]] | None:
        sections = cleaner_rounds(broker, topic)
        return sections if len(sections) > logged else None

    sections = wait_for(stats_logged, f"the stats block of {topic}'s round")
    assert len(sections) == logged + 1, f"{len(sections) - logged} rounds instead of one"
    return checkpoint, sections[-1]


def run_kafka_rounds(
    broker: Service, name: str, topic: str, into: Path, *, delete_retention_ms: int, expire: bool
) -> KafkaRun:
    """Kafka's half of the oracle (see the module docstring); files under ``into``."""
    config = {**TOPIC_CONFIG, "delete.retention.ms": str(delete_retention_ms)}
    create_topic(broker, topic, {**config, "min.compaction.lag.ms": str(HOLD_LAG_MS)})
    source = partition_dir(broker, topic)
    released = {**config, "min.compaction.lag.ms": "0"}
    run = KafkaRun(name, topic, delete_retention_ms, expire, released, [], str(into))
    previous_active = 0
    previous_horizon: int | None = None
    horizons_seen: set[int] = set()
    for number in range(1, ROUNDS + 1):
        if number > 1:
            alter_topic(broker, topic, {"min.compaction.lag.ms": str(HOLD_LAG_MS)})
        produce_phase(broker, topic, number)
        active = active_segment_base(source)
        assert active > previous_active, f"round {number}'s data did not roll"
        high_watermark = list_offset(broker, topic, OffsetSpec.LATEST)
        assert high_watermark == log_end_offset(source), "the high watermark is not the log end"
        input_dir = f"round-{number}/input/{topic}-0"
        input_files = copy_partition(source, into / input_dir, from_base=previous_active)

        if expire and previous_horizon is not None:
            wait_for_clock(previous_horizon, f"round {number - 1}'s delete horizon")
        released_at = int(time.time() * 1000)
        checkpoint, section = release_cleaning(broker, topic, active)
        observed_at = int(time.time() * 1000)
        cleaned_dir = f"round-{number}/kafka/{topic}-0"
        copy_partition(source, into / cleaned_dir)
        assert active_segment_base(into / cleaned_dir) == active, "a segment rolled meanwhile"

        stamped = survivors(into / cleaned_dir).horizons() - horizons_seen
        assert len(stamped) == 1, f"Kafka's round {number} stamped horizons {sorted(stamped)}"
        (newest,) = stamped
        now_ms = newest - delete_retention_ms
        assert released_at <= now_ms <= observed_at, (
            f"round {number}'s clock {now_ms} read from its horizons is outside "
            f"[{released_at}, {observed_at}]"
        )
        horizons_seen |= stamped
        run.rounds.append(
            KafkaRound(
                number=number,
                input_dir=input_dir,
                input_files=input_files,
                high_watermark=high_watermark,
                active_base=active,
                cleaned_dir=cleaned_dir,
                checkpoint=checkpoint,
                dirty_section=section,
                now_ms=now_ms,
                released_at_ms=released_at,
                observed_at_ms=observed_at,
                previous_horizon_ms=previous_horizon,
            )
        )
        previous_active, previous_horizon = active, newest
    return run


def save_runs(runs: Iterable[KafkaRun]) -> dict[str, Any]:
    return {"runs": [r.to_json() for r in runs]}


def load_runs(directory: Path, facts: Mapping[str, Any]) -> list[KafkaRun]:
    """The runs ``save_runs`` saved, each scenario's files in ``directory / name``."""
    return [KafkaRun.from_json(r, directory / r["name"]) for r in facts["runs"]]


# --- tierlog's half -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TierlogRound:
    number: int
    now_ms: int
    summary: CleanSummary
    cleaned_dir: Path
    """A copy of tierlog's partition directory after the round."""
    checkpoint: int | None
    """tierlog's entry in ``cleaner-offset-checkpoint`` after the round."""


def prepare_round_input(run: KafkaRun, kafka_round: KafkaRound, directory: Path) -> None:
    """Put Kafka's new files of ``kafka_round`` into tierlog's partition ``directory`` and the
    checkpoints a broker would have beside them: the high watermark
    (``replication-offset-checkpoint``) and, since Kafka cleans its files as they are, tierlog's
    clean-shutdown checkpoint at the log end (no recovery rebuilds their indexes)."""
    source = run.path(kafka_round.input_dir)
    for name in kafka_round.input_files:
        shutil.copy2(source / name, directory / name)
    logdir = directory.parent
    write_offset_checkpoint(
        logdir / REPLICATION_CHECKPOINT, {(run.topic, 0): kafka_round.high_watermark}
    )
    log_end = log_end_offset(directory)
    assert log_end == kafka_round.high_watermark
    write_offsets_checkpoint(
        directory,
        OffsetsCheckpoint(
            recovery_point=log_end,
            log_start_offset=0,
            high_watermark=log_end,
            clean_shutdown=True,
        ),
        sync=False,
    )


def run_tierlog_rounds(
    run: KafkaRun,
    into: Path,
    clean: Callable[..., CleanSummary] = clean_partition_dir,
) -> list[TierlogRound]:
    """tierlog's half: the rounds of ``run`` on tierlog's own copy under ``into``."""
    directory = into / "logdir" / f"{run.topic}-0"
    directory.mkdir(parents=True)
    rounds = []
    for kafka_round in run.rounds:
        prepare_round_input(run, kafka_round, directory)
        summary = clean(directory, config=dict(run.config), now_ms=kafka_round.now_ms)
        cleaned = into / f"round-{kafka_round.number}" / directory.name
        copy_partition(directory, cleaned)
        checkpoint = read_offset_checkpoint(directory.parent / CLEANER_CHECKPOINT).get(
            (run.topic, 0)
        )
        rounds.append(
            TierlogRound(kafka_round.number, kafka_round.now_ms, summary, cleaned, checkpoint)
        )
    return rounds


# --- comparing ------------------------------------------------------------------------------------


SegmentSizes = tuple[int, int, int, int]
"""A source segment as Kafka's grouping sees it: base offset, ``.log``, offset index and time
index bytes."""


def segment_sizes(directory: Path, *, below: int) -> list[SegmentSizes]:
    """The sizes of the (sealed) segments of ``directory`` whose base is below ``below``."""
    return [
        (
            base,
            _size(directory / f"{base:020d}.log"),
            _size(directory / f"{base:020d}.index"),
            _size(directory / f"{base:020d}.timeindex"),
        )
        for base in segment_bases(directory)
        if base < below
    ]


def grouped_alike(
    kafka: Sequence[SegmentSizes], ours: Sequence[SegmentSizes], config: Mapping[str, str]
) -> bool:
    """Whether Kafka's grouping must group two rounds' source segments alike.

    ``groupSegmentsBySize`` grows a group while the sums of the ``.log``, offset index and time
    index sizes stay within ``segment.bytes`` (``internal.segment.bytes``) and
    ``segment.index.bytes`` (the offset-span clause depends only on the bases). Sizes differ
    between the sides where one codec library made a rebuilt batch longer than the other did;
    when every run of consecutive segments fits on one side exactly when it fits on the other,
    the greedy grouping is the same on both.
    """
    if [s[0] for s in kafka] != [s[0] for s in ours]:
        return False
    segment_bytes = int(config.get("internal.segment.bytes") or config["segment.bytes"])
    index_bytes = int(config["segment.index.bytes"])
    limits = (segment_bytes, index_bytes, index_bytes)

    def fits(sizes: Sequence[SegmentSizes], start: int, end: int) -> bool:
        return all(
            sum(s[field] for s in sizes[start:end]) <= limit
            for field, limit in zip((1, 2, 3), limits, strict=True)
        )

    return all(
        fits(kafka, i, j) == fits(ours, i, j)
        for i in range(len(kafka))
        for j in range(i + 2, len(kafka) + 1)
    )


def first_difference(kafka: Sequence[Any], ours: Sequence[Any]) -> str:
    """Where two lists first differ, for an assertion message."""
    for i, (k, t) in enumerate(zip(kafka, ours, strict=False)):
        if k != t:
            return f"item {i}: Kafka {k!r}\n tierlog {t!r}"
    return f"Kafka has {len(kafka)} items, tierlog {len(ours)}"


_REPORT_HEADER = re.compile(r"(?P<kind>.+) in :(?P<path>.+)")


def verify_report(stderr: str) -> dict[tuple[str, str], list[str]]:
    """``DumpLogSegments --verify-index-only``'s findings, by kind (``Mismatches``, ``Found
    timestamp mismatch``, ``The following indexed offsets are not found``...) and file path."""
    report: dict[tuple[str, str], list[str]] = {}
    current: list[str] | None = None
    for line in stderr.split("\n"):
        header = _REPORT_HEADER.fullmatch(line)
        if header is not None:
            current = report.setdefault((header["kind"], header["path"]), [])
        elif line.strip() and current is not None:
            current.append(line.strip())
    return report


def dump_fields(batch: Mapping[str, Any]) -> dict[str, Any]:
    """A batch of ``DumpLogSegments --deep-iteration`` without what depends on how a codec
    library compressed it (position, size, CRC)."""
    out = {k: v for k, v in batch.items() if k not in ("position", "size", "crc", "records")}
    out["records"] = batch.get("records", [])
    return out
