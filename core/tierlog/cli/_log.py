"""``tierlog log dump``: print a partition's on-disk files, as Kafka's ``kafka-dump-log.sh``.

Usage::

    tierlog log dump [--deep] [--print-data-log] [--verify-index | --index-sanity-check]
                     [--json] PATH [PATH ...]

A PATH is a segment (``.log``), an offset index (``.index``), a time index (``.timeindex``), a
transaction index (``.txnindex``), a producer snapshot (``.snapshot``), a
``leader-epoch-checkpoint``, a ``tierlog-offsets-checkpoint`` (tierlog's recovery point, log start
offset, high watermark and clean-shutdown flag, ``tierlog.log.recovery``), a
``partition.metadata``, an embedded RLMM's record log ``__remote_log_metadata-<partition>.log``
(``tierlog.metadata.embedded``), or a directory of those (a partition directory, the RLMM's). The
kind comes from the file name (``tierlog.log.files``): Kafka's ``<20 digits>.<kind>``, also with
``.deleted``, ``.cleaned`` or ``.swap`` appended (a segment being deleted, cleaned or swapped in:
recovery deletes or completes it), and the remote layout of the ``local`` RSM,
``<20 digits>-<segmentId>.<kind>`` (and its ``.leader_epoch_checkpoint``), so a tiered copy of a
segment dumps like the local one. A name of any other kind is a usage error; so is a
``<name>.tmp`` left by a write that a crash interrupted (the message says how to read it anyway).

A directory dumps every file of those kinds in it: the partition-level files first, then by
offset, kind, and the live file before its ``.swap``, ``.cleaned`` and ``.deleted`` leftovers.
Every other entry is skipped with its reason (``tierlog: note: skipping PATH: REASON``, and in
JSON ``skipped``): a ``.tmp``, a KRaft snapshot (``.checkpoint``), a subdirectory, a file of no
known kind. Skipping is not an error.

Options (Kafka's ``DumpLogSegments`` names are accepted as aliases):

- ``--deep`` (``--deep-iteration``): also decode every record of every batch;
- ``--print-data-log``: also print keys and values (as UTF-8, invalid bytes replaced, like
  Kafka's ``StringDecoder``); implies ``--deep``, as in Kafka;
- ``--verify-index`` (``--verify-index-only``): instead of listing an ``.index``/``.timeindex``,
  check every entry against its segment (see *Index verification*); a ``.log`` named on the
  command line also gets its two indexes checked after its dump;
- ``--index-sanity-check``: instead of listing an index (``.txnindex`` included), run the check a
  broker runs at startup to decide whether to rebuild it; a ``.log`` named on the command line
  also gets its three indexes checked;
- ``--json``: one JSON document instead of text (see *JSON*).

Text output follows ``kafka-dump-log`` line for line, so the two tools' outputs can be diffed::

    Dumping 00000000000000000000.log
    Log starting offset: 0
    baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1
      producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false
      deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000002 size: 88
      magic: 2 compresscodec: none crc: 1930876812 isvalid: true           (one line)
    | offset: 0 CreateTime: 1700000000000 keySize: 1 valueSize: 5 sequence: -1 headerKeys: [a,b]
      key: k payload: hello                          (--deep; key and payload: --print-data-log)
    ...
    | offset: 3 CreateTime: 1700000000009 keySize: 4 valueSize: 6 sequence: -1 headerKeys: []
      endTxnMarker: COMMIT coordinatorEpoch: 3                             (a control record)

Java's renderings are kept where Kafka prints them (``OptionalLong.empty``, ``OptionalLong[5]``,
``true``/``false``, ``CreateTime``/``LogAppendTime``, the CRC as an unsigned decimal). Other files:
``offset: O position: P`` (offset index), ``timestamp: T offset: O`` (time index), ``version: 0
producerId: .. firstOffset: .. lastOffset: .. lastStableOffset: ..`` (transaction index),
``producerId: .. producerEpoch: .. coordinatorEpoch: .. currentTxnFirstOffset: .. lastTimestamp:
..`` plus ``firstSequence: .. lastSequence: .. lastOffset: .. offsetDelta: .. timestamp: ..`` when
the producer has a batch (producer snapshot), all as Kafka; ``epoch: E startOffset: O``
(leader-epoch-checkpoint), ``recoveryPoint: R logStartOffset: L highWatermark: H cleanShutdown:
true|false`` (tierlog-offsets-checkpoint) and ``version: V topicId: ID`` (partition.metadata),
which Kafka's tool does not read; an index without entries prints ``<file> is empty.``. An embedded
RLMM's record log prints each entry's frame, ``position: P offset: O length: L crc: C isvalid:
true|false`` (``length`` the payload's bytes, ``crc`` its stored CRC-32), then its value as
``kafka-console-consumer`` with Kafka's ``RemoteLogMetadataFormatter`` prints it (``partition: N,
offset: O, value: RemoteLogSegmentMetadata{...}``, ``tierlog.metadata.formatter``). Problems go to
stderr: ``tierlog: error: ...``, one line each, as they are found (corruption, with the file and
byte position), and index mismatches after everything else, in Kafka's words (see *Index
verification*); notes (skipped files, missing indexes) are ``tierlog: note: ...``.

**JSON** (``--json``) is one document on stdout, written as it is produced, so a large segment is
never held in memory::

    {"version": 1, "files": [FILE, ...], "skipped": [{"path": str, "reason": str}, ...],
     "ok": true}

``ok`` is false exactly when the exit code is 1; ``skipped`` lists the directory entries not
dumped. Each FILE has ``kind``, ``path``, ``suffix`` (only for a ``.deleted``, ``.cleaned`` or
``.swap`` file: that suffix), fields of its kind, an array of its items, then a summary and
``errors`` (``[{"message": str, "position": int | null}]``, the same problems as the text's
``tierlog: error:`` lines):

- ``"kind": "log"``: ``baseOffset``; ``batches``: ``{baseOffset, lastOffset, count, baseSequence,
  lastSequence, producerId, producerEpoch, partitionLeaderEpoch, isTransactional, isControl,
  deleteHorizonMs (int | null), position, timestampType ("CreateTime" | "LogAppendTime"),
  maxTimestamp, size, magic, compressCodec, crc, isValid}`` (``isValid`` is Kafka's: the CRC;
  a ``magic`` other than 2 is a batch of unknown format, framed as Kafka's tool frames it and
  also in ``errors``, see *Corrupt input*), with ``--deep`` also ``records``
  (``null`` when the batch's records could not be decoded): ``{offset, timestamp, keySize,
  valueSize, sequence, headerKeys}``, for a control record also ``controlType`` (``"COMMIT"``,
  ``"ABORT"``, ...; ``null`` if unreadable) and, for COMMIT/ABORT, ``coordinatorEpoch``, and with
  ``--print-data-log`` (not for control records) ``key`` and ``payload`` (str | null); summary:
  ``validBytes`` (where the last readable batch ends) and ``trailingBytes`` (the file size
  minus ``validBytes``).
- ``"offset-index"``: ``baseOffset``; ``entries``: ``{offset, position}``.
- ``"time-index"``: ``baseOffset``; ``entries``: ``{timestamp, offset}``.
- With ``--verify-index`` an index has ``mismatches`` instead of ``entries``: ``{check, entry,
  offset, position, logOffset, message}`` (offset index) or ``{check, entry, timestamp, offset,
  logOffset, logTimestamp, message}`` (time index), one per failed check of an entry (``check``
  names it, see *Index verification*), where ``logOffset``/``logTimestamp`` are what the segment
  holds there (``null`` when it holds no batch there, or the check is not about the segment);
  summary: ``segment`` and ``entriesChecked``. With ``--index-sanity-check`` there is no array;
  summary: ``sanityCheck`` (``"passed"`` | ``"failed"``).
- ``"txn-index"``: ``baseOffset``; ``entries``: ``{version, producerId, firstOffset, lastOffset,
  lastStableOffset}``.
- ``"producer-snapshot"``: ``entries``: ``{producerId, producerEpoch, coordinatorEpoch,
  currentTxnFirstOffset (int | null), lastTimestamp, firstSequence (int | null), lastSequence,
  lastOffset, offsetDelta, timestamp}`` (the stored fields; ``firstSequence`` is derived as
  Kafka does and ``null`` when the producer has no batch, ``lastOffset`` -1).
- ``"leader-epoch-checkpoint"``: ``entries``: ``{epoch, startOffset}``.
- ``"offsets-checkpoint"``: ``recoveryPoint``, ``logStartOffset``, ``highWatermark``,
  ``cleanShutdown`` (bool); no array.
- ``"partition-metadata"``: ``version``, ``topicId``; no array.
- ``"remote-log-metadata"``: ``partition``; ``records``: ``{offset, position, length, crc,
  isValid, value, formatted}``, ``value`` the record as ``tierlog metadata decode`` prints it
  (``tierlog.metadata.json_codec``) and ``formatted`` Kafka's formatter line (both ``null`` when
  the entry's CRC fails or its value does not decode); summary: ``validBytes``,
  ``trailingBytes``.

**Index verification** (``--verify-index``) makes Kafka's checks (``DumpLogSegments.dumpIndex``
and ``dumpTimeIndex``) and those Kafka's tool dies on or leaves to the broker's sanity check; the
checks are ``tierlog.log.index_verify``'s, this module only renders their findings. Each
failed check of an entry is one mismatch; in the text they come after the dump, on stderr, grouped
by check and index (its absolute path) under Kafka's titles, so a script that reads
``kafka-dump-log``'s report reads this one::

    Mismatches in :/data/t-0/00000000000000000000.index            (check "log-offset")
      Index offset: 8, log offset: 7
      Index offset: 9, log offset: -1 (position 9999 is past the end of the 4210-byte segment)
    Found timestamp mismatch in :/data/t-0/00000000000000000000.timeindex      ("timestamp")
      Index timestamp: 1700000000050, log timestamp: 1700000000006
    Found out of order timestamp in :PATH                                 ("timestamp-order")
      Index timestamp: T, Previously indexed timestamp: P
    The following indexed offsets are not found in :PATH                 ("offset-not-found")
    Indexed offset: 8, found log offset: 9
    Found out of order offset in :PATH                                       ("offset-order")
      Index offset: O, Previously indexed offset: P
    Found out of order position in :PATH                    ("position-order", offset index)
      Index offset: O, position: P, Previously indexed position: Q
    Found offset below the base offset in :PATH                         ("below-base-offset")
      Index offset: O, base offset: B

The first four titles and their lines are Kafka's (a reason in parentheses is added where Kafka's
tool has none); the last three are tierlog's, in the same style. Offset index entry: its offset
is at least the base offset and above the previous entry's, its position above the previous
entry's, and at its position the segment holds a v2 batch that fits in the segment and whose
last offset is the entry's (a negative position, one past the end, one inside a batch or on a
batch that overflows the segment is ``log offset: -1`` with the reason). Time index entry: its
offset is at least the base offset and not below the previous entry's, its timestamp above the
previous entry's (above -1 for the first, as Kafka checks), the first batch whose last offset is
>= the entry's ends exactly there (else not found; where the segment cannot be read further, the
rest are not found, as Kafka's iterator ends there), and that batch's max timestamp is the
entry's; with ``--deep`` it is its records' largest timestamp, as Kafka's tool computes it.
Lines are in index order (Kafka's tool sorts the offset index's by descending offset and keeps one
per offset). Kafka's tool stops at the first entry after the first that equals the base offset
(the zero-filled tail of an index a crash left preallocated); tierlog's index reader drops such a
trailing run of zero slots on opening (``tierlog.log.index``), so it is not verified either, and
a zero entry followed by written ones is reported (it breaks the order).

**Corrupt input** never ends in a traceback: what could be read is printed, then the error names
the file and byte position. A batch with a wrong CRC is printed with ``isvalid: false`` and the
dump goes on with the next batch (its length still frames the file, as Kafka's tool does). So
does a batch whose magic byte is above 2 (3 to 127, a format no Kafka writes) when its length is
one a v2 batch can have and ends inside the file: Kafka's tool reads any magic from 2 up as a v2
batch, so it is printed as one, with its ``magic: M``, ``isvalid`` from its CRC (which does not
cover the magic byte) and, with ``--deep``, its records decoded as v2's, and the dump goes on
after it; tierlog also reports it as an error (``invalid magic byte M``, with its position), so
the exit code is 1 where Kafka's tool exits 0. A torn or malformed frame (truncated tail, bad
length, a negative magic byte, a magic above 2 without such a length) ends the file's dump with
Kafka's ``Found N invalid bytes at the end of NAME``; a legacy batch (magic 0 or 1) gives the
typed ``UnsupportedRecordFormatError`` message. Records that fail to decode are reported and the
dump goes on with the next batch. An RLMM record log is checked the same way, entry by entry: a
CRC mismatch is reported and the dump goes on, a frame cut short or with an impossible length
ends it; the file is never repaired (opening it with the RLMM would truncate a torn tail).

Exit codes: 0 nothing wrong; 1 a file is corrupt, unreadable or unsupported, or an index does
not match its segment; 2 usage errors (an unknown file kind, a missing path), found before
anything is printed. ``kafka-dump-log`` exits 0 whatever its verification finds; a script that
checks a partition needs the exit code, so tierlog's is 1 for any mismatch.

Segments are streamed with ``tierlog.log.reader.iter_batches`` (headers, CRC-checked in the
reader's fast path); a batch is read again with ``os.pread`` only to decode its records or to
frame again a batch the reader refused (to recheck its CRC, or to take an unknown magic's length).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import struct
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from tierlog.log.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    HEADER,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
    ControlRecordType,
    RecordBatch,
    TimestampType,
    UnsupportedRecordFormatError,
    bad_magic,
    corrupt,
    crc_mismatch,
    decode_control_record,
    decode_records,
    increment_sequence,
)
from tierlog.log.batch_at import header_at, pread_exact
from tierlog.log.compression import CompressionType
from tierlog.log.crc import crc32c
from tierlog.log.files import (
    CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    LEADER_EPOCH_CHECKPOINT_FILENAME,
    LOG_FILE_SUFFIX,
    PARTITION_METADATA_FILENAME,
    PRODUCER_SNAPSHOT_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    parse_segment_file_name,
)
from tierlog.log.index_verify import (
    Check,
    IndexMismatch,
    SegmentReadError,
    verify_offset_index,
    verify_time_index,
)
from tierlog.log.reader import iter_batches
from tierlog.log.record import Record
from tierlog.spi import CorruptRecordError, InvalidArgumentError, TierlogError

if TYPE_CHECKING:
    from tierlog.log.offset_index import OffsetIndex
    from tierlog.log.time_index import TimeIndex

JSON_FORMAT_VERSION: Final = 1
"""``version`` of the ``--json`` document; raised only for a change that breaks a reader."""

_REMOTE_EPOCH_SUFFIX: Final = ".leader_epoch_checkpoint"
"""The ``local`` RSM's (LocalTieredStorage's) name for a segment's leader epoch checkpoint."""

