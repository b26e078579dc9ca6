"""The data model shared by the RemoteLogManager and every plugin.

Each class mirrors the Kafka class of the same name in
``org.apache.kafka.server.log.remote.storage`` (fields, validation, state machine), with
snake_case names. They are immutable values: a state change produces a new object
(``create_with_updates``), which is what makes them safe to hand across threads and plugins.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Final

from tierlog.spi._errors import InvalidArgumentError
from tierlog.spi._uuid import Uuid

NO_BROKER_ID: Final = -1


@dataclass(frozen=True, slots=True)
class TopicPartition:
    """A topic name and partition number; ``str()`` is Kafka's ``foo-0``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    """A partition identified by topic id as well as by name; ``str()`` is ``<id>:foo-0``.

    Equality includes the name, as in Kafka, so a topic recreated under the same name (a new id)
    is a different partition.
    """

    topic_id: Uuid
    topic: str
    partition: int
    # The hash, kept: partitions key the maps every remote read looks up (a generated hash
    # would hash a new tuple, and the Uuid in it, each time).
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.partition < 0:
            raise InvalidArgumentError(f"partition must be >= 0, got {self.partition}")
        object.__setattr__(self, "_hash", hash((self.topic_id, self.topic, self.partition)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[TopicIdPartition], tuple[Uuid, str, int]]:
        # Rebuilt through __init__: a str hash differs between processes.
        return (TopicIdPartition, (self.topic_id, self.topic, self.partition))

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def __str__(self) -> str:
        return f"{self.topic_id}:{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    """A universally unique id of one copy attempt of one segment of one partition.

    A retried copy of the same local segment gets a new id (``generate_new``), so an aborted
    attempt's objects never collide with the retry's.
    """

    topic_id_partition: TopicIdPartition
    id: Uuid

    @classmethod
    def generate_new(cls, topic_id_partition: TopicIdPartition) -> RemoteLogSegmentId:
        return cls(topic_id_partition, Uuid.random())

    def __str__(self) -> str:
        return f"RemoteLogSegmentId{{topicIdPartition={self.topic_id_partition}, id={self.id}}}"


class RemoteLogSegmentState(enum.IntEnum):
    """Lifecycle of a remote segment; the values are Kafka's byte ids on the wire.

    ::

        COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED -> DELETE_SEGMENT_STARTED
                  \\_____________________________________/          |
                                                          DELETE_SEGMENT_FINISHED
    """

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3

    @property
    def id(self) -> int:
        return int(self)

    @classmethod
    def for_id(cls, state_id: int) -> RemoteLogSegmentState:
        try:
            return cls(state_id)
        except ValueError:
            raise InvalidArgumentError(f"unknown RemoteLogSegmentState id {state_id}") from None

    @staticmethod
    def is_valid_transition(src: RemoteLogSegmentState | None, dst: RemoteLogSegmentState) -> bool:
        """Kafka's ``isValidTransition``: a retry (src == dst) is always valid."""
        if src is None:
            return dst is RemoteLogSegmentState.COPY_SEGMENT_STARTED
        if src is dst:
            return True
        return dst in _SEGMENT_TRANSITIONS[src]

    def __str__(self) -> str:
        return self.name


_SEGMENT_TRANSITIONS: Final[Mapping[RemoteLogSegmentState, frozenset[RemoteLogSegmentState]]] = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: frozenset(
        {RemoteLogSegmentState.COPY_SEGMENT_FINISHED, RemoteLogSegmentState.DELETE_SEGMENT_STARTED}
    ),
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: frozenset(
        {RemoteLogSegmentState.DELETE_SEGMENT_STARTED}
    ),
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: frozenset(
        {RemoteLogSegmentState.DELETE_SEGMENT_FINISHED}
    ),
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: frozenset(),
}


class RemotePartitionDeleteState(enum.IntEnum):
    """Lifecycle of the deletion of a whole partition's remote data; Kafka's byte ids."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2

    @property
    def id(self) -> int:
        return int(self)

    @classmethod
    def for_id(cls, state_id: int) -> RemotePartitionDeleteState:
        try:
            return cls(state_id)
        except ValueError:
            raise InvalidArgumentError(
                f"unknown RemotePartitionDeleteState id {state_id}"
            ) from None

    @staticmethod
    def is_valid_transition(
        src: RemotePartitionDeleteState | None, dst: RemotePartitionDeleteState
    ) -> bool:
        """Kafka's rule: null -> MARKED, self, MARKED -> STARTED, STARTED -> FINISHED."""
        if src is None:
            return dst is RemotePartitionDeleteState.DELETE_PARTITION_MARKED
        return src is dst or dst.value == src.value + 1

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class CustomMetadata:
    """Opaque bytes an RSM returns from a copy, stored with the segment's metadata."""

    value: bytes

    def __str__(self) -> str:
        return f"CustomMetadata{{{len(self.value)} bytes}}"


