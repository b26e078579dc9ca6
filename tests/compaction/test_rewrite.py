"""Pass 2 on hand-built segment files: ``rewrite_segment`` (with ``scan_segment`` and
``decide_transactions`` where a whole round is run by ``clean_files``).

The batch decision (DELETE, DELETE_EMPTY, RETAIN_EMPTY), the record decision (superseded,
keyless, tombstones and their horizon) and what is written (the original bytes, a rebuilt batch
with its codec at the default level and every header field kept, a 61-byte empty header),
following KAFKA-LOGCLEANER.md 3.1-3.4 and Kafka's ``LogCleanerTest``. Every batch read back is
CRC checked (``read_buffer_batches``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.compaction.rewrite import (
    RetentionContext,
    RewriteStats,
    empty_batch_header,
    rewrite_segment,
)
from tierlog.compaction.scan import key_digest
from tierlog.compaction.txn import MarkerKind, TxnDecisions, TxnEvent, decide_transactions
from tierlog.log.batch import (
    CONTROL_FLAG_MASK,
    DELETE_HORIZON_FLAG_MASK,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    ControlRecordType,
    TimestampType,
    build_batch,
    read_batch_header,
)
from tierlog.log.compression import CompressionType
from tierlog.log.record import NO_TIMESTAMP, Record
from tierlog.log.txn_index import AbortedTxn

from ._logs import (
    DAY,
    NOW,
    Batch,
    clean_files,
    data_batch,
    kv,
    marker_batch,
    read_buffer_batches,
    read_file_batches,
    write_segment,
)

COMMIT, ABORT = ControlRecordType.COMMIT, ControlRecordType.ABORT


def rewrite(
    path: Path,
    *,
    superseded: Callable[[int, bytes], bool] = lambda _o, _k: False,
    now: int = NOW,
    delete_retention_ms: int = DAY,
    end_offset: int = 1_000_000,
    map_latest_offset: int | None = None,
    producers: dict[int, tuple[int | None, int]] | None = None,
    decisions: TxnDecisions | None = None,
) -> tuple[list[Batch], RewriteStats, list[AbortedTxn | None]]:
    """One segment's rewrite with a given superseded test; the survivors read back."""
    ctx = RetentionContext(
        now_ms=now,
        delete_retention_ms=delete_retention_ms,
        first_uncleanable_offset=end_offset,
        map_latest_offset=end_offset - 1 if map_latest_offset is None else map_latest_offset,
        producers=producers or {},
        decisions=decisions or TxnDecisions(),
    )
    stats = RewriteStats()
    out = list(rewrite_segment(path, ctx, superseded, stats))
    for header, data, _ in out:
        assert read_batch_header(data, 0) == header
    return read_buffer_batches(b"".join(d for _, d, _ in out)), stats, [e for _, _, e in out]


def offsets(batches: list[Batch]) -> list[int]:
    return [r.offset for b in batches for r in b.records]


def superseded_by(latest: dict[bytes, int]) -> Callable[[int, bytes], bool]:
    return lambda offset, key: latest.get(key, -1) > offset


# Superseded records ------------------------------------------------------------------------------


def test_superseded_records_are_dropped_whole_round(tmp_path: Path) -> None:
    # Keys a, b, a, c, b over two segments: the latest of each key stays.
    s0 = write_segment(
        tmp_path, 0, [data_batch(0, kv("a", 1), kv("b", 2)), data_batch(2, kv("a", 3))]
    )
    s1 = write_segment(tmp_path, 3, [data_batch(3, kv("c", 4)), data_batch(4, kv("b", 5))])
    r = clean_files([s0, s1])
    assert offsets(r.batches(0)) == [2]
    assert offsets(r.batches(1)) == [3, 4]
    assert [b.header.base_offset for b in r.all_batches()] == [2, 3, 4]
    assert r.stats.records_read == 5 and r.stats.records_written == 3


