"""Position records (``position.py``) without a broker: the debouncer driven by a fake clock,
the writer's passes with a recording write, the record's bytes, and every tierlog reader
ignoring it (the topic RLMM's and the compacted RLMM's appliers through the consumer task's
rule, the migration's scan). The real broker's side is in ``test_mixed_cluster.py``."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from tierlog_rlmm_compacted.migration import MigrationReport, _is_position_value, _Scan
from tierlog_rlmm_compacted.position import (
    DEFAULT_DELAY_S,
    POSITION_PARTITION,
    POSITION_TOPIC_ID,
    RETRY_S,
    PositionDebouncer,
    PositionWriter,
    is_position,
    position_value,
)
from tierlog_rlmm_compacted.projection import ProjectionApplier
from tierlog_rlmm_topic.applier import StoreApplier

from tierlog.conformance.rlmm_suite import FINISHED, new_partition, segment, update_of
from tierlog.metadata import RemotePartitionMetadataStore, metadata_partition, serde
from tierlog.metadata.topic_reader import TopicRecord
from tierlog.spi import (
    InvalidArgumentError,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    Uuid,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def debouncer(clock: Clock) -> PositionDebouncer:
    return PositionDebouncer(delay_s=0.3, retry_s=5.0, clock=clock)


# The debouncer ----------------------------------------------------------------------------------
def test_one_position_after_a_burst(clock: Clock) -> None:
    d = debouncer(clock)
    for _ in range(10):
        d.committed(2)
        clock.advance(0.1)  # each commit within the delay of the previous one
        assert d.due() == []
    assert d.wait_s() == pytest.approx(0.2)
    clock.advance(0.2)
    assert d.wait_s() == 0
    assert d.due() == [2]
    assert d.due() == [], "one record per burst"
    assert d.wait_s() is None
    clock.advance(60)
    assert d.due() == []


def test_nothing_without_commits(clock: Clock) -> None:
    d = debouncer(clock)
    assert d.wait_s() is None
    clock.advance(3600)
    assert d.due() == [] and d.pending() == []


def test_again_after_a_new_commit(clock: Clock) -> None:
    d = debouncer(clock)
    d.committed(0)
    clock.advance(0.3)
    assert d.due() == [0]
    clock.advance(10)
    d.committed(0)
    clock.advance(0.29)
    assert d.due() == []
    clock.advance(0.01)
    assert d.due() == [0]


def test_per_partition(clock: Clock) -> None:
    d = debouncer(clock)
    d.committed(1)
    clock.advance(0.2)
    d.committed(3)
    d.committed(4)
    clock.advance(0.1)
    assert d.due() == [1], "partition 1 idle for its delay; 3 and 4 not yet"
    assert d.pending() == [3, 4]
    clock.advance(0.1)
    d.committed(4)  # a new commit on 4 postpones it alone
    clock.advance(0.1)
    assert d.due() == [3]
    clock.advance(0.2)
    assert d.due() == [4]


def test_a_failed_write_is_retried_later_or_after_the_next_commit(clock: Clock) -> None:
    d = debouncer(clock)
    d.committed(1)
    clock.advance(0.3)
    assert d.due() == [1]
    d.failed(1)
    clock.advance(4.9)
    assert d.due() == []
    clock.advance(0.1)
    assert d.due() == [1], "retried RETRY_S later"
    d.failed(1)
    clock.advance(1)
    d.committed(1)  # a commit makes it due sooner than the retry
    clock.advance(0.3)
    assert d.due() == [1]


def test_bad_delays_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="delay_s=-1"):
        PositionDebouncer(delay_s=-1)


# The writer --------------------------------------------------------------------------------------
class Writes:
    """A write that records the partitions and completes (or fails) at once."""

    def __init__(self) -> None:
        self.partitions: list[int] = []
        self.fail: BaseException | None = None

    def __call__(self, partition: int) -> Future[object]:
        self.partitions.append(partition)
        future: Future[object] = Future()
        if self.fail is not None:
            future.set_exception(self.fail)
        else:
            future.set_result((partition, 0))
        return future


def writer(clock: Clock, writes: Writes, level: list[int]) -> PositionWriter:
    return PositionWriter(
        write=writes, enabled=lambda: level[0] == 0, debouncer=debouncer(clock), background=False
    )


def test_the_writer_sends_what_is_due(clock: Clock) -> None:
    writes, level = Writes(), [0]
    w = writer(clock, writes, level)
    try:
        w.committed(0)
        w.committed(2)
        assert w.run_due() == []
        clock.advance(0.3)
        assert w.run_due() == [0, 2]
        assert w.run_due() == []
        assert writes.partitions == [0, 2]
    finally:
        w.close(flush=False)


def test_nothing_at_level_1(clock: Clock) -> None:
    writes, level = Writes(), [1]
    w = writer(clock, writes, level)
    w.committed(0)
    assert w.pending() == [], "a commit at level 1 is not noted"
    level[0] = 0
    w.committed(1)
    level[0] = 1  # the level moved between the commit and the write
    clock.advance(1)
    assert w.run_due() == []
    assert w.close() == []
    assert writes.partitions == []


def test_a_failed_write_is_logged_and_retried(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    writes, level = Writes(), [0]
    w = writer(clock, writes, level)
    try:
        writes.fail = OSError("broker down")
        w.committed(3)
        clock.advance(0.3)
        assert w.run_due() == [3]
        assert "cannot write the position record of metadata partition 3" in caplog.text
        assert "broker down" in caplog.text
        assert w.pending() == [3]
        writes.fail = None
        clock.advance(RETRY_S - 0.1)
        assert w.run_due() == []
        clock.advance(0.1)
        assert w.run_due() == [3]
        assert w.pending() == []
        assert writes.partitions == [3, 3]
    finally:
        w.close(flush=False)


def test_a_write_that_raises_is_retried_too(clock: Clock) -> None:
    level = [0]

    def write(partition: int) -> Future[object]:
        raise OSError("cannot create the producer")

    w = PositionWriter(
        write=write, enabled=lambda: level[0] == 0, debouncer=debouncer(clock), background=False
    )
    try:
        w.committed(1)
        clock.advance(0.3)
        assert w.run_due() == [1]
        assert w.pending() == [1]
    finally:
        w.close(flush=False)


def test_close_writes_what_is_pending_at_once(clock: Clock) -> None:
    writes, level = Writes(), [0]
    w = writer(clock, writes, level)
    w.committed(4)
    assert w.close() == [4], "a node stopping right after a commit still writes its position"
    assert writes.partitions == [4]
    w.committed(1)
    assert w.pending() == [], "closed"


def test_the_thread_writes_once_idle() -> None:
    """The real clock: the writer's own thread sends the record after the delay (waited for
    on a condition, not slept)."""
    done: Future[int] = Future()

    def write(partition: int) -> Future[object]:
        done.set_result(partition)
        sent: Future[object] = Future()
        sent.set_result((partition, 0))
        return sent

    w = PositionWriter(write=write, enabled=lambda: True)
    try:
        w.committed(2)
        assert done.result(timeout=30) == 2
        assert w.pending() == []
    finally:
        w.close()
    assert DEFAULT_DELAY_S < 1


# The record and its readers ---------------------------------------------------------------------
def test_the_position_record() -> None:
    assert str(POSITION_TOPIC_ID) == "dGllcmxvZy1wb3NpdGlvbg"
    assert POSITION_TOPIC_ID.bytes == b"tierlog-position"
    value = position_value(7, 1234)
    event = serde.deserialize(value)
    assert event == RemotePartitionDeleteMetadata(
        POSITION_PARTITION, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 1234, 7
    )
    assert isinstance(event, RemotePartitionDeleteMetadata)
    assert value == serde.serialize(event), "legacy format: no tagged fields"
    assert is_position(event) and is_position(POSITION_PARTITION)
    assert is_position(TopicIdPartition(POSITION_TOPIC_ID, "renamed", 3))
    assert not is_position(new_partition()) and not is_position(None)
    assert _is_position_value(value)
    assert not _is_position_value(serde.serialize(segment(new_partition(), 0, 9, {0: 0})))


@pytest.mark.parametrize("kind", ["topic", "compacted"])
def test_an_rlmm_applier_decodes_it_for_a_partition_never_assigned(kind: str) -> None:
    """Both appliers decode the record to the reserved partition, which no node is ever
    assigned: the consumer task skips events of partitions it does not host (the rule of
    ``ConsumerTask._process``: applied only when in ``processed``)."""
    store = RemotePartitionMetadataStore()
    applier = StoreApplier(store) if kind == "topic" else ProjectionApplier(store)
    decoded = applier.decode(None, position_value(1, 5))
    assert decoded.topic_id_partition == POSITION_PARTITION


def record(partition: int, offset: int, key: bytes | None, value: bytes | None) -> TopicRecord:
    return TopicRecord(partition=partition, offset=offset, key=key, value=value, headers=())


def test_the_migration_scan_leaves_position_records_out() -> None:
    """A history of legacy records with position records between them and at the end: the scan
    neither replays, plans nor counts them as legacy, and plans the same as without them."""
    count = 5
    tip = new_partition("migrated")
    partition = metadata_partition(tip, count)
    # A position record whose reserved partition maps to this metadata partition too.
    home = TopicIdPartition(POSITION_TOPIC_ID, "__tierlog_position", 0)
    seg = segment(tip, 0, 9, {0: 0})
    history = [serde.serialize(seg), serde.serialize(update_of(seg, FINISHED))]
    positions = [position_value(2, 1), position_value(2, 2)]

    def scan(values: list[bytes]) -> tuple[_Scan, list[bytes], MigrationReport]:
        s = _Scan("__remote_log_metadata", partition, count, legacy=True)
        for offset, value in enumerate(values):
            s.add(record(partition, offset, None, value))
        s.finish()
        planned = [w.key.encode() for w in s.plan()]
        report = MigrationReport(topic="__remote_log_metadata")
        s.check(report)
        return s, planned, report

    _, expected, _ = scan(history)
    mixed, planned, report = scan(
        [positions[0], history[0], positions[1], history[1], positions[1]]
    )
    assert mixed.positions == 3 and mixed.legacy_records == 2 and mixed.records == 5
    assert list(mixed.tips) == [tip], "the reserved partition is never loaded"
    assert home not in mixed.tips
    assert mixed.misplaced == 0
    assert report.failures == {}
    assert planned == expected and len(planned) == 1
    assert Uuid.from_bytes(b"tierlog-position") == POSITION_TOPIC_ID
