"""The RemoteLogMetadataManager contract: strongly consistent metadata of remote segments."""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping, Set
from concurrent.futures import Future
from types import TracebackType
from typing import Self

from tierlog.spi._model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)


class RemoteLogMetadataManager(abc.ABC):
    """Stores and serves the lifecycle metadata of remote segments (Kafka's RLMM).

    Lifecycle, as in Kafka: constructed with no arguments, ``configure`` once with the
    ``rlmm.config.`` keys (prefix stripped; the RLM adds ``node.id``, ``broker.id``, ``log.dir``
    and ``cluster.id``), then ``on_partition_leadership_changes`` for the partitions this node
    hosts, operations, and ``close``.

    Consistency: the three mutating calls return a ``concurrent.futures.Future`` that completes
    only when the write is durable and visible to every read on this node (read-your-writes).
    Reads see a segment according to its state (Kafka's table):

    ============================  =======  ========  ============  =============
    lookup                        COPY_    COPY_     DELETE_       DELETE_
                                  STARTED  FINISHED  STARTED       FINISHED
    ============================  =======  ========  ============  =============
    remote_log_segment_metadata   no       yes       no            no
    list_remote_log_segments      yes      yes       yes           no
    highest_offset_for_epoch      no       counted   still counted still counted
    ============================  =======  ========  ============  =============

    Partitions: every read and write names a ``TopicIdPartition`` that must be hosted here
    (``on_partition_leadership_changes``). A partition this RLMM does not know, or whose deletion
    finished, raises ``RemoteResourceNotFoundException``; one still loading raises the retriable
    ``RemoteStorageNotReadyException`` (``is_ready`` tells which).

    A plugin may define ``conformance_config()`` and ``conformance_capabilities()``
    classmethods; the conformance suite uses them when the user gives no configuration.
    """

    @abc.abstractmethod
    def configure(self, configs: Mapping[str, str]) -> None:
        """Apply the configuration (keys without the ``rlmm.config.`` prefix)."""

    @abc.abstractmethod
    def add_remote_log_segment_metadata(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata
    ) -> Future[None]:
        """Record a new segment, whose state must be ``COPY_SEGMENT_STARTED``.

        Raises ``InvalidArgumentError`` (a ``ValueError``) for any other state, before anything
        is written. Raises ``RemoteStorageException`` if the write cannot be made.
        """

    @abc.abstractmethod
    def update_remote_log_segment_metadata(
        self, remote_log_segment_metadata_update: RemoteLogSegmentMetadataUpdate
    ) -> Future[None]:
        """Move a segment along its lifecycle.

        The state may not be ``COPY_SEGMENT_STARTED`` (``InvalidArgumentError``). An update to a
        segment the RLMM does not know raises ``RemoteResourceNotFoundException``; an invalid
        transition (for example ``COPY_SEGMENT_FINISHED`` to ``DELETE_SEGMENT_FINISHED``) is
        dropped with an error log, as Kafka does, because the log of events is the truth and a
        replay must reach the same state.
        """

    @abc.abstractmethod
    def remote_log_segment_metadata(
        self, topic_id_partition: TopicIdPartition, epoch_for_offset: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The ``COPY_SEGMENT_FINISHED`` segment holding ``offset`` under ``epoch_for_offset``.

        ``None`` when no finished segment of that epoch covers the offset (the offset must also
        lie inside the part of the segment written under that epoch).
        """

    @abc.abstractmethod
    def highest_offset_for_epoch(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int
    ) -> int | None:
        """The highest offset of ``leader_epoch`` copied to remote storage, or ``None``.

        Only finished copies count; it never decreases, not even when segments are deleted.
        """

    @abc.abstractmethod
    def put_remote_partition_delete_metadata(
        self, remote_partition_delete_metadata: RemotePartitionDeleteMetadata
    ) -> Future[None]:
        """Record a step of a partition's deletion.

        ``DELETE_PARTITION_MARKED`` and ``DELETE_PARTITION_STARTED`` leave the segments readable;
        after ``DELETE_PARTITION_FINISHED`` the partition is gone and lookups raise
        ``RemoteResourceNotFoundException``. Raises ``RemoteResourceNotFoundException`` for a
        partition this RLMM has no resources for.
        """

    @abc.abstractmethod
    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> Iterator[RemoteLogSegmentMetadata]:
        """Segments not yet ``DELETE_SEGMENT_FINISHED``.

        With ``leader_epoch``: the segments holding that epoch, in ascending order of the offset
        at which each starts that epoch; when some of them are in progress, being deleted or
        replaced by an overlapping copy, the whole list is sorted by ``start_offset`` (a stable
        sort), exactly as Kafka does. An unknown epoch gives nothing. Without ``leader_epoch``:
        every segment of the partition, in no particular order. An unknown partition raises
        ``RemoteResourceNotFoundException``.
        """

    @abc.abstractmethod
    def on_partition_leadership_changes(
        self,
        leader_partitions: Set[TopicIdPartition],
        follower_partitions: Set[TopicIdPartition],
    ) -> None:
        """This node now hosts these partitions (as leader or follower): load their metadata."""

    @abc.abstractmethod
    def on_stop_partitions(self, partitions: Set[TopicIdPartition]) -> None:
        """This node no longer hosts these partitions: release their metadata."""

    @abc.abstractmethod
    def remote_log_size(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int:
        """Total bytes of the segments listed by ``list_remote_log_segments(tp, leader_epoch)``
        (KIP-852): copies in progress and deletions in progress count; a segment spanning
        several epochs counts once per epoch. An unknown partition raises
        ``RemoteResourceNotFoundException``."""

    def next_segment_with_txn_index(
        self, topic_id_partition: TopicIdPartition, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The first segment at or after ``offset`` within ``epoch`` that has aborted
        transactions. The default returns the segment holding the offset whatever its
        transaction index; an RLMM that tracks ``txn_idx_empty`` skips empty ones."""
        return self.remote_log_segment_metadata(topic_id_partition, epoch, offset)

    def is_ready(self, topic_id_partition: TopicIdPartition) -> bool:
        """Whether the partition's metadata is loaded and can serve. The default is ``True``."""
        return True

    def close(self) -> None:  # noqa: B027 - a no-op default is the contract
        """Release resources. A second call must be harmless; the default does nothing."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
