"""``Node``: one tierlog node that owns partitions, accepts appends, tiers them, serves reads.

What a Kafka broker does for tiered storage, without the network protocol and replication: the
node leads every partition under its ``log.dirs`` (a new leader epoch each time it starts, as
a broker restart makes the controller elect it again), appends producers' records, copies
sealed segments to remote storage through the RemoteLogManager, applies local retention
(``log.retention.check.interval.ms``) once segments are copied and remote retention through the
RLM's expiration task, and serves fetches and ListOffsets from local segments or, below the local
log start, from remote storage.

Usable from Python::

    with Node(NodeConfig.from_file("server.properties")) as node:
        node.create_topic("events", partitions=3, configs={"remote.storage.enable": "true"})
        node.produce("events", [b"hello", (b"key", b"value")])
        result = node.fetch("events", 0, offset=0)

and over HTTP (``tierlog.node.http_api``) by ``tierlog serve``.

Each log directory is locked for the node's lifetime (a ``.lock`` file, as Kafka's
``LogManager`` does: ``tierlog.node.dir_lock``), so a second node or a Kafka broker on the same
directory fails at start instead of corrupting it. Topics (name, id, partition count, config
overrides) are kept in ``tierlog-topics.json`` in the first log directory; partition
directories found in the log directories with a ``partition.metadata`` (a Kafka broker's, for
instance) are adopted with the broker defaults.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from tierlog._durable import atomic_write
from tierlog.compaction.cleaner import CleanResult
from tierlog.compaction.manager import CleanerTarget, LogCleanerManager
from tierlog.compaction.remote_io import StorageSpec, register_open
from tierlog.compaction.tiered import TieredCleaner
from tierlog.log.batch import (
    RECORD_BATCH_OVERHEAD,
    ControlRecordType,
    build_batch,
    decode_control_record,
)
from tierlog.log.checkpoint import CorruptCheckpointError, read_partition_metadata
from tierlog.log.cleaner_checkpoint import CleanerOffsetCheckpoints
from tierlog.log.compression import CompressionType
from tierlog.log.files import parse_log_dir_name
from tierlog.log.local_log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    LocalLog,
    LogAppendInfo,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
)
from tierlog.log.reader import iter_batches_with_records
from tierlog.log.record import Record
from tierlog.log.segment import FetchDataInfo, TimestampAndOffset
from tierlog.log.txn_index import AbortedTxn
from tierlog.metadata.partitioner import murmur2
from tierlog.node.config import NodeConfig
from tierlog.node.dir_lock import DirLock
from tierlog.node.log_dirs import prepare_log_dir
from tierlog.rlm.manager import RemoteLogManager
from tierlog.rlm.metrics import RemoteStorageMetrics
from tierlog.rlm.remote_read import RemoteStorageFetchInfo, trim_partial_batch
from tierlog.rlm.scheduler import ScheduledPool
from tierlog.spi import (
    IllegalStateError,
    InvalidArgumentError,
    RemoteLogMetadataManager,
    RemoteLogSegmentState,
    RemoteStorageManager,
    RetriableRemoteStorageException,
    TierlogError,
    TopicIdPartition,
    TopicPartition,
    Uuid,
)
from tierlog.spi.plugins import get_registry

__all__ = [
    "LATEST_TIERED_TIMESTAMP",
    "FetchResult",
    "Node",
    "PartitionStatus",
    "ProduceResult",
    "ProducerRecord",
    "OffsetSpec",
    "ProduceInput",
    "RequestTimedOutError",
    "TopicExistsError",
    "UnknownTopicError",
    "decode_fetched",
]

_LOG = logging.getLogger(__name__)

TOPICS_FILE: Final = "tierlog-topics.json"
REMOTE_STORAGE_DIR: Final = "tierlog-remote-storage"
"""Where the ``local`` RSM stores when ``rsm.config.dir`` is not set: under the first log
directory, so the embedded default runs with nothing configured. Point ``rsm.config.dir`` at
another disk (or use an object-store plugin) for remote storage worth the name."""

LATEST_TIERED_TIMESTAMP: Final = -5
"""Kafka's ``ListOffsetsRequest.LATEST_TIERED_TIMESTAMP``: the highest offset in remote storage."""

_LEGAL_TOPIC: Final = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_BATCH_TARGET_BYTES: Final = 64 * 1024
_DEFAULT_FETCH_BYTES: Final = 1024 * 1024
OffsetSpec = Literal["earliest", "latest", "earliest-local", "latest-tiered"]


class UnknownTopicError(TierlogError, LookupError):
    """Kafka's ``UnknownTopicOrPartitionException``."""


class TopicExistsError(InvalidArgumentError):
    """Kafka's ``TopicExistsException``: ``create_topic`` of a name the node already has."""


class RequestTimedOutError(RetriableRemoteStorageException):
    """Kafka's ``REQUEST_TIMED_OUT``: a request's remote-storage work did not complete within
    its bound (ListOffsets by timestamp: ``remote.list.offsets.request.timeout.ms``). Retriable:
    the same request may succeed once remote storage answers faster."""


@dataclass(frozen=True, slots=True)
class ProducerRecord:
    """A record to produce; ``timestamp`` defaults to the node's clock at append."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None


ProduceInput = ProducerRecord | bytes | tuple[bytes | None, bytes | None]


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """Where one partition's share of a ``produce`` call landed."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    log_append_time: int


@dataclass(frozen=True)
class FetchResult:
    """The records of a fetch (decoded, control records and aborted transactions filtered out
    for ``read_committed``) and the partition's offsets at the time."""

    topic: str
    partition: int
    records: list[Record]
    next_offset: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    local_log_start_offset: int
    from_remote: bool
    throttled: bool = False
    batches: bytes = field(default=b"", repr=False)
    """The whole batches as stored (Kafka's wire format), for clients that decode themselves."""
    aborted_transactions: tuple[AbortedTxn, ...] = ()
    remote_fetch_expired: bool = False
    """The remote read did not complete in time (``remote.fetch.max.wait.ms``): no records,
    not an error; fetch the same offset again."""


