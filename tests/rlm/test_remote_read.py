"""Reads below the local log start, ListOffsets over remote segments, and the reader pool.

Ports of RemoteLogManagerTest's read cases and Kafka's RemoteLogReader/RemoteLogOffsetReader
behaviour, on real components: segments written by a ``LocalLog``, tiered into the ``local`` RSM
(a counting subclass, so requests are measured, not mocked) and the ``embedded`` RLMM. Most
answers are checked against an oracle computed from the local segment files the remote copies
came from.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, cast

import pytest

from tierlog.log.batch import ControlRecordType, build_batch, decode_control_record
from tierlog.log.local_log import LocalLog, OffsetOutOfRangeError
from tierlog.log.reader import iter_batches, iter_batches_with_records
from tierlog.log.record import Record
from tierlog.log.segment import FetchDataInfo, LogOffsetMetadata, TimestampAndOffset
from tierlog.log.txn_index import AbortedTxn
from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager
from tierlog.rlm.index_cache import RemoteIndexCache
from tierlog.rlm.remote_read import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    RemoteLogReader,
    RemoteReaderPool,
    RemoteReadRejectedError,
    RemoteStorageFetchInfo,
    earliest_local_offset,
    earliest_offset,
    latest_tiered_offset,
    offset_for_special_timestamp,
    trim_partial_batch,
)
from tierlog.spi import (
    CorruptRecordError,
    IllegalStateError,
    InvalidArgumentError,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RetriableRemoteStorageException,
    TopicIdPartition,
    Uuid,
)

from ._tiering import (
    NOW,
    TIP,
    Clock,
    CountingStorage,
    batch,
    delete_remote,
    fill,
    marker,
    offsets_of,
    open_log,
    open_rlmm,
    open_rsm,
    tier,
    txn_batch,
)

BIG_SEGMENTS = {"internal.segment.bytes": 1_000_000}
"""Segments rolled by hand (``log.roll()``) in the tests that place batches precisely."""


@dataclass
class Env:
    root: Path
    clock: Clock
    log: LocalLog
    rsm: CountingStorage
    rlmm: EmbeddedRemoteLogMetadataManager
    cache: RemoteIndexCache
    reader: RemoteLogReader
    segments: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    closers: list[Callable[[], None]] = field(default_factory=list)

    def tier(self, **kwargs: object) -> list[RemoteLogSegmentMetadata]:
        copied = tier(self.log, self.rsm, self.rlmm, **kwargs)  # type: ignore[arg-type]
        self.segments.extend(copied)
        self.rsm.reset_counts()
        return copied

    def read(
        self,
        offset: int,
        max_bytes: int = 10_000,
        *,
        min_one: bool = True,
        isolation: str = "read_uncommitted",
    ) -> FetchDataInfo:
        return self.reader.read(RemoteStorageFetchInfo(max_bytes, min_one, TIP, offset, isolation))

    def warm(self) -> None:
        for metadata in self.segments:
            self.cache.get_index_entry(metadata)
        self.rsm.reset_counts()


def make_env(root: Path, **props: object) -> Env:
    clock = Clock()
    log = open_log(root / "topic-0", clock, **props)
    rsm = open_rsm(root / "remote")
    rlmm = open_rlmm(root / "rlmm")
    cache = RemoteIndexCache(rsm, root / "broker", clock=clock)
    reader = RemoteLogReader(rsm, rlmm, cache, log)
    return Env(root, clock, log, rsm, rlmm, cache, reader)


def close_env(env: Env) -> None:
    for closer in env.closers:
        closer()
    env.cache.close()
    env.rlmm.close()
    env.rsm.close()
    env.log.close()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    """A log of 40 single-record batches (98 bytes), six per segment, all sealed ones tiered."""
    environment = make_env(tmp_path)
    fill(environment.log, 40)
    environment.tier()
    assert len(environment.segments) == 6
    yield environment
    close_env(environment)


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[Env]:
    """An empty log with hand-rolled segments; the test appends and tiers."""
    environment = make_env(tmp_path, **BIG_SEGMENTS)
    yield environment
    close_env(environment)


# The oracle ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Expected:
    base_offset: int
    position: int
    records: bytes
    incomplete: bool


def expected_read(
    log: LocalLog,
    metadata: RemoteLogSegmentMetadata,
    offset: int,
    max_bytes: int,
    min_one: bool,
) -> Expected | None:
    """What Kafka's read returns from this segment, computed from the local segment file."""
    segment = next(s for s in log.segments if s.base_offset == metadata.start_offset)
    data = segment.log_path.read_bytes()
    found = next(((p, h) for p, h in iter_batches(data) if h.last_offset >= offset), None)
    if found is None:
        return None
    position, header = found
    size = header.size_in_bytes
    if not min_one and size > max_bytes:
        return Expected(header.base_offset, position, b"", True)
    capacity = max(size, max_bytes) if min_one else max_bytes
    return Expected(header.base_offset, position, data[position : position + capacity], False)


def assert_matches(
    info: FetchDataInfo, metadata: RemoteLogSegmentMetadata, want: Expected, offset: int
) -> None:
    if want.incomplete:
        assert info == FetchDataInfo(LogOffsetMetadata(offset), b"", True, None)
        return
    assert info.fetch_offset_metadata == LogOffsetMetadata(
        want.base_offset, metadata.start_offset, want.position
    )
    assert info.records == want.records


# Basic reads -----------------------------------------------------------------------------------
def test_every_offset_matches_kafkas_answer_with_one_request_when_warm(env: Env) -> None:
    """For every tiered offset, several sizes, with and without min-one-message: the records and
    metadata are exactly Kafka's (first batch holding the offset, then the stream up to the
    buffer size), and a warm read makes exactly one RSM request and no index request."""
    env.warm()
    checked = 0
    for metadata in env.segments:
        for offset in range(metadata.start_offset, metadata.end_offset + 1):
            for max_bytes in (0, 50, 98, 150, 300, 1000):
                for min_one in (True, False):
                    want = expected_read(env.log, metadata, offset, max_bytes, min_one)
                    assert want is not None
                    env.rsm.reset_counts()
                    info = env.read(offset, max_bytes, min_one=min_one)
                    assert_matches(info, metadata, want, offset)
                    assert len(env.rsm.segment_requests) == 1
                    assert env.rsm.index_requests == []
                    checked += 1
    assert checked == 36 * 12


