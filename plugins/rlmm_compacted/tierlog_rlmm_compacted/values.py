"""The values of the compacted projection: Kafka's records, version 0, with tagged fields.

The seed (KAFKA-20033) adds ``BrokerLeaderEpoch`` and ``EndOffset`` to the three metadata
records as version-1 tagged fields (``BrokerLeaderEpoch`` tag 0 on the segment record, which
collides with Kafka's ``TxnIndexEmpty``). Kafka 4.x refuses to read a version-1 value (each nested
struct checks its version: "Can't read version 1 of RemoteLogSegmentIdEntry"), so a keyed value
here is a **version-0** record, and what the projection adds travels in top-level tagged fields
that Kafka 4.3.1 reads as unknown tags and drops: a Kafka broker's TBRLMM, its console formatter
and tierlog's ``topic`` RLMM decode these values as the plain events they are.

Tags (chosen to collide with none of Kafka's ``TxnIndexEmpty`` (0), the seed's 0 and 1, nor
tierlog's ``CleanerOffsets`` (1272)), each written at most once, in ascending order:

- tag 20033 ``BrokerLeaderEpoch`` (apiKeys 0, 1, 2): int32, the publishing leader's epoch;
- tag 20034 ``EndOffset`` (apiKeys 1, 2): int64, the segment's end offset (apiKey 1) or the
  partition's log end offset (apiKey 2);
- tag 20035 ``SegmentAddRecord`` (apiKey 1): the segment's complete framed apiKey-0 value
  (``serde.serialize``) in state COPY_SEGMENT_STARTED;
- tag 20036 ``CopyFinished`` (apiKey 1 with a DELETE_* state): one byte 1, written only when true;
- tag 20037 ``EpochHighestOffsets`` (apiKey 1 with ``SegmentAddRecord``, in state
  COPY_SEGMENT_FINISHED or a deletion with ``CopyFinished``): int32 count, then per entry int32
  leader epoch and int64 offset, epochs ascending: for each of the segment's leader epochs that
  had already copied past the segment's last offset in it when the segment finished, that
  epoch's highest copied offset then. Written only when not empty.

Why ``SegmentAddRecord``: Kafka's update record has no offsets, epochs or size, so a compacted
topic holding only a segment's latest update could not rebuild the cache (Kafka's reviewers said
so). With the add record inside, the latest value of a key is self-sufficient: a reader that never
saw the add (compacted away) applies it, then the update. ``CopyFinished`` says the segment had
reached COPY_SEGMENT_FINISHED before its deletion started, so that such a reader replays
add -> FINISHED -> DELETE_* and counts the segment in the epoch's highest copied offset, as a
reader of the full history does (the writer sets it whenever the segment had finished; where
such a value stands in the topic matters when copies displace each other: ``projection.py``).
Why ``EpochHighestOffsets``: how a finishing copy displaces the copies of its offsets depends on
the epoch's highest copied offset (Kafka's cache drops every segment mapped at or after its
start into the unreferenced ones while that offset is within the segment, else silently
replaces the one mapped at its start, which the epoch then no longer lists). A later segment
that raised it may be deleted and compacted away; the value restores what the writer saw.

An update carries ``EndOffset`` and ``SegmentAddRecord`` together, or neither: a *bare* update
(Kafka's record and its ``BrokerLeaderEpoch``) describes no segment; the compacted RLMM writes
one for an invalid transition, which every reader drops.

Reading is strict for these tags (a wrong size, a repeated tag, a tag on a record type that does
not define it, an add record of another segment or not in COPY_SEGMENT_STARTED, an ``EndOffset``
other than the add record's, ``CopyFinished`` on an update that is not a deletion or has no add
record: ``MetadataRecordError`` naming the tag); other unknown tags are ignored, as Kafka ignores
them.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from tierlog.metadata import serde
from tierlog.metadata.serde import DecodedRecord, decode_record, encode_record
from tierlog.spi import (
    MetadataRecordError,
    RemoteLogMetadata,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
)

__all__ = [
    "BROKER_LEADER_EPOCH_TAG",
    "COPY_FINISHED_TAG",
    "END_OFFSET_TAG",
    "EPOCH_HIGHEST_OFFSETS_TAG",
    "SEGMENT_ADD_RECORD_TAG",
    "ProjectionValue",
    "decode_value",
    "encode_value",
    "epoch_ranges",
    "segment_epoch_ranges",
]

BROKER_LEADER_EPOCH_TAG: Final = 20033
END_OFFSET_TAG: Final = 20034
SEGMENT_ADD_RECORD_TAG: Final = 20035
COPY_FINISHED_TAG: Final = 20036
EPOCH_HIGHEST_OFFSETS_TAG: Final = 20037

_NAMES: Final = {
    BROKER_LEADER_EPOCH_TAG: "BrokerLeaderEpoch",
    END_OFFSET_TAG: "EndOffset",
    SEGMENT_ADD_RECORD_TAG: "SegmentAddRecord",
    COPY_FINISHED_TAG: "CopyFinished",
    EPOCH_HIGHEST_OFFSETS_TAG: "EpochHighestOffsets",
}
_INT32: Final = struct.Struct(">i")
_INT64: Final = struct.Struct(">q")
_HIGHEST_ENTRY: Final = struct.Struct(">iq")
_DELETE_STATES: Final = frozenset(
    {RemoteLogSegmentState.DELETE_SEGMENT_STARTED, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED}
)


@dataclass(frozen=True, slots=True)
class ProjectionValue:
    """A keyed value: the event and what the projection adds to it.

    ``event`` carries ``broker_leader_epoch`` (and, for a partition delete, ``end_offset``) as
    decoded from the tags. ``add_record`` is the segment's add (state COPY_SEGMENT_STARTED) for
    an update; ``copy_finished`` only matters with a DELETE_* update; ``highest_offsets`` are
    (leader epoch, highest copied offset) pairs, epochs ascending (``EpochHighestOffsets``).
    """

    event: RemoteLogMetadata
    broker_leader_epoch: int | None = None
    end_offset: int | None = None
    add_record: RemoteLogSegmentMetadata | None = None
    copy_finished: bool = False
    highest_offsets: tuple[tuple[int, int], ...] = ()

    @property
    def api_key(self) -> int:
        if isinstance(self.event, RemoteLogSegmentMetadata):
            return serde.SEGMENT_METADATA
        if isinstance(self.event, RemoteLogSegmentMetadataUpdate):
            return serde.SEGMENT_METADATA_UPDATE
        return serde.PARTITION_DELETE_METADATA


def _tag_error(tag: int, problem: str) -> MetadataRecordError:
    return MetadataRecordError(
        f"malformed compacted remote log metadata value: tagged field {_NAMES[tag]} (tag {tag}) "
        f"{problem}"
    )


def _check_add(add: RemoteLogSegmentMetadata, update: RemoteLogSegmentMetadataUpdate) -> None:
    if add.remote_log_segment_id != update.remote_log_segment_id:
        raise _tag_error(
            SEGMENT_ADD_RECORD_TAG,
            f"is the add record of segment {add.remote_log_segment_id}, not of the updated "
            f"segment {update.remote_log_segment_id}",
        )
    if add.state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED:
        raise _tag_error(
            SEGMENT_ADD_RECORD_TAG,
            f"holds a segment in state {add.state}, not COPY_SEGMENT_STARTED",
        )


def encode_value(value: ProjectionValue) -> bytes:
    """The bytes of a keyed value (version 0; the tags of the module docstring)."""
    event = value.event
    tags: list[tuple[int, bytes]] = []
    if value.broker_leader_epoch is not None:
        tags.append(
            (
                BROKER_LEADER_EPOCH_TAG,
                _pack(BROKER_LEADER_EPOCH_TAG, _INT32, value.broker_leader_epoch, 0),
            )
        )
    if isinstance(event, RemoteLogSegmentMetadata):
        if (
            value.end_offset is not None
            or value.add_record is not None
            or value.copy_finished
            or value.highest_offsets
        ):
            raise MetadataRecordError(
                "an add record (COPY_SEGMENT_STARTED) carries only BrokerLeaderEpoch: its end "
                "offset and segment are its own fields"
            )
    elif isinstance(event, RemoteLogSegmentMetadataUpdate):
        if value.copy_finished and event.state not in _DELETE_STATES:
            raise MetadataRecordError(
                f"CopyFinished is for a deletion (DELETE_SEGMENT_*), not an update to {event.state}"
            )
        if (
            value.end_offset is None
            and value.add_record is None
            and not value.copy_finished
            and not value.highest_offsets
        ):
            pass  # a bare update: Kafka's record and its BrokerLeaderEpoch, describing nothing
        elif value.end_offset is None or value.add_record is None:
            raise MetadataRecordError(
                f"an update of segment {event.remote_log_segment_id} needs its EndOffset and "
                "SegmentAddRecord (or neither: a bare update): the latest value of a key must "
                "rebuild the segment alone"
            )
        else:
            _check_add(value.add_record, event)
            if value.end_offset != value.add_record.end_offset:
                raise MetadataRecordError(
                    f"EndOffset {value.end_offset} is not the end offset "
                    f"{value.add_record.end_offset} of segment {event.remote_log_segment_id}"
                )
            tags.append((END_OFFSET_TAG, _pack(END_OFFSET_TAG, _INT64, value.end_offset, 0)))
            tags.append((SEGMENT_ADD_RECORD_TAG, serde.serialize(value.add_record)))
            if value.copy_finished:
                tags.append((COPY_FINISHED_TAG, b"\x01"))
            if value.highest_offsets:
                _check_highest(value.highest_offsets, value.add_record, event, value.copy_finished)
                tags.append((EPOCH_HIGHEST_OFFSETS_TAG, _pack_highest(value.highest_offsets)))
    elif isinstance(event, RemotePartitionDeleteMetadata):
        if value.end_offset is None:
            raise MetadataRecordError(
                f"a partition delete of {event.topic_id_partition} needs its EndOffset (the key's)"
            )
        tags.append((END_OFFSET_TAG, _pack(END_OFFSET_TAG, _INT64, value.end_offset, -1)))
    else:
        raise MetadataRecordError(f"not a remote log metadata event: {type(event).__name__}")
    return encode_record(DecodedRecord(value.api_key, 0, event, tuple(tags)))


def _pack_highest(entries: tuple[tuple[int, int], ...]) -> bytes:
    return _INT32.pack(len(entries)) + b"".join(
        _HIGHEST_ENTRY.pack(epoch, offset) for epoch, offset in entries
    )


def _unpack_highest(data: bytes) -> tuple[tuple[int, int], ...]:
    tag = EPOCH_HIGHEST_OFFSETS_TAG
    if len(data) < _INT32.size:
        raise _tag_error(tag, f"has {len(data)} byte(s), expected at least {_INT32.size}")
    (count,) = _INT32.unpack_from(data)
    expected = _INT32.size + count * _HIGHEST_ENTRY.size
    if count < 0 or len(data) != expected:
        raise _tag_error(tag, f"has {len(data)} byte(s) for {count} entries")
    return tuple(
        (int(epoch), int(offset))
        for epoch, offset in _HIGHEST_ENTRY.iter_unpack(data[_INT32.size :])
    )


def epoch_ranges(epochs: Sequence[tuple[int, int]], end: int) -> dict[int, tuple[int, int]]:
    """Each leader epoch's first and last offset in a segment ending at ``end``: ``epochs``
    are (leader epoch, its first offset), ascending."""
    return {
        epoch: (start, epochs[i + 1][1] - 1 if i + 1 < len(epochs) else end)
        for i, (epoch, start) in enumerate(epochs)
    }


def segment_epoch_ranges(segment: RemoteLogSegmentMetadata) -> dict[int, tuple[int, int]]:
    """``epoch_ranges`` of a segment, epochs ascending."""
    return epoch_ranges(sorted(segment.segment_leader_epochs.items()), segment.end_offset)


def _check_highest(
    entries: tuple[tuple[int, int], ...],
    add: RemoteLogSegmentMetadata,
    update: RemoteLogSegmentMetadataUpdate,
    copy_finished: bool,
) -> None:
    """``EpochHighestOffsets`` on a finished copy: epochs of the segment, ascending, each with
    an offset past the segment's last offset in that epoch."""
    tag = EPOCH_HIGHEST_OFFSETS_TAG
    if update.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED and not copy_finished:
        raise _tag_error(
            tag, f"is set on an update to {update.state} of a segment that did not finish copying"
        )
    last = {epoch: end for epoch, (_, end) in segment_epoch_ranges(add).items()}
    previous = -1
    for epoch, offset in entries:
        if epoch <= previous:
            raise _tag_error(tag, f"lists epoch {epoch} after epoch {previous}: not ascending")
        previous = epoch
        if epoch not in last:
            raise _tag_error(
                tag, f"names epoch {epoch}, not one of segment {update.remote_log_segment_id}'s"
            )
        if offset <= last[epoch]:
            raise _tag_error(
                tag,
                f"gives epoch {epoch} the highest offset {offset}, not past the segment's last "
                f"offset {last[epoch]} in it",
            )


