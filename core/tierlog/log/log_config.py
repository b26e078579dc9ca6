"""A partition's log configuration: Kafka's topic-level keys, defaults and checks.

``LogConfig.from_props({"segment.bytes": "1048576", ...})`` reads Kafka's key names (strings from
a properties file, or Python values) and ``LogConfig(...)`` takes the same settings as snake_case
fields; both validate, and every failure is a ``ConfigError`` whose message names the key, in
Kafka's words ("Invalid value X for configuration K: ..."), so a user sees which line of the
properties file to fix. Value errors are ``tierlog.properties.ConfigValueError``, whose ``key``
attribute holds the key.

Defaults and lower bounds are those of Kafka's ``LogConfig`` (``storage/.../log/LogConfig.java``)
and ``ServerLogConfigs``. Kafka's cross-check of the compaction lags (``validateValues``:
``min.compaction.lag.ms`` must not exceed ``max.compaction.lag.ms``) is made on every
configuration. The checks Kafka makes when a topic has ``remote.storage.enable=true``
(``validateTopicLogConfigValues``) are made here when it is set, all but the cleanup policy
one (below): ``local.retention.bytes``/``local.retention.ms`` must not be ``-1`` when the total
retention is bounded, nor larger than it, a positive ``remote.copy.lag.bytes``/``.ms``
(KIP-1241) must not exceed the effective local retention when that is bounded, and with
``remote.log.copy.disable`` the local and total retentions must match. Kafka does not check local
retention or copy lag when remote storage is off (neither is used then), and neither does this.
``with_overrides`` (a dynamic update) refuses to turn remote storage off unless
``remote.log.delete.on.disable`` is set, as Kafka does.

``LogConfig.from_broker_defaults(broker_props, topic_overrides)`` derives a topic's
configuration the way a broker does: the ``log.*`` broker defaults (Kafka's
``ServerTopicConfigSynonyms``, ``BROKER_SYNONYMS`` here) under the topic's own overrides.

Deliberate differences, each for a stated reason:

- **Compacted topics may be tiered** (a tierlog extension, the KIP "Tiered Storage for compacted
  topics"): Kafka 4.3.1 refuses ``remote.storage.enable=true`` unless ``cleanup.policy`` is
  ``delete`` (or empty) with "Remote log storage only supports topics with
  cleanup.policy=delete or cleanup.policy being an empty list."; tierlog accepts ``compact`` and
  ``compact,delete`` too, and ``remote_log_enabled`` is true for them (internal topics are still
  never tiered). What local retention does with such a topic is ``log_retention``'s.
- ``segment.index.bytes`` must be at least 24 (Kafka: 4). The index files refuse a size below one
  entry, and a time index needs two slots (its last is reserved for the entry written at roll), so
  anything smaller would make every append roll a new segment.
- Keys Kafka has but this log does not use (compression, throttling, ...) are
  accepted and ignored (``IGNORED_KEYS``, with the reason of each), and reported once with a
  warning; any other key is a ``ConfigError`` (Kafka's ``validateNames``), so a misspelt key
  does not pass silently.
- ``internal.segment.bytes`` (Kafka's testing-only override of ``segment.bytes``, with no lower
  bound) is supported because tests need segments far smaller than 1 MiB.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Final

from tierlog.properties import ConfigKey, ConfigValueError, KeyType, did_you_mean, parse_bool
from tierlog.spi import ConfigError

__all__ = [
    "BROKER_KEYS",
    "BROKER_SYNONYMS",
    "DEFAULT_LOCAL_RETENTION_BYTES",
    "DEFAULT_LOCAL_RETENTION_MS",
    "IGNORED_KEYS",
    "INTERNAL_TOPICS",
    "KEYS",
    "REMOTE_COPY_LAG_FROM_LOCAL_RETENTION",
    "LogConfig",
    "ignored_broker_settings",
]

_LOG = logging.getLogger(__name__)

_INT_MAX: Final = (1 << 31) - 1
_LONG_MAX: Final = (1 << 63) - 1
_LONG_MIN: Final = -(1 << 63)

DEFAULT_LOCAL_RETENTION_MS: Final = -2
"""``local.retention.ms`` default: take the value of ``retention.ms``."""
DEFAULT_LOCAL_RETENTION_BYTES: Final = -2
"""``local.retention.bytes`` default: take the value of ``retention.bytes``."""
REMOTE_COPY_LAG_FROM_LOCAL_RETENTION: Final = -1
"""``remote.copy.lag.ms``/``.bytes`` value meaning "the effective ``local.retention.*``"."""

INTERNAL_TOPICS: Final = frozenset(
    {"__consumer_offsets", "__transaction_state", "__remote_log_metadata", "__cluster_metadata"}
)
"""Topics Kafka never tiers (``UnifiedLog.isRemoteLogEnabled``)."""

_MIN_INDEX_BYTES: Final = 24

_NO_RECOMPRESSION: Final = (
    "batches are stored as the producer compressed them (the node does not recompress)"
)
_NO_REPLICAS: Final = "a tierlog node keeps one copy of each partition (there are no replicas)"

IGNORED_KEYS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "compression.type": _NO_RECOMPRESSION,
        "compression.gzip.level": _NO_RECOMPRESSION,
        "compression.lz4.level": _NO_RECOMPRESSION,
        "compression.zstd.level": _NO_RECOMPRESSION,
        "min.insync.replicas": _NO_REPLICAS,
        "unclean.leader.election.enable": _NO_REPLICAS,
        "follower.replication.throttled.replicas": _NO_REPLICAS,
        "leader.replication.throttled.replicas": _NO_REPLICAS,
        "file.delete.delay.ms": (
            "segments are deleted at once (reads hold the log's lock, none is in flight)"
        ),
        "flush.ms": (
            "there is no time-based flush: the log fsyncs after flush.messages messages and "
            "when a segment is rolled"
        ),
        "preallocate": "segment files grow as they are written (only indexes are preallocated)",
        "errors.deadletterqueue.group.enable": (
            "a tierlog node has no consumer groups to write a dead letter queue (KIP-1034)"
        ),
    }
)
"""Kafka topic settings this log accepts and ignores, each with why it has no effect.

