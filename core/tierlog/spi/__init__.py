"""tierlog's plugin contracts: the data model, the RSM and RLMM abstract classes, the errors, and
plugin discovery. Everything a plugin author imports comes from here."""

from tierlog.spi._errors import (
    ConfigError,
    CorruptRecordError,
    IllegalStateError,
    InvalidArgumentError,
    MetadataRecordError,
    PluginError,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageNotReadyException,
    RetriableRemoteStorageException,
    TierlogError,
)
from tierlog.spi._model import (
    NO_BROKER_ID,
    CustomMetadata,
    IndexType,
    LogSegmentData,
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    TopicPartition,
)
from tierlog.spi._rlmm import RemoteLogMetadataManager
from tierlog.spi._rsm import RemoteStorageManager, check_fetch_range
from tierlog.spi._uuid import METADATA_TOPIC_ID, ZERO_UUID, Uuid
from tierlog.spi.hookspecs import hookimpl

__all__ = [
    "METADATA_TOPIC_ID",
    "NO_BROKER_ID",
    "ZERO_UUID",
    "ConfigError",
    "CorruptRecordError",
    "CustomMetadata",
    "IllegalStateError",
    "IndexType",
    "InvalidArgumentError",
    "LogSegmentData",
    "MetadataRecordError",
    "PluginError",
    "RemoteLogMetadata",
    "RemoteLogMetadataManager",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemoteLogSegmentState",
    "RemotePartitionDeleteMetadata",
    "RemotePartitionDeleteState",
    "RemoteResourceNotFoundException",
    "RemoteStorageException",
    "RemoteStorageManager",
    "RemoteStorageNotReadyException",
    "RetriableRemoteStorageException",
    "TierlogError",
    "TopicIdPartition",
    "TopicPartition",
    "Uuid",
    "check_fetch_range",
    "hookimpl",
]
