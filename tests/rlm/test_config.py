"""The RLM's broker configuration (``tierlog.rlm.config``) against Kafka's RemoteLogManagerConfig.

``KAFKA`` is Kafka's ``RemoteLogManagerConfig.configDef()`` transcribed key by key (type,
default, validator) from ``storage/src/main/java/org/apache/kafka/server/log/remote/storage/
RemoteLogManagerConfig.java``; the tests hold tierlog's fields to it.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest

from tierlog.log.log_config import BROKER_KEYS, LogConfig
from tierlog.properties import ConfigValueError, format_properties, parse_properties
from tierlog.rlm.config import (
    DEFAULT_RLMM_PREFIX,
    DEFAULT_RSM_PREFIX,
    DEPRECATED_KEYS,
    IGNORED_KEYS,
    KAFKA_DEFAULT_RLMM_CLASS_NAME,
    KEYS,
    RemoteLogManagerConfig,
    plugin_name,
)
from tierlog.spi import ConfigError

LONG_MAX = (1 << 63) - 1

# key: (Kafka type, Kafka default, minimum, maximum); None = no default / no bound.
KAFKA: dict[str, tuple[str, object, float | None, float | None]] = {
    "remote.log.storage.system.enable": ("BOOLEAN", False, None, None),
    "remote.log.storage.manager.impl.prefix": ("STRING", "rsm.config.", None, None),
    "remote.log.metadata.manager.impl.prefix": ("STRING", "rlmm.config.", None, None),
    "remote.log.storage.manager.class.name": ("STRING", None, None, None),
    "remote.log.storage.manager.class.path": ("STRING", None, None, None),
    "remote.log.metadata.manager.class.name": ("STRING", KAFKA_DEFAULT_RLMM_CLASS_NAME, None, None),
    "remote.log.metadata.manager.class.path": ("STRING", None, None, None),
    "remote.log.metadata.manager.listener.name": ("STRING", None, None, None),
    "remote.log.metadata.custom.metadata.max.bytes": ("INT", 128, 0, None),
    "remote.log.index.file.cache.total.size.bytes": ("LONG", 1073741824, 1, None),
    "remote.log.index.file.cache.ttl.ms": ("LONG", 900000, -1, None),
    "remote.log.manager.copier.thread.pool.size": ("INT", 10, 1, None),
    "remote.log.manager.expiration.thread.pool.size": ("INT", 10, 1, None),
    "remote.log.manager.follower.thread.pool.size": ("INT", 2, 1, None),
    "remote.log.manager.task.interval.ms": ("LONG", 30000, 1, None),
    "remote.log.manager.task.retry.backoff.ms": ("LONG", 500, 1, None),
    "remote.log.manager.task.retry.backoff.max.ms": ("LONG", 30000, 1, None),
    "remote.log.manager.task.retry.jitter": ("DOUBLE", 0.2, 0, 0.5),
    "remote.log.reader.threads": ("INT", 10, 1, None),
    "remote.log.reader.max.pending.tasks": ("INT", 100, 1, None),
    "log.local.retention.ms": ("LONG", -2, -2, None),
    "log.local.retention.bytes": ("LONG", -2, -2, None),
    "log.remote.copy.lag.ms": ("LONG", 0, -1, None),
    "log.remote.copy.lag.bytes": ("LONG", -1, -1, None),
    "remote.log.manager.copy.max.bytes.per.second": ("LONG", LONG_MAX, 1, None),
    "remote.log.manager.copy.quota.window.num": ("INT", 11, 1, None),
    "remote.log.manager.copy.quota.window.size.seconds": ("INT", 1, 1, None),
    "remote.log.manager.fetch.max.bytes.per.second": ("LONG", LONG_MAX, 1, None),
    "remote.log.manager.fetch.quota.window.num": ("INT", 11, 1, None),
    "remote.log.manager.fetch.quota.window.size.seconds": ("INT", 1, 1, None),
    "remote.fetch.max.wait.ms": ("INT", 500, 1, None),
    "remote.list.offsets.request.timeout.ms": ("LONG", 30000, 1, None),
    # Deprecated since 4.2, still defined (atLeast(1), default 2).
    "remote.log.manager.thread.pool.size": ("INT", 2, 1, None),
}
LOG_DEFAULTS = frozenset(
    {
        "log.local.retention.ms",
        "log.local.retention.bytes",
        "log.remote.copy.lag.ms",
        "log.remote.copy.lag.bytes",
    }
)
"""Keys Kafka defines in RemoteLogManagerConfig that are broker defaults of topic configs: the
topic's LogConfig reads them (BROKER_SYNONYMS), not the RLM, so that each key has one reader."""
RLM_KEYS = {k: v for k, v in KAFKA.items() if k not in LOG_DEFAULTS}
NUMERIC = sorted(k for k, (t, *_rest) in RLM_KEYS.items() if t in ("INT", "LONG", "DOUBLE"))
NON_EMPTY_STRINGS = [
    "remote.log.storage.manager.impl.prefix",
    "remote.log.metadata.manager.impl.prefix",
    "remote.log.storage.manager.class.name",
    "remote.log.metadata.manager.class.name",
    "remote.log.metadata.manager.listener.name",
]


