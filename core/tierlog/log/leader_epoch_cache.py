"""The leader epoch cache: at which offset each leader epoch started (``leader-epoch-checkpoint``).

A port of Kafka's ``LeaderEpochFileCache`` (``storage/.../internals/epoch``). Followers use it to
find where their log diverges from the leader's (``end_offset_for``, OffsetsForLeaderEpoch), the
RLM to know which epochs a segment spans (``epoch_entries_in_range``) and to ship the epoch
history with each copied segment, and remote reads to map an offset to its epoch
(``epoch_for_offset``).

Kafka's rules, kept exactly:

- ``assign(epoch, start_offset)`` is a no-op when ``epoch`` is the latest epoch and the offset is
  not lower than its start (the common case: every batch of the current leader). Otherwise the
  entries that would break monotonicity are removed first, newest first, while their epoch is
  ``>= epoch`` *or* their start offset is ``>= start_offset``; so assigning an epoch lower than the
  latest does not fail and is not ignored: it truncates the later epochs (Kafka's
  ``shouldEnforceMonotonicallyIncreasingEpochs``). A log only assigns epochs higher than its
  latest during recovery, which is where "a lower epoch is ignored" comes from.
- ``truncate_from_end(offset)`` removes entries starting at or after ``offset``;
  ``truncate_from_start(offset)`` removes entries up to ``offset`` and re-adds the last of them
  starting at ``offset`` (the epoch of the new log start is kept).
- Negative epochs or offsets are refused (``InvalidArgumentError``).

Every change is written to the checkpoint file at once (atomically, ``checkpoint.atomic_write``).
Kafka flushes truncations asynchronously and relies on the log loader to truncate again after a
crash; tierlog writes synchronously, which is simpler and never leaves stale entries, and the
loader truncates anyway. A cache without a file (``path=None``) is an in-memory view, as Kafka
builds one for a remote segment's epochs.
"""

from __future__ import annotations

import logging
import os
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from pathlib import Path

from tierlog.log.checkpoint import (
    EpochEntry,
    encode_leader_epoch_checkpoint,
    read_leader_epoch_checkpoint,
    write_leader_epoch_checkpoint,
)
from tierlog.spi import InvalidArgumentError

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEntry",
    "LeaderEpochFileCache",
]

_LOG = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
"""Kafka's ``UNDEFINED_EPOCH``: no epoch (returned by ``end_offset_for`` when unknown)."""
UNDEFINED_EPOCH_OFFSET = -1
"""Kafka's ``UNDEFINED_EPOCH_OFFSET``."""


