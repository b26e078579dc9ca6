"""The projection and audit topics and the compaction level, against real Kafka 4.3.1 brokers.

The session's broker runs Kafka's own tiered storage with Kafka's TopicBasedRemoteLogMetadataManager
on ``__remote_log_metadata``: it is the Kafka reader ``kafka_readers`` must find (and the
topic ``enable_compaction`` must refuse to compact). Private brokers (``kafka_factory``) give a
cluster without such a reader, and one where a Kafka reader is configured but its metadata topic
does not exist yet, so that the projection is created at level 0. Every other test uses topics
of its own, deleted afterwards; the topics are checked from outside with ``describe_configs``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource
from confluent_kafka.cimpl import NewTopic
from services._common import Service
from tierlog_rlmm_compacted.config import TOPIC_CONFIG_PREFIX, CompactedRlmmConfig
from tierlog_rlmm_compacted.topics import (
    KAFKA_METADATA_TOPIC,
    TBRLMM_CLASS,
    CompactionRefusedError,
    enable_compaction,
    ensure_topics,
    kafka_readers,
    read_level,
)

from tierlog.spi import ConfigError, RemoteResourceNotFoundException, RemoteStorageException

PARTITIONS = 3
TIMEOUT_S = 30.0

LEVEL_1 = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.1",
    "delete.retention.ms": "86400000",
    "segment.ms": "3600000",
    "remote.storage.enable": "false",
    "min.insync.replicas": "1",
}
AUDIT = {
    "cleanup.policy": "delete",
    "retention.ms": "-1",
    "remote.storage.enable": "false",
    "min.insync.replicas": "1",
}

Configs = Callable[..., dict[str, str]]


def described(admin: AdminClient, topic: str) -> dict[str, str]:
    """The topic's configs as the broker describes them, read independently of the plugin."""
    resource = ConfigResource("TOPIC", topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)
    return {name: entry.value for name, entry in entries.items()}


def subset(configs: Mapping[str, str], names: Mapping[str, str]) -> dict[str, str]:
    return {name: configs[name] for name in names}


def partitions(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(topic=topic, timeout=TIMEOUT_S).topics[topic].partitions)


def create(
    admin: AdminClient, topic: str, configs: Mapping[str, str], count: int = PARTITIONS
) -> None:
    """Create ``topic`` and wait until the broker describes it (creation returns once the
    controller has it; the broker may answer UNKNOWN_TOPIC_OR_PART for a moment longer)."""
    new = NewTopic(topic, num_partitions=count, replication_factor=1, config=dict(configs))
    admin.create_topics([new])[topic].result(timeout=60)
    deadline = time.monotonic() + 60
    while True:
        try:
            described(admin, topic)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)  # polling interval of the wait, not a synchronisation


@pytest.fixture
def topics(topic_name: str, audit_topic_name: str, delete_topics: list[str]) -> tuple[str, str]:
    """The test's projection and audit topic names, deleted after the test."""
    delete_topics.extend([topic_name, audit_topic_name])
    return topic_name, audit_topic_name


def config_of(configs: Mapping[str, str]) -> CompactedRlmmConfig:
    return CompactedRlmmConfig.from_configs(configs)


def ensure_existing(
    admin: AdminClient,
    caplog: pytest.LogCaptureFixture,
    projection: str,
    existing: Mapping[str, str],
    config: CompactedRlmmConfig,
) -> tuple[int, list[str]]:
    """Create ``projection`` with the ``existing`` configs, then ``ensure_topics``: the level it
    found the topic at, and what it logged at WARNING or above, sorted."""
    create(admin, projection, existing)
    with caplog.at_level(logging.WARNING, logger="tierlog_rlmm_compacted.topics"):
        level = ensure_topics(admin, config)
    return level, sorted(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


# Kafka readers ------------------------------------------------------------------------------------
def test_the_session_broker_is_a_kafka_reader(kafka_admin: AdminClient) -> None:
    assert kafka_readers(kafka_admin, KAFKA_METADATA_TOPIC, TIMEOUT_S) == [1]
    # The broker does not name the class: it is described with Kafka's default, the TBRLMM.
    resource = ConfigResource("BROKER", "1")
    entries = kafka_admin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)
    assert entries["remote.log.storage.system.enable"].value == "true"
    rlmm_class = entries["remote.log.metadata.manager.class.name"]
    assert (rlmm_class.value, rlmm_class.is_default) == (TBRLMM_CLASS, True)