def test_records_before_the_first_dirty_offset_lose_to_dirty_keys_only(tmp_path: Path) -> None:
    # The clean section is rewritten too: its records lose to keys of the dirty section, not
    # to each other (a clean section holds one record per key already, or the map says so).
    s = write_segment(
        tmp_path,
        0,
        [data_batch(0, kv("a", 1), kv("b", 2)), data_batch(2, kv("a", 3)), data_batch(3, kv("c"))],
    )
    r = clean_files([s], first_dirty_offset=2)
    assert offsets(r.batches()) == [1, 2, 3]
    r = clean_files([s], first_dirty_offset=3)
    assert offsets(r.batches()) == [0, 1, 2, 3]


def test_a_batch_that_supersedes_itself_keeps_its_span(tmp_path: Path) -> None:
    s = write_segment(
        tmp_path,
        10,
        [data_batch(10, kv("k", 1), kv("x", 2), kv("k", 3), pid=5, epoch=2, seq=40)],
    )
    r = clean_files([s])
    (b,) = r.batches()
    assert [(x.offset, x.key) for x in b.records] == [(11, b"x"), (12, b"k")]
    assert (b.header.base_offset, b.header.last_offset) == (10, 12)
    assert (b.header.base_sequence, b.header.last_sequence) == (40, 42)


def test_empty_key_is_a_key_and_empty_value_is_not_a_tombstone(tmp_path: Path) -> None:
    s = write_segment(
        tmp_path,
        0,
        [
            data_batch(0, (b"", b"first"), (b"", b"")),
            data_batch(2, kv("x"), (None, b"keyless")),
            data_batch(4, kv("end")),
        ],
    )
    r = clean_files([s])
    batches = r.batches()
    assert [(x.offset, x.key, x.value) for x in batches[0].records] == [(1, b"", b"")]
    # An empty value is not a tombstone: no delete horizon is stamped.
    assert batches[0].header.delete_horizon_ms is None
    assert r.stats.tombstones_kept == 0
    # The keyless record is dropped and counted as invalid.
    assert [x.offset for x in batches[1].records] == [2]
    assert r.stats.invalid_records == 1


# Tombstones --------------------------------------------------------------------------------------


def test_tombstone_is_kept_and_stamped_then_removed_after_the_horizon(tmp_path: Path) -> None:
    retention = 5_000
    s = write_segment(
        tmp_path,
        0,
        [
            data_batch(0, kv("a", 1), kv("b", 2), ts=NOW - 100),
            data_batch(2, kv("a", None), ts=NOW - 50),
            data_batch(3, kv("c", 3)),
        ],
    )
    r = clean_files([s], now=NOW, delete_retention_ms=retention)
    batches = r.batches()
    assert offsets(batches) == [1, 2, 3]
    tomb = batches[1]
    assert tomb.records[0].value is None
    assert tomb.header.delete_horizon_ms == NOW + retention
    assert tomb.header.attributes & DELETE_HORIZON_FLAG_MASK
    assert tomb.header.base_timestamp == NOW + retention
    # The record keeps its own timestamp (a negative delta from the horizon).
    assert tomb.records[0].timestamp == NOW - 50
    assert tomb.header.max_timestamp == NOW - 50
    assert r.stats.tombstones_kept == 1

    # A later round before the horizon keeps it, with the same horizon, byte for byte.
    again = write_segment(tmp_path / "r2", 0, [r.outputs[0]])
    r2 = clean_files([again], now=NOW + retention - 1, delete_retention_ms=retention)
    assert r2.outputs[0] == r.outputs[0]
    # The first round at the horizon removes it.
    r3 = clean_files([again], now=NOW + retention, delete_retention_ms=retention)
    assert offsets(r3.batches()) == [1, 3]
    assert r3.stats.tombstones_kept == 0


def test_tombstone_removal_takes_two_rounds_even_with_zero_retention(tmp_path: Path) -> None:
    s = write_segment(tmp_path, 0, [data_batch(0, kv("a", None)), data_batch(1, kv("b"))])
    r1 = clean_files([s], delete_retention_ms=0)
    assert offsets(r1.batches()) == [0, 1]
    assert r1.batches()[0].header.delete_horizon_ms == NOW
    again = write_segment(tmp_path / "r2", 0, [r1.outputs[0]])
    r2 = clean_files([again], delete_retention_ms=0)
    assert offsets(r2.batches()) == [1]


