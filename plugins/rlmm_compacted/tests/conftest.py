"""Real Apache Kafka brokers for the plugin's tests (``<repo>/scripts/services/kafka.py``).

``kafka_broker`` is the session's single broker (it also runs Kafka's own tiered storage, with
Kafka's TopicBasedRemoteLogMetadataManager on its own 5-partition ``__remote_log_metadata``:
the tests here always use topics of their own, named by ``remote.log.metadata.topic.name`` and
``remote.log.metadata.audit.topic.name``, except those about Kafka readers of that topic).
``kafka_cluster`` and ``kafka_factory`` are there for the fault tests. Under xdist every worker
starts its own broker.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# The shared service launchers (<repo>/scripts/services), importable whatever pytest's import mode.
_SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"
if str(_SCRIPTS) not in sys.path:
    sys.path.insert(0, str(_SCRIPTS))

from confluent_kafka.admin import AdminClient  # noqa: E402
from services._common import Service  # noqa: E402
from services.kafka_fixtures import kafka_broker, kafka_cluster, kafka_factory  # noqa: E402

__all__ = ["kafka_broker", "kafka_cluster", "kafka_factory"]


@pytest.fixture(scope="session")
def kafka_admin(kafka_broker: Service) -> AdminClient:
    """A plain admin client of the session's broker: set-up and independent inspection."""
    return AdminClient({"bootstrap.servers": kafka_broker.url})


@pytest.fixture
def topic_name() -> str:
    """A fresh projection topic name for one test."""
    return f"tierlog-rlmm-compacted-test-{uuid.uuid4().hex}"


@pytest.fixture
def audit_topic_name(topic_name: str) -> str:
    """The audit topic of the test's projection topic."""
    return f"{topic_name}-audit"


@pytest.fixture
def rlmm_configs(
    kafka_broker: Service, topic_name: str, audit_topic_name: str
) -> Callable[..., dict[str, str]]:
    """``rlmm_configs(extra={...})``: the plugin's configuration on the session's broker, a
    projection topic and an audit topic of the test's own with 3 partitions and one replica."""

    def make(extra: dict[str, str] | None = None) -> dict[str, str]:
        return {
            "remote.log.metadata.common.client.bootstrap.servers": kafka_broker.url,
            "remote.log.metadata.topic.name": topic_name,
            "remote.log.metadata.audit.topic.name": audit_topic_name,
            "remote.log.metadata.topic.num.partitions": "3",
            "remote.log.metadata.topic.replication.factor": "1",
            "remote.log.metadata.topic.min.isr": "1",
            "node.id": "1",
            **(extra or {}),
        }

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
