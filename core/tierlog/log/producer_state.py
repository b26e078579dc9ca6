"""Producer state: idempotence, transactions and the last stable offset of one partition.

A port of Kafka's ``ProducerStateManager``, ``ProducerStateEntry``, ``ProducerAppendInfo`` and
``BatchMetadata`` (``storage/.../internals/log``), without the transaction-verification guards
(KIP-890 phase 1, which need a transaction coordinator).

For each producer id the manager keeps the epoch, the last five batches' sequence ranges (to
answer a retried batch with its original offsets), the coordinator epoch of its last marker, and
the first offset of its open transaction. From the open transactions it derives the *first
unstable offset*: the log's last stable offset (LSO) is that or the high watermark, whichever is
lower, and ``read_committed`` consumers never read past it. When a transaction ends with an ABORT
marker, the caller appends an ``AbortedTxn`` to the segment's transaction index with
``last_stable_offset(completed)`` (the first offset of the next still-open transaction of another
producer, else the marker's offset + 1): that is how a later fetch knows where the abort's
influence stops.

Validation follows ``ProducerAppendInfo`` for each origin:

- ``CLIENT`` (a producer): epochs must not go backwards (``InvalidProducerEpochError``);
  sequences must follow the last one, or restart at 0 with a new epoch
  (``OutOfOrderSequenceError``); a non-transactional batch inside an open transaction is refused
  (``InvalidTxnStateError``); a retried batch is recognised by the log before validation
  (``ProducerStateEntry.find_duplicate_batch``) and not written again;
- ``COORDINATOR`` (transaction markers): epoch and coordinator epoch checked
  (``TransactionCoordinatorFencedError``), sequences not;
- ``REPLICATION`` (a follower, recovery, loading): nothing is refused, problems are logged.

Snapshots (``<offset>.snapshot``, ``producer_snapshot``) are taken when a segment is rolled, named
by the new segment's base offset; the latest one at or below the log end is loaded on start and
the batches after it replayed (``LocalLog``). Snapshots at or below the log start offset are
deleted (``truncate_and_reload``, ``delete_snapshots_before``), as are those above a truncation
point.
"""

from __future__ import annotations

import enum
import logging
import os
import time
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

from tierlog.log.batch import (
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    ControlRecordType,
    RecordBatch,
)
from tierlog.log.files import (
    DELETED_FILE_SUFFIX,
    PRODUCER_SNAPSHOT_FILE_SUFFIX,
    offset_from_file_name,
    producer_snapshot_file,
)
from tierlog.log.producer_snapshot import (
    CorruptSnapshotError,
    ProducerSnapshotEntry,
    read_producer_snapshot,
    write_producer_snapshot,
)
from tierlog.spi import IllegalStateError, InvalidArgumentError, TierlogError

__all__ = [
    "DEFAULT_MAX_TRANSACTION_TIMEOUT_MS",
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "NUM_BATCHES_TO_RETAIN",
    "AppendOrigin",
    "BatchMetadata",
    "CompletedTxn",
    "EndTxnMarker",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "OutOfOrderSequenceError",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateError",
    "ProducerStateManager",
    "SnapshotFile",
    "TransactionCoordinatorFencedError",
    "TxnMetadata",
]

_LOG = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN: Final = 5
"""Batches remembered per producer to recognise retries (``max.in.flight.requests`` <= 5)."""
DEFAULT_PRODUCER_ID_EXPIRATION_MS: Final = 24 * 3600 * 1000
"""Kafka's ``producer.id.expiration.ms``: idle producers are forgotten after a day."""
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS: Final = 15 * 60 * 1000
"""Kafka's ``transaction.max.timeout.ms``, used to detect a hanging transaction."""
LATE_TRANSACTION_BUFFER_MS: Final = 5 * 60 * 1000
_INT32_MAX: Final = (1 << 31) - 1
_NO_TIMESTAMP: Final = -1


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


# Errors ----------------------------------------------------------------------------------------
class ProducerStateError(TierlogError):
    """An append was refused because of the producer's state (the batch is not written)."""


class OutOfOrderSequenceError(ProducerStateError):
    """Kafka's ``OutOfOrderSequenceException``: a sequence number does not follow the last one."""


