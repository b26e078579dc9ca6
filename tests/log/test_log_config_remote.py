"""``LogConfig``'s tiered-storage keys (KIP-1241 copy lag, delete on disable) and
``LogConfig.from_broker_defaults``, against Kafka's ``LogConfig``, ``ServerTopicConfigSynonyms``
and ``KafkaConfig.extractLogConfigMap``."""

from __future__ import annotations

import pytest

from tierlog.log.log_config import (
    BROKER_KEYS,
    BROKER_SYNONYMS,
    KEYS,
    REMOTE_COPY_LAG_FROM_LOCAL_RETENTION,
    LogConfig,
)
from tierlog.properties import ConfigValueError, parse_properties
from tierlog.spi import ConfigError

HOUR = 3600 * 1000
TIERED: dict[str, object] = {"remote.storage.enable": True}


# The new topic keys ---------------------------------------------------------------------------
def test_new_keys_have_kafkas_defaults() -> None:
    config = LogConfig()
    assert config.remote_copy_lag_ms == 0
    assert config.remote_copy_lag_bytes == -1 == REMOTE_COPY_LAG_FROM_LOCAL_RETENTION
    assert config.remote_log_delete_on_disable is False
    assert {"remote.copy.lag.ms", "remote.copy.lag.bytes", "remote.log.delete.on.disable"} <= set(
        KEYS
    )
    props = config.to_props()
    assert (props["remote.copy.lag.ms"], props["remote.copy.lag.bytes"]) == (0, -1)
    assert props["remote.log.delete.on.disable"] is False


def test_new_keys_are_read_not_ignored() -> None:
    config = LogConfig.from_props(
        {
            "remote.copy.lag.ms": " 100 ",
            "remote.copy.lag.bytes": "2048",
            "remote.log.delete.on.disable": "TRUE",
        }
    )
    assert (config.remote_copy_lag_ms, config.remote_copy_lag_bytes) == (100, 2048)
    assert config.remote_log_delete_on_disable is True
    assert config.ignored == {}
    assert LogConfig.from_props(config.to_props()) == config


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("remote.copy.lag.ms", "-2", "Value must be at least -1"),
        ("remote.copy.lag.bytes", "-2", "Value must be at least -1"),
        ("remote.copy.lag.ms", "1_000", "Not a number of type LONG"),
        ("remote.copy.lag.bytes", "9223372036854775808", "Not a number of type LONG"),
        ("remote.log.delete.on.disable", "yes", "Expected value to be either true or false"),
        ("segment.bytes", "1_048_576", "Not a number of type INT"),
    ],
)
def test_invalid_values_name_the_key(key: str, value: str, reason: str) -> None:
    with pytest.raises(ConfigValueError) as e:
        LogConfig.from_props({key: value})
    assert e.value.key == key
    assert f"for configuration {key}: {reason}" in str(e.value)


# Copy lag validation (Kafka's validateRemoteCopyLagTime/Size) ---------------------------------
@pytest.mark.parametrize(
    ("props", "key", "effective"),
    [
        # Local retention set: the lag may not exceed it.
        ({"local.retention.ms": 1000, "remote.copy.lag.ms": 1001}, "remote.copy.lag.ms", 1000),
        # Local retention -2: the total retention is the effective local retention.
        ({"retention.ms": 5000, "remote.copy.lag.ms": 5001}, "remote.copy.lag.ms", 5000),
        (
            {"retention.bytes": 100, "local.retention.bytes": 50, "remote.copy.lag.bytes": 51},
            "remote.copy.lag.bytes",
            50,
        ),
        ({"retention.bytes": 100, "remote.copy.lag.bytes": 101}, "remote.copy.lag.bytes", 100),
        # The default retention.ms (7 days) bounds the time lag too.
        ({"remote.copy.lag.ms": 7 * 24 * HOUR + 1}, "remote.copy.lag.ms", 7 * 24 * HOUR),
    ],
)
def test_copy_lag_must_not_exceed_the_effective_local_retention(
    props: dict[str, object], key: str, effective: int
) -> None:
    with pytest.raises(ConfigValueError) as e:
        LogConfig.from_props({**TIERED, **props})
    assert e.value.key == key
    local_key = "local.retention.ms" if key.endswith(".ms") else "local.retention.bytes"
    assert str(e.value).endswith(
        f"Value must not exceed {local_key} (effective value: {effective})"
    )
    # Without remote storage the lag is not used, and not checked (as Kafka).
    LogConfig.from_props(props)


