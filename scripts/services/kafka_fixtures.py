"""pytest fixtures of real Apache Kafka brokers, shared by the core's integration tests and the
RLMM plugins' tests. A conftest imports the fixtures it wants by name::

    from services.kafka_fixtures import kafka_broker, kafka_cluster, kafka_factory

- ``kafka_broker`` (session): one combined broker+controller running Kafka's own tiered storage
  (``LocalTieredStorage`` under ``kafka_broker.extra["tiered_storage"]``, Kafka's
  ``TopicBasedRemoteLogMetadataManager`` on 5 partitions of ``__remote_log_metadata``). Plain
  topics work on it as on any broker; it is the oracle of the interoperability tests.
- ``kafka_cluster`` (session): three nodes, replication factor 3, for failover tests. Tests
  that use it should share one ``xdist_group`` so that one worker, not every worker, starts it.
- ``kafka_factory`` (function): starts private brokers for tests that restart or kill one, and
  stops them at the end of the test.

A missing Java or Maven fails these fixtures with the reason: the tests that need a broker are
never skipped for want of one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services._common import Service
from services.kafka import KafkaCluster, start_kafka, start_kafka_cluster

__all__ = ["kafka_broker", "kafka_cluster", "kafka_factory"]


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The session's broker, with Kafka's own tiered storage."""
    directory = tmp_path_factory.mktemp("kafka")
    service = start_kafka(directory, tiered_storage=directory / "tiered-storage")
    yield service
    service.stop(timeout=20)


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """The session's three-node cluster (every node a broker and a controller voter)."""
    cluster = start_kafka_cluster(tmp_path_factory.mktemp("kafka-cluster"), size=3)
    yield cluster
    cluster.stop()


@pytest.fixture
def kafka_factory(tmp_path: Path) -> Iterator[Callable[..., Service]]:
    """``kafka_factory(**start_kafka_kwargs)`` starts a private broker under ``tmp_path``."""
    started: list[Service] = []

    def start(**kwargs: object) -> Service:
        service = start_kafka(tmp_path / f"kafka-{len(started)}", **kwargs)  # type: ignore[arg-type]
        started.append(service)
        return service

    yield start
    for service in started:
        service.stop(timeout=20)
