"""Run Kafka's ``DumpLogSegments`` and ``tierlog log dump`` on the same files; parse both.

Kafka's text output is parsed here, line by line, into plain dicts keyed by Kafka's own field
names (``baseOffset``, ``crc``, ``compresscodec``...); tierlog's ``--json`` document is projected
onto the same names, so a comparison never goes through tierlog's text renderer. The text outputs
are also compared as they are (tierlog's text follows ``kafka-dump-log`` line for line).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.kafka import LOG4J_CONFIG, classpath

DUMP_LOG_SEGMENTS = "org.apache.kafka.tools.DumpLogSegments"

_PAIR = re.compile(r"(\w+): (\S+)")
_RECORD = re.compile(
    r"\| offset: (?P<offset>-?\d+) (?P<type>CreateTime|LogAppendTime|NoTimestampType): "
    r"(?P<timestamp>-?\d+) keySize: (?P<keySize>-?\d+) valueSize: (?P<valueSize>-?\d+) "
    r"sequence: (?P<sequence>-?\d+) headerKeys: \[(?P<headerKeys>[^\]]*)\]"
    r"(?: endTxnMarker: (?P<marker>\w+) coordinatorEpoch: (?P<coordinatorEpoch>-?\d+))?"
    r"(?P<rest>.*)$"
)
_INVALID = re.compile(r"Found (\d+) invalid bytes at the end of (.+)")


@dataclass
class Completed:
    """What a tool printed."""

    returncode: int
    stdout: str
    stderr: str


@dataclass
class DumpedFile:
    """One ``Dumping PATH`` section of a dump, parsed."""

    path: str
    lines: list[str] = field(default_factory=list)
    """The section's lines after ``Dumping PATH``, as printed."""
    batches: list[dict[str, Any]] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)
    """Index entries, aborted transactions or producer snapshot entries."""
    empty: bool = False
    invalid_bytes: int = 0


def _java_value(text: str) -> Any:
    """A value as Kafka prints it: ints, ``true``/``false``, ``OptionalLong``."""
    if text in ("true", "false"):
        return text == "true"
    if text == "OptionalLong.empty":
        return None
    match = re.fullmatch(r"OptionalLong\[(-?\d+)\]", text)
    if match:
        return int(match.group(1))
    try:
        return int(text)
    except ValueError:
        return text


def _pairs(line: str) -> dict[str, Any]:
    return {k: _java_value(v) for k, v in _PAIR.findall(line)}


def _record(line: str) -> dict[str, Any]:
    match = _RECORD.fullmatch(line)
    assert match is not None, f"unexpected record line from DumpLogSegments: {line!r}"
    record: dict[str, Any] = {
        "offset": int(match["offset"]),
        "timestampType": match["type"],
        "timestamp": int(match["timestamp"]),
        "keySize": int(match["keySize"]),
        "valueSize": int(match["valueSize"]),
        "sequence": int(match["sequence"]),
        "headerKeys": match["headerKeys"].split(",") if match["headerKeys"] else [],
    }
    if match["marker"] is not None:
        record["controlType"] = match["marker"]
        record["coordinatorEpoch"] = int(match["coordinatorEpoch"])
    rest = match["rest"]
    # Keys in these tests never contain " payload: "; a payload runs to the end of the line.
    if record["keySize"] >= 0 and rest.startswith(" key: "):
        key, sep, payload = rest[len(" key: ") :].partition(" payload: ")
        record["key"] = key
        if sep:
            record["payload"] = payload
    elif rest.startswith(" payload: "):
        record["payload"] = rest[len(" payload: ") :]
    else:
        assert rest == "", f"unexpected tail of a record line: {line!r}"
    return record


def parse_dump(stdout: str) -> dict[str, DumpedFile]:
    """Kafka's (or tierlog's) text dump, by the path after ``Dumping``."""
    files: dict[str, DumpedFile] = {}
    current: DumpedFile | None = None
    # Not splitlines(): a payload may hold characters it splits on (\x1c, \x85, U+2028...).
    for line in stdout.split("\n"):
        if line.startswith("Dumping "):
            current = files[line[len("Dumping ") :]] = DumpedFile(line[len("Dumping ") :])
            continue
        if current is None or line == "":
            continue
        current.lines.append(line)
        if line.startswith("| offset: "):
            current.batches[-1].setdefault("records", []).append(_record(line))
        elif line.startswith("baseOffset: "):
            current.batches.append(_pairs(line))
        elif line.startswith(("offset: ", "timestamp: ", "version: ", "producerId: ")):
            current.entries.append(_pairs(line))
        elif line.endswith(" is empty."):
            current.empty = True
        elif line.endswith(" passed sanity check."):
            pass
        elif (invalid := _INVALID.fullmatch(line)) is not None:
            current.invalid_bytes = int(invalid.group(1))
        else:
            assert line.startswith("Log starting offset: "), f"unexpected line: {line!r}"
    return files


