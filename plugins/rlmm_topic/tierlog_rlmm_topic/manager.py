"""The ``topic`` RemoteLogMetadataManager: Kafka's TopicBasedRemoteLogMetadataManager.

Every metadata event is a record of the ``__remote_log_metadata`` topic, in the partition
Kafka's partitioner picks, with the bytes Kafka's serde writes; every node rebuilds the cache
of the partitions it hosts by reading that topic. A Kafka broker and tierlog therefore share
one history: tierlog reads what a Kafka cluster tiered, and the other way round.

Configuration: ``config.py`` (Kafka's keys, the client prefixes, ``node.id``). The parts:
``topic.ensure_topic`` (create or check the topic), ``producer.MetadataProducer`` (null key,
explicit partition, idempotent ``acks=all``), ``consumer.ConsumerTask`` (assignment, replay,
readiness, read-your-writes) feeding ``applier.StoreApplier``, which applies the events to a
``RemotePartitionMetadataStore``: reads answer exactly as Kafka's cache does.

Semantics (as TBRLMM, except where noted)
-----------------------------------------
- ``configure`` initializes synchronously: it creates or checks the topic (retrying until
  ``remote.log.metadata.initialization.retry.max.timeout.ms``), starts the producer and the
  consumer thread, and returns, or raises (``ConfigError`` for a partition-count mismatch,
  ``RemoteStorageException`` naming the bootstrap servers when the cluster cannot be reached).
  Kafka does this on a thread started by ``onBrokerReady`` and exits the broker on failure;
  tierlog has no such callback and a library does not exit the process.
- ``on_partition_leadership_changes`` assigns the partitions (leaders and followers alike);
  each one not hosted yet is replayed from the beginning of its metadata partition and becomes
  ready (``is_ready``) once the end offset seen at assignment is reached. Until then reads raise
  the retriable ``RemoteStorageNotReadyException``. ``on_stop_partitions`` drops the partitions'
  caches at once.
- A mutating call validates its argument (``add`` needs COPY_SEGMENT_STARTED, ``update`` may
  not use it: ``InvalidArgumentError``), then produces the record, and returns a ``Future`` that
  completes once **this node's consumer has applied it** (read-your-writes), or fails after
  ``remote.log.metadata.consume.wait.ms`` (``ConsumeTimeoutError``, a ``TimeoutError``).
- **Difference: a write for a partition not assigned here is refused before anything is
  produced** (``RemoteStorageException``). Kafka produces the record first and then fails the
  future because its consumer cannot read it back, leaving an event in the topic that the
  caller believes failed. Likewise, as the embedded RLMM decides (and the SPI's
  ``@throws``): an update of a segment this node does not know raises
  ``RemoteResourceNotFoundException`` before producing (Kafka produces it and its consumer logs
  a WARNING), and ``add``/``update`` of a partition whose deletion finished
  (DELETE_PARTITION_FINISHED) raise ``RemoteResourceNotFoundException``. Partition-delete
  events are always written.
- Invalid transitions are written and then dropped by the cache with an ERROR log, as Kafka's
  consumer does, so the topic holds what a broker would have produced.
- **Difference: a record that cannot be decoded or applied stops its metadata partition** with
  an error naming topic, partition and offset (``UnreadableMetadataRecordError``), logged at
  ERROR; partitions still loading from it never become ready and their reads raise that error
  (not the retriable not-ready), writes to its partitions fail. Kafka's ConsumerTask stops
  entirely on such a record, for every partition, with nothing but a log line.
- ``close()`` flushes the producer, stops the consumer thread and closes the clients; later
  calls raise ``IllegalStateError`` (``is_ready`` answers False instead: it is a status query).

Threads: reads go straight to the store (its own short locks); they never wait on Kafka.
Writes return as soon as the record is handed to librdkafka; their futures are completed by
the consumer thread.

Extending it
------------
The compacted RLMM (``tierlog-rlmm-compacted``) is this class with other records: it
subclasses it and overrides the protected hooks, each a step of the lifecycle above:
``_new_applier`` (what the consumer feeds), ``_parse_config``, ``_ensure_topics``,
``_new_producer``, ``_consumer_configs`` and ``_write`` (what one mutating call produces). The
checks of a write (``_check_write``: assignment, a stopped metadata partition, the call's own
check) and its completion when this node's consumer applied a record (``_when_applied``) are
shared. Every message names ``type(self).__name__``, so a subclass's errors name it.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Set
from concurrent.futures import Future
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

from tierlog.metadata import RemotePartitionMetadataStore, metadata_partition, serde, write_checks
from tierlog.spi import (
    ConfigError,
    IllegalStateError,
    RemoteLogMetadata,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemoteStorageException,
    RemoteStorageNotReadyException,
    TopicIdPartition,
)
from tierlog_rlmm_topic.applier import RecordApplier, StoreApplier
from tierlog_rlmm_topic.config import (
    COMMON_CLIENT_PREFIX,
    INIT_RETRY_MAX_TIMEOUT_MS,
    MIN_ISR,
    NODE_ID,
    NUM_PARTITIONS,
    REPLICATION_FACTOR,
    TOPIC_NAME,
    TopicRlmmConfig,
)
from tierlog_rlmm_topic.replay import ReplayProgressSettings

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

    from tierlog_rlmm_topic.consumer import ConsumerTask

__all__ = [
    "BOOTSTRAP_SERVERS_ENV",
    "ManagedApplier",
    "ManagedProducer",
    "TopicBasedRemoteLogMetadataManager",
]

_LOG = logging.getLogger(__name__)

BOOTSTRAP_SERVERS_ENV: Final = "TIERLOG_KAFKA_BOOTSTRAP_SERVERS"
"""Where ``conformance_config()`` finds the Kafka cluster the conformance suite runs against."""

_T = TypeVar("_T")


class ManagedApplier(RecordApplier, Protocol):
    """The applier the manager feeds its consumer task with: a ``RecordApplier`` that also
    tells whether a partition's deletion finished (writes to it are refused)."""

    def is_deleted(self, topic_id_partition: TopicIdPartition) -> bool: ...