@pytest.mark.parametrize(
    "props",
    [
        {"local.retention.ms": 1000, "remote.copy.lag.ms": 1000},  # equal is fine
        {"retention.bytes": 100, "remote.copy.lag.bytes": 100},
        {"retention.ms": -1, "remote.copy.lag.ms": 10**12},  # unbounded local retention
        {"retention.ms": -1, "local.retention.ms": -1, "remote.copy.lag.ms": 10**12},
        {"remote.copy.lag.bytes": 10**12},  # retention.bytes -1 by default: unbounded
        {"local.retention.ms": 1, "remote.copy.lag.ms": 0},  # 0 and -1 are never refused
        {"local.retention.ms": 1, "remote.copy.lag.ms": -1},
        {"retention.bytes": 0, "remote.copy.lag.bytes": -1},
    ],
)
def test_copy_lag_within_bounds_is_accepted(props: dict[str, object]) -> None:
    LogConfig.from_props({**TIERED, **props})


def test_copy_lag_check_is_made_on_dynamic_update() -> None:
    config = LogConfig.from_props({**TIERED, "local.retention.ms": 1000})
    assert config.with_overrides({"remote.copy.lag.ms": 500}).remote_copy_lag_ms == 500
    with pytest.raises(ConfigValueError, match=r"remote\.copy\.lag\.ms"):
        config.with_overrides({"remote.copy.lag.ms": 2000})
    # Lowering the local retention under the lag is refused as well.
    lagged = config.with_overrides({"remote.copy.lag.ms": 900})
    with pytest.raises(ConfigValueError, match=r"remote\.copy\.lag\.ms"):
        lagged.with_overrides({"local.retention.ms": 800})


# Effective copy lag ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("props", "lag_ms", "lag_bytes"),
    [
        ({}, 0, -1),  # defaults: copy at once; no size check (retention.bytes unbounded)
        ({"remote.copy.lag.ms": 250, "remote.copy.lag.bytes": 4096}, 250, 4096),
        (
            {"retention.ms": 9000, "local.retention.ms": 3000, "remote.copy.lag.ms": -1},
            3000,
            -1,
        ),
        ({"retention.ms": 9000, "remote.copy.lag.ms": -1}, 9000, -1),  # -1 -> -2 -> retention
        (
            {"retention.bytes": 900, "local.retention.bytes": 300, "remote.copy.lag.bytes": -1},
            0,
            300,
        ),
        ({"retention.bytes": 900}, 0, 900),  # the default -1 follows the local retention
        ({"retention.ms": -1, "remote.copy.lag.ms": -1}, -1, -1),  # unlimited: no time check
    ],
)
def test_effective_copy_lag_resolves_minus_one(
    props: dict[str, object], lag_ms: int, lag_bytes: int
) -> None:
    config = LogConfig.from_props(props)
    assert config.effective_remote_copy_lag_ms() == lag_ms
    assert config.effective_remote_copy_lag_bytes() == lag_bytes


# Turning remote storage off -------------------------------------------------------------------
def test_turning_remote_storage_off_requires_delete_on_disable() -> None:
    tiered = LogConfig.from_props(TIERED)
    with pytest.raises(ConfigValueError) as e:
        tiered.with_overrides({"remote.storage.enable": "false"})
    assert e.value.key == "remote.storage.enable"
    assert "remote.log.delete.on.disable=true" in str(e.value)
    off = tiered.with_overrides(
        {"remote.storage.enable": False, "remote.log.delete.on.disable": True}
    )
    assert not off.remote_storage_enable
    # Read-only tiering is the other way out, and a topic never tiered has nothing to delete.
    assert tiered.with_overrides({"remote.log.copy.disable": True}).remote_log_copy_disable
    LogConfig().with_overrides({"remote.storage.enable": False})


# Broker defaults ------------------------------------------------------------------------------
def test_no_broker_keys_give_kafkas_defaults() -> None:
    assert LogConfig.from_broker_defaults({}) == LogConfig()
    assert LogConfig.from_broker_defaults({"node.id": "1", "log.dirs": "/x"}) == LogConfig()


@pytest.mark.parametrize(
    ("broker", "retention_ms"),
    [
        (
            {"log.retention.ms": "1000", "log.retention.minutes": "2", "log.retention.hours": "3"},
            1000,
        ),
        ({"log.retention.minutes": "2", "log.retention.hours": "3"}, 2 * 60 * 1000),
        ({"log.retention.hours": "3"}, 3 * HOUR),
        ({}, 168 * HOUR),
        ({"log.retention.ms": "-5"}, -1),  # any negative is unlimited
        ({"log.retention.hours": "-1", "log.retention.minutes": "10"}, 10 * 60 * 1000),
        ({"log.retention.hours": "-1"}, -1),
    ],
)
def test_retention_ms_precedence(broker: dict[str, object], retention_ms: int) -> None:
    assert LogConfig.from_broker_defaults(broker).retention_ms == retention_ms