@dataclass(frozen=True)
class PartitionStatus:
    """A partition's offsets and tiering state, for ``status`` and ``/status``."""

    topic: str
    partition: int
    topic_id: str
    leader_epoch: int
    log_start_offset: int
    local_log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
    highest_offset_in_remote_storage: int
    local_segments: int
    local_bytes: int
    remote_segments: int
    remote_bytes: int
    copy_lag_bytes: int
    copy_lag_segments: int
    remote_storage_enabled: bool
    tasks: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _Topic:
    name: str
    topic_id: Uuid
    partitions: int
    configs: dict[str, str]
    leader_epochs: dict[int, int] = field(default_factory=dict)
    """The last leader epoch of each partition, kept in the topics file as Kafka's controller
    keeps it in its metadata: the log's epoch cache forgets an epoch in which nothing was
    appended, and a restart must not reuse it."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": str(self.topic_id),
            "partitions": self.partitions,
            "configs": dict(self.configs),
        }


@dataclass
class _Partition:
    tp: TopicIdPartition
    log: LocalLog
    leader_epoch: int


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Node:
    """A tierlog node (module docstring). ``rsm``/``rlmm`` override the configured plugins
    (already configured instances; the node does not close them)."""

    def __init__(
        self,
        config: NodeConfig | Mapping[str, object],
        *,
        rsm: RemoteStorageManager | None = None,
        rlmm: RemoteLogMetadataManager | None = None,
        clock_ms: Callable[[], int] = _wall_clock_ms,
        metrics: RemoteStorageMetrics | None = None,
    ) -> None:
        self.config = config if isinstance(config, NodeConfig) else NodeConfig.from_props(config)
        if "log.dirs" not in self.config.props and "log.dir" not in self.config.props:
            # Kafka's default, kept for compatibility; but /tmp may be cleared at reboot, and a
            # user who forgot the key should learn where the data went.
            _LOG.warning(
                "Neither log.dirs nor log.dir is set: using Kafka's default %s (data under /tmp "
                "may not survive a reboot; set log.dirs)",
                ", ".join(str(d) for d in self.config.log_dirs),
            )
        self.clock_ms = clock_ms
        self.metrics = metrics if metrics is not None else RemoteStorageMetrics()
        self._given_rsm = rsm
        self._given_rlmm = rlmm
        self._lock = threading.RLock()
        self._topics: dict[str, _Topic] = {}
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._round_robin = itertools.count()
        self._started = False
        self._closed = False
        self.rsm: RemoteStorageManager | None = None
        self.rlmm: RemoteLogMetadataManager | None = None
        self.rlm: RemoteLogManager | None = None
        self._retention_pool: ScheduledPool | None = None
        self.cleaner: LogCleanerManager | None = None
        self._dir_locks: list[DirLock] = []

    # Lifecycle -----------------------------------------------------------------------------------
    def start(self) -> Node:
        """Lock and open the log directories, open the plugins and the RLM; lead every
        partition.

        ``LogDirError`` if a log directory cannot be created, listed or written;
        ``LogDirLockedError`` (one) if another node or Kafka broker holds one (its ``.lock``,
        ``tierlog.node.dir_lock``). A start that fails closes the node, releasing what it
        opened: it cannot be started again.
        """
        with self._lock:
            if self._closed:  # first: a closed node was started too, and must not pretend
                raise IllegalStateError("the node is closed")
            if self._started:
                return self
            try:
                self._start()
            except BaseException:
                self.close()
                raise
            return self

    def _start(self) -> None:
        for d in self.config.log_dirs:
            prepare_log_dir(d)  # LogDirError naming the directory and the reason
            # Before anything in it is read: the lock is held until close.
            self._dir_locks.append(DirLock(d).acquire())
        self._load_topics()
        if self.config.rlm.remote_log_storage_system_enable:
            self._start_remote()
        for topic in self._topics.values():
            for p in range(topic.partitions):
                self._open_partition(topic, p)
        self._lead([p for p in self._partitions.values()])
        self._retention_pool = ScheduledPool("tierlog-log-retention", 1)
        self._retention_pool.schedule_with_fixed_delay(
            self._retention_tick,
            self.config.log_retention_check_interval_ms / 1000,
            initial_delay_s=self.config.log_retention_check_interval_ms / 1000,
            name="local retention",
        )
        self.cleaner = self._new_cleaner()
        self.cleaner.start()
        self._started = True
        _LOG.info(
            "Node %d started: %d topics, %d partitions, remote storage %s",
            self.config.node_id,
            len(self._topics),
            len(self._partitions),
            "enabled" if self.rlm is not None else "disabled",
        )

    def _common_plugin_props(self) -> dict[str, str]:
        return {
            "log.dir": str(self.config.log_dirs[0]),
            "broker.id": str(self.config.node_id),
            "node.id": str(self.config.node_id),
        }

    def _rsm_props(self) -> dict[str, str]:
        """The configuration the node gives its RSM (also how a compaction task builds one)."""
        rlm_config = self.config.rlm
        props = {**self._common_plugin_props(), **rlm_config.rsm_props()}
        if rlm_config.rsm_plugin == "local" and "dir" not in props:
            props["dir"] = str(self.config.log_dirs[0] / REMOTE_STORAGE_DIR)
        return props

    def _start_remote(self) -> None:
        rlm_config = self.config.rlm
        common = self._common_plugin_props()
        if self._given_rsm is not None:
            self.rsm = self._given_rsm
        else:
            self.rsm = get_registry().create_storage_manager(
                rlm_config.rsm_plugin, self._rsm_props()
            )
        if self._given_rlmm is not None:
            self.rlmm = self._given_rlmm
        else:
            props = {**common, **rlm_config.rlmm_props()}
            self.rlmm = get_registry().create_metadata_manager(rlm_config.rlmm_plugin, props)
        self.rlm = RemoteLogManager(
            rlm_config,
            self.rsm,
            self.rlmm,
            broker_id=self.config.node_id,
            log_dir=self.config.log_dirs[0],
            metrics=self.metrics,
            clock_ms=self.clock_ms,
        )
        self.rlm.superseded_delete_delay_ms = (
            self.config.cleaner.remote_log_compaction_superseded_delete_delay_ms
        )

    def close(self) -> None:
        """Stop the tasks, close the logs (clean shutdown) and the plugins, then release the log
        directories' locks. Idempotent."""
        cleaner = self.cleaner
        if cleaner is not None:
            # Outside the node's lock: a cleaner thread takes it to list the partitions.
            cleaner.stop()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._retention_pool is not None:
                self._retention_pool.close()
            if self.rlm is not None:
                self.rlm.close()
            for part in self._partitions.values():
                try:
                    part.log.close()
                except Exception:  # close the others anyway
                    _LOG.exception("Closing the log of %s failed", part.tp)
            if self.rsm is not None and self._given_rsm is None:
                self.rsm.close()
            if self.rlmm is not None and self._given_rlmm is None:
                self.rlmm.close()
            for dir_lock in self._dir_locks:  # last: nothing of this node touches them now
                dir_lock.release()
            self._dir_locks.clear()
            if self._started:  # a node whose start failed never ran: its error says enough
                _LOG.info("Node %d stopped", self.config.node_id)

    def __enter__(self) -> Node:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Topics --------------------------------------------------------------------------------------
    def _topics_file(self) -> Path:
        return self.config.log_dirs[0] / TOPICS_FILE

    def _load_topics(self) -> None:
        path = self._topics_file()
        if path.exists():
            try:
                data = json.loads(path.read_text("utf-8"))
                for name, t in data.get("topics", {}).items():
                    self._topics[name] = _Topic(
                        name,
                        Uuid.from_string(t["id"]),
                        int(t["partitions"]),
                        dict(t["configs"]),
                        {int(p): int(e) for p, e in t.get("leader_epochs", {}).items()},
                    )
            except (ValueError, KeyError, TypeError) as e:
                raise IllegalStateError(f"{path} is not a valid topics file: {e}") from e
        self._adopt_partition_dirs()

    def _adopt_partition_dirs(self) -> None:
        """Partition directories on disk that the topics file does not know (a Kafka broker's
        log directory, a lost topics file): adopt them with the broker's default config."""
        found: dict[str, tuple[Uuid, int]] = {}
        for log_dir in self.config.log_dirs:
            for child in sorted(log_dir.iterdir()):
                meta = child / "partition.metadata"
                if not child.is_dir() or not meta.exists():
                    continue
                try:
                    parsed = parse_log_dir_name(child.name)
                    topic_id = read_partition_metadata(meta).topic_id
                except TierlogError as e:
                    _LOG.warning("Skipping %s: %s", child, e)
                    continue
                tp = parsed.topic_partition
                if parsed.suffix or topic_id is None or tp.topic.startswith("__"):
                    continue
                known, count = found.get(tp.topic, (topic_id, 0))
                found[tp.topic] = (known, max(count, tp.partition + 1))
        for name, (topic_id, count) in found.items():
            topic = self._topics.get(name)
            if topic is None:
                _LOG.info("Adopting topic %s (%d partitions) found on disk", name, count)
                self._topics[name] = _Topic(name, topic_id, count, {})
            elif topic.partitions < count:
                topic.partitions = count
        if found:
            self._save_topics()

    def _save_topics(self) -> None:
        data = {
            "topics": {
                name: {
                    **t.to_json(),
                    "leader_epochs": {str(p): e for p, e in sorted(t.leader_epochs.items())},
                }
                for name, t in sorted(self._topics.items())
            }
        }
        atomic_write(self._topics_file(), json.dumps(data, indent=2).encode() + b"\n")

    def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        configs: Mapping[str, object] | None = None,
    ) -> Uuid:
        """Create a topic (``num.partitions`` partitions by default) and lead its partitions.

        ``configs`` are topic-level overrides (Kafka's keys); validated before anything is
        written. Raises ``InvalidArgumentError`` if the topic exists or the name is illegal.
        """
        with self._lock:
            self._check_started()  # before the remote check: rlm is None until start
        count = self.config.num_partitions if partitions is None else partitions
        if not _LEGAL_TOPIC.fullmatch(name) or name in (".", ".."):
            raise InvalidArgumentError(
                f"invalid topic name {name!r}: up to 249 of [a-zA-Z0-9._-], not '.' or '..'"
            )
        if count < 1:
            raise InvalidArgumentError(f"a topic needs at least one partition, got {count}")
        overrides = {str(k): _text(v) for k, v in (configs or {}).items()}
        log_config = self.config.topic_config(overrides)  # validates
        if log_config.remote_storage_enable and self.rlm is None:
            raise InvalidArgumentError(
                f"topic {name} asks for remote.storage.enable=true but this node runs with "
                "remote.log.storage.system.enable=false"
            )
        with self._lock:
            self._check_started()
            if name in self._topics:
                raise TopicExistsError(f"Topic '{name}' already exists.")
            topic = _Topic(name, Uuid.random(), count, overrides)
            self._topics[name] = topic
            self._save_topics()
            opened = [self._open_partition(topic, p) for p in range(count)]
            self._lead(opened)
            _LOG.info("Created topic %s (%s) with %d partitions", name, topic.topic_id, count)
            return topic.topic_id

    def alter_topic_config(self, name: str, configs: Mapping[str, object]) -> None:
        """Replace some of a topic's overrides (an empty value removes one) and apply them."""
        with self._lock:
            self._check_started()
            topic = self._topic(name)
            merged = dict(topic.configs)
            for k, v in configs.items():
                if v is None or _text(v) == "":
                    merged.pop(str(k), None)
                else:
                    merged[str(k)] = _text(v)
            log_config = self.config.topic_config(merged)
            parts = [self._partitions[TopicPartition(name, p)] for p in range(topic.partitions)]
            old_config = parts[0].log.config
            # Kafka's dynamic-update rule: remote storage may only be turned off together with
            # remote.log.delete.on.disable=true, or remote data would be left untracked.
            old_config.with_overrides(log_config.to_props())
            disabling = old_config.remote_storage_enable and not log_config.remote_storage_enable
            if disabling and self.rlm is not None:
                errors = self.rlm.stop_partitions(
                    [p.tp for p in parts if p.log.remote_log_enabled], delete_remote=True
                )
                if errors:
                    self._lead(parts)  # still tiered: tiering goes on, the update can be retried
                    first = next(iter(errors.values()))
                    raise IllegalStateError(
                        f"disabling remote storage of topic {name} failed: {first}"
                    ) from first
            topic.configs = merged
            self._save_topics()
            for part in parts:
                local_start = part.log.local_log_start_offset
                part.log.update_config(log_config)
                if disabling:
                    # What was only in remote storage is gone: the log now starts locally.
                    part.log.maybe_increment_log_start_offset(
                        local_start, "remote storage disabled"
                    )
            # remote.log.copy.disable and friends change which tasks run.
            self._lead(parts)

    def delete_topic(self, name: str) -> None:
        """Delete a topic: its remote segments (through the RLM), then its local directories."""
        with self._lock:
            self._check_started()
            topic = self._topic(name)
            parts = [self._partitions[TopicPartition(name, p)] for p in range(topic.partitions)]
            if self.rlm is not None:
                managed = [p.tp for p in parts if p.log.remote_log_enabled]
                errors = self.rlm.stop_partitions(managed, delete_remote=True)
                if errors:
                    # The topic stays whole (and tiered) so that the delete can be retried.
                    self._lead(parts)
                    first = next(iter(errors.values()))
                    raise IllegalStateError(
                        f"deleting the remote data of topic {name} failed: {first}"
                    ) from first
            for p in parts:
                del self._partitions[TopicPartition(name, p.tp.partition)]
                p.log.delete()
            del self._topics[name]
            self._save_topics()
            # Its series go with it (Kafka's BrokerTopicStats.removeMetrics and the log's
            # removeLogMetrics); the all-topics counts keep what it contributed.
            self.metrics.remove_topic(name)

    def topics(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {name: t.to_json() for name, t in sorted(self._topics.items())}

    def _topic(self, name: str) -> _Topic:
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"This server does not host this topic: {name}")
        return topic

    def _open_partition(self, topic: _Topic, partition: int) -> _Partition:
        key = TopicPartition(topic.name, partition)
        existing = self._partitions.get(key)
        if existing is not None:
            return existing
        directory = self._partition_dir(topic.name, partition)
        log = LocalLog.open(
            directory,
            self.config.topic_config(topic.configs),
            topic_id=topic.topic_id,
            clock=self.clock_ms,
            high_watermark_follows_leo=True,
            cleaner_offset=_cleaner_offset(directory.parent, key),
        )
        part = _Partition(
            TopicIdPartition(topic.topic_id, topic.name, partition), log, leader_epoch=-1
        )
        self._partitions[key] = part
        self._register_log_gauges(part)
        return part

    def _register_log_gauges(self, part: _Partition) -> None:
        """Kafka's ``kafka.log:type=Log`` gauges of a partition, read from its log at each
        scrape (``UnifiedLog.newMetrics``)."""
        log = part.log
        labels: dict[str, str | int] = {"topic": part.tp.topic, "partition": part.tp.partition}
        gauges: dict[str, Callable[[], float]] = {
            "Size": lambda: float(log.size()),
            "LogEndOffset": lambda: float(log.log_end_offset),
            "LogStartOffset": lambda: float(log.log_start_offset),
            "NumLogSegments": lambda: float(len(log.segments)),
        }
        for name, read in gauges.items():
            self.metrics.register_gauge_callback(name, labels, read)

    def _partition_dir(self, topic: str, partition: int) -> Path:
        name = f"{topic}-{partition}"
        for d in self.config.log_dirs:
            if (d / name).exists():
                return d / name
        # Kafka's placement: the log directory holding the fewest partitions.
        counts = {
            d: sum(1 for c in d.iterdir() if (c / "partition.metadata").exists())
            for d in self.config.log_dirs
        }
        return min(self.config.log_dirs, key=lambda d: counts[d]) / name

    def _lead(self, parts: Sequence[_Partition]) -> None:
        """Become leader of ``parts`` in a new epoch (once per start), then tell the RLM."""
        new_epochs = []
        for part in parts:
            if part.leader_epoch < 0:
                topic = self._topics[part.tp.topic]
                latest = part.log.latest_epoch()
                previous = topic.leader_epochs.get(part.tp.partition, -1)
                part.leader_epoch = max(previous, -1 if latest is None else latest) + 1
                topic.leader_epochs[part.tp.partition] = part.leader_epoch
                new_epochs.append(part)
        if new_epochs:
            self._save_topics()  # the epochs are durable before anything is written in them
        for part in new_epochs:
            part.log.assign_epoch_start_offset(part.leader_epoch, part.log.log_end_offset)
            # The only replica is the whole ISR: everything in the log is committed. A log
            # whose checkpointed high watermark lags its end (a Kafka broker's directory, an
            # unclean stop) would otherwise hide those records from every read.
            part.log.maybe_increment_high_watermark(part.log.log_end_offset)
        if self.rlm is not None:
            self.rlm.on_leadership_change([p.log for p in parts if p.log.remote_log_enabled], [])

    def _new_cleaner(self) -> LogCleanerManager:
        """The log cleaner of the node's compacted topics; those that are tiered are cleaned
        through remote storage with the node's own RSM and RLMM."""
        config = self.config.cleaner
        tiered = None
        if self.rsm is not None and self.rlmm is not None:
            rlm_config = self.config.rlm
            spec = StorageSpec.of(rlm_config.rsm_plugin, self._rsm_props())
            register_open(spec, self.rsm)
            tiered = TieredCleaner(
                self.rlmm,
                self.rsm,
                spec,
                broker_id=self.config.node_id,
                scratch=config.remote_log_compaction_scratch_dir,
                false_positive_rate=config.remote_log_compaction_bloom_filter_fpp,
                bloom_size_ratio=config.remote_log_compaction_bloom_filter_size_ratio,
            )
        return LogCleanerManager(config, self._cleaner_targets, tiered, clock=self.clock_ms)

    def _cleaner_targets(self) -> list[CleanerTarget]:
        with self._lock:
            parts = [p for p in self._partitions.values() if p.leader_epoch >= 0]
        return [
            CleanerTarget(p.tp, p.log, p.leader_epoch, CleanerOffsetCheckpoints(p.log.dir.parent))
            for p in parts
            if p.log.config.compact
        ]

    def compact_now(
        self,
        topic: str,
        partition: int,
        *,
        force: bool = True,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> CleanResult:
        """One cleaning round of a compacted partition now (``tierlog compact`` on a node);
        ``progress(phase, done, total)`` follows it."""
        self._check_started()
        assert self.cleaner is not None
        return self.cleaner.clean_partition(topic, partition, force=force, progress=progress)

    def _check_started(self) -> None:
        if self._closed:
            raise IllegalStateError("the node is closed")
        if not self._started:
            raise IllegalStateError("the node is not started: call start() or use it in a with")

    def _partition(self, topic: str, partition: int) -> _Partition:
        with self._lock:
            self._check_started()
            part = self._partitions.get(TopicPartition(topic, partition))
            if part is None:
                self._topic(topic)
                raise UnknownTopicError(
                    f"This server does not host this topic-partition: {topic}-{partition}"
                )
            return part

    # Producing -----------------------------------------------------------------------------------
    def produce(
        self,
        topic: str,
        records: Iterable[ProduceInput],
        *,
        partition: int | None = None,
        compression: CompressionType | str = CompressionType.NONE,
    ) -> list[ProduceResult]:
        """Append records: a value, a ``(key, value)`` pair or a ``ProducerRecord`` each.

        Without ``partition``, keyed records go to ``murmur2(key) % partitions`` (Kafka's
        default partitioner) and unkeyed ones round-robin by call. Records are batched (about
        64 KiB per batch) and appended with the partition's leader epoch. An unknown topic is
        created first when ``auto.create.topics.enable`` is true.
        """
        with self._lock:
            self._check_started()
            if topic not in self._topics:
                if not self.config.auto_create_topics_enable:
                    raise UnknownTopicError(f"This server does not host this topic: {topic}")
                self.create_topic(topic)
            count = self._topics[topic].partitions
        if partition is not None and not 0 <= partition < count:
            raise UnknownTopicError(f"topic {topic} has no partition {partition}")
        codec = (
            CompressionType.from_name(compression) if isinstance(compression, str) else compression
        )
        now = self.clock_ms()
        sticky = next(self._round_robin) % count
        by_partition: dict[int, list[ProducerRecord]] = {}
        for item in records:
            rec = _to_producer_record(item)
            if partition is not None:
                p = partition
            elif rec.key is not None:
                p = (murmur2(rec.key) & 0x7FFFFFFF) % count
            else:
                p = sticky
            by_partition.setdefault(p, []).append(rec)
        results = []
        for p, recs in sorted(by_partition.items()):
            results.append(self._append(topic, p, recs, now, codec))
        return results

    def _append(
        self,
        topic: str,
        partition: int,
        records: list[ProducerRecord],
        now: int,
        compression: CompressionType,
    ) -> ProduceResult:
        part = self._partition(topic, partition)
        config = part.log.config
        # A batch must fit max.message.bytes and the segment size (the log refuses it
        # otherwise), so the target is the smallest of the three; sizes are upper bounds of the
        # encoded (uncompressed) size, so a batch is cut before it could exceed the limit. A
        # single record above the limit still goes alone, for the log to refuse it by name.
        limit = min(_BATCH_TARGET_BYTES, config.max_message_bytes, config.segment_size)
        first = last = -1
        append_time = -1
        batch: list[Record] = []
        size = RECORD_BATCH_OVERHEAD

        def flush() -> None:
            nonlocal first, last, append_time, batch, size
            if not batch:
                return
            info = self._append_to_log(part, build_batch(batch, compression=compression))
            if first < 0:
                first = info.first_offset
            last = info.last_offset
            append_time = info.log_append_time
            batch = []
            size = RECORD_BATCH_OVERHEAD

        for rec in records:
            ts = now if rec.timestamp is None else rec.timestamp
            rec_size = _record_size_bound(rec)
            if batch and size + rec_size > limit:
                flush()
            batch.append(Record(len(batch), ts, rec.key, rec.value, rec.headers))
            size += rec_size
        flush()
        return ProduceResult(topic, partition, first, last, append_time)

    def append_batches(
        self,
        topic: str,
        partition: int,
        batches: bytes,
        *,
        origin: Literal["client", "coordinator"] = "client",
    ) -> ProduceResult:
        """Append batches already in Kafka's format (``build_batch`` or a client's).

        ``origin="coordinator"`` is for transaction markers (``build_control_batch``): the
        transaction coordinator writes them in Kafka, and the log refuses a control batch from a
        client, so without it no transaction could ever be committed or aborted on this node.
        """
        if origin not in ("client", "coordinator"):
            raise InvalidArgumentError(f"origin must be client or coordinator, got {origin!r}")
        part = self._partition(topic, partition)
        info = self._append_to_log(part, batches, origin)
        return ProduceResult(
            topic, partition, info.first_offset, info.last_offset, info.log_append_time
        )

    def _append_to_log(
        self,
        part: _Partition,
        batches: bytes,
        origin: Literal["client", "coordinator"] = "client",
    ) -> LogAppendInfo:
        """Append as leader and mark ``BytesInPerSec`` / ``MessagesInPerSec`` as Kafka's
        ``ReplicaManager.appendToLocalLog`` does once an append succeeded: the batches' bytes
        and the records appended (a producer's retry of a batch already in the log counts again,
        as there)."""
        info = part.log.append_as_leader(batches, part.leader_epoch, origin=origin)
        self.metrics.record_append(
            part.tp.topic, len(batches), info.last_offset - info.first_offset + 1
        )
        return info

    # Reading -------------------------------------------------------------------------------------
    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = _DEFAULT_FETCH_BYTES,
        isolation: Literal["read_uncommitted", "read_committed"] = "read_uncommitted",
        timeout_s: float | None = None,
    ) -> FetchResult:
        """Records from ``offset`` (at least one batch if any is there, about ``max_bytes``).

        Below the local log start the read goes to remote storage on the RLM's reader pool;
        when the remote fetch quota is exhausted the result is empty with ``throttled`` set (the
        caller retries later, as a Kafka consumer does). ``OffsetOutOfRangeError`` outside
        ``[log start, log end]``. An offset compacted away reads the next batch, as in Kafka;
        when remote storage holds none after it (compaction emptied the end of the last remote
        segment), the read continues at the local log start.

        The remote read is waited for at most ``timeout_s`` or, by default,
        ``remote.fetch.max.wait.ms`` (Kafka's ``DelayedRemoteFetch``). A read not done by then
        is abandoned, as Kafka expires the delayed fetch: cancelled if it has not started on the
        reader pool (one already running is left to finish, its result dropped), and the
        answer is an empty result with ``remote_fetch_expired`` set: no records for this
        partition, *not an error*, so that a slow remote store delays a consumer instead of
        failing it; the consumer fetches the same offset again. Each expiry is counted in
        ``kafka.server:type=DelayedRemoteFetchMetrics,name=ExpiresPerSec`` (``/metrics``).
        """
        part = self._partition(topic, partition)
        log = part.log
        remote = False
        try:
            info = log.read(offset, max_bytes, isolation)
        except OffsetMovedToTieredStorageError:
            if self.rlm is None:
                raise
            if self.rlm.fetch_throttle_time_ms() > 0:
                return self._result(part, offset, None, remote=True, throttled=True)
            future = self.rlm.async_read(
                RemoteStorageFetchInfo(
                    max_bytes=max_bytes,
                    min_one_message=True,
                    topic_id_partition=part.tp,
                    fetch_offset=offset,
                    isolation=isolation,
                )
            )
            wait_s = (
                self.config.rlm.remote_fetch_max_wait_ms / 1000 if timeout_s is None else timeout_s
            )
            # ``wait`` rather than ``result(timeout=)``: a TimeoutError raised by the read itself
            # must stay the read's error, not pass for an expiry.
            done, _ = futures_wait([future], timeout=wait_s)
            if not done:
                cancelled = future.cancel()
                self.metrics.record_remote_fetch_expired()
                _LOG.debug(
                    "The remote read of %s at offset %d did not complete within %g s: answered "
                    "with no records (%s)",
                    part.tp,
                    offset,
                    wait_s,
                    "cancelled before it started" if cancelled else "left to finish, unused",
                )
                return self._result(part, offset, None, remote=True, expired=True)
            info = trim_partial_batch(future.result())
            remote = True
            if not info.records and not info.first_entry_incomplete:
                # No remote batch at or after the offset: compaction emptied the end of the
                # last remote segment, and the next batch is the first local one.
                local = self._read_from_local_start(log, offset, max_bytes, isolation)
                if local is not None:
                    info, remote = local, False
        committed = isolation == "read_committed"
        return self._result(part, offset, info, remote=remote, committed=committed)

    @staticmethod
    def _read_from_local_start(
        log: LocalLog,
        offset: int,
        max_bytes: int,
        isolation: Literal["read_uncommitted", "read_committed"],
    ) -> FetchDataInfo | None:
        """The local read a fetch below the local log start continues with when remote storage
        has no batch from ``offset`` on (the holes compaction leaves can end a remote segment,
        so the next batch may be the first local one); None if the local log start moved below
        ``offset`` meanwhile, or its data went to remote storage (the consumer fetches again)."""
        start = log.local_log_start_offset
        if start <= offset:
            return None
        try:
            return log.read(start, max_bytes, isolation)
        except OffsetOutOfRangeError:
            return None

    def _result(
        self,
        part: _Partition,
        offset: int,
        info: FetchDataInfo | None,
        *,
        remote: bool,
        throttled: bool = False,
        expired: bool = False,
        committed: bool = False,
    ) -> FetchResult:
        log = part.log
        data = bytes(info.records) if info is not None else b""
        aborted = tuple(info.aborted_transactions or ()) if info is not None else ()
        records, next_offset = decode_fetched(data, offset, aborted if committed else None)
        return FetchResult(
            topic=part.tp.topic,
            partition=part.tp.partition,
            records=records,
            next_offset=next_offset,
            high_watermark=log.high_watermark,
            last_stable_offset=log.last_stable_offset,
            log_start_offset=log.log_start_offset,
            local_log_start_offset=log.local_log_start_offset,
            from_remote=remote,
            throttled=throttled,
            batches=data,
            aborted_transactions=aborted,
            remote_fetch_expired=expired,
        )

    def list_offsets(
        self, topic: str, partition: int, spec: OffsetSpec | int
    ) -> TimestampAndOffset | None:
        """Kafka's ListOffsets: ``earliest``, ``latest``, ``earliest-local``, ``latest-tiered``
        or a timestamp (ms): the first offset whose record timestamp is >= it (None if none).

        By timestamp, remote segments are searched first (``RemoteLogManager``), then the local
        log. The remote search runs on the RLM's reader pool, as Kafka's
        ``DelayedRemoteListOffsets`` does, and is waited for at most
        ``remote.list.offsets.request.timeout.ms``: past it, the search is cancelled if it has
        not started, the expiry is counted in
        ``kafka.server:type=DelayedRemoteListOffsetsMetrics,name=ExpiresPerSec``, and
        ``RequestTimedOutError`` is raised (Kafka answers ``REQUEST_TIMED_OUT``).
        """
        part = self._partition(topic, partition)
        log = part.log
        if spec == "earliest":
            return log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP)
        if spec == "latest":
            return log.fetch_offset_by_timestamp(LATEST_TIMESTAMP)
        if spec == "earliest-local":
            return log.fetch_offset_by_timestamp(EARLIEST_LOCAL_TIMESTAMP)
        if spec == "latest-tiered":
            highest = log.highest_offset_in_remote_storage
            epoch = log.leader_epoch_cache.epoch_for_offset(highest) if highest >= 0 else None
            return TimestampAndOffset(-1, highest, epoch)
        if not isinstance(spec, int) or spec < 0:
            raise InvalidArgumentError(
                f"offset spec must be earliest, latest, earliest-local, latest-tiered or a "
                f"timestamp >= 0, got {spec!r}"
            )
        if self.rlm is not None and log.remote_log_enabled:
            found = self._remote_offset_for_timestamp(self.rlm, part, spec)
            if found is not None:
                return found
            # No remote segment reaches the timestamp: the local segments may (Kafka's
            # fetchOffsetByTimestamp searches the local log after the remote one).
        return log.fetch_offset_by_timestamp(spec)

    def _remote_offset_for_timestamp(
        self, rlm: RemoteLogManager, part: _Partition, timestamp: int
    ) -> TimestampAndOffset | None:
        """``RemoteLogManager.find_offset_by_timestamp`` on the reader pool, bounded by
        ``remote.list.offsets.request.timeout.ms`` (``list_offsets``)."""
        start = part.log.log_start_offset
        future = rlm.reader_pool.submit_task(
            lambda: rlm.find_offset_by_timestamp(part.tp, timestamp, start)
        )
        timeout_ms = self.config.rlm.remote_list_offsets_request_timeout_ms
        done, _ = futures_wait([future], timeout=timeout_ms / 1000)
        if not done:
            future.cancel()  # a search already running cannot be interrupted: it is dropped
            self.metrics.record_remote_list_offsets_expired(part.tp.topic, part.tp.partition)
            raise RequestTimedOutError(
                f"ListOffsets for timestamp {timestamp} of {part.tp.topic}-{part.tp.partition}: "
                f"the remote search did not complete within {timeout_ms} ms "
                "(remote.list.offsets.request.timeout.ms)"
            )
        return future.result()

    # Housekeeping --------------------------------------------------------------------------------
    def run_local_retention(self) -> int:
        """Delete local segments retention allows (tiered: only those already copied); the node
        runs this every ``log.retention.check.interval.ms``. Returns segments deleted."""
        with self._lock:
            parts = list(self._partitions.values())
        deleted = 0
        for part in parts:
            try:
                deleted += part.log.delete_retention_segments()
                part.log.remove_expired_producers()
            except TierlogError as e:
                _LOG.warning("Local retention of %s failed: %s", part.tp, e)
        return deleted

    def _retention_tick(self) -> None:
        self.run_local_retention()

    def tier_now(self, topic: str | None = None, *, timeout_s: float = 300.0) -> None:
        """Run the RLM's tasks now (each partition's copy, then its expiration) and wait for
        them, then local retention: what the periodic tasks do, without waiting for their
        interval.

        The runs happen on the RLM's own pools (``trigger``), not on this thread: a task run
        here could overlap its scheduled run, and two copy runs at once upload the same segment
        twice. ``IllegalStateError`` if a run does not end within ``timeout_s``.
        """
        if self.rlm is None:
            return
        with self._lock:
            self._check_started()
            parts = [p for p in self._partitions.values() if topic in (None, p.tp.topic)]
        tiered = [p for p in parts if p.log.remote_log_enabled]
        deadline = time.monotonic() + timeout_s
        for kind in ("copy task", "expiration task"):
            waits = []
            for part in tiered:
                for task in self.rlm.tasks(part.tp):
                    scheduled = task.scheduled
                    if task.kind != kind or task.cancelled or scheduled is None:
                        continue
                    # A run in progress may have started before this call: wait for the one
                    # after it, which ``trigger`` guarantees.
                    target = scheduled.runs + (2 if scheduled.running else 1)
                    scheduled.trigger()
                    waits.append((part, scheduled, target))
            for part, scheduled, target in waits:
                remaining = max(0.0, deadline - time.monotonic())
                if not scheduled.wait_runs(target, remaining) and not scheduled.cancelled:
                    raise IllegalStateError(
                        f"the {kind} of {part.tp} did not finish within {timeout_s} s"
                    )
        self.run_local_retention()

    def partitions(self) -> list[TopicPartition]:
        with self._lock:
            return sorted(self._partitions, key=lambda tp: (tp.topic, tp.partition))

    def status(self, topic: str | None = None) -> list[PartitionStatus]:
        """Offsets, sizes and tiering state of every partition (of ``topic``)."""
        with self._lock:
            parts = [p for p in self._partitions.values() if topic in (None, p.tp.topic)]
        out = []
        for part in sorted(parts, key=lambda p: (p.tp.topic, p.tp.partition)):
            out.append(self._status(part))
        return out

    def _status(self, part: _Partition) -> PartitionStatus:
        log = part.log
        remote_segments = remote_bytes = 0
        tasks: list[dict[str, Any]] = []
        if self.rlm is not None and log.remote_log_enabled and self.rlmm is not None:
            try:
                for s in self.rlmm.list_remote_log_segments(part.tp):
                    # Copies in progress (or abandoned) and deletions in progress are not data
                    # a reader can get: count what is tiered.
                    if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                        remote_segments += 1
                        remote_bytes += s.segment_size_in_bytes
            except TierlogError:
                pass
            for task in self.rlm.tasks(part.tp):
                tasks.append(
                    {
                        "kind": task.kind,
                        "cancelled": task.cancelled,
                        "failures": task.failures,
                        "last_error": None if task.last_error is None else str(task.last_error),
                    }
                )
        segments = log.segments
        local_only = [s for s in segments if s.base_offset >= log.highest_offset_in_remote_storage]
        return PartitionStatus(
            topic=part.tp.topic,
            partition=part.tp.partition,
            topic_id=str(part.tp.topic_id),
            leader_epoch=part.leader_epoch,
            log_start_offset=log.log_start_offset,
            local_log_start_offset=log.local_log_start_offset,
            log_end_offset=log.log_end_offset,
            high_watermark=log.high_watermark,
            last_stable_offset=log.last_stable_offset,
            highest_offset_in_remote_storage=log.highest_offset_in_remote_storage,
            local_segments=len(segments),
            local_bytes=sum(s.size for s in segments),
            remote_segments=remote_segments,
            remote_bytes=remote_bytes,
            copy_lag_bytes=max(0, sum(s.size for s in local_only) - log.active_segment.size),
            copy_lag_segments=max(0, len(local_only) - 1),
            remote_storage_enabled=log.remote_log_enabled,
            tasks=tasks,
        )

    def log(self, topic: str, partition: int) -> LocalLog:
        """The partition's local log (for tools and tests)."""
        return self._partition(topic, partition).log


