"""The JSON form of the ``__remote_log_metadata`` records, as ``tierlog metadata decode``
prints it and ``tierlog metadata encode`` reads it.

It maps a ``tierlog.metadata.serde.DecodedRecord`` to JSON-able values and back; the bytes are
``serde``'s business. Kept apart from the binary serde because the two change for different
reasons (Kafka's wire format vs. a tool's text format) and only the CLI needs this one.

Field names are the camelCase names of Kafka's message schemas (those of Kafka's generated JSON
converters). Integers are JSON numbers, uuids Kafka's 22-character base64url text, bytes hex
strings, and states their names. Every record has ``apiKey``, ``version``, ``type`` (the
message name) and ``unknownTaggedFields`` (a list of ``{"tag": int, "data": hex}``). The body::

    apiKey 0, "RemoteLogSegmentMetadataRecord":
      {"remoteLogSegmentId": {"topicIdPartition": {"name": "foo", "id": "Bp9TDduJRGa9Q5rlvCJOxg",
                                                   "partition": 0},
                              "id": "AQIDBAUGBwgJCgsMDQ4PEA"},
       "startOffset": 0, "endOffset": 99, "brokerId": 1,
       "maxTimestampMs": 1700000000000, "eventTimestampMs": 1700000001000,
       "segmentLeaderEpochs": [{"leaderEpoch": 0, "offset": 0}],
       "segmentSizeInBytes": 1024, "customMetadata": "cafe",
       "remoteLogSegmentState": "COPY_SEGMENT_STARTED", "txnIndexEmpty": true,
       "cleanerOffsets": [{"leaderEpoch": 0, "offset": 100}, {"leaderEpoch": 1, "offset": 155}]}
    apiKey 1, "RemoteLogSegmentMetadataUpdateRecord":
      {"remoteLogSegmentId": {...}, "brokerId", "eventTimestampMs", "customMetadata",
       "remoteLogSegmentState"}
    apiKey 2, "RemotePartitionDeleteMetadataRecord":
      {"topicIdPartition": {...}, "brokerId", "eventTimestampMs",
       "remotePartitionDeleteState": "DELETE_PARTITION_MARKED"}
    apiKey 3, "RemoteLogSegmentMetadataSnapshotRecord":
      {"segmentId": "<uuid>", "startOffset", "endOffset", "brokerId", "maxTimestampMs",
       "eventTimestampMs", "segmentLeaderEpochs", "segmentSizeInBytes", "customMetadata",
       "remoteLogSegmentState", "txnIndexEmpty"}

``customMetadata`` is ``null`` for no custom metadata and ``""`` for empty custom metadata.
``cleanerOffsets`` is tierlog's tagged field of apiKey 0 (tag 1272, the cleaner-offset vector of
a segment the log cleaner wrote, KIP-1272; see ``serde``), in the form of
``segmentLeaderEpochs``, ascending by epoch.
``record_to_json`` writes every key, except ``cleanerOffsets`` for a segment without a vector.
``record_from_json`` requires every key except ``type`` (checked against ``apiKey`` when
present), ``customMetadata`` (default ``null``), ``txnIndexEmpty`` (default ``false``),
``cleanerOffsets`` (default: no vector; ``null`` too, while ``[]`` is refused) and
``unknownTaggedFields`` (default ``[]``); it also accepts a state's numeric id. Unknown keys
are rejected, so a misspelled field is reported instead of silently defaulted.
``record_from_json(record_to_json(d)) == d`` for every ``DecodedRecord``, hence the same bytes
when encoded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, TypeAlias, TypeVar

from tierlog.metadata.serde import (
    PARTITION_DELETE_METADATA,
    RECORD_TYPES,
    SEGMENT_METADATA,
    SEGMENT_METADATA_SNAPSHOT,
    SEGMENT_METADATA_UPDATE,
    DecodedRecord,
    MetadataValue,
    RemoteLogSegmentMetadataSnapshot,
)
from tierlog.spi import (
    CustomMetadata,
    InvalidArgumentError,
    MetadataRecordError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    Uuid,
)

__all__ = ["JsonObject", "record_from_json", "record_to_json"]

JsonObject: TypeAlias = dict[str, Any]


def _tip_json(tip: TopicIdPartition) -> JsonObject:
    return {"name": tip.topic, "id": str(tip.topic_id), "partition": tip.partition}


def _segment_id_json(segment_id: RemoteLogSegmentId) -> JsonObject:
    return {
        "topicIdPartition": _tip_json(segment_id.topic_id_partition),
        "id": str(segment_id.id),
    }


def _custom_json(custom: CustomMetadata | None) -> str | None:
    return None if custom is None else custom.value.hex()


def _epochs_json(epochs: Mapping[int, int]) -> list[JsonObject]:
    return [{"leaderEpoch": epoch, "offset": offset} for epoch, offset in epochs.items()]


def _segment_fields_json(
    value: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataSnapshot,
) -> JsonObject:
    """The fields a segment's record and a snapshot entry share, after their ids, in order."""
    return {
        "startOffset": value.start_offset,
        "endOffset": value.end_offset,
        "brokerId": value.broker_id,
        "maxTimestampMs": value.max_timestamp_ms,
        "eventTimestampMs": value.event_timestamp_ms,
        "segmentLeaderEpochs": _epochs_json(value.segment_leader_epochs),
        "segmentSizeInBytes": value.segment_size_in_bytes,
        "customMetadata": _custom_json(value.custom_metadata),
        "remoteLogSegmentState": value.state.name,
        "txnIndexEmpty": value.txn_idx_empty,
    }


