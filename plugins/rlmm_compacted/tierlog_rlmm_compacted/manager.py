"""The ``compacted`` RemoteLogMetadataManager (KAFKA-20033): the topic RLMM with keyed records.

It is ``TopicBasedRemoteLogMetadataManager`` (assignment, replay, readiness, read-your-writes,
the checks of a write, reads, close: all unchanged) with other records, through the base's
hooks:

- **configuration** ``CompactedRlmmConfig`` (``config.py``): the topic RLMM's keys plus the
  audit topic, the cleanup interval, the level refresh and the projection topic's configs;
- **topics** ``topics.ensure_topics``: the projection topic (``remote.log.metadata.topic.name``,
  created compacted unless a Kafka broker's TBRLMM reads it) and the audit topic; the
  projection topic's ``cleanup.policy`` is the **compaction level** (``compact`` => 1);
- **applier** ``ProjectionApplier`` (``projection.py``): keyed records, tombstones and legacy
  null-key records into the same cache;
- **producer** ``TransactionalMetadataProducer`` (``txn_producer.py``); the consumer reads
  ``read_committed``;
- **a write** asks the applier for a ``PlannedWrite`` (key, value, legacy audit bytes,
  tombstones at level 1) and sends, in one transaction, the projection record, its audit copy
  (when the audit is enabled) and the tombstones; the call's future completes when this node's
  consumer applied the projection record (tombstones are not waited for).

The level is read at ``configure`` and again every
``remote.log.metadata.compaction.level.refresh.ms``; it only goes forward: once this node saw
level 1 it keeps writing tombstones, and a projection topic set back to ``delete`` is logged at
ERROR (the operator must restore ``compact``: a legacy reader would now meet tombstones anyway).

The **cleanup manager** (``cleanup.py``) tombstones orphan keys of the partitions this node
leads every ``remote.log.metadata.cleanup.interval.ms`` at level 1, through the same write path
and lock, skipping a partition with writes in flight (counted here from plan to applied).

**Position records** (``position.py``): at level 0 on ``__remote_log_metadata`` (the topic a
Kafka broker's TBRLMM reads), a metadata partition this node's transactions ended on gets one
plain null-key position record once it has been idle ``position.DEFAULT_DELAY_S``, so that it
never stays ending in a commit marker, which Kafka 4.3.1 cannot read past when it marks a newly
assigned user partition ready. Every transaction sent to a projection partition notes it when
it ends (committed or not); the records are written by an idempotent ``MetadataProducer`` (the
topic RLMM's), created with the first one and closed by ``close``, after the pending ones were
written. A failed one is logged and tried again; a metadata write never waits for or fails on
one.

Threads: writes plan and queue under one lock, so two writes of a partition reach the topic in
the order they were planned; the level refresh and the cleanup run on threads of their own,
stopped by ``close`` before the clients are.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Set
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Final

from tierlog_rlmm_topic.config import TOPIC_NAME, TopicRlmmConfig
from tierlog_rlmm_topic.manager import (
    BOOTSTRAP_SERVERS_ENV,
    ManagedApplier,
    ManagedProducer,
    TopicBasedRemoteLogMetadataManager,
)
from tierlog_rlmm_topic.replay import ReplayProgressSettings

from tierlog.metadata import RemotePartitionMetadataStore, metadata_partition
from tierlog.spi import (
    ConfigError,
    IllegalStateError,
    RemoteLogMetadata,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog_rlmm_compacted.cleanup import CleanupManager
from tierlog_rlmm_compacted.config import AUDIT_TOPIC_NAME, CompactedRlmmConfig
from tierlog_rlmm_compacted.keys import MetadataKey
from tierlog_rlmm_compacted.position import PositionWriter, position_value
from tierlog_rlmm_compacted.projection import PlannedWrite, ProjectionApplier

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient
    from tierlog_rlmm_topic.producer import MetadataProducer

    from tierlog_rlmm_compacted.txn_producer import OutRecord, TransactionalMetadataProducer

__all__ = ["CompactedRemoteLogMetadataManager"]

_LOG = logging.getLogger(__name__)

_LEVEL_READ_TIMEOUT_S: Final = 10.0
_POSITION_CLOSE_S: Final = 10.0
"""How long ``close`` lets the last position records go out before it gives up on them."""


class CompactedRemoteLogMetadataManager(TopicBasedRemoteLogMetadataManager):
    """The compacted RLMM; see the module docstring.

    Constructed with no arguments by the RemoteLogManager; ``progress`` as for the topic RLMM.
    """

    _projection: ProjectionApplier

    def __init__(self, *, progress: ReplayProgressSettings | None = None) -> None:
        super().__init__(progress=progress)  # builds the applier: _new_applier
        self._compacted: CompactedRlmmConfig | None = None
        self._level = 0
        self._reverted_logged = False
        self._write_lock = threading.Lock()
        self._in_flight: dict[TopicIdPartition, int] = {}
        self._leaders: set[TopicIdPartition] = set()
        self._admin: AdminClient | None = None
        self._stop = threading.Event()
        self._refresher: threading.Thread | None = None
        self._cleanup: CleanupManager | None = None
        self._positions: PositionWriter | None = None
        self._position_lock = threading.Lock()
        self._position_producer: MetadataProducer | None = None
        self._position_closed = False

    # Conformance -------------------------------------------------------------------------------
    @classmethod
    def conformance_config(cls) -> dict[str, str]:
        """Fresh projection and audit topics (3 partitions, one replica) on the cluster named
        by ``TIERLOG_KAFKA_BOOTSTRAP_SERVERS``, shared by every instance of a test (restarts
        replay them)."""
        if not os.environ.get(BOOTSTRAP_SERVERS_ENV, "").strip():
            raise ConfigError(
                f"the compacted RLMM's conformance configuration needs a Kafka cluster: set "
                f"{BOOTSTRAP_SERVERS_ENV} to its bootstrap servers (host:port[,host:port...]); "
                "the suite creates a projection and an audit topic per test on it"
            )
        config = super().conformance_config()
        name = f"tierlog-rlmm-compacted-conformance-{uuid.uuid4().hex}"
        config[TOPIC_NAME] = name
        config[AUDIT_TOPIC_NAME] = f"{name}-audit"
        return config

    @classmethod
    def conformance_capabilities(cls) -> Any:
        """Kafka's TBRLMM's capabilities but one: a COPY_SEGMENT_STARTED upload superseded
        under its key by a later add (seed scenario 3) is forgotten, not kept."""
        from tierlog.conformance import RemoteLogMetadataManagerCapabilities, Unsupported

        return RemoteLogMetadataManagerCapabilities(
            keeps_superseded_uploads=Unsupported(
                "KAFKA-20033 keys: a later add of the same end offset under the same leader "
                "epoch takes the key of a COPY_SEGMENT_STARTED upload, which a reader of the "
                "compacted topic no longer sees (seed scenario 3)"
            )
        )

    # Hooks of the topic RLMM -------------------------------------------------------------------
    def _new_applier(self, store: RemotePartitionMetadataStore) -> ManagedApplier:
        self._projection = ProjectionApplier(store)
        return self._projection

    def _parse_config(self, configs: Mapping[str, str]) -> TopicRlmmConfig:
        compacted = CompactedRlmmConfig.from_configs(configs)
        self._compacted = compacted
        return compacted.base

    def _ensure_topics(self, admin: AdminClient, config: TopicRlmmConfig) -> None:
        from tierlog_rlmm_compacted.topics import ensure_topics

        level = ensure_topics(admin, self.compacted_config)
        with self._write_lock:
            self._level = max(self._level, level)

    def _new_producer(self, config: TopicRlmmConfig) -> ManagedProducer:
        from tierlog_rlmm_compacted.txn_producer import TransactionalMetadataProducer

        return TransactionalMetadataProducer(
            self.compacted_config.producer,
            init_timeout_s=config.initialization_retry_max_timeout_ms / 1000,
        )

    def _consumer_configs(self, config: TopicRlmmConfig) -> Mapping[str, str]:
        return self.compacted_config.consumer

    # Configuration and lifecycle ---------------------------------------------------------------
    @property
    def compacted_config(self) -> CompactedRlmmConfig:
        """The plugin's whole configuration (``config`` is its topic-RLMM part);
        ``IllegalStateError`` before ``configure``."""
        if self._compacted is None:
            raise IllegalStateError(f"{type(self).__name__} is not configured")
        return self._compacted

    @property
    def level(self) -> int:
        """The compaction level this node writes at: 1 once it saw the projection topic
        compacted (forward-only), else 0."""
        with self._write_lock:
            return self._level

    @property
    def applier(self) -> ProjectionApplier:
        """The projection state (tools and tests: ``keys``, ``orphan_keys``)."""
        return self._projection

    @property
    def positions(self) -> PositionWriter | None:
        """The position record writer (``position.py``); None when this node never writes
        position records (before ``configure``, or a projection topic no Kafka broker reads)."""
        return self._positions

    @property
    def cleanup(self) -> CleanupManager:
        """The cleanup manager (``run_once`` for tools and tests); ``IllegalStateError``
        before ``configure``."""
        if self._cleanup is None:
            raise IllegalStateError(f"{type(self).__name__} is not configured")
        return self._cleanup

    def configure(self, configs: Mapping[str, str]) -> None:
        """As the topic RLMM, then start the level refresh and the cleanup manager."""
        from confluent_kafka.admin import AdminClient
        from tierlog_rlmm_topic.client_factory import new_client

        from tierlog_rlmm_compacted.topics import KAFKA_METADATA_TOPIC

        super().configure(configs)
        compacted = self.compacted_config
        try:
            admin = new_client(AdminClient, compacted.base.admin, "admin")
        except BaseException:
            self.close()
            raise
        cleanup = CleanupManager(
            orphan_keys=self._projection.orphan_keys,
            partitions=self._led_partitions,
            is_ready=self._cleanable,
            level=lambda: self.level,
            write=self._write_tombstones,
            interval_ms=compacted.cleanup_interval_ms,
            wait_s=compacted.base.consume_wait_ms / 1000,
            name=f"rlmm-cleanup-{compacted.base.topic_name}",
        )
        positions = None
        if compacted.base.topic_name == KAFKA_METADATA_TOPIC:  # the topic Kafka brokers read
            positions = PositionWriter(
                write=self._write_position,
                enabled=self._positions_enabled,
                name=f"rlmm-position-{compacted.base.topic_name}",
            )
        refresher = threading.Thread(
            target=self._refresh_loop,
            name=f"rlmm-level-{compacted.base.topic_name}",
            daemon=True,
        )
        with self._lock:
            if self._closed:
                admin.poll(0)
                raise IllegalStateError(f"{type(self).__name__} is closed")
            self._admin, self._cleanup, self._refresher = admin, cleanup, refresher
            self._positions = positions
        refresher.start()
        cleanup.start()
        _LOG.info(
            "compacted RLMM: projection %s at compaction level %d, audit %s",
            compacted.base.topic_name,
            self.level,
            compacted.audit_topic_name if compacted.audit_enable else "disabled",
        )

    def close(self) -> None:
        """Stop the level refresh and the cleanup manager, close as the topic RLMM (which
        commits what is queued), then write the position records still pending and close
        their producer."""
        self._stop.set()
        cleanup, refresher = self._cleanup, self._refresher
        if cleanup is not None:
            cleanup.close()
        if refresher is not None and refresher.is_alive():
            refresher.join(_LEVEL_READ_TIMEOUT_S + 5)
        super().close()
        positions = self._positions
        if positions is not None:
            positions.close(flush=True)
        with self._position_lock:
            producer, self._position_producer = self._position_producer, None
            self._position_closed = True
        if producer is not None:
            producer.close(_POSITION_CLOSE_S)
        admin, self._admin = self._admin, None
        if admin is not None:
            admin.poll(0)

    # The compaction level ----------------------------------------------------------------------
    def refresh_level(self) -> int:
        """Read the projection topic's ``cleanup.policy`` again and move to level 1 if it is
        compacted now; the level this node writes at. A topic set back to ``delete`` keeps the
        node at level 1 and is logged at ERROR; a failed read keeps the level (WARNING)."""
        from tierlog_rlmm_compacted.topics import read_level

        admin = self._admin
        if admin is None:
            raise IllegalStateError(f"{type(self).__name__} is not configured or closed")
        topic = self.compacted_config.base.topic_name
        try:
            seen = read_level(admin, topic, _LEVEL_READ_TIMEOUT_S)
        except Exception as exc:
            _LOG.warning("cannot read the compaction level of %s (kept): %s", topic, exc)
            return self.level
        with self._write_lock:
            before = self._level
            if seen > before:
                self._level = seen
                self._reverted_logged = False
            reverted = seen < self._level and not self._reverted_logged
            if reverted:
                self._reverted_logged = True
            elif seen == self._level:
                self._reverted_logged = False
            level = self._level
        if level > before:
            _LOG.info("%s is compacted now: compaction level 1 (tombstones are written)", topic)
        if reverted:
            _LOG.error(
                "the projection topic %s is no longer compacted (its cleanup.policy lost "
                "compact) but compaction is forward-only: this node stays at level 1 and keeps "
                "writing tombstones. Set cleanup.policy=compact on %s again: without it the "
                "topic is never compacted (level-1 records rely on it), and a legacy reader "
                "meets tombstones anyway",
                topic,
                topic,
            )
        return level

    def _refresh_loop(self) -> None:
        interval_s = self.compacted_config.level_refresh_ms / 1000
        while not self._stop.wait(interval_s):
            try:
                self.refresh_level()
            except Exception:  # the next interval tries again
                _LOG.exception("the compaction level refresh failed")

    # Leadership ----------------------------------------------------------------------------
    def on_partition_leadership_changes(
        self,
        leader_partitions: Set[TopicIdPartition],
        follower_partitions: Set[TopicIdPartition],
    ) -> None:
        """As the topic RLMM; also remembers which partitions this node leads (the cleanup
        manager scans those)."""
        super().on_partition_leadership_changes(leader_partitions, follower_partitions)
        with self._write_lock:
            self._leaders.difference_update(follower_partitions)
            self._leaders.update(leader_partitions)

    def on_stop_partitions(self, partitions: Set[TopicIdPartition]) -> None:
        super().on_stop_partitions(partitions)
        with self._write_lock:
            self._leaders.difference_update(partitions)

    def _led_partitions(self) -> list[TopicIdPartition]:
        with self._write_lock:
            return list(self._leaders)

    def _cleanable(self, tip: TopicIdPartition) -> bool:
        """Replayed (ready), or replayed up to a finished deletion (the cache dropped the
        partition, its keys remain)."""
        consumer = self._consumer
        if self._closed or consumer is None or not consumer.is_assigned(tip):
            return False
        if consumer.failure_for(tip) is not None:
            return False
        return self.is_ready(tip) or self._projection.is_deleted(tip)

    # Writes ------------------------------------------------------------------------------------
    def _txn_producer(self) -> TransactionalMetadataProducer:
        from tierlog_rlmm_compacted.txn_producer import TransactionalMetadataProducer

        producer = self._open()[0]
        assert isinstance(producer, TransactionalMetadataProducer)
        return producer

    def _write(
        self, tip: TopicIdPartition, metadata: RemoteLogMetadata, check: Callable[[], None]
    ) -> Future[None]:
        """Check as the topic RLMM, plan the records with the applier and send them in one
        transaction; complete when this node's consumer applied the projection record."""
        producer = self._txn_producer()
        partition = self._check_write(tip, check)
        with self._write_lock:
            if self._invalid_transition(tip, metadata):
                return self._audit_only(producer, metadata, partition)
            plan = self._projection.plan_write(metadata, tombstones=self._level >= 1)
            sent = producer.send(self._records(plan, partition), primary=0)
            self._in_flight[tip] = self._in_flight.get(tip, 0) + 1
        self._note_transaction(partition, sent)
        result = self._when_applied(tip, partition, sent)
        result.add_done_callback(lambda _: self._write_done(tip))
        return result

    def _invalid_transition(self, tip: TopicIdPartition, metadata: RemoteLogMetadata) -> bool:
        """Whether ``metadata`` is an add Kafka's cache drops: a segment added again once it
        left COPY_SEGMENT_STARTED (logged at ERROR as the cache logs it). The topic RLMM writes
        such an event and lets every reader drop it; here its value would overwrite the
        segment's key, and a reader bootstrapping from the compacted topic would find the
        segment back in COPY_SEGMENT_STARTED, so the projection never gets it. (An update along
        an invalid transition is ``plan_write``'s: a bare record under a spare key.)"""
        if not isinstance(metadata, RemoteLogSegmentMetadata):
            return False
        current = self._store.peek_segment(tip, metadata.remote_log_segment_id)
        if current is None or RemoteLogSegmentState.is_valid_transition(
            current.state, metadata.state
        ):
            return False
        _LOG.error(
            "Current state: %s can not be transitioned to target state: %s, segmentId: %s. "
            "Dropping the event (not written to the projection%s)",
            current.state.name,
            metadata.state.name,
            metadata.remote_log_segment_id,
            "; written to the audit topic" if self.compacted_config.audit_enable else "",
        )
        return True

    def _audit_only(
        self, producer: TransactionalMetadataProducer, metadata: RemoteLogMetadata, partition: int
    ) -> Future[None]:
        """A dropped event: its legacy bytes go to the audit topic (when enabled), which
        records what was published, as Kafka's topic would; the future completes once that is
        committed (nothing changes in the cache, nothing to wait for)."""
        from tierlog.metadata import serde
        from tierlog_rlmm_compacted.txn_producer import OutRecord

        result: Future[None] = Future()
        result.set_running_or_notify_cancel()
        compacted = self.compacted_config
        if not compacted.audit_enable:
            result.set_result(None)
            return result
        record = OutRecord(compacted.audit_topic_name, partition, None, serde.serialize(metadata))

        def committed(done: Future[tuple[int, int]]) -> None:
            error = done.exception()
            if error is not None:
                result.set_exception(error)
            else:
                result.set_result(None)

        producer.send([record], primary=0).add_done_callback(committed)
        return result

    def _records(self, plan: PlannedWrite, partition: int) -> list[OutRecord]:
        """The records of a planned write: projection record first (the one waited for), its
        audit copy (same partition of the audit topic), then the tombstones."""
        from tierlog_rlmm_compacted.txn_producer import OutRecord

        compacted = self.compacted_config
        projection = compacted.base.topic_name
        records = [OutRecord(projection, partition, plan.key.encode(), plan.value)]
        if compacted.audit_enable:
            records.append(OutRecord(compacted.audit_topic_name, partition, None, plan.audit_value))
        records.extend(
            OutRecord(projection, partition, key.encode(), None) for key in plan.tombstones
        )
        return records

    def _write_done(self, tip: TopicIdPartition) -> None:
        with self._write_lock:
            left = self._in_flight.get(tip, 0) - 1
            if left > 0:
                self._in_flight[tip] = left
            else:
                self._in_flight.pop(tip, None)

    def _write_tombstones(
        self, tip: TopicIdPartition, select: Callable[[], list[MetadataKey]]
    ) -> tuple[int, Future[None]] | None:
        """The cleanup manager's write (``cleanup.TombstoneWriter``): None when ``tip`` has a
        write in flight; else the tombstones of ``select()`` in one transaction, and a future
        completed once this node's consumer applied the last one."""
        from tierlog_rlmm_compacted.txn_producer import OutRecord

        producer = self._txn_producer()
        config = self.config
        partition = metadata_partition(tip, config.num_partitions)
        with self._write_lock:
            if self._in_flight.get(tip):
                return None
            keys = select()
            if not keys:
                done: Future[None] = Future()
                done.set_result(None)
                return 0, done
            records = [OutRecord(config.topic_name, partition, key.encode(), None) for key in keys]
            sent = producer.send(records, primary=len(records) - 1)
            self._in_flight[tip] = self._in_flight.get(tip, 0) + 1
        self._note_transaction(partition, sent)
        result = self._when_applied(tip, partition, sent)
        result.add_done_callback(lambda _: self._write_done(tip))
        return len(keys), result

    # Position records --------------------------------------------------------------------------
    def _note_transaction(self, partition: int, sent: Future[tuple[int, int]]) -> None:
        """Once the transaction holding ``sent`` ended on projection partition ``partition``
        (committed, or aborted: an abort marker ends the partition too), the partition is due
        a position record (``position.py``)."""
        positions = self._positions
        if positions is not None:
            sent.add_done_callback(lambda _: positions.committed(partition))

    def _positions_enabled(self) -> bool:
        """Level 0. Read without ``_write_lock``: it is asked from the transactional
        producer's thread, which a writer holding that lock may be waiting on (a full queue);
        an int read is atomic, and the level only goes forward."""
        return self._level == 0

    def _write_position(self, partition: int) -> Future[Any]:
        """Send one position record to ``partition`` of the projection topic with the plain
        idempotent producer, created with the first one; the future of its offset."""
        from tierlog_rlmm_topic.producer import MetadataProducer

        config = self.config
        with self._position_lock:
            if self._position_closed:
                raise IllegalStateError(f"{type(self).__name__} is closed")
            producer = self._position_producer
            if producer is None:
                settings = dict(config.producer)
                settings.pop("transactional.id", None)
                settings["client.id"] = f"{settings.get('client.id', 'rlmm')}_position"
                producer = MetadataProducer(config.topic_name, settings)
                self._position_producer = producer
        now_ms = int(time.time() * 1000)
        return producer.send(partition, position_value(config.node_id, now_ms))
