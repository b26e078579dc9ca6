"""The compaction summary in the ``local`` RSM: a ``.compaction_summary`` file beside Kafka's,
written atomically like them, optional, gone with the segment; directories written before it
existed (by Kafka's LocalTieredStorage or an earlier tierlog) read as segments without one."""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tierlog.compaction.summary import BloomFilter, SegmentSummary
from tierlog.conformance.rsm_suite import SegmentFactory, read_stream
from tierlog.spi import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    TopicIdPartition,
    Uuid,
)
from tierlog.storage.local import ROOT_STORAGE_DIR_NAME, LocalTieredStorage

TOPIC_ID = Uuid.from_string("LWgrMmVrT0a__7a4SasuPA")
SEGMENT_ID = Uuid.from_string("bCqX9U--S-6U8XUM9II25Q")
TIP = TopicIdPartition(TOPIC_ID, "topic", 0)
PREFIX = "00000000000000000011-bCqX9U--S-6U8XUM9II25Q"
KAFKA_SUFFIXES = (
    ".log",
    ".index",
    ".timeindex",
    ".txnindex",
    ".leader_epoch_checkpoint",
    ".snapshot",
)
SUMMARY = IndexType.COMPACTION_SUMMARY


def metadata_for(start_offset: int = 11) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TIP, SEGMENT_ID),
        start_offset,
        start_offset + 10,
        1000,
        0,
        1000,
        0,
        {0: start_offset},
    )


@pytest.fixture
def segments(tmp_path: Path) -> SegmentFactory:
    return SegmentFactory(tmp_path / "local-segments")


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def storage(store_dir: Path) -> Iterator[LocalTieredStorage]:
    with LocalTieredStorage() as rsm:
        rsm.configure({"dir": str(store_dir)})
        yield rsm


def partition_dir(store_dir: Path) -> Path:
    return store_dir / ROOT_STORAGE_DIR_NAME / "topic-0-LWgrMmVrT0a__7a4SasuPA"


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_the_summary_is_a_file_of_its_own_beside_kafkas(
    storage: LocalTieredStorage, store_dir: Path, segments: SegmentFactory
) -> None:
    summary = segments.summary()
    files = segments.create(start_offset=11, compaction_summary=summary)
    storage.copy_log_segment_data(metadata_for(), files.data)
    assert listing(partition_dir(store_dir)) == sorted(
        PREFIX + s for s in (*KAFKA_SUFFIXES, ".compaction_summary")
    )
    path = storage.segment_paths(metadata_for())[".compaction_summary"]
    assert path == partition_dir(store_dir) / f"{PREFIX}.compaction_summary"
    assert path.read_bytes() == summary
    assert read_stream(storage.fetch_index(metadata_for(), SUMMARY)) == summary


def test_a_segment_copied_without_a_summary_has_no_file_and_kafkas_layout(
    storage: LocalTieredStorage, store_dir: Path, segments: SegmentFactory
) -> None:
    """The usual case, a segment copied from the local log, is byte for byte Kafka's layout."""
    storage.copy_log_segment_data(metadata_for(), segments.create(start_offset=11).data)
    assert listing(partition_dir(store_dir)) == sorted(PREFIX + s for s in KAFKA_SUFFIXES)
    with pytest.raises(RemoteResourceNotFoundException, match=r"COMPACTION_SUMMARY index of"):
        storage.fetch_index(metadata_for(), SUMMARY)


def test_an_empty_summary_is_an_empty_file(
    storage: LocalTieredStorage, segments: SegmentFactory
) -> None:
    storage.copy_log_segment_data(metadata_for(), segments.create(compaction_summary=b"").data)
    path = storage.segment_paths(metadata_for())[".compaction_summary"]
    assert path.is_file() and path.stat().st_size == 0
    assert read_stream(storage.fetch_index(metadata_for(), SUMMARY)) == b""


