"""Whole cleaning rounds on a ``LocalLog``: ``clean_local_log``.

Kafka's ``LogCleanerTest`` scenarios on logs written through ``append_as_leader`` (producer
ids, epochs and sequences as Kafka's producer state accepts them; transactions ended by the
coordinator's markers), asserting what Kafka's test asserts (keys, offsets, last offsets per
batch, last sequences, the transaction index), plus what a round leaves on disk: cleaned
segments named by their group's first base offset, indexes rebuilt by the ``index.interval.bytes``
rule, only the kept aborted transactions indexed, the mtime of each group's last source segment,
the checkpoint (``end_offset``), reads of compacted-away offsets, and the log reopened.

Where Kafka's test calls ``cleaner.clean(LogToClean(log, X, activeBase))`` directly, a round here
gets ``checkpoint=X``; where it repeats a clean without new data (its fake offset map keeps the
previous latest offset), a round here starts again from the log start (``checkpoint=0``), which
on an already deduplicated log keeps the same records. Rounds run at ``NOW``, or ``NOW + DAY``
and later for the rounds past a delete horizon.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from tierlog.compaction.cleaner import CleanResult, clean_local_log
from tierlog.log.files import log_file, offset_index_file, time_index_file
from tierlog.log.index_verify import verify_offset_index, verify_time_index
from tierlog.log.reader import iter_batches_with_records
from tierlog.log.txn_index import AbortedTxn

from ._logs import (
    DAY,
    NOW,
    CompactedLog,
    aborted_txns,
    base_offsets_per_batch,
    data_batch,
    keys_in_log,
    kv,
    last_offsets_per_batch,
    last_sequences,
    log_batches,
    offsets_in_log,
    read_file_batches,
)

LATER = NOW + DAY + 1
"""A round past the delete horizon stamped by a round at ``NOW``."""


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "compacted-0"


def clean(c: CompactedLog, checkpoint: int | None = 0, now: int = NOW) -> CleanResult:
    result = clean_local_log(c.log, checkpoint=checkpoint, now_ms=now)
    assert result.cleaned, result.summary_line()
    return result


def ks(*keys: int | str) -> list[bytes]:
    return [str(k).encode() for k in keys]


def put_keys(c: CompactedLog, *keys: int) -> None:
    for k in keys:
        c.put(kv(k, k))


# Plain records -----------------------------------------------------------------------------------


def test_latest_record_of_each_key_survives(log_dir: Path) -> None:
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 300})
    for i in range(40):
        c.put(kv(i % 7, i))
    c.roll()
    before = len(c.log.segments)
    result = clean(c, checkpoint=None)
    assert (result.first_dirty_offset, result.end_offset) == (0, 40)
    values = {r.key: r.value for b in log_batches(c.log) for r in b.records}
    assert values == {
        str(k).encode(): str(max(i for i in range(40) if i % 7 == k)).encode() for k in range(7)
    }
    assert offsets_in_log(c.log) == list(range(33, 40))
    assert result.stats.records_read == 40 and result.stats.records_written == 7
    assert result.keys_mapped == 7
    assert result.segments_read == before - 1
    assert len(c.log.segments) <= before


def test_log_cleaner_stats(log_dir: Path) -> None:
    # LogCleanerTest.testLogCleanerStats: keys 0, 1, 0, 1, 0 cleaned from first dirty offset 2.
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 1024})
    put_keys(c, 0, 1, 0, 1, 0)
    c.roll()
    initial_size = c.log.size()
    result = clean(c, checkpoint=2)
    assert result.end_offset == 5
    assert result.stats.records_read == 5
    assert result.stats.bytes_read == initial_size
    assert result.stats.records_written == 2
    assert result.stats.bytes_written == c.log.size()
    assert result.stats.invalid_records == 0
    assert offsets_in_log(c.log) == [3, 4]


def test_clean_section_records_lose_only_to_dirty_keys(log_dir: Path) -> None:
    c = CompactedLog.open(log_dir)
    put_keys(c, 0, 1, 2)  # offsets 0-2, as if already cleaned
    c.roll()
    put_keys(c, 1, 3)  # offsets 3-4, dirty
    c.roll()
    clean(c, checkpoint=3)
    assert offsets_in_log(c.log) == [0, 2, 3, 4]
    assert keys_in_log(c.log) == ks(0, 2, 1, 3)


def test_cleaning_with_deletes(log_dir: Path) -> None:
    # LogCleanerTest.testCleaningWithDeletes.
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 1024})
    while len(c.log.segments) < 2:
        n = c.log.log_end_offset
        c.put(kv(n, n))
    leo = c.log.log_end_offset
    for k in range(0, leo, 2):
        c.put(kv(k, None))
    while len(c.log.segments) < 4:
        n = c.log.log_end_offset
        c.put(kv(n, n))
    clean(c)
    keys = set(keys_in_log(c.log))
    assert not keys & set(ks(*range(0, leo, 2)))
    assert set(ks(*range(1, leo, 2))) <= keys


def test_tombstone_lifecycle_in_a_log(log_dir: Path) -> None:
    # A tombstone is stamped by the first round that keeps it and removed by the first later
    # round past the horizon; its record timestamp plays no part
    # (LogCleanerTest.testCleanTombstone).
    c = CompactedLog.open(log_dir, {"delete.retention.ms": 1000})
    c.put(kv("a", 1), ts=NOW + 10 * DAY)
    c.roll()
    clean(c, checkpoint=None)
    c.put(kv("a", None), ts=NOW - 10 * DAY)
    c.roll()
    clean(c, checkpoint=1, now=NOW)
    first = log_batches(c.log)[0]
    assert first.header.last_offset == 1
    assert first.records[0].value is None
    assert first.header.delete_horizon_ms == NOW + 1000
    c.put(kv("b", 1))
    c.roll()
    clean(c, checkpoint=2, now=NOW + 999)
    assert log_batches(c.log)[0].header.last_offset == 1
    clean(c, checkpoint=0, now=NOW + 1000)
    assert [r.offset for b in log_batches(c.log) for r in b.records] == [2]


def test_keyless_records_of_a_log_that_was_not_compacted(log_dir: Path) -> None:
    # LogCleanerTest.testCleaningWithUnkeyedMessages: keyless records written under
    # cleanup.policy=delete are dropped and counted when the topic becomes compacted.
    c = CompactedLog.open(log_dir, {"cleanup.policy": "delete", "internal.segment.bytes": 1024})
    while len(c.log.segments) < 2:
        c.put((None, str(c.log.log_end_offset).encode()))
    keyless = sum(1 for b in log_batches(c.log) for r in b.records if r.key is None)
    size_with_keyless = c.log.size()
    while len(c.log.segments) < 3:
        n = c.log.log_end_offset
        c.put(kv(n, n))
    c.log.update_config({"cleanup.policy": "compact"})
    expected_size = c.log.size() - size_with_keyless
    result = clean(c)
    assert sum(1 for b in log_batches(c.log) for r in b.records if r.key is None) == 0
    assert c.log.size() == expected_size
    assert result.stats.invalid_records == keyless


def test_cleaning_beyond_missing_offsets(log_dir: Path) -> None:
    # LogCleanerTest.testCleaningBeyondMissingOffsets: the checkpoint passes offset gaps
    # between segments.
    c = CompactedLog.open(log_dir)
    put_keys(c, *range(10))
    c.log.roll(15)
    assert c.log.active_segment.base_offset == 15
    for k in range(15, 25):
        c.log.append_as_follower(data_batch(k, kv(k, k)), 0)
    c.log.roll(30)
    c.log.append_as_follower(data_batch(30, kv(1015, 1015)), 0)
    result = clean(c)
    assert result.end_offset == c.log.active_segment.base_offset == 30


# Idempotent producers ----------------------------------------------------------------------------


def test_duplicate_check_after_cleaning(log_dir: Path) -> None:
    # LogCleanerTest.testDuplicateCheckAfterCleaning.
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 2048})
    c.idempotent(1, kv(1), kv(2), kv(3))
    c.idempotent(2, kv(3), kv(1), kv(4))
    c.idempotent(3, kv(1), kv(4))
    c.roll()
    clean(c)
    assert last_offsets_per_batch(c.log) == [2, 5, 7]
    assert last_sequences(c.log) == {1: 2, 2: 2, 3: 1}
    assert keys_in_log(c.log) == ks(2, 3, 1, 4)
    assert offsets_in_log(c.log) == [1, 3, 6, 7]

    # The producer state rebuilt from the cleaned files still recognises retried batches.
    c.reopen()
    retried = {1: (0, 2), 3: (6, 7), 2: (3, 5)}
    for pid, keys in ((1, (1, 2, 3)), (3, (1, 4)), (2, (3, 1, 4))):
        c.sequences[pid] = 0
        info = c.log.append_as_leader(c.producer_batch(pid, [kv(k) for k in keys], None, False), 0)
        assert info.duplicate
        assert (info.first_offset, info.last_offset) == retried[pid]

    # Producer 1's last batch loses its last record: it stays as an empty header.
    c.idempotent(4, kv(2))
    c.roll()
    clean(c)
    assert last_sequences(c.log) == {1: 2, 2: 2, 3: 1, 4: 0}
    assert last_offsets_per_batch(c.log) == [2, 5, 7, 8]
    assert keys_in_log(c.log) == ks(3, 1, 4, 2)
    assert offsets_in_log(c.log) == [3, 6, 7, 8]
    c.reopen()
    c.sequences[1] = 0
    info = c.log.append_as_leader(c.producer_batch(1, [kv(1), kv(2), kv(3)], None, False), 0)
    assert info.duplicate and (info.first_offset, info.last_offset) == (0, 2)


def test_cleaner_retains_each_producers_last_sequence(log_dir: Path) -> None:
    # LogCleanerTest.testLogCleanerRetainsProducerLastSequence.
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 1024})
    c.put(kv(0, 0))
    c.idempotent(1, kv(0, 1))
    c.idempotent(2, kv(0, 2))
    c.idempotent(3, kv(0, 3))
    c.idempotent(2, kv(1, 1))
    c.roll()
    clean(c)
    assert last_offsets_per_batch(c.log) == [1, 3, 4]
    assert last_sequences(c.log) == {1: 0, 2: 1, 3: 0}
    assert keys_in_log(c.log) == ks(0, 1)
    assert offsets_in_log(c.log) == [3, 4]
    empty = log_batches(c.log)[0]
    assert len(empty.data) == 61 and empty.header.producer_id == 1


# Transactions ------------------------------------------------------------------------------------


def test_basic_transaction_aware_cleaning(log_dir: Path) -> None:
    # LogCleanerTest.testBasicTransactionAwareCleaning.
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 2048})
    c.txn(1, kv(1), kv(2))
    c.txn(2, kv(2), kv(3))
    c.txn(1, kv(3), kv(4))
    c.abort(1)
    c.commit(2)
    c.txn(1, kv(2))
    c.commit(1)
    before = aborted_txns(c.log)
    assert before == [AbortedTxn(1, 0, 6, 2)]
    c.roll()
    clean(c)
    assert keys_in_log(c.log) == ks(3, 2)
    assert offsets_in_log(c.log) == [3, 6, 7, 8, 9]
    assert aborted_txns(c.log) == before


def test_transactions_spanning_segments(log_dir: Path) -> None:
    # LogCleanerTest.testCleanWithTransactionsSpanningSegments.
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 1024})
    c.txn(1, kv(1), kv(2))
    c.txn(3, kv(2), kv(3))
    c.txn(2, kv(3), kv(4))
    c.roll()
    c.txn(2, kv(5), kv(6))
    c.txn(3, kv(6), kv(7))
    c.txn(1, kv(7), kv(8))
    c.abort(2)
    c.txn(3, kv(8), kv(9))
    c.commit(3)
    c.txn(1, kv(9), kv(10))
    c.abort(1)
    # Only the first segment is cleanable: the second is the active one.
    result = clean(c)
    assert result.end_offset == 6
    assert keys_in_log(c.log) == ks(2, 3, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10)
    c.roll()
    c.txn(2, kv(11))
    c.txn(1, kv(12))
    # Both producers' transactions are open: the LSO holds the round at the active segment.
    result = clean(c, checkpoint=result.end_offset)
    assert result.end_offset == 19
    assert keys_in_log(c.log) == ks(2, 3, 6, 7, 8, 9, 11, 12)


def test_aborted_transaction_removed_in_three_rounds(log_dir: Path) -> None:
    # LogCleanerTest.testMultiPassSegmentCleaningWithAbortedTransactions, with whole rounds:
    # round 1 drops the aborted data and keeps the markers and their index entries, round 2
    # stamps the markers and drops the entries, the first round past the horizon drops them.
    c = CompactedLog.open(log_dir, {"delete.retention.ms": 50_000})
    c.txn(1, kv(1), kv(2))  # 0-1
    c.txn(2, kv(2), kv(3))  # 2-3
    c.txn(1, kv(3), kv(4))  # 4-5
    c.commit(1)  # 6
    c.commit(2)  # 7
    c.txn(1, kv(2), kv(3))  # 8-9
    c.abort(1)  # 10
    c.txn(2, kv(4), kv(5))  # 11-12
    c.txn(1, kv(5), kv(6))  # 13-14
    c.commit(1)  # 15
    c.abort(2)  # 16
    c.txn(2, kv(6), kv(7))  # 17-18
    c.commit(2)  # 19
    c.roll()
    assert c.log.log_end_offset == 20
    expected = [AbortedTxn(1, 8, 10, 11), AbortedTxn(2, 11, 16, 17)]
    assert aborted_txns(c.log) == expected

    assert clean(c).end_offset == 20
    assert base_offsets_per_batch(c.log) == [0, 2, 4, 6, 7, 10, 13, 15, 16, 17, 19]
    assert offsets_in_log(c.log) == [0, 2, 4, 5, 6, 7, 10, 13, 15, 16, 17, 18, 19]
    assert aborted_txns(c.log) == expected

    clean(c, checkpoint=0, now=NOW + 1)
    assert base_offsets_per_batch(c.log) == [0, 2, 4, 6, 7, 10, 13, 15, 16, 17, 19]
    assert aborted_txns(c.log) == []
    markers = {b.header.base_offset: b.header for b in log_batches(c.log)}
    assert markers[10].delete_horizon_ms == markers[16].delete_horizon_ms == NOW + 1 + 50_000
    assert markers[6].delete_horizon_ms is None

    clean(c, checkpoint=0, now=NOW + 50_000)
    assert 10 in base_offsets_per_batch(c.log)
    clean(c, checkpoint=0, now=NOW + 1 + 50_000)
    assert base_offsets_per_batch(c.log) == [0, 2, 4, 6, 7, 13, 15, 17, 19]
    assert offsets_in_log(c.log) == [0, 2, 4, 5, 6, 7, 13, 15, 17, 18, 19]
    assert aborted_txns(c.log) == []


def test_commit_marker_removal(log_dir: Path) -> None:
    # LogCleanerTest.testCommitMarkerRemoval.
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 256})
    c.txn(1, kv(1))
    c.txn(1, kv(2), kv(3))
    c.commit(1)
    c.txn(1, kv(2))
    c.commit(1)
    c.roll()
    dirty = clean(c).end_offset
    assert keys_in_log(c.log) == ks(1, 3, 2)
    assert offsets_in_log(c.log) == [0, 2, 3, 4, 5]
    c.txn(1, kv(1), kv(3))
    c.commit(1)
    c.roll()
    clean(c, checkpoint=dirty)
    assert keys_in_log(c.log) == ks(2, 1, 3)
    assert offsets_in_log(c.log) == [3, 4, 5, 6, 7, 8]
    clean(c)
    assert offsets_in_log(c.log) == [3, 4, 5, 6, 7, 8]
    clean(c, now=LATER)
    assert keys_in_log(c.log) == ks(2, 1, 3)
    assert offsets_in_log(c.log) == [4, 5, 6, 7, 8]


def test_deleted_batches_with_no_messages_read(log_dir: Path) -> None:
    # LogCleanerTest.testDeletedBatchesWithNoMessagesRead.
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 1000})
    c.txn(1, kv(1))
    c.abort(1)
    c.txn(1, kv(2))
    c.txn(1, kv(2))
    c.commit(1)
    c.roll()
    clean(c)
    assert keys_in_log(c.log) == ks(2)
    assert offsets_in_log(c.log) == [1, 3, 4]
    clean(c)
    clean(c, now=LATER)
    assert keys_in_log(c.log) == ks(2)
    assert offsets_in_log(c.log) == [3, 4]


def test_commit_marker_retention_with_empty_batch(log_dir: Path) -> None:
    # LogCleanerTest.testCommitMarkerRetentionWithEmptyBatch.
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 256})
    c.txn(1, kv(2), kv(3))  # 0-1
    c.roll()
    c.txn(2, kv(2), kv(3))  # 2-3
    c.commit(2)  # 4
    c.roll()
    c.put(kv(2, 2))  # 5
    c.put(kv(3, 3))  # 6
    c.commit(1)  # 7
    c.roll()
    dirty = clean(c).end_offset
    assert keys_in_log(c.log) == ks(2, 3)
    assert offsets_in_log(c.log) == [4, 5, 6, 7]
    assert last_offsets_per_batch(c.log) == [1, 3, 4, 5, 6, 7]
    clean(c)
    assert offsets_in_log(c.log) == [4, 5, 6, 7]
    assert last_offsets_per_batch(c.log) == [1, 3, 4, 5, 6, 7]
    c.txn(2, kv(1))  # 8
    c.commit(2)  # 9
    c.roll()
    clean(c, checkpoint=dirty)
    assert keys_in_log(c.log) == ks(2, 3, 1)
    assert offsets_in_log(c.log) == [4, 5, 6, 7, 8, 9]
    assert last_offsets_per_batch(c.log) == [1, 4, 5, 6, 7, 8, 9]
    clean(c)
    clean(c, now=LATER)
    assert keys_in_log(c.log) == ks(2, 3, 1)
    assert offsets_in_log(c.log) == [5, 6, 7, 8, 9]
    assert last_offsets_per_batch(c.log) == [1, 5, 6, 7, 8, 9]


def test_clean_empty_control_batch(log_dir: Path) -> None:
    # LogCleanerTest.testCleanEmptyControlBatch: a commit without data is stamped, emptied past
    # its horizon, and the empty batch kept for the producer's epoch.
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 256})
    c.commit(1)  # 0
    c.put(kv(2, 2))  # 1
    c.put(kv(3, 3))  # 2
    c.roll()
    clean(c)
    assert log_batches(c.log)[0].header.delete_horizon_ms == NOW + DAY
    clean(c, now=LATER)
    assert keys_in_log(c.log) == ks(2, 3)
    assert offsets_in_log(c.log) == [1, 2]
    assert last_offsets_per_batch(c.log) == [0, 1, 2]
    marker = log_batches(c.log)[0]
    assert marker.header.is_control and marker.header.records_count == 0
    clean(c, now=LATER + DAY)
    assert offsets_in_log(c.log) == [1, 2]
    assert last_offsets_per_batch(c.log) == [0, 1, 2]


def test_committed_and_aborted_transactions_spanning_segments(tmp_path: Path) -> None:
    # LogCleanerTest.testCommittedTransactionSpanningSegments and
    # testAbortedTransactionSpanningSegments.
    c = CompactedLog.open(tmp_path / "committed-0", {"internal.segment.bytes": 128})
    c.txn(1, kv(1))
    c.roll()
    c.commit(1)
    c.roll()
    clean(c)
    clean(c, now=LATER)
    assert offsets_in_log(c.log) == [0, 1]
    assert last_offsets_per_batch(c.log) == [0, 1]

    a = CompactedLog.open(tmp_path / "aborted-0", {"internal.segment.bytes": 128})
    a.txn(1, kv(1))
    a.roll()
    a.abort(1)
    a.roll()
    clean(a)
    # The batch stays (empty) as the producer's last; the marker because that batch remains.
    assert offsets_in_log(a.log) == [1]
    assert last_offsets_per_batch(a.log) == [0, 1]
    clean(a, now=LATER)
    assert offsets_in_log(a.log) == [1]
    assert last_offsets_per_batch(a.log) == [0, 1]
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in aborted_txns(a.log)] == [
        (1, 0, 1)
    ]


def test_abort_marker_removal(log_dir: Path) -> None:
    # LogCleanerTest.testAbortMarkerRemoval.
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 256})
    c.txn(1, kv(1))
    c.txn(1, kv(2), kv(3))
    c.abort(1)
    c.txn(1, kv(3))
    c.commit(1)
    c.roll()
    clean(c)
    assert keys_in_log(c.log) == ks(3)
    assert offsets_in_log(c.log) == [3, 4, 5]
    clean(c)
    clean(c, now=LATER)
    assert keys_in_log(c.log) == ks(3)
    assert offsets_in_log(c.log) == [4, 5]


def test_abort_marker_retention_with_empty_batch(log_dir: Path) -> None:
    # LogCleanerTest.testAbortMarkerRetentionWithEmptyBatch; the producer's next transaction
    # is committed here (Kafka's test leaves it open and cleans past the LSO).
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 256})
    c.txn(1, kv(2), kv(3))  # 0-1
    c.abort(1)  # 2
    c.roll()

    def indexed() -> list[tuple[int, int, int]]:
        return [(e.producer_id, e.first_offset, e.last_offset) for e in aborted_txns(c.log)]

    assert indexed() == [(1, 0, 2)]
    dirty = clean(c).end_offset
    assert indexed() == [(1, 0, 2)]
    assert keys_in_log(c.log) == []
    assert offsets_in_log(c.log) == [2]
    assert last_offsets_per_batch(c.log) == [1, 2]
    clean(c)
    clean(c, now=LATER)
    assert indexed() == [(1, 0, 2)]
    assert offsets_in_log(c.log) == [2]
    assert last_offsets_per_batch(c.log) == [1, 2]
    c.txn(1, kv(1))  # 3
    c.commit(1)  # 4
    c.roll()
    clean(c, checkpoint=dirty)
    assert indexed() == [(1, 0, 2)]
    assert keys_in_log(c.log) == ks(1)
    assert offsets_in_log(c.log) == [2, 3, 4]
    assert last_offsets_per_batch(c.log) == [2, 3, 4]
    clean(c)
    clean(c, now=LATER)
    assert keys_in_log(c.log) == ks(1)
    assert offsets_in_log(c.log) == [3, 4]
    assert last_offsets_per_batch(c.log) == [3, 4]
    assert indexed() == []


def test_last_sequence_kept_even_if_the_transaction_aborted(log_dir: Path) -> None:
    # LogCleanerTest.testLogCleanerRetainsLastSequenceEvenIfTransactionAborted.
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 1024})
    c.txn(1, kv(1))
    c.txn(1, kv(2), kv(3))
    c.abort(1)
    c.roll()
    clean(c)
    assert last_offsets_per_batch(c.log) == [2, 3]
    assert last_sequences(c.log) == {1: 2}
    assert keys_in_log(c.log) == []
    assert offsets_in_log(c.log) == [3]
    # A new (open) transaction of the producer: the LSO keeps its segment out of the round.
    c.txn(1, kv(1), kv(5))
    c.roll()
    assert clean(c).end_offset == 4
    assert last_offsets_per_batch(c.log) == [3, 5]
    assert last_sequences(c.log) == {1: 4}
    assert keys_in_log(c.log) == ks(1, 5)
    assert offsets_in_log(c.log) == [3, 4, 5]


def test_data_keys_equal_to_marker_keys(log_dir: Path) -> None:
    # LogCleanerTest.testCleaningWithKeysConflictingWithTxnMarkerKeys.
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 1024})
    c.txn(1, kv(1))
    c.commit(1)
    c.txn(2, (b"\x00\x00\x00\x01", b"foo"))
    c.commit(2)
    c.roll()
    assert offsets_in_log(c.log) == [0, 1, 2, 3]
    clean(c)
    assert last_offsets_per_batch(c.log) == [0, 1, 2, 3]
    assert offsets_in_log(c.log) == [0, 1, 2, 3]


# The bounds of a round ---------------------------------------------------------------------------


def test_uncleanable_segments_are_left_as_they_are(log_dir: Path) -> None:
    # LogCleanerTest.testCleaningWithUncleanableSection, with min.compaction.lag.ms holding the
    # recent segments back.
    lag = 3_600_000
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 1024, "min.compaction.lag.ms": lag})
    while len(c.log.segments) <= 2:
        n = c.log.log_end_offset
        c.put(kv(n % 10, n), ts=NOW - 2 * lag)
    while len(c.log.segments) < 6:
        n = c.log.log_end_offset
        c.put(kv(n % 10, n), ts=NOW)
    segments = c.log.segments
    uncleanable_base = segments[2].base_offset
    before = {s.base_offset: s.log_path.read_bytes() for s in segments}
    result = clean(c)
    assert result.end_offset == uncleanable_base
    after = {s.base_offset: s.log_path.read_bytes() for s in c.log.segments}
    for base, data in before.items():
        if base >= uncleanable_base:
            assert after[base] == data
    cleaned = [b for b in after if b < uncleanable_base]
    assert sum(len(after[b]) for b in cleaned) < sum(
        len(d) for b, d in before.items() if b < uncleanable_base
    )


def test_lso_inside_a_segment_holds_back_that_whole_segment(log_dir: Path) -> None:
    c = CompactedLog.open(log_dir)
    put_keys(c, 0, 0)
    c.roll()
    put_keys(c, 0)  # 2
    c.txn(9, kv(1))  # 3, left open
    put_keys(c, 0)  # 4
    c.roll()
    put_keys(c, 0)
    assert c.log.last_stable_offset == 3
    result = clean(c)
    assert result.end_offset == 2
    assert offsets_in_log(c.log)[:1] == [1]
    assert [r.offset for b in log_batches(c.log) for r in b.records] == [1, 2, 3, 4, 5]


def test_a_round_without_new_data_is_not_eligible(log_dir: Path) -> None:
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 300})
    for i in range(30):
        c.put(kv(i % 4, i))
    c.roll()
    first = clean(c, checkpoint=None)
    assert first.end_offset == c.log.active_segment.base_offset
    files = {p.name: p.read_bytes() for p in c.log.dir.iterdir() if p.is_file()}
    second = clean_local_log(c.log, checkpoint=first.end_offset, now_ms=NOW)
    assert not second.cleaned
    assert second.cleanable_ratio == 0.0
    assert {p.name: p.read_bytes() for p in c.log.dir.iterdir() if p.is_file()} == files


def test_ratio_must_exceed_min_cleanable_dirty_ratio(log_dir: Path) -> None:
    c = CompactedLog.open(log_dir, {"min.cleanable.dirty.ratio": 0.5})
    put_keys(c, 0, 1)
    c.roll()
    put_keys(c, 0, 1)
    c.roll()
    # Equal-sized segments, one clean and one dirty: ratio 0.5 exactly, not above.
    sizes = [s.size for s in c.log.segments[:-1]]
    assert sizes[0] == sizes[1]
    result = clean_local_log(c.log, checkpoint=2, now_ms=NOW)
    assert not result.cleaned and result.cleanable_ratio == 0.5
    forced = clean_local_log(c.log, checkpoint=2, now_ms=NOW, force=True)
    assert forced.cleaned
    assert offsets_in_log(c.log) == [2, 3]


def test_max_compaction_lag_makes_a_log_eligible(log_dir: Path) -> None:
    c = CompactedLog.open(
        log_dir, {"min.cleanable.dirty.ratio": 0.99, "max.compaction.lag.ms": 60_000}
    )
    put_keys(c, 0, 1, 2, 3)
    c.roll()
    c.put(kv(0, "x"), ts=NOW - 120_000)
    c.roll()
    result = clean_local_log(c.log, checkpoint=4, now_ms=NOW)
    assert result.cleaned
    assert offsets_in_log(c.log) == [1, 2, 3, 4]


# What a round leaves on disk ---------------------------------------------------------------------


def _index_entries(seg_dir: Path, base: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    raw_o = offset_index_file(seg_dir, base).read_bytes()
    raw_t = time_index_file(seg_dir, base).read_bytes()
    return (
        [struct.unpack_from(">ii", raw_o, i) for i in range(0, len(raw_o), 8)],
        [struct.unpack_from(">qi", raw_t, i) for i in range(0, len(raw_t), 12)],
    )


def _expected_index(
    path: Path, base: int, interval: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    offsets: list[tuple[int, int]] = []
    times: list[tuple[int, int]] = []
    since, max_ts, max_off, last_ts = 0, -1, base, -1
    for b in read_file_batches(path):
        h = b.header
        if h.max_timestamp > max_ts:
            max_ts, max_off = h.max_timestamp, h.last_offset
        if since > interval:
            offsets.append((h.last_offset - base, b.position))
            if max_ts > last_ts:
                times.append((max_ts, max_off - base))
                last_ts = max_ts
            since = 0
        since += h.size_in_bytes
    if max_ts > last_ts:
        times.append((max_ts, max_off - base))
    return offsets, times


def test_cleaned_segments_files_indexes_mtime_and_txn_index(log_dir: Path) -> None:
    interval = 150
    c = CompactedLog.open(
        log_dir, {"internal.segment.bytes": 400, "index.interval.bytes": interval}
    )
    for i in range(12):
        c.put(kv(i % 3, "v" * 20 + str(i)), ts=NOW - 100 + i)
    c.txn(5, kv("t"))
    c.abort(5)
    for i in range(12):
        c.put(kv(i % 3 + 10, "w" * 20 + str(i)), ts=NOW - 50 + (i * 7) % 11)
    c.roll()
    sources = c.log.segments[:-1]
    mtimes = {}
    for n, s in enumerate(sources):
        s.set_last_modified(NOW - 10_000 + n)
        mtimes[s.base_offset] = NOW - 10_000 + n
    bases_before = [s.base_offset for s in sources]
    result = clean(c, checkpoint=None)
    assert result.segments_read == len(sources)
    after = c.log.segments[:-1]
    # Each cleaned segment is named by its group's first base offset, from the old bases.
    assert {s.base_offset for s in after} <= set(bases_before)
    assert after[0].base_offset == 0
    assert not [p for p in os.listdir(log_dir) if p.endswith((".cleaned", ".swap", ".deleted"))]
    for i, s in enumerate(after):
        # The mtime of the group's last source segment: the source just before the next group.
        nxt = after[i + 1].base_offset if i + 1 < len(after) else c.log.active_segment.base_offset
        last_source = max(b for b in bases_before if b < nxt)
        assert s.last_modified() == mtimes[last_source]
        assert _index_entries(log_dir, s.base_offset) == _expected_index(
            log_file(log_dir, s.base_offset), s.base_offset, interval
        )
        assert list(verify_offset_index(s.offset_index, s.log_path)) == []
        assert list(verify_time_index(s.time_index, s.log_path)) == []
    # The aborted transaction's marker stayed with its data observed: one entry, in the cleaned
    # segment that holds the marker.
    entries = aborted_txns(c.log)
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in entries] == [(5, 12, 13)]
    marker_seg = next(s for s in after if s.base_offset <= 13 < s.read_next_offset())
    assert marker_seg.txn_index.all_aborted_txns() == entries


def test_groups_merge_small_cleaned_segments(log_dir: Path) -> None:
    # Segments shrunk by a clean are merged by a later round's grouping (segment.bytes); a
    # segment emptied entirely stays, 0 bytes, until a grouping merges it.
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 400})
    for i in range(60):
        c.put(kv(i % 5, i))
    c.roll()
    n_before = len(c.log.segments)
    assert n_before > 4
    clean(c)
    # Groups are made from the sizes before the clean: nothing merges yet, and the emptied
    # segments stay, 0 bytes each (the last keeps its data).
    assert len(c.log.segments) == n_before
    assert [s.size for s in c.log.segments[:-2]] == [0] * (n_before - 2)
    assert offsets_in_log(c.log) == list(range(55, 60))
    # The next round groups the empty segments with the last one: one segment, named 0.
    epochs = (log_dir / "leader-epoch-checkpoint").read_bytes()
    clean(c)
    assert [s.base_offset for s in c.log.segments[:-1]] == [0]
    assert offsets_in_log(c.log) == list(range(55, 60))
    # The producer snapshots named by the removed segments went; the active one's stayed, and
    # the leader epoch file is untouched.
    snapshots = sorted(p.name for p in log_dir.iterdir() if p.suffix == ".snapshot")
    assert snapshots == ["00000000000000000060.snapshot"]
    assert (log_dir / "leader-epoch-checkpoint").read_bytes() == epochs
    assert c.log.log_start_offset == 0


def test_reads_of_compacted_away_offsets_return_the_next_batch(log_dir: Path) -> None:
    c = CompactedLog.open(log_dir)
    put_keys(c, 0, 1, 0, 2, 1, 0)
    c.roll()
    put_keys(c, 9)
    clean(c)
    assert offsets_in_log(c.log) == [3, 4, 5, 6]
    for fetch, first in ((0, 3), (1, 3), (2, 3), (3, 3), (4, 4), (6, 6)):
        info = c.log.read(fetch, 10_000, "log_end")
        records = [r.offset for _, _, rs in iter_batches_with_records(info.records) for r in rs]
        assert records[0] == first, fetch
    assert c.log.log_start_offset == 0


def test_cleaned_log_reopens_with_the_same_content(log_dir: Path) -> None:
    c = CompactedLog.open(log_dir, {"internal.segment.bytes": 300})
    c.idempotent(3, kv(1), kv(2))
    c.txn(4, kv(1))
    c.abort(4)
    for i in range(20):
        c.put(kv(i % 3, i))
    c.roll()
    clean(c)
    batches = [(b.header, b.records) for b in log_batches(c.log)]
    entries = aborted_txns(c.log)
    c.reopen()
    assert [(b.header, b.records) for b in log_batches(c.log)] == batches
    assert aborted_txns(c.log) == entries
    assert c.log.log_end_offset == 24
    assert c.log.last_records_of_active_producers()[3][0] == 1
