"""The log directory's ``cleaner-offset-checkpoint`` (Kafka's ``OffsetCheckpointFile``): its exact
text, reads, updates and removals, malformed files named by line, atomic and serialised
rewrites."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tierlog.log.checkpoint import CorruptCheckpointError
from tierlog.log.cleaner_checkpoint import (
    CLEANER_OFFSET_CHECKPOINT_FILENAME,
    CleanerOffsetCheckpoints,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from tierlog.spi import InvalidArgumentError, TopicPartition

EVENTS_0 = TopicPartition("events", 0)
EVENTS_1 = TopicPartition("events", 1)


def test_updates_write_kafkas_text(tmp_path: Path) -> None:
    checkpoints = CleanerOffsetCheckpoints(tmp_path, sync=False)
    assert checkpoints.path == tmp_path.resolve() / CLEANER_OFFSET_CHECKPOINT_FILENAME
    assert checkpoints.read() == {}
    assert checkpoints.get(EVENTS_0) is None
    assert not checkpoints.path.exists()  # reading creates nothing
    checkpoints.update(EVENTS_1, 877)
    checkpoints.update(EVENTS_0, 1200)
    checkpoints.update(TopicPartition("a.b_c-d", 12), 0)
    assert checkpoints.path.read_bytes() == (b"0\n3\na.b_c-d 12 0\nevents 0 1200\nevents 1 877\n")
    checkpoints.update(EVENTS_0, 1500)
    assert checkpoints.read() == {
        EVENTS_0: 1500,
        EVENTS_1: 877,
        TopicPartition("a.b_c-d", 12): 0,
    }
    assert checkpoints.get(EVENTS_1) == 877
    assert [p.name for p in tmp_path.iterdir()] == [CLEANER_OFFSET_CHECKPOINT_FILENAME]


def test_remove_forgets_an_entry(tmp_path: Path) -> None:
    checkpoints = CleanerOffsetCheckpoints(tmp_path, sync=False)
    checkpoints.update(EVENTS_0, 10)
    checkpoints.update(EVENTS_1, 20)
    assert checkpoints.remove(EVENTS_0) is True
    assert checkpoints.path.read_bytes() == b"0\n1\nevents 1 20\n"
    before = checkpoints.path.stat().st_mtime_ns
    assert checkpoints.remove(EVENTS_0) is False
    assert checkpoints.path.stat().st_mtime_ns == before  # nothing to remove: not rewritten
    assert checkpoints.remove(EVENTS_1) is True
    assert checkpoints.path.read_bytes() == b"0\n0\n"
    assert checkpoints.read() == {}


def test_a_file_kafka_wrote_is_read(tmp_path: Path) -> None:
    """Kafka writes a HashMap in its own order; whitespace between fields is any run of
    blanks; a later entry for the same partition wins, as in Kafka's map."""
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT_FILENAME
    path.write_bytes(b"0\n4\nzeta 3 9\nevents 1\t877\nevents  0 5\nevents 0 1200\n")
    checkpoints = CleanerOffsetCheckpoints(tmp_path)
    assert checkpoints.read() == {
        TopicPartition("zeta", 3): 9,
        EVENTS_1: 877,
        EVENTS_0: 1200,
    }
    assert read_offset_checkpoint(path) == checkpoints.read()


def test_read_offset_checkpoint_reads_any_log_directory_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    assert read_offset_checkpoint(path) == {}
    write_offset_checkpoint(path, {EVENTS_0: 42, TopicPartition("__consumer_offsets", 7): 3})
    assert path.read_bytes() == b"0\n2\n__consumer_offsets 7 3\nevents 0 42\n"
    assert read_offset_checkpoint(path) == {
        EVENTS_0: 42,
        TopicPartition("__consumer_offsets", 7): 3,
    }
    with pytest.raises(InvalidArgumentError, match="cannot be written"):
        write_offset_checkpoint(path, {TopicPartition("a b", 0): 1})
    with pytest.raises(InvalidArgumentError, match="64-bit"):
        write_offset_checkpoint(path, {EVENTS_0: 1 << 63})
    assert read_offset_checkpoint(path)[EVENTS_0] == 42  # a refused write changed nothing


