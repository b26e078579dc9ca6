"""Remote log metadata: Kafka's ``__remote_log_metadata`` records, the metadata partitioner and
console formatter, the in-memory cache with Kafka's semantics, the embedded RLMM, and the reader
of a metadata topic on a Kafka cluster (confluent-kafka imported only when a reader is made)."""

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
from tierlog.metadata.topic_reader import (
    ClusterUnreachableError,
    MetadataTopicReader,
    TopicRecord,
    client_config,
    load_client_config,
)

__all__ = [
    "ClusterUnreachableError",
    "DecodedRecord",
    "MetadataTopicReader",
    "RemoteLogMetadataCache",
    "RemoteLogMetadataTopicPartitioner",
    "RemoteLogSegmentMetadataSnapshot",
    "RemotePartitionMetadataStore",
    "TopicRecord",
    "client_config",
    "decode_record",
    "deserialize",
    "encode_record",
    "format_record",
    "kafka_string",
    "load_client_config",
    "metadata_partition",
    "murmur2",
    "record_from_json",
    "record_to_json",
    "serialize",
]
