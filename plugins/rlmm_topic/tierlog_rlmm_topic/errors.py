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
    topic and will be applied when the consumer catches up; repeating the call is harmless."""