def record_to_json(decoded: DecodedRecord) -> JsonObject:
    """The JSON form of ``decoded`` (see the module docstring); ``json.dumps`` can write it."""
    value = decoded.value
    out: JsonObject = {
        "apiKey": decoded.api_key,
        "version": decoded.version,
        "type": decoded.type_name,
    }
    if isinstance(value, RemoteLogSegmentMetadata):
        out["remoteLogSegmentId"] = _segment_id_json(value.remote_log_segment_id)
        out.update(_segment_fields_json(value))
        if value.cleaner_offsets is not None:
            out["cleanerOffsets"] = _epochs_json(value.cleaner_offsets)
    elif isinstance(value, RemoteLogSegmentMetadataUpdate):
        out.update(
            remoteLogSegmentId=_segment_id_json(value.remote_log_segment_id),
            brokerId=value.broker_id,
            eventTimestampMs=value.event_timestamp_ms,
            customMetadata=_custom_json(value.custom_metadata),
            remoteLogSegmentState=value.state.name,
        )
    elif isinstance(value, RemotePartitionDeleteMetadata):
        out.update(
            topicIdPartition=_tip_json(value.topic_id_partition),
            brokerId=value.broker_id,
            eventTimestampMs=value.event_timestamp_ms,
            remotePartitionDeleteState=value.state.name,
        )
    else:
        out["segmentId"] = str(value.segment_id)
        out.update(_segment_fields_json(value))
    out["unknownTaggedFields"] = [
        {"tag": tag, "data": data.hex()} for tag, data in decoded.unknown_tagged_fields
    ]
    return out


_INT_BITS: Final = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_MISSING: Final = object()
_State = TypeVar("_State", RemoteLogSegmentState, RemotePartitionDeleteState)