def test_cold_read_fetches_the_indexes_once(env: Env) -> None:
    metadata = env.segments[2]
    env.read(metadata.start_offset + 1)
    assert env.rsm.index_fetches() == 3
    assert len(env.rsm.segment_requests) == 1
    env.rsm.reset_counts()
    env.read(metadata.start_offset + 4)
    assert env.rsm.index_fetches() == 0 and len(env.rsm.segment_requests) == 1


def test_offset_in_the_middle_of_a_batch(bare: Env) -> None:
    log = bare.log
    for first in range(0, 12, 3):
        records = [Record(i, NOW, None, f"v{first + i}".encode()) for i in range(3)]
        log.append_as_leader(build_batch(records), 0)
    log.roll()
    log.append_as_leader(batch("x"), 0)
    (metadata,) = bare.tier()
    for offset in range(12):
        info = bare.read(offset)
        base = offset - offset % 3
        assert info.fetch_offset_metadata.message_offset == base  # the batch's base offset
        assert offsets_of(info.records)[0] == base
        want = expected_read(log, metadata, offset, 10_000, True)
        assert want is not None
        assert_matches(info, metadata, want, offset)


def test_records_may_end_in_a_partial_batch_and_can_be_trimmed(env: Env) -> None:
    info = env.read(1, 150)
    assert len(info.records) == 150  # one 98-byte batch and 52 bytes of the next, as Kafka
    assert offsets_of(info.records) == [1]
    trimmed = trim_partial_batch(info)
    assert trimmed.records == info.records[:98]
    assert trimmed.fetch_offset_metadata == info.fetch_offset_metadata
    assert [h.base_offset for h in trimmed.batches()] == [1]
    whole = env.read(1, 196)
    assert trim_partial_batch(whole) is whole


def test_first_batch_larger_than_max_bytes(bare: Env) -> None:
    log = bare.log
    log.append_as_leader(batch("small"), 0)  # 0
    log.append_as_leader(batch("L" * 500), 0)  # 1: about 570 bytes
    log.append_as_leader(batch("after"), 0)  # 2
    log.roll()
    log.append_as_leader(batch("x"), 0)
    (metadata,) = bare.tier()
    large = next(h for _, h in iter_batches(log.segments[0].log_path) if h.base_offset == 1)
    assert large.size_in_bytes > 500
    # Without min-one-message: nothing, and the caller is told the first batch did not fit.
    info = bare.read(1, 100, min_one=False)
    assert info == FetchDataInfo(LogOffsetMetadata(1), b"", True, None)
    committed = bare.read(1, 100, min_one=False, isolation="read_committed")
    assert committed.records == b"" and committed.aborted_transactions == []
    # With it: exactly the first batch (the buffer is its size), nothing after it.
    info = bare.read(1, 100, min_one=True)
    assert len(info.records) == large.size_in_bytes
    assert offsets_of(info.records) == [1]
    assert info.fetch_offset_metadata.segment_base_offset == metadata.start_offset
    # A larger max_bytes brings the following batch too.
    assert offsets_of(bare.read(1, 10_000).records) == [1, 2]


def test_first_batch_not_found_moves_to_the_next_segment(bare: Env) -> None:
    """Kafka's compaction case: the segment covering the offset holds no batch at or after it
    (its batches end at 4, its metadata at 9); the read continues in the next segment."""
    log = bare.log
    for o in range(5):
        log.append_as_follower(
            build_batch([Record(o, NOW, None, b"v")], base_offset=o, partition_leader_epoch=0), 0
        )
    log.roll(10)
    for o in range(10, 14):
        log.append_as_follower(
            build_batch([Record(o, NOW, None, b"v")], base_offset=o, partition_leader_epoch=0), 0
        )
    log.roll()
    first, second = bare.tier()
    assert (first.start_offset, first.end_offset, second.start_offset) == (0, 9, 10)
    bare.warm()
    info = bare.read(7)
    assert info.fetch_offset_metadata == LogOffsetMetadata(10, 10, 0)
    assert offsets_of(info.records) == [10, 11, 12, 13]
    ids = [r.segment_id for r in bare.rsm.segment_requests]
    assert ids == [first.remote_log_segment_id.id, second.remote_log_segment_id.id]
    # Past the last batch of the last remote segment: no batch anywhere.
    bare.log.append_as_follower(
        build_batch([Record(20, NOW, None, b"v")], base_offset=20, partition_leader_epoch=0), 0
    )
    info = bare.read(first.end_offset)  # in the gap, next segment has batches
    assert offsets_of(info.records)[0] == 10


def test_no_batch_in_any_remote_segment_gives_empty_records(bare: Env) -> None:
    log = bare.log
    for o in range(3):
        log.append_as_follower(
            build_batch([Record(o, NOW, None, b"v")], base_offset=o, partition_leader_epoch=0), 0
        )
    log.roll(8)
    log.append_as_follower(
        build_batch([Record(8, NOW, None, b"v")], base_offset=8, partition_leader_epoch=0), 0
    )
    (metadata,) = bare.tier()
    assert metadata.end_offset == 7
    assert bare.read(5) == FetchDataInfo(LogOffsetMetadata(5), b"", False, None)
    committed = bare.read(5, isolation="read_committed")
    assert committed == FetchDataInfo(LogOffsetMetadata(5), b"", False, [])


