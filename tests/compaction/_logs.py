"""Builders for the log-cleaner tests: hand-built segment files, compacted local logs, readers.

Two ways to get a log to clean:

- **segment files by hand** (``data_batch``, ``marker_batch``, ``write_segment``): batches with
  the offsets, producer fields, codecs and timestamps a test wants, written straight to a
  ``.log`` file, for the per-segment steps (scan, rewrite, writer) that read files;
- **a local log** (``CompactedLog``): ``LocalLog.open`` + ``append_as_leader`` with the producer
  bookkeeping Kafka's producer state demands (sequences per producer, transactions ended by the
  coordinator's markers), for whole cleaning rounds.

And the views the assertions compare (Kafka's ``LogCleanerTest`` helpers): the keys, the offsets
of records with a key and a value, the last offset of every batch, the last sequence per
producer, the batches of a segment file with their records (every CRC checked on the way).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.compaction.rewrite import RetentionContext, RewriteStats, rewrite_segment
from tierlog.compaction.scan import KeyMap, scan_segment
from tierlog.compaction.txn import AbortedIndex, TxnDecisions, decide_transactions
from tierlog.log.batch import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    ControlRecordType,
    RecordBatch,
    TimestampType,
    build_batch,
    build_control_batch,
)
from tierlog.log.compression import CompressionType
from tierlog.log.files import log_file
from tierlog.log.local_log import LocalLog
from tierlog.log.reader import iter_batches_with_records
from tierlog.log.record import Header, Record
from tierlog.log.txn_index import AbortedTxn

NOW = 1_700_000_000_000
"""The tests' wall clock (ms); record timestamps are near it."""
DAY = 86_400_000
"""Kafka's default ``delete.retention.ms``."""

KV = tuple[bytes | None, bytes | None]
"""A record as a test writes it: (key, value); None is null."""


def kv(key: str | int | None, value: str | int | None = "v") -> KV:
    """A (key, value) pair from short test values (ints and strings become UTF-8 bytes)."""

    def enc(x: str | int | None) -> bytes | None:
        return None if x is None else str(x).encode()

    return enc(key), enc(value)


# Hand-built batches and segment files ------------------------------------------------------------


