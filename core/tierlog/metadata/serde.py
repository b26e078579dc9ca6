"""Kafka-byte-compatible serde of the ``__remote_log_metadata`` records.

Kafka's ``RemoteLogMetadataSerde`` writes every metadata event as one record value::

    uvarint frame version (1) | uvarint apiKey | uvarint version | message body

with the body in Kafka's flexible-version encoding (``_wire``). The four message types are
apiKey 0 ``RemoteLogSegmentMetadataRecord``, 1 ``RemoteLogSegmentMetadataUpdateRecord``,
2 ``RemotePartitionDeleteMetadataRecord`` and 3 ``RemoteLogSegmentMetadataSnapshotRecord``.
tierlog writes exactly these bytes so that a Kafka cluster and tierlog can read each other's
metadata topic.

Two levels of API:

- ``serialize`` / ``deserialize`` convert between the SPI model and bytes, as Kafka's serde does
  (``serialize`` always writes version 0, the highest version Kafka's trunk knows).
- ``decode_record`` / ``encode_record`` keep the frame's version and the unknown top-level tagged
  fields in a ``DecodedRecord``, so a record written by a newer writer (for example the
  KAFKA-20033 v1 record with its ``BrokerLeaderEpoch`` tag 1) is re-encoded to the same bytes.
  Unknown tags in nested structs are skipped on read (Kafka keeps them in nested objects that
  its transform then drops). ``encode_record(decode_record(b)) == b`` holds for every record
  written canonically (minimal varints, tags in ascending order, epochs ascending and unique),
  which is everything Kafka writes.

Versions: tierlog reads a record of any version (up to 32767) with the version-0 layout, because
every later version known (the KAFKA-20033 v1 schemas) only adds tagged fields. Kafka itself is
stricter: the top-level ``read()`` does not check the version, but each nested struct's does, so
a Kafka broker (checked against 4.1.0's classes) fails a version-1 record of any of the four
types with "Can't read version 1 of RemoteLogSegmentIdEntry" (or ``TopicIdPartitionEntry``,
``SegmentLeaderEpochEntry``), and its ConsumerTask would stop on it. ``serialize`` therefore
writes version 0 only; writing another version (``encode_record``) is for tools and for topics
no Kafka broker reads. A version-0 record with unknown top-level or nested tags is read by
Kafka (checked too).

Non-minimal varints are accepted, as by Kafka. Everything wrong with a record raises
``MetadataRecordError`` naming what is wrong and where.

tierlog's tagged field: CleanerOffsets (apiKey 0, tag 1272)
----------------------------------------------------------
For compacted topics in tiered storage (KIP-1272), a segment the log cleaner rewrote carries the
cleaner-offset vector per leader epoch (``RemoteLogSegmentMetadata.cleaner_offsets``, e.g.
``{0: 100, 1: 155}``), the state that fences a zombie leader's cleaning. Only the add record
(``RemoteLogSegmentMetadataRecord``, written at COPY_SEGMENT_STARTED) has it; updates carry no
offsets, and the cache keeps the vector of the segment's add record::

    tagged: CleanerOffsets []{LeaderEpoch int32, Offset int64, [tags]}, tag 1272, versions 0+

- The data of the tag is a COMPACT_ARRAY of entries shaped like ``SegmentLeaderEpochs``' (each
  ends with its own, empty, tagged-field section), in ascending epoch order, at least one entry.
  It is written only when ``cleaner_offsets`` is not None, in the record's one top-level section
  in ascending tag order with ``TxnIndexEmpty`` (tag 0) and any unknown tags; a record without
  a vector has exactly the bytes it had before the field existed.
- Why 1272: the KIP's number, far above the tags Kafka's schemas use or have proposed (tag 0
  ``TxnIndexEmpty``; tag 1 ``BrokerLeaderEpoch`` in KAFKA-20033's v1 schema), so a Kafka
  schema growing a field in the usual order of tags will not collide with it for a long time.
- What Kafka does with it: its generated ``RemoteLogSegmentMetadataRecord.read`` keeps a tag it
  does not know as a raw unknown tagged field, and ``RemoteLogSegmentMetadataTransform`` drops
  it, so a Kafka broker, its TopicBasedRemoteLogMetadataManager and its console formatter read
  such a record as the same segment without the vector (checked against Kafka 4.3.1's classes in
  ``tests/metadata/test_cleaner_offsets_kafka.py``). A record Kafka re-serializes loses the tag.
- Reading is strict, since only tierlog writes it: a truncated or over-long payload, a null or
  empty array, an epoch out of ascending order or repeated, or the tag twice in one section raises
  ``MetadataRecordError`` naming ``CleanerOffsets (tag 1272)``. The snapshot record (apiKey 3)
  does not define the tag: there it stays an unknown tagged field, as any other.

The JSON form of these records (``tierlog metadata decode``/``encode``) is
``tierlog.metadata.json_codec``'s: this module is the binary serde only.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from struct import Struct
from types import MappingProxyType
from typing import Any, Final, TypeAlias, TypeVar

from tierlog.metadata import _wire
from tierlog.metadata._wire import (
    EMPTY_TAGGED_FIELDS,
    INT8,
    INT32,
    FixedLayout,
    check_int,
    compact_nullable_bytes,
    compact_string,
    read_array_length,
    read_compact_nullable_bytes,
    read_compact_string,
    read_tagged_fields,
    read_uuid,
    read_uvarint,
    skip_tagged_fields,
    tagged_fields,
    uvarint,
)
from tierlog.spi import (
    CustomMetadata,
    InvalidArgumentError,
    MetadataRecordError,
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    Uuid,
)

__all__ = [
    "CLEANER_OFFSETS_TAG",
    "FRAME_VERSION",
    "RECORD_TYPES",
    "DecodedRecord",
    "MetadataValue",
    "RemoteLogSegmentMetadataSnapshot",
    "decode_record",
    "deserialize",
    "encode_record",
    "serialize",
]

FRAME_VERSION: Final = 1
"""The only frame version Kafka writes and reads (``AbstractApiMessageSerde``)."""

SEGMENT_METADATA: Final = 0
SEGMENT_METADATA_UPDATE: Final = 1
PARTITION_DELETE_METADATA: Final = 2
SEGMENT_METADATA_SNAPSHOT: Final = 3

RECORD_TYPES: Final[Mapping[int, str]] = MappingProxyType(
    {
        SEGMENT_METADATA: "RemoteLogSegmentMetadataRecord",
        SEGMENT_METADATA_UPDATE: "RemoteLogSegmentMetadataUpdateRecord",
        PARTITION_DELETE_METADATA: "RemotePartitionDeleteMetadataRecord",
        SEGMENT_METADATA_SNAPSHOT: "RemoteLogSegmentMetadataSnapshotRecord",
    }
)
"""apiKey -> Kafka's message name."""

