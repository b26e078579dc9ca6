"""One record of a batch v2: its value type, its encoding and the decoding of a records block.

Record layout (``DefaultRecord``; KAFKA-FACTS 7.3)::

    Length varint | Attributes int8 | TimestampDelta varlong | OffsetDelta varint |
    KeyLen varint | Key | ValueLen varint | Value | HeadersCount varint |
    [HeaderKeyLen varint | HeaderKey utf8 | HeaderValueLen varint | HeaderValue]

Varints are zigzag (``_varint``); a null key or value has length -1 (any negative length reads
as null, as in Kafka). A batch's records block is these records back to back, compressed as one
stream when the batch says so (``batch``).

This is the hot path of deep iteration and of building batches, and its shape follows: a
``Record`` is a ``NamedTuple`` built with ``tuple.__new__`` from the decoder's locals (about 3x
cheaper than a dataclass); a whole block is decoded by one loop over its ``bytes`` with the one-
and two-byte varints (nearly every length, delta and count) read inline through lookup tables,
and encoded with ready-made varint bytes for the values below 8192.

Decoding has an optional C accelerator, ``tierlog.log._speedups`` (``_speedups.c``, compiled
when the package is installed by the build hook ``hatch_build.py``; an editable install builds
it next to this file, so re-run ``pip install -e`` after editing it): about 8x faster than the
loop below, it is what ``decode_block`` is when it could be imported. ``decode_block_pure`` is
the reference: the C code gives the same records and raises the same ``BlockError`` (message and
offset) for every input, which ``tests/log/test_speedups.py`` checks on generated and corrupt
blocks, and it hands any argument outside its fast path (not exactly ``bytes`` and 64-bit ints,
keywords) to ``decode_block_pure``. Without a compiler the install still succeeds and
``decode_block`` is ``decode_block_pure``; so it is too when ``TIERLOG_NO_SPEEDUPS=1`` is set at
import (to rule the accelerator out when chasing a bug). ``SPEEDUPS`` tells which one is in use.

Encoding has the same arrangement: ``encode_records`` is the C one (``_speedups_encode.h``) when
the accelerator is in use, ``encode_records_pure`` otherwise. Compaction's rewrite re-encodes
every record it keeps, with the delete horizon as the base timestamp of any batch that keeps a
tombstone, so every timestamp delta there is a long varlong: ~1.9 us a record in Python, ~0.04
in C (300-record batches). The C code writes the same bytes and returns the same tuple, and
hands every input outside its plain case (a record not exactly a ``Record``, a key that is not
exactly ``bytes``, ints beyond 64 bits, and every input ``encode_records_pure`` rejects) to
``encode_records_pure``, so the errors are always the pure ones
(``tests/log/test_encode_records_speedups.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final, NamedTuple, TypeAlias

from tierlog.log._accel import SPEEDUPS_MODULE
from tierlog.log._varint import (
    ENCODED,
    INT32_MAX,
    SMALL_LIMIT,
    ZIGZAG_1,
    ZIGZAG_2,
    BytesLike,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
)
from tierlog.spi import CorruptRecordError, InvalidArgumentError

NO_TIMESTAMP: Final = -1
MIN_RECORD_SIZE: Final = 7
"""Smallest encoded record: length, attributes, timestamp, offset, key, value, header count."""

_tuple_new = tuple.__new__


Header = tuple[str, bytes | None]
"""A record header: a UTF-8 key (never null) and a nullable value."""


class Record(NamedTuple):
    """One record: absolute offset and timestamp, nullable key and value, headers.

    ``offset_delta`` and ``timestamp_delta`` are what the batch stored (relative to its base
    offset and base timestamp); they are set when a record is read and ``None`` when a caller
    builds one (the builder derives them from ``offset`` and ``timestamp``). For a batch with
    ``LOG_APPEND_TIME``, ``timestamp`` is the batch's max timestamp, as Kafka reports it.

    Header keys are decoded with ``surrogateescape``, so a key that is not valid UTF-8 (Kafka
    accepts any bytes) survives a read and re-write byte for byte.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    offset_delta: int | None = None
    timestamp_delta: int | None = None


class BlockError(Exception):
    """A defect inside a records block, at ``offset`` bytes into the (decompressed) block.

    The batch layer turns it into a ``CorruptRecordError`` with the file and the position.
    """

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.offset = offset


