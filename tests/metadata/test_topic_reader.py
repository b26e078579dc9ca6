"""``tierlog.metadata.topic_reader``: a metadata topic read from a real Apache Kafka 4.3.1 broker,
and the client settings of Kafka's tools.

Against the session broker: records come back with key, value (None for a tombstone) and
headers, partition by partition in offset order, up to the end captured first (a record written
later is not read, ``follow`` then brings it); ``committed_only`` leaves out an aborted
transaction, the default reads it as Kafka's console consumer does; progress counts the
records; a read that cannot reach its end, an unreachable cluster and a missing topic are errors
in words. Without a broker: the missing client, settings librdkafka refuses, ``client_config``
and the JAAS line, ``ClientLog``. ``tests/cli/test_metadata_dump.py`` and the compacted RLMM's
``test_migration.py`` read through the same reader end to end (a SASL/PLAIN broker included).
"""

from __future__ import annotations

import io
import logging
import queue
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from services._common import Service, free_ports
from services.kafka import create_topic

from tierlog.metadata import (
    ClusterUnreachableError,
    MetadataTopicReader,
    TopicRecord,
    client_config,
    load_client_config,
)
from tierlog.metadata.topic_reader import ClientLog, jaas_credentials, missing_client_message
from tierlog.progress import Progress
from tierlog.spi import ConfigError, TierlogError

DEADLINE_S = 120.0
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="carol" password="carol-secret";'
)


# The broker -------------------------------------------------------------------------------------


def new_topic(bootstrap: str, partitions: int = 2) -> str:
    """A test-private topic whose partitions all have a leader."""
    name = f"tierlog-reader-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, name, partitions, timeout=DEADLINE_S)
    return name


Header = tuple[str, bytes | None]