_MAX_SHORT: Final = 0x7FFF
_TXN_INDEX_EMPTY_TAG: Final = 0
_TXN_TRUE: Final = ((_TXN_INDEX_EMPTY_TAG, b"\x01"),)
CLEANER_OFFSETS_TAG: Final = 1272
"""tierlog's tagged field of apiKey 0: the cleaner-offset vector (KIP-1272; module docstring)."""
_CLEANER_OFFSETS: Final = f"CleanerOffsets (tag {CLEANER_OFFSETS_TAG})"
# apiKey -> the tags its schema defines (they are not "unknown" and cannot be set raw).
_KNOWN_TAGS: Final[Mapping[int, frozenset[int]]] = {
    SEGMENT_METADATA: frozenset({_TXN_INDEX_EMPTY_TAG, CLEANER_OFFSETS_TAG}),
    SEGMENT_METADATA_UPDATE: frozenset(),
    PARTITION_DELETE_METADATA: frozenset(),
    SEGMENT_METADATA_SNAPSHOT: frozenset({_TXN_INDEX_EMPTY_TAG}),
}


# The snapshot message's model ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class RemoteLogSegmentMetadataSnapshot:
    """Kafka's ``RemoteLogSegmentMetadataSnapshot``: a segment's metadata without its partition.

    It was the entry of the file-based metadata snapshot that Kafka removed (KAFKA-16161); Kafka
    still defines apiKey 3 for it, so the serde reads and writes it, but nothing publishes it to
    the metadata topic and it is not part of the SPI's ``RemoteLogMetadata``. As in Kafka, the
    only validation is a non-empty ``segment_leader_epochs`` (kept sorted by epoch).
    """

    segment_id: Uuid
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    custom_metadata: CustomMetadata | None
    state: RemoteLogSegmentState
    segment_leader_epochs: Mapping[int, int]
    txn_idx_empty: bool = False

    def __post_init__(self) -> None:
        if not self.segment_leader_epochs:
            raise InvalidArgumentError("segmentLeaderEpochs can not be null or empty")
        if not isinstance(self.state, RemoteLogSegmentState):
            raise InvalidArgumentError(f"state must be a RemoteLogSegmentState: {self.state!r}")
        object.__setattr__(
            self,
            "segment_leader_epochs",
            MappingProxyType(dict(sorted(self.segment_leader_epochs.items()))),
        )

    @classmethod
    def create(cls, metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataSnapshot:
        """The snapshot entry of ``metadata`` (Kafka's ``create``)."""
        return cls(
            metadata.remote_log_segment_id.id,
            metadata.start_offset,
            metadata.end_offset,
            metadata.max_timestamp_ms,
            metadata.broker_id,
            metadata.event_timestamp_ms,
            metadata.segment_size_in_bytes,
            metadata.custom_metadata,
            metadata.state,
            metadata.segment_leader_epochs,
            metadata.txn_idx_empty,
        )

    def _key(self) -> tuple[object, ...]:
        return (
            self.segment_id,
            self.start_offset,
            self.end_offset,
            self.max_timestamp_ms,
            self.broker_id,
            self.event_timestamp_ms,
            self.segment_size_in_bytes,
            self.custom_metadata,
            self.state,
            tuple(self.segment_leader_epochs.items()),
            self.txn_idx_empty,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RemoteLogSegmentMetadataSnapshot):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self) -> tuple[object, ...]:
        key = list(self._key())
        key[9] = dict(self.segment_leader_epochs)
        return (RemoteLogSegmentMetadataSnapshot, tuple(key))


MetadataValue: TypeAlias = RemoteLogMetadata | RemoteLogSegmentMetadataSnapshot
"""What a metadata record decodes to: one of the SPI's three events, or a snapshot entry."""

_API_KEY_OF: Final[Mapping[type, int]] = {
    RemoteLogSegmentMetadata: SEGMENT_METADATA,
    RemoteLogSegmentMetadataUpdate: SEGMENT_METADATA_UPDATE,
    RemotePartitionDeleteMetadata: PARTITION_DELETE_METADATA,
    RemoteLogSegmentMetadataSnapshot: SEGMENT_METADATA_SNAPSHOT,
}


def _api_key_of(value: object) -> int | None:
    api_key = _API_KEY_OF.get(type(value))
    if api_key is None:
        for cls, key in _API_KEY_OF.items():
            if isinstance(value, cls):
                return key
    return api_key


