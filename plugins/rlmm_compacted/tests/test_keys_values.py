"""Keys and values of the compacted projection: formats, round trips, strictness, Kafka's view.

No broker: the bytes are checked against values written out by hand, and Kafka 4.3.1's reading
of a value is tierlog's legacy serde (``serde.deserialize``), which reads version 0 with
unknown tags exactly as Kafka's generated classes do (checked against Kafka's classes in
``tests/metadata``).
"""

from __future__ import annotations

import struct

import hypothesis
import pytest
from hypothesis import strategies as st
from tierlog_rlmm_compacted.keys import MetadataKey
from tierlog_rlmm_compacted.values import (
    BROKER_LEADER_EPOCH_TAG,
    COPY_FINISHED_TAG,
    END_OFFSET_TAG,
    EPOCH_HIGHEST_OFFSETS_TAG,
    SEGMENT_ADD_RECORD_TAG,
    ProjectionValue,
    decode_value,
    encode_value,
)

from tierlog.metadata import serde
from tierlog.metadata.serde import DecodedRecord, RemoteLogSegmentMetadataSnapshot, encode_record
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

S = RemoteLogSegmentState
P = RemotePartitionDeleteState

TOPIC_ID = Uuid.from_string("T8fJ9Kz3RyWxP2mQ4nL7vA")
TIP = TopicIdPartition(TOPIC_ID, "orders", 0)
SEGMENT_ID = RemoteLogSegmentId(TIP, Uuid.from_bytes(bytes(range(1, 17))))
ADD = RemoteLogSegmentMetadata(
    SEGMENT_ID,
    1000,
    1999,
    1_700_000_000_100,
    1,
    1_700_000_000_000,
    1 << 20,
    {5: 1000},
)
DELETE_STARTED = RemoteLogSegmentMetadataUpdate(
    SEGMENT_ID, 1_700_000_000_500, None, S.DELETE_SEGMENT_STARTED, 1, 6
)


def _hex(text: str) -> bytes:
    """Bytes written out in hex, one field a line, ``#`` comments."""
    return bytes.fromhex("".join(line.split("#")[0] for line in text.splitlines()).replace(" ", ""))


# -- keys ------------------------------------------------------------------------------------------


def test_key_text_form_and_bytes() -> None:
    key = MetadataKey.of(TIP, 1999, 5)
    assert str(key) == "T8fJ9Kz3RyWxP2mQ4nL7vA:0:1999:5"
    assert key.encode() == b"T8fJ9Kz3RyWxP2mQ4nL7vA:0:1999:5"
    assert MetadataKey.parse(key.encode()) == key
    # A partition-delete marker of an empty log: log end offset -1 (the fallback).
    marker = MetadataKey.of(TIP, -1, 0)
    assert MetadataKey.parse(b"T8fJ9Kz3RyWxP2mQ4nL7vA:0:-1:0") == marker


def test_key_belongs_to_its_partition_by_id_not_name() -> None:
    key = MetadataKey.of(TIP, 10, 1)
    assert key.belongs_to(TopicIdPartition(TOPIC_ID, "renamed-or-unknown", 0))
    assert not key.belongs_to(TopicIdPartition(TOPIC_ID, "orders", 1))
    assert not key.belongs_to(TopicIdPartition(Uuid(7, 7), "orders", 0))