def write(
    bootstrap: str,
    topic: str,
    records: Sequence[tuple[int, bytes | None, bytes | None, tuple[Header, ...]]],
) -> list[TopicRecord]:
    """Write ``(partition, key, value, headers)`` one at a time, in order; each as a reader
    should return it (at the offset the broker acknowledged)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    written: list[TopicRecord] = []
    for partition, key, value, headers in records:
        acked: list[int] = []

        def report(err: object, msg: object, acked: list[int] = acked) -> None:
            assert err is None, err
            acked.append(msg.offset())  # type: ignore[attr-defined]

        producer.produce(
            topic,
            value=value,
            key=key,
            partition=partition,
            headers=list(headers) or None,
            on_delivery=report,
        )
        assert producer.flush(DEADLINE_S) == 0
        (offset,) = acked
        written.append(TopicRecord(partition, offset, key, value, headers))
    return written


def reader_of(kafka_broker: Service, topic: str, **kwargs: object) -> MetadataTopicReader:
    settings: dict[str, object] = {"timeout_s": DEADLINE_S, "client_id": "tierlog-reader-test"}
    settings.update(kwargs)
    return MetadataTopicReader(kafka_broker.url, topic, **settings)  # type: ignore[arg-type]


def next_batch(batches: Iterator[list[TopicRecord]]) -> list[TopicRecord]:
    """The next batch of an endless ``follow``, or a failure after the deadline (it runs in a
    daemon thread, so a read that never returns cannot hang the tests)."""
    out: queue.Queue[list[TopicRecord] | BaseException] = queue.Queue()

    def pull() -> None:
        try:
            out.put(next(batches))
        except BaseException as exc:  # handed to the test
            out.put(exc)

    threading.Thread(target=pull, daemon=True).start()
    got = out.get(timeout=DEADLINE_S)
    if isinstance(got, BaseException):
        raise got
    return got


# Reading ----------------------------------------------------------------------------------------
def test_partitions_are_read_from_their_beginning_to_the_end_captured(
    kafka_broker: Service,
) -> None:
    topic = new_topic(kafka_broker.url)
    first = write(
        kafka_broker.url,
        topic,
        [
            (0, None, b"legacy", ()),
            (0, b"k:1", b"keyed", (("tierlog.migrated.offset", b"7"), ("empty", None))),
            (0, b"k:1", None, ()),  # a tombstone
            (1, None, b"other partition", ()),
        ],
    )
    with reader_of(kafka_broker, topic) as reader:
        assert reader.partition_count() == 2
        marks = reader.watermarks([0, 1])
        assert marks == {0: (0, 3), 1: (0, 1)}
        (late,) = write(kafka_broker.url, topic, [(0, None, b"after the ends", ())])

        with Progress("read", 3, unit="records", file=io.StringIO()) as progress:
            records = list(reader.read(0, marks[0][1], progress))
        assert records == first[:3]
        assert records[1].headers == (("tierlog.migrated.offset", b"7"), ("empty", None))
        assert progress.done == 3

        batches = list(reader.read_batches(1, marks[1][1]))
        assert batches and all(batches)
        assert [r for batch in batches for r in batch] == first[3:]
        assert list(reader.read(1, 0)) == []  # nothing to read below 0

        follow = reader.follow({p: high for p, (_, high) in marks.items()})
        assert next_batch(follow) == [late]
        (later,) = write(kafka_broker.url, topic, [(1, b"k:2", b"later", ())])
        assert next_batch(follow) == [later]
        follow.close()


def test_committed_only_leaves_out_an_aborted_transaction(kafka_broker: Service) -> None:
    topic = new_topic(kafka_broker.url, partitions=1)
    producer = Producer(
        {
            "bootstrap.servers": kafka_broker.url,
            "transactional.id": f"tierlog-reader-test-{uuid.uuid4().hex[:8]}",
            "acks": "all",
        }
    )
    producer.init_transactions(DEADLINE_S)
    for value, commit in ((b"committed 1", True), (b"aborted", False), (b"committed 2", True)):
        producer.begin_transaction()
        producer.produce(topic, value=value, partition=0)
        producer.flush(DEADLINE_S)
        if commit:
            producer.commit_transaction(DEADLINE_S)
        else:
            producer.abort_transaction(DEADLINE_S)

    def values(reader: MetadataTopicReader) -> list[bytes | None]:
        with reader:
            ((_, end),) = reader.watermarks([0]).values()
            assert end == 6  # three records, three transaction markers
            return [record.value for record in reader.read(0, end)]

    assert values(reader_of(kafka_broker, topic, committed_only=True)) == [
        b"committed 1",
        b"committed 2",
    ]
    assert values(reader_of(kafka_broker, topic)) == [b"committed 1", b"aborted", b"committed 2"]


def test_a_read_that_cannot_reach_its_end_is_an_error(kafka_broker: Service) -> None:
    topic = new_topic(kafka_broker.url, partitions=1)
    write(kafka_broker.url, topic, [(0, None, b"only", ())])
    with reader_of(kafka_broker, topic, timeout_s=2) as reader, pytest.raises(TierlogError) as info:
        list(reader.read(0, 3))
    assert str(info.value).startswith(
        f"no progress reading {topic} partition 0 at offset 1 (end offset 3) for 2 s"
    )


def test_an_unreachable_cluster_is_an_error_in_words() -> None:
    (port,) = free_ports(1)
    reader = MetadataTopicReader(f"127.0.0.1:{port}", "t", timeout_s=1)
    with pytest.raises(ClusterUnreachableError) as info:
        reader.partition_count()
    message = str(info.value)
    assert message.startswith(f"no answer from the Kafka cluster at 127.0.0.1:{port} within 1 s (")
    assert "Connection refused" in message
    reader.close()  # closed already: nothing more happens


def test_a_missing_topic_is_an_error(kafka_broker: Service) -> None:
    missing = "no-such-topic-for-the-reader"
    with reader_of(kafka_broker, missing) as reader, pytest.raises(TierlogError) as info:
        reader.partition_count()
    assert str(info.value) == (
        f"topic no-such-topic-for-the-reader does not exist at {kafka_broker.url}"
    )


# Without a broker -------------------------------------------------------------------------------
def test_without_confluent_kafka_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # import fails
    with pytest.raises(TierlogError) as info:
        MetadataTopicReader("127.0.0.1:1", "t", purpose="tierlog metadata migrate")
    assert str(info.value) == missing_client_message("tierlog metadata migrate")
    assert str(info.value) == (
        "tierlog metadata migrate needs confluent-kafka: pip install plugins/rlmm_topic (or pip "
        "install confluent-kafka)"
    )


def test_bad_reader_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"invalid client configuration: .*security\.protocol"):
        MetadataTopicReader("127.0.0.1:1", "t", security={"security.protocol": "carrier-pigeon"})
    with pytest.raises(ConfigError, match="the metadata topic's name must not be empty"):
        MetadataTopicReader("127.0.0.1:1", "")
    with pytest.raises(ConfigError, match="the reader's timeout must be positive, got 0"):
        MetadataTopicReader("127.0.0.1:1", "t", timeout_s=0)


def test_client_log_keeps_the_last_problem_and_a_refusal(caplog: pytest.LogCaptureFixture) -> None:
    log = ClientLog(frozenset({KafkaError._AUTHENTICATION}))
    with caplog.at_level(logging.DEBUG, logger="tierlog.metadata.topic_reader.librdkafka"):
        log.log(logging.INFO, "CONNECT [rdkafka#consumer-1] [thrd:main]: %s", "connecting")
        assert log.last_problem is None
        log.log(logging.WARNING, "FAIL [rdkafka#consumer-1] [thrd:127.0.0.1:1/bootstrap]: refused")
        assert log.last_problem == "refused" and not log.refused
        log.error(KafkaError(KafkaError._TRANSPORT, "down"))
        assert log.last_problem == "refused" and not log.refused
        log.error(KafkaError(KafkaError._AUTHENTICATION, "wrong password"))
    assert log.refused and log.last_problem == "wrong password"
    assert "connecting" in caplog.text and "wrong password" in caplog.text


def test_load_client_config_reads_a_kafka_tool_properties_file(tmp_path: Path) -> None:
    assert load_client_config(None) == {}
    good = tmp_path / "client.properties"
    good.write_text(
        f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config={PLAIN_JAAS}\n"
    )
    assert load_client_config(str(good)) == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "carol",
        "sasl.password": "carol-secret",
    }
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=TLS\n")
    with pytest.raises(ConfigError, match=f"^{bad}: security.protocol=TLS is not one of"):
        load_client_config(str(bad))


# client_config and the JAAS line ----------------------------------------------------------------
def test_client_config_passes_security_settings_and_translates_the_jaas_line() -> None:
    props = {
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username=\'bob\' password="p\\"w\\\\d";',
        "ssl.ca.location": "/etc/ca.pem",
        "ssl.endpoint.identification.algorithm": "",
        "client.id": "me",
    }
    assert client_config(props) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "bob",
        "sasl.password": 'p"w\\d',
        "ssl.ca.location": "/etc/ca.pem",
        "ssl.endpoint.identification.algorithm": "none",
        "client.id": "me",
    }


def test_client_config_takes_librdkafka_credentials_and_a_pem_trust_store() -> None:
    props = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "p",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/ca.pem",
    }
    assert client_config(props) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "p",
        "ssl.ca.location": "/ca.pem",
    }


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (
            {"sasl.jaas.config": PLAIN_JAAS},
            "sasl.jaas.config uses PlainLoginModule but sasl.mechanism is not set (Kafka: GSSAPI): "
            "set sasl.mechanism=PLAIN",
        ),
        (
            {
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": PLAIN_JAAS.replace("plain.Plain", "scram.Scram"),
            },
            "sasl.jaas.config uses ScramLoginModule but sasl.mechanism is PLAIN: set "
            "sasl.mechanism=SCRAM-SHA-256 or SCRAM-SHA-512",
        ),
        (
            {
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
                "OAuthBearerLoginModule required;",
            },
            "sasl.jaas.config uses org.apache.kafka.common.security.oauthbearer."
            "OAuthBearerLoginModule; only Kafka's PlainLoginModule and ScramLoginModule "
            "(username and password) are supported",
        ),
        (
            {
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": PLAIN_JAAS.replace(' password="carol-secret"', ""),
            },
            "sasl.jaas.config has no password",
        ),
        (
            {"sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN_JAAS, "sasl.username": "bob"},
            "sasl.username and the username of sasl.jaas.config differ",
        ),
        (
            {"ssl.truststore.location": "/ts.jks"},
            "ssl.truststore.location is a JKS trust store, which librdkafka cannot read: give the "
            "CA certificates as a PEM file in ssl.ca.location (or ssl.truststore.type=PEM)",
        ),
        (
            {"security.protocol": "TLS"},
            "security.protocol=TLS is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL",
        ),
    ],
)
def test_client_config_refuses_what_librdkafka_cannot_do(
    props: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        client_config(props, source="client.properties")
    assert str(info.value) == f"client.properties: {message}"


@pytest.mark.parametrize(
    ("jaas", "module", "options"),
    [
        (PLAIN_JAAS, "org.apache.kafka.common.security.plain.PlainLoginModule",
         {"username": "carol", "password": "carol-secret"}),
        ("  x.Y   REQUIRED  a = b  c='d e';  ", "x.Y", {"a": "b", "c": "d e"}),
        ('x.Y optional /* a comment */ user="a\\tb" // to the end of line\n pw="\\101\\q";',
         "x.Y", {"user": "a\tb", "pw": "Aq"}),
        ("x.Y sufficient;", "x.Y", {}),
    ],
)  # fmt: skip
def test_jaas_lines_are_parsed_as_kafka_does(
    jaas: str, module: str, options: dict[str, str]
) -> None:
    assert jaas_credentials(jaas) == (module, options)


@pytest.mark.parametrize(
    "jaas",
    [
        "x.Y required a=b",  # no ';'
        "x.Y required a=b; z.W required c=d;",  # two modules
        "x.Y maybe a=b;",  # not a control flag
        "x.Y required a b;",  # not key=value
        "x.Y required a=;",
        "required;",
    ],
)
def test_bad_jaas_lines_are_config_errors(jaas: str) -> None:
    with pytest.raises(ConfigError):
        jaas_credentials(jaas)
