"""Where a segment's objects live in the bucket, and the custom metadata that remembers it.

Every segment is three objects under its partition's prefix::

    <key.prefix>[<entropy>/]<topic>-<topicId>/<partition>/<start offset:020d>-<segment id>.log
    ...                                                                        .indexes
    ...                                                                        .rsm-manifest

- ``.log``: the segment's bytes, as is or as transformed chunks (``manifest``);
- ``.indexes``: every index of the segment concatenated (offset, time, transaction if any,
  producer snapshot, leader-epoch checkpoint, and the log cleaner's compaction summary if any),
  one object instead of five or six, so a copy is three PUTs and a delete three keys;
- ``.rsm-manifest``: a small JSON document with the positions and sizes inside those objects,
  the chunking and the transforms, written **last**: its presence means the segment is
  complete, and a fetch never needs to list the bucket.

``<entropy>`` (``key.prefix.entropy.chars`` > 0) is the first N hex characters of the SHA-256
of ``<topic>-<topicId>/<partition>``: S3 scales request rates per key prefix, and partitions
of a busy topic would otherwise share one. It is deterministic, so keys are recomputed from
the segment's metadata; nothing has to be looked up.

Topic names are checked to be legal Kafka names (``[a-zA-Z0-9._-]``, 1-249 characters, not
``.`` or ``..``): they become key segments, and object stores or their emulators that treat
keys as paths must never see ``..`` or ``/`` from a topic. Since the topic is always followed
by ``-<topicId>``, no key segment is ever ``.`` or ``..``. The longest key (a 249-character
topic and the longest prefix) is well under S3's 1024-byte limit.

Custom metadata (returned by ``copy_log_segment_data``, stored by the RLM with the segment):
version 1 is ``[0x01][entropy chars: 1 byte][prefix length: 1 byte][prefix: UTF-8]``, at most
3 + 125 = 128 bytes (Kafka's default ``remote.log.metadata.custom.metadata.max.bytes``). It
records the key configuration the segment was written under, so that after ``key.prefix`` or
the entropy setting changes, fetch and delete still find old segments; the rest of the key
comes from the segment's metadata. Without custom metadata (an RLM that drops it, a segment
copied before), the current configuration is used.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Final

from tierlog.spi import (
    CustomMetadata,
    InvalidArgumentError,
    RemoteLogSegmentMetadata,
    RemoteStorageException,
    TopicIdPartition,
)
from tierlog.storage.objectstore.config import KEY_PREFIX_MAX_BYTES, MAX_ENTROPY_CHARS

__all__ = [
    "CUSTOM_METADATA_MAX_BYTES",
    "CUSTOM_METADATA_VERSION",
    "INDEXES_SUFFIX",
    "LOG_SUFFIX",
    "MANIFEST_SUFFIX",
    "KeyLayout",
    "ObjectKeys",
    "check_topic_name",
    "decode_custom_metadata",
    "encode_custom_metadata",
]

LOG_SUFFIX: Final = "log"
INDEXES_SUFFIX: Final = "indexes"
MANIFEST_SUFFIX: Final = "rsm-manifest"

CUSTOM_METADATA_VERSION: Final = 1
CUSTOM_METADATA_MAX_BYTES: Final = 128
"""Kafka's default ``remote.log.metadata.custom.metadata.max.bytes``."""

MAX_TOPIC_LENGTH: Final = 249
_LEGAL_TOPIC: Final = re.compile(r"[a-zA-Z0-9._-]+")


def check_topic_name(topic: object) -> str:
    """``topic`` if it is a legal Kafka topic name, else ``InvalidArgumentError`` (a
    ``ValueError``, which the conformance suite accepts as a refusal)."""
    if not isinstance(topic, str) or not _LEGAL_TOPIC.fullmatch(topic):
        raise InvalidArgumentError(
            f"topic name {topic!r} is not a legal Kafka topic name (ASCII letters, digits, '.', "
            "'_' and '-'); an object-store RSM cannot store it"
        )
    if topic in {".", ".."}:
        raise InvalidArgumentError(f"topic name {topic!r} is not allowed (Kafka forbids it)")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidArgumentError(
            f"topic name is {len(topic)} characters; Kafka allows at most {MAX_TOPIC_LENGTH}"
        )
    return topic


