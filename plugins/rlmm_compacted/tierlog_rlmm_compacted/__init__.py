"""``tierlog-rlmm-compacted``: the compacted remote log metadata manager (KAFKA-20033).

Installing the distribution registers the RLMM as ``compacted`` (entry point group
``tierlog``), so a node selects it with ``remote.log.metadata.manager.class.name=compacted``;
the README lists its ``rlmm.config.`` keys and the design.

The public names: ``CompactedRemoteLogMetadataManager``; ``CompactedRlmmConfig`` and
``CONFIG_KEYS`` (the plugin's own keys; the topic RLMM's are ``tierlog_rlmm_topic.CONFIG_KEYS``);
the parts, ``MetadataKey`` (keys), ``ProjectionValue``/``encode_value``/``decode_value``
(values), ``ProjectionApplier``/``PlannedWrite`` (what records mean and what a write needs),
``CleanupManager``, and, importing confluent-kafka lazily, ``TransactionalMetadataProducer``/
``OutRecord`` and the topic functions ``ensure_topics``, ``read_level``, ``kafka_readers``,
``enable_compaction`` with ``CompactionRefusedError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tierlog import hookimpl
from tierlog_rlmm_compacted._version import __version__
from tierlog_rlmm_compacted.cleanup import CleanupManager
from tierlog_rlmm_compacted.config import CONFIG_KEYS, CompactedRlmmConfig
from tierlog_rlmm_compacted.keys import MetadataKey
from tierlog_rlmm_compacted.manager import CompactedRemoteLogMetadataManager
from tierlog_rlmm_compacted.projection import PlannedWrite, ProjectionApplier
from tierlog_rlmm_compacted.values import ProjectionValue, decode_value, encode_value

if TYPE_CHECKING:
    from tierlog.spi.hookspecs import RegisterMetadataManager
    from tierlog_rlmm_compacted.topics import (
        CompactionRefusedError,
        enable_compaction,
        ensure_topics,
        kafka_readers,
        read_level,
    )
    from tierlog_rlmm_compacted.txn_producer import OutRecord, TransactionalMetadataProducer

__all__ = [
    "CONFIG_KEYS",
    "CleanupManager",
    "CompactedRemoteLogMetadataManager",
    "CompactedRlmmConfig",
    "CompactionRefusedError",
    "MetadataKey",
    "OutRecord",
    "PlannedWrite",
    "ProjectionApplier",
    "ProjectionValue",
    "TransactionalMetadataProducer",
    "__version__",
    "decode_value",
    "enable_compaction",
    "encode_value",
    "ensure_topics",
    "kafka_readers",
    "read_level",
    "tierlog_register_metadata_managers",
]

_LAZY = {
    "CompactionRefusedError": "tierlog_rlmm_compacted.topics",
    "enable_compaction": "tierlog_rlmm_compacted.topics",
    "ensure_topics": "tierlog_rlmm_compacted.topics",
    "kafka_readers": "tierlog_rlmm_compacted.topics",
    "read_level": "tierlog_rlmm_compacted.topics",
    "OutRecord": "tierlog_rlmm_compacted.txn_producer",
    "TransactionalMetadataProducer": "tierlog_rlmm_compacted.txn_producer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


@hookimpl
def tierlog_register_metadata_managers(register: RegisterMetadataManager) -> None:
    """Register ``compacted``, as the built-in ``embedded`` RLMM registers itself."""
    register("compacted", CompactedRemoteLogMetadataManager)