def config_of(props: dict[str, object]) -> RemoteLogManagerConfig:
    config, unknown = RemoteLogManagerConfig.from_props(props)
    assert unknown == ()
    return config


# Keys and defaults ----------------------------------------------------------------------------
def test_keys_are_kafkas() -> None:
    assert set(RLM_KEYS) == KEYS
    assert LOG_DEFAULTS <= BROKER_KEYS
    assert DEPRECATED_KEYS == {
        "remote.log.manager.thread.pool.size": "remote.log.manager.follower.thread.pool.size"
    }


def test_every_default_is_kafkas_but_the_rlmm() -> None:
    props = RemoteLogManagerConfig().to_props()
    for key, (_type, default, _lo, _hi) in RLM_KEYS.items():
        if key in DEPRECATED_KEYS or key == "remote.log.metadata.manager.class.name":
            continue
        if default is None:
            assert key not in props, key
        else:
            assert props[key] == default, key
            assert type(props[key]) is type(default), key
    # The deliberate difference: unset means tierlog's embedded RLMM, not Kafka's topic RLMM.
    assert "remote.log.metadata.manager.class.name" not in props
    config = RemoteLogManagerConfig()
    assert (config.rsm_plugin, config.rlmm_plugin) == ("local", "embedded")
    assert (config.rsm_props(), config.rlmm_props()) == ({}, {})


def test_fields_are_the_keys_in_snake_case() -> None:
    names = {f.name for f in dataclasses.fields(RemoteLogManagerConfig)}
    expected = {k.replace(".", "_") for k in KEYS if k not in DEPRECATED_KEYS}
    assert names == expected | {"rsm_config", "rlmm_config"}


def test_a_kafka_server_properties_is_read() -> None:
    text = """
        remote.log.storage.system.enable = true
        remote.log.storage.manager.class.name=s3
        remote.log.metadata.manager.class.name: topic
        remote.log.metadata.manager.listener.name=PLAINTEXT
        remote.log.manager.task.interval.ms=1000
        remote.log.manager.task.retry.jitter=0.5
        remote.log.index.file.cache.total.size.bytes=9223372036854775807
        remote.log.metadata.custom.metadata.max.bytes=0
        log.local.retention.ms=-2
        log.remote.copy.lag.bytes=-1
        remote.log.manager.copy.max.bytes.per.second=1048576
        rsm.config.bucket=tiered
        rsm.config.region=eu-west-1
        rlmm.config.remote.log.metadata.topic.replication.factor=1
    """
    config, unknown = RemoteLogManagerConfig.from_props(dict(parse_properties(text).values))
    assert unknown == ("log.local.retention.ms", "log.remote.copy.lag.bytes")  # LogConfig's
    assert config.remote_log_storage_system_enable is True
    assert (config.rsm_plugin, config.rlmm_plugin) == ("s3", "topic")
    assert config.remote_log_metadata_manager_listener_name == "PLAINTEXT"
    assert config.remote_log_manager_task_interval_ms == 1000
    assert config.remote_log_manager_task_retry_jitter == 0.5
    assert config.remote_log_index_file_cache_total_size_bytes == LONG_MAX
    assert config.remote_log_metadata_custom_metadata_max_bytes == 0
    assert config.remote_log_manager_copy_max_bytes_per_second == 1048576
    assert config.rsm_props() == {"bucket": "tiered", "region": "eu-west-1"}
    assert config.rlmm_props() == {"remote.log.metadata.topic.replication.factor": "1"}


