"""The ``rlmm.config.`` keys of the ``compacted`` RLMM: the ``topic`` RLMM's keys, plus its own.

The compacted RLMM is the topic RLMM with another record layout (KAFKA-20033), so it reads the
whole ``TopicRlmmConfig`` (``base``: topic name and partitions, client prefixes, retries,
``node.id``) from the same mapping; the projection topic is ``base.topic_name``
(``remote.log.metadata.topic.name``, default ``__remote_log_metadata``). Its own keys:

- the audit topic (``remote.log.metadata.audit.enable``, ``.audit.topic.name``,
  ``.audit.topic.retention.ms``): every lifecycle event in Kafka's legacy format, append-only;
- ``remote.log.metadata.cleanup.interval.ms``: the period of the cleanup manager's scan;
- ``remote.log.metadata.compaction.level.refresh.ms``: how often a node reads the projection
  topic's ``cleanup.policy`` again (the cluster-wide compaction level: ``compact`` is level 1);
- ``remote.log.metadata.topic.config.<kafka topic config>``: any Kafka topic config of the
  projection topic, overriding the compaction defaults (``COMPACTION_DEFAULTS``).

The producer is transactional (projection, audit and tombstones of one write commit together):
``transactional.id`` is ``__remote_log_metadata_client_<nodeId>_txn``, one per node, so a
restarted node fences its previous incarnation. The consumer reads committed records only
(``isolation.level=read_committed``), or an aborted write would be applied. Both are forced
over what the client prefixes say, with a WARNING, as the topic RLMM forces Kafka's settings.

The projection must stay compacted once it is (the level is forward-only), so a
``remote.log.metadata.topic.config.cleanup.policy`` other than ``compact`` is refused, and so is
``...remote.storage.enable=true`` (the metadata of tiered storage is never tiered itself).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tierlog_rlmm_topic.config import (
    COMMON_CLIENT_PREFIX,
    CONSUMER_PREFIX,
    PRODUCER_PREFIX,
    TOPIC_NAME,
    TopicRlmmConfig,
)

from tierlog.properties import ConfigKey
from tierlog.spi import ConfigError, InvalidArgumentError

__all__ = [
    "AUDIT_ENABLE",
    "AUDIT_RETENTION_MS",
    "AUDIT_TOPIC_NAME",
    "CLEANUP_INTERVAL_MS",
    "COMPACTION_DEFAULTS",
    "CONFIG_KEYS",
    "DEFAULT_AUDIT_TOPIC_NAME",
    "LEVEL_REFRESH_MS",
    "TOPIC_CONFIG_PREFIX",
    "CompactedRlmmConfig",
]

_LOG = logging.getLogger(__name__)

AUDIT_ENABLE: Final = "remote.log.metadata.audit.enable"
AUDIT_TOPIC_NAME: Final = "remote.log.metadata.audit.topic.name"
AUDIT_RETENTION_MS: Final = "remote.log.metadata.audit.topic.retention.ms"
CLEANUP_INTERVAL_MS: Final = "remote.log.metadata.cleanup.interval.ms"
LEVEL_REFRESH_MS: Final = "remote.log.metadata.compaction.level.refresh.ms"
TOPIC_CONFIG_PREFIX: Final = "remote.log.metadata.topic.config."

DEFAULT_AUDIT_TOPIC_NAME: Final = "__remote_log_metadata_audit"

COMPACTION_DEFAULTS: Final[Mapping[str, str]] = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.1",
    "delete.retention.ms": "86400000",
    "segment.ms": "3600000",
}
"""The projection topic's compaction settings at level 1 (the seed's): compact, clean once a
tenth of the log is dirty, keep tombstones a day (a reader bootstrapping slower than that could
miss one), roll hourly (the active segment is never cleaned)."""

CONFIG_KEYS: Final[tuple[ConfigKey, ...]] = (
    ConfigKey(
        AUDIT_ENABLE,
        "boolean",
        default="true",
        doc="Whether every lifecycle event is also written, in Kafka's legacy format, to the "
        "audit topic.",
    ),
    ConfigKey(
        AUDIT_TOPIC_NAME,
        "string",
        non_empty=True,
        default=DEFAULT_AUDIT_TOPIC_NAME,
        doc="The audit topic (cleanup.policy=delete, same partition count as the projection); "
        "must differ from remote.log.metadata.topic.name.",
    ),
    ConfigKey(
        AUDIT_RETENTION_MS,
        "long",
        default="-1",
        doc="retention.ms of the audit topic when it is created: -1 (keep everything) or > 0.",
    ),
    ConfigKey(
        CLEANUP_INTERVAL_MS,
        "long",
        minimum=1,
        default="3600000",
        doc="Period of the cleanup manager, which tombstones orphan keys at level 1.",
    ),
    ConfigKey(
        LEVEL_REFRESH_MS,
        "long",
        minimum=1,
        default="60000",
        doc="How often the projection topic's cleanup.policy (the compaction level) is read again.",
    ),
)
"""The plugin's own keys (the topic RLMM's are ``tierlog_rlmm_topic.CONFIG_KEYS``; the
projection topic's configs are ``remote.log.metadata.topic.config.*``)."""

