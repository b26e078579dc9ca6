"""Bloom filter sizing of the compaction summary (``summary.bloom_shape``), its configuration,
its measured false-positive rate, the unchanged version-1 format, and the summary bytes a tiered
round counts as downloaded.

The sizing rule: ``m = max(bits the rate needs, size_ratio * segment bytes * 8)``, ``k`` optimal
for the resulting bits per key within [1, ``MAX_HASHES``]. The rate is an upper bound; the floor
only lowers it. Measured rates are on 10^5 random digests (not members) with a fixed seed.
"""

from __future__ import annotations

import math
import random
import re
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from rlm._tiering import TIP, Clock, open_log, open_rlmm, open_rsm, tier
from tierlog.compaction.config import CleanerConfig
from tierlog.compaction.engine import PythonEngine
from tierlog.compaction.remote_io import StorageSpec, fetch_index_bytes, register_open
from tierlog.compaction.scan import key_digest
from tierlog.compaction.summary import (
    DEFAULT_SIZE_RATIO,
    MAX_HASHES,
    BloomFilter,
    SegmentSummary,
    SummaryBuilder,
    bloom_shape,
)
from tierlog.compaction.tiered import TieredCleaner, remote_chain
from tierlog.log.batch import build_batch, read_batch_header
from tierlog.log.local_log import LocalLog
from tierlog.log.record import Record
from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager
from tierlog.node.http_api import compaction_json
from tierlog.spi import (
    ConfigError,
    IndexType,
    InvalidArgumentError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
)
from tierlog.storage.local import LocalTieredStorage

MIB = 1 << 20
SAMPLES = 100_000


def _rate_bits(keys: int, fpp: float) -> int:
    return math.ceil(-keys * math.log(fpp) / math.log(2) ** 2)


def _expected_rate(m: int, k: int, keys: int) -> float:
    return (1 - math.exp(-k * keys / m)) ** k


def _members(count: int) -> list[bytes]:
    return [key_digest(b"key-%010d" % i) for i in range(count)]


def _measured_rate(bloom: BloomFilter, seed: int) -> float:
    rng = random.Random(seed)
    probes = [rng.randbytes(16) for _ in range(SAMPLES)]
    return float(bloom.might_contain(probes).mean())


# Sizing ------------------------------------------------------------------------------------------
def test_the_rate_binds_when_the_floor_is_smaller() -> None:
    # 10,000 keys in a 1 KB segment: 1% of its bits is far below what 1% per key needs.
    m, k = bloom_shape(10_000, 0.01, segment_bytes=1000, size_ratio=0.01)
    assert m == _rate_bits(10_000, 0.01) == 95_851
    assert k == 7  # round(9.585 * ln 2)


def test_the_floor_binds_for_a_segment_of_large_records() -> None:
    # 6,000 keys in 1 MiB (records of ~170 bytes): the floor gives ~14 bits a key, not ~9.6.
    m, k = bloom_shape(6000, 0.01, segment_bytes=MIB, size_ratio=0.01)
    assert m == math.ceil(0.01 * MIB * 8) == 83_887
    assert m > _rate_bits(6000, 0.01)
    assert k == round(m / 6000 * math.log(2)) == 10
    assert _expected_rate(m, k, 6000) < 0.0013  # ~8x below the 1% bound


def test_ratio_zero_sizes_by_the_rate_alone() -> None:
    assert bloom_shape(6000, 0.01, segment_bytes=MIB, size_ratio=0.0) == (_rate_bits(6000, 0.01), 7)
    assert bloom_shape(6000, 0.001) == (_rate_bits(6000, 0.001), 10)