An entry is a key (no value of it has an effect) or ``key=value`` (that item of a list key has
none, as ``cleanup.policy=compact`` had before compaction was implemented). Accepted, because a
topic configuration written for Kafka should be usable as it is; reported, once per process
and setting, with a warning that names it and gives the reason (``from_props``,
``from_broker_defaults`` for the topic's overrides, ``with_overrides`` for what changes; the node
reports the broker defaults of these keys at start-up, ``ignored_broker_settings``), so that a
setting with no effect never passes silently.
Implementing one is deleting its line here and reading the key (``_KEYS``, and the type of its
broker synonym in ``_SYNONYMS``)."""

_IGNORED_NAMES: Final = frozenset(k for k in IGNORED_KEYS if "=" not in k)
_IGNORED_VALUES: Final[Mapping[str, frozenset[str]]] = {
    key: frozenset(v for k, _, v in (e.partition("=") for e in IGNORED_KEYS) if k == key)
    for key in {e.partition("=")[0] for e in IGNORED_KEYS if "=" in e}
}
"""List keys with ignored items, ``key`` -> ``{item, ...}`` (none today)."""


# Kafka's LogConfig.configDef(), for the keys this log reads: type and validator.
_KEYS: Final[tuple[ConfigKey, ...]] = (
    ConfigKey("segment.bytes", "int", minimum=1024 * 1024),
    ConfigKey("internal.segment.bytes", "int", minimum=1, optional=True),
    ConfigKey("segment.ms", "long", minimum=1),
    ConfigKey("segment.jitter.ms", "long", minimum=0),
    ConfigKey("segment.index.bytes", "int", minimum=_MIN_INDEX_BYTES),
    ConfigKey("index.interval.bytes", "int", minimum=0),
    ConfigKey("retention.ms", "long", minimum=-1),
    ConfigKey("retention.bytes", "long"),
    ConfigKey("local.retention.ms", "long", minimum=-2),
    ConfigKey("local.retention.bytes", "long", minimum=-2),
    ConfigKey("remote.storage.enable", "boolean"),
    ConfigKey("remote.log.copy.disable", "boolean"),
    ConfigKey("remote.copy.lag.ms", "long", minimum=-1),
    ConfigKey("remote.copy.lag.bytes", "long", minimum=-1),
    ConfigKey("remote.log.delete.on.disable", "boolean"),
    ConfigKey("message.timestamp.type", "string", choices=("CreateTime", "LogAppendTime")),
    ConfigKey("message.timestamp.before.max.ms", "long", minimum=0),
    ConfigKey("message.timestamp.after.max.ms", "long", minimum=0),
    ConfigKey("max.message.bytes", "int", minimum=0),
    ConfigKey("cleanup.policy", "list"),
    ConfigKey("flush.messages", "long", minimum=1),
    ConfigKey("delete.retention.ms", "long", minimum=0),
    ConfigKey("min.compaction.lag.ms", "long", minimum=0),
    ConfigKey("max.compaction.lag.ms", "long", minimum=1),
    ConfigKey("min.cleanable.dirty.ratio", "double", minimum=0, maximum=1),
)
KEYS: Final = tuple(k.name for k in _KEYS)
"""The Kafka keys this log interprets."""
_BY_NAME: Final = {k.name: k for k in _KEYS}
_BY_ATTR: Final = {k.attr: k for k in _KEYS}
_KNOWN_NAMES: Final = frozenset(KEYS) | _IGNORED_NAMES
"""Every topic key accepted: what an unknown key is compared with for a "did you mean"."""


def _invalid(key: str, value: object, why: str) -> ConfigValueError:
    return ConfigValueError(key, value, why)


_HOUR_MS: Final = 3600 * 1000
_MINUTE_MS: Final = 60 * 1000


@dataclass(frozen=True, slots=True)
class _Synonym:
    """A broker key that sets a topic key's default: its Kafka type, and a factor to
    milliseconds for ``*.hours``/``*.minutes``. ``kind=None``: a key this log does not use,
    passed through unparsed."""

    name: str
    kind: KeyType | None
    to_ms: int = 1

    def parse(self, raw: object) -> object:
        if self.kind is None:
            return raw
        value = ConfigKey(self.name, self.kind).parse(raw)
        return value * self.to_ms if self.to_ms != 1 else value


def _same(
    topic_key: str, kind: KeyType | None, *, prefix: str = "log."
) -> tuple[str, tuple[_Synonym, ...]]:
    return topic_key, (_Synonym(prefix + topic_key, kind),)


# Kafka's ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS, in its order of precedence.
_SYNONYMS: Final[Mapping[str, tuple[_Synonym, ...]]] = dict(
    [
        _same("segment.bytes", "int"),
        (
            "segment.ms",
            (_Synonym("log.roll.ms", "long"), _Synonym("log.roll.hours", "int", _HOUR_MS)),
        ),
        (
            "segment.jitter.ms",
            (
                _Synonym("log.roll.jitter.ms", "long"),
                _Synonym("log.roll.jitter.hours", "int", _HOUR_MS),
            ),
        ),
        ("segment.index.bytes", (_Synonym("log.index.size.max.bytes", "int"),)),
        ("flush.messages", (_Synonym("log.flush.interval.messages", "long"),)),
        (
            "flush.ms",
            (
                _Synonym("log.flush.interval.ms", None),
                _Synonym("log.flush.scheduler.interval.ms", None),
            ),
        ),
        _same("retention.bytes", "long"),
        (
            "retention.ms",
            (
                _Synonym("log.retention.ms", "long"),
                _Synonym("log.retention.minutes", "int", _MINUTE_MS),
                _Synonym("log.retention.hours", "int", _HOUR_MS),
            ),
        ),
        ("max.message.bytes", (_Synonym("message.max.bytes", "int"),)),
        _same("index.interval.bytes", "int"),
        _same("delete.retention.ms", "long", prefix="log.cleaner."),
        _same("min.compaction.lag.ms", "long", prefix="log.cleaner."),
        _same("max.compaction.lag.ms", "long", prefix="log.cleaner."),
        ("file.delete.delay.ms", (_Synonym("log.segment.delete.delay.ms", None),)),
        ("min.cleanable.dirty.ratio", (_Synonym("log.cleaner.min.cleanable.ratio", "double"),)),
        _same("cleanup.policy", "list"),
        _same("unclean.leader.election.enable", None, prefix=""),
        _same("min.insync.replicas", None, prefix=""),
        _same("compression.type", None, prefix=""),
        _same("compression.gzip.level", None, prefix=""),
        _same("compression.lz4.level", None, prefix=""),
        _same("compression.zstd.level", None, prefix=""),
        _same("preallocate", None),
        _same("message.timestamp.type", "string"),
        _same("message.timestamp.before.max.ms", "long"),
        _same("message.timestamp.after.max.ms", "long"),
        _same("local.retention.ms", "long"),
        _same("local.retention.bytes", "long"),
        _same("remote.copy.lag.ms", "long"),
        _same("remote.copy.lag.bytes", "long"),
    ]
)
BROKER_SYNONYMS: Final[Mapping[str, tuple[str, ...]]] = {
    topic: tuple(s.name for s in synonyms) for topic, synonyms in _SYNONYMS.items()
}
"""Topic key -> the broker keys that set its default, first one present wins (Kafka's
``ServerTopicConfigSynonyms``)."""
BROKER_KEYS: Final = frozenset(name for names in BROKER_SYNONYMS.values() for name in names)
"""Every broker key ``LogConfig.from_broker_defaults`` reads as a topic default (it also reads
``remote.log.storage.system.enable``, which belongs to ``tierlog.rlm.config``)."""


def _ignored_items(topic_key: str, raw: object) -> list[str]:
    """The ``IGNORED_KEYS`` entries that ``topic_key=raw`` sets: the key itself, or a
    ``key=item`` per ignored item of its list value (none for a value refused elsewhere)."""
    if topic_key in _IGNORED_NAMES:
        return [topic_key]
    ignored = _IGNORED_VALUES.get(topic_key)
    if not ignored:
        return []
    key = _BY_NAME.get(topic_key)
    try:
        parsed = raw if key is None else key.parse(raw)
    except ConfigValueError:
        return []
    items = parsed if isinstance(parsed, tuple) else (parsed,)
    return [
        f"{topic_key}={v}" for v in dict.fromkeys(str(i).lower() for i in items) if v in ignored
    ]


def _ignored_settings(props: Mapping[str, object]) -> dict[str, str]:
    """Accepted-but-ignored topic settings of ``props``: setting -> why it has no effect."""
    return {s: IGNORED_KEYS[s] for name, raw in props.items() for s in _ignored_items(name, raw)}


def ignored_broker_settings(broker_props: Mapping[str, object]) -> dict[str, str]:
    """The broker defaults in ``broker_props`` of topic settings this log ignores: broker
    setting (``compression.type``, ``log.flush.interval.ms``, ...) -> why it has no effect.

    For the node to report at start-up with the other broker keys it accepts and ignores; the
    topic-level report (``IGNORED_KEYS``) covers a topic's own overrides only, so a broker
    default is reported once, under the name the user wrote.
    """
    found: dict[str, str] = {}
    for topic_key, synonyms in _SYNONYMS.items():
        for synonym in synonyms:
            if synonym.name not in broker_props:
                continue
            for setting in _ignored_items(topic_key, broker_props[synonym.name]):
                reason = IGNORED_KEYS[setting]
                if synonym.name != topic_key:
                    reason += f" ({synonym.name} is the broker default of topic config {topic_key})"
                found[synonym.name + setting[len(topic_key) :]] = reason
    return found


_REPORTED: set[str] = set()
_REPORTED_LOCK: Final = threading.Lock()


def _report_ignored(settings: Mapping[str, str]) -> None:
    """Warn about each accepted-but-ignored topic setting, once per process.

    Once, because the reason does not depend on the topic and a topic's configuration is built
    again for each partition opened and each check (creation, restart, alteration): a warning
    per build would repeat itself. The memory is bounded by ``IGNORED_KEYS``.
    """
    for setting, reason in settings.items():
        with _REPORTED_LOCK:
            if setting in _REPORTED:
                continue
            _REPORTED.add(setting)
        _LOG.warning(
            "The topic configuration %s was supplied but has no effect: %s.", setting, reason
        )


def _broker_retention_ms(key: str, raw: object, millis: object) -> int:
    """``AbstractKafkaConfig.logRetentionTimeMillis`` and ``KafkaConfig``'s check of it:
    negative is unlimited (-1), zero is refused."""
    assert isinstance(millis, int)
    if millis < 0:
        return -1
    if millis == 0:
        raise _invalid(key, raw, "Value must be unlimited (-1) or at least 1 millisecond")
    return millis


def _check_local_retention(local_key: str, local: int, total_key: str, total: int) -> None:
    """Kafka's ``validateRemoteStorageRetentionSize/Time``: a set local retention must be
    bounded when the total one is, and not larger than it.

    Time and size differ in Kafka only by what "unbounded total" means: ``retention.ms`` is
    unbounded at -1 only, ``retention.bytes`` at any negative value.
    """
    bounded = total != -1 if total_key.endswith(".ms") else total > -1
    if not bounded or local == DEFAULT_LOCAL_RETENTION_MS:
        return
    if local == -1:
        raise _invalid(
            local_key, local, f"Value must not be -1 as {total_key} value is set as {total}."
        )
    if local > total:
        raise _invalid(
            local_key, local, f"Value must not be more than {total_key} property value: {total}"
        )


def _check_copy_lag(lag_key: str, lag: int, local_key: str, effective_local: int) -> None:
    """Kafka's ``validateRemoteCopyLagTime/Size`` (KIP-1241): a positive copy lag must not
    exceed a bounded effective local retention, or a segment could be deleted locally before it
    is old enough to be copied."""
    if lag > 0 and effective_local >= 0 and lag > effective_local:
        raise _invalid(
            lag_key, lag, f"Value must not exceed {local_key} (effective value: {effective_local})"
        )


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The settings of one partition's log, with Kafka's defaults (see the module docstring)."""

    segment_bytes: int = 1 << 30
    """``segment.bytes``: roll when the active segment would grow past this (at least 1 MiB)."""
    internal_segment_bytes: int | None = None
    """``internal.segment.bytes``: overrides ``segment.bytes`` without its minimum (tests)."""
    segment_ms: int = 7 * 24 * 3600 * 1000
    """``segment.ms``: roll when the first batch's timestamp is this old (wall clock if none)."""
    segment_jitter_ms: int = 0
    """``segment.jitter.ms``: a random amount up to this is taken off ``segment.ms`` per segment."""
    segment_index_bytes: int = 10 * 1024 * 1024
    """``segment.index.bytes``: preallocated size of each offset and time index."""
    index_interval_bytes: int = 4096
    """``index.interval.bytes``: bytes appended between two offset index entries."""
    retention_ms: int = 7 * 24 * 3600 * 1000
    """``retention.ms``: total (local + remote) retention by time; -1 is unlimited."""
    retention_bytes: int = -1
    """``retention.bytes``: total retention by size; negative is unlimited."""
    local_retention_ms: int = DEFAULT_LOCAL_RETENTION_MS
    """``local.retention.ms``: retention of the local copy when tiered; -2 is ``retention.ms``."""
    local_retention_bytes: int = DEFAULT_LOCAL_RETENTION_BYTES
    """``local.retention.bytes``: local size retention when tiered; -2 is ``retention.bytes``."""
    remote_storage_enable: bool = False
    """``remote.storage.enable``: the topic's segments are copied to remote storage."""
    remote_log_copy_disable: bool = False
    """``remote.log.copy.disable``: tiered, but no more copies (local retention is total)."""
    remote_copy_lag_ms: int = 0
    """``remote.copy.lag.ms`` (KIP-1241): a sealed segment is copied once its newest record is
    this old; 0 copies at once, -1 means the effective ``local.retention.ms``."""
    remote_copy_lag_bytes: int = REMOTE_COPY_LAG_FROM_LOCAL_RETENTION
    """``remote.copy.lag.bytes`` (KIP-1241): ... or once this many bytes follow it locally; 0
    copies at once, -1 (the default) means the effective ``local.retention.bytes``."""
    remote_log_delete_on_disable: bool = False
    """``remote.log.delete.on.disable``: turning ``remote.storage.enable`` off deletes the
    remote data; Kafka refuses to turn it off without this."""
    message_timestamp_type: str = "CreateTime"
    """``message.timestamp.type``: ``CreateTime`` or ``LogAppendTime``."""
    message_timestamp_before_max_ms: int = _LONG_MAX
    """``message.timestamp.before.max.ms``: how far in the past a CreateTime may be."""
    message_timestamp_after_max_ms: int = 3600 * 1000
    """``message.timestamp.after.max.ms``: how far in the future a CreateTime may be."""
    max_message_bytes: int = 1024 * 1024 + 12
    """``max.message.bytes``: the largest batch a producer may append."""
    cleanup_policy: tuple[str, ...] = ("delete",)
    """``cleanup.policy``: ``delete`` and/or ``compact`` (the cleaner is ``tierlog.compaction``;
    what retention deletes under each policy is ``log_retention``'s)."""
    flush_messages: int = _LONG_MAX
    """``flush.messages``: ``fsync`` after this many appended messages (default: never)."""
    delete_retention_ms: int = 24 * 3600 * 1000
    """``delete.retention.ms``: how long the cleaner keeps a tombstone (and a transaction
    marker) after the round that first kept it (the delete horizon it stamps)."""
    min_compaction_lag_ms: int = 0
    """``min.compaction.lag.ms``: a record stays uncompacted at least this long."""
    max_compaction_lag_ms: int = _LONG_MAX
    """``max.compaction.lag.ms``: a record is eligible for compaction after at most this long,
    whatever the dirty ratio; it also bounds the roll time of a compacted topic
    (``max_segment_ms``)."""
    min_cleanable_dirty_ratio: float = 0.5
    """``min.cleanable.dirty.ratio``: clean a log when its dirty bytes exceed this share."""
    ignored: Mapping[str, object] = field(default_factory=dict, compare=False, repr=False)
    """Kafka keys given but not used by this log (kept so ``to_props`` can write them back)."""

    def __post_init__(self) -> None:
        ratio = self.min_cleanable_dirty_ratio
        if isinstance(ratio, int) and not isinstance(ratio, bool):
            # LogConfig(min_cleanable_dirty_ratio=1) means 1.0, as Kafka's DOUBLE parses "1".
            object.__setattr__(self, "min_cleanable_dirty_ratio", float(ratio))
        for key in _KEYS:
            key.check(getattr(self, key.attr))
        for policy in self.cleanup_policy:
            if policy.lower() not in ("delete", "compact"):
                raise _invalid(
                    "cleanup.policy", ",".join(self.cleanup_policy), "must be delete and/or compact"
                )
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            # Kafka's LogConfig.validateValues, an InvalidConfigurationException naming both.
            raise ConfigError(
                f"conflict topic config setting min.compaction.lag.ms "
                f"({self.min_compaction_lag_ms}) > max.compaction.lag.ms "
                f"({self.max_compaction_lag_ms})"
            )
        if self.remote_storage_enable:
            self._check_remote_storage()

    # Validation --------------------------------------------------------------------------------
    def _check_remote_storage(self) -> None:
        """Kafka's checks for a topic with ``remote.storage.enable=true``, but for the policy:
        Kafka's ``validateRemoteStorageRequiresDeleteCleanupPolicy`` is not made, compacted
        topics may be tiered (the module docstring)."""
        _check_local_retention(
            "local.retention.bytes",
            self.local_retention_bytes,
            "retention.bytes",
            self.retention_bytes,
        )
        _check_local_retention(
            "local.retention.ms", self.local_retention_ms, "retention.ms", self.retention_ms
        )
        _check_copy_lag(
            "remote.copy.lag.bytes",
            self.remote_copy_lag_bytes,
            "local.retention.bytes",
            self.effective_local_retention_bytes,
        )
        _check_copy_lag(
            "remote.copy.lag.ms",
            self.remote_copy_lag_ms,
            "local.retention.ms",
            self.effective_local_retention_ms,
        )
        if self.remote_log_copy_disable:
            if self.local_retention_bytes not in (-2, self.retention_bytes):
                raise _invalid(
                    "local.retention.bytes",
                    self.local_retention_bytes,
                    "When remote.log.copy.disable is set to true, local.retention.bytes and "
                    "retention.bytes must be set to the identical value because there will be no "
                    "more logs copied to the remote storage.",
                )
            if self.local_retention_ms not in (-2, self.retention_ms):
                raise _invalid(
                    "local.retention.ms",
                    self.local_retention_ms,
                    "When remote.log.copy.disable is set to true, local.retention.ms and "
                    "retention.ms must be set to the identical value because there will be no "
                    "more logs copied to the remote storage.",
                )

    # Construction ------------------------------------------------------------------------------
    @classmethod
    def from_props(cls, props: Mapping[str, object] | None = None) -> LogConfig:
        """Build from Kafka keys (values as strings, as in a properties file, or typed).

        Unknown keys raise ``ConfigError``; Kafka keys this log does not use
        (``IGNORED_KEYS``) are kept in ``ignored`` and reported with a warning.
        """
        config = cls._build(props or {})
        _report_ignored(_ignored_settings(props or {}))
        return config

    @classmethod
    def _build(cls, props: Mapping[str, object]) -> LogConfig:
        """``from_props`` without the report, for callers that report what is theirs."""
        kwargs: dict[str, Any] = {}
        ignored: dict[str, object] = {}
        for name, raw in props.items():
            key = _BY_NAME.get(name)
            if key is not None:
                kwargs[key.attr] = key.parse(raw)
            elif name in _IGNORED_NAMES:
                ignored[name] = raw
            else:
                hint = did_you_mean(name, _KNOWN_NAMES)
                raise ConfigError(f"Unknown topic config name: {name}{hint}")
        return cls(**kwargs, ignored=ignored)

    @classmethod
    def from_broker_defaults(
        cls,
        broker_props: Mapping[str, object],
        topic_overrides: Mapping[str, object] | None = None,
    ) -> LogConfig:
        """A topic's configuration: the broker's ``log.*`` defaults under the topic's overrides.

        Kafka's ``KafkaConfig.extractLogConfigMap`` then ``LogConfig.fromProps(defaults,
        overrides)``: each topic key takes the first broker synonym present in
        ``broker_props`` (``BROKER_SYNONYMS``, e.g. ``log.retention.ms`` over
        ``log.retention.minutes`` over ``log.retention.hours``, converted to milliseconds),
        else Kafka's default, and a key in ``topic_overrides`` wins over both. Keys of
        ``broker_props`` that are not broker log defaults are not looked at (the node reports
        unknown keys, see ``BROKER_KEYS``, and ignored ones, ``ignored_broker_settings``);
        unknown keys in ``topic_overrides`` are errors, ignored ones are reported (once).

        Validation is Kafka's at each level. A bad broker value is a ``ConfigValueError``
        naming the broker key the user wrote; a negative total retention time means unlimited
        (-1) and 0 is refused, as ``KafkaConfig`` does. With
        ``remote.log.storage.system.enable=true`` the broker defaults must also pass the checks
        Kafka makes on them (``log.local.retention.*`` against ``log.retention.*``,
        ``log.remote.copy.lag.*`` against the effective local retention); without it, a topic
        may not set ``remote.storage.enable=true``.
        """
        system_key = "remote.log.storage.system.enable"
        system_enabled = parse_bool(system_key, broker_props.get(system_key, False))
        defaults: dict[str, object] = {}
        origin: dict[str, tuple[str, object]] = {}
        for topic_key, synonyms in _SYNONYMS.items():
            for synonym in synonyms:
                if synonym.name not in broker_props:
                    continue
                raw = broker_props[synonym.name]
                value = synonym.parse(raw)  # every synonym given is checked, as Kafka parses all
                if topic_key in origin:
                    continue
                if topic_key == "retention.ms":
                    value = _broker_retention_ms(synonym.name, raw, value)
                defaults[topic_key] = value
                origin[topic_key] = (synonym.name, raw)
        try:
            base = cls._build(defaults)
        except ConfigValueError as exc:
            if exc.key not in origin:
                raise
            broker_key, raw = origin[exc.key]
            raise ConfigValueError(
                broker_key, raw, f"{exc.reason} (the broker default of topic config {exc.key})"
            ) from None
        if system_enabled:
            _check_local_retention(
                "log.local.retention.bytes",
                base.local_retention_bytes,
                "log.retention.bytes",
                base.retention_bytes,
            )
            _check_local_retention(
                "log.local.retention.ms",
                base.local_retention_ms,
                "log.retention.ms",
                base.retention_ms,
            )
            _check_copy_lag(
                "log.remote.copy.lag.bytes",
                base.remote_copy_lag_bytes,
                "log.local.retention.bytes",
                base.effective_local_retention_bytes,
            )
            _check_copy_lag(
                "log.remote.copy.lag.ms",
                base.remote_copy_lag_ms,
                "log.local.retention.ms",
                base.effective_local_retention_ms,
            )
        if not topic_overrides:
            return base
        config = cls._build({**defaults, **topic_overrides})
        if config.remote_storage_enable and not system_enabled:
            raise _invalid(
                "remote.storage.enable",
                topic_overrides.get("remote.storage.enable"),
                f"Tiered Storage functionality is disabled in the broker ({system_key} is "
                "false). Topic cannot be configured with remote log storage.",
            )
        _report_ignored(_ignored_settings(topic_overrides))
        return config

    def with_overrides(self, props: Mapping[str, object]) -> LogConfig:
        """A copy with some Kafka keys changed (Kafka's dynamic topic config update).

        As in Kafka, remote storage may only be turned off together with
        ``remote.log.delete.on.disable=true``: turning it off otherwise would leave remote data
        that nothing tracks or deletes any more.
        """
        current = self.to_props()
        new = LogConfig._build({**current, **props})
        if (
            self.remote_storage_enable
            and not new.remote_storage_enable
            and not new.remote_log_delete_on_disable
        ):
            raise _invalid(
                "remote.storage.enable",
                props.get("remote.storage.enable", False),
                "It is invalid to disable remote storage without deleting remote data. To keep "
                "the remote data read-only, set remote.storage.enable=true and "
                "remote.log.copy.disable=true; to disable remote storage and delete all remote "
                "data, set remote.storage.enable=false and remote.log.delete.on.disable=true.",
            )
        already = _ignored_settings(current)
        _report_ignored({k: v for k, v in _ignored_settings(props).items() if k not in already})
        return new

    def to_props(self) -> dict[str, object]:
        """Every setting under its Kafka key (``internal.segment.bytes`` only when set)."""
        out: dict[str, object] = {}
        for f in fields(self):
            key = _BY_ATTR.get(f.name)
            if key is None:
                continue
            value = getattr(self, f.name)
            if key.optional and value is None:
                continue
            out[key.name] = ",".join(value) if key.kind == "list" else value
        out.update(self.ignored)
        return out

    # Derived values ----------------------------------------------------------------------------
    @property
    def segment_size(self) -> int:
        """The roll size in bytes: ``internal.segment.bytes`` if set, else ``segment.bytes``."""
        return (
            self.segment_bytes
            if self.internal_segment_bytes is None
            else (self.internal_segment_bytes)
        )

    @property
    def max_index_size(self) -> int:
        return self.segment_index_bytes

    @property
    def compact(self) -> bool:
        return any(p.lower() == "compact" for p in self.cleanup_policy)

    @property
    def max_segment_ms(self) -> int:
        """The roll time the log applies (Kafka's ``LogConfig.maxSegmentMs``): ``segment.ms``,
        or ``max.compaction.lag.ms`` when smaller on a compacted topic, so that no record waits
        in the active segment (which is never cleaned) longer than the lag allows."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @property
    def delete(self) -> bool:
        return any(p.lower() == "delete" for p in self.cleanup_policy)

    @property
    def log_append_time(self) -> bool:
        """True when the broker stamps ``LogAppendTime`` on appended batches."""
        return self.message_timestamp_type == "LogAppendTime"

    def remote_log_enabled(self, topic: str | None = None) -> bool:
        """Kafka's ``UnifiedLog.isRemoteLogEnabled`` less the broker switch (given to this log).

        True for ``remote.storage.enable`` on a topic that is not internal, whatever its
        ``cleanup.policy`` (Kafka also leaves out compacted topics; tierlog tiers them, see the
        module docstring).
        """
        return self.remote_storage_enable and topic not in INTERNAL_TOPICS

    def remote_copy_enabled(self, topic: str | None = None) -> bool:
        """Tiered and still copying: only then is local retention separate from total retention."""
        return self.remote_log_enabled(topic) and not self.remote_log_copy_disable

    @property
    def effective_local_retention_ms(self) -> int:
        """``local.retention.ms``, or ``retention.ms`` when it is -2 (Kafka's localRetentionMs)."""
        if self.local_retention_ms == DEFAULT_LOCAL_RETENTION_MS:
            return self.retention_ms
        return self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        """``local.retention.bytes``, or ``retention.bytes`` when it is -2."""
        if self.local_retention_bytes == DEFAULT_LOCAL_RETENTION_BYTES:
            return self.retention_bytes
        return self.local_retention_bytes

    def effective_remote_copy_lag_ms(self) -> int:
        """Kafka's ``remoteCopyLagMs()``: ``remote.copy.lag.ms``, with -1 replaced by
        ``effective_local_retention_ms``.

        The result may itself be -1 (unlimited local retention): the copy task then applies no
        time check. 0 means "copy at once"; a positive value is the age the newest record of a
        sealed segment must reach before the segment is copied.
        """
        if self.remote_copy_lag_ms == REMOTE_COPY_LAG_FROM_LOCAL_RETENTION:
            return self.effective_local_retention_ms
        return self.remote_copy_lag_ms

    def effective_remote_copy_lag_bytes(self) -> int:
        """Kafka's ``remoteCopyLagBytes()``: ``remote.copy.lag.bytes``, with -1 replaced by
        ``effective_local_retention_bytes`` (itself -1, no size check, by default)."""
        if self.remote_copy_lag_bytes == REMOTE_COPY_LAG_FROM_LOCAL_RETENTION:
            return self.effective_local_retention_bytes
        return self.remote_copy_lag_bytes

    def random_segment_jitter(self, rng: random.Random | None = None) -> int:
        """Kafka's ``randomSegmentJitter``: a value in ``[0, min(jitter, segment.ms))``.

        Each segment draws its own, so segments of many partitions do not all roll at once.
        """
        if self.segment_jitter_ms == 0:
            return 0
        draw = (rng or random).randrange(_INT_MAX)
        return draw % min(self.segment_jitter_ms, self.segment_ms)