# Helpers -----------------------------------------------------------------------------------------
def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_RECORD_OVERHEAD_BOUND: Final = 5 + 1 + 10 + 5 + 5 + 5 + 5
"""The most a v2 record adds to its key, value and headers: varints for its length, timestamp
delta, offset delta, key and value lengths and header count, plus the attributes byte."""


def _record_size_bound(rec: ProducerRecord) -> int:
    """An upper bound of ``rec``'s encoded size in a v2 batch (uncompressed)."""
    size = _RECORD_OVERHEAD_BOUND + len(rec.key or b"") + len(rec.value or b"")
    for key, value in rec.headers:
        size += 10 + len(key.encode("utf-8", "surrogateescape")) + len(value or b"")
    return size


def _to_producer_record(item: ProduceInput) -> ProducerRecord:
    if isinstance(item, ProducerRecord):
        return item
    if isinstance(item, bytes | bytearray | memoryview):
        return ProducerRecord(bytes(item))
    if isinstance(item, tuple) and len(item) == 2:
        key, value = item
        return ProducerRecord(value, key)
    raise InvalidArgumentError(
        f"a record to produce is bytes, a (key, value) tuple or a ProducerRecord, got {item!r}"
    )


def _cleaner_offset(log_dir: Path, tp: TopicPartition) -> int | None:
    """The partition's entry of the log directory's ``cleaner-offset-checkpoint`` (a Kafka
    broker's directory carries one). An unreadable file is reported and treated as no entry:
    the log then counts as never cleaned, which only makes retention keep more."""
    try:
        return CleanerOffsetCheckpoints(log_dir).get(tp)
    except CorruptCheckpointError as e:
        _LOG.warning("Ignoring the cleaner offset checkpoint of %s: %s", log_dir, e)
        return None


