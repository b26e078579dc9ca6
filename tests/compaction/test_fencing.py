"""Leader-epoch fencing of compaction through remote storage: the KIP's broker A / broker B table.

Broker A leads the compacted partition in leader epoch 0 and finishes a round (its segments say
{LE-0 -> CO-e1}). A becomes unresponsive; B takes over in epoch 1, resolves epoch 0's cleaner
offset from the RLMM and cleans on from there ({LE-0 -> e1, LE-1 -> e2}). A comes back and
publishes a round it had in flight, claiming more for epoch 0 than B resolved. Whatever order
A's late publication and B's arrive in (both after B resolved), readers are never routed to A's
segments, B resumed from e1, and B's expiration deletes A's output as garbage.

Real parts: one LocalLog standing for the partition's (replicated) log, the ``local`` RSM and
the ``embedded`` RLMM that both brokers share, two ``TieredCleaner`` s.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlm._tiering import TIP, Clock, open_log, open_rlmm, open_rsm, tier
from tierlog.compaction.engine import CleanEngine
from tierlog.compaction.remote_io import StorageSpec, register_open
from tierlog.compaction.tiered import TieredCleaner, remote_chain, superseded_segments
from tierlog.log.batch import build_batch
from tierlog.log.local_log import LocalLog
from tierlog.log.reader import iter_batches_with_records
from tierlog.log.record import Record
from tierlog.spi import RemoteLogSegmentMetadata

COMPACTED = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": 0.01,
    "delete.retention.ms": 86_400_000,
    "local.retention.ms": 1000,
}


class DeferredCleaner(TieredCleaner):
    """Broker A come back from the dead: its round's publications are held back, then
    delivered late (``deliver``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.held: list[tuple[RemoteLogSegmentMetadata, object]] = []

    def _publish(self, metadata: RemoteLogSegmentMetadata, custom: object) -> None:
        self.held.append((metadata, custom))

    def deliver(self) -> None:
        for metadata, custom in self.held:
            TieredCleaner._publish(self, metadata, custom)


class HookedCleaner(TieredCleaner):
    """Broker B, with a hook run just before its first publication."""

    before_first_publish: Any = None

    def _publish(self, metadata: RemoteLogSegmentMetadata, custom: object) -> None:
        hook, self.before_first_publish = self.before_first_publish, None
        if hook is not None:
            hook()
        super()._publish(metadata, custom)


def _produce(log: LocalLog, clock: Clock, epoch: int, start: int, count: int) -> None:
    for i in range(start, start + count):
        records = [
            Record(j, clock.now + i, f"k{(i * 3 + j) % 25}".encode(), f"e{epoch}-{i}-{j}".encode())
            for j in range(3)
        ]
        log.append_as_leader(build_batch(records), epoch)
    log.roll()


def _read(rsm: Any, chain: list[RemoteLogSegmentMetadata]) -> list[tuple[int, bytes | None]]:
    out = []
    for segment in chain:
        with rsm.fetch_log_segment(segment, 0) as stream:
            data = stream.read()
        for _, header, records in iter_batches_with_records(data):
            if not header.is_control:
                out.extend((r.offset, r.value) for r in records)
    return out


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[tuple[LocalLog, Any, Any, Clock, StorageSpec]]:
    clock = Clock()
    log = open_log(tmp_path / "log" / "topic-0", clock, **COMPACTED)
    rsm = open_rsm(tmp_path / "remote")
    rlmm = open_rlmm(tmp_path / "rlmm")
    spec = StorageSpec.of("local", {"dir": str(tmp_path / "remote")})
    register_open(spec, rsm)
    yield log, rsm, rlmm, clock, spec
    log.close()
    rlmm.close()


@pytest.mark.parametrize("a_arrives", ["before B publishes", "after B publishes"])
def test_a_zombie_leaders_late_round_is_never_routed(
    shared: tuple[LocalLog, Any, Any, Clock, StorageSpec],
    tmp_path: Path,
    a_arrives: str,
    engine: CleanEngine,
) -> None:
    log, rsm, rlmm, clock, spec = shared
    scratch = str(tmp_path / "scratch")
    broker_a = DeferredCleaner(rlmm, rsm, spec, broker_id=1, scratch=scratch)
    broker_b = HookedCleaner(rlmm, rsm, spec, broker_id=2, scratch=scratch)

    # A, epoch 0: one finished round.
    _produce(log, clock, 0, 0, 40)
    tier(log, rsm, rlmm)
    first = TieredCleaner.clean(
        broker_a,
        log,
        TIP,
        leader_epoch=0,
        checkpoint=None,
        now_ms=clock.now,
        force=True,
        engine=engine,
    )
    assert broker_a.held, "A's first round is held like any other: deliver it now"
    broker_a.deliver()
    broker_a.held.clear()
    e1 = first.end_offset
    assert {s.cleaner_offsets[0] for s in remote_chain(rlmm, TIP, log) if s.cleaner_offsets} == {e1}

    # A, still epoch 0 in its own eyes, cleans more data; its publications are in flight.
    clock.advance(1000)
    _produce(log, clock, 0, 40, 20)
    tier(log, rsm, rlmm)
    zombie = broker_a.clean(
        log, TIP, leader_epoch=0, checkpoint=e1, now_ms=clock.now, force=True, engine=engine
    )
    assert zombie.end_offset > e1 and broker_a.held
    zombie_ids = {m.remote_log_segment_id for m, _ in broker_a.held}

    # B takes over in epoch 1 and cleans on: it resolves epoch 0's offset as e1 (A's last
    # published round), and publishes {0: e1, 1: e2}.
    log.assign_epoch_start_offset(1, log.log_end_offset)
    clock.advance(1000)
    _produce(log, clock, 1, 60, 20)
    tier(log, rsm, rlmm)
    if a_arrives == "before B publishes":
        broker_b.before_first_publish = broker_a.deliver
    second = broker_b.clean(
        log, TIP, leader_epoch=1, checkpoint=None, now_ms=clock.now, force=True, engine=engine
    )
    if a_arrives == "after B publishes":
        broker_a.deliver()
    assert second.first_dirty_offset == e1  # resumed from what the RLMM resolved for epoch 0
    e2 = second.end_offset
    chain = remote_chain(rlmm, TIP, log)
    routed = {s.remote_log_segment_id for s in chain}
    assert not routed & zombie_ids
    b_vectors = {tuple(sorted(s.cleaner_offsets.items())) for s in second.published}
    assert b_vectors == {((0, e1), (1, e2))}

    # What readers get is B's compaction of the whole log: the latest value of every key.
    records = _read(rsm, chain)
    offsets = [o for o, _ in records]
    assert offsets == sorted(set(offsets))
    latest: dict[int, tuple[int, bytes | None]] = {}
    for offset, value in records:
        latest[offset] = (offset, value)
    assert len(records) == 25  # 25 keys, each once
    assert all(value is not None and value.startswith(b"e1-") for _, value in records[-10:])

    # B's expiration (superseded_segments from B's view) deletes A's zombie output as garbage.
    garbage = {s.remote_log_segment_id for s in superseded_segments(rlmm, TIP, chain)}
    assert zombie_ids <= garbage
    assert not garbage & routed
