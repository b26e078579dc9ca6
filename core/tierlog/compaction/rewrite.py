"""Pass 2 of a clean: which batches and records of a segment stay, and the bytes written.

Kafka's ``Cleaner.cleanInto`` with ``MemoryRecords.filterTo`` (KAFKA-LOGCLEANER.md section 3),
rule by rule, for one source segment at a time:

- the batch decision (``checkBatchRetention``): the last batch of every live producer is kept
  even when emptied (RETAIN_EMPTY), as is, in 4.3.1, the batch ending at the first uncleanable
  offset; a batch the transaction rules discard whose records may go is skipped unread
  (DELETE); any other batch goes if nothing in it survives (DELETE_EMPTY);
- the record decision (``shouldRetainRecord``): control records stay; a record is superseded
  when the offset map holds a later offset for its key; keyless records go; a tombstone stays
  until the batch's delete horizon has passed;
- writing: a batch whose records all survive and that needs no new horizon is copied byte for
  byte; otherwise it is rebuilt with its codec at the codec's default level, its producer
  fields, leader epoch, base offset and last offset (so sequences stay consistent), and a delete
  horizon of ``now + delete.retention.ms`` when it first keeps a tombstone or an emptied
  transaction's marker; a RETAIN_EMPTY batch with no survivor becomes a 61-byte header.

The offset map and the transaction decisions come in from outside (``RetentionContext``), so a
segment's rewrite needs nothing from other segments: one task each.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum

from tierlog.compaction.scan import iter_raw_batches, key_digest, records_of
from tierlog.compaction.summary import SummaryBuilder
from tierlog.compaction.txn import TxnDecisions
from tierlog.log.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG_MASK,
    CRC_FIELD,
    CRC_OFFSET,
    HEADER,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    RecordBatch,
    TimestampType,
    build_batch,
    read_batch_header,
)
from tierlog.log.crc import crc32c
from tierlog.log.record import NO_TIMESTAMP, Record
from tierlog.log.txn_index import AbortedTxn

__all__ = [
    "BatchRetention",
    "LastRecord",
    "RetentionContext",
    "RewriteStats",
    "empty_batch_header",
    "rewrite_segment",
]

LastRecord = tuple[int | None, int]
"""A live producer's last data offset (None if it has only written markers) and epoch: Kafka's
``LastRecord`` from ``UnifiedLog.lastRecordsOfActiveProducers``."""


class BatchRetention(Enum):
    DELETE = "delete"
    DELETE_EMPTY = "delete_empty"
    RETAIN_EMPTY = "retain_empty"


@dataclass(frozen=True, slots=True)
class RetentionContext:
    """Everything a segment's rewrite needs from the round (read once when it starts)."""

    now_ms: int
    delete_retention_ms: int
    first_uncleanable_offset: int
    map_latest_offset: int
    """The last offset the offset map covers (``endOffset - 1``); later records are copied."""
    producers: Mapping[int, LastRecord]
    decisions: TxnDecisions = field(default_factory=TxnDecisions)


