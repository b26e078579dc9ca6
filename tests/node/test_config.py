"""A node's configuration file: Kafka's keys, tierlog's own, unknown keys reported, errors that
name the key (and the file)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tierlog.node import NodeConfig
from tierlog.spi import ConfigError


def test_defaults_are_kafkas_and_tierlogs() -> None:
    c = NodeConfig.from_props({})
    assert c.node_id == 0
    assert c.log_dirs == (Path("/tmp/kafka-logs"),)
    assert c.num_partitions == 1
    assert c.auto_create_topics_enable is True
    assert c.log_retention_check_interval_ms == 300_000
    assert (c.http_host, c.http_port) == ("127.0.0.1", 8405)
    assert c.rlm.remote_log_storage_system_enable is False
    assert c.unknown_keys == ()
    assert c.ignored_keys == ()


def test_a_server_properties_file_with_overrides(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# a node\n"
        "node.id=3\n"
        f"log.dirs={tmp_path}/a, {tmp_path}/b\n"
        "remote.log.storage.system.enable=true\n"
        "remote.log.manager.task.interval.ms=1000\n"
        "rsm.config.dir=/remote\n"
        "log.segment.bytes=1048576\n"
        "log.retention.hours=1\n"
        "process.roles=broker,controller\n"
    )
    c = NodeConfig.from_file(path, {"num.partitions": "4"})
    assert c.node_id == 3
    assert c.log_dirs == (tmp_path / "a", tmp_path / "b")
    assert c.num_partitions == 4
    assert c.rlm.remote_log_manager_task_interval_ms == 1000
    assert c.rlm.rsm_props() == {"dir": "/remote"}
    topic = c.topic_config({"segment.bytes": "2097152"})
    assert topic.segment_bytes == 2097152  # the topic override wins
    assert topic.retention_ms == 3_600_000  # log.retention.hours, in ms
    assert c.unknown_keys == ()  # process.roles is a known broker key a node ignores
    assert c.ignored_keys == ("process.roles",)  # ... and reports as having no effect
    assert NodeConfig.from_props(c.to_properties()).topic_config().retention_ms == 3_600_000


def test_unknown_keys_are_reported_and_refused_when_strict(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        c = NodeConfig.from_props(
            {"log.segmnet.bytes": "1", "remote.log.manager.task.interval.ms": "5"}
        )
    assert c.unknown_keys == ("log.segmnet.bytes",)
    assert "log.segmnet.bytes" in caplog.text
    with pytest.raises(ConfigError, match=r"log\.segmnet\.bytes"):
        NodeConfig.from_props({"log.segmnet.bytes": "1", "tierlog.config.strict": "true"})


@pytest.mark.parametrize(
    ("props", "key"),
    [
        ({"num.partitions": "0"}, "num.partitions"),
        ({"num.partitions": "x"}, "num.partitions"),
        ({"tierlog.http.port": "70000"}, "tierlog.http.port"),
        ({"tierlog.log.format": "xml"}, "tierlog.log.format"),
        ({"tierlog.log.level": "loud"}, "tierlog.log.level"),
        ({"log.retention.check.interval.ms": "0"}, "log.retention.check.interval.ms"),
        ({"node.id": "-1"}, "node.id"),
        ({"node.id": "1", "broker.id": "2"}, "broker.id"),
        ({"log.dirs": "/a,/a"}, "log.dirs"),
        ({"log.dirs": " , "}, "log.dirs"),
        ({"log.segment.bytes": "10"}, "log.segment.bytes"),
        ({"remote.log.manager.task.interval.ms": "0"}, "remote.log.manager.task.interval.ms"),
    ],
)
def test_invalid_values_name_their_key(props: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        NodeConfig.from_props(props)


def test_errors_from_a_file_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=zero\n")
    with pytest.raises(ConfigError, match=r"server\.properties.*num\.partitions"):
        NodeConfig.from_file(path)


def test_broker_id_is_accepted_for_node_id() -> None:
    assert NodeConfig.from_props({"broker.id": "7"}).node_id == 7
    assert NodeConfig.from_props({"node.id": "7", "broker.id": "7"}).node_id == 7


# Each key has one reader -------------------------------------------------------------------------
def test_node_level_local_retention_and_copy_lag_reach_the_topics() -> None:
    """``log.local.retention.*`` and ``log.remote.copy.lag.*`` (keys of Kafka's
    RemoteLogManagerConfig) are the broker defaults a topic's LogConfig applies."""
    c = NodeConfig.from_props(
        {
            "remote.log.storage.system.enable": "true",
            "log.retention.bytes": "100000000",
            "log.local.retention.bytes": "4096",
            "log.local.retention.ms": "60000",
            "log.remote.copy.lag.bytes": "1024",
            "log.remote.copy.lag.ms": "1000",
        }
    )
    assert (c.unknown_keys, c.ignored_keys) == ((), ())
    topic = c.topic_config({"remote.storage.enable": "true"})
    assert topic.effective_local_retention_bytes == 4096
    assert topic.effective_local_retention_ms == 60000
    assert topic.effective_remote_copy_lag_bytes() == 1024
    assert topic.effective_remote_copy_lag_ms() == 1000
    assert c.topic_config({"local.retention.bytes": "8192"}).local_retention_bytes == 8192
    with pytest.raises(ConfigError, match=r"log\.local\.retention\.bytes: Value must be at least"):
        NodeConfig.from_props({"log.local.retention.bytes": "-3"})


