"""``tierlog-rlmm-topic``: Kafka's TopicBasedRemoteLogMetadataManager for tierlog.

Installing the distribution registers the RLMM as ``topic`` (entry point group ``tierlog``), so
a node selects it with ``remote.log.metadata.manager.class.name=topic`` (Kafka's class name
``org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager`` maps
to it too); the README lists its ``rlmm.config.`` keys.

The public names: ``TopicBasedRemoteLogMetadataManager``; ``TopicRlmmConfig`` (the validated
settings, ``TopicRlmmConfig.from_configs(configs)``) and ``CONFIG_KEYS`` (each key's
``ConfigKey``: type, default, meaning); the parts the compacted RLMM builds on,
``ConsumerTask``, ``RecordApplier``/``DecodedEvent``/``StoreApplier``, ``MetadataProducer``
and ``ensure_topic``; the errors ``UnreadableMetadataRecordError`` and
``ConsumeTimeoutError``. The parts that need confluent-kafka are imported lazily, so
discovering plugins stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tierlog import hookimpl
from tierlog_rlmm_topic._version import __version__
from tierlog_rlmm_topic.applier import DecodedEvent, RecordApplier, StoreApplier
from tierlog_rlmm_topic.config import CONFIG_KEYS, TopicRlmmConfig
from tierlog_rlmm_topic.errors import ConsumeTimeoutError, UnreadableMetadataRecordError
from tierlog_rlmm_topic.manager import BOOTSTRAP_SERVERS_ENV, TopicBasedRemoteLogMetadataManager
from tierlog_rlmm_topic.replay import ReplayProgressSettings

if TYPE_CHECKING:
    from tierlog.spi.hookspecs import RegisterMetadataManager
    from tierlog_rlmm_topic.consumer import ConsumerTask
    from tierlog_rlmm_topic.producer import MetadataProducer
    from tierlog_rlmm_topic.topic import ensure_topic

__all__ = [
    "BOOTSTRAP_SERVERS_ENV",
    "CONFIG_KEYS",
    "ConsumeTimeoutError",
    "ConsumerTask",
    "DecodedEvent",
    "MetadataProducer",
    "RecordApplier",
    "ReplayProgressSettings",
    "StoreApplier",
    "TopicBasedRemoteLogMetadataManager",
    "TopicRlmmConfig",
    "UnreadableMetadataRecordError",
    "__version__",
    "ensure_topic",
    "tierlog_register_metadata_managers",
]

_LAZY = {
    "ConsumerTask": "tierlog_rlmm_topic.consumer",
    "MetadataProducer": "tierlog_rlmm_topic.producer",
    "ensure_topic": "tierlog_rlmm_topic.topic",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


@hookimpl
def tierlog_register_metadata_managers(register: RegisterMetadataManager) -> None:
    """Register ``topic``, as the built-in ``embedded`` RLMM registers itself."""
    register("topic", TopicBasedRemoteLogMetadataManager)
