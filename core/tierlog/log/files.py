"""Kafka's names for the files and directories of a partition's local log.

tierlog reads partition directories written by a Kafka broker and writes directories a broker can
load, so every name here is Kafka's (``LogFileUtils`` and ``LocalLog`` in
``storage/.../internals/log``):

- a segment's files are named by its base offset as 20 zero-padded digits, no grouping:
  ``00000000000000000100.log``, ``.index``, ``.timeindex``, ``.txnindex``; a producer snapshot is
  named by *its own* offset (``.snapshot``); ``.deleted``, ``.cleaned`` and ``.swap`` are appended
  to a file's name while it is scheduled for deletion, being cleaned, or swapped in;
- a partition directory is ``<topic>-<partition>``; a directory scheduled for deletion, a future
  replica's directory and a stray partition's directory are
  ``<topic>-<partition>.<uniqueId><suffix>`` with the suffixes ``-delete``, ``-future``,
  ``-stray`` (``uniqueId`` is a random UUID's 32 hex digits);
- the leader epoch checkpoint is ``leader-epoch-checkpoint`` and the topic id file is
  ``partition.metadata``.

Topic names may contain ``-`` and ``.``, so parsing splits on the *last* ``-`` (and for the
suffixed forms first drops everything from the last ``.``), exactly as Kafka's
``parseTopicPartitionName`` does; a topic named ``a-b`` with partition 3 lives in ``a-b-3``.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tierlog.spi import InvalidArgumentError, TopicPartition

__all__ = [
    "CLEANED_FILE_SUFFIX",
    "DELETED_FILE_SUFFIX",
    "DELETE_DIR_SUFFIX",
    "FUTURE_DIR_SUFFIX",
    "INDEX_FILE_SUFFIX",
    "LEADER_EPOCH_CHECKPOINT_FILENAME",
    "LOG_FILE_SUFFIX",
    "PARTITION_METADATA_FILENAME",
    "PRODUCER_SNAPSHOT_FILE_SUFFIX",
    "STRAY_DIR_SUFFIX",
    "SWAP_FILE_SUFFIX",
    "TIME_INDEX_FILE_SUFFIX",
    "TXN_INDEX_FILE_SUFFIX",
    "LogDirName",
    "SegmentFileName",
    "filename_prefix_from_offset",
    "is_index_file",
    "is_log_file",
    "leader_epoch_checkpoint_file",
    "log_delete_dir_name",
    "log_dir_name",
    "log_file",
    "log_future_dir_name",
    "log_stray_dir_name",
    "offset_from_file_name",
    "offset_index_file",
    "parse_log_dir_name",
    "parse_segment_file_name",
    "parse_topic_partition_name",
    "partition_metadata_file",
    "producer_snapshot_file",
    "time_index_file",
    "transaction_index_file",
]

LOG_FILE_SUFFIX: Final = ".log"
INDEX_FILE_SUFFIX: Final = ".index"
TIME_INDEX_FILE_SUFFIX: Final = ".timeindex"
TXN_INDEX_FILE_SUFFIX: Final = ".txnindex"
PRODUCER_SNAPSHOT_FILE_SUFFIX: Final = ".snapshot"
DELETED_FILE_SUFFIX: Final = ".deleted"
CLEANED_FILE_SUFFIX: Final = ".cleaned"
SWAP_FILE_SUFFIX: Final = ".swap"

DELETE_DIR_SUFFIX: Final = "-delete"
FUTURE_DIR_SUFFIX: Final = "-future"
STRAY_DIR_SUFFIX: Final = "-stray"

LEADER_EPOCH_CHECKPOINT_FILENAME: Final = "leader-epoch-checkpoint"
PARTITION_METADATA_FILENAME: Final = "partition.metadata"

_MAX_INT32: Final = (1 << 31) - 1
_MAX_INT64: Final = (1 << 63) - 1
_MAX_DIR_NAME: Final = 255
_MAX_TOPIC_LENGTH: Final = 249
_LEGAL_TOPIC: Final = re.compile(r"[a-zA-Z0-9._-]+")
_DIGITS: Final = re.compile(r"[0-9]+")

# The file-name suffixes a segment (or snapshot) file can carry, longest first so ``.timeindex``
# is not mistaken for ``.index``.
_FILE_SUFFIXES: Final = (
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    PRODUCER_SNAPSHOT_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
)
_EXTRA_SUFFIXES: Final = ("", DELETED_FILE_SUFFIX, CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
_DIR_SUFFIXES: Final = (DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)

# Java's ``\S`` is "not one of [ \t\n\x0B\f\r]"; Python's ``\S`` also excludes Unicode spaces, so
# Kafka's DELETE/FUTURE/STRAY_DIR_PATTERN are spelled out with Java's class.
_JAVA_NON_SPACE: Final = r"[^ \t\n\x0b\x0c\r]+"
_SUFFIXED_DIR: Final = {
    suffix: re.compile(
        rf"{_JAVA_NON_SPACE}-{_JAVA_NON_SPACE}\.{_JAVA_NON_SPACE}{re.escape(suffix)}"
    )
    for suffix in _DIR_SUFFIXES
}


# File names ------------------------------------------------------------------------------------
def filename_prefix_from_offset(offset: int) -> str:
    """The 20-digit, zero-padded, ungrouped text of ``offset``: ``100`` -> ``00000000000000000100``.

    Padding makes ``ls`` sort segments numerically. Offsets are non-negative int64 values; Kafka
    never names a file by a negative offset, so one is refused rather than given a sign.
    """
    if not 0 <= offset <= _MAX_INT64:
        raise InvalidArgumentError(f"a file offset must be within [0, 2^63-1], got {offset}")
    return f"{offset:020d}"


def offset_from_file_name(name: str) -> int:
    """The offset a segment, index or snapshot file is named by: the digits before the first ``.``.

    Like Kafka's ``offsetFromFileName`` any number of digits is accepted (``5.log`` is offset 5);
    a name without a ``.`` or whose prefix is not a non-negative int64 is refused.
    """
    base = Path(name).name
    dot = base.find(".")
    prefix = base[:dot] if dot >= 0 else ""
    if not _DIGITS.fullmatch(prefix) or int(prefix) > _MAX_INT64:
        raise InvalidArgumentError(
            f"file name {name!r} does not start with an offset followed by '.'"
        )
    return int(prefix)


def _segment_file(directory: str | Path, offset: int, kind: str, suffix: str) -> Path:
    if suffix not in _EXTRA_SUFFIXES:
        raise InvalidArgumentError(
            f"unknown file suffix {suffix!r}; expected one of {_EXTRA_SUFFIXES[1:]} or ''"
        )
    return Path(directory) / f"{filename_prefix_from_offset(offset)}{kind}{suffix}"


def log_file(directory: str | Path, offset: int, suffix: str = "") -> Path:
    """``<dir>/<offset:020d>.log<suffix>``, the segment whose base offset is ``offset``."""
    return _segment_file(directory, offset, LOG_FILE_SUFFIX, suffix)


def offset_index_file(directory: str | Path, offset: int, suffix: str = "") -> Path:
    """``<dir>/<offset:020d>.index<suffix>``, the offset index of the segment at ``offset``."""
    return _segment_file(directory, offset, INDEX_FILE_SUFFIX, suffix)


def time_index_file(directory: str | Path, offset: int, suffix: str = "") -> Path:
    """``<dir>/<offset:020d>.timeindex<suffix>``, the time index of the segment at ``offset``."""
    return _segment_file(directory, offset, TIME_INDEX_FILE_SUFFIX, suffix)


def transaction_index_file(directory: str | Path, offset: int, suffix: str = "") -> Path:
    """``<dir>/<offset:020d>.txnindex<suffix>``, the aborted-transaction index of a segment."""
    return _segment_file(directory, offset, TXN_INDEX_FILE_SUFFIX, suffix)


def producer_snapshot_file(directory: str | Path, offset: int, suffix: str = "") -> Path:
    """``<dir>/<offset:020d>.snapshot<suffix>``: the producer state up to ``offset`` (exclusive).

    The offset is the snapshot's own (the log end offset when it was taken), not a segment's.
    Kafka renames a snapshot to ``.snapshot.deleted`` when its segment is deleted.
    """
    return _segment_file(directory, offset, PRODUCER_SNAPSHOT_FILE_SUFFIX, suffix)


def leader_epoch_checkpoint_file(directory: str | Path) -> Path:
    """``<dir>/leader-epoch-checkpoint``."""
    return Path(directory) / LEADER_EPOCH_CHECKPOINT_FILENAME


def partition_metadata_file(directory: str | Path) -> Path:
    """``<dir>/partition.metadata`` (the partition's topic id)."""
    return Path(directory) / PARTITION_METADATA_FILENAME


def is_log_file(path: str | Path) -> bool:
    """True for ``*.log`` (Kafka's ``isLogFile``: a ``.log.deleted`` file is not a log file)."""
    return str(path).endswith(LOG_FILE_SUFFIX)


def is_index_file(path: str | Path) -> bool:
    """True for ``*.index``, ``*.timeindex`` and ``*.txnindex`` (Kafka's ``isIndexFile``)."""
    return Path(path).name.endswith(
        (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX)
    )


@dataclass(frozen=True, slots=True)
class SegmentFileName:
    """A parsed segment, index or snapshot file name.

    ``kind`` is one of ``.log .index .timeindex .txnindex .snapshot``; ``suffix`` is ``""`` or
    one of ``.deleted .cleaned .swap``.
    """

    offset: int
    kind: str
    suffix: str = ""

    def __str__(self) -> str:
        return f"{filename_prefix_from_offset(self.offset)}{self.kind}{self.suffix}"


def parse_segment_file_name(name: str | Path) -> SegmentFileName | None:
    """Parse ``00000000000000000100.timeindex.swap`` and its kin; ``None`` for any other name.

    A directory scan meets other files too (``leader-epoch-checkpoint``, ``partition.metadata``,
    a checkpoint's ``.tmp``), so "not a segment file" is an answer, not an error. The offset
    prefix must be digits only; Kafka always writes 20 of them but reads any number.
    """
    base = Path(name).name
    dot = base.find(".")
    if dot <= 0 or not _DIGITS.fullmatch(base[:dot]) or int(base[:dot]) > _MAX_INT64:
        return None
    rest = base[dot:]
    for kind in _FILE_SUFFIXES:
        if rest.startswith(kind) and rest[len(kind) :] in _EXTRA_SUFFIXES:
            return SegmentFileName(int(base[:dot]), kind, rest[len(kind) :])
    return None


# Partition directories ---------------------------------------------------------------------------
def _check_topic_partition(topic_partition: TopicPartition) -> None:
    """Refuse names that are not Kafka topic names: they would escape or nest the log directory."""
    topic = topic_partition.topic
    if not _LEGAL_TOPIC.fullmatch(topic) or topic in (".", "..") or len(topic) > _MAX_TOPIC_LENGTH:
        raise InvalidArgumentError(
            f"{topic!r} is not a legal Kafka topic name (1-{_MAX_TOPIC_LENGTH} characters of "
            "[a-zA-Z0-9._-], not '.' or '..')"
        )
    if not 0 <= topic_partition.partition <= _MAX_INT32:
        raise InvalidArgumentError(
            f"partition must be within [0, 2^31-1], got {topic_partition.partition}"
        )


def log_dir_name(topic_partition: TopicPartition) -> str:
    """``<topic>-<partition>``, the directory of a partition's log."""
    _check_topic_partition(topic_partition)
    return f"{topic_partition.topic}-{topic_partition.partition}"


def _unique_id(unique_id: str | None) -> str:
    if unique_id is None:
        return uuid.uuid4().hex
    if not re.fullmatch(r"[0-9a-f]{32}", unique_id):
        raise InvalidArgumentError(f"unique id must be 32 lower-case hex digits, got {unique_id!r}")
    return unique_id


def _suffixed_capped(topic_partition: TopicPartition, suffix: str, unique_id: str | None) -> str:
    # Kafka's logDirNameWithSuffixCappedLength: the topic is cut so the whole name fits in 255.
    _check_topic_partition(topic_partition)
    full_suffix = f"-{topic_partition.partition}.{_unique_id(unique_id)}{suffix}"
    keep = min(len(topic_partition.topic), _MAX_DIR_NAME - len(full_suffix))
    return topic_partition.topic[:keep] + full_suffix


def log_delete_dir_name(topic_partition: TopicPartition, unique_id: str | None = None) -> str:
    """``<topic>-<partition>.<uniqueId>-delete``, what a deleted partition's directory becomes.

    The topic is shortened, as in Kafka, so the name never exceeds 255 characters; the parsed
    topic of such a directory is then the shortened one. ``unique_id`` (32 hex digits) defaults
    to a random UUID's.
    """
    return _suffixed_capped(topic_partition, DELETE_DIR_SUFFIX, unique_id)


def log_stray_dir_name(topic_partition: TopicPartition, unique_id: str | None = None) -> str:
    """``<topic>-<partition>.<uniqueId>-stray``, a partition this broker no longer hosts."""
    return _suffixed_capped(topic_partition, STRAY_DIR_SUFFIX, unique_id)


def log_future_dir_name(topic_partition: TopicPartition, unique_id: str | None = None) -> str:
    """``<topic>-<partition>.<uniqueId>-future``, a replica being moved between log dirs.

    Unlike the delete and stray forms, Kafka does not shorten the topic here.
    """
    return f"{log_dir_name(topic_partition)}.{_unique_id(unique_id)}{FUTURE_DIR_SUFFIX}"


@dataclass(frozen=True, slots=True)
class LogDirName:
    """A parsed partition directory name.

    ``suffix`` is ``""`` for a live partition, else ``-delete``, ``-future`` or ``-stray``, and
    then ``unique_id`` is the text between the last ``.`` and the suffix.
    """

    topic_partition: TopicPartition
    suffix: str = ""
    unique_id: str | None = None


def _bad_dir(name: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"directory name {name!r} is not in the form topic-partition or "
        "topic-partition.uniqueId-delete (or -future, -stray)"
    )


def parse_log_dir_name(name: str | Path) -> LogDirName:
    """Parse a partition directory's name as Kafka's ``LocalLog.parseTopicPartitionName`` does.

    Only the last path component is looked at. The suffixed forms must match Kafka's pattern
    ``^(\\S+)-(\\S+)\\.(\\S+)<suffix>``; then the name is cut at its last ``.``, and the topic
    and partition are split at the last ``-``. The partition must be ASCII digits within int32
    (Java's ``Integer.parseInt`` would also take a ``+`` sign or non-ASCII digits; Kafka never
    writes those).
    """
    dir_name = Path(name).name
    if "-" not in dir_name:
        raise _bad_dir(dir_name)
    suffix = next((s for s in _DIR_SUFFIXES if dir_name.endswith(s)), "")
    unique_id: str | None = None
    base = dir_name
    if suffix:
        if not _SUFFIXED_DIR[suffix].fullmatch(dir_name):
            raise _bad_dir(dir_name)
        dot = dir_name.rindex(".")
        base = dir_name[:dot]
        unique_id = dir_name[dot + 1 : len(dir_name) - len(suffix)]
    dash = base.rfind("-")
    topic, partition_text = base[:dash], base[dash + 1 :]
    if (
        dash < 0
        or not topic
        or not _DIGITS.fullmatch(partition_text)
        or int(partition_text) > _MAX_INT32
    ):
        raise _bad_dir(dir_name)
    return LogDirName(TopicPartition(topic, int(partition_text)), suffix, unique_id)


def parse_topic_partition_name(name: str | Path) -> TopicPartition:
    """The topic and partition of a partition directory, whatever its suffix."""
    return parse_log_dir_name(name).topic_partition