# Validation -----------------------------------------------------------------------------------
@pytest.mark.parametrize("key", NUMERIC)
def test_numeric_bounds_are_kafkas_and_errors_name_the_key(key: str) -> None:
    kafka_type, _default, minimum, maximum = KAFKA[key]
    assert minimum is not None
    lowest = minimum if kafka_type == "DOUBLE" else int(minimum)
    # Kafka has no check between the two backoffs; tierlog does (see the module docstring).
    base: dict[str, object] = (
        {"remote.log.manager.task.retry.backoff.ms": "1"}
        if key == "remote.log.manager.task.retry.backoff.max.ms"
        else {}
    )
    config_of({**base, key: str(lowest)})  # the bound itself is valid
    below = lowest - (0.01 if kafka_type == "DOUBLE" else 1)
    with pytest.raises(ConfigValueError, match=f"for configuration {key}: Value must be") as e:
        RemoteLogManagerConfig.from_props({key: str(below)})
    assert e.value.key == key
    if maximum is not None:
        config_of({key: str(maximum)})
        with pytest.raises(ConfigValueError, match=r"no more than"):
            RemoteLogManagerConfig.from_props({key: str(maximum + 0.01)})
    for bad in ("ten", "1_0", "", "true"):
        with pytest.raises(ConfigValueError, match=f"for configuration {key}: Not a number"):
            RemoteLogManagerConfig.from_props({key: bad})


@pytest.mark.parametrize(
    ("key", "too_big"),
    [(k, 2**31) for k in NUMERIC if KAFKA[k][0] == "INT"]
    + [(k, 2**63) for k in NUMERIC if KAFKA[k][0] == "LONG"],
)
def test_int_and_long_are_bounded_like_java(key: str, too_big: int) -> None:
    with pytest.raises(ConfigValueError, match=f"for configuration {key}: Not a number of type"):
        RemoteLogManagerConfig.from_props({key: str(too_big)})


@pytest.mark.parametrize("key", sorted(LOG_DEFAULTS))
def test_the_log_defaults_kafka_defines_here_are_read_by_the_log_config(key: str) -> None:
    """Kafka's default, bound and type of each, applied where the value is used: a topic's
    LogConfig, whose errors name the broker key."""
    kafka_type, default, minimum, _maximum = KAFKA[key]
    assert (kafka_type, key in KEYS) == ("LONG", False)
    assert minimum is not None
    assert LogConfig.from_broker_defaults({}).to_props()[key.removeprefix("log.")] == default
    LogConfig.from_broker_defaults({key: str(int(minimum))})
    with pytest.raises(ConfigValueError, match=f"for configuration {key}: Value must be at least"):
        LogConfig.from_broker_defaults({key: str(int(minimum) - 1)})
    with pytest.raises(ConfigValueError, match=f"for configuration {key}: Not a number of type"):
        LogConfig.from_broker_defaults({key: str(2**63)})


def test_jitter_must_be_finite() -> None:
    for bad in ("NaN", "Infinity"):
        with pytest.raises(ConfigValueError, match=r"remote.log.manager.task.retry.jitter"):
            RemoteLogManagerConfig.from_props({"remote.log.manager.task.retry.jitter": bad})
    # An int is a double too (Kafka's Number), stored as float.
    assert (
        RemoteLogManagerConfig(
            remote_log_manager_task_retry_jitter=0
        ).remote_log_manager_task_retry_jitter
        == 0.0
    )


@pytest.mark.parametrize("key", NON_EMPTY_STRINGS)
def test_strings_must_not_be_empty(key: str) -> None:
    for blank in ("", "   "):
        with pytest.raises(
            ConfigValueError, match=f"for configuration {key}: String must be non-empty"
        ):
            RemoteLogManagerConfig.from_props({key: blank})


def test_booleans_are_kafkas() -> None:
    assert config_of(
        {"remote.log.storage.system.enable": " TRUE "}
    ).remote_log_storage_system_enable
    with pytest.raises(ConfigValueError, match=r"remote.log.storage.system.enable: Expected value"):
        RemoteLogManagerConfig.from_props({"remote.log.storage.system.enable": "yes"})