@dataclass(frozen=True, slots=True)
class DecodedRecord:
    """A metadata record with everything needed to write its bytes again.

    ``unknown_tagged_fields`` are the top-level tagged fields the schema does not define, as
    ``(tag, data)`` pairs in the order read; ``encode_record`` writes them back in ascending tag
    order (a stable sort, so a repeated tag, which Kafka also reads, keeps its order), merged
    with the known ``TxnIndexEmpty`` tag. ``api_key`` must be the one of ``value``'s type.
    """

    api_key: int
    version: int
    value: MetadataValue
    unknown_tagged_fields: tuple[tuple[int, bytes], ...] = ()

    def __post_init__(self) -> None:
        expected = _api_key_of(self.value)
        if expected is None:
            raise MetadataRecordError(
                f"a DecodedRecord value must be one of {', '.join(RECORD_TYPES.values())} "
                f"models, got {type(self.value).__name__}"
            )
        if self.api_key != expected:
            raise MetadataRecordError(
                f"apiKey {self.api_key} does not match a {type(self.value).__name__} "
                f"(apiKey {expected})"
            )
        if (
            isinstance(self.version, bool)
            or not isinstance(self.version, int)
            or not (0 <= self.version <= _MAX_SHORT)
        ):
            raise MetadataRecordError(f"version must be in [0, {_MAX_SHORT}]: {self.version!r}")
        if self.unknown_tagged_fields:
            object.__setattr__(
                self,
                "unknown_tagged_fields",
                _check_unknown_tags(self.api_key, self.unknown_tagged_fields),
            )

    @property
    def type_name(self) -> str:
        """Kafka's message name, e.g. ``RemoteLogSegmentMetadataRecord``."""
        return RECORD_TYPES[self.api_key]


def _check_unknown_tags(api_key: int, fields: Iterable[Any]) -> tuple[tuple[int, bytes], ...]:
    known = _KNOWN_TAGS[api_key]
    checked: list[tuple[int, bytes]] = []
    for field in fields:
        try:
            tag, data = field
        except (TypeError, ValueError):
            raise MetadataRecordError(
                f"an unknown tagged field must be a (tag, bytes) pair: {field!r}"
            ) from None
        if isinstance(tag, bool) or not isinstance(tag, int) or not 0 <= tag <= 0xFFFFFFFF:
            raise MetadataRecordError(f"a tag must be an unsigned 32-bit int: {tag!r}")
        if not isinstance(data, bytes | bytearray | memoryview):
            raise MetadataRecordError(f"tag {tag} data must be bytes: {data!r}")
        if tag in known:
            raise MetadataRecordError(
                f"tag {tag} is a known field of {RECORD_TYPES[api_key]}, not an unknown one"
            )
        checked.append((tag, bytes(data)))
    return tuple(checked)


# Decoding -----------------------------------------------------------------------------------------

_TIP_TAIL: Final = FixedLayout((("TopicIdPartition.Id", "QQ"), ("TopicIdPartition.Partition", "i")))
_SEGMENT_FIXED: Final = FixedLayout(
    (
        ("StartOffset", "q"),
        ("EndOffset", "q"),
        ("BrokerId", "i"),
        ("MaxTimestampMs", "q"),
        ("EventTimestampMs", "q"),
    )
)
_BROKER_EVENT: Final = FixedLayout((("BrokerId", "i"), ("EventTimestampMs", "q")))
# An epoch entry with the first byte of its tagged-field section (0 when it has no tags, as
# always in practice): one unpack per entry on the fast path.
_EPOCH_ENTRY: Final = FixedLayout(
    (("LeaderEpoch", "i"), ("Offset", "q"), ("tagged-field count", "B"))
)
_EPOCH_ENTRY_MIN_SIZE: Final = 13  # int32 + int64 + empty tagged-field section
_SIZE: Final = FixedLayout((("SegmentSizeInBytes", "i"),))
_SEGMENT_STATE: Final = FixedLayout((("RemoteLogSegmentState", "b"),))


def _short_uvarint(buf: bytes, pos: int, what: str) -> tuple[int, int]:
    value, pos = read_uvarint(buf, pos, what)
    if value > _MAX_SHORT:
        raise MetadataRecordError(f"{what} {value} is too large (at most {_MAX_SHORT})")
    return value, pos


# The general decoders parse a body into plain values and return, with the unknown tags and the
# end position, a function that builds the model. The caller checks for trailing garbage before
# calling it, so, as in Kafka (parse, then garbage check, then transform), a record that is both
# malformed and invalid reports the wire problem first.

_Build: TypeAlias = Callable[[], MetadataValue]
_BodyResult: TypeAlias = tuple[_Build, list[tuple[int, bytes]], int]
_RawTopicIdPartition: TypeAlias = tuple[str, int, int, int, str, int]


def _read_topic_id_partition(buf: bytes, pos: int, prefix: str) -> tuple[_RawTopicIdPartition, int]:
    start = pos
    name, pos = read_compact_string(buf, pos, f"{prefix}TopicIdPartition.Name")
    msb, lsb, partition = _TIP_TAIL.unpack(buf, pos, prefix)
    pos = skip_tagged_fields(buf, pos + _TIP_TAIL.size, f"{prefix}TopicIdPartition")
    return (name, msb, lsb, partition, prefix, start), pos


def _build_topic_id_partition(raw: _RawTopicIdPartition) -> TopicIdPartition:
    name, msb, lsb, partition, prefix, start = raw
    try:
        return TopicIdPartition(Uuid(msb, lsb), name, partition)
    except InvalidArgumentError as exc:
        raise MetadataRecordError(
            f"invalid {prefix}TopicIdPartition at offset {start}: {exc}"
        ) from exc


def _read_segment_id(buf: bytes, pos: int) -> tuple[tuple[_RawTopicIdPartition, Uuid], int]:
    tip, pos = _read_topic_id_partition(buf, pos, "RemoteLogSegmentId.")
    segment_id, pos = read_uuid(buf, pos, "RemoteLogSegmentId.Id")
    pos = skip_tagged_fields(buf, pos, "RemoteLogSegmentId")
    return (tip, segment_id), pos


def _build_segment_id(raw: tuple[_RawTopicIdPartition, Uuid]) -> RemoteLogSegmentId:
    return RemoteLogSegmentId(_build_topic_id_partition(raw[0]), raw[1])


