"""A partition's log configuration: Kafka's topic-level keys, defaults and checks.

``LogConfig.from_props({"segment.bytes": "1048576", ...})`` reads Kafka's key names (strings from
a properties file, or Python values) and ``LogConfig(...)`` takes the same settings as snake_case
fields; both validate, and every failure is a ``ConfigError`` whose message names the key, in
Kafka's words ("Invalid value X for configuration K: ..."), so a user sees which line of the
properties file to fix.

Defaults and lower bounds are those of Kafka's ``LogConfig`` (``storage/.../log/LogConfig.java``)
and ``ServerLogConfigs``. The checks Kafka makes when a topic has ``remote.storage.enable=true``
(``validateTopicLogConfigValues``) are made here when it is set: ``cleanup.policy`` must be
``delete``, ``local.retention.bytes``/``local.retention.ms`` must not be ``-1`` when the total
retention is bounded, nor larger than it, and with ``remote.log.copy.disable`` the local and
total retentions must match. Kafka does not check local against total retention when remote
storage is off (local retention is not used then), and neither does this.

Deliberate differences, each for a stated reason:

- ``segment.index.bytes`` must be at least 24 (Kafka: 4). The index files refuse a size below one
  entry, and a time index needs two slots (its last is reserved for the entry written at roll), so
  anything smaller would make every append roll a new segment.
- Keys Kafka has but this log does not use (compression, compaction, throttling, ...) are
  accepted and ignored, with a debug log; any other key is a ``ConfigError`` (Kafka's
  ``validateNames``), so a misspelt key does not pass silently.
- ``internal.segment.bytes`` (Kafka's testing-only override of ``segment.bytes``, with no lower
  bound) is supported because tests need segments far smaller than 1 MiB.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final

from tierlog.spi import ConfigError

__all__ = [
    "DEFAULT_LOCAL_RETENTION_BYTES",
    "DEFAULT_LOCAL_RETENTION_MS",
    "INTERNAL_TOPICS",
    "KEYS",
    "LogConfig",
]

_LOG = logging.getLogger(__name__)

_INT_MAX: Final = (1 << 31) - 1
_LONG_MAX: Final = (1 << 63) - 1
_LONG_MIN: Final = -(1 << 63)

DEFAULT_LOCAL_RETENTION_MS: Final = -2
"""``local.retention.ms`` default: take the value of ``retention.ms``."""
DEFAULT_LOCAL_RETENTION_BYTES: Final = -2
"""``local.retention.bytes`` default: take the value of ``retention.bytes``."""

INTERNAL_TOPICS: Final = frozenset(
    {"__consumer_offsets", "__transaction_state", "__remote_log_metadata", "__cluster_metadata"}
)
"""Topics Kafka never tiers (``UnifiedLog.isRemoteLogEnabled``)."""

_MIN_INDEX_BYTES: Final = 24

# Kafka topic keys accepted and ignored (this log has no compaction, compression or throttling).
_IGNORED_KEYS: Final = frozenset(
    {
        "compression.type",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "delete.retention.ms",
        "file.delete.delay.ms",
        "flush.ms",
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "max.compaction.lag.ms",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
        "min.insync.replicas",
        "preallocate",
        "remote.log.delete.on.disable",
        "remote.copy.lag.ms",
        "remote.copy.lag.bytes",
        "unclean.leader.election.enable",
        "errors.deadletterqueue.group.enable",
    }
)


@dataclass(frozen=True, slots=True)
class _Key:
    name: str
    attr: str
    kind: str  # "int", "long", "bool", "str", "list", "optint"


_KEYS: Final = (
    _Key("segment.bytes", "segment_bytes", "int"),
    _Key("internal.segment.bytes", "internal_segment_bytes", "optint"),
    _Key("segment.ms", "segment_ms", "long"),
    _Key("segment.jitter.ms", "segment_jitter_ms", "long"),
    _Key("segment.index.bytes", "segment_index_bytes", "int"),
    _Key("index.interval.bytes", "index_interval_bytes", "int"),
    _Key("retention.ms", "retention_ms", "long"),
    _Key("retention.bytes", "retention_bytes", "long"),
    _Key("local.retention.ms", "local_retention_ms", "long"),
    _Key("local.retention.bytes", "local_retention_bytes", "long"),
    _Key("remote.storage.enable", "remote_storage_enable", "bool"),
    _Key("remote.log.copy.disable", "remote_log_copy_disable", "bool"),
    _Key("message.timestamp.type", "message_timestamp_type", "str"),
    _Key("message.timestamp.before.max.ms", "message_timestamp_before_max_ms", "long"),
    _Key("message.timestamp.after.max.ms", "message_timestamp_after_max_ms", "long"),
    _Key("max.message.bytes", "max_message_bytes", "int"),
    _Key("cleanup.policy", "cleanup_policy", "list"),
    _Key("flush.messages", "flush_messages", "long"),
)
KEYS: Final = tuple(k.name for k in _KEYS)
"""The Kafka keys this log interprets."""
_BY_NAME: Final = {k.name: k for k in _KEYS}
_BY_ATTR: Final = {k.attr: k for k in _KEYS}


def _invalid(key: str, value: object, why: str) -> ConfigError:
    return ConfigError(f"Invalid value {value!r} for configuration {key}: {why}")


def _parse(key: _Key, raw: object) -> Any:
    """Kafka's ``ConfigDef.parseType`` for the few types used here."""
    if key.kind in ("int", "long", "optint"):
        if key.kind == "optint" and raw is None:
            return None
        if isinstance(raw, bool):
            raise _invalid(key.name, raw, "expected a number, got a boolean")
        if isinstance(raw, int):
            value = raw
        elif isinstance(raw, str):
            try:
                value = int(raw.strip(), 10)
            except ValueError:
                raise _invalid(key.name, raw, "not a number") from None
        else:
            raise _invalid(key.name, raw, "expected a number")
        lo, hi = (_LONG_MIN, _LONG_MAX) if key.kind == "long" else (-(1 << 31), _INT_MAX)
        if not lo <= value <= hi:
            raise _invalid(key.name, raw, f"out of range for a {key.kind.removeprefix('opt')}")
        return value
    if key.kind == "bool":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        raise _invalid(key.name, raw, "expected true or false")
    if key.kind == "list":
        if isinstance(raw, str):
            return tuple(part.strip() for part in raw.split(",") if part.strip())
        if isinstance(raw, list | tuple) and all(isinstance(p, str) for p in raw):
            return tuple(p.strip() for p in raw)
        raise _invalid(key.name, raw, "expected a comma-separated list")
    if not isinstance(raw, str):
        raise _invalid(key.name, raw, "expected a string")
    return raw.strip()


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
    message_timestamp_type: str = "CreateTime"
    """``message.timestamp.type``: ``CreateTime`` or ``LogAppendTime``."""
    message_timestamp_before_max_ms: int = _LONG_MAX
    """``message.timestamp.before.max.ms``: how far in the past a CreateTime may be."""
    message_timestamp_after_max_ms: int = 3600 * 1000
    """``message.timestamp.after.max.ms``: how far in the future a CreateTime may be."""
    max_message_bytes: int = 1024 * 1024 + 12
    """``max.message.bytes``: the largest batch a producer may append."""
    cleanup_policy: tuple[str, ...] = ("delete",)
    """``cleanup.policy``: ``delete`` and/or ``compact`` (compaction is not done by this log)."""
    flush_messages: int = _LONG_MAX
    """``flush.messages``: ``fsync`` after this many appended messages (default: never)."""
    ignored: Mapping[str, object] = field(default_factory=dict, compare=False, repr=False)
    """Kafka keys given but not used by this log (kept so ``to_props`` can write them back)."""

    def __post_init__(self) -> None:
        self._check_types()
        self._at_least("segment.bytes", self.segment_bytes, 1024 * 1024)
        if self.internal_segment_bytes is not None:
            self._at_least("internal.segment.bytes", self.internal_segment_bytes, 1)
        self._at_least("segment.ms", self.segment_ms, 1)
        self._at_least("segment.jitter.ms", self.segment_jitter_ms, 0)
        self._at_least("segment.index.bytes", self.segment_index_bytes, _MIN_INDEX_BYTES)
        self._at_least("index.interval.bytes", self.index_interval_bytes, 0)
        self._at_least("retention.ms", self.retention_ms, -1)
        self._at_least("local.retention.ms", self.local_retention_ms, -2)
        self._at_least("local.retention.bytes", self.local_retention_bytes, -2)
        self._at_least("message.timestamp.before.max.ms", self.message_timestamp_before_max_ms, 0)
        self._at_least("message.timestamp.after.max.ms", self.message_timestamp_after_max_ms, 0)
        self._at_least("max.message.bytes", self.max_message_bytes, 0)
        self._at_least("flush.messages", self.flush_messages, 1)
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise _invalid(
                "message.timestamp.type",
                self.message_timestamp_type,
                "String must be one of: CreateTime, LogAppendTime",
            )
        for policy in self.cleanup_policy:
            if policy.lower() not in ("delete", "compact"):
                raise _invalid(
                    "cleanup.policy", ",".join(self.cleanup_policy), "must be delete and/or compact"
                )
        if self.remote_storage_enable:
            self._check_remote_storage()

    # Validation --------------------------------------------------------------------------------
    def _check_types(self) -> None:
        for key in _KEYS:
            value = getattr(self, key.attr)
            if key.kind in ("int", "long") or (key.kind == "optint" and value is not None):
                if not isinstance(value, int) or isinstance(value, bool):
                    raise _invalid(key.name, value, "expected an integer")
            elif key.kind == "bool" and not isinstance(value, bool):
                raise _invalid(key.name, value, "expected a boolean")
            elif key.kind == "str" and not isinstance(value, str):
                raise _invalid(key.name, value, "expected a string")
            elif key.kind == "list" and not (
                isinstance(value, tuple) and all(isinstance(v, str) for v in value)
            ):
                raise _invalid(key.name, value, "expected a tuple of strings")

    @staticmethod
    def _at_least(key: str, value: int, minimum: int) -> None:
        if value < minimum:
            raise _invalid(key, value, f"Value must be at least {minimum}")

    def _check_remote_storage(self) -> None:
        """Kafka's checks for a topic with ``remote.storage.enable=true``."""
        policies = [p.lower() for p in self.cleanup_policy]
        if policies and policies != ["delete"]:
            raise _invalid(
                "cleanup.policy",
                ",".join(self.cleanup_policy),
                "Remote log storage only supports topics with cleanup.policy=delete or "
                "cleanup.policy being an empty list.",
            )
        if self.retention_bytes > -1 and self.local_retention_bytes != -2:
            if self.local_retention_bytes == -1:
                raise _invalid(
                    "local.retention.bytes",
                    self.local_retention_bytes,
                    f"Value must not be -1 as retention.bytes value is set as "
                    f"{self.retention_bytes}.",
                )
            if self.local_retention_bytes > self.retention_bytes:
                raise _invalid(
                    "local.retention.bytes",
                    self.local_retention_bytes,
                    f"Value must not be more than retention.bytes property value: "
                    f"{self.retention_bytes}",
                )
        if self.retention_ms != -1 and self.local_retention_ms != -2:
            if self.local_retention_ms == -1:
                raise _invalid(
                    "local.retention.ms",
                    self.local_retention_ms,
                    f"Value must not be -1 as retention.ms value is set as {self.retention_ms}.",
                )
            if self.local_retention_ms > self.retention_ms:
                raise _invalid(
                    "local.retention.ms",
                    self.local_retention_ms,
                    f"Value must not be more than retention.ms property value: {self.retention_ms}",
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

        Unknown keys raise ``ConfigError``; Kafka keys this log does not use are kept in
        ``ignored``.
        """
        kwargs: dict[str, Any] = {}
        ignored: dict[str, object] = {}
        for name, raw in (props or {}).items():
            key = _BY_NAME.get(name)
            if key is not None:
                kwargs[key.attr] = _parse(key, raw)
            elif name in _IGNORED_KEYS:
                _LOG.debug(
                    "Ignoring topic configuration %s=%r: not used by the local log", name, raw
                )
                ignored[name] = raw
            else:
                raise ConfigError(f"Unknown topic config name: {name}")
        return cls(**kwargs, ignored=ignored)

    def with_overrides(self, props: Mapping[str, object]) -> LogConfig:
        """A copy with some Kafka keys changed (Kafka's dynamic topic config update)."""
        merged: dict[str, object] = self.to_props()
        merged.update(props)
        return LogConfig.from_props(merged)

    def to_props(self) -> dict[str, object]:
        """Every setting under its Kafka key (``internal.segment.bytes`` only when set)."""
        out: dict[str, object] = {}
        for f in fields(self):
            key = _BY_ATTR.get(f.name)
            if key is None:
                continue
            value = getattr(self, f.name)
            if key.kind == "optint" and value is None:
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
    def delete(self) -> bool:
        return any(p.lower() == "delete" for p in self.cleanup_policy)

    @property
    def log_append_time(self) -> bool:
        """True when the broker stamps ``LogAppendTime`` on appended batches."""
        return self.message_timestamp_type == "LogAppendTime"

    def remote_log_enabled(self, topic: str | None = None) -> bool:
        """Kafka's ``UnifiedLog.isRemoteLogEnabled`` less the broker switch (given to this log).

        True for ``remote.storage.enable`` on a topic that is not compacted and not internal.
        """
        return self.remote_storage_enable and not self.compact and topic not in INTERNAL_TOPICS

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

    def random_segment_jitter(self, rng: random.Random | None = None) -> int:
        """Kafka's ``randomSegmentJitter``: a value in ``[0, min(jitter, segment.ms))``.

        Each segment draws its own, so segments of many partitions do not all roll at once.
        """
        if self.segment_jitter_ms == 0:
            return 0
        draw = (rng or random).randrange(_INT_MAX)
        return draw % min(self.segment_jitter_ms, self.segment_ms)