class ManagedProducer(Protocol):
    """What the manager itself does with its producer: close it. How records are sent is the
    business of the ``_write`` that goes with the producer ``_new_producer`` builds."""

    def close(self, timeout: float = 30.0) -> None: ...


class TopicBasedRemoteLogMetadataManager(RemoteLogMetadataManager):
    """Kafka's TBRLMM on confluent-kafka; see the module docstring.

    Constructed with no arguments by the RemoteLogManager; ``progress`` (tests, tools) changes
    when a long replay shows its progress and how.
    """

    def __init__(self, *, progress: ReplayProgressSettings | None = None) -> None:
        self._lock = threading.Lock()
        self._store = RemotePartitionMetadataStore()
        self._applier = self._new_applier(self._store)
        self._progress = progress
        self._config: TopicRlmmConfig | None = None
        self._producer: ManagedProducer | None = None
        self._consumer: ConsumerTask | None = None
        self._closed = False

    # Conformance -------------------------------------------------------------------------------
    @classmethod
    def conformance_config(cls) -> dict[str, str]:
        """A fresh topic (3 partitions, one replica) on the cluster named by the environment
        variable ``TIERLOG_KAFKA_BOOTSTRAP_SERVERS``; every instance of a test, restarts
        included, shares it, so a restart replays it."""
        servers = os.environ.get(BOOTSTRAP_SERVERS_ENV, "").strip()
        if not servers:
            raise ConfigError(
                f"the topic RLMM's conformance configuration needs a Kafka cluster: set "
                f"{BOOTSTRAP_SERVERS_ENV} to its bootstrap servers (host:port[,host:port...]); "
                "the suite creates a topic per test on it"
            )
        return {
            f"{COMMON_CLIENT_PREFIX}bootstrap.servers": servers,
            TOPIC_NAME: f"tierlog-rlmm-conformance-{uuid.uuid4().hex}",
            NUM_PARTITIONS: "3",
            REPLICATION_FACTOR: "1",
            MIN_ISR: "1",
            NODE_ID: "1",
            INIT_RETRY_MAX_TIMEOUT_MS: "60000",
        }

    # Hooks of a subclass ---------------------------------------------------------------------
    def _new_applier(self, store: RemotePartitionMetadataStore) -> ManagedApplier:
        """The applier of the consumer task, feeding ``store`` (called by ``__init__``)."""
        return StoreApplier(store)

    def _parse_config(self, configs: Mapping[str, str]) -> TopicRlmmConfig:
        """The topic-RLMM part of the configuration; a subclass parses its own keys here too
        (and keeps what it needs: the hooks below run after this one)."""
        return TopicRlmmConfig.from_configs(configs)

    def _ensure_topics(self, admin: AdminClient, config: TopicRlmmConfig) -> None:
        """Create or check the topic(s) before any client starts."""
        from tierlog_rlmm_topic.topic import ensure_topic

        ensure_topic(admin, config)

    def _new_producer(self, config: TopicRlmmConfig) -> ManagedProducer:
        """The producer ``_write`` uses."""
        from tierlog_rlmm_topic.producer import MetadataProducer

        return MetadataProducer(config.topic_name, config.producer)

    def _consumer_configs(self, config: TopicRlmmConfig) -> Mapping[str, str]:
        """The consumer task's client configuration."""
        return config.consumer

    # Configuration -----------------------------------------------------------------------------
    @property
    def config(self) -> TopicRlmmConfig:
        """The parsed configuration; ``IllegalStateError`` before ``configure``."""
        if self._config is None:
            raise IllegalStateError(f"{type(self).__name__} is not configured")
        return self._config

    @property
    def consumer_task(self) -> ConsumerTask:
        """The consumer task (tools and tests); ``IllegalStateError`` before ``configure``."""
        return self._open()[1]

    def configure(self, configs: Mapping[str, str]) -> None:
        """Parse the configuration, create or check the topic, start the clients."""
        from confluent_kafka.admin import AdminClient

        from tierlog_rlmm_topic.client_factory import new_client
        from tierlog_rlmm_topic.consumer import ConsumerTask

        name = type(self).__name__
        with self._lock:
            if self._closed:
                raise IllegalStateError(f"{name} is closed")
            if self._config is not None:
                raise IllegalStateError(f"{name} is already configured")
        config = self._parse_config(configs)
        admin = new_client(AdminClient, config.admin, "admin")
        try:
            self._ensure_topics(admin, config)
        finally:
            admin.poll(0)  # forwards its queued log lines before it goes
            del admin
        producer = self._new_producer(config)
        try:
            num_partitions = config.num_partitions
            consumer = ConsumerTask(
                config.topic_name,
                self._consumer_configs(config),
                self._applier,
                lambda tip: metadata_partition(tip, num_partitions),
                progress=self._progress,
                stall_timeout_s=config.consume_stall_timeout_ms / 1000,
            )
        except BaseException:
            producer.close()
            raise
        with self._lock:
            if self._closed:
                producer.close()
                consumer.close()
                raise IllegalStateError(f"{name} is closed")
            self._config, self._producer, self._consumer = config, producer, consumer
        consumer.start()
        _LOG.info(
            "%s of node %d using %s (%d partitions) on %s",
            name,
            config.node_id,
            config.topic_name,
            config.num_partitions,
            config.bootstrap_servers,
        )

    # Internals ---------------------------------------------------------------------------------
    def _open(self) -> tuple[ManagedProducer, ConsumerTask, TopicRlmmConfig]:
        if self._closed:
            raise IllegalStateError(f"{type(self).__name__} is closed")
        producer, consumer, config = self._producer, self._consumer, self._config
        if producer is None or consumer is None or config is None:
            raise IllegalStateError(
                f"{type(self).__name__} is not configured: call configure() first"
            )
        return producer, consumer, config

    def _read(self, tip: TopicIdPartition, call: Callable[[], _T]) -> _T:
        """``call()``, with a partition stopped on an unreadable record reported as such
        instead of as the retriable "not ready"."""
        try:
            return call()
        except RemoteStorageNotReadyException:
            self._raise_failure(tip)
            raise

    def _raise_failure(self, tip: TopicIdPartition) -> None:
        consumer = self._consumer
        failure = consumer.failure_for(tip) if consumer is not None else None
        if failure is not None:
            raise failure from None

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
            known = self._read(
                tip, lambda: self._store.segment_metadata(tip, update.remote_log_segment_id)
            )
            if known is None:
                raise write_checks.unknown_segment(update.remote_log_segment_id)

        return self._write(tip, update, check)

    def put_remote_partition_delete_metadata(
        self, remote_partition_delete_metadata: RemotePartitionDeleteMetadata
    ) -> Future[None]:
        delete = remote_partition_delete_metadata
        return self._write(delete.topic_id_partition, delete, lambda: None)

    def _check_not_deleted(self, tip: TopicIdPartition) -> None:
        if self._applier.is_deleted(tip):
            raise write_checks.partition_deleted(tip)

    def _write(
        self, tip: TopicIdPartition, metadata: RemoteLogMetadata, check: Callable[[], None]
    ) -> Future[None]:
        """Check, produce, and complete when this node's consumer applied the record.

        A subclass that builds another producer (``_new_producer``) overrides this too."""
        from tierlog_rlmm_topic.producer import MetadataProducer

        producer = self._open()[0]
        if not isinstance(producer, MetadataProducer):  # a subclass's producer, not its _write
            raise IllegalStateError(
                f"{type(self).__name__} builds a {type(producer).__name__} but does not "
                "override _write"
            )
        payload = serde.serialize(metadata)  # a value that cannot be encoded fails here
        partition = self._check_write(tip, check)
        return self._when_applied(tip, partition, producer.send(partition, payload))

    def _check_write(self, tip: TopicIdPartition, check: Callable[[], None]) -> int:
        """Refuse a write this node could not read back or must not make: ``tip`` not
        assigned, its metadata partition stopped, ``check()`` failing. Returns the metadata
        partition of ``tip``."""
        _, consumer, config = self._open()
        partition = metadata_partition(tip, config.num_partitions)
        if not consumer.is_assigned(tip):
            raise RemoteStorageException(
                f"partition {tip} (metadata partition {partition} of {config.topic_name}) is not "
                "assigned to this RLMM, so it could not read its own write back: call "
                f"on_partition_leadership_changes for it first; {consumer.assigned_count()} "
                "partition(s) are assigned"
            )
        failure = consumer.failure_for(tip)
        if failure is not None:
            raise failure
        check()
        return partition

    def _when_applied(
        self, tip: TopicIdPartition, partition: int, sent: Future[tuple[int, int]]
    ) -> Future[None]:
        """A future completed once the record ``sent`` gives the offset of is applied by this
        node's consumer (read-your-writes), or failed with the send's or the wait's error.
        Called after ``_check_write``: the clients exist (``close`` never unsets them)."""
        consumer, config = self._consumer, self._config
        assert consumer is not None and config is not None
        result: Future[None] = Future()
        result.set_running_or_notify_cancel()

        def applied(done: Future[None]) -> None:
            error = done.exception()
            if error is not None:
                result.set_exception(error)
            else:
                result.set_result(None)

        def delivered(done: Future[tuple[int, int]]) -> None:
            error = done.exception()
            if error is not None:
                result.set_exception(error)
                return
            _, offset = done.result()
            consumer.wait_applied(tip, partition, offset, config.consume_wait_ms).add_done_callback(
                applied
            )

        sent.add_done_callback(delivered)
        return result

    # Assignment --------------------------------------------------------------------------------
    def on_partition_leadership_changes(
        self,
        leader_partitions: Set[TopicIdPartition],
        follower_partitions: Set[TopicIdPartition],
    ) -> None:
        """Host these partitions: those not hosted yet are replayed (leaders and followers
        alike, as Kafka)."""
        _, consumer, _ = self._open()
        consumer.add_assignments(set(leader_partitions) | set(follower_partitions))

    def on_stop_partitions(self, partitions: Set[TopicIdPartition]) -> None:
        """Forget the partitions' caches (their events stay in the topic for a later load)."""
        _, consumer, _ = self._open()
        consumer.remove_assignments(partitions)

    def is_ready(self, topic_id_partition: TopicIdPartition) -> bool:
        """Assigned, replayed and not deleted; False after ``close``."""
        consumer = self._consumer
        if self._closed or consumer is None or not consumer.is_assigned(topic_id_partition):
            return False
        return self._store.is_initialized(topic_id_partition)

    # Reads -------------------------------------------------------------------------------------
    def remote_log_segment_metadata(
        self, topic_id_partition: TopicIdPartition, epoch_for_offset: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        if self._closed or self._consumer is None:  # every remote read asks: no call when open
            self._open()
        try:
            return self._store.remote_log_segment_metadata(
                topic_id_partition, epoch_for_offset, offset
            )
        except RemoteStorageNotReadyException:
            self._raise_failure(topic_id_partition)
            raise

    def highest_offset_for_epoch(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int
    ) -> int | None:
        self._open()
        return self._read(
            topic_id_partition,
            lambda: self._store.highest_offset_for_epoch(topic_id_partition, leader_epoch),
        )

    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> Iterator[RemoteLogSegmentMetadata]:
        self._open()
        return self._read(
            topic_id_partition,
            lambda: self._store.list_remote_log_segments(topic_id_partition, leader_epoch),
        )

    def remote_log_size(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int:
        self._open()
        return self._read(
            topic_id_partition,
            lambda: self._store.remote_log_size(topic_id_partition, leader_epoch),
        )

    def next_segment_with_txn_index(
        self, topic_id_partition: TopicIdPartition, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        self._open()
        return self._read(
            topic_id_partition,
            lambda: self._store.next_segment_with_txn_index(topic_id_partition, epoch, offset),
        )

    # Lifecycle ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Flush the producer, stop the consumer thread, close the clients; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            producer, consumer = self._producer, self._consumer
        if consumer is not None:
            consumer.stop()  # stops while the producer flushes
        if producer is not None:
            producer.close()
        if consumer is not None:
            consumer.close()
        self._store.close()

    def __repr__(self) -> str:
        config = self._config
        name = type(self).__name__
        if config is None:
            return f"{name}(unconfigured)"
        return (
            f"{name}(topic={config.topic_name}, "
            f"partitions={config.num_partitions}, servers={config.bootstrap_servers})"
        )
