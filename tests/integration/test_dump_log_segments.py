"""``tierlog log dump`` against Kafka's own ``DumpLogSegments``, on files each of them wrote.

Kafka's side is always Kafka: the files a real 4.3.1 broker wrote (its partition directories, the
remote segments of its ``LocalTieredStorage``) and what Kafka's ``DumpLogSegments`` prints about
them, parsed from its text. tierlog's side is ``tierlog log dump --json`` (values) and its text
(which is meant to be ``kafka-dump-log``'s, line for line). They must agree on every batch (base
and last offset, count, sequences, producer id and epoch, leader epoch, transactional and control
flags, position, max timestamp, size, magic, codec, CRC, validity), on every record with
``--deep-iteration --print-data-log`` (offset, timestamp, key and value sizes, sequence, header
keys, transaction markers, key and payload as text), and on every entry of the offset, time and
transaction indexes and the producer snapshots.

The data covers what the format allows a producer to vary: the five codecs, several batches per
codec, null keys, null and empty values, headers (none, one, several, empty values, non-ASCII
keys), non-ASCII and invalid UTF-8 payloads, timestamps out of order inside a batch, idempotent
and plain producers, a transactional producer that commits, aborts and commits (so control
batches and a transaction index), small segments so several roll, a topic where the broker
recompresses and stamps ``LogAppendTime`` itself. The reverse direction writes a partition with
tierlog's ``LocalLog`` and has Kafka's tool read it.

Kafka's tool and tierlog differ on purpose in one place, checked as such: an index file still
preallocated (the active segment's, 10 MiB of zeros) shows Kafka's tool one zero slot as an entry
(``offset: BASE position: 0``, ``timestamp: 0 offset: BASE``) before it stops at the next one;
tierlog drops the run of zero slots and reports no entry (``tierlog.log.index``).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.admin import OffsetSpec
from services._common import Service

from tierlog.log.batch import ControlRecordType, build_batch, build_control_batch
from tierlog.log.compression import CompressionType
from tierlog.log.local_log import LocalLog
from tierlog.log.record import Record
from tierlog.spi import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
    Uuid,
)
from tierlog.storage.local import LocalTieredStorage

from ._broker import (
    active_segment_base,
    built_once,
    create_topic,
    list_offset,
    partition_dir,
    remote_partition_dir,
    unique_topic,
    wait_for,
)
from ._dump import (
    DumpedFile,
    dump_log_segments,
    parse_dump,
    tierlog_batch_as_kafka,
    tierlog_dump,
    tierlog_dump_json,
)
from ._produce import produce_mix, record_args

SEGMENT_BYTES = 16_384
"""Small segments so that several roll. ``segment.bytes`` has a 1 MiB minimum in Kafka 4.x;
``internal.segment.bytes`` is the topic config Kafka's own tests use to go below it."""

INDEX_SUFFIXES = (".index", ".timeindex")
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")


def produce_recompressed(broker: Service, topic: str, segments: int = 3) -> None:
    """gzip batches to a topic that stores zstd with LogAppendTime: the broker rebuilds them.
    Produced until ``segments`` segments exist (how well zstd compresses decides when)."""
    now_ms = int(time.time() * 1000)
    producer = KafkaProducer(
        bootstrap_servers=broker.url, compression_type="gzip", linger_ms=5, batch_size=4000
    )
    directory = partition_dir(broker, topic)
    i = 0
    while len(list(directory.glob("*.log"))) < segments:
        for _ in range(50):
            args = record_args(i, now_ms)
            args["value"] = (args["value"] or b"") + os.urandom(64).hex().encode()
            producer.send(topic, **args)
            i += 1
        producer.flush()
    producer.close()


# --- fixtures -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Partition:
    """A copy of a partition directory the broker wrote, taken once producing was done."""

    topic: str
    topic_id: str
    directory: Path
    active_base: int

    def segment_files(self, suffixes: Sequence[str] = SEGMENT_SUFFIXES) -> list[Path]:
        return sorted(p for p in self.directory.iterdir() if p.suffix in suffixes)

    def sealed(self, files: Sequence[Path]) -> list[Path]:
        return [f for f in files if int(f.name[:20]) != self.active_base]