def encode_records_pure(
    records: Iterable[Record], base_offset: int, base_timestamp: int
) -> tuple[bytes, int, int, int]:
    """Encode records as a records block: ``(block, count, last_offset_delta, max_timestamp)``.

    Offsets must increase strictly from ``base_offset`` (gaps allowed: compacted batches keep
    their records' offsets); timestamps must be ``>= 0`` or ``NO_TIMESTAMP``, as Kafka's
    ``MemoryRecordsBuilder`` demands. The pure-Python encoder: the reference of the C
    ``encode_records``, which hands it every input outside its plain case (see the module
    docstring).
    """
    parts: list[BytesLike] = []
    push = parts.append
    ev = encode_varint
    el = encode_varlong
    table = ENCODED
    lo = -SMALL_LIMIT
    hi = SMALL_LIMIT
    count = 0
    prev_delta = -1
    max_ts = NO_TIMESTAMP
    for r in records:
        offset_delta = r.offset - base_offset
        if offset_delta <= prev_delta or offset_delta > INT32_MAX:
            raise InvalidArgumentError(
                f"record offset {r.offset} does not follow offset {base_offset + prev_delta} "
                f"within an int32 delta of base offset {base_offset}"
            )
        ts = r.timestamp
        if ts < 0 and ts != NO_TIMESTAMP:
            raise InvalidArgumentError(f"invalid negative timestamp {ts}")
        if ts > max_ts:  # noqa: PLR1730 (a max() call costs more on this per-record path)
            max_ts = ts
        v = ts - base_timestamp
        body: list[BytesLike] = [
            b"\x00",
            table[v - lo] if lo <= v < hi else el(v),
            table[offset_delta - lo] if offset_delta < hi else ev(offset_delta),
        ]
        key = r.key
        if key is None:
            body.append(b"\x01")
        else:
            n = len(key)
            body.append(table[n - lo] if n < hi else ev(n))
            body.append(key)
        value = r.value
        if value is None:
            body.append(b"\x01")
        else:
            n = len(value)
            body.append(table[n - lo] if n < hi else ev(n))
            body.append(value)
        headers = r.headers
        if not headers:
            body.append(b"\x00")
        else:
            body.append(ev(len(headers)))
            for h_key, h_value in headers:
                if h_key is None:
                    raise InvalidArgumentError("invalid null header key found in headers")
                raw = h_key.encode("utf-8", "surrogateescape")
                body.append(ev(len(raw)))
                body.append(raw)
                if h_value is None:
                    body.append(b"\x01")
                else:
                    body.append(ev(len(h_value)))
                    body.append(h_value)
        encoded = b"".join(body)
        n = len(encoded)
        push(table[n - lo] if n < hi else ev(n))
        push(encoded)
        prev_delta = offset_delta
        count += 1
    return b"".join(parts), count, prev_delta, max_ts


def decode_block_pure(
    data: bytes, count: int, base_offset: int, base_timestamp: int, log_append_time: int | None
) -> list[Record]:
    """Decode ``count`` records filling exactly ``data`` (in pure Python; see ``decode_block``).

    The hot loop of deep iteration: varints of one and two bytes (nearly all lengths, deltas and
    counts) are read inline through ``ZIGZAG_1``/``ZIGZAG_2``; longer ones take the general
    functions. Slices past a record's end are cut by Python and caught by the final position
    check; reads past the block raise ``IndexError``, turned into ``BlockError``.
    """
    z1 = ZIGZAG_1
    z2 = ZIGZAG_2
    new = _tuple_new
    cls = Record
    out: list[Record] = []
    append = out.append
    end = len(data)
    min_body = MIN_RECORD_SIZE - 1
    pos = 0
    start = 0
    try:
        for _ in range(count):
            start = pos
            b = data[pos]
            if b < 0x80:
                length = z1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    length = z2[b | c << 8]
                    pos += 2
                else:
                    length, pos = decode_varint(data, pos)
            record_end = pos + length
            if not min_body <= length <= end - pos:
                raise BlockError(
                    f"record length {length} is impossible ({end - pos} bytes left in the block)",
                    start,
                )
            b = data[pos + 1]  # after the attributes byte: no record attributes are defined
            if b < 0x80:
                ts_delta = z1[b]
                pos += 2
            else:
                c = data[pos + 2]
                if c < 0x80:
                    ts_delta = z2[b | c << 8]
                    pos += 3
                else:
                    ts_delta, pos = decode_varlong(data, pos + 1)
            b = data[pos]
            if b < 0x80:
                offset_delta = z1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    offset_delta = z2[b | c << 8]
                    pos += 2
                else:
                    offset_delta, pos = decode_varint(data, pos)
            b = data[pos]
            if b < 0x80:
                n = z1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    n = z2[b | c << 8]
                    pos += 2
                else:
                    n, pos = decode_varint(data, pos)
            if n < 0:
                key = None
            else:
                key = data[pos : pos + n]
                pos += n
            b = data[pos]
            if b < 0x80:
                n = z1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    n = z2[b | c << 8]
                    pos += 2
                else:
                    n, pos = decode_varint(data, pos)
            if n < 0:
                value = None
            else:
                value = data[pos : pos + n]
                pos += n
            b = data[pos]
            if b == 0:
                headers: tuple[Header, ...] = ()
                pos += 1
            else:
                headers, pos = _decode_headers(data, pos, record_end)
            if pos != record_end:
                used = pos - record_end + length
                raise BlockError(f"record body is {length} bytes but fields take {used}", start)
            append(
                new(
                    cls,
                    (
                        base_offset + offset_delta,
                        base_timestamp + ts_delta if log_append_time is None else log_append_time,
                        key,
                        value,
                        headers,
                        offset_delta,
                        ts_delta,
                    ),
                )
            )
    except IndexError:
        if start >= end:
            raise BlockError(
                f"the batch declares {count} records but its records block holds {len(out)}",
                start,
            ) from None
        raise BlockError("record runs past the end of its records block", start) from None
    except CorruptRecordError as e:  # an over-long varint
        at = start if e.position is None else e.position
        raise BlockError(f"{e} in record", at) from None
    if pos != end:
        raise BlockError(
            f"{end - pos} bytes remain after the {count} records the batch declares", pos
        )
    return out


