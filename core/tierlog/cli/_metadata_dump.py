"""``tierlog metadata dump --bootstrap-servers H:P``: a metadata topic on a Kafka cluster, in the
layout of Kafka's console formatter.

Kafka's own way to look at ``__remote_log_metadata`` is ``kafka-console-consumer --formatter
org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde$RemoteLogMetadataFormatter``:
one line ``partition: %d, offset: %d, value: %s`` per record, in the order the consumer happens
to fetch the partitions, and the consumer stops at the first record it cannot decode. This
command prints the same lines (``tierlog.metadata.formatter``), grouped per metadata partition in
partition order and offset order, so that two dumps (or a dump and Kafka's output, sorted) can be
compared line for line; and as a diagnostic tool it does not stop at a bad record. Two
things differ from Kafka's lines on purpose (``tierlog.metadata.formatter``); strip them to
compare with Kafka's output:

- a segment the log cleaner wrote (compacted topics in tiered storage) ends with its
  ``, cleanerOffsets={0=100, 1=155}``, a tagged field Kafka skips;
- a record with a key (the compacted RLMM's projection topic, KAFKA-20033, keys its records
  ``topicId:partition:endOffset:brokerLeaderEpoch``) shows it before its value:
  ``partition: P, offset: O, key: K, value: ...``, K the key's UTF-8 text, or ``0x<hex>`` when
  it is not valid UTF-8 (or not printable, so a record stays one line). Kafka's formatter
  prints values only. A record without a key (all Kafka and the ``topic`` RLMM write) keeps
  Kafka's exact line. In JSON a keyed record has ``key`` (hex) and, when the key is valid
  UTF-8, ``key_text``.

- It reads each chosen partition from its beginning to the end offset captured when the command
  started, one partition at a time (memory stays bounded whatever the topic's size), then exits;
  ``--follow`` then goes on printing new records as they arrive, until Ctrl-C.
- Filters: ``--topic-id`` (records of that topic), ``--partition`` (records of that user
  partition; with ``--topic-id`` only the metadata partition Kafka's
  ``RemoteLogMetadataTopicPartitioner`` maps it to is read, for ``--metadata-partitions`` or the
  topic's real partition count), ``--metadata-partition``. A record that does not decode names no
  topic: it is shown whatever the filters. Snapshot records (apiKey 3) name no topic either and
  are left out by ``--topic-id`` and ``--partition``.
- A record that does not decode is one line ``partition: P, offset: O, error: <why>`` (its key
  before ``error`` if it has one; or a JSON object with ``error``) in its place; the dump goes
  on and the command exits 1 at the end, with a summary on stderr. Two kinds of record that
  tierlog reads but Kafka 4.3's formatter and RLMM do not are shown and counted on stderr
  without failing the dump: a null value (a tombstone, on a compacted metadata topic;
  ``partition: P, offset: O, key: K, value: null``; Kafka: a ``NullPointerException``) and a
  record of a version above 0 (the seed of KAFKA-20033 writes version 1; its line is that of
  version 0; Kafka: "Can't read version 1 of RemoteLogSegmentIdEntry"). The filters keep a
  tombstone whose key is a compacted RLMM key naming a kept topic id and partition, and leave
  out any other tombstone (it names no topic).
- ``--command-config FILE`` takes the Java properties file given to Kafka's tools
  (``client_config``: security protocol, SASL mechanism and credentials, including a PLAIN or
  SCRAM ``sasl.jaas.config``, TLS files in PEM).
- A cluster that does not answer within ``--timeout`` seconds, or a read that makes no progress
  for as long, ends the command with one line on stderr and exit status 2.

confluent-kafka (librdkafka) is the client. It is a dependency of the ``tierlog-rlmm-topic``
plugin, not of tierlog itself, so it is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TextIO

from tierlog.spi import (
    ConfigError,
    InvalidArgumentError,
    MetadataRecordError,
    TierlogError,
    TopicIdPartition,
    Uuid,
)

if TYPE_CHECKING:
    from confluent_kafka import Consumer  # type: ignore[import-not-found, unused-ignore]

    from tierlog.metadata.serde import DecodedRecord
    from tierlog.progress import Progress

__all__ = ["add_dump_parser", "client_config", "jaas_credentials", "run_dump"]

_LOG = logging.getLogger(__name__)
_CLIENT_LOG = _LOG.getChild("librdkafka")

DEFAULT_TOPIC: Final = "__remote_log_metadata"
DEFAULT_TIMEOUT_S: Final = 30.0
INT32_MAX: Final = 2**31 - 1
MISSING_CLIENT: Final = (
    "tierlog metadata dump --bootstrap-servers needs confluent-kafka: pip install "
    "plugins/rlmm_topic (or pip install confluent-kafka)"
)
PROGRESS_MIN_RECORDS: Final = 200_000
"""Dumps of fewer records than this show no progress on stderr."""
_BATCH: Final = 1000
_POLL_S: Final = 0.5


# Arguments --------------------------------------------------------------------------------------
def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def add_dump_parser(sub: Any) -> None:
    """Add ``dump`` to the ``tierlog metadata`` subcommands."""
    dump = sub.add_parser(
        "dump",
        help="print a metadata topic of a Kafka cluster like Kafka's console formatter",
        description="Read a remote log metadata topic from a Kafka cluster, from the beginning "
        "to the end offsets of the start, and print each record as Kafka's "
        "RemoteLogMetadataFormatter does ('partition: P, offset: O, value: ...'), grouped per "
        "partition in partition and offset order. A record with a key (the compacted RLMM's "
        "'topicId:partition:endOffset:brokerLeaderEpoch') shows it before its value: "
        "'partition: P, offset: O, key: K, value: ...', K the key as UTF-8 text or 0x<hex>; a "
        "tombstone ends with 'value: null'. A record that does not decode is printed as "
        "'partition: P, offset: O, error: ...' and the dump goes on. Exit status: 0 all records "
        "decoded, 1 some did not, 2 usage error or cluster unreachable.",
    )
    dump.add_argument(
        "--bootstrap-servers",
        required=True,
        metavar="HOST:PORT[,HOST:PORT]",
        help="the Kafka cluster's bootstrap servers",
    )
    dump.add_argument(
        "--topic",
        default=DEFAULT_TOPIC,
        metavar="NAME",
        help=f"the metadata topic (default {DEFAULT_TOPIC})",
    )
    dump.add_argument(
        "--topic-id", metavar="ID", help="only the records of this topic id (22-char base64url)"
    )
    dump.add_argument(
        "--partition",
        type=int,
        metavar="N",
        help="only the records of user partition N; with --topic-id only the metadata "
        "partition that holds them is read",
    )
    dump.add_argument(
        "--metadata-partitions",
        type=int,
        metavar="K",
        help="remote.log.metadata.topic.num.partitions for --topic-id with --partition "
        "(default: the topic's partition count)",
    )
    dump.add_argument(
        "--metadata-partition",
        type=int,
        metavar="M",
        help="only read partition M of the metadata topic",
    )
    dump.add_argument(
        "--format",
        choices=("kafka", "json"),
        default="kafka",
        help="kafka (default; RemoteLogMetadataFormatter's lines, with the key of a keyed "
        "record) or json (one object per line: partition, offset, key (hex) and key_text (UTF-8) "
        "of a keyed record, and the JSON of `tierlog metadata decode`)",
    )
    dump.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties as for Kafka's tools: security.protocol, sasl.mechanism, "
        "sasl.jaas.config (PLAIN or SCRAM), sasl.username, sasl.password, ssl.ca.location, "
        "ssl.truststore.location (PEM), ssl.certificate.location, ssl.key.location, "
        "ssl.key.password, ssl.endpoint.identification.algorithm",
    )
    dump.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="give up when the cluster does not answer, or a read makes no progress, for this "
        f"long (default {DEFAULT_TIMEOUT_S:g})",
    )
    dump.add_argument(
        "--follow",
        action="store_true",
        help="after the dump, print new records as they arrive (in arrival order) until Ctrl-C",
    )
    dump.set_defaults(handler=run_dump)


# Client configuration (--command-config) --------------------------------------------------------
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


# Selection --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Selection:
    """Which records a dump shows: ``topic_id`` and ``partition`` filter the decoded records
    (a record that does not decode always shows)."""

    topic_id: Uuid | None = None
    partition: int | None = None

    @property
    def filters(self) -> bool:
        return self.topic_id is not None or self.partition is not None

    def keeps(self, value: object) -> bool:
        if not self.filters:
            return True
        tip = _topic_id_partition(value)
        if tip is None:
            return False
        if self.topic_id is not None and tip.topic_id != self.topic_id:
            return False
        return self.partition is None or tip.partition == self.partition

    def keeps_key(self, key: bytes | None) -> bool:
        """Whether a record without a value (a tombstone) shows: always without filters; with
        filters only if its key is one of the compacted RLMM's (``compacted_key_place``) and
        names a kept topic id and partition (any other tombstone names no topic)."""
        if not self.filters:
            return True
        place = None if key is None else compacted_key_place(key)
        if place is None:
            return False
        topic_id, partition = place
        if self.topic_id is not None and topic_id != self.topic_id:
            return False
        return self.partition is None or partition == self.partition


_COMPACTED_KEY: Final = re.compile(r"([A-Za-z0-9_-]{22}):(\d+):(-?\d+):(\d+)")
"""The compacted RLMM's key (KAFKA-20033): ``topicId:partition:endOffset:brokerLeaderEpoch``,
the topic id in Kafka's base64url form; a partition deletion's end offset may be -1."""


def compacted_key_place(key: bytes) -> tuple[Uuid, int] | None:
    """The topic id and user partition a compacted RLMM key names, or None if ``key`` is not
    one (its tombstone names no topic then)."""
    try:
        match = _COMPACTED_KEY.fullmatch(key.decode("ascii"))
    except UnicodeDecodeError:
        return None
    if match is None or int(match.group(2)) > INT32_MAX:
        return None
    try:
        topic_id = Uuid.from_string(match.group(1))
    except InvalidArgumentError:
        return None
    return topic_id, int(match.group(2))


def _topic_id_partition(value: object) -> TopicIdPartition | None:
    from tierlog.spi import (
        RemoteLogSegmentMetadata,
        RemoteLogSegmentMetadataUpdate,
        RemotePartitionDeleteMetadata,
    )

    if isinstance(value, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate):
        return value.remote_log_segment_id.topic_id_partition
    if isinstance(value, RemotePartitionDeleteMetadata):
        return value.topic_id_partition
    return None  # a snapshot record names no topic


def _check_arguments(args: argparse.Namespace) -> Selection:
    topic_id = None if args.topic_id is None else Uuid.from_string(args.topic_id)
    if args.partition is not None and not 0 <= args.partition <= INT32_MAX:
        raise InvalidArgumentError(f"--partition must be in 0..{INT32_MAX}, got {args.partition}")
    if args.metadata_partition is not None and not 0 <= args.metadata_partition <= INT32_MAX:
        raise InvalidArgumentError(
            f"--metadata-partition must be in 0..{INT32_MAX}, got {args.metadata_partition}"
        )
    if args.metadata_partitions is not None:
        if topic_id is None or args.partition is None:
            raise InvalidArgumentError(
                "--metadata-partitions places a user partition: it needs --topic-id and --partition"
            )
        if not 1 <= args.metadata_partitions <= INT32_MAX:
            raise InvalidArgumentError(
                f"--metadata-partitions must be in 1..{INT32_MAX}, got {args.metadata_partitions}"
            )
    if not args.topic:
        raise InvalidArgumentError("--topic must not be empty")
    return Selection(topic_id, args.partition)


def _partitions_to_read(
    args: argparse.Namespace, selection: Selection, partition_count: int
) -> list[int]:
    """The metadata partitions the dump reads, in order."""
    if args.metadata_partition is not None and args.metadata_partition >= partition_count:
        raise InvalidArgumentError(
            f"--metadata-partition {args.metadata_partition}: {args.topic} has "
            f"{partition_count} partitions (0..{partition_count - 1})"
        )
    if selection.topic_id is None or selection.partition is None:
        if args.metadata_partition is not None:
            return [args.metadata_partition]
        return list(range(partition_count))

    from tierlog.metadata.partitioner import metadata_partition

    count = args.metadata_partitions or partition_count
    tip = TopicIdPartition(selection.topic_id, "", selection.partition)
    mapped = metadata_partition(tip, count)
    if args.metadata_partitions is not None and args.metadata_partitions != partition_count:
        _LOG.warning(
            "--metadata-partitions %d but %s has %d partitions",
            args.metadata_partitions,
            args.topic,
            partition_count,
        )
    if mapped >= partition_count:
        raise InvalidArgumentError(
            f"topic id {selection.topic_id} partition {selection.partition} is on metadata "
            f"partition {mapped} of {count}, but {args.topic} has {partition_count} partitions"
        )
    if args.metadata_partition is not None and args.metadata_partition != mapped:
        raise InvalidArgumentError(
            f"topic id {selection.topic_id} partition {selection.partition} is on metadata "
            f"partition {mapped} of {count}, not on --metadata-partition "
            f"{args.metadata_partition}"
        )
    return [mapped]


# Lines ------------------------------------------------------------------------------------------
@dataclass
class DumpStats:
    """What a dump printed and found."""

    records: int = 0
    shown: int = 0
    tombstones: int = 0
    errors: list[tuple[int, int, str]] = field(default_factory=list)
    newer_versions: list[tuple[int, int, int]] = field(default_factory=list)
    """(partition, offset, version) of the records shown whose version is above 0."""


class LinePrinter:
    """Turns records into the dump's lines (kafka or json) and counts what it saw."""

    def __init__(self, fmt: str, selection: Selection, out: TextIO) -> None:
        from tierlog.metadata.formatter import format_record, key_text, record_prefix
        from tierlog.metadata.json_codec import record_to_json
        from tierlog.metadata.serde import decode_record

        self._json = fmt == "json"
        self._selection = selection
        self._out = out
        self._decode = decode_record
        self._format = format_record
        self._prefix = record_prefix
        self._key_text = key_text
        self._to_json = record_to_json
        self.stats = DumpStats()

    def line(
        self, partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> str | None:
        """The line of one record (without a newline), or ``None`` if the filters drop it."""
        self.stats.records += 1
        if value is None:
            self.stats.tombstones += 1
            if not self._selection.keeps_key(key):
                return None
            if self._json:
                return self._dumps(self._head(partition, offset, key) | {"value": None})
            return f"{self._prefix(partition, offset, key)}value: null"
        try:
            decoded: DecodedRecord = self._decode(value)
        except MetadataRecordError as exc:
            message = str(exc)
            self.stats.errors.append((partition, offset, message))
            if self._json:
                return self._dumps(self._head(partition, offset, key) | {"error": message})
            return f"{self._prefix(partition, offset, key)}error: {message}"
        if not self._selection.keeps(decoded.value):
            return None
        if decoded.version > 0:
            self.stats.newer_versions.append((partition, offset, decoded.version))
        if self._json:
            return self._dumps(self._head(partition, offset, key) | self._to_json(decoded))
        return self._format(partition, offset, decoded.value, key=key)

    def _head(self, partition: int, offset: int, key: bytes | None) -> dict[str, Any]:
        head: dict[str, Any] = {"partition": partition, "offset": offset}
        if key is not None:
            head["key"] = key.hex()
            text = self._key_text(key)
            if text is not None:
                head["key_text"] = text
        return head

    @staticmethod
    def _dumps(obj: Mapping[str, Any]) -> str:
        return json.dumps(obj, ensure_ascii=False)

    def write(self, lines: Sequence[str]) -> None:
        if lines:
            self.stats.shown += len(lines)
            self._out.write("\n".join(lines) + "\n")
            self._out.flush()


# The client -------------------------------------------------------------------------------------
_REFUSED: Final = ("authentication", "ssl handshake", "certificate verify")
"""Words of librdkafka's log lines when the cluster answered but refused the credentials or TLS."""
_CLIENT_LOG_PREFIX: Final = re.compile(r"^\w+ \[[^\]]*\] \[thrd:[^\]]*\]: ")


class _ClientLog:
    """librdkafka's log lines, to this module's logger at debug level (``tierlog -vv`` shows
    them); the last warning or error is kept for the message of a failure."""

    def __init__(self, refusals: frozenset[int] = frozenset()) -> None:
        self.last_problem: str | None = None
        self.refused = False
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


def _load_client() -> Any:
    try:
        import confluent_kafka
    except ImportError:
        raise TierlogError(MISSING_CLIENT) from None
    return confluent_kafka


def _consumer_config(args: argparse.Namespace, client_log: _ClientLog) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if args.command_config:
        from tierlog.properties import load_properties

        config.update(
            client_config(load_properties(args.command_config), source=args.command_config)
        )
    config.update(
        {
            "bootstrap.servers": args.bootstrap_servers,
            # librdkafka wants a group even for assign(); nothing is committed or joined.
            "group.id": "tierlog-metadata-dump",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            # As Kafka's console consumer and RLMM consumer: every record, aborted or not.
            "isolation.level": "read_uncommitted",
            "logger": client_log,
            "error_cb": client_log.error,
        }
    )
    config.setdefault("client.id", "tierlog-metadata-dump")
    return config


class _Unreachable(Exception):
    """The cluster did not answer; the message is made once the client has been closed (its
    last log lines come in on close)."""


class _Dump:
    """One run of the command: the consumer, the end offsets captured at start, the reads."""

    def __init__(
        self,
        args: argparse.Namespace,
        consumer: Consumer,
        kafka: Any,
        printer: LinePrinter,
        client_log: _ClientLog,
    ) -> None:
        self.args = args
        self.topic: str = args.topic
        self.consumer = consumer
        self.kafka = kafka
        self.printer = printer
        self.client_log = client_log
        self.monotonic = time.monotonic

    def partition_count(self) -> int:
        """The number of partitions of the topic (its metadata, from the cluster)."""
        # Asked in short steps so that a refused authentication (reported through the client's
        # error callback, served by poll) ends the wait early.
        deadline = self.monotonic() + self.args.timeout
        while True:
            remaining = deadline - self.monotonic()
            try:
                metadata = self.consumer.list_topics(
                    self.topic, timeout=max(min(remaining, 1), 0.01)
                )
                break
            except self.kafka.KafkaException as exc:
                self.consumer.poll(0)
                if self.client_log.refused or self.monotonic() >= deadline:
                    raise _Unreachable(_error_text(exc)) from None
        topic = metadata.topics.get(self.topic)
        error = None if topic is None else topic.error
        unknown = self.kafka.KafkaError.UNKNOWN_TOPIC_OR_PART
        if topic is None or (error is not None and error.code() == unknown):
            raise TierlogError(
                f"topic {self.topic} does not exist at {self.args.bootstrap_servers}"
            )
        if error is not None:
            raise TierlogError(f"cannot describe topic {self.topic}: {error.str()}")
        if not topic.partitions:
            raise TierlogError(f"topic {self.topic} has no partitions")
        return int(max(topic.partitions)) + 1

    def watermarks(self, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
        """The first and end offsets of ``partitions``, now."""
        marks: dict[int, tuple[int, int]] = {}
        for partition in partitions:
            tp = self.kafka.TopicPartition(self.topic, partition)
            try:
                low, high = self.consumer.get_watermark_offsets(tp, timeout=self.args.timeout)
            except self.kafka.KafkaException as exc:
                raise TierlogError(
                    f"cannot read the offsets of {self.topic} partition {partition} within "
                    f"{self.args.timeout:g} s: {_error_text(exc)}"
                ) from None
            marks[partition] = (low, high)
        return marks

    def _stalled(self, partition: int, position: int, end: int) -> TierlogError:
        at = "its beginning" if position < 0 else f"offset {position}"
        last = self.client_log.last_problem
        return TierlogError(
            f"no progress reading {self.topic} partition {partition} at {at} (end offset {end}) "
            f"for {self.args.timeout:g} s" + (f": {last}" if last else "")
        )

    def read_partition(self, partition: int, end: int, progress: Progress | None) -> None:
        """Print ``partition`` from its beginning up to ``end`` (exclusive)."""
        kafka = self.kafka
        self.consumer.assign([kafka.TopicPartition(self.topic, partition, kafka.OFFSET_BEGINNING)])
        position = -1  # the next offset to read; -1 before the first record or event
        last_progress = self.monotonic()
        while position < end:
            lines: list[str] = []
            seen = 0
            for message in self.consumer.consume(_BATCH, timeout=_POLL_S):
                error = message.error()
                if error is not None:
                    if error.code() == kafka.KafkaError._PARTITION_EOF:
                        eof = message.offset()
                        if eof is not None and eof > position:
                            position = eof
                            last_progress = self.monotonic()
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
                if offset >= end:  # written after the dump started
                    position = end
                    break
                seen += 1
                position = offset + 1
                line = self.printer.line(partition, offset, message.key(), message.value())
                if line is not None:
                    lines.append(line)
            self.printer.write(lines)
            if seen:
                last_progress = self.monotonic()
                if progress is not None:
                    progress.advance(seen)
            elif position < end and self.monotonic() - last_progress > self.args.timeout:
                raise self._stalled(partition, position, end)

    def follow(self, ends: Mapping[int, int]) -> None:
        """Print the records written from ``ends`` on, as they arrive, until interrupted."""
        kafka = self.kafka
        self.consumer.assign(
            [kafka.TopicPartition(self.topic, p, offset) for p, offset in sorted(ends.items())]
        )
        while True:
            lines: list[str] = []
            for message in self.consumer.consume(_BATCH, timeout=_POLL_S):
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
                line = self.printer.line(partition, offset, message.key(), message.value())
                if line is not None:
                    lines.append(line)
            self.printer.write(lines)


def _error_text(exc: BaseException) -> str:
    first = exc.args[0] if exc.args else exc
    text = getattr(first, "str", None)
    return str(text()) if callable(text) else str(first)


def _summary(args: argparse.Namespace, stats: DumpStats, err: TextIO) -> int:
    if stats.tombstones:
        print(
            f"tierlog: {stats.tombstones} record(s) of {args.topic} have a null value (a "
            "tombstone): Kafka's RemoteLogMetadataFormatter and a Kafka 4.3 broker's RLMM "
            "cannot read them",
            file=err,
        )
    if stats.newer_versions:
        partition, offset, version = stats.newer_versions[0]
        print(
            f"tierlog: {len(stats.newer_versions)} record(s) of {args.topic} have a version "
            f"above 0 (the first at partition {partition}, offset {offset}: version {version}): "
            "their lines look like version 0's, but Kafka 4.3's RemoteLogMetadataFormatter and "
            f'RLMM cannot read them ("Can\'t read version {version} of ...Entry")',
            file=err,
        )
    if not stats.errors:
        return 0
    partition, offset, message = stats.errors[0]
    print(
        f"tierlog: error: {len(stats.errors)} record(s) of {args.topic} did not decode (the "
        f"first at partition {partition}, offset {offset}: {message})",
        file=err,
    )
    return 1


def run_dump(args: argparse.Namespace) -> int:
    from tierlog.progress import Progress

    selection = _check_arguments(args)
    kafka = _load_client()
    errors = kafka.KafkaError
    client_log = _ClientLog(frozenset({errors._AUTHENTICATION, errors.SASL_AUTHENTICATION_FAILED}))
    config = _consumer_config(args, client_log)
    out, err = sys.stdout, sys.stderr
    printer = LinePrinter(args.format, selection, out)
    try:
        consumer = kafka.Consumer(config)
    except (kafka.KafkaException, ValueError) as exc:
        raise ConfigError(f"invalid client configuration: {_error_text(exc)}") from None
    try:
        try:
            dump = _Dump(args, consumer, kafka, printer, client_log)
            count = dump.partition_count()
            partitions = _partitions_to_read(args, selection, count)
            marks = dump.watermarks(partitions)
            total = sum(max(high - low, 0) for low, high in marks.values())
            with contextlib.ExitStack() as stack:
                progress = None
                if total >= PROGRESS_MIN_RECORDS:
                    progress = stack.enter_context(
                        Progress("dump", total, unit="records", file=err)
                    )
                for partition in partitions:
                    low, high = marks[partition]
                    if high > low:
                        dump.read_partition(partition, high, progress)
            if args.follow:
                dump.follow({p: high for p, (_, high) in marks.items()})
        finally:
            consumer.close()  # also delivers the client's last log lines
    except _Unreachable as exc:
        last = client_log.last_problem
        if last and any(word in last.lower() for word in _REFUSED):
            raise TierlogError(
                f"the Kafka cluster at {args.bootstrap_servers} refused the client's security "
                f"settings (--command-config): {last}"
            ) from None
        raise TierlogError(
            f"no answer from the Kafka cluster at {args.bootstrap_servers} within "
            f"{args.timeout:g} s ({exc}" + (f"; {last})" if last else ")")
        ) from None
    return _summary(args, printer.stats, err)