def test_no_kafka_reader_of_another_topic(kafka_admin: AdminClient, topic_name: str) -> None:
    assert kafka_readers(kafka_admin, topic_name, TIMEOUT_S) == []
    assert kafka_readers(kafka_admin, "__remote_log_metadata_audit", TIMEOUT_S) == []


def test_a_cluster_without_tiered_storage_has_no_reader_and_gets_level_1(
    kafka_factory: Callable[..., Service],
) -> None:
    broker = kafka_factory()
    admin = AdminClient({"bootstrap.servers": broker.url})
    assert kafka_readers(admin, KAFKA_METADATA_TOPIC, TIMEOUT_S) == []
    config = config_of(
        {
            "remote.log.metadata.common.client.bootstrap.servers": broker.url,
            "remote.log.metadata.topic.num.partitions": str(PARTITIONS),
            "remote.log.metadata.topic.replication.factor": "1",
            "remote.log.metadata.topic.min.isr": "1",
            "node.id": "1",
        }
    )
    assert config.base.topic_name == KAFKA_METADATA_TOPIC
    assert ensure_topics(admin, config) == 1
    assert subset(described(admin, KAFKA_METADATA_TOPIC), LEVEL_1) == LEVEL_1
    assert subset(described(admin, "__remote_log_metadata_audit"), AUDIT) == AUDIT
    assert read_level(admin, KAFKA_METADATA_TOPIC, TIMEOUT_S) == 1


