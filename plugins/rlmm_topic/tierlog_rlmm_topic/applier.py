"""What the consumer task does with a record: the seam between reading a metadata topic and
the cache it feeds.

``ConsumerTask`` (``consumer.py``) knows partitions, offsets, seeks and readiness; what a record
means is a ``RecordApplier``'s business. ``StoreApplier`` is TBRLMM's: null keys, values in
Kafka's ``RemoteLogMetadataSerde`` format, applied to a ``RemotePartitionMetadataStore``. The
compacted RLMM feeds keyed records and tombstones through the same task with an applier of its
own, so nothing here assumes the value is present or the key absent.

Every call but ``decode`` is made by the consumer task with its lock held, so an applier needs
no lock of its own for the partition lifecycle (``load``/``unload``/``mark_initialized``);
``apply`` runs on the consumer thread only.
"""

from __future__ import annotations

import logging
from contextlib import suppress
from dataclasses import dataclass
from typing import Protocol

from tierlog.metadata import RemoteLogSegmentMetadataSnapshot, RemotePartitionMetadataStore, serde
from tierlog.spi import (
    IllegalStateError,
    MetadataRecordError,
    RemoteLogMetadata,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

__all__ = ["DecodedEvent", "RecordApplier", "StoreApplier"]

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DecodedEvent:
    """A decoded record: the user partition it belongs to and the applier's own payload.

    ``topic_id_partition`` is ``None`` for a record that belongs to no user partition (Kafka's
    never-published snapshot record): the task skips it with a WARNING.
    """

    topic_id_partition: TopicIdPartition | None
    event: object


class RecordApplier(Protocol):
    """Decodes records and keeps the per-user-partition state they build."""

    def decode(self, key: bytes | None, value: bytes | None) -> DecodedEvent:
        """The record as an event; any exception marks the record unreadable (its metadata
        partition stops, with an error naming the topic, partition and offset)."""
        ...

    def apply(self, event: DecodedEvent) -> None:
        """Apply an event of an assigned partition; an exception is handled like an
        undecodable record."""
        ...

    def load(self, topic_id_partition: TopicIdPartition) -> None:
        """Start the partition from empty, not initialized (dropping any previous state)."""
        ...

    def unload(self, topic_id_partition: TopicIdPartition) -> None:
        """Forget the partition."""
        ...

    def mark_initialized(self, topic_id_partition: TopicIdPartition) -> None:
        """The partition's history up to the end offsets seen at assignment is applied."""
        ...


class StoreApplier:
    """TBRLMM's records applied to a ``RemotePartitionMetadataStore``.

    An event of a partition whose deletion finished (DELETE_PARTITION_FINISHED) is skipped with
    a WARNING, as the embedded RLMM does (the store has dropped that partition); ``is_deleted``
    tells the manager so that it refuses writes to it.
    """

    def __init__(self, store: RemotePartitionMetadataStore) -> None:
        self.store = store
        self._deleted: set[TopicIdPartition] = set()

    def decode(self, key: bytes | None, value: bytes | None) -> DecodedEvent:
        if value is None:
            raise MetadataRecordError(
                "a null value (tombstone) is not a TopicBasedRemoteLogMetadataManager record"
            )
        decoded = serde.deserialize(value)
        if isinstance(decoded, RemoteLogSegmentMetadataSnapshot):
            return DecodedEvent(None, decoded)
        return DecodedEvent(decoded.topic_id_partition, decoded)

    def apply(self, event: DecodedEvent) -> None:
        metadata = event.event
        assert isinstance(metadata, RemoteLogMetadata)
        tip = metadata.topic_id_partition
        try:
            self.store.handle(metadata)
        except IllegalStateError:
            if tip in self._deleted:
                _LOG.warning("skipping an event of %s after its deletion finished", tip)
            else:  # the partition was stopped while the event was in flight
                _LOG.debug("skipping an event of %s, which is no longer loaded", tip)
            return
        if (
            isinstance(metadata, RemotePartitionDeleteMetadata)
            and metadata.state is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
        ):
            self._deleted.add(tip)

    def load(self, topic_id_partition: TopicIdPartition) -> None:
        self._deleted.discard(topic_id_partition)
        self.store.clear_topic_partition(topic_id_partition)
        self.store.maybe_load_partition(topic_id_partition)

    def unload(self, topic_id_partition: TopicIdPartition) -> None:
        self._deleted.discard(topic_id_partition)
        self.store.clear_topic_partition(topic_id_partition)

    def mark_initialized(self, topic_id_partition: TopicIdPartition) -> None:
        # IllegalStateError: the history deleted the partition (DELETE_PARTITION_FINISHED).
        with suppress(IllegalStateError):
            self.store.mark_initialized(topic_id_partition)

    def is_deleted(self, topic_id_partition: TopicIdPartition) -> bool:
        """Whether the applied history finished the partition's deletion."""
        return topic_id_partition in self._deleted