def test_keys_order_by_topic_partition_end_offset_epoch() -> None:
    keys = [
        MetadataKey.of(TIP, 2000, 0),
        MetadataKey.of(TIP, 1999, 7),
        MetadataKey(TOPIC_ID, 1, 5, 0),
        MetadataKey.of(TIP, 1999, 5),
    ]
    assert sorted(keys) == [keys[3], keys[1], keys[0], keys[2]]


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        (b"\xffT8fJ9Kz3RyWxP2mQ4nL7vA:0:1:1", "not ASCII"),
        (b"T8fJ9Kz3RyWxP2mQ4nL7vA:0:1999", "3 part(s), expected 4"),
        (b"T8fJ9Kz3RyWxP2mQ4nL7vA:0:1999:5:1", "5 part(s), expected 4"),
        (b"", "1 part(s), expected 4"),
        # The seed's own example: its id is not Kafka's spelling (padding bits set).
        (b"T8fJ9Kz3RyWxP2mQ4nL7vB:0:1999:5", "topic id 'T8fJ9Kz3RyWxP2mQ4nL7vB'"),
        (b"not-a-uuid:0:1999:5", "topic id 'not-a-uuid'"),
        (b"T8fJ9Kz3RyWxP2mQ4nL7vA:x:1999:5", "partition 'x' is not an integer"),
        (b"T8fJ9Kz3RyWxP2mQ4nL7vA:-1:1999:5", "partition -1 is out of range"),
        (b"T8fJ9Kz3RyWxP2mQ4nL7vA:2147483648:1999:5", "partition 2147483648 is out of range"),
        (b"T8fJ9Kz3RyWxP2mQ4nL7vA:00:1999:5", "partition '00' is not in canonical form '0'"),
        (b"T8fJ9Kz3RyWxP2mQ4nL7vA: 0:1999:5", "partition ' 0' is not an integer"),
        (b"T8fJ9Kz3RyWxP2mQ4nL7vA:0:+1999:5", "end offset '+1999' is not an integer"),
        (b"T8fJ9Kz3RyWxP2mQ4nL7vA:0:-0:5", "end offset '-0' is not in canonical form '0'"),
        (b"T8fJ9Kz3RyWxP2mQ4nL7vA:0:-2:5", "end offset -2 is out of range"),
        (b"T8fJ9Kz3RyWxP2mQ4nL7vA:0:9223372036854775808:5", "end offset 9223372036854775808"),
        (b"T8fJ9Kz3RyWxP2mQ4nL7vA:0::5", "end offset '' is not an integer"),
        (b"T8fJ9Kz3RyWxP2mQ4nL7vA:0:1999:-1", "broker leader epoch -1 is out of range"),
        (b"T8fJ9Kz3RyWxP2mQ4nL7vA:0:1999:2147483648", "broker leader epoch 2147483648"),
        (b"T8fJ9Kz3RyWxP2mQ4nL7vA:0:1999:05", "broker leader epoch '05' is not in canonical"),
        (b"T8fJ9Kz3RyWxP2mQ4nL7vA:0:1999:\xd9\xa5", "not ASCII"),  # an Arabic-Indic digit
    ],
)
def test_malformed_keys_are_refused_naming_the_part(raw: bytes, names: str) -> None:
    with pytest.raises(MetadataRecordError, match="malformed remote log metadata key") as info:
        MetadataKey.parse(raw)
    assert names in str(info.value)


@pytest.mark.parametrize(
    ("field", "args"),
    [
        ("topic_id", ("T8fJ9Kz3RyWxP2mQ4nL7vA", 0, 1, 1)),
        ("partition", (TOPIC_ID, -1, 1, 1)),
        ("end_offset", (TOPIC_ID, 0, -2, 1)),
        ("broker_leader_epoch", (TOPIC_ID, 0, 1, 2**31)),
        ("broker_leader_epoch", (TOPIC_ID, 0, 1, True)),
    ],
)
def test_key_fields_are_checked(field: str, args: tuple[object, ...]) -> None:
    with pytest.raises(InvalidArgumentError, match=field):
        MetadataKey(*args)  # type: ignore[arg-type]


@hypothesis.given(
    msb=st.integers(-(2**63), 2**63 - 1),
    lsb=st.integers(-(2**63), 2**63 - 1),
    partition=st.integers(0, 2**31 - 1),
    end_offset=st.integers(-1, 2**63 - 1),
    epoch=st.integers(0, 2**31 - 1),
)
def test_any_key_round_trips(
    msb: int, lsb: int, partition: int, end_offset: int, epoch: int
) -> None:
    key = MetadataKey(Uuid(msb, lsb), partition, end_offset, epoch)
    data = key.encode()
    assert MetadataKey.parse(data) == key
    assert data == str(key).encode("utf-8")