def data_batch(
    base: int,
    *records: KV,
    pid: int = NO_PRODUCER_ID,
    epoch: int = NO_PRODUCER_EPOCH,
    seq: int = NO_SEQUENCE,
    txn: bool = False,
    codec: CompressionType = CompressionType.NONE,
    ts: int | Sequence[int] = NOW,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    leader_epoch: int = 0,
    headers: Sequence[tuple[Header, ...]] | None = None,
    offsets: Sequence[int] | None = None,
    last_offset_delta: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """One v2 batch whose records get offsets ``base, base+1, ...`` (or ``offsets``)."""
    stamps = [ts] * len(records) if isinstance(ts, int) else list(ts)
    offs = list(offsets) if offsets is not None else [base + i for i in range(len(records))]
    hdrs = list(headers) if headers is not None else [()] * len(records)
    recs = [
        Record(o, t, k, v, h) for o, t, (k, v), h in zip(offs, stamps, records, hdrs, strict=True)
    ]
    return build_batch(
        recs,
        base_offset=base,
        compression=codec,
        timestamp_type=timestamp_type,
        log_append_time=log_append_time,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
        partition_leader_epoch=leader_epoch,
        last_offset_delta=last_offset_delta,
        delete_horizon_ms=delete_horizon_ms,
    )


def marker_batch(
    base: int, kind: ControlRecordType, pid: int, epoch: int = 0, ts: int = NOW
) -> bytes:
    """A COMMIT or ABORT marker at ``base`` (coordinator epoch 0)."""
    return build_control_batch(
        kind, 0, base_offset=base, timestamp=ts, producer_id=pid, producer_epoch=epoch
    )


def write_segment(directory: Path, base: int, batches: Iterable[bytes]) -> Path:
    """Write ``<base>.log`` in ``directory`` holding ``batches`` back to back."""
    directory.mkdir(parents=True, exist_ok=True)
    path = log_file(directory, base)
    path.write_bytes(b"".join(batches))
    return path


@dataclass(frozen=True)
class Batch:
    """A batch read back from a file: its header, records and bytes."""

    position: int
    header: RecordBatch
    records: list[Record]
    data: bytes


def read_file_batches(path: Path) -> list[Batch]:
    """Every batch of a segment file, CRC checked, with its records and exact bytes."""
    raw = path.read_bytes()
    return [
        Batch(pos, header, records, raw[pos : pos + header.size_in_bytes])
        for pos, header, records in iter_batches_with_records(path, verify_crc=True)
    ]


def read_buffer_batches(data: bytes) -> list[Batch]:
    """Every batch of an in-memory buffer, CRC checked."""
    return [
        Batch(pos, header, records, data[pos : pos + header.size_in_bytes])
        for pos, header, records in iter_batches_with_records(data, verify_crc=True)
    ]


# One round on hand-built files, through the real per-segment steps -------------------------------


@dataclass
class FileRound:
    """What ``clean_files`` produced: per source file the surviving batches' bytes."""

    outputs: list[bytes]
    entries: list[list[AbortedTxn]]
    stats: RewriteStats
    offset_map: KeyMap
    decisions: TxnDecisions

    def batches(self, i: int = 0) -> list[Batch]:
        return read_buffer_batches(self.outputs[i])

    def all_batches(self) -> list[Batch]:
        return [b for i in range(len(self.outputs)) for b in self.batches(i)]


def clean_files(
    paths: Sequence[Path],
    *,
    now: int = NOW,
    delete_retention_ms: int = DAY,
    first_dirty_offset: int = 0,
    end_offset: int | None = None,
    producers: dict[int, tuple[int | None, int]] | None = None,
    aborted: Sequence[AbortedTxn] = (),
    map_latest_offset: int | None = None,
) -> FileRound:
    """Pass 1 (``scan_segment``), the transaction decisions and pass 2 (``rewrite_segment``)
    over segment files in order, as a cleaner round does (without writing segments).

    ``end_offset`` defaults to the next offset after the last batch of the last file (the
    round's first uncleanable offset); ``map_latest_offset`` to ``end_offset - 1``.
    """
    if end_offset is None:
        last = read_file_batches(paths[-1])
        end_offset = last[-1].header.next_offset if last else 0
    index = AbortedIndex(aborted)
    offset_map: KeyMap = {}
    events = []
    for path in paths:
        scan = scan_segment(
            path, aborted=index, first_dirty_offset=first_dirty_offset, end_offset=end_offset
        )
        offset_map.update(scan.keys)
        events.extend(scan.events)
    decisions = decide_transactions(events, index.entries)
    ctx = RetentionContext(
        now_ms=now,
        delete_retention_ms=delete_retention_ms,
        first_uncleanable_offset=end_offset,
        map_latest_offset=end_offset - 1 if map_latest_offset is None else map_latest_offset,
        producers=producers or {},
        decisions=decisions,
    )

    def superseded(offset: int, key: bytes) -> bool:
        return offset_map.get(key, -1) > offset

    stats = RewriteStats()
    outputs: list[bytes] = []
    entries: list[list[AbortedTxn]] = []
    for path in paths:
        out = bytearray()
        kept_entries: list[AbortedTxn] = []
        for _, data, entry in rewrite_segment(path, ctx, superseded, stats):
            out += data
            if entry is not None:
                kept_entries.append(entry)
        outputs.append(bytes(out))
        entries.append(kept_entries)
    return FileRound(outputs, entries, stats, offset_map, decisions)


# A compacted local log ---------------------------------------------------------------------------


class Clock:
    """A settable clock in ms for ``LocalLog.open``."""

    def __init__(self, now: int = NOW) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


COMPACT_PROPS: dict[str, object] = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": 0.0,
    "min.compaction.lag.ms": 0,
    "segment.index.bytes": 4096,
    "index.interval.bytes": 1,
    "message.timestamp.after.max.ms": 2**62,
    "message.timestamp.before.max.ms": 2**62,
}


