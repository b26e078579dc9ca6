"""Record batches v2 (magic 2): the byte format of Kafka's log segments, produce and fetch.

Layout (``DefaultRecordBatch``; KAFKA-FACTS 7.2; the records themselves are in ``record``)::

    0  BaseOffset int64 | 8 Length int32 | 12 PartitionLeaderEpoch int32 | 16 Magic int8 (2)
    17 CRC uint32 | 21 Attributes int16 | 23 LastOffsetDelta int32 | 27 BaseTimestamp int64
    35 MaxTimestamp int64 | 43 ProducerId int64 | 51 ProducerEpoch int16 | 53 BaseSequence int32
    57 RecordsCount int32 | 61 Records (compressed as one stream when attributes say so)

The CRC-32C covers bytes 21 to the end of the batch: BaseOffset, Length, PartitionLeaderEpoch
and Magic are outside it, which is why the local log can assign offsets and stamp the leader
epoch of an appended batch in place (``set_base_offset``, ``set_partition_leader_epoch``,
``assign_offsets``) without recomputing it, while changing the timestamp type or the max
timestamp (``set_max_timestamp``) must.

Performance shapes the types: ``RecordBatch`` is a ``NamedTuple`` built with ``tuple.__new__``
straight from ``struct.unpack_from`` (about 3x cheaper than a dataclass, and a shallow scan makes
one per batch); derived header facts are properties computed from the attributes.

Every malformed input raises ``CorruptRecordError`` naming the file (when known) and the byte
position; a batch of magic 0 or 1 raises ``UnsupportedRecordFormatError``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from enum import IntEnum
from typing import Final, NamedTuple, TypeAlias

from tierlog.log._accel import SPEEDUPS_MODULE
from tierlog.log._varint import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, BytesLike
from tierlog.log.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    CompressionType,
    compress,
    decompress,
)
from tierlog.log.crc import crc32c
from tierlog.log.record import (
    MIN_RECORD_SIZE,
    NO_TIMESTAMP,
    BlockError,
    Record,
    decode_block,
    encode_records,
)
from tierlog.spi import CorruptRecordError, InvalidArgumentError, TierlogError

# --- constants (Kafka's names) -----------------------------------------------------------------
#
# This module is the one place that knows the header's layout: the offsets of its fields, their
# sizes and the attribute bits below, and the precompiled ``struct`` objects that read them. Code
# elsewhere that reads headers in a hot loop (the remote read path, a store's codec heuristic)
# imports these names rather than spelling offsets: a module-level ``Struct`` costs no frame per
# batch, where a helper function would.

MAGIC_V2: Final = 2
LENGTH_OFFSET: Final = 8
LOG_OVERHEAD: Final = 12
"""BaseOffset and Length: the bytes of a batch that ``Length`` does not count."""
PARTITION_LEADER_EPOCH_OFFSET: Final = 12
MAGIC_OFFSET: Final = 16
HEADER_SIZE_UP_TO_MAGIC: Final = 17
CRC_OFFSET: Final = 17
ATTRIBUTES_OFFSET: Final = 21
"""Where the CRC-32C's coverage starts (it runs to the end of the batch)."""
LAST_OFFSET_DELTA_OFFSET: Final = 23
MAX_TIMESTAMP_OFFSET: Final = 35
RECORD_BATCH_OVERHEAD: Final = 61
"""Size of the v2 batch header; a batch is at least this long."""
MIN_BATCH_LENGTH: Final = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD
"""The smallest ``Length`` of a v2 batch (49: a header without records)."""

NO_OFFSET: Final = -1
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1

COMPRESSION_CODEC_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08
TRANSACTIONAL_FLAG_MASK: Final = 0x10
CONTROL_FLAG_MASK: Final = 0x20
DELETE_HORIZON_FLAG_MASK: Final = 0x40

