"""Durable file-system changes, in one place: every store tierlog writes (the local RSM, the
embedded RLMM, the local log's checkpoints and snapshots) relies on the same two recipes."""

from __future__ import annotations

import errno
import os
from pathlib import Path


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make creations, renames and unlinks in ``directory`` durable.

    POSIX only persists a directory entry once the directory itself is flushed (Kafka's
    ``Utils.flushDir``). Platforms that cannot open a directory, and file systems that refuse
    ``fsync`` on one (``EINVAL``), are skipped as Kafka skips them; any other failure is raised.
    """
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # pragma: no cover - platforms that cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError as exc:  # pragma: no cover - depends on the file system
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike[str], data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old content or the new one.

    Kafka's recipe (``CheckpointFile.write`` + ``Utils.atomicMoveWithFallback``): write
    ``<path>.tmp``, flush and ``fsync`` it, rename it over ``path``, ``fsync`` the directory.
    With ``sync=False`` the two ``fsync`` calls are skipped (Kafka's unsynced snapshot writes).
    """
    target = Path(path)
    temp = target.with_name(target.name + ".tmp")
    try:
        with open(temp, "wb") as out:
            out.write(data)
            out.flush()
            if sync:
                os.fsync(out.fileno())
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if sync:
        fsync_directory(target.parent)
