"""The log directory's ``cleaner-offset-checkpoint``: how far the cleaner has compacted each log.

Kafka's ``LogCleanerManager`` keeps, per log directory, one ``OffsetCheckpointFile`` named
``cleaner-offset-checkpoint`` with an entry per compacted partition of that directory: the first
offset the last round did not clean (the start of the dirty section of the next round)::

    0                 <- version
    2                 <- number of entries
    events 0 1200     <- "<topic> <partition> <offset>"
    events 1 877

The file lives in the log directory (beside the ``<topic>-<partition>`` directories), so a
directory copied from a Kafka broker carries it and a Kafka broker reads what tierlog writes.
Kafka's other log-directory checkpoints (``replication-offset-checkpoint``, ...) have the same
text, which ``read_offset_checkpoint`` and ``write_offset_checkpoint`` read and write for any
of them.

``CleanerOffsetCheckpoints(log_dir)`` is the cleaner's view: ``read``, ``get``, ``update`` and
``remove``, each a read of the file and, for a change, an atomic rewrite of it (``.tmp``,
``fsync``, rename, directory ``fsync``: a crash leaves the old file or the new one). Changes are
serialised per file, across every instance in this process, so two partitions' cleaners updating
the same directory's file do not lose each other's entry. A malformed file raises
``CorruptCheckpointError`` naming the file and the line (``_checkpoint_file``); Kafka then takes
the log directory offline, and tierlog leaves the decision to the caller, having changed
nothing.

As in Kafka's reader, a later entry for the same partition replaces an earlier one. Kafka also
drops, when it rewrites the file, the entries of partitions the directory no longer hosts; here
the caller says which go (``remove``), since this module does not know what a directory hosts.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from tierlog.log._checkpoint_file import read_checkpoint, write_checkpoint
from tierlog.spi import InvalidArgumentError, TopicPartition

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT_FILENAME",
    "CleanerOffsetCheckpoints",
    "read_offset_checkpoint",
    "write_offset_checkpoint",
]

CLEANER_OFFSET_CHECKPOINT_FILENAME: Final = "cleaner-offset-checkpoint"
_VERSION: Final = 0  # OffsetCheckpointFile.CURRENT_VERSION
_INT32_MAX: Final = (1 << 31) - 1
_INT64_MAX: Final = (1 << 63) - 1


def read_offset_checkpoint(path: str | os.PathLike[str]) -> dict[TopicPartition, int]:
    """The entries of a Kafka ``OffsetCheckpointFile`` at ``path`` (empty if there is none).

    ``CorruptCheckpointError`` names the file and the line of a malformed entry: a partition
    that is not a non-negative int32, an offset that is not an int64, a wrong field count.
    """
    checkpoint = read_checkpoint(
        path, kind="offset checkpoint", version=_VERSION, fields=("topic", "partition", "offset")
    )
    if checkpoint is None:
        return {}
    entries: dict[TopicPartition, int] = {}
    for number, (topic, partition_text, offset_text) in checkpoint.entries:
        partition = checkpoint.integer(number, partition_text, "the partition")
        if not 0 <= partition <= _INT32_MAX:
            raise checkpoint.malformed(number, f"partition {partition} is not a partition number")
        offset = checkpoint.integer(number, offset_text, "the offset")
        if not -(1 << 63) <= offset <= _INT64_MAX:
            raise checkpoint.malformed(number, f"offset {offset} is not a 64-bit integer")
        entries[TopicPartition(topic, partition)] = offset
    return entries


def write_offset_checkpoint(
    path: str | os.PathLike[str], entries: Mapping[TopicPartition, int], *, sync: bool = True
) -> None:
    """Atomically replace the ``OffsetCheckpointFile`` at ``path`` with ``entries`` (sorted by
    topic and partition, so the same entries always give the same bytes)."""
    rows = []
    for tp, offset in sorted(entries.items(), key=lambda e: (e[0].topic, e[0].partition)):
        if not tp.topic or any(c.isspace() for c in tp.topic) or not tp.topic.isascii():
            raise InvalidArgumentError(f"{tp.topic!r} cannot be written in a checkpoint")
        if not isinstance(offset, int) or not -(1 << 63) <= offset <= _INT64_MAX:
            raise InvalidArgumentError(f"offset of {tp} must be a 64-bit integer, got {offset!r}")
        rows.append((tp.topic, tp.partition, offset))
    write_checkpoint(path, _VERSION, rows, sync=sync)


_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_GUARD: Final = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    """The lock of one checkpoint file, shared by every instance of this process."""
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(path, threading.Lock())


class CleanerOffsetCheckpoints:
    """The ``cleaner-offset-checkpoint`` of the log directory ``log_dir`` (module docstring).

    ``sync=False`` skips the ``fsync`` calls (tests).
    """

    def __init__(self, log_dir: str | os.PathLike[str], *, sync: bool = True) -> None:
        self._path = Path(log_dir).resolve() / CLEANER_OFFSET_CHECKPOINT_FILENAME
        self._sync = sync
        self._lock = _lock_for(self._path)

    @property
    def path(self) -> Path:
        return self._path

    def read(self) -> dict[TopicPartition, int]:
        """Every partition's cleaner offset (empty when the file does not exist)."""
        with self._lock:
            return read_offset_checkpoint(self._path)

    def get(self, tp: TopicPartition) -> int | None:
        """The cleaner offset of ``tp``, or None if it has none (never cleaned)."""
        return self.read().get(tp)

    def update(self, tp: TopicPartition, offset: int) -> None:
        """Record ``offset`` as ``tp``'s cleaner offset (Kafka's ``updateCheckpoints``)."""
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidArgumentError(
                f"the cleaner offset of {tp} must be an offset (>= 0), got {offset!r}"
            )
        with self._lock:
            entries = read_offset_checkpoint(self._path)
            entries[tp] = offset
            write_offset_checkpoint(self._path, entries, sync=self._sync)

    def remove(self, tp: TopicPartition) -> bool:
        """Forget ``tp``'s entry (its topic was deleted, the log moved away); True if it had
        one. The file is not rewritten when there was nothing to remove."""
        with self._lock:
            entries = read_offset_checkpoint(self._path)
            if entries.pop(tp, None) is None:
                return False
            write_offset_checkpoint(self._path, entries, sync=self._sync)
            return True

    def __repr__(self) -> str:
        return f"CleanerOffsetCheckpoints({str(self._path.parent)!r})"