class _JsonFields:
    """Typed access to one JSON object's fields, naming the field's path in every error and
    rejecting keys nobody asked for."""

    __slots__ = ("_obj", "_path", "_used")

    def __init__(self, obj: object, path: str) -> None:
        if not isinstance(obj, dict):
            raise MetadataRecordError(
                f"{path or 'the record'} must be a JSON object, got {_json_type(obj)}"
            )
        self._obj: dict[str, Any] = obj
        self._path = path
        self._used: set[str] = set()

    def _where(self, key: str) -> str:
        return f"{self._path}.{key}" if self._path else key

    def raw(self, key: str, default: object = _MISSING) -> object:
        self._used.add(key)
        if key not in self._obj:
            if default is _MISSING:
                raise MetadataRecordError(f"missing field {self._where(key)}")
            return default
        return self._obj[key]

    def get_int(self, key: str, wire_type: str, minimum: int | None = None) -> int:
        value = self.raw(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise MetadataRecordError(
                f"field {self._where(key)} must be an integer ({wire_type}), "
                f"got {_json_type(value)} {value!r}"
            )
        bits = _INT_BITS[wire_type]
        low = -(1 << (bits - 1)) if minimum is None else minimum
        high = (1 << (bits - 1)) - 1
        if not low <= value <= high:
            raise MetadataRecordError(
                f"field {self._where(key)} = {value} is out of range [{low}, {high}]"
            )
        return value

    def get_str(self, key: str) -> str:
        value = self.raw(key)
        if not isinstance(value, str):
            raise MetadataRecordError(
                f"field {self._where(key)} must be a string, got {_json_type(value)} {value!r}"
            )
        return value

    def get_bool(self, key: str, default: bool) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise MetadataRecordError(
                f"field {self._where(key)} must be true or false, got {_json_type(value)} {value!r}"
            )
        return value

    def get_uuid(self, key: str) -> Uuid:
        text = self.get_str(key)
        try:
            return Uuid.from_string(text)
        except InvalidArgumentError as exc:
            raise MetadataRecordError(f"field {self._where(key)}: {exc}") from exc

    def hex_bytes(self, key: str, value: object) -> bytes:
        if not isinstance(value, str):
            raise MetadataRecordError(
                f"field {self._where(key)} must be a hex string, got {_json_type(value)} {value!r}"
            )
        try:
            return bytes.fromhex(value)
        except ValueError:
            raise MetadataRecordError(
                f"field {self._where(key)} is not a hex string: {value!r}"
            ) from None

    def custom_metadata(self) -> CustomMetadata | None:
        value = self.raw("customMetadata", None)
        return None if value is None else CustomMetadata(self.hex_bytes("customMetadata", value))

    def nested(self, key: str) -> _JsonFields:
        return _JsonFields(self.raw(key), self._where(key))

    def array(self, key: str, default: object = _MISSING) -> list[Any]:
        value = self.raw(key, default)
        if not isinstance(value, list):
            raise MetadataRecordError(
                f"field {self._where(key)} must be an array, got {_json_type(value)}"
            )
        return value

    def get_state(self, key: str, enum: type[_State]) -> _State:
        value = self.raw(key)
        try:
            if isinstance(value, str):
                return enum[value]
            if isinstance(value, int) and not isinstance(value, bool):
                return enum(value)
        except (KeyError, ValueError):
            pass
        raise MetadataRecordError(
            f"field {self._where(key)} must be a {enum.__name__} name or id "
            f"({', '.join(s.name for s in enum)}), got {value!r}"
        )

    def finish(self) -> None:
        extra = sorted(set(self._obj) - self._used)
        if extra:
            raise MetadataRecordError(
                f"unknown field(s) in {self._path or 'the record'}: {', '.join(extra)}"
            )


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _tip_from_json(fields: _JsonFields) -> TopicIdPartition:
    topic_id = fields.get_uuid("id")
    name = fields.get_str("name")
    partition = fields.get_int("partition", "int32", minimum=0)
    fields.finish()
    return TopicIdPartition(topic_id, name, partition)


def _segment_id_from_json(fields: _JsonFields) -> RemoteLogSegmentId:
    tip = _tip_from_json(fields.nested("topicIdPartition"))
    segment_id = fields.get_uuid("id")
    fields.finish()
    return RemoteLogSegmentId(tip, segment_id)


def _epochs_from_json(
    fields: _JsonFields, key: str = "segmentLeaderEpochs", default: object = _MISSING
) -> dict[int, int]:
    epochs: dict[int, int] = {}
    for index, entry in enumerate(fields.array(key, default)):
        item = _JsonFields(entry, f"{key}[{index}]")
        epoch = item.get_int("leaderEpoch", "int32")
        offset = item.get_int("offset", "int64")
        item.finish()
        if epoch in epochs:
            raise MetadataRecordError(
                f"{key}[{index}]: leader epoch {epoch} appears more than once"
            )
        epochs[epoch] = offset
    return epochs


def _cleaner_offsets_from_json(fields: _JsonFields) -> dict[int, int] | None:
    """tierlog's ``cleanerOffsets``: absent or ``null`` is no vector; an empty list is refused
    (the tag's array holds at least one epoch)."""
    if fields.raw("cleanerOffsets", None) is None:
        return None
    vector = _epochs_from_json(fields, "cleanerOffsets")
    if not vector:
        raise MetadataRecordError(
            "field cleanerOffsets is empty: a vector holds at least one epoch "
            "(leave the field out for a segment the log cleaner did not write)"
        )
    return vector


def _segment_span_from_json(fields: _JsonFields) -> tuple[int, int, int, int, int, int]:
    """The fields a segment's record and a snapshot entry share after their ids, in the order
    both models take them: StartOffset, EndOffset, MaxTimestampMs, BrokerId, EventTimestampMs,
    SegmentSizeInBytes."""
    return (
        fields.get_int("startOffset", "int64"),
        fields.get_int("endOffset", "int64"),
        fields.get_int("maxTimestampMs", "int64"),
        fields.get_int("brokerId", "int32"),
        fields.get_int("eventTimestampMs", "int64"),
        fields.get_int("segmentSizeInBytes", "int32"),
    )


def _segment_from_json(fields: _JsonFields) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        _segment_id_from_json(fields.nested("remoteLogSegmentId")),
        *_segment_span_from_json(fields),
        _epochs_from_json(fields),
        fields.custom_metadata(),
        fields.get_state("remoteLogSegmentState", RemoteLogSegmentState),
        fields.get_bool("txnIndexEmpty", False),
        _cleaner_offsets_from_json(fields),
    )


