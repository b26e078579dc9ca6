"""A node's configuration: one Java-properties file with Kafka's broker keys, plus tierlog's own.

``tierlog serve --config server.properties`` reads the same kind of file as
``kafka-server-start``; the keys a node understands are:

- Kafka's broker keys for the node itself: ``node.id`` (or the deprecated ``broker.id``),
  ``log.dirs`` / ``log.dir``, ``num.partitions``, ``auto.create.topics.enable``,
  ``log.retention.check.interval.ms``;
- the broker defaults of topic configs (``log.segment.bytes``, ``log.retention.hours``,
  ``log.local.retention.bytes``, ...: ``LogConfig.BROKER_KEYS``);
- the RemoteLogManager's keys (``remote.log.*``, ``rsm.config.*``, ``rlmm.config.*``:
  ``tierlog.rlm.config``);
- tierlog's own, under ``tierlog.``: the HTTP API/metrics listener and the log format.

Any other key is reported (a warning per key, and ``NodeConfig.unknown_keys``), as Kafka logs
"The configuration X was supplied but isn't a known config": a misspelt key never passes
silently. With ``tierlog.config.strict=true`` an unknown key is an error instead.

A key that is accepted but has no effect on a tierlog node is reported the same way, a warning
per key with the reason (and ``NodeConfig.ignored_keys``): Kafka broker keys a single node has no
use for (``IGNORED_NODE_KEYS``: ``process.roles``, ``listeners``, ...), the RLM's class paths
(``tierlog.rlm.config.IGNORED_KEYS``), and broker defaults of topic configs the log does not
implement (``tierlog.log.log_config.ignored_broker_settings``: ``compression.type``,
``log.segment.delete.delay.ms``, ``log.flush.interval.ms``, ...). These stay warnings in strict
mode: a Kafka file holding them is not wrong. The compaction defaults (``log.cleanup.policy``,
``log.cleaner.delete.retention.ms``, ``log.cleaner.min.cleanable.ratio``,
``log.cleaner.min/max.compaction.lag.ms``) are topic defaults the log reads, not ignored.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Final

from tierlog.compaction.config import KEYS as CLEANER_KEYS
from tierlog.compaction.config import CleanerConfig
from tierlog.log.log_config import BROKER_KEYS, LogConfig, ignored_broker_settings
from tierlog.properties import (
    did_you_mean,
    load_properties,
    parse_bool,
    parse_int,
    parse_long,
    parse_string,
)
from tierlog.rlm.config import IGNORED_KEYS as RLM_IGNORED_KEYS
from tierlog.rlm.config import KEYS as RLM_KEYS
from tierlog.rlm.config import RemoteLogManagerConfig
from tierlog.spi import ConfigError

__all__ = ["IGNORED_NODE_KEYS", "NODE_KEYS", "NodeConfig"]

_LOG = logging.getLogger(__name__)

_DEFAULT_LOG_DIR: Final = "/tmp/kafka-logs"
_LOG_LEVELS: Final = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")

NODE_KEYS: Final = frozenset(
    {
        "node.id",
        "broker.id",
        "log.dirs",
        "log.dir",
        "num.partitions",
        "auto.create.topics.enable",
        "log.retention.check.interval.ms",
        "remote.log.storage.system.enable",
        "tierlog.http.host",
        "tierlog.http.port",
        "tierlog.log.format",
        "tierlog.log.level",
        "tierlog.config.strict",
    }
)
"""Keys read by the node itself, beside the RLM's and the log defaults."""

_ONE_NODE: Final = "a tierlog node is one process, not a member of a KRaft cluster"
_NO_KAFKA_LISTENER: Final = (
    "a tierlog node serves its HTTP API on tierlog.http.host and tierlog.http.port, "
    "not Kafka's protocol on listeners"
)
_NO_REPLICAS: Final = "a tierlog node keeps one copy of each partition (there are no replicas)"

