"""The SPI model keeps Kafka's validation, identity and state machines."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

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
    Uuid,
)

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
TIP = TopicIdPartition(Uuid.from_string("Bp9TDduJRGa9Q5rlvCJOxg"), "foo", 0)


def _segment(
    start: int = 0, end: int = 99, epochs: dict[int, int] | None = None, **kwargs: object
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TIP, Uuid(1, 2)),
        start,
        end,
        5,
        1,
        7,
        1024,
        {0: start} if epochs is None else epochs,
        **kwargs,  # type: ignore[arg-type]
    )


def test_uuid_text_form_matches_kafka() -> None:
    assert str(Uuid(0, 1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    topic_id = Uuid.from_string("Bp9TDduJRGa9Q5rlvCJOxg")
    assert topic_id.bytes.hex() == "069f530ddb894466bd439ae5bc224ec6"
    assert str(topic_id) == "Bp9TDduJRGa9Q5rlvCJOxg"


def test_uuid_accepts_the_padded_form_like_kafka() -> None:
    padded = Uuid.from_string("Bp9TDduJRGa9Q5rlvCJOxg==")
    assert padded == Uuid.from_string("Bp9TDduJRGa9Q5rlvCJOxg")


def test_uuid_signed_halves_like_java_longs() -> None:
    u = Uuid.from_bytes(bytes.fromhex("ffffffffffffffff8000000000000000"))
    assert u.most_significant_bits == -1
    assert u.least_significant_bits == -(1 << 63)
    assert Uuid(u.most_significant_bits, u.least_significant_bits) == u


@pytest.mark.parametrize(
    "text", ["", "short", "AAAAAAAAAAAAAAAAAAAAA!", "A" * 23, "AAAAAAAAAAAAAAAAAAAAAR"]
)
def test_uuid_rejects_malformed_text(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="Uuid"):
        Uuid.from_string(text)


def test_random_uuids_avoid_reserved_values() -> None:
    ids = {Uuid.random() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(u.int > 1 and not str(u).startswith("-") for u in ids)


def test_uuid_is_immutable_hashable_and_picklable() -> None:
    u = Uuid.random()
    with pytest.raises(AttributeError):
        u._value = 3  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(u)) == u
    assert {u: 1}[Uuid.from_string(str(u))] == 1


def test_topic_id_partition_string_is_kafkas() -> None:
    assert str(TIP) == "Bp9TDduJRGa9Q5rlvCJOxg:foo-0"
    assert str(TIP.topic_partition) == "foo-0"
    seg_id = RemoteLogSegmentId(TIP, Uuid(0, 1))
    assert str(seg_id) == (
        "RemoteLogSegmentId{topicIdPartition=Bp9TDduJRGa9Q5rlvCJOxg:foo-0, "
        "id=AAAAAAAAAAAAAAAAAAAAAQ}"
    )


def test_generate_new_gives_distinct_ids_for_the_same_partition() -> None:
    a, b = RemoteLogSegmentId.generate_new(TIP), RemoteLogSegmentId.generate_new(TIP)
    assert a != b and a.topic_id_partition == b.topic_id_partition == TIP


@pytest.mark.parametrize(
    ("start", "end", "epochs", "message"),
    [
        (-1, 10, {0: 0}, "cannot be negative"),
        (10, 9, {0: 10}, "cannot be less than startOffset"),
        (0, 10, {}, "can not be null or empty"),
    ],
)
def test_segment_metadata_validation(
    start: int, end: int, epochs: dict[int, int], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        _segment(start, end, epochs)


def test_segment_epochs_are_sorted_and_read_only() -> None:
    m = _segment(0, 300, {2: 200, 0: 0, 1: 100})
    assert list(m.segment_leader_epochs.items()) == [(0, 0), (1, 100), (2, 200)]
    with pytest.raises(TypeError):
        m.segment_leader_epochs[3] = 4  # type: ignore[index]


def test_create_with_updates_keeps_offsets_and_takes_state() -> None:
    m = _segment(txn_idx_empty=True)
    u = RemoteLogSegmentMetadataUpdate(
        m.remote_log_segment_id, 99, CustomMetadata(b"x"), S.COPY_SEGMENT_FINISHED, 4
    )
    n = m.create_with_updates(u)
    assert (n.state, n.broker_id, n.event_timestamp_ms, n.custom_metadata) == (
        S.COPY_SEGMENT_FINISHED,
        4,
        99,
        CustomMetadata(b"x"),
    )
    assert (n.start_offset, n.end_offset, n.segment_size_in_bytes, n.txn_idx_empty) == (
        0,
        99,
        1024,
        True,
    )
    assert n != m and pickle.loads(pickle.dumps(n)) == n


def test_create_with_updates_rejects_another_segment() -> None:
    m = _segment()
    other = RemoteLogSegmentId(TIP, Uuid(9, 9))
    with pytest.raises(InvalidArgumentError):
        m.create_with_updates(
            RemoteLogSegmentMetadataUpdate(other, 1, None, S.COPY_SEGMENT_FINISHED, 1)
        )


def test_segment_state_byte_ids_are_kafkas() -> None:
    assert [s.id for s in S] == [0, 1, 2, 3]
    assert [s.name for s in S] == [
        "COPY_SEGMENT_STARTED",
        "COPY_SEGMENT_FINISHED",
        "DELETE_SEGMENT_STARTED",
        "DELETE_SEGMENT_FINISHED",
    ]
    assert [s.id for s in P] == [0, 1, 2]
    assert S.for_id(2) is S.DELETE_SEGMENT_STARTED
    with pytest.raises(InvalidArgumentError, match="unknown RemoteLogSegmentState id 4"):
        S.for_id(4)
    assert str(S.COPY_SEGMENT_FINISHED) == "COPY_SEGMENT_FINISHED"


VALID_SEGMENT_TRANSITIONS = {
    (None, S.COPY_SEGMENT_STARTED),
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_STARTED),
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
    (S.DELETE_SEGMENT_FINISHED, S.DELETE_SEGMENT_FINISHED),
}


@pytest.mark.parametrize("src", [None, *S])
@pytest.mark.parametrize("dst", list(S))
def test_segment_transitions_are_exactly_kafkas(src: S | None, dst: S) -> None:
    assert S.is_valid_transition(src, dst) == ((src, dst) in VALID_SEGMENT_TRANSITIONS)


VALID_PARTITION_TRANSITIONS = {
    (None, P.DELETE_PARTITION_MARKED),
    (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_MARKED),
    (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED),
    (P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_STARTED),
    (P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_FINISHED),
    (P.DELETE_PARTITION_FINISHED, P.DELETE_PARTITION_FINISHED),
}


@pytest.mark.parametrize("src", [None, *P])
@pytest.mark.parametrize("dst", list(P))
def test_partition_delete_transitions_are_exactly_kafkas(src: P | None, dst: P) -> None:
    assert P.is_valid_transition(src, dst) == ((src, dst) in VALID_PARTITION_TRANSITIONS)


def test_custom_metadata_string_is_kafkas() -> None:
    assert str(CustomMetadata(bytes(10))) == "CustomMetadata{10 bytes}"


def test_negative_partition_rejected() -> None:
    with pytest.raises(InvalidArgumentError):
        TopicIdPartition(Uuid(0, 5), "foo", -1)


def test_log_segment_data_checks_its_fields(tmp_path: Path) -> None:
    from tierlog.spi import LogSegmentData

    p = tmp_path / "x"
    data = LogSegmentData(p, p, p, None, p, bytearray(b"0\n0\n"))
    assert data.leader_epoch_index == b"0\n0\n"
    with pytest.raises(InvalidArgumentError, match="leader_epoch_index must be the checkpoint"):
        LogSegmentData(p, p, p, None, p, p)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="offset_index must be a Path"):
        LogSegmentData(p, "x", p, None, p, b"")  # type: ignore[arg-type]


def test_topic_id_partition_keeps_its_hash_and_pickles_across_hash_seeds() -> None:
    """The hash is computed once; a pickle must not carry it into a process whose str hashes
    differ (the partition would then never be found in a dict there)."""
    tip = TopicIdPartition(Uuid(7, 9), "orders", 3)
    same = TopicIdPartition(Uuid(7, 9), "orders", 3)
    assert hash(tip) == hash(same) == hash((tip.topic_id, "orders", 3))
    assert {tip: 1}[same] == 1 and tip != TopicIdPartition(Uuid(7, 9), "orders", 4)
    assert "_hash" not in repr(tip)
    script = (
        "import pickle, sys\n"
        "from tierlog.spi import TopicIdPartition, Uuid\n"
        "tip = pickle.loads(sys.stdin.buffer.read())\n"
        "print({TopicIdPartition(Uuid(7, 9), 'orders', 3): 'found'}.get(tip, 'lost'))\n"
    )
    for seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-c", script],
            input=pickle.dumps(tip),
            capture_output=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            check=True,
        )
        assert done.stdout.decode().strip() == "found"


# broker_leader_epoch and end_offset (KAFKA-20033) -------------------------------------------------


def test_broker_leader_epoch_is_an_attribute_of_the_event_not_of_the_segment() -> None:
    """Two events of the same segment state published under different leader epochs are the
    same metadata (equal, same hash), yet each keeps its epoch, through pickling too."""
    plain = _segment()
    keyed = dataclasses.replace(plain, broker_leader_epoch=7)
    assert keyed == plain and hash(keyed) == hash(plain)
    assert keyed.broker_leader_epoch == 7 and plain.broker_leader_epoch is None
    assert pickle.loads(pickle.dumps(keyed)).broker_leader_epoch == 7
    update = RemoteLogSegmentMetadataUpdate(
        plain.remote_log_segment_id, 5, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1, 9
    )
    assert update == dataclasses.replace(update, broker_leader_epoch=None)
    assert plain.create_with_updates(update).broker_leader_epoch == 9
    delete = RemotePartitionDeleteMetadata(
        TIP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 1, 1, 3, 1000
    )
    assert delete == RemotePartitionDeleteMetadata(
        TIP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 1, 1
    )
    assert (delete.broker_leader_epoch, delete.end_offset) == (3, 1000)
    assert pickle.loads(pickle.dumps(delete)).end_offset == 1000


def test_kafkas_legacy_record_and_the_json_form_leave_the_event_attributes_out() -> None:
    """Kafka's wire format has no broker leader epoch: the legacy serde writes the same bytes
    with or without it, and what it reads back has none (so does the JSON form)."""
    from tierlog.metadata import decode_record, deserialize, record_from_json, serialize
    from tierlog.metadata.json_codec import record_to_json

    plain = _segment(custom_metadata=CustomMetadata(b"x"), cleaner_offsets={0: 50})
    update = RemoteLogSegmentMetadataUpdate(
        plain.remote_log_segment_id, 5, None, S.COPY_SEGMENT_FINISHED, 1
    )
    delete = RemotePartitionDeleteMetadata(TIP, P.DELETE_PARTITION_STARTED, 1, 1)
    with_epochs = [
        dataclasses.replace(plain, broker_leader_epoch=4),
        dataclasses.replace(update, broker_leader_epoch=4),
        dataclasses.replace(delete, broker_leader_epoch=4, end_offset=100),
    ]
    for event, bare in zip(with_epochs, [plain, update, delete], strict=True):
        assert serialize(event) == serialize(bare)
        back = deserialize(serialize(event))
        assert back == event and back.broker_leader_epoch is None
        from_json = record_from_json(record_to_json(decode_record(serialize(event)))).value
        assert from_json == event and from_json.broker_leader_epoch is None  # type: ignore[union-attr]


@pytest.mark.parametrize("epoch", [-1, 2**31, True, 1.0, "3"])
def test_broker_leader_epoch_must_be_an_int32_epoch(epoch: object) -> None:
    with pytest.raises(InvalidArgumentError, match="broker_leader_epoch"):
        dataclasses.replace(_segment(), broker_leader_epoch=epoch)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="broker_leader_epoch"):
        RemoteLogSegmentMetadataUpdate(
            _segment().remote_log_segment_id,
            1,
            None,
            RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            1,
            epoch,  # type: ignore[arg-type]
        )


@pytest.mark.parametrize("end", [-2, 2**63, True, "9"])
def test_partition_delete_end_offset_must_be_a_log_end_offset(end: object) -> None:
    with pytest.raises(InvalidArgumentError, match="end_offset"):
        RemotePartitionDeleteMetadata(
            TIP,
            RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
            1,
            1,
            end_offset=end,  # type: ignore[arg-type]
        )
