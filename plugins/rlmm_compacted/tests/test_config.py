"""The ``compacted`` RLMM's configuration: the checks shared with the topic RLMM
(``services.rlmm_suites.RlmmConfigSuite``: documented keys, refused values of the topic RLMM's
keys and of its own, unknown keys, secrets, required keys), then its own keys and defaults on
top of the topic RLMM's, the projection and audit topic configs, the transactional client
settings, and the errors of its own (no broker needed)."""

from __future__ import annotations

import logging
import re

import pytest
from services.rlmm_suites import RlmmConfigSuite
from tierlog_rlmm_compacted.config import (
    AUDIT_ENABLE,
    AUDIT_RETENTION_MS,
    AUDIT_TOPIC_NAME,
    CLEANUP_INTERVAL_MS,
    COMPACTION_DEFAULTS,
    CONFIG_KEYS,
    LEVEL_REFRESH_MS,
    TOPIC_CONFIG_PREFIX,
    CompactedRlmmConfig,
)
from tierlog_rlmm_topic import CONFIG_KEYS as TOPIC_CONFIG_KEYS

from tierlog.spi import ConfigError, InvalidArgumentError

SERVERS = "remote.log.metadata.common.client.bootstrap.servers"


class TestConfig(RlmmConfigSuite):
    """The shared configuration tests on ``CompactedRlmmConfig``, with its own refused values
    and misspelt keys."""

    config_class = CompactedRlmmConfig
    config_keys = CONFIG_KEYS
    bad_values = (
        *RlmmConfigSuite.bad_values,
        (AUDIT_ENABLE, "maybe", "Expected value to be either true or false"),
        (AUDIT_TOPIC_NAME, " ", "non-empty"),
        (AUDIT_RETENTION_MS, "0", r"-1 \(unlimited\) or greater than 0"),
        (AUDIT_RETENTION_MS, "-2", r"-1 \(unlimited\) or greater than 0"),
        (AUDIT_RETENTION_MS, "x", "Not a number"),
        (CLEANUP_INTERVAL_MS, "0", "at least 1"),
        (CLEANUP_INTERVAL_MS, "1h", "Not a number"),
        (LEVEL_REFRESH_MS, "-5", "at least 1"),
        (TOPIC_CONFIG_PREFIX + "min.cleanable.dirty.ratio", "1.5", "no more than 1"),
        (TOPIC_CONFIG_PREFIX + "min.cleanable.dirty.ratio", "a tenth", "Not a number"),
        (TOPIC_CONFIG_PREFIX + "delete.retention.ms", "-1", "at least 0"),
        (TOPIC_CONFIG_PREFIX + "segment.ms", "0", "at least 1"),
        (TOPIC_CONFIG_PREFIX + "min.insync.replicas", "0", "at least 1"),
        (TOPIC_CONFIG_PREFIX + "remote.storage.enable", "yes", "either true or false"),
        (TOPIC_CONFIG_PREFIX + "remote.storage.enable", "true", "never tiered"),
        (TOPIC_CONFIG_PREFIX + "cleanup.policy", "delete", "must be compacted"),
        (TOPIC_CONFIG_PREFIX + "cleanup.policy", "compact,delete", "must be compacted"),
        (TOPIC_CONFIG_PREFIX + "cleanup.policy", "", "must be compacted"),
        (TOPIC_CONFIG_PREFIX, "1", "names no topic config"),
    )
    misspelt = (
        *RlmmConfigSuite.misspelt,
        ("remote.log.metadata.audit.topic.retention.msec", AUDIT_RETENTION_MS),
    )


def parse(extra: dict[str, str] | None = None) -> CompactedRlmmConfig:
    """A configuration with a node id and bootstrap servers, plus ``extra``."""
    return CompactedRlmmConfig.from_configs({"node.id": "7", SERVERS: "k1:9092", **(extra or {})})