# -- values: worked examples -----------------------------------------------------------------------

# RemotePartitionDeleteMetadataRecord, version 0, with BrokerLeaderEpoch 5 and EndOffset 2000.
PARTITION_DELETE_BYTES = _hex(
    """
    01 02 00                               # frame version 1, apiKey 2, version 0
    07 6f7264657273                        # TopicIdPartition.Name "orders" (compact string)
    4fc7c9f4acf74725b13f6990e272fbbc       # TopicIdPartition.Id
    00000000 00                            # TopicIdPartition.Partition 0, no tags
    00000001                               # BrokerId 1
    0000018bcfe56800                       # EventTimestampMs 1700000000000
    02                                     # DELETE_PARTITION_FINISHED
    02                                     # 2 tagged fields, ascending:
    c19c01 04 00000005                     #   20033 BrokerLeaderEpoch = 5
    c29c01 08 00000000000007d0             #   20034 EndOffset = 2000
    """
)

# The segment's add record (RemoteLogSegmentMetadataRecord, version 0, no tags): 105 bytes.
ADD_BYTES = _hex(
    """
    01 00 00                               # frame version 1, apiKey 0, version 0
    07 6f7264657273                        # RemoteLogSegmentId.TopicIdPartition.Name
    4fc7c9f4acf74725b13f6990e272fbbc       #   .Id
    00000000 00                            #   .Partition 0, no tags
    0102030405060708090a0b0c0d0e0f10 00    # RemoteLogSegmentId.Id, no tags
    00000000000003e8                       # StartOffset 1000
    00000000000007cf                       # EndOffset 1999
    00000001                               # BrokerId 1
    0000018bcfe56864                       # MaxTimestampMs 1700000000100
    0000018bcfe56800                       # EventTimestampMs 1700000000000
    02 00000005 00000000000003e8 00        # SegmentLeaderEpochs [{5: 1000}]
    00100000                               # SegmentSizeInBytes 1 MiB
    00                                     # CustomMetadata null
    00                                     # COPY_SEGMENT_STARTED
    00                                     # no tagged fields
    """
)

# Its DELETE_SEGMENT_STARTED (RemoteLogSegmentMetadataUpdateRecord, version 0) with every tag.
DELETE_STARTED_BYTES = (
    _hex(
        """
        01 01 00                           # frame version 1, apiKey 1, version 0
        07 6f7264657273                    # RemoteLogSegmentId.TopicIdPartition.Name
        4fc7c9f4acf74725b13f6990e272fbbc   #   .Id
        00000000 00                        #   .Partition 0, no tags
        0102030405060708090a0b0c0d0e0f10 00  # RemoteLogSegmentId.Id, no tags
        00000001                           # BrokerId 1
        0000018bcfe569f4                   # EventTimestampMs 1700000000500
        00                                 # CustomMetadata null
        02                                 # DELETE_SEGMENT_STARTED
        04                                 # 4 tagged fields, ascending:
        c19c01 04 00000006                 #   20033 BrokerLeaderEpoch = 6
        c29c01 08 00000000000007cf         #   20034 EndOffset = 1999
        c39c01 69                          #   20035 SegmentAddRecord, 105 bytes:
        """
    )
    + ADD_BYTES
    + _hex("c49c01 01 01  # 20036 CopyFinished = 1")
)


def test_worked_example_partition_delete() -> None:
    event = RemotePartitionDeleteMetadata(
        TIP, P.DELETE_PARTITION_FINISHED, 1_700_000_000_000, 1, 5, 2000
    )
    value = ProjectionValue(event, 5, 2000)
    assert encode_value(value) == PARTITION_DELETE_BYTES
    decoded = decode_value(PARTITION_DELETE_BYTES)
    assert decoded == value
    assert decoded.event.broker_leader_epoch == 5
    assert decoded.event.end_offset == 2000  # type: ignore[union-attr]


