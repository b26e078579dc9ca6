"""Remote log metadata: Kafka's ``__remote_log_metadata`` records, the metadata partitioner and
console formatter, the in-memory cache with Kafka's semantics, and the embedded RLMM."""

from tierlog.metadata.cache import RemoteLogMetadataCache
from tierlog.metadata.formatter import format_record, kafka_string
from tierlog.metadata.json_codec import record_from_json, record_to_json
from tierlog.metadata.partitioner import (
    RemoteLogMetadataTopicPartitioner,
    metadata_partition,
    murmur2,
)
from tierlog.metadata.serde import (
    DecodedRecord,
    RemoteLogSegmentMetadataSnapshot,
    decode_record,
    deserialize,
    encode_record,
    serialize,
)
from tierlog.metadata.store import RemotePartitionMetadataStore

__all__ = [
    "DecodedRecord",
    "RemoteLogMetadataCache",
    "RemoteLogMetadataTopicPartitioner",
    "RemoteLogSegmentMetadataSnapshot",
    "RemotePartitionMetadataStore",
    "decode_record",
    "deserialize",
    "encode_record",
    "format_record",
    "kafka_string",
    "metadata_partition",
    "murmur2",
    "record_from_json",
    "record_to_json",
    "serialize",
]