_CHUNK: Final = 1 << 20
"""Bytes per ``pread`` when a batch's CRC is recomputed outside the reader."""

_CONTROL_KEY: Final = struct.Struct(">hh")
_TYPE_NAMES: Final = {
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}


class Kind(Enum):
    """What a file holds; the value is the ``kind`` of the JSON output."""

    PARTITION_METADATA = "partition-metadata"
    LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
    OFFSETS_CHECKPOINT = "offsets-checkpoint"
    LOG = "log"
    OFFSET_INDEX = "offset-index"
    TIME_INDEX = "time-index"
    TXN_INDEX = "txn-index"
    PRODUCER_SNAPSHOT = "producer-snapshot"
    REMOTE_LOG_METADATA = "remote-log-metadata"


_KIND_BY_SUFFIX: Final = {
    LOG_FILE_SUFFIX: Kind.LOG,
    INDEX_FILE_SUFFIX: Kind.OFFSET_INDEX,
    TIME_INDEX_FILE_SUFFIX: Kind.TIME_INDEX,
    TXN_INDEX_FILE_SUFFIX: Kind.TXN_INDEX,
    PRODUCER_SNAPSHOT_FILE_SUFFIX: Kind.PRODUCER_SNAPSHOT,
    _REMOTE_EPOCH_SUFFIX: Kind.LEADER_EPOCH_CHECKPOINT,
}
_SUFFIX_BY_KIND: Final = {kind: suffix for suffix, kind in _KIND_BY_SUFFIX.items()}
_ORDER: Final = {kind: n for n, kind in enumerate(Kind)}
"""Order of the files of one offset in a directory dump (the enum's order)."""
_EXTRA_ORDER: Final = {"": 0, SWAP_FILE_SUFFIX: 1, CLEANED_FILE_SUFFIX: 2, DELETED_FILE_SUFFIX: 3}
"""Then a live file before the leftovers of a swap, a clean and a deletion."""
_TEMP_SUFFIX: Final = ".tmp"
"""What ``tierlog._durable.atomic_write`` (Kafka's checkpoint writes too) appends while writing."""

