"""Appends to a compacted topic: a leader refuses keyless records with Kafka's message and writes
nothing (``LogValidator.validateKey``), a follower does not check, and the active segment rolls
by ``max.compaction.lag.ms`` (Kafka's ``maxSegmentMs``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.log.batch import ControlRecordType, build_batch, build_control_batch
from tierlog.log.local_log import InvalidRecordError, LocalLog
from tierlog.log.reader import iter_batches_with_records
from tierlog.log.record import Record

NOW = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


def open_log(directory: Path, clock: Clock | None = None, **props: object) -> LocalLog:
    config: dict[str, object] = {"cleanup.policy": "compact", "segment.index.bytes": 4096}
    config.update(props)
    return LocalLog.open(directory, config, clock=clock or Clock(), sync=False)


def keyed(*pairs: tuple[bytes | None, bytes | None], ts: int = NOW, **kwargs: object) -> bytes:
    records = [Record(i, ts, k, v) for i, (k, v) in enumerate(pairs)]
    return build_batch(records, **kwargs)  # type: ignore[arg-type]


def contents(log: LocalLog) -> list[tuple[int, bytes | None, bytes | None]]:
    data = log.read(log.log_start_offset, 1 << 20, "log_end").records
    return [(r.offset, r.key, r.value) for _, _, rs in iter_batches_with_records(data) for r in rs]


def file_sizes(log: LocalLog) -> list[tuple[str, int]]:
    return sorted((p.name, p.stat().st_size) for p in log.dir.iterdir() if p.suffix == ".log")


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
@pytest.mark.parametrize("compression", ["none", "gzip", "zstd"])
def test_a_leader_refuses_a_keyless_record_and_writes_nothing(
    tmp_path: Path, policy: str, compression: str
) -> None:
    log = open_log(tmp_path / "events-3", **{"cleanup.policy": policy})
    log.append_as_leader(keyed((b"k", b"v0")), 0)
    before = (log.log_end_offset, file_sizes(log), contents(log))
    pid_batch = keyed(
        (b"a", b"1"),
        (None, b"keyless"),
        (b"b", b"2"),
        compression=compression,
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
    )
    with pytest.raises(InvalidRecordError) as e:
        log.append_as_leader(pid_batch, 0)
    assert str(e.value) == (
        "Compacted topic cannot accept message without key in topic partition events-3"
    )
    assert (log.log_end_offset, file_sizes(log), contents(log)) == before
    # Nothing reached producer state: the producer's corrected batch, same sequence, is in order.
    info = log.append_as_leader(
        keyed((b"a", b"1"), (b"c", b"x"), (b"b", b"2"), producer_id=7, base_sequence=0), 0
    )
    assert (info.first_offset, info.last_offset) == (1, 3)
    log.close()


def test_the_check_is_made_before_the_active_segment_rolls(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "events-0", clock, **{"segment.ms": 1000})
    log.append_as_leader(keyed((b"k", b"v"), ts=NOW), 0)
    clock.now += 5000  # the next append would roll the active segment first
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(keyed((None, b"v"), ts=clock.now), 0)
    assert [s.base_offset for s in log.segments] == [0]
    log.append_as_leader(keyed((b"k", b"w"), ts=clock.now), 0)
    assert [s.base_offset for s in log.segments] == [0, 1]
    log.close()


def test_an_empty_key_is_a_key_and_a_tombstone_is_a_record(tmp_path: Path) -> None:
    log = open_log(tmp_path / "events-0")
    log.append_as_leader(keyed((b"", b"empty key"), (b"k", None)), 0)
    assert contents(log) == [(0, b"", b"empty key"), (1, b"k", None)]
    log.close()


def test_keyless_records_are_fine_where_nothing_compacts(tmp_path: Path) -> None:
    log = open_log(tmp_path / "events-0", **{"cleanup.policy": "delete"})
    log.append_as_leader(keyed((None, b"a"), (None, b"b")), 0)
    assert contents(log) == [(0, None, b"a"), (1, None, b"b")]
    log.close()


def test_a_follower_does_not_check_keys(tmp_path: Path) -> None:
    """Kafka validates keys on the leader only (``appendAsFollower`` does not validate): keyless
    records remain in a log whose policy changed from delete to compact, and a follower copies
    them as they are."""
    log = open_log(tmp_path / "events-0")
    data = build_batch(
        [Record(0, NOW, None, b"old"), Record(1, NOW, b"k", b"v")],
        base_offset=0,
        partition_leader_epoch=0,
    )
    info = log.append_as_follower(data, 0)
    assert (info.first_offset, info.last_offset) == (0, 1)
    assert contents(log) == [(0, None, b"old"), (1, b"k", b"v")]
    log.close()


def test_transactions_on_a_compacted_topic(tmp_path: Path) -> None:
    """A transactional batch with keys and its marker (a control batch, from the coordinator)
    are appended as on any topic."""
    log = open_log(tmp_path / "events-0")
    log.append_as_leader(
        keyed(
            (b"k", b"v"),
            producer_id=3,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        ),
        0,
    )
    marker = build_control_batch(
        ControlRecordType.COMMIT, 0, timestamp=NOW, producer_id=3, producer_epoch=0
    )
    info = log.append_as_leader(marker, 0, origin="coordinator")
    assert info.first_offset == 1
    log.update_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset is None
    assert log.last_stable_offset == 2
    log.close()


@pytest.mark.parametrize(
    ("policy", "rolls"), [("compact", True), ("compact,delete", True), ("delete", False)]
)
def test_the_active_segment_rolls_by_max_compaction_lag(
    tmp_path: Path, policy: str, rolls: bool
) -> None:
    """``max.compaction.lag.ms`` below ``segment.ms`` bounds the roll time of a compacted
    topic: no record waits in the active segment (never cleaned) longer than the lag."""
    clock = Clock()
    log = open_log(
        tmp_path / "events-0",
        clock,
        **{
            "cleanup.policy": policy,
            "segment.ms": 3_600_000,
            "max.compaction.lag.ms": 100,
        },
    )
    log.append_as_leader(keyed((b"k", b"1"), ts=NOW), 0)
    log.append_as_leader(keyed((b"k", b"2"), ts=NOW + 100), 0)  # exactly the lag: no roll
    assert len(log.segments) == 1
    log.append_as_leader(keyed((b"k", b"3"), ts=NOW + 101), 0)
    assert [s.base_offset for s in log.segments] == ([0, 2] if rolls else [0])
    log.close()
