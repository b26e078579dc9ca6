"""Each log directory is locked for a node's lifetime (``tierlog.node.dir_lock``): a second node
in this process, a node or a Kafka-like broker in another process, are refused at start; a
closed node, or a killed process, leaves the directory free."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tierlog.node import DirLock, LogDirError, LogDirLockedError, Node
from tierlog.node.dir_lock import LOCK_FILE_NAME
from tierlog.spi import IllegalStateError

HOLD_WITH_DIR_LOCK = """
import sys
from pathlib import Path
from tierlog.node.dir_lock import DirLock
DirLock(Path(sys.argv[1])).acquire()
print("locked", flush=True)
sys.stdin.read()  # hold it until the test closes stdin
"""

HOLD_LIKE_A_KAFKA_BROKER = """
import fcntl, os, sys
fd = os.open(os.path.join(sys.argv[1], ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # F_SETLK, as Java's FileChannel.tryLock
print("locked", flush=True)
sys.stdin.read()
"""


def props(log_dirs: Path | str, remote: bool = False) -> dict[str, object]:
    return {
        "log.dirs": log_dirs,
        "remote.log.storage.system.enable": str(remote).lower(),
        "log.retention.check.interval.ms": "3600000",
    }


@contextmanager
def held_by_another_process(directory: Path, script: str) -> Iterator[subprocess.Popen[str]]:
    directory.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the child holds the lock (or dies)
        assert line == "locked\n", proc.communicate(timeout=60)[1]
        yield proc
    finally:
        if proc.poll() is None:
            proc.communicate(input="", timeout=60)  # closing stdin ends it


def locked_message(directory: Path) -> str:
    return f"Failed to acquire lock on file .lock in {directory}. A tierlog node or Kafka broker"


@pytest.mark.parametrize("remote", [False, True])
def test_a_second_node_in_the_same_process_is_refused(tmp_path: Path, remote: bool) -> None:
    logs = tmp_path / "logs"
    with Node(props(logs, remote)) as first:
        first.create_topic("t")
        second = Node(props(logs, remote))
        with pytest.raises(LogDirLockedError) as refused:
            second.start()
        assert str(refused.value).startswith(locked_message(logs))
        assert refused.value.path == logs
        with pytest.raises(IllegalStateError, match="closed"):
            second.start()  # a failed start closed it
        # The first node is untouched: still the owner, still serving.
        first.produce("t", [b"still mine"])
        assert [r.value for r in first.fetch("t", 0, 0).records] == [b"still mine"]
        with pytest.raises(LogDirLockedError):
            DirLock(logs).acquire()
    # Closed: the directory is free again, for a node or anyone else.
    with DirLock(logs) as lock:
        assert lock.held
    with Node(props(logs, remote)) as third:
        assert [r.value for r in third.fetch("t", 0, 0).records] == [b"still mine"]


def test_a_node_in_another_process_holding_the_lock_is_refused(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    expected = re.escape(locked_message(logs))
    with (
        held_by_another_process(logs, HOLD_WITH_DIR_LOCK),
        pytest.raises(LogDirLockedError, match=expected),
    ):
        Node(props(logs)).start()
    with Node(props(logs)) as node:  # the holder ended: free
        node.create_topic("t")


@pytest.mark.skipif(sys.platform != "linux", reason="open-file-description locks are Linux's")
def test_a_kafka_broker_holding_the_directory_is_refused(tmp_path: Path) -> None:
    # A broker locks .lock with a POSIX record lock (FileChannel.tryLock), which flock ignores.
    logs = tmp_path / "logs"
    with held_by_another_process(logs, HOLD_LIKE_A_KAFKA_BROKER), pytest.raises(LogDirLockedError):
        Node(props(logs)).start()
    with Node(props(logs)):
        pass


def test_a_stale_lock_file_does_not_block(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / LOCK_FILE_NAME).write_text("left behind\n")  # a file nobody has open
    with Node(props(logs)):
        assert (logs / LOCK_FILE_NAME).exists()
    # The lock of a process killed without any cleanup dies with it.
    with held_by_another_process(logs, HOLD_WITH_DIR_LOCK) as holder:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    assert (logs / LOCK_FILE_NAME).exists()
    with Node(props(logs)) as node:
        node.create_topic("t")


def test_every_log_dir_is_locked_and_a_failed_start_releases_those_it_took(
    tmp_path: Path,
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    with Node(props(f"{a},{b}")):
        for directory in (a, b):
            assert (directory / LOCK_FILE_NAME).exists()
            with pytest.raises(LogDirLockedError):
                DirLock(directory).acquire()
    with DirLock(b):
        node = Node(props(f"{a},{b}"))
        with pytest.raises(LogDirLockedError, match=f"in {b}"):
            node.start()
        with DirLock(a) as lock_a:  # a was locked, then released when the start failed
            assert lock_a.held


def test_dir_lock_acquire_is_reentrant_and_release_idempotent(tmp_path: Path) -> None:
    lock = DirLock(tmp_path)
    assert lock.acquire() is lock.acquire()
    assert lock.held and "held=True" in repr(lock)
    lock.release()
    lock.release()
    assert not lock.held
    with DirLock(tmp_path):
        pass


def test_dir_lock_in_a_missing_directory_is_a_log_dir_error(tmp_path: Path) -> None:
    with pytest.raises(LogDirError, match="Failed to create lock file") as failed:
        DirLock(tmp_path / "missing").acquire()
    assert not isinstance(failed.value, LogDirLockedError)
