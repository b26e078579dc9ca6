"""Text checkpoints of a partition: ``leader-epoch-checkpoint`` and ``partition.metadata``.

**leader-epoch-checkpoint** (Kafka's ``CheckpointFile`` with ``LeaderEpochCheckpointFile``'s
formatter) records at which offset each leader epoch started::

    0            <- version
    2            <- number of entries
    0 0          <- "<epoch> <startOffset>"
    1 100

Every line ends with ``\\n`` (Java's ``BufferedWriter.newLine()`` on Linux). The RLM ships the
same text, in memory, as a segment's ``leader_epoch_index`` (Kafka's ``epochEntriesAsByteBuffer``),
so ``encode_leader_epoch_checkpoint`` and ``parse_leader_epoch_checkpoint`` work on bytes and the
file functions are thin wrappers. The reader follows Kafka's ``CheckpointReadBuffer``: an empty
file, or a file with only the version line, holds no entries; lines end at ``\\n``, ``\\r`` or
``\\r\\n``; an entry line is split on runs of Java whitespace and must give exactly two integers
(a leading space gives an empty first field, so it is malformed, as in Kafka); the count must
match. Every error is ``CorruptCheckpointError`` naming the file, the line number and the byte
position of the line.

**partition.metadata** (Kafka's ``PartitionMetadataFile``) holds the topic id::

    version: 0
    topic_id: <22-character base64url Uuid>

Kafka writes it *without* a trailing newline. Its reader splits each of the first two lines on
``:`` followed by whitespace, accepts any version >= 0 (for downgrades), and refuses the zero
Uuid; so does this one.

Both files are replaced atomically as Kafka does: written to ``<name>.tmp``, flushed and
``fsync``-ed, renamed over the final name, and the directory ``fsync``-ed, so a crash leaves the
old file or the new one, never a mix.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

from tierlog._durable import atomic_write
from tierlog.spi import ZERO_UUID, CorruptRecordError, InvalidArgumentError, Uuid

__all__ = [
    "LEADER_EPOCH_CHECKPOINT_VERSION",
    "PARTITION_METADATA_VERSION",
    "CorruptCheckpointError",
    "EpochEntry",
    "PartitionMetadata",
    "atomic_write",
    "encode_leader_epoch_checkpoint",
    "parse_leader_epoch_checkpoint",
    "parse_partition_metadata",
    "read_leader_epoch_checkpoint",
    "read_partition_metadata",
    "write_leader_epoch_checkpoint",
    "write_partition_metadata",
]

_LOG = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT_VERSION: Final = 0
PARTITION_METADATA_VERSION: Final = 0

_MIN_INT32: Final = -(1 << 31)
_MAX_INT32: Final = (1 << 31) - 1
_MIN_INT64: Final = -(1 << 63)
_MAX_INT64: Final = (1 << 63) - 1
# Java's Integer/Long.parseInt: an optional sign and decimal digits (ASCII here; Java would also
# take other Unicode digits, which Kafka never writes).
_JAVA_INT: Final = re.compile(r"[+-]?[0-9]+")
# Java's \s is [ \t\n\x0B\f\r].
_JAVA_WHITESPACE: Final = re.compile(r"[ \t\n\x0b\x0c\r]+")
_METADATA_SEPARATOR: Final = re.compile(r":[ \t\n\x0b\x0c\r]+")
_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")


class CorruptCheckpointError(CorruptRecordError):
    """A checkpoint or metadata file is malformed; ``line`` is the 1-based line, if known."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        position: int | None = None,
        line: int | None = None,
    ) -> None:
        super().__init__(message, path=path, position=position)
        self.line = line


class EpochEntry(NamedTuple):
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


# Shared helpers --------------------------------------------------------------------------------
def _java_split(pattern: re.Pattern[str], text: str) -> list[str]:
    """Java's ``Pattern.split(text)``: trailing empty strings are dropped, a leading one kept."""
    if text == "":
        return [""]
    parts = pattern.split(text)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _java_lines(text: str) -> list[tuple[int, str]]:
    """The lines ``BufferedReader.readLine`` returns for ``text``, with their character offsets."""
    lines: list[tuple[int, str]] = []
    start = 0
    for match in _LINE_BREAK.finditer(text):
        lines.append((start, text[start : match.start()]))
        start = match.end()
    if start < len(text):
        lines.append((start, text[start:]))
    return lines


