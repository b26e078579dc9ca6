"""The offset index (``<base>.index``): which byte position to start reading for an offset.

Entries are 8 bytes, big-endian: ``relativeOffset int32 (offset - baseOffset) | position int32``
(Kafka's ``OffsetIndex``). The index is sparse: an entry is added about every
``index.interval.bytes`` bytes, for the last offset of a batch and the position where that batch
starts. A lookup returns the largest entry whose offset is <= the target, else
``(base_offset, 0)``; a reader then scans batches forward from that position.

Preallocation, reopening, reading and sanity rules are those of ``tierlog.log.index``.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from typing import ClassVar, Final

from tierlog.log.index import (
    AbstractIndex,
    InvalidOffsetError,
    OffsetPosition,
)
from tierlog.spi import InvalidArgumentError

__all__ = ["OffsetIndex"]

_LOG = logging.getLogger(__name__)

_ENTRY: Final = struct.Struct(">ii")
_MAX_INT32: Final = (1 << 31) - 1


class OffsetIndex(AbstractIndex):
    """A segment's offset -> position index, file-compatible with Kafka's ``OffsetIndex``."""

    ENTRY_SIZE: ClassVar[int] = 8
    _ENTRY_FORMAT: ClassVar[str] = ">ii"

    _last_offset: int

    def _key(self, raw: tuple[int, ...]) -> int:
        return self.base_offset + raw[0]

    def _value(self, raw: tuple[int, ...]) -> int:
        return raw[1]

    def _load_last_entry(self) -> None:
        self._last_offset = self._last_entry().offset

    def _last_entry(self) -> OffsetPosition:
        if self.entries == 0:
            return OffsetPosition(self.base_offset, 0)
        return self._parse(self._raw_at(self.entries - 1))

    def _parse(self, raw: tuple[int, ...]) -> OffsetPosition:
        return OffsetPosition(self.base_offset + raw[0], raw[1])

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or the base offset when the index is empty."""
        return self._last_offset

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The largest entry whose offset is <= ``target_offset``, else ``(base_offset, 0)``."""
        slot = self._largest_lower_bound_slot(target_offset)
        if slot == -1:
            return OffsetPosition(self.base_offset, 0)
        return self._parse(self._raw_at(slot))

    def entry(self, n: int) -> OffsetPosition:
        """The ``n``-th entry; ``InvalidArgumentError`` if there is no such entry."""
        self._check_entry_number(n)
        return self._parse(self._raw_at(n))

    def fetch_upper_bound_offset(
        self, fetch_offset: OffsetPosition, fetch_size: int
    ) -> OffsetPosition | None:
        """An entry certainly past a fetch of ``fetch_size`` bytes from ``fetch_offset``'s position.

        The first entry whose position is >= ``fetch_offset.position + fetch_size``, or ``None``;
        not the smallest such offset in general, only a bound (Kafka's ``fetchUpperBoundOffset``,
        used to limit the aborted-transaction search of a fetch).
        """
        slot = self._smallest_upper_bound_slot(fetch_offset.position + fetch_size, by_value=True)
        if slot == -1:
            return None
        return self._parse(self._raw_at(slot))

    def __iter__(self) -> Iterator[OffsetPosition]:
        """Every entry in order, read in chunks."""
        for _, raw in self._iter_raw():
            yield self._parse(raw)

    def append(self, offset: int, position: int) -> None:
        """Add ``offset -> position``; the offset must be larger than every offset in the index.

        Raises ``InvalidArgumentError`` if the index is full (the segment must roll first),
        ``InvalidOffsetError`` if the offset does not increase, ``IndexOffsetOverflowError`` if it
        cannot be stored relative to the base offset.
        """
        with self._lock:
            if self.is_full():
                raise InvalidArgumentError(
                    f"attempt to append to a full index {self.path} (size = {self.entries})"
                )
            if self.entries != 0 and offset <= self._last_offset:
                raise InvalidOffsetError(
                    f"attempt to append an offset {offset} to position {self.entries} no larger "
                    f"than the last offset appended ({self._last_offset}) to {self.path}"
                )
            if not 0 <= position <= _MAX_INT32:
                raise InvalidArgumentError(
                    f"an index position must be within [0, 2^31-1], got {position}"
                )
            self._write_entry(_ENTRY.pack(self.relative_offset(offset), position))
            self._last_offset = offset

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose offset is >= ``offset`` (no effect past the last entry)."""
        with self._lock:
            slot = self._largest_lower_bound_slot(offset)
            if slot < 0:
                new_entries = 0
            elif self._raw_at(slot)[0] == offset - self.base_offset:
                new_entries = slot
            else:
                new_entries = slot + 1
            self._truncate_to_entries(new_entries)

    def sanity_check(self, segment_size: int | None = None) -> None:
        """Raise ``CorruptIndexError`` (file and byte position) for any inconsistency.

        Checked: the length is a multiple of 8; offsets are >= the base offset and strictly
        increase; positions are >= 0 and strictly increase (each entry is a different batch);
        with ``segment_size``, every position is inside the segment. An empty index is sane.
        """
        self._check_length()
        prev_relative = prev_position = -1
        for n, (relative, position) in self._iter_raw():
            at = n * self.ENTRY_SIZE
            if relative < 0:
                raise self._corrupt(
                    f"entry {n} has offset {self.base_offset + relative}, below the base offset "
                    f"{self.base_offset}",
                    at,
                )
            if relative <= prev_relative:
                raise self._corrupt(
                    f"entry {n} has offset {self.base_offset + relative}, not above the previous "
                    f"entry's {self.base_offset + prev_relative}",
                    at,
                )
            if position < 0:
                raise self._corrupt(f"entry {n} has a negative position {position}", at + 4)
            if position <= prev_position:
                raise self._corrupt(
                    f"entry {n} has position {position}, not above the previous entry's "
                    f"{prev_position}",
                    at + 4,
                )
            if segment_size is not None and position >= segment_size:
                raise self._corrupt(
                    f"entry {n} points to position {position}, past the end of its "
                    f"{segment_size}-byte segment",
                    at + 4,
                )
            prev_relative, prev_position = relative, position