def test_a_directory_written_before_the_summary_existed_reads_as_having_none(
    store_dir: Path,
) -> None:
    """Files laid out by hand as Kafka's LocalTieredStorage (and tierlog before the summary)
    write them: the summary is not found, never another error; the rest is served, a delete
    removes everything, and a later copy of the same id may add a summary."""
    directory = partition_dir(store_dir)
    directory.mkdir(parents=True)
    contents = {
        ".log": b"records",
        ".index": b"offset",
        ".timeindex": b"time",
        ".leader_epoch_checkpoint": b"0\n1\n0 11\n",
        ".snapshot": b"pid",
    }
    for suffix, content in contents.items():
        (directory / (PREFIX + suffix)).write_bytes(content)
    with LocalTieredStorage() as rsm:
        rsm.configure({"dir": str(store_dir)})
        with pytest.raises(RemoteResourceNotFoundException, match="not found"):
            rsm.fetch_index(metadata_for(), SUMMARY)
        assert read_stream(rsm.fetch_index(metadata_for(), IndexType.TIMESTAMP)) == b"time"
        rsm.delete_log_segment_data(metadata_for())
        assert listing(directory) == []


def test_a_retry_without_a_summary_removes_the_file(
    storage: LocalTieredStorage, store_dir: Path, segments: SegmentFactory
) -> None:
    storage.copy_log_segment_data(
        metadata_for(), segments.create(compaction_summary=segments.summary()).data
    )
    storage.copy_log_segment_data(metadata_for(), segments.create().data)
    assert listing(partition_dir(store_dir)) == sorted(PREFIX + s for s in KAFKA_SUFFIXES)
    with pytest.raises(RemoteResourceNotFoundException):
        storage.fetch_index(metadata_for(), SUMMARY)


def test_a_failed_summary_write_leaves_no_segment_behind(
    storage: LocalTieredStorage,
    store_dir: Path,
    segments: SegmentFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The summary is written like the other files (temporary name, fsync, rename): a rename
    that fails on it fails the copy, and neither a partial summary nor the rest of the
    segment is left under a final name (the copy is all or nothing)."""
    storage.copy_log_segment_data(
        metadata_for(), segments.create(compaction_summary=segments.summary(100)).data
    )
    real_replace = os.replace

    def failing_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if str(dst).endswith(".compaction_summary"):
            raise OSError(errno.EIO, "simulated I/O error on rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(RemoteStorageException, match="simulated I/O error"):
        storage.copy_log_segment_data(
            metadata_for(), segments.create(compaction_summary=segments.summary(5000)).data
        )
    monkeypatch.undo()
    assert listing(partition_dir(store_dir)) == []
    with pytest.raises(RemoteResourceNotFoundException):
        storage.fetch_index(metadata_for(), SUMMARY)


def test_delete_removes_the_summary_and_a_crashed_write_of_it(
    storage: LocalTieredStorage, store_dir: Path, segments: SegmentFactory
) -> None:
    """What a copy killed while writing the summary leaves (a hidden temporary file named after
    the segment) goes with the segment's delete."""
    storage.copy_log_segment_data(
        metadata_for(), segments.create(compaction_summary=segments.summary()).data
    )
    leftover = partition_dir(store_dir) / f".{PREFIX}.compaction_summary.0123456789abcdef.tmp"
    leftover.write_bytes(b"partial")
    storage.delete_log_segment_data(metadata_for())
    assert listing(partition_dir(store_dir)) == []


def test_a_cleaner_summary_reads_back_and_answers_the_same(
    storage: LocalTieredStorage, segments: SegmentFactory
) -> None:
    """The log cleaner's own format (``tierlog.compaction.summary``) through the RSM: the
    decoded filter says yes to every key of the segment and the same as before to others."""
    keys = [hashlib.md5(f"key-{i}".encode()).digest() for i in range(2000)]
    others = [hashlib.md5(f"other-{i}".encode()).digest() for i in range(2000)]
    summary = SegmentSummary(
        record_count=5000,
        key_count=len(keys),
        first_batch_timestamp=1_700_000_000_000,
        largest_timestamp=1_700_000_100_000,
        earliest_horizon=None,
        has_transactional=False,
        has_empty_batches=False,
        has_keyless=False,
        has_unstamped_tombstones=True,
        bloom=BloomFilter.of(keys, 0.01),
    )
    encoded = summary.encode()
    storage.copy_log_segment_data(metadata_for(), segments.create(compaction_summary=encoded).data)
    fetched = read_stream(storage.fetch_index(metadata_for(), SUMMARY))
    assert fetched == encoded
    decoded = SegmentSummary.decode(fetched)
    assert decoded == summary
    assert decoded.bloom.might_contain(keys).all()
    assert list(decoded.bloom.might_contain(others)) == list(summary.bloom.might_contain(others))
