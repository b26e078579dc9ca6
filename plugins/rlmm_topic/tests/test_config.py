"""The ``topic`` RLMM's configuration: the shared checks (``services.rlmm_suites.
RlmmConfigSuite``: documented keys, refused values, unknown keys, secrets, required keys), then
Kafka's keys and defaults, the client prefixes, the translation of Java client keys to
librdkafka's, and the keys another plugin parses from the same mapping (no broker needed)."""

from __future__ import annotations

import logging

import pytest
from services.rlmm_suites import RlmmConfigSuite
from tierlog_rlmm_topic import CONFIG_KEYS, TopicRlmmConfig
from tierlog_rlmm_topic.clients import translate
from tierlog_rlmm_topic.config import DEFAULT_TOPIC_NAME

from tierlog.spi import ConfigError

SERVERS = "remote.log.metadata.common.client.bootstrap.servers"


class TestConfig(RlmmConfigSuite):
    """The shared configuration tests on ``TopicRlmmConfig``."""

    config_class = TopicRlmmConfig
    config_keys = CONFIG_KEYS


def parse(**extra: str) -> TopicRlmmConfig:
    """A configuration with a node id and bootstrap servers, plus ``extra`` (``__`` is ``.``)."""
    configs = {"node.id": "7", SERVERS: "k1:9092,k2:9092"}
    configs.update({key.replace("__", "."): value for key, value in extra.items()})
    return TopicRlmmConfig.from_configs(configs)


def test_kafka_defaults() -> None:
    config = parse()
    assert (
        config.num_partitions,
        config.replication_factor,
        config.retention_ms,
        config.min_isr,
        config.consume_wait_ms,
        config.initialization_retry_max_timeout_ms,
        config.initialization_retry_interval_ms,
    ) == (50, 3, -1, 2, 120_000, 120_000, 100)
    assert config.topic_name == DEFAULT_TOPIC_NAME == "__remote_log_metadata"
    assert config.node_id == 7
    assert config.bootstrap_servers == "k1:9092,k2:9092"
    assert config.topic_configs() == {
        "retention.ms": "-1",
        "cleanup.policy": "delete",
        "remote.storage.enable": "false",
        "min.insync.replicas": "2",
    }


def test_kafka_keys_are_read() -> None:
    config = TopicRlmmConfig.from_configs(
        {
            "broker.id": "3",
            SERVERS: "k:1",
            "remote.log.metadata.topic.num.partitions": "5",
            "remote.log.metadata.topic.replication.factor": "1",
            "remote.log.metadata.topic.retention.ms": "604800000",
            "remote.log.metadata.topic.min.isr": "1",
            "remote.log.metadata.consume.wait.ms": "5000",
            "remote.log.metadata.initialization.retry.max.timeout.ms": "3000",
            "remote.log.metadata.initialization.retry.interval.ms": "50",
            "remote.log.metadata.topic.name": "my-metadata",
            "log.dir": "/var/kafka",
            "cluster.id": "abc",
        }
    )
    assert config.node_id == 3  # broker.id stands in for node.id
    assert (config.num_partitions, config.replication_factor, config.min_isr) == (5, 1, 1)
    assert (config.retention_ms, config.consume_wait_ms) == (604_800_000, 5000)
    assert (
        config.initialization_retry_max_timeout_ms,
        config.initialization_retry_interval_ms,
    ) == (3000, 50)
    assert (config.topic_name, config.log_dir, config.cluster_id) == (
        "my-metadata",
        "/var/kafka",
        "abc",
    )
    assert config.topic_configs()["retention.ms"] == "604800000"


def test_node_id_wins_over_broker_id() -> None:
    assert parse(broker__id="9").node_id == 7


def test_specific_prefixes_override_the_common_one() -> None:
    config = TopicRlmmConfig.from_configs(
        {
            "node.id": "2",
            SERVERS: "common:1",
            "remote.log.metadata.common.client.linger.ms": "7",
            "remote.log.metadata.producer.linger.ms": "9",
            "remote.log.metadata.consumer.bootstrap.servers": "consumer:2",
            "remote.log.metadata.admin.socket.timeout.ms": "1234",
        }
    )
    assert config.producer["linger.ms"] == "9"
    assert config.consumer["linger.ms"] == "7"
    assert config.producer["bootstrap.servers"] == "common:1"
    assert config.consumer["bootstrap.servers"] == "consumer:2"
    assert config.admin["bootstrap.servers"] == "common:1"
    assert config.admin["socket.timeout.ms"] == "1234"
    assert "socket.timeout.ms" not in config.producer