def test_defaults() -> None:
    config = parse()
    assert config.audit_enable is True
    assert config.audit_topic_name == "__remote_log_metadata_audit"
    assert config.audit_retention_ms == -1
    assert config.cleanup_interval_ms == 3_600_000
    assert config.level_refresh_ms == 60_000
    assert config.topic_config_overrides == {}
    assert config.base.topic_name == "__remote_log_metadata"
    assert config.base.node_id == 7
    assert dict(COMPACTION_DEFAULTS) == {
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": "0.1",
        "delete.retention.ms": "86400000",
        "segment.ms": "3600000",
    }


def test_its_keys_are_new() -> None:
    """Its own keys (all documented: ``TestConfig``), none of them a topic RLMM's."""
    assert CompactedRlmmConfig.keys() == {
        AUDIT_ENABLE,
        AUDIT_TOPIC_NAME,
        AUDIT_RETENTION_MS,
        CLEANUP_INTERVAL_MS,
        LEVEL_REFRESH_MS,
    }
    assert not CompactedRlmmConfig.keys() & {key.name for key in TOPIC_CONFIG_KEYS}


def test_keys_are_read() -> None:
    config = parse(
        {
            AUDIT_ENABLE: "false",
            AUDIT_TOPIC_NAME: "my-audit",
            AUDIT_RETENTION_MS: "604800000",
            CLEANUP_INTERVAL_MS: "5000",
            LEVEL_REFRESH_MS: "250",
            "remote.log.metadata.topic.name": "my-projection",
            "remote.log.metadata.topic.num.partitions": "7",
        }
    )
    assert (config.audit_enable, config.audit_topic_name, config.audit_retention_ms) == (
        False,
        "my-audit",
        604_800_000,
    )
    assert (config.cleanup_interval_ms, config.level_refresh_ms) == (5000, 250)
    assert (config.base.topic_name, config.base.num_partitions) == ("my-projection", 7)


def test_blank_values_are_defaults() -> None:
    config = parse({AUDIT_ENABLE: " ", CLEANUP_INTERVAL_MS: ""})
    assert (config.audit_enable, config.cleanup_interval_ms) == (True, 3_600_000)


def test_level_1_projection_configs() -> None:
    config = parse({"remote.log.metadata.topic.min.isr": "3"})
    assert config.projection_topic_configs(1) == {
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": "0.1",
        "delete.retention.ms": "86400000",
        "segment.ms": "3600000",
        "remote.storage.enable": "false",
        "min.insync.replicas": "3",
    }


def test_level_0_projection_configs_are_the_topic_rlmms() -> None:
    config = parse({"remote.log.metadata.topic.retention.ms": "86400000"})
    assert config.projection_topic_configs(0) == config.base.topic_configs()
    assert config.projection_topic_configs(0) == {
        "retention.ms": "86400000",
        "cleanup.policy": "delete",
        "remote.storage.enable": "false",
        "min.insync.replicas": "2",
    }


def test_overrides_apply_at_both_levels_but_the_policy_at_level_1_only() -> None:
    config = parse(
        {
            TOPIC_CONFIG_PREFIX + "min.cleanable.dirty.ratio": "0.25",
            TOPIC_CONFIG_PREFIX + "segment.ms": "600000",
            TOPIC_CONFIG_PREFIX + "max.message.bytes": "2000000",
            TOPIC_CONFIG_PREFIX + "min.insync.replicas": "1",
            TOPIC_CONFIG_PREFIX + "cleanup.policy": "compact",
        }
    )
    assert config.topic_config_overrides == {
        "min.cleanable.dirty.ratio": "0.25",
        "segment.ms": "600000",
        "max.message.bytes": "2000000",
        "min.insync.replicas": "1",
        "cleanup.policy": "compact",
    }
    level1 = config.projection_topic_configs(1)
    assert level1["min.cleanable.dirty.ratio"] == "0.25"
    assert level1["segment.ms"] == "600000"
    assert level1["max.message.bytes"] == "2000000"
    assert level1["min.insync.replicas"] == "1"  # the override wins over topic.min.isr
    assert level1["delete.retention.ms"] == "86400000"
    level0 = config.projection_topic_configs(0)
    assert level0["cleanup.policy"] == "delete"
    assert level0["segment.ms"] == "600000"
    assert level0["max.message.bytes"] == "2000000"
    assert config.compaction_settings() == {
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": "0.25",
        "delete.retention.ms": "86400000",
        "segment.ms": "600000",
        "max.message.bytes": "2000000",
        "min.insync.replicas": "1",
    }