HEADER: Final = struct.Struct(">qiibIhiqqqhii")
"""The 61-byte v2 header, unpacked in field order into a ``RecordBatch``."""
LENGTH_FIELD: Final = struct.Struct(">i")
"""``Length`` alone, unpacked from ``LENGTH_OFFSET``."""
CRC_FIELD: Final = struct.Struct(">I")
"""``CRC`` alone, unpacked from (and packed into) ``CRC_OFFSET``."""
LENGTH_AND_MAGIC: Final = struct.Struct(">i4xb")
"""``Length`` and ``Magic``, unpacked from ``LENGTH_OFFSET`` (the leader epoch skipped): what a
walk from batch to batch checks."""
LENGTH_MAGIC_ATTRIBUTES: Final = struct.Struct(">i4xb4xh")
"""``Length``, ``Magic`` and ``Attributes``, unpacked from ``LENGTH_OFFSET`` (the bytes up to
``ATTRIBUTES_OFFSET + 2``): a walk that also looks at the codec and the control flag."""
HEADER_BOUNDS: Final = struct.Struct(">qi4xb6xi")
"""``BaseOffset``, ``Length``, ``Magic`` and ``LastOffsetDelta``, unpacked from position 0: a
batch's bounds in offsets and in bytes, and whether it is v2."""
_INT64: Final = struct.Struct(">q")
_INT32: Final = struct.Struct(">i")
_INT16: Final = struct.Struct(">h")
_CONTROL_KEY: Final = struct.Struct(">hh")
_END_TXN_VALUE: Final = struct.Struct(">hi")

_tuple_new = tuple.__new__


class TimestampType(IntEnum):
    """What a batch's timestamps mean (attribute bit 3); ``NO_TIMESTAMP_TYPE`` is magic 0 only."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(IntEnum):
    """The ``Type`` in a control record's key (Kafka's ``ControlRecordType``); else UNKNOWN."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


class UnsupportedRecordFormatError(TierlogError):
    """The log holds a legacy message set (magic 0 or 1), which tierlog does not decode.

    Deliberately not a ``CorruptRecordError``: the data is valid, and code that truncates a log
    at the first corrupt batch (recovery) must not destroy a legacy log. ``magic``, ``path`` and
    ``position`` say what and where.
    """

    def __init__(self, message: str, *, magic: int, path: str | None, position: int):
        super().__init__(message)
        self.magic = magic
        self.path = path
        self.position = position


# --- value types -------------------------------------------------------------------------------


class RecordBatch(NamedTuple):
    """The 61-byte header of a v2 batch, every field as stored; derived facts are properties."""

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression_id(self) -> int:
        """Attribute bits 0-2 as stored (0-4 are codecs, 5-7 unknown)."""
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def compression(self) -> CompressionType:
        """The codec of the records block; ``CorruptRecordError`` for ids 5-7."""
        cid = self.attributes & COMPRESSION_CODEC_MASK
        if cid > CompressionType.ZSTD:
            raise CorruptRecordError(f"unknown compression type id {cid} in batch attributes")
        return CompressionType(cid)

    @property
    def timestamp_type(self) -> TimestampType:
        return (
            TimestampType.LOG_APPEND_TIME
            if self.attributes & TIMESTAMP_TYPE_MASK
            else TimestampType.CREATE_TIME
        )

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """The log cleaner's delete horizon, stored in BaseTimestamp when bit 6 is set."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_FLAG_MASK else None

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.length

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """BaseSequence + LastOffsetDelta, wrapping past int32 max as Kafka's sequences do."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


class ControlRecord(NamedTuple):
    """A decoded control record: its type, key version and (commit/abort) coordinator epoch."""

    type: ControlRecordType
    version: int
    coordinator_epoch: int | None


