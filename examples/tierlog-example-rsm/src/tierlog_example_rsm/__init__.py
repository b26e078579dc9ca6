"""``example-memory``: a complete tierlog RemoteStorageManager in one module, for learning.

Segments live in process memory, in named stores (``namespace``) shared by every instance of
the process, so two instances configured alike see the same data, as two brokers sharing an
object store do. It is a teaching example and a test double, not a production store: data is
lost when the process exits, and every segment is held in memory whole.

Reading order: ``configure`` (configuration and its errors), ``copy_log_segment_data``
(idempotent, all-or-nothing), ``fetch_log_segment`` (inclusive ranges, checked and clamped by
``tierlog.spi.check_fetch_range``), ``fetch_index`` (a missing index is an error, never an
empty stream), ``delete_log_segment_data`` (idempotent), and at the bottom the registration
hook.
"""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, BinaryIO

from tierlog import hookimpl
from tierlog.spi import (
    ConfigError,
    CustomMetadata,
    IllegalStateError,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageManager,
    check_fetch_range,
)

if TYPE_CHECKING:
    from tierlog.conformance import RemoteStorageManagerCapabilities
    from tierlog.spi.hookspecs import RegisterStorageManager

__all__ = ["MemoryRemoteStorage", "stored_keys", "tierlog_register_storage_managers"]
__version__ = "0.1.0"

_LOG = logging.getLogger(__name__)

SEGMENT = "segment"
"""The key of the segment's bytes in a stored entry; the indexes use ``IndexType.value``."""

# The RLM adds node.id and broker.id to every RSM's configuration: accept them.
_KNOWN_CONFIGS = frozenset({"namespace", "node.id", "broker.id"})

# namespace -> {segment id -> {part -> bytes}}. One lock guards it: operations are tiny.
_STORES: dict[str, dict[RemoteLogSegmentId, Mapping[str, bytes]]] = {}
_LOCK = threading.Lock()


def stored_keys(namespace: str) -> set[str]:
    """Every object of a namespace as ``<topicId>:<topic>-<partition>/<segmentId>/<part>``.

    The conformance suite's ``stored_objects`` hook uses it to check, without the RSM API,
    that nothing is left behind after deletes.
    """
    with _LOCK:
        store = _STORES.get(namespace, {})
        return {
            f"{segment_id.topic_id_partition}/{segment_id.id}/{part}"
            for segment_id, parts in store.items()
            for part in parts
        }