_REMOTE_NAME: Final = re.compile(
    r"([0-9]+)-[A-Za-z0-9_-]{22}("
    + "|".join(re.escape(s) for s in sorted(_KIND_BY_SUFFIX, key=len, reverse=True))
    + r")"
)
"""``<startOffset>-<segmentId><suffix>``, a segment's file in the ``local`` RSM's layout."""

_METADATA_LOG_NAME: Final = re.compile(r"__remote_log_metadata-([0-9]+)\.log")
"""The embedded RLMM's record log of one ``__remote_log_metadata`` partition
(``tierlog.metadata.embedded``): ``__remote_log_metadata-<partition>.log``."""
_METADATA_DIR_FILES: Final = {
    "rlmm.properties": "the embedded RLMM's settings, not a record log",
    ".lock": "the embedded RLMM's lock file",
}
"""The other files of the embedded RLMM's directory, and why they are not dumped."""

_KNOWN_KINDS: Final = (
    "a segment (.log), an offset index (.index), a time index (.timeindex), a transaction "
    "index (.txnindex), a producer snapshot (.snapshot), leader-epoch-checkpoint, "
    "tierlog-offsets-checkpoint, partition.metadata, an embedded RLMM's "
    "__remote_log_metadata-<partition>.log or a directory of those; segment files are named by "
    "their offset, e.g. 00000000000000000000.log"
)


class Mode(Enum):
    """What to do with the indexes: list them, verify them against the segment, or sanity-check."""

    LIST = "list"
    VERIFY = "verify"
    SANITY = "sanity"


@dataclass(frozen=True, slots=True)
class Target:
    """A file to dump: its kind and, for a segment's files, the offset and stem of its name.

    ``stem`` + a kind's suffix + ``extra`` (``.deleted``, ``.swap``...) names a sibling file, so
    an index finds its segment in both Kafka's and the remote layout. Kafka renames all the files
    of a segment at once, so a suffixed file's siblings carry the same suffix.
    """

    path: Path
    kind: Kind
    offset: int | None = None
    stem: str | None = None
    extra: str = ""
    partition: int | None = None
    """The ``__remote_log_metadata`` partition of an embedded RLMM's record log."""

    def sibling(self, kind: Kind) -> Path | None:
        """The file of ``kind`` of the same segment (same ``extra``), if it exists.

        An index scheduled for deletion is never checked against the live segment that may
        have taken its name since.
        """
        if self.stem is None:
            return None
        candidate = self.path.with_name(f"{self.stem}{_SUFFIX_BY_KIND[kind]}{self.extra}")
        return candidate if candidate.is_file() else None


def classify(path: Path) -> Target | None:
    """The ``Target`` a file's name describes, or ``None`` for a name of no known kind."""
    from tierlog.log.recovery import OFFSETS_CHECKPOINT_FILENAME

    name = path.name
    if name == PARTITION_METADATA_FILENAME:
        return Target(path, Kind.PARTITION_METADATA)
    if name == LEADER_EPOCH_CHECKPOINT_FILENAME:
        return Target(path, Kind.LEADER_EPOCH_CHECKPOINT)
    if name == OFFSETS_CHECKPOINT_FILENAME:
        return Target(path, Kind.OFFSETS_CHECKPOINT)
    metadata_log = _METADATA_LOG_NAME.fullmatch(name)
    if metadata_log is not None:
        return Target(path, Kind.REMOTE_LOG_METADATA, partition=int(metadata_log.group(1)))
    parsed = parse_segment_file_name(name)
    if parsed is not None:
        stem = name[: name.index(".")]
        return Target(path, _KIND_BY_SUFFIX[parsed.kind], parsed.offset, stem, parsed.suffix)
    match = _REMOTE_NAME.fullmatch(name)
    if match is not None:
        stem = name[: match.start(2)]
        return Target(path, _KIND_BY_SUFFIX[match.group(2)], int(match.group(1)), stem)
    return None


# --- output ------------------------------------------------------------------------------------


_CHECK_TITLES: Final = {
    Check.LOG_OFFSET: "Mismatches in :{}",
    Check.TIMESTAMP: "Found timestamp mismatch in :{}",
    Check.TIMESTAMP_ORDER: "Found out of order timestamp in :{}",
    Check.OFFSET_NOT_FOUND: "The following indexed offsets are not found in :{}",
    Check.OFFSET_ORDER: "Found out of order offset in :{}",
    Check.POSITION_ORDER: "Found out of order position in :{}",
    Check.BELOW_BASE_OFFSET: "Found offset below the base offset in :{}",
}
"""Kafka's title line of each group of mismatches (``{}``: the index's absolute path)."""