def increment_sequence(sequence: int, increment: int) -> int:
    """``DefaultRecordBatch.incrementSequence``: sequences wrap from int32 max to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


# --- errors ------------------------------------------------------------------------------------


def where(position: int, path: str | None) -> str:
    """``"at position N of FILE"`` (or of the buffer): the suffix of every corruption message."""
    return f"at position {position} of {path}" if path else f"at position {position} of the buffer"


def corrupt(what: str, position: int, path: str | None) -> CorruptRecordError:
    return CorruptRecordError(f"{what} {where(position, path)}", path=path, position=position)


def bad_magic(magic: int, position: int, path: str | None) -> TierlogError:
    """The error for a batch whose magic byte is not 2."""
    if magic in (0, 1):
        return UnsupportedRecordFormatError(
            f"magic {magic} (legacy message format) {where(position, path)} is not supported; "
            "tierlog reads record batches v2 (Kafka 0.11+) only",
            magic=magic,
            path=path,
            position=position,
        )
    return corrupt(f"invalid magic byte {magic} (expected 2) in record batch", position, path)


# --- headers and CRC ---------------------------------------------------------------------------


def read_batch_header(
    buf: BytesLike,
    position: int = 0,
    *,
    end: int | None = None,
    path: str | None = None,
    file_offset: int = 0,
) -> RecordBatch:
    """Parse and sanity-check the header of the batch at ``buf[position]`` (no CRC check).

    Checks, in Kafka's order (``FileLogInputStream``): the ``Length`` field is at least the
    smallest legacy record (so a zero-filled tail is corruption, not a "legacy" batch), at least
    17 bytes to the magic byte, magic 2 (0/1 raise ``UnsupportedRecordFormatError``), the 61-byte
    header, ``Length`` at least 49 and the whole batch within ``end`` (default ``len(buf)``).
    ``file_offset`` is the file position of ``buf[0]``, so errors name positions in the file.
    """
    limit = len(buf) if end is None else end
    at = file_offset + position
    remaining = limit - position
    if remaining >= LOG_OVERHEAD:
        (length,) = LENGTH_FIELD.unpack_from(buf, position + LENGTH_OFFSET)
        if length < LEGACY_RECORD_OVERHEAD_V0:
            raise corrupt(
                f"record size {length} is smaller than the minimum record overhead "
                f"({LEGACY_RECORD_OVERHEAD_V0})",
                at,
                path,
            )
        if (
            length > remaining - LOG_OVERHEAD
            and remaining >= HEADER_SIZE_UP_TO_MAGIC
            and buf[position + MAGIC_OFFSET] != MAGIC_V2
        ):
            check_batch_size(length, remaining, at, path)  # a torn tail, not a legacy batch
    if remaining < HEADER_SIZE_UP_TO_MAGIC:
        raise corrupt(
            f"truncated record batch header ({remaining} bytes, at least "
            f"{HEADER_SIZE_UP_TO_MAGIC} needed)",
            at,
            path,
        )
    magic = buf[position + MAGIC_OFFSET]
    if magic != MAGIC_V2:
        raise bad_magic(magic if magic < 128 else magic - 256, at, path)
    if remaining < RECORD_BATCH_OVERHEAD:
        raise corrupt(
            f"truncated record batch header ({remaining} bytes, {RECORD_BATCH_OVERHEAD} needed)",
            at,
            path,
        )
    header: RecordBatch = _tuple_new(RecordBatch, HEADER.unpack_from(buf, position))
    check_batch_size(header.length, remaining, at, path)
    return header


LEGACY_RECORD_OVERHEAD_V0 = 14
"""Kafka's ``LegacyRecord.RECORD_OVERHEAD_V0``: no record of any format is shorter."""


def check_batch_size(length: int, remaining: int, at: int, path: str | None) -> None:
    """Raise unless ``Length`` is possible and the batch fits in the ``remaining`` bytes."""
    if length < MIN_BATCH_LENGTH:
        raise corrupt(
            f"record batch length {length} is smaller than the minimum {MIN_BATCH_LENGTH}",
            at,
            path,
        )
    if length > remaining - LOG_OVERHEAD:
        raise corrupt(
            f"truncated record batch: it claims {length + LOG_OVERHEAD} bytes but only "
            f"{remaining} remain",
            at,
            path,
        )


WALK_END: Final = 0
"""``walk_batch_headers`` stopped with fewer than ``HEADER_SIZE_UP_TO_MAGIC`` bytes left."""
WALK_PARTIAL: Final = 1
"""``walk_batch_headers`` stopped at a batch whose Length runs past the end of the buffer."""
WALK_BAD: Final = 2
"""``walk_batch_headers`` stopped at a batch whose Length is too small or magic is not 2."""