class MemoryRemoteStorage(RemoteStorageManager):
    """Remote segments in memory, in a process-wide store named by ``namespace``.

    Configuration (``rsm.config.`` prefix stripped): ``namespace`` (default ``default``).
    """

    def __init__(self) -> None:
        # Kafka constructs the class with no arguments and configures it afterwards.
        self._namespace: str | None = None

    @classmethod
    def conformance_config(cls) -> dict[str, str]:
        """A fresh namespace per test, so tests never see each other's segments."""
        import uuid

        return {"namespace": f"conformance-{uuid.uuid4().hex}"}

    @classmethod
    def conformance_capabilities(cls) -> RemoteStorageManagerCapabilities:
        """What this plugin cannot do, with the reason shown in the suite's skips.

        Imported here, not at module level: ``tierlog.conformance`` needs pytest, and a plugin
        must import without test dependencies.
        """
        from tierlog.conformance import RemoteStorageManagerCapabilities, Unsupported

        return RemoteStorageManagerCapabilities(
            large_segments=Unsupported("an in-memory store holds every segment whole in memory")
        )

    @property
    def namespace(self) -> str:
        if self._namespace is None:
            raise IllegalStateError("MemoryRemoteStorage is not configured")
        return self._namespace

    def configure(self, configs: Mapping[str, str]) -> None:
        unknown = sorted(set(configs) - _KNOWN_CONFIGS)
        if unknown:
            raise ConfigError(
                f"unknown configuration key(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(_KNOWN_CONFIGS))}"
            )
        namespace = configs.get("namespace", "default").strip()
        if not namespace:
            raise ConfigError("namespace must not be empty")
        self._namespace = namespace
        with _LOCK:
            _STORES.setdefault(namespace, {})

    def _store(self) -> dict[RemoteLogSegmentId, Mapping[str, bytes]]:
        return _STORES[self.namespace]

    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        log_segment_data: LogSegmentData,
    ) -> CustomMetadata | None:
        # Read everything first, then publish the entry in one assignment: a failure while
        # reading stores nothing, and a retry replaces the whole entry (including dropping a
        # transaction index or compaction summary the earlier attempt had).
        snapshot = log_segment_data.producer_snapshot_index
        parts = {
            SEGMENT: log_segment_data.log_segment.read_bytes(),
            IndexType.OFFSET.value: log_segment_data.offset_index.read_bytes(),
            IndexType.TIMESTAMP.value: log_segment_data.time_index.read_bytes(),
            IndexType.PRODUCER_SNAPSHOT.value: snapshot.read_bytes(),
            IndexType.LEADER_EPOCH.value: bytes(log_segment_data.leader_epoch_index),
        }
        if log_segment_data.transaction_index is not None:
            parts[IndexType.TRANSACTION.value] = log_segment_data.transaction_index.read_bytes()
        if log_segment_data.compaction_summary is not None:  # b"" is a summary too
            parts[IndexType.COMPACTION_SUMMARY.value] = log_segment_data.compaction_summary
        segment_id = remote_log_segment_metadata.remote_log_segment_id
        with _LOCK:
            self._store()[segment_id] = parts
        _LOG.debug("stored %s (%d bytes)", segment_id, len(parts[SEGMENT]))
        return None  # or CustomMetadata(b"...") to have the RLM keep something for you

    def _part(self, metadata: RemoteLogSegmentMetadata, part: str) -> bytes:
        segment_id = metadata.remote_log_segment_id
        with _LOCK:
            parts = self._store().get(segment_id)
        if parts is None:
            raise RemoteResourceNotFoundException(f"no segment {segment_id}")
        if part not in parts:
            raise RemoteResourceNotFoundException(f"segment {segment_id} has no {part} index")
        return parts[part]

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        # tierlog.spi.check_fetch_range is the contract's one rule for the range: called
        # without a size it checks the arguments (start >= 0, end >= start or None; else
        # InvalidArgumentError, Kafka's IllegalArgumentException), which Kafka does before
        # touching the store; called with the stored size it says how many bytes to serve
        # from the start (the end is inclusive and clamped to the data, and a start at or
        # after the end gives 0: an empty stream, not an error).
        check_fetch_range(start_position, end_position)
        data = self._part(remote_log_segment_metadata, SEGMENT)
        length = check_fetch_range(start_position, end_position, len(data))
        return io.BytesIO(data[start_position : start_position + length])

    def fetch_index(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata, index_type: IndexType
    ) -> BinaryIO:
        # A missing transaction index or compaction summary raises, and the RLM (or the log
        # cleaner) then knows there is none.
        return io.BytesIO(self._part(remote_log_segment_metadata, index_type.value))

    def delete_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata
    ) -> None:
        # pop with a default: deleting what is already gone succeeds.
        with _LOCK:
            self._store().pop(remote_log_segment_metadata.remote_log_segment_id, None)

    def close(self) -> None:
        # The data belongs to the namespace, not to this instance: other instances (and a
        # "restarted" one) keep seeing it. Nothing to release; safe to call twice.
        pass


@hookimpl
def tierlog_register_storage_managers(register: RegisterStorageManager) -> None:
    """Make ``example-memory`` a name users can type (``tierlog conformance --rsm
    example-memory``, ``remote.log.storage.manager.class.name=example-memory``)."""
    register("example-memory", MemoryRemoteStorage)