def test_superseded_tombstone_goes_in_any_round(tmp_path: Path) -> None:
    s = write_segment(tmp_path, 0, [data_batch(0, kv("a", None)), data_batch(1, kv("a", "new"))])
    r = clean_files([s])
    assert offsets(r.batches()) == [1]
    assert r.batches()[0].header.delete_horizon_ms is None


def test_existing_horizon_is_carried_over_when_a_batch_is_rebuilt(tmp_path: Path) -> None:
    horizon = NOW + 777
    stamped = data_batch(0, kv("x", None), kv("y", 1), kv("z", 2), delete_horizon_ms=horizon)
    s = write_segment(tmp_path, 0, [stamped, data_batch(3, kv("y", 9))])
    r = clean_files([s])
    first = r.batches()[0]
    assert [x.offset for x in first.records] == [0, 2]
    assert first.header.delete_horizon_ms == horizon
    # All records survive and the horizon is already there: the bytes are copied.
    s2 = write_segment(tmp_path / "b", 0, [stamped, data_batch(3, kv("w"))])
    r2 = clean_files([s2])
    assert r2.batches()[0].data == stamped


# RETAIN_EMPTY ------------------------------------------------------------------------------------


def test_last_batch_of_a_live_producer_is_kept_as_an_empty_header(tmp_path: Path) -> None:
    # LogCleanerTest.testLogCleanerRetainsProducerLastSequence, by hand: pid 7's last batch
    # (offsets 3-4) has only superseded records.
    source = data_batch(
        3,
        kv("a", 1),
        kv("b", 2),
        pid=7,
        epoch=3,
        seq=11,
        ts=[NOW - 20, NOW - 10],
        leader_epoch=9,
        codec=CompressionType.GZIP,
    )
    s = write_segment(tmp_path, 3, [source, data_batch(5, kv("a"), kv("b"))])
    kept, _, _ = rewrite(s, superseded=superseded_by({b"a": 5, b"b": 6}), producers={7: (4, 3)})
    assert [b.header.base_offset for b in kept] == [3, 5]
    empty = kept[0]
    h = empty.header
    assert len(empty.data) == RECORD_BATCH_OVERHEAD == 61
    assert empty.records == []
    assert (h.base_offset, h.last_offset, h.records_count) == (3, 4, 0)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 3, 11)
    assert h.last_sequence == 12
    assert h.partition_leader_epoch == 9
    assert h.compression == CompressionType.NONE
    assert h.timestamp_type == TimestampType.CREATE_TIME
    assert h.max_timestamp == NOW - 10
    assert h.base_timestamp == NO_TIMESTAMP
    assert h.delete_horizon_ms is None
    assert not h.is_transactional and not h.is_control
    assert empty.data == empty_batch_header(read_file_batches(s)[0].header)


def test_empty_header_keeps_type_and_flags_but_never_a_horizon(tmp_path: Path) -> None:
    source = data_batch(
        0,
        kv("a", None),
        pid=2,
        epoch=0,
        seq=0,
        txn=True,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=NOW + 5,
        delete_horizon_ms=NOW - 1,
    )
    header = read_buffer_batches(source)[0].header
    empty = read_buffer_batches(empty_batch_header(header))[0].header
    assert empty.attributes & TIMESTAMP_TYPE_MASK
    assert empty.attributes & TRANSACTIONAL_FLAG_MASK
    assert not empty.attributes & (CONTROL_FLAG_MASK | DELETE_HORIZON_FLAG_MASK)
    assert empty.max_timestamp == NOW + 5
    assert empty.base_timestamp == NO_TIMESTAMP
    # A tombstone past its horizon in the producer's last batch: an empty header stays.
    s = write_segment(tmp_path, 0, [source, data_batch(1, kv("z"))])
    kept, _, _ = rewrite(s, producers={2: (0, 0)})
    assert kept[0].data == empty_batch_header(header)
    assert kept[0].header.timestamp_type == TimestampType.LOG_APPEND_TIME