def _frozen_epochs(epochs: Mapping[int, int]) -> Mapping[int, int]:
    return MappingProxyType(dict(sorted(epochs.items())))


@dataclass(frozen=True, slots=True, eq=True)
class RemoteLogSegmentMetadata:
    """What is known about one remote segment: its offsets, epochs, size and lifecycle state.

    Validation is Kafka's: ``start_offset >= 0``, ``end_offset >= start_offset`` and at least one
    leader epoch; ``segment_leader_epochs`` maps each leader epoch in the segment to the first
    offset written under it, in ascending epoch order.
    """

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int]
    custom_metadata: CustomMetadata | None = None
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    txn_idx_empty: bool = False
    cleaner_offsets: Mapping[int, int] | None = None
    """tierlog extension (compacted topics in tiered storage, KIP-1272): for a segment written by
    the log cleaner, the cleaner offset reached under each leader epoch (the checkpoint vector
    that fences a zombie leader's cleaning); None for a segment copied from the local log."""
    broker_leader_epoch: int | None = None
    """KAFKA-20033: the leader epoch of the publishing leader when it published this event; an
    attribute of the event, not of the segment (not compared, not in Kafka's legacy record).
    The compacted RLMM keys its records by it; other RLMMs ignore it."""

    def __post_init__(self) -> None:
        if self.start_offset < 0:
            raise InvalidArgumentError(
                f"Unexpected start offset = {self.start_offset}. "
                "StartOffset for a remote segment cannot be negative"
            )
        if self.end_offset < self.start_offset:
            raise InvalidArgumentError(
                f"Unexpected end offset = {self.end_offset}. EndOffset for a remote segment "
                f"cannot be less than startOffset = {self.start_offset}"
            )
        if not self.segment_leader_epochs:
            raise InvalidArgumentError("segmentLeaderEpochs can not be null or empty")
        if not isinstance(self.state, RemoteLogSegmentState):
            raise InvalidArgumentError(f"state must be a RemoteLogSegmentState: {self.state!r}")
        epochs = _frozen_epochs(self.segment_leader_epochs)
        object.__setattr__(self, "segment_leader_epochs", epochs)
        if self.cleaner_offsets is not None:
            if not self.cleaner_offsets:
                raise InvalidArgumentError("cleaner_offsets must be None or hold an epoch")
            object.__setattr__(self, "cleaner_offsets", _frozen_epochs(self.cleaner_offsets))
        _check_broker_leader_epoch(self.broker_leader_epoch)

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    def create_with_updates(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> RemoteLogSegmentMetadata:
        """The metadata after ``update``: broker, event time, custom metadata and state change;
        offsets, epochs, size and ``txn_idx_empty`` stay."""
        if update.remote_log_segment_id != self.remote_log_segment_id:
            raise InvalidArgumentError(
                "Given rlsmUpdate does not have this instance's remoteLogSegmentId."
            )
        return RemoteLogSegmentMetadata(
            self.remote_log_segment_id,
            self.start_offset,
            self.end_offset,
            self.max_timestamp_ms,
            update.broker_id,
            update.event_timestamp_ms,
            self.segment_size_in_bytes,
            self.segment_leader_epochs,
            update.custom_metadata,
            update.state,
            self.txn_idx_empty,
            self.cleaner_offsets,
            update.broker_leader_epoch,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RemoteLogSegmentMetadata):
            return NotImplemented
        return (
            self.remote_log_segment_id == other.remote_log_segment_id
            and self.start_offset == other.start_offset
            and self.end_offset == other.end_offset
            and self.max_timestamp_ms == other.max_timestamp_ms
            and self.broker_id == other.broker_id
            and self.event_timestamp_ms == other.event_timestamp_ms
            and self.segment_size_in_bytes == other.segment_size_in_bytes
            and dict(self.segment_leader_epochs) == dict(other.segment_leader_epochs)
            and self.custom_metadata == other.custom_metadata
            and self.state == other.state
            and self.txn_idx_empty == other.txn_idx_empty
            and _as_dict(self.cleaner_offsets) == _as_dict(other.cleaner_offsets)
        )

    def __hash__(self) -> int:
        return hash((self.remote_log_segment_id, self.start_offset, self.end_offset, self.state))

    def __reduce__(self) -> tuple[object, ...]:
        return (
            RemoteLogSegmentMetadata,
            (
                self.remote_log_segment_id,
                self.start_offset,
                self.end_offset,
                self.max_timestamp_ms,
                self.broker_id,
                self.event_timestamp_ms,
                self.segment_size_in_bytes,
                dict(self.segment_leader_epochs),
                self.custom_metadata,
                self.state,
                self.txn_idx_empty,
                _as_dict(self.cleaner_offsets),
                self.broker_leader_epoch,
            ),
        )


def _as_dict(epochs: Mapping[int, int] | None) -> dict[int, int] | None:
    return None if epochs is None else dict(epochs)


_INT32_MAX: Final = 2**31 - 1
_INT64_MAX: Final = 2**63 - 1


def _check_broker_leader_epoch(epoch: int | None) -> None:
    if epoch is not None and (
        isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= _INT32_MAX
    ):
        raise InvalidArgumentError(
            f"broker_leader_epoch must be None or an int32 >= 0 (a leader epoch): {epoch!r}"
        )


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    """A state change of an existing remote segment (it carries no offsets)."""

    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    custom_metadata: CustomMetadata | None
    state: RemoteLogSegmentState
    broker_id: int
    broker_leader_epoch: int | None = field(default=None, compare=False)
    """KAFKA-20033: the publishing leader's epoch (see ``RemoteLogSegmentMetadata``); not
    compared, not in Kafka's legacy record."""

    def __post_init__(self) -> None:
        _check_broker_leader_epoch(self.broker_leader_epoch)

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    """A step in deleting all the remote data of a partition (topic deletion)."""

    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int
    broker_leader_epoch: int | None = field(default=None, compare=False)
    """KAFKA-20033: the publishing leader's epoch; not compared, not in Kafka's legacy record."""
    end_offset: int | None = field(default=None, compare=False)
    """KAFKA-20033: the partition's log end offset when its deletion was published (the
    compacted RLMM's key); not compared, not in Kafka's legacy record."""

    def __post_init__(self) -> None:
        _check_broker_leader_epoch(self.broker_leader_epoch)
        end = self.end_offset
        if end is not None and (
            isinstance(end, bool) or not isinstance(end, int) or not -1 <= end <= _INT64_MAX
        ):
            raise InvalidArgumentError(
                f"end_offset must be None or an int64 >= -1 (a log end offset): {end!r}"
            )


RemoteLogMetadata = (
    RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata
)
"""Any of the three kinds of metadata event an RLMM stores (Kafka's ``RemoteLogMetadata``)."""


class IndexType(enum.Enum):
    """The auxiliary files copied with a segment; ``fetch_index`` takes one of these.

    The first five are Kafka's ``RemoteStorageManager.IndexType``. ``COMPACTION_SUMMARY`` is a
    tierlog extension that Kafka does not have: the log cleaner's small opaque summary of a
    segment it wrote (a Bloom filter of the segment's keys and a few facts,
    ``tierlog.compaction.summary``), kept with the segment by every RSM so that a later round can
    decide from it whether the segment must be downloaded. Like ``TRANSACTION`` it is optional
    per segment: a segment copied from the local log has none, and fetching it raises
    ``RemoteResourceNotFoundException``.
    """

    OFFSET = "offset"
    TIMESTAMP = "timestamp"
    PRODUCER_SNAPSHOT = "producer_snapshot"
    TRANSACTION = "transaction"
    LEADER_EPOCH = "leader_epoch"
    COMPACTION_SUMMARY = "compaction_summary"

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """The files of a sealed local segment handed to ``copy_log_segment_data``.

    ``transaction_index`` is ``None`` when the segment has no aborted transactions;
    ``leader_epoch_index`` is the text of the leader-epoch checkpoint truncated to the segment,
    in memory, as Kafka's RLM sends it.

    ``compaction_summary`` (a tierlog extension, ``IndexType.COMPACTION_SUMMARY``) is the log
    cleaner's summary of a segment it rewrote, in memory like ``leader_epoch_index``: it is a
    few kilobytes at most, and the cleaner builds it while writing the segment, so there is no
    file to point at. ``None``, the default, for a segment copied from the local log, which is
    the usual case; the RSM then stores no summary. Empty bytes are a summary (stored and read
    back as empty), not its absence.
    """

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path
    leader_epoch_index: bytes = field(repr=False)
    compaction_summary: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for name in ("log_segment", "offset_index", "time_index", "producer_snapshot_index"):
            value = getattr(self, name)
            if not isinstance(value, Path):
                raise InvalidArgumentError(f"LogSegmentData.{name} must be a Path, got {value!r}")
        if self.transaction_index is not None and not isinstance(self.transaction_index, Path):
            raise InvalidArgumentError(
                f"LogSegmentData.transaction_index must be a Path or None, "
                f"got {self.transaction_index!r}"
            )
        if not isinstance(self.leader_epoch_index, bytes | bytearray | memoryview):
            raise InvalidArgumentError(
                "LogSegmentData.leader_epoch_index must be the checkpoint's bytes (in memory, "
                f"as Kafka's RLM sends it), got {type(self.leader_epoch_index).__name__}"
            )
        object.__setattr__(self, "leader_epoch_index", bytes(self.leader_epoch_index))
        summary = self.compaction_summary
        if summary is not None:
            if not isinstance(summary, bytes | bytearray | memoryview):
                raise InvalidArgumentError(
                    "LogSegmentData.compaction_summary must be bytes (the cleaner's summary, in "
                    f"memory) or None, got {type(summary).__name__}"
                )
            object.__setattr__(self, "compaction_summary", bytes(summary))