def produce_partitions(broker: Service, into: Path) -> dict[str, Any]:
    """The mixed topic and the recompressed one, produced, then copied into ``into``."""
    common = {"internal.segment.bytes": str(SEGMENT_BYTES), "retention.ms": "-1"}
    mix = unique_topic("dump-mix")
    mix_id = create_topic(broker, mix, {**common, "index.interval.bytes": "1000"})
    produce_mix(broker, mix)
    recompressed = unique_topic("dump-append-time")
    recompressed_id = create_topic(
        broker,
        recompressed,
        {
            **common,
            "message.timestamp.type": "LogAppendTime",
            "compression.type": "zstd",
            "index.interval.bytes": "300",
        },
    )
    produce_recompressed(broker, recompressed)
    topics = {}
    for topic, topic_id in ((mix, mix_id), (recompressed, recompressed_id)):
        shutil.copytree(partition_dir(broker, topic), into / f"{topic}-0")
        topics[topic] = topic_id
    return topics


@pytest.fixture(scope="session")
def broker_partitions(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> list[Partition]:
    """Copies of two partition directories the broker wrote, taken once producing was done:
    the mixed topic and the recompressed one. Produced once per run (one worker's broker)."""
    into, topics = built_once(
        tmp_path_factory,
        "dump-broker-partitions",
        lambda into: produce_partitions(request.getfixturevalue("kafka_broker"), into),
    )
    partitions = [
        Partition(topic, topic_id, into / f"{topic}-0", active_segment_base(into / f"{topic}-0"))
        for topic, topic_id in topics.items()
    ]
    mix_partition = partitions[0]
    # What the data was meant to exercise is there (so the comparisons below are not vacuous).
    assert len(mix_partition.segment_files((".log",))) >= 4, "segments did not roll"
    assert mix_partition.segment_files((".txnindex",)), "the aborted transaction is not indexed"
    assert len(partitions[1].segment_files((".log",))) >= 3
    return partitions


# --- comparing ------------------------------------------------------------------------------------


def zero_slot(path: Path, base: int) -> dict[str, int]:
    """The entry Kafka's tool reads from the first zero slot of a preallocated index."""
    if path.suffix == ".index":
        return {"offset": base, "position": 0}
    return {"timestamp": 0, "offset": base}


def tierlog_entries(file: dict[str, Any], kafka_entry_keys: Sequence[str]) -> list[dict[str, Any]]:
    return [{k: e[k] for k in kafka_entry_keys} for e in file.get("entries", [])]


def assert_file_agrees(
    path: Path,
    kafka: DumpedFile,
    ours: dict[str, Any],
    ours_text: DumpedFile,
    *,
    preallocated: bool,
    kafka_path: Path | None = None,
) -> None:
    """One file: Kafka's parsed dump against tierlog's JSON, and the two texts (Kafka's tool
    having read the same bytes at ``kafka_path``, if given)."""
    if kafka_path is not None:
        kafka = replace(kafka, lines=[ln.replace(str(kafka_path), str(path)) for ln in kafka.lines])
    assert ours["errors"] == [], f"tierlog reported problems in {path}: {ours['errors']}"
    kind = ours["kind"]
    if kind == "log":
        batches = [tierlog_batch_as_kafka(b) for b in ours["batches"]]
        assert len(batches) == len(kafka.batches), path
        for ours_batch, kafka_batch in zip(batches, kafka.batches, strict=True):
            assert ours_batch == kafka_batch, f"{path}: batch at {kafka_batch['position']}"
        assert ours["trailingBytes"] == kafka.invalid_bytes == 0, path
        assert kafka.batches, f"{path}: no batch"
    else:
        keys = list(kafka.entries[0]) if kafka.entries else []
        expected = kafka.entries
        base = int(path.name[:20])
        if preallocated and not ours["entries"] and expected == [zero_slot(path, base)]:
            expected = []  # Kafka's tool shows the preallocated file's first zero slot
            assert ours_text.empty
        else:
            assert ours_text.lines == kafka.lines, path
        if kind == "producer-snapshot":
            # Kafka prints the batch fields only for a producer with a batch; tierlog's JSON has
            # them all. Each entry is compared on the fields Kafka printed for it.
            assert len(ours["entries"]) == len(expected), path
            for k_entry, t_entry in zip(expected, ours["entries"], strict=True):
                assert {f: t_entry[f] for f in k_entry} == k_entry, path
        else:
            assert tierlog_entries(ours, keys) == expected, path
        assert (not expected) == (kafka.empty or not kafka.entries), path
        return
    assert ours_text.lines == kafka.lines, path


def compare_dumps(
    files: Sequence[Path], *options: str, preallocated: Sequence[Path] = ()
) -> tuple[dict[str, DumpedFile], dict[str, Any]]:
    """Dump ``files`` with both tools (same options) and compare them file by file."""
    kafka_run = dump_log_segments(files, *options)
    assert kafka_run.returncode == 0, kafka_run.stderr
    kafka = parse_dump(kafka_run.stdout)
    code, document, err = tierlog_dump_json(files, *options)
    assert code == 0, err
    assert document["ok"], document
    text_run = tierlog_dump(files, *options)
    assert text_run.returncode == 0, text_run.stderr
    ours_text = parse_dump(text_run.stdout)
    ours = {f["path"]: f for f in document["files"]}
    assert sorted(kafka) == sorted(ours) == sorted(map(str, files))
    for path in files:
        assert_file_agrees(
            path,
            kafka[str(path)],
            ours[str(path)],
            ours_text[str(path)],
            preallocated=path in preallocated,
        )
    return kafka, ours


def active_indexes(partition: Partition) -> list[Path]:
    return [
        f
        for f in partition.segment_files(INDEX_SUFFIXES)
        if int(f.name[:20]) == partition.active_base
    ]


# --- Kafka wrote, tierlog reads -------------------------------------------------------------------


def test_batches_and_indexes_agree(broker_partitions: list[Partition]) -> None:
    """Every segment, index, transaction index and producer snapshot of two partitions."""
    files = [f for p in broker_partitions for f in p.segment_files()]
    preallocated = [f for p in broker_partitions for f in active_indexes(p)]
    kafka, _ = compare_dumps(files, preallocated=preallocated)
    codecs = {b["compresscodec"] for d in kafka.values() for b in d.batches}
    assert codecs == {"none", "gzip", "snappy", "lz4", "zstd"}
    flags = {(b["isTransactional"], b["isControl"]) for d in kafka.values() for b in d.batches}
    assert flags == {(False, False), (True, False), (True, True)}
    assert any("LogAppendTime" in b for d in kafka.values() for b in d.batches)
    # A producer snapshot taken while a transaction was open (its first offset is kept).
    entries = [e for d in kafka.values() for e in d.entries]
    assert any(e.get("currentTxnFirstOffset") is not None for e in entries)


def test_records_agree_with_deep_iteration(broker_partitions: list[Partition]) -> None:
    """Every record, with its key and payload as text (``--deep-iteration --print-data-log``)."""
    logs = [f for p in broker_partitions for f in p.segment_files((".log",))]
    kafka, _ = compare_dumps(logs, "--deep-iteration", "--print-data-log")
    records = [r for d in kafka.values() for b in d.batches for r in b["records"]]
    markers = {r.get("controlType") for r in records}
    assert {"COMMIT", "ABORT"} <= markers
    assert any("\ufffd" in r.get("payload", "") for r in records)  # invalid UTF-8 replaced
    assert any(r["keySize"] == -1 for r in records) and any(r["valueSize"] == -1 for r in records)


@pytest.mark.slow
def test_index_checks_agree(broker_partitions: list[Partition]) -> None:
    """Kafka's ``--verify-index-only`` and ``--index-sanity-check`` find nothing wrong with the
    sealed segments' indexes, and neither does tierlog (exit 0)."""
    sealed = [f for p in broker_partitions for f in p.sealed(p.segment_files(INDEX_SUFFIXES))]
    assert {f.parent for f in sealed} == {p.directory for p in broker_partitions}
    verify = dump_log_segments(sealed, "--verify-index-only")
    assert verify.returncode == 0
    assert "mismatch" not in verify.stderr.lower()
    assert "not found" not in verify.stderr
    assert verify.stdout.count("Dumping ") == len(sealed)
    ours = tierlog_dump(sealed, "--verify-index")
    assert ours.returncode == 0, ours.stderr
    # Kafka's sanity check fails on a preallocated time index with entries (its last slot is
    # zero, below the first timestamp); a broker only checks trimmed files or rebuilds.
    assert_sanity_checks_pass(sealed)


def assert_sanity_checks_pass(indexes: Sequence[Path]) -> None:
    """Kafka's ``--index-sanity-check`` passes every index (Kafka's tool says ``is empty.``
    instead for an offset index without entries, before checking), and so does tierlog's."""
    kafka = dump_log_segments(indexes, "--index-sanity-check")
    assert kafka.returncode == 0, kafka.stderr
    ours = tierlog_dump(indexes, "--index-sanity-check")
    assert ours.returncode == 0, ours.stderr
    kafka_lines = parse_dump(kafka.stdout)
    ours_lines = parse_dump(ours.stdout)
    for index in indexes:
        passed = [f"{index} passed sanity check."]
        assert ours_lines[str(index)].lines == passed
        empty = index.suffix == ".index" and index.stat().st_size == 0
        assert kafka_lines[str(index)].lines == ([f"{index} is empty."] if empty else passed)


def test_leader_epoch_checkpoint_and_partition_metadata(
    broker_partitions: list[Partition],
) -> None:
    """Files Kafka's tool does not read: tierlog's dump against the broker's files as Kafka
    wrote them (``LeaderEpochCheckpointFile``: version, count, ``epoch offset`` lines) and the
    topic id the admin API gives."""
    for partition in broker_partitions:
        checkpoint = partition.directory / "leader-epoch-checkpoint"
        metadata = partition.directory / "partition.metadata"
        code, document, err = tierlog_dump_json([checkpoint, metadata])
        assert code == 0, err
        dumped_checkpoint, dumped_metadata = document["files"]
        version, count, *lines = checkpoint.read_text().split("\n")[:-1]
        assert (version, int(count)) == ("0", len(lines))
        assert [
            {"epoch": int(e), "startOffset": int(o)} for e, o in (ln.split() for ln in lines)
        ] == dumped_checkpoint["entries"]
        assert dumped_checkpoint["entries"] == [{"epoch": 0, "startOffset": 0}]
        assert dumped_metadata["topicId"] == partition.topic_id
        assert dumped_metadata["version"] == 0


# --- Kafka tiered, tierlog reads the remote segments ---------------------------------------------


def kafka_named_copy(remote: Path, into: Path) -> Path:
    """A remote segment file renamed as Kafka's tool needs it (``<offset:020d><suffix>``): it
    takes the base offset from the name up to the first dot."""
    stem, suffix = remote.name[:20], remote.name[remote.name.index(".") :]
    copy = into / f"{stem}{suffix}"
    shutil.copyfile(remote, copy)
    return copy


@pytest.mark.slow
def test_remote_segments_agree(kafka_broker: Service, tmp_path: Path) -> None:
    """Kafka's LocalTieredStorage copies of tiered segments: tierlog dumps them under their
    remote names, Kafka's tool dumps the same bytes under Kafka's names, and they agree."""
    topic = unique_topic("dump-tiered")
    topic_id = create_topic(
        kafka_broker,
        topic,
        {
            "remote.storage.enable": "true",
            "internal.segment.bytes": str(SEGMENT_BYTES),
            "local.retention.bytes": "1",
            "index.interval.bytes": "700",
        },
    )
    produce_mix(kafka_broker, topic)
    active = active_segment_base(partition_dir(kafka_broker, topic))
    wait_for(
        lambda: list_offset(kafka_broker, topic, OffsetSpec.LATEST_TIERED) >= active - 1,
        f"Kafka to tier {topic} up to offset {active - 1}",
    )
    remote_dir = remote_partition_dir(kafka_broker, topic, topic_id)
    remote = sorted(p for p in remote_dir.iterdir() if not p.name.startswith("."))
    remote_logs = [p for p in remote if p.name.endswith(".log")]
    assert len(remote_logs) >= 3
    assert int(remote_logs[0].name[:20]) == 0
    assert any(p.name.endswith(".txnindex") for p in remote)

    into = tmp_path / "kafka-names"
    into.mkdir()
    comparable = [p for p in remote if p.name.endswith(SEGMENT_SUFFIXES)]
    copies = [kafka_named_copy(p, into) for p in comparable]
    kafka_run = dump_log_segments(copies, "--deep-iteration", "--print-data-log")
    assert kafka_run.returncode == 0, kafka_run.stderr
    kafka = parse_dump(kafka_run.stdout)
    code, document, err = tierlog_dump_json(comparable, "--deep-iteration", "--print-data-log")
    assert code == 0, err
    text_run = tierlog_dump(comparable, "--deep-iteration", "--print-data-log")
    assert text_run.returncode == 0, text_run.stderr
    ours_text = parse_dump(text_run.stdout)
    ours = {f["path"]: f for f in document["files"]}
    for original, copy in zip(comparable, copies, strict=True):
        assert_file_agrees(
            original,
            kafka[str(copy)],
            ours[str(original)],
            ours_text[str(original)],
            preallocated=False,
            kafka_path=copy,
        )

    # The remote leader epoch checkpoints, which Kafka's tool does not read, against the text
    # Kafka wrote.
    checkpoints = [p for p in remote if p.name.endswith(".leader_epoch_checkpoint")]
    assert len(checkpoints) == len(remote_logs)
    code, document, err = tierlog_dump_json(checkpoints)
    assert code == 0, err
    for path, dumped in zip(checkpoints, document["files"], strict=True):
        _, _, *lines = path.read_text().split("\n")[:-1]
        assert dumped["entries"] == [
            {"epoch": int(e), "startOffset": int(o)} for e, o in (ln.split() for ln in lines)
        ]


# --- tierlog wrote, Kafka reads -------------------------------------------------------------------


TOPIC_ID = Uuid.from_string("c2a7dFbQSyqkqvx-v0ZDUA")


def tierlog_records(base: int, n: int, now_ms: int) -> list[Record]:
    """A producer's records (offsets from 0: the leader assigns them), the ``base``-th on."""
    out = []
    for i in range(n):
        args = record_args(base + i, now_ms)
        out.append(
            Record(
                i,
                args["timestamp_ms"],
                args["key"],
                args["value"],
                tuple(args["headers"]),
            )
        )
    return out


def write_tierlog_partition(directory: Path) -> LocalLog:
    """A partition written by tierlog's LocalLog as a leader: every codec, an idempotent
    producer, a transaction committed and one aborted, two leader epochs, small segments."""
    now_ms = int(time.time() * 1000)
    log = LocalLog.open(
        directory,
        {"internal.segment.bytes": 6000, "index.interval.bytes": 500},
        topic_id=TOPIC_ID,
        high_watermark_follows_leo=True,
    )
    offset = 0
    for epoch, codecs in ((0, list(CompressionType)), (3, [CompressionType.ZSTD])):
        for codec in codecs:
            for _ in range(3):
                records = tierlog_records(offset, 7, now_ms)
                log.append_as_leader(build_batch(records, compression=codec), epoch)
                offset += 7
    for pid, commit in ((4000, True), (4001, False)):
        for sequence in (0, 5):
            records = tierlog_records(offset, 5, now_ms)
            log.append_as_leader(
                build_batch(
                    records,
                    compression=CompressionType.GZIP,
                    producer_id=pid,
                    producer_epoch=2,
                    base_sequence=sequence,
                    is_transactional=True,
                ),
                3,
            )
            offset += 5
        marker = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        log.append_as_leader(
            build_control_batch(marker, 7, timestamp=now_ms, producer_id=pid, producer_epoch=2),
            3,
            origin="coordinator",
        )
        offset += 1
    for sequence in range(0, 12, 3):  # an idempotent producer
        records = tierlog_records(offset, 3, now_ms)
        log.append_as_leader(
            build_batch(records, producer_id=5000, producer_epoch=0, base_sequence=sequence), 3
        )
        offset += 3
    log.flush()
    return log


def tier_with_local_rsm(log: LocalLog, root: Path) -> Path:
    """Copy every sealed segment of ``log`` with tierlog's ``local`` RSM, as tierlog's RLM
    would (``segment_copy_inputs``); returns the partition's remote directory."""
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(root)})
    tip = TopicIdPartition(TOPIC_ID, log.topic_partition.topic, log.topic_partition.partition)
    try:
        for segment in log.sealed_segments():
            inputs = log.segment_copy_inputs(segment)
            metadata = RemoteLogSegmentMetadata(
                remote_log_segment_id=RemoteLogSegmentId.generate_new(tip),
                start_offset=inputs.start_offset,
                end_offset=inputs.end_offset,
                max_timestamp_ms=inputs.largest_timestamp,
                broker_id=1,
                event_timestamp_ms=int(time.time() * 1000),
                segment_size_in_bytes=inputs.size_in_bytes,
                segment_leader_epochs=inputs.segment_leader_epochs,
                txn_idx_empty=inputs.txn_index_empty,
            )
            rsm.copy_log_segment_data(metadata, inputs.data)
            directory = rsm.segment_paths(metadata)[".log"].parent
    finally:
        rsm.close()
    return directory


