"""The text of Kafka's ``CheckpointFile``: a version line, a count line, then one entry per line.

Kafka keeps its log-directory checkpoints in this text (``OffsetCheckpointFile``:
``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint``, ``cleaner-offset-checkpoint``, entries
``<topic> <partition> <offset>``), and tierlog keeps its per-partition
``tierlog-offsets-checkpoint`` (entries ``<name> <value>``) in it too. ``recovery`` and
``cleaner_checkpoint`` read and write their files through this module, so both refuse the same
malformed text with the same kind of message: ``CorruptCheckpointError`` naming the file, the
1-based line, the line's text and what is wrong with it.

Reading is strict, because every file is written here or by Kafka's ``CheckpointFile`` (one
``\\n`` after each line, ASCII, integers in decimal): the text must be ASCII, the first line is
the version (which must be the one expected), the second the number of entries (which must match
the lines that follow), and each entry line must split on whitespace into exactly the expected
fields. The caller turns fields into values (``integer`` checks an integer's form). Writing is
atomic (``_durable.atomic_write``: ``.tmp``, ``fsync``, rename, directory ``fsync``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

from tierlog._durable import atomic_write
from tierlog.log.checkpoint import CorruptCheckpointError

__all__ = [
    "CheckpointEntry",
    "CheckpointText",
    "encode_checkpoint",
    "read_checkpoint",
    "write_checkpoint",
]

_INTEGER: Final = re.compile(r"-?[0-9]+")
"""What ``encode_checkpoint`` writes for a number (``int()`` alone would also take
``" 1_0 "``)."""


class CheckpointEntry(NamedTuple):
    """One entry line: its 1-based line number and its whitespace-separated fields."""

    line: int
    fields: list[str]


@dataclass(frozen=True, slots=True)
class CheckpointText:
    """A checkpoint file as read: its entries, and how to report a fault in one of them."""

    path: Path
    where: str
    """``malformed <kind> <path>``: the start of every error message about this file."""
    entries: list[CheckpointEntry]
    _lines: list[tuple[int, str]]
    _size: int

    def malformed(self, number: int, reason: str) -> CorruptCheckpointError:
        """The error for line ``number`` (1-based; past the end: the file ends before it)."""
        path = str(self.path)
        if number > len(self._lines):
            ends = f"ends before line {number}" if self._lines else "is empty"
            return CorruptCheckpointError(
                f"{self.where}: the file {ends} ({reason})",
                path=path,
                position=self._size,
                line=number,
            )
        at, line = self._lines[number - 1]
        return CorruptCheckpointError(
            f"{self.where}: line {number} {line!r}: {reason}", path=path, position=at, line=number
        )

    def integer(self, number: int, text: str, what: str) -> int:
        """``text`` of line ``number`` as an integer (``-?[0-9]+``), or the error naming it."""
        if _INTEGER.fullmatch(text) is None:
            raise self.malformed(number, f"{what} is not an integer")
        return int(text)

    def fault(self, reason: str) -> CorruptCheckpointError:
        """An error about the file as a whole (an entry missing, say)."""
        return CorruptCheckpointError(f"{self.where}: {reason}", path=str(self.path), position=0)


def read_checkpoint(
    path: str | os.PathLike[str], *, kind: str, version: int, fields: Sequence[str]
) -> CheckpointText | None:
    """Read and check the checkpoint at ``path``; None if there is no such file.

    ``kind`` names the file in messages (``malformed <kind> <path>: ...``); ``version`` is the
    only version accepted; ``fields`` names the fields of an entry line, for the message of a
    line that has another number of them (``expected '<name> <value>'``).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    where = f"malformed {kind} {path}"
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise CorruptCheckpointError(
            f"{where}: line {line} is not ASCII text (byte {e.start})",
            path=str(path),
            position=e.start,
            line=line,
        ) from e
    lines: list[tuple[int, str]] = []  # (byte position, text) of each line
    start = 0
    for part in text.split("\n"):
        lines.append((start, part))
        start += len(part) + 1
    if lines[-1][1] == "":
        lines.pop()  # the newline that ends the last line
    checkpoint = CheckpointText(path, where, [], lines, len(data))
    if not lines:
        raise checkpoint.malformed(1, "expected the version")
    found = checkpoint.integer(1, lines[0][1], "the version")
    if found != version:
        raise checkpoint.malformed(1, f"unknown version {found}, expected {version}")
    if len(lines) < 2:
        raise checkpoint.malformed(2, "expected the number of entries")
    count = checkpoint.integer(2, lines[1][1], "the number of entries")
    if count != len(lines) - 2:
        raise checkpoint.malformed(2, f"{count} entries announced, {len(lines) - 2} found")
    shape = " ".join(f"<{name}>" for name in fields)
    for number in range(3, len(lines) + 1):
        parts = lines[number - 1][1].split()
        if len(parts) != len(fields):
            raise checkpoint.malformed(number, f"expected '{shape}'")
        checkpoint.entries.append(CheckpointEntry(number, parts))
    return checkpoint


def encode_checkpoint(version: int, rows: Iterable[Sequence[object]]) -> bytes:
    """The text of a checkpoint: the version, the count, then each row's fields joined by a
    space, every line ended by ``\\n`` (what Kafka's ``CheckpointFile.write`` writes)."""
    items = [" ".join(str(field) for field in row) for row in rows]
    return f"{version}\n{len(items)}\n".encode("ascii") + "".join(
        f"{item}\n" for item in items
    ).encode("ascii")


def write_checkpoint(
    path: str | os.PathLike[str],
    version: int,
    rows: Iterable[Sequence[object]],
    *,
    sync: bool = True,
) -> None:
    """Atomically replace the checkpoint at ``path`` with ``rows``."""
    atomic_write(path, encode_checkpoint(version, rows), sync=sync)