def _update_from_json(fields: _JsonFields) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        _segment_id_from_json(fields.nested("remoteLogSegmentId")),
        fields.get_int("eventTimestampMs", "int64"),
        fields.custom_metadata(),
        fields.get_state("remoteLogSegmentState", RemoteLogSegmentState),
        fields.get_int("brokerId", "int32"),
    )


def _partition_delete_from_json(fields: _JsonFields) -> RemotePartitionDeleteMetadata:
    return RemotePartitionDeleteMetadata(
        _tip_from_json(fields.nested("topicIdPartition")),
        fields.get_state("remotePartitionDeleteState", RemotePartitionDeleteState),
        fields.get_int("eventTimestampMs", "int64"),
        fields.get_int("brokerId", "int32"),
    )


def _snapshot_from_json(fields: _JsonFields) -> RemoteLogSegmentMetadataSnapshot:
    return RemoteLogSegmentMetadataSnapshot(
        fields.get_uuid("segmentId"),
        *_segment_span_from_json(fields),
        fields.custom_metadata(),
        fields.get_state("remoteLogSegmentState", RemoteLogSegmentState),
        _epochs_from_json(fields),
        fields.get_bool("txnIndexEmpty", False),
    )


_FROM_JSON: Final[Mapping[int, Callable[[_JsonFields], MetadataValue]]] = {
    SEGMENT_METADATA: _segment_from_json,
    SEGMENT_METADATA_UPDATE: _update_from_json,
    PARTITION_DELETE_METADATA: _partition_delete_from_json,
    SEGMENT_METADATA_SNAPSHOT: _snapshot_from_json,
}


def _unknown_tags_from_json(fields: _JsonFields) -> tuple[tuple[int, bytes], ...]:
    tags: list[tuple[int, bytes]] = []
    for index, entry in enumerate(fields.array("unknownTaggedFields", [])):
        item = _JsonFields(entry, f"unknownTaggedFields[{index}]")
        tag = item.get_int("tag", "int64", minimum=0)
        if tag > 0xFFFFFFFF:
            raise MetadataRecordError(
                f"field unknownTaggedFields[{index}].tag = {tag} does not fit an unsigned "
                "32-bit varint"
            )
        data = item.hex_bytes("data", item.raw("data"))
        item.finish()
        tags.append((tag, data))
    return tuple(tags)


def record_from_json(obj: dict[str, Any]) -> DecodedRecord:
    """The ``DecodedRecord`` of a JSON object in the form ``record_to_json`` writes.

    Raises ``MetadataRecordError`` naming the field for a missing, mistyped, out-of-range or
    unknown field, and wrapping the model's own validation (e.g. a negative start offset).
    """
    fields = _JsonFields(obj, "")
    api_key = fields.get_int("apiKey", "int16", minimum=0)
    if api_key not in RECORD_TYPES:
        raise MetadataRecordError(
            f"unknown apiKey {api_key} (known: "
            + ", ".join(f"{key}={name}" for key, name in RECORD_TYPES.items())
            + ")"
        )
    version = fields.get_int("version", "int16", minimum=0)
    type_name = fields.raw("type", RECORD_TYPES[api_key])
    if type_name != RECORD_TYPES[api_key]:
        raise MetadataRecordError(
            f"field type is {type_name!r} but apiKey {api_key} is {RECORD_TYPES[api_key]}"
        )
    try:
        value = _FROM_JSON[api_key](fields)
    except InvalidArgumentError as exc:
        raise MetadataRecordError(f"invalid {RECORD_TYPES[api_key]}: {exc}") from exc
    unknown = _unknown_tags_from_json(fields)
    fields.finish()
    return DecodedRecord(api_key, version, value, unknown)
