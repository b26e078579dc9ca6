"""The projection and audit topics, and the compaction level they carry (KAFKA-20033).

Kafka 4.3.1 has no feature flag of ours, so the forward-only ``remote.log.metadata.compaction``
switch of the seed is the projection topic's own ``cleanup.policy``: it contains ``compact`` =>
level 1 (tombstones are written, the cleanup manager runs), otherwise level 0 (keyed records,
never a tombstone). ``read_level`` reads it.

Level 1 must not be turned on while something that crashes on a tombstone reads the topic. The
one such reader the cluster can name is a Kafka broker running its own tiered storage with
Kafka's TopicBasedRemoteLogMetadataManager (the default ``remote.log.metadata.manager.class.name``),
which reads ``__remote_log_metadata`` (a name Kafka hard-codes): ``kafka_readers`` asks every
live broker for its config. A broker that is down at that moment is not seen, nor is a tierlog
node running the legacy ``topic`` RLMM (that RLMM refuses a compacted topic at start, and
Kafka refuses its keyless records on one): switching them over is the operator's step.

``ensure_topics`` runs at ``configure``, with ``tierlog_rlmm_topic.topic.ensure_topic``'s
retries and deadline for both topics:

- an absent projection topic is created at level 1 (``COMPACTION_DEFAULTS``, overridable), or at
  level 0 (Kafka's ``delete`` configs) with a WARNING naming the brokers when Kafka readers are
  known; an existing one is used as it is (its partition count must match), and at level 1 each
  compaction setting that differs from the configuration is reported in a WARNING, not changed;
- the audit topic (when enabled) is created append-only with the same partition count, or
  checked (partition count; a compacted audit topic is refused: Kafka would reject its keyless
  records).

``enable_compaction`` is the forward-only switch (``tierlog metadata migrate`` calls it): it sets
the level-1 compaction settings on the existing projection topic, and raises
``CompactionRefusedError`` naming the brokers while Kafka readers are known. Nothing here ever
sets a topic back to ``delete``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

# Where confluent_kafka.admin imports them from (it re-exports them without listing them).
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin._resource import ResourceType
from tierlog_rlmm_topic.topic import describe_topic_configs, ensure_topic, is_compacted

from tierlog.spi import (
    ConfigError,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
)
from tierlog_rlmm_compacted.config import (
    AUDIT_TOPIC_NAME,
    TOPIC_CONFIG_PREFIX,
    CompactedRlmmConfig,
)

__all__ = [
    "KAFKA_METADATA_TOPIC",
    "TBRLMM_CLASS",
    "CompactionRefusedError",
    "enable_compaction",
    "ensure_topics",
    "kafka_readers",
    "read_level",
]

_LOG = logging.getLogger(__name__)

TBRLMM_CLASS: Final = (
    "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager"
)
"""Kafka's topic-based RLMM, the default of ``remote.log.metadata.manager.class.name``."""

KAFKA_METADATA_TOPIC: Final = "__remote_log_metadata"
"""The topic Kafka's TBRLMM reads (hard-coded in Kafka)."""

_SYSTEM_ENABLE: Final = "remote.log.storage.system.enable"
_RLMM_CLASS: Final = "remote.log.metadata.manager.class.name"
_MAX_ATTEMPT_S: Final = 10.0
"""Longest wait for the Kafka-reader check inside ``ensure_topics``' retries."""
_DESCRIBE_POLL_S: Final = 0.1
"""Pause between two describe requests while waiting for a config change to show."""


class CompactionRefusedError(RemoteStorageException):
    """Compaction (level 1) cannot be turned on: Kafka brokers read the projection topic with
    Kafka's TBRLMM and would stop at the first tombstone. ``brokers`` holds their ids."""

    def __init__(self, message: str, brokers: list[int]) -> None:
        super().__init__(message)
        self.brokers = brokers


def _admin_error(exc: KafkaException, what: str) -> RemoteStorageException:
    """A typed error for a failed admin request about ``what`` (a sentence fragment)."""
    error = exc.args[0] if exc.args else None
    if isinstance(error, KafkaError):
        detail = f"{error.name()}: {error.str()}"
        if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return RemoteResourceNotFoundException(f"cannot {what}: {detail}")
        if error.retriable() or error.code() in (
            KafkaError._TIMED_OUT,
            KafkaError._TRANSPORT,
            KafkaError._ALL_BROKERS_DOWN,
        ):
            return RetriableRemoteStorageException(f"cannot {what}: {detail}")
        return RemoteStorageException(f"cannot {what}: {detail}")
    return RemoteStorageException(f"cannot {what}: {exc}")