def _read_epochs(
    buf: bytes, pos: int, what: str = "SegmentLeaderEpochs"
) -> tuple[dict[int, int], int]:
    """An array of ``{LeaderEpoch, Offset, [tags]}`` entries (``SegmentLeaderEpochs`` or
    tierlog's ``CleanerOffsets``) as a dict, in the order read."""
    count, pos = read_array_length(buf, pos, what, _EPOCH_ENTRY_MIN_SIZE)
    epochs: dict[int, int] = {}
    unpack_from = _EPOCH_ENTRY.struct.unpack_from
    end = len(buf)
    for index in range(count):
        if pos + _EPOCH_ENTRY_MIN_SIZE > end:
            raise _EPOCH_ENTRY.truncation(buf, pos, f"{what}[{index}].")
        epoch, offset, first_tag_byte = unpack_from(buf, pos)
        if first_tag_byte == 0:
            pos += _EPOCH_ENTRY_MIN_SIZE
        else:
            pos = skip_tagged_fields(buf, pos + 12, f"{what}[{index}]")
        epochs[epoch] = offset  # a repeated epoch keeps its last offset, as Kafka's HashMap
    return epochs, pos


def _read_cleaner_offsets(data: bytes, section_pos: int) -> dict[int, int]:
    """The vector in the data of a CleanerOffsets tag; strict (see the module docstring).

    Offsets in the errors are within the tag's data, which starts in the record's top-level
    tagged-field section at ``section_pos``.
    """
    where = f"{RECORD_TYPES[SEGMENT_METADATA]} tagged field {_CLEANER_OFFSETS}"
    try:
        count, pos = read_array_length(data, 0, "CleanerOffsets", _EPOCH_ENTRY_MIN_SIZE)
        if count == 0:
            raise MetadataRecordError("the array is empty (a vector has at least one epoch)")
        previous: int | None = None
        vector: dict[int, int] = {}
        for index in range(count):
            epoch, offset, _ = _EPOCH_ENTRY.unpack(data, pos, f"CleanerOffsets[{index}].")
            if previous is not None and epoch <= previous:
                raise MetadataRecordError(
                    f"CleanerOffsets[{index}] has leader epoch {epoch} after {previous} "
                    "(epochs must be ascending and unique)"
                )
            pos = skip_tagged_fields(data, pos + 12, f"CleanerOffsets[{index}]")
            vector[epoch] = offset
            previous = epoch
        if pos != len(data):
            raise MetadataRecordError(
                f"{len(data) - pos} byte(s) after its last entry (at offset {pos})"
            )
    except MetadataRecordError as exc:
        raise MetadataRecordError(
            f"malformed record: {where} in the section at offset {section_pos}: {exc} "
            f"(offsets within the field's {len(data)} byte(s))"
        ) from None
    return vector


def _read_custom_metadata(buf: bytes, pos: int) -> tuple[CustomMetadata | None, int]:
    if pos < len(buf) and buf[pos] == 0:
        return None, pos + 1
    value, pos = read_compact_nullable_bytes(buf, pos, "CustomMetadata")
    return (None if value is None else CustomMetadata(value)), pos


def _read_state_id(buf: bytes, pos: int, what: str) -> tuple[int, int]:
    if pos >= len(buf):
        raise _wire.truncated(what, pos, 1, buf)
    (state_id,) = INT8.unpack_from(buf, pos)
    return state_id, pos + 1


_State = TypeVar("_State", RemoteLogSegmentState, RemotePartitionDeleteState)


def _state(enum: type[_State], state_id: int, pos: int) -> _State:
    try:
        return enum(state_id)
    except ValueError:
        raise MetadataRecordError(
            f"invalid {enum.__name__} id {state_id} at offset {pos} "
            f"(known: {', '.join(f'{s.value}={s.name}' for s in enum)})"
        ) from None


def _split_txn_tag(
    fields: list[tuple[int, bytes]], record: str, pos: int
) -> tuple[bool, list[tuple[int, bytes]]]:
    """Take the known ``TxnIndexEmpty`` tag (0) out of a top-level section; absent means false."""
    if not fields:
        return False, fields
    txn_index_empty = False
    unknown: list[tuple[int, bytes]] = []
    for tag, data in fields:
        if tag == _TXN_INDEX_EMPTY_TAG:
            if len(data) != 1:
                raise MetadataRecordError(
                    f"malformed record: {record} tagged field TxnIndexEmpty (tag 0) in the "
                    f"section at offset {pos} has {len(data)} byte(s), a bool has 1"
                )
            txn_index_empty = data[0] != 0
        else:
            unknown.append((tag, data))
    return txn_index_empty, unknown


def _split_cleaner_offsets(
    fields: list[tuple[int, bytes]], pos: int
) -> tuple[dict[int, int] | None, list[tuple[int, bytes]]]:
    """Take tierlog's CleanerOffsets tag out of apiKey 0's top-level section; absent: None."""
    if not fields:
        return None, fields
    vector: dict[int, int] | None = None
    unknown: list[tuple[int, bytes]] = []
    for tag, data in fields:
        if tag != CLEANER_OFFSETS_TAG:
            unknown.append((tag, data))
        elif vector is not None:
            raise MetadataRecordError(
                f"malformed record: {RECORD_TYPES[SEGMENT_METADATA]} tagged field "
                f"{_CLEANER_OFFSETS} appears more than once in the section at offset {pos}"
            )
        else:
            vector = _read_cleaner_offsets(data, pos)
    return vector, unknown


