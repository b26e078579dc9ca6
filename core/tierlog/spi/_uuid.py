"""Kafka's ``Uuid``: 128 bits shown as 22 characters of unpadded base64url.

Kafka identifies topics and remote segments by this type, and its text form appears in file names
(LocalTieredStorage layout), console output and the metadata records' JSON, so it must match
Kafka's exactly: ``Uuid(0, 1)`` is ``AAAAAAAAAAAAAAAAAAAAAQ``.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import secrets
from typing import Final

from tierlog.spi._errors import InvalidArgumentError

_MASK64: Final = (1 << 64) - 1


def _signed64(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


class Uuid:
    """An immutable 128-bit identifier with Kafka's string form and (msb, lsb) accessors."""

    __slots__ = ("_hash", "_text", "_value")
    _value: int
    _hash: int  # hash(_value), kept: ids key the caches every remote read goes through
    _text: str | None  # str(self), built on first use: ids are formatted on every remote read

    def __init__(self, most_significant_bits: int, least_significant_bits: int) -> None:
        object.__setattr__(
            self,
            "_value",
            ((most_significant_bits & _MASK64) << 64) | (least_significant_bits & _MASK64),
        )
        object.__setattr__(self, "_hash", hash(self._value))
        object.__setattr__(self, "_text", None)

    # Construction -------------------------------------------------------------------------------
    @classmethod
    def from_bytes(cls, data: bytes) -> Uuid:
        """Build from 16 big-endian bytes (msb first): the wire layout of Kafka's ``uuid``."""
        if len(data) != 16:
            raise InvalidArgumentError(f"a Uuid is 16 bytes, got {len(data)}")
        value = int.from_bytes(data, "big")
        return cls(value >> 64, value)

    @classmethod
    def from_int(cls, value: int) -> Uuid:
        """Build from the unsigned 128-bit integer (msb in the high 64 bits)."""
        if not 0 <= value < 1 << 128:
            raise InvalidArgumentError(f"a Uuid integer must fit in 128 unsigned bits: {value}")
        return cls(value >> 64, value)

    @classmethod
    def from_string(cls, text: str) -> Uuid:
        """Parse Kafka's text form: 22 characters of base64url (Kafka also accepts the padded
        24-character form, so do we)."""
        if len(text) == 24 and text.endswith("=="):
            text = text[:22]
        if len(text) != 22:
            raise InvalidArgumentError(
                f"invalid Uuid {text!r}: expected 22 base64url characters, got {len(text)}"
            )
        try:
            raw = base64.urlsafe_b64decode(text + "==")
        except (binascii.Error, ValueError) as exc:
            raise InvalidArgumentError(f"invalid Uuid {text!r}: {exc}") from exc
        if len(raw) != 16 or base64.urlsafe_b64encode(raw).decode("ascii")[:22] != text:
            raise InvalidArgumentError(f"invalid Uuid {text!r}: not a canonical base64url Uuid")
        return cls.from_bytes(raw)

    @classmethod
    def random(cls) -> Uuid:
        """A random version-4 Uuid, avoiding the ids Kafka reserves, as Kafka's ``randomUuid``.

        Kafka never hands out ``ZERO_UUID``, ``METADATA_TOPIC_ID`` (0, 1) or an id whose text
        starts with ``-`` (it would read as a command-line flag).
        """
        while True:
            raw = bytearray(secrets.token_bytes(16))
            raw[6] = (raw[6] & 0x0F) | 0x40
            raw[8] = (raw[8] & 0x3F) | 0x80
            candidate = cls.from_bytes(bytes(raw))
            if candidate._value > 1 and not str(candidate).startswith("-"):
                return candidate

    # Accessors ----------------------------------------------------------------------------------
    @property
    def most_significant_bits(self) -> int:
        """The high 64 bits as Java's signed ``long``."""
        return _signed64(self._value >> 64)

    @property
    def least_significant_bits(self) -> int:
        """The low 64 bits as Java's signed ``long``."""
        return _signed64(self._value)

    @property
    def int(self) -> builtins.int:
        """The unsigned 128-bit value."""
        return self._value

    @property
    def bytes(self) -> bytes:
        """16 big-endian bytes, msb first: Kafka's wire layout."""
        return self._value.to_bytes(16, "big")

    # Protocols ----------------------------------------------------------------------------------
    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Uuid is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Uuid) and other._value == self._value

    def __lt__(self, other: Uuid) -> bool:
        return self._value < other._value

    def __hash__(self) -> builtins.int:
        return self._hash

    def __str__(self) -> str:
        text = self._text
        if text is None:
            text = base64.urlsafe_b64encode(self.bytes).decode("ascii").rstrip("=")
            object.__setattr__(self, "_text", text)
        return text

    def __repr__(self) -> str:
        return f"Uuid({str(self)!r})"

    def __reduce__(self) -> tuple[type[Uuid], tuple[builtins.int, builtins.int]]:
        return (Uuid, (self._value >> 64, self._value & _MASK64))


ZERO_UUID: Final = Uuid(0, 0)
"""Kafka's ``Uuid.ZERO_UUID``."""

METADATA_TOPIC_ID: Final = Uuid(0, 1)
"""Kafka's ``Uuid.METADATA_TOPIC_ID`` (reserved, never generated)."""