def dump_log_segments(files: Sequence[Path], *options: str) -> Completed:
    """Kafka's ``DumpLogSegments --files F1,F2,... OPTIONS`` in one JVM, from the broker's jars.

    Its output is UTF-8 whatever the machine's locale (Java 17 would print ``?`` for every
    non-ASCII character of a payload under a C locale); otherwise as ``run_kafka_class``.
    """
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else (shutil.which("java") or "java")
    argv = [
        java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:-UsePerfData",
        "-Dfile.encoding=UTF-8", "-Dsun.stdout.encoding=UTF-8", "-Dstdout.encoding=UTF-8",
        "-Dsun.stderr.encoding=UTF-8", "-Dstderr.encoding=UTF-8",
        f"-Dlog4j2.configurationFile={LOG4J_CONFIG}", "-cp", classpath(), DUMP_LOG_SEGMENTS,
        "--files", ",".join(str(f) for f in files), *options,
    ]  # fmt: skip
    result = subprocess.run(
        argv, capture_output=True, text=True, encoding="utf-8", timeout=300, check=False
    )
    return Completed(result.returncode, result.stdout, result.stderr)


def tierlog_dump(files: Sequence[Path], *options: str) -> Completed:
    """``tierlog log dump OPTIONS FILES``, the command a user runs, in a child process."""
    env = {**os.environ, "PYTHONUTF8": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "tierlog.cli", "log", "dump", *options, *map(str, files)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=300,
        check=False,
        env=env,
    )
    return Completed(result.returncode, result.stdout, result.stderr)


def tierlog_dump_json(files: Sequence[Path], *options: str) -> tuple[int, dict[str, Any], str]:
    result = tierlog_dump(files, "--json", *options)
    return result.returncode, json.loads(result.stdout), result.stderr


# tierlog's JSON, on Kafka's names ----------------------------------------------------------------

_BATCH_FIELDS = {
    "baseOffset": "baseOffset",
    "lastOffset": "lastOffset",
    "count": "count",
    "baseSequence": "baseSequence",
    "lastSequence": "lastSequence",
    "producerId": "producerId",
    "producerEpoch": "producerEpoch",
    "partitionLeaderEpoch": "partitionLeaderEpoch",
    "isTransactional": "isTransactional",
    "isControl": "isControl",
    "deleteHorizonMs": "deleteHorizonMs",
    "position": "position",
    "size": "size",
    "magic": "magic",
    "compresscodec": "compressCodec",
    "crc": "crc",
    "isvalid": "isValid",
}


def tierlog_batch_as_kafka(batch: dict[str, Any]) -> dict[str, Any]:
    """A batch of tierlog's JSON under the names ``DumpLogSegments`` prints."""
    out = {kafka: batch[ours] for kafka, ours in _BATCH_FIELDS.items()}
    out[batch["timestampType"]] = batch["maxTimestamp"]
    if batch.get("records") is not None:
        out["records"] = [
            tierlog_record_as_kafka(r, batch["timestampType"]) for r in batch["records"]
        ]
    return out


def tierlog_record_as_kafka(record: dict[str, Any], timestamp_type: str) -> dict[str, Any]:
    out = {
        "offset": record["offset"],
        "timestampType": timestamp_type,
        "timestamp": record["timestamp"],
        "keySize": record["keySize"],
        "valueSize": record["valueSize"],
        "sequence": record["sequence"],
        "headerKeys": record["headerKeys"],
    }
    if "coordinatorEpoch" in record:
        out["controlType"] = record["controlType"]
        out["coordinatorEpoch"] = record["coordinatorEpoch"]
    for name in ("key", "payload"):
        if record.get(name) is not None:
            out[name] = record[name]
    return out