def test_hash_count_stays_between_one_and_the_cap() -> None:
    # A huge floor for few keys: the optimum (thousands of positions) is capped.
    m, k = bloom_shape(10, 0.01, segment_bytes=MIB, size_ratio=0.01)
    assert m / 10 * math.log(2) > MAX_HASHES and k == MAX_HASHES
    # A rate so high that the optimum rounds to 0 positions: one.
    m, k = bloom_shape(100_000, 0.9)
    assert round(m / 100_000 * math.log(2)) == 0 and k == 1
    # No keys at all (a segment of empty batches): the smallest filter, a valid k.
    m, k = bloom_shape(0, 0.01, segment_bytes=0, size_ratio=0.01)
    assert m == 64 and 1 <= k <= MAX_HASHES


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((10, 0.0), "false-positive rate must be in (0, 1), got 0.0"),
        ((10, 1.0), "false-positive rate must be in (0, 1), got 1.0"),
        ((10, 0.01, 100, 1.0), "size ratio must be in [0, 1), got 1.0"),
        ((10, 0.01, 100, -0.5), "size ratio must be in [0, 1), got -0.5"),
        ((-1, 0.01), "-1 keys"),
        ((10, 0.01, -5, 0.01), "in -5 bytes"),
    ],
)
def test_bad_sizing_arguments_are_refused(args: tuple[float, ...], words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(words)):
        bloom_shape(*args)  # type: ignore[arg-type]


# Configuration -----------------------------------------------------------------------------------
def test_configuration_defaults_and_parsing() -> None:
    default = CleanerConfig()
    assert default.remote_log_compaction_bloom_filter_fpp == 0.01
    assert default.remote_log_compaction_bloom_filter_size_ratio == DEFAULT_SIZE_RATIO == 0.01
    parsed = CleanerConfig.from_props(
        {
            "remote.log.compaction.bloom.filter.fpp": "0.001",
            "remote.log.compaction.bloom.filter.size.ratio": "0",
        }
    )
    assert parsed.remote_log_compaction_bloom_filter_fpp == 0.001
    assert parsed.remote_log_compaction_bloom_filter_size_ratio == 0.0
    assert CleanerConfig.recognizes("remote.log.compaction.bloom.filter.size.ratio")


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("remote.log.compaction.bloom.filter.fpp", "0", "Value must be in (0, 1)"),
        ("remote.log.compaction.bloom.filter.fpp", "1", "Value must be in (0, 1)"),
        ("remote.log.compaction.bloom.filter.fpp", "1.5", "Value must be no more than 1"),
        ("remote.log.compaction.bloom.filter.fpp", "-0.01", "Value must be at least 0"),
        ("remote.log.compaction.bloom.filter.size.ratio", "1", "Value must be in [0, 1)"),
        ("remote.log.compaction.bloom.filter.size.ratio", "-0.1", "Value must be at least 0"),
        ("remote.log.compaction.bloom.filter.size.ratio", "lots", "Not a number"),
    ],
)
def test_bad_values_are_config_errors_naming_key_and_value(
    key: str, value: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as info:
        CleanerConfig.from_props({key: value})
    message = str(info.value)
    assert key in message and value in message and reason in message


# Measured false-positive rates -------------------------------------------------------------------
def test_a_filter_under_the_floor_measures_below_its_rate_bound() -> None:
    """6,000 keys of a 1 MiB segment at 1%: the floor's filter measures ~0.12%, and a filter
    sized for the rate alone (what a floor not applied would give) measures ~1%: the bound
    asserted separates them."""
    members = _members(6000)
    floored = BloomFilter.of(members, 0.01, segment_bytes=MIB, size_ratio=0.01)
    assert (floored.m, floored.k) == bloom_shape(6000, 0.01, MIB, 0.01)
    assert floored.might_contain(members).all()  # no false negatives
    expected = _expected_rate(floored.m, floored.k, 6000)
    rate = _measured_rate(floored, seed=11)
    # ~121 false positives expected; 1.5x is 5 sigma above, and 5x below a rate-only filter.
    assert rate <= 1.5 * expected <= 0.002, (rate, expected)

    rate_only = BloomFilter.of(members, 0.01)
    assert rate_only.might_contain(members).all()
    assert 0.007 <= _measured_rate(rate_only, seed=11) <= 0.0115
    assert rate < _measured_rate(rate_only, seed=11) / 5


@pytest.mark.parametrize("fpp", [0.01, 0.001])
def test_a_filter_sized_by_its_rate_measures_about_that_rate(fpp: float) -> None:
    members = _members(5000)
    bloom = BloomFilter.of(members, fpp, segment_bytes=1000, size_ratio=0.01)
    assert bloom.m == _rate_bits(5000, fpp)
    assert bloom.might_contain(members).all()
    rate = _measured_rate(bloom, seed=7)
    # The optimum k rounds, so the ideal rate is within a few % of fpp; 3 sigma of 10^5 draws.
    assert rate <= fpp * 1.05 + 3 * math.sqrt(fpp / SAMPLES), rate


# The summary and its format ----------------------------------------------------------------------
def _observe_segment(builder: SummaryBuilder, keys: int, value_bytes: int) -> int:
    size = 0
    for start in range(0, keys, 100):
        records = [
            Record(start + i, 1_000 + start + i, b"key-%010d" % (start + i), b"v" * value_bytes)
            for i in range(min(100, keys - start))
        ]
        data = build_batch(records, base_offset=start)
        header = read_batch_header(data, 0)
        builder.observe(header, records, [key_digest(r.key) for r in records if r.key])
        size += len(data)
    return size


def test_the_builder_sizes_by_the_bytes_it_observed() -> None:
    builder = SummaryBuilder(0.01, 0.01)
    size = _observe_segment(builder, 3000, 300)
    assert builder.segment_bytes == size > 900_000
    summary = builder.build()
    assert summary.key_count == 3000 and summary.record_count == 3000
    assert (summary.bloom.m, summary.bloom.k) == bloom_shape(3000, 0.01, size, 0.01)
    assert summary.bloom.m == math.ceil(0.01 * size * 8)  # the floor binds at 300-byte values
    # Ratio 0: the rate alone, ~2.7x smaller (9.6 bits a key instead of 26).
    alone = SummaryBuilder(0.01, 0.0)
    _observe_segment(alone, 3000, 300)
    assert alone.build().bloom.m == _rate_bits(3000, 0.01) < summary.bloom.m / 2


def test_format_version_1_is_unchanged_and_round_trips() -> None:
    """m and k were always in the header, so a larger filter needs no new version: the bytes
    are the version-1 layout, packed here by hand."""
    builder = SummaryBuilder(0.01, 0.01)
    _observe_segment(builder, 1000, 200)
    summary = builder.build()
    encoded = summary.encode()
    head = struct.pack(
        ">4sbbqqqqqiq",
        b"TLCS",
        1,
        0,
        summary.record_count,
        summary.key_count,
        summary.first_batch_timestamp,
        summary.largest_timestamp,
        -1,
        summary.bloom.k,
        summary.bloom.m,
    )
    assert encoded == head + summary.bloom.bits
    assert len(summary.bloom.bits) == (summary.bloom.m + 7) // 8
    assert SegmentSummary.decode(encoded) == summary
    # A summary sized by the rate alone (as before the floor) still decodes and answers.
    old = SummaryBuilder(0.01, 0.0)
    _observe_segment(old, 1000, 200)
    decoded = SegmentSummary.decode(old.build().encode())
    assert decoded.bloom.might_contain(_members(1000)).all()


# Summary bytes of a tiered round -----------------------------------------------------------------
COMPACTED = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": 0.01,
    "delete.retention.ms": 86_400_000,
    "local.retention.ms": 1000,
}


