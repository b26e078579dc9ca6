"""Reading a remote log metadata topic of a Kafka cluster: every record of a partition from its
beginning up to an end offset, with its key, value and headers, and the client settings of Kafka's
tools.

``tierlog metadata dump`` prints what it reads, ``tierlog metadata migrate`` (the compacted RLMM
plugin) replays it; both read through ``MetadataTopicReader``, so a topic is read one way:

- one consumer, assigned one partition at a time from its beginning (memory stays bounded whatever
  the topic's size), no group joined and nothing committed;
- up to end offsets the caller captured first (``watermarks``): records written after that are
  not read, so a read ends even while writers go on; ``follow`` then takes the new ones;
- every record (``read_uncommitted``, as Kafka's console consumer and RLMM read the topic), or
  with ``committed_only`` the committed ones (an aborted transaction wrote nothing);
- a cluster that does not answer within the timeout, a read that makes no progress for as long,
  and credentials the cluster refuses each end the read with a ``TierlogError`` in words
  (``ClusterUnreachableError`` for the first and the last), never a hang.

Security settings come as the Java properties file given to Kafka's tools (``--command-config``),
translated for librdkafka by ``client_config``: security protocol, SASL mechanism and credentials
(including a PLAIN or SCRAM ``sasl.jaas.config``), TLS files in PEM.

confluent-kafka (librdkafka) is the client. It is a dependency of the ``tierlog-rlmm-topic``
plugin, not of tierlog itself, so it is imported only when a reader is made (``load_client``);
without it the error says what to install.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from tierlog.spi import ConfigError, TierlogError

if TYPE_CHECKING:
    from tierlog.progress import Progress

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "ClientLog",
    "ClusterUnreachableError",
    "MetadataTopicReader",
    "TopicRecord",
    "client_config",
    "jaas_credentials",
    "kafka_error_text",
    "load_client",
    "load_client_config",
    "missing_client_message",
]

_LOG = logging.getLogger(__name__)
_CLIENT_LOG = _LOG.getChild("librdkafka")

DEFAULT_TIMEOUT_S: Final = 30.0
"""How long a reader waits for an answer, or for progress, by default."""
_BATCH: Final = 1000
_POLL_S: Final = 0.5
_RETRY_S: Final = 0.2
"""Pause between two asks for a partition's offsets (a topic created a moment ago has no leader
for a while)."""


# The client library -----------------------------------------------------------------------------
def missing_client_message(purpose: str) -> str:
    """What to install when confluent-kafka is missing and ``purpose`` needs it."""
    return (
        f"{purpose} needs confluent-kafka: pip install plugins/rlmm_topic (or pip install "
        "confluent-kafka)"
    )


def load_client(purpose: str = "reading a metadata topic") -> Any:
    """The ``confluent_kafka`` module; a ``TierlogError`` naming ``purpose`` and what to
    install when it is missing."""
    try:
        import confluent_kafka  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise TierlogError(missing_client_message(purpose)) from None
    return confluent_kafka


def kafka_error_text(exc: BaseException) -> str:
    """The text of a ``KafkaException`` (its ``KafkaError``'s), or of any other exception."""
    first = exc.args[0] if exc.args else exc
    text = getattr(first, "str", None)
    return str(text()) if callable(text) else str(first)


# Client configuration (a Kafka tool's --command-config) ------------------------------------------
_PASS_THROUGH: Final = frozenset(
    {
        # Same name and meaning in Kafka's Java clients and in librdkafka.
        "security.protocol",
        "sasl.mechanism",
        "ssl.key.password",
        "client.id",
        # librdkafka's names, accepted as they are.
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
    }
)
_SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_LOGIN_MODULES: Final = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
_JAAS_TOKEN: Final = re.compile(
    r"""\s+|//[^\n]*|/\*.*?\*/|(?P<quoted>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')"""
    r"""|(?P<word>[^\s=;"'/]+)|(?P<punct>[=;])""",
    re.S,
)
_JAVA_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "a": "\a", "v": "\v"}


