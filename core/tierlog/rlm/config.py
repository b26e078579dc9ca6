"""The RemoteLogManager's broker-level configuration: Kafka's ``RemoteLogManagerConfig``.

Every key of Kafka's ``RemoteLogManagerConfig.configDef()`` is a field here, in snake_case, with
Kafka's type, default and validator (``atLeast``, ``between``, ``NonEmptyString``), so a
``server.properties`` written for a Kafka broker configures tierlog's RLM the same way; a bad
value is a ``ConfigValueError`` naming the key, in Kafka's words. The exceptions are the four
broker defaults of topic configs that Kafka defines there (``log.local.retention.ms``/``.bytes``,
``log.remote.copy.lag.ms``/``.bytes``): a topic's log applies them, so they are read, checked
and reported by ``tierlog.log.log_config`` (``BROKER_SYNONYMS``) alone, each key with one
reader.

``RemoteLogManagerConfig.from_props(props)`` reads Kafka keys from a whole broker configuration
(a node's ``server.properties`` also holds ``log.*``, listener and node keys) and returns the
config with the keys it did not recognise, instead of failing on them: the node reads the same
properties into several configurations and reports as unknown only the keys none of them
recognised (``KEYS``, ``RemoteLogManagerConfig.recognizes``, and ``tierlog.log.log_config.
BROKER_KEYS``).

Where tierlog differs from Kafka, on purpose:

- ``remote.log.storage.manager.class.name`` and ``remote.log.metadata.manager.class.name`` name
  tierlog plugins: a registered name (``local``, ``s3``, ``embedded``, ``topic``, ...) or
  ``package.module:ClassName`` (``tierlog.spi.plugins``). Unset, they are ``local`` and
  ``embedded`` (Kafka: no RSM, and the topic-based RLMM): the embedded defaults ship with the
  core and keep data and metadata on local disk, so a node with remote storage enabled runs
  with nothing else installed and no Kafka cluster to reach. The Java class names of Kafka's
  own implementations are accepted and mapped, with an info log, to the tierlog plugins that
  replace them (``JAVA_CLASS_PLUGINS``): ``TopicBasedRemoteLogMetadataManager`` -> ``topic``,
  the ``LocalTieredStorage`` test RSM -> ``local``. The setting is kept as written, so
  ``to_props`` gives back what the user wrote.
- ``remote.log.storage.manager.class.path`` and ``remote.log.metadata.manager.class.path`` are
  accepted (a Kafka file may set them) and ignored: plugins are installed Python distributions,
  there is no class loader to point at a path. They are in ``IGNORED_KEYS``, which the node
  reports at start-up with the other keys it accepts and ignores.
- ``remote.log.manager.task.retry.backoff.max.ms`` must be at least
  ``remote.log.manager.task.retry.backoff.ms``. Kafka checks neither against the other; a
  maximum below the initial backoff has no meaning for an exponential backoff.
- ``remote.log.manager.task.retry.jitter`` must be a finite number (Kafka's ``between(0, 0.5)``
  lets ``NaN`` through).

The deprecated ``remote.log.manager.thread.pool.size`` (Kafka 4.2) still sets the follower pool
size when ``remote.log.manager.follower.thread.pool.size`` is absent, with a deprecation warning,
as Kafka's ``remoteLogManagerFollowerThreadPoolSize()`` does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from tierlog.properties import ConfigKey, ConfigValueError, at_least, parse_int

__all__ = [
    "DEFAULT_METADATA_MANAGER",
    "DEFAULT_RLMM_PREFIX",
    "DEFAULT_RSM_PREFIX",
    "DEFAULT_STORAGE_MANAGER",
    "DEPRECATED_KEYS",
    "IGNORED_KEYS",
    "JAVA_CLASS_PLUGINS",
    "KAFKA_DEFAULT_RLMM_CLASS_NAME",
    "KEYS",
    "RLMM_PREFIX_KEY",
    "RSM_PREFIX_KEY",
    "RemoteLogManagerConfig",
    "RemoteLogManagerConfigResult",
    "plugin_name",
]

_LOG = logging.getLogger(__name__)

_LONG_MAX: Final = (1 << 63) - 1

RSM_PREFIX_KEY: Final = "remote.log.storage.manager.impl.prefix"
RLMM_PREFIX_KEY: Final = "remote.log.metadata.manager.impl.prefix"
DEFAULT_RSM_PREFIX: Final = "rsm.config."
DEFAULT_RLMM_PREFIX: Final = "rlmm.config."

DEFAULT_STORAGE_MANAGER: Final = "local"
"""The RSM plugin used when ``remote.log.storage.manager.class.name`` is unset."""
DEFAULT_METADATA_MANAGER: Final = "embedded"
"""The RLMM plugin used when ``remote.log.metadata.manager.class.name`` is unset."""

KAFKA_DEFAULT_RLMM_CLASS_NAME: Final = (
    "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager"
)
"""Kafka's default ``remote.log.metadata.manager.class.name``."""