def _decode_segment(buf: bytes, pos: int) -> _BodyResult:
    record = RECORD_TYPES[SEGMENT_METADATA]
    segment_id, pos = _read_segment_id(buf, pos)
    start, end, broker_id, max_ts, event_ts = _SEGMENT_FIXED.unpack(buf, pos)
    epochs, pos = _read_epochs(buf, pos + _SEGMENT_FIXED.size)
    (size,) = _SIZE.unpack(buf, pos)
    custom, pos = _read_custom_metadata(buf, pos + 4)
    state_pos = pos
    state_id, pos = _read_state_id(buf, pos, "RemoteLogSegmentState")
    fields, tags_end = read_tagged_fields(buf, pos, record)
    txn_index_empty, fields = _split_txn_tag(fields, record, pos)
    cleaner_offsets, unknown = _split_cleaner_offsets(fields, pos)

    def build() -> MetadataValue:
        state = _state(RemoteLogSegmentState, state_id, state_pos)
        try:
            # Kafka builds the metadata and then applies an update carrying the record's state,
            # custom metadata, broker and event time (``createWithUpdates``); building it with
            # those values directly gives the same object without the intermediate one.
            return RemoteLogSegmentMetadata(
                _build_segment_id(segment_id),
                start,
                end,
                max_ts,
                broker_id,
                event_ts,
                size,
                epochs,
                custom,
                state,
                txn_index_empty,
                cleaner_offsets,
            )
        except InvalidArgumentError as exc:
            raise MetadataRecordError(f"invalid {record}: {exc}") from exc

    return build, unknown, tags_end


def _decode_update(buf: bytes, pos: int) -> _BodyResult:
    record = RECORD_TYPES[SEGMENT_METADATA_UPDATE]
    segment_id, pos = _read_segment_id(buf, pos)
    broker_id, event_ts = _BROKER_EVENT.unpack(buf, pos)
    custom, pos = _read_custom_metadata(buf, pos + _BROKER_EVENT.size)
    state_pos = pos
    state_id, pos = _read_state_id(buf, pos, "RemoteLogSegmentState")
    unknown, pos = read_tagged_fields(buf, pos, record)

    def build() -> MetadataValue:
        state = _state(RemoteLogSegmentState, state_id, state_pos)
        return RemoteLogSegmentMetadataUpdate(
            _build_segment_id(segment_id), event_ts, custom, state, broker_id
        )

    return build, unknown, pos


def _decode_partition_delete(buf: bytes, pos: int) -> _BodyResult:
    record = RECORD_TYPES[PARTITION_DELETE_METADATA]
    tip, pos = _read_topic_id_partition(buf, pos, "")
    broker_id, event_ts = _BROKER_EVENT.unpack(buf, pos)
    state_pos = pos + _BROKER_EVENT.size
    state_id, pos = _read_state_id(buf, state_pos, "RemotePartitionDeleteState")
    unknown, pos = read_tagged_fields(buf, pos, record)

    def build() -> MetadataValue:
        state = _state(RemotePartitionDeleteState, state_id, state_pos)
        return RemotePartitionDeleteMetadata(
            _build_topic_id_partition(tip), state, event_ts, broker_id
        )

    return build, unknown, pos


def _decode_snapshot(buf: bytes, pos: int) -> _BodyResult:
    record = RECORD_TYPES[SEGMENT_METADATA_SNAPSHOT]
    segment_id, pos = read_uuid(buf, pos, "SegmentId")
    start, end, broker_id, max_ts, event_ts = _SEGMENT_FIXED.unpack(buf, pos)
    epochs, pos = _read_epochs(buf, pos + _SEGMENT_FIXED.size)
    (size,) = _SIZE.unpack(buf, pos)
    custom, pos = _read_custom_metadata(buf, pos + 4)
    state_pos = pos
    state_id, pos = _read_state_id(buf, pos, "RemoteLogSegmentState")
    fields, tags_end = read_tagged_fields(buf, pos, record)
    txn_index_empty, unknown = _split_txn_tag(fields, record, pos)

    def build() -> MetadataValue:
        state = _state(RemoteLogSegmentState, state_id, state_pos)
        try:
            return RemoteLogSegmentMetadataSnapshot(
                segment_id,
                start,
                end,
                max_ts,
                broker_id,
                event_ts,
                size,
                custom,
                state,
                epochs,
                txn_index_empty,
            )
        except InvalidArgumentError as exc:
            raise MetadataRecordError(f"invalid {record}: {exc}") from exc

    return build, unknown, tags_end


_DECODERS: Final[Mapping[int, Callable[[bytes, int], _BodyResult]]] = {
    SEGMENT_METADATA: _decode_segment,
    SEGMENT_METADATA_UPDATE: _decode_update,
    PARTITION_DELETE_METADATA: _decode_partition_delete,
    SEGMENT_METADATA_SNAPSHOT: _decode_snapshot,
}


def _as_bytes(data: bytes | bytearray | memoryview) -> bytes:
    if type(data) is bytes:
        return data
    if data is None:
        raise MetadataRecordError(
            "the record value is null (a tombstone); a metadata record always has a value"
        )
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"a metadata record is bytes, got {type(data).__name__}")


# Fast paths ---------------------------------------------------------------------------------------
#
# Replaying a metadata partition decodes apiKey 0 and 1 records by the million, and they are
# almost always laid out the same way: one-byte varints, empty nested tagged-field sections and
# at most the TxnIndexEmpty tag at the top. For that shape the fast decoders below read each run
# of fixed fields with a single ``unpack_from`` and reuse the TopicIdPartition of a partition seen
# before. Any other shape, and any error, makes them return None, and the general decoder above
# handles the record and produces the precise error, so the two never disagree on a result.

