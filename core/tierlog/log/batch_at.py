"""Reading one batch at a byte position of a segment, with ``os.pread``, without a scan.

``reader.iter_batches`` walks a segment from a start position forward; the tools that check a
segment against what names positions in it (an index entry, a CRC error's position) need the
batch at one given position instead, and must tell "no batch starts here" from "a batch starts
here but is cut short". These helpers frame the v2 header at a position and read exact byte
ranges, raising the same typed errors as the reader (``CorruptRecordError`` naming the file and
position, ``UnsupportedRecordFormatError`` for a legacy magic byte).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from tierlog.log.batch import (
    HEADER,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    RecordBatch,
    bad_magic,
    check_batch_size,
    corrupt,
    decode_records,
)
from tierlog.log.record import NO_TIMESTAMP

__all__ = ["frame_at", "header_at", "pread_exact", "records_max_timestamp"]

_MAGIC_END: Final = 17
"""Bytes up to and including the magic byte of a batch header."""


def pread_exact(fd: int, size: int, position: int, path: Path) -> bytes:
    """Exactly ``size`` bytes at ``position``, or ``CorruptRecordError`` where the file ends."""
    data = os.pread(fd, size, position)
    if len(data) != size:
        raise corrupt(
            f"file ends early: {len(data)} of the {size} bytes expected could be read",
            position + len(data),
            str(path),
        )
    return data


def frame_at(fd: int, position: int, path: Path) -> RecordBatch:
    """The v2 header at ``position`` of a segment: magic 2 and a possible ``Length``.

    Whether the batch fits in the segment is the caller's question (``header_at`` asks it).
    """
    data = os.pread(fd, RECORD_BATCH_OVERHEAD, position)
    if len(data) < _MAGIC_END:
        raise corrupt(f"only {len(data)} bytes remain, no batch header", position, str(path))
    magic = data[_MAGIC_END - 1]
    if magic != MAGIC_V2:
        raise bad_magic(magic if magic < 128 else magic - 256, position, str(path))
    if len(data) < RECORD_BATCH_OVERHEAD:
        raise corrupt(f"only {len(data)} bytes remain, no batch header", position, str(path))
    header = RecordBatch._make(HEADER.unpack_from(data))
    check_batch_size(header.length, 1 << 62, position, str(path))  # the minimum length only
    return header


def header_at(fd: int, position: int, file_size: int, path: Path) -> RecordBatch:
    """The v2 header at ``position`` of a segment, checked to frame a batch inside the file."""
    header = frame_at(fd, position, path)
    check_batch_size(header.length, file_size - position, position, str(path))
    return header


def records_max_timestamp(fd: int, position: int, header: RecordBatch, path: Path) -> int:
    """The largest timestamp among a batch's records (what Kafka's dump tool computes, deep)."""
    block = pread_exact(
        fd, header.size_in_bytes - RECORD_BATCH_OVERHEAD, position + RECORD_BATCH_OVERHEAD, path
    )
    records = decode_records(header, block, path=str(path), position=position)
    return max((r.timestamp for r in records), default=NO_TIMESTAMP)
