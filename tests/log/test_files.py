"""Kafka's file and directory names (``LogFileUtils``, ``LocalLog.parseTopicPartitionName``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.log import files
from tierlog.log.files import (
    LogDirName,
    SegmentFileName,
    filename_prefix_from_offset,
    offset_from_file_name,
    parse_log_dir_name,
    parse_segment_file_name,
    parse_topic_partition_name,
)
from tierlog.spi import InvalidArgumentError, TopicPartition

UNIQUE = "0123456789abcdef0123456789abcdef"


def test_prefix_is_twenty_zero_padded_digits() -> None:
    assert filename_prefix_from_offset(0) == "00000000000000000000"
    assert filename_prefix_from_offset(100) == "00000000000000000100"
    assert filename_prefix_from_offset(2**63 - 1) == "09223372036854775807"
    for bad in (-1, 2**63):
        with pytest.raises(InvalidArgumentError):
            filename_prefix_from_offset(bad)


def test_segment_file_names(tmp_path: Path) -> None:
    assert files.log_file(tmp_path, 100) == tmp_path / "00000000000000000100.log"
    assert files.offset_index_file(tmp_path, 100) == tmp_path / "00000000000000000100.index"
    assert files.time_index_file(tmp_path, 5) == tmp_path / "00000000000000000005.timeindex"
    assert files.transaction_index_file(tmp_path, 5) == tmp_path / "00000000000000000005.txnindex"
    assert files.producer_snapshot_file(tmp_path, 7) == tmp_path / "00000000000000000007.snapshot"
    assert files.log_file(tmp_path, 1, ".deleted").name == "00000000000000000001.log.deleted"
    assert files.offset_index_file(tmp_path, 1, ".swap").name == "00000000000000000001.index.swap"
    assert files.time_index_file(tmp_path, 1, ".cleaned").name.endswith(".timeindex.cleaned")
    assert files.leader_epoch_checkpoint_file(tmp_path) == tmp_path / "leader-epoch-checkpoint"
    assert files.partition_metadata_file(tmp_path) == tmp_path / "partition.metadata"
    with pytest.raises(InvalidArgumentError):
        files.log_file(tmp_path, 1, ".bak")


def test_offset_from_file_name() -> None:
    assert offset_from_file_name("00000000000000000100.log") == 100
    assert offset_from_file_name("/x/y/00000000000000000100.timeindex.deleted") == 100
    assert offset_from_file_name("5.log") == 5  # Kafka reads any number of digits
    for bad in (
        "leader-epoch-checkpoint",
        "abc.log",
        ".log",
        "100",
        "-1.log",
        "99999999999999999999.log",
    ):
        with pytest.raises(InvalidArgumentError):
            offset_from_file_name(bad)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("00000000000000000100.log", SegmentFileName(100, ".log")),
        ("00000000000000000100.index", SegmentFileName(100, ".index")),
        ("00000000000000000100.timeindex", SegmentFileName(100, ".timeindex")),
        ("00000000000000000100.txnindex", SegmentFileName(100, ".txnindex")),
        ("00000000000000000100.snapshot", SegmentFileName(100, ".snapshot")),
        ("00000000000000000100.log.deleted", SegmentFileName(100, ".log", ".deleted")),
        ("00000000000000000100.index.swap", SegmentFileName(100, ".index", ".swap")),
        ("00000000000000000100.timeindex.cleaned", SegmentFileName(100, ".timeindex", ".cleaned")),
        ("leader-epoch-checkpoint", None),
        ("partition.metadata", None),
        ("leader-epoch-checkpoint.tmp", None),
        ("00000000000000000100.snapshot.tmp", None),
        ("00000000000000000100.snapshot.deleted", SegmentFileName(100, ".snapshot", ".deleted")),
        ("00000000000000000100.log.tmp", None),
        ("00000000000000000100.logx", None),
        ("x0000000000000000100.log", None),
    ],
)
def test_parse_segment_file_name(name: str, expected: SegmentFileName | None) -> None:
    assert parse_segment_file_name(name) == expected
    if expected is not None:
        assert str(expected) == name


def test_is_log_and_index_file() -> None:
    assert files.is_log_file("a/00000000000000000000.log")
    assert not files.is_log_file("00000000000000000000.log.deleted")
    for name in ("0.index", "0.timeindex", "0.txnindex"):
        assert files.is_index_file(name)
    assert not files.is_index_file("0.log")
    assert not files.is_index_file("0.index.swap")


def test_dir_names() -> None:
    tp = TopicPartition("my-topic.v2", 3)
    assert files.log_dir_name(tp) == "my-topic.v2-3"
    assert files.log_delete_dir_name(tp, UNIQUE) == f"my-topic.v2-3.{UNIQUE}-delete"
    assert files.log_future_dir_name(tp, UNIQUE) == f"my-topic.v2-3.{UNIQUE}-future"
    assert files.log_stray_dir_name(tp, UNIQUE) == f"my-topic.v2-3.{UNIQUE}-stray"
    random_name = files.log_delete_dir_name(tp)
    parsed = parse_log_dir_name(random_name)
    assert parsed.topic_partition == tp and parsed.suffix == "-delete"
    assert parsed.unique_id is not None and len(parsed.unique_id) == 32


def test_delete_dir_name_is_capped_at_255_characters() -> None:
    tp = TopicPartition("t" * 249, 2147483647)
    name = files.log_delete_dir_name(tp, UNIQUE)
    assert len(name) == 255
    assert name.endswith(f"-2147483647.{UNIQUE}-delete")
    parsed = parse_log_dir_name(name)
    assert parsed.topic_partition.partition == 2147483647
    assert parsed.topic_partition.topic == "t" * (255 - len(f"-2147483647.{UNIQUE}-delete"))
    # Kafka does not cap the future form.
    assert len(files.log_future_dir_name(tp, UNIQUE)) > 255


@pytest.mark.parametrize("topic", ["", ".", "..", "a/b", "../x", "a b", "t" * 250, "é"])
def test_dir_name_refuses_illegal_topics(topic: str) -> None:
    with pytest.raises(InvalidArgumentError):
        files.log_dir_name(TopicPartition(topic, 0))


def test_dir_name_refuses_bad_partition_and_unique_id() -> None:
    with pytest.raises(InvalidArgumentError):
        files.log_dir_name(TopicPartition("t", -1))
    with pytest.raises(InvalidArgumentError):
        files.log_delete_dir_name(TopicPartition("t", 0), "not-hex")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("foo-0", LogDirName(TopicPartition("foo", 0))),
        ("foo-bar-12", LogDirName(TopicPartition("foo-bar", 12))),
        ("a-b-c-7", LogDirName(TopicPartition("a-b-c", 7))),
        ("foo--1", LogDirName(TopicPartition("foo-", 1))),
        ("my.topic-0", LogDirName(TopicPartition("my.topic", 0))),
        ("__consumer_offsets-49", LogDirName(TopicPartition("__consumer_offsets", 49))),
        (f"foo-bar-3.{UNIQUE}-delete", LogDirName(TopicPartition("foo-bar", 3), "-delete", UNIQUE)),
        (
            f"my.topic-0.{UNIQUE}-future",
            LogDirName(TopicPartition("my.topic", 0), "-future", UNIQUE),
        ),
        (f"x-1.{UNIQUE}-stray", LogDirName(TopicPartition("x", 1), "-stray", UNIQUE)),
        ("/data/kafka/foo-bar-2", LogDirName(TopicPartition("foo-bar", 2))),
    ],
)
def test_parse_log_dir_name(name: str, expected: LogDirName) -> None:
    assert parse_log_dir_name(name) == expected
    assert parse_topic_partition_name(name) == expected.topic_partition


@pytest.mark.parametrize(
    "name",
    [
        "foo",  # no dash
        "foo-",  # no partition
        "-0",  # no topic
        "foo-bar",  # partition not a number
        "foo-1x",
        "foo-+1",  # Java would take the sign; Kafka never writes it
        "foo-2147483648",  # beyond int32
        "foo-delete",  # suffix without topic-partition.uniqueId
        "foo-0-delete",
        "foo-0.-delete",
        "foo-0.abc def-delete",  # whitespace is not \S
        f"foo-0.{UNIQUE}.x-delete",  # the partition text becomes "0.<id>"
        "",
    ],
)
def test_parse_log_dir_name_refuses(name: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_log_dir_name(name)


topics = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    min_size=1,
    max_size=60,
).filter(lambda t: t not in (".", ".."))


@given(topics, st.integers(0, 2**31 - 1), st.sampled_from(["", "-delete", "-future", "-stray"]))
def test_dir_name_round_trip(topic: str, partition: int, suffix: str) -> None:
    tp = TopicPartition(topic, partition)
    if suffix == "":
        name = files.log_dir_name(tp)
    elif suffix == "-delete":
        name = files.log_delete_dir_name(tp, UNIQUE)
    elif suffix == "-future":
        name = files.log_future_dir_name(tp, UNIQUE)
    else:
        name = files.log_stray_dir_name(tp, UNIQUE)
    parsed = parse_log_dir_name(name)
    assert parsed == LogDirName(tp, suffix, UNIQUE if suffix else None)


@given(
    st.integers(0, 2**63 - 1),
    st.sampled_from([".log", ".index", ".timeindex", ".txnindex"]),
    st.sampled_from(["", ".deleted", ".cleaned", ".swap"]),
)
def test_segment_file_name_round_trip(offset: int, kind: str, suffix: str) -> None:
    name = f"{filename_prefix_from_offset(offset)}{kind}{suffix}"
    assert len(name.split(".", maxsplit=1)[0]) == 20
    assert parse_segment_file_name(name) == SegmentFileName(offset, kind, suffix)
    assert offset_from_file_name(name) == offset


@given(st.text(max_size=80))
def test_parse_log_dir_name_fuzz(name: str) -> None:
    try:
        parsed = parse_log_dir_name(name)
    except InvalidArgumentError:
        return
    assert parsed.topic_partition.partition >= 0


@given(st.text(max_size=60))
def test_parse_segment_file_name_fuzz(name: str) -> None:
    parse_segment_file_name(name)  # never raises
