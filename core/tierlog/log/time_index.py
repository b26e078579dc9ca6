"""The time index (``<base>.timeindex``): from which offset to search for a timestamp.

Entries are 12 bytes, big-endian: ``timestamp int64 | relativeOffset int32`` (Kafka's
``TimeIndex``). An entry ``(T, O)`` means the largest timestamp seen up to offset ``O`` is ``T``:
every record with a timestamp above ``T`` comes after ``O``. An entry is only kept when its
timestamp is greater than the last one, so timestamps strictly increase (an index of records
without timestamps, all ``-1``, stays empty). A lookup returns the largest entry whose timestamp
is <= the target, else ``(-1, base_offset)``.

The last slot is reserved: ``is_full()`` is true one entry early, so the entry written when the
segment is rolled or closed (``maybe_append(..., skip_full_check=True)``) always fits.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import ClassVar, Final

from tierlog.log.index import (
    NO_TIMESTAMP,
    AbstractIndex,
    InvalidOffsetError,
    TimestampOffset,
)
from tierlog.spi import IllegalStateError, InvalidArgumentError

__all__ = ["TimeIndex"]

_ENTRY: Final = struct.Struct(">qi")


class TimeIndex(AbstractIndex):
    """A segment's timestamp -> offset index, file-compatible with Kafka's ``TimeIndex``."""

    ENTRY_SIZE: ClassVar[int] = 12
    _ENTRY_FORMAT: ClassVar[str] = ">qi"

    _last_entry: TimestampOffset

    def _key(self, raw: tuple[int, ...]) -> int:
        return raw[0]

    def _value(self, raw: tuple[int, ...]) -> int:
        return self.base_offset + raw[1]

    def _parse(self, raw: tuple[int, ...]) -> TimestampOffset:
        return TimestampOffset(raw[0], self.base_offset + raw[1])

    def _load_last_entry(self) -> None:
        if self.entries == 0:
            self._last_entry = TimestampOffset(NO_TIMESTAMP, self.base_offset)
        else:
            self._last_entry = self._parse(self._raw_at(self.entries - 1))

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(-1, base_offset)`` when the index is empty."""
        return self._last_entry

    def is_full(self) -> bool:
        """Full one slot early: the last slot is kept for the entry added at roll or close."""
        return self.entries >= self.max_entries - 1

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The largest entry whose timestamp is <= the target, else ``(-1, base_offset)``."""
        slot = self._largest_lower_bound_slot(target_timestamp)
        if slot == -1:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self._parse(self._raw_at(slot))

    def entry(self, n: int) -> TimestampOffset:
        """The ``n``-th entry; ``InvalidArgumentError`` if there is no such entry."""
        self._check_entry_number(n)
        return self._parse(self._raw_at(n))

    def __iter__(self) -> Iterator[TimestampOffset]:
        """Every entry in order, read in chunks."""
        for _, raw in self._iter_raw():
            yield self._parse(raw)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add ``(timestamp, offset)`` if ``timestamp`` is above the last entry's timestamp.

        As Kafka: ``InvalidArgumentError`` if the index is full (unless ``skip_full_check``, used
        at roll and close), ``InvalidOffsetError`` if ``offset`` is below the last entry's,
        ``IllegalStateError`` if ``timestamp`` is below the last one. The same entry as the last
        one is ignored silently (a segment closed twice).
        """
        with self._lock:
            if not skip_full_check and self.is_full():
                raise InvalidArgumentError(
                    f"attempt to append to a full time index {self.path} (size = {self.entries})"
                )
            last = self._last_entry
            if self.entries != 0 and offset < last.offset:
                raise InvalidOffsetError(
                    f"attempt to append an offset ({offset}) to slot {self.entries} no larger "
                    f"than the last offset appended ({last.offset}) to {self.path}"
                )
            if self.entries != 0 and timestamp < last.timestamp:
                raise IllegalStateError(
                    f"attempt to append a timestamp ({timestamp}) to slot {self.entries} no "
                    f"larger than the last timestamp appended ({last.timestamp}) to {self.path}"
                )
            if timestamp > last.timestamp:
                if self.entries >= self.max_entries:
                    raise InvalidArgumentError(
                        f"no room in time index {self.path} ({self.entries} entries)"
                    )
                self._write_entry(_ENTRY.pack(timestamp, self.relative_offset(offset)))
                self._last_entry = TimestampOffset(timestamp, offset)

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose offset is >= ``offset`` (no effect past the last entry)."""
        with self._lock:
            slot = self._largest_lower_bound_slot(offset, by_value=True)
            if slot < 0:
                new_entries = 0
            elif self._raw_at(slot)[1] == offset - self.base_offset:
                new_entries = slot
            else:
                new_entries = slot + 1
            self._truncate_to_entries(new_entries)

    def sanity_check(self) -> None:
        """Raise ``CorruptIndexError`` (file and byte position) for any inconsistency.

        Checked: the length is a multiple of 12; timestamps strictly increase; offsets are >= the
        base offset and never decrease. Kafka checks the last entry against the first timestamp
        and the base offset; a file that passes here passes there.
        """
        self._check_length()
        prev_timestamp: int | None = None
        prev_relative = 0
        for n, (timestamp, relative) in self._iter_raw():
            at = n * self.ENTRY_SIZE
            if prev_timestamp is not None and timestamp <= prev_timestamp:
                raise self._corrupt(
                    f"entry {n} has timestamp {timestamp}, not above the previous entry's "
                    f"{prev_timestamp}",
                    at,
                )
            if relative < 0:
                raise self._corrupt(
                    f"entry {n} has offset {self.base_offset + relative}, below the base offset "
                    f"{self.base_offset}",
                    at + 8,
                )
            if relative < prev_relative:
                raise self._corrupt(
                    f"entry {n} has offset {self.base_offset + relative}, below the previous "
                    f"entry's {self.base_offset + prev_relative}",
                    at + 8,
                )
            prev_timestamp, prev_relative = timestamp, relative
