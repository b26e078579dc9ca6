"""The metadata topic: created if absent, checked if present, retried until the cluster answers.

Kafka's TBRLMM does this on its initialization thread after the broker is ready, and exits the
broker when it fails. tierlog has no "broker ready" callback and a library must not exit the
process, so ``ensure_topic`` runs inside ``configure`` and raises instead:

- the topic is created with ``remote.log.metadata.topic.num.partitions`` partitions,
  ``...replication.factor`` replicas and Kafka's configs (``retention.ms``,
  ``cleanup.policy=delete``, ``remote.storage.enable=false``, ``min.insync.replicas``);
- an existing topic with another partition count is a ``ConfigError`` naming the topic and both
  numbers, at once (every event would be looked for in the wrong partition; no retry fixes it);
- an existing topic whose ``cleanup.policy`` contains ``compact`` is a ``ConfigError`` too: it
  is the projection of the compacted RLMM (KAFKA-20033). Its tombstones would stop this RLMM's
  consumer on the first one, and Kafka refuses the null-key records this RLMM writes on a
  compacted topic; the node must run the ``compacted`` RLMM instead;
- anything else (no broker listening, a broker still starting, a topic whose partitions have no
  leader yet) is retried every ``...initialization.retry.interval.ms`` until
  ``...initialization.retry.max.timeout.ms``, then a ``RemoteStorageException`` names the
  bootstrap servers and the last error.

The topic is ready when every partition has a leader: a producer or a consumer started before
that would only wait inside librdkafka, where the timeout is not ours. ``ensure_topic`` returns
the topic's configs as the cluster describes them, so that a caller reads what it needs (the
compacted RLMM its compaction level) within the same retries.

The compacted RLMM reuses all of it for its projection and audit topics: ``topic_name`` and
``topic_configs`` name another topic and its configs at creation (a callable is only called when
the topic is created, and its ``KafkaException`` is retried like the rest), and
``accept_compacted`` lets a compacted topic through.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

# Where confluent_kafka.admin imports them from (it re-exports them without listing them).
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewTopic

from tierlog.spi import ConfigError, RemoteStorageException
from tierlog_rlmm_topic.config import NUM_PARTITIONS, TOPIC_NAME, TopicRlmmConfig

__all__ = ["TopicConfigs", "describe_topic_configs", "ensure_topic", "is_compacted"]

_LOG = logging.getLogger(__name__)

_MAX_ATTEMPT_S: Final = 10.0
"""Longest wait for one admin request; the overall deadline is the configuration's."""


class _NotYet(Exception):
    """The topic is not usable yet (no leader, metadata still propagating): retry."""


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        error = exc.args[0]
        return f"{error.name()}: {error.str()}"
    return f"{type(exc).__name__}: {exc}"


def _partition_count(admin: AdminClient, topic: str, timeout: float) -> int | None:
    """The topic's partition count, or None when it does not exist."""
    metadata = admin.list_topics(topic=topic, timeout=timeout)
    described = metadata.topics.get(topic)
    if described is None:
        return None
    if described.error is not None:
        if described.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return None
        raise KafkaException(described.error)
    leaderless = sorted(p for p, info in described.partitions.items() if info.leader < 0)
    if leaderless:
        raise _NotYet(f"partition(s) {leaderless} of {topic} have no leader yet")
    return len(described.partitions)


TopicConfigs = Mapping[str, str] | Callable[[], Mapping[str, str]]
"""The configs of a topic at creation, or a function computing them when it is created."""


def is_compacted(configs: Mapping[str, str]) -> bool:
    """Whether a topic's ``cleanup.policy`` (in ``configs``, as described) contains
    ``compact``: ``compact`` and ``compact,delete`` do, ``delete`` and an empty policy do not."""
    policy = configs.get("cleanup.policy") or ""
    return "compact" in (item.strip().lower() for item in policy.split(","))


def describe_topic_configs(admin: AdminClient, topic: str, timeout: float) -> dict[str, str]:
    """Every config of ``topic`` as the cluster describes it (set or default), name -> value.

    Raises ``KafkaException`` as the admin client does (``UNKNOWN_TOPIC_OR_PART`` for a topic
    that does not exist); sensitive configs, whose value the cluster hides, are left out.
    """
    resource = ConfigResource(ResourceType.TOPIC, topic)
    futures = admin.describe_configs([resource], request_timeout=timeout)
    entries = futures[resource].result(timeout=timeout + 1)
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}


