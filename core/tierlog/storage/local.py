"""``local``: the embedded default RemoteStorageManager, a directory on this machine.

It is tierlog's analog of Kafka's ``LocalTieredStorage`` (the reference RSM of Kafka's own tests)
and keeps Kafka's layout byte for byte, so a directory written by a Kafka broker running
``LocalTieredStorage`` and one written by tierlog can be read by the other::

    <dir>/kafka-tiered-storage/<topic>-<partition>-<topicId>/<startOffset:020d>-<segmentId><suffix>

with the suffixes ``.log .index .timeindex .txnindex .leader_epoch_checkpoint .snapshot``; the
transaction index only exists for segments that have one. ``<dir>`` is the ``dir`` setting;
the ``kafka-tiered-storage`` level is Kafka's too (``LocalTieredStorage.ROOT_STORAGE_DIR_NAME``),
and it is also what ``delete.on.close`` removes, so the user's own directory is never deleted.

Where tierlog is stricter than Kafka's test fixture, it is on purpose:

- every file is written to a hidden temporary name in the same directory, flushed with
  ``fsync``, renamed over the final name, and the directory is flushed: a crash leaves either the
  previous complete object or none under a final name, never a partial one;
- topic names come from outside, so a name that is not a legal Kafka topic name (``../x``, ``a/b``,
  an absolute path, NUL, ``.``, ``..``, non-ASCII) is refused with ``InvalidArgumentError``, and
  the resolved directory is checked to be a direct child of the storage root; a legal name too
  long for the file system (Kafka allows 249 characters, a directory name is 255 bytes) is
  shortened with a hash marker that no legal name can contain;
- a ranged fetch streams from an open file and stops at the end position; nothing reads a whole
  segment into memory.

One file is tierlog's own: ``.compaction_summary``, the log cleaner's summary of a segment it
rewrote (``IndexType.COMPACTION_SUMMARY``), written beside the others, atomically like them,
only for a segment copied with one. Kafka never writes it, so a directory Kafka wrote reads as
segments without summaries; Kafka reads tierlog's segments through their metadata, which names
only Kafka's suffixes (its test tooling that walks a whole directory,
``RemoteTopicPartitionDirectory``, refuses file types it does not know, so point that at
directories without cleaned segments).
"""

from __future__ import annotations

import errno
import hashlib
import io
import logging
import os
import re
import secrets
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Final, NoReturn

from tierlog._durable import fsync_directory
from tierlog.properties import did_you_mean, parse_bool
from tierlog.spi import (
    ConfigError,
    CustomMetadata,
    IllegalStateError,
    IndexType,
    InvalidArgumentError,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageManager,
    RetriableRemoteStorageException,
    TopicIdPartition,
    check_fetch_range,
    hookimpl,
)
from tierlog.spi.hookspecs import RegisterStorageManager

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

_LOG = logging.getLogger(__name__)

__all__ = ["LocalTieredStorage", "tierlog_register_storage_managers"]

ROOT_STORAGE_DIR_NAME: Final = "kafka-tiered-storage"
"""Kafka's ``LocalTieredStorage`` stores under ``<dir>/kafka-tiered-storage``; so does tierlog."""

LOG_SUFFIX: Final = ".log"
OFFSET_INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
TXN_INDEX_SUFFIX: Final = ".txnindex"
LEADER_EPOCH_SUFFIX: Final = ".leader_epoch_checkpoint"
PRODUCER_SNAPSHOT_SUFFIX: Final = ".snapshot"
COMPACTION_SUMMARY_SUFFIX: Final = ".compaction_summary"
"""tierlog's own: the log cleaner's summary of a segment (Kafka has no such file)."""