@pytest.fixture
def tiered(
    tmp_path: Path,
) -> Iterator[tuple[LocalLog, LocalTieredStorage, EmbeddedRemoteLogMetadataManager, Clock]]:
    clock = Clock()
    log = open_log(tmp_path / "log" / "topic-0", clock, **COMPACTED)
    rsm = open_rsm(tmp_path / "remote")
    rlmm = open_rlmm(tmp_path / "rlmm")
    yield log, rsm, rlmm, clock
    log.close()
    rlmm.close()


def _cleaner(
    rsm: LocalTieredStorage, rlmm: EmbeddedRemoteLogMetadataManager, tmp_path: Path
) -> TieredCleaner:
    spec = StorageSpec.of("local", {"dir": str(tmp_path / "remote")})
    register_open(spec, rsm)
    return TieredCleaner(rlmm, rsm, spec, broker_id=0, scratch=str(tmp_path / "scratch"))


def _append(log: LocalLog, clock: Clock, keys: range) -> None:
    for start in range(keys.start, keys.stop, 3):
        records = [
            Record(j, clock.now, f"k{n}".encode(), f"value-{n}".encode() * 4)
            for j, n in enumerate(range(start, min(start + 3, keys.stop)))
        ]
        log.append_as_leader(build_batch(records), 0)
    log.roll()