def decode_fetched(
    data: bytes, offset: int, aborted: Sequence[AbortedTxn] | None
) -> tuple[list[Record], int]:
    """The records at or after ``offset`` in whole batches ``data``, and the next offset.

    Control batches are skipped. With ``aborted`` (read_committed), the records of aborted
    transactions are dropped as Kafka's consumer drops them: a transactional batch of producer
    P is skipped from the first offset of one of P's aborted transactions until P's abort
    marker.
    """
    records: list[Record] = []
    next_offset = offset
    pending = sorted(aborted or (), key=lambda a: a.first_offset)
    aborting: set[int] = set()
    for _, header, batch_records in iter_batches_with_records(data):
        next_offset = max(next_offset, header.last_offset + 1)
        if aborted is not None:
            while pending and pending[0].first_offset <= header.last_offset:
                aborting.add(pending.pop(0).producer_id)
        if header.is_control:
            if (
                aborted is not None
                and header.producer_id in aborting
                and batch_records
                and decode_control_record(batch_records[0]).type == ControlRecordType.ABORT
            ):
                aborting.discard(header.producer_id)
            continue
        if aborted is not None and header.is_transactional and header.producer_id in aborting:
            continue
        records.extend(r for r in batch_records if r.offset >= offset)
    return records, next_offset