class Printer:
    """Where a dump goes: Kafka's text lines or one JSON document, both written as they come.

    A file's dump is ``begin``, ``item``... (and ``mismatch``... in verification), ``summary``,
    ``problem``..., ``end``. The JSON is streamed by hand (the head of a file's object, its array
    one element at a time, then its summary and errors) because ``json.dump`` of a whole segment
    would hold it in memory. ``problems`` counts what makes the exit code 1.

    In text, index mismatches are kept and written to stderr by ``finish``, grouped by kind and
    file under Kafka's titles, because that is where and how ``kafka-dump-log`` reports them.
    """

    def __init__(self, as_json: bool, out: TextIO, err: TextIO) -> None:
        self.problems = 0
        self._json = as_json
        self._out = out
        self._err = err
        self._open = False
        self._path: Path | None = None
        self._mismatches: dict[Check, dict[str, list[str]]] = {}
        self._skipped: list[dict[str, str]] = []
        self._files = 0
        self._items_key: str | None = None
        self._items = 0
        self._summary: dict[str, Any] = {}
        self._errors: list[dict[str, Any]] = []
        if as_json:
            out.write(f'{{"version": {JSON_FORMAT_VERSION}, "files": [')

    @property
    def in_file(self) -> bool:
        return self._open

    def begin(
        self,
        target: Target,
        fields: dict[str, Any] | None = None,
        *,
        items: str | None,
        lines: Sequence[str] = (),
    ) -> None:
        """Start a file: ``Dumping PATH`` and its header ``lines``, or its JSON object's head."""
        self._open = True
        self._path = target.path
        self._items_key = items
        self._items = 0
        self._summary = {}
        self._errors = []
        if not self._json:
            self._out.write(f"Dumping {target.path}\n")
            for line in lines:
                self._out.write(line + "\n")
            return
        head = {"kind": target.kind.value, "path": str(target.path)}
        if target.extra:
            head["suffix"] = target.extra
        head.update(fields or {})
        self._out.write(("\n " if self._files == 0 else ",\n ") + json.dumps(head)[:-1])
        if items is not None:
            self._out.write(f', "{items}": [')
        self._files += 1

    def item(self, obj: dict[str, Any], text: Callable[[dict[str, Any]], str]) -> None:
        """One batch or entry: ``text(obj)`` as a line (or lines), or ``obj`` in the array."""
        if self._json:
            self._out.write(("\n  " if self._items == 0 else ",\n  ") + json.dumps(obj))
            self._items += 1
        else:
            self._out.write(text(obj) + "\n")

    def line(self, text: str) -> None:
        """A line of the text output only (its facts are in the JSON summary)."""
        if not self._json:
            self._out.write(text + "\n")

    def summary(self, **fields: Any) -> None:
        """Facts about the file known after its items (JSON fields after the array)."""
        self._summary.update(fields)

    def problem(self, message: str, position: int | None = None) -> None:
        """Something wrong with the file's content: counted, on stderr or in ``errors``."""
        self.problems += 1
        if self._json:
            self._errors.append({"message": message, "position": position})
        else:
            self._out.flush()
            self._err.write(f"tierlog: error: {message}\n")

    def mismatch(self, check: Check, obj: dict[str, Any], line: str) -> None:
        """An index entry that does not match its segment: counted; ``obj`` in the JSON array,
        or Kafka's ``line`` kept for ``finish``."""
        self.problems += 1
        if self._json:
            self.item({"check": check.value, **obj}, str)
        else:
            assert self._path is not None
            by_file = self._mismatches.setdefault(check, {})
            by_file.setdefault(os.path.abspath(self._path), []).append(line)

    def note(self, message: str) -> None:
        """Information that is not a problem (a missing index), on stderr in both formats."""
        self._out.flush()
        self._err.write(f"tierlog: note: {message}\n")

    def skip(self, path: Path, reason: str) -> None:
        """A directory entry that is not dumped: a note, and in JSON an element of ``skipped``."""
        self.note(f"skipping {path}: {reason}")
        self._skipped.append({"path": str(path), "reason": reason})

    def end(self) -> None:
        """Finish the current file (idempotent)."""
        if not self._open:
            return
        self._open = False
        if not self._json:
            return
        out = self._out
        if self._items_key is not None:
            out.write("\n ]" if self._items else "]")
        for key, value in self._summary.items():
            out.write(f", {json.dumps(key)}: {json.dumps(value)}")
        out.write(f', "errors": {json.dumps(self._errors)}}}')

    def finish(self) -> None:
        """Close the JSON document, or write the text's index mismatches (after the last file)."""
        self.end()
        if self._json:
            ok = "true" if self.problems == 0 else "false"
            self._out.write(
                ("\n" if self._files else "")
                + f'], "skipped": {json.dumps(self._skipped)}, "ok": {ok}}}\n'
            )
        self._out.flush()
        for check in Check:
            for path, lines in self._mismatches.get(check, {}).items():
                self._err.write(_CHECK_TITLES[check].format(path) + "\n")
                for line in lines:
                    self._err.write(line + "\n")
        self._err.flush()


def _java_bool(value: bool) -> str:
    return "true" if value else "false"


def _optional_long(value: int | None) -> str:
    """Java's ``OptionalLong.toString``, which Kafka prints as is."""
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _text(data: bytes | None) -> str | None:
    """Kafka's ``StringDecoder``: UTF-8 with invalid bytes replaced."""
    return None if data is None else data.decode("utf-8", "replace")


def _problem_from(printer: Printer, exc: BaseException, path: Path) -> None:
    """Report an exception met while dumping ``path``, with its position when it has one."""
    if isinstance(exc, OSError):
        printer.problem(f"cannot read {path}: {exc.strerror or exc}")
        return
    position = getattr(exc, "position", None)
    printer.problem(str(exc), position if isinstance(position, int) else None)


# --- segments ----------------------------------------------------------------------------------


def _batch_crc(fd: int, position: int, header: RecordBatch) -> int:
    """CRC-32C of a batch's bytes 21 to its end, read in chunks (a batch may be large)."""
    at = position + ATTRIBUTES_OFFSET
    end = position + header.size_in_bytes
    crc = 0
    while at < end:
        data = os.pread(fd, min(_CHUNK, end - at), at)
        if not data:
            break
        crc = crc32c(data, crc)
        at += len(data)
    return crc


def _unknown_magic_frame(fd: int, position: int, file_size: int) -> RecordBatch | None:
    """The header at ``position`` if it frames a batch of an unknown magic (3 to 127), else None.

    Kafka's ``FileLogInputStream`` takes any magic byte from 2 up (a Java byte, so 2 to 127) for
    a v2 batch and frames it by its ``Length`` alone: its tool prints it with that magic, and
    ``isvalid`` (the CRC, which does not cover the magic byte) as for any v2 batch, then goes
    on. The frame is taken here only when the ``Length`` is one a v2 batch can have and ends
    inside the file (Kafka's tool stops at a batch overflowing the file, and dies on one shorter
    than a v2 header).
    """
    data = os.pread(fd, RECORD_BATCH_OVERHEAD, position)
    if len(data) < RECORD_BATCH_OVERHEAD:
        return None
    header = RecordBatch._make(HEADER.unpack_from(data))
    if header.magic <= MAGIC_V2:  # 0 and 1 are legacy, negative is no format (signed byte)
        return None
    if not MIN_BATCH_LENGTH <= header.length <= file_size - position - LOG_OVERHEAD:
        return None
    return header


def scan_segment(
    path: Path, fd: int, file_size: int
) -> Iterator[tuple[int, RecordBatch, int | None]]:
    """Yield ``(position, header, computed_crc)`` per batch; ``computed_crc`` only for a bad CRC.

    This is the dump's scan only: the log's own reading (recovery, appends) stops at the first
    batch it cannot read, as Kafka's recovery does. The reader's CRC-checked fast path does the
    work. When it stops at a batch, the batch is framed again here, as Kafka's tool frames it:

    - if its header and length are sound, only its CRC can be wrong, so it is yielded with the
      computed CRC and the scan resumes after it (Kafka's tool prints an invalid batch and goes
      on);
    - if its magic byte is above 2 (a format no Kafka writes) but its length frames a batch
      inside the file, it is yielded as a v2 batch with that magic in its header (and the
      computed CRC if that is wrong too), and the scan resumes after it: Kafka's tool reads any
      magic from 2 up as a v2 batch, prints it with its magic and goes on. The caller reports
      the magic (``header.magic != MAGIC_V2``).

    Any other error (a torn or malformed frame, an impossible length, a legacy or negative
    magic byte) is raised after everything before it was yielded.
    """
    start = 0
    while start < file_size:
        try:
            for position, header in iter_batches(path, verify_crc=True, start=start):
                yield position, header, None
            return
        except CorruptRecordError as exc:
            error = exc
        at = error.position
        if at is None:
            raise error
        framed: RecordBatch | None
        try:
            framed = header_at(fd, at, file_size, path)
        except TierlogError:
            framed = _unknown_magic_frame(fd, at, file_size)
            if framed is None:
                raise error from None
        computed = _batch_crc(fd, at, framed)
        if framed.magic == MAGIC_V2 and computed == framed.crc:
            raise error
        yield at, framed, None if computed == framed.crc else computed
        start = at + framed.size_in_bytes


