"""``ensure_topic`` as the compacted RLMM reuses it, and the topic RLMM refusing a compacted
topic, against the session's real broker.

A compacted metadata topic is the compacted RLMM's projection (KAFKA-20033): its tombstones
would stop this RLMM's consumer, and Kafka refuses this RLMM's keyless records on it, so the
topic RLMM must not start on one. The other tests here check what the generalised
``ensure_topic`` returns and creates: the topic's described configs, another topic name and
its configs, configs computed only when the topic is created, and that computation's
transient failure retried like the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from tierlog_rlmm_topic import TopicBasedRemoteLogMetadataManager, TopicRlmmConfig
from tierlog_rlmm_topic.topic import describe_topic_configs, ensure_topic, is_compacted

from tierlog.spi import ConfigError

PARTITIONS = 3


def create(admin: AdminClient, name: str, configs: Mapping[str, str], partitions: int = 3) -> None:
    new = NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(configs))
    admin.create_topics([new])[name].result(timeout=60)


@pytest.fixture
def config(
    rlmm_configs: Callable[..., dict[str, str]], topic_name: str, delete_topics: list[str]
) -> TopicRlmmConfig:
    """The test's configuration (its own topic, deleted afterwards)."""
    delete_topics.append(topic_name)
    return TopicRlmmConfig.from_configs(rlmm_configs())


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete,compact"])
def test_is_compacted(policy: str) -> None:
    assert is_compacted({"cleanup.policy": policy})
    assert is_compacted({"cleanup.policy": policy.replace(",", ", ")})


@pytest.mark.parametrize("configs", [{"cleanup.policy": "delete"}, {"cleanup.policy": ""}, {}])
def test_is_not_compacted(configs: dict[str, str]) -> None:
    assert not is_compacted(configs)


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_a_compacted_topic_is_refused(
    kafka_admin: AdminClient, config: TopicRlmmConfig, topic_name: str, policy: str
) -> None:
    create(kafka_admin, topic_name, {"cleanup.policy": policy})
    with pytest.raises(ConfigError) as caught:
        ensure_topic(kafka_admin, config)
    message = str(caught.value)
    assert topic_name in message
    assert "projection of a compacted RLMM" in message
    assert "tombstones would stop this RLMM's consumer" in message
    assert "remote.log.metadata.manager.class.name=compacted" in message


def test_the_topic_rlmm_does_not_start_on_a_compacted_topic(
    kafka_admin: AdminClient,
    rlmm_configs: Callable[..., dict[str, str]],
    topic_name: str,
    delete_topics: list[str],
) -> None:
    delete_topics.append(topic_name)
    create(kafka_admin, topic_name, {"cleanup.policy": "compact"})
    rlmm = TopicBasedRemoteLogMetadataManager()
    with pytest.raises(ConfigError, match=r"remote\.log\.metadata\.manager\.class\.name=compacted"):
        rlmm.configure(rlmm_configs())
    rlmm.close()


def test_a_compacted_topic_is_accepted_when_asked(
    kafka_admin: AdminClient, config: TopicRlmmConfig, topic_name: str
) -> None:
    create(kafka_admin, topic_name, {"cleanup.policy": "compact", "segment.ms": "600000"})
    described = ensure_topic(kafka_admin, config, accept_compacted=True)
    assert described["cleanup.policy"] == "compact"
    assert described["segment.ms"] == "600000"


def test_returns_the_created_topics_configs(
    kafka_admin: AdminClient, config: TopicRlmmConfig, topic_name: str
) -> None:
    described = ensure_topic(kafka_admin, config)
    for name, value in config.topic_configs().items():
        assert described[name] == value, name
    # Defaults are described too: the caller reads any config it needs.
    assert "max.message.bytes" in described
    assert described == describe_topic_configs(kafka_admin, topic_name, 30)


def test_another_topic_with_its_own_configs(
    kafka_admin: AdminClient, config: TopicRlmmConfig, topic_name: str, delete_topics: list[str]
) -> None:
    other = f"{topic_name}-other"
    delete_topics.append(other)
    wanted = {"cleanup.policy": "delete", "retention.ms": "7200000", "segment.ms": "900000"}
    described = ensure_topic(kafka_admin, config, topic_name=other, topic_configs=wanted)
    assert {name: described[name] for name in wanted} == wanted
    metadata = kafka_admin.list_topics(timeout=30).topics
    assert len(metadata[other].partitions) == PARTITIONS
    assert topic_name not in metadata  # the configuration's own topic was not touched


def test_configs_are_computed_only_when_the_topic_is_created(
    kafka_admin: AdminClient, config: TopicRlmmConfig, topic_name: str
) -> None:
    calls: list[str] = []

    def compute() -> dict[str, str]:
        calls.append("called")
        return {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.3"}

    first = ensure_topic(kafka_admin, config, topic_configs=compute, accept_compacted=True)
    assert calls == ["called"]
    assert (first["cleanup.policy"], first["min.cleanable.dirty.ratio"]) == ("compact", "0.3")
    ensure_topic(kafka_admin, config, topic_configs=compute, accept_compacted=True)
    assert calls == ["called"]  # existing: not computed again


def test_a_transient_failure_computing_the_configs_is_retried(
    kafka_admin: AdminClient, config: TopicRlmmConfig, topic_name: str
) -> None:
    attempts: list[int] = []

    def compute() -> dict[str, str]:
        attempts.append(len(attempts))
        if len(attempts) < 3:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "broker went away"))
        return {"cleanup.policy": "delete", "retention.ms": "3600000"}

    described = ensure_topic(kafka_admin, config, topic_configs=compute)
    assert len(attempts) == 3
    assert described["retention.ms"] == "3600000"


def test_partition_count_mismatch_of_another_topic_names_it(
    kafka_admin: AdminClient, config: TopicRlmmConfig, topic_name: str, delete_topics: list[str]
) -> None:
    other = f"{topic_name}-other"
    delete_topics.append(other)
    create(kafka_admin, other, {}, partitions=2)
    with pytest.raises(ConfigError, match=f"{other} has 2 partitions"):
        ensure_topic(kafka_admin, config, topic_name=other)


def test_describing_a_missing_topic_raises_unknown_topic(
    kafka_admin: AdminClient, topic_name: str
) -> None:
    with pytest.raises(KafkaException) as caught:
        describe_topic_configs(kafka_admin, topic_name, 30)
    error = caught.value.args[0]
    assert isinstance(error, KafkaError)
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