def test_worked_example_update_with_every_tag() -> None:
    assert serde.serialize(ADD) == ADD_BYTES
    value = ProjectionValue(DELETE_STARTED, 6, 1999, ADD, True)
    assert encode_value(value) == DELETE_STARTED_BYTES
    decoded = decode_value(DELETE_STARTED_BYTES)
    assert decoded == value
    assert decoded.add_record == ADD
    assert decoded.event.broker_leader_epoch == 6
    assert decoded.copy_finished


def test_tag_numbers() -> None:
    """Far from Kafka's TxnIndexEmpty (0), the seed's 0 and 1 and tierlog's CleanerOffsets."""
    assert (
        BROKER_LEADER_EPOCH_TAG,
        END_OFFSET_TAG,
        SEGMENT_ADD_RECORD_TAG,
        COPY_FINISHED_TAG,
        EPOCH_HIGHEST_OFFSETS_TAG,
    ) == (20033, 20034, 20035, 20036, 20037)
    assert serde.CLEANER_OFFSETS_TAG not in {20033, 20034, 20035, 20036, 20037}


# -- values: round trips and Kafka's reading ------------------------------------------------------


def _values() -> list[ProjectionValue]:
    cleaned = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TIP, Uuid(11, 12)),
        0,
        99,
        5,
        3,
        6,
        4096,
        {0: 0, 2: 40},
        CustomMetadata(b"\x00custom"),
        txn_idx_empty=True,
        cleaner_offsets={0: 39, 2: 99},
        broker_leader_epoch=2,
    )
    update = RemoteLogSegmentMetadataUpdate(
        cleaned.remote_log_segment_id, 9, CustomMetadata(b"x"), S.COPY_SEGMENT_FINISHED, 3, 2
    )
    deleted = RemoteLogSegmentMetadataUpdate(
        cleaned.remote_log_segment_id, 10, None, S.DELETE_SEGMENT_FINISHED, 3, 4
    )
    started_add = RemoteLogSegmentMetadata(
        cleaned.remote_log_segment_id,
        0,
        99,
        5,
        3,
        6,
        4096,
        {0: 0, 2: 40},
        txn_idx_empty=True,
        cleaner_offsets={0: 39, 2: 99},
    )
    return [
        ProjectionValue(ADD, 5),
        ProjectionValue(ADD),  # no epoch tag: a plain record under a key
        ProjectionValue(cleaned, 2),
        ProjectionValue(update, 2, 99, started_add),
        ProjectionValue(update, 2, 99, started_add, False, ((0, 120), (2, 250))),
        ProjectionValue(deleted, 4, 99, started_add, True),
        ProjectionValue(deleted, 4, 99, started_add, True, ((2, 100),)),
        ProjectionValue(deleted, 4, 99, started_add, False),
        ProjectionValue(DELETE_STARTED, 6),  # a bare update (an invalid transition's record)
        ProjectionValue(
            RemotePartitionDeleteMetadata(TIP, P.DELETE_PARTITION_MARKED, 1, 2, 0, -1), 0, -1
        ),
    ]


@pytest.mark.parametrize("value", _values(), ids=lambda v: type(v.event).__name__)
def test_values_round_trip_and_kafka_reads_the_plain_event(value: ProjectionValue) -> None:
    data = encode_value(value)
    assert decode_value(data) == value
    assert decode_value(data).event.broker_leader_epoch == value.broker_leader_epoch
    # What Kafka 4.3.1 (and the topic RLMM) reads: the same SPI event, our tags skipped.
    assert serde.deserialize(data) == value.event
    record = serde.decode_record(data)
    assert record.version == 0
    ours = sorted(tag for tag, _ in record.unknown_tagged_fields)
    assert ours == sorted(set(ours)), "a tag written twice"
    assert all(tag in {20033, 20034, 20035, 20036, 20037} for tag in ours)
    assert serde.encode_record(record) == data  # canonical: tags ascending, minimal varints