def test_the_admin_client_is_named_as_kafkas() -> None:
    """(The producer's and consumer's forced settings: ``TestConfig``.)"""
    config = parse(remote__log__metadata__common__client__client__id="mine")
    assert config.admin["client.id"] == "__remote_log_metadata_client_7_admin"


def test_consumer_memory_is_bounded_unless_set() -> None:
    config = parse()
    assert config.consumer["queued.max.messages.kbytes"] == "16384"
    assert config.consumer["fetch.max.bytes"] == str(8 * 1024 * 1024)
    assert config.consumer["isolation.level"] == "read_uncommitted"
    assert config.consumer["fetch.queue.backoff.ms"] == "10"
    custom = parse(remote__log__metadata__consumer__queued__max__messages__kbytes="1024")
    assert custom.consumer["queued.max.messages.kbytes"] == "1024"
    assert "queued.max.messages.kbytes" not in custom.producer


# Java client keys -> librdkafka ----------------------------------------------------------------
@pytest.mark.parametrize(
    "module",
    [
        "org.apache.kafka.common.security.plain.PlainLoginModule",
        "org.apache.kafka.common.security.scram.ScramLoginModule",
    ],
)
def test_jaas_username_and_password(module: str) -> None:
    translated = translate(
        {
            "sasl.jaas.config": f'{module} required username="alice" password="p\\"w;d";',
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
        }
    )
    assert translated.properties == {
        "sasl.username": "alice",
        "sasl.password": 'p"w;d',
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
    }


def test_jaas_kerberos_and_oauth() -> None:
    kerberos = translate(
        {
            "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required "
            'useKeyTab=true keyTab="/etc/k.keytab" principal="kafka/h@R";'
        }
    )
    assert kerberos.properties == {
        "sasl.kerberos.keytab": "/etc/k.keytab",
        "sasl.kerberos.principal": "kafka/h@R",
    }
    oauth = translate(
        {
            "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
            'OAuthBearerLoginModule required clientId="id" clientSecret="sec" scope="s";'
        }
    )
    assert oauth.properties == {
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "id",
        "sasl.oauthbearer.client.secret": "sec",
        "sasl.oauthbearer.scope": "s",
    }


def test_jaas_errors_name_the_key() -> None:
    where = {"sasl.jaas.config": "remote.log.metadata.common.client.sasl.jaas.config"}
    with pytest.raises(ConfigError, match=r"common\.client\.sasl\.jaas\.config.*cannot be"):
        translate({"sasl.jaas.config": "com.example.MyLoginModule required;"}, where)
    with pytest.raises(ConfigError, match="PlainLoginModule needs password"):
        translate(
            {"sasl.jaas.config": "x.PlainLoginModule required username=u;"},
        )
    with pytest.raises(ConfigError, match="cannot read the JAAS configuration"):
        translate({"sasl.jaas.config": 'username="u"'})


