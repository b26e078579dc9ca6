"""The ``embedded`` RemoteLogMetadataManager: Kafka's TBRLMM without a Kafka cluster.

Kafka's default RLMM produces every metadata event to the ``__remote_log_metadata`` topic and
rebuilds its cache by consuming it. This one does the same with local files: each of the
``remote.log.metadata.topic.num.partitions`` metadata partitions is a crash-safe record log
(``_record_log``) holding the very record values a broker would produce (``serde.serialize``),
in the partition Kafka would choose (``partitioner.metadata_partition``). The cache is tierlog's
``RemotePartitionMetadataStore``, so reads answer exactly as Kafka's do.

Configuration (the ``rlmm.config.`` keys, prefix stripped)
----------------------------------------------------------
``dir``
    The directory of the record logs. Without it, ``<log.dir>/__remote_log_metadata`` (the RLM
    passes ``log.dir``). One of the two is required. When tierlog shares ``log.dir`` with a
    Kafka broker, set ``dir`` outside it: a broker refuses to start on a directory in its log
    dir that is not named like a topic partition.
``remote.log.metadata.topic.num.partitions``
    Kafka's key, default 50. It is written to ``<dir>/rlmm.properties`` on first start; a later
    start with another value is refused (``ConfigError``), as Kafka refuses a metadata topic
    whose partition count differs, because every event would be looked for in the wrong file.
Kafka's other TBRLMM keys (replication factor, retention, min ISR, timeouts, the client
prefixes) and ``node.id``/``broker.id``/``cluster.id`` are accepted and ignored, so a
``server.properties`` written for Kafka works unchanged; any other key is reported in a WARNING.

Semantics (as TBRLMM, except where noted)
-----------------------------------------
- ``on_partition_leadership_changes`` replays the record logs of the newly assigned partitions'
  metadata partitions (keeping only their events) into the store and marks them initialized;
  ``is_ready`` is True from then on. ``on_stop_partitions`` drops their cache.
- A mutating call validates its argument (``add`` needs COPY_SEGMENT_STARTED, ``update`` may not
  use it: ``InvalidArgumentError``), refuses a partition not assigned to this instance
  (``RemoteStorageException``, before anything is written), appends the record and ``fsync``s,
  applies it to the store, and returns an already completed ``Future``: read-your-writes.
- **Decision: an update of an unknown segment raises ``RemoteResourceNotFoundException`` before
  anything is written.** Kafka's TBRLMM produces such an update and its consumer only logs a
  WARNING; the SPI (Kafka's Javadoc ``@throws``) asks for the exception, and not writing keeps
  the log free of updates whose base record is missing (the KAFKA-15632 situation on replay).
  Likewise ``add``/``update`` of a partition whose deletion finished (DELETE_PARTITION_FINISHED)
  raise ``RemoteResourceNotFoundException``: that partition is gone, a recreated topic has a new
  topic id. Partition-delete events are always accepted (the remover retries them).
- Invalid transitions are written and then dropped by the cache with an ERROR log, exactly as
  Kafka's consumer does, so the log holds what a broker would have produced and a replay
  reaches the same state.
- ``close()`` closes the files; later calls raise ``IllegalStateError`` (``is_ready`` answers
  False instead, it is a status query).

Threads: reads go straight to the store (which has its own short locks) and never wait for a
disk write. Writes of one metadata partition are serialised by a lock held across
check-append-apply, so the order in memory is the order in the file; loads and stops of a
partition take the same lock, so a replay never races a write. A lock file in the directory
keeps a second instance (in this or another process) out.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Set
from concurrent.futures import Future
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Final

from tierlog._durable import atomic_write
from tierlog.metadata import serde, write_checks
from tierlog.metadata._record_log import RecordLog
from tierlog.metadata.partitioner import metadata_partition
from tierlog.metadata.serde import RemoteLogSegmentMetadataSnapshot
from tierlog.metadata.store import RemotePartitionMetadataStore
from tierlog.properties import did_you_mean
from tierlog.spi import (
    ConfigError,
    CorruptRecordError,
    IllegalStateError,
    MetadataRecordError,
    RemoteLogMetadata,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemoteStorageException,
    TopicIdPartition,
    hookimpl,
)
from tierlog.spi.hookspecs import RegisterMetadataManager

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory lock, documented
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_NUM_PARTITIONS",
    "DIR_CONFIG",
    "LOG_DIR_CONFIG",
    "METADATA_DIR_NAME",
    "NUM_PARTITIONS_CONFIG",
    "EmbeddedRemoteLogMetadataManager",
    "tierlog_register_metadata_managers",
]

_LOG = logging.getLogger(__name__)

DIR_CONFIG: Final = "dir"
LOG_DIR_CONFIG: Final = "log.dir"
NUM_PARTITIONS_CONFIG: Final = "remote.log.metadata.topic.num.partitions"
DEFAULT_NUM_PARTITIONS: Final = 50
METADATA_DIR_NAME: Final = "__remote_log_metadata"
PROPERTIES_FILE: Final = "rlmm.properties"
LOCK_FILE: Final = ".lock"
LAYOUT_VERSION: Final = 1

_IGNORED_KEYS: Final = frozenset(
    {
        "node.id",
        "broker.id",
        "cluster.id",
        "remote.log.metadata.topic.replication.factor",
        "remote.log.metadata.topic.retention.ms",
        "remote.log.metadata.topic.min.isr",
        "remote.log.metadata.consume.wait.ms",
        "remote.log.metadata.initialization.retry.max.timeout.ms",
        "remote.log.metadata.initialization.retry.interval.ms",
    }
)
"""Kafka's TBRLMM keys (and the ids the RLM adds) that have no meaning without a cluster."""