# Accepted but ignored ----------------------------------------------------------------------------
def test_accepted_but_ignored_keys_are_reported_with_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    props = {
        "process.roles": "broker",  # a Kafka broker key a single node has no use for
        "remote.log.storage.manager.class.path": "/opt/rsm/*",  # the RLM's
        "compression.type": "zstd",  # the broker default of an ignored topic key
        "log.segment.delete.delay.ms": "1000",  # idem, under another name
        "log.cleaner.delete.retention.ms": "1000",  # used (compaction): not reported
        "log.cleanup.policy": "compact,delete",  # used: not reported
        "log.segment.bytes": "1048576",  # used: not reported
        "log.local.retention.bytes": "4096",  # used: not reported
    }
    with caplog.at_level(logging.WARNING, logger="tierlog.node.config"):
        c = NodeConfig.from_props(props, source="server.properties")
    ignored = (
        "compression.type",
        "log.segment.delete.delay.ms",
        "process.roles",
        "remote.log.storage.manager.class.path",
    )
    assert c.ignored_keys == ignored
    assert c.unknown_keys == ()
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(messages) == len(ignored)
    for setting, message in zip(ignored, messages, strict=True):
        assert message.startswith(
            f"The configuration {setting} was supplied in server.properties but has no effect: "
        )
    assert "not loaded from a class path" in messages[-1]
    assert "KRaft" in messages[-2]
    assert not any(
        "log.segment.bytes" in m or "local.retention" in m or "cleaner" in m or "cleanup" in m
        for m in messages
    )


def test_ignored_keys_are_not_errors_in_strict_mode() -> None:
    c = NodeConfig.from_props({"listeners": "PLAINTEXT://:9092", "tierlog.config.strict": "true"})
    assert c.ignored_keys == ("listeners",)


# Unknown keys ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("log.retention.hour", "log.retention.hours"),
        ("remote.log.storge.system.enable", "remote.log.storage.system.enable"),
        ("log.segmnet.bytes", "log.segment.bytes"),
        ("compresion.type", "compression.type"),  # an ignored key is a known one too
    ],
)
def test_a_misspelt_key_gets_a_hint(
    typo: str, meant: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="tierlog.node.config"):
        c = NodeConfig.from_props({typo: "1"})
    assert c.unknown_keys == (typo,)
    assert caplog.messages == [
        f"The configuration {typo} was supplied but isn't a known config (did you mean {meant}?)."
    ]
    with pytest.raises(ConfigError, match=rf"not a known config \(did you mean {meant}\?\)"):
        NodeConfig.from_props({typo: "1", "tierlog.config.strict": "true"})


def test_an_unknown_key_with_no_near_match_gets_no_hint(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tierlog.node.config"):
        NodeConfig.from_props({"my.own.setting": "1"})
    assert caplog.messages == [
        "The configuration my.own.setting was supplied but isn't a known config."
    ]