def test_only_the_last_batch_of_a_producer_is_retained(tmp_path: Path) -> None:
    b0 = data_batch(0, kv("a"), pid=7, epoch=0, seq=0)
    b1 = data_batch(1, kv("a"), pid=7, epoch=0, seq=1)
    b2 = data_batch(2, kv("a"), kv("z"))
    s = write_segment(tmp_path, 0, [b0, b1, b2])
    kept, _, _ = rewrite(s, superseded=superseded_by({b"a": 2}), producers={7: (1, 0)})
    assert [(b.header.base_offset, b.header.records_count) for b in kept] == [(1, 0), (2, 2)]
    # A producer no longer live (expired): nothing of it stays.
    kept, _, _ = rewrite(s, superseded=superseded_by({b"a": 2}), producers={})
    assert [b.header.base_offset for b in kept] == [2]
    # The producer's last data offset elsewhere (a later segment): this batch is not it.
    kept, _, _ = rewrite(s, superseded=superseded_by({b"a": 2}), producers={7: (50, 0)})
    assert [b.header.base_offset for b in kept] == [2]


def test_marker_is_retained_for_a_producer_whose_last_entry_is_a_marker(tmp_path: Path) -> None:
    # LastRecord without a data offset: a control batch of the producer's epoch is retained
    # (empty once its horizon passed); one of an older epoch is not.
    horizon = NOW - 1
    old = build_batch(
        [],
        base_offset=0,
        producer_id=4,
        producer_epoch=1,
        is_transactional=True,
        is_control=True,
    )
    s = write_segment(
        tmp_path,
        0,
        [old, marker_batch(1, COMMIT, 4, epoch=2), data_batch(2, kv("k"))],
    )
    events = [TxnEvent(0, 0, 4, MarkerKind.EMPTY), TxnEvent(1, 1, 4, MarkerKind.COMMIT)]
    decisions = decide_transactions(events, [])
    kept, _, _ = rewrite(s, producers={4: (None, 2)}, decisions=decisions, now=horizon)
    # The empty control batch of epoch 1 goes; the COMMIT (no data seen) is stamped.
    assert [b.header.base_offset for b in kept] == [1, 2]
    assert kept[0].header.delete_horizon_ms == horizon + DAY
    assert len(kept[0].records) == 1
    # Past the horizon the COMMIT's record goes but its batch stays, empty.
    s2 = write_segment(tmp_path / "b", 1, [kept[0].data, data_batch(2, kv("k"))])
    kept2, _, _ = rewrite(s2, producers={4: (None, 2)}, decisions=decisions, now=horizon + DAY)
    assert [(b.header.base_offset, b.header.records_count) for b in kept2] == [(1, 0), (2, 1)]
    assert kept2[0].header.is_control and kept2[0].header.producer_epoch == 2
    # Epoch 1 is not the producer's epoch: the marker goes entirely.
    kept3, _, _ = rewrite(s2, producers={4: (None, 3)}, decisions=decisions, now=horizon + DAY)
    assert [b.header.base_offset for b in kept3] == [2]


def test_batch_ending_at_the_first_uncleanable_offset_is_retained_empty(tmp_path: Path) -> None:
    # 4.3.1's second RETAIN_EMPTY rule: the batch whose next offset is the round's end.
    s = write_segment(tmp_path, 0, [data_batch(0, kv("a")), data_batch(1, (None, b"keyless"))])
    kept, stats, _ = rewrite(s, end_offset=2)
    assert [(b.header.base_offset, b.header.records_count) for b in kept] == [(0, 1), (1, 0)]
    assert len(kept[1].data) == 61
    assert stats.invalid_records == 1
    # With the round ending elsewhere the emptied batch goes.
    kept, _, _ = rewrite(s, end_offset=3, map_latest_offset=1)
    assert [b.header.base_offset for b in kept] == [0]


def test_an_old_empty_header_goes_once_no_rule_keeps_it(tmp_path: Path) -> None:
    header_only = empty_batch_header(
        read_buffer_batches(data_batch(0, kv("a"), pid=3, seq=0))[0].header
    )
    s = write_segment(tmp_path, 0, [header_only, data_batch(1, kv("b"))])
    kept, _, _ = rewrite(s, producers={3: (0, -1)})
    assert kept[0].data == header_only
    kept, _, _ = rewrite(s, producers={3: (9, -1)})
    assert [b.header.base_offset for b in kept] == [1]


