"""A tierlog node: partitions under ``log.dirs``, tiered by the RemoteLogManager.

``Node`` (``tierlog.node.node``) is the Python API, ``NodeConfig`` (``tierlog.node.config``) its
Kafka-style configuration, ``tierlog.node.http_api`` the HTTP API and metrics endpoint that
``tierlog serve`` runs beside it.
"""

from tierlog.node.config import NodeConfig
from tierlog.node.dir_lock import DirLock, LogDirLockedError
from tierlog.node.log_dirs import LogDirError
from tierlog.node.node import (
    FetchResult,
    Node,
    PartitionStatus,
    ProduceResult,
    ProducerRecord,
    UnknownTopicError,
)

__all__ = [
    "DirLock",
    "FetchResult",
    "LogDirError",
    "LogDirLockedError",
    "Node",
    "NodeConfig",
    "PartitionStatus",
    "ProduceResult",
    "ProducerRecord",
    "UnknownTopicError",
]