def _batch_obj(position: int, h: RecordBatch) -> dict[str, Any]:
    codec_id = h.attributes & COMPRESSION_CODEC_MASK
    codec = (
        CompressionType(codec_id).kafka_name
        if codec_id <= CompressionType.ZSTD
        else f"unknown({codec_id})"
    )
    return {
        "baseOffset": h.base_offset,
        "lastOffset": h.last_offset,
        "count": h.records_count,
        "baseSequence": h.base_sequence,
        "lastSequence": h.last_sequence,
        "producerId": h.producer_id,
        "producerEpoch": h.producer_epoch,
        "partitionLeaderEpoch": h.partition_leader_epoch,
        "isTransactional": h.is_transactional,
        "isControl": h.is_control,
        "deleteHorizonMs": h.delete_horizon_ms,
        "position": position,
        "timestampType": _TYPE_NAMES[h.timestamp_type],
        "maxTimestamp": h.max_timestamp,
        "size": h.size_in_bytes,
        "magic": h.magic,
        "compressCodec": codec,
        "crc": h.crc,
        "isValid": True,
    }


def _batch_text(b: dict[str, Any]) -> str:
    """Kafka's ``printBatchLevel`` line, then its ``printRecordMetadata`` lines."""
    line = (
        f"baseOffset: {b['baseOffset']} lastOffset: {b['lastOffset']} count: {b['count']} "
        f"baseSequence: {b['baseSequence']} lastSequence: {b['lastSequence']} "
        f"producerId: {b['producerId']} producerEpoch: {b['producerEpoch']} "
        f"partitionLeaderEpoch: {b['partitionLeaderEpoch']} "
        f"isTransactional: {_java_bool(b['isTransactional'])} "
        f"isControl: {_java_bool(b['isControl'])} "
        f"deleteHorizonMs: {_optional_long(b['deleteHorizonMs'])} position: {b['position']} "
        f"{b['timestampType']}: {b['maxTimestamp']} size: {b['size']} magic: {b['magic']} "
        f"compresscodec: {b['compressCodec']} crc: {b['crc']} isvalid: {_java_bool(b['isValid'])}"
    )
    records = b.get("records")
    if not records:
        return line
    type_name = b["timestampType"]
    return "\n".join([line, *(_record_text(r, type_name) for r in records)])


def _record_obj(
    h: RecordBatch,
    r: Record,
    *,
    print_data: bool,
    problems: list[tuple[str, int | None]],
    position: int,
    path: Path,
) -> dict[str, Any]:
    """One record's fields as Kafka prints them; control record errors go to ``problems``."""
    delta = r.offset_delta if r.offset_delta is not None else r.offset - h.base_offset
    obj: dict[str, Any] = {
        "offset": r.offset,
        "timestamp": r.timestamp,
        "keySize": -1 if r.key is None else len(r.key),
        "valueSize": -1 if r.value is None else len(r.value),
        "sequence": increment_sequence(h.base_sequence, delta) if h.base_sequence >= 0 else -1,
        # Header keys are decoded with surrogateescape; show invalid bytes as U+FFFD.
        "headerKeys": [
            k.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for k, _ in r.headers
        ],
    }
    if h.is_control:
        try:
            control = decode_control_record(r)
        except CorruptRecordError as exc:
            obj["controlType"] = None
            problems.append(
                (
                    f"{exc} (control record at offset {r.offset} of the batch at position "
                    f"{position} of {path})",
                    position,
                )
            )
        else:
            if control.type is ControlRecordType.UNKNOWN:
                assert r.key is not None  # decode_control_record refuses a short key
                obj["controlType"] = f"UNKNOWN({_CONTROL_KEY.unpack_from(r.key)[1]})"
            else:
                obj["controlType"] = control.type.name
            if control.coordinator_epoch is not None:
                obj["coordinatorEpoch"] = control.coordinator_epoch
    elif print_data:
        obj["key"] = _text(r.key)
        obj["payload"] = _text(r.value)
    return obj


def _record_text(r: dict[str, Any], type_name: str) -> str:
    """Kafka's record line: metadata, control marker, then key and payload."""
    parts = [
        f"| offset: {r['offset']} {type_name}: {r['timestamp']} keySize: {r['keySize']} "
        f"valueSize: {r['valueSize']} sequence: {r['sequence']} "
        f"headerKeys: [{','.join(r['headerKeys'])}]"
    ]
    control = r.get("controlType", False)
    if "coordinatorEpoch" in r:
        parts.append(f" endTxnMarker: {control} coordinatorEpoch: {r['coordinatorEpoch']}")
    elif control:
        parts.append(f" controlType: {control}")
    if r.get("key") is not None:
        parts.append(f" key: {r['key']}")
    if r.get("payload") is not None:
        parts.append(f" payload: {r['payload']}")
    return "".join(parts)


def dump_log(printer: Printer, target: Target, *, deep: bool, print_data: bool) -> None:
    """A segment, batch by batch (and record by record with ``deep``), as ``dumpLog``."""
    path = target.path
    base = target.offset if target.offset is not None else 0
    printer.begin(
        target, {"baseOffset": base}, items="batches", lines=[f"Log starting offset: {base}"]
    )
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        file_size = os.fstat(fd).st_size
        valid = 0
        try:
            for position, header, bad_crc in scan_segment(path, fd, file_size):
                _dump_batch(
                    printer,
                    path,
                    fd,
                    position,
                    header,
                    bad_crc=bad_crc,
                    deep=deep,
                    print_data=print_data,
                )
                valid = position + header.size_in_bytes
        except CorruptRecordError as exc:
            printer.line(f"Found {file_size - valid} invalid bytes at the end of {path.name}")
            _problem_from(printer, exc, path)
        except UnsupportedRecordFormatError as exc:
            _problem_from(printer, exc, path)
        printer.summary(validBytes=valid, trailingBytes=file_size - valid)


def _dump_batch(
    printer: Printer,
    path: Path,
    fd: int,
    position: int,
    header: RecordBatch,
    *,
    bad_crc: int | None,
    deep: bool,
    print_data: bool,
) -> None:
    obj = _batch_obj(position, header)
    problems: list[tuple[str, int | None]] = []
    if header.magic != MAGIC_V2:
        # Printed as Kafka's tool prints it (a v2 batch with this magic), but it is damage.
        problems.append((str(bad_magic(header.magic, position, str(path))), position))
    if bad_crc is not None:
        obj["isValid"] = False
        problems.append((str(crc_mismatch(header.crc, bad_crc, position, str(path))), position))
    if deep:
        try:
            block = pread_exact(
                fd,
                header.size_in_bytes - RECORD_BATCH_OVERHEAD,
                position + RECORD_BATCH_OVERHEAD,
                path,
            )
            records = decode_records(header, block, path=str(path), position=position)
        except TierlogError as exc:
            obj["records"] = None
            message = str(exc)
            if not isinstance(exc, CorruptRecordError):
                message += f" (batch at position {position} of {path})"
            problems.append((message, getattr(exc, "position", position)))
        else:
            obj["records"] = [
                _record_obj(
                    header,
                    r,
                    print_data=print_data,
                    problems=problems,
                    position=position,
                    path=path,
                )
                for r in records
            ]
    elif header.attributes & COMPRESSION_CODEC_MASK > CompressionType.ZSTD:
        # Deep iteration reports this when decoding; a shallow dump must say it too.
        err = corrupt(
            f"unknown compression type id {header.attributes & COMPRESSION_CODEC_MASK} in "
            "record batch",
            position,
            str(path),
        )
        problems.append((str(err), position))
    printer.item(obj, _batch_text)
    for message, at in problems:
        printer.problem(message, at)


# --- indexes -----------------------------------------------------------------------------------


def _partial_entry(printer: Printer, path: Path, length: int, entry_size: int) -> None:
    """Report bytes after the last whole entry (Kafka ignores them; they mean a torn write)."""
    if length % entry_size:
        tail = length - length % entry_size
        printer.problem(
            f"index {path} is {length} bytes, not a multiple of the {entry_size}-byte entry "
            f"size: partial entry at position {tail}",
            tail,
        )