@pytest.fixture
def tierlog_partition(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A partition directory tierlog's LocalLog wrote (closed), and the remote directory its
    sealed segments were copied to by tierlog's ``local`` RSM."""
    directory = tmp_path / "written-by-tierlog-0"
    log = write_tierlog_partition(directory)
    try:
        remote = tier_with_local_rsm(log, tmp_path / "tierlog-remote")
    finally:
        log.close()
    yield directory, remote


def test_kafka_reads_segments_tierlog_wrote(tierlog_partition: tuple[Path, Path]) -> None:
    """Kafka's tool reads every file tierlog wrote without error or mismatch, and agrees with
    tierlog's own dump of them field by field (deep, with data)."""
    directory, _ = tierlog_partition
    files = sorted(p for p in directory.iterdir() if p.suffix in SEGMENT_SUFFIXES)
    logs = [f for f in files if f.suffix == ".log"]
    assert len(logs) >= 4 and any(f.suffix == ".txnindex" for f in files)
    kafka, _ = compare_dumps(files, "--deep-iteration", "--print-data-log")
    codecs = {b["compresscodec"] for d in kafka.values() for b in d.batches}
    assert codecs == {"none", "gzip", "snappy", "lz4", "zstd"}
    epochs = {b["partitionLeaderEpoch"] for d in kafka.values() for b in d.batches}
    assert epochs == {0, 3}
    assert all(b["isvalid"] for d in kafka.values() for b in d.batches)

    indexes = [f for f in files if f.suffix in INDEX_SUFFIXES]
    verify = dump_log_segments(indexes, "--verify-index-only")
    assert verify.returncode == 0
    assert "mismatch" not in verify.stderr.lower() and "not found" not in verify.stderr
    assert_sanity_checks_pass(indexes)


def test_kafka_reads_remote_segments_tierlog_copied(
    tierlog_partition: tuple[Path, Path], tmp_path: Path
) -> None:
    """The files tierlog's ``local`` RSM stored for those segments, in LocalTieredStorage's
    layout (``<topic>-<partition>-<topicId>/<offset:020d>-<segmentId><suffix>``): Kafka's tool
    reads them (under Kafka's names) as tierlog dumps them (under the remote names)."""
    directory, remote = tierlog_partition
    assert remote.name == f"{directory.name}-{TOPIC_ID}"
    stored = sorted(remote.iterdir())
    name = re.compile(
        r"(\d{20})-[A-Za-z0-9_-]{22}(\.log|\.index|\.timeindex|\.txnindex|\.snapshot"
        r"|\.leader_epoch_checkpoint)"
    )
    assert all(name.fullmatch(p.name) for p in stored), [p.name for p in stored]
    comparable = [p for p in stored if p.name.endswith(SEGMENT_SUFFIXES)]
    assert any(p.name.endswith(".txnindex") for p in comparable)
    into = tmp_path / "kafka-names"
    into.mkdir()
    copies = [kafka_named_copy(p, into) for p in comparable]
    kafka_run = dump_log_segments(copies, "--deep-iteration", "--print-data-log")
    assert kafka_run.returncode == 0, kafka_run.stderr
    kafka = parse_dump(kafka_run.stdout)
    code, document, err = tierlog_dump_json(comparable, "--deep-iteration", "--print-data-log")
    assert code == 0, err
    text_run = tierlog_dump(comparable, "--deep-iteration", "--print-data-log")
    ours_text = parse_dump(text_run.stdout)
    ours = {f["path"]: f for f in document["files"]}
    for original, copy in zip(comparable, copies, strict=True):
        assert_file_agrees(
            original,
            kafka[str(copy)],
            ours[str(original)],
            ours_text[str(original)],
            preallocated=False,
            kafka_path=copy,
        )
    # The remote bytes are the local segment's (a copy, not a rewrite).
    for log in (p for p in stored if p.name.endswith(".log")):
        assert log.read_bytes() == (directory / f"{log.name[:20]}.log").read_bytes()


# --- damaged segments -----------------------------------------------------------------------------


def damaged_copies(segment: Path, into: Path) -> dict[str, Path]:
    """Copies of a broker-written segment, each damaged one way (named by offset so that both
    tools accept them)."""
    data = segment.read_bytes()
    second = int.from_bytes(data[8:12], "big") + 12  # where the second batch starts
    flipped = bytearray(data)
    flipped[second + 70] ^= 0xFF  # inside the second batch's records: its CRC no longer matches
    damages = {
        "truncated tail": data[:-10],
        "bad CRC": bytes(flipped),
        "trailing garbage": data + b"\x00\x01garbage",
        "empty": b"",
    }
    copies = {}
    for n, (damage, content) in enumerate(damages.items()):
        path = into / f"{n:020d}.log"
        path.write_bytes(content)
        copies[damage] = path
    return copies


def test_damaged_segments_agree(broker_partitions: list[Partition], tmp_path: Path) -> None:
    """On damaged copies of a segment the broker wrote, tierlog prints what Kafka's tool prints
    (a batch whose CRC fails as ``isvalid: false``, then the next ones; a torn tail as ``Found N
    invalid bytes``), and also says what is wrong and where, with exit code 1."""
    segment = broker_partitions[0].segment_files((".log",))[0]
    copies = damaged_copies(segment, tmp_path)
    files = list(copies.values())
    kafka_run = dump_log_segments(files)
    assert kafka_run.returncode == 0, kafka_run.stderr
    ours_run = tierlog_dump(files)
    assert ours_run.returncode == 1
    assert ours_run.stdout.split("\n") == kafka_run.stdout.split("\n")
    kafka = parse_dump(kafka_run.stdout)
    assert kafka[str(copies["truncated tail"])].invalid_bytes > 0
    assert kafka[str(copies["trailing garbage"])].invalid_bytes == 9
    validity = [b["isvalid"] for b in kafka[str(copies["bad CRC"])].batches]
    assert validity[:3] == [True, False, True]
    errors = [line for line in ours_run.stderr.split("\n") if line.startswith("tierlog: error:")]
    assert len(errors) == 3
    for damage in ("truncated tail", "bad CRC", "trailing garbage"):
        assert sum(str(copies[damage]) in line for line in errors) == 1, damage

    # With --deep-iteration too, but for the bad CRC, where Kafka's tool stops with a stack
    # trace when it decodes the damaged records (tierlog reports them and goes on).
    readable = [copies[d] for d in ("truncated tail", "trailing garbage", "empty")]
    kafka_run = dump_log_segments(readable, "--deep-iteration", "--print-data-log")
    assert kafka_run.returncode == 0, kafka_run.stderr
    ours_run = tierlog_dump(readable, "--deep-iteration", "--print-data-log")
    assert ours_run.stdout.split("\n") == kafka_run.stdout.split("\n")


def test_unknown_magic_is_printed_and_skipped_as_kafka_does(
    broker_partitions: list[Partition], tmp_path: Path
) -> None:
    data = bytearray(broker_partitions[0].segment_files((".log",))[0].read_bytes())
    second = int.from_bytes(data[8:12], "big") + 12
    data[second + 16] = 7  # the magic byte of the second batch
    path = tmp_path / f"{0:020d}.log"
    path.write_bytes(bytes(data))
    kafka_run = dump_log_segments([path])
    assert kafka_run.returncode == 0, kafka_run.stderr
    assert "magic: 7" in kafka_run.stdout and "invalid bytes" not in kafka_run.stdout
    ours_run = tierlog_dump([path])
    assert ours_run.stdout.split("\n") == kafka_run.stdout.split("\n")
    # tierlog also says what is wrong and where: an unknown format is damage (exit code 1).
    assert ours_run.returncode == 1
    assert ours_run.stderr == (
        f"tierlog: error: invalid magic byte 7 (expected 2) in record batch at position {second} "
        f"of {path}\n"
    )
    # Both tools decode its records as a v2 batch's.
    kafka_run = dump_log_segments([path], "--deep-iteration", "--print-data-log")
    assert kafka_run.returncode == 0, kafka_run.stderr
    ours_run = tierlog_dump([path], "--deep-iteration", "--print-data-log")
    assert ours_run.stdout.split("\n") == kafka_run.stdout.split("\n")