# Writing: copied as is, rebuilt ------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(CompressionType))
def test_batch_whose_records_all_survive_is_copied_byte_for_byte(
    tmp_path: Path, codec: CompressionType
) -> None:
    # A non-default level and an odd base timestamp: a rebuild would change the bytes.
    records = [Record(5, NOW + 9, b"k1", b"v" * 50), Record(7, NOW - 3, b"k2", b"w" * 50)]
    level = {CompressionType.GZIP: 1, CompressionType.ZSTD: 19, CompressionType.LZ4: 4}
    source = build_batch(
        records,
        base_offset=5,
        compression=codec,
        compression_level=level.get(codec),
        producer_id=8,
        producer_epoch=1,
        base_sequence=0,
        last_offset_delta=4,
        partition_leader_epoch=3,
    )
    s = write_segment(tmp_path, 5, [source])
    kept, stats, _ = rewrite(s, producers={})
    assert [b.data for b in kept] == [source]
    assert stats.bytes_written == stats.bytes_read == len(source)


@pytest.mark.parametrize(
    "codec",
    [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD],
)
def test_rebuilt_batch_keeps_codec_fields_offsets_timestamps_and_headers(
    tmp_path: Path, codec: CompressionType
) -> None:
    headers = [(("h1", b"x"),), (), (("h2", None), ("h3", b""))]
    records = [
        Record(100, NOW - 30, b"gone", b"a" * 40, headers[0]),
        Record(101, NOW - 10, b"stay", b"b" * 40, headers[1]),
        Record(103, NOW - 20, b"also", b"c" * 40, headers[2]),
    ]
    level = {CompressionType.GZIP: 1, CompressionType.ZSTD: 19, CompressionType.LZ4: 4}
    source = build_batch(
        records,
        base_offset=100,
        compression=codec,
        compression_level=level.get(codec),
        producer_id=42,
        producer_epoch=6,
        base_sequence=900,
        is_transactional=True,
        partition_leader_epoch=17,
        last_offset_delta=5,
    )
    s = write_segment(tmp_path, 100, [source])
    (b,), _, _ = rewrite(
        s,
        superseded=superseded_by({b"gone": 200}),
        decisions=TxnDecisions({100: False}),
    )
    h = b.header
    assert h.compression == codec
    assert (h.base_offset, h.last_offset, h.last_offset_delta) == (100, 105, 5)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (42, 6, 900, 905)
    assert h.is_transactional and not h.is_control
    assert h.partition_leader_epoch == 17
    assert h.timestamp_type == TimestampType.CREATE_TIME
    assert h.base_timestamp == NOW - 10  # the first survivor's
    assert h.max_timestamp == NOW - 10  # the largest survivor's (the source's was -10 too)
    assert h.delete_horizon_ms is None
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in b.records] == [
        (101, NOW - 10, b"stay", b"b" * 40, ()),
        (103, NOW - 20, b"also", b"c" * 40, (("h2", None), ("h3", b""))),
    ]
    # The codec at its default level, not the source's: the bytes are those of a fresh build.
    expected = build_batch(
        records[1:],
        base_offset=100,
        compression=codec,
        producer_id=42,
        producer_epoch=6,
        base_sequence=900,
        is_transactional=True,
        partition_leader_epoch=17,
        last_offset_delta=5,
    )
    assert b.data == expected


def test_rebuilt_max_timestamp_is_the_survivors_under_create_time(tmp_path: Path) -> None:
    s = write_segment(
        tmp_path, 0, [data_batch(0, kv("a"), kv("b"), kv("c"), ts=[NOW, NOW + 50, NOW + 5])]
    )
    (b,), _, _ = rewrite(s, superseded=superseded_by({b"b": 9}))
    assert b.header.max_timestamp == NOW + 5