# TopicIdPartitionEntry.{Id, Partition, tags} RemoteLogSegmentIdEntry.{Id, tags}: 38 bytes.
_SEGMENT_ID_TAIL: Final = "QQiBQQB"
_FAST_SEGMENT_HEAD: Final = Struct(">" + _SEGMENT_ID_TAIL + "qqiqqB")  # ... epochs marker
_FAST_UPDATE_HEAD: Final = Struct(">" + _SEGMENT_ID_TAIL + "iqB")  # ... custom metadata marker
_FAST_SIZE_AND_MARKER: Final = Struct(">iB")
_FAST_STATE_AND_TAGS: Final = Struct(">bB")
_TXN_TRUE_BODY: Final = b"\x00\x01\x01"
_SEGMENT_STATES: Final = tuple(RemoteLogSegmentState)
_EPOCH_STRUCTS: Final[dict[int, Struct]] = {}
_TIP_CACHE: Final[dict[bytes, TopicIdPartition]] = {}
_TIP_CACHE_LIMIT: Final = 4096


def _epochs_struct(count: int) -> Struct:
    layout = _EPOCH_STRUCTS.get(count)
    if layout is None:
        layout = Struct(">" + "iqB" * count)
        if count <= 64:
            _EPOCH_STRUCTS[count] = layout
    return layout


def _cached_tip(key: bytes, name_end: int, msb: int, lsb: int, partition: int) -> TopicIdPartition:
    """The TopicIdPartition whose encoded name, id and partition are ``key`` (shared: immutable)."""
    tip = _TIP_CACHE.get(key)
    if tip is None:
        name = key[1:name_end].decode("utf-8")  # UnicodeDecodeError: caller falls back
        tip = TopicIdPartition(Uuid(msb, lsb), name, partition)
        if len(_TIP_CACHE) >= _TIP_CACHE_LIMIT:
            _TIP_CACHE.clear()
        _TIP_CACHE[key] = tip
    return tip


def _trusted_record(api_key: int, version: int, value: MetadataValue) -> DecodedRecord:
    """A DecodedRecord whose fields the decoder already guarantees consistent (no re-check)."""
    record = object.__new__(DecodedRecord)
    object.__setattr__(record, "api_key", api_key)
    object.__setattr__(record, "version", version)
    object.__setattr__(record, "value", value)
    object.__setattr__(record, "unknown_tagged_fields", ())
    return record


def _fast_segment(buf: bytes, version: int) -> DecodedRecord | None:
    end = len(buf)
    name_marker = buf[3]
    if not 0 < name_marker < 0x80:
        return None
    pos = 3 + name_marker
    if pos + _FAST_SEGMENT_HEAD.size > end:
        return None
    (
        tip_msb, tip_lsb, partition, tip_tags, seg_msb, seg_lsb, seg_tags,
        start, end_offset, broker_id, max_ts, event_ts, epochs_marker,
    ) = _FAST_SEGMENT_HEAD.unpack_from(buf, pos)  # fmt: skip
    if tip_tags or seg_tags or not 0 < epochs_marker < 0x80:
        return None
    tip = _cached_tip(buf[3 : pos + 20], name_marker, tip_msb, tip_lsb, partition)
    pos += _FAST_SEGMENT_HEAD.size
    epoch_layout = _epochs_struct(epochs_marker - 1)
    if pos + epoch_layout.size + _FAST_SIZE_AND_MARKER.size > end:
        return None
    values = epoch_layout.unpack_from(buf, pos)
    if any(values[2::3]):
        return None
    epochs = dict(zip(values[0::3], values[1::3], strict=True))
    pos += epoch_layout.size
    size, custom_marker = _FAST_SIZE_AND_MARKER.unpack_from(buf, pos)
    pos += _FAST_SIZE_AND_MARKER.size
    custom: CustomMetadata | None = None
    if custom_marker:
        if custom_marker >= 0x80:
            return None
        custom_end = pos + custom_marker - 1
        custom = CustomMetadata(buf[pos:custom_end])
        pos = custom_end
    if pos + 2 > end:
        return None
    state_id, tag_count = _FAST_STATE_AND_TAGS.unpack_from(buf, pos)
    pos += 2
    cleaner_offsets: dict[int, int] | None = None
    if tag_count == 0:
        txn_index_empty = False
    elif tag_count == 1 and buf[pos : pos + 3] == _TXN_TRUE_BODY:
        txn_index_empty = True
        pos += 3
    else:
        # A cleaned segment's record (CleanerOffsets): still no unknown tags to keep.
        try:
            fields, pos = read_tagged_fields(buf, pos - 1, "")
            txn_index_empty, fields = _split_txn_tag(fields, "", pos)
            cleaner_offsets, unknown = _split_cleaner_offsets(fields, pos)
        except MetadataRecordError:
            return None
        if unknown:
            return None
    if pos != end or not 0 <= state_id < len(_SEGMENT_STATES):
        return None
    value = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, Uuid(seg_msb, seg_lsb)),
        start,
        end_offset,
        max_ts,
        broker_id,
        event_ts,
        size,
        epochs,
        custom,
        _SEGMENT_STATES[state_id],
        txn_index_empty,
        cleaner_offsets,
    )
    return _trusted_record(SEGMENT_METADATA, version, value)


def _fast_update(buf: bytes, version: int) -> DecodedRecord | None:
    end = len(buf)
    name_marker = buf[3]
    if not 0 < name_marker < 0x80:
        return None
    pos = 3 + name_marker
    if pos + _FAST_UPDATE_HEAD.size > end:
        return None
    (
        tip_msb, tip_lsb, partition, tip_tags, seg_msb, seg_lsb, seg_tags,
        broker_id, event_ts, custom_marker,
    ) = _FAST_UPDATE_HEAD.unpack_from(buf, pos)  # fmt: skip
    if tip_tags or seg_tags:
        return None
    tip = _cached_tip(buf[3 : pos + 20], name_marker, tip_msb, tip_lsb, partition)
    pos += _FAST_UPDATE_HEAD.size
    custom: CustomMetadata | None = None
    if custom_marker:
        if custom_marker >= 0x80:
            return None
        custom_end = pos + custom_marker - 1
        custom = CustomMetadata(buf[pos:custom_end])
        pos = custom_end
    if pos + 2 != end:
        return None
    state_id, tag_count = _FAST_STATE_AND_TAGS.unpack_from(buf, pos)
    if tag_count or not 0 <= state_id < len(_SEGMENT_STATES):
        return None
    value = RemoteLogSegmentMetadataUpdate(
        RemoteLogSegmentId(tip, Uuid(seg_msb, seg_lsb)),
        event_ts,
        custom,
        _SEGMENT_STATES[state_id],
        broker_id,
    )
    return _trusted_record(SEGMENT_METADATA_UPDATE, version, value)


