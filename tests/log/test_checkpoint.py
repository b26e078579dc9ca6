"""``leader-epoch-checkpoint`` and ``partition.metadata`` exactly as Kafka writes and reads them."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.log.checkpoint import (
    CorruptCheckpointError,
    EpochEntry,
    PartitionMetadata,
    atomic_write,
    encode_leader_epoch_checkpoint,
    parse_leader_epoch_checkpoint,
    parse_partition_metadata,
    read_leader_epoch_checkpoint,
    read_partition_metadata,
    write_leader_epoch_checkpoint,
    write_partition_metadata,
)
from tierlog.log.files import leader_epoch_checkpoint_file, partition_metadata_file
from tierlog.spi import CorruptRecordError, InvalidArgumentError, Uuid

TOPIC_ID = Uuid.from_string("vDmi4mSbRoKvaZ0kZbQ3Xw")


# leader-epoch-checkpoint: writing ------------------------------------------------------------
def test_checkpoint_bytes_as_kafka_writes_them() -> None:
    assert encode_leader_epoch_checkpoint([EpochEntry(0, 0), EpochEntry(1, 100)]) == (
        b"0\n2\n0 0\n1 100\n"
    )
    assert encode_leader_epoch_checkpoint([]) == b"0\n0\n"
    # RemoteLogManagerTest.testEpochEntriesAsByteBuffer: version, size, "epoch startOffset".
    assert encode_leader_epoch_checkpoint([(0, 1)]).split(b"\n")[:3] == [b"0", b"1", b"0 1"]
    assert encode_leader_epoch_checkpoint([(-1, -1)]) == b"0\n1\n-1 -1\n"
    assert encode_leader_epoch_checkpoint([(2**31 - 1, 2**63 - 1)]) == (
        b"0\n1\n2147483647 9223372036854775807\n"
    )


@pytest.mark.parametrize("entry", [(2**31, 0), (0, 2**63), (-(2**31) - 1, 0), ("1", 0), (1.0, 0)])
def test_checkpoint_refuses_out_of_range_entries(entry: tuple[object, object]) -> None:
    with pytest.raises(InvalidArgumentError):
        encode_leader_epoch_checkpoint([entry])  # type: ignore[list-item]


def test_write_and_read_file(tmp_path: Path) -> None:
    path = leader_epoch_checkpoint_file(tmp_path)
    write_leader_epoch_checkpoint(path, [EpochEntry(0, 0), EpochEntry(3, 250)])
    assert path.read_bytes() == b"0\n2\n0 0\n3 250\n"
    assert read_leader_epoch_checkpoint(path) == [(0, 0), (3, 250)]
    write_leader_epoch_checkpoint(path, [EpochEntry(4, 300)], sync=False)
    assert read_leader_epoch_checkpoint(path) == [(4, 300)]
    assert sorted(os.listdir(tmp_path)) == ["leader-epoch-checkpoint"]  # no .tmp left


def test_atomic_write_leaves_old_content_when_writing_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_leader_epoch_checkpoint(path, [EpochEntry(1, 1)])

    def boom(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_leader_epoch_checkpoint(path, [EpochEntry(2, 2)])
    assert path.read_bytes() == b"0\n1\n1 1\n"
    assert not (tmp_path / "leader-epoch-checkpoint.tmp").exists()


def test_atomic_write_uses_kafkas_temp_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        seen.append((Path(src).name, Path(dst).name))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    atomic_write(tmp_path / "x", b"data")
    assert seen == [("x.tmp", "x")]
    assert (tmp_path / "x").read_bytes() == b"data"


# leader-epoch-checkpoint: reading -------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"0\n2\n0 0\n1 100\n", [(0, 0), (1, 100)]),
        (b"0\n2\n0 0\n1 100", [(0, 0), (1, 100)]),  # no final newline
        (b"0\r\n2\r\n0 0\r\n1 100\r\n", [(0, 0), (1, 100)]),  # readLine takes \r\n and \r
        (b"0\r2\r0 0\r1 100", [(0, 0), (1, 100)]),
        (b"0\n2\n0\t\t0\n1   100  \n", [(0, 0), (1, 100)]),  # split on \s+, trailing dropped
        (b"", []),  # Kafka: an empty file has no entries
        (b"0\n", []),  # ... and neither has a file with only the version
        (b"0", []),
        (b"0\n0\n", []),
        (b"+0\n1\n+5 -7\n", [(5, -7)]),  # Integer.parseInt takes a sign
    ],
)
def test_parse_like_kafka(text: bytes, expected: list[tuple[int, int]]) -> None:
    assert parse_leader_epoch_checkpoint(text) == expected
    assert parse_leader_epoch_checkpoint(text.decode()) == expected


@pytest.mark.parametrize(
    ("text", "line", "position", "words"),
    [
        (b"1\n0\n", 1, 0, "unrecognised version 1"),
        (b"x\n0\n", 1, 0, "malformed line 1"),
        (b" 0\n0\n", 1, 0, "malformed line 1"),
        (b"0\nmany\n", 2, 2, "malformed line 2"),
        (b"0\n1\n0 0 0\n", 3, 4, "malformed line 3"),
        (b"0\n1\n 0 0\n", 3, 4, "malformed line 3"),  # leading space: empty first field
        (b"0\n1\n0\n", 3, 4, "malformed line 3"),
        (b"0\n2\n0 0\n\n", 4, 8, "malformed line 4"),  # an empty line is an entry line
        (b"0\n1\n0 x\n", 3, 4, "malformed line 3"),
        (b"0\n1\n2147483648 0\n", 3, 4, "malformed line 3"),
        (b"0\n1\n0 9223372036854775808\n", 3, 4, "malformed line 3"),
        (b"0\n1\n0 0x10\n", 3, 4, "malformed line 3"),
        (b"0\n1\n0 1_0\n", 3, 4, "malformed line 3"),  # Python int() would take it
        (b"0\n1\n\xd9\xa1 0\n", 3, 4, "malformed line 3"),  # non-ASCII digits
        (b"0\n3\n0 0\n1 100\n", 2, 2, "expected [3] entries"),
        (b"0\n1\n0 0\n1 100\n", 2, 2, "expected [1] entries"),
    ],
)
def test_malformed_content_names_file_and_line(
    tmp_path: Path, text: bytes, line: int, position: int, words: str
) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(text)
    with pytest.raises(CorruptCheckpointError) as info:
        read_leader_epoch_checkpoint(path)
    error = info.value
    assert isinstance(error, CorruptRecordError)
    assert (error.line, error.position, error.path) == (line, position, str(path))
    assert words in str(error) and str(path) in str(error)


def test_invalid_utf8_is_corrupt() -> None:
    with pytest.raises(CorruptCheckpointError) as info:
        parse_leader_epoch_checkpoint(b"0\n1\n0 \xff\n", path="mem")
    assert info.value.position == 6 and info.value.path == "mem"


def test_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_leader_epoch_checkpoint(tmp_path / "leader-epoch-checkpoint")


entries_strategy = st.lists(
    st.builds(EpochEntry, st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)),
    max_size=30,
)


@given(entries_strategy)
def test_round_trip(entries: list[EpochEntry]) -> None:
    data = encode_leader_epoch_checkpoint(entries)
    assert parse_leader_epoch_checkpoint(data) == entries
    lines = data.decode().split("\n")
    assert lines[0] == "0" and lines[1] == str(len(entries)) and lines[-1] == ""


@settings(max_examples=300)
@given(st.one_of(st.binary(max_size=60), st.text(alphabet="0123456789 -+\t\r\nx", max_size=40)))
def test_fuzz_only_corrupt_checkpoint_error(data: bytes | str) -> None:
    try:
        entries = parse_leader_epoch_checkpoint(data)
    except CorruptCheckpointError as error:
        assert error.position is not None and error.position >= 0
        return
    assert all(isinstance(e, EpochEntry) for e in entries)


# partition.metadata ---------------------------------------------------------------------------
def test_partition_metadata_bytes_as_kafka_writes_them(tmp_path: Path) -> None:
    path = partition_metadata_file(tmp_path)
    write_partition_metadata(path, TOPIC_ID)
    # PartitionMetadata.encode(): no trailing newline.
    assert path.read_bytes() == b"version: 0\ntopic_id: vDmi4mSbRoKvaZ0kZbQ3Xw"
    assert read_partition_metadata(path) == PartitionMetadata(0, TOPIC_ID)
    assert sorted(os.listdir(tmp_path)) == ["partition.metadata"]
    with pytest.raises(InvalidArgumentError):
        write_partition_metadata(path, Uuid(0, 0))


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("version: 0\ntopic_id: vDmi4mSbRoKvaZ0kZbQ3Xw\n", 0),
        ("version: 0\r\ntopic_id: vDmi4mSbRoKvaZ0kZbQ3Xw", 0),
        ("version:\t0\ntopic_id:   vDmi4mSbRoKvaZ0kZbQ3Xw", 0),
        ("version: 3\ntopic_id: vDmi4mSbRoKvaZ0kZbQ3Xw", 3),  # newer versions are read (downgrade)
        ("v: 0\nid: vDmi4mSbRoKvaZ0kZbQ3Xw\nextra line", 0),  # names and extra lines unchecked
        ("version: 0\ntopic_id: vDmi4mSbRoKvaZ0kZbQ3Xw==", 0),  # padded base64 as Uuid.fromString
    ],
)
def test_parse_partition_metadata_like_kafka(text: str, version: int) -> None:
    assert parse_partition_metadata(text.encode()) == PartitionMetadata(version, TOPIC_ID)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("", 1),
        ("version 0\ntopic_id: vDmi4mSbRoKvaZ0kZbQ3Xw", 1),
        ("version: x\ntopic_id: vDmi4mSbRoKvaZ0kZbQ3Xw", 1),
        ("version: -1\ntopic_id: vDmi4mSbRoKvaZ0kZbQ3Xw", 1),
        ("version: 0", 2),
        ("version: 0\n", 2),
        ("version: 0\ntopic_id:vDmi4mSbRoKvaZ0kZbQ3Xw", 2),
        ("version: 0\ntopic_id: short", 2),
        ("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", 2),  # the zero Uuid
        ("version: 0: 1\ntopic_id: vDmi4mSbRoKvaZ0kZbQ3Xw", 1),
    ],
)
def test_partition_metadata_errors(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / "partition.metadata"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError) as info:
        read_partition_metadata(path)
    assert info.value.line == line and info.value.path == str(path)
    assert str(path) in str(info.value)


@given(st.builds(Uuid, st.integers(0, 2**64 - 1), st.integers(1, 2**64 - 1)))
def test_partition_metadata_round_trip(topic_id: Uuid) -> None:
    text = PartitionMetadata(0, topic_id).encode()
    assert parse_partition_metadata(text) == PartitionMetadata(0, topic_id)


@settings(max_examples=300)
@given(st.binary(max_size=80))
def test_partition_metadata_fuzz(data: bytes) -> None:
    with contextlib.suppress(CorruptCheckpointError):
        parse_partition_metadata(data)