_INDEX_SUFFIXES: Final[Mapping[IndexType, str]] = {
    IndexType.OFFSET: OFFSET_INDEX_SUFFIX,
    IndexType.TIMESTAMP: TIME_INDEX_SUFFIX,
    IndexType.TRANSACTION: TXN_INDEX_SUFFIX,
    IndexType.LEADER_EPOCH: LEADER_EPOCH_SUFFIX,
    IndexType.PRODUCER_SNAPSHOT: PRODUCER_SNAPSHOT_SUFFIX,
    IndexType.COMPACTION_SUMMARY: COMPACTION_SUMMARY_SUFFIX,
}
_ALL_SUFFIXES: Final = (
    LOG_SUFFIX,
    OFFSET_INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LEADER_EPOCH_SUFFIX,
    PRODUCER_SNAPSHOT_SUFFIX,
    COMPACTION_SUMMARY_SUFFIX,
)

_LEGAL_TOPIC: Final = re.compile(r"[a-zA-Z0-9._-]+")
"""Kafka's ``Topic.LEGAL_CHARS``; ASCII only, and no path separator among them."""
MAX_TOPIC_LENGTH: Final = 249
"""Kafka's ``Topic.MAX_NAME_LENGTH``."""
_DEFAULT_NAME_MAX: Final = 255
_TEMP_SUFFIX: Final = ".tmp"
_COPY_CHUNK: Final = 1 << 20
_SENDFILE_CHUNK: Final = 64 << 20
_NO_SENDFILE_ERRNOS: Final = frozenset({errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.ESPIPE})
_READ_BUFFER: Final = 256 << 10
_RETRIABLE_ERRNOS: Final = frozenset(
    {errno.EAGAIN, errno.EINTR, errno.EBUSY, errno.ETIMEDOUT, errno.ESTALE}
)

DIR_CONFIG: Final = "dir"
DELETE_ON_CLOSE_CONFIG: Final = "delete.on.close"
DELETE_ENABLE_CONFIG: Final = "delete.enable"
NODE_ID_CONFIG: Final = "node.id"
BROKER_ID_CONFIG: Final = "broker.id"
LOG_DIR_CONFIG: Final = "log.dir"
"""Set by the RemoteLogManager for every RSM (as Kafka's ``configureRSM`` does); unused here."""
KNOWN_CONFIGS: Final = frozenset(
    {
        DIR_CONFIG,
        DELETE_ON_CLOSE_CONFIG,
        DELETE_ENABLE_CONFIG,
        NODE_ID_CONFIG,
        BROKER_ID_CONFIG,
        LOG_DIR_CONFIG,
    }
)


def _parse_int(configs: Mapping[str, str], key: str) -> int | None:
    raw = configs.get(key)
    if raw is None:
        return None
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"{key} must be an integer, got {raw!r}") from None


def _name_max(directory: Path) -> int:
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return _DEFAULT_NAME_MAX


def _copy_fd(src: int, dst: int) -> None:
    """Copy a whole file between descriptors without holding it in memory.

    ``sendfile`` keeps the bytes in the kernel; where the source does not support it (a pipe,
    some file systems), 1 MiB at a time through one reused buffer.
    """
    offset = 0
    try:
        while sent := os.sendfile(dst, src, offset, _SENDFILE_CHUNK):
            offset += sent
        return
    except OSError as exc:
        if offset or exc.errno not in _NO_SENDFILE_ERRNOS:
            raise
    buffer = bytearray(_COPY_CHUNK)
    view = memoryview(buffer)
    while n := os.readv(src, [buffer]):
        written = 0
        while written < n:
            written += os.write(dst, view[written:n])


class _RangeReader(io.RawIOBase):
    """A raw stream over an open file that stops after ``length`` bytes.

    Wrapped in a ``BufferedReader`` it is the ``BinaryIO`` a ranged fetch returns: the caller reads
    as little or as much as it wants, and never past the inclusive end position.
    """

    def __init__(self, raw: io.FileIO, length: int) -> None:
        super().__init__()
        self._raw = raw
        self._remaining = length

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        if self._remaining <= 0:
            return 0
        view = memoryview(buffer).cast("B")
        if len(view) > self._remaining:
            view = view[: self._remaining]
        n = self._raw.readinto(view) or 0
        self._remaining -= n
        if n == 0:  # the file is shorter than it was when opened: stop cleanly
            self._remaining = 0
        return n

    def close(self) -> None:
        if not self.closed:
            try:
                self._raw.close()
            finally:
                super().close()


