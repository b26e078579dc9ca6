"""The keys of the compacted projection: ``topicId:partition:endOffset:brokerLeaderEpoch``.

KAFKA-20033 makes every record of the metadata topic keyed, so that Kafka's log cleaner keeps
one value per key. The key is text (UTF-8, all ASCII), as in the seed's example
``"T8fJ9Kz3RyWxP2mQ4nL7vB:0:1999:5"`` (whose topic id is not quite one: its last character
carries non-zero padding bits; Kafka's spelling of that id ends in ``A``):

- ``topicId``: the user topic's id in Kafka's text form (22 characters of base64url);
- ``partition``: the user partition;
- ``endOffset``: for a segment event, the segment's end offset (inclusive: its last offset);
  for a partition-delete event, the partition's log end offset when the deletion was published
  (exclusive: the next offset, so it never equals the end offset of a segment of that log);
- ``brokerLeaderEpoch``: the leader epoch of the leader that published the event.

All events of one segment published by one leader share a key (retries and state changes
overwrite each other under compaction); the same segment end offset published by leaders of
different epochs gives different keys, so a leadership change during an upload keeps both
uploads (seed scenario 2). The writer may publish under another epoch of the same end offset
when the natural key describes another live segment (``projection.py``).

Kafka's cleaner compares keys as bytes, so a key has one spelling: ``parse`` accepts only the
text ``encode`` writes (Kafka's form of the topic id, numbers without sign, padding or leading
zero) and raises ``MetadataRecordError`` naming the part that is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tierlog.spi import InvalidArgumentError, MetadataRecordError, TopicIdPartition, Uuid

__all__ = ["MetadataKey"]

_INT32_MAX: Final = 2**31 - 1
_INT64_MAX: Final = 2**63 - 1


def _number(text: str, what: str, low: int, high: int, raw: bytes) -> int:
    if not text or not (
        text.isascii() and (text.isdigit() or (text[0] == "-" and text[1:].isdigit()))
    ):
        raise MetadataRecordError(
            f"malformed remote log metadata key {raw!r}: {what} {text!r} is not an integer"
        )
    value = int(text)
    if str(value) != text:
        raise MetadataRecordError(
            f"malformed remote log metadata key {raw!r}: {what} {text!r} is not in canonical "
            f"form {str(value)!r} (one key, one spelling)"
        )
    if not low <= value <= high:
        raise MetadataRecordError(
            f"malformed remote log metadata key {raw!r}: {what} {value} is out of range "
            f"[{low}, {high}]"
        )
    return value


@dataclass(frozen=True, slots=True, order=True)
class MetadataKey:
    """One key of the projection; ordered by topic id, partition, end offset, epoch."""

    topic_id: Uuid
    partition: int
    end_offset: int
    broker_leader_epoch: int

    def __post_init__(self) -> None:
        if not isinstance(self.topic_id, Uuid):
            raise InvalidArgumentError(f"topic_id must be a Uuid: {self.topic_id!r}")
        for name, value, low, high in (
            ("partition", self.partition, 0, _INT32_MAX),
            ("end_offset", self.end_offset, -1, _INT64_MAX),
            ("broker_leader_epoch", self.broker_leader_epoch, 0, _INT32_MAX),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidArgumentError(f"{name} must be an int in [{low}, {high}]: {value!r}")

    @classmethod
    def of(cls, tip: TopicIdPartition, end_offset: int, broker_leader_epoch: int) -> MetadataKey:
        """The key of ``tip`` (its topic id and partition) at that end offset and epoch."""
        return cls(tip.topic_id, tip.partition, end_offset, broker_leader_epoch)

    def belongs_to(self, tip: TopicIdPartition) -> bool:
        """Whether the key is one of ``tip``'s (the topic name is not part of a key)."""
        return self.topic_id == tip.topic_id and self.partition == tip.partition

    def encode(self) -> bytes:
        """The record key: the text form in UTF-8 (all ASCII)."""
        return str(self).encode("utf-8")

    @classmethod
    def parse(cls, data: bytes) -> MetadataKey:
        """The key of a record; ``MetadataRecordError`` naming what is wrong.

        Only the canonical text is accepted (the one ``encode`` writes: no sign, leading zero
        or padding in a number): Kafka's cleaner compares keys as bytes, so two spellings of
        one key would be two keys, and the older value would never be compacted away.
        """
        try:
            text = bytes(data).decode("ascii")
        except UnicodeDecodeError:
            raise MetadataRecordError(
                f"malformed remote log metadata key {bytes(data)!r}: not ASCII text "
                "(expected topicId:partition:endOffset:brokerLeaderEpoch)"
            ) from None
        parts = text.split(":")
        if len(parts) != 4:
            raise MetadataRecordError(
                f"malformed remote log metadata key {bytes(data)!r}: {len(parts)} part(s), "
                "expected 4 (topicId:partition:endOffset:brokerLeaderEpoch)"
            )
        raw = bytes(data)
        try:
            topic_id = Uuid.from_string(parts[0])
        except (InvalidArgumentError, ValueError) as exc:
            raise MetadataRecordError(
                f"malformed remote log metadata key {raw!r}: topic id {parts[0]!r}: {exc}"
            ) from None
        if str(topic_id) != parts[0]:
            raise MetadataRecordError(
                f"malformed remote log metadata key {raw!r}: topic id {parts[0]!r} is not in "
                f"Kafka's form {str(topic_id)!r} (one value, one key)"
            )
        return cls(
            topic_id,
            _number(parts[1], "partition", 0, _INT32_MAX, raw),
            _number(parts[2], "end offset", -1, _INT64_MAX, raw),
            _number(parts[3], "broker leader epoch", 0, _INT32_MAX, raw),
        )

    def __str__(self) -> str:
        return f"{self.topic_id}:{self.partition}:{self.end_offset}:{self.broker_leader_epoch}"
