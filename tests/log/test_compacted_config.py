"""``LogConfig`` for compacted topics: the cleaner's keys with Kafka's defaults, ranges, broker
synonyms and cross-check, tiering of compacted topics (a tierlog extension), and the roll time
Kafka's ``maxSegmentMs`` gives a compacted topic."""

from __future__ import annotations

import pytest

from tierlog.log.log_config import BROKER_SYNONYMS, KEYS, LogConfig
from tierlog.properties import ConfigValueError
from tierlog.spi import ConfigError

LONG_MAX = (1 << 63) - 1
SYSTEM_ON = {"remote.log.storage.system.enable": "true"}


def test_compaction_keys_have_kafkas_defaults() -> None:
    config = LogConfig()
    assert config.delete_retention_ms == 86_400_000
    assert config.min_compaction_lag_ms == 0
    assert config.max_compaction_lag_ms == LONG_MAX
    assert config.min_cleanable_dirty_ratio == 0.5
    assert {
        "delete.retention.ms",
        "min.compaction.lag.ms",
        "max.compaction.lag.ms",
        "min.cleanable.dirty.ratio",
    } <= set(KEYS)
    props = config.to_props()
    assert props["min.cleanable.dirty.ratio"] == 0.5
    assert props["max.compaction.lag.ms"] == LONG_MAX


def test_compaction_keys_are_read_and_round_trip() -> None:
    config = LogConfig.from_props(
        {
            "cleanup.policy": "compact",
            "delete.retention.ms": "0",
            "min.compaction.lag.ms": "100",
            "max.compaction.lag.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
        }
    )
    assert config.compact and not config.delete
    assert (config.delete_retention_ms, config.min_compaction_lag_ms) == (0, 100)
    assert (config.max_compaction_lag_ms, config.min_cleanable_dirty_ratio) == (100, 0.01)
    assert LogConfig.from_props(config.to_props()) == config
    assert LogConfig(min_cleanable_dirty_ratio=1).min_cleanable_dirty_ratio == 1.0


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("delete.retention.ms", "-1", "Value must be at least 0"),
        ("min.compaction.lag.ms", "-1", "Value must be at least 0"),
        ("max.compaction.lag.ms", "0", "Value must be at least 1"),
        ("min.cleanable.dirty.ratio", "1.01", "Value must be no more than 1"),
        ("min.cleanable.dirty.ratio", "-0.1", "Value must be at least 0"),
        ("min.cleanable.dirty.ratio", "half", "Not a number of type DOUBLE"),
        ("max.compaction.lag.ms", "1_000", "Not a number of type LONG"),
    ],
)
def test_compaction_values_are_checked_as_kafka_does(key: str, value: str, reason: str) -> None:
    with pytest.raises(ConfigValueError) as e:
        LogConfig.from_props({key: value})
    assert e.value.key == key
    assert reason in str(e.value)