def test_a_legacy_value_decodes_without_tags() -> None:
    decoded = decode_value(serde.serialize(DELETE_STARTED))
    assert decoded == ProjectionValue(DELETE_STARTED)
    assert decoded.broker_leader_epoch is None
    assert decoded.add_record is None


def test_other_unknown_tags_are_ignored_as_kafka_ignores_ours() -> None:
    data = encode_record(
        DecodedRecord(1, 0, DELETE_STARTED, ((7, b"?"), (BROKER_LEADER_EPOCH_TAG, b"\0\0\0\6")))
    )
    assert decode_value(data) == ProjectionValue(DELETE_STARTED, 6)


# -- values: strictness ----------------------------------------------------------------------------


def _raw(event: object, *tags: tuple[int, bytes]) -> bytes:
    api_key = {
        RemoteLogSegmentMetadata: 0,
        RemoteLogSegmentMetadataUpdate: 1,
        RemotePartitionDeleteMetadata: 2,
        RemoteLogSegmentMetadataSnapshot: 3,
    }[type(event)]
    return encode_record(DecodedRecord(api_key, 0, event, tags))  # type: ignore[arg-type]


_EPOCH = (BROKER_LEADER_EPOCH_TAG, b"\0\0\0\6")
_END = (END_OFFSET_TAG, struct.pack(">q", 1999))
_ADD = (SEGMENT_ADD_RECORD_TAG, ADD_BYTES)
_OTHER_ADD = RemoteLogSegmentMetadata(
    RemoteLogSegmentId(TIP, Uuid(3, 4)), 1000, 1999, 0, 1, 0, 1, {5: 1000}
)
_DELETE_PARTITION = RemotePartitionDeleteMetadata(TIP, P.DELETE_PARTITION_STARTED, 1, 1)
_FINISHED = RemoteLogSegmentMetadataUpdate(SEGMENT_ID, 1, None, S.COPY_SEGMENT_FINISHED, 1)


def _highest(*entries: tuple[int, int], count: int | None = None) -> tuple[int, bytes]:
    n = len(entries) if count is None else count
    data = struct.pack(">i", n) + b"".join(struct.pack(">iq", e, o) for e, o in entries)
    return (EPOCH_HIGHEST_OFFSETS_TAG, data)


