"""Kafka's console formatter for ``__remote_log_metadata``, character for character.

Operators read the metadata topic with ``kafka-console-consumer --formatter
org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde$RemoteLogMetadataFormatter``
and compare, grep or diff its lines; tierlog's CLI prints the same lines so the two outputs can
be compared directly. Each line is ``partition: %d, offset: %d, value: %s`` with the Java
``toString()`` of the decoded object, which this module reproduces (``kafka_string``): Java's
``Optional`` (``Optional[...]`` / ``Optional.empty``), ``TreeMap`` (``{0=0, 1=20}``), booleans
(``true``) and the field order of each Kafka class.

One addition: the metadata of a segment the log cleaner wrote (compacted topics in tiered
storage, KIP-1272) ends with ``, cleanerOffsets={0=100, 1=155}`` (its cleaner-offset vector, in
the form of ``segmentLeaderEpochs``) before the closing brace. Kafka skips that tagged field, so
its formatter prints the same line without it; every other line is Kafka's unchanged.

Records with a key (the compacted RLMM's, KAFKA-20033: ``topicId:partition:endOffset:epoch``)
have no line in Kafka's formatter, which prints values only; ``format_record(..., key=K)`` puts
``key: K, `` before the value (``format_key``: the key as text, or ``0x<hex>``). A record
without a key, all Kafka ever writes to this topic, keeps Kafka's exact line.
"""

from __future__ import annotations

from collections.abc import Mapping

from tierlog.metadata.serde import DecodedRecord, RemoteLogSegmentMetadataSnapshot, deserialize
from tierlog.spi import (
    CustomMetadata,
    InvalidArgumentError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    TopicPartition,
    Uuid,
)

__all__ = ["format_key", "format_record", "kafka_string", "key_text", "record_prefix"]


def _optional(custom: CustomMetadata | None) -> str:
    """Java's ``Optional<CustomMetadata>.toString()``."""
    return "Optional.empty" if custom is None else f"Optional[{_custom(custom)}]"


def _custom(custom: CustomMetadata) -> str:
    return f"CustomMetadata{{{len(custom.value)} bytes}}"


def _map(mapping: Mapping[int, int]) -> str:
    """Java's ``AbstractMap.toString()`` of the epoch map (a TreeMap: ascending keys)."""
    return "{" + ", ".join(f"{key}={value}" for key, value in sorted(mapping.items())) + "}"


def _cleaner_offsets(vector: Mapping[int, int] | None) -> str:
    """tierlog's field after Kafka's last one: nothing for a segment without a vector."""
    return "" if vector is None else f", cleanerOffsets={_map(vector)}"


def _tip(tip: TopicIdPartition) -> str:
    return f"{tip.topic_id}:{tip.topic}-{tip.partition}"


def _segment_id(segment_id: RemoteLogSegmentId) -> str:
    return (
        f"RemoteLogSegmentId{{topicIdPartition={_tip(segment_id.topic_id_partition)}, "
        f"id={segment_id.id}}}"
    )


def _bool(value: bool) -> str:
    return "true" if value else "false"