def test_offsets_not_in_remote_storage_are_out_of_range(env: Env) -> None:
    last = env.segments[-1].end_offset
    with pytest.raises(OffsetOutOfRangeError, match=f"offset {last + 1} for leader epoch 0"):
        env.read(last + 1)  # only in the local log
    other = TopicIdPartition(Uuid.random(), "other", 0)
    with pytest.raises(OffsetOutOfRangeError, match="NOT AVAILABLE"):
        env.reader.read(RemoteStorageFetchInfo(100, True, other, 0))
    with pytest.raises(InvalidArgumentError):
        RemoteStorageFetchInfo(100, True, TIP, 0, "read_maybe")
    with pytest.raises(InvalidArgumentError):
        RemoteStorageFetchInfo(-1, True, TIP, 0)


def test_a_started_copy_is_not_read(bare: Env) -> None:
    bare.log.append_as_leader(batch("a"), 0)
    bare.log.roll()
    bare.tier(finish=False)
    with pytest.raises(OffsetOutOfRangeError):
        bare.read(0)


# How the bytes are read -------------------------------------------------------------------------
class _Trickle:
    """A stream with only ``read`` and ``close`` (no ``readinto``), at most 13 bytes a call."""

    def __init__(self, inner: BinaryIO) -> None:
        self._inner = inner

    def read(self, size: int = -1) -> bytes:
        return self._inner.read(size if size < 0 else min(size, 13))

    def close(self) -> None:
        self._inner.close()


class WrappingStorage(CountingStorage):
    """The local RSM with every segment stream passed through ``wrap``: another kind of
    stream, the same bytes."""

    def __init__(self, wrap: Callable[[BinaryIO], BinaryIO]) -> None:
        super().__init__()
        self._wrap = wrap

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        return self._wrap(
            super().fetch_log_segment(remote_log_segment_metadata, start_position, end_position)
        )


def _peeked(stream: BinaryIO) -> BinaryIO:
    """The local RSM's stream, with a buffer-full already read ahead (peeked) when returned."""
    stream.peek(1)  # type: ignore[attr-defined]
    return stream


def _in_memory(stream: BinaryIO) -> BinaryIO:
    """The local RSM's bytes, served from a ``BytesIO``."""
    with stream:
        return io.BytesIO(stream.read())


STREAM_KINDS: dict[str, Callable[[BinaryIO], BinaryIO]] = {
    "trickle": lambda stream: cast(BinaryIO, _Trickle(stream)),
    "peeked": _peeked,
    "in-memory": _in_memory,
}


class _Recording:
    """A stream keeping every object its ``read`` returned."""

    def __init__(self, inner: BinaryIO, returned: list[bytes]) -> None:
        self._inner = inner
        self._returned = returned

    def read(self, size: int = -1) -> bytes:
        data = self._inner.read(size)
        self._returned.append(data)
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:
        return self._inner.readinto(buffer)  # type: ignore[attr-defined,no-any-return]

    def close(self) -> None:
        self._inner.close()


def env_with(tmp_path: Path, rsm: CountingStorage, **props: object) -> Env:
    """``make_env`` with another RSM (configured on the same directory)."""
    environment = make_env(tmp_path, **props)
    rsm.configure({"dir": str(tmp_path / "remote"), "node.id": "0"})
    environment.rsm.close()
    environment.rsm = rsm
    environment.cache.close()
    environment.cache = RemoteIndexCache(rsm, tmp_path / "broker", clock=environment.clock)
    environment.reader = RemoteLogReader(rsm, environment.rlmm, environment.cache, environment.log)
    return environment


@pytest.mark.parametrize("kind", list(STREAM_KINDS))
def test_any_kind_of_stream_gives_the_same_answers(tmp_path: Path, kind: str) -> None:
    """Any ``BinaryIO`` will do (short reads through ``read`` only, a buffered stream that
    already read ahead, a ``BytesIO``): Kafka's answer for every offset and size, still from
    one request each."""
    env = env_with(tmp_path, WrappingStorage(STREAM_KINDS[kind]))
    try:
        fill(env.log, 40)
        env.tier()
        env.warm()
        for metadata in env.segments:
            for offset in range(metadata.start_offset, metadata.end_offset + 1):
                for max_bytes in (0, 98, 150, 1000):
                    for min_one in (True, False):
                        want = expected_read(env.log, metadata, offset, max_bytes, min_one)
                        assert want is not None
                        env.rsm.reset_counts()
                        info = env.read(offset, max_bytes, min_one=min_one)
                        assert_matches(info, metadata, want, offset)
                        assert len(env.rsm.segment_requests) == 1
    finally:
        close_env(env)


def test_a_read_from_an_indexed_batch_returns_the_bytes_as_read(tmp_path: Path) -> None:
    """Where the index says the batch holding the offset starts (every batch is indexed
    here), the answer is the bytes object the stream's one ``read`` returned, not a copy; a
    batch larger than ``max_bytes`` (min-one-message) is assembled in the read buffer."""
    returned: list[bytes] = []
    rsm = WrappingStorage(lambda stream: cast(BinaryIO, _Recording(stream, returned)))
    env = env_with(tmp_path, rsm, **{"index.interval.bytes": 0, **BIG_SEGMENTS})
    try:
        fill(env.log, 30)
        env.log.roll()
        env.tier()
        env.warm()
        (metadata,) = env.segments
        for offset in range(2, 27):  # 300 bytes from each (the segment's last 3 are shorter)
            returned.clear()
            info = env.read(offset, 300)
            want = expected_read(env.log, metadata, offset, 300, True)
            assert want is not None
            assert_matches(info, metadata, want, offset)
            assert any(chunk is info.records for chunk in returned), offset
            returned.clear()
            info = env.read(offset, 50)  # the batch (98 bytes) does not fit: a copy
            assert info.records == want.records[:98]
            assert not any(chunk is info.records for chunk in returned)
    finally:
        close_env(env)