def kafka_readers(admin: AdminClient, topic_name: str, timeout: float) -> list[int]:
    """The ids of the live brokers that read ``topic_name`` with Kafka's TBRLMM, ascending.

    Only ``__remote_log_metadata`` has such readers (Kafka hard-codes the name); for any other
    name the answer is ``[]`` without asking the cluster. A reader is a broker whose config
    (``describe_configs`` of its BROKER resource) has ``remote.log.storage.system.enable=true``
    and ``remote.log.metadata.manager.class.name`` equal to ``TBRLMM_CLASS`` (or unset: it is
    Kafka's default). Raises ``KafkaException`` when the cluster does not answer: not knowing is
    no licence to switch compaction on.
    """
    if topic_name != KAFKA_METADATA_TOPIC:
        return []
    brokers = sorted(admin.list_topics(topic=topic_name, timeout=timeout).brokers)
    if not brokers:
        return []
    resources = {broker: ConfigResource(ResourceType.BROKER, str(broker)) for broker in brokers}
    futures = admin.describe_configs(list(resources.values()), request_timeout=timeout)
    readers: list[int] = []
    for broker, resource in resources.items():
        entries = futures[resource].result(timeout=timeout + 1)
        enabled = entries.get(_SYSTEM_ENABLE)
        rlmm = entries.get(_RLMM_CLASS)
        enabled_value = (enabled.value or "") if enabled is not None else ""
        rlmm_value = (rlmm.value or "").strip() if rlmm is not None else ""
        if enabled_value.strip().lower() == "true" and rlmm_value in ("", TBRLMM_CLASS):
            readers.append(broker)
    return readers


def read_level(admin: AdminClient, topic_name: str, timeout: float) -> int:
    """The compaction level the projection topic carries: 1 when its ``cleanup.policy``
    contains ``compact``, else 0.

    ``RemoteResourceNotFoundException`` when the topic does not exist,
    ``RetriableRemoteStorageException`` when the cluster did not answer in time,
    ``RemoteStorageException`` otherwise; each names the topic.
    """
    try:
        described = describe_topic_configs(admin, topic_name, timeout)
    except KafkaException as exc:
        raise _admin_error(exc, f"read the cleanup.policy of {topic_name}") from exc
    return 1 if is_compacted(described) else 0


def _same(name: str, described: str | None, wanted: str) -> bool:
    """Whether a described topic config equals the configured value, as Kafka reads both
    (``0.10`` is ``0.1``; ``compact, delete`` is ``delete,compact``)."""
    if described is None:
        return False
    if name == "cleanup.policy":
        return {p.strip() for p in described.split(",") if p.strip()} == {
            p.strip() for p in wanted.split(",") if p.strip()
        }
    left, right = described.strip(), wanted.strip()
    try:
        return float(left) == float(right)
    except ValueError:
        return left.lower() == right.lower()


def _warn_differences(config: CompactedRlmmConfig, described: Mapping[str, str]) -> None:
    for name, wanted in config.compaction_settings().items():
        have = described.get(name)
        if not _same(name, have, wanted):
            source = (
                f"{TOPIC_CONFIG_PREFIX}{name}"
                if name in config.topic_config_overrides
                else "the compaction default"
            )
            _LOG.warning(
                "the projection topic %s has %s=%s where %s says %s: left as it is (change "
                "the topic with kafka-configs --alter, or the configuration, to make them agree)",
                config.base.topic_name,
                name,
                have,
                source,
                wanted,
            )


