"""The errors ``LocalLog`` raises, Kafka's exception types for appends, reads and offsets.

They are shared by every part of the log (appending, reading, retention, truncation), so they
live apart from all of them; ``tierlog.log.local_log`` re-exports each one, which is where
callers import them from.
"""

from __future__ import annotations

from tierlog.spi import IllegalStateError, InvalidArgumentError

__all__ = [
    "InconsistentTopicIdError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "OffsetMovedToTieredStorageError",
    "OffsetOutOfRangeError",
    "OffsetsOutOfOrderError",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "UnexpectedAppendOffsetError",
]


class OffsetOutOfRangeError(InvalidArgumentError):
    """Kafka's ``OffsetOutOfRangeException``: the offset is below the log start or past its end."""


class OffsetMovedToTieredStorageError(OffsetOutOfRangeError):
    """The offset is in the log but only in remote storage (below the local log start offset).

    Kafka answers ``OFFSET_MOVED_TO_TIERED_STORAGE``; the reader must go to the RLM.
    """


class InvalidRecordError(InvalidArgumentError):
    """Kafka's ``InvalidRecordException``: a batch breaks the produce rules."""


class InvalidTimestampError(InvalidRecordError):
    """Kafka's ``InvalidTimestampException``: a record timestamp outside the allowed window."""


class RecordTooLargeError(InvalidArgumentError):
    """Kafka's ``RecordTooLargeException``: a batch exceeds ``max.message.bytes``."""


class RecordBatchTooLargeError(InvalidArgumentError):
    """Kafka's ``RecordBatchTooLargeException``: an append exceeds ``segment.bytes``."""


class OffsetsOutOfOrderError(InvalidArgumentError):
    """Kafka's ``OffsetsOutOfOrderException``: a follower's batches do not increase."""


class UnexpectedAppendOffsetError(InvalidArgumentError):
    """Kafka's ``UnexpectedAppendOffsetException``: a follower append below the log end."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class InconsistentTopicIdError(IllegalStateError):
    """Kafka's ``InconsistentTopicIdException``: ``partition.metadata`` names another topic id."""
