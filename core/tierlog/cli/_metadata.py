"""``tierlog metadata``: decode, encode and place ``__remote_log_metadata`` records, dump a
metadata topic of a Kafka cluster (``dump``, in ``tierlog.cli._metadata_dump``, with the
arguments both commands reach the cluster by), and migrate a legacy metadata topic to the
compacted RLMM's keyed projection (``migrate``: the arguments here, the work in the
``tierlog-rlmm-compacted`` plugin, imported when the command runs).

``decode`` prints exactly what ``encode`` takes, so ``tierlog metadata decode HEX |
tierlog metadata encode -`` gives back ``HEX``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import string
import sys
from typing import Any

from tierlog.cli._metadata_dump import add_client_arguments, add_dump_parser
from tierlog.spi import (
    InvalidArgumentError,
    MetadataRecordError,
    TierlogError,
    TopicIdPartition,
    Uuid,
)

INT32_MAX = 2**31 - 1
_HEX_DIGITS = frozenset(string.hexdigits)

DEFAULT_METADATA_PARTITIONS = 50
"""Kafka's default ``remote.log.metadata.topic.num.partitions``."""
MISSING_COMPACTED_PLUGIN = (
    "tierlog metadata migrate needs the compacted RLMM plugin (tierlog-rlmm-compacted): "
    "pip install plugins/rlmm_compacted"
)


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "metadata",
        help="decode, encode, place and dump __remote_log_metadata records",
        description="Work with __remote_log_metadata record values (Kafka's serde) and dump a "
        "metadata topic of a Kafka cluster.",
    )
    sub = parser.add_subparsers(dest="metadata_command", required=True, metavar="ACTION")

    decode = sub.add_parser(
        "decode",
        help="hex record value -> JSON (or Kafka's console formatter line)",
        description="Decode a record value given as hex (or '-' to read hex from stdin).",
    )
    decode.add_argument(
        "value",
        metavar="HEX|-",
        help="a __remote_log_metadata record value in hex, or - to read it from stdin",
    )
    decode.add_argument(
        "--format",
        choices=("json", "kafka"),
        default="json",
        help="json (default; what `encode` takes) or kafka (RemoteLogMetadataFormatter's line)",
    )
    decode.add_argument(
        "--partition", type=int, default=0, help="metadata partition shown by --format kafka"
    )
    decode.add_argument(
        "--offset", type=int, default=0, help="record offset shown by --format kafka"
    )
    decode.set_defaults(handler=run_decode)

    encode = sub.add_parser(
        "encode",
        help="JSON (as printed by decode) -> hex record value",
        description="Encode the JSON printed by `tierlog metadata decode` (or '-' for stdin).",
    )
    encode.add_argument(
        "value",
        metavar="JSON|-",
        help="the JSON object `tierlog metadata decode` prints, or - to read it from stdin",
    )
    encode.set_defaults(handler=run_encode)

    partition = sub.add_parser(
        "partition",
        help="the __remote_log_metadata partition of a user partition",
        description="Kafka's RemoteLogMetadataTopicPartitioner: which metadata partition holds "
        "the records of a user partition.",
    )
    partition.add_argument("--topic-id", required=True, help="topic id (22-char base64url)")
    partition.add_argument("--partition", type=int, required=True, help="user partition number")
    partition.add_argument(
        "--partitions",
        type=int,
        default=DEFAULT_METADATA_PARTITIONS,
        help="remote.log.metadata.topic.num.partitions (default 50)",
    )
    partition.add_argument(
        "--topic", default="", help="topic name (not part of the hash; shown only)"
    )
    partition.set_defaults(handler=run_partition)

    add_dump_parser(sub)
    add_migrate_parser(sub)