def test_log_append_time_batch_keeps_its_append_time(tmp_path: Path) -> None:
    append_time = NOW + 1234
    source = data_batch(
        0,
        kv("a"),
        kv("b"),
        kv("c"),
        ts=[NOW - 3, NOW - 2, NOW - 1],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=append_time,
        codec=CompressionType.LZ4,
    )
    s = write_segment(tmp_path, 0, [source])
    (b,), _, _ = rewrite(s, superseded=superseded_by({b"c": 9}))
    assert b.header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert b.header.attributes & TIMESTAMP_TYPE_MASK
    assert b.header.max_timestamp == append_time
    assert [(r.offset, r.timestamp) for r in b.records] == [(0, append_time), (1, append_time)]
    assert b.header.compression == CompressionType.LZ4


def test_tombstone_in_a_log_append_time_batch_gets_a_horizon(tmp_path: Path) -> None:
    source = data_batch(
        0,
        kv("a", None),
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=NOW - 7,
    )
    s = write_segment(tmp_path, 0, [source, data_batch(1, kv("z"))])
    kept, _, _ = rewrite(s, delete_retention_ms=100)
    h = kept[0].header
    assert h.delete_horizon_ms == NOW + 100
    assert h.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert h.max_timestamp == NOW - 7


# Keyless records, partial rounds ------------------------------------------------------------------


def test_keyless_records_are_dropped_and_counted(tmp_path: Path) -> None:
    # LogCleanerTest.testCleaningWithUnkeyedMessages: every keyless record below the end goes.
    s = write_segment(
        tmp_path,
        0,
        [
            data_batch(0, (None, b"1"), (None, b"2")),
            data_batch(2, (None, b"3"), kv("k")),
            data_batch(4, kv("z")),
        ],
    )
    r = clean_files([s])
    assert offsets(r.batches()) == [3, 4]
    assert r.stats.invalid_records == 3
    assert r.offset_map.keys() == {b"k", b"z"}


def test_records_past_the_map_are_copied_keyless_and_tombstones_too(tmp_path: Path) -> None:
    # A partial round (KAFKA-LOGCLEANER 5.9): records past the map's latest offset are copied.
    s = write_segment(
        tmp_path,
        0,
        [
            data_batch(0, kv("a"), (None, b"x")),
            data_batch(2, kv("a"), (None, b"y"), kv("b", None)),
        ],
    )
    kept, stats, _ = rewrite(
        s, superseded=superseded_by({b"a": 2, b"b": 4}), map_latest_offset=1, end_offset=5
    )
    assert offsets(kept) == [2, 3, 4]
    assert kept[0].header.base_offset == 2
    assert kept[0].header.delete_horizon_ms == NOW + DAY
    assert stats.invalid_records == 1


# Transactions ------------------------------------------------------------------------------------


def test_aborted_data_goes_whatever_its_keys_and_the_marker_stays_indexed(tmp_path: Path) -> None:
    # LogCleanerTest.testBasicTransactionAwareCleaning, by hand: pid 1 aborts (keys 1, 2, 3, 4),
    # pid 2 commits (keys 2, 3), then pid 1 commits key 2.
    entry = AbortedTxn(1, 0, 6, 0)
    s = write_segment(
        tmp_path,
        0,
        [
            data_batch(0, kv(1), kv(2), pid=1, epoch=0, seq=0, txn=True),
            data_batch(2, kv(2), kv(3), pid=2, epoch=0, seq=0, txn=True),
            data_batch(4, kv(3), kv(4), pid=1, epoch=0, seq=2, txn=True),
            marker_batch(6, ABORT, 1),
            marker_batch(7, COMMIT, 2),
            data_batch(8, kv(2), pid=1, epoch=0, seq=4, txn=True),
            marker_batch(9, COMMIT, 1),
        ],
    )
    r = clean_files([s], aborted=[entry], producers={1: (8, 0), 2: (3, 0)})
    batches = r.batches()
    assert [(b.header.base_offset, [x.key for x in b.records]) for b in batches] == [
        (2, [b"3"]),
        (6, [b"\x00\x00\x00\x00"]),
        (7, [b"\x00\x00\x00\x01"]),
        (8, [b"2"]),
        (9, [b"\x00\x00\x00\x01"]),
    ]
    # Key 4 was only in aborted data: not in the map, and gone.
    assert key_digest(b"4") not in r.offset_map
    assert r.entries == [[entry]]
    # The ABORT marker is kept as is (its transaction still had data this round).
    assert batches[1].data == read_file_batches(s)[3].data


