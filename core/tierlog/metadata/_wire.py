"""Readers and writers for Kafka's flexible-version ("compact") message encoding.

These are the primitives of the ``__remote_log_metadata`` records (see ``serde``): unsigned
varints, compact strings, compact nullable bytes, compact arrays, uuids and tagged-field sections,
all written the way Kafka's generated message classes write them.

A metadata partition is replayed from its start whenever a broker (re)builds its cache, so these
functions run millions of times. They therefore work on ``bytes`` with an integer position
(``(value, next_position)`` results) instead of a stream object, decode fixed-width runs with one
precompiled ``struct.Struct`` call (``FixedLayout``), and take the one-byte path of varints and
empty tagged-field sections without a loop.

Every reader checks bounds before it reads and raises ``MetadataRecordError`` naming the field and
the offset in the record, so no ``IndexError`` or ``struct.error`` ever reaches a caller.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from struct import Struct, calcsize
from typing import Any, Final

from tierlog.spi import MetadataRecordError, Uuid

MAX_STRING_LENGTH: Final = 0x7FFF
"""Kafka's generated code refuses strings longer than ``Short.MAX_VALUE`` UTF-8 bytes."""

_UINT32_MAX: Final = 0xFFFFFFFF

_SMALL_UVARINTS: Final = tuple(bytes((i,)) for i in range(0x80))

UUID: Final = Struct(">QQ")
INT8: Final = Struct(">b")
INT32: Final = Struct(">i")
INT64: Final = Struct(">q")

# Signed ranges of struct's integer codes, to name the field that does not fit when packing fails.
_RANGES: Final[dict[str, tuple[int, int]]] = {
    "B": (0, (1 << 8) - 1),
    "b": (-(1 << 7), (1 << 7) - 1),
    "h": (-(1 << 15), (1 << 15) - 1),
    "i": (-(1 << 31), (1 << 31) - 1),
    "q": (-(1 << 63), (1 << 63) - 1),
    "Q": (0, (1 << 64) - 1),
}
_TYPE_NAMES: Final[dict[str, str]] = {
    "B": "uint8",
    "b": "int8",
    "h": "int16",
    "i": "int32",
    "q": "int64",
    "Q": "uint64",
    "?": "bool",
}


def truncated(what: str, pos: int, need: int, buf: bytes) -> MetadataRecordError:
    """The error for a field that runs past the end of the record."""
    left = max(len(buf) - pos, 0)
    return MetadataRecordError(
        f"truncated record: {what} at offset {pos} needs {need} byte(s), only {left} left"
    )


# Unsigned varints ---------------------------------------------------------------------------------


def read_uvarint(buf: bytes, pos: int, what: str) -> tuple[int, int]:
    """An unsigned LEB128 varint of at most 5 bytes (Kafka's ``readUnsignedVarint``).

    Kafka reads these into a Java ``int``; the value is returned unsigned (0 .. 2**32 - 1) and
    callers compare lengths against the bytes that remain, so a value Java would see as negative
    is rejected rather than wrapped.
    """
    if pos >= len(buf):
        raise truncated(what, pos, 1, buf)
    first = buf[pos]
    if first < 0x80:
        return first, pos + 1
    return _read_uvarint_tail(buf, pos, what)


def _read_uvarint_tail(buf: bytes, pos: int, what: str) -> tuple[int, int]:
    value = 0
    shift = 0
    cursor = pos
    end = len(buf)
    while True:
        if cursor >= end:
            raise truncated(f"{what} (varint)", cursor, 1, buf)
        byte = buf[cursor]
        cursor += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value & _UINT32_MAX, cursor
        shift += 7
        if shift > 28:
            raise MetadataRecordError(
                f"malformed record: {what} at offset {pos} is a varint longer than 5 bytes"
            )


def uvarint(value: int) -> bytes:
    """The unsigned varint encoding of ``value`` (0 .. 2**32 - 1)."""
    if 0 <= value < 0x80:
        return _SMALL_UVARINTS[value]
    if not 0 <= value <= _UINT32_MAX:
        raise MetadataRecordError(f"cannot encode {value} as an unsigned 32-bit varint")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Fixed-width runs ---------------------------------------------------------------------------------