_IGNORED_PREFIXES: Final = (
    "remote.log.metadata.common.client.",
    "remote.log.metadata.producer.",
    "remote.log.metadata.consumer.",
    "remote.log.metadata.admin.",
)

_KNOWN_KEYS: Final = frozenset({DIR_CONFIG, LOG_DIR_CONFIG, NUM_PARTITIONS_CONFIG}) | _IGNORED_KEYS
"""Every key accepted by name: what an unknown key is compared with for a "did you mean"."""


def _record_log_name(partition: int) -> str:
    return f"{METADATA_DIR_NAME}-{partition}.log"


def _completed() -> Future[None]:
    future: Future[None] = Future()
    future.set_result(None)
    return future


class EmbeddedRemoteLogMetadataManager(RemoteLogMetadataManager):
    """Kafka's TBRLMM on local record logs; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._store = RemotePartitionMetadataStore()
        self._assigned: set[TopicIdPartition] = set()
        self._partition_locks: dict[int, threading.Lock] = {}
        self._logs: dict[int, RecordLog] = {}
        self._directory: Path | None = None
        self._num_partitions = DEFAULT_NUM_PARTITIONS
        self._lock_fd: int | None = None
        self._closed = False

    @classmethod
    def conformance_config(cls) -> dict[str, str]:
        """A fresh directory for each conformance test (the suite cleans it up)."""
        return {DIR_CONFIG: tempfile.mkdtemp(prefix="tierlog-embedded-rlmm-")}

    # Configuration -----------------------------------------------------------------------------
    @property
    def directory(self) -> Path:
        """Where the record logs are; ``IllegalStateError`` before ``configure``."""
        if self._directory is None:
            raise IllegalStateError("EmbeddedRemoteLogMetadataManager is not configured")
        return self._directory

    @property
    def num_partitions(self) -> int:
        """The number of metadata partitions (record logs)."""
        return self._num_partitions

    def record_log_path(self, partition: int) -> Path:
        """The file of metadata partition ``partition`` (it may not exist yet)."""
        return self.directory / _record_log_name(partition)

    def configure(self, configs: Mapping[str, str]) -> None:
        """Open (creating if needed) the directory and check its partition count."""
        with self._lock:
            if self._closed:
                raise IllegalStateError("EmbeddedRemoteLogMetadataManager is closed")
            if self._directory is not None:
                raise IllegalStateError("EmbeddedRemoteLogMetadataManager is already configured")
            directory, num_partitions = self._parse(configs)
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"cannot create the RLMM directory {directory}: {exc}") from exc
            self._lock_fd = self._lock_directory(directory)
            try:
                self._check_layout(directory, num_partitions)
            except OSError as exc:
                self._unlock_directory()
                raise ConfigError(f"cannot use the RLMM directory {directory}: {exc}") from exc
            except BaseException:
                self._unlock_directory()
                raise
            self._directory = directory
            self._num_partitions = num_partitions
            _LOG.info(
                "embedded RLMM using %s with %d metadata partitions", directory, num_partitions
            )

    @staticmethod
    def _parse(configs: Mapping[str, str]) -> tuple[Path, int]:
        unknown = sorted(
            key
            for key in configs
            if key not in _KNOWN_KEYS and not key.startswith(_IGNORED_PREFIXES)
        )
        if unknown:
            _LOG.warning(
                "embedded RLMM ignores unknown configuration key(s): %s",
                ", ".join(key + did_you_mean(key, _KNOWN_KEYS) for key in unknown),
            )
        directory = str(configs.get(DIR_CONFIG, "") or "").strip()
        log_dir = str(configs.get(LOG_DIR_CONFIG, "") or "").strip()
        if directory:
            path = Path(directory)
        elif log_dir:
            path = Path(log_dir) / METADATA_DIR_NAME
        else:
            raise ConfigError(
                f"the embedded RLMM needs a directory: set {DIR_CONFIG!r} (rlmm.config.dir) or "
                f"{LOG_DIR_CONFIG!r} (then <log.dir>/{METADATA_DIR_NAME} is used)"
            )
        raw = str(configs.get(NUM_PARTITIONS_CONFIG, DEFAULT_NUM_PARTITIONS)).strip()
        try:
            num_partitions = int(raw)
        except ValueError:
            raise ConfigError(f"{NUM_PARTITIONS_CONFIG} must be an integer, got {raw!r}") from None
        if num_partitions < 1:
            raise ConfigError(f"{NUM_PARTITIONS_CONFIG} must be >= 1, got {num_partitions}")
        return path, num_partitions

    @staticmethod
    def _lock_directory(directory: Path) -> int | None:
        if fcntl is None:  # pragma: no cover
            return None
        try:
            fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(f"cannot use the RLMM directory {directory}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise IllegalStateError(
                f"the RLMM directory {directory} is in use by another embedded RLMM (in this "
                "or another process); close it first or configure another directory"
            ) from None
        return fd

    def _unlock_directory(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    @staticmethod
    def _check_layout(directory: Path, num_partitions: int) -> None:
        """Persist the partition count on first start; refuse a different one later."""
        properties = directory / PROPERTIES_FILE
        if not properties.exists():
            stray = sorted(p.name for p in directory.glob(f"{METADATA_DIR_NAME}-*.log"))
            if stray:
                raise ConfigError(
                    f"{directory} holds record logs ({', '.join(stray[:3])}...) but no "
                    f"{PROPERTIES_FILE}, so its metadata partition count is unknown; restore "
                    "the file or use an empty directory"
                )
            atomic_write(
                properties,
                (
                    "# tierlog embedded RemoteLogMetadataManager: do not edit\n"
                    f"version={LAYOUT_VERSION}\n{NUM_PARTITIONS_CONFIG}={num_partitions}\n"
                ).encode(),
            )
            return
        values: dict[str, str] = {}
        for line in properties.read_text(encoding="utf-8").splitlines():
            key, sep, value = line.partition("=")
            if sep and not line.lstrip().startswith(("#", "!")):
                values[key.strip()] = value.strip()
        stored = values.get(NUM_PARTITIONS_CONFIG)
        if stored is None or not stored.isdigit():
            raise ConfigError(f"{properties} has no valid {NUM_PARTITIONS_CONFIG}")
        if int(stored) != num_partitions:
            raise ConfigError(
                f"{NUM_PARTITIONS_CONFIG}={num_partitions} does not match the "
                f"{stored} metadata partitions {directory} was created with; every record "
                "would be looked for in the wrong partition (Kafka refuses a metadata topic "
                f"with another partition count the same way). Set {NUM_PARTITIONS_CONFIG}="
                f"{stored}."
            )

    # Internals ---------------------------------------------------------------------------------
    def _ensure_open(self) -> Path:
        if self._closed:
            raise IllegalStateError("EmbeddedRemoteLogMetadataManager is closed")
        if self._directory is None:
            raise IllegalStateError(
                "EmbeddedRemoteLogMetadataManager is not configured: call configure() first"
            )
        return self._directory

    def _metadata_partition(self, tip: TopicIdPartition) -> int:
        return metadata_partition(tip, self._num_partitions)

    def _partition_lock(self, partition: int) -> threading.Lock:
        with self._lock:
            lock = self._partition_locks.get(partition)
            if lock is None:
                lock = self._partition_locks[partition] = threading.Lock()
            return lock

    def _record_log(self, partition: int, *, create: bool) -> RecordLog | None:
        """The open record log of a metadata partition, opened (and so recovered) on first use.

        The caller holds the partition's lock, so no other thread opens the same file; the
        recovery scan runs outside the state lock, so it never stalls other partitions.
        """
        with self._lock:
            directory = self._ensure_open()
            record_log = self._logs.get(partition)
        if record_log is not None:
            return record_log
        path = directory / _record_log_name(partition)
        if not create and not path.exists():
            return None
        try:
            record_log = RecordLog(path)
        except OSError as exc:
            raise RemoteStorageException(f"cannot open record log {path}: {exc}") from exc
        with self._lock:
            if self._closed:
                record_log.close()
                raise IllegalStateError("EmbeddedRemoteLogMetadataManager is closed")
            self._logs[partition] = record_log
        return record_log

    # Writes ------------------------------------------------------------------------------------
    def add_remote_log_segment_metadata(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata
    ) -> Future[None]:
        metadata = remote_log_segment_metadata
        write_checks.check_add(metadata)
        tip = metadata.topic_id_partition
        return self._write(tip, metadata, lambda: self._check_not_deleted(tip))

    def update_remote_log_segment_metadata(
        self, remote_log_segment_metadata_update: RemoteLogSegmentMetadataUpdate
    ) -> Future[None]:
        update = remote_log_segment_metadata_update
        write_checks.check_update(update)
        tip = update.topic_id_partition

        def check() -> None:
            self._check_not_deleted(tip)
            if not self._segment_known(tip, update.remote_log_segment_id):
                raise write_checks.unknown_segment(update.remote_log_segment_id)

        return self._write(tip, update, check)

    def put_remote_partition_delete_metadata(
        self, remote_partition_delete_metadata: RemotePartitionDeleteMetadata
    ) -> Future[None]:
        delete = remote_partition_delete_metadata
        return self._write(delete.topic_id_partition, delete, lambda: None)

    def _check_not_deleted(self, tip: TopicIdPartition) -> None:
        if not self._store.is_initialized(tip):
            raise write_checks.partition_deleted(tip)

    def _segment_known(self, tip: TopicIdPartition, segment_id: RemoteLogSegmentId) -> bool:
        """Whether the partition's cache holds the segment (not yet DELETE_SEGMENT_FINISHED).

        O(1) through the cache's id index; the caller holds the metadata partition's lock, so the
        answer cannot change before the write.
        """
        return self._store.segment_metadata(tip, segment_id) is not None

    def _write(
        self,
        tip: TopicIdPartition,
        metadata: RemoteLogMetadata,
        check: Callable[[], None],
    ) -> Future[None]:
        """Validate, append + fsync, apply: the one path of every mutating call."""
        payload = serde.serialize(metadata)  # a value that cannot be encoded fails here
        value = serde.deserialize(payload)  # apply what a replay will read, bit for bit
        assert not isinstance(value, RemoteLogSegmentMetadataSnapshot)
        with self._lock:
            self._ensure_open()
        partition = self._metadata_partition(tip)
        with self._partition_lock(partition):
            with self._lock:
                self._ensure_open()
                if tip not in self._assigned:
                    raise RemoteStorageException(
                        f"partition {tip} (metadata partition {partition}) is not assigned to "
                        "this RLMM: call on_partition_leadership_changes for it first; "
                        f"{len(self._assigned)} partition(s) are assigned"
                    )
            check()
            record_log = self._record_log(partition, create=True)
            assert record_log is not None
            try:
                record_log.append([payload])
            except (OSError, IllegalStateError) as exc:
                raise RemoteStorageException(
                    f"cannot write remote log metadata of {tip} to {record_log.path}: {exc}"
                ) from exc
            with self._lock:
                applies = tip in self._assigned and not self._closed
            if applies:
                self._store.handle(value)
        return _completed()

    # Assignment --------------------------------------------------------------------------------
    def on_partition_leadership_changes(
        self,
        leader_partitions: Set[TopicIdPartition],
        follower_partitions: Set[TopicIdPartition],
    ) -> None:
        """Load the newly assigned partitions (leaders and followers alike, as Kafka)."""
        with self._lock:
            self._ensure_open()
            new = (set(leader_partitions) | set(follower_partitions)) - self._assigned
        by_partition: dict[int, set[TopicIdPartition]] = {}
        for tip in new:
            by_partition.setdefault(self._metadata_partition(tip), set()).add(tip)
        for partition in sorted(by_partition):
            with self._partition_lock(partition):
                with self._lock:
                    self._ensure_open()
                    tips = {t for t in by_partition[partition] if t not in self._assigned}
                if tips:
                    self._load(partition, tips)

    def _load(self, partition: int, tips: set[TopicIdPartition]) -> None:
        """Replay one metadata partition's log into the store for ``tips`` (lock held)."""
        for tip in tips:
            self._store.maybe_load_partition(tip)
        try:
            record_log = self._record_log(partition, create=False)
            count = 0
            if record_log is not None:
                for offset, value in self._replay(record_log):
                    if isinstance(value, RemoteLogSegmentMetadataSnapshot):
                        _LOG.warning(
                            "%s offset %d: skipping a snapshot record, which carries no "
                            "partition (Kafka never publishes it)",
                            record_log.path,
                            offset,
                        )
                        continue
                    owner = value.topic_id_partition
                    if owner not in tips:
                        continue
                    try:
                        self._store.handle(value)
                    except IllegalStateError:
                        _LOG.warning(
                            "%s offset %d: skipping an event of %s after its deletion finished",
                            record_log.path,
                            offset,
                            owner,
                        )
                    else:
                        count += 1
            for tip in tips:
                # IllegalStateError: the log deleted the partition (DELETE_PARTITION_FINISHED).
                with suppress(IllegalStateError):
                    self._store.mark_initialized(tip)
        except BaseException:
            for tip in tips:
                self._store.clear_topic_partition(tip)
            raise
        with self._lock:
            self._assigned |= tips
        _LOG.info(
            "loaded %d partition(s) from metadata partition %d (%d event(s))",
            len(tips),
            partition,
            count,
        )

    @staticmethod
    def _replay(
        record_log: RecordLog,
    ) -> Iterator[tuple[int, RemoteLogMetadata | RemoteLogSegmentMetadataSnapshot]]:
        for offset, payload in record_log.read():
            try:
                yield offset, serde.deserialize(payload)
            except MetadataRecordError as exc:
                raise CorruptRecordError(
                    f"{record_log.path} offset {offset}: the record cannot be decoded ({exc}); "
                    "refusing to load a metadata partition with an unreadable event"
                ) from exc

    def on_stop_partitions(self, partitions: Set[TopicIdPartition]) -> None:
        """Forget the partitions' caches (their events stay in the logs for a later load)."""
        with self._lock:
            self._ensure_open()
            stopping = set(partitions) & self._assigned
        by_partition: dict[int, set[TopicIdPartition]] = {}
        for tip in stopping:
            by_partition.setdefault(self._metadata_partition(tip), set()).add(tip)
        for partition in sorted(by_partition):
            with self._partition_lock(partition), self._lock:
                for tip in by_partition[partition]:
                    self._assigned.discard(tip)
                    self._store.clear_topic_partition(tip)

    def is_ready(self, topic_id_partition: TopicIdPartition) -> bool:
        """Assigned, replayed and not deleted; False after ``close``."""
        with self._lock:
            if self._closed or topic_id_partition not in self._assigned:
                return False
        return self._store.is_initialized(topic_id_partition)

    # Reads -------------------------------------------------------------------------------------
    def remote_log_segment_metadata(
        self, topic_id_partition: TopicIdPartition, epoch_for_offset: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        if self._closed or self._directory is None:  # every remote read asks: no call when open
            self._ensure_open()
        return self._store.remote_log_segment_metadata(topic_id_partition, epoch_for_offset, offset)

    def highest_offset_for_epoch(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int
    ) -> int | None:
        self._ensure_open()
        return self._store.highest_offset_for_epoch(topic_id_partition, leader_epoch)

    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> Iterator[RemoteLogSegmentMetadata]:
        self._ensure_open()
        return self._store.list_remote_log_segments(topic_id_partition, leader_epoch)

    def remote_log_size(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int:
        self._ensure_open()
        return self._store.remote_log_size(topic_id_partition, leader_epoch)

    def next_segment_with_txn_index(
        self, topic_id_partition: TopicIdPartition, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        self._ensure_open()
        return self._store.next_segment_with_txn_index(topic_id_partition, epoch, offset)

    # Lifecycle ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Wait for writes in flight, close the record logs and release the directory."""
        with self._lock:
            if self._closed:
                return
            locks = [self._partition_locks[p] for p in sorted(self._partition_locks)]
        with ExitStack() as stack:
            for lock in locks:
                stack.enter_context(lock)
            with self._lock:
                self._closed = True
                logs, self._logs = list(self._logs.values()), {}
                self._assigned.clear()
            for record_log in logs:
                record_log.close()
            self._store.close()
            self._unlock_directory()

    def __repr__(self) -> str:
        return (
            f"EmbeddedRemoteLogMetadataManager(dir={self._directory}, "
            f"partitions={self._num_partitions}, assigned={len(self._assigned)})"
        )


@hookimpl
def tierlog_register_metadata_managers(register: RegisterMetadataManager) -> None:
    """The core's own RLMM, registered like any plugin's."""
    register("embedded", EmbeddedRemoteLogMetadataManager)
