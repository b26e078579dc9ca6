"""Reading one segment for a clean: its batches, its keys (pass 1), its transaction events.

Every function here reads a single segment file and needs nothing from other segments except
what it is handed (the aborted transactions of the round), so each is one independent task: the
single-process cleaner calls them in a loop, the Spark engine in ``mapPartitions``.

Kafka's ``SkimpyOffsetMap`` identifies a key by the MD5 digest of its bytes. The distributed
engine does too (``iter_segment_digests``): a digest is 16 bytes whatever the key's length, two
fixed-width columns that Spark shuffles and aggregates without touching variable-length data,
and it merges exactly the keys Kafka's map would merge. The in-process engine keys its dict by
the key bytes (``scan_segment``): Python hashes bytes faster than it computes an MD5, and the
identity is the same short of an MD5 collision. Digests (``key_digest``) are also the identity
of the Bloom filters, whose size must not depend on key length.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from tierlog.compaction.txn import AbortedIndex, MarkerKind, TxnEvent
from tierlog.log.batch import (
    RECORD_BATCH_OVERHEAD,
    ControlRecordType,
    RecordBatch,
    control_record_type,
    decode_records,
)
from tierlog.log.reader import iter_batches
from tierlog.log.record import Record

__all__ = [
    "BatchDigests",
    "KeyMap",
    "SegmentScan",
    "iter_raw_batches",
    "key_digest",
    "marker_kind",
    "scan_segment",
    "iter_segment_digests",
]

KeyMap = dict[bytes, int]
"""Key -> the latest offset of a record with that key (the in-process engine's offset map).

The in-process engine keys its map by the key bytes themselves: Python hashes bytes far faster
than it computes an MD5, and two keys differ by their bytes exactly when their digests differ,
short of an MD5 collision (where Kafka's map would merge two keys and this one does not). The
distributed engine joins on the key bytes too (Spark hashes them in the JVM)."""


def key_digest(key: bytes) -> bytes:
    """The 16-byte MD5 digest that identifies a key in the offset map (Kafka's hash)."""
    return hashlib.md5(key, usedforsecurity=False).digest()


def iter_raw_batches(path: str | os.PathLike[str]) -> Iterator[tuple[RecordBatch, bytes]]:
    """Every batch of the segment file ``path``: its header and its bytes (CRC checked).

    The file is streamed (the shallow reader frames and checks each batch; the bytes are then
    read with ``pread``), so memory stays at one batch whatever the segment's size.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        with open(fd, "rb", closefd=False) as f:
            for position, header in iter_batches(f, verify_crc=True):
                size = header.size_in_bytes
                data = os.pread(fd, size, position)
                if len(data) != size:
                    raise OSError(f"short read of {size} bytes at {position} in {path}")
                yield header, data
    finally:
        os.close(fd)


def records_of(header: RecordBatch, data: bytes, path: str | None = None) -> list[Record]:
    """Decode the records of a batch read by ``iter_raw_batches``."""
    return decode_records(header, memoryview(data)[RECORD_BATCH_OVERHEAD:], path=path)


def marker_kind(header: RecordBatch, records: list[Record]) -> MarkerKind:
    """What a control batch is for the transaction rules (its first record's type)."""
    if not records:
        return MarkerKind.EMPTY
    kind, _ = control_record_type(records[0].key)
    if kind == ControlRecordType.COMMIT:
        return MarkerKind.COMMIT
    if kind == ControlRecordType.ABORT:
        return MarkerKind.ABORT
    return MarkerKind.OTHER


@dataclass(slots=True)
class SegmentScan:
    """What one read of a segment found: pass-1 keys and the transaction events."""

    keys: KeyMap = field(default_factory=dict)
    """Key -> latest offset, for keyed records at or past the first dirty offset in
    batches that are neither control batches nor aborted."""
    events: list[TxnEvent] = field(default_factory=list)
    """One per transactional or control batch, in offset order."""
    bytes_read: int = 0
    records_read: int = 0
    """Records decoded for the offset map."""


def scan_segment(
    path: str | os.PathLike[str],
    *,
    aborted: AbortedIndex,
    first_dirty_offset: int | None,
    end_offset: int,
) -> SegmentScan:
    """Read one segment once: its keys for the offset map (when ``first_dirty_offset`` is not
    None) and its transaction events.

    Pass 1 (Kafka's ``buildOffsetMapForSegment``) skips control batches and the batches of
    aborted transactions, and maps every keyed record in ``[first_dirty_offset, end_offset)``;
    keyless records are not mapped. Only the batches that pass 1 maps and the control batches
    are decompressed; the rest is a shallow scan.
    """
    scan = SegmentScan()
    name = str(path)
    keys = scan.keys
    events = scan.events
    for header, data in iter_raw_batches(path):
        scan.bytes_read += len(data)
        if header.base_offset >= end_offset:
            break
        if header.is_control:
            records = records_of(header, data, name)
            events.append(
                TxnEvent(
                    header.base_offset,
                    header.last_offset,
                    header.producer_id,
                    marker_kind(header, records),
                )
            )
            continue
        if header.is_transactional:
            pid = header.producer_id
            events.append(TxnEvent(header.base_offset, header.last_offset, pid, MarkerKind.NONE))
            if aborted.is_aborted(header.producer_id, header.last_offset):
                continue
        if first_dirty_offset is None or header.last_offset < first_dirty_offset:
            continue
        records = records_of(header, data, name)
        scan.records_read += len(records)
        if header.base_offset >= first_dirty_offset and header.last_offset < end_offset:
            for record in records:  # the common case: the whole batch is in the range
                key = record.key
                if key is not None:
                    keys[key] = record.offset
        else:
            for record in records:
                key = record.key
                if key is not None and first_dirty_offset <= record.offset < end_offset:
                    keys[key] = record.offset
    return scan


class BatchDigests(NamedTuple):
    """What one batch contributes to the distributed scan (see ``iter_segment_digests``)."""

    size: int
    records: int
    """Records decoded."""
    event: TxnEvent | None
    offsets: bytes
    """The offsets of the batch's keyed records below the end offset, little-endian int64."""
    digests: bytes
    """Their keys' MD5 digests, 16 bytes each, in the same order."""


def iter_segment_digests(
    path: str | os.PathLike[str], *, aborted: AbortedIndex, end_offset: int
) -> Iterator[BatchDigests]:
    """Read one segment for the distributed engine, batch by batch, as packed arrays.

    Every keyed record of a batch that is neither a control batch nor aborted comes out as an
    (offset, key digest) pair: every one, not only the latest per key, since the engine finds
    the superseded records of a clean-section segment by joining these pairs with the offset
    map. Every transactional or control batch comes out as its ``TxnEvent``. The pairs are
    extracted by ``key_digests.batch_key_digests`` (no Python object per record), so a batch
    costs a few calls whatever its record count.
    """
    from tierlog.compaction.key_digests import batch_key_digests

    name = str(path)
    for header, data in iter_raw_batches(path):
        if header.base_offset >= end_offset:
            break
        if header.is_control:
            records = records_of(header, data, name)
            kind = marker_kind(header, records)
            marker = TxnEvent(header.base_offset, header.last_offset, header.producer_id, kind)
            yield BatchDigests(len(data), len(records), marker, b"", b"")
            continue
        event: TxnEvent | None = None
        if header.is_transactional:
            pid = header.producer_id
            event = TxnEvent(header.base_offset, header.last_offset, pid, MarkerKind.NONE)
            if aborted.is_aborted(pid, header.last_offset):
                yield BatchDigests(len(data), 0, event, b"", b"")
                continue
        found = batch_key_digests(header, data, end_offset=end_offset, path=name)
        yield BatchDigests(len(data), found.records, event, found.offsets, found.digests)


def segment_facts(path: Path) -> tuple[int | None, int]:
    """``(first batch max timestamp, largest record timestamp)`` of a segment file, for
    planning when no index is at hand (-1 for an empty segment's largest timestamp)."""
    first: int | None = None
    largest = -1
    for _, header in iter_batches(path, verify_crc=False):
        if first is None:
            first = header.max_timestamp
        largest = max(largest, header.max_timestamp)
    return first, largest