def _offset_entry_text(e: dict[str, Any]) -> str:
    return f"offset: {e['offset']} position: {e['position']}"


def _time_entry_text(e: dict[str, Any]) -> str:
    return f"timestamp: {e['timestamp']} offset: {e['offset']}"


def dump_offset_index(printer: Printer, target: Target, mode: Mode) -> None:
    """An offset index: its entries (``dumpIndex``), or its verification or sanity check."""
    from tierlog.log.offset_index import OffsetIndex

    base = target.offset if target.offset is not None else 0
    items = {Mode.LIST: "entries", Mode.VERIFY: "mismatches", Mode.SANITY: None}[mode]
    printer.begin(target, {"baseOffset": base}, items=items)
    log_path = target.sibling(Kind.LOG)
    with OffsetIndex(target.path, base, writable=False) as index:
        if mode is Mode.SANITY:
            segment_size = log_path.stat().st_size if log_path is not None else None
            _sanity(printer, target, lambda: index.sanity_check(segment_size))
            return
        if mode is Mode.VERIFY:
            if log_path is None:
                printer.problem(f"cannot verify {target.path}: its segment file does not exist")
            else:
                _verify_offset_index(printer, index, log_path)
        else:
            if index.entries == 0:
                printer.line(f"{target.path} is empty.")
            for entry in index:
                printer.item(
                    {"offset": entry.offset, "position": entry.position}, _offset_entry_text
                )
        _partial_entry(printer, target.path, index.length, index.ENTRY_SIZE)


def dump_time_index(printer: Printer, target: Target, mode: Mode, *, deep: bool = False) -> None:
    """A time index: its entries (``dumpTimeIndex``), or its verification or sanity check.

    ``deep`` verifies timestamps against the records, not only the batch headers.
    """
    from tierlog.log.time_index import TimeIndex

    base = target.offset if target.offset is not None else 0
    items = {Mode.LIST: "entries", Mode.VERIFY: "mismatches", Mode.SANITY: None}[mode]
    printer.begin(target, {"baseOffset": base}, items=items)
    with TimeIndex(target.path, base, writable=False) as index:
        if mode is Mode.SANITY:
            _sanity(printer, target, index.sanity_check)
            return
        if mode is Mode.VERIFY:
            log_path = target.sibling(Kind.LOG)
            if log_path is None:
                printer.problem(f"cannot verify {target.path}: its segment file does not exist")
            else:
                _verify_time_index(printer, index, log_path, deep=deep)
        else:
            if index.entries == 0:
                printer.line(f"{target.path} is empty.")
            for entry in index:
                printer.item(
                    {"timestamp": entry.timestamp, "offset": entry.offset}, _time_entry_text
                )
        _partial_entry(printer, target.path, index.length, index.ENTRY_SIZE)


def _sanity(printer: Printer, target: Target, check: Callable[[], None]) -> None:
    """Kafka's ``--index-sanity-check``: the check a broker runs before trusting an index."""
    try:
        check()
    except CorruptRecordError as exc:
        printer.summary(sanityCheck="failed")
        _problem_from(printer, exc, target.path)
    else:
        printer.summary(sanityCheck="passed")
        printer.line(f"{target.path} passed sanity check.")


def _mismatch_line(m: IndexMismatch) -> str:
    """A mismatch in Kafka's words, the line under its ``Check``'s title (``DumpLogSegments``)."""
    kind, offset = m.kind, m.offset
    if kind is Check.BELOW_BASE_OFFSET:
        return f"  Index offset: {offset}, base offset: {m.compared_with}"
    if kind is Check.OFFSET_ORDER:
        return f"  Index offset: {offset}, Previously indexed offset: {m.compared_with}"
    if kind is Check.POSITION_ORDER:
        return (
            f"  Index offset: {offset}, position: {m.segment_position}, Previously indexed "
            f"position: {m.compared_with}"
        )
    if kind is Check.TIMESTAMP_ORDER:
        return f"  Index timestamp: {m.timestamp}, Previously indexed timestamp: {m.compared_with}"
    if kind is Check.TIMESTAMP:
        return f"  Index timestamp: {m.timestamp}, log timestamp: {m.log_timestamp}"
    log_offset = -1 if m.log_offset is None else m.log_offset
    reason = f" ({m.reason})" if m.reason is not None else ""
    if kind is Check.OFFSET_NOT_FOUND:
        return f"Indexed offset: {offset}, found log offset: {log_offset}{reason}"
    return f"  Index offset: {offset}, log offset: {log_offset}{reason}"


def _verify_offset_index(printer: Printer, index: OffsetIndex, log_path: Path) -> None:
    """Render ``index_verify.verify_offset_index``'s mismatches, then what was checked."""
    for m in verify_offset_index(index, log_path):
        printer.mismatch(
            m.kind,
            {
                "entry": m.entry,
                "offset": m.offset,
                "position": m.segment_position,
                "logOffset": m.log_offset,
                "message": m.message,
            },
            _mismatch_line(m),
        )
    _verified(printer, index.entries, log_path)


def _verify_time_index(printer: Printer, index: TimeIndex, log_path: Path, *, deep: bool) -> None:
    """Render ``index_verify.verify_time_index``'s findings, then what was checked."""
    for found in verify_time_index(index, log_path, deep=deep):
        if isinstance(found, SegmentReadError):
            printer.problem(found.message, found.position)
            continue
        printer.mismatch(
            found.kind,
            {
                "entry": found.entry,
                "timestamp": found.timestamp,
                "offset": found.offset,
                "logOffset": found.log_offset,
                "logTimestamp": found.log_timestamp,
                "message": found.message,
            },
            _mismatch_line(found),
        )
    _verified(printer, index.entries, log_path)


def _verified(printer: Printer, checked: int, log_path: Path) -> None:
    printer.summary(segment=str(log_path), entriesChecked=checked)
    printer.line(f"Verified {checked} entries against {log_path}")


def dump_txn_index(printer: Printer, target: Target, mode: Mode) -> None:
    """A transaction index: its aborted transactions (``dumpTxnIndex``) or its sanity check."""
    from tierlog.log.txn_index import ABORTED_TXN_SIZE, ABORTED_TXN_VERSION, TransactionIndex

    base = target.offset if target.offset is not None else 0
    sanity = mode is Mode.SANITY
    printer.begin(target, {"baseOffset": base}, items=None if sanity else "entries")
    index = TransactionIndex(base, target.path, writable=False)
    try:
        if sanity:
            _sanity(printer, target, index.sanity_check)
            return
        for txn in index:
            printer.item(
                {
                    "version": ABORTED_TXN_VERSION,
                    "producerId": txn.producer_id,
                    "firstOffset": txn.first_offset,
                    "lastOffset": txn.last_offset,
                    "lastStableOffset": txn.last_stable_offset,
                },
                lambda e: " ".join(f"{k}: {v}" for k, v in e.items()),
            )
        _partial_entry(printer, target.path, index.size_in_bytes, ABORTED_TXN_SIZE)
    finally:
        index.close()


# --- checkpoints and snapshots -----------------------------------------------------------------


def _decrement_sequence(sequence: int, decrement: int) -> int:
    """``DefaultRecordBatch.decrementSequence``: sequences wrap below 0 to int32 max."""
    if sequence < decrement:
        return (1 << 31) - 1 - (decrement - sequence) + 1
    return sequence - decrement


def _snapshot_text(e: dict[str, Any]) -> str:
    """Kafka's ``dumpProducerIdSnapshot`` line."""
    text = (
        f"producerId: {e['producerId']} producerEpoch: {e['producerEpoch']} "
        f"coordinatorEpoch: {e['coordinatorEpoch']} "
        f"currentTxnFirstOffset: {_optional_long(e['currentTxnFirstOffset'])} "
        f"lastTimestamp: {e['lastTimestamp']}"
    )
    if e["lastOffset"] >= 0:
        text += (
            f" firstSequence: {e['firstSequence']} lastSequence: {e['lastSequence']} "
            f"lastOffset: {e['lastOffset']} offsetDelta: {e['offsetDelta']} "
            f"timestamp: {e['timestamp']}"
        )
    return text