def kafka_string(obj: object) -> str:
    """The text Kafka's ``toString()`` gives for the Kafka counterpart of ``obj``.

    Supports the metadata values (and a ``DecodedRecord``, shown as its value), their parts (ids,
    partitions, states, custom metadata), booleans, integers, strings and ``None`` (Java's
    ``null``); anything else raises ``InvalidArgumentError``. Inside the metadata values a
    ``None`` custom metadata prints as Kafka's empty ``Optional``.
    """
    if isinstance(obj, RemoteLogSegmentMetadata):
        return (
            f"RemoteLogSegmentMetadata{{remoteLogSegmentId={_segment_id(obj.remote_log_segment_id)}"
            f", startOffset={obj.start_offset}, endOffset={obj.end_offset}"
            f", brokerId={obj.broker_id}, maxTimestampMs={obj.max_timestamp_ms}"
            f", eventTimestampMs={obj.event_timestamp_ms}"
            f", segmentLeaderEpochs={_map(obj.segment_leader_epochs)}"
            f", segmentSizeInBytes={obj.segment_size_in_bytes}"
            f", customMetadata={_optional(obj.custom_metadata)}, state={obj.state.name}"
            f", txnIdxEmpty={_bool(obj.txn_idx_empty)}{_cleaner_offsets(obj.cleaner_offsets)}}}"
        )
    if isinstance(obj, RemoteLogSegmentMetadataUpdate):
        return (
            f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId="
            f"{_segment_id(obj.remote_log_segment_id)}"
            f", customMetadata={_optional(obj.custom_metadata)}, state={obj.state.name}"
            f", eventTimestampMs={obj.event_timestamp_ms}, brokerId={obj.broker_id}}}"
        )
    if isinstance(obj, RemotePartitionDeleteMetadata):
        # Kafka labels this field "topicPartition" although it prints the TopicIdPartition.
        return (
            f"RemotePartitionDeleteMetadata{{topicPartition={_tip(obj.topic_id_partition)}"
            f", state={obj.state.name}, eventTimestampMs={obj.event_timestamp_ms}"
            f", brokerId={obj.broker_id}}}"
        )
    if isinstance(obj, RemoteLogSegmentMetadataSnapshot):
        return (
            f"RemoteLogSegmentMetadataSnapshot{{segmentId={obj.segment_id}"
            f", startOffset={obj.start_offset}, endOffset={obj.end_offset}"
            f", maxTimestampMs={obj.max_timestamp_ms}"
            f", segmentLeaderEpochs={_map(obj.segment_leader_epochs)}"
            f", segmentSizeInBytes={obj.segment_size_in_bytes}"
            f", customMetadata={_optional(obj.custom_metadata)}, state={obj.state.name}"
            f", txnIdxEmpty={_bool(obj.txn_idx_empty)}}}"
        )
    if isinstance(obj, DecodedRecord):
        return kafka_string(obj.value)
    if isinstance(obj, RemoteLogSegmentId):
        return _segment_id(obj)
    if isinstance(obj, TopicIdPartition):
        return _tip(obj)
    if isinstance(obj, TopicPartition):
        return f"{obj.topic}-{obj.partition}"
    if isinstance(obj, Uuid):
        return str(obj)
    if isinstance(obj, CustomMetadata):
        return _custom(obj)
    if obj is None:
        return "null"
    if isinstance(obj, RemoteLogSegmentState | RemotePartitionDeleteState):
        return obj.name
    if isinstance(obj, bool):
        return _bool(obj)
    if isinstance(obj, int | str):
        return str(obj)
    raise InvalidArgumentError(f"no Kafka string form for {type(obj).__qualname__}")


def key_text(key: bytes) -> str | None:
    """``key`` decoded as UTF-8 (the compacted RLMM's keys are text), or None if it is not
    valid UTF-8."""
    try:
        return bytes(key).decode("utf-8")
    except UnicodeDecodeError:
        return None


def format_key(key: bytes) -> str:
    """A record key as a line shows it: its UTF-8 text, or ``0x`` and its hex digits when it is
    not valid UTF-8 or holds a character that is not printable (a line break would split the
    line; ``0x`` alone is the empty key)."""
    text = key_text(key)
    if text is not None and text and text.isprintable():
        return text
    return "0x" + bytes(key).hex()


def format_record(partition: int, offset: int, value: object, *, key: bytes | None = None) -> str:
    """One line of Kafka's ``RemoteLogMetadataFormatter``, without the line separator.

    ``value`` is the record value as bytes (decoded here, raising ``MetadataRecordError`` if it
    cannot be, including a null value) or an already decoded metadata object or
    ``DecodedRecord``. A ``key`` adds ``key: K, `` before the value (``format_key``); without
    one the line is Kafka's.
    """
    if value is None or isinstance(value, bytes | bytearray | memoryview):
        value = deserialize(value)  # type: ignore[arg-type]  # None: a tombstone, refused
    return f"{record_prefix(partition, offset, key)}value: {kafka_string(value)}"


def record_prefix(partition: int, offset: int, key: bytes | None) -> str:
    """The start of a record's line up to its value (or error): ``partition: P, offset: O, ``
    and, for a record with a key, ``key: K, ``."""
    head = f"partition: {partition}, offset: {offset}, "
    return head if key is None else f"{head}key: {format_key(key)}, "