def _pack(tag: int, layout: struct.Struct, number: int, low: int) -> bytes:
    """``number`` as the tag's big-endian int, if it is one of ``low`` or more."""
    high = (1 << (8 * layout.size - 1)) - 1
    if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
        raise MetadataRecordError(
            f"cannot encode {_NAMES[tag]} (tag {tag}) {number!r}: not an int in [{low}, {high}]"
        )
    return layout.pack(number)


def _ours(fields: Iterable[tuple[int, bytes]]) -> dict[int, bytes]:
    found: dict[int, bytes] = {}
    for tag, data in fields:
        if tag not in _NAMES:
            continue  # someone else's tag: ignored, as Kafka ignores ours
        if tag in found:
            raise _tag_error(tag, "appears more than once")
        found[tag] = data
    return found


def _int(tag: int, data: bytes, layout: struct.Struct) -> int:
    if len(data) != layout.size:
        raise _tag_error(tag, f"has {len(data)} byte(s), expected {layout.size}")
    (number,) = layout.unpack(data)
    return int(number)


def decode_value(data: bytes) -> ProjectionValue:
    """A keyed value (or a legacy one: no tags); ``MetadataRecordError`` naming what is wrong."""
    record = decode_record(data)
    event = record.value
    if not isinstance(
        event,
        RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata,
    ):
        raise MetadataRecordError(
            f"a {record.type_name} (apiKey {record.api_key}) is not a remote log metadata event "
            "(Kafka never publishes it)"
        )
    tags = _ours(record.unknown_tagged_fields)
    allowed = {
        serde.SEGMENT_METADATA: {BROKER_LEADER_EPOCH_TAG},
        serde.SEGMENT_METADATA_UPDATE: set(_NAMES),
        serde.PARTITION_DELETE_METADATA: {BROKER_LEADER_EPOCH_TAG, END_OFFSET_TAG},
    }[record.api_key]
    for tag in tags:
        if tag not in allowed:
            raise _tag_error(tag, f"is not defined on {record.type_name}")
    epoch = None
    if BROKER_LEADER_EPOCH_TAG in tags:
        epoch = _int(BROKER_LEADER_EPOCH_TAG, tags[BROKER_LEADER_EPOCH_TAG], _INT32)
        if epoch < 0:
            raise _tag_error(BROKER_LEADER_EPOCH_TAG, f"is negative: {epoch}")
    end = None
    if END_OFFSET_TAG in tags:
        end = _int(END_OFFSET_TAG, tags[END_OFFSET_TAG], _INT64)
    add = None
    if SEGMENT_ADD_RECORD_TAG in tags:
        try:
            inner = decode_record(tags[SEGMENT_ADD_RECORD_TAG]).value
        except MetadataRecordError as exc:
            raise _tag_error(SEGMENT_ADD_RECORD_TAG, f"does not decode: {exc}") from None
        if not isinstance(inner, RemoteLogSegmentMetadata):
            raise _tag_error(SEGMENT_ADD_RECORD_TAG, f"holds a {type(inner).__name__}")
        assert isinstance(event, RemoteLogSegmentMetadataUpdate)
        _check_add(inner, event)
        add = inner
    copy_finished = False
    if COPY_FINISHED_TAG in tags:
        if tags[COPY_FINISHED_TAG] != b"\x01":
            raise _tag_error(COPY_FINISHED_TAG, f"is {tags[COPY_FINISHED_TAG].hex()}, expected 01")
        assert isinstance(event, RemoteLogSegmentMetadataUpdate)
        if event.state not in _DELETE_STATES:
            raise _tag_error(COPY_FINISHED_TAG, f"is set on an update to {event.state}")
        if add is None:
            raise _tag_error(COPY_FINISHED_TAG, "is set on an update without SegmentAddRecord")
        copy_finished = True
    highest: tuple[tuple[int, int], ...] = ()
    if EPOCH_HIGHEST_OFFSETS_TAG in tags:
        assert isinstance(event, RemoteLogSegmentMetadataUpdate)
        if add is None:
            raise _tag_error(
                EPOCH_HIGHEST_OFFSETS_TAG, "is set on an update without SegmentAddRecord"
            )
        highest = _unpack_highest(tags[EPOCH_HIGHEST_OFFSETS_TAG])
        if not highest:
            raise _tag_error(EPOCH_HIGHEST_OFFSETS_TAG, "is empty (it is written only when not)")
        _check_highest(highest, add, event, copy_finished)
    if isinstance(event, RemoteLogSegmentMetadataUpdate) and (add is None) != (end is None):
        raise MetadataRecordError(
            "malformed compacted remote log metadata value: an update has EndOffset and "
            "SegmentAddRecord together or neither"
        )
    if add is not None and end != add.end_offset:
        raise _tag_error(END_OFFSET_TAG, f"is {end}, the segment's end offset is {add.end_offset}")
    if isinstance(event, RemotePartitionDeleteMetadata):
        if end is not None and end < -1:
            raise _tag_error(END_OFFSET_TAG, f"is {end}, a log end offset is >= -1")
        event = dataclasses.replace(event, broker_leader_epoch=epoch, end_offset=end)
    elif epoch is not None:
        event = dataclasses.replace(event, broker_leader_epoch=epoch)
    return ProjectionValue(event, epoch, end, add, copy_finished, highest)