@pytest.mark.parametrize(
    ("data", "names"),
    [
        (_raw(ADD, (BROKER_LEADER_EPOCH_TAG, b"\0\0\6")), "BrokerLeaderEpoch (tag 20033) has 3"),
        (_raw(ADD, (BROKER_LEADER_EPOCH_TAG, b"\0" * 5)), "BrokerLeaderEpoch (tag 20033) has 5"),
        (_raw(ADD, (BROKER_LEADER_EPOCH_TAG, b"\xff\xff\xff\xff")), "(tag 20033) is negative"),
        (_raw(ADD, _EPOCH, _EPOCH), "BrokerLeaderEpoch (tag 20033) appears more than once"),
        (_raw(ADD, _END), "EndOffset (tag 20034) is not defined on RemoteLogSegmentMetadataRecord"),
        (_raw(ADD, _ADD), "SegmentAddRecord (tag 20035) is not defined on"),
        (_raw(ADD, (COPY_FINISHED_TAG, b"\1")), "CopyFinished (tag 20036) is not defined on"),
        (_raw(DELETE_STARTED, (END_OFFSET_TAG, b"\0" * 7), _ADD), "EndOffset (tag 20034) has 7"),
        (_raw(DELETE_STARTED, _END, _ADD, _END), "EndOffset (tag 20034) appears more than once"),
        (
            _raw(DELETE_STARTED, (END_OFFSET_TAG, struct.pack(">q", 2000)), _ADD),
            "EndOffset (tag 20034) is 2000, the segment's end offset is 1999",
        ),
        (_raw(DELETE_STARTED, _END), "EndOffset and SegmentAddRecord together or neither"),
        (_raw(DELETE_STARTED, _ADD), "EndOffset and SegmentAddRecord together or neither"),
        (
            _raw(DELETE_STARTED, _END, (SEGMENT_ADD_RECORD_TAG, ADD_BYTES[:-1])),
            "SegmentAddRecord (tag 20035) does not decode",
        ),
        (
            _raw(DELETE_STARTED, _END, (SEGMENT_ADD_RECORD_TAG, serde.serialize(DELETE_STARTED))),
            "SegmentAddRecord (tag 20035) holds a RemoteLogSegmentMetadataUpdate",
        ),
        (
            _raw(DELETE_STARTED, _END, (SEGMENT_ADD_RECORD_TAG, serde.serialize(_OTHER_ADD))),
            "SegmentAddRecord (tag 20035) is the add record of segment",
        ),
        (
            _raw(
                DELETE_STARTED,
                _END,
                (
                    SEGMENT_ADD_RECORD_TAG,
                    serde.serialize(
                        RemoteLogSegmentMetadata(
                            SEGMENT_ID,
                            1000,
                            1999,
                            0,
                            1,
                            0,
                            1,
                            {5: 1000},
                            state=S.COPY_SEGMENT_FINISHED,
                        )
                    ),
                ),
            ),
            "SegmentAddRecord (tag 20035) holds a segment in state COPY_SEGMENT_FINISHED",
        ),
        (
            _raw(DELETE_STARTED, _END, _ADD, (COPY_FINISHED_TAG, b"\2")),
            "CopyFinished (tag 20036) is 02, expected 01",
        ),
        (
            _raw(DELETE_STARTED, _END, _ADD, (COPY_FINISHED_TAG, b"")),
            "CopyFinished (tag 20036) is , expected 01",
        ),
        (_raw(DELETE_STARTED, (COPY_FINISHED_TAG, b"\1")), "CopyFinished (tag 20036) is set on"),
        (_raw(ADD, _highest((5, 2500))), "EpochHighestOffsets (tag 20037) is not defined on"),
        (
            _raw(_FINISHED, _highest((5, 2500))),
            "EpochHighestOffsets (tag 20037) is set on an update without SegmentAddRecord",
        ),
        (
            _raw(_FINISHED, _END, _ADD, (EPOCH_HIGHEST_OFFSETS_TAG, b"\0\0")),
            "EpochHighestOffsets (tag 20037) has 2 byte(s), expected at least 4",
        ),
        (
            _raw(_FINISHED, _END, _ADD, _highest((5, 2500), count=2)),
            "EpochHighestOffsets (tag 20037) has 16 byte(s) for 2 entries",
        ),
        (
            _raw(_FINISHED, _END, _ADD, _highest()),
            "EpochHighestOffsets (tag 20037) is empty",
        ),
        (
            _raw(_FINISHED, _END, _ADD, _highest((4, 2500))),
            "EpochHighestOffsets (tag 20037) names epoch 4, not one of segment",
        ),
        (
            _raw(_FINISHED, _END, _ADD, _highest((5, 1999))),
            "(tag 20037) gives epoch 5 the highest offset 1999, not past the segment's last "
            "offset 1999",
        ),
        (
            _raw(_FINISHED, _END, _ADD, _highest((5, 2500), (5, 2600))),
            "EpochHighestOffsets (tag 20037) lists epoch 5 after epoch 5: not ascending",
        ),
        (
            _raw(DELETE_STARTED, _END, _ADD, _highest((5, 2500))),
            "EpochHighestOffsets (tag 20037) is set on an update to DELETE_SEGMENT_STARTED of a "
            "segment that did not finish copying",
        ),
        (
            _raw(
                RemoteLogSegmentMetadataUpdate(SEGMENT_ID, 1, None, S.COPY_SEGMENT_FINISHED, 1),
                _END,
                _ADD,
                (COPY_FINISHED_TAG, b"\1"),
            ),
            "CopyFinished (tag 20036) is set on an update to COPY_SEGMENT_FINISHED",
        ),
        (
            _raw(_DELETE_PARTITION, (END_OFFSET_TAG, struct.pack(">q", -2))),
            "EndOffset (tag 20034) is -2",
        ),
        (_raw(_DELETE_PARTITION, _ADD), "SegmentAddRecord (tag 20035) is not defined on"),
        (
            _raw(
                RemoteLogSegmentMetadataSnapshot(Uuid(1, 1), 0, 1, 0, 1, 0, 1, None, S(1), {0: 0})
            ),
            "RemoteLogSegmentMetadataSnapshotRecord (apiKey 3) is not a remote log metadata event",
        ),
        (b"\x01\x09\x00", "unknown apiKey 9"),
    ],
)
def test_malformed_values_are_refused_naming_the_tag(data: bytes, names: str) -> None:
    with pytest.raises(MetadataRecordError) as info:
        decode_value(data)
    assert names in str(info.value)


