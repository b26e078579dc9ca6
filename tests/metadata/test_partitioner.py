"""The metadata-partition mapping is Kafka's, so tierlog and Kafka brokers agree on it.

murmur2 vectors come from Kafka's ``UtilsTest.testMurmur2`` (all of them) and its checksum
test; the partition tables were printed by Kafka 4.1.0's own ``RemoteLogMetadataTopicPartitioner``
and ``Utils.murmur2`` (kafka-storage / kafka-clients from Maven Central).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.metadata import partitioner
from tierlog.metadata.partitioner import (
    RemoteLogMetadataTopicPartitioner,
    metadata_partition,
    murmur2,
)
from tierlog.spi import InvalidArgumentError, TopicIdPartition, Uuid

TOPIC_ID = Uuid.from_string("Bp9TDduJRGa9Q5rlvCJOxg")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # UtilsTest.testMurmur2
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
        # Kafka 4.1.0 Utils.murmur2: every tail length
        (b"", 275646681),
        (b"a", -1563381124),
        (b"ab", 316155434),
        (b"abcd", -1323649548),
        (b"abcde", 461995741),
    ],
)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


class _SplittableRandom:
    """Java's ``SplittableRandom(seed)``: ``nextLong`` and ``nextBytes`` (little-endian longs)."""

    _MASK = (1 << 64) - 1
    _GAMMA = 0x9E3779B97F4A7C15

    def __init__(self, seed: int) -> None:
        self._seed = seed & self._MASK

    def next_long(self) -> int:
        self._seed = (self._seed + self._GAMMA) & self._MASK
        z = self._seed
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & self._MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & self._MASK
        return z ^ (z >> 31)

    def next_bytes(self, length: int) -> bytes:
        words, rest = divmod(length, 8)
        data = b"".join(self.next_long().to_bytes(8, "little") for _ in range(words))
        if rest:
            data += self.next_long().to_bytes(8, "little")[:rest]
        return data


@pytest.mark.slow
def test_murmur2_checksum_matches_kafka() -> None:
    # UtilsTest.testMurmur2Checksum: 100 random arrays of every length 0..1000 from
    # SplittableRandom(0); the sum of the unsigned hashes detects any deviation.
    random = _SplittableRandom(0)
    checksum = 0
    for length in range(1001):
        for _ in range(100):
            checksum += murmur2(random.next_bytes(length)) & 0xFFFFFFFF
    assert checksum == 0xC3B8CF7C99FC


def test_splittable_random_matches_java() -> None:
    # new SplittableRandom(0).nextLong() and, on a fresh one, nextBytes(new byte[11]) (jshell).
    first = _SplittableRandom(0).next_long()
    assert first - (1 << 64) == -2152535657050944081
    assert _SplittableRandom(0).next_bytes(11).hex() == "afcd1d7b39a820e2f465b9"


def test_objects_hash_matches_java() -> None:
    # java.util.Objects.hash(lsb, msb, 0) of Bp9TDduJRGa9Q5rlvCJOxg, printed by the JDK.
    tip = TopicIdPartition(TOPIC_ID, "foo", 0)
    assert partitioner._partition_hash(tip) == -169172553


def test_consumer_task_test_relations() -> None:
    # ConsumerTaskTest (5 metadata partitions): testCanProcessRecord and
    # testCanReprocessSkippedRecords.
    p = RemoteLogMetadataTopicPartitioner(5)
    tp0, tp1, tp2, tp3 = (TopicIdPartition(TOPIC_ID, "sample", i) for i in range(4))
    assert p.metadata_partition(tp0) == p.metadata_partition(tp1)
    assert p.metadata_partition(tp0) == p.metadata_partition(tp2)
    assert p.metadata_partition(tp3) != p.metadata_partition(tp0)


# Kafka 4.1.0 RemoteLogMetadataTopicPartitioner(n).metadataPartition for partitions 0..9 and
# Integer.MAX_VALUE of each topic id.
KAFKA_TABLE = {
    5: {
        "Bp9TDduJRGa9Q5rlvCJOxg": [2, 2, 2, 4, 3, 1, 2, 3, 3, 4, 1],
        "AAAAAAAAAAAAAAAAAAAAAQ": [0, 1, 3, 4, 2, 4, 4, 1, 1, 1, 0],
        "AAAAAAAAAAAAAAAAAAAAAA": [1, 0, 3, 1, 1, 0, 1, 1, 1, 4, 0],
        "_____________________w": [1, 0, 3, 1, 1, 0, 1, 1, 1, 4, 0],
        "YrP2nT7qR8mAcd3zXq1b0w": [3, 1, 1, 2, 4, 3, 3, 1, 3, 3, 0],
    },
    50: {
        "Bp9TDduJRGa9Q5rlvCJOxg": [47, 37, 12, 24, 23, 31, 47, 38, 13, 19, 46],
        "AAAAAAAAAAAAAAAAAAAAAQ": [35, 6, 18, 29, 12, 34, 19, 46, 36, 1, 45],
        "AAAAAAAAAAAAAAAAAAAAAA": [6, 30, 28, 46, 1, 0, 31, 31, 1, 4, 10],
        "_____________________w": [6, 30, 28, 46, 1, 0, 31, 31, 1, 4, 10],
        "YrP2nT7qR8mAcd3zXq1b0w": [38, 16, 41, 37, 24, 23, 8, 21, 28, 33, 25],
    },
}


@pytest.mark.parametrize(
    ("num_partitions", "topic_id"),
    [(n, topic_id) for n, table in KAFKA_TABLE.items() for topic_id in table],
)
def test_metadata_partitions_match_kafka(num_partitions: int, topic_id: str) -> None:
    partitions = [*range(10), (1 << 31) - 1]
    got = [
        metadata_partition(
            TopicIdPartition(Uuid.from_string(topic_id), "sample", p), num_partitions
        )
        for p in partitions
    ]
    assert got == KAFKA_TABLE[num_partitions][topic_id]
    p = RemoteLogMetadataTopicPartitioner(num_partitions)
    assert [
        p.metadata_partition(TopicIdPartition(Uuid.from_string(topic_id), "other", i))
        for i in partitions
    ] == got


@given(
    st.integers(0, (1 << 128) - 1),
    st.text(max_size=20),
    st.integers(0, (1 << 31) - 1),
    st.integers(1, 500),
)
def test_partition_is_in_range_and_ignores_the_topic_name(
    topic_id: int, name: str, partition: int, count: int
) -> None:
    tip = TopicIdPartition(Uuid.from_int(topic_id), name, partition)
    result = metadata_partition(tip, count)
    assert 0 <= result < count
    assert metadata_partition(TopicIdPartition(tip.topic_id, "x", partition), count) == result
    assert metadata_partition(tip, 1) == 0


@pytest.mark.parametrize("count", [0, -1, True, 2.0, "5"])
def test_partition_count_must_be_a_positive_int(count: object) -> None:
    with pytest.raises(InvalidArgumentError, match="number of metadata partitions"):
        RemoteLogMetadataTopicPartitioner(count)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="number of metadata partitions"):
        metadata_partition(TopicIdPartition(TOPIC_ID, "foo", 0), count)  # type: ignore[arg-type]


def test_partitioner_exposes_its_count() -> None:
    p = RemoteLogMetadataTopicPartitioner(50)
    assert p.num_metadata_topic_partitions == 50
    assert repr(p) == "RemoteLogMetadataTopicPartitioner(50)"