IGNORED_NODE_KEYS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "process.roles": _ONE_NODE,
        "controller.quorum.voters": _ONE_NODE,
        "controller.quorum.bootstrap.servers": _ONE_NODE,
        "controller.listener.names": _ONE_NODE,
        "listeners": _NO_KAFKA_LISTENER,
        "advertised.listeners": _NO_KAFKA_LISTENER,
        "inter.broker.listener.name": _NO_KAFKA_LISTENER,
        "listener.security.protocol.map": _NO_KAFKA_LISTENER,
        "num.network.threads": _NO_KAFKA_LISTENER,
        "num.io.threads": _NO_KAFKA_LISTENER,
        "socket.send.buffer.bytes": _NO_KAFKA_LISTENER,
        "socket.receive.buffer.bytes": _NO_KAFKA_LISTENER,
        "socket.request.max.bytes": _NO_KAFKA_LISTENER,
        "num.recovery.threads.per.data.dir": "a node recovers its logs on one thread",
        "offsets.topic.replication.factor": _NO_REPLICAS,
        "transaction.state.log.replication.factor": _NO_REPLICAS,
        "transaction.state.log.min.isr": _NO_REPLICAS,
        "share.coordinator.state.topic.replication.factor": _NO_REPLICAS,
        "share.coordinator.state.topic.min.isr": _NO_REPLICAS,
        "group.initial.rebalance.delay.ms": "a tierlog node has no consumer group coordinator",
    }
)
"""Broker keys a single node has no use for but which a server.properties copied from a Kafka
broker holds, each with why it has no effect: accepted, and reported (not as unknown)."""

_KNOWN_KEYS: Final = (
    NODE_KEYS
    | BROKER_KEYS
    | RLM_KEYS
    | frozenset(IGNORED_NODE_KEYS)
    | frozenset(k.name for k in CLEANER_KEYS)
)
"""Every key a node accepts (plugin keys under a prefix aside): what an unknown key is compared
with for a "did you mean"."""