def _unquote(token: str) -> str:
    """A quoted string of Java's ``StreamTokenizer`` (what Kafka's ``JaasConfig`` parses with):
    the quotes removed, ``\\n``-style and octal escapes replaced, any other escaped character
    standing for itself."""
    body = token[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        char = body[i]
        if char != "\\" or i + 1 == len(body):
            out.append(char)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in "01234567":
            digits = re.match(r"[0-7]{1,3}", body[i + 1 :])
            assert digits is not None
            text = digits.group(0)
            if len(text) == 3 and text[0] > "3":  # StreamTokenizer: at most \377
                text = text[:2]
            out.append(chr(int(text, 8)))
            i += 1 + len(text)
            continue
        out.append(_JAVA_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def jaas_credentials(jaas: str) -> tuple[str, dict[str, str]]:
    """The login module and options of a client's ``sasl.jaas.config`` value, parsed as Kafka's
    ``JaasConfig`` does: ``<LoginModule class> <flag> key=value ...;`` with exactly one module,
    values quoted (``"..."`` or ``'...'``, Java escapes) or bare, ``//`` and ``/* */`` comments.

    Raises ``ConfigError`` in Kafka's terms for anything else.
    """
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(jaas):
        match = _JAAS_TOKEN.match(jaas, pos)
        if match is None:
            raise ConfigError(
                f"sasl.jaas.config: unexpected {jaas[pos]!r} at position {pos} of {jaas!r}"
            )
        pos = match.end()
        if match.group("quoted"):
            tokens.append(("value", _unquote(match.group("quoted"))))
        elif match.group("word"):
            tokens.append(("word", match.group("word")))
        elif match.group("punct"):
            tokens.append((match.group("punct"), match.group("punct")))
    modules = sum(1 for kind, _ in tokens if kind == ";")
    if modules != 1 or tokens[-1][0] != ";":
        raise ConfigError(
            "sasl.jaas.config must hold exactly one login module ending with ';', as "
            "'org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="..." password="...";\' (found {modules} terminated modules)'
        )
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word":
        raise ConfigError("sasl.jaas.config: a login module class and a control flag come first")
    module, flag = tokens[0][1], tokens[1][1]
    if flag.lower() not in ("required", "requisite", "sufficient", "optional"):
        raise ConfigError(f"sasl.jaas.config: invalid control flag {flag!r}")
    options: dict[str, str] = {}
    rest = tokens[2:-1]
    for index in range(0, len(rest), 3):
        part = rest[index : index + 3]
        if len(part) != 3 or part[0][0] != "word" or part[1][0] != "=" or part[2][0] == "=":
            raise ConfigError(
                f"sasl.jaas.config: options of {module} must be key=value pairs, as "
                'username="alice"'
            )
        options[part[0][1]] = part[2][1]
    return module, options


def client_config(props: Mapping[str, str], *, source: str = "--command-config") -> dict[str, str]:
    """The librdkafka settings of Kafka client properties (a Kafka tool's ``--command-config``).

    Passed through: ``security.protocol``, ``sasl.mechanism``, ``sasl.username``,
    ``sasl.password``, ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``,
    ``ssl.key.password``, ``client.id``. Translated: ``sasl.jaas.config`` with Kafka's PLAIN or
    SCRAM login module (its ``username`` and ``password``), ``ssl.truststore.location`` of a
    ``ssl.truststore.type=PEM`` trust store (to ``ssl.ca.location``),
    ``ssl.endpoint.identification.algorithm`` (Kafka's empty value to librdkafka's ``none``).
    Kafka's defaults hold as in Kafka: no ``sasl.mechanism`` means GSSAPI, so a PLAIN login module
    without ``sasl.mechanism=PLAIN`` is an error here rather than a failed handshake later. Other
    keys are logged as ignored. Raises ``ConfigError`` for what librdkafka cannot do (JKS or
    PKCS12 trust stores, other login modules).
    """
    out: dict[str, str] = {}
    ignored: list[str] = []
    for key, value in props.items():
        if key in _PASS_THROUGH:
            out[key] = value.strip()
        elif key in ("sasl.jaas.config", "ssl.truststore.type", "ssl.truststore.location"):
            pass
        elif key == "ssl.endpoint.identification.algorithm":
            out[key] = value.strip() or "none"
        else:
            ignored.append(key)
    if ignored:
        _LOG.warning("%s: ignored (not a client security setting): %s", source, ", ".join(ignored))
    protocol = out.get("security.protocol")
    if protocol is not None:
        protocol = out["security.protocol"] = protocol.upper()
        if protocol not in _SECURITY_PROTOCOLS:
            raise ConfigError(
                f"{source}: security.protocol={protocol} is not one of "
                f"{', '.join(_SECURITY_PROTOCOLS)}"
            )
    truststore = props.get("ssl.truststore.location", "").strip()
    if truststore:
        kind = props.get("ssl.truststore.type", "JKS").strip().upper()
        if kind != "PEM":
            raise ConfigError(
                f"{source}: ssl.truststore.location is a {kind} trust store, which librdkafka "
                "cannot read: give the CA certificates as a PEM file in ssl.ca.location (or "
                "ssl.truststore.type=PEM)"
            )
        if out.setdefault("ssl.ca.location", truststore) != truststore:
            raise ConfigError(f"{source}: ssl.truststore.location and ssl.ca.location differ")
    jaas = props.get("sasl.jaas.config", "").strip()
    if jaas:
        module, options = jaas_credentials(jaas)
        mechanisms = _LOGIN_MODULES.get(module)
        if mechanisms is None:
            raise ConfigError(
                f"{source}: sasl.jaas.config uses {module}; only Kafka's PlainLoginModule and "
                "ScramLoginModule (username and password) are supported"
            )
        mechanism = out.get("sasl.mechanism", "").upper()
        if mechanism not in mechanisms:
            raise ConfigError(
                f"{source}: sasl.jaas.config uses {module.rsplit('.', 1)[-1]} but sasl.mechanism "
                f"is {mechanism or 'not set (Kafka: GSSAPI)'}: set sasl.mechanism="
                f"{' or '.join(mechanisms)}"
            )
        for option in ("username", "password"):
            if option not in options:
                raise ConfigError(f"{source}: sasl.jaas.config has no {option}")
            key = f"sasl.{option}"
            if out.setdefault(key, options[option]) != options[option]:
                raise ConfigError(f"{source}: {key} and the {option} of sasl.jaas.config differ")
    return out


def load_client_config(path: str | None) -> dict[str, str]:
    """The librdkafka settings of a Kafka tool's client properties file (``client_config`` of
    its properties, the path naming the errors); none without a file."""
    if not path:
        return {}
    from tierlog.properties import load_properties

    return client_config(load_properties(path), source=path)


_CLIENT_LOG_PREFIX: Final = re.compile(r"^\w+ \[[^\]]*\] \[thrd:[^\]]*\]: ")
_REFUSED: Final = ("authentication", "ssl handshake", "certificate verify")
"""Words of librdkafka's log lines when the cluster answered but refused the credentials or TLS."""


class ClientLog:
    """librdkafka's log lines, to this module's logger at debug level (``tierlog -vv`` shows
    them); the last warning or error is kept for the message of a failure. Given to a client as
    its ``logger`` (and ``error_cb``: ``error``)."""

    def __init__(self, refusals: frozenset[int] = frozenset()) -> None:
        self.last_problem: str | None = None
        self.refused = False
        """The client reported one of the ``refusals`` error codes (a refused login)."""
        self._refusals = refusals

    def error(self, error: Any) -> None:
        """The client's ``error_cb``: remembers a refused authentication."""
        if error.code() in self._refusals:
            self.refused = True
            self.last_problem = str(error.str())
        _CLIENT_LOG.debug("client error: %s", error)

    def log(self, level: int, fmt: str, *args: object) -> None:
        message = fmt % args if args else fmt
        if level >= logging.WARNING:
            # "FAIL [client#consumer-1] [thrd:HOST:PORT/bootstrap]: the message": the message.
            self.last_problem = _CLIENT_LOG_PREFIX.sub("", message)
        _CLIENT_LOG.debug("%s", message)


# The reader -------------------------------------------------------------------------------------
class ClusterUnreachableError(TierlogError):
    """The cluster did not answer within the reader's timeout, or refused its credentials."""


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """One record of the topic, as written (value None: a tombstone)."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class MetadataTopicReader:
    """A consumer of ``topic`` at ``bootstrap_servers`` that reads whole partitions.

    ``security``: librdkafka settings (``load_client_config``, ``client_config``);
    ``security_origin`` names where they came from in the message of a refused login.
    ``committed_only``: read_committed instead of read_uncommitted. ``client_id``: the client id
    (unless ``security`` sets one) and the group id librdkafka wants even without a group.
    ``purpose``: what the missing-client error says needs confluent-kafka. ``monotonic``: the
    clock of the timeouts.

    Use it as a context manager, or ``close`` it. Raises ``ConfigError`` for settings librdkafka
    refuses, ``TierlogError`` without confluent-kafka.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        security: Mapping[str, str] | None = None,
        security_origin: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        committed_only: bool = False,
        client_id: str = "tierlog-metadata-reader",
        purpose: str = "reading a metadata topic",
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not topic:
            raise ConfigError("the metadata topic's name must not be empty")
        if not timeout_s > 0:
            raise ConfigError(f"the reader's timeout must be positive, got {timeout_s}")
        kafka = load_client(purpose)
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.timeout_s = timeout_s
        self._security_origin = security_origin
        self._kafka = kafka
        self._monotonic = monotonic
        errors = kafka.KafkaError
        self.client_log = ClientLog(
            frozenset({errors._AUTHENTICATION, errors.SASL_AUTHENTICATION_FAILED})
        )
        config: dict[str, Any] = dict(security or {})
        config.update(
            {
                "bootstrap.servers": bootstrap_servers,
                # librdkafka wants a group even for assign(); nothing is committed or joined.
                "group.id": client_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": True,
                "isolation.level": "read_committed" if committed_only else "read_uncommitted",
                "logger": self.client_log,
                "error_cb": self.client_log.error,
            }
        )
        config.setdefault("client.id", client_id)
        try:
            self._consumer = kafka.Consumer(config)
        except (kafka.KafkaException, ValueError) as exc:
            raise ConfigError(f"invalid client configuration: {kafka_error_text(exc)}") from None
        self._closed = False

    def __enter__(self) -> MetadataTopicReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the consumer (which also delivers the client's last log lines); idempotent."""
        if not self._closed:
            self._closed = True
            self._consumer.close()

    def partition_count(self) -> int:
        """The number of partitions of the topic, from the cluster's metadata.

        Raises ``ClusterUnreachableError`` (the reader closed) when the cluster does not answer
        within the timeout or refuses the credentials, ``TierlogError`` when the topic does not
        exist."""
        kafka = self._kafka
        # Asked in short steps so that a refused authentication (reported through the client's
        # error callback, served by poll) ends the wait early.
        deadline = self._monotonic() + self.timeout_s
        while True:
            remaining = deadline - self._monotonic()
            try:
                metadata = self._consumer.list_topics(
                    self.topic, timeout=max(min(remaining, 1), 0.01)
                )
                break
            except kafka.KafkaException as exc:
                self._consumer.poll(0)
                if self.client_log.refused or self._monotonic() >= deadline:
                    raise self._unreachable(kafka_error_text(exc)) from None
        topic = metadata.topics.get(self.topic)
        error = None if topic is None else topic.error
        if topic is None or (
            error is not None and error.code() == kafka.KafkaError.UNKNOWN_TOPIC_OR_PART
        ):
            raise TierlogError(f"topic {self.topic} does not exist at {self.bootstrap_servers}")
        if error is not None:
            raise TierlogError(f"cannot describe topic {self.topic}: {error.str()}")
        if not topic.partitions:
            raise TierlogError(f"topic {self.topic} has no partitions")
        return int(max(topic.partitions)) + 1

    def _unreachable(self, why: str) -> ClusterUnreachableError:
        """The error of a cluster that did not answer, made once the client is closed (its last
        log lines come in on close)."""
        self.close()
        last = self.client_log.last_problem
        if last and any(word in last.lower() for word in _REFUSED):
            origin = f" ({self._security_origin})" if self._security_origin else ""
            return ClusterUnreachableError(
                f"the Kafka cluster at {self.bootstrap_servers} refused the client's security "
                f"settings{origin}: {last}"
            )
        return ClusterUnreachableError(
            f"no answer from the Kafka cluster at {self.bootstrap_servers} within "
            f"{self.timeout_s:g} s ({why}" + (f"; {last})" if last else ")")
        )

    def watermarks(self, partitions: Iterable[int]) -> dict[int, tuple[int, int]]:
        """The first and end offsets of ``partitions``, now. Asked again until the timeout while
        a partition does not answer (a topic created a moment ago has no leader for a while)."""
        kafka = self._kafka
        deadline = self._monotonic() + self.timeout_s
        marks: dict[int, tuple[int, int]] = {}
        for partition in partitions:
            tp = kafka.TopicPartition(self.topic, partition)
            while True:
                remaining = max(deadline - self._monotonic(), 0.01)
                try:
                    low, high = self._consumer.get_watermark_offsets(tp, timeout=remaining)
                    break
                except kafka.KafkaException as exc:
                    if self._monotonic() >= deadline:
                        raise TierlogError(
                            f"cannot read the offsets of {self.topic} partition {partition} "
                            f"within {self.timeout_s:g} s: {kafka_error_text(exc)}"
                        ) from None
                    _LOG.debug(
                        "offsets of %s partition %d: %s; asking again",
                        self.topic,
                        partition,
                        kafka_error_text(exc),
                    )
                    time.sleep(_RETRY_S)
            marks[partition] = (int(low), int(high))
        return marks

    def read(
        self, partition: int, end: int, progress: Progress | None = None
    ) -> Iterator[TopicRecord]:
        """The records of ``partition`` from its beginning up to ``end`` (exclusive), in offset
        order (``read_batches``, one record at a time)."""
        for batch in self.read_batches(partition, end, progress):
            yield from batch

    def read_batches(
        self, partition: int, end: int, progress: Progress | None = None
    ) -> Iterator[list[TopicRecord]]:
        """The records of ``partition`` from its beginning up to ``end`` (exclusive), in offset
        order, in the batches the consumer returns them (never empty); ``progress`` advanced by
        each batch once it has been handled. Nothing when ``end`` is 0 or less.

        Raises ``TierlogError`` for an error the client cannot get over, or when no record or
        end-of-partition comes for the timeout while ``end`` is not reached (with the client's
        last problem)."""
        kafka = self._kafka
        eof = kafka.KafkaError._PARTITION_EOF
        self._consumer.assign([kafka.TopicPartition(self.topic, partition, kafka.OFFSET_BEGINNING)])
        position = -1  # the next offset to read; -1 before the first record or event
        last_progress = self._monotonic()
        while position < end:
            batch: list[TopicRecord] = []
            for message in self._consumer.consume(_BATCH, timeout=_POLL_S):
                error = message.error()
                if error is not None:
                    if error.code() == eof:
                        # The end of what this consumer may read (the high watermark, or for
                        # committed_only the last stable offset): control records and aborted
                        # writes below it are never returned as records.
                        at = message.offset()
                        if at is not None and at > position:
                            position = at
                            last_progress = self._monotonic()
                        continue
                    if error.fatal() or not error.retriable():
                        raise TierlogError(
                            f"reading {self.topic} partition {partition}: {error.str()}"
                        )
                    _LOG.debug("reading %s partition %d: %s", self.topic, partition, error.str())
                    continue
                offset = message.offset()
                if offset is None:
                    continue
                if offset >= end:  # written after the end was captured
                    position = end
                    break
                position = offset + 1
                batch.append(_record(partition, offset, message))
            if batch:
                yield batch
                last_progress = self._monotonic()
                if progress is not None:
                    progress.advance(len(batch))
            elif position < end and self._monotonic() - last_progress > self.timeout_s:
                raise self._stalled(partition, position, end)

    def _stalled(self, partition: int, position: int, end: int) -> TierlogError:
        at = "its beginning" if position < 0 else f"offset {position}"
        last = self.client_log.last_problem
        return TierlogError(
            f"no progress reading {self.topic} partition {partition} at {at} (end offset {end}) "
            f"for {self.timeout_s:g} s" + (f": {last}" if last else "")
        )

    def follow(self, ends: Mapping[int, int]) -> Iterator[list[TopicRecord]]:
        """The records written at and after ``ends`` (partition: offset), in batches as they
        arrive (in arrival order across partitions), without end: the caller stops iterating."""
        kafka = self._kafka
        self._consumer.assign(
            [kafka.TopicPartition(self.topic, p, offset) for p, offset in sorted(ends.items())]
        )
        while True:
            batch: list[TopicRecord] = []
            for message in self._consumer.consume(_BATCH, timeout=_POLL_S):
                error = message.error()
                if error is not None:
                    if error.code() != kafka.KafkaError._PARTITION_EOF:
                        if error.fatal():
                            raise TierlogError(f"following {self.topic}: {error.str()}")
                        _LOG.debug("following %s: %s", self.topic, error.str())
                    continue
                partition, offset = message.partition(), message.offset()
                if partition is None or offset is None:
                    continue
                batch.append(_record(partition, offset, message))
            if batch:
                yield batch


def _record(partition: int, offset: int, message: Any) -> TopicRecord:
    headers = message.headers()
    return TopicRecord(
        partition, offset, message.key(), message.value(), tuple(headers) if headers else ()
    )