def test_aborted_marker_is_stamped_then_deleted(tmp_path: Path) -> None:
    # KAFKA-LOGCLEANER 3.4: round 1 drops the data and keeps marker + entry; round 2 stamps the
    # marker and drops the entry; the first round past the horizon deletes the marker.
    entry = AbortedTxn(1, 0, 2, 0)
    s = write_segment(
        tmp_path,
        0,
        [
            data_batch(0, kv("a"), kv("b"), pid=1, epoch=0, seq=0, txn=True),
            marker_batch(2, ABORT, 1),
            data_batch(3, kv("z")),
        ],
    )
    r1 = clean_files([s], aborted=[entry])
    assert [b.header.base_offset for b in r1.batches()] == [2, 3]
    assert r1.batches()[0].header.delete_horizon_ms is None
    assert r1.entries == [[entry]]
    s2 = write_segment(tmp_path / "2", 0, [r1.outputs[0]])
    r2 = clean_files([s2], aborted=r1.entries[0])
    assert [b.header.base_offset for b in r2.batches()] == [2, 3]
    assert r2.batches()[0].header.delete_horizon_ms == NOW + DAY
    assert r2.entries == [[]]
    s3 = write_segment(tmp_path / "3", 0, [r2.outputs[0]])
    r3 = clean_files([s3], now=NOW + DAY - 1)
    assert r3.outputs[0] == r2.outputs[0]
    r4 = clean_files([s3], now=NOW + DAY)
    assert [b.header.base_offset for b in r4.batches()] == [3]
    assert r4.stats.records_read == 1  # the deleted marker's batch is skipped unread


def test_commit_marker_is_kept_while_its_data_remains(tmp_path: Path) -> None:
    # LogCleanerTest.testCommitMarkerRemoval, by hand.
    s = write_segment(
        tmp_path,
        0,
        [
            data_batch(0, kv(1), pid=1, epoch=0, seq=0, txn=True),
            data_batch(1, kv(2), kv(3), pid=1, epoch=0, seq=1, txn=True),
            marker_batch(3, COMMIT, 1),
            data_batch(4, kv(2), pid=1, epoch=0, seq=3, txn=True),
            marker_batch(5, COMMIT, 1),
        ],
    )
    r = clean_files([s], producers={1: (4, 0)})
    assert offsets(r.batches()) == [0, 2, 3, 4, 5]
    later = write_segment(
        tmp_path / "2",
        0,
        [
            r.outputs[0],
            data_batch(6, kv(1), kv(3), pid=1, epoch=0, seq=4, txn=True),
            marker_batch(8, COMMIT, 1),
        ],
    )
    r2 = clean_files([later], producers={1: (7, 0)})
    # The marker at 3 stays: its transaction's batches were still read this round (emptied).
    assert offsets(r2.batches()) == [3, 4, 5, 6, 7, 8]
    marker = r2.batches()[0]
    assert marker.header.is_control and marker.header.delete_horizon_ms is None
    # Next round: no batch of its transaction is left, so it is stamped, not removed early.
    again = write_segment(tmp_path / "3", 0, [r2.outputs[0]])
    r3 = clean_files([again], producers={1: (7, 0)})
    assert offsets(r3.batches()) == [3, 4, 5, 6, 7, 8]
    assert r3.batches()[0].header.delete_horizon_ms == NOW + DAY
    # Past the horizon it goes.
    last = write_segment(tmp_path / "4", 0, [r3.outputs[0]])
    r4 = clean_files([last], producers={1: (7, 0)}, now=NOW + DAY)
    assert offsets(r4.batches()) == [4, 5, 6, 7, 8]


def test_control_records_are_never_superseded(tmp_path: Path) -> None:
    # LogCleanerTest.testCleaningWithKeysConflictingWithTxnMarkerKeys: a data record whose key
    # is a COMMIT marker's key does not supersede the marker.
    commit_key = b"\x00\x00\x00\x01"
    s = write_segment(
        tmp_path,
        0,
        [
            data_batch(0, kv(1), pid=1, epoch=0, seq=0, txn=True),
            marker_batch(1, COMMIT, 1),
            data_batch(2, (commit_key, b"foo"), pid=2, epoch=0, seq=0, txn=True),
            marker_batch(3, COMMIT, 2),
        ],
    )
    r = clean_files([s], producers={1: (0, 0), 2: (2, 0)})
    assert [b.header.last_offset for b in r.batches()] == [0, 1, 2, 3]
    assert offsets(r.batches()) == [0, 1, 2, 3]