def ensure_topics(
    admin: AdminClient,
    config: CompactedRlmmConfig,
    *,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Create or check the projection topic and (when enabled) the audit topic, as the module
    docstring says; return the compaction level the projection topic carries.

    Errors are ``ensure_topic``'s (``ConfigError`` for a partition-count mismatch,
    ``RemoteStorageException`` once the initialization deadline passes), plus a
    ``ConfigError`` for a compacted audit topic.
    """
    base = config.base
    check_s = max(0.5, min(_MAX_ATTEMPT_S, base.initialization_retry_max_timeout_ms / 1000))

    def creation_configs() -> dict[str, str]:
        readers = kafka_readers(admin, base.topic_name, check_s)
        if not readers:
            return config.projection_topic_configs(1)
        _LOG.warning(
            "Kafka broker(s) %s read %s with Kafka's TopicBasedRemoteLogMetadataManager, which "
            "stops at the first tombstone: the projection topic is created with "
            "cleanup.policy=delete (compaction level 0: keyed records, no tombstones). Turn "
            "compaction on with `tierlog metadata migrate` once no Kafka broker reads it",
            readers,
            base.topic_name,
        )
        return config.projection_topic_configs(0)

    described = ensure_topic(
        admin,
        base,
        topic_configs=creation_configs,
        accept_compacted=True,
        monotonic=monotonic,
        sleep=sleep,
    )
    level = 1 if is_compacted(described) else 0
    if level == 1:
        _warn_differences(config, described)
    else:
        _LOG.info(
            "the projection topic %s has cleanup.policy=%s: compaction level 0 (no tombstones "
            "are written until its cleanup.policy contains compact)",
            base.topic_name,
            described.get("cleanup.policy"),
        )
    if config.audit_enable:
        audit = ensure_topic(
            admin,
            base,
            topic_name=config.audit_topic_name,
            topic_configs=config.audit_topic_configs(),
            accept_compacted=True,
            monotonic=monotonic,
            sleep=sleep,
        )
        if is_compacted(audit):
            raise ConfigError(
                f"the audit topic {config.audit_topic_name} ({AUDIT_TOPIC_NAME}) has "
                f"cleanup.policy={audit.get('cleanup.policy')}: its records have no key, which "
                "Kafka refuses on a compacted topic, and compaction would drop the history it "
                "keeps. Give it cleanup.policy=delete or name another topic"
            )
    return level


def enable_compaction(
    admin: AdminClient,
    config: CompactedRlmmConfig,
    *,
    timeout: float,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Turn compaction on (level 1): set the compaction settings on the projection topic.

    Forward-only and idempotent: a topic already at level 1 is left as it is. Refused with
    ``CompactionRefusedError`` naming the brokers while ``kafka_readers`` finds any; a failed
    admin request is a ``RemoteStorageException`` (``_admin_error``) naming the topic.

    Returns once the broker describes the new settings, so that a ``read_level`` that follows
    answers 1 (the controller accepts the change before the broker answering describe requests
    has applied it); ``RetriableRemoteStorageException`` when that takes more than ``timeout``.
    """
    topic = config.base.topic_name
    try:
        if read_level(admin, topic, timeout) == 1:
            _LOG.info("the projection topic %s is compacted already (level 1)", topic)
            return
        readers = kafka_readers(admin, topic, timeout)
    except KafkaException as exc:
        raise _admin_error(exc, f"check the Kafka readers of {topic}") from exc
    if readers:
        raise CompactionRefusedError(
            f"compaction of {topic} refused: Kafka broker(s) {readers} read it with Kafka's "
            f"TopicBasedRemoteLogMetadataManager ({_SYSTEM_ENABLE}=true, {_RLMM_CLASS} unset "
            "or Kafka's class) and would stop at the first tombstone. Move them to another "
            "remote log metadata manager (or stop their tiered storage) first",
            readers,
        )
    settings = config.compaction_settings()
    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in settings.items()
    ]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    try:
        futures = admin.incremental_alter_configs([resource], request_timeout=timeout)
        futures[resource].result(timeout=timeout + 1)
    except KafkaException as exc:
        raise _admin_error(exc, f"set {settings} on {topic}") from exc
    _wait_described(admin, topic, settings, timeout, monotonic=monotonic, sleep=sleep)
    _LOG.info("compaction turned on (level 1) for %s: %s", topic, settings)


def _wait_described(
    admin: AdminClient,
    topic: str,
    settings: Mapping[str, str],
    timeout: float,
    *,
    monotonic: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    """Wait until ``topic`` is described with ``settings`` (``_same`` values)."""
    deadline = monotonic() + timeout
    differing: dict[str, str | None] = dict(settings)
    while True:
        try:
            described = describe_topic_configs(admin, topic, max(0.5, deadline - monotonic()))
            differing = {
                name: described.get(name)
                for name, wanted in settings.items()
                if not _same(name, described.get(name), wanted)
            }
            if not differing:
                return
        except KafkaException as exc:
            if monotonic() >= deadline:
                raise _admin_error(exc, f"describe {topic} after setting {settings}") from exc
        if monotonic() >= deadline:
            raise RetriableRemoteStorageException(
                f"{settings} were set on {topic}, but after {timeout} s the broker still "
                f"describes {differing}: read the level again later"
            )
        sleep(_DESCRIBE_POLL_S)