class FixedLayout:
    """Consecutive fixed-width big-endian fields read or written by one precompiled ``Struct``.

    ``fields`` pairs each field's name with its struct codes (``"q"`` for an int64, ``"QQ"`` for a
    uuid as two unsigned halves), so a short buffer or an out-of-range value is reported against
    the exact field although the run is decoded in one call.
    """

    __slots__ = ("_fields", "size", "struct")

    def __init__(self, fields: Sequence[tuple[str, str]]) -> None:
        self._fields: tuple[tuple[str, str, int], ...] = tuple(
            (name, codes, calcsize(">" + codes)) for name, codes in fields
        )
        self.struct: Final = Struct(">" + "".join(codes for _, codes in fields))
        self.size: Final = self.struct.size

    def unpack(self, buf: bytes, pos: int, prefix: str = "") -> tuple[Any, ...]:
        """The values of the run at ``pos``; the caller advances by ``size``.

        ``prefix`` is put before the field's name in the error of a short buffer (the path of
        the struct the run belongs to).
        """
        if pos + self.size > len(buf):
            raise self.truncation(buf, pos, prefix)
        return self.struct.unpack_from(buf, pos)

    def pack(self, record: str, *values: object) -> bytes:
        """The bytes of the run; a value that does not fit names ``record`` and the field."""
        try:
            return self.struct.pack(*values)
        except struct.error:
            raise self._bad_value(record, values) from None

    def truncation(self, buf: bytes, pos: int, prefix: str = "") -> MetadataRecordError:
        """The error naming the first field of the run at ``pos`` that ``buf`` cuts short."""
        cursor = pos
        for name, _codes, size in self._fields:
            if cursor + size > len(buf):
                return truncated(prefix + name, cursor, size, buf)
            cursor += size
        return MetadataRecordError(f"internal error: the run at offset {pos} is not truncated")

    def _bad_value(self, record: str, values: Sequence[object]) -> MetadataRecordError:
        flat = iter(values)
        for name, codes, _size in self._fields:
            for code in codes:
                value = next(flat, None)
                problem = _range_problem(code, value)
                if problem is not None:
                    return MetadataRecordError(f"cannot encode {record}: {name} {problem}")
        return MetadataRecordError(f"cannot encode {record}: a field has an invalid value")


def _range_problem(code: str, value: object) -> str | None:
    type_name = _TYPE_NAMES.get(code, code)
    if code == "?":
        return None if isinstance(value, bool) else f"must be a bool, got {value!r}"
    if not isinstance(value, int):
        return f"must be an {type_name}, got {type(value).__name__} {value!r}"
    low, high = _RANGES.get(code, (value, value))
    if not low <= value <= high:
        return f"= {value} does not fit in an {type_name}"
    return None


def check_int(record: str, name: str, code: str, value: object) -> None:
    """Raise ``MetadataRecordError`` if ``value`` does not fit the struct ``code``."""
    problem = _range_problem(code, value)
    if problem is not None:
        raise MetadataRecordError(f"cannot encode {record}: {name} {problem}")


# Uuids --------------------------------------------------------------------------------------------


def read_uuid(buf: bytes, pos: int, what: str) -> tuple[Uuid, int]:
    """16 bytes, most significant half first."""
    if pos + 16 > len(buf):
        raise truncated(what, pos, 16, buf)
    msb, lsb = UUID.unpack_from(buf, pos)
    return Uuid(msb, lsb), pos + 16


# Compact strings and bytes ------------------------------------------------------------------------


def read_compact_string(buf: bytes, pos: int, what: str) -> tuple[str, int]:
    """A non-nullable COMPACT_STRING: ``uvarint(len + 1)`` then UTF-8 bytes."""
    marker, start = read_uvarint(buf, pos, f"{what} length")
    if marker == 0:
        raise MetadataRecordError(
            f"malformed record: non-nullable string {what} at offset {pos} is null"
        )
    length = marker - 1
    if length > MAX_STRING_LENGTH:
        raise MetadataRecordError(
            f"malformed record: string {what} at offset {pos} has invalid length {length} "
            f"(at most {MAX_STRING_LENGTH})"
        )
    end = start + length
    if end > len(buf):
        raise truncated(what, start, length, buf)
    try:
        return buf[start:end].decode("utf-8"), end
    except UnicodeDecodeError as exc:
        raise MetadataRecordError(
            f"malformed record: string {what} at offset {start} is not valid UTF-8 ({exc.reason})"
        ) from None