class LeaderEpochFileCache:
    """Epoch -> start offset entries, strictly increasing in both, persisted as a checkpoint.

    ``path`` is the ``leader-epoch-checkpoint`` file, read at construction when it exists (its
    entries are assigned one by one, as Kafka does, so a file that breaks monotonicity is
    repaired); ``entries`` instead seeds the cache without reading the file. ``sync`` controls the
    ``fsync`` of each write. Thread-safe: one lock around every access.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        entries: Iterable[EpochEntry | tuple[int, int]] | None = None,
        *,
        sync: bool = True,
    ) -> None:
        self._path = Path(path) if path is not None else None
        self._sync = sync
        self._lock = threading.RLock()
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        if entries is not None:
            for epoch, offset in entries:
                self._assign(EpochEntry(epoch, offset))
        elif self._path is not None and self._path.exists():
            for entry in read_leader_epoch_checkpoint(self._path):
                self._assign(entry)

    # Properties --------------------------------------------------------------------------------
    @property
    def path(self) -> Path | None:
        return self._path

    def __len__(self) -> int:
        return len(self._epochs)

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self.epoch_entries()!r}, path={self._path})"

    # Assignment --------------------------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed."""
        epochs, offsets = self._epochs, self._offsets
        if epochs and epoch == epochs[-1] and start_offset >= offsets[-1] >= 0:
            # The common case (every batch of the current leader), checked before taking the
            # lock, as Kafka does.
            return False
        with self._lock:
            changed = self._assign(EpochEntry(epoch, start_offset))
            if changed:
                _LOG.debug(
                    "Appended new epoch entry %s. Cache now contains %d entries.",
                    EpochEntry(epoch, start_offset),
                    len(self._epochs),
                )
                self._write()
            return changed

    def assign_all(self, entries: Iterable[EpochEntry | tuple[int, int]]) -> None:
        """Assign several entries and write the file once (a follower's fetched epoch index)."""
        with self._lock:
            items = [EpochEntry(*e) for e in entries]
            for entry in items:
                self._assign(entry)
            if items:
                self._write()

    def _is_update_needed(self, entry: EpochEntry) -> bool:
        if not self._epochs:
            return True
        return entry.epoch != self._epochs[-1] or entry.start_offset < self._offsets[-1]

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise InvalidArgumentError(f"Received invalid partition leader epoch entry {entry}")
        if not self._is_update_needed(entry):
            return False
        removed: list[EpochEntry] = []
        while self._epochs and (
            self._epochs[-1] >= entry.epoch or self._offsets[-1] >= entry.start_offset
        ):
            removed.append(EpochEntry(self._epochs.pop(), self._offsets.pop()))
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            _LOG.warning(
                "New epoch entry %s caused truncation of conflicting entries %s. Cache now "
                "contains %d entries.",
                entry,
                removed,
                len(self._epochs),
            )
        self._epochs.append(entry.epoch)
        self._offsets.append(entry.start_offset)
        return True

    # Queries -----------------------------------------------------------------------------------
    def is_empty(self) -> bool:
        return not self._epochs

    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return EpochEntry(self._epochs[-1], self._offsets[-1]) if self._epochs else None

    def latest_epoch(self) -> int | None:
        """The latest epoch (the one being written to), or None for an empty cache."""
        with self._lock:
            return self._epochs[-1] if self._epochs else None

    def earliest_entry(self) -> EpochEntry | None:
        with self._lock:
            return EpochEntry(self._epochs[0], self._offsets[0]) if self._epochs else None

    def previous_epoch(self, epoch: int | None = None) -> int | None:
        """The epoch before ``epoch`` (default: before the latest), or None."""
        with self._lock:
            if epoch is None:
                if not self._epochs:
                    return None
                epoch = self._epochs[-1]
            i = bisect_left(self._epochs, epoch)
            return self._epochs[i - 1] if i > 0 else None

    def previous_entry(self, epoch: int) -> EpochEntry | None:
        with self._lock:
            i = bisect_left(self._epochs, epoch)
            return EpochEntry(self._epochs[i - 1], self._offsets[i - 1]) if i > 0 else None

    def next_epoch(self, epoch: int) -> int | None:
        with self._lock:
            i = bisect_right(self._epochs, epoch)
            return self._epochs[i] if i < len(self._epochs) else None

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        with self._lock:
            i = bisect_left(self._epochs, epoch)
            if i < len(self._epochs) and self._epochs[i] == epoch:
                return EpochEntry(epoch, self._offsets[i])
            return None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch of the message at ``offset``: the last entry starting at or before it."""
        with self._lock:
            i = bisect_right(self._offsets, offset)
            return self._epochs[i - 1] if i > 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor``: ``(epoch, end offset)`` for an OffsetsForLeaderEpoch request.

        The epoch returned is the largest known epoch <= the requested one, and the end offset
        the start of the next known epoch, or ``log_end_offset`` for the latest epoch. Undefined
        (``(-1, -1)``) for ``UNDEFINED_EPOCH``, an empty cache or an epoch above every known one;
        for an epoch below every known one, ``(requested, first start offset)``.
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if self._epochs and self._epochs[-1] == requested_epoch:
                return requested_epoch, log_end_offset
            higher = bisect_right(self._epochs, requested_epoch)
            if higher >= len(self._epochs):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if higher == 0:
                return requested_epoch, self._offsets[0]
            return self._epochs[higher - 1], self._offsets[higher]

    def epoch_entries(self) -> list[EpochEntry]:
        with self._lock:
            return [EpochEntry(e, o) for e, o in zip(self._epochs, self._offsets, strict=True)]

    def epoch_with_offsets(self) -> dict[int, int]:
        """Epoch -> start offset, in epoch order (Kafka's ``epochWithOffsets``)."""
        with self._lock:
            return dict(zip(self._epochs, self._offsets, strict=True))

    def epoch_entries_in_range(self, start_offset: int, end_offset: int) -> list[EpochEntry]:
        """The entries covering ``[start_offset, end_offset)`` (Kafka's ``epochEntriesInRange``).

        On a copy: ``truncate_from_start(start_offset)`` when it is >= 0 (so the first entry is
        clamped to ``start_offset``), then ``truncate_from_end(end_offset)``. The RLM uses
        ``(segment base, next segment base)`` for a segment's metadata epochs and
        ``(-1, next segment base)`` for the epoch index it ships with the segment.
        """
        with self._lock:
            epochs, offsets = list(self._epochs), list(self._offsets)
        if start_offset >= 0:
            _truncate_from_start(epochs, offsets, start_offset)
        _truncate_from_end(epochs, offsets, end_offset)
        return [EpochEntry(e, o) for e, o in zip(epochs, offsets, strict=True)]

    def segment_view(self, start_offset: int, end_offset: int) -> LeaderEpochFileCache:
        """An in-memory cache of ``epoch_entries_in_range(start_offset, end_offset)``."""
        return LeaderEpochFileCache(None, self.epoch_entries_in_range(start_offset, end_offset))

    def to_checkpoint_bytes(self) -> bytes:
        """The checkpoint text of the current entries (Kafka's ``epochEntriesAsByteBuffer``)."""
        return encode_leader_epoch_checkpoint(self.epoch_entries())

    # Truncation --------------------------------------------------------------------------------
    def truncate_from_end(self, end_offset: int) -> list[EpochEntry]:
        """Remove the entries whose start offset is >= ``end_offset``; returns them.

        Called when the log is truncated to ``end_offset``. A negative offset does nothing.
        """
        with self._lock:
            removed = _truncate_from_end(self._epochs, self._offsets, end_offset)
            if removed:
                _LOG.debug(
                    "Cleared entries %s from epoch cache after truncating to end offset %d, "
                    "leaving %d entries in the cache.",
                    removed,
                    end_offset,
                    len(self._epochs),
                )
                self._write()
            return removed

    def truncate_from_start(self, start_offset: int) -> list[EpochEntry]:
        """Forget epochs ending before ``start_offset``; the epoch at it then starts there.

        Exclusive, as Kafka's: ``truncate_from_start(6)`` keeps an entry at offset 6. Called when
        the log start offset advances. Returns the entries removed (before re-adding).
        """
        with self._lock:
            removed = _truncate_from_start(self._epochs, self._offsets, start_offset)
            if removed:
                _LOG.debug(
                    "Cleared entries %s and rewrote first entry at %d after truncating to start "
                    "offset %d.",
                    removed,
                    start_offset,
                    start_offset,
                )
                self._write()
            return removed

    def clear_and_flush(self) -> None:
        """Delete every entry and write the (empty) checkpoint."""
        with self._lock:
            self._epochs.clear()
            self._offsets.clear()
            self._write()

    def clear(self) -> None:
        """Delete every entry in memory only."""
        with self._lock:
            self._epochs.clear()
            self._offsets.clear()

    def with_checkpoint(self, path: str | os.PathLike[str] | None) -> LeaderEpochFileCache:
        """A cache with the same entries backed by another file (the directory was renamed)."""
        with self._lock:
            return LeaderEpochFileCache(path, self.epoch_entries(), sync=self._sync)

    def flush(self) -> None:
        """Write the checkpoint file now."""
        with self._lock:
            self._write()

    def _write(self) -> None:
        if self._path is None:
            return
        if not self._path.parent.exists():
            # Kafka's writeIfDirExists: the directory was deleted under us (topic deletion).
            _LOG.debug("Not writing %s: its directory no longer exists", self._path)
            return
        write_leader_epoch_checkpoint(
            self._path, zip(self._epochs, self._offsets, strict=True), sync=self._sync
        )


def _truncate_from_end(epochs: list[int], offsets: list[int], end_offset: int) -> list[EpochEntry]:
    removed: list[EpochEntry] = []
    if end_offset >= 0 and offsets and offsets[-1] >= end_offset:
        while offsets and offsets[-1] >= end_offset:
            removed.append(EpochEntry(epochs.pop(), offsets.pop()))
    return removed


def _truncate_from_start(
    epochs: list[int], offsets: list[int], start_offset: int
) -> list[EpochEntry]:
    count = bisect_right(offsets, start_offset)
    if count == 0:
        return []
    removed = [EpochEntry(e, o) for e, o in zip(epochs[:count], offsets[:count], strict=True)]
    del epochs[:count]
    del offsets[:count]
    epochs.insert(0, removed[-1].epoch)
    offsets.insert(0, start_offset)
    return removed
