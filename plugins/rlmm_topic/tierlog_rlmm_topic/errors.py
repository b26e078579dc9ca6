"""The errors the ``topic`` RLMM raises beyond the SPI's own.

Both derive from the SPI's ``RemoteStorageException`` family, so the RemoteLogManager handles
them like any metadata failure; the subclasses let a caller (and the tests) tell the two
situations apart.
"""

from __future__ import annotations

from tierlog.spi import RemoteStorageException, RetriableRemoteStorageException

__all__ = ["ConsumeTimeoutError", "UnreadableMetadataRecordError"]


class UnreadableMetadataRecordError(RemoteStorageException):
    """A record of the metadata topic cannot be decoded or applied.

    The metadata partition holding it stops advancing (a skipped event would leave a cache
    that silently disagrees with the topic), its user partitions that were still loading never
    become ready, and reads of them raise this error instead of the retriable "not ready".
    ``topic``, ``partition`` and ``offset`` locate the record for ``kafka-console-consumer`` or
    ``tierlog metadata dump``.
    """

    def __init__(self, message: str, *, topic: str, partition: int, offset: int) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (str(self), self.topic, self.partition, self.offset))

    def copy(self) -> UnreadableMetadataRecordError:
        """A new exception with the same facts: one instance must not be raised from several
        threads at once (each raise rewrites its traceback)."""
        return UnreadableMetadataRecordError(
            str(self), topic=self.topic, partition=self.partition, offset=self.offset
        )


def _rebuild(
    message: str, topic: str, partition: int, offset: int
) -> UnreadableMetadataRecordError:
    return UnreadableMetadataRecordError(message, topic=topic, partition=partition, offset=offset)


class ConsumeTimeoutError(RetriableRemoteStorageException, TimeoutError):
    """A write was acknowledged by the cluster but this node's consumer did not apply it within
    ``remote.log.metadata.consume.wait.ms`` (Kafka's ``TimeoutException``). The record is in the
    topic and will be applied when the consumer catches up; repeating the call is harmless.

    ``position`` is how far the consumer had read the record's metadata partition (None before
    its first record there) and ``readable_end`` the end the broker gave a reader at the
    consumer's last check (its last stable offset for a ``read_committed`` consumer; None if
    never checked): a position at that end, below the record, means the broker itself held the
    record back (an open transaction), not the consumer."""

    def __init__(
        self, message: str, *, position: int | None = None, readable_end: int | None = None
    ) -> None:
        super().__init__(message)
        self.position = position
        self.readable_end = readable_end

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_timeout, (str(self), self.position, self.readable_end))


def _rebuild_timeout(
    message: str, position: int | None, readable_end: int | None
) -> ConsumeTimeoutError:
    return ConsumeTimeoutError(message, position=position, readable_end=readable_end)
