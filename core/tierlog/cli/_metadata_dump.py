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
  (``tierlog.metadata.topic_reader.client_config``: security protocol, SASL mechanism and
  credentials, including a PLAIN or SCRAM ``sasl.jaas.config``, TLS files in PEM).
- A cluster that does not answer within ``--timeout`` seconds, or a read that makes no progress
  for as long, ends the command with one line on stderr and exit status 2.

The reading is ``tierlog.metadata.topic_reader.MetadataTopicReader`` (what ``tierlog metadata
migrate`` reads with too); this module chooses the partitions and prints. confluent-kafka
(librdkafka) is the client, a dependency of the ``tierlog-rlmm-topic`` plugin, not of tierlog
itself: it is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TextIO

from tierlog.metadata.topic_reader import DEFAULT_TIMEOUT_S, TopicRecord, missing_client_message
from tierlog.spi import (
    InvalidArgumentError,
    MetadataRecordError,
    TopicIdPartition,
    Uuid,
)

if TYPE_CHECKING:
    from tierlog.metadata.serde import DecodedRecord

__all__ = ["add_client_arguments", "add_dump_parser", "run_dump"]

_LOG = logging.getLogger(__name__)

DEFAULT_TOPIC: Final = "__remote_log_metadata"
INT32_MAX: Final = 2**31 - 1
PURPOSE: Final = "tierlog metadata dump --bootstrap-servers"
"""What needs confluent-kafka, in the message when it is missing."""
MISSING_CLIENT: Final = missing_client_message(PURPOSE)
PROGRESS_MIN_RECORDS: Final = 200_000
"""Dumps of fewer records than this show no progress on stderr."""


# Arguments --------------------------------------------------------------------------------------
def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def add_client_arguments(parser: Any, *, command_config_help: str) -> None:
    """``--command-config`` and ``--timeout``: how a ``tierlog metadata`` command that reads a
    topic of the cluster (``dump``, ``migrate``) reaches it."""
    parser.add_argument("--command-config", metavar="FILE", help=command_config_help)
    parser.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="give up when the cluster does not answer, or a read makes no progress, for this "
        f"long (default {DEFAULT_TIMEOUT_S:g})",
    )


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
    add_client_arguments(
        dump,
        command_config_help="client properties as for Kafka's tools: security.protocol, "
        "sasl.mechanism, sasl.jaas.config (PLAIN or SCRAM), sasl.username, sasl.password, "
        "ssl.ca.location, ssl.truststore.location (PEM), ssl.certificate.location, "
        "ssl.key.location, ssl.key.password, ssl.endpoint.identification.algorithm",
    )
    dump.add_argument(
        "--follow",
        action="store_true",
        help="after the dump, print new records as they arrive (in arrival order) until Ctrl-C",
    )
    dump.set_defaults(handler=run_dump)


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

    def print_records(self, records: Sequence[TopicRecord]) -> None:
        """Print the lines of ``records`` the filters keep."""
        lines = []
        for record in records:
            line = self.line(record.partition, record.offset, record.key, record.value)
            if line is not None:
                lines.append(line)
        self.write(lines)

    def write(self, lines: Sequence[str]) -> None:
        if lines:
            self.stats.shown += len(lines)
            self._out.write("\n".join(lines) + "\n")
            self._out.flush()


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
    from tierlog.metadata.topic_reader import MetadataTopicReader, load_client_config
    from tierlog.progress import Progress

    selection = _check_arguments(args)
    out, err = sys.stdout, sys.stderr
    printer = LinePrinter(args.format, selection, out)
    with MetadataTopicReader(
        args.bootstrap_servers,
        args.topic,
        security=load_client_config(args.command_config),
        security_origin="--command-config",
        timeout_s=args.timeout,
        client_id="tierlog-metadata-dump",
        purpose=PURPOSE,
    ) as reader:
        count = reader.partition_count()
        partitions = _partitions_to_read(args, selection, count)
        marks = reader.watermarks(partitions)
        total = sum(max(high - low, 0) for low, high in marks.values())
        with contextlib.ExitStack() as stack:
            progress = None
            if total >= PROGRESS_MIN_RECORDS:
                progress = stack.enter_context(Progress("dump", total, unit="records", file=err))
            for partition in partitions:
                low, high = marks[partition]
                if high > low:
                    for batch in reader.read_batches(partition, high, progress):
                        printer.print_records(batch)
        if args.follow:
            for batch in reader.follow({p: high for p, (_, high) in marks.items()}):
                printer.print_records(batch)
    return _summary(args, printer.stats, err)
