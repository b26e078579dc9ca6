"""The checks every RLMM makes before it writes an event, with Kafka's messages.

Kafka's TopicBasedRemoteLogMetadataManager refuses an ``add`` whose state is not
COPY_SEGMENT_STARTED and an ``update`` to COPY_SEGMENT_STARTED before producing anything; the
embedded, ``topic`` and compacted RLMMs do the same, and also refuse (as the SPI's ``@throws``
asks) an update of a segment they do not know and a write to a partition whose deletion
finished. One place for these rules, so that every RLMM refuses the same calls with the same
words.
"""

from __future__ import annotations

from tierlog.spi import (
    InvalidArgumentError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteResourceNotFoundException,
    TopicIdPartition,
)

__all__ = ["check_add", "check_update", "partition_deleted", "unknown_segment"]


def check_add(metadata: RemoteLogSegmentMetadata) -> None:
    """A new segment must be COPY_SEGMENT_STARTED (``InvalidArgumentError`` otherwise)."""
    if metadata.state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED:
        raise InvalidArgumentError(
            f"Given remoteLogSegmentMetadata {metadata} should have state as "
            f"COPY_SEGMENT_STARTED but it contains state as: {metadata.state.name}"
        )


def check_update(update: RemoteLogSegmentMetadataUpdate) -> None:
    """An update may not go to COPY_SEGMENT_STARTED (``InvalidArgumentError``)."""
    if update.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED:
        raise InvalidArgumentError(
            f"Given remoteLogSegmentMetadataUpdate {update} should not have the state as: "
            "COPY_SEGMENT_STARTED"
        )


def unknown_segment(segment_id: RemoteLogSegmentId) -> RemoteResourceNotFoundException:
    """The error of an update to a segment the RLMM does not hold."""
    return RemoteResourceNotFoundException(
        f"No remote log segment metadata found for :{segment_id}"
    )


def partition_deleted(tip: TopicIdPartition) -> RemoteResourceNotFoundException:
    """The error of a segment write to a partition whose deletion finished."""
    return RemoteResourceNotFoundException(
        f"partition {tip} was deleted (DELETE_PARTITION_FINISHED); its remote log metadata "
        "cannot change any more"
    )
