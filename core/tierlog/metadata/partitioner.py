"""Which ``__remote_log_metadata`` partition holds the events of a user partition.

Every broker must agree with Kafka on this mapping: the metadata of a partition is produced to,
and only read from, the metadata partition computed here, so a broker that computed another one
would never see the events a Kafka broker wrote. The mapping is Kafka's
``RemoteLogMetadataTopicPartitioner``:

1. ``h = java.util.Objects.hash(topicId.lsb, topicId.msb, partition)`` with Java's ``long`` and
   ``int`` hash codes and 32-bit wrap-around (the topic name is not part of it);
2. the 4 big-endian bytes of ``h`` are hashed with Kafka's ``Utils.murmur2``;
3. ``(murmur2 & 0x7fffffff) % numMetadataTopicPartitions``.
"""

from __future__ import annotations

import logging
import struct
from typing import Final

from tierlog.spi import InvalidArgumentError, TopicIdPartition

__all__ = ["RemoteLogMetadataTopicPartitioner", "metadata_partition", "murmur2"]

_LOG = logging.getLogger(__name__)

_MASK32: Final = 0xFFFFFFFF
_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_R: Final = 24
_BE_INT32: Final = struct.Struct(">i")


def _to_int32(value: int) -> int:
    value &= _MASK32
    return value - (1 << 32) if value & 0x80000000 else value


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``, as the signed 32-bit int Java returns.

    The same hash is used by Kafka's default producer partitioner for keyed records, which is why
    its test vectors pin it. Blocks of 4 bytes are read little-endian, all at once with one
    ``struct`` call; arithmetic is done on Python ints masked to 32 bits.
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    blocks = length >> 2
    m = _M
    mask = _MASK32
    if blocks:
        for block in struct.unpack_from(f"<{blocks}I", data):
            k = (block * m) & mask
            k ^= k >> _R
            k = (k * m) & mask
            h = ((h * m) & mask) ^ k
    index = blocks << 2
    tail = length - index
    if tail:
        if tail == 3:
            h ^= data[index + 2] << 16
        if tail >= 2:
            h ^= data[index + 1] << 8
        h ^= data[index]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return _to_int32(h)


def _long_hash(value: int) -> int:
    """Java's ``Long.hashCode``: ``(int) (v ^ (v >>> 32))`` of the signed 64-bit ``v``."""
    unsigned = value & 0xFFFFFFFFFFFFFFFF
    return _to_int32(unsigned ^ (unsigned >> 32))


def _partition_hash(topic_id_partition: TopicIdPartition) -> int:
    """``Objects.hash(lsb, msb, partition)``: ``31 * (31 * (31 + h(lsb)) + h(msb)) + partition``."""
    topic_id = topic_id_partition.topic_id
    result = 1
    for element in (
        _long_hash(topic_id.least_significant_bits),
        _long_hash(topic_id.most_significant_bits),
        _to_int32(topic_id_partition.partition),
    ):
        result = (31 * result + element) & _MASK32
    return _to_int32(result)


def _check_partition_count(num_partitions: int) -> None:
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, int):
        raise InvalidArgumentError(
            f"the number of metadata partitions must be an int, got {num_partitions!r}"
        )
    if num_partitions < 1:
        raise InvalidArgumentError(
            f"the number of metadata partitions must be >= 1, got {num_partitions}"
        )


def metadata_partition(topic_id_partition: TopicIdPartition, num_partitions: int) -> int:
    """The ``__remote_log_metadata`` partition, of ``num_partitions``, for a user partition."""
    _check_partition_count(num_partitions)
    hashed = murmur2(_BE_INT32.pack(_partition_hash(topic_id_partition)))
    return (hashed & 0x7FFFFFFF) % num_partitions


class RemoteLogMetadataTopicPartitioner:
    """Kafka's ``RemoteLogMetadataTopicPartitioner``: the mapping for a fixed partition count.

    The count is that of the metadata topic (``remote.log.metadata.topic.num.partitions``,
    50 by default); it must never change once the topic has data, since every existing event
    would then be looked for in the wrong partition.
    """

    __slots__ = ("_num_partitions",)

    def __init__(self, num_metadata_topic_partitions: int) -> None:
        _check_partition_count(num_metadata_topic_partitions)
        self._num_partitions = num_metadata_topic_partitions

    @property
    def num_metadata_topic_partitions(self) -> int:
        return self._num_partitions

    def metadata_partition(self, topic_id_partition: TopicIdPartition) -> int:
        """The metadata partition that holds ``topic_id_partition``'s events."""
        partition = metadata_partition(topic_id_partition, self._num_partitions)
        _LOG.debug(
            "metadata partition %d of %d for %s",
            partition,
            self._num_partitions,
            topic_id_partition,
        )
        return partition

    def __repr__(self) -> str:
        return f"RemoteLogMetadataTopicPartitioner({self._num_partitions})"