def add_migrate_parser(sub: Any) -> None:
    """Add ``migrate`` to the ``tierlog metadata`` subcommands."""
    migrate = sub.add_parser(
        "migrate",
        help="convert a legacy metadata topic into the compacted RLMM's keyed projection",
        description="Read a remote log metadata topic written by Kafka's "
        "TopicBasedRemoteLogMetadataManager (or tierlog's topic RLMM), write in one transaction "
        "per partition the keyed values that describe every live segment and partition delete "
        "marker (and a copy of each legacy record into the audit topic), verify that a reader "
        "of the keyed records alone, after compaction, sees the same segments, offsets and "
        "states, then set the topic's compaction configs. Safe to run again after an "
        "interruption: it writes only what is missing. Refused while a Kafka broker's RLMM "
        "reads the topic. Exit status: 0 migrated (or already migrated), 1 verification "
        "failed (nothing switched), 2 refused, usage error or cluster unreachable.",
    )
    migrate.add_argument(
        "--bootstrap-servers",
        required=True,
        metavar="HOST:PORT[,HOST:PORT]",
        help="the Kafka cluster's bootstrap servers",
    )
    migrate.add_argument(
        "--topic",
        default="__remote_log_metadata",
        metavar="NAME",
        help="the metadata topic to migrate (default __remote_log_metadata)",
    )
    audit = migrate.add_mutually_exclusive_group()
    audit.add_argument(
        "--audit-topic",
        default="__remote_log_metadata_audit",
        metavar="NAME",
        help="where the legacy records are copied, created if absent (default "
        "__remote_log_metadata_audit; the compacted RLMM's remote.log.metadata.audit.topic.name)",
    )
    audit.add_argument(
        "--no-audit",
        action="store_true",
        help="copy nothing to an audit topic (remote.log.metadata.audit.enable=false)",
    )
    migrate.add_argument(
        "--topic-config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a config of the compacted topic, over the defaults (cleanup.policy=compact, "
        "min.cleanable.dirty.ratio=0.1, delete.retention.ms=86400000, segment.ms=3600000); "
        "repeatable; as remote.log.metadata.topic.config.NAME of the compacted RLMM",
    )
    add_client_arguments(
        migrate,
        command_config_help="client properties as for Kafka's tools (see `tierlog metadata "
        "dump --help`)",
    )
    migrate.add_argument(
        "--dry-run",
        action="store_true",
        help="read, plan and check only: write nothing, set no config",
    )
    migrate.set_defaults(handler=run_migrate)


def run_migrate(args: argparse.Namespace) -> int:
    # By name: tierlog does not depend on its plugins (nor does its type check).
    try:
        module = importlib.import_module("tierlog_rlmm_compacted.migration")
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] == "tierlog_rlmm_compacted":
            raise TierlogError(MISSING_COMPACTED_PLUGIN) from None
        raise
    return int(module.run_migrate(args))


def _read_argument(value: str) -> str:
    return sys.stdin.read() if value == "-" else value


def _parse_hex(text: str) -> bytes:
    """The bytes of a hex record value, as copied from a dump or a log: blanks anywhere and one
    leading ``0x`` are allowed.

    Each kind of bad input gets its own one-line ``MetadataRecordError`` saying what to fix
    (``bytes.fromhex`` calls a missing last digit a "non-hexadecimal number"): no digits at
    all, a character that is not a hex digit (with its position in the input as given), an odd
    number of digits.
    """
    start = len(text) - len(text.lstrip())
    if text.startswith(("0x", "0X"), start):
        start += 2
    digits: list[str] = []
    for position in range(start, len(text)):
        char = text[position]
        if char in _HEX_DIGITS:
            digits.append(char)
        elif not char.isspace():
            raise MetadataRecordError(
                f"hex input has a character that is not hexadecimal: {char!r} at position "
                f"{position}"
            )
    if not digits:
        raise MetadataRecordError("hex input is empty: give the record value as hex digits")
    if len(digits) % 2:
        raise MetadataRecordError(
            f"hex input has an odd number of digits ({len(digits)}): a byte is two digits"
        )
    return bytes.fromhex("".join(digits))


def run_decode(args: argparse.Namespace) -> int:
    from tierlog.metadata.formatter import format_record
    from tierlog.metadata.json_codec import record_to_json
    from tierlog.metadata.serde import decode_record

    decoded = decode_record(_parse_hex(_read_argument(args.value)))
    if args.format == "kafka":
        print(format_record(args.partition, args.offset, decoded.value).rstrip("\n"))
    else:
        print(json.dumps(record_to_json(decoded), indent=2, ensure_ascii=False))
    return 0


def run_encode(args: argparse.Namespace) -> int:
    from tierlog.metadata.json_codec import record_from_json
    from tierlog.metadata.serde import encode_record

    text = _read_argument(args.value)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MetadataRecordError(f"the value is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise MetadataRecordError("the JSON value must be an object, as printed by decode")
    print(encode_record(record_from_json(obj)).hex())
    return 0


def run_partition(args: argparse.Namespace) -> int:
    from tierlog.metadata.partitioner import metadata_partition

    if not 1 <= args.partitions <= INT32_MAX:
        raise InvalidArgumentError(f"--partitions must be in 1..{INT32_MAX}, got {args.partitions}")
    if not 0 <= args.partition <= INT32_MAX:
        raise InvalidArgumentError(f"--partition must be in 0..{INT32_MAX}, got {args.partition}")
    tip = TopicIdPartition(Uuid.from_string(args.topic_id), args.topic, args.partition)
    print(metadata_partition(tip, args.partitions))
    return 0