def _summary_sizes(
    rsm: LocalTieredStorage, chain: Sequence[RemoteLogSegmentMetadata]
) -> dict[RemoteLogSegmentId, int]:
    out = {}
    for segment in chain:
        data = fetch_index_bytes(rsm, segment, IndexType.COMPACTION_SUMMARY)
        if data is not None:
            out[segment.remote_log_segment_id] = len(data)
    return out


def test_summary_bytes_are_counted_once_in_the_round_of_their_partition(
    tiered: tuple[LocalLog, LocalTieredStorage, EmbeddedRemoteLogMetadataManager, Clock],
    tmp_path: Path,
) -> None:
    log, rsm, rlmm, clock = tiered
    _append(log, clock, range(240))
    tier(log, rsm, rlmm)
    cleaner = _cleaner(rsm, rlmm, tmp_path)
    first = cleaner.clean(
        log,
        TIP,
        leader_epoch=0,
        checkpoint=None,
        now_ms=clock.now,
        force=True,
        engine=PythonEngine(),
    )
    assert first.cleaned and first.summary_bytes_downloaded == 0  # copied segments have none
    chain = remote_chain(rlmm, TIP, log)
    sizes = _summary_sizes(rsm, chain)
    assert len(sizes) == len(chain) >= 10

    clock.advance(100_000)
    log.delete_retention_segments(now=clock.now)
    clock.advance(1000)
    log.append_as_leader(build_batch([Record(0, clock.now, b"k100", b"new")]), 0)
    log.roll()
    tier(log, rsm, rlmm)
    # A new leader's cleaner (nothing cached) fetches every summary of the chain; planning
    # first (as the cleaner manager does to pick a partition) moves nothing out of the round.
    fresh = _cleaner(rsm, rlmm, tmp_path)
    fresh.plan(log, TIP, checkpoint=None, now_ms=clock.now)
    second = fresh.clean(
        log,
        TIP,
        leader_epoch=0,
        checkpoint=None,
        now_ms=clock.now,
        force=True,
        engine=PythonEngine(),
    )
    assert second.cleaned and second.segments_skipped > 0
    assert second.summary_bytes_downloaded == sum(sizes.values())
    assert compaction_json(second)["summary_bytes_downloaded"] == second.summary_bytes_downloaded

    # The same cleaner's next round fetches only the summaries of segments it has not seen:
    # those the second round published.
    clock.advance(1000)
    log.append_as_leader(build_batch([Record(0, clock.now, b"k7", b"newer")]), 0)
    log.roll()
    tier(log, rsm, rlmm)
    third = fresh.clean(
        log,
        TIP,
        leader_epoch=0,
        checkpoint=None,
        now_ms=clock.now,
        force=True,
        engine=PythonEngine(),
    )
    new = _summary_sizes(rsm, second.published)
    assert new and third.summary_bytes_downloaded == sum(new.values())
    assert third.summary_bytes_downloaded < second.summary_bytes_downloaded


@pytest.mark.parametrize("ratio", [0.0, 0.01, 0.5])
def test_the_cleaners_ratio_shapes_the_filters_it_uploads(
    tiered: tuple[LocalLog, LocalTieredStorage, EmbeddedRemoteLogMetadataManager, Clock],
    tmp_path: Path,
    ratio: float,
) -> None:
    """``remote.log.compaction.bloom.filter.size.ratio`` reaches the summary of every segment a
    round uploads: its filter is shaped by the cleaned segment's own size."""
    log, rsm, rlmm, clock = tiered
    _append(log, clock, range(240))
    tier(log, rsm, rlmm)
    cleaner = _cleaner(rsm, rlmm, tmp_path)
    cleaner.bloom_size_ratio = ratio
    result = cleaner.clean(
        log,
        TIP,
        leader_epoch=0,
        checkpoint=None,
        now_ms=clock.now,
        force=True,
        engine=PythonEngine(),
    )
    assert result.cleaned and result.published
    for segment in result.published:
        data = fetch_index_bytes(rsm, segment, IndexType.COMPACTION_SUMMARY)
        assert data is not None
        bloom = SegmentSummary.decode(data).bloom
        keys = SegmentSummary.decode(data).key_count
        assert (bloom.m, bloom.k) == bloom_shape(keys, 0.01, segment.segment_size_in_bytes, ratio)
        if ratio == 0.5:
            assert bloom.m == math.ceil(0.5 * segment.segment_size_in_bytes * 8) > 64