def test_retention_zero_and_bad_synonyms_are_refused() -> None:
    with pytest.raises(ConfigValueError) as e:
        LogConfig.from_broker_defaults({"log.retention.minutes": "0"})
    assert e.value.key == "log.retention.minutes"
    # Kafka parses every synonym given, so a bad one fails even when a higher one is set.
    with pytest.raises(ConfigValueError) as e:
        LogConfig.from_broker_defaults({"log.retention.ms": "1000", "log.retention.hours": "1.5"})
    assert e.value.key == "log.retention.hours"
    assert "Not a number of type INT" in str(e.value)


def test_roll_and_jitter_precedence() -> None:
    both = LogConfig.from_broker_defaults({"log.roll.ms": "5000", "log.roll.hours": "2"})
    assert both.segment_ms == 5000
    assert LogConfig.from_broker_defaults({"log.roll.hours": "2"}).segment_ms == 2 * HOUR
    jitter = LogConfig.from_broker_defaults({"log.roll.jitter.hours": "1"})
    assert jitter.segment_jitter_ms == HOUR
    jitter = LogConfig.from_broker_defaults(
        {"log.roll.jitter.ms": "7", "log.roll.jitter.hours": "1"}
    )
    assert jitter.segment_jitter_ms == 7


def test_every_interpreted_broker_key_maps_to_its_topic_key() -> None:
    broker = parse_properties(
        """
        log.segment.bytes=2097152
        log.index.size.max.bytes=4096
        log.index.interval.bytes=128
        log.flush.interval.messages=10
        log.retention.bytes=123456
        message.max.bytes=2000000
        log.message.timestamp.type=LogAppendTime
        log.message.timestamp.before.max.ms=1000
        log.message.timestamp.after.max.ms=2000
        log.cleanup.policy=compact, delete
        log.local.retention.ms=3600000
        log.local.retention.bytes=1000
        log.remote.copy.lag.ms=60000
        log.remote.copy.lag.bytes=500
        log.segment.delete.delay.ms=1234
        log.cleaner.delete.retention.ms=99
        compression.type=zstd
        log.preallocate=true
        log.flush.interval.ms=10
        log.flush.scheduler.interval.ms=20
        """
    ).values
    config = LogConfig.from_broker_defaults(broker)
    assert config.segment_bytes == 2097152
    assert config.segment_index_bytes == 4096
    assert config.index_interval_bytes == 128
    assert config.flush_messages == 10
    assert config.retention_bytes == 123456
    assert config.max_message_bytes == 2000000
    assert config.message_timestamp_type == "LogAppendTime"
    assert config.message_timestamp_before_max_ms == 1000
    assert config.message_timestamp_after_max_ms == 2000
    assert config.cleanup_policy == ("compact", "delete")
    assert (config.local_retention_ms, config.local_retention_bytes) == (3600000, 1000)
    assert (config.remote_copy_lag_ms, config.remote_copy_lag_bytes) == (60000, 500)
    # Topic keys this log does not interpret are carried (to_props writes them back).
    assert config.delete_retention_ms == 99
    assert config.ignored == {
        "file.delete.delay.ms": "1234",
        "compression.type": "zstd",
        "preallocate": "true",
        "flush.ms": "10",  # log.flush.interval.ms wins over the scheduler interval
    }


def test_topic_overrides_win() -> None:
    broker = {"log.retention.hours": "1", "log.segment.bytes": "2097152", "log.roll.ms": "100"}
    config = LogConfig.from_broker_defaults(broker, {"retention.ms": "5000", "segment.ms": 7})
    assert (config.retention_ms, config.segment_ms) == (5000, 7)
    assert config.segment_bytes == 2097152  # not overridden: the broker default
    with pytest.raises(ConfigError, match=r"Unknown topic config name: log\.retention\.hours"):
        LogConfig.from_broker_defaults(broker, {"log.retention.hours": "2"})


@pytest.mark.parametrize(
    ("broker", "key"),
    [
        ({"log.segment.bytes": "1024"}, "log.segment.bytes"),
        ({"log.roll.hours": "0"}, "log.roll.hours"),
        ({"log.roll.ms": "0"}, "log.roll.ms"),
        ({"message.max.bytes": "x"}, "message.max.bytes"),
        ({"log.index.size.max.bytes": "3"}, "log.index.size.max.bytes"),
        ({"log.message.timestamp.type": "Now"}, "log.message.timestamp.type"),
        ({"log.local.retention.ms": "-3"}, "log.local.retention.ms"),
        ({"log.remote.copy.lag.bytes": "-2"}, "log.remote.copy.lag.bytes"),
        ({"log.cleanup.policy": "shred"}, "log.cleanup.policy"),
    ],
)
def test_broker_errors_name_the_broker_key(broker: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigValueError) as e:
        LogConfig.from_broker_defaults(broker)
    assert e.value.key == key
    assert f"for configuration {key}:" in str(e.value)


