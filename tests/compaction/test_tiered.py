"""A tiered compacted partition cleaned through remote storage (``compaction.tiered``).

Real parts: a ``LocalLog`` with small segments, the ``local`` RSM (counting its requests) and the
``embedded`` RLMM. The reference is the in-process cleaner on a copy of the same log: cleaning
through remote storage must keep exactly the records the local cleaner keeps, and a reader of the
remote chain must see them.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm._tiering import TIP, Clock, open_log, open_rlmm, open_rsm, tier
from tierlog.compaction.cleaner import clean_local_log
from tierlog.compaction.engine import CleanEngine, PythonEngine
from tierlog.compaction.remote_io import StorageSpec, register_open
from tierlog.compaction.tiered import TieredCleaner, remote_chain, superseded_segments
from tierlog.log.batch import build_batch
from tierlog.log.local_log import LocalLog
from tierlog.log.reader import iter_batches_with_records
from tierlog.log.record import Record

COMPACTED = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": 0.01,
    "delete.retention.ms": 86_400_000,
    "local.retention.ms": 1000,
}


def _produce(log: LocalLog, clock: Clock, rounds: int, keys: int, *, start: int = 0) -> None:
    for i in range(start, start + rounds):
        records = []
        for j in range(3):
            n = i * 3 + j
            key = f"k{n % keys}".encode()
            value = None if n % 17 == 5 else f"value-{n}".encode() * 4
            records.append(Record(j, clock.now + n, key, value))
        log.append_as_leader(build_batch(records), 0)
    log.roll()


def _records_of(paths: list[Path]) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for path in paths:
        for _, header, records in iter_batches_with_records(path):
            if header.is_control:
                continue
            out.extend((r.offset, r.key, r.value) for r in records)
    return out


def _remote_records(
    rsm: object, chain: list[object], scratch: Path
) -> list[tuple[int, bytes | None, bytes | None]]:
    paths = []
    for i, segment in enumerate(chain):
        target = scratch / f"{i}.log"
        with rsm.fetch_log_segment(segment, 0) as stream:  # type: ignore[attr-defined]
            target.write_bytes(stream.read())
        paths.append(target)
    return _records_of(paths)


@pytest.fixture
def tiered(tmp_path: Path) -> Iterator[tuple[LocalLog, object, object, Clock]]:
    clock = Clock()
    log = open_log(tmp_path / "log" / "topic-0", clock, **COMPACTED)
    rsm = open_rsm(tmp_path / "remote")
    rlmm = open_rlmm(tmp_path / "rlmm")
    yield log, rsm, rlmm, clock
    log.close()
    rlmm.close()


def _cleaner(rsm: object, rlmm: object, tmp_path: Path) -> TieredCleaner:
    spec = StorageSpec.of("local", {"dir": str(tmp_path / "remote")})
    register_open(spec, rsm)  # type: ignore[arg-type]
    return TieredCleaner(rlmm, rsm, spec, broker_id=0, scratch=str(tmp_path / "scratch"))  # type: ignore[arg-type]


def test_cleaning_through_remote_storage_keeps_what_the_local_cleaner_keeps(
    tiered: tuple[LocalLog, object, object, Clock], tmp_path: Path, engine: CleanEngine
) -> None:
    log, rsm, rlmm, clock = tiered
    _produce(log, clock, rounds=60, keys=12)
    tier(log, rsm, rlmm)  # type: ignore[arg-type]
    reference_dir = tmp_path / "ref" / "topic-0"
    shutil.copytree(log.dir, reference_dir)
    reference = LocalLog.open(
        reference_dir, {**COMPACTED, "remote.storage.enable": False, "internal.segment.bytes": 600}
    )
    try:
        ref = clean_local_log(reference, checkpoint=None, now_ms=clock.now, force=True)
        assert ref.cleaned
        expected = _records_of([s.log_path for s in reference.segments])
    finally:
        reference.close()

    cleaner = _cleaner(rsm, rlmm, tmp_path)
    result = cleaner.clean(
        log,
        TIP,
        leader_epoch=0,
        checkpoint=None,
        now_ms=clock.now,
        force=True,
        engine=engine,
    )
    assert result.cleaned
    assert result.end_offset == ref.end_offset
    chain = remote_chain(rlmm, TIP, log)  # type: ignore[arg-type]
    assert all(s.cleaner_offsets == {0: result.end_offset} for s in chain)
    got = _remote_records(rsm, chain, tmp_path)
    # The reference also cleaned the local tail beyond the remote chain; compare the same range.
    assert got == [r for r in expected if r[0] < result.end_offset]
    # The replaced segments are unreferenced, left for the expiration task.
    old = superseded_segments(rlmm, TIP, chain)  # type: ignore[arg-type]
    assert len(old) == len(chain)


def test_bloom_filters_keep_clean_segments_without_dirty_keys_in_remote_storage(
    tiered: tuple[LocalLog, object, object, Clock], tmp_path: Path, engine: CleanEngine
) -> None:
    """Round 1 gives every remote segment a compaction summary; round 2's dirty keys live in one
    old segment, so only that one (plus Bloom false positives, 1% each) is downloaded."""
    log, rsm, rlmm, clock = tiered
    _produce(log, clock, rounds=80, keys=10_000)  # every key once: nothing superseded yet
    tier(log, rsm, rlmm)  # type: ignore[arg-type]
    cleaner = _cleaner(rsm, rlmm, tmp_path)
    first = cleaner.clean(
        log, TIP, leader_epoch=0, checkpoint=None, now_ms=clock.now, force=True, engine=engine
    )
    chain = remote_chain(rlmm, TIP, log)  # type: ignore[arg-type]
    assert first.cleaned and len(chain) >= 10
    target = next(s for s in chain if s.start_offset <= 100 <= s.end_offset)
    # Local retention (1 s, compact: only below the cleaner offset) leaves remote copies only.
    clock.advance(100_000)
    log.delete_retention_segments(now=clock.now)
    assert log.local_log_start_offset >= first.end_offset

    clock.advance(1000)
    log.append_as_leader(build_batch([Record(0, clock.now, b"k100", b"new")]), 0)
    log.roll()
    tier(log, rsm, rlmm)  # type: ignore[arg-type]
    rsm.reset_counts()  # type: ignore[attr-defined]
    second = cleaner.clean(
        log, TIP, leader_epoch=0, checkpoint=None, now_ms=clock.now, force=True, engine=engine
    )
    assert second.cleaned
    clean_count = len(chain)
    assert second.segments_skipped >= clean_count - 2
    # The target segment is downloaded (twice at most: scan and rewrite on different hosts),
    # plus at most two false positives; the rest of the remote bytes stay where they are.
    largest = max(s.segment_size_in_bytes for s in chain)
    assert (
        target.segment_size_in_bytes
        <= second.bytes_downloaded
        <= 2 * (target.segment_size_in_bytes + 2 * largest)
    )
    assert second.bytes_downloaded < second.remote_bytes / 4
    if isinstance(engine, PythonEngine):  # downloads in this process: the requests are seen
        downloaded = {r.segment_id for r in rsm.segment_requests}  # type: ignore[attr-defined]
        assert target.remote_log_segment_id.id in downloaded
        assert len(downloaded) <= 3
    chain = remote_chain(rlmm, TIP, log)  # type: ignore[arg-type]
    records = _remote_records(rsm, chain, tmp_path)
    assert [r for r in records if r[1] == b"k100"] == [(log.log_end_offset - 1, b"k100", b"new")]
    assert len(records) == 80 * 3  # 240 keys once each, k100's old version replaced
