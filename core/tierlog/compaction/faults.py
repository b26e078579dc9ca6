"""Named points where a crash test kills the process running a round (``kill -9``).

A round's steps that leave state behind (an upload, a publication, a swap, a deletion) call
``fault_point(name)``. Nothing happens unless the environment variable
``TIERLOG_COMPACTION_KILL_AT`` names that point: then the process sends itself SIGKILL there,
exactly as ``kill -9`` from outside would, at a known step instead of a random moment.
``name@N`` kills at the N-th time the point is reached (1-based) in the process;
``TIERLOG_COMPACTION_KILL_ONCE=<path>`` makes the kill happen only if that file does not exist
yet (it is created first), so a Spark task retried after its worker died does not die again.

Points: ``upload.copied`` (a cleaned segment is in remote storage, not yet returned to the
driver), ``publish.started`` (COPY_SEGMENT_STARTED published, FINISHED not yet),
``publish.finished`` (one segment fully published), ``swap.cleaned`` (a local group written,
not yet swapped in), ``delete.started`` (DELETE_SEGMENT_STARTED published, data not yet
deleted), ``delete.data`` (data deleted, DELETE_SEGMENT_FINISHED not yet).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Final

__all__ = ["KILL_AT", "KILL_ONCE", "POINTS", "fault_point"]

KILL_AT: Final = "TIERLOG_COMPACTION_KILL_AT"
KILL_ONCE: Final = "TIERLOG_COMPACTION_KILL_ONCE"
POINTS: Final = frozenset(
    {
        "upload.copied",
        "publish.started",
        "publish.finished",
        "swap.cleaned",
        "delete.started",
        "delete.data",
    }
)

_COUNTS: dict[str, int] = {}
_LOCK = threading.Lock()


def fault_point(name: str) -> None:
    """Kill this process here if the environment asks for it (see the module docstring)."""
    wanted = os.environ.get(KILL_AT)
    if not wanted:
        return
    point, _, nth = wanted.partition("@")
    if point != name:
        return
    with _LOCK:
        _COUNTS[name] = count = _COUNTS.get(name, 0) + 1
    if count != (int(nth) if nth else 1):
        return
    once = os.environ.get(KILL_ONCE)
    if once:
        try:
            fd = os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return
        os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)