def test_pem_truststore_and_pkcs12_keystore() -> None:
    translated = translate(
        {
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": "/etc/ca.pem",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": "/etc/client.p12",
            "ssl.keystore.password": "kp",
            "ssl.key.password": "k",
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert translated.properties == {
        "ssl.ca.location": "/etc/ca.pem",
        "ssl.keystore.location": "/etc/client.p12",
        "ssl.keystore.password": "kp",
        "ssl.key.password": "k",
        "ssl.endpoint.identification.algorithm": "none",
    }


def test_pem_keystore_and_inline_pem() -> None:
    translated = translate(
        {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": "/etc/client.pem",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----...",
        }
    )
    assert translated.properties == {
        "ssl.certificate.location": "/etc/client.pem",
        "ssl.key.location": "/etc/client.pem",
        "ssl.ca.pem": "-----BEGIN CERTIFICATE-----...",
    }
    inline = translate(
        {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": "CHAIN",
            "ssl.keystore.key": "KEY",
        }
    )
    assert inline.properties == {"ssl.certificate.pem": "CHAIN", "ssl.key.pem": "KEY"}


@pytest.mark.parametrize(
    ("props", "key", "advice"),
    [
        ({"ssl.truststore.location": "/t.jks"}, "ssl.truststore.location", "convert it to PEM"),
        (
            {"ssl.truststore.location": "/t.p12", "ssl.truststore.type": "PKCS12"},
            "ssl.truststore.location",
            "convert it to PEM",
        ),
        ({"ssl.keystore.location": "/k.jks"}, "ssl.keystore.location", "convert it to PKCS12"),
    ],
)
def test_java_keystores_are_refused_with_advice(
    props: dict[str, str], key: str, advice: str
) -> None:
    prefixed = "remote.log.metadata.consumer." + key
    with pytest.raises(ConfigError, match=advice) as caught:
        translate(props, {key: prefixed})
    assert prefixed in str(caught.value)


def test_java_only_keys_are_dropped_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    translated = translate(
        {
            "key.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
            "client.dns.lookup": "use_all_dns_ips",
            "linger.ms": "5",
        },
        {"client.dns.lookup": "remote.log.metadata.common.client.client.dns.lookup"},
    )
    assert translated.properties == {"linger.ms": "5"}
    assert translated.dropped == (
        "key.serializer",
        "remote.log.metadata.common.client.client.dns.lookup",
    )
    with caplog.at_level(logging.WARNING):
        parse(remote__log__metadata__producer__value__serializer="x")
    assert "remote.log.metadata.producer.value.serializer" in caplog.text


def test_renamed_keys() -> None:
    translated = translate(
        {
            "receive.buffer.bytes": "65536",
            "send.buffer.bytes": "131072",
            "max.request.size": "2000000",
            "fetch.max.wait.ms": "250",
            "buffer.memory": "33554432",
        }
    )
    assert translated.properties == {
        "socket.receive.buffer.bytes": "65536",
        "socket.send.buffer.bytes": "131072",
        "message.max.bytes": "2000000",
        "fetch.wait.max.ms": "250",
        "queue.buffering.max.kbytes": "32768",
    }


# Keys another plugin parses from the same mapping ------------------------------------------------
def test_extra_keys_and_prefixes_are_not_unknown(caplog: pytest.LogCaptureFixture) -> None:
    configs = {
        "node.id": "1",
        SERVERS: "k:1",
        "other.plugin.key": "1",
        "other.plugin.prefix.anything": "2",
    }
    with caplog.at_level(logging.WARNING):
        TopicRlmmConfig.from_configs(
            configs, extra_keys={"other.plugin.key"}, extra_prefixes=("other.plugin.prefix.",)
        )
    assert "unknown" not in caplog.text
    with caplog.at_level(logging.WARNING):
        TopicRlmmConfig.from_configs(configs)
    assert "other.plugin.key" in caplog.text
    assert "other.plugin.prefix.anything" in caplog.text


def test_did_you_mean_sees_the_extra_keys(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        TopicRlmmConfig.from_configs(
            {"node.id": "1", SERVERS: "k:1", "remote.log.metadata.audit.enabel": "true"},
            extra_keys=("remote.log.metadata.audit.enable",),
            owner="compacted RLMM",
        )
    assert "compacted RLMM ignores unknown configuration key(s)" in caplog.text
    assert (
        "remote.log.metadata.audit.enabel (did you mean remote.log.metadata.audit.enable?)"
        in caplog.text
    )


def test_owner_names_the_plugin_in_errors() -> None:
    """``owner`` names the plugin that parses (the topic RLMM's own messages, without it, are
    checked by ``TestConfig``)."""
    with pytest.raises(ConfigError, match=r"^the compacted RLMM needs node\.id"):
        TopicRlmmConfig.from_configs({SERVERS: "k:1"}, owner="compacted RLMM")
    with pytest.raises(ConfigError, match="the compacted RLMM's producer has no bootstrap"):
        TopicRlmmConfig.from_configs({"node.id": "1"}, owner="compacted RLMM")