def test_batches_larger_than_the_read_buffer(bare: Env) -> None:
    """Batches of about 120 KB (larger than a fresh read buffer, or than max_bytes): every
    answer is Kafka's."""
    fill(bare.log, 6, values_per_batch=40, size=3000)
    bare.log.roll()
    bare.tier()
    bare.warm()
    (metadata,) = bare.segments
    data = bare.rsm.segment_paths(metadata)[".log"].read_bytes()
    assert min(h.size_in_bytes for _, h in iter_batches(data)) > 100_000
    for offset in (0, 39, 40, 100, 199, 239):
        for max_bytes in (0, 1000, 130_000, 300_000):
            for min_one in (True, False):
                want = expected_read(bare.log, metadata, offset, max_bytes, min_one)
                assert want is not None
                info = bare.read(offset, max_bytes, min_one=min_one)
                assert_matches(info, metadata, want, offset)


# Bounded requests ------------------------------------------------------------------------------
def test_a_warm_read_asks_for_a_bounded_range(tmp_path: Path) -> None:
    """Large segments (about 400 batches of 98 bytes) with an index entry every ~1000 bytes:
    the one request of a warm read covers at most about two index intervals plus max_bytes."""
    env = make_env(tmp_path, **{"internal.segment.bytes": 40_000, "index.interval.bytes": 1000})
    try:
        fill(env.log, 900)
        env.tier()
        env.warm()
        metadata = env.segments[0]
        size = metadata.segment_size_in_bytes
        assert size > 35_000
        interval, batch_size, max_bytes = 1000, 98, 1000
        requested = []
        for offset in range(metadata.start_offset, metadata.end_offset - 40, 7):
            env.rsm.reset_counts()
            info = env.read(offset, max_bytes)
            (request,) = env.rsm.segment_requests
            assert request.end is not None
            length = request.end - request.start + 1
            assert length <= 2 * (interval + batch_size) + max_bytes
            requested.append(length)
            want = expected_read(env.log, metadata, offset, max_bytes, True)
            assert want is not None
            assert_matches(info, metadata, want, offset)
        assert max(requested) < size / 10
    finally:
        close_env(env)


def test_a_consumers_next_fetch_starts_where_its_last_one_left_off(tmp_path: Path) -> None:
    """Sparse index entries (one per ~10 batches): a consumer fetching from where each read's
    whole batches end gets Kafka's answer, and from its second fetch on the one request
    starts exactly at the batch holding the offset, not at the index entry below it (the
    reader remembered where that batch starts). A fresh reader, which knows nothing yet, asks
    for bytes from the index entry: the same records, from further back."""
    env = make_env(tmp_path, **{"internal.segment.bytes": 40_000, "index.interval.bytes": 1000})
    try:
        fill(env.log, 900)
        env.tier()
        env.warm()
        metadata = env.segments[0]
        offset = metadata.start_offset + 3
        earlier_starts = 0
        fresh = RemoteLogReader(env.rsm, env.rlmm, env.cache, env.log)
        for step in range(40):
            env.rsm.reset_counts()
            info = env.read(offset, 450)
            (request,) = env.rsm.segment_requests
            position = info.fetch_offset_metadata.relative_position_in_segment
            want = expected_read(env.log, metadata, offset, 450, True)
            assert want is not None
            assert_matches(info, metadata, want, offset)
            if step > 0:
                assert request.start == position, step
            env.rsm.reset_counts()
            assert fresh.read(RemoteStorageFetchInfo(450, True, TIP, offset)) == info
            (fresh_request,) = env.rsm.segment_requests
            earlier_starts += fresh_request.start < position
            # The fresh reader learnt too: forget it by making a new one each time.
            fresh = RemoteLogReader(
                env.rsm,
                env.rlmm,
                RemoteIndexCache(env.rsm, tmp_path / f"fresh-{step}", clock=env.clock),
                env.log,
            )
            env.closers.append(fresh.index_cache.close)
            batches = list(iter_batches(trim_partial_batch(info).records))
            offset = batches[-1][1].last_offset + 1
        assert earlier_starts >= 30  # the index entry is below the batch on most fetches
    finally:
        close_env(env)


def test_an_index_that_bounds_too_little_does_not_change_the_answer(env: Env) -> None:
    """A (sane-looking) cached offset index claiming offset 5 is at position 98: the bounded
    request ends too early, the stream is reopened past it, and the answer is still right."""
    metadata = env.segments[0]
    name = f"{metadata.start_offset}_{metadata.remote_log_segment_id.id}"
    cache_dir = env.cache.cache_dir
    (cache_dir / f"{name}.index").write_bytes((5).to_bytes(4, "big") + (98).to_bytes(4, "big"))
    (cache_dir / f"{name}.timeindex").write_bytes(b"")
    (cache_dir / f"{name}.txnindex").write_bytes(b"")
    info = env.read(3, 61, min_one=False)
    want = expected_read(env.log, metadata, 3, 61, False)
    assert want is not None and want.incomplete  # a 98-byte batch does not fit in 61
    assert_matches(info, metadata, want, 3)
    env.rsm.reset_counts()
    info = env.read(3, 200, min_one=False)
    want = expected_read(env.log, metadata, 3, 200, False)
    assert want is not None and not want.incomplete
    assert_matches(info, metadata, want, 3)
    # The bound (the lying entry's position + max_bytes) ended before offset 3's batch at 294.
    requests = [(r.start, r.end) for r in env.rsm.segment_requests]
    assert requests == [(0, 98 + 200 - 1), (298, None)]


# Transactions ----------------------------------------------------------------------------------
def committed_values(reader: Callable[[int], FetchDataInfo], start: int, end: int) -> list[str]:
    """What a read_committed consumer delivers from ``start`` to ``end`` (Kafka's Fetcher logic:
    aborted transactions by first offset, dropped until their abort marker)."""
    out: list[str] = []
    offset = start
    aborted: dict[int, int] = {}
    while offset < end:
        info = trim_partial_batch(reader(offset))
        assert info.aborted_transactions is not None
        for txn in info.aborted_transactions:
            aborted.setdefault(txn.producer_id, txn.first_offset)
        if not info.records:
            break
        for _, header, records in iter_batches_with_records(info.records):
            offset = header.next_offset
            if header.is_control:
                if decode_control_record(records[0]).type == ControlRecordType.ABORT:
                    aborted.pop(header.producer_id, None)
                continue
            pid = header.producer_id
            if header.is_transactional and pid in aborted and header.base_offset >= aborted[pid]:
                continue
            out.extend((r.value or b"").decode() for r in records if r.offset >= start)
    return out


