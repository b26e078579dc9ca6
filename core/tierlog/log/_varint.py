"""Zigzag varints and varlongs, exactly as Kafka's ``ByteUtils`` reads and writes them.

Record batch v2 encodes every per-record integer (length, timestamp delta, offset delta, key and
value lengths, header counts) as a zigzag varint, so these functions sit on the hottest path of
both the builder and the deep decoder. Hence:

- encoding of the small values that dominate real data (one and two bytes: -8192..8191) is a
  table lookup that returns a ready ``bytes`` object (``ENCODED``);
- decoding is done inline by the record decoder with the tables ``ZIGZAG_1`` (one byte) and
  ``ZIGZAG_2`` (two bytes, indexed by ``b0 | b1 << 8``); the functions here are the general
  (slow) path and the reference the tables are tested against.

Kafka's rules, kept here on purpose:

- a varint is at most 5 bytes and a varlong at most 10; one more continuation bit is an error
  ("Varint is too long");
- the bits the last byte carries beyond 32 (64) are dropped, as Java's int (long) arithmetic
  drops them, and the unsigned value is then zigzag-decoded;
- overlong encodings (``80 00`` for 0) are accepted, as Kafka accepts them.

Errors are ``CorruptRecordError`` whose ``position`` is where the varint starts in the buffer
given (the message does not repeat it); callers that know the file and the absolute position
re-raise with both.
"""

from __future__ import annotations

from typing import Final, TypeAlias

from tierlog.spi import CorruptRecordError, InvalidArgumentError

INT32_MIN: Final = -(1 << 31)
INT32_MAX: Final = (1 << 31) - 1
INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1
_MASK32: Final = (1 << 32) - 1
_MASK64: Final = (1 << 64) - 1

BytesLike: TypeAlias = bytes | bytearray | memoryview
"""What the decoders read: anything indexable to ``int`` and sliceable."""


def _zigzag_decode(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


ZIGZAG_1: Final[tuple[int, ...]] = tuple(_zigzag_decode(b) for b in range(0x80))
"""Decoded value of each one-byte varint (first byte < 0x80)."""

ZIGZAG_2: Final[tuple[int, ...]] = tuple(
    _zigzag_decode((i & 0x7F) | ((i >> 8) << 7)) for i in range(1 << 15)
)
"""Decoded value of each two-byte varint ``b0 b1`` (b0 >= 0x80 > b1), indexed by
``b0 | b1 << 8``: one operation fewer than reassembling the 14 bits in the hot loop."""

SMALL_LIMIT: Final = 8192
"""``ENCODED[v + SMALL_LIMIT]`` is the encoding of ``v`` for ``-SMALL_LIMIT <= v < SMALL_LIMIT``."""


def _uleb(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


ENCODED: Final[tuple[bytes, ...]] = tuple(
    _uleb((v << 1) ^ (v >> 63)) for v in range(-SMALL_LIMIT, SMALL_LIMIT)
)
"""Ready encodings of the one- and two-byte values (lengths, deltas, counts of most records)."""


def encode_varint(value: int) -> bytes:
    """The zigzag varint of a signed 32-bit ``value`` (1 to 5 bytes)."""
    if -SMALL_LIMIT <= value < SMALL_LIMIT:
        return ENCODED[value + SMALL_LIMIT]
    if not INT32_MIN <= value <= INT32_MAX:
        raise InvalidArgumentError(f"{value} does not fit in a varint (signed 32-bit)")
    return _uleb(((value << 1) ^ (value >> 31)) & _MASK32)


def encode_varlong(value: int) -> bytes:
    """The zigzag varlong of a signed 64-bit ``value`` (1 to 10 bytes)."""
    if -SMALL_LIMIT <= value < SMALL_LIMIT:
        return ENCODED[value + SMALL_LIMIT]
    if not INT64_MIN <= value <= INT64_MAX:
        raise InvalidArgumentError(f"{value} does not fit in a varlong (signed 64-bit)")
    return _uleb(((value << 1) ^ (value >> 63)) & _MASK64)


def size_of_varint(value: int) -> int:
    """Bytes ``encode_varint(value)`` takes, without building them."""
    n = ((value << 1) ^ (value >> 31)) & _MASK32
    return (n.bit_length() + 6) // 7 or 1


def size_of_varlong(value: int) -> int:
    """Bytes ``encode_varlong(value)`` takes, without building them."""
    n = ((value << 1) ^ (value >> 63)) & _MASK64
    return (n.bit_length() + 6) // 7 or 1


def _decode(buf: BytesLike, pos: int, max_bytes: int, mask: int, what: str) -> tuple[int, int]:
    data = buf
    end = len(data)
    start = pos
    n = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise CorruptRecordError(
                f"{what} runs past the end of its buffer ({end} bytes)", position=start
            )
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            n &= mask
            return (n >> 1) ^ -(n & 1), pos
        shift += 7
    raise CorruptRecordError(
        f"{what} is too long (the continuation bit is set in its byte {max_bytes})",
        position=start,
    )


def decode_varint(buf: BytesLike, pos: int = 0) -> tuple[int, int]:
    """Read a zigzag varint at ``pos``: ``(value, next_position)``; at most 5 bytes."""
    return _decode(buf, pos, 5, _MASK32, "varint")


def decode_varlong(buf: BytesLike, pos: int = 0) -> tuple[int, int]:
    """Read a zigzag varlong at ``pos``: ``(value, next_position)``; at most 10 bytes."""
    return _decode(buf, pos, 10, _MASK64, "varlong")
