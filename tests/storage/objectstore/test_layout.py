"""Object keys and the custom metadata that records how a segment's keys were made."""

from __future__ import annotations

import hashlib

import pytest

from tierlog.conformance.rsm_suite import HOSTILE_TOPIC_NAMES, LEGAL_TOPIC_NAMES, segment_metadata
from tierlog.spi import InvalidArgumentError, RemoteStorageException, TopicIdPartition, Uuid
from tierlog.storage.objectstore.config import KEY_PREFIX_MAX_BYTES
from tierlog.storage.objectstore.layout import (
    CUSTOM_METADATA_MAX_BYTES,
    KeyLayout,
    decode_custom_metadata,
    encode_custom_metadata,
)

TOPIC_ID = Uuid.from_string("8P2hqJ1FQqWkSnsm-9-EBg")
SEGMENT_ID = Uuid.from_string("Zt5X0uH5Sz2aTQdlVs2EOw")


def meta(topic: str = "orders", partition: int = 3, start: int = 42):
    return segment_metadata(
        TopicIdPartition(TOPIC_ID, topic, partition), start_offset=start, segment_id=SEGMENT_ID
    )


def test_keys_follow_the_documented_layout() -> None:
    keys = KeyLayout("tiered/").segment_keys(meta())
    base = f"tiered/orders-{TOPIC_ID}/3/00000000000000000042-{SEGMENT_ID}"
    assert (keys.log, keys.indexes, keys.manifest) == (
        f"{base}.log",
        f"{base}.indexes",
        f"{base}.rsm-manifest",
    )
    assert keys.all()[0] == keys.manifest, "deletes must remove the manifest first"


def test_entropy_is_a_hash_of_the_partition_after_the_prefix() -> None:
    layout = KeyLayout("p-", entropy_chars=6)
    expected = hashlib.sha256(f"orders-{TOPIC_ID}/3".encode()).hexdigest()[:6]
    keys = layout.segment_keys(meta())
    assert keys.log.startswith(f"p-{expected}/orders-{TOPIC_ID}/3/")
    prefix = layout.partition_prefix(meta().topic_id_partition)
    assert prefix == f"p-{expected}/orders-{TOPIC_ID}/3/"
    # Deterministic, so keys are recomputed rather than looked up; and it spreads partitions.
    assert layout.segment_keys(meta()) == keys
    spread = {
        layout.partition_prefix(TopicIdPartition(TOPIC_ID, "orders", p))[2:8] for p in range(64)
    }
    assert len(spread) > 60


def test_partition_prefixes_do_not_nest() -> None:
    """Partition 1's prefix is not a prefix of partition 10's (delete_partition lists it)."""
    layout = KeyLayout()
    one = layout.partition_prefix(TopicIdPartition(TOPIC_ID, "t", 1))
    ten = layout.partition_prefix(TopicIdPartition(TOPIC_ID, "t", 10))
    assert not ten.startswith(one)


@pytest.mark.parametrize("name", list(LEGAL_TOPIC_NAMES.values()), ids=list(LEGAL_TOPIC_NAMES))
def test_every_legal_topic_name_makes_keys_within_s3_limits(name: str) -> None:
    longest_prefix = "é" * (KEY_PREFIX_MAX_BYTES // 2)
    keys = KeyLayout(longest_prefix, 64).segment_keys(meta(topic=name, partition=2**31 - 1))
    assert all(len(k.encode()) <= 1024 for k in keys.all())
    assert all(segment not in {".", ".."} for k in keys.all() for segment in k.split("/"))


@pytest.mark.parametrize(
    "name",
    [n for n in HOSTILE_TOPIC_NAMES.values() if not n.startswith("<") and n != "t" * 249],
)
def test_illegal_topic_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidArgumentError):
        KeyLayout().segment_keys(meta(topic=name))


@pytest.mark.parametrize(
    "prefix", ["", "tiered/", "é" * (KEY_PREFIX_MAX_BYTES // 2), "x" * KEY_PREFIX_MAX_BYTES]
)
@pytest.mark.parametrize("entropy", [0, 4, 64])
def test_custom_metadata_round_trips_within_kafkas_limit(prefix: str, entropy: int) -> None:
    layout = KeyLayout(prefix, entropy)
    encoded = encode_custom_metadata(layout)
    assert len(encoded) <= CUSTOM_METADATA_MAX_BYTES
    assert decode_custom_metadata(encoded) == layout
    assert layout.custom_metadata().value == encoded
    # Decoding gives the keys back, for the longest legal topic name too.
    longest = meta(topic="t" * 249)
    assert decode_custom_metadata(encoded).segment_keys(longest) == layout.segment_keys(longest)


def test_a_prefix_too_long_for_the_custom_metadata_is_refused() -> None:
    with pytest.raises(InvalidArgumentError):
        KeyLayout("x" * (KEY_PREFIX_MAX_BYTES + 1))


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (b"", "too short"),
        (b"\x02\x00\x00", "version 2"),
        (b"\x01\x00\x05abc", "prefix length"),
        (b"\x01\x00\x02\xff\xfe", "malformed"),
        (b"\x01\x41\x00", "malformed"),
    ],
)
def test_undecodable_custom_metadata_is_a_storage_error(value: bytes, match: str) -> None:
    with pytest.raises(RemoteStorageException, match=match):
        decode_custom_metadata(value)
