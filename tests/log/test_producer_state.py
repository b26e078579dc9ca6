"""Producer state: ports of Kafka's ``ProducerStateManagerTest``.

The helpers mirror the Java test's ``appendClientEntry`` / ``appendReplicationEntry`` /
``appendEndTxnMarker``: one data batch of one record at ``offset`` with sequence ``seq``.
Transaction-verification tests (KIP-890 verification guards) are not ported: tierlog has no
transaction coordinator to verify against.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tierlog.log.batch import NO_SEQUENCE, ControlRecordType, RecordBatch
from tierlog.log.files import producer_snapshot_file
from tierlog.log.producer_snapshot import read_producer_snapshot
from tierlog.log.producer_state import (
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    EndTxnMarker,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateEntry,
    ProducerStateManager,
    TransactionCoordinatorFencedError,
    TxnMetadata,
    list_snapshot_files,
)

PRODUCER_ID = 1
EPOCH = 0
EXPIRATION_MS = 60_000
MAX_TXN_TIMEOUT_MS = 5 * 60 * 1000
LATE_TXN_TIMEOUT_MS = MAX_TXN_TIMEOUT_MS + 5 * 60 * 1000


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def sleep(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    d = tmp_path / "topic-0"
    d.mkdir()
    return d


def new_manager(log_dir: Path, clock: Clock) -> ProducerStateManager:
    return ProducerStateManager(
        log_dir,
        producer_id_expiration_ms=EXPIRATION_MS,
        max_transaction_timeout_ms=MAX_TXN_TIMEOUT_MS,
        clock=clock,
        sync=False,
    )


@pytest.fixture
def psm(log_dir: Path, clock: Clock) -> ProducerStateManager:
    return new_manager(log_dir, clock)


def append_entry(
    psm: ProducerStateManager,
    producer_id: int,
    epoch: int,
    seq: int,
    offset: int,
    ts: int,
    origin: AppendOrigin,
    transactional: bool,
) -> None:
    info = psm.prepare_update(producer_id, origin)
    info.append_data_batch(
        epoch,
        seq,
        seq,
        last_timestamp=ts,
        first_offset=offset,
        last_offset=offset,
        is_transactional=transactional,
    )
    psm.update(info)
    psm.update_map_end_offset(offset + 1)


def client(
    psm: ProducerStateManager,
    producer_id: int,
    epoch: int,
    seq: int,
    offset: int,
    transactional: bool = False,
    ts: int | None = None,
) -> None:
    now = psm._clock() if ts is None else ts
    append_entry(psm, producer_id, epoch, seq, offset, now, AppendOrigin.CLIENT, transactional)


def replication(
    psm: ProducerStateManager, epoch: int, seq: int, offset: int, ts: int | None = None
) -> None:
    now = psm._clock() if ts is None else ts
    append_entry(psm, PRODUCER_ID, epoch, seq, offset, now, AppendOrigin.REPLICATION, False)


def end_txn(
    psm: ProducerStateManager,
    producer_id: int,
    epoch: int,
    control: ControlRecordType,
    offset: int,
    coordinator_epoch: int = 0,
    ts: int | None = None,
    transaction_version: int = 0,
) -> CompletedTxn | None:
    info = psm.prepare_update(producer_id, AppendOrigin.COORDINATOR)
    marker = EndTxnMarker(control, coordinator_epoch, psm._clock() if ts is None else ts)
    completed = info.append_end_txn_marker(marker, epoch, offset, transaction_version)
    psm.update(info)
    if completed is not None:
        psm.complete_txn(completed)
    psm.update_map_end_offset(offset + 1)
    return completed


def entry(psm: ProducerStateManager, producer_id: int = PRODUCER_ID) -> ProducerStateEntry:
    found = psm.last_entry(producer_id)
    assert found is not None
    return found


def snapshot_offsets(log_dir: Path) -> set[int]:
    return {int(name.split(".")[0]) for name in os.listdir(log_dir)}


def marker_epoch(epoch: int, transaction_version: int) -> int:
    return epoch + 1 if transaction_version >= 2 else epoch


# Ports -----------------------------------------------------------------------------------------
def test_basic_id_mapping(psm: ProducerStateManager) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 0)
    with pytest.raises(OutOfOrderSequenceError):
        client(psm, PRODUCER_ID, EPOCH, 0, 1)  # duplicate sequence
    with pytest.raises(OutOfOrderSequenceError):
        client(psm, PRODUCER_ID, EPOCH, 5, 2)  # gap
    client(psm, PRODUCER_ID, EPOCH + 1, 0, 3)  # new epoch restarts at 0
    with pytest.raises(InvalidProducerEpochError):
        client(psm, PRODUCER_ID, EPOCH, 0, 4)  # fenced


def test_append_txn_marker_with_no_producer_state(psm: ProducerStateManager) -> None:
    end_txn(psm, PRODUCER_ID, 2, ControlRecordType.COMMIT, 27)
    first = entry(psm)
    assert (first.producer_epoch, first.producer_id, first.last_seq) == (2, PRODUCER_ID, -1)
    with pytest.raises(InvalidProducerEpochError):
        client(psm, PRODUCER_ID, 0, 0, 4)
    with pytest.raises(OutOfOrderSequenceError):
        client(psm, PRODUCER_ID, 2, 17, 4)
    client(psm, PRODUCER_ID, 2, 0, 4, ts=39)
    assert entry(psm).last_seq == 0


def test_producer_sequence_wrap_around(psm: ProducerStateManager) -> None:
    replication(psm, 15, 2**31 - 1, 735)
    client(psm, PRODUCER_ID, 15, 0, 735 + 500)
    last = entry(psm)
    assert (last.producer_epoch, last.first_seq, last.last_seq) == (15, 2**31 - 1, 0)


def test_producer_sequence_with_wrap_around_batch_record(psm: ProducerStateManager) -> None:
    info = psm.prepare_update(PRODUCER_ID, AppendOrigin.REPLICATION)
    info.append_data_batch(
        15,
        2**31 - 11,
        9,
        last_timestamp=0,
        first_offset=2000,
        last_offset=2020,
        is_transactional=False,
    )
    assert psm.last_entry(PRODUCER_ID) is None
    psm.update(info)
    last = entry(psm)
    assert (last.first_seq, last.last_seq) == (2**31 - 11, 9)
    assert (last.first_data_offset, last.last_data_offset) == (2000, 2020)


def test_producer_sequence_invalid_wrap_around(psm: ProducerStateManager) -> None:
    replication(psm, 15, 2**31 - 1, 735)
    with pytest.raises(OutOfOrderSequenceError):
        client(psm, PRODUCER_ID, 15, 1, 735 + 500)


def test_no_validation_on_first_entry_when_loading_log(psm: ProducerStateManager) -> None:
    replication(psm, 5, 16, 735)
    last = entry(psm)
    assert (last.producer_epoch, last.first_seq, last.last_seq) == (5, 16, 16)
    assert (last.first_data_offset, last.last_data_offset) == (735, 735)


def test_control_record_bumps_producer_epoch(psm: ProducerStateManager) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 0)
    end_txn(psm, PRODUCER_ID, 1, ControlRecordType.ABORT, 1)
    last = entry(psm)
    assert last.producer_epoch == 1
    assert last.current_txn_first_offset is None
    assert (last.first_seq, last.last_seq) == (NO_SEQUENCE, NO_SEQUENCE)
    client(psm, PRODUCER_ID, 1, 0, 2)
    assert entry(psm).first_seq == 0


def test_txn_first_offset_is_the_first_unstable_offset(psm: ProducerStateManager) -> None:
    info = psm.prepare_update(PRODUCER_ID, AppendOrigin.CLIENT)
    info.append_data_batch(
        EPOCH,
        0,
        0,
        last_timestamp=0,
        first_offset=992342,
        last_offset=992342,
        is_transactional=True,
    )
    psm.update(info)
    assert psm.first_unstable_offset() == 992342


@pytest.mark.parametrize("transaction_version", [0, 2])
def test_has_late_transaction(
    psm: ProducerStateManager, clock: Clock, transaction_version: int
) -> None:
    client(psm, 39, 2, 0, 100, transactional=True)
    assert not psm.has_late_transaction(clock())
    clock.sleep(500)
    client(psm, 57, 9, 0, 150, transactional=True)
    assert not psm.has_late_transaction(clock())
    clock.sleep(LATE_TXN_TIMEOUT_MS - 500 + 1)
    assert psm.has_late_transaction(clock())
    clock.sleep(500)
    assert psm.has_late_transaction(clock())
    end_txn(
        psm,
        39,
        marker_epoch(2, transaction_version),
        ControlRecordType.COMMIT,
        200,
        transaction_version=transaction_version,
    )
    assert psm.has_late_transaction(clock())
    end_txn(
        psm,
        57,
        marker_epoch(9, transaction_version),
        ControlRecordType.COMMIT,
        250,
        transaction_version=transaction_version,
    )
    assert not psm.has_late_transaction(clock())


def test_has_late_transaction_initialized_after_reload(
    psm: ProducerStateManager, log_dir: Path, clock: Clock
) -> None:
    client(psm, 39, 2, 0, 100, transactional=True)
    clock.sleep(500)
    client(psm, 57, 9, 0, 150, transactional=True)
    psm.take_snapshot()
    clock.sleep(LATE_TXN_TIMEOUT_MS - 500 + 1)
    assert psm.has_late_transaction(clock())
    reloaded = new_manager(log_dir, clock)
    reloaded.truncate_and_reload(0, psm.map_end_offset, clock())
    assert reloaded.has_late_transaction(clock())


def test_has_late_transaction_updated_after_truncation(
    psm: ProducerStateManager, clock: Clock
) -> None:
    client(psm, 39, 2, 0, 100, transactional=True)
    clock.sleep(LATE_TXN_TIMEOUT_MS + 1)
    assert psm.has_late_transaction(clock())
    psm.truncate_and_reload(0, 80, clock())
    assert not psm.has_late_transaction(clock())
    client(psm, 39, 2, 0, 100, transactional=True)
    clock.sleep(LATE_TXN_TIMEOUT_MS + 1)
    psm.truncate_fully_and_start_at(150)
    assert not psm.has_late_transaction(clock())


def test_prepare_update_does_not_mutate(psm: ProducerStateManager) -> None:
    info = psm.prepare_update(PRODUCER_ID, AppendOrigin.CLIENT)
    info.append_data_batch(
        EPOCH, 0, 5, last_timestamp=0, first_offset=15, last_offset=20, is_transactional=False
    )
    assert psm.last_entry(PRODUCER_ID) is None
    psm.update(info)
    nxt = psm.prepare_update(PRODUCER_ID, AppendOrigin.CLIENT)
    nxt.append_data_batch(
        EPOCH, 6, 10, last_timestamp=0, first_offset=26, last_offset=30, is_transactional=False
    )
    last = entry(psm)
    assert (last.first_seq, last.last_seq, last.last_data_offset) == (0, 5, 20)
    psm.update(nxt)
    last = entry(psm)
    assert (last.first_seq, last.last_seq, last.last_data_offset) == (0, 10, 30)


def test_update_producer_transaction_state(psm: ProducerStateManager) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 9)
    info = psm.prepare_update(PRODUCER_ID, AppendOrigin.CLIENT)
    info.append_data_batch(
        EPOCH, 1, 5, last_timestamp=0, first_offset=16, last_offset=20, is_transactional=True
    )
    e = info.to_entry()
    assert (e.first_seq, e.last_seq, e.first_data_offset, e.last_data_offset) == (1, 5, 16, 20)
    assert e.current_txn_first_offset == 16
    info.append_data_batch(
        EPOCH, 6, 10, last_timestamp=0, first_offset=26, last_offset=30, is_transactional=True
    )
    e = info.to_entry()
    assert (e.first_seq, e.last_seq, e.first_data_offset, e.last_data_offset) == (1, 10, 16, 30)
    completed = info.append_end_txn_marker(EndTxnMarker(ControlRecordType.COMMIT, 15, 0), EPOCH, 40)
    assert completed == CompletedTxn(PRODUCER_ID, 16, 40, False)
    e = info.to_entry()
    # The marker leaves the cached batches alone and closes the transaction.
    assert (e.first_seq, e.last_seq, e.first_data_offset, e.last_data_offset) == (1, 10, 16, 30)
    assert e.current_txn_first_offset is None
    assert info.started_transactions == [TxnMetadata(PRODUCER_ID, 16)]


def test_out_of_sequence_after_control_record_epoch_bump(psm: ProducerStateManager) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 0, transactional=True)
    client(psm, PRODUCER_ID, EPOCH, 1, 1, transactional=True)
    end_txn(psm, PRODUCER_ID, 1, ControlRecordType.ABORT, 1)
    with pytest.raises(OutOfOrderSequenceError):
        client(psm, PRODUCER_ID, 1, 2, 2, transactional=True)
    with pytest.raises(OutOfOrderSequenceError):
        client(psm, PRODUCER_ID, 2, 2, 2, transactional=True)
    client(psm, PRODUCER_ID, 1, 0, 0, transactional=True)
    last = entry(psm)
    assert (last.producer_epoch, last.last_seq) == (1, 0)


def test_non_transactional_append_with_ongoing_transaction(psm: ProducerStateManager) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 0, transactional=True)
    with pytest.raises(InvalidTxnStateError):
        client(psm, PRODUCER_ID, EPOCH, 1, 1)


def test_truncate_and_reload_removes_out_of_range_snapshots(
    psm: ProducerStateManager, clock: Clock
) -> None:
    for seq in range(5):
        client(psm, PRODUCER_ID, EPOCH, seq, seq)
        psm.take_snapshot()
    psm.truncate_and_reload(1, 3, clock())
    assert psm.oldest_snapshot_offset() == 2
    assert psm.latest_snapshot_offset() == 3


def test_take_snapshot(psm: ProducerStateManager, log_dir: Path) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 0, ts=0)
    client(psm, PRODUCER_ID, EPOCH, 1, 1, ts=1)
    path = psm.take_snapshot()
    assert path == producer_snapshot_file(log_dir, 2)
    assert os.listdir(log_dir) == [path.name]
    assert path.stat().st_size > 0
    assert psm.fetch_snapshot(2) == path
    assert psm.fetch_snapshot(1) is None


def test_recover_from_snapshot_unfinished_transaction(
    psm: ProducerStateManager, log_dir: Path, clock: Clock
) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 0, transactional=True)
    client(psm, PRODUCER_ID, EPOCH, 1, 1, transactional=True)
    psm.take_snapshot()
    recovered = new_manager(log_dir, clock)
    recovered.truncate_and_reload(0, 3, clock())
    loaded = entry(recovered)
    # The snapshot only persists the last appended batch.
    assert (loaded.first_data_offset, loaded.first_seq) == (1, 1)
    assert (loaded.last_data_offset, loaded.last_seq) == (1, 1)
    assert loaded.current_txn_first_offset == 0
    client(recovered, PRODUCER_ID, EPOCH, 2, 2, transactional=True)


def test_recover_from_snapshot_finished_transaction(
    psm: ProducerStateManager, log_dir: Path, clock: Clock
) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 0, transactional=True)
    client(psm, PRODUCER_ID, EPOCH, 1, 1, transactional=True)
    end_txn(psm, PRODUCER_ID, EPOCH, ControlRecordType.ABORT, 2)
    psm.take_snapshot()
    recovered = new_manager(log_dir, clock)
    recovered.truncate_and_reload(0, 3, clock())
    loaded = entry(recovered)
    assert (loaded.first_data_offset, loaded.last_seq) == (1, 1)
    assert loaded.current_txn_first_offset is None


def test_recover_from_snapshot_empty_transaction(
    psm: ProducerStateManager, log_dir: Path, clock: Clock
) -> None:
    end_txn(psm, PRODUCER_ID, EPOCH, ControlRecordType.ABORT, 0, ts=clock())
    psm.take_snapshot()
    recovered = new_manager(log_dir, clock)
    recovered.truncate_and_reload(0, 1, clock())
    last = entry(recovered)
    assert last.last_timestamp == clock()
    assert last.current_txn_first_offset is None


def test_producer_state_after_fencing_abort_marker(psm: ProducerStateManager, clock: Clock) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 0, transactional=True)
    end_txn(psm, PRODUCER_ID, EPOCH + 1, ControlRecordType.ABORT, 1)
    last = entry(psm)
    assert last.current_txn_first_offset is None
    assert (last.last_data_offset, last.first_data_offset) == (-1, -1)
    psm.remove_expired_producers(clock())
    entry(psm)  # fencing epochs are kept


def test_remove_expired_pids_on_reload(psm: ProducerStateManager, log_dir: Path) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 0, ts=0)
    client(psm, PRODUCER_ID, EPOCH, 1, 1, ts=1)
    psm.take_snapshot()
    recovered = new_manager(log_dir, Clock(70000))
    recovered.truncate_and_reload(0, 1, 70000)
    client(recovered, PRODUCER_ID, EPOCH, 2, 2, ts=70001)
    assert len(recovered.active_producers) == 1
    assert entry(recovered).last_seq == 2
    assert recovered.map_end_offset == 3


def test_accept_append_without_producer_state_on_replica(
    psm: ProducerStateManager, log_dir: Path
) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 0, ts=0)
    client(psm, PRODUCER_ID, EPOCH, 1, 1, ts=1)
    psm.take_snapshot()
    recovered = new_manager(log_dir, Clock(70000))
    recovered.truncate_and_reload(0, 1, 70000)
    assert PRODUCER_ID not in recovered.active_producers
    replication(recovered, EPOCH, 2, 2, ts=70001)
    state = entry(recovered)
    assert (state.producer_epoch, state.first_seq, state.last_seq) == (EPOCH, 2, 2)


def test_accept_append_with_sequence_gaps_on_replica(psm: ProducerStateManager) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 0, ts=0)
    with pytest.raises(OutOfOrderSequenceError):
        client(psm, PRODUCER_ID, EPOCH, 3, 1, ts=1)
    assert entry(psm).last_seq == 0
    replication(psm, EPOCH, 3, 1, ts=1)
    assert entry(psm).last_seq == 3


def test_delete_snapshots_before(psm: ProducerStateManager, log_dir: Path) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 0)
    client(psm, PRODUCER_ID, EPOCH, 1, 1)
    psm.take_snapshot()
    assert snapshot_offsets(log_dir) == {2}
    client(psm, PRODUCER_ID, EPOCH, 2, 2)
    psm.take_snapshot()
    assert snapshot_offsets(log_dir) == {2, 3}
    psm.delete_snapshots_before(3)
    assert snapshot_offsets(log_dir) == {3}
    psm.delete_snapshots_before(4)
    assert snapshot_offsets(log_dir) == set()


def test_truncate_fully_and_start_at(psm: ProducerStateManager, log_dir: Path) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 0)
    client(psm, PRODUCER_ID, EPOCH, 1, 1)
    psm.take_snapshot()
    client(psm, PRODUCER_ID, EPOCH, 2, 2)
    psm.take_snapshot()
    assert snapshot_offsets(log_dir) == {2, 3}
    psm.truncate_fully_and_start_at(0)
    assert snapshot_offsets(log_dir) == set()
    client(psm, PRODUCER_ID, EPOCH, 0, 0)
    psm.take_snapshot()
    assert snapshot_offsets(log_dir) == {1}


def test_reload_snapshots(psm: ProducerStateManager, log_dir: Path, clock: Clock) -> None:
    client(psm, PRODUCER_ID, EPOCH, 1, 1)
    client(psm, PRODUCER_ID, EPOCH, 2, 2)
    psm.take_snapshot()
    saved = {p: p.read_bytes() for p in log_dir.iterdir()}
    client(psm, PRODUCER_ID, EPOCH, 3, 3)
    client(psm, PRODUCER_ID, EPOCH, 4, 4)
    psm.take_snapshot()
    assert snapshot_offsets(log_dir) == {3, 5}
    psm.truncate_and_reload(3, 5, clock())
    assert snapshot_offsets(log_dir) == {5}
    for path, data in saved.items():
        path.write_bytes(data)
    (log_dir / "00000000000000000005.snapshot").unlink()
    psm.truncate_fully_and_reload_snapshots()
    assert psm.latest_snapshot_offset() == 3


def test_first_unstable_offset_after_truncation(psm: ProducerStateManager, clock: Clock) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 99, transactional=True)
    assert psm.first_unstable_offset() == 99
    psm.take_snapshot()
    end_txn(psm, PRODUCER_ID, EPOCH, ControlRecordType.COMMIT, 105)
    psm.on_high_watermark_updated(106)
    assert psm.first_unstable_offset() is None
    psm.take_snapshot()
    client(psm, PRODUCER_ID, EPOCH, 1, 106)
    psm.truncate_and_reload(0, 106, clock())
    assert psm.first_unstable_offset() is None
    psm.truncate_and_reload(0, 100, clock())
    assert psm.first_unstable_offset() == 99


def test_load_from_snapshot_retains_non_expired_producers(
    psm: ProducerStateManager, clock: Clock
) -> None:
    client(psm, 1, EPOCH, 0, 0)
    client(psm, 2, EPOCH, 0, 1)
    psm.take_snapshot()
    psm.truncate_and_reload(1, 2, clock())
    assert len(psm.active_producers) == 2
    assert (entry(psm, 1).last_seq, entry(psm, 1).last_data_offset) == (0, 0)
    assert (entry(psm, 2).last_seq, entry(psm, 2).last_data_offset) == (0, 1)


def test_skip_snapshot_if_offset_unchanged(psm: ProducerStateManager, log_dir: Path) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 0, ts=0)
    assert psm.take_snapshot() is not None
    assert psm.take_snapshot() is None
    assert snapshot_offsets(log_dir) == {1}


def test_pid_expiration_timeout(psm: ProducerStateManager, clock: Clock) -> None:
    client(psm, PRODUCER_ID, 5, 0, 1)
    clock.sleep(EXPIRATION_MS + 1)
    psm.remove_expired_producers(clock())
    client(psm, PRODUCER_ID, 5, 1, 2)
    assert len(psm.active_producers) == 1
    assert entry(psm).last_seq == 1
    assert psm.map_end_offset == 3


@pytest.mark.parametrize("transaction_version", [0, 2])
def test_first_unstable_offset(psm: ProducerStateManager, transaction_version: int) -> None:
    assert psm.first_undecided_offset() is None
    client(psm, PRODUCER_ID, 5, 0, 99, transactional=True)
    assert psm.first_undecided_offset() == 99
    assert psm.first_unstable_offset() == 99
    client(psm, 2, 5, 0, 105, transactional=True)
    assert (psm.first_undecided_offset(), psm.first_unstable_offset()) == (99, 99)
    end_txn(
        psm,
        PRODUCER_ID,
        marker_epoch(5, transaction_version),
        ControlRecordType.COMMIT,
        109,
        transaction_version=transaction_version,
    )
    assert (psm.first_undecided_offset(), psm.first_unstable_offset()) == (105, 99)
    psm.on_high_watermark_updated(100)
    assert psm.first_unstable_offset() == 99
    psm.on_high_watermark_updated(110)
    assert psm.first_unstable_offset() == 105
    end_txn(
        psm,
        2,
        marker_epoch(5, transaction_version),
        ControlRecordType.ABORT,
        112,
        transaction_version=transaction_version,
    )
    assert psm.first_undecided_offset() is None
    assert psm.first_unstable_offset() == 105
    psm.on_high_watermark_updated(113)
    assert psm.first_unstable_offset() is None


def test_producers_with_ongoing_transactions_dont_expire(
    psm: ProducerStateManager, clock: Clock
) -> None:
    client(psm, PRODUCER_ID, 5, 0, 99, transactional=True)
    clock.sleep(EXPIRATION_MS + 1)
    psm.remove_expired_producers(clock())
    assert psm.last_entry(PRODUCER_ID) is not None
    assert psm.first_undecided_offset() == 99


def test_sequence_not_validated_for_coordinator_appends(psm: ProducerStateManager) -> None:
    append_entry(psm, PRODUCER_ID, EPOCH, NO_SEQUENCE, 99, 0, AppendOrigin.COORDINATOR, True)
    append_entry(psm, PRODUCER_ID, EPOCH, NO_SEQUENCE, 100, 0, AppendOrigin.COORDINATOR, True)


@pytest.mark.parametrize("transaction_version", [0, 2])
def test_old_epoch_for_control_record(psm: ProducerStateManager, transaction_version: int) -> None:
    client(psm, PRODUCER_ID, 5, 0, 99, transactional=True)
    with pytest.raises(InvalidProducerEpochError):
        end_txn(
            psm,
            PRODUCER_ID,
            3,
            ControlRecordType.COMMIT,
            100,
            transaction_version=transaction_version,
        )
    if transaction_version >= 2:
        with pytest.raises(InvalidProducerEpochError):
            end_txn(
                psm,
                PRODUCER_ID,
                5,
                ControlRecordType.COMMIT,
                100,
                transaction_version=transaction_version,
            )
    else:
        end_txn(
            psm,
            PRODUCER_ID,
            5,
            ControlRecordType.COMMIT,
            100,
            transaction_version=transaction_version,
        )


@pytest.mark.parametrize("transaction_version", [0, 2])
def test_coordinator_fencing(psm: ProducerStateManager, transaction_version: int) -> None:
    client(psm, PRODUCER_ID, 5, 0, 99, transactional=True)
    e1 = marker_epoch(5, transaction_version)
    end_txn(
        psm,
        PRODUCER_ID,
        e1,
        ControlRecordType.COMMIT,
        100,
        coordinator_epoch=1,
        transaction_version=transaction_version,
    )
    assert entry(psm).coordinator_epoch == 1
    e2 = marker_epoch(e1, transaction_version)
    end_txn(
        psm,
        PRODUCER_ID,
        e2,
        ControlRecordType.COMMIT,
        101,
        coordinator_epoch=1,
        transaction_version=transaction_version,
    )
    e3 = marker_epoch(e2, transaction_version)
    end_txn(
        psm,
        PRODUCER_ID,
        e3,
        ControlRecordType.COMMIT,
        102,
        coordinator_epoch=2,
        transaction_version=transaction_version,
    )
    with pytest.raises(TransactionCoordinatorFencedError):
        end_txn(
            psm,
            PRODUCER_ID,
            marker_epoch(e3, transaction_version),
            ControlRecordType.COMMIT,
            103,
            coordinator_epoch=1,
            transaction_version=transaction_version,
        )


def test_coordinator_fenced_after_reload(
    psm: ProducerStateManager, log_dir: Path, clock: Clock
) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 99, transactional=True)
    end_txn(psm, PRODUCER_ID, EPOCH, ControlRecordType.COMMIT, 100, coordinator_epoch=1)
    psm.take_snapshot()
    recovered = new_manager(log_dir, clock)
    recovered.truncate_and_reload(0, 101, clock())
    # The coordinator epoch survives the snapshot: an older coordinator is fenced.
    assert entry(recovered).coordinator_epoch == 1
    with pytest.raises(TransactionCoordinatorFencedError):
        end_txn(recovered, PRODUCER_ID, EPOCH, ControlRecordType.COMMIT, 101)


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage"])
def test_load_from_corrupt_snapshot(
    psm: ProducerStateManager, log_dir: Path, clock: Clock, damage: str
) -> None:
    client(psm, PRODUCER_ID, EPOCH, 0, 0)
    psm.take_snapshot()
    client(psm, PRODUCER_ID, EPOCH, 1, 1)
    psm.take_snapshot()
    assert psm.latest_snapshot_offset() == 2
    path = producer_snapshot_file(log_dir, 2)
    data = path.read_bytes()
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:
        path.write_bytes(bytes(37) + data[37:])
    reloaded = new_manager(log_dir, clock)
    reloaded.truncate_and_reload(0, 20, clock())
    assert not path.exists()
    assert entry(reloaded).last_data_offset == 0


def test_append_empty_control_batch(psm: ProducerStateManager) -> None:
    # A control batch whose records the cleaner removed: no transaction starts or ends.
    header = RecordBatch(15, 49, 0, 2, 0, 0x30, 0, -1, -1, 23423, 0, -1, 0)
    info = psm.prepare_update(23423, AppendOrigin.CLIENT)
    assert info.append(header, None) is None
    psm.update(info)
    assert entry(psm, 23423).current_txn_first_offset is None


def test_remove_stray_snapshots_keep_clean_shutdown_snapshot(
    psm: ProducerStateManager, log_dir: Path
) -> None:
    for offset in (5, 2, 42):
        producer_snapshot_file(log_dir, offset).touch()
    psm.remove_stray_snapshots([5])
    assert psm.latest_snapshot_offset() == 42
    assert psm.oldest_snapshot_offset() == 5
    assert sorted(s.offset for s in list_snapshot_files(log_dir)) == [5, 42]


def test_remove_all_stray_snapshots(psm: ProducerStateManager, log_dir: Path) -> None:
    for offset in (5, 2, 42):
        producer_snapshot_file(log_dir, offset).touch()
    psm.remove_stray_snapshots([42])
    assert sorted(s.offset for s in list_snapshot_files(log_dir)) == [42]


def test_remove_and_mark_snapshot_for_deletion(log_dir: Path, clock: Clock) -> None:
    producer_snapshot_file(log_dir, 5).touch()
    manager = new_manager(log_dir, clock)
    assert manager.latest_snapshot_offset() == 5
    snapshot = manager.remove_and_mark_snapshot_for_deletion(5)
    assert snapshot is not None and snapshot.path.name.endswith(".snapshot.deleted")
    assert manager.latest_snapshot_offset() is None
    # .snapshot.deleted files are not snapshots.
    assert list_snapshot_files(log_dir) == []


def test_remove_and_mark_snapshot_for_deletion_already_deleted(log_dir: Path, clock: Clock) -> None:
    path = producer_snapshot_file(log_dir, 5)
    path.touch()
    manager = new_manager(log_dir, clock)
    path.unlink()
    assert manager.remove_and_mark_snapshot_for_deletion(5) is None
    assert manager.latest_snapshot_offset() is None


def test_idempotent_transaction_marker_retry_tv2(psm: ProducerStateManager) -> None:
    client(psm, PRODUCER_ID, 5, 0, 99, transactional=True)
    end_txn(psm, PRODUCER_ID, 6, ControlRecordType.COMMIT, 100, transaction_version=2)
    # The same marker again (a retry after the coordinator lost the response) is accepted.
    assert (
        end_txn(psm, PRODUCER_ID, 6, ControlRecordType.COMMIT, 101, transaction_version=2) is None
    )


def test_last_stable_offset_completed_txn(psm: ProducerStateManager) -> None:
    start1 = 992342
    start2, start3 = start1 + 25, start1 + 57
    for pid, start in ((PRODUCER_ID, start1), (PRODUCER_ID + 1, start2), (PRODUCER_ID + 2, start3)):
        client(psm, pid, EPOCH, 0, start, transactional=True)
    last1 = start3 + 15
    txn1 = CompletedTxn(PRODUCER_ID, start1, last1, False)
    assert psm.last_stable_offset(txn1) == start2
    psm.complete_txn(txn1)
    psm.on_high_watermark_updated(last1 + 1)
    assert psm.first_unstable_offset() == start2
    last3 = last1 + 20
    txn3 = CompletedTxn(PRODUCER_ID + 2, start3, last3, False)
    assert psm.last_stable_offset(txn3) == start2
    psm.complete_txn(txn3)
    psm.on_high_watermark_updated(last3 + 1)
    assert psm.first_unstable_offset() == start2
    last2 = last3 + 78
    txn2 = CompletedTxn(PRODUCER_ID + 1, start2, last2, False)
    assert psm.last_stable_offset(txn2) == last2 + 1
    psm.complete_txn(txn2)
    psm.on_high_watermark_updated(last2 + 1)
    assert psm.first_unstable_offset() is None


def test_skip_empty_transactions(psm: ProducerStateManager) -> None:
    seq = 0

    def data(info_: object, start: int, end: int) -> None:
        nonlocal seq
        assert hasattr(info_, "append_data_batch")
        count = end - start
        info_.append_data_batch(
            EPOCH,
            seq,
            seq + count,
            last_timestamp=0,
            first_offset=start,
            last_offset=end,
            is_transactional=True,
        )
        seq += count + 1

    def marker(info_: object, control: ControlRecordType, offset: int) -> CompletedTxn | None:
        assert hasattr(info_, "append_end_txn_marker")
        result: CompletedTxn | None = info_.append_end_txn_marker(
            EndTxnMarker(control, 0, 0), EPOCH, offset
        )
        return result

    first = psm.prepare_update(PRODUCER_ID, AppendOrigin.CLIENT)
    data(first, 16, 20)
    assert first.started_transactions == [TxnMetadata(PRODUCER_ID, 16)]
    psm.update(first)
    psm.on_high_watermark_updated(21)
    assert psm.first_unstable_offset() == 16

    second = psm.prepare_update(PRODUCER_ID, AppendOrigin.CLIENT)
    completed1 = marker(second, ControlRecordType.COMMIT, 21)
    assert completed1 == CompletedTxn(PRODUCER_ID, 16, 21, False)
    assert marker(second, ControlRecordType.COMMIT, 22) is None
    assert marker(second, ControlRecordType.ABORT, 23) is None
    data(second, 24, 27)
    completed2 = marker(second, ControlRecordType.ABORT, 28)
    assert completed2 is not None
    assert marker(second, ControlRecordType.ABORT, 29) is None
    data(second, 30, 31)
    assert [t.first_offset for t in second.started_transactions] == [24, 30]
    psm.update(second)
    psm.complete_txn(completed1)
    psm.complete_txn(completed2)
    psm.on_high_watermark_updated(32)
    assert psm.first_unstable_offset() == 30


def test_read_write_snapshot(psm: ProducerStateManager, log_dir: Path, clock: Clock) -> None:
    e1 = ProducerStateEntry(1, 2, 3, -1, 100)
    e1.add_batch(2, 1, 2, 3, -1)
    e2 = ProducerStateEntry(11, 12, 13, 123456, None)
    path = psm.write_snapshot_at(7, [e1, e2])
    raw = read_producer_snapshot(path)
    loaded = sorted(
        (ProducerStateEntry.from_snapshot_entry(r) for r in raw), key=lambda e: e.producer_id
    )
    assert loaded == [e1, e2]
    assert loaded[0].batch_metadata == (BatchMetadata(1, 2, 3, -1),)
    assert loaded[1].is_empty()


def test_duplicate_batch_detection_remembers_five_batches(psm: ProducerStateManager) -> None:
    for seq in range(7):
        client(psm, PRODUCER_ID, EPOCH, seq, 10 + seq)
    last = entry(psm)
    assert [b.first_seq for b in last.batch_metadata] == [2, 3, 4, 5, 6]

    def header(seq: int) -> RecordBatch:
        return RecordBatch(0, 61, 0, 2, 0, 0, 0, -1, -1, PRODUCER_ID, EPOCH, seq, 1)

    found = last.find_duplicate_batch(header(4))
    assert found is not None and found.last_offset == 14
    assert last.find_duplicate_batch(header(1)) is None  # forgotten
    assert last.find_duplicate_batch(header(4)._replace(producer_epoch=1)) is None