def test_backoff_max_must_not_be_below_backoff() -> None:
    config_of(
        {
            "remote.log.manager.task.retry.backoff.ms": "100",
            "remote.log.manager.task.retry.backoff.max.ms": "100",
        }
    )
    with pytest.raises(ConfigValueError) as e:
        RemoteLogManagerConfig.from_props(
            {
                "remote.log.manager.task.retry.backoff.ms": "1000",
                "remote.log.manager.task.retry.backoff.max.ms": "999",
            }
        )
    assert e.value.key == "remote.log.manager.task.retry.backoff.max.ms"
    assert "at least remote.log.manager.task.retry.backoff.ms (1000)" in str(e.value)
    # The default maximum (30 s) is below a larger backoff: caught too.
    with pytest.raises(ConfigValueError, match=r"backoff.max.ms"):
        RemoteLogManagerConfig.from_props({"remote.log.manager.task.retry.backoff.ms": "60000"})


def test_direct_construction_validates_types_and_ranges() -> None:
    with pytest.raises(ConfigValueError, match=r"remote.log.reader.threads"):
        RemoteLogManagerConfig(remote_log_reader_threads="10")  # type: ignore[arg-type]
    with pytest.raises(
        ConfigValueError, match=r"remote.log.reader.threads: Value must be at least"
    ):
        RemoteLogManagerConfig(remote_log_reader_threads=0)
    with pytest.raises(ConfigValueError, match=r"remote.log.storage.system.enable"):
        RemoteLogManagerConfig(remote_log_storage_system_enable=1)  # type: ignore[arg-type]
    with pytest.raises(
        ConfigValueError, match=r"remote.fetch.max.wait.ms: Not a number of type INT"
    ):
        RemoteLogManagerConfig(remote_fetch_max_wait_ms=2**31)
    with pytest.raises(TypeError, match=r"rsm_config"):
        RemoteLogManagerConfig(rsm_config={"dir": 1})  # type: ignore[dict-item]


