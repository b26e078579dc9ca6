"""The ``.lock`` file of a log directory: one node (or Kafka broker) per directory at a time.

Two processes appending to the same segments, writing the same checkpoints and tiering the same
partitions corrupt each other's data without any error. Kafka's ``LogManager`` prevents it with
a ``.lock`` file in each log directory, locked for the broker's lifetime; a second broker fails
at start with "Failed to acquire lock on file .lock in <dir>. A Kafka instance in another
process or thread is using this directory." ``DirLock`` is that lock for a tierlog node.

What is locked is the open file, not the file's existence: a ``.lock`` left behind by a killed
process blocks nothing, because the kernel drops a dead process's locks. Two kinds of lock are
taken on the same open file:

- ``flock``: exclusive between open files, so a second ``Node`` *in the same process* is refused
  too (POSIX ``fcntl`` record locks belong to the process and would let it through);
- on Linux, an open-file-description lock (``F_OFD_SETLK``) on the whole file: it conflicts with
  the POSIX record lock a Kafka broker's ``FileChannel.tryLock`` takes, which ``flock`` does not
  see, so a tierlog node and a Kafka broker cannot share a directory either.

The file is not deleted on release (Kafka deletes it): between one process's unlock and its
delete, another may open and lock the old file while a third creates and locks a new one, and
two owners would then both believe they hold the directory. Keeping the file costs nothing.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import Final

from tierlog.node.log_dirs import LogDirError

__all__ = ["LOCK_FILE_NAME", "DirLock", "LogDirLockedError"]

_LOG = logging.getLogger(__name__)

LOCK_FILE_NAME: Final = ".lock"
"""Kafka's ``LogManager.LockFileName``."""

_OFD_SETLK: Final[int | None] = getattr(fcntl, "F_OFD_SETLK", None)
# struct flock on 64-bit Linux: l_type, l_whence (short), l_start, l_len (off_t), l_pid (int),
# padded to 32 bytes. l_len 0 is "to the end of the file, however long", l_pid 0 as OFD needs.
_WHOLE_FILE_WRITE_LOCK: Final = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
_USE_OFD: Final = _OFD_SETLK is not None and sys.platform == "linux" and sys.maxsize > 2**32


class LogDirLockedError(LogDirError):
    """Another node or broker, in this process or another, holds the directory's ``.lock``."""


class DirLock:
    """The exclusive lock of ``directory`` (module docstring); ``acquire`` then ``release``.

    Thread-safe; ``release`` is idempotent. The directory must exist.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / LOCK_FILE_NAME
        self._fd: int | None = None
        self._mutex = threading.Lock()

    @property
    def held(self) -> bool:
        with self._mutex:
            return self._fd is not None

    def acquire(self) -> DirLock:
        """Lock the directory or raise at once: ``LogDirLockedError`` if someone holds it,
        ``LogDirError`` if the lock file cannot be created or opened."""
        with self._mutex:
            if self._fd is not None:
                return self
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise LogDirError(
                    f"Failed to create lock file {self.path} (log.dirs): {e.strerror or e}",
                    path=self.directory,
                ) from None
            try:
                locked = _try_lock(fd)
            except OSError as e:
                os.close(fd)
                raise LogDirError(
                    f"Failed to lock file {self.path} (log.dirs): {e.strerror or e}",
                    path=self.directory,
                ) from None
            if not locked:
                os.close(fd)
                raise LogDirLockedError(
                    f"Failed to acquire lock on file {LOCK_FILE_NAME} in {self.directory}. A "
                    "tierlog node or Kafka broker in another process or thread is using this "
                    "directory.",
                    path=self.directory,
                )
            self._fd = fd
        _LOG.debug("Locked %s", self.path)
        return self

    def release(self) -> None:
        """Unlock (closing the file drops both locks). Idempotent."""
        with self._mutex:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
            _LOG.debug("Unlocked %s", self.path)

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"DirLock({str(self.directory)!r}, held={self.held})"


def _try_lock(fd: int) -> bool:
    """Take both locks on ``fd`` without waiting; False if either is held elsewhere."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    if _USE_OFD and _OFD_SETLK is not None:
        try:
            fcntl.fcntl(fd, _OFD_SETLK, _WHOLE_FILE_WRITE_LOCK)
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EAGAIN):
                fcntl.flock(fd, fcntl.LOCK_UN)
                return False
            if e.errno != errno.EINVAL:  # EINVAL: a kernel without OFD locks (before 3.15)
                fcntl.flock(fd, fcntl.LOCK_UN)
                raise
    return True
