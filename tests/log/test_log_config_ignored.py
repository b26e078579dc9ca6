"""Kafka topic settings a log accepts but does not implement: kept, and reported once each with
a warning that names the setting and why it has no effect (``IGNORED_KEYS``)."""

from __future__ import annotations

import logging

import pytest

from tierlog.log import log_config
from tierlog.log.log_config import (
    BROKER_SYNONYMS,
    IGNORED_KEYS,
    KEYS,
    LogConfig,
    ignored_broker_settings,
)


@pytest.fixture(autouse=True)
def fresh_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each setting is reported once per process: start each test with none reported yet."""
    monkeypatch.setattr(log_config, "_REPORTED", set())


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "tierlog.log.log_config" and r.levelno == logging.WARNING
    ]


def test_an_ignored_topic_key_is_kept_and_reported_with_its_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        config = LogConfig.from_props({"compression.type": "zstd", "segment.bytes": "1048576"})
    assert config.ignored == {"compression.type": "zstd"}
    assert config.to_props()["compression.type"] == "zstd"
    assert warnings_of(caplog) == [
        "The topic configuration compression.type was supplied but has no effect: "
        f"{IGNORED_KEYS['compression.type']}."
    ]  # segment.bytes is used: not reported


def test_each_setting_is_reported_once_however_often_a_config_is_built(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        for _ in range(3):  # a topic's config is built per partition and per check
            LogConfig.from_broker_defaults({}, {"min.insync.replicas": "2"})
        LogConfig.from_props({"min.insync.replicas": "3", "preallocate": "true"})
    reported = warnings_of(caplog)
    assert len(reported) == 2
    assert "min.insync.replicas" in reported[0] and "preallocate" in reported[1]


def test_compaction_settings_are_read_and_not_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Compaction is implemented: ``cleanup.policy=compact`` and the cleaner's keys are read,
    not reported (they were ``IGNORED_KEYS`` entries before)."""
    with caplog.at_level(logging.WARNING):
        config = LogConfig.from_props(
            {
                "cleanup.policy": "Delete,COMPACT",
                "delete.retention.ms": "1000",
                "min.cleanable.dirty.ratio": "0.1",
                "min.compaction.lag.ms": "5",
                "max.compaction.lag.ms": "50",
            }
        )
    assert config.compact and config.delete
    assert config.ignored == {}
    assert warnings_of(caplog) == []
    compaction = {"delete.retention.ms", "min.cleanable.dirty.ratio", "min.compaction.lag.ms"}
    assert not compaction & set(IGNORED_KEYS)
    assert not any(k.startswith("cleanup.policy") for k in IGNORED_KEYS)


def test_broker_defaults_are_left_to_the_node_and_overrides_are_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = {"log.segment.delete.delay.ms": "1000", "compression.type": "gzip"}
    with caplog.at_level(logging.WARNING):
        base = LogConfig.from_broker_defaults(broker)
        assert base.ignored == {"file.delete.delay.ms": "1000", "compression.type": "gzip"}
        assert warnings_of(caplog) == []  # the node reports these, under their broker names
        LogConfig.from_broker_defaults(broker, {"compression.type": "lz4"})
    assert [m.split(" was")[0] for m in warnings_of(caplog)] == [
        "The topic configuration compression.type"
    ]


def test_an_alteration_reports_what_it_adds_only(caplog: pytest.LogCaptureFixture) -> None:
    config = LogConfig.from_broker_defaults({"log.flush.interval.ms": "1000"}, {})
    with caplog.at_level(logging.WARNING):
        new = config.with_overrides(
            {**config.to_props(), "retention.ms": "60000", "file.delete.delay.ms": "0"}
        )
    assert new.retention_ms == 60000
    assert [m.split(" was")[0] for m in warnings_of(caplog)] == [
        "The topic configuration file.delete.delay.ms"
    ]  # flush.ms, the broker's log.flush.interval.ms, was there before: not the alteration's


def test_ignored_broker_settings_name_the_broker_key() -> None:
    found = ignored_broker_settings(
        {
            "log.segment.delete.delay.ms": "1000",
            "log.cleaner.delete.retention.ms": "1000",
            "compression.type": "gzip",
            "log.cleanup.policy": "compact",
            "log.retention.hours": "1",
            "log.local.retention.bytes": "10",
            "not.a.key": "x",
        }
    )
    assert set(found) == {"log.segment.delete.delay.ms", "compression.type"}
    assert found["log.segment.delete.delay.ms"].startswith(IGNORED_KEYS["file.delete.delay.ms"])
    assert (
        "broker default of topic config file.delete.delay.ms"
        in found["log.segment.delete.delay.ms"]
    )
    assert found["compression.type"] == IGNORED_KEYS["compression.type"]
    assert ignored_broker_settings({"log.cleanup.policy": "delete"}) == {}


def test_the_table_is_the_one_place_to_change() -> None:
    """An ignored key is accepted only through the table, is not read, and its broker synonyms
    are passed through unparsed; a ``key=item`` entry names an item of a key that is read.
    Implementing a key is removing its line (and reading it), which these checks follow."""
    names = {k for k in IGNORED_KEYS if "=" not in k}
    assert all(IGNORED_KEYS.values())
    assert not names & set(KEYS)
    for entry in set(IGNORED_KEYS) - names:
        key, _, item = entry.partition("=")
        assert key in KEYS and item == item.lower()
    unparsed = {
        topic
        for topic, synonyms in log_config._SYNONYMS.items()
        if any(s.kind is None for s in synonyms)
    }
    assert unparsed == names & set(BROKER_SYNONYMS)