def test_a_known_kafka_reader_means_level_0_with_a_warning(
    kafka_factory: Callable[..., Service], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Kafka's tiered storage is on and names the TBRLMM, but the TBRLMM cannot create
    # __remote_log_metadata (replication factor 3 on one broker) and keeps retrying for an
    # hour: a Kafka reader is configured while the topic is still absent.
    broker = kafka_factory(
        tiered_storage=tmp_path / "tiered",
        metadata_partitions=PARTITIONS,
        properties={
            "remote.log.metadata.manager.class.name": TBRLMM_CLASS,
            "rlmm.config.remote.log.metadata.topic.replication.factor": "3",
            "rlmm.config.remote.log.metadata.initialization.retry.max.timeout.ms": "3600000",
        },
    )
    admin = AdminClient({"bootstrap.servers": broker.url})
    assert kafka_readers(admin, KAFKA_METADATA_TOPIC, TIMEOUT_S) == [1]
    assert KAFKA_METADATA_TOPIC not in admin.list_topics(timeout=TIMEOUT_S).topics
    config = config_of(
        {
            "remote.log.metadata.common.client.bootstrap.servers": broker.url,
            "remote.log.metadata.topic.num.partitions": str(PARTITIONS),
            "remote.log.metadata.topic.replication.factor": "1",
            "remote.log.metadata.topic.min.isr": "1",
            "remote.log.metadata.topic.retention.ms": "-1",
            TOPIC_CONFIG_PREFIX + "segment.ms": "600000",
            "node.id": "1",
        }
    )
    with caplog.at_level(logging.WARNING, logger="tierlog_rlmm_compacted.topics"):
        assert ensure_topics(admin, config) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("Kafka broker(s) [1]" in w and "cleanup.policy=delete" in w for w in warnings)
    projection = described(admin, KAFKA_METADATA_TOPIC)
    assert subset(projection, config.projection_topic_configs(0)) == {
        "retention.ms": "-1",
        "cleanup.policy": "delete",
        "remote.storage.enable": "false",
        "min.insync.replicas": "1",
        "segment.ms": "600000",
    }
    assert read_level(admin, KAFKA_METADATA_TOPIC, TIMEOUT_S) == 0
    with pytest.raises(CompactionRefusedError) as caught:
        enable_compaction(admin, config, timeout=TIMEOUT_S)
    assert caught.value.brokers == [1]
    assert described(admin, KAFKA_METADATA_TOPIC)["cleanup.policy"] == "delete"


# Creation and checks ------------------------------------------------------------------------------
def test_created_at_level_1_with_every_config(
    kafka_admin: AdminClient, rlmm_configs: Configs, topics: tuple[str, str]
) -> None:
    projection, audit = topics
    config = config_of(rlmm_configs())
    assert ensure_topics(kafka_admin, config) == 1
    assert partitions(kafka_admin, projection) == PARTITIONS
    assert partitions(kafka_admin, audit) == PARTITIONS
    assert subset(described(kafka_admin, projection), LEVEL_1) == LEVEL_1
    assert subset(described(kafka_admin, audit), AUDIT) == AUDIT
    # A second node finds both topics as they are.
    assert ensure_topics(kafka_admin, config) == 1


def test_overrides_and_audit_retention(
    kafka_admin: AdminClient, rlmm_configs: Configs, topics: tuple[str, str]
) -> None:
    projection, audit = topics
    overrides = {
        "min.cleanable.dirty.ratio": "0.25",
        "delete.retention.ms": "60000",
        "segment.ms": "600000",
        "max.message.bytes": "2000000",
        "min.compaction.lag.ms": "1000",
    }
    config = config_of(
        rlmm_configs(
            {
                **{TOPIC_CONFIG_PREFIX + name: value for name, value in overrides.items()},
                "remote.log.metadata.audit.topic.retention.ms": "2592000000",
            }
        )
    )
    assert ensure_topics(kafka_admin, config) == 1
    assert subset(described(kafka_admin, projection), overrides) == overrides
    assert described(kafka_admin, projection)["cleanup.policy"] == "compact"
    assert described(kafka_admin, audit)["retention.ms"] == "2592000000"


def test_no_audit_topic_when_disabled(
    kafka_admin: AdminClient, rlmm_configs: Configs, topics: tuple[str, str]
) -> None:
    projection, audit = topics
    config = config_of(rlmm_configs({"remote.log.metadata.audit.enable": "false"}))
    assert ensure_topics(kafka_admin, config) == 1
    names = kafka_admin.list_topics(timeout=TIMEOUT_S).topics
    assert projection in names
    assert audit not in names


def test_an_existing_level_0_projection_is_used_as_it_is(
    kafka_admin: AdminClient,
    rlmm_configs: Configs,
    topics: tuple[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    projection, _ = topics
    existing = {"cleanup.policy": "delete", "retention.ms": "-1"}
    config = config_of(rlmm_configs())
    assert ensure_existing(kafka_admin, caplog, projection, existing, config) == (0, [])
    assert described(kafka_admin, projection)["cleanup.policy"] == "delete"


def test_an_existing_level_1_projection_reports_each_difference(
    kafka_admin: AdminClient,
    rlmm_configs: Configs,
    topics: tuple[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    projection, _ = topics
    existing = {
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": "0.5",
        "delete.retention.ms": "86400000",
        "segment.ms": "7200000",
    }
    config = config_of(rlmm_configs({TOPIC_CONFIG_PREFIX + "min.compaction.lag.ms": "5000"}))
    level, warnings = ensure_existing(kafka_admin, caplog, projection, existing, config)
    assert level == 1
    assert len(warnings) == 3, warnings
    assert "min.cleanable.dirty.ratio=0.5 where the compaction default says 0.1" in warnings[0]
    assert (
        f"min.compaction.lag.ms=0 where {TOPIC_CONFIG_PREFIX}min.compaction.lag.ms says 5000"
        in warnings[1]
    )
    assert "segment.ms=7200000 where the compaction default says 3600000" in warnings[2]
    assert all(projection in w for w in warnings)
    # Reported, not changed.
    assert described(kafka_admin, projection)["segment.ms"] == "7200000"


def test_equal_values_written_differently_are_not_reported(
    kafka_admin: AdminClient,
    rlmm_configs: Configs,
    topics: tuple[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    projection, _ = topics
    existing = {"cleanup.policy": "compact", "segment.ms": "3600000"}
    config = config_of(rlmm_configs({TOPIC_CONFIG_PREFIX + "min.cleanable.dirty.ratio": "0.50"}))
    _, warnings = ensure_existing(kafka_admin, caplog, projection, existing, config)
    # The broker's default (ensure_topics changes no existing topic), written "0.50" above.
    assert described(kafka_admin, projection)["min.cleanable.dirty.ratio"] == "0.5"
    assert not [w for w in warnings if "min.cleanable.dirty.ratio" in w]
    assert not [w for w in warnings if "segment.ms" in w]


def test_projection_partition_count_mismatch(
    kafka_admin: AdminClient, rlmm_configs: Configs, topics: tuple[str, str]
) -> None:
    projection, audit = topics
    create(kafka_admin, projection, {"cleanup.policy": "compact"}, count=2)
    with pytest.raises(ConfigError) as caught:
        ensure_topics(kafka_admin, config_of(rlmm_configs()))
    assert f"{projection} has 2 partitions" in str(caught.value)
    assert "remote.log.metadata.topic.num.partitions is 3" in str(caught.value)
    assert audit not in kafka_admin.list_topics(timeout=TIMEOUT_S).topics


def test_audit_partition_count_mismatch(
    kafka_admin: AdminClient, rlmm_configs: Configs, topics: tuple[str, str]
) -> None:
    _, audit = topics
    create(kafka_admin, audit, {}, count=5)
    with pytest.raises(ConfigError, match=f"{audit} has 5 partitions"):
        ensure_topics(kafka_admin, config_of(rlmm_configs()))


def test_a_compacted_audit_topic_is_refused(
    kafka_admin: AdminClient, rlmm_configs: Configs, topics: tuple[str, str]
) -> None:
    _, audit = topics
    create(kafka_admin, audit, {"cleanup.policy": "compact"})
    with pytest.raises(ConfigError) as caught:
        ensure_topics(kafka_admin, config_of(rlmm_configs()))
    message = str(caught.value)
    assert audit in message
    assert "remote.log.metadata.audit.topic.name" in message
    assert "no key" in message


def test_an_unreachable_cluster_fails_after_the_deadline(rlmm_configs: Configs) -> None:
    from services._common import free_ports

    (port,) = free_ports(1)
    config = config_of(
        rlmm_configs(
            {
                "remote.log.metadata.common.client.bootstrap.servers": f"127.0.0.1:{port}",
                "remote.log.metadata.initialization.retry.max.timeout.ms": "1500",
            }
        )
    )
    with pytest.raises(RemoteStorageException, match="within 1500 ms"):
        ensure_topics(AdminClient(dict(config.base.admin)), config)


# The level ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("policy", "level"), [("delete", 0), ("compact", 1), ("compact,delete", 1)]
)
def test_read_level(
    kafka_admin: AdminClient, topics: tuple[str, str], policy: str, level: int
) -> None:
    projection, _ = topics
    create(kafka_admin, projection, {"cleanup.policy": policy})
    assert read_level(kafka_admin, projection, TIMEOUT_S) == level


def test_read_level_of_a_missing_topic(kafka_admin: AdminClient, topic_name: str) -> None:
    with pytest.raises(RemoteResourceNotFoundException, match=topic_name):
        read_level(kafka_admin, topic_name, TIMEOUT_S)


def test_enable_compaction(
    kafka_admin: AdminClient, rlmm_configs: Configs, topics: tuple[str, str]
) -> None:
    projection, _ = topics
    # A legacy metadata topic, as the topic RLMM (or Kafka's TBRLMM) creates it.
    create(kafka_admin, projection, {"cleanup.policy": "delete", "retention.ms": "-1"})
    config = config_of(rlmm_configs({TOPIC_CONFIG_PREFIX + "segment.ms": "600000"}))
    assert ensure_topics(kafka_admin, config) == 0
    enable_compaction(kafka_admin, config, timeout=TIMEOUT_S)
    assert read_level(kafka_admin, projection, TIMEOUT_S) == 1
    after = described(kafka_admin, projection)
    assert subset(after, config.compaction_settings()) == {
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": "0.1",
        "delete.retention.ms": "86400000",
        "segment.ms": "600000",
    }
    assert after["retention.ms"] == "-1"  # what it does not set is left alone
    # Forward-only and idempotent: again is a no-op, and a restart sees level 1.
    enable_compaction(kafka_admin, config, timeout=TIMEOUT_S)
    assert ensure_topics(kafka_admin, config) == 1


def test_enable_compaction_of_a_missing_topic(
    kafka_admin: AdminClient, rlmm_configs: Configs, topic_name: str
) -> None:
    with pytest.raises(RemoteResourceNotFoundException, match=topic_name):
        enable_compaction(kafka_admin, config_of(rlmm_configs()), timeout=TIMEOUT_S)


def test_enable_compaction_is_refused_while_kafka_reads_the_topic(
    kafka_admin: AdminClient, rlmm_configs: Configs
) -> None:
    config = config_of(rlmm_configs({"remote.log.metadata.topic.name": KAFKA_METADATA_TOPIC}))
    before = described(kafka_admin, KAFKA_METADATA_TOPIC)
    assert before["cleanup.policy"] == "delete"  # Kafka's TBRLMM created it
    with pytest.raises(CompactionRefusedError) as caught:
        enable_compaction(kafka_admin, config, timeout=TIMEOUT_S)
    assert caught.value.brokers == [1]
    message = str(caught.value)
    assert KAFKA_METADATA_TOPIC in message
    assert "Kafka broker(s) [1]" in message
    assert isinstance(caught.value, RemoteStorageException)
    assert described(kafka_admin, KAFKA_METADATA_TOPIC) == before