def _decode_headers(data: bytes, pos: int, record_end: int) -> tuple[tuple[Header, ...], int]:
    """Headers of one record, one-byte varints read inline (header keys are short)."""
    z1 = ZIGZAG_1
    at = pos
    b = data[pos]
    if b < 0x80:
        count = z1[b]
        pos += 1
    else:
        count, pos = decode_varint(data, pos)
    if count < 0 or count > record_end - pos:
        raise BlockError(f"invalid number of record headers {count}", at)
    headers: list[Header] = []
    for _ in range(count):
        at = pos
        b = data[pos]
        if b < 0x80:
            n = z1[b]
            pos += 1
        else:
            n, pos = decode_varint(data, pos)
        if n < 0:
            raise BlockError(f"invalid negative header key size {n}", at)
        if pos + n > record_end:
            raise BlockError(f"header key of {n} bytes runs past its record", at)
        key = data[pos : pos + n].decode("utf-8", "surrogateescape")
        pos += n
        b = data[pos]
        if b < 0x80:
            n = z1[b]
            pos += 1
        else:
            n, pos = decode_varint(data, pos)
        if n < 0:
            headers.append((key, None))
        else:
            headers.append((key, data[pos : pos + n]))
            pos += n
    return tuple(headers), pos


DecodeBlock: TypeAlias = Callable[[bytes, int, int, int, int | None], list[Record]]
EncodeRecords: TypeAlias = Callable[[Iterable[Record], int, int], tuple[bytes, int, int, int]]


def _load_speedups() -> DecodeBlock | None:
    """The C ``decode_block``, or ``None`` if it is not built or ``TIERLOG_NO_SPEEDUPS`` is set."""
    speedups = SPEEDUPS_MODULE
    if speedups is None:
        return None
    speedups.configure(Record, BlockError, decode_block_pure)
    fast: DecodeBlock = speedups.decode_block
    return fast


def _load_encode_speedup() -> EncodeRecords | None:
    """The C ``encode_records``, or ``None``: not built, ruled out, or a stale build from before
    it existed (which must not break the import; the pure encoder is used then)."""
    configure = getattr(SPEEDUPS_MODULE, "configure_encode", None)
    fast: EncodeRecords | None = getattr(SPEEDUPS_MODULE, "encode_records", None)
    if configure is None or fast is None:
        return None
    configure(encode_records_pure)
    return fast


_accelerated = _load_speedups()
_accelerated_encode = _load_encode_speedup()

SPEEDUPS: Final[bool] = _accelerated is not None
"""Whether ``decode_block`` is the C accelerator (``False``: the pure-Python decoder);
``encode_records`` is too, unless the accelerator is a stale build without it."""

decode_block: Final[DecodeBlock] = decode_block_pure if _accelerated is None else _accelerated
"""Decode ``count`` records filling exactly ``data``: ``(data, count, base_offset,
base_timestamp, log_append_time)``, a ``BlockError`` if the block is corrupt. The C accelerator
when it is built, else ``decode_block_pure`` (see the module docstring)."""

encode_records: Final[EncodeRecords] = _accelerated_encode or encode_records_pure
"""Encode records as a records block: ``(records, base_offset, base_timestamp)`` gives
``(block, count, last_offset_delta, max_timestamp)``. The C accelerator when it is built, else
``encode_records_pure``; both give the same bytes and raise the same errors (see the module
docstring)."""