class DefaultTraversalRLMM(EmbeddedRemoteLogMetadataManager):
    """The embedded RLMM with the SPI's default ``next_segment_with_txn_index``, which returns
    the segment holding the offset whether or not it has aborted transactions."""

    def next_segment_with_txn_index(
        self, topic_id_partition: TopicIdPartition, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        return RemoteLogMetadataManager.next_segment_with_txn_index(
            self, topic_id_partition, epoch, offset
        )


@pytest.mark.parametrize("traversal", ["embedded", "spi-default"])
def test_read_committed_collects_aborted_transactions_across_remote_segments(
    bare: Env, traversal: str
) -> None:
    if traversal == "spi-default":
        bare.rlmm.close()
        bare.rlmm = DefaultTraversalRLMM()
        bare.rlmm.configure({"dir": str(bare.root / "rlmm-default")})
        bare.rlmm.on_partition_leadership_changes({TIP}, set())
        bare.reader = RemoteLogReader(bare.rsm, bare.rlmm, bare.cache, bare.log)
    log = bare.log
    log.append_as_leader(batch("p0"), 0)  # 0
    log.append_as_leader(txn_batch(1, 0, "A1"), 0)  # 1: producer 1's transaction starts
    log.append_as_leader(batch("p2"), 0)  # 2
    log.roll()  # segment A [0, 2]
    log.append_as_leader(batch("p3"), 0)
    log.append_as_leader(batch("p4"), 0)
    log.roll()  # segment B [3, 4]: no transaction index
    log.append_as_leader(txn_batch(1, 1, "A5"), 0)  # 5
    log.append_as_leader(marker(ControlRecordType.ABORT, 1), 0, origin="coordinator")  # 6
    log.append_as_leader(batch("p7"), 0)
    log.roll()  # segment C [5, 7]: the abort
    log.append_as_leader(batch("p8"), 0)
    log.roll()
    a, b, c, d = bare.tier()
    assert (a.txn_idx_empty, b.txn_idx_empty, c.txn_idx_empty, d.txn_idx_empty) == (
        True,
        True,
        False,
        True,
    )
    info = bare.read(0, isolation="read_committed")
    assert offsets_of(info.records) == [0, 1, 2]
    # Found in C's index (B, marked txn_idx_empty, is skipped whichever RLMM traversal found
    # it: its indexes are never fetched), complete there (LSO 7 >= 3).
    assert info.aborted_transactions == [AbortedTxn(1, 1, 6, 7)]
    assert not bare.cache.contains(b.remote_log_segment_id.id)
    assert bare.cache.contains(c.remote_log_segment_id.id)
    # A read after the transaction does not report it; read_uncommitted reports nothing.
    assert bare.read(7, isolation="read_committed").aborted_transactions == []
    assert bare.read(0).aborted_transactions is None
    # End to end: a read_committed consumer reading from remote storage drops A1 and A5.
    values = committed_values(
        lambda o: bare.read(o, 150, isolation="read_committed"), 0, d.end_offset + 1
    )
    assert values == ["p0", "p2", "p3", "p4", "p7", "p8"]


def test_read_committed_goes_on_to_the_local_segments(bare: Env) -> None:
    log = bare.log
    log.append_as_leader(batch("p0"), 0)
    log.append_as_leader(txn_batch(2, 0, "B1"), 0)  # 1: producer 2's transaction starts
    log.append_as_leader(batch("p2"), 0)
    log.roll()  # remote
    log.append_as_leader(batch("p3"), 0)
    log.roll()  # remote
    log.append_as_leader(marker(ControlRecordType.ABORT, 2), 0, origin="coordinator")  # 4
    log.append_as_leader(batch("p5"), 0)
    log.roll()  # local only: the abort is not tiered yet
    log.append_as_leader(batch("p6"), 0)
    assert len(bare.tier(segments=log.segments[:2])) == 2
    info = bare.read(1, isolation="read_committed")
    assert offsets_of(info.records) == [1, 2]
    assert info.aborted_transactions == [AbortedTxn(2, 1, 4, 5)]


def test_an_incomplete_remote_search_continues_locally_without_duplicates(bare: Env) -> None:
    """Producer 1 aborts while producer 2's transaction is open, so the abort's LSO (2) is below
    the fetch's upper bound: the search goes on past the remote segments into the local ones,
    meets the same entry again (the segment is both remote and local) and reports it once."""
    log = bare.log
    log.append_as_leader(batch("p0"), 0)  # 0
    log.append_as_leader(txn_batch(1, 0, "A1"), 0)  # 1
    log.append_as_leader(txn_batch(2, 0, "B2"), 0)  # 2
    log.roll()
    log.append_as_leader(batch("p3"), 0)
    log.roll()
    log.append_as_leader(marker(ControlRecordType.ABORT, 1), 0, origin="coordinator")  # 4
    log.append_as_leader(batch("p5"), 0)
    log.roll()
    log.append_as_leader(marker(ControlRecordType.COMMIT, 2), 0, origin="coordinator")  # 6
    log.roll()
    log.append_as_leader(batch("p7"), 0)
    bare.tier()
    local = [t for s in log.segments for t in s.txn_index.all_aborted_txns()]
    assert local == [AbortedTxn(1, 1, 4, 2)]
    info = bare.read(0, isolation="read_committed")
    assert offsets_of(info.records) == [0, 1, 2]
    assert info.aborted_transactions == [AbortedTxn(1, 1, 4, 2)]
    values = committed_values(lambda o: bare.read(o, isolation="read_committed"), 0, 7)
    assert values == ["p0", "B2", "p3", "p5"]


# ListOffsets -----------------------------------------------------------------------------------
def ts(offset: int) -> int:
    """The timestamp ``fill`` gives the record at ``offset``."""
    return NOW - 10_000 + offset


@pytest.fixture
def epochs_env(tmp_path: Path) -> Iterator[Env]:
    """24 records, epoch 0 from 0 and epoch 1 from 12, four tiered segments of six; the local
    copies of the tiered segments are deleted (local retention), so the log starts locally at
    24."""
    environment = make_env(tmp_path, **{"local.retention.bytes": 1})
    fill(environment.log, 12, epoch=0)
    fill(environment.log, 12, epoch=1)
    environment.log.roll()
    environment.log.append_as_leader(batch("last", ts=NOW), 1)
    environment.tier()
    assert [s.start_offset for s in environment.segments] == [0, 6, 12, 18]
    environment.log.delete_retention_segments()
    assert environment.log.local_log_start_offset == 24
    yield environment
    close_env(environment)


def find(env: Env, timestamp: int, starting_offset: int = 0) -> TimestampAndOffset | None:
    log = env.log
    return env.reader.find_offset_by_timestamp(
        TIP, timestamp, starting_offset, log.leader_epoch_cache, log
    )


def test_find_offset_by_timestamp_in_remote_segments(epochs_env: Env) -> None:
    env = epochs_env
    assert find(env, ts(7)) == TimestampAndOffset(ts(7), 7, 0)
    assert len(env.rsm.segment_requests) == 1
    assert find(env, ts(14)) == TimestampAndOffset(ts(14), 14, 1)
    assert find(env, 0) == TimestampAndOffset(ts(0), 0, 0)
    # The starting offset wins over an earlier match.
    assert find(env, ts(3), 8) == TimestampAndOffset(ts(8), 8, 0)
    assert find(env, ts(3), 13) == TimestampAndOffset(ts(13), 13, 1)
    # Beyond every remote timestamp (the local record at 24 is not searched here).
    assert find(env, ts(23) + 1) is None


def test_find_offset_by_timestamp_uses_the_local_copy_when_there_is_one(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    try:
        fill(env.log, 20)
        env.tier()
        assert env.log.segments[0].base_offset == 0  # everything is still local
        assert find(env, ts(9)) == TimestampAndOffset(ts(9), 9, 0)
        assert env.rsm.segment_requests == [] and env.rsm.index_requests == []
    finally:
        close_env(env)


def _stray_segment(env: Env, root: Path, epochs: dict[int, int], *, finish: bool) -> None:
    """Copy, for the same partition, a segment [6, 11] written by another replica with future
    timestamps and the given epoch starts (another leader's history)."""
    other = open_log(root / "topic-0", env.clock, **BIG_SEGMENTS)
    other.truncate_fully_and_start_at(6)
    for offset in range(6, 12):
        epoch = max(e for e, start in epochs.items() if start <= offset)
        other.append_as_follower(
            build_batch(
                [Record(offset, NOW + 1_000_000, None, b"stray")],
                base_offset=offset,
                partition_leader_epoch=epoch,
            ),
            epoch,
        )
    other.roll()
    (copied,) = tier(other, env.rsm, env.rlmm, segments=other.segments[:1], finish=finish)
    assert dict(copied.segment_leader_epochs) == epochs
    other.close()


@pytest.mark.parametrize(
    ("epochs", "finish", "found"),
    [
        ({0: 6}, True, True),  # consistent with the leader's lineage: searched
        ({0: 6, 1: 8}, True, False),  # epoch 1 starts at 8 here, at 12 for the leader
        ({0: 6}, False, False),  # COPY_SEGMENT_STARTED is never searched
    ],
)
def test_find_offset_by_timestamp_only_trusts_finished_segments_in_the_lineage(
    epochs_env: Env, tmp_path: Path, epochs: dict[int, int], finish: bool, found: bool
) -> None:
    env = epochs_env
    _stray_segment(env, tmp_path / "other", epochs, finish=finish)
    result = find(env, NOW + 1_000_000)
    assert result == (TimestampAndOffset(NOW + 1_000_000, 6, 0) if found else None)


def test_special_list_offsets_targets(epochs_env: Env, tmp_path: Path) -> None:
    log = epochs_env.log
    assert earliest_offset(log) == TimestampAndOffset(-1, 0, 0)
    assert earliest_local_offset(log) == TimestampAndOffset(-1, 24, 1)
    assert latest_tiered_offset(log) == TimestampAndOffset(-1, 23, 1)
    assert offset_for_special_timestamp(log, LATEST_TIMESTAMP) == TimestampAndOffset(-1, 25, 1)
    assert offset_for_special_timestamp(log, EARLIEST_TIMESTAMP) == earliest_offset(log)
    assert offset_for_special_timestamp(log, EARLIEST_LOCAL_TIMESTAMP) == (
        earliest_local_offset(log)
    )
    assert offset_for_special_timestamp(log, LATEST_TIERED_TIMESTAMP) == latest_tiered_offset(log)
    with pytest.raises(InvalidArgumentError):
        offset_for_special_timestamp(log, -3)
    # Nothing copied yet, and a partition that is not tiered.
    fresh = open_log(tmp_path / "fresh-0", Clock())
    fresh.append_as_leader(batch("a"), 3)
    assert latest_tiered_offset(fresh) == TimestampAndOffset(-1, -1, -1)
    plain = open_log(tmp_path / "plain-0", Clock(), **{"remote.storage.enable": False})
    plain.append_as_leader(batch("a"), 2)
    assert latest_tiered_offset(plain) == TimestampAndOffset(-1, -1, -1)
    assert earliest_local_offset(plain) == earliest_offset(plain) == TimestampAndOffset(-1, 0, 2)
    fresh.close()
    plain.close()


# Errors ----------------------------------------------------------------------------------------
class RacingStorage(CountingStorage):
    """The local RSM running ``before_fetch`` once, inside the first segment fetch: what another
    thread (the expiration task) does between the reader's metadata lookup and its fetch."""

    before_fetch: Callable[[], None] | None = None

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        hook, self.before_fetch = self.before_fetch, None
        if hook is not None:
            hook()
        return super().fetch_log_segment(remote_log_segment_metadata, start_position, end_position)


@pytest.fixture
def racing(tmp_path: Path) -> Iterator[tuple[Env, RacingStorage]]:
    environment = make_env(tmp_path)
    rsm = RacingStorage()
    rsm.configure({"dir": str(tmp_path / "remote"), "node.id": "0"})
    environment.rsm.close()
    environment.rsm = rsm
    environment.cache.close()
    environment.cache = RemoteIndexCache(rsm, tmp_path / "broker", clock=environment.clock)
    environment.reader = RemoteLogReader(rsm, environment.rlmm, environment.cache, environment.log)
    fill(environment.log, 20)
    environment.tier()
    environment.warm()
    yield environment, rsm
    close_env(environment)


def test_a_segment_replaced_between_lookup_and_fetch_is_read_again(
    racing: tuple[Env, RacingStorage],
) -> None:
    env, rsm = racing
    old = env.segments[1]
    local = next(s for s in env.log.segments if s.base_offset == old.start_offset)
    replacement: list[RemoteLogSegmentMetadata] = []

    def recopy() -> None:  # another leader's copy of the same range, then the old one deleted
        replacement.extend(tier(env.log, rsm, env.rlmm, segments=[local]))
        delete_remote(rsm, env.rlmm, old)

    rsm.before_fetch = recopy
    info = env.read(8)
    assert offsets_of(info.records)[0] == 8
    assert [r.segment_id for r in rsm.segment_requests] == [
        old.remote_log_segment_id.id,
        replacement[0].remote_log_segment_id.id,
    ]
    assert not env.cache.contains(old.remote_log_segment_id.id)


def test_a_segment_deleted_between_lookup_and_fetch_is_out_of_range(
    racing: tuple[Env, RacingStorage],
) -> None:
    env, rsm = racing
    old = env.segments[1]
    rsm.before_fetch = lambda: delete_remote(rsm, env.rlmm, old)
    with pytest.raises(OffsetOutOfRangeError, match="does not exist in remote tier"):
        env.read(8)


def test_segment_data_gone_under_live_metadata_is_out_of_range_after_one_retry(
    racing: tuple[Env, RacingStorage],
) -> None:
    env, rsm = racing
    old = env.segments[1]
    rsm.before_fetch = lambda: delete_remote(rsm, env.rlmm, old, publish=False)
    with pytest.raises(OffsetOutOfRangeError, match=str(old.remote_log_segment_id.id)) as err:
        env.read(8)
    assert isinstance(err.value.__cause__, RemoteResourceNotFoundException)
    # First attempt: the fetch failed; second: the offset index could not be fetched again.
    assert len(rsm.segment_requests) == 1
    assert rsm.index_fetches() == 1


def test_a_corrupt_remote_batch_names_the_segment_and_position(env: Env) -> None:
    metadata = env.segments[0]
    remote_log = env.rsm.segment_paths(metadata)[".log"]
    data = bytearray(remote_log.read_bytes())
    data[98 + 80] ^= 0xFF  # inside the records of the batch at position 98 (offset 1)
    remote_log.write_bytes(bytes(data))
    env.reader = RemoteLogReader(env.rsm, env.rlmm, env.cache, env.log, verify_crc=True)
    with pytest.raises(CorruptRecordError, match="CRC mismatch") as err:
        env.read(1)
    assert str(metadata.remote_log_segment_id.id) in str(err.value)
    assert err.value.position == 98 and "position 98" in str(err.value)
    # A batch only skipped over (offset 2's, reading offset 3 from the index entry at 196) is
    # not CRC-checked, as in Kafka, but its header must be sound.
    data[196 + 80] ^= 0xFF
    remote_log.write_bytes(bytes(data))
    assert offsets_of(env.read(3, 98).records) == [3]
    data[196 + 8 : 196 + 12] = (3).to_bytes(4, "big")  # an impossible Length
    remote_log.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match="smaller than the minimum") as err:
        env.read(3)
    assert err.value.position == 196 and str(metadata.remote_log_segment_id.id) in str(err.value)


def test_crc_verification_is_off_by_default_but_headers_are_checked(env: Env) -> None:
    """As on Kafka's broker, a read returns a batch whose records are corrupt (the consumer's
    decoding, ``iter_batches_with_records``, finds it); an impossible header still fails."""
    metadata = env.segments[0]
    remote_log = env.rsm.segment_paths(metadata)[".log"]
    good = remote_log.read_bytes()
    data = bytearray(good)
    data[98 + 80] ^= 0xFF  # inside the records of the batch at position 98 (offset 1)
    remote_log.write_bytes(bytes(data))
    info = env.read(1, 300)
    assert info.records == bytes(data[98:398])
    with pytest.raises(CorruptRecordError, match="CRC mismatch") as err:
        list(iter_batches_with_records(info.records))
    assert err.value.position == 0
    # The third batch returned (position 294, offset 3) with a bad magic: not returned.
    data[294 + 16] = 1
    remote_log.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match="invalid record batch") as err:
        env.read(1, 300)
    assert err.value.position == 294 and str(metadata.remote_log_segment_id.id) in str(err.value)
    # A partial last batch is returned unchecked (as Kafka does; a consumer drops it).
    assert env.read(1, 200).records == bytes(data[98:298])