def test_config_is_immutable() -> None:
    given = {"dir": "/a"}
    config = RemoteLogManagerConfig(rsm_config=given)
    given["dir"] = "/b"
    assert config.rsm_props() == {"dir": "/a"}
    props = config.rsm_props()
    props["node.id"] = "1"  # the caller may add to its copy
    assert config.rsm_props() == {"dir": "/a"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.remote_log_reader_threads = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.rsm_config["dir"] = "/c"  # type: ignore[index]
    assert hash(config) == hash(RemoteLogManagerConfig(rsm_config={"dir": "/other"}))


# Unknown keys and prefixes --------------------------------------------------------------------
def test_unknown_keys_are_reported_not_refused() -> None:
    props = {
        "remote.log.storage.system.enable": "true",
        "remote.log.reader.thread": "3",  # misspelt
        "node.id": "1",
        "log.retention.hours": "24",
        "rsm.config.dir": "/t",
        "rsm.config.": "prefix only",
        "rsmconfig.dir": "/x",
    }
    config, unknown = RemoteLogManagerConfig.from_props(props)
    assert unknown == (
        "log.retention.hours",
        "node.id",
        "remote.log.reader.thread",
        "rsm.config.",
        "rsmconfig.dir",
    )
    assert config.rsm_props() == {"dir": "/t"}
    assert config.recognizes("rlmm.config.anything")
    assert not config.recognizes("rlmm.config.")
    # Composable: what neither the RLM nor the broker log defaults read is left for the node.
    assert [k for k in unknown if k not in BROKER_KEYS] == [
        "node.id",
        "remote.log.reader.thread",
        "rsm.config.",
        "rsmconfig.dir",
    ]


def test_custom_prefixes_as_kafkas_test() -> None:
    config = config_of(
        {
            "remote.log.storage.manager.impl.prefix": "__custom.rsm.",
            "remote.log.metadata.manager.impl.prefix": "__custom.rlmm.",
            "__custom.rsm.rsm.prop": "val",
            "__custom.rlmm.rlmm.prop": "val",
        }
    )
    assert config.prefixes == ("__custom.rsm.", "__custom.rlmm.")
    assert config.rsm_props() == {"rsm.prop": "val"}
    assert config.rlmm_props() == {"rlmm.prop": "val"}
    # With custom prefixes the default ones are ordinary (unknown) keys.
    _, unknown = RemoteLogManagerConfig.from_props(
        {"remote.log.storage.manager.impl.prefix": "x.", "rsm.config.dir": "/t", "x.dir": "/u"}
    )
    assert unknown == ("rsm.config.dir",)
    assert (DEFAULT_RSM_PREFIX, DEFAULT_RLMM_PREFIX) == ("rsm.config.", "rlmm.config.")


def test_plugin_settings_become_strings() -> None:
    config = config_of({"rsm.config.flag": True, "rsm.config.n": 3, "rlmm.config.s": " x "})
    assert config.rsm_props() == {"flag": "true", "n": "3"}
    assert config.rlmm_props() == {"s": " x "}  # originals, untrimmed, as Kafka passes them


# Deprecated pool size -------------------------------------------------------------------------
def test_deprecated_pool_size_sets_the_follower_pool(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tierlog.rlm.config"):
        config = config_of({"remote.log.manager.thread.pool.size": "1"})
    assert config.remote_log_manager_follower_thread_pool_size == 1
    assert "remote.log.manager.thread.pool.size is deprecated" in caplog.text
    assert "use remote.log.manager.follower.thread.pool.size" in caplog.text


def test_follower_pool_size_wins_over_the_deprecated_key(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tierlog.rlm.config"):
        config = config_of(
            {
                "remote.log.manager.thread.pool.size": "1",
                "remote.log.manager.follower.thread.pool.size": "2",
            }
        )
    assert config.remote_log_manager_follower_thread_pool_size == 2
    assert "deprecated and ignored" in caplog.text
    assert config_of({}).remote_log_manager_follower_thread_pool_size == 2
    # Still validated, as Kafka defines it with atLeast(1).
    with pytest.raises(ConfigValueError, match=r"remote.log.manager.thread.pool.size: Value must"):
        RemoteLogManagerConfig.from_props(
            {
                "remote.log.manager.thread.pool.size": "0",
                "remote.log.manager.follower.thread.pool.size": "2",
            }
        )


# Plugin names ---------------------------------------------------------------------------------
def test_kafka_java_class_names_map_to_tierlog_plugins(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="tierlog.rlm.config"):
        config = config_of(
            {
                "remote.log.metadata.manager.class.name": KAFKA_DEFAULT_RLMM_CLASS_NAME,
                "remote.log.storage.manager.class.name": (
                    "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"
                ),
            }
        )
    assert (config.rsm_plugin, config.rlmm_plugin) == ("local", "topic")
    assert "using the tierlog plugin 'topic'" in caplog.text
    assert "using the tierlog plugin 'local'" in caplog.text
    # Kept as written.
    assert config.to_props()["remote.log.metadata.manager.class.name"] == (
        KAFKA_DEFAULT_RLMM_CLASS_NAME
    )


def test_plugin_names_pass_through() -> None:
    assert plugin_name(None, "local") == "local"
    assert plugin_name("s3", "local") == "s3"
    assert plugin_name("my_pkg.rsm:MyRsm", "local") == "my_pkg.rsm:MyRsm"
    config = config_of({"remote.log.metadata.manager.class.name": " compacted "})
    assert config.rlmm_plugin == "compacted"


def test_class_paths_are_accepted_and_left_for_the_node_to_report() -> None:
    """Read and validated, without effect: ``IGNORED_KEYS``, reported by the node at start-up
    (tests/node/test_config.py), not here as well."""
    config = config_of({"remote.log.storage.manager.class.path": "/opt/rsm/*"})
    assert config.remote_log_storage_manager_class_path == "/opt/rsm/*"
    assert set(IGNORED_KEYS) == {
        "remote.log.storage.manager.class.path",
        "remote.log.metadata.manager.class.path",
    }
    assert all(IGNORED_KEYS.values())


# Round trips ----------------------------------------------------------------------------------
def test_to_props_round_trips_through_a_properties_file() -> None:
    config = config_of(
        {
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.impl.prefix": "s.",
            "remote.log.metadata.manager.class.name": "topic",
            "remote.log.manager.task.retry.jitter": "0.35",
            "remote.log.manager.thread.pool.size": "5",
            "s.dir": "/data/tier",
            "rlmm.config.x": "y",
        }
    )
    text = format_properties(config.to_props())
    again, unknown = RemoteLogManagerConfig.from_props(parse_properties(text).values)
    assert unknown == ()
    assert again == config
    assert again.remote_log_manager_follower_thread_pool_size == 5


def test_errors_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        RemoteLogManagerConfig.from_props({"remote.log.reader.threads": "0"})