def _decode_text(data: bytes | str, path: str | None) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = f" {path}" if path else ""
        raise CorruptCheckpointError(
            f"checkpoint file{where} is not valid UTF-8 at byte {exc.start}",
            path=path,
            position=exc.start,
        ) from exc


def _byte_position(text: str, char_position: int) -> int:
    return len(text[:char_position].encode("utf-8"))


def _parse_int(text: str, low: int, high: int) -> int | None:
    if not _JAVA_INT.fullmatch(text):
        return None
    value = int(text)
    return value if low <= value <= high else None


# leader-epoch-checkpoint -----------------------------------------------------------------------
def encode_leader_epoch_checkpoint(entries: Iterable[EpochEntry | tuple[int, int]]) -> bytes:
    """The checkpoint text Kafka writes for ``entries``, e.g. ``b"0\\n2\\n0 0\\n1 100\\n"``.

    Epochs must be int32 and start offsets int64 (``InvalidArgumentError`` otherwise); the order
    is kept as given, as Kafka does.
    """
    items = [EpochEntry(*entry) for entry in entries]
    lines = [str(LEADER_EPOCH_CHECKPOINT_VERSION), str(len(items))]
    for epoch, start_offset in items:
        if not (
            isinstance(epoch, int)
            and isinstance(start_offset, int)
            and _MIN_INT32 <= epoch <= _MAX_INT32
            and _MIN_INT64 <= start_offset <= _MAX_INT64
        ):
            raise InvalidArgumentError(
                f"a leader epoch entry is (int32 epoch, int64 start offset), got "
                f"({epoch!r}, {start_offset!r})"
            )
        lines.append(f"{epoch} {start_offset}")
    return ("\n".join(lines) + "\n").encode("ascii")


def parse_leader_epoch_checkpoint(
    data: bytes | str, *, path: str | None = None
) -> list[EpochEntry]:
    """Parse leader epoch checkpoint text (a file's content or a remote segment's epoch index).

    ``path`` only names the source in errors. See the module docstring for the exact rules.
    """
    text = _decode_text(data, path)
    lines = _java_lines(text)
    where = f" [{path}]" if path else ""

    def malformed(number: int, reason: str = "") -> CorruptCheckpointError:
        char_at, line = lines[number - 1]
        detail = f" ({reason})" if reason else ""
        return CorruptCheckpointError(
            f"malformed line {number} in checkpoint file{where}: {line!r}{detail}",
            path=path,
            position=_byte_position(text, char_at),
            line=number,
        )

    if not lines:
        return []
    version = _parse_int(lines[0][1], _MIN_INT32, _MAX_INT32)
    if version is None:
        raise malformed(1, "the version is not an integer")
    if version != LEADER_EPOCH_CHECKPOINT_VERSION:
        raise CorruptCheckpointError(
            f"unrecognised version {version}, expected version "
            f"{LEADER_EPOCH_CHECKPOINT_VERSION}, in checkpoint file{where}",
            path=path,
            position=0,
            line=1,
        )
    if len(lines) == 1:
        return []
    expected = _parse_int(lines[1][1], _MIN_INT32, _MAX_INT32)
    if expected is None:
        raise malformed(2, "the entry count is not an integer")
    entries: list[EpochEntry] = []
    for number in range(3, len(lines) + 1):
        fields = _java_split(_JAVA_WHITESPACE, lines[number - 1][1])
        if len(fields) != 2:
            raise malformed(number, "expected '<epoch> <start offset>'")
        epoch = _parse_int(fields[0], _MIN_INT32, _MAX_INT32)
        start_offset = _parse_int(fields[1], _MIN_INT64, _MAX_INT64)
        if epoch is None or start_offset is None:
            raise malformed(number, "expected an int32 epoch and an int64 start offset")
        entries.append(EpochEntry(epoch, start_offset))
    if len(entries) != expected:
        raise CorruptCheckpointError(
            f"expected [{expected}] entries in checkpoint file{where}, but found only "
            f"[{len(entries)}]",
            path=path,
            position=_byte_position(text, lines[1][0]),
            line=2,
        )
    return entries