@pytest.mark.parametrize(
    ("value", "names"),
    [
        (ProjectionValue(ADD, 5, 1999), "an add record (COPY_SEGMENT_STARTED) carries only"),
        (ProjectionValue(ADD, 5, None, ADD), "carries only BrokerLeaderEpoch"),
        (ProjectionValue(DELETE_STARTED, 6, 1999), "needs its EndOffset and SegmentAddRecord"),
        (ProjectionValue(DELETE_STARTED, 6, None, ADD), "needs its EndOffset and SegmentAddRecord"),
        (ProjectionValue(DELETE_STARTED, 6, 1998, ADD), "EndOffset 1998 is not the end offset"),
        (ProjectionValue(DELETE_STARTED, 6, None, None, True), "needs its EndOffset"),
        (
            ProjectionValue(
                RemoteLogSegmentMetadataUpdate(SEGMENT_ID, 1, None, S.COPY_SEGMENT_FINISHED, 1),
                6,
                1999,
                ADD,
                True,
            ),
            "CopyFinished is for a deletion",
        ),
        (ProjectionValue(DELETE_STARTED, 6, 99, _OTHER_ADD), "SegmentAddRecord (tag 20035) is"),
        (
            ProjectionValue(DELETE_STARTED, 2**31, 1999, ADD),
            "BrokerLeaderEpoch (tag 20033) 2147483648",
        ),
        (ProjectionValue(DELETE_STARTED, -1, 1999, ADD), "BrokerLeaderEpoch (tag 20033) -1"),
        (ProjectionValue(DELETE_STARTED, 6, -1, ADD), "EndOffset -1 is not the end offset 1999"),
        (ProjectionValue(_DELETE_PARTITION, 1, -2), "EndOffset (tag 20034) -2"),
        (ProjectionValue(_DELETE_PARTITION, 1), "needs its EndOffset"),
        (
            ProjectionValue(ADD, 5, None, None, False, ((5, 2500),)),
            "carries only BrokerLeaderEpoch",
        ),
        (
            ProjectionValue(_FINISHED, 6, None, None, False, ((5, 2500),)),
            "needs its EndOffset and SegmentAddRecord",
        ),
        (
            ProjectionValue(_FINISHED, 6, 1999, ADD, False, ((5, 1500),)),
            "(tag 20037) gives epoch 5 the highest offset 1500, not past",
        ),
    ],
)
def test_values_that_cannot_be_written(value: ProjectionValue, names: str) -> None:
    with pytest.raises(MetadataRecordError) as info:
        encode_value(value)
    assert names in str(info.value)