@dataclass
class CompactedLog:
    """A ``LocalLog`` of a compacted topic and the producers writing to it.

    ``put`` appends plain (non-idempotent) keyed records; ``idempotent`` and ``txn`` append a
    producer's batch with the next sequence of that producer (Kafka's producer state checks
    them); ``commit``/``abort`` append the coordinator's marker. Every append is committed at
    once (the high watermark follows the log end), as on a single-replica partition.
    """

    log: LocalLog
    clock: Clock
    sequences: dict[int, int] = field(default_factory=dict)
    epochs: dict[int, int] = field(default_factory=dict)

    @classmethod
    def open(
        cls,
        directory: Path,
        props: Mapping[str, object] | None = None,
        *,
        clock: Clock | None = None,
    ) -> CompactedLog:
        """A new (or existing) log in ``directory``: ``COMPACT_PROPS`` overridden by ``props``."""
        config = {**COMPACT_PROPS, **(props or {})}
        clock = clock or Clock()
        log = LocalLog.open(
            directory, config, clock=clock, sync=False, high_watermark_follows_leo=True
        )
        return cls(log, clock)

    def reopen(self) -> None:
        """Close and load the directory again (producer state rebuilt from the files)."""
        config = self.log.config
        directory = self.log.dir
        self.log.close()
        self.log = LocalLog.open(
            directory, config, clock=self.clock, sync=False, high_watermark_follows_leo=True
        )

    def _records(self, kvs: Sequence[KV], ts: int | None) -> list[Record]:
        stamp = self.clock.now if ts is None else ts
        return [Record(i, stamp, k, v) for i, (k, v) in enumerate(kvs)]

    def put(self, *kvs: KV, ts: int | None = None, **batch_args: object) -> tuple[int, int]:
        """Append one plain batch; returns its (first, last) offsets."""
        data = build_batch(self._records(kvs, ts), **batch_args)  # type: ignore[arg-type]
        info = self.log.append_as_leader(data, 0)
        return info.first_offset, info.last_offset

    def producer_batch(self, pid: int, kvs: Sequence[KV], ts: int | None, txn: bool) -> bytes:
        """The producer's next batch (its sequence advanced), not appended."""
        seq = self.sequences.get(pid, 0)
        self.sequences[pid] = seq + len(kvs)
        return build_batch(
            self._records(kvs, ts),
            producer_id=pid,
            producer_epoch=self.epochs.get(pid, 0),
            base_sequence=seq,
            is_transactional=txn,
        )

    def idempotent(self, pid: int, *kvs: KV, ts: int | None = None) -> tuple[int, int]:
        info = self.log.append_as_leader(self.producer_batch(pid, kvs, ts, False), 0)
        return info.first_offset, info.last_offset

    def txn(self, pid: int, *kvs: KV, ts: int | None = None) -> tuple[int, int]:
        info = self.log.append_as_leader(self.producer_batch(pid, kvs, ts, True), 0)
        return info.first_offset, info.last_offset

    def _marker(self, kind: ControlRecordType, pid: int) -> int:
        data = build_control_batch(
            kind,
            0,
            timestamp=self.clock.now,
            producer_id=pid,
            producer_epoch=self.epochs.get(pid, 0),
        )
        info = self.log.append_as_leader(data, 0, origin="coordinator")
        return info.first_offset

    def commit(self, pid: int) -> int:
        return self._marker(ControlRecordType.COMMIT, pid)

    def abort(self, pid: int) -> int:
        return self._marker(ControlRecordType.ABORT, pid)

    def roll(self) -> None:
        self.log.roll()


def log_batches(log: LocalLog) -> list[Batch]:
    """Every batch of every segment file of ``log``, in order (CRC checked)."""
    return [b for seg in log.segments for b in read_file_batches(seg.log_path)]


def keys_in_log(log: LocalLog) -> list[bytes]:
    """Kafka's ``LogTestUtils.keysInLog``: keys of data records with a key and a value."""
    return [
        r.key
        for b in log_batches(log)
        if not b.header.is_control
        for r in b.records
        if r.key is not None and r.value is not None
    ]


def offsets_in_log(log: LocalLog) -> list[int]:
    """Kafka's ``offsetsInLog``: offsets of records with a key and a value (markers too)."""
    return [
        r.offset
        for b in log_batches(log)
        for r in b.records
        if r.key is not None and r.value is not None
    ]


def last_offsets_per_batch(log: LocalLog) -> list[int]:
    return [b.header.last_offset for b in log_batches(log)]


def base_offsets_per_batch(log: LocalLog) -> list[int]:
    return [b.header.base_offset for b in log_batches(log)]


def last_sequences(log: LocalLog) -> dict[int, int]:
    """Kafka's ``lastSequencesInLog``: per producer, the last sequence of its last data batch."""
    out: dict[int, int] = {}
    for b in log_batches(log):
        if not b.header.is_control and b.header.has_producer_id:
            out[b.header.producer_id] = b.header.last_sequence
    return out


def aborted_txns(log: LocalLog) -> list[AbortedTxn]:
    """Every entry of every transaction index of ``log``, in segment order."""
    return [e for seg in log.segments for e in seg.txn_index.all_aborted_txns()]


def segment_files(directory: Path) -> list[str]:
    """The names of the segment and index files in ``directory`` (sorted)."""
    return sorted(
        n
        for n in os.listdir(directory)
        if n.split(".", 1)[-1].split(".")[0] in ("log", "index", "timeindex", "txnindex")
    )
