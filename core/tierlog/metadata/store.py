"""RemotePartitionMetadataStore: the per-partition caches an RLMM serves reads from.

Kafka's ``RemotePartitionMetadataStore`` (with its base ``RemotePartitionMetadataEventHandler``):
the consumer side of the metadata topic (or tierlog's embedded log) applies every
``RemoteLogMetadata`` event here, and the RLMM's read methods ask here. Partitions appear when
they are assigned (``maybe_load_partition``) and become readable when their events have been
replayed (``mark_initialized``); until then reads fail with a retriable error, so the RLM retries
instead of acting on half-loaded metadata.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Final

from tierlog.metadata.cache import RemoteLogMetadataCache
from tierlog.spi import (
    IllegalStateError,
    InvalidArgumentError,
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    RemoteStorageNotReadyException,
    TopicIdPartition,
)

__all__ = ["DEFAULT_NOT_READY_WAIT_S", "RemotePartitionMetadataStore"]

_LOG = logging.getLogger(__name__)

DEFAULT_NOT_READY_WAIT_S: Final = 0.1
"""How long a read waits for a loading partition before raising (Kafka waits 100 ms)."""


class RemotePartitionMetadataStore:
    """Remote-segment metadata of the user partitions this node hosts, one cache each.

    Events (``handle*``) for a partition that was never loaded raise ``IllegalStateError``: the
    caller must load a partition before replaying its events, as Kafka's ConsumerTask does.
    Reads of an unknown partition raise ``RemoteResourceNotFoundException``; reads of a loaded
    partition whose replay has not finished wait up to ``not_ready_wait_s`` seconds, then raise
    ``RemoteStorageNotReadyException`` (retriable; Kafka raises ``ReplicaNotAvailableException``).
    """

    def __init__(self, *, not_ready_wait_s: float = DEFAULT_NOT_READY_WAIT_S) -> None:
        self._not_ready_wait_s = not_ready_wait_s
        self._lock = threading.Lock()
        self._caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
        self._delete_metadata: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}

    # Events -------------------------------------------------------------------------------------
    def handle(self, metadata: RemoteLogMetadata) -> None:
        """Apply any metadata event (Kafka's ``handleRemoteLogMetadata``)."""
        if isinstance(metadata, RemoteLogSegmentMetadata):
            self.handle_remote_log_segment_metadata(metadata)
        elif isinstance(metadata, RemoteLogSegmentMetadataUpdate):
            self.handle_remote_log_segment_metadata_update(metadata)
        elif isinstance(metadata, RemotePartitionDeleteMetadata):
            self.handle_remote_partition_delete_metadata(metadata)
        else:
            raise InvalidArgumentError(f"remoteLogMetadata: {metadata!r} is not supported.")

    def handle_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """A segment whose copy started (``InvalidArgumentError`` for any other state)."""
        _LOG.debug("Adding remote log segment: %s", metadata)
        self._loaded(metadata.topic_id_partition).add_copy_in_progress_segment(metadata)

    def handle_remote_log_segment_metadata_update(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> None:
        """A segment's state change; an update of an unknown segment is logged, not raised,
        because replaying a log must not stop at an event whose base event was removed."""
        _LOG.debug("Updating remote log segment: %s", update)
        cache = self._loaded(update.topic_id_partition)
        try:
            cache.update_remote_log_segment_metadata(update)
        except RemoteResourceNotFoundException:
            _LOG.warning("Error occurred while updating the remote log segment.", exc_info=True)

    def handle_remote_partition_delete_metadata(
        self, metadata: RemotePartitionDeleteMetadata
    ) -> None:
        """Keep the partition's latest delete event (no transition check, as Kafka); on
        DELETE_PARTITION_FINISHED forget the partition and its delete event."""
        _LOG.debug("Received partition delete state with: %s", metadata)
        tip = metadata.topic_id_partition
        with self._lock:
            self._delete_metadata[tip] = metadata
            if metadata.state is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                self._caches.pop(tip, None)
                self._delete_metadata.pop(tip, None)

    # Partition lifecycle ------------------------------------------------------------------------
    def maybe_load_partition(self, topic_id_partition: TopicIdPartition) -> None:
        """Start holding a partition's metadata (an empty, uninitialized cache) if not yet."""
        with self._lock:
            if topic_id_partition not in self._caches:
                self._caches[topic_id_partition] = RemoteLogMetadataCache(topic_id_partition)

    def mark_initialized(self, topic_id_partition: TopicIdPartition) -> None:
        """The partition's events have been replayed: its reads may be served."""
        self._loaded(topic_id_partition).mark_initialized()
        _LOG.debug(
            "Remote log components are initialized for user-partition: %s", topic_id_partition
        )

    def is_initialized(self, topic_id_partition: TopicIdPartition) -> bool:
        """Whether the partition is loaded and initialized (what ``is_ready`` reports)."""
        with self._lock:
            cache = self._caches.get(topic_id_partition)
        return cache is not None and cache.is_initialized()

    def clear_topic_partition(self, topic_id_partition: TopicIdPartition) -> None:
        """Forget a partition's cache (it is no longer hosted here); its delete event stays."""
        with self._lock:
            self._caches.pop(topic_id_partition, None)

    def remote_partition_delete_metadata(
        self, topic_id_partition: TopicIdPartition
    ) -> RemotePartitionDeleteMetadata | None:
        """The latest partition-delete event seen for the partition, if any."""
        with self._lock:
            return self._delete_metadata.get(topic_id_partition)

    def close(self) -> None:
        """Drop every partition, as Kafka's ``close``."""
        _LOG.info("Clearing the entries from the store.")
        with self._lock:
            self._caches = {}
            self._delete_metadata = {}

    # Reads --------------------------------------------------------------------------------------
    def remote_log_segment_metadata(
        self, topic_id_partition: TopicIdPartition, epoch_for_offset: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        cache = self._caches.get(topic_id_partition)  # _ready, inlined: every remote read asks
        if cache is None or not cache.initialized:
            cache = self._ready(topic_id_partition)
        return cache.remote_log_segment_metadata(epoch_for_offset, offset)

    def next_segment_with_txn_index(
        self, topic_id_partition: TopicIdPartition, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        return self._ready(topic_id_partition).next_segment_with_txn_index(epoch, offset)

    def highest_offset_for_epoch(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int
    ) -> int | None:
        return self._ready(topic_id_partition).highest_offset_for_epoch(leader_epoch)

    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> Iterator[RemoteLogSegmentMetadata]:
        """With ``leader_epoch``: that epoch's segments sorted by start offset; without: all
        segments, unordered."""
        cache = self._ready(topic_id_partition)
        if leader_epoch is None:
            return cache.list_all_remote_log_segments()
        return cache.list_remote_log_segments(leader_epoch)

    def segment_metadata(
        self, topic_id_partition: TopicIdPartition, segment_id: RemoteLogSegmentId
    ) -> RemoteLogSegmentMetadata | None:
        """A segment's current metadata by id (any state), or None once DELETE_SEGMENT_FINISHED
        or if unknown; O(1), through the same readiness check as the other reads."""
        return self._ready(topic_id_partition).segment_metadata(segment_id)

    def peek_segment(
        self, topic_id_partition: TopicIdPartition, segment_id: RemoteLogSegmentId
    ) -> RemoteLogSegmentMetadata | None:
        """A segment's current metadata in a loaded partition, initialized or not; None when
        the segment or the partition is unknown. For appliers that decide what to apply from
        what they applied (the compacted RLMM), never for serving reads."""
        with self._lock:
            cache = self._caches.get(topic_id_partition)
        return None if cache is None else cache.segment_metadata(segment_id)

    def peek_highest_offset(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int
    ) -> int | None:
        """``highest_offset_for_epoch`` of a loaded partition, initialized or not; None when
        the epoch or the partition is unknown. For appliers, as ``peek_segment``."""
        with self._lock:
            cache = self._caches.get(topic_id_partition)
        return None if cache is None else cache.highest_offset_for_epoch(leader_epoch)

    def raise_highest_offset(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int, offset: int
    ) -> None:
        """``RemoteLogMetadataCache.raise_highest_offset_for_epoch`` on a loaded partition
        (initialized or not): a replay of a compacted history restoring what its writer saw.
        ``IllegalStateError`` for a partition not loaded."""
        self._loaded(topic_id_partition).raise_highest_offset_for_epoch(leader_epoch, offset)

    def remote_log_size(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int:
        """KIP-852's size of the epoch's segments, from the cache's running sum.

        Kafka's TBRLMM reaches the cache for this through the store's
        ``listRemoteLogSegments(tp, epoch)``, that is through the same readiness check as the
        other reads (what it skips is the manager-level "is the RLMM started" check), so an
        unknown partition raises ``RemoteResourceNotFoundException`` and a loading one
        ``RemoteStorageNotReadyException`` here too.
        """
        return self._ready(topic_id_partition).remote_log_size(leader_epoch)

    # Internals ----------------------------------------------------------------------------------
    def _loaded(self, topic_id_partition: TopicIdPartition) -> RemoteLogMetadataCache:
        with self._lock:
            cache = self._caches.get(topic_id_partition)
        if cache is None:
            raise IllegalStateError(f"No partition metadata found for : {topic_id_partition}")
        return cache

    def _ready(self, topic_id_partition: TopicIdPartition) -> RemoteLogMetadataCache:
        """Kafka's ``getRemoteLogMetadataCache``: the cache, once it is initialized."""
        # Every remote read comes here: a dict lookup is atomic, the lock is for writers.
        cache = self._caches.get(topic_id_partition)
        if cache is None:
            raise RemoteResourceNotFoundException(
                f"No resource found for partition: {topic_id_partition}"
            )
        if not cache.is_initialized() and not cache.await_initialized(self._not_ready_wait_s):
            raise RemoteStorageNotReadyException(
                f"Remote log metadata cache is not initialized for partition: {topic_id_partition}"
            )
        return cache