def test_a_truncated_remote_segment_is_corrupt_not_skipped(env: Env) -> None:
    metadata = env.segments[0]
    remote_log = env.rsm.segment_paths(metadata)[".log"]
    remote_log.write_bytes(remote_log.read_bytes()[: 98 * 2 + 30])
    with pytest.raises(CorruptRecordError, match="ends inside"):
        env.read(3)


class FlakyStorage(CountingStorage):
    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        raise RetriableRemoteStorageException("the store is throttling")


@dataclass
class Recorder:
    """Collects what the reader records (the FetchMetrics and FetchQuota protocols)."""

    fetches: list[tuple[str, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    timings: list[float] = field(default_factory=list)
    quota: list[float] = field(default_factory=list)

    def record_remote_read(
        self, topic: str, num_bytes: int, seconds: float, *, failed: bool
    ) -> None:
        self.fetches.append((topic, num_bytes))
        if failed:
            self.errors.append(topic)
        self.timings.append(seconds)

    def record(self, num_bytes: float) -> None:
        self.quota.append(num_bytes)


def test_retriable_errors_propagate_and_reads_are_recorded(env: Env) -> None:
    recorder = Recorder()
    reader = RemoteLogReader(
        env.rsm, env.rlmm, env.cache, env.log, metrics=recorder, fetch_quota=recorder
    )
    info = reader.read(RemoteStorageFetchInfo(200, True, TIP, 3))
    assert recorder.fetches == [("topic", len(info.records))] and recorder.quota == [200]
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(RemoteStorageFetchInfo(200, True, TIP, 10_000))
    assert recorder.fetches[-1] == ("topic", 0) and recorder.errors == []
    flaky = FlakyStorage()
    flaky.configure({"dir": str(env.root / "remote"), "node.id": "0"})
    failing = RemoteLogReader(flaky, env.rlmm, env.cache, env.log, metrics=recorder)
    with pytest.raises(RetriableRemoteStorageException, match="throttling"):
        failing.read(RemoteStorageFetchInfo(200, True, TIP, 3))
    assert recorder.errors == ["topic"] and len(recorder.timings) == 3
    flaky.close()


# The reader pool -------------------------------------------------------------------------------
DEADLINE_S = 60.0
"""How long a pool test waits for something that happens at once on an idle machine."""


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    """Poll ``predicate`` (a pool counter or a future's state, which have nothing to wait on)
    until it holds; fail after ``DEADLINE_S``."""
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


class Gate:
    """Wraps the real reader: each read waits until the gate opens (a busy remote store)."""

    def __init__(self, reader: RemoteLogReader) -> None:
        self.reader = reader
        self.open = threading.Event()
        self.started = threading.Semaphore(0)

    def __call__(self, fetch_info: RemoteStorageFetchInfo) -> FetchDataInfo:
        self.started.release()
        assert self.open.wait(DEADLINE_S)
        return self.reader.read(fetch_info)


def test_pool_rejects_when_full_and_serves_what_it_accepted(env: Env) -> None:
    gate = Gate(env.reader)
    fetch = RemoteStorageFetchInfo(500, True, TIP, 4)
    expected = env.reader.read(fetch)
    with RemoteReaderPool(gate, threads=2, max_pending_tasks=1) as pool:
        assert pool.idle_percent == 1.0 and pool.queue_size == 0
        running = [pool.submit(fetch), pool.submit(fetch)]
        for _ in running:
            assert gate.started.acquire(timeout=DEADLINE_S)
        queued = pool.submit(fetch)
        assert (pool.active_count, pool.queue_size, pool.idle_percent) == (2, 1, 0.0)
        with pytest.raises(RemoteReadRejectedError, match="pool is full") as err:
            pool.submit(fetch)
        assert isinstance(err.value, RetriableRemoteStorageException)
        assert pool.rejected_count == 1
        gate.open.set()
        for future in [*running, queued]:
            assert future.result(timeout=DEADLINE_S) == expected
        wait_until(lambda: pool.completed_count == 3, "the three reads to be counted")
        assert (pool.completed_count, pool.idle_percent, pool.queue_size) == (3, 1.0, 0)
        # Room again; errors travel in the future.
        failed = pool.submit(RemoteStorageFetchInfo(500, True, TIP, 10_000))
        assert isinstance(failed.exception(timeout=DEADLINE_S), OffsetOutOfRangeError)
        listed = pool.submit_task(lambda: find_env_offset(env))
        assert listed.result(timeout=DEADLINE_S) == TimestampAndOffset(ts(5), 5, 0)


def find_env_offset(env: Env) -> TimestampAndOffset | None:
    return env.reader.find_offset_by_timestamp(TIP, ts(5), 0, env.log.leader_epoch_cache, env.log)


def test_pool_close_cancels_queued_reads_and_refuses_new_ones(env: Env) -> None:
    gate = Gate(env.reader)
    fetch = RemoteStorageFetchInfo(500, True, TIP, 4)
    pool = RemoteReaderPool(gate, threads=1, max_pending_tasks=5)
    running = pool.submit(fetch)
    assert gate.started.acquire(timeout=DEADLINE_S)
    queued = pool.submit(fetch)
    closer = threading.Thread(target=pool.close)
    closer.start()
    wait_until(queued.cancelled, "close() to cancel the queued read")
    with pytest.raises(IllegalStateError):
        pool.submit(fetch)
    gate.open.set()
    closer.join(DEADLINE_S)
    assert not closer.is_alive()
    assert running.result(timeout=DEADLINE_S).records  # the running read finished
    with pytest.raises(CancelledError):
        queued.result()
    pool.close()  # idempotent
    with pytest.raises(InvalidArgumentError):
        RemoteReaderPool(gate, threads=0)
    with pytest.raises(InvalidArgumentError):
        RemoteReaderPool(gate, max_pending_tasks=0)


def test_concurrent_reads_through_the_pool_are_all_right(env: Env) -> None:
    expected = {o: env.read(o, 300) for o in range(36)}
    with RemoteReaderPool(env.reader, threads=4, max_pending_tasks=100) as pool:
        futures = {o: pool.submit(RemoteStorageFetchInfo(300, True, TIP, o)) for o in range(36)}
        for offset, future in futures.items():
            assert future.result(timeout=DEADLINE_S) == expected[offset]