_KEYS_BY_NAME: Final = {key.name: key for key in CONFIG_KEYS}

# The overrides whose values this plugin relies on: checked here, with the key as written, rather
# than by Kafka at creation (or never, for an existing topic). Any other is Kafka's to check.
_OVERRIDE_KEYS: Final = {
    key.name: key
    for key in (
        ConfigKey("cleanup.policy", "list"),
        ConfigKey("min.cleanable.dirty.ratio", "double", minimum=0, maximum=1),
        ConfigKey("delete.retention.ms", "long", minimum=0),
        ConfigKey("segment.ms", "long", minimum=1),
        ConfigKey("min.insync.replicas", "int", minimum=1),
        ConfigKey("remote.storage.enable", "boolean"),
    )
}

_TXN_ID_KEY: Final = "transactional.id"
_ISOLATION_KEY: Final = "isolation.level"
_READ_COMMITTED: Final = "read_committed"


def _transactional_id(node_id: int) -> str:
    """The node's transactional id, named as Kafka names the RLMM's clients."""
    return f"__remote_log_metadata_client_{node_id}_txn"


def _value(configs: Mapping[str, str], name: str) -> object:
    """The parsed and checked value of one of ``CONFIG_KEYS``, its default when unset or blank."""
    key = _KEYS_BY_NAME[name]
    raw = configs.get(name)
    if raw is None or (key.kind != "string" and not str(raw).strip()):
        assert key.default is not None
        raw = key.default
    value = key.parse(raw)
    key.check(value)
    return value


def _written(configs: Mapping[str, str], prefix: str, client_key: str) -> str | None:
    """The key as written that set ``client_key`` for a client (its own prefix wins over the
    common one, as in ``TopicRlmmConfig``), or None when neither did."""
    for where in (prefix + client_key, COMMON_CLIENT_PREFIX + client_key):
        if where in configs:
            return where
    return None


def _topic_overrides(configs: Mapping[str, str]) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for written, raw in configs.items():
        if not written.startswith(TOPIC_CONFIG_PREFIX):
            continue
        name = written[len(TOPIC_CONFIG_PREFIX) :]
        if not name:
            raise ConfigError(
                f"{written} names no topic config: write {TOPIC_CONFIG_PREFIX}<kafka topic "
                "config>=<value>, e.g. "
                f"{TOPIC_CONFIG_PREFIX}min.cleanable.dirty.ratio=0.2"
            )
        value = str(raw).strip()
        key = _OVERRIDE_KEYS.get(name)
        if key is not None:
            # The same validator under the name as written, so that an error names that key.
            as_written = ConfigKey(written, key.kind, minimum=key.minimum, maximum=key.maximum)
            parsed = as_written.parse(value)
            as_written.check(parsed)
            if name == "cleanup.policy" and parsed != ("compact",):
                raise ConfigError(
                    f"Invalid value {value} for configuration {written}: the projection topic "
                    "of the compacted RLMM must be compacted (cleanup.policy=compact) once "
                    "compaction is on (level 1): with delete in the policy, retention would drop "
                    "the metadata of live segments; without compact, the topic grows forever. "
                    "Leave the key unset (level 0 is chosen by the topic itself, not here)"
                )
            if name == "remote.storage.enable" and parsed:
                raise ConfigError(
                    f"Invalid value {value} for configuration {written}: the remote log "
                    "metadata topic is never tiered itself (it describes the tiered segments)"
                )
            value = ",".join(parsed) if isinstance(parsed, tuple) else value
        overrides[name] = value
    return overrides