JAVA_CLASS_PLUGINS: Final[Mapping[str, str]] = MappingProxyType(
    {
        KAFKA_DEFAULT_RLMM_CLASS_NAME: "topic",
        "org.apache.kafka.server.log.remote.storage.LocalTieredStorage": "local",
    }
)
"""Kafka's Java implementations -> the tierlog plugins that do their job with their keys."""

_FOLLOWER_POOL_KEY: Final = "remote.log.manager.follower.thread.pool.size"
_DEPRECATED_POOL_KEY: Final = "remote.log.manager.thread.pool.size"
DEPRECATED_KEYS: Final[Mapping[str, str]] = MappingProxyType(
    {_DEPRECATED_POOL_KEY: _FOLLOWER_POOL_KEY}
)
"""Deprecated key -> the key that replaces it."""


_NO_CLASS_PATH: Final = (
    "tierlog plugins are installed Python distributions (or package.module:ClassName), not "
    "loaded from a class path"
)
IGNORED_KEYS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "remote.log.storage.manager.class.path": _NO_CLASS_PATH,
        "remote.log.metadata.manager.class.path": _NO_CLASS_PATH,
    }
)
"""Keys read (and validated) but without effect, each with why: the node reports them."""


def plugin_name(setting: str | None, default: str) -> str:
    """The tierlog plugin a ``*.class.name`` setting designates (``default`` when unset)."""
    if setting is None:
        return default
    return JAVA_CLASS_PLUGINS.get(setting, setting)


# Kafka's RemoteLogManagerConfig.configDef(), key by key.
_KEYS: Final[tuple[ConfigKey, ...]] = (
    ConfigKey("remote.log.storage.system.enable", "boolean"),
    ConfigKey(RSM_PREFIX_KEY, "string", non_empty=True),
    ConfigKey(RLMM_PREFIX_KEY, "string", non_empty=True),
    ConfigKey("remote.log.storage.manager.class.name", "string", optional=True, non_empty=True),
    ConfigKey("remote.log.storage.manager.class.path", "string", optional=True, non_empty=True),
    ConfigKey("remote.log.metadata.manager.class.name", "string", optional=True, non_empty=True),
    ConfigKey("remote.log.metadata.manager.class.path", "string", optional=True, non_empty=True),
    ConfigKey("remote.log.metadata.manager.listener.name", "string", optional=True, non_empty=True),
    ConfigKey("remote.log.metadata.custom.metadata.max.bytes", "int", minimum=0),
    ConfigKey("remote.log.index.file.cache.total.size.bytes", "long", minimum=1),
    ConfigKey("remote.log.index.file.cache.ttl.ms", "long", minimum=-1),
    ConfigKey("remote.log.manager.copier.thread.pool.size", "int", minimum=1),
    ConfigKey("remote.log.manager.expiration.thread.pool.size", "int", minimum=1),
    ConfigKey(_FOLLOWER_POOL_KEY, "int", minimum=1),
    ConfigKey("remote.log.manager.task.interval.ms", "long", minimum=1),
    ConfigKey("remote.log.manager.task.retry.backoff.ms", "long", minimum=1),
    ConfigKey("remote.log.manager.task.retry.backoff.max.ms", "long", minimum=1),
    ConfigKey("remote.log.manager.task.retry.jitter", "double", minimum=0, maximum=0.5),
    ConfigKey("remote.log.reader.threads", "int", minimum=1),
    ConfigKey("remote.log.reader.max.pending.tasks", "int", minimum=1),
    ConfigKey("remote.log.manager.copy.max.bytes.per.second", "long", minimum=1),
    ConfigKey("remote.log.manager.copy.quota.window.num", "int", minimum=1),
    ConfigKey("remote.log.manager.copy.quota.window.size.seconds", "int", minimum=1),
    ConfigKey("remote.log.manager.fetch.max.bytes.per.second", "long", minimum=1),
    ConfigKey("remote.log.manager.fetch.quota.window.num", "int", minimum=1),
    ConfigKey("remote.log.manager.fetch.quota.window.size.seconds", "int", minimum=1),
    ConfigKey("remote.fetch.max.wait.ms", "int", minimum=1),
    ConfigKey("remote.list.offsets.request.timeout.ms", "long", minimum=1),
)
_BY_NAME: Final = {k.name: k for k in _KEYS}
_BY_ATTR: Final = {k.attr: k for k in _KEYS}

