"""The RemoteStorageManager contract: where segment data and indexes live remotely."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from types import TracebackType
from typing import BinaryIO, Self, overload

from tierlog.spi._errors import InvalidArgumentError
from tierlog.spi._model import (
    CustomMetadata,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)


class RemoteStorageManager(abc.ABC):
    """Copies, fetches and deletes the data of remote log segments (Kafka's RSM).

    Lifecycle, as in Kafka: the class is constructed with no arguments, then ``configure`` is
    called once with the ``rsm.config.`` keys (prefix already stripped), then any number of
    operations, possibly from several threads at once, then ``close``.

    The metadata of segments lives in the RemoteLogMetadataManager, which is strongly
    consistent, so an RSM may sit on an eventually consistent store: the RLM never reads a
    segment whose copy it has not seen finish, and never lists the store.

    Every segment copy carries a fresh ``RemoteLogSegmentId``, even when the RLM retries the same
    local segment, so objects of an abandoned attempt never collide with a later one.

    Optional hooks for the conformance suite (see ``docs/writing-a-plugin.md``):
    ``conformance_config()`` (classmethod: a config mapping, for example with a fresh temporary
    directory, used when the user gives no configuration), ``conformance_capabilities()``
    (classmethod: what the plugin cannot do, with reasons), and on an instance
    ``conformance_store_root()`` (the local directory it stores under) or
    ``conformance_stored_objects()`` (names of every stored object, listed without the API
    under test), which let the suite inspect the store independently.
    """

    @abc.abstractmethod
    def configure(self, configs: Mapping[str, str]) -> None:
        """Apply the plugin's configuration (keys without the ``rsm.config.`` prefix).

        Raises ``ConfigError`` naming the key for a missing or malformed setting. Unknown keys
        are reported (logged), not fatal: the RLM passes extra keys such as ``node.id``.
        """

    @abc.abstractmethod
    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        log_segment_data: LogSegmentData,
    ) -> CustomMetadata | None:
        """Copy a sealed segment and all its indexes to remote storage.

        Idempotent: a retry for the same ``remote_log_segment_id`` overwrites whatever an earlier
        attempt left, and does not fail because content exists. The copy is complete and
        durable when this returns; the returned custom metadata (or ``None``) is stored with the
        segment's metadata by the RLM.

        Two indexes are optional: ``transaction_index`` and tierlog's ``compaction_summary``
        (bytes in memory; ``IndexType.COMPACTION_SUMMARY``). Store each one that is not
        ``None`` (an empty summary is stored, and reads back empty) with the rest of the
        segment, and on a retry that has none, remove the one an earlier attempt stored, so
        that ``fetch_index`` never serves an index that does not describe the stored data.

        Raises ``RetriableRemoteStorageException`` for a transient failure and
        ``RemoteStorageException`` for any other.
        """

    @abc.abstractmethod
    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        """A stream of the segment's bytes from ``start_position`` to ``end_position``, inclusive.

        With no ``end_position`` the stream runs to the end of the segment; an end position past
        the end is clamped to it; a start position at or past the end gives an empty stream.
        ``start_position < 0`` or ``start_position > end_position`` raises ``ValueError``
        (``InvalidArgumentError``). The caller closes the stream. A missing segment raises
        ``RemoteResourceNotFoundException``. Implementations must stream: never hold the whole
        segment in memory. ``check_fetch_range`` checks the arguments and clamps the range.
        """

    @abc.abstractmethod
    def fetch_index(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata, index_type: IndexType
    ) -> BinaryIO:
        """A stream of one of the segment's indexes.

        A missing index, notably the transaction index of a segment without aborted
        transactions, raises ``RemoteResourceNotFoundException`` (never returns an empty stream
        or ``None``); callers then rebuild the index from the segment.

        ``IndexType.COMPACTION_SUMMARY`` returns exactly the bytes copied as
        ``LogSegmentData.compaction_summary``. A segment copied without one (every segment
        copied from the local log, and every segment stored before the RSM knew the index)
        raises ``RemoteResourceNotFoundException``, as a missing transaction index does, and
        never another error: the log cleaner then downloads the segment instead of skipping it.
        """

    @abc.abstractmethod
    def delete_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata
    ) -> None:
        """Delete the segment and its indexes, the compaction summary included.

        Idempotent: deleting what is already gone succeeds (no
        ``RemoteResourceNotFoundException``). Raises ``RetriableRemoteStorageException`` for a
        transient failure.
        """

    def delete_partition(  # noqa: B027 - optional: a no-op default is the contract
        self, topic_id_partition: TopicIdPartition
    ) -> None:
        """Remove what is left of a partition once all its segments are deleted (directories,
        prefixes, manifests). Optional, as KAFKA-15166 proposes it for Kafka's RSM: the
        RemoteLogManager calls it after deleting every segment of a partition whose topic is
        deleted. Idempotent; the default does nothing."""

    def close(self) -> None:  # noqa: B027 - a no-op default is the contract
        """Release clients, threads and files. A second call must be harmless; the default
        does nothing."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@overload
def check_fetch_range(start_position: int, end_position: int | None) -> None: ...


@overload
def check_fetch_range(start_position: int, end_position: int | None, size: int) -> int: ...


def check_fetch_range(
    start_position: int, end_position: int | None, size: int | None = None
) -> int | None:
    """Check the arguments of ``RemoteStorageManager.fetch_log_segment`` and, given the
    segment's ``size``, how many bytes its stream serves: one rule for every RSM.

    Kafka's contract (``RemoteStorageManager.fetchLogSegment``): positions are byte positions in
    the segment, both inclusive; ``start_position`` is at least 0; ``end_position`` is at least
    ``start_position``, or ``None`` for "to the end of the segment". Anything else raises
    ``InvalidArgumentError`` (a ``ValueError``, Kafka's ``IllegalArgumentException``) naming the
    position, as does a negative ``size``.

    Call it first without ``size``, before touching the store: Kafka refuses bad arguments
    before any I/O, so a bad range is a ``ValueError`` even for a segment that is missing. Once
    the stored size is known, call it again with ``size``: the result is the number of bytes
    from ``start_position`` to serve. An ``end_position`` at or past the segment's last byte is
    clamped to it, and a ``start_position`` at or past the end gives 0: an empty stream, not an
    error (an object store answers HTTP 416 there; an RSM must not pass that on). The bytes to
    stream are ``start_position`` to ``start_position + result - 1``.
    """
    if start_position < 0:
        raise InvalidArgumentError(f"start position must be >= 0, got {start_position}")
    if end_position is not None and end_position < start_position:
        raise InvalidArgumentError(
            f"end position {end_position} is before start position {start_position}"
        )
    if size is None:
        return None
    if size < 0:
        raise InvalidArgumentError(f"segment size must be >= 0, got {size}")
    stop = size if end_position is None else min(end_position + 1, size)
    return max(0, stop - start_position)