def walk_batch_headers_pure(
    buf: BytesLike, min_length: int = MIN_BATCH_LENGTH, magic: int = MAGIC_V2
) -> tuple[int, int, int]:
    """Follow the Length fields of the batches packed in ``buf`` from position 0, checking
    each Length (at least ``min_length``) and magic: ``(position, status, last)``, where the
    walk stopped, why (``WALK_END``, ``WALK_PARTIAL``, ``WALK_BAD``) and where the last whole
    batch before that position starts (-1: none).

    This is a remote read's only per-batch work (the bytes it returns must be whole v2 batches
    up to a partial last one), hence the C twin ``walk_batch_headers`` uses when it is built.
    """
    end = len(buf)
    last_full = end - HEADER_SIZE_UP_TO_MAGIC
    unpack = LENGTH_AND_MAGIC.unpack_from
    length_at = LENGTH_OFFSET  # a local: no global lookup per batch
    pos = 0
    last = -1
    while pos <= last_full:
        length, found = unpack(buf, pos + length_at)
        nxt = pos + LOG_OVERHEAD + length
        if nxt > end:
            return pos, WALK_PARTIAL, last
        if length < min_length or found != magic:
            return pos, WALK_BAD, last
        last = pos
        pos = nxt
    return pos, WALK_END, last


WalkBatchHeaders: TypeAlias = Callable[[BytesLike, int, int], tuple[int, int, int]]

walk_batch_headers: Final[WalkBatchHeaders] = (
    getattr(SPEEDUPS_MODULE, "walk_batch_headers", None) or walk_batch_headers_pure
)
"""``walk_batch_headers_pure``, from the C accelerator when it is built (same results); an
accelerator built from older sources, without it, leaves the pure walk in place."""


def compute_crc(buf: BytesLike, position: int = 0, size: int | None = None) -> int:
    """CRC-32C of the batch at ``position`` over bytes 21 to its end (``size`` from its header)."""
    if size is None:
        (length,) = LENGTH_FIELD.unpack_from(buf, position + LENGTH_OFFSET)
        size = LOG_OVERHEAD + length
    return crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET : position + size])


def verify_crc(
    buf: BytesLike,
    position: int = 0,
    header: RecordBatch | None = None,
    *,
    path: str | None = None,
    file_offset: int = 0,
) -> None:
    """Raise ``CorruptRecordError`` unless the stored CRC matches the batch's bytes."""
    if header is None:
        header = read_batch_header(buf, position, path=path, file_offset=file_offset)
    computed = compute_crc(buf, position, LOG_OVERHEAD + header.length)
    if computed != header.crc:
        raise crc_mismatch(header.crc, computed, file_offset + position, path)


def crc_mismatch(stored: int, computed: int, at: int, path: str | None) -> CorruptRecordError:
    return corrupt(
        f"record batch CRC mismatch (stored 0x{stored:08x}, computed 0x{computed:08x})", at, path
    )


# --- decoding records --------------------------------------------------------------------------