KEYS: Final = frozenset(_BY_NAME) | frozenset(DEPRECATED_KEYS)
"""Every key the RLM configuration reads (the prefixed plugin keys aside)."""


def _text(value: object) -> str:
    """A plugin setting as the string a properties file would hold."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def _prefixed(props: Mapping[str, object], prefix: str) -> dict[str, str]:
    """Kafka's ``originalsWithPrefix(prefix)``: the keys under ``prefix``, stripped of it."""
    return {
        key[len(prefix) :]: _text(value)
        for key, value in props.items()
        if key.startswith(prefix) and len(key) > len(prefix)
    }


class RemoteLogManagerConfigResult(NamedTuple):
    """``from_props``'s answer: the configuration and the keys it did not recognise."""

    config: RemoteLogManagerConfig
    unknown_keys: tuple[str, ...]
    """Sorted; keys the RLM does not read, for the caller to combine with other readers'."""


@dataclass(frozen=True, slots=True)
class RemoteLogManagerConfig:
    """The RLM's settings, Kafka's keys in snake_case with Kafka's defaults.

    The one default that differs is the RLMM's (see the module docstring): ``None`` here means
    "unset", which ``rlmm_plugin`` resolves to ``embedded`` (Kafka: the topic-based RLMM).
    """

    remote_log_storage_system_enable: bool = False
    """``remote.log.storage.system.enable``: run the tiered-storage services on this node."""
    remote_log_storage_manager_impl_prefix: str = DEFAULT_RSM_PREFIX
    """``remote.log.storage.manager.impl.prefix``: keys under it configure the RSM."""
    remote_log_metadata_manager_impl_prefix: str = DEFAULT_RLMM_PREFIX
    """``remote.log.metadata.manager.impl.prefix``: keys under it configure the RLMM."""
    remote_log_storage_manager_class_name: str | None = None
    """``remote.log.storage.manager.class.name``: the RSM plugin; unset is ``local``."""
    remote_log_storage_manager_class_path: str | None = None
    """``remote.log.storage.manager.class.path``: accepted, ignored (``IGNORED_KEYS``)."""
    remote_log_metadata_manager_class_name: str | None = None
    """``remote.log.metadata.manager.class.name``: the RLMM plugin; unset is ``embedded``."""
    remote_log_metadata_manager_class_path: str | None = None
    """``remote.log.metadata.manager.class.path``: accepted, ignored (``IGNORED_KEYS``)."""
    remote_log_metadata_manager_listener_name: str | None = None
    """``remote.log.metadata.manager.listener.name``: the listener an RLMM that talks to the
    cluster (``topic``) connects through."""
    remote_log_metadata_custom_metadata_max_bytes: int = 128
    """``remote.log.metadata.custom.metadata.max.bytes``: larger custom metadata from the RSM
    fails the copy and stops the partition's copy task."""
    remote_log_index_file_cache_total_size_bytes: int = 1024 * 1024 * 1024
    """``remote.log.index.file.cache.total.size.bytes``: the RemoteIndexCache's size bound."""
    remote_log_index_file_cache_ttl_ms: int = 900_000
    """``remote.log.index.file.cache.ttl.ms``: expiry after last access; -1 (or 0) disables."""
    remote_log_manager_copier_thread_pool_size: int = 10
    """``remote.log.manager.copier.thread.pool.size``: threads running copy tasks."""
    remote_log_manager_expiration_thread_pool_size: int = 10
    """``remote.log.manager.expiration.thread.pool.size``: threads running expiration tasks."""
    remote_log_manager_follower_thread_pool_size: int = 2
    """``remote.log.manager.follower.thread.pool.size`` (or the deprecated
    ``remote.log.manager.thread.pool.size``): threads running follower tasks."""
    remote_log_manager_task_interval_ms: int = 30_000
    """``remote.log.manager.task.interval.ms``: the delay between two runs of a task."""
    remote_log_manager_task_retry_backoff_ms: int = 500
    """``remote.log.manager.task.retry.backoff.ms``: first retry delay (for plugins)."""
    remote_log_manager_task_retry_backoff_max_ms: int = 30_000
    """``remote.log.manager.task.retry.backoff.max.ms``: longest retry delay (for plugins)."""
    remote_log_manager_task_retry_jitter: float = 0.2
    """``remote.log.manager.task.retry.jitter``: backoff jitter factor, in [0, 0.5]."""
    remote_log_reader_threads: int = 10
    """``remote.log.reader.threads``: threads serving reads from remote storage."""
    remote_log_reader_max_pending_tasks: int = 100
    """``remote.log.reader.max.pending.tasks``: queued remote reads before fetches fail."""
    remote_log_manager_copy_max_bytes_per_second: int = _LONG_MAX
    """``remote.log.manager.copy.max.bytes.per.second``: node-wide copy quota (KIP-956)."""
    remote_log_manager_copy_quota_window_num: int = 11
    """``remote.log.manager.copy.quota.window.num``: samples kept for the copy quota."""
    remote_log_manager_copy_quota_window_size_seconds: int = 1
    """``remote.log.manager.copy.quota.window.size.seconds``: span of one copy-quota sample."""
    remote_log_manager_fetch_max_bytes_per_second: int = _LONG_MAX
    """``remote.log.manager.fetch.max.bytes.per.second``: node-wide fetch quota (KIP-956)."""
    remote_log_manager_fetch_quota_window_num: int = 11
    """``remote.log.manager.fetch.quota.window.num``: samples kept for the fetch quota."""
    remote_log_manager_fetch_quota_window_size_seconds: int = 1
    """``remote.log.manager.fetch.quota.window.size.seconds``: span of one fetch-quota sample."""
    remote_fetch_max_wait_ms: int = 500
    """``remote.fetch.max.wait.ms``: longest wait for the remote part of a fetch."""
    remote_list_offsets_request_timeout_ms: int = 30_000
    """``remote.list.offsets.request.timeout.ms``: longest wait for a remote ListOffsets."""
    rsm_config: Mapping[str, str] = field(default_factory=dict, hash=False)
    """The RSM's own settings: the keys under the RSM prefix, prefix removed."""
    rlmm_config: Mapping[str, str] = field(default_factory=dict, hash=False)
    """The RLMM's own settings: the keys under the RLMM prefix, prefix removed."""

    def __post_init__(self) -> None:
        if isinstance(self.remote_log_manager_task_retry_jitter, int) and not isinstance(
            self.remote_log_manager_task_retry_jitter, bool
        ):
            object.__setattr__(
                self,
                "remote_log_manager_task_retry_jitter",
                float(self.remote_log_manager_task_retry_jitter),
            )
        for key in _KEYS:
            key.check(getattr(self, key.attr))
        for name in ("rsm_config", "rlmm_config"):
            value = getattr(self, name)
            if not isinstance(value, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise TypeError(f"{name} must map strings to strings, got {value!r}")
            object.__setattr__(self, name, MappingProxyType(dict(value)))
        if (
            self.remote_log_manager_task_retry_backoff_max_ms
            < self.remote_log_manager_task_retry_backoff_ms
        ):
            raise ConfigValueError(
                "remote.log.manager.task.retry.backoff.max.ms",
                self.remote_log_manager_task_retry_backoff_max_ms,
                "Value must be at least remote.log.manager.task.retry.backoff.ms "
                f"({self.remote_log_manager_task_retry_backoff_ms})",
            )

    # Construction ------------------------------------------------------------------------------
    @classmethod
    def from_props(cls, props: Mapping[str, object]) -> RemoteLogManagerConfigResult:
        """Read the RLM's keys from a broker configuration (strings or typed values).

        Returns the configuration and the keys of ``props`` it does not recognise (neither in
        ``KEYS`` nor under one of the two plugin prefixes). Raises ``ConfigValueError`` naming
        the key for a value Kafka would refuse.
        """
        kwargs: dict[str, Any] = {}
        for name, raw in props.items():
            key = _BY_NAME.get(name)
            if key is not None:
                kwargs[key.attr] = key.parse(raw)
        if _DEPRECATED_POOL_KEY in props:
            old = parse_int(_DEPRECATED_POOL_KEY, props[_DEPRECATED_POOL_KEY])
            at_least(_DEPRECATED_POOL_KEY, old, 1)
            if _FOLLOWER_POOL_KEY in props:
                _LOG.warning(
                    "%s is deprecated and ignored: %s is set",
                    _DEPRECATED_POOL_KEY,
                    _FOLLOWER_POOL_KEY,
                )
            else:
                _LOG.warning(
                    "%s is deprecated (since Kafka 4.2); use %s instead",
                    _DEPRECATED_POOL_KEY,
                    _FOLLOWER_POOL_KEY,
                )
                kwargs[_BY_NAME[_FOLLOWER_POOL_KEY].attr] = old
        rsm_prefix = kwargs.get(_BY_NAME[RSM_PREFIX_KEY].attr, DEFAULT_RSM_PREFIX)
        rlmm_prefix = kwargs.get(_BY_NAME[RLMM_PREFIX_KEY].attr, DEFAULT_RLMM_PREFIX)
        # An empty prefix is refused by the constructor; do not collect every key under it.
        config = cls(
            **kwargs,
            rsm_config=_prefixed(props, rsm_prefix) if rsm_prefix else {},
            rlmm_config=_prefixed(props, rlmm_prefix) if rlmm_prefix else {},
        )
        config._log_plugin_choices()
        unknown = tuple(sorted(name for name in props if not config.recognizes(name)))
        return RemoteLogManagerConfigResult(config, unknown)

    def _log_plugin_choices(self) -> None:
        for key, setting in (
            ("remote.log.storage.manager.class.name", self.remote_log_storage_manager_class_name),
            ("remote.log.metadata.manager.class.name", self.remote_log_metadata_manager_class_name),
        ):
            if setting is not None and setting in JAVA_CLASS_PLUGINS:
                _LOG.info(
                    "%s=%s is Kafka's Java class; using the tierlog plugin %r, which replaces it",
                    key,
                    setting,
                    JAVA_CLASS_PLUGINS[setting],
                )

    def to_props(self) -> dict[str, object]:
        """Every setting under its Kafka key (unset optional ones left out), then the plugin
        settings under their prefixes: ``from_props(to_props())`` gives this configuration."""
        out: dict[str, object] = {}
        for f in fields(self):
            key = _BY_ATTR.get(f.name)
            value = getattr(self, f.name)
            if key is not None and value is not None:
                out[key.name] = value
        out.update(
            {self.remote_log_storage_manager_impl_prefix + k: v for k, v in self.rsm_config.items()}
        )
        out.update(
            {
                self.remote_log_metadata_manager_impl_prefix + k: v
                for k, v in self.rlmm_config.items()
            }
        )
        return out

    # Queries -----------------------------------------------------------------------------------
    def recognizes(self, key: str) -> bool:
        """True if ``key`` is read by this configuration: one of ``KEYS`` or a plugin key."""
        if key in KEYS:
            return True
        return any(key.startswith(prefix) and len(key) > len(prefix) for prefix in self.prefixes)

    @property
    def prefixes(self) -> tuple[str, str]:
        """The RSM and RLMM key prefixes in use."""
        return (
            self.remote_log_storage_manager_impl_prefix,
            self.remote_log_metadata_manager_impl_prefix,
        )

    @property
    def rsm_plugin(self) -> str:
        """The RSM plugin name to give ``tierlog.spi.plugins`` (``local`` when unset)."""
        return plugin_name(self.remote_log_storage_manager_class_name, DEFAULT_STORAGE_MANAGER)

    @property
    def rlmm_plugin(self) -> str:
        """The RLMM plugin name to give ``tierlog.spi.plugins`` (``embedded`` when unset)."""
        return plugin_name(self.remote_log_metadata_manager_class_name, DEFAULT_METADATA_MANAGER)

    def rsm_props(self) -> dict[str, str]:
        """The RSM's settings for ``RemoteStorageManager.configure`` (Kafka's
        ``remoteStorageManagerProps()``): a fresh dict the caller may add to."""
        return dict(self.rsm_config)

    def rlmm_props(self) -> dict[str, str]:
        """The RLMM's settings for ``RemoteLogMetadataManager.configure`` (Kafka's
        ``remoteLogMetadataManagerProps()``)."""
        return dict(self.rlmm_config)