def test_min_lag_above_max_lag_is_refused_with_kafkas_message() -> None:
    message = "conflict topic config setting min.compaction.lag.ms (5) > max.compaction.lag.ms (4)"
    with pytest.raises(ConfigError) as e:
        LogConfig.from_props({"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "4"})
    assert str(e.value) == message
    # The same check on broker defaults (validateBrokerLogConfigValues), on the merged topic
    # configuration and on a dynamic alteration.
    broker = {"log.cleaner.min.compaction.lag.ms": "5", "log.cleaner.max.compaction.lag.ms": "4"}
    with pytest.raises(ConfigError, match=r"^conflict topic config setting"):
        LogConfig.from_broker_defaults(broker)
    with pytest.raises(ConfigError, match=r"\(10\) > max\.compaction\.lag\.ms \(9\)"):
        LogConfig.from_broker_defaults(
            {"log.cleaner.max.compaction.lag.ms": "9"}, {"min.compaction.lag.ms": "10"}
        )
    base = LogConfig.from_props({"max.compaction.lag.ms": "9"})
    with pytest.raises(ConfigError, match="conflict topic config setting"):
        base.with_overrides({"min.compaction.lag.ms": "10"})
    equal = LogConfig.from_props({"min.compaction.lag.ms": "9", "max.compaction.lag.ms": "9"})
    assert equal.min_compaction_lag_ms == equal.max_compaction_lag_ms == 9


def test_broker_synonyms_set_the_compaction_defaults() -> None:
    assert BROKER_SYNONYMS["delete.retention.ms"] == ("log.cleaner.delete.retention.ms",)
    assert BROKER_SYNONYMS["min.compaction.lag.ms"] == ("log.cleaner.min.compaction.lag.ms",)
    assert BROKER_SYNONYMS["max.compaction.lag.ms"] == ("log.cleaner.max.compaction.lag.ms",)
    assert BROKER_SYNONYMS["min.cleanable.dirty.ratio"] == ("log.cleaner.min.cleanable.ratio",)
    broker = {
        "log.cleanup.policy": "compact,delete",
        "log.cleaner.delete.retention.ms": "1000",
        "log.cleaner.min.compaction.lag.ms": "10",
        "log.cleaner.max.compaction.lag.ms": "20",
        "log.cleaner.min.cleanable.ratio": "0.75",
    }
    config = LogConfig.from_broker_defaults(broker)
    assert config.cleanup_policy == ("compact", "delete")
    assert config.delete_retention_ms == 1000
    assert (config.min_compaction_lag_ms, config.max_compaction_lag_ms) == (10, 20)
    assert config.min_cleanable_dirty_ratio == 0.75
    assert config.ignored == {}
    overridden = LogConfig.from_broker_defaults(broker, {"min.cleanable.dirty.ratio": "0.2"})
    assert overridden.min_cleanable_dirty_ratio == 0.2
    with pytest.raises(ConfigValueError) as e:
        LogConfig.from_broker_defaults({"log.cleaner.min.cleanable.ratio": "2"})
    assert e.value.key == "log.cleaner.min.cleanable.ratio"
    assert "broker default of topic config min.cleanable.dirty.ratio" in str(e.value)


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete,compact", "delete", ""])
def test_a_compacted_topic_may_be_tiered(policy: str) -> None:
    """Kafka 4.3.1 refuses remote storage on a compacted topic; tierlog tiers it (the KIP
    "Tiered Storage for compacted topics"), and the local retention checks still apply."""
    config = LogConfig.from_props({"remote.storage.enable": "true", "cleanup.policy": policy})
    assert config.remote_log_enabled("events")
    assert config.remote_copy_enabled("events")
    assert config.compact == ("compact" in policy)
    for internal in ("__consumer_offsets", "__transaction_state", "__remote_log_metadata"):
        assert not config.remote_log_enabled(internal)
    with pytest.raises(ConfigValueError) as e:
        LogConfig.from_props(
            {
                "remote.storage.enable": "true",
                "cleanup.policy": policy,
                "retention.ms": "1000",
                "local.retention.ms": "2000",
            }
        )
    assert e.value.key == "local.retention.ms"
    tiered = LogConfig.from_broker_defaults(
        {**SYSTEM_ON, "log.cleanup.policy": "compact"}, {"remote.storage.enable": "true"}
    )
    assert tiered.remote_log_enabled("events")


def test_a_compacted_topic_rolls_by_max_compaction_lag() -> None:
    """Kafka's ``LogConfig.maxSegmentMs``: ``min(max.compaction.lag.ms, segment.ms)`` when the
    topic compacts, ``segment.ms`` otherwise."""
    assert LogConfig(segment_ms=1000).max_segment_ms == 1000
    assert LogConfig(segment_ms=1000, max_compaction_lag_ms=10).max_segment_ms == 1000
    compacted = LogConfig(cleanup_policy=("compact",), segment_ms=1000, max_compaction_lag_ms=10)
    assert compacted.max_segment_ms == 10
    both = LogConfig(cleanup_policy=("delete", "compact"), segment_ms=5, max_compaction_lag_ms=10)
    assert both.max_segment_ms == 5
    assert LogConfig(cleanup_policy=("compact",), segment_ms=1000).max_segment_ms == 1000
