"""An unknown topic key is refused (Kafka's ``validateNames``), with a hint for a near miss."""

from __future__ import annotations

import pytest

from tierlog.log.log_config import LogConfig
from tierlog.spi import ConfigError


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("segmnet.bytes", "segment.bytes"),
        ("remote.storage.enabled", "remote.storage.enable"),
        ("compresion.type", "compression.type"),  # an accepted-but-ignored key is known too
    ],
)
def test_a_misspelt_topic_key_is_refused_with_a_hint(typo: str, meant: str) -> None:
    expected = f"Unknown topic config name: {typo} (did you mean {meant}?)"
    with pytest.raises(ConfigError) as raised:
        LogConfig.from_props({typo: "1"})
    assert str(raised.value) == expected
    with pytest.raises(ConfigError) as raised:
        LogConfig.from_broker_defaults({}, {typo: "1"})  # a topic's overrides, as a node reads them
    assert str(raised.value) == expected
    with pytest.raises(ConfigError) as raised:
        LogConfig().with_overrides({typo: "1"})  # an alteration
    assert str(raised.value) == expected


def test_a_topic_key_with_no_near_match_gets_no_hint() -> None:
    with pytest.raises(ConfigError) as raised:
        LogConfig.from_props({"retention.hour": "1"})  # not a typo of retention.ms
    assert str(raised.value) == "Unknown topic config name: retention.hour"
