"""Pass 1 of a compaction scan, batch by batch: the offsets and MD5 digests of the keyed records.

Kafka's ``SkimpyOffsetMap`` knows a key by the 16-byte MD5 digest of its bytes. A distributed
scan that ships keys as two int64 columns (the digest) beside an int64 offset column needs, per
batch, only those numbers; building a ``Record`` per record to get them costs about 1 us a record
in Python. ``batch_key_digests`` gives them as two packed byte strings instead, ready for
``numpy.frombuffer``::

    d = batch_key_digests(header, data, end_offset=end)
    offsets = numpy.frombuffer(d.offsets, dtype="<i8")
    digests = numpy.frombuffer(d.digests, dtype="<i8").reshape(-1, 2)  # digest halves

The work is done by ``tierlog.log._speedups.key_digests`` (C, with its own MD5) when the
accelerator is built, else by ``key_digests_pure`` (``decode_block_pure`` and ``hashlib``), the
reference: both give the same bytes and raise the same ``BlockError`` for every block, and
``batch_key_digests`` turns that error into the ``CorruptRecordError`` ``decode_records`` would
raise for the same batch.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from typing import Final, NamedTuple, TypeAlias

from tierlog.log._accel import SPEEDUPS_MODULE
from tierlog.log._varint import INT64_MAX, INT64_MIN, BytesLike
from tierlog.log.batch import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    RecordBatch,
    block_corruption,
    records_block,
)
from tierlog.log.compression import DEFAULT_MAX_DECOMPRESSED_SIZE
from tierlog.log.record import BlockError, decode_block_pure

__all__ = [
    "KEY_DIGESTS_ACCELERATED",
    "KeyDigests",
    "batch_key_digests",
    "key_digests",
    "key_digests_pure",
]

OFFSET_SIZE: Final = 8
"""Bytes of one offset in ``KeyDigests.offsets`` (a little-endian int64)."""
DIGEST_SIZE: Final = 16
"""Bytes of one key digest in ``KeyDigests.digests`` (an MD5 digest)."""

_OFFSET: Final = struct.Struct("<q")


class KeyDigests(NamedTuple):
    """What a batch gives pass 1: one entry per keyed record below the end offset, in order."""

    offsets: bytes
    """The records' offsets, little-endian int64s back to back."""
    digests: bytes
    """The MD5 digests of their keys, 16 bytes each, in the same order."""
    records: int
    """Records decoded in the batch (keyless ones and those past the end offset included)."""


def key_digests_pure(
    block: BytesLike, count: int, base_offset: int, end_offset: int
) -> tuple[bytes, bytes, int]:
    """``(offsets, digests, decoded)`` of a decompressed records block, in pure Python.

    The reference of the C ``key_digests``: ``decode_block_pure`` decodes the ``count`` records
    (so a corrupt block raises its ``BlockError``), then every record with a key (an empty key is
    one, a null key is not) and an offset below ``end_offset`` contributes its offset and its
    key's MD5. A selected offset beyond int64 (only a corrupt base offset and delta give one)
    cannot be packed: ``BlockError`` at offset 0 names the record.
    """
    records = decode_block_pure(bytes(block), count, base_offset, 0, None)
    offsets: list[bytes] = []
    digests: list[bytes] = []
    pack = _OFFSET.pack
    md5 = hashlib.md5
    for index, record in enumerate(records):
        key = record.key
        offset = record.offset
        if key is None or offset >= end_offset:
            continue
        if not INT64_MIN <= offset <= INT64_MAX:
            raise BlockError(f"record {index} has the offset {offset}, beyond the int64 range", 0)
        offsets.append(pack(offset))
        digests.append(md5(key, usedforsecurity=False).digest())
    return b"".join(offsets), b"".join(digests), len(records)


KeyDigestsFunction: TypeAlias = Callable[[BytesLike, int, int, int], tuple[bytes, bytes, int]]

_accelerated: KeyDigestsFunction | None = getattr(SPEEDUPS_MODULE, "key_digests", None)

KEY_DIGESTS_ACCELERATED: Final[bool] = _accelerated is not None
"""Whether ``key_digests`` is the C accelerator (``False``: ``key_digests_pure``)."""

key_digests: Final[KeyDigestsFunction] = key_digests_pure if _accelerated is None else _accelerated
"""``(block, count, base_offset, end_offset) -> (offsets, digests, decoded)``: the C accelerator
when it is built (and not ruled out by ``TIERLOG_NO_SPEEDUPS``), else ``key_digests_pure``."""


def batch_key_digests(
    header: RecordBatch,
    data: BytesLike,
    *,
    end_offset: int,
    path: str | None = None,
    position: int = 0,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> KeyDigests:
    """The keyed records below ``end_offset`` of the batch ``data`` (header included, as
    ``scan.iter_raw_batches`` yields it) that ``header`` describes.

    The block is read as ``decode_records`` reads it, with the same errors: a negative record
    count, an unknown codec, a failed or oversized decompression (``max_decompressed_size``), a
    record count the block cannot hold, and every defect of the block itself are a
    ``CorruptRecordError`` naming ``path`` and ``position`` (where the batch starts in ``path``).
    A batch of no records yields nothing without its block being read. Which records count
    (control batches, aborted transactions, the first dirty offset) is the caller's business.
    """
    block = memoryview(data)[RECORD_BATCH_OVERHEAD : LOG_OVERHEAD + header.length]
    records = records_block(
        header, block, path=path, position=position, max_decompressed_size=max_decompressed_size
    )
    if records is None:
        return KeyDigests(b"", b"", 0)
    try:
        offsets, digests, decoded = key_digests(
            records, header.records_count, header.base_offset, end_offset
        )
    except BlockError as e:
        raise block_corruption(e, header, position, path) from None
    return KeyDigests(offsets, digests, decoded)
