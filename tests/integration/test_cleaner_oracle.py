"""tierlog's log cleaner against Kafka 4.3.1's LogCleaner on the same log (issue 12, section 4).

A private broker cleans a compacted topic in three rounds (``_cleaner_oracle``): the workload of
``_produce_compacted`` (keys with many versions, the empty key, non-ASCII keys, tombstones,
headers, out-of-order timestamps, the five codecs, idempotent and plain producers, committed and
aborted transactions overlapping the other keys), then newer versions, tombstones and another
aborted transaction, then a few more records and a transaction aborted across the segment roll.
tierlog's ``clean_partition_dir`` runs the same rounds on its own copy, at Kafka's clock of each
round. Two scenarios:

- ``expiring`` (``delete.retention.ms=2000``): each round starts after the previous round's
  delete horizons, so tombstones go in the round after the one that stamped them and the first
  aborted transaction's marker goes in round 3 (kept and indexed, stamped, deleted);
- ``unexpired`` (one day): nothing expires; horizons stamped once are carried over by every
  rewrite.

After every round both sides must have the same records (offset, key, value, headers,
timestamp), the same batches (offsets, producer id, epoch and sequence, flags, record count,
codec, timestamp type and max timestamp, leader epoch, delete horizon, marker), the same bytes
for every batch whose bytes the format decides (uncompressed, or kept as it was), the same
segments (wherever the sizes Kafka groups segments by cannot group them differently: always in
round 1), the same transaction index entries, the same cleaner checkpoint and dirty section; and
Kafka's ``DumpLogSegments`` reads every file tierlog wrote without error and reports what it
reports for Kafka's files. ``test_kafka_cleaned_what_the_scenario_needs`` checks that Kafka's
side holds the cases the comparisons are about (codecs, markers, empty batches of live
producers and of the batch at the first uncleanable offset, tombstone and marker lifecycles).

Also the fact the issue starts from: Kafka 4.3.1 refuses tiered storage on a compacted topic.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import NewTopic
from services._common import Service
from services.kafka import start_kafka
from services.spark_fixtures import LOCAL_MASTER, STANDALONE_GROUP

from tierlog.compaction.offline import CleanSummary, clean_partition_dir
from tierlog.compaction.spark_engine import SparkEngine

from ._broker import admin_client, built_once, create_topic, unique_topic
from ._cleaner_oracle import (
    BROKER_PROPERTIES,
    BatchView,
    KafkaRound,
    KafkaRun,
    Survivors,
    TierlogRound,
    alter_topic_result,
    dump_fields,
    first_difference,
    grouped_alike,
    load_runs,
    run_kafka_rounds,
    run_tierlog_rounds,
    save_runs,
    segment_bases,
    segment_sizes,
    survivors,
    txn_indexes,
    verify_report,
)
from ._dump import DumpedFile, dump_log_segments, parse_dump

SCENARIOS = {"expiring": (2_000, True), "unexpired": (86_400_000, False)}
"""Scenario name -> (``delete.retention.ms``, whether rounds wait for the horizons to pass)."""

REMOTE_STORAGE_REFUSED = (
    "Remote log storage only supports topics with cleanup.policy=delete or cleanup.policy being "
    "an empty list."
)
"""What Kafka 4.3.1 answers (INVALID_CONFIG) to remote storage on a compacted topic."""


@pytest.fixture(scope="module")
def kafka_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, KafkaRun]:
    """Kafka's rounds of both scenarios, on one private broker (stopped once they are done);
    run once per test run and shared by the pytest workers."""

    def build(directory: Path) -> dict[str, object]:
        broker = start_kafka(directory / "broker", properties=dict(BROKER_PROPERTIES))
        try:
            runs = [
                run_kafka_rounds(
                    broker,
                    name,
                    unique_topic(f"oracle-{name}"),
                    directory / name,
                    delete_retention_ms=retention,
                    expire=expire,
                )
                for name, (retention, expire) in SCENARIOS.items()
            ]
        finally:
            broker.stop(timeout=20)
        return save_runs(runs)

    directory, facts = built_once(tmp_path_factory, "cleaner-oracle", build)
    return {run.name: run for run in load_runs(directory, facts)}


ENGINES = [
    "python",
    pytest.param("spark-local", marks=pytest.mark.spark),
    pytest.param(
        "spark-standalone",
        marks=[pytest.mark.spark, pytest.mark.xdist_group(STANDALONE_GROUP)],
    ),
]
"""tierlog's engines, each held to Kafka's output: this process, a Spark job on ``local[2]``,
and one on a real standalone cluster (master and worker processes)."""


@pytest.fixture(scope="module", params=ENGINES)
def tierlog_runs(
    request: pytest.FixtureRequest,
    kafka_runs: dict[str, KafkaRun],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, list[TierlogRound]]:
    """tierlog's rounds of both scenarios, each on tierlog's own copy, on one engine."""
    engine_name: str = request.param
    clean: Callable[..., CleanSummary] = clean_partition_dir
    if engine_name != "python":
        sessions = request.getfixturevalue("spark_sessions")
        master = (
            request.getfixturevalue("spark_standalone_url")
            if engine_name == "spark-standalone"
            else LOCAL_MASTER
        )
        clean = functools.partial(clean_partition_dir, engine=SparkEngine(sessions.get(master)))
    return {
        name: run_tierlog_rounds(
            run, tmp_path_factory.mktemp(f"tierlog-{engine_name}-{name}"), clean
        )
        for name, run in kafka_runs.items()
    }


def rounds_of(
    name: str, kafka_runs: dict[str, KafkaRun], tierlog_runs: dict[str, list[TierlogRound]]
) -> Iterator[tuple[KafkaRun, KafkaRound, TierlogRound]]:
    run = kafka_runs[name]
    yield from ((run, k, t) for k, t in zip(run.rounds, tierlog_runs[name], strict=True))


def round_input(run: KafkaRun, number: int, previous_output: Path | None) -> Survivors:
    """What round ``number`` started from on one side: that side's output of the previous round
    (``previous_output``) below the previous active segment, then the round's new segments (in
    round 1, the whole log)."""
    new = survivors(run.path(run.rounds[number - 1].input_dir))
    if number == 1 or previous_output is None:
        return new
    previous = run.rounds[number - 2]
    return Survivors(survivors(previous_output).below(previous.active_base).segments + new.segments)


def kafka_input(run: KafkaRun, number: int) -> Survivors:
    previous = run.path(run.rounds[number - 2].cleaned_dir) if number > 1 else None
    return round_input(run, number, previous)


def tierlog_input(run: KafkaRun, rounds: list[TierlogRound], number: int) -> Survivors:
    return round_input(run, number, rounds[number - 2].cleaned_dir if number > 1 else None)


def groups_must_match(run: KafkaRun, rounds: list[TierlogRound], number: int) -> bool:
    """Kafka groups a round's segments by their sizes: round 1 starts from the same copy on both
    sides, and a later round from each side's previous output, whose rebuilt batches may be
    longer or shorter on one side (codec libraries). Where that cannot change a group
    (``grouped_alike``), the segments must be the same."""
    if number == 1:
        return True
    previous, current = run.rounds[number - 2], run.rounds[number - 1]
    new = segment_sizes(run.path(current.input_dir), below=current.active_base)
    kafka = segment_sizes(run.path(previous.cleaned_dir), below=previous.active_base)
    ours = segment_sizes(rounds[number - 2].cleaned_dir, below=previous.active_base)
    return grouped_alike(kafka + new, ours + new, run.config)


# --- what Kafka did (the scenario is not vacuous) -------------------------------------------------


def tombstones(s: Survivors) -> list[tuple[BatchView, int]]:
    return [(b, r.offset) for b in s.batches for r in b.records if r.value is None]


def markers(s: Survivors, kind: str) -> list[BatchView]:
    return [b for b in s.batches if b.marker is not None and b.marker.startswith(kind + "/")]


@pytest.mark.parametrize("name", SCENARIOS)
def test_kafka_cleaned_what_the_scenario_needs(name: str, kafka_runs: dict[str, KafkaRun]) -> None:
    """The input holds every case the oracle is about, and Kafka's rounds went through the
    lifecycles the scenario is meant to show."""
    run = kafka_runs[name]
    first = run.rounds[0]
    source = survivors(run.path(first.input_dir))
    assert len(segment_bases(run.path(first.input_dir))) >= 10
    assert {b.codec for b in source.batches} == {"none", "gzip", "snappy", "lz4", "zstd"}
    assert any(b.producer_id == -1 for b in source.batches)  # a non-idempotent producer
    assert {b.transactional for b in source.batches} == {False, True}
    assert markers(source, "ABORT") and markers(source, "COMMIT")
    assert txn_indexes(run.path(first.input_dir))
    assert {r.key for r in source.records} >= {b"", "ключ".encode()}
    assert tombstones(source) and any(r.value == b"" for r in source.records)
    assert any(r.headers for r in source.records)
    timestamps = [r.timestamp for r in source.records]
    assert timestamps != sorted(timestamps)

    kafka = [survivors(run.path(r.cleaned_dir)) for r in run.rounds]
    indexes = [txn_indexes(run.path(r.cleaned_dir)) for r in run.rounds]
    for number, (out, kafka_round) in enumerate(zip(kafka, run.rounds, strict=True), 1):
        assert kafka_round.checkpoint == kafka_round.active_base
        assert kafka_round.dirty_section[1] == kafka_round.checkpoint
        cleaned = out.below(kafka_round.active_base)
        assert len(cleaned.records) < len(
            kafka_input(run, number).below(kafka_round.active_base).records
        )
        assert any(b.records_count == 0 for b in cleaned.batches), "no empty batch was kept"
    # Round 1: surviving tombstones stamped; the aborted transaction's marker kept and indexed.
    (h1,) = {b.delete_horizon_ms for b, _ in tombstones(kafka[0])}
    assert h1 == run.rounds[0].now_ms + run.delete_retention_ms
    first_abort = markers(source, "ABORT")[0]
    assert first_abort in markers(kafka[0], "ABORT")
    assert any(t.last_offset == first_abort.base_offset for e in indexes[0].values() for t in e)
    # Round 2: the marker has no data left: stamped, and its index entry dropped.
    (again,) = [b for b in kafka[1].batches if b.base_offset == first_abort.base_offset]
    assert again.delete_horizon_ms == run.rounds[1].now_ms + run.delete_retention_ms
    assert all(t.last_offset != first_abort.base_offset for e in indexes[1].values() for t in e)
    # Round 3: aborted data that ends at the first uncleanable offset, of a producer that wrote
    # more later (so not its last batch), is kept as an empty batch.
    (boundary,) = [b for b in kafka[2].batches if b.last_offset == run.rounds[2].active_base - 1]
    assert (boundary.transactional, boundary.control, boundary.records_count) == (True, False, 0)
    round_one_tombstones = {offset for _, offset in tombstones(kafka[0])}
    if run.expire:
        # Round 2 started past round 1's horizon: its tombstones are gone; round 3 removed the
        # first aborted transaction's marker.
        assert not round_one_tombstones & {o for _, o in tombstones(kafka[1])}
        assert all(b.base_offset != first_abort.base_offset for b in kafka[2].batches)
    else:
        # Nothing expired: the tombstones still carry the horizon round 1 gave them.
        kept = [(b, o) for b, o in tombstones(kafka[2]) if o in round_one_tombstones]
        assert kept and {b.delete_horizon_ms for b, _ in kept} == {h1}
        assert first_abort.base_offset in {b.base_offset for b in kafka[2].batches}


# --- tierlog against Kafka ------------------------------------------------------------------------


@pytest.mark.parametrize("name", SCENARIOS)
def test_survivors_are_kafkas(
    name: str, kafka_runs: dict[str, KafkaRun], tierlog_runs: dict[str, list[TierlogRound]]
) -> None:
    """Round by round: the same records, batches, segments, transaction index entries, cleaner
    checkpoint and dirty section."""
    run = kafka_runs[name]
    rounds = tierlog_runs[name]
    for _, kafka_round, ours in rounds_of(name, kafka_runs, tierlog_runs):
        number = kafka_round.number
        where = f"{name}, round {number}"
        kafka = survivors(run.path(kafka_round.cleaned_dir))
        mine = survivors(ours.cleaned_dir)
        assert ours.summary.cleaned, where
        assert (
            ours.summary.first_dirty_offset,
            ours.summary.end_offset,
        ) == kafka_round.dirty_section, where
        assert ours.checkpoint == kafka_round.checkpoint, where
        assert mine.records == kafka.records, (
            f"{where}: {first_difference(kafka.records, mine.records)}"
        )
        assert mine.batches == kafka.batches, (
            f"{where}: {first_difference(kafka.batches, mine.batches)}"
        )
        if groups_must_match(run, rounds, number):
            assert mine.layout == kafka.layout, (
                f"{where}: {first_difference(kafka.layout, mine.layout)}"
            )
            assert txn_indexes(ours.cleaned_dir) == txn_indexes(
                run.path(kafka_round.cleaned_dir)
            ), where
        else:
            flat = [t for e in txn_indexes(ours.cleaned_dir).values() for t in e]
            kafka_flat = [
                t for e in txn_indexes(run.path(kafka_round.cleaned_dir)).values() for t in e
            ]
            assert flat == kafka_flat, where


@pytest.mark.parametrize("name", SCENARIOS)
def test_batches_are_kafkas_byte_for_byte_where_the_format_decides(
    name: str, kafka_runs: dict[str, KafkaRun], tierlog_runs: dict[str, list[TierlogRound]]
) -> None:
    """A batch without compression is the same bytes on both sides (CRC and size), rebuilt or
    not; so is a compressed batch that Kafka kept as it was, when tierlog had the same batch."""
    run = kafka_runs[name]
    rounds = tierlog_runs[name]
    compared = 0
    for _, kafka_round, ours in rounds_of(name, kafka_runs, tierlog_runs):
        number = kafka_round.number
        kafka_in = {b.base_offset: b for b in kafka_input(run, number).batches}
        ours_in = {b.base_offset: b for b in tierlog_input(run, rounds, number).batches}
        mine = {b.base_offset: b for b in survivors(ours.cleaned_dir).batches}
        for batch in survivors(run.path(kafka_round.cleaned_dir)).batches:
            source = kafka_in.get(batch.base_offset)
            ours_source = ours_in.get(batch.base_offset)
            copied = (
                source is not None
                and ours_source is not None
                and (source.crc, source.size) == (ours_source.crc, ours_source.size)
                and (batch.crc, batch.size) == (source.crc, source.size)
            )
            if batch.codec == "none" or copied:
                theirs = mine[batch.base_offset]
                assert (theirs.crc, theirs.size) == (batch.crc, batch.size), (
                    f"{name}, round {number}: batch {batch.base_offset} ({batch.codec})"
                )
                compared += 1
    assert compared > 20


@pytest.mark.parametrize("name", SCENARIOS)
def test_horizons_are_tierlogs_own_clock(
    name: str, kafka_runs: dict[str, KafkaRun], tierlog_runs: dict[str, list[TierlogRound]]
) -> None:
    """The horizons a tierlog round stamps are its ``now_ms`` plus ``delete.retention.ms``, and
    older ones are those of earlier rounds (carried over)."""
    run = kafka_runs[name]
    stamped: set[int] = set()
    for _, _, ours in rounds_of(name, kafka_runs, tierlog_runs):
        horizons = survivors(ours.cleaned_dir).horizons()
        new = horizons - stamped
        assert new == {ours.now_ms + run.delete_retention_ms}, f"round {ours.number}"
        stamped |= horizons


# --- Kafka's tool reads tierlog's files -----------------------------------------------------------


SEGMENT_FILES = (".log", ".index", ".timeindex", ".txnindex")
INDEXES = (".index", ".timeindex")
LOGS_AND_INDEXES = (".log", *INDEXES)


def cleaned_files(
    directory: Path, below: int, suffixes: tuple[str, ...] = SEGMENT_FILES
) -> list[Path]:
    """The files of the segments below ``below`` (the ones a round wrote)."""
    return sorted(
        p for p in directory.iterdir() if p.suffix in suffixes and int(p.name[:20]) < below
    )


def dumped_batches(dumped: dict[str, DumpedFile], directory: Path, below: int) -> list[Any]:
    return [
        b
        for base in segment_bases(directory)
        if base < below
        for b in dumped[str(directory / f"{base:020d}.log")].batches
    ]


def report_for(report: dict[tuple[str, str], list[str]], path: Path) -> dict[str, list[str]]:
    return {kind: lines for (kind, where), lines in report.items() if where == str(path)}


@pytest.mark.parametrize("name", SCENARIOS)
def test_kafka_reads_tierlog_cleaned_segments(
    name: str, kafka_runs: dict[str, KafkaRun], tierlog_runs: dict[str, list[TierlogRound]]
) -> None:
    """Kafka's ``DumpLogSegments --deep-iteration`` reads every segment file tierlog's rounds
    wrote (log, offset and time index, transaction index) without error, every batch valid, and
    reports the batches, records and aborted transactions it reports for Kafka's files.
    Where a segment's batches have the same sizes on both sides, its index entries and what
    ``--verify-index-only`` says about them are Kafka's too; elsewhere that tool finds no
    offset-index entry that misses its batch; ``--index-sanity-check`` passes everywhere.
    (One run of the tool per option for all rounds and both sides: a JVM start is slow.)"""
    run = kafka_runs[name]
    rounds = tierlog_runs[name]
    sides = [
        (kafka_round, run.path(kafka_round.cleaned_dir), ours.cleaned_dir)
        for _, kafka_round, ours in rounds_of(name, kafka_runs, tierlog_runs)
    ]
    ours_all = [f for k, _, d in sides for f in cleaned_files(d, k.active_base)]
    kafka_all = [f for k, d, _ in sides for f in cleaned_files(d, k.active_base)]
    deep = dump_log_segments(ours_all + kafka_all, "--deep-iteration")
    assert deep.returncode == 0, deep.stderr
    dumped = parse_dump(deep.stdout)
    assert sorted(dumped) == sorted(map(str, ours_all + kafka_all))
    for path in ours_all:
        assert dumped[str(path)].invalid_bytes == 0, path
        assert all(b["isvalid"] for b in dumped[str(path)].batches), path
    indexes = [f for f in ours_all + kafka_all if f.suffix in INDEXES]
    verify = dump_log_segments(indexes, "--verify-index-only")
    assert verify.returncode == 0, verify.stderr
    report = verify_report(verify.stderr)
    for (kind, where), lines in report.items():
        assert kind not in ("Mismatches", "The following indexed offsets are not found"), (
            f"{kind} in {where}: {lines}"
        )

    same_sizes = 0
    for kafka_round, kafka_dir, our_dir in sides:
        where = f"{name}, round {kafka_round.number}"
        below = kafka_round.active_base
        kafka_batches = [dump_fields(b) for b in dumped_batches(dumped, kafka_dir, below)]
        our_batches = [dump_fields(b) for b in dumped_batches(dumped, our_dir, below)]
        assert our_batches == kafka_batches, (
            f"{where}: {first_difference(kafka_batches, our_batches)}"
        )
        txn = [
            e
            for p in cleaned_files(kafka_dir, below, (".txnindex",))
            for e in dumped[str(p)].entries
        ]
        our_txn = [
            e for p in cleaned_files(our_dir, below, (".txnindex",)) for e in dumped[str(p)].entries
        ]
        assert our_txn == txn, where
        if groups_must_match(run, rounds, kafka_round.number):
            names = [p.name for p in cleaned_files(our_dir, below, LOGS_AND_INDEXES)]
            assert names == [p.name for p in cleaned_files(kafka_dir, below, LOGS_AND_INDEXES)]
        for base in segment_bases(our_dir):
            log = f"{base:020d}.log"
            if base >= below or not (kafka_dir / log).exists():
                continue
            sizes = [b["size"] for b in dumped[str(our_dir / log)].batches]
            if sizes != [b["size"] for b in dumped[str(kafka_dir / log)].batches]:
                continue
            same_sizes += 1
            for suffix in INDEXES:
                ours, kafkas = our_dir / f"{base:020d}{suffix}", kafka_dir / f"{base:020d}{suffix}"
                assert dumped[str(ours)].entries == dumped[str(kafkas)].entries, f"{where}: {ours}"
                assert report_for(report, ours) == report_for(report, kafkas), f"{where}: {ours}"
    assert same_sizes >= 10, "too few segments to compare index entries with Kafka's"

    our_indexes = [f for f in ours_all if f.suffix in INDEXES]
    sanity = dump_log_segments(our_indexes, "--index-sanity-check")
    assert sanity.returncode == 0, sanity.stderr
    checked = parse_dump(sanity.stdout)
    for index in our_indexes:
        lines = checked[str(index)].lines
        assert lines in ([f"{index} passed sanity check."], [f"{index} is empty."]), lines


# --- the fact the issue starts from ---------------------------------------------------------------


def test_kafka_refuses_remote_storage_on_a_compacted_topic(kafka_broker: Service) -> None:
    """Kafka 4.3.1 with tiered storage enabled refuses ``remote.storage.enable=true`` on a
    compacted topic with INVALID_CONFIG, at creation and when either setting is altered, while
    it accepts it on a ``delete`` topic."""
    with admin_client(kafka_broker) as admin:
        for policy in ("compact", "compact,delete"):
            topic = unique_topic("remote-compact")
            configs = {"cleanup.policy": policy, "remote.storage.enable": "true"}
            response = admin.create_topics(
                [NewTopic(topic, 1, 1, topic_configs=configs)], raise_errors=False
            )
            ((error_code, message),) = [
                (t["error_code"], t["error_message"]) for t in response["topics"]
            ]
            assert (error_code, message) == (40, REMOTE_STORAGE_REFUSED), policy
            assert topic not in admin.list_topics()
    compacted = unique_topic("remote-compact")
    create_topic(kafka_broker, compacted, {"cleanup.policy": "compact"})
    tiered = unique_topic("remote-delete")
    create_topic(kafka_broker, tiered, {"remote.storage.enable": "true"})
    refusals = [
        alter_topic_result(kafka_broker, compacted, {"remote.storage.enable": "true"}),
        alter_topic_result(kafka_broker, tiered, {"cleanup.policy": "compact"}),
        alter_topic_result(kafka_broker, tiered, {"cleanup.policy": "compact,delete"}),
    ]
    refused = f"[Error 40] InvalidConfigurationError: {REMOTE_STORAGE_REFUSED}"
    assert refusals == [refused] * 3