@pytest.mark.parametrize(
    ("content", "line", "what"),
    [
        (b"", 1, "the file is empty (expected the version)"),
        (b"1\n0\n", 1, "line 1 '1': unknown version 1, expected 0"),
        (b"0\n", 2, "the file ends before line 2 (expected the number of entries)"),
        (b"0\nx\n", 2, "line 2 'x': the number of entries is not an integer"),
        (b"0\n2\nevents 0 1\n", 2, "line 2 '2': 2 entries announced, 1 found"),
        (b"0\n1\nevents 0\n", 3, "line 3 'events 0': expected '<topic> <partition> <offset>'"),
        (b"0\n1\nevents 0 1 2\n", 3, "expected '<topic> <partition> <offset>'"),
        (b"0\n1\nevents p 1\n", 3, "line 3 'events p 1': the partition is not an integer"),
        (b"0\n1\nevents -1 1\n", 3, "line 3 'events -1 1': partition -1 is not a partition"),
        (b"0\n1\nevents 0 1.5\n", 3, "line 3 'events 0 1.5': the offset is not an integer"),
        (
            b"0\n1\nevents 0 9223372036854775808\n",
            3,
            "offset 9223372036854775808 is not a 64-bit integer",
        ),
        (b"0\n1\nev\xe9nts 0 1\n", 3, "line 3 is not ASCII text (byte 6)"),
    ],
)
def test_a_malformed_file_names_file_and_line(
    tmp_path: Path, content: bytes, line: int, what: str
) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT_FILENAME
    path.write_bytes(content)
    checkpoints = CleanerOffsetCheckpoints(tmp_path, sync=False)
    with pytest.raises(CorruptCheckpointError) as info:
        checkpoints.read()
    message = str(info.value)
    assert message.startswith(f"malformed offset checkpoint {path.resolve()}: ")
    assert what in message
    assert (info.value.path, info.value.line) == (str(path.resolve()), line)
    # A change is refused too, and leaves the damaged file for the operator to look at.
    with pytest.raises(CorruptCheckpointError):
        checkpoints.update(EVENTS_0, 5)
    with pytest.raises(CorruptCheckpointError):
        checkpoints.remove(EVENTS_0)
    assert path.read_bytes() == content


def test_offsets_must_be_offsets(tmp_path: Path) -> None:
    checkpoints = CleanerOffsetCheckpoints(tmp_path, sync=False)
    for bad in (-1, True, 1.0):
        with pytest.raises(InvalidArgumentError, match="must be an offset"):
            checkpoints.update(EVENTS_0, bad)  # type: ignore[arg-type]
    assert not checkpoints.path.exists()


def test_a_crash_before_the_rename_leaves_the_old_file(tmp_path: Path) -> None:
    """The rewrite goes through ``<file>.tmp``: a crash before the rename leaves the previous
    entries readable (the temporary file is not read, and the next update replaces it)."""
    checkpoints = CleanerOffsetCheckpoints(tmp_path)
    checkpoints.update(EVENTS_0, 100)
    tmp = checkpoints.path.with_name(CLEANER_OFFSET_CHECKPOINT_FILENAME + ".tmp")
    tmp.write_bytes(b"0\n1\nevents 0 ")  # what a crash in the middle of a write leaves
    assert checkpoints.get(EVENTS_0) == 100
    checkpoints.update(EVENTS_0, 200)
    assert checkpoints.get(EVENTS_0) == 200
    assert not tmp.exists()


def test_concurrent_updates_from_several_instances_lose_nothing(tmp_path: Path) -> None:
    """Each partition's cleaner updates the same directory's file through its own instance; the
    read-modify-write is serialised per file, so no update is lost."""
    threads_count, per_thread = 8, 25
    start = threading.Barrier(threads_count)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        checkpoints = CleanerOffsetCheckpoints(tmp_path, sync=False)
        start.wait()
        try:
            for offset in range(per_thread):
                checkpoints.update(TopicPartition("events", n), offset)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(threads_count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert CleanerOffsetCheckpoints(tmp_path).read() == {
        TopicPartition("events", n): per_thread - 1 for n in range(threads_count)
    }