class InvalidProducerEpochError(ProducerStateError):
    """Kafka's ``InvalidProducerEpochException``: the producer epoch went backwards (a zombie)."""


class InvalidTxnStateError(ProducerStateError):
    """Kafka's ``InvalidTxnStateException``: a non-transactional write inside a transaction."""


class TransactionCoordinatorFencedError(ProducerStateError):
    """Kafka's ``TransactionCoordinatorFencedException``: a marker from a stale coordinator."""


class AppendOrigin(enum.Enum):
    """Who is appending, which decides how much is validated (Kafka's ``AppendOrigin``)."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


# Value types -----------------------------------------------------------------------------------
def decrement_sequence(sequence: int, decrement: int) -> int:
    """``DefaultRecordBatch.decrementSequence``: sequences wrap from 0 back to int32 max."""
    if sequence < decrement:
        return _INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


class BatchMetadata(NamedTuple):
    """One appended batch of a producer: its last sequence and offset, size and timestamp."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class CompletedTxn(NamedTuple):
    """A transaction ended by a marker at ``last_offset`` (``is_aborted`` for ABORT)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class EndTxnMarker(NamedTuple):
    """The content of a COMMIT/ABORT control record, as the producer state needs it."""

    control_type: ControlRecordType
    coordinator_epoch: int
    timestamp: int


@dataclass(slots=True)
class TxnMetadata:
    """An open (``last_offset`` None) or completed-but-unreplicated transaction."""

    producer_id: int
    first_offset: int
    last_offset: int | None = None


class ProducerStateEntry:
    """The state of one producer id (Kafka's ``ProducerStateEntry``)."""

    __slots__ = (
        "_batches",
        "coordinator_epoch",
        "current_txn_first_offset",
        "last_timestamp",
        "producer_epoch",
        "producer_id",
    )

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        coordinator_epoch: int = -1,
        last_timestamp: int = _NO_TIMESTAMP,
        current_txn_first_offset: int | None = None,
    ) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self._batches: deque[BatchMetadata] = deque()

    @classmethod
    def empty(cls, producer_id: int) -> ProducerStateEntry:
        return cls(producer_id)

    # Derived -------------------------------------------------------------------------------------
    def is_empty(self) -> bool:
        """No batch remembered (a new producer, or only markers since its epoch changed)."""
        return not self._batches

    @property
    def batch_metadata(self) -> tuple[BatchMetadata, ...]:
        return tuple(self._batches)

    @property
    def first_seq(self) -> int:
        return self._batches[0].first_seq if self._batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self._batches[-1].last_seq if self._batches else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self._batches[0].first_offset if self._batches else -1

    @property
    def last_data_offset(self) -> int:
        return self._batches[-1].last_offset if self._batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self._batches[-1].offset_delta if self._batches else 0

    def copy(self, producer_id: int | None = None) -> ProducerStateEntry:
        """Kafka's ``withProducerId``: the same epoch, coordinator epoch, timestamp and txn.

        As in Kafka the remembered batches are *not* copied: the copy collects the batches of
        one append, and ``update`` merges them into the live entry.
        """
        return ProducerStateEntry(
            self.producer_id if producer_id is None else producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
        )

    # Mutation ------------------------------------------------------------------------------------
    def add_batch(
        self, producer_epoch: int, last_seq: int, last_offset: int, offset_delta: int, ts: int
    ) -> None:
        self._maybe_update_producer_epoch(producer_epoch)
        self._add_batch_metadata(BatchMetadata(last_seq, last_offset, offset_delta, ts))
        self.last_timestamp = ts

    def _maybe_update_producer_epoch(self, producer_epoch: int) -> None:
        if self.producer_epoch != producer_epoch:
            self._batches.clear()
            self.producer_epoch = producer_epoch

    def _add_batch_metadata(self, batch: BatchMetadata) -> None:
        if len(self._batches) == NUM_BATCHES_TO_RETAIN:
            self._batches.popleft()
        self._batches.append(batch)

    def update(self, next_entry: ProducerStateEntry) -> None:
        """Merge the state an append produced (Kafka's ``update(ProducerStateEntry)``)."""
        self._update(
            next_entry.producer_epoch,
            next_entry.coordinator_epoch,
            next_entry.last_timestamp,
            list(next_entry._batches),
            next_entry.current_txn_first_offset,
        )

    def update_for_marker(self, producer_epoch: int, coordinator_epoch: int, ts: int) -> None:
        """A marker ended the transaction: new epochs, no open transaction."""
        self._update(producer_epoch, coordinator_epoch, ts, [], None)

    def _update(
        self,
        producer_epoch: int,
        coordinator_epoch: int,
        last_timestamp: int,
        batches: list[BatchMetadata],
        current_txn_first_offset: int | None,
    ) -> None:
        self._maybe_update_producer_epoch(producer_epoch)
        for batch in batches:
            self._add_batch_metadata(batch)
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = current_txn_first_offset
        self.last_timestamp = last_timestamp

    def find_duplicate_batch(self, batch: RecordBatch) -> BatchMetadata | None:
        """The remembered batch with the same epoch and sequence range as ``batch``, if any."""
        if batch.producer_epoch != self.producer_epoch:
            return None
        first, last = batch.base_sequence, batch.last_sequence
        for meta in self._batches:
            if meta.first_seq == first and meta.last_seq == last:
                return meta
        return None

    def to_snapshot_entry(self) -> ProducerSnapshotEntry:
        return ProducerSnapshotEntry(
            self.producer_id,
            self.producer_epoch,
            self.last_seq,
            self.last_data_offset,
            self.last_offset_delta,
            self.last_timestamp,
            self.coordinator_epoch,
            -1 if self.current_txn_first_offset is None else self.current_txn_first_offset,
        )

    @classmethod
    def from_snapshot_entry(cls, entry: ProducerSnapshotEntry) -> ProducerStateEntry:
        state = cls(
            entry.producer_id,
            entry.epoch,
            entry.coordinator_epoch,
            entry.timestamp,
            entry.current_txn_first_offset if entry.current_txn_first_offset >= 0 else None,
        )
        if entry.last_offset >= 0:
            state.add_batch(
                entry.epoch,
                entry.last_sequence,
                entry.last_offset,
                entry.offset_delta,
                entry.timestamp,
            )
        return state

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(producer_id={self.producer_id}, "
            f"producer_epoch={self.producer_epoch}, "
            f"current_txn_first_offset={self.current_txn_first_offset}, "
            f"coordinator_epoch={self.coordinator_epoch}, last_timestamp={self.last_timestamp}, "
            f"batch_metadata={list(self._batches)})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProducerStateEntry):
            return NotImplemented
        return (
            self.producer_id == other.producer_id
            and self.producer_epoch == other.producer_epoch
            and self.coordinator_epoch == other.coordinator_epoch
            and self.last_timestamp == other.last_timestamp
            and self.current_txn_first_offset == other.current_txn_first_offset
            and list(self._batches) == list(other._batches)
        )

    __hash__ = None  # type: ignore[assignment]


# Validation of one producer's batches ----------------------------------------------------------
def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


class ProducerAppendInfo:
    """Validates and accumulates the batches of one producer within one append.

    Created by ``ProducerStateManager.prepare_update``; nothing reaches the manager until
    ``ProducerStateManager.update`` is called with it, so a refused append changes nothing.
    ``transaction_version`` 2 applies KIP-890's stricter marker epoch rule (the coordinator bumps
    the epoch before every marker); 0 and 1 are the legacy rule.
    """

    def __init__(
        self,
        producer_id: int,
        current_entry: ProducerStateEntry,
        origin: AppendOrigin,
        *,
        partition: str = "",
    ) -> None:
        self.producer_id = producer_id
        self._current = current_entry
        self._origin = origin
        self._partition = partition
        self._updated = current_entry.copy(producer_id)
        self._transactions: list[TxnMetadata] = []

    @property
    def origin(self) -> AppendOrigin:
        return self._origin

    def to_entry(self) -> ProducerStateEntry:
        return self._updated

    @property
    def started_transactions(self) -> list[TxnMetadata]:
        return list(self._transactions)

    def _where(self, offset: int) -> str:
        where = f" in partition {self._partition}" if self._partition else ""
        return f"producer {self.producer_id} at offset {offset}{where}"

    def _check_producer_epoch(self, epoch: int, offset: int, transaction_version: int) -> None:
        current = self._updated.producer_epoch
        invalid = epoch <= current if transaction_version >= 2 else epoch < current
        if not invalid:
            return
        if (
            transaction_version >= 2
            and epoch == current
            and (self._updated.current_txn_first_offset is None or epoch == (1 << 15) - 1)
        ):
            _LOG.info(
                "Idempotent transaction marker retry detected for producer %d epoch %d",
                self.producer_id,
                epoch,
            )
            return
        comparison = "<=" if transaction_version >= 2 else "<"
        message = (
            f"Epoch of {self._where(offset)} is {epoch}, which is {comparison} the last seen "
            f"epoch {current} (TV{transaction_version})"
        )
        if self._origin is AppendOrigin.REPLICATION:
            _LOG.warning(message)
        else:
            raise InvalidProducerEpochError(message)

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        updated = self._updated
        if epoch != updated.producer_epoch:
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"Invalid sequence number for new epoch of {self._where(offset)}: {epoch} "
                    f"(request epoch), {first_seq} (seq. number), {updated.producer_epoch} "
                    "(current producer epoch)"
                )
            return
        if not updated.is_empty():
            current_last_seq = updated.last_seq
        elif epoch == self._current.producer_epoch:
            current_last_seq = self._current.last_seq
        else:
            current_last_seq = NO_SEQUENCE
        # With no known epoch (every batch of the producer was deleted) any sequence is accepted.
        if not (
            self._current.producer_epoch == NO_PRODUCER_EPOCH
            or _in_sequence(current_last_seq, first_seq)
        ):
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for {self._where(offset)}: {first_seq} "
                f"(incoming seq. number), {current_last_seq} (current end sequence number)"
            )

    def append(
        self,
        batch: RecordBatch,
        marker: EndTxnMarker | None = None,
        *,
        transaction_version: int = 0,
    ) -> CompletedTxn | None:
        """Account for one batch of this producer; a COMMIT/ABORT marker returns the txn it ends.

        For a control batch the caller passes its decoded marker (``None`` for a control batch
        without records: the cleaner removed the whole transaction, nothing to do).
        """
        if batch.is_control:
            if marker is None:
                return None
            return self.append_end_txn_marker(
                marker, batch.producer_epoch, batch.base_offset, transaction_version
            )
        self.append_data_batch(
            batch.producer_epoch,
            batch.base_sequence,
            batch.last_sequence,
            last_timestamp=batch.max_timestamp,
            first_offset=batch.base_offset,
            last_offset=batch.last_offset,
            is_transactional=batch.is_transactional,
        )
        return None

    def append_data_batch(
        self,
        epoch: int,
        first_seq: int,
        last_seq: int,
        *,
        last_timestamp: int,
        first_offset: int,
        last_offset: int,
        is_transactional: bool,
    ) -> None:
        self._check_producer_epoch(epoch, first_offset, 0)
        if self._origin is AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        updated = self._updated
        updated.add_batch(epoch, last_seq, last_offset, last_offset - first_offset, last_timestamp)
        if updated.current_txn_first_offset is not None and not is_transactional:
            raise InvalidTxnStateError(
                f"Expected transactional write from {self._where(first_offset)}"
            )
        if updated.current_txn_first_offset is None and is_transactional:
            updated.current_txn_first_offset = first_offset
            self._transactions.append(TxnMetadata(self.producer_id, first_offset))

    def _check_coordinator_epoch(self, marker: EndTxnMarker, offset: int) -> None:
        if self._updated.coordinator_epoch > marker.coordinator_epoch:
            message = (
                f"Invalid coordinator epoch for {self._where(offset)}: "
                f"{marker.coordinator_epoch} (zombie), {self._updated.coordinator_epoch} (current)"
            )
            if self._origin is AppendOrigin.REPLICATION:
                _LOG.info(message)
            else:
                raise TransactionCoordinatorFencedError(message)

    def append_end_txn_marker(
        self, marker: EndTxnMarker, epoch: int, offset: int, transaction_version: int = 0
    ) -> CompletedTxn | None:
        self._check_producer_epoch(epoch, offset, transaction_version)
        self._check_coordinator_epoch(marker, offset)
        completed: CompletedTxn | None = None
        first = self._updated.current_txn_first_offset
        if first is not None:
            # Only a transaction with data has an effect on the LSO and the transaction index.
            completed = CompletedTxn(
                self.producer_id, first, offset, marker.control_type == ControlRecordType.ABORT
            )
        self._updated.update_for_marker(epoch, marker.coordinator_epoch, marker.timestamp)
        return completed