def _create(
    admin: AdminClient,
    config: TopicRlmmConfig,
    topic: str,
    topic_configs: Mapping[str, str],
    timeout: float,
) -> None:
    new = NewTopic(
        topic,
        num_partitions=config.num_partitions,
        replication_factor=config.replication_factor,
        config=dict(topic_configs),
    )
    futures = admin.create_topics([new], operation_timeout=timeout, request_timeout=timeout)
    try:
        futures[topic].result(timeout=timeout + 1)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return  # another node created it meanwhile: check it as an existing topic
        if (
            isinstance(error, KafkaError)
            and not error.retriable()
            and error.code()
            in (
                KafkaError.INVALID_REPLICATION_FACTOR,
                KafkaError.INVALID_PARTITIONS,
                KafkaError.INVALID_CONFIG,
                KafkaError.POLICY_VIOLATION,
                KafkaError.TOPIC_AUTHORIZATION_FAILED,
                KafkaError.CLUSTER_AUTHORIZATION_FAILED,
            )
        ):
            raise RemoteStorageException(
                f"cannot create the remote log metadata topic {topic} "
                f"({config.num_partitions} partitions, replication factor "
                f"{config.replication_factor}, configs {dict(topic_configs)}) on "
                f"{config.bootstrap_servers}: {_describe(exc)}"
            ) from exc
        raise
    _LOG.info(
        "created the remote log metadata topic %s with %d partitions, replication factor %d "
        "and configs %s",
        topic,
        config.num_partitions,
        config.replication_factor,
        dict(topic_configs),
    )


def _refuse_compacted(topic: str) -> ConfigError:
    return ConfigError(
        f"the remote log metadata topic {topic} has a cleanup.policy containing compact: it is "
        "the projection of a compacted RLMM (KAFKA-20033), whose tombstones would stop this "
        "RLMM's consumer and on which Kafka refuses this RLMM's records (they have no key). "
        "Use remote.log.metadata.manager.class.name=compacted on this node, or another topic "
        f"({TOPIC_NAME})"
    )


def ensure_topic(
    admin: AdminClient,
    config: TopicRlmmConfig,
    *,
    topic_name: str | None = None,
    topic_configs: TopicConfigs | None = None,
    accept_compacted: bool = False,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, str]:
    """Create or check a metadata topic, retrying as the module docstring says; return its
    configs as described once it is ready (``describe_topic_configs``).

    ``topic_name`` defaults to ``config.topic_name`` and ``topic_configs`` (the configs at
    creation; a callable is called only when the topic is absent) to ``config.topic_configs()``.
    Partition count, replication factor, retries and deadline are always the configuration's.
    A topic whose ``cleanup.policy`` contains ``compact`` is a ``ConfigError`` unless
    ``accept_compacted``.
    """
    topic = topic_name if topic_name is not None else config.topic_name
    timeout_s = config.initialization_retry_max_timeout_ms / 1000
    interval_s = config.initialization_retry_interval_ms / 1000
    deadline = monotonic() + timeout_s
    attempts = 0
    last: BaseException | None = None
    while True:
        attempts += 1
        remaining = deadline - monotonic()
        attempt_s = max(0.5, min(_MAX_ATTEMPT_S, remaining))
        try:
            count = _partition_count(admin, topic, attempt_s)
            if count is None:
                if topic_configs is None:
                    creation: Mapping[str, str] = config.topic_configs()
                elif callable(topic_configs):
                    creation = topic_configs()
                else:
                    creation = topic_configs
                _create(admin, config, topic, creation, attempt_s)
                count = _partition_count(admin, topic, attempt_s)
                if count is None:
                    raise _NotYet(f"{topic} is not in the metadata yet")
            if count != config.num_partitions:
                raise ConfigError(
                    f"the remote log metadata topic {topic} has {count} partitions "
                    f"but {NUM_PARTITIONS} is {config.num_partitions}: every event would be "
                    f"looked for in the wrong partition. Set {NUM_PARTITIONS}={count} (Kafka "
                    "refuses to start with a mismatch too)"
                )
            described = describe_topic_configs(admin, topic, attempt_s)
            if not accept_compacted and is_compacted(described):
                raise _refuse_compacted(topic)
            _LOG.info("remote log metadata topic %s is ready (%d partitions)", topic, count)
            return described
        except (KafkaException, _NotYet) as exc:
            last = exc
            if attempts == 1 or attempts % 50 == 0:
                _LOG.info(
                    "remote log metadata topic %s on %s not ready yet (attempt %d): %s",
                    topic,
                    config.bootstrap_servers,
                    attempts,
                    _describe(exc),
                )
        if monotonic() + interval_s > deadline:
            raise RemoteStorageException(
                f"the remote log metadata topic {topic} could not be created or "
                f"checked on {config.bootstrap_servers} within "
                f"{config.initialization_retry_max_timeout_ms} ms "
                f"(remote.log.metadata.initialization.retry.max.timeout.ms, {attempts} "
                f"attempt(s)); last error: {_describe(last) if last else 'none'}"
            ) from last
        sleep(interval_s)