_FAST_DECODERS: Final[Mapping[int, Callable[[bytes, int], DecodedRecord | None]]] = {
    SEGMENT_METADATA: _fast_segment,
    SEGMENT_METADATA_UPDATE: _fast_update,
}


def decode_record(data: bytes | bytearray | memoryview) -> DecodedRecord:
    """Decode one record value, keeping its version and unknown top-level tagged fields."""
    buf = _as_bytes(data)
    if len(buf) > 4 and buf[0] == FRAME_VERSION and buf[2] < 0x80:
        fast = _FAST_DECODERS.get(buf[1])
        if fast is not None:
            try:
                record = fast(buf, buf[2])
            except (InvalidArgumentError, UnicodeDecodeError):
                record = None  # the general decoder reports it precisely
            if record is not None:
                return record
    return _decode_general(buf)


def _decode_general(buf: bytes) -> DecodedRecord:
    """Decode any record, checking every field, with precise errors."""
    frame_version, pos = _short_uvarint(buf, 0, "frame version")
    if frame_version != FRAME_VERSION:
        raise MetadataRecordError(
            f"cannot decode a metadata record with frame version {frame_version} "
            f"(only frame version {FRAME_VERSION} is supported)"
        )
    api_key, pos = _short_uvarint(buf, pos, "apiKey")
    version, pos = _short_uvarint(buf, pos, "version")
    decoder = _DECODERS.get(api_key)
    if decoder is None:
        raise MetadataRecordError(
            f"unknown apiKey {api_key} (known: "
            + ", ".join(f"{key}={name}" for key, name in RECORD_TYPES.items())
            + ")"
        )
    build, unknown, pos = decoder(buf, pos)
    if pos != len(buf):
        raise MetadataRecordError(
            f"Found {len(buf) - pos} byte(s) of garbage after apiKey {api_key} "
            f"({RECORD_TYPES[api_key]} ends at offset {pos})"
        )
    value = build()
    if not unknown:
        return DecodedRecord(api_key, version, value)
    return DecodedRecord(api_key, version, value, tuple(unknown))


def deserialize(data: bytes | bytearray | memoryview) -> MetadataValue:
    """The metadata a record value holds (Kafka's ``RemoteLogMetadataSerde.deserialize``)."""
    return decode_record(data).value


# Encoding -----------------------------------------------------------------------------------------

_HEADER_CACHE: Final[dict[tuple[int, int], bytes]] = {}


def _header(api_key: int, version: int) -> bytes:
    header = _HEADER_CACHE.get((api_key, version))
    if header is None:
        header = uvarint(FRAME_VERSION) + uvarint(api_key) + uvarint(version)
        if len(_HEADER_CACHE) < 64:
            _HEADER_CACHE[(api_key, version)] = header
    return header


def _pack_int(record: str, name: str, code: str, value: object) -> bytes:
    try:
        return _INT_STRUCTS[code].pack(value)
    except struct.error:
        check_int(record, name, code, value)
        raise MetadataRecordError(f"cannot encode {record}: invalid {name} {value!r}") from None


_INT_STRUCTS: Final = {"b": INT8, "i": INT32, "q": _wire.INT64}


def _topic_id_partition(record: str, prefix: str, tip: TopicIdPartition) -> bytes:
    return b"".join(
        (
            compact_string(record, f"{prefix}TopicIdPartition.Name", tip.topic),
            _uuid(record, f"{prefix}TopicIdPartition.Id", tip.topic_id),
            _pack_int(record, f"{prefix}TopicIdPartition.Partition", "i", tip.partition),
            EMPTY_TAGGED_FIELDS,
        )
    )


def _segment_id(record: str, segment_id: RemoteLogSegmentId) -> bytes:
    return b"".join(
        (
            _topic_id_partition(record, "RemoteLogSegmentId.", segment_id.topic_id_partition),
            _uuid(record, "RemoteLogSegmentId.Id", segment_id.id),
            EMPTY_TAGGED_FIELDS,
        )
    )


def _epochs(record: str, epochs: Mapping[int, int], what: str = "SegmentLeaderEpochs") -> bytes:
    parts = [uvarint(len(epochs) + 1)]
    pack = _EPOCH_ENTRY.struct.pack
    for epoch, offset in epochs.items():
        try:
            parts.append(pack(epoch, offset, 0))
        except struct.error:
            check_int(record, f"{what} leader epoch", "i", epoch)
            check_int(record, f"{what} offset of epoch {epoch}", "q", offset)
            raise MetadataRecordError(
                f"cannot encode {record}: invalid {what} entry {epoch!r}: {offset!r}"
            ) from None
    return b"".join(parts)


def _custom(record: str, custom: CustomMetadata | None) -> bytes:
    if custom is None:
        return b"\x00"
    return compact_nullable_bytes(record, "CustomMetadata", custom.value)


# The top-level tagged-field section of apiKeys 0 and 3 with only TxnIndexEmpty = true.
_TXN_TRUE_SECTION: Final = tagged_fields(_TXN_TRUE)