def dump_producer_snapshot(printer: Printer, target: Target) -> None:
    """A producer state snapshot, one line per producer (a snapshot is small: read whole)."""
    from tierlog.log.producer_snapshot import read_producer_snapshot

    printer.begin(target, items="entries")
    for entry in read_producer_snapshot(target.path):
        has_batch = entry.last_offset >= 0
        printer.item(
            {
                "producerId": entry.producer_id,
                "producerEpoch": entry.epoch,
                "coordinatorEpoch": entry.coordinator_epoch,
                "currentTxnFirstOffset": (
                    entry.current_txn_first_offset if entry.current_txn_first_offset >= 0 else None
                ),
                "lastTimestamp": entry.timestamp,
                "firstSequence": (
                    _decrement_sequence(entry.last_sequence, entry.offset_delta)
                    if has_batch
                    else None
                ),
                "lastSequence": entry.last_sequence,
                "lastOffset": entry.last_offset,
                "offsetDelta": entry.offset_delta,
                "timestamp": entry.timestamp,
            },
            _snapshot_text,
        )


def dump_leader_epoch_checkpoint(printer: Printer, target: Target) -> None:
    """A leader epoch checkpoint: at which offset each leader epoch started."""
    from tierlog.log.checkpoint import read_leader_epoch_checkpoint

    printer.begin(target, items="entries")
    for epoch, start_offset in read_leader_epoch_checkpoint(target.path):
        printer.item(
            {"epoch": epoch, "startOffset": start_offset},
            lambda e: f"epoch: {e['epoch']} startOffset: {e['startOffset']}",
        )


def dump_partition_metadata(printer: Printer, target: Target) -> None:
    """``partition.metadata``: the partition's topic id."""
    from tierlog.log.checkpoint import read_partition_metadata

    printer.begin(target, items=None)
    metadata = read_partition_metadata(target.path)
    printer.summary(version=metadata.version, topicId=str(metadata.topic_id))
    printer.line(f"version: {metadata.version} topicId: {metadata.topic_id}")


def dump_offsets_checkpoint(printer: Printer, target: Target) -> None:
    """``tierlog-offsets-checkpoint``: what tierlog's recovery will start from.

    Read with recovery's own reader, so a file it refuses is reported as it would refuse it.
    """
    from tierlog.log.recovery import read_offsets_checkpoint

    printer.begin(target, items=None)
    checkpoint = read_offsets_checkpoint(target.path.parent)
    if checkpoint is None:  # removed since the directory was listed
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(target.path))
    printer.summary(
        recoveryPoint=checkpoint.recovery_point,
        logStartOffset=checkpoint.log_start_offset,
        highWatermark=checkpoint.high_watermark,
        cleanShutdown=checkpoint.clean_shutdown,
    )
    printer.line(
        f"recoveryPoint: {checkpoint.recovery_point} logStartOffset: "
        f"{checkpoint.log_start_offset} highWatermark: {checkpoint.high_watermark} "
        f"cleanShutdown: {_java_bool(checkpoint.clean_shutdown)}"
    )


# --- the embedded RLMM's record logs -----------------------------------------------------------


def _metadata_record_text(r: dict[str, Any]) -> str:
    """The entry's frame, then Kafka's ``RemoteLogMetadataFormatter`` line of its value."""
    line = (
        f"position: {r['position']} offset: {r['offset']} length: {r['length']} "
        f"crc: {r['crc']} isvalid: {_java_bool(r['isValid'])}"
    )
    return line if r["formatted"] is None else f"{line}\n{r['formatted']}"