def test_a_list_policy_override_is_normalised() -> None:
    config = parse({TOPIC_CONFIG_PREFIX + "cleanup.policy": " compact, "})
    assert config.topic_config_overrides["cleanup.policy"] == "compact"


@pytest.mark.parametrize("level", [-1, 2])
def test_projection_configs_of_an_unknown_level(level: int) -> None:
    with pytest.raises(InvalidArgumentError, match="compaction level must be 0 or 1"):
        parse().projection_topic_configs(level)


def test_audit_topic_configs() -> None:
    config = parse({AUDIT_RETENTION_MS: "2592000000", "remote.log.metadata.topic.min.isr": "1"})
    assert config.audit_topic_configs() == {
        "cleanup.policy": "delete",
        "retention.ms": "2592000000",
        "min.insync.replicas": "1",
        "remote.storage.enable": "false",
    }
    assert parse().audit_topic_configs()["retention.ms"] == "-1"


def test_the_producer_is_transactional_and_the_consumer_reads_committed() -> None:
    config = parse()
    assert config.transactional_id == "__remote_log_metadata_client_7_txn"
    assert config.producer["transactional.id"] == "__remote_log_metadata_client_7_txn"
    assert config.consumer["isolation.level"] == "read_committed"
    # The topic RLMM's forced settings are kept: TestConfig.test_forced_client_settings_as_kafka.
    assert "transactional.id" not in config.consumer
    assert config.base.consumer["isolation.level"] == "read_uncommitted"  # base untouched


def test_forced_client_settings_are_reported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        config = parse(
            {
                "remote.log.metadata.producer.transactional.id": "mine",
                "remote.log.metadata.common.client.isolation.level": "read_uncommitted",
            }
        )
    assert config.producer["transactional.id"] == "__remote_log_metadata_client_7_txn"
    assert config.consumer["isolation.level"] == "read_committed"
    assert "remote.log.metadata.producer.transactional.id=mine is overridden" in caplog.text
    assert (
        "remote.log.metadata.common.client.isolation.level=read_uncommitted is overridden"
        in caplog.text
    )


def test_the_same_forced_values_are_not_reported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        parse(
            {
                "remote.log.metadata.producer.transactional.id": (
                    "__remote_log_metadata_client_7_txn"
                ),
                "remote.log.metadata.consumer.isolation.level": "read_committed",
            }
        )
    assert "overridden" not in caplog.text


def test_own_and_topic_keys_are_not_unknown(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        parse(
            {
                AUDIT_ENABLE: "true",
                AUDIT_TOPIC_NAME: "a",
                AUDIT_RETENTION_MS: "-1",
                CLEANUP_INTERVAL_MS: "1000",
                LEVEL_REFRESH_MS: "1000",
                TOPIC_CONFIG_PREFIX + "segment.ms": "1000",
                "remote.log.metadata.topic.num.partitions": "5",
                "log.dir": "/d",
            }
        )
    assert "unknown" not in caplog.text


def test_the_audit_topic_cannot_be_the_projection() -> None:
    with pytest.raises(ConfigError) as caught:
        parse({"remote.log.metadata.topic.name": "meta", AUDIT_TOPIC_NAME: "meta"})
    message = str(caught.value)
    assert AUDIT_TOPIC_NAME in message
    assert "remote.log.metadata.topic.name" in message
    assert "must be two topics" in message
    with pytest.raises(ConfigError, match=re.escape(AUDIT_TOPIC_NAME)):
        parse({AUDIT_TOPIC_NAME: "__remote_log_metadata"})  # the default projection name