@dataclass(frozen=True, slots=True)
class CompactedRlmmConfig:
    """The compacted RLMM's configuration, parsed and validated; secrets stay out of ``repr``.

    ``base`` is the topic RLMM's configuration read from the same keys (projection topic,
    partitions, retries, ``node.id``, the clients). ``producer`` and ``consumer`` are
    ``base.producer`` and ``base.consumer`` with the transactional settings forced; the admin
    client is ``base.admin``.
    """

    base: TopicRlmmConfig
    audit_enable: bool = True
    audit_topic_name: str = DEFAULT_AUDIT_TOPIC_NAME
    audit_retention_ms: int = -1
    cleanup_interval_ms: int = 3_600_000
    level_refresh_ms: int = 60_000
    topic_config_overrides: Mapping[str, str] = field(default_factory=dict)
    transactional_id: str = ""
    producer: Mapping[str, str] = field(default_factory=dict, repr=False)
    consumer: Mapping[str, str] = field(default_factory=dict, repr=False)

    @staticmethod
    def keys() -> frozenset[str]:
        """The plugin's own keys accepted by name (the topic RLMM's are ``base``'s)."""
        return frozenset(_KEYS_BY_NAME)

    @classmethod
    def from_configs(cls, configs: Mapping[str, str]) -> CompactedRlmmConfig:
        """Parse and validate ``configs`` (the ``rlmm.config.`` keys, prefix stripped).

        ``ConfigError`` names the key at fault: anything ``TopicRlmmConfig.from_configs``
        refuses, a value out of range, an audit topic named like the projection topic, a
        projection ``cleanup.policy`` override without ``compact``. Unknown keys are reported
        in a WARNING (with a "did you mean" over both plugins' keys), as the topic RLMM does.
        """
        base = TopicRlmmConfig.from_configs(
            configs,
            extra_keys=_KEYS_BY_NAME,
            extra_prefixes=(TOPIC_CONFIG_PREFIX,),
            owner="compacted RLMM",
        )
        audit_enable = _value(configs, AUDIT_ENABLE)
        audit_topic = _value(configs, AUDIT_TOPIC_NAME)
        audit_retention = _value(configs, AUDIT_RETENTION_MS)
        cleanup_interval = _value(configs, CLEANUP_INTERVAL_MS)
        level_refresh = _value(configs, LEVEL_REFRESH_MS)
        assert isinstance(audit_enable, bool) and isinstance(audit_topic, str)
        assert isinstance(audit_retention, int) and isinstance(cleanup_interval, int)
        assert isinstance(level_refresh, int)
        if audit_retention != -1 and audit_retention <= 0:
            raise ConfigError(
                f"Invalid value {audit_retention} for configuration {AUDIT_RETENTION_MS}: it "
                "must be -1 (unlimited) or greater than 0"
            )
        if audit_topic == base.topic_name:
            raise ConfigError(
                f"Invalid value {audit_topic} for configuration {AUDIT_TOPIC_NAME}: it is also "
                f"the projection topic ({TOPIC_NAME}); the audit topic (cleanup.policy=delete, "
                "null keys) and the compacted projection must be two topics"
            )
        txn_id = _transactional_id(base.node_id)
        producer = dict(base.producer)
        given = producer.get(_TXN_ID_KEY)
        if given is not None and given != txn_id:
            _LOG.warning(
                "%s=%s is overridden: the compacted RLMM's producer is transactional with %s=%s "
                "(one per node, so that a restarted node fences its previous incarnation)",
                _written(configs, PRODUCER_PREFIX, _TXN_ID_KEY) or _TXN_ID_KEY,
                given,
                _TXN_ID_KEY,
                txn_id,
            )
        producer[_TXN_ID_KEY] = txn_id
        consumer = dict(base.consumer)
        written = _written(configs, CONSUMER_PREFIX, _ISOLATION_KEY)
        if written is not None and str(configs[written]).strip().lower() != _READ_COMMITTED:
            _LOG.warning(
                "%s=%s is overridden: the compacted RLMM's consumer reads %s=%s (an aborted "
                "write must not be applied)",
                written,
                configs[written],
                _ISOLATION_KEY,
                _READ_COMMITTED,
            )
        consumer[_ISOLATION_KEY] = _READ_COMMITTED
        return cls(
            base=base,
            audit_enable=audit_enable,
            audit_topic_name=audit_topic,
            audit_retention_ms=audit_retention,
            cleanup_interval_ms=cleanup_interval,
            level_refresh_ms=level_refresh,
            topic_config_overrides=_topic_overrides(configs),
            transactional_id=txn_id,
            producer=producer,
            consumer=consumer,
        )

    def projection_topic_configs(self, level: int) -> dict[str, str]:
        """The projection topic's configs for creating it at compaction ``level``.

        Level 1: ``COMPACTION_DEFAULTS``, ``remote.storage.enable=false`` and
        ``min.insync.replicas``, under the ``remote.log.metadata.topic.config.*`` overrides.
        Level 0 (a Kafka reader of the topic is known): the topic RLMM's configs
        (``cleanup.policy=delete``, ``retention.ms``, ...) under the overrides but
        ``cleanup.policy``, which only ever describes level 1.
        """
        if level == 1:
            return {
                **COMPACTION_DEFAULTS,
                "remote.storage.enable": "false",
                "min.insync.replicas": str(self.base.min_isr),
                **self.topic_config_overrides,
            }
        if level == 0:
            overrides = {
                name: value
                for name, value in self.topic_config_overrides.items()
                if name != "cleanup.policy"
            }
            return {**self.base.topic_configs(), **overrides}
        raise InvalidArgumentError(f"compaction level must be 0 or 1, not {level!r}")

    def compaction_settings(self) -> dict[str, str]:
        """The compaction settings of level 1 (``COMPACTION_DEFAULTS`` under the overrides, and
        every other override): what ``topics.enable_compaction`` sets on an existing topic and
        what ``topics.ensure_topics`` compares an existing level-1 topic with."""
        return {**COMPACTION_DEFAULTS, **self.topic_config_overrides}

    def audit_topic_configs(self) -> dict[str, str]:
        """The audit topic's configs at creation: append-only with the audit retention."""
        return {
            "cleanup.policy": "delete",
            "retention.ms": str(self.audit_retention_ms),
            "min.insync.replicas": str(self.base.min_isr),
            "remote.storage.enable": "false",
        }
