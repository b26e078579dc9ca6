"""The checks a node makes on each of its ``log.dirs`` before it uses them.

Kafka's ``LogManager.createAndValidateLogDirs`` creates a missing log directory and refuses one
that is not a readable directory, before any log is loaded: a broker that started on a directory
it cannot write would fail later, at the first append or checkpoint, far from the cause.
``prepare_log_dir`` does the same up front and answers with one ``LogDirError`` that names the
directory and the reason, which ``tierlog serve`` prints as a one-line error (no traceback).

Writability is proved by writing, not by ``os.access``: permission bits say nothing about a
read-only mount, and root passes ``access`` checks that a process without ``CAP_DAC_OVERRIDE``
would fail.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from tierlog.spi import TierlogError

__all__ = ["LogDirError", "prepare_log_dir"]

_LOG = logging.getLogger(__name__)


class LogDirError(TierlogError):
    """A log directory cannot be used (Kafka's ``KafkaStorageException`` at start-up).

    ``path`` is the directory; the message names it and says why.
    """

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


def _blocking_file(path: Path) -> Path | None:
    """The first component of ``path`` that exists and is not a directory (a regular file where
    a directory must go), if any: named in the error, it is what the user has to fix."""
    for parent in reversed((path, *path.parents)):
        if parent.exists() and not parent.is_dir():
            return parent
    return None


def prepare_log_dir(path: Path) -> None:
    """Create ``path`` if it is missing and check that it is a directory this process can list
    and write. Raises ``LogDirError`` otherwise (the message is meant for the user)."""
    if not path.exists():
        _LOG.info("Log directory %s not found, creating it.", path)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            blocking = _blocking_file(path)
            detail = f" ({blocking} is not a directory)" if blocking is not None else ""
            raise LogDirError(
                f"Cannot create log directory {path} (log.dirs): {_reason(e)}{detail}",
                path=path,
            ) from None
    if not path.is_dir():
        raise LogDirError(f"Log directory {path} (log.dirs) is not a directory", path=path)
    try:
        os.listdir(path)
    except OSError as e:
        raise LogDirError(
            f"Log directory {path} (log.dirs) is not readable: {_reason(e)}", path=path
        ) from None
    try:
        # Created and removed at once: nothing is left behind.
        with tempfile.TemporaryFile(dir=path, prefix=".tierlog-write-check-"):
            pass
    except OSError as e:
        raise LogDirError(
            f"Log directory {path} (log.dirs) is not writable: {_reason(e)}", path=path
        ) from None