def test_stats_count_what_was_read_and_written(tmp_path: Path) -> None:
    batches = [data_batch(0, kv("a"), kv("b")), data_batch(2, kv("a")), data_batch(3, kv("c"))]
    s = write_segment(tmp_path, 0, batches)
    r = clean_files([s])
    assert r.stats.bytes_read == sum(len(b) for b in batches)
    assert r.stats.batches_read == 3
    assert r.stats.records_read == 4
    assert r.stats.records_written == 3
    assert r.stats.batches_written == 3
    assert r.stats.bytes_written == len(r.outputs[0])


# Against a model: the latest record of each key -----------------------------------------------


@st.composite
def plain_logs(draw: st.DrawFn) -> list[list[list[Record]]]:
    """Segments of batches of keyed records (keys from a small set, some tombstones, some
    empty keys), with offset gaps, in increasing offsets."""
    offset = 0
    segments: list[list[list[Record]]] = []
    for _ in range(draw(st.integers(1, 3))):
        batches: list[list[Record]] = []
        for _ in range(draw(st.integers(1, 4))):
            records = []
            for _ in range(draw(st.integers(1, 4))):
                key = draw(st.sampled_from([b"", b"a", b"b", b"c", b"d"]))
                value = draw(st.one_of(st.none(), st.binary(max_size=8)))
                ts = NOW - draw(st.integers(0, 1000))
                records.append(Record(offset, ts, key, value))
                offset += draw(st.sampled_from([1, 1, 1, 2]))
            batches.append(records)
        segments.append(batches)
    return segments


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    log=plain_logs(),
    codec=st.sampled_from([CompressionType.NONE, CompressionType.GZIP, CompressionType.ZSTD]),
)
def test_a_round_keeps_exactly_the_latest_record_of_each_key(
    tmp_path: Path, log: list[list[list[Record]]], codec: CompressionType
) -> None:
    case = tmp_path / str(abs(hash((repr(log), codec))))
    paths = []
    source: dict[int, Record] = {}
    spans: list[tuple[int, int]] = []
    for batches in log:
        base = batches[0][0].offset
        datas = []
        for records in batches:
            datas.append(build_batch(records, base_offset=records[0].offset, compression=codec))
            spans.append((records[0].offset, records[-1].offset))
            source.update((r.offset, r) for r in records)
        paths.append(write_segment(case, base, datas))
    end = spans[-1][1] + 1
    latest: dict[bytes | None, int] = {}
    for off in sorted(source):
        latest[source[off].key] = off
    r = clean_files(paths, end_offset=end)
    out = r.all_batches()
    survivors = {x.offset: x for b in out for x in b.records}
    assert set(survivors) == set(latest.values())
    for off, rec in survivors.items():
        assert tuple(rec[:5]) == tuple(source[off][:5])
    # Batches keep their source spans; only the round's last batch may be an empty header.
    for b in out:
        assert (b.header.base_offset, b.header.last_offset) in spans
        if not b.records:
            assert b.header.next_offset == end and len(b.data) == 61
    assert spans[-1][0] in {b.header.base_offset for b in out}
    # Tombstones kept carry the round's horizon; a round past it removes them.
    for b in out:
        has_tombstone = any(x.value is None for x in b.records)
        assert (b.header.delete_horizon_ms == NOW + DAY) == has_tombstone
    second = [
        write_segment(case / "2", base, [out_i])
        for base, out_i in zip([batches[0][0].offset for batches in log], r.outputs, strict=True)
        if out_i
    ]
    if second:
        r2 = clean_files(second, end_offset=end, now=NOW + DAY)
        left = {x.offset for b in r2.all_batches() for x in b.records}
        assert left == {o for o in latest.values() if source[o].value is not None}
