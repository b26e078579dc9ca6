"""pytest fixtures shared by the two Kafka-topic RLMM plugins' suites (``plugins/rlmm_topic``,
``plugins/rlmm_compacted``). A plugin's ``conftest.py`` imports them by name, next to the
broker fixtures of ``services.kafka_fixtures``, and defines ``rlmm_plugin`` (session scope):
the ``services.rlmm_faults.PluginUnderTest`` these fixtures and the shared tests
(``services.rlmm_suites``) run on::

    from services.rlmm_fixtures import delete_topics, kafka_admin, opened, rlmm_configs, ...

    @pytest.fixture(scope="session")
    def rlmm_plugin() -> PluginUnderTest:
        return PluginUnderTest("topic", TopicBasedRemoteLogMetadataManager, "topic RLMM")
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from services._common import Service
from services.kafka import KafkaCluster, start_again
from services.kafka_fixtures import kafka_broker, kafka_cluster, kafka_factory
from services.rlmm_faults import RESTART_DEADLINE_S, Nodes, PluginUnderTest, private_topic
from tierlog.spi import RemoteLogMetadataManager

__all__ = [
    "delete_topics",
    "healthy_cluster",
    "kafka_admin",
    "kafka_broker",
    "kafka_cluster",
    "kafka_factory",
    "nodes",
    "opened",
    "pytest_collection_modifyitems",
    "rlmm_configs",
    "rlmm_factory",
    "topic_name",
]

Configs = Callable[..., dict[str, str]]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long tests first (marked ``slow``, and the conformance state machines), each group
    in its collected order: xdist hands tests out in that order, and long ones collected last
    kept one worker busy for minutes after the other ran out of work."""

    def short(item: pytest.Item) -> bool:
        return item.get_closest_marker("slow") is None and "state_machine" not in item.name

    items.sort(key=short)


@pytest.fixture(scope="session")
def kafka_admin(kafka_broker: Service) -> AdminClient:
    """A plain admin client of the session's broker: set-up and independent inspection."""
    return AdminClient({"bootstrap.servers": kafka_broker.url})


@pytest.fixture
def topic_name(rlmm_plugin: PluginUnderTest) -> str:
    """A fresh metadata topic name for one test (the compacted RLMM's projection topic)."""
    return private_topic(rlmm_plugin)


@pytest.fixture
def rlmm_configs(rlmm_plugin: PluginUnderTest, kafka_broker: Service, topic_name: str) -> Configs:
    """``rlmm_configs(extra=None)``: the plugin's configuration on the session's broker, topics
    of the test's own (``topic_name`` and its companions) with 3 partitions and one replica,
    node 1; ``extra`` on top."""

    def make(extra: dict[str, str] | None = None) -> dict[str, str]:
        return rlmm_plugin.configs(kafka_broker.url, topic_name, node_id=1, extra=extra)

    return make


@pytest.fixture
def delete_topics(kafka_admin: AdminClient) -> Iterator[list[str]]:
    """Topics appended to the list are deleted after the test."""
    topics: list[str] = []
    yield topics
    if topics:
        for future in kafka_admin.delete_topics(topics, operation_timeout=30).values():
            # Best effort: the broker goes away with the session anyway.
            with contextlib.suppress(Exception):
                future.result(timeout=60)


@pytest.fixture
def rlmm_factory(
    rlmm_plugin: PluginUnderTest,
    rlmm_configs: Configs,
    topic_name: str,
    delete_topics: list[str],
) -> Iterator[Callable[..., Any]]:
    """``rlmm_factory(extra=None, **kwargs)``: a node of the plugin (its manager built with
    ``kwargs``) configured by ``rlmm_configs(extra)``; all are closed after the test, and the
    plugin's topics deleted."""
    made: list[RemoteLogMetadataManager] = []
    delete_topics.extend(rlmm_plugin.topics(topic_name))

    def make(extra: dict[str, str] | None = None, **kwargs: Any) -> Any:
        rlmm = rlmm_plugin.manager(**kwargs)
        made.append(rlmm)
        rlmm.configure(rlmm_configs(extra))
        return rlmm

    yield make
    for rlmm in made:
        rlmm.close()


@pytest.fixture
def nodes(
    rlmm_plugin: PluginUnderTest,
    kafka_broker: Service,
    delete_topics: list[str],
    opened: list[RemoteLogMetadataManager],
) -> Nodes:
    """Nodes of the plugin on the session's broker, on a metadata topic of the test's own (its
    topics deleted after the test), each closed after the test."""
    topic = private_topic(rlmm_plugin)
    delete_topics.extend(rlmm_plugin.topics(topic))
    return Nodes(rlmm_plugin, kafka_broker.url, topic, opened)


@pytest.fixture
def opened() -> Iterator[list[RemoteLogMetadataManager]]:
    """RLMM nodes opened by the test (``open_node``), closed at its end, last opened first."""
    made: list[RemoteLogMetadataManager] = []
    yield made
    for rlmm in reversed(made):
        rlmm.close()


@pytest.fixture
def healthy_cluster(kafka_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """The session's cluster, every node running again after the test (the fixture is shared)."""
    yield kafka_cluster
    for node in kafka_cluster:
        if node.process.poll() is not None:
            start_again(node, timeout=RESTART_DEADLINE_S)