@dataclass(frozen=True, slots=True)
class ObjectKeys:
    """The three object keys of one segment."""

    log: str
    indexes: str
    manifest: str

    def all(self) -> tuple[str, str, str]:
        """Every key, manifest first: deleting in this order makes a segment incomplete (and so
        unreadable) before any of its data goes."""
        return (self.manifest, self.log, self.indexes)


@dataclass(frozen=True, slots=True)
class KeyLayout:
    """How keys are made: a prefix and the number of entropy characters."""

    prefix: str = ""
    entropy_chars: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.entropy_chars <= MAX_ENTROPY_CHARS:
            raise InvalidArgumentError(
                f"entropy characters must be between 0 and {MAX_ENTROPY_CHARS}, "
                f"got {self.entropy_chars}"
            )
        if len(self.prefix.encode("utf-8")) > KEY_PREFIX_MAX_BYTES:
            raise InvalidArgumentError(
                f"key prefix is longer than {KEY_PREFIX_MAX_BYTES} bytes: {self.prefix!r}"
            )

    def partition_prefix(self, topic_id_partition: TopicIdPartition) -> str:
        """``<prefix>[<entropy>/]<topic>-<topicId>/<partition>/``: every key of the partition
        starts with it (``delete_partition`` lists it)."""
        topic = check_topic_name(topic_id_partition.topic)
        partition = int(topic_id_partition.partition)
        if partition < 0:
            raise InvalidArgumentError(f"partition must be >= 0, got {partition}")
        name = f"{topic}-{topic_id_partition.topic_id}/{partition}"
        if self.entropy_chars:
            digest = hashlib.sha256(name.encode("ascii")).hexdigest()[: self.entropy_chars]
            return f"{self.prefix}{digest}/{name}/"
        return f"{self.prefix}{name}/"

    def segment_keys(self, metadata: RemoteLogSegmentMetadata) -> ObjectKeys:
        """The keys of the segment ``metadata`` describes."""
        if metadata.start_offset < 0:
            raise InvalidArgumentError(f"start offset must be >= 0, got {metadata.start_offset}")
        base = (
            f"{self.partition_prefix(metadata.topic_id_partition)}"
            f"{metadata.start_offset:020d}-{metadata.remote_log_segment_id.id}."
        )
        return ObjectKeys(
            log=base + LOG_SUFFIX,
            indexes=base + INDEXES_SUFFIX,
            manifest=base + MANIFEST_SUFFIX,
        )

    def custom_metadata(self) -> CustomMetadata:
        """This layout as the custom metadata of a segment written under it."""
        return CustomMetadata(encode_custom_metadata(self))


def encode_custom_metadata(layout: KeyLayout) -> bytes:
    """``[version=1][entropy chars][prefix length][prefix]`` (see the module docstring)."""
    prefix = layout.prefix.encode("utf-8")
    encoded = bytes([CUSTOM_METADATA_VERSION, layout.entropy_chars, len(prefix)]) + prefix
    assert len(encoded) <= CUSTOM_METADATA_MAX_BYTES  # guaranteed by KEY_PREFIX_MAX_BYTES
    return encoded


def decode_custom_metadata(value: bytes) -> KeyLayout:
    """The layout a segment was written under. Raises ``RemoteStorageException`` for bytes this
    version does not understand (written by a newer tierlog, or by another RSM)."""
    if len(value) < 3:
        raise RemoteStorageException(
            f"custom metadata of {len(value)} bytes is too short for an object-store RSM's"
        )
    version, entropy, length = value[0], value[1], value[2]
    if version != CUSTOM_METADATA_VERSION:
        raise RemoteStorageException(
            f"custom metadata version {version} is not understood (this tierlog writes and "
            f"reads version {CUSTOM_METADATA_VERSION}); upgrade tierlog"
        )
    if len(value) != 3 + length:
        raise RemoteStorageException(
            f"custom metadata is {len(value)} bytes, its prefix length says {3 + length}"
        )
    try:
        prefix = value[3:].decode("utf-8")
        return KeyLayout(prefix, entropy)
    except (UnicodeDecodeError, InvalidArgumentError) as exc:
        raise RemoteStorageException(f"custom metadata is malformed: {exc}") from None
