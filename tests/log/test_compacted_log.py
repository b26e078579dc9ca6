"""What a log cleaner reads from and records in ``LocalLog``: the cleaner offset (loaded, set,
lowered by truncation, loaded by a node from the log directory's ``cleaner-offset-checkpoint``)
and the last records of the active producers (Kafka's ``lastRecordsOfActiveProducers``)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tierlog.log.batch import ControlRecordType, build_batch, build_control_batch
from tierlog.log.cleaner_checkpoint import CleanerOffsetCheckpoints
from tierlog.log.local_log import LocalLog
from tierlog.log.record import Record
from tierlog.node import Node
from tierlog.spi import IllegalStateError, InvalidArgumentError, TopicPartition

NOW = 1_700_000_000_000
COMPACT: dict[str, object] = {"cleanup.policy": "compact", "segment.index.bytes": 4096}


def open_log(directory: Path, **kwargs: object) -> LocalLog:
    return LocalLog.open(directory, COMPACT, clock=lambda: NOW, sync=False, **kwargs)  # type: ignore[arg-type]


def append(log: LocalLog, count: int, **batch: object) -> None:
    for _ in range(count):
        records = [Record(0, NOW, b"k", b"v")]
        log.append_as_leader(build_batch(records, **batch), 0)  # type: ignore[arg-type]


# The cleaner offset ------------------------------------------------------------------------------
def test_the_cleaner_offset_is_given_at_open_and_set_by_the_cleaner(tmp_path: Path) -> None:
    directory = tmp_path / "events-0"
    log = open_log(directory)
    assert log.cleaner_offset is None
    append(log, 10)
    log.set_cleaner_offset(6)
    assert log.cleaner_offset == 6
    log.set_cleaner_offset(10)  # up to the log end
    for bad in (-1, 11):
        with pytest.raises(InvalidArgumentError, match=rf"cleaner offset {bad} of events-0"):
            log.set_cleaner_offset(bad)
    assert log.cleaner_offset == 10
    log.set_cleaner_offset(None)
    assert log.cleaner_offset is None
    log.close()
    with pytest.raises(IllegalStateError):
        log.set_cleaner_offset(1)
    reopened = open_log(directory, cleaner_offset=7)
    assert reopened.cleaner_offset == 7
    reopened.close()
    with pytest.raises(InvalidArgumentError, match="must be >= 0"):
        open_log(directory, cleaner_offset=-1)


def test_a_cleaner_offset_past_the_log_end_is_dropped_at_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka's cleaner resets a checkpoint past the log end (the log lost data since): here the
    log opens as never cleaned, which only makes retention keep more."""
    directory = tmp_path / "events-0"
    log = open_log(directory)
    append(log, 5)
    log.close()
    with caplog.at_level(logging.WARNING):
        reopened = open_log(directory, cleaner_offset=9)
    assert reopened.cleaner_offset is None
    assert any("cleaner offset 9" in r.getMessage() for r in caplog.records)
    reopened.close()


def test_truncation_lowers_the_cleaner_offset(tmp_path: Path) -> None:
    """Kafka's ``maybeTruncateCheckpoint``: a truncation below the cleaner offset lowers it to
    the new log end; restarting the log elsewhere lowers it only if it was above."""
    log = open_log(tmp_path / "events-0")
    append(log, 20)
    log.set_cleaner_offset(15)
    log.truncate_to(18)
    assert log.cleaner_offset == 15
    log.truncate_to(12)
    assert (log.log_end_offset, log.cleaner_offset) == (12, 12)
    log.truncate_fully_and_start_at(30)
    assert log.cleaner_offset == 12
    log.set_cleaner_offset(30)
    log.truncate_fully_and_start_at(4)
    assert log.cleaner_offset == 4
    log.close()


def test_a_node_loads_the_cleaner_offset_from_the_log_directory(tmp_path: Path) -> None:
    props = {"log.dirs": tmp_path / "logs", "log.retention.check.interval.ms": "3600000"}
    with Node(props) as node:
        node.create_topic("events", partitions=2, configs={"cleanup.policy": "compact"})
        node.produce("events", [(b"k%d" % i, b"v") for i in range(10)], partition=0)
        assert node.log("events", 0).cleaner_offset is None
    CleanerOffsetCheckpoints(tmp_path / "logs").update(TopicPartition("events", 0), 6)
    with Node(props) as node:
        assert node.log("events", 0).cleaner_offset == 6
        assert node.log("events", 1).cleaner_offset is None
    # An unreadable file does not stop the node: the logs count as never cleaned.
    (tmp_path / "logs" / "cleaner-offset-checkpoint").write_text("0\n1\nevents zero 6\n")
    with Node(props) as node:
        assert node.log("events", 0).cleaner_offset is None


# Last records of active producers ----------------------------------------------------------------
def test_last_records_of_active_producers(tmp_path: Path) -> None:
    log = open_log(tmp_path / "events-0")
    assert log.last_records_of_active_producers() == {}
    append(log, 2)  # no producer id: not a producer entry
    append(log, 1, producer_id=7, producer_epoch=3, base_sequence=0)  # offset 2
    append(log, 1, producer_id=7, producer_epoch=3, base_sequence=1)  # offset 3
    append(
        log, 1, producer_id=8, producer_epoch=0, base_sequence=0, is_transactional=True
    )  # offset 4
    commit = build_control_batch(
        ControlRecordType.COMMIT, 0, timestamp=NOW, producer_id=8, producer_epoch=0
    )
    log.append_as_leader(commit, 0, origin="coordinator")  # offset 5
    # A producer that only ever wrote a marker (its transaction had no data in this partition).
    abort = build_control_batch(
        ControlRecordType.ABORT, 0, timestamp=NOW, producer_id=9, producer_epoch=2
    )
    log.append_as_leader(abort, 0, origin="coordinator")  # offset 6
    assert log.last_records_of_active_producers() == {7: (3, 3), 8: (4, 0), 9: (None, 2)}
    # Expired producers are forgotten (remove_expired_producers, as Kafka's periodic check).
    log.remove_expired_producers(NOW + 10 * 24 * 3600 * 1000)
    assert log.last_records_of_active_producers() == {}
    log.close()