def dump_remote_log_metadata(printer: Printer, target: Target) -> None:
    """An embedded RLMM's ``__remote_log_metadata-N.log``, entry by entry.

    The file is a sequence of ``length:uint32 crc:uint32 payload`` entries, the payload a
    ``__remote_log_metadata`` record value (``tierlog.metadata._record_log``); an entry's offset
    is its index. Each entry is checked and its value decoded and shown as Kafka's console
    formatter shows it. The file is read, never repaired: the RLMM's own open would truncate a
    torn tail, which a dump must not do. As in a segment dump, a CRC mismatch is reported and
    the dump goes on (the length still frames the file); a frame that cannot be read (cut
    short, an impossible length) ends it with ``Found N invalid bytes``.
    """
    import zlib

    from tierlog.metadata._record_log import HEADER as ENTRY_HEADER
    from tierlog.metadata._record_log import MAX_PAYLOAD_BYTES
    from tierlog.metadata.formatter import format_record
    from tierlog.metadata.json_codec import record_to_json
    from tierlog.metadata.serde import decode_record

    path = target.path
    partition = target.partition if target.partition is not None else 0
    printer.begin(target, {"partition": partition}, items="records")
    valid = 0
    with open(path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        offset = 0
        error: CorruptRecordError | None = None
        while valid < file_size:
            header = f.read(ENTRY_HEADER.size)
            if len(header) < ENTRY_HEADER.size:
                error = corrupt(
                    f"truncated record log entry {offset}: {len(header)} of the "
                    f"{ENTRY_HEADER.size} header bytes remain",
                    valid,
                    str(path),
                )
                break
            length, stored = ENTRY_HEADER.unpack(header)
            if not 0 < length <= MAX_PAYLOAD_BYTES:
                error = corrupt(
                    f"invalid length {length} of record log entry {offset} (1 to "
                    f"{MAX_PAYLOAD_BYTES} bytes)",
                    valid,
                    str(path),
                )
                break
            payload = f.read(length) if ENTRY_HEADER.size + length <= file_size - valid else b""
            if len(payload) != length:
                error = corrupt(
                    f"truncated record log entry {offset}: its payload is {length} bytes, "
                    f"{file_size - valid - ENTRY_HEADER.size} remain",
                    valid,
                    str(path),
                )
                break
            computed = zlib.crc32(payload)
            obj: dict[str, Any] = {
                "offset": offset,
                "position": valid,
                "length": length,
                "crc": stored,
                "isValid": computed == stored,
                "value": None,
                "formatted": None,
            }
            problem: tuple[str, int] | None = None
            if computed != stored:
                problem = (
                    str(
                        corrupt(
                            f"record log entry {offset} CRC mismatch (stored 0x{stored:08x}, "
                            f"computed 0x{computed:08x})",
                            valid,
                            str(path),
                        )
                    ),
                    valid,
                )
            else:
                try:
                    decoded = decode_record(payload)
                except TierlogError as exc:
                    problem = (
                        f"{exc} (the value of record log entry {offset} at position {valid} "
                        f"of {path})",
                        valid,
                    )
                else:
                    obj["value"] = record_to_json(decoded)
                    obj["formatted"] = format_record(partition, offset, decoded)
            printer.item(obj, _metadata_record_text)
            if problem is not None:
                printer.problem(*problem)
            valid += ENTRY_HEADER.size + length
            offset += 1
    if error is not None:
        printer.line(f"Found {file_size - valid} invalid bytes at the end of {path.name}")
        _problem_from(printer, error, path)
    printer.summary(validBytes=valid, trailingBytes=file_size - valid)


# --- planning and running ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    """The files to dump, in order, and the directory entries left out, with the reason."""

    targets: list[Target]
    skipped: list[tuple[Path, str]]


def plan(paths: Sequence[str], mode: Mode, printer: Printer) -> Plan:
    """The files to dump, in order; ``InvalidArgumentError`` (exit 2) before any output.

    A directory gives its known files, partition-level ones first, then by offset and kind. In
    an index mode, a ``.log`` named explicitly brings its indexes right after it.
    """
    targets: list[Target] = []
    skipped: list[tuple[Path, str]] = []
    for arg in paths:
        path = Path(arg)
        if path.is_dir():
            targets.extend(_directory(path, skipped))
            continue
        if not path.exists():
            raise InvalidArgumentError(f"no such file or directory: {arg}")
        target = classify(path)
        if target is None:
            temp_of = _temp_file_of(path)
            if temp_of is not None:
                raise InvalidArgumentError(
                    f"{arg} is {_temp_reason(temp_of)}; to read it anyway, copy it to a file "
                    f"named {temp_of} in another directory and dump that"
                )
            raise InvalidArgumentError(
                f"cannot tell what {arg} holds from its name; expected {_KNOWN_KINDS}"
            )
        targets.append(target)
        if target.kind is Kind.LOG and mode is not Mode.LIST:
            targets.extend(_indexes_of(target, mode, printer))
    seen: set[Path] = set()
    unique: list[Target] = []
    for target in targets:
        key = target.path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(target)
    return Plan(unique, skipped)


def _indexes_of(log: Target, mode: Mode, printer: Printer) -> list[Target]:
    kinds = [Kind.OFFSET_INDEX, Kind.TIME_INDEX]
    if mode is Mode.SANITY:
        kinds.append(Kind.TXN_INDEX)
    found: list[Target] = []
    for kind in kinds:
        sibling = log.sibling(kind)
        if sibling is None:
            if kind is not Kind.TXN_INDEX:  # most segments have no aborted transactions
                printer.note(f"{log.path} has no {kind.value} to check")
            continue
        target = classify(sibling)
        if target is not None:
            found.append(target)
    return found


def _temp_file_of(path: Path) -> str | None:
    """The name ``path`` is a temporary copy of (``atomic_write``'s ``<name>.tmp``), if any."""
    name = path.name
    if name.endswith(_TEMP_SUFFIX) and classify(path.with_name(name[: -len(_TEMP_SUFFIX)])):
        return name[: -len(_TEMP_SUFFIX)]
    return None


def _temp_reason(name: str) -> str:
    return (
        f"an unfinished atomic write of {name} (a crash came before its rename; recovery "
        "deletes it unread)"
    )


def _skip_reason(entry: Path) -> str:
    """Why a directory entry that ``classify`` does not know is not dumped."""
    if entry.is_dir():
        return "a directory"
    if not entry.is_file():
        return "not a regular file"
    temp_of = _temp_file_of(entry)
    if temp_of is not None:
        return _temp_reason(temp_of)
    if entry.name.endswith((".checkpoint", ".checkpoint.deleted")):
        return "a KRaft metadata snapshot, not a file of a topic partition"
    if entry.name in _METADATA_DIR_FILES:
        return _METADATA_DIR_FILES[entry.name]
    return "not a file Kafka or tierlog keeps in a partition directory"


def _directory(directory: Path, skipped: list[tuple[Path, str]]) -> list[Target]:
    """Every file of a partition directory that ``classify`` knows, in dump order.

    That includes the leftovers of interrupted operations (``.swap``, ``.cleaned``,
    ``.deleted``), after the live file of the same name, because recovery acts on them and they
    are what one looks at after a crash. Anything else goes to ``skipped`` with the reason.
    """
    targets: list[Target] = []
    for entry in sorted(directory.iterdir()):
        target = classify(entry) if entry.is_file() else None
        if target is None:
            skipped.append((entry, _skip_reason(entry)))
            continue
        targets.append(target)
    targets.sort(
        key=lambda t: (
            t.offset is not None,
            t.offset or 0,
            _ORDER[t.kind],
            _EXTRA_ORDER[t.extra],
            -1 if t.partition is None else t.partition,
            t.path.name,
        )
    )
    return targets


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "log",
        help="inspect Kafka log files (segments, indexes, checkpoints, snapshots)",
        description="Work with the files of a Kafka partition directory.",
    )
    sub = parser.add_subparsers(dest="log_command", required=True, metavar="ACTION")
    dump = sub.add_parser(
        "dump",
        help="print segments, indexes, checkpoints and snapshots (like kafka-dump-log)",
        description="Print the content of a partition's files in kafka-dump-log's format (or "
        "JSON). Exit code: 0 fine, 1 corruption or index mismatch found (unlike kafka-dump-log, "
        "which exits 0 either way), 2 usage error.",
    )
    dump.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="a .log, .index, .timeindex, .txnindex, .snapshot, leader-epoch-checkpoint, "
        "tierlog-offsets-checkpoint or partition.metadata file (also with .deleted, .cleaned or "
        ".swap appended), an embedded RLMM's __remote_log_metadata-N.log, or a directory of "
        "those (other entries are skipped with a note)",
    )
    dump.add_argument(
        "--deep",
        "--deep-iteration",
        action="store_true",
        help="decode every record, not only the batch headers",
    )
    dump.add_argument(
        "--print-data-log",
        action="store_true",
        help="also print record keys and values as UTF-8 (implies --deep)",
    )
    checks = dump.add_mutually_exclusive_group()
    checks.add_argument(
        "--verify-index",
        "--verify-index-only",
        action="store_true",
        help="check .index and .timeindex entries against their segment instead of listing "
        "them (a .log given also gets its indexes checked); mismatches are reported on stderr "
        "in kafka-dump-log's words after the dump, and make the exit code 1 (kafka-dump-log "
        "exits 0); with --deep, time index timestamps are checked against the records",
    )
    checks.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="run the broker's startup sanity check on index files instead of listing them",
    )
    dump.add_argument("--json", action="store_true", help="print one JSON document")
    dump.set_defaults(handler=run_dump)


def run_dump(args: argparse.Namespace) -> int:
    mode = (
        Mode.VERIFY
        if args.verify_index
        else Mode.SANITY
        if args.index_sanity_check
        else (Mode.LIST)
    )
    deep = bool(args.deep or args.print_data_log)
    out, err = sys.stdout, sys.stderr
    # Plan with a text printer so that usage errors (exit 2) leave stdout empty.
    notes = Printer(False, out, err)
    planned = plan(args.paths, mode, notes)
    printer = Printer(bool(args.json), out, err)
    for path, reason in planned.skipped:
        printer.skip(path, reason)
    if not planned.targets:
        printer.note("nothing to dump: no segment, index, checkpoint or snapshot file was found")
    for target in planned.targets:
        try:
            _dump_one(printer, target, mode, deep, bool(args.print_data_log))
        except BrokenPipeError:
            raise  # the reader went away (`| head`): the caller stops quietly
        except (TierlogError, OSError) as exc:
            if not printer.in_file:
                printer.begin(target, items=None)
            _problem_from(printer, exc, target.path)
        finally:
            printer.end()
    printer.finish()
    return 1 if printer.problems else 0


def _dump_one(printer: Printer, target: Target, mode: Mode, deep: bool, print_data: bool) -> None:
    kind = target.kind
    if kind is Kind.LOG:
        dump_log(printer, target, deep=deep, print_data=print_data)
    elif kind is Kind.OFFSET_INDEX:
        dump_offset_index(printer, target, mode)
    elif kind is Kind.TIME_INDEX:
        dump_time_index(printer, target, mode, deep=deep)
    elif kind is Kind.TXN_INDEX:
        dump_txn_index(printer, target, mode)
    elif kind is Kind.PRODUCER_SNAPSHOT:
        dump_producer_snapshot(printer, target)
    elif kind is Kind.LEADER_EPOCH_CHECKPOINT:
        dump_leader_epoch_checkpoint(printer, target)
    elif kind is Kind.OFFSETS_CHECKPOINT:
        dump_offsets_checkpoint(printer, target)
    elif kind is Kind.REMOTE_LOG_METADATA:
        dump_remote_log_metadata(printer, target)
    else:
        dump_partition_metadata(printer, target)