SYSTEM_ON = {"remote.log.storage.system.enable": "true"}


@pytest.mark.parametrize(
    ("broker", "key", "reason"),
    [
        (
            {"log.retention.ms": "1000", "log.local.retention.ms": "2000"},
            "log.local.retention.ms",
            "Value must not be more than log.retention.ms property value: 1000",
        ),
        (
            {"log.retention.bytes": "1000", "log.local.retention.bytes": "-1"},
            "log.local.retention.bytes",
            "Value must not be -1 as log.retention.bytes value is set as 1000.",
        ),
        (
            {"log.retention.hours": "1", "log.remote.copy.lag.ms": str(HOUR + 1)},
            "log.remote.copy.lag.ms",
            f"Value must not exceed log.local.retention.ms (effective value: {HOUR})",
        ),
        (
            {"log.local.retention.bytes": "10", "log.remote.copy.lag.bytes": "11"},
            "log.remote.copy.lag.bytes",
            "Value must not exceed log.local.retention.bytes (effective value: 10)",
        ),
    ],
)
def test_broker_remote_checks_when_the_system_is_enabled(
    broker: dict[str, object], key: str, reason: str
) -> None:
    LogConfig.from_broker_defaults(broker)  # not checked while tiered storage is off
    with pytest.raises(ConfigValueError) as e:
        LogConfig.from_broker_defaults({**SYSTEM_ON, **broker})
    assert e.value.key == key
    assert str(e.value).endswith(reason)


def test_topic_checks_combine_broker_defaults_and_overrides() -> None:
    broker = {**SYSTEM_ON, "log.local.retention.ms": "1000"}
    config = LogConfig.from_broker_defaults(broker, {"remote.storage.enable": "true"})
    assert config.remote_storage_enable and config.effective_local_retention_ms == 1000
    with pytest.raises(ConfigValueError) as e:
        LogConfig.from_broker_defaults(
            broker, {"remote.storage.enable": "true", "remote.copy.lag.ms": "1001"}
        )
    assert e.value.key == "remote.copy.lag.ms"
    # A compacting broker default is fine, for a tiered topic too (a tierlog extension: Kafka
    # 4.3.1 refuses remote storage on a compacted topic).
    compacting = {**SYSTEM_ON, "log.cleanup.policy": "compact"}
    assert LogConfig.from_broker_defaults(compacting).compact
    tiered = LogConfig.from_broker_defaults(compacting, {"remote.storage.enable": "true"})
    assert tiered.compact and tiered.remote_log_enabled("events")


def test_tiered_topic_needs_the_system_enabled() -> None:
    with pytest.raises(ConfigValueError) as e:
        LogConfig.from_broker_defaults({}, {"remote.storage.enable": "true"})
    assert e.value.key == "remote.storage.enable"
    assert "remote.log.storage.system.enable" in str(e.value)
    with pytest.raises(ConfigValueError, match=r"remote\.log\.storage\.system\.enable"):
        LogConfig.from_broker_defaults({"remote.log.storage.system.enable": "maybe"})


def test_broker_synonyms_are_kafkas() -> None:
    assert BROKER_SYNONYMS["retention.ms"] == (
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
    )
    assert BROKER_SYNONYMS["segment.ms"] == ("log.roll.ms", "log.roll.hours")
    assert BROKER_SYNONYMS["max.message.bytes"] == ("message.max.bytes",)
    assert BROKER_SYNONYMS["file.delete.delay.ms"] == ("log.segment.delete.delay.ms",)
    assert BROKER_SYNONYMS["min.cleanable.dirty.ratio"] == ("log.cleaner.min.cleanable.ratio",)
    assert BROKER_SYNONYMS["remote.copy.lag.bytes"] == ("log.remote.copy.lag.bytes",)
    # Every synonym sets a topic key LogConfig knows (interpreted or carried).
    for topic_key in BROKER_SYNONYMS:
        assert (
            topic_key in KEYS
            or topic_key
            in LogConfig.from_broker_defaults(
                {BROKER_SYNONYMS[topic_key][0]: _sample(topic_key)}
            ).ignored
        )
    assert "log.retention.hours" in BROKER_KEYS
    assert "remote.log.storage.system.enable" not in BROKER_KEYS
    assert "retention.ms" not in BROKER_KEYS


def _sample(topic_key: str) -> str:
    return "delete" if topic_key == "cleanup.policy" else "1"