def compact_string(record: str, what: str, value: str) -> bytes:
    """The COMPACT_STRING encoding of ``value`` (Kafka refuses more than 32767 bytes)."""
    if not isinstance(value, str):
        raise MetadataRecordError(
            f"cannot encode {record}: {what} must be a str, got {type(value).__name__}"
        )
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MetadataRecordError(
            f"cannot encode {record}: {what} is not encodable as UTF-8 ({exc.reason})"
        ) from None
    if len(data) > MAX_STRING_LENGTH:
        raise MetadataRecordError(
            f"cannot encode {record}: {what} is {len(data)} UTF-8 bytes, "
            f"longer than {MAX_STRING_LENGTH}"
        )
    return uvarint(len(data) + 1) + data


def read_compact_nullable_bytes(buf: bytes, pos: int, what: str) -> tuple[bytes | None, int]:
    """COMPACT_NULLABLE_BYTES: ``00`` is null, otherwise ``uvarint(len + 1)`` then the bytes."""
    first = buf[pos] if pos < len(buf) else -1
    if first == 0:
        return None, pos + 1
    marker, start = read_uvarint(buf, pos, f"{what} length")
    if marker == 0:  # a null written as a multi-byte varint
        return None, start
    length = marker - 1
    end = start + length
    if end > len(buf):
        raise truncated(what, start, length, buf)
    return buf[start:end], end


def compact_nullable_bytes(record: str, what: str, value: bytes | None) -> bytes:
    """The COMPACT_NULLABLE_BYTES encoding of ``value``."""
    if value is None:
        return b"\x00"
    if not isinstance(value, bytes | bytearray | memoryview):
        raise MetadataRecordError(
            f"cannot encode {record}: {what} must be bytes, got {type(value).__name__}"
        )
    return uvarint(len(value) + 1) + bytes(value)


# Compact arrays -----------------------------------------------------------------------------------


def read_array_length(buf: bytes, pos: int, what: str, min_element_size: int) -> tuple[int, int]:
    """The element count of a non-nullable COMPACT_ARRAY (``uvarint(n + 1)``).

    The count is checked against the bytes left before anything is allocated, as Kafka does, so
    a corrupt count cannot make the reader build a huge list.
    """
    marker, start = read_uvarint(buf, pos, f"{what} length")
    if marker == 0:
        raise MetadataRecordError(
            f"malformed record: non-nullable array {what} at offset {pos} is null"
        )
    count = marker - 1
    need = count * min_element_size
    if start + need > len(buf):
        raise MetadataRecordError(
            f"truncated record: array {what} at offset {pos} has {count} element(s), which need "
            f"at least {need} byte(s), only {len(buf) - start} left"
        )
    return count, start


# Tagged fields ------------------------------------------------------------------------------------


def read_tagged_fields(buf: bytes, pos: int, what: str) -> tuple[list[tuple[int, bytes]], int]:
    """A tagged-field section as raw ``(tag, data)`` pairs in the order they were written."""
    if pos < len(buf) and buf[pos] == 0:
        return [], pos + 1
    count, cursor = read_uvarint(buf, pos, f"{what} tagged-field count")
    # Each field takes at least two bytes (tag and size), which bounds a corrupt count.
    if cursor + 2 * count > len(buf):
        raise MetadataRecordError(
            f"truncated record: {what} at offset {pos} announces {count} tagged field(s), "
            f"only {len(buf) - cursor} byte(s) left"
        )
    fields: list[tuple[int, bytes]] = []
    for _ in range(count):
        tag, cursor = read_uvarint(buf, cursor, f"{what} tag")
        size, cursor = read_uvarint(buf, cursor, f"{what} tag {tag} size")
        end = cursor + size
        if end > len(buf):
            raise truncated(f"{what} tag {tag} data", cursor, size, buf)
        fields.append((tag, buf[cursor:end]))
        cursor = end
    return fields, cursor


def skip_tagged_fields(buf: bytes, pos: int, what: str) -> int:
    """Skip a nested struct's tagged-field section: unknown tags there are tolerated, not kept."""
    if pos < len(buf) and buf[pos] == 0:
        return pos + 1
    return read_tagged_fields(buf, pos, what)[1]


def tagged_fields(fields: Iterable[tuple[int, bytes]]) -> bytes:
    """A tagged-field section with ``fields`` in ascending tag order, as Kafka writes it."""
    ordered = sorted(fields, key=lambda field: field[0])
    if not ordered:
        return b"\x00"
    parts = [uvarint(len(ordered))]
    for tag, data in ordered:
        parts.append(uvarint(tag))
        parts.append(uvarint(len(data)))
        parts.append(bytes(data))
    return b"".join(parts)


EMPTY_TAGGED_FIELDS: Final = b"\x00"