def _segment_tags(
    txn_idx_empty: bool,
    unknown: tuple[tuple[int, bytes], ...],
    cleaner_offsets: Mapping[int, int] | None = None,
) -> bytes:
    if not unknown and cleaner_offsets is None:
        return _TXN_TRUE_SECTION if txn_idx_empty else EMPTY_TAGGED_FIELDS
    fields = (_TXN_TRUE if txn_idx_empty else ()) + unknown
    if cleaner_offsets is not None:
        record = RECORD_TYPES[SEGMENT_METADATA]
        if not cleaner_offsets:
            raise MetadataRecordError(
                f"cannot encode {record}: {_CLEANER_OFFSETS} must hold at least one epoch"
            )
        ordered = dict(sorted(cleaner_offsets.items()))
        fields += ((CLEANER_OFFSETS_TAG, _epochs(record, ordered, "CleanerOffsets")),)
    return tagged_fields(fields)


def _encode_segment(
    value: RemoteLogSegmentMetadata, unknown: tuple[tuple[int, bytes], ...]
) -> bytes:
    record = RECORD_TYPES[SEGMENT_METADATA]
    return b"".join(
        (
            _segment_id(record, value.remote_log_segment_id),
            _SEGMENT_FIXED.pack(
                record,
                value.start_offset,
                value.end_offset,
                value.broker_id,
                value.max_timestamp_ms,
                value.event_timestamp_ms,
            ),
            _epochs(record, value.segment_leader_epochs),
            _SIZE.pack(record, value.segment_size_in_bytes),
            _custom(record, value.custom_metadata),
            _SEGMENT_STATE.pack(record, _segment_state_id(record, value.state)),
            _segment_tags(bool(value.txn_idx_empty), unknown, value.cleaner_offsets),
        )
    )


def _encode_update(
    value: RemoteLogSegmentMetadataUpdate, unknown: tuple[tuple[int, bytes], ...]
) -> bytes:
    record = RECORD_TYPES[SEGMENT_METADATA_UPDATE]
    return b"".join(
        (
            _segment_id(record, value.remote_log_segment_id),
            _BROKER_EVENT.pack(record, value.broker_id, value.event_timestamp_ms),
            _custom(record, value.custom_metadata),
            _SEGMENT_STATE.pack(record, _segment_state_id(record, value.state)),
            tagged_fields(unknown) if unknown else EMPTY_TAGGED_FIELDS,
        )
    )


def _encode_partition_delete(
    value: RemotePartitionDeleteMetadata, unknown: tuple[tuple[int, bytes], ...]
) -> bytes:
    record = RECORD_TYPES[PARTITION_DELETE_METADATA]
    if not isinstance(value.state, RemotePartitionDeleteState):
        raise MetadataRecordError(
            f"cannot encode {record}: state must be a RemotePartitionDeleteState, "
            f"got {value.state!r}"
        )
    return b"".join(
        (
            _topic_id_partition(record, "", value.topic_id_partition),
            _BROKER_EVENT.pack(record, value.broker_id, value.event_timestamp_ms),
            INT8.pack(value.state.value),
            tagged_fields(unknown) if unknown else EMPTY_TAGGED_FIELDS,
        )
    )


def _encode_snapshot(
    value: RemoteLogSegmentMetadataSnapshot, unknown: tuple[tuple[int, bytes], ...]
) -> bytes:
    record = RECORD_TYPES[SEGMENT_METADATA_SNAPSHOT]
    return b"".join(
        (
            _uuid(record, "SegmentId", value.segment_id),
            _SEGMENT_FIXED.pack(
                record,
                value.start_offset,
                value.end_offset,
                value.broker_id,
                value.max_timestamp_ms,
                value.event_timestamp_ms,
            ),
            _epochs(record, value.segment_leader_epochs),
            _SIZE.pack(record, value.segment_size_in_bytes),
            _custom(record, value.custom_metadata),
            _SEGMENT_STATE.pack(record, _segment_state_id(record, value.state)),
            _segment_tags(bool(value.txn_idx_empty), unknown),
        )
    )


def _segment_state_id(record: str, state: object) -> int:
    if not isinstance(state, RemoteLogSegmentState):
        raise MetadataRecordError(
            f"cannot encode {record}: state must be a RemoteLogSegmentState, got {state!r}"
        )
    return state.value


def _uuid(record: str, what: str, value: object) -> bytes:
    if not isinstance(value, Uuid):
        raise MetadataRecordError(f"cannot encode {record}: {what} must be a Uuid, got {value!r}")
    return value.bytes


_ENCODERS: Final[Mapping[int, Callable[[Any, tuple[tuple[int, bytes], ...]], bytes]]] = {
    SEGMENT_METADATA: _encode_segment,
    SEGMENT_METADATA_UPDATE: _encode_update,
    PARTITION_DELETE_METADATA: _encode_partition_delete,
    SEGMENT_METADATA_SNAPSHOT: _encode_snapshot,
}


def serialize(metadata: MetadataValue) -> bytes:
    """The record value Kafka's ``RemoteLogMetadataSerde.serialize`` writes for ``metadata``.

    Raises ``InvalidArgumentError`` for an object that is not one of the four metadata types
    (Kafka's ``IllegalArgumentException``) and ``MetadataRecordError`` for a value that does not
    fit its wire type (an offset beyond int64, a topic name over 32767 UTF-8 bytes, ...).
    """
    api_key = _api_key_of(metadata)
    if api_key is None:
        raise InvalidArgumentError(
            f"no metadata record type for {type(metadata).__qualname__}: expected "
            "RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, "
            "RemotePartitionDeleteMetadata or RemoteLogSegmentMetadataSnapshot"
        )
    return _header(api_key, 0) + _ENCODERS[api_key](metadata, ())


def encode_record(record: DecodedRecord) -> bytes:
    """The bytes of ``record``: its version, body and unknown tagged fields as given."""
    if not isinstance(record, DecodedRecord):
        raise InvalidArgumentError(f"expected a DecodedRecord, got {type(record).__qualname__}")
    return _header(record.api_key, record.version) + _ENCODERS[record.api_key](
        record.value, record.unknown_tagged_fields
    )