def decode_batch(
    buf: BytesLike,
    position: int = 0,
    *,
    verify: bool = True,
    path: str | None = None,
    file_offset: int = 0,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> tuple[RecordBatch, list[Record]]:
    """Decode the batch at ``buf[position]``: its header and all its records.

    ``verify`` checks the CRC first (as Kafka's ``ensureValid``). Records of a compressed batch
    are decompressed with the limit ``max_decompressed_size``.
    """
    header = read_batch_header(buf, position, path=path, file_offset=file_offset)
    if verify:
        verify_crc(buf, position, header, path=path, file_offset=file_offset)
    return header, decode_records(
        header,
        memoryview(buf)[position + RECORD_BATCH_OVERHEAD : position + LOG_OVERHEAD + header.length],
        path=path,
        position=file_offset + position,
        max_decompressed_size=max_decompressed_size,
    )


def decode_records(
    header: RecordBatch,
    block: BytesLike,
    *,
    path: str | None = None,
    position: int = 0,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[Record]:
    """Decode the records block (the bytes after the header) of the batch ``header`` describes.

    ``position`` is where the batch starts (in the file ``path``), for error messages: a defect
    of an uncompressed block is reported at its exact byte, one of a compressed block at the
    batch with the offset into the decompressed block.
    """
    records = records_block(
        header, block, path=path, position=position, max_decompressed_size=max_decompressed_size
    )
    if records is None:
        # Kafka's iterator returns nothing for an empty batch without reading its block.
        return []
    data = records if type(records) is bytes else bytes(records)
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    try:
        return decode_block(
            data, header.records_count, header.base_offset, header.base_timestamp, log_append_time
        )
    except BlockError as e:
        raise block_corruption(e, header, position, path) from None


def records_block(
    header: RecordBatch,
    block: BytesLike,
    *,
    path: str | None = None,
    position: int = 0,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> BytesLike | None:
    """The records block of a batch (``block``: the bytes after its header), decompressed and
    checked against the record count as ``decode_records`` needs it; None for a batch of no
    records (whose block is not read). A defect is a ``CorruptRecordError`` naming ``path``
    and ``position``. Shared by every reader of records blocks (``decode_records``, the
    cleaner's key digests) so that they fail alike."""
    count = header.records_count
    if count < 0:
        raise corrupt(f"invalid record count {count} in record batch", position, path)
    if count == 0:
        return None
    cid = header.attributes & COMPRESSION_CODEC_MASK
    data: BytesLike
    if cid == 0:
        data = block
    else:
        if cid > CompressionType.ZSTD:
            raise corrupt(f"unknown compression type id {cid} in record batch", position, path)
        try:
            data = decompress(CompressionType(cid), block, max_size=max_decompressed_size)
        except CorruptRecordError as e:
            raise corrupt(str(e) + " in record batch", position, path) from e
    if count > len(data) // MIN_RECORD_SIZE:
        raise corrupt(
            f"record count {count} cannot fit in a records block of {len(data)} bytes",
            position,
            path,
        )
    return data


def block_corruption(
    e: BlockError, header: RecordBatch, position: int, path: str | None
) -> CorruptRecordError:
    """The ``CorruptRecordError`` for a defect ``e`` found in the records block of the batch
    at ``position``: at its exact byte in ``path`` for an uncompressed block, else at the batch
    with the offset into the decompressed block."""
    if header.attributes & COMPRESSION_CODEC_MASK == 0:
        return corrupt(str(e), position + RECORD_BATCH_OVERHEAD + e.offset, path)
    return corrupt(
        f"{e} (at byte {e.offset} of the decompressed records block) in record batch",
        position,
        path,
    )


# --- encoding ----------------------------------------------------------------------------------


def _check_range(name: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise InvalidArgumentError(f"{name} {value} is out of range [{lo}, {hi}]")


def build_batch(
    records: Iterable[Record],
    *,
    base_offset: int = 0,
    compression: CompressionType | str = CompressionType.NONE,
    compression_level: int | None = None,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    delete_horizon_ms: int | None = None,
    last_offset_delta: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """Encode one v2 batch, as Kafka's ``MemoryRecordsBuilder`` writes it.

    Each record's offset delta is ``record.offset - base_offset`` (strictly increasing);
    BaseTimestamp is the first record's timestamp, or ``delete_horizon_ms`` when given (which
    sets attribute bit 6); MaxTimestamp is the largest record timestamp, or ``log_append_time``
    for ``LOG_APPEND_TIME``. ``last_offset_delta`` and ``max_timestamp`` override what the
    records give, for a batch whose last records were compacted away (Kafka keeps the original
    LastOffsetDelta so producer sequences stay consistent). A batch without records is written
    uncompressed, as ``DefaultRecordBatch.writeEmptyHeader`` writes it.
    """
    codec = (
        CompressionType.from_name(compression)
        if isinstance(compression, str)
        else CompressionType(compression)
    )
    timestamp_type = TimestampType(timestamp_type)
    if timestamp_type == TimestampType.NO_TIMESTAMP_TYPE:
        raise InvalidArgumentError("timestamp type must be CREATE_TIME or LOG_APPEND_TIME in v2")
    if is_transactional and producer_id < 0:
        raise InvalidArgumentError("cannot write transactional records without a producer id")
    _check_range("base_offset", base_offset, INT64_MIN, INT64_MAX)
    _check_range("producer_id", producer_id, INT64_MIN, INT64_MAX)
    _check_range("producer_epoch", producer_epoch, -(1 << 15), (1 << 15) - 1)
    _check_range("base_sequence", base_sequence, INT32_MIN, INT32_MAX)
    _check_range("partition_leader_epoch", partition_leader_epoch, INT32_MIN, INT32_MAX)
    if delete_horizon_ms is not None and delete_horizon_ms < 0:
        raise InvalidArgumentError(f"delete horizon {delete_horizon_ms} must be >= 0")

    recs: Sequence[Record] = records if isinstance(records, Sequence) else list(records)
    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
    elif recs:
        base_timestamp = recs[0].timestamp
    else:
        base_timestamp = NO_TIMESTAMP
    block, count, last_delta, max_ts = encode_records(recs, base_offset, base_timestamp)
    if count == 0:
        codec = CompressionType.NONE
        last_delta = 0
    if last_offset_delta is not None:
        if last_offset_delta < last_delta:
            raise InvalidArgumentError(
                f"last_offset_delta {last_offset_delta} is below the last record's {last_delta}"
            )
        _check_range("last_offset_delta", last_offset_delta, 0, INT32_MAX)
        last_delta = last_offset_delta
    if timestamp_type == TimestampType.LOG_APPEND_TIME and log_append_time is not None:
        max_ts = log_append_time
    if max_timestamp is not None:
        max_ts = max_timestamp
    _check_range("max_timestamp", max_ts, INT64_MIN, INT64_MAX)
    if codec != CompressionType.NONE:
        block = compress(codec, block, level=compression_level)

    attributes = int(codec)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_FLAG_MASK
    size = RECORD_BATCH_OVERHEAD + len(block)
    if size - LOG_OVERHEAD > INT32_MAX:
        raise InvalidArgumentError(f"batch of {size} bytes is too large for its int32 length")
    out = bytearray(size)
    HEADER.pack_into(
        out,
        0,
        base_offset,
        size - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        last_delta,
        base_timestamp,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    out[RECORD_BATCH_OVERHEAD:] = block
    CRC_FIELD.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def build_control_batch(
    marker: ControlRecordType,
    coordinator_epoch: int,
    *,
    base_offset: int = 0,
    timestamp: int,
    producer_id: int,
    producer_epoch: int,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """An end-transaction marker batch (``MemoryRecords.withEndTransactionMarker``).

    One control record: key ``int16 version 0 | int16 type`` (ControlRecordTypeSchema v0),
    value ``int16 version 0 | int32 coordinatorEpoch`` (EndTxnMarker v0); the batch is
    transactional and control, uncompressed, CREATE_TIME, without a sequence.
    """
    marker = ControlRecordType(marker)
    if marker not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        raise InvalidArgumentError(
            f"invalid control record type for an end transaction marker: {marker.name}"
        )
    _check_range("coordinator_epoch", coordinator_epoch, INT32_MIN, INT32_MAX)
    record = Record(
        base_offset,
        timestamp,
        _CONTROL_KEY.pack(0, int(marker)),
        _END_TXN_VALUE.pack(0, coordinator_epoch),
    )
    return build_batch(
        [record],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def control_record_type(key: bytes | None) -> tuple[ControlRecordType, int]:
    """``(type, version)`` of a control record key; newer key versions parse as version 0."""
    if key is None or len(key) < _CONTROL_KEY.size:
        size = "null" if key is None else f"{len(key)} bytes"
        raise CorruptRecordError(f"control record key is {size}; at least 4 bytes expected")
    version, type_id = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"invalid control record key version {version}")
    try:
        return ControlRecordType(type_id), version
    except ValueError:
        return ControlRecordType.UNKNOWN, version


def decode_control_record(record: Record) -> ControlRecord:
    """Decode a record of a control batch; COMMIT and ABORT carry their coordinator epoch.

    Raises ``CorruptRecordError`` for a short or negative-version key or marker value (Kafka's
    ``InvalidRecordException``).
    """
    type_, version = control_record_type(record.key)
    if type_ not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        return ControlRecord(type_, version, None)
    value = record.value
    if value is None or len(value) < _END_TXN_VALUE.size:
        size = "null" if value is None else f"{len(value)} bytes"
        raise CorruptRecordError(f"end transaction marker value is {size}; 6 bytes expected")
    value_version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    if value_version < 0:
        raise CorruptRecordError(f"invalid end transaction marker version {value_version}")
    return ControlRecord(type_, version, coordinator_epoch)


# --- in-place stamping -------------------------------------------------------------------------


def _check_v2(buf: BytesLike, position: int) -> None:
    if len(buf) - position < RECORD_BATCH_OVERHEAD:
        raise InvalidArgumentError(f"no record batch header at position {position}")
    magic = buf[position + MAGIC_OFFSET]
    if magic != MAGIC_V2:
        raise InvalidArgumentError(f"batch at position {position} has magic {magic}, not 2")


def set_base_offset(buf: bytearray | memoryview, base_offset: int, position: int = 0) -> None:
    """Overwrite BaseOffset of the batch at ``position``; outside the CRC, so nothing else."""
    _check_v2(buf, position)
    _check_range("base_offset", base_offset, INT64_MIN, INT64_MAX)
    _INT64.pack_into(buf, position, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, epoch: int, position: int = 0) -> None:
    """Overwrite PartitionLeaderEpoch of the batch at ``position``; outside the CRC."""
    _check_v2(buf, position)
    _check_range("partition_leader_epoch", epoch, INT32_MIN, INT32_MAX)
    _INT32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp(
    buf: bytearray | memoryview,
    timestamp_type: TimestampType,
    max_timestamp: int,
    position: int = 0,
) -> None:
    """Set the timestamp type and MaxTimestamp (``DefaultRecordBatch.setMaxTimestamp``).

    Both are inside the CRC, which is recomputed; a no-op when nothing changes, as in Kafka. The
    broker does this to stamp ``LOG_APPEND_TIME`` on appended batches.
    """
    _check_v2(buf, position)
    header: RecordBatch = _tuple_new(RecordBatch, HEADER.unpack_from(buf, position))
    timestamp_type = TimestampType(timestamp_type)
    if timestamp_type == TimestampType.NO_TIMESTAMP_TYPE:
        raise InvalidArgumentError("timestamp type must be CREATE_TIME or LOG_APPEND_TIME in v2")
    if header.timestamp_type == timestamp_type and header.max_timestamp == max_timestamp:
        return
    size = LOG_OVERHEAD + header.length
    if size > len(buf) - position:
        raise InvalidArgumentError(f"batch at position {position} is truncated")
    attributes = header.attributes & ~TIMESTAMP_TYPE_MASK
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, max_timestamp)
    CRC_FIELD.pack_into(buf, position + CRC_OFFSET, compute_crc(buf, position, size))


def assign_offsets(
    buf: bytearray | memoryview,
    base_offset: int,
    *,
    partition_leader_epoch: int | None = None,
) -> int:
    """Give consecutive offsets to every batch in ``buf`` (a produce request's records).

    Each batch's BaseOffset becomes the next offset and, if given, its PartitionLeaderEpoch is
    stamped; returns the offset after the last batch. Headers are checked (``CorruptRecordError``)
    before anything is written, so a bad buffer is left untouched.
    """
    headers: list[tuple[int, RecordBatch]] = []
    pos = 0
    end = len(buf)
    while pos < end:
        header = read_batch_header(buf, pos)
        headers.append((pos, header))
        pos += LOG_OVERHEAD + header.length
    offset = base_offset
    for pos, header in headers:
        set_base_offset(buf, offset, pos)
        if partition_leader_epoch is not None:
            set_partition_leader_epoch(buf, partition_leader_epoch, pos)
        offset += header.last_offset_delta + 1
    return offset