def read_leader_epoch_checkpoint(path: str | os.PathLike[str]) -> list[EpochEntry]:
    """Read a ``leader-epoch-checkpoint`` file (``FileNotFoundError`` if it does not exist)."""
    return parse_leader_epoch_checkpoint(Path(path).read_bytes(), path=str(path))


def write_leader_epoch_checkpoint(
    path: str | os.PathLike[str],
    entries: Iterable[EpochEntry | tuple[int, int]],
    *,
    sync: bool = True,
) -> None:
    """Atomically replace a ``leader-epoch-checkpoint`` file with ``entries``."""
    atomic_write(path, encode_leader_epoch_checkpoint(entries), sync=sync)


# partition.metadata ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """The content of ``partition.metadata``: a format version and the partition's topic id."""

    version: int
    topic_id: Uuid

    def encode(self) -> str:
        """Kafka's text: ``version: 0\\ntopic_id: <id>``, no trailing newline."""
        return f"version: {self.version}\ntopic_id: {self.topic_id}"


def parse_partition_metadata(data: bytes | str, *, path: str | None = None) -> PartitionMetadata:
    """Parse ``partition.metadata`` as Kafka's ``PartitionMetadataReadBuffer``.

    Lines after the second are ignored, as in Kafka; the field names are not checked (Kafka
    does not check them either).
    """
    text = _decode_text(data, path)
    lines = _java_lines(text)
    where = f" [{path}]" if path else ""

    def malformed(number: int, reason: str) -> CorruptCheckpointError:
        if number > len(lines):
            return CorruptCheckpointError(
                f"partition metadata file{where} ends before line {number} ({reason})",
                path=path,
                position=len(text.encode("utf-8")),
                line=number,
            )
        char_at, line = lines[number - 1]
        return CorruptCheckpointError(
            f"malformed line {number} in partition metadata file{where}: {line!r} ({reason})",
            path=path,
            position=_byte_position(text, char_at),
            line=number,
        )

    if not lines:
        raise malformed(1, "expected 'version: <n>'")
    version_fields = _java_split(_METADATA_SEPARATOR, lines[0][1])
    if len(version_fields) != 2:
        raise malformed(1, "expected 'version: <n>'")
    version = _parse_int(version_fields[1], _MIN_INT32, _MAX_INT32)
    if version is None:
        raise malformed(1, "the version is not an integer")
    if version < PARTITION_METADATA_VERSION:
        raise CorruptCheckpointError(
            f"unrecognized version of partition metadata file{where}: {version}",
            path=path,
            position=0,
            line=1,
        )
    if len(lines) < 2:
        raise malformed(2, "expected 'topic_id: <id>'")
    id_fields = _java_split(_METADATA_SEPARATOR, lines[1][1])
    if len(id_fields) != 2:
        raise malformed(2, "expected 'topic_id: <id>'")
    id_text = id_fields[1]
    if len(id_text) == 24 and id_text.endswith("=="):
        id_text = id_text[:22]  # Kafka's Uuid.fromString also accepts the padded form
    try:
        topic_id = Uuid.from_string(id_text)
    except InvalidArgumentError as exc:
        raise malformed(2, str(exc)) from exc
    if topic_id == ZERO_UUID:
        raise malformed(2, "invalid topic ID: the zero Uuid")
    return PartitionMetadata(version, topic_id)


def read_partition_metadata(path: str | os.PathLike[str]) -> PartitionMetadata:
    """Read ``partition.metadata`` (``FileNotFoundError`` if it does not exist)."""
    return parse_partition_metadata(Path(path).read_bytes(), path=str(path))


def write_partition_metadata(
    path: str | os.PathLike[str], topic_id: Uuid, *, sync: bool = True
) -> None:
    """Atomically write ``partition.metadata`` for ``topic_id`` in Kafka's exact format."""
    if topic_id == ZERO_UUID:
        raise InvalidArgumentError("the zero Uuid is not a topic id")
    content = PartitionMetadata(PARTITION_METADATA_VERSION, topic_id).encode()
    atomic_write(path, content.encode("ascii"), sync=sync)