@dataclass(frozen=True)
class NodeConfig:
    """Everything a ``Node`` needs, parsed and validated from Kafka-style properties."""

    node_id: int = 0
    log_dirs: tuple[Path, ...] = (Path(_DEFAULT_LOG_DIR),)
    num_partitions: int = 1
    auto_create_topics_enable: bool = True
    log_retention_check_interval_ms: int = 300_000
    http_host: str = "127.0.0.1"
    http_port: int = 8405
    log_format: str = "text"
    log_level: str = "INFO"
    rlm: RemoteLogManagerConfig = field(default_factory=RemoteLogManagerConfig)
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)
    """The log cleaner of compacted topics (``log.cleaner.*``, ``remote.log.compaction.*``)."""
    props: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Every key as given (strings), for the topic defaults and for ``to_properties``."""
    unknown_keys: tuple[str, ...] = ()
    """Keys no reader recognises, sorted (each was reported with a warning)."""
    ignored_keys: tuple[str, ...] = ()
    """Accepted settings that have no effect, sorted (each was reported with a warning and
    why); a list item would be written ``key=item`` (none is ignored today)."""
    source: str | None = None

    # Reading -------------------------------------------------------------------------------------
    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], overrides: Mapping[str, str] | None = None
    ) -> NodeConfig:
        """Read ``path`` (Java properties); ``overrides`` (``--override k=v``) win."""
        props = load_properties(path)
        props.update(overrides or {})
        return cls.from_props(props, source=os.fspath(path))

    @classmethod
    def from_props(cls, props: Mapping[str, object], *, source: str | None = None) -> NodeConfig:
        """Parse and validate; ``ConfigError`` names the key (and the file) at fault."""
        text = {str(k): _to_text(v) for k, v in props.items()}
        try:
            return cls._parse(text, source)
        except ConfigError as e:
            if source is None:
                raise
            raise ConfigError(f"{source}: {e}") from e

    @classmethod
    def _parse(cls, props: Mapping[str, str], source: str | None) -> NodeConfig:
        rlm, rlm_unknown = RemoteLogManagerConfig.from_props(props)
        node_id = cls._node_id(props)
        log_dirs = cls._log_dirs(props)
        num_partitions = parse_int("num.partitions", props.get("num.partitions", "1"))
        if num_partitions < 1:
            raise ConfigError(
                f"Invalid value {num_partitions} for configuration num.partitions: "
                "Value must be at least 1"
            )
        interval = parse_long(
            "log.retention.check.interval.ms",
            props.get("log.retention.check.interval.ms", "300000"),
        )
        if interval < 1:
            raise ConfigError(
                f"Invalid value {interval} for configuration log.retention.check.interval.ms: "
                "Value must be at least 1"
            )
        port = parse_int("tierlog.http.port", props.get("tierlog.http.port", "8405"))
        if not 0 <= port <= 65535:
            raise ConfigError(
                f"Invalid value {port} for configuration tierlog.http.port: not a TCP port"
            )
        log_format = parse_string("tierlog.log.format", props.get("tierlog.log.format", "text"))
        if log_format not in ("text", "json"):
            raise ConfigError(
                f"Invalid value {log_format} for configuration tierlog.log.format: "
                "must be text or json"
            )
        log_level = parse_string("tierlog.log.level", props.get("tierlog.log.level", "INFO"))
        if log_level.upper() not in _LOG_LEVELS:
            raise ConfigError(
                f"Invalid value {log_level} for configuration tierlog.log.level: must be one of "
                f"{', '.join(_LOG_LEVELS)}"
            )
        unknown = tuple(
            sorted(
                k
                for k in rlm_unknown
                if k not in NODE_KEYS
                and k not in BROKER_KEYS
                and k not in IGNORED_NODE_KEYS
                and not CleanerConfig.recognizes(k)
            )
        )
        strict = parse_bool("tierlog.config.strict", props.get("tierlog.config.strict", "false"))
        where = f" in {source}" if source else ""
        for key in unknown:
            hint = did_you_mean(key, _KNOWN_KEYS)
            if strict:
                raise ConfigError(f"The configuration {key}{where} is not a known config{hint}")
            _LOG.warning(
                "The configuration %s was supplied%s but isn't a known config%s.", key, where, hint
            )
        ignored = _ignored_settings(props)
        for setting, reason in ignored.items():
            _LOG.warning(
                "The configuration %s was supplied%s but has no effect: %s.", setting, where, reason
            )
        config = cls(
            node_id=node_id,
            log_dirs=log_dirs,
            num_partitions=num_partitions,
            auto_create_topics_enable=parse_bool(
                "auto.create.topics.enable", props.get("auto.create.topics.enable", "true")
            ),
            log_retention_check_interval_ms=interval,
            http_host=parse_string(
                "tierlog.http.host", props.get("tierlog.http.host", "127.0.0.1")
            ),
            http_port=port,
            log_format=log_format,
            log_level=log_level.upper(),
            rlm=rlm,
            cleaner=CleanerConfig.from_props(props),
            props=dict(props),
            unknown_keys=unknown,
            ignored_keys=tuple(ignored),
            source=source,
        )
        config.topic_config()  # the broker's topic defaults must be valid on their own
        return config

    @staticmethod
    def _node_id(props: Mapping[str, str]) -> int:
        if "node.id" in props:
            value = parse_int("node.id", props["node.id"])
            if "broker.id" in props and parse_int("broker.id", props["broker.id"]) != value:
                raise ConfigError(
                    f"node.id ({value}) and broker.id ({props['broker.id']}) differ: "
                    "set only node.id"
                )
        elif "broker.id" in props:
            value = parse_int("broker.id", props["broker.id"])
        else:
            value = 0
        if value < 0:
            raise ConfigError(f"Invalid value {value} for configuration node.id: must be >= 0")
        return value

    @staticmethod
    def _log_dirs(props: Mapping[str, str]) -> tuple[Path, ...]:
        raw = props.get("log.dirs", props.get("log.dir", _DEFAULT_LOG_DIR))
        dirs = tuple(Path(p.strip()).expanduser() for p in raw.split(",") if p.strip())
        if not dirs:
            raise ConfigError("Invalid value for configuration log.dirs: no directory given")
        if len(set(dirs)) != len(dirs):
            raise ConfigError(
                f"Invalid value {raw} for configuration log.dirs: duplicate directory"
            )
        return dirs

    # Deriving ------------------------------------------------------------------------------------
    def topic_config(self, overrides: Mapping[str, object] | None = None) -> LogConfig:
        """A topic's ``LogConfig``: the broker defaults of this file under the topic's overrides."""
        return LogConfig.from_broker_defaults(self.props, overrides or {})

    def with_overrides(self, overrides: Mapping[str, object]) -> NodeConfig:
        """The same configuration with some keys replaced (validated again)."""
        merged: dict[str, object] = {**self.props, **overrides}
        return NodeConfig.from_props(merged, source=self.source)

    def to_properties(self) -> dict[str, str]:
        """The keys as given, for writing a file a user can rerun ``tierlog serve`` with."""
        return dict(self.props)


def _ignored_settings(props: Mapping[str, str]) -> dict[str, str]:
    """Every accepted-but-ignored setting of a node's properties, sorted: setting -> why it has
    no effect. The three tables are disjoint (each key has one reader)."""
    found = {k: IGNORED_NODE_KEYS[k] for k in props if k in IGNORED_NODE_KEYS}
    found.update({k: RLM_IGNORED_KEYS[k] for k in props if k in RLM_IGNORED_KEYS})
    found.update(ignored_broker_settings(props))
    return dict(sorted(found.items()))


def _to_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, os.PathLike):
        return str(os.fspath(value))
    return str(value)
