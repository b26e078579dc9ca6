"""The metadata topic: created if absent, checked if present, retried until the cluster answers.

Kafka's TBRLMM does this on its initialization thread after the broker is ready, and exits the
broker when it fails. tierlog has no "broker ready" callback and a library must not exit the
process, so ``ensure_topic`` runs inside ``configure`` and raises instead:

- the topic is created with ``remote.log.metadata.topic.num.partitions`` partitions,
  ``...replication.factor`` replicas and Kafka's configs (``retention.ms``,
  ``cleanup.policy=delete``, ``remote.storage.enable=false``, ``min.insync.replicas``);
- an existing topic with another partition count is a ``ConfigError`` naming the topic and both
  numbers, at once (every event would be looked for in the wrong partition; no retry fixes it);
- anything else (no broker listening, a broker still starting, a topic whose partitions have no
  leader yet) is retried every ``...initialization.retry.interval.ms`` until
  ``...initialization.retry.max.timeout.ms``, then a ``RemoteStorageException`` names the
  bootstrap servers and the last error.

The topic is ready when every partition has a leader: a producer or a consumer started before
that would only wait inside librdkafka, where the timeout is not ours.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tierlog.spi import ConfigError, RemoteStorageException
from tierlog_rlmm_topic.config import NUM_PARTITIONS, TopicRlmmConfig

__all__ = ["ensure_topic"]

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


def _create(admin: AdminClient, config: TopicRlmmConfig, timeout: float) -> None:
    new = NewTopic(
        config.topic_name,
        num_partitions=config.num_partitions,
        replication_factor=config.replication_factor,
        config=config.topic_configs(),
    )
    futures = admin.create_topics([new], operation_timeout=timeout, request_timeout=timeout)
    try:
        futures[config.topic_name].result(timeout=timeout + 1)
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
                f"cannot create the remote log metadata topic {config.topic_name} "
                f"({config.num_partitions} partitions, replication factor "
                f"{config.replication_factor}, configs {config.topic_configs()}) on "
                f"{config.bootstrap_servers}: {_describe(exc)}"
            ) from exc
        raise
    _LOG.info(
        "created the remote log metadata topic %s with %d partitions, replication factor %d "
        "and configs %s",
        config.topic_name,
        config.num_partitions,
        config.replication_factor,
        config.topic_configs(),
    )


def ensure_topic(
    admin: AdminClient,
    config: TopicRlmmConfig,
    *,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Create or check the metadata topic, retrying as the module docstring says."""
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
            count = _partition_count(admin, config.topic_name, attempt_s)
            if count is None:
                _create(admin, config, attempt_s)
                count = _partition_count(admin, config.topic_name, attempt_s)
                if count is None:
                    raise _NotYet(f"{config.topic_name} is not in the metadata yet")
            if count != config.num_partitions:
                raise ConfigError(
                    f"the remote log metadata topic {config.topic_name} has {count} partitions "
                    f"but {NUM_PARTITIONS} is {config.num_partitions}: every event would be "
                    f"looked for in the wrong partition. Set {NUM_PARTITIONS}={count} (Kafka "
                    "refuses to start with a mismatch too)"
                )
            _LOG.info(
                "remote log metadata topic %s is ready (%d partitions)", config.topic_name, count
            )
            return
        except (KafkaException, _NotYet) as exc:
            last = exc
            if attempts == 1 or attempts % 50 == 0:
                _LOG.info(
                    "remote log metadata topic %s on %s not ready yet (attempt %d): %s",
                    config.topic_name,
                    config.bootstrap_servers,
                    attempts,
                    _describe(exc),
                )
        if monotonic() + interval_s > deadline:
            raise RemoteStorageException(
                f"the remote log metadata topic {config.topic_name} could not be created or "
                f"checked on {config.bootstrap_servers} within "
                f"{config.initialization_retry_max_timeout_ms} ms "
                f"(remote.log.metadata.initialization.retry.max.timeout.ms, {attempts} "
                f"attempt(s)); last error: {_describe(last) if last else 'none'}"
            ) from last
        sleep(interval_s)