@dataclass(slots=True)
class RewriteStats:
    """Counters of one rewrite, summed over a round (Kafka's ``CleanerStats`` figures)."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_written: int = 0
    batches_read: int = 0
    batches_written: int = 0
    invalid_records: int = 0
    """Keyless records dropped (Kafka: "Found N invalid messages during compaction")."""
    tombstones_kept: int = 0
    """Tombstones (null values) written."""

    def add(self, other: RewriteStats) -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def empty_batch_header(header: RecordBatch) -> bytes:
    """Kafka's ``DefaultRecordBatch.writeEmptyHeader`` for a batch whose records all went.

    Uncompressed, no records, the original base and last offsets, producer fields, leader epoch,
    timestamp type and max timestamp; base timestamp -1 and no delete horizon flag.
    """
    kept_flags = TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK
    attributes = header.attributes & kept_flags
    out = bytearray(RECORD_BATCH_OVERHEAD)
    HEADER.pack_into(
        out,
        0,
        header.base_offset,
        RECORD_BATCH_OVERHEAD - LOG_OVERHEAD,
        header.partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        header.last_offset_delta,
        NO_TIMESTAMP,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        0,
    )
    CRC_FIELD.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def _batch_retention(
    header: RecordBatch, ctx: RetentionContext, can_discard: bool
) -> tuple[BatchRetention, bool]:
    """``(decision, discard records)`` for a batch (Kafka's ``checkBatchRetention``)."""
    if header.is_control:
        horizon = header.delete_horizon_ms
        discard_records = can_discard and horizon is not None and horizon <= ctx.now_ms
    else:
        discard_records = can_discard
    if header.has_producer_id:
        last = ctx.producers.get(header.producer_id)
        if last is not None:
            last_data_offset, epoch = last
            if (
                header.last_offset == last_data_offset
                if last_data_offset is not None
                else header.is_control and header.producer_epoch == epoch
            ):
                return BatchRetention.RETAIN_EMPTY, discard_records
    if header.next_offset == ctx.first_uncleanable_offset:
        return BatchRetention.RETAIN_EMPTY, discard_records
    if discard_records:
        return BatchRetention.DELETE, discard_records
    return BatchRetention.DELETE_EMPTY, discard_records


def rewrite_segment(
    path: str | os.PathLike[str],
    ctx: RetentionContext,
    superseded: Callable[[int, bytes], bool],
    stats: RewriteStats,
    summary: SummaryBuilder | None = None,
) -> Iterator[tuple[RecordBatch, bytes, AbortedTxn | None]]:
    """The batches of the segment ``path`` that survive, as ``(header, bytes, index entry)``.

    ``superseded(offset, key)`` says whether the offset map holds a later offset for the key of
    the record at ``offset`` (the single-process cleaner looks the key's digest up in its map;
    a Spark task holds the set of its segment's superseded offsets, computed by a join).
    ``summary`` observes every batch written (the output's compaction summary).
    ``index entry`` is the aborted transaction a kept ABORT marker carries into the cleaned
    transaction index (None for every other batch).
    """
    name = str(path)
    now = ctx.now_ms
    latest_mapped = ctx.map_latest_offset
    for header, data in iter_raw_batches(path):
        stats.bytes_read += len(data)
        stats.batches_read += 1
        can_discard = (
            ctx.decisions.can_discard(header.base_offset)
            if header.is_transactional or header.is_control
            else False
        )
        retention, discard_records = _batch_retention(header, ctx, can_discard)
        if retention is BatchRetention.DELETE:
            continue
        records = records_of(header, data, name)
        stats.records_read += len(records)
        horizon = header.delete_horizon_ms
        retain_deletes = horizon is None or now < horizon
        kept: list[Record]
        tombstone = False
        if discard_records:
            kept = []
        elif header.is_control:
            kept = records
            tombstone = any(r.value is None for r in records)
        else:
            kept = []
            append = kept.append
            for record in records:
                offset = record.offset
                if offset > latest_mapped:
                    append(record)
                    tombstone = tombstone or record.value is None
                    continue
                key = record.key
                if key is None:
                    stats.invalid_records += 1
                elif not superseded(offset, key):
                    if record.value is not None:
                        append(record)
                    elif retain_deletes:
                        append(record)
                        tombstone = True
        index_entry = (
            ctx.decisions.index_entries.get(header.base_offset) if header.is_control else None
        )
        if kept:
            marker_for_empty_txn = can_discard and header.is_control
            need_horizon = (tombstone or marker_for_empty_txn) and horizon is None
            if len(kept) == len(records) and not need_horizon:
                out = data
                out_header = header
            else:
                new_horizon = now + ctx.delete_retention_ms if need_horizon else horizon
                append_time = header.timestamp_type == TimestampType.LOG_APPEND_TIME
                out = build_batch(
                    kept,
                    base_offset=header.base_offset,
                    compression=header.compression,
                    timestamp_type=header.timestamp_type,
                    log_append_time=header.max_timestamp if append_time else None,
                    producer_id=header.producer_id,
                    producer_epoch=header.producer_epoch,
                    base_sequence=header.base_sequence,
                    is_transactional=header.is_transactional,
                    is_control=header.is_control,
                    partition_leader_epoch=header.partition_leader_epoch,
                    delete_horizon_ms=new_horizon,
                    last_offset_delta=header.last_offset_delta,
                )
                out_header = read_batch_header(out, 0)
            if tombstone and not header.is_control:
                stats.tombstones_kept += sum(1 for r in kept if r.value is None)
        elif retention is BatchRetention.RETAIN_EMPTY:
            out = empty_batch_header(header)
            out_header = read_batch_header(out, 0)
        else:
            continue
        if summary is not None:
            summary.observe(
                out_header,
                kept,
                [key_digest(r.key) for r in kept if r.key is not None and not header.is_control],
            )
        stats.records_written += len(kept)
        stats.bytes_written += len(out)
        stats.batches_written += 1
        yield out_header, out, index_entry
