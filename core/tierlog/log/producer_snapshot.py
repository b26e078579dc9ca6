"""Producer state snapshots (``<offset>.snapshot``), Kafka's ``ProducerSnapshot`` version 1.

A snapshot saves the producer table (the last sequence, epoch and open transaction of every
producer id) at an offset, so a restarted log rebuilds producer state from the snapshot and the
batches after it instead of from the whole log; the RLM also ships the snapshot of a segment's end
offset with the segment. Layout (``storage/src/main/resources/message/ProducerSnapshot.json``,
non-flexible, written by ``ProducerStateManager.writeSnapshot``), big-endian::

    0  version int16 (=1)
    2  crc uint32: CRC-32C of bytes [6, end), i.e. from the entry count to the end of the file
    6  count int32
    10 count x 46 bytes: producerId int64 | epoch int16 | lastSequence int32 | lastOffset int64 |
                         offsetDelta int32 | timestamp int64 | coordinatorEpoch int32 |
                         currentTxnFirstOffset int64 (-1: no open transaction)

The file is named by the snapshot's own offset (the log end offset when it was taken), see
``tierlog.log.files.producer_snapshot_file``.

Reading refuses, with ``CorruptSnapshotError`` naming the file and byte position: a wrong
version, a file too short for its header, a negative count, fewer bytes than the count needs
(truncated), a CRC mismatch, and bytes after the last entry (count mismatch). Kafka would accept
trailing bytes if the stored CRC happened to cover them, which only a foreign writer produces.
Entries are returned as stored; interpreting ``lastOffset < 0`` (no batch yet) and
``currentTxnFirstOffset < 0`` is the producer state manager's job.

Kafka writes the file in place (it never rewrites an existing snapshot); tierlog writes it to a
temporary name and renames it, so a crash never leaves a half-written snapshot under its name.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tierlog._durable import atomic_write
from tierlog.log.crc import crc32c
from tierlog.spi import CorruptRecordError, InvalidArgumentError

__all__ = [
    "PRODUCER_SNAPSHOT_ENTRY_SIZE",
    "PRODUCER_SNAPSHOT_VERSION",
    "CorruptSnapshotError",
    "ProducerSnapshotEntry",
    "decode_producer_snapshot",
    "encode_producer_snapshot",
    "read_producer_snapshot",
    "write_producer_snapshot",
]

PRODUCER_SNAPSHOT_VERSION: Final = 1
_HEADER: Final = struct.Struct(">hIi")
_ENTRY: Final = struct.Struct(">qhiqiqiq")
_CRC_OFFSET: Final = 2
_ENTRIES_OFFSET: Final = 6
_HEADER_SIZE: Final = _HEADER.size  # 10
PRODUCER_SNAPSHOT_ENTRY_SIZE: Final = _ENTRY.size  # 46

_RANGES: Final = {
    "producer_id": 64,
    "epoch": 16,
    "last_sequence": 32,
    "last_offset": 64,
    "offset_delta": 32,
    "timestamp": 64,
    "coordinator_epoch": 32,
    "current_txn_first_offset": 64,
}


class CorruptSnapshotError(CorruptRecordError):
    """A producer snapshot cannot be trusted (Kafka's ``CorruptSnapshotException``).

    Kafka deletes such a snapshot and rebuilds producer state from an older one or the log.
    """


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    """One producer's state, the fields of a ``ProducerSnapshot.ProducerEntry`` in file order."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int = -1

    def __post_init__(self) -> None:
        for name, bits in _RANGES.items():
            value = getattr(self, name)
            limit = 1 << (bits - 1)
            if not isinstance(value, int) or not -limit <= value < limit:
                raise InvalidArgumentError(
                    f"ProducerSnapshotEntry.{name} must be an int{bits}, got {value!r}"
                )


def encode_producer_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    """The snapshot bytes Kafka writes for ``entries`` (in the order given)."""
    items = list(entries)
    body = bytearray(_HEADER_SIZE + PRODUCER_SNAPSHOT_ENTRY_SIZE * len(items))
    _HEADER.pack_into(body, 0, PRODUCER_SNAPSHOT_VERSION, 0, len(items))
    for n, entry in enumerate(items):
        _ENTRY.pack_into(
            body,
            _HEADER_SIZE + n * PRODUCER_SNAPSHOT_ENTRY_SIZE,
            entry.producer_id,
            entry.epoch,
            entry.last_sequence,
            entry.last_offset,
            entry.offset_delta,
            entry.timestamp,
            entry.coordinator_epoch,
            entry.current_txn_first_offset,
        )
    struct.pack_into(">I", body, _CRC_OFFSET, crc32c(memoryview(body)[_ENTRIES_OFFSET:]))
    return bytes(body)


def decode_producer_snapshot(
    data: bytes, *, path: str | None = None
) -> list[ProducerSnapshotEntry]:
    """Decode snapshot bytes; ``CorruptSnapshotError`` for anything but a valid version 1 file."""
    where = f"producer snapshot {path}" if path else "producer snapshot"

    def corrupt(message: str, position: int) -> CorruptSnapshotError:
        return CorruptSnapshotError(
            f"{where} is corrupt at byte {position}: {message}", path=path, position=position
        )

    size = len(data)
    if size < 2:
        raise corrupt(f"truncated: {size} bytes, too short for the version", size)
    (version,) = struct.unpack_from(">h", data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise corrupt(f"unknown file version {version} (supported: {PRODUCER_SNAPSHOT_VERSION})", 0)
    if size < _HEADER_SIZE:
        raise corrupt(
            f"truncated: {size} bytes, too short for the {_HEADER_SIZE}-byte header", size
        )
    _, stored_crc, count = _HEADER.unpack_from(data, 0)
    if count < 0:
        raise corrupt(f"negative entry count {count}", _ENTRIES_OFFSET)
    available = (size - _HEADER_SIZE) // PRODUCER_SNAPSHOT_ENTRY_SIZE
    if count > available:
        raise corrupt(
            f"truncated: the count says {count} entries but the file holds {size} bytes, room "
            f"for {available}",
            size,
        )
    computed = crc32c(memoryview(data)[_ENTRIES_OFFSET:])
    if computed != stored_crc:
        raise corrupt(
            f"CRC is no longer valid: stored crc {stored_crc}, computed crc {computed}",
            _CRC_OFFSET,
        )
    end = _HEADER_SIZE + count * PRODUCER_SNAPSHOT_ENTRY_SIZE
    if end != size:
        raise corrupt(
            f"count mismatch: {count} entries end at byte {end} but the file has {size} bytes",
            end,
        )
    return [
        ProducerSnapshotEntry(*fields)
        for fields in struct.iter_unpack(_ENTRY.format, memoryview(data)[_HEADER_SIZE:end])
    ]


def read_producer_snapshot(path: str | os.PathLike[str]) -> list[ProducerSnapshotEntry]:
    """Read a ``.snapshot`` file (``FileNotFoundError`` if it does not exist)."""
    return decode_producer_snapshot(Path(path).read_bytes(), path=str(path))


def write_producer_snapshot(
    path: str | os.PathLike[str],
    entries: Iterable[ProducerSnapshotEntry],
    *,
    sync: bool = True,
) -> None:
    """Atomically write a snapshot file (temporary name, ``fsync``, rename, directory ``fsync``)."""
    atomic_write(path, encode_producer_snapshot(entries), sync=sync)