@dataclass(frozen=True, slots=True)
class _Fileset:
    """The final paths of one segment's files (Kafka's ``RemoteLogSegmentFileset``)."""

    directory: Path
    prefix: str

    def path(self, suffix: str) -> Path:
        return self.directory / f"{self.prefix}{suffix}"

    def paths(self) -> list[Path]:
        return [self.path(s) for s in _ALL_SUFFIXES]


class LocalTieredStorage(RemoteStorageManager):
    """Stores remote segments in a local directory, in the layout of Kafka's LocalTieredStorage.

    Configuration (``rsm.config.`` prefix already stripped):

    ``dir`` (required)
        The directory under which ``kafka-tiered-storage/`` is created. Data persists across
        restarts, and several instances (brokers) configured with the same ``dir`` share it, as
        Kafka's integration tests share one LocalTieredStorage between brokers.
    ``delete.on.close`` (default ``false``)
        Remove ``<dir>/kafka-tiered-storage`` when the instance is closed (tests and demos).
    ``delete.enable`` (default ``true``)
        With ``false``, ``delete_log_segment_data`` keeps the data and returns normally, as
        Kafka's LocalTieredStorage does: it imitates a store whose deletes are not yet visible.
    ``node.id`` / ``broker.id``
        The node that owns the instance, shown in log messages (the RLM adds both).

    Any other key is reported with a warning and ignored (``ignored_configs``), so a
    ``server.properties`` shared with Kafka (``transferer.class``) still starts.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._root: Path | None = None
        self._real_root: str = ""
        self._name_max = _DEFAULT_NAME_MAX
        self._delete_on_close = False
        self._delete_enabled = True
        self._node_id: int | None = None
        self._ignored: tuple[str, ...] = ()
        self._closed = False

    # Configuration ------------------------------------------------------------------------------
    @classmethod
    def conformance_config(cls) -> dict[str, str]:
        """A fresh directory for the conformance suite (which points ``tempfile`` at pytest's
        ``tmp_path`` while calling this, so the directory is cleaned up with the test)."""
        import tempfile

        return {DIR_CONFIG: tempfile.mkdtemp(prefix="tierlog-local-rsm-")}

    def configure(self, configs: Mapping[str, str]) -> None:
        """Validate the settings and create ``<dir>/kafka-tiered-storage`` if needed.

        Raises ``ConfigError`` naming the key when ``dir`` is missing or a value is malformed,
        ``IllegalStateError`` when called twice (as Kafka refuses a second ``configure``), and
        ``RemoteStorageException`` when the directory cannot be created.
        """
        with self._lock:
            if self._closed:
                raise IllegalStateError("LocalTieredStorage is closed; build a new instance")
            if self._root is not None:
                raise IllegalStateError(
                    f"LocalTieredStorage is already configured (storage directory {self._root}); "
                    "configure() may only be called once"
                )
            raw_dir = configs.get(DIR_CONFIG)
            if raw_dir is None or not str(raw_dir).strip():
                raise ConfigError(
                    f"{DIR_CONFIG} is required: the directory LocalTieredStorage stores "
                    f"segments in (rsm.config.{DIR_CONFIG})"
                )
            if "\x00" in str(raw_dir):
                raise ConfigError(f"{DIR_CONFIG} contains a NUL character: {raw_dir!r}")
            # Kafka's LocalTieredStorage reads these with Boolean.parseBoolean (anything but
            # "true" is false); parse_bool refuses anything but true/false, so that a typo does
            # not silently flip a safety switch. An absent key takes the default (a bool, which
            # parse_bool returns as it is).
            delete_on_close = parse_bool(
                DELETE_ON_CLOSE_CONFIG, configs.get(DELETE_ON_CLOSE_CONFIG, False)
            )
            delete_enabled = parse_bool(
                DELETE_ENABLE_CONFIG, configs.get(DELETE_ENABLE_CONFIG, True)
            )
            node_id = _parse_int(configs, NODE_ID_CONFIG)
            broker_id = _parse_int(configs, BROKER_ID_CONFIG)
            if node_id is None and broker_id is not None:
                _LOG.warning(
                    "%s is deprecated (Kafka stops reading it in 5.0); use %s",
                    BROKER_ID_CONFIG,
                    NODE_ID_CONFIG,
                )
                node_id = broker_id
            ignored = tuple(sorted(k for k in configs if k not in KNOWN_CONFIGS))
            if ignored:
                _LOG.warning(
                    "LocalTieredStorage ignores unknown configuration keys: %s (known: %s)",
                    ", ".join(k + did_you_mean(k, KNOWN_CONFIGS) for k in ignored),
                    ", ".join(sorted(KNOWN_CONFIGS)),
                )

            base_dir = Path(str(raw_dir)).expanduser().absolute()
            root = base_dir / ROOT_STORAGE_DIR_NAME
            try:
                existed = root.is_dir()
                root.mkdir(parents=True, exist_ok=True)
                if not existed:
                    fsync_directory(root.parent)
                real_root = os.path.realpath(root)
            except OSError as exc:
                raise RemoteStorageException(
                    f"cannot create the storage directory {root}: {exc}"
                ) from exc

            self._root = root
            self._real_root = real_root
            self._name_max = _name_max(root)
            self._delete_on_close = delete_on_close
            self._delete_enabled = delete_enabled
            self._node_id = node_id
            self._ignored = ignored
        if not delete_enabled:
            _LOG.warning(
                "%s=false: deletes of remote segments will keep the data", DELETE_ENABLE_CONFIG
            )
        _LOG.info(
            "LocalTieredStorage (node %s) %s storage directory %s",
            "?" if node_id is None else node_id,
            "opened" if existed else "created",
            root,
        )

    @property
    def storage_directory(self) -> Path:
        """``<dir>/kafka-tiered-storage``, the root of everything this instance stores."""
        return self._require_root()

    def conformance_store_root(self) -> Path:
        """For the conformance suite: the directory to walk when checking what is stored."""
        return self.storage_directory

    @property
    def node_id(self) -> int | None:
        """``node.id`` (or the deprecated ``broker.id``) if configured."""
        return self._node_id

    @property
    def ignored_configs(self) -> tuple[str, ...]:
        """The configuration keys that were not recognised (reported at configure time)."""
        return self._ignored

    # Paths --------------------------------------------------------------------------------------
    def _require_root(self) -> Path:
        root = self._root
        if root is None:
            raise IllegalStateError(
                "LocalTieredStorage is not configured: call configure() with a 'dir' first"
            )
        if self._closed:
            raise IllegalStateError("LocalTieredStorage is closed")
        return root

    def partition_directory_name(self, topic_id_partition: TopicIdPartition) -> str:
        """``<topic>-<partition>-<topicId>``, Kafka's name for a partition's directory.

        Raises ``InvalidArgumentError`` for a topic that is not a legal Kafka topic name: those
        cannot come from Kafka, and some of them (``../x``, ``a/b``, ``/abs``) would be paths. A
        legal name that makes the directory name longer than the file system allows keeps its
        first characters and gets ``~<hash>``: ``~`` is not a legal topic character, so the
        shortened name never equals another topic's literal one.
        """
        topic = topic_id_partition.topic
        if not isinstance(topic, str) or not _LEGAL_TOPIC.fullmatch(topic):
            raise InvalidArgumentError(
                f"topic name {topic!r} is not a legal Kafka topic name (ASCII letters, digits, "
                "'.', '_' and '-'); LocalTieredStorage cannot store it"
            )
        if topic in {".", ".."}:
            raise InvalidArgumentError(f"topic name {topic!r} is not allowed (Kafka forbids it)")
        if len(topic) > MAX_TOPIC_LENGTH:
            raise InvalidArgumentError(
                f"topic name is {len(topic)} characters; Kafka allows at most {MAX_TOPIC_LENGTH}"
            )
        partition = int(topic_id_partition.partition)
        if partition < 0:
            raise InvalidArgumentError(f"partition must be >= 0, got {partition}")
        tail = f"-{partition}-{topic_id_partition.topic_id}"
        name = topic + tail
        if len(name) > self._name_max:
            digest = hashlib.sha256(topic.encode("ascii")).hexdigest()[:16]
            marker = f"~{digest}"
            keep = max(0, self._name_max - len(tail) - len(marker))
            name = f"{topic[:keep]}{marker}{tail}"
        return name

    def _partition_dir(self, topic_id_partition: TopicIdPartition) -> Path:
        """The partition's directory, verified to be a direct child of the storage root.

        The name check above already excludes separators and dot names; resolving the path as
        well catches what a name check cannot, such as a symbolic link planted in the store.
        """
        root = self._require_root()
        name = self.partition_directory_name(topic_id_partition)
        candidate = root / name
        resolved = os.path.realpath(candidate)
        if os.path.dirname(resolved) != self._real_root or os.path.basename(resolved) != name:
            raise InvalidArgumentError(
                f"the directory for {topic_id_partition} resolves to {resolved}, outside the "
                f"storage directory {self._real_root}"
            )
        return candidate

    @staticmethod
    def segment_file_prefix(remote_log_segment_id: RemoteLogSegmentId, start_offset: int) -> str:
        """``<startOffset:020d>-<segmentId>``, the name of a segment's files without suffix."""
        if start_offset < 0:
            raise InvalidArgumentError(f"start offset must be >= 0, got {start_offset}")
        return f"{start_offset:020d}-{remote_log_segment_id.id}"

    def _fileset(self, metadata: RemoteLogSegmentMetadata) -> _Fileset:
        directory = self._partition_dir(metadata.topic_id_partition)
        prefix = self.segment_file_prefix(metadata.remote_log_segment_id, metadata.start_offset)
        return _Fileset(directory, prefix)

    def segment_paths(self, metadata: RemoteLogSegmentMetadata) -> dict[str, Path]:
        """Where each of the segment's files lives (or would live), by suffix."""
        fileset = self._fileset(metadata)
        return {suffix: fileset.path(suffix) for suffix in _ALL_SUFFIXES}

    # Copy ---------------------------------------------------------------------------------------
    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        log_segment_data: LogSegmentData,
    ) -> CustomMetadata | None:
        """Copy the segment and its indexes, each file atomically; returns ``None`` like Kafka.

        A retry overwrites every file, removes the transaction index or compaction summary an
        earlier attempt stored if this one has none, and removes the temp files of an attempt
        killed mid-write (two copies of one segment id at once are not supported: one of them
        may then fail). If any file fails, every file of the
        segment is removed (Kafka's LocalTieredStorage does the same), so a segment is never
        half there.
        """
        metadata = remote_log_segment_metadata
        fileset = self._fileset(metadata)
        sources: list[tuple[str, Path | bytes]] = [
            (LOG_SUFFIX, log_segment_data.log_segment),
            (OFFSET_INDEX_SUFFIX, log_segment_data.offset_index),
            (TIME_INDEX_SUFFIX, log_segment_data.time_index),
        ]
        if log_segment_data.transaction_index is not None:
            sources.append((TXN_INDEX_SUFFIX, log_segment_data.transaction_index))
        sources.append((LEADER_EPOCH_SUFFIX, bytes(log_segment_data.leader_epoch_index)))
        sources.append((PRODUCER_SNAPSHOT_SUFFIX, log_segment_data.producer_snapshot_index))
        summary = log_segment_data.compaction_summary
        if summary is not None:
            sources.append((COMPACTION_SUMMARY_SUFFIX, bytes(summary)))

        _LOG.debug("copying %s to %s", metadata.remote_log_segment_id, fileset.directory)
        try:
            created = not fileset.directory.is_dir()
            fileset.directory.mkdir(exist_ok=True)
            if created:
                fsync_directory(fileset.directory.parent)
            # A copy of this segment killed mid-write (a retried task, a rerun round) left its
            # temp files; this copy replaces that attempt, so they go now, not with the segment.
            self._remove_temp_files(fileset)
            for suffix, source in sources:
                self._write_atomically(fileset.path(suffix), source)
            if log_segment_data.transaction_index is None:
                fileset.path(TXN_INDEX_SUFFIX).unlink(missing_ok=True)
            if summary is None:
                fileset.path(COMPACTION_SUMMARY_SUFFIX).unlink(missing_ok=True)
            fsync_directory(fileset.directory)
        except BaseException as exc:
            self._remove_quietly(fileset)
            if isinstance(exc, OSError):
                self._raise_storage_error("copy", metadata.remote_log_segment_id, exc)
            raise
        _LOG.info(
            "copied %s (offsets %d-%d) to %s",
            metadata.remote_log_segment_id,
            metadata.start_offset,
            metadata.end_offset,
            fileset.directory,
        )
        return None

    def _write_atomically(self, final: Path, source: Path | bytes) -> None:
        """Write ``source`` to a hidden temporary file beside ``final``, fsync, rename over it.

        The temporary name starts with a dot and ends with ``.tmp``: it never matches a final
        name, and an interrupted write leaves nothing that a fetch would open.
        """
        temp = final.with_name(f".{final.name}.{secrets.token_hex(8)}{_TEMP_SUFFIX}")
        fd = os.open(
            temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644
        )
        try:
            try:
                if isinstance(source, bytes):
                    view = memoryview(source)
                    while view:
                        written = os.write(fd, view)
                        view = view[written:]
                else:
                    src = os.open(source, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                    try:
                        _copy_fd(src, fd)
                    finally:
                        os.close(src)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, final)
        except BaseException:
            try:
                temp.unlink(missing_ok=True)
            except OSError:  # pragma: no cover - best effort
                _LOG.warning("could not remove temporary file %s", temp)
            raise

    # Fetch --------------------------------------------------------------------------------------
    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        """Stream bytes ``start_position..end_position`` (inclusive) of the stored segment.

        The range is checked against the file actually stored (not ``segment_size_in_bytes``):
        an end past it is clamped and a start at or past it gives an empty stream
        (``check_fetch_range``, before and after the file is opened).
        """
        check_fetch_range(start_position, end_position)
        metadata = remote_log_segment_metadata
        path = self._fileset(metadata).path(LOG_SUFFIX)
        raw = self._open(path, f"segment data of {metadata.remote_log_segment_id}")
        try:
            size = os.fstat(raw.fileno()).st_size
            length = check_fetch_range(start_position, end_position, size)
            if length:
                raw.seek(start_position)
        except BaseException:
            raw.close()
            raise
        return io.BufferedReader(_RangeReader(raw, length), buffer_size=_READ_BUFFER)

    def fetch_index(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata, index_type: IndexType
    ) -> BinaryIO:
        """Stream one index; a missing one (a segment without transaction index or compaction
        summary, a deleted segment) raises ``RemoteResourceNotFoundException``."""
        metadata = remote_log_segment_metadata
        suffix = _INDEX_SUFFIXES.get(index_type)
        if suffix is None:
            raise InvalidArgumentError(f"unknown index type {index_type!r}")
        path = self._fileset(metadata).path(suffix)
        raw = self._open(path, f"{index_type} index of {metadata.remote_log_segment_id}")
        return io.BufferedReader(raw, buffer_size=_READ_BUFFER)

    def _open(self, path: Path, what: str) -> io.FileIO:
        try:
            return io.FileIO(path, "r")
        except FileNotFoundError:
            raise RemoteResourceNotFoundException(f"{what} not found: {path}") from None
        except OSError as exc:
            raise self._storage_error(f"fetch of {what}", exc) from exc

    # Delete -------------------------------------------------------------------------------------
    def delete_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata
    ) -> None:
        """Remove the segment's files; what is already gone is not an error.

        With ``delete.enable=false`` this keeps the data and returns, as Kafka's does.
        """
        metadata = remote_log_segment_metadata
        fileset = self._fileset(metadata)
        if not self._delete_enabled:
            _LOG.debug("%s=false: keeping %s", DELETE_ENABLE_CONFIG, metadata.remote_log_segment_id)
            return
        try:
            removed = self._remove(fileset)
            if removed:
                fsync_directory(fileset.directory)
        except OSError as exc:
            self._raise_storage_error("delete", metadata.remote_log_segment_id, exc)
        _LOG.info("deleted %s (%d files)", metadata.remote_log_segment_id, removed)

    def delete_partition(self, topic_id_partition: TopicIdPartition) -> None:
        """Remove every segment of a partition and its directory (Kafka's ``deletePartition``,
        KAFKA-15166; not part of the RSM contract yet). Missing is not an error; honours
        ``delete.enable``."""
        directory = self._partition_dir(topic_id_partition)
        if not self._delete_enabled:
            _LOG.debug("%s=false: keeping partition %s", DELETE_ENABLE_CONFIG, topic_id_partition)
            return
        try:
            shutil.rmtree(directory)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise self._storage_error(f"delete of partition {topic_id_partition}", exc) from exc
        fsync_directory(directory.parent)
        _LOG.info("deleted partition %s", topic_id_partition)

    @staticmethod
    def _remove(fileset: _Fileset) -> int:
        """Delete the segment's files, and the temp files of a copy of it that a crash cut
        short (``.<prefix>...tmp``: the prefix holds the segment id, so no other segment's
        write in progress can match). Returns the number of final files removed."""
        removed = 0
        for path in fileset.paths():
            try:
                path.unlink()
                removed += 1
            except FileNotFoundError:
                pass
        LocalTieredStorage._remove_temp_files(fileset)
        return removed

    @staticmethod
    def _remove_temp_files(fileset: _Fileset) -> None:
        """Delete the temp files of earlier copies of the segment that a crash cut short."""
        try:
            leftovers = list(fileset.directory.glob(f".{fileset.prefix}*{_TEMP_SUFFIX}"))
        except FileNotFoundError:
            leftovers = []
        for path in leftovers:
            path.unlink(missing_ok=True)

    def _remove_quietly(self, fileset: _Fileset) -> None:
        try:
            self._remove(fileset)
        except OSError as exc:  # pragma: no cover - best effort after a failed copy
            _LOG.warning("could not clean up after a failed copy in %s: %s", fileset.directory, exc)

    # Errors -------------------------------------------------------------------------------------
    @staticmethod
    def _storage_error(what: str, exc: OSError) -> RemoteStorageException:
        message = f"{what} failed: {exc}"
        if exc.errno in _RETRIABLE_ERRNOS:
            return RetriableRemoteStorageException(message)
        return RemoteStorageException(message)

    def _raise_storage_error(
        self, op: str, segment_id: RemoteLogSegmentId, exc: OSError
    ) -> NoReturn:
        raise self._storage_error(f"{op} of {segment_id}", exc) from exc

    # Close --------------------------------------------------------------------------------------
    def close(self) -> None:
        """Mark the instance closed; with ``delete.on.close`` remove ``kafka-tiered-storage``.

        Safe to call more than once. As in Kafka, a storage directory holding anything other
        than partition directories is kept (and reported) rather than deleted.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            root = self._root
        if root is None or not self._delete_on_close:
            return
        try:
            strays = [p.name for p in root.iterdir() if not p.is_dir() or p.is_symlink()]
        except FileNotFoundError:
            return
        except OSError as exc:
            _LOG.error("cannot list %s to delete it on close: %s", root, exc)
            return
        if strays:
            _LOG.warning(
                "%s=true but %s holds unexpected entries (%s); keeping it",
                DELETE_ON_CLOSE_CONFIG,
                root,
                ", ".join(sorted(strays)[:5]),
            )
            return
        try:
            shutil.rmtree(root)
        except OSError as exc:
            _LOG.error("could not delete %s on close: %s", root, exc)
            return
        _LOG.info("deleted storage directory %s on close", root)


@hookimpl
def tierlog_register_storage_managers(register: RegisterStorageManager) -> None:
    """Register ``local``, exactly as a third-party plugin registers its classes."""
    register("local", LocalTieredStorage)