# Snapshot files --------------------------------------------------------------------------------
@dataclass(slots=True)
class SnapshotFile:
    """A ``<offset>.snapshot`` file the manager knows about."""

    offset: int
    path: Path

    def delete_if_exists(self) -> bool:
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        _LOG.debug("Deleted producer state snapshot %s", self.path)
        return True

    def rename_to_delete(self) -> None:
        """Rename to ``.snapshot.deleted`` (``renameToDelete``); FileNotFoundError if gone."""
        target = self.path.with_name(self.path.name + DELETED_FILE_SUFFIX)
        os.replace(self.path, target)
        self.path = target


def list_snapshot_files(directory: str | os.PathLike[str]) -> list[SnapshotFile]:
    """Every ``<digits>.snapshot`` regular file of ``directory`` (not ``.snapshot.deleted``)."""
    root = Path(directory)
    if not root.is_dir():
        return []
    found: list[SnapshotFile] = []
    for entry in os.scandir(root):
        if not entry.name.endswith(PRODUCER_SNAPSHOT_FILE_SUFFIX) or not entry.is_file():
            continue
        try:
            offset = offset_from_file_name(entry.name)
        except InvalidArgumentError:
            continue
        found.append(SnapshotFile(offset, Path(entry.path)))
    return found


# The manager -----------------------------------------------------------------------------------
class ProducerStateManager:
    """Producer id -> state for one partition, its open transactions and its snapshots."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
        clock: Callable[[], int] | None = None,
        partition: str = "",
        sync: bool = True,
    ) -> None:
        self._dir = Path(directory)
        self._expiration_ms = producer_id_expiration_ms
        self._max_txn_timeout_ms = max_transaction_timeout_ms
        self._clock = clock or _wall_clock_ms
        self._partition = partition
        self._sync = sync
        self._producers: dict[int, ProducerStateEntry] = {}
        # Open transactions and completed ones whose marker is not yet below the high watermark,
        # both keyed by first offset.
        self._ongoing: dict[int, TxnMetadata] = {}
        self._unreplicated: dict[int, TxnMetadata] = {}
        self._oldest_txn_last_timestamp = -1
        self._snapshots: dict[int, SnapshotFile] = {}
        self._snapshot_offsets: list[int] = []
        self._last_map_offset = 0
        self._last_snap_offset = 0
        self._load_snapshots()

    # Snapshot bookkeeping ----------------------------------------------------------------------
    def _load_snapshots(self) -> None:
        self._snapshots = {s.offset: s for s in list_snapshot_files(self._dir)}
        self._snapshot_offsets = sorted(self._snapshots)

    def _put_snapshot(self, snapshot: SnapshotFile) -> None:
        if snapshot.offset not in self._snapshots:
            self._snapshot_offsets.insert(
                bisect_left(self._snapshot_offsets, snapshot.offset), snapshot.offset
            )
        self._snapshots[snapshot.offset] = snapshot

    def _pop_snapshot(self, offset: int) -> SnapshotFile | None:
        snapshot = self._snapshots.pop(offset, None)
        if snapshot is not None:
            del self._snapshot_offsets[bisect_left(self._snapshot_offsets, offset)]
        return snapshot

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def producer_id_expiration_ms(self) -> int:
        return self._expiration_ms

    @property
    def max_transaction_timeout_ms(self) -> int:
        return self._max_txn_timeout_ms

    def snapshot_offsets(self) -> list[int]:
        """The offsets of the known snapshot files, ascending."""
        return list(self._snapshot_offsets)

    def latest_snapshot_offset(self) -> int | None:
        return self._snapshot_offsets[-1] if self._snapshot_offsets else None

    def oldest_snapshot_offset(self) -> int | None:
        return self._snapshot_offsets[0] if self._snapshot_offsets else None

    def fetch_snapshot(self, offset: int) -> Path | None:
        """The snapshot file taken at exactly ``offset``, if there is one."""
        snapshot = self._snapshots.get(offset)
        return snapshot.path if snapshot is not None else None

    def snapshot_file_for_offset(self, offset: int) -> SnapshotFile | None:
        return self._snapshots.get(offset)

    def remove_stray_snapshots(self, segment_base_offsets: Collection[int]) -> None:
        """Delete snapshots that match no segment, except the largest when it is above them all.

        Kafka's rule: a snapshot is kept for each segment base offset; of the others only the
        largest survives, and only if it is above every segment base (the snapshot a clean
        shutdown took at the log end offset).
        """
        bases = set(segment_base_offsets)
        max_base = max(bases) if bases else None
        self._load_snapshots()
        latest_stray: SnapshotFile | None = None
        for offset in list(self._snapshot_offsets):
            if offset in bases:
                continue
            if latest_stray is not None:
                latest_stray.delete_if_exists()
                self._pop_snapshot(latest_stray.offset)
            latest_stray = self._snapshots[offset]
        if latest_stray is not None and max_base is not None and latest_stray.offset < max_base:
            self._pop_snapshot(latest_stray.offset)
            latest_stray.delete_if_exists()

    def _remove_and_delete_snapshot(self, offset: int) -> None:
        snapshot = self._pop_snapshot(offset)
        if snapshot is not None:
            snapshot.delete_if_exists()

    def remove_and_mark_snapshot_for_deletion(self, offset: int) -> SnapshotFile | None:
        """Forget the snapshot at ``offset`` and rename it ``.snapshot.deleted`` (its segment is
        being deleted); None if there was none or it was already gone."""
        snapshot = self._pop_snapshot(offset)
        if snapshot is None:
            return None
        try:
            snapshot.rename_to_delete()
        except FileNotFoundError:
            _LOG.info("Producer state snapshot %s was already deleted", snapshot.path)
            return None
        return snapshot

    def delete_snapshots_before(self, offset: int) -> None:
        """Delete the snapshots whose offset is below ``offset``."""
        for snap_offset in self._snapshot_offsets[: bisect_left(self._snapshot_offsets, offset)]:
            self._remove_and_delete_snapshot(snap_offset)

    # State -------------------------------------------------------------------------------------
    @property
    def map_end_offset(self) -> int:
        """The offset up to which (exclusive) the producer state reflects the log."""
        return self._last_map_offset

    def update_map_end_offset(self, offset: int) -> None:
        self._last_map_offset = offset

    def is_empty(self) -> bool:
        return not self._producers and not self._unreplicated

    @property
    def active_producers(self) -> Mapping[int, ProducerStateEntry]:
        return dict(self._producers)

    def producer_id_count(self) -> int:
        return len(self._producers)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def ongoing_transactions(self) -> list[TxnMetadata]:
        """Open transactions by first offset."""
        return [self._ongoing[k] for k in sorted(self._ongoing)]

    def first_unstable_offset(self) -> int | None:
        """The first offset not yet decided or whose marker is above the high watermark."""
        candidates = [*self._ongoing, *self._unreplicated]
        return min(candidates) if candidates else None

    def first_undecided_offset(self) -> int | None:
        """The first offset of the oldest open transaction (ignores replication)."""
        return min(self._ongoing) if self._ongoing else None

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Transactions whose marker is now below the high watermark no longer hold the LSO."""
        self._remove_unreplicated_transactions(high_watermark)

    def _remove_unreplicated_transactions(self, offset: int) -> None:
        for first, txn in list(self._unreplicated.items()):
            if txn.last_offset is not None and txn.last_offset < offset:
                del self._unreplicated[first]

    def has_late_transaction(self, current_time_ms: int) -> bool:
        last = self._oldest_txn_last_timestamp
        return (
            last > 0
            and current_time_ms - last > self._max_txn_timeout_ms + LATE_TRANSACTION_BUFFER_MS
        )

    def _update_oldest_txn_timestamp(self) -> None:
        if not self._ongoing:
            self._oldest_txn_last_timestamp = -1
            return
        oldest = self._ongoing[min(self._ongoing)]
        entry = self._producers.get(oldest.producer_id)
        self._oldest_txn_last_timestamp = entry.last_timestamp if entry is not None else -1

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        """A validator for ``producer_id``'s batches of one append, seeded with its state."""
        current = self._producers.get(producer_id) or ProducerStateEntry.empty(producer_id)
        return ProducerAppendInfo(producer_id, current, origin, partition=self._partition)

    def update(self, append_info: ProducerAppendInfo) -> None:
        """Apply a validated append's producer state."""
        if append_info.producer_id < 0:
            raise InvalidArgumentError(
                f"Invalid producer id {append_info.producer_id} passed to update"
            )
        updated = append_info.to_entry()
        current = self._producers.get(append_info.producer_id)
        if current is not None:
            current.update(updated)
        else:
            self._producers[append_info.producer_id] = updated
        for txn in append_info.started_transactions:
            self._ongoing[txn.first_offset] = txn
        self._update_oldest_txn_timestamp()

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO to store with an aborted transaction: the first offset of the oldest open
        transaction of another producer, else the marker's offset + 1."""
        for first in sorted(self._ongoing):
            if self._ongoing[first].producer_id != completed.producer_id:
                return first
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """The marker is written: the transaction waits for the high watermark to pass it."""
        txn = self._ongoing.pop(completed.first_offset, None)
        if txn is None:
            raise IllegalStateError(
                f"Attempted to complete transaction {completed} which was not started"
            )
        txn.last_offset = completed.last_offset
        self._unreplicated[completed.first_offset] = txn
        self._update_oldest_txn_timestamp()

    def load_producer_entry(self, entry: ProducerStateEntry) -> None:
        self._producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            first = entry.current_txn_first_offset
            self._ongoing[first] = TxnMetadata(entry.producer_id, first)

    def _is_expired(self, now: int, entry: ProducerStateEntry) -> bool:
        return (
            entry.current_txn_first_offset is None
            and now - entry.last_timestamp >= self._expiration_ms
        )

    def remove_expired_producers(self, current_time_ms: int) -> None:
        """Forget producers idle for ``producer.id.expiration.ms`` without an open transaction."""
        for producer_id, entry in list(self._producers.items()):
            if self._is_expired(current_time_ms, entry):
                del self._producers[producer_id]

    def _clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._update_oldest_txn_timestamp()

    def _load_from_snapshot(self, log_start_offset: int, current_time_ms: int) -> None:
        while self._snapshot_offsets:
            snapshot = self._snapshots[self._snapshot_offsets[-1]]
            try:
                _LOG.info("Loading producer state from snapshot file '%s'", snapshot.path)
                entries = read_producer_snapshot(snapshot.path)
            except (CorruptSnapshotError, FileNotFoundError) as e:
                _LOG.warning("Failed to load producer snapshot from '%s': %s", snapshot.path, e)
                self._remove_and_delete_snapshot(snapshot.offset)
                continue
            for raw in entries:
                entry = ProducerStateEntry.from_snapshot_entry(raw)
                if not self._is_expired(current_time_ms, entry):
                    self.load_producer_entry(entry)
            self._last_snap_offset = snapshot.offset
            self._last_map_offset = snapshot.offset
            self._update_oldest_txn_timestamp()
            return
        self._last_snap_offset = log_start_offset
        self._last_map_offset = log_start_offset

    def truncate_and_reload(
        self, log_start_offset: int, log_end_offset: int, current_time_ms: int | None = None
    ) -> None:
        """Keep only snapshots in ``(log_start_offset, log_end_offset]`` and reload the latest.

        The log then replays its batches from ``map_end_offset`` to ``log_end_offset``.
        """
        now = self._clock() if current_time_ms is None else current_time_ms
        for offset in list(self._snapshot_offsets):
            if offset > log_end_offset or offset <= log_start_offset:
                self._remove_and_delete_snapshot(offset)
        if log_end_offset != self._last_map_offset:
            self._clear()
            self._load_from_snapshot(log_start_offset, now)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def reload_up_to(
        self, log_start_offset: int, offset: int, current_time_ms: int | None = None
    ) -> None:
        """Load the newest readable snapshot in ``(log_start_offset, offset]``, deleting nothing.

        Unlike ``truncate_and_reload``, snapshots outside the range stay on disk: this is for a
        scratch manager that rebuilds the state at an older offset (to produce a missing snapshot
        for the RLM) while the live manager keeps using the files.
        """
        now = self._clock() if current_time_ms is None else current_time_ms
        self._clear()
        for snapshot in self.snapshots_at_or_below(offset):
            if snapshot.offset <= log_start_offset:
                break
            try:
                entries = read_producer_snapshot(snapshot.path)
            except (CorruptSnapshotError, FileNotFoundError) as e:
                _LOG.warning("Skipping producer snapshot '%s': %s", snapshot.path, e)
                continue
            for raw in entries:
                entry = ProducerStateEntry.from_snapshot_entry(raw)
                if not self._is_expired(now, entry):
                    self.load_producer_entry(entry)
            self._last_map_offset = self._last_snap_offset = snapshot.offset
            self._update_oldest_txn_timestamp()
            return
        self._last_map_offset = self._last_snap_offset = log_start_offset

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self._remove_unreplicated_transactions(log_start_offset)
        self._last_map_offset = max(self._last_map_offset, log_start_offset)
        latest = self.latest_snapshot_offset()
        self._last_snap_offset = latest if latest is not None else log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything (state and snapshot files); the map restarts at ``offset``."""
        self._clear()
        for snap_offset in list(self._snapshot_offsets):
            self._remove_and_delete_snapshot(snap_offset)
        self._last_snap_offset = 0
        self._last_map_offset = offset

    def truncate_fully_and_reload_snapshots(self) -> None:
        """Forget the state and re-list the snapshot files (a follower installed one)."""
        self._clear()
        self._last_snap_offset = 0
        self._last_map_offset = 0
        self._load_snapshots()

    def take_snapshot(self, *, sync: bool | None = None) -> Path | None:
        """Write ``<map_end_offset>.snapshot`` unless the state did not move since the last one."""
        if self._last_map_offset <= self._last_snap_offset:
            return None
        offset = self._last_map_offset
        path = producer_snapshot_file(self._dir, offset)
        write_producer_snapshot(
            path,
            (e.to_snapshot_entry() for e in self._producers.values()),
            sync=self._sync if sync is None else sync,
        )
        _LOG.debug(
            "Wrote producer snapshot at offset %d with %d producer ids",
            offset,
            len(self._producers),
        )
        self._put_snapshot(SnapshotFile(offset, path))
        self._last_snap_offset = offset
        return path

    def write_snapshot_at(
        self, offset: int, entries: Iterable[ProducerStateEntry], *, sync: bool | None = None
    ) -> Path:
        """Write a snapshot of ``entries`` at ``offset`` and register it (not the live state)."""
        path = producer_snapshot_file(self._dir, offset)
        write_producer_snapshot(
            path,
            (e.to_snapshot_entry() for e in entries),
            sync=self._sync if sync is None else sync,
        )
        self._put_snapshot(SnapshotFile(offset, path))
        return path

    def snapshots_at_or_below(self, offset: int) -> Iterator[SnapshotFile]:
        """Known snapshots at or below ``offset``, newest first."""
        for snap_offset in reversed(
            self._snapshot_offsets[: bisect_right(self._snapshot_offsets, offset)]
        ):
            yield self._snapshots[snap_offset]

    def update_parent_dir(self, directory: str | os.PathLike[str]) -> None:
        self._dir = Path(directory)
        for snapshot in self._snapshots.values():
            snapshot.path = self._dir / snapshot.path.name

    def __repr__(self) -> str:
        return (
            f"ProducerStateManager(dir={str(self._dir)!r}, producers={len(self._producers)}, "
            f"map_end_offset={self._last_map_offset}, snapshots={self._snapshot_offsets})"
        )
