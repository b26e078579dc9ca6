"""``ObjectStoreRemoteStorageManager`` over the in-memory backend: request counts (one GET per
fetch, coalescing, prefetch), bounded memory, failure handling, transforms and caches."""

from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
import hashlib
import io
import json
import logging
import os
import random
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from tierlog.conformance.rsm_suite import (
    SegmentFactory,
    SegmentFiles,
    read_stream,
    segment_metadata,
)
from tierlog.log.batch import ControlRecordType, build_batch, build_control_batch
from tierlog.log.record import Record
from tierlog.spi import (
    CustomMetadata,
    IndexType,
    InvalidArgumentError,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
    TopicIdPartition,
    Uuid,
)
from tierlog.storage.objectstore import (
    InMemoryBackend,
    KeyLayout,
    Manifest,
    MemoryObjectStoreRSM,
    ObjectStoreThrottledError,
    RequestObserver,
    UploadSettings,
    decode_custom_metadata,
)
from tierlog.storage.objectstore.ratelimit import TokenBucket
from tierlog.storage.objectstore.rsm import already_compressed

KiB = 1 << 10
MiB = 1 << 20
DEADLINE_S = 120

TRANSFORMS = {
    "plain": {},
    "zstd": {"compression.enabled": "true", "compression.heuristic.enabled": "false"},
    "aes": {"encryption.enabled": "true"},
    "zstd+aes": {
        "compression.enabled": "true",
        "compression.heuristic.enabled": "false",
        "encryption.enabled": "true",
    },
}


@pytest.fixture
def keyring(tmp_path: Path) -> Path:
    path = tmp_path / "keyring.json"
    path.write_text(
        json.dumps({"active": "k1", "keys": {"k1": base64.b64encode(os.urandom(32)).decode()}})
    )
    return path


@pytest.fixture
def make(keyring: Path) -> Iterator[Callable[..., MemoryObjectStoreRSM]]:
    """Builds configured RSMs; all share one fresh store unless ``memory.store`` is given."""
    store = uuid.uuid4().hex
    made: list[MemoryObjectStoreRSM] = []

    def build(
        cls: type[MemoryObjectStoreRSM] = MemoryObjectStoreRSM, **config: str
    ) -> MemoryObjectStoreRSM:
        full = {"memory.store": store, "encryption.key.file": str(keyring)}
        full.update(config)
        rsm = cls()
        rsm.configure(full)
        made.append(rsm)
        return rsm

    yield build
    for rsm in made:
        rsm.close()
    MemoryObjectStoreRSM.drop_store(store)


@pytest.fixture
def segments(tmp_path: Path) -> SegmentFactory:
    return SegmentFactory(tmp_path / "segments")


@pytest.fixture
def tip() -> TopicIdPartition:
    return TopicIdPartition(Uuid.random(), "orders", 0)


def gets(rsm: MemoryObjectStoreRSM) -> int:
    return rsm.metrics.snapshot().count("get")


def copy(
    rsm: MemoryObjectStoreRSM,
    files: SegmentFiles | LogSegmentData,
    tip: TopicIdPartition,
    segment_id: Uuid | None = None,
) -> RemoteLogSegmentMetadata:
    data = files.data if isinstance(files, SegmentFiles) else files
    metadata = segment_metadata(tip, size=data.log_segment.stat().st_size, segment_id=segment_id)
    rsm.copy_log_segment_data(metadata, data)
    return metadata


def big_segment(segments: SegmentFactory, size: int) -> tuple[SegmentFiles, bytes]:
    files = segments.create(size=0)
    data = random.Random(size).randbytes(size)
    files.data.log_segment.write_bytes(data)
    return files, data


# Layout and custom metadata -------------------------------------------------------------------
def test_copy_writes_three_objects_and_returns_its_key_layout(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make(**{"key.prefix": "tiered/", "key.prefix.entropy.chars": "3"})
    files = segments.create(size=5000)
    metadata = segment_metadata(tip, size=5000)
    custom = rsm.copy_log_segment_data(metadata, files.data)
    assert isinstance(custom, CustomMetadata) and len(custom.value) <= 128
    assert decode_custom_metadata(custom.value) == KeyLayout("tiered/", 3)
    keys = rsm.segment_keys(metadata)
    assert sorted(rsm.conformance_stored_objects()) == sorted(keys.all())
    assert list(rsm.memory_backend.objects) == [keys.log, keys.indexes, keys.manifest], (
        "the manifest must be written last: its presence means the segment is complete"
    )
    manifest = Manifest.from_json(rsm.memory_backend.objects[keys.manifest])
    assert manifest.size == 5000 and manifest.compression is None
    assert rsm.memory_backend.objects[keys.log] == files.segment


def test_segments_stay_readable_after_the_key_prefix_changes(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    """The custom metadata the RLM stores with the segment records its prefix."""
    old = make(**{"key.prefix": "v1/"})
    files = segments.create(size=3000)
    metadata = segment_metadata(tip, size=3000)
    custom = old.copy_log_segment_data(metadata, files.data)
    new = make(**{"key.prefix": "v2/", "key.prefix.entropy.chars": "8"})
    with pytest.raises(RemoteResourceNotFoundException):
        new.fetch_log_segment(metadata, 0)  # the RLM dropped the custom metadata
    finished = segment_metadata(tip, size=3000, segment_id=metadata.remote_log_segment_id.id)
    finished = dataclasses.replace(finished, custom_metadata=custom)
    assert read_stream(new.fetch_log_segment(finished, 0)) == files.segment
    assert (
        read_stream(new.fetch_index(finished, IndexType.OFFSET)) == files.indexes[IndexType.OFFSET]
    )
    new.delete_log_segment_data(finished)
    assert old.conformance_stored_objects() == []


@pytest.mark.parametrize("old", list(TRANSFORMS))
def test_segments_written_under_another_configuration_stay_readable(
    make: Callable[..., MemoryObjectStoreRSM],
    segments: SegmentFactory,
    tip: TopicIdPartition,
    old: str,
) -> None:
    """Chunk size and transforms come from each segment's manifest, not the configuration."""
    writer = make(**TRANSFORMS[old], **{"chunk.size": "1024"})
    files = segments.create(size=7000)
    metadata = copy(writer, files, tip)
    reader = make(**TRANSFORMS["zstd+aes" if old == "plain" else "plain"], **{"chunk.size": "4096"})
    for start, end in [(0, None), (1000, 1100), (1023, 1024), (5000, 6999), (3000, 9000)]:
        expected = files.segment[start : None if end is None else end + 1]
        assert read_stream(reader.fetch_log_segment(metadata, start, end)) == expected
    assert (
        read_stream(reader.fetch_index(metadata, IndexType.TIMESTAMP))
        == files.indexes[IndexType.TIMESTAMP]
    )


# Request counts ---------------------------------------------------------------------------------
@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize("cache", ["no-cache", "cache"])
def test_one_get_per_1mib_fetch_at_random_offsets_with_a_warm_manifest(
    make: Callable[..., MemoryObjectStoreRSM],
    segments: SegmentFactory,
    tip: TopicIdPartition,
    transform: str,
    cache: str,
) -> None:
    config = dict(TRANSFORMS[transform], **{"fetch.prefetch.chunks": "0"})
    if cache == "no-cache":
        config["fetch.chunk.cache.size"] = "0"
    rsm = make(**config)
    size = 14 * MiB
    files, data = big_segment(segments, size)
    metadata = copy(rsm, files, tip)
    read_stream(rsm.fetch_index(metadata, IndexType.OFFSET))  # warms the manifest
    rng = random.Random(7)
    chunk = rsm.config.chunk_size
    # Random offsets, and two that straddle chunk boundaries (two chunks, still one GET).
    starts = [rng.randrange(0, size - MiB) for _ in range(4)] + [4 * MiB - 300_000, 8 * MiB - 1]
    for start in starts:
        rsm.chunk_cache.clear_memory()  # each fetch lands on chunks not in the cache
        before = gets(rsm)
        got = read_stream(rsm.fetch_log_segment(metadata, start, start + MiB - 1))
        assert got == data[start : start + MiB]
        assert gets(rsm) - before == 1, (
            f"fetch at {start} (chunks {start // chunk}-"
            f"{(start + MiB - 1) // chunk}) took {gets(rsm) - before} GETs"
        )
    if cache == "cache":
        before = gets(rsm)
        read_stream(rsm.fetch_log_segment(metadata, start + 10, start + 1000))
        assert gets(rsm) == before, "a read within cached chunks needs no request"


def test_a_range_over_uncached_chunks_is_one_coalesced_get(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make(
        **{
            "chunk.size": "1024",
            "fetch.prefetch.chunks": "0",
            "compression.enabled": "true",
            "compression.heuristic.enabled": "false",
        }
    )
    files = segments.create(size=10 * 1024)
    metadata = copy(rsm, files, tip)
    read_stream(rsm.fetch_index(metadata, IndexType.OFFSET))
    before = gets(rsm)
    got = read_stream(rsm.fetch_log_segment(metadata, 2 * 1024 + 5, 7 * 1024 - 3))  # chunks 2-6
    assert got == files.segment[2 * 1024 + 5 : 7 * 1024 - 2]
    assert gets(rsm) - before == 1
    # Chunks 2-6 are cached now: a read of 0-8 fetches 0-1 and 7-8, one GET each.
    before = gets(rsm)
    got = read_stream(rsm.fetch_log_segment(metadata, 0, 9 * 1024 - 1), chunk=333)
    assert got == files.segment[: 9 * 1024]
    assert gets(rsm) - before == 2
    snap = rsm.metrics.snapshot()
    assert snap.cache_hits.get("memory", 0) >= 5


def drain(rsm: MemoryObjectStoreRSM) -> None:
    """Wait for background prefetches (their GETs are counted when they start). A prefetch
    registers its chunks' futures before the read that starts it returns, and removes each
    from ``_inflight`` before settling it: once they are all done, none is left."""
    with rsm._inflight_lock:
        pending = list(rsm._inflight.values())
    _, not_done = concurrent.futures.wait(pending, timeout=DEADLINE_S)
    assert not not_done, f"{len(not_done)} prefetched chunks still pending after {DEADLINE_S} s"
    assert not rsm._inflight


def test_sequential_reads_prefetch_the_next_chunks(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make(**{"chunk.size": "1024", "fetch.prefetch.chunks": "2"})
    files = segments.create(size=8 * 1024)
    metadata = copy(rsm, files, tip)
    seg = files.segment
    assert read_stream(rsm.fetch_log_segment(metadata, 0, 1023)) == seg[:1024]
    assert gets(rsm) == 2, "the manifest and chunk 0; one read is not a sequence yet"
    # Continues where the last read ended: chunk 1 now, chunks 2-3 in the background (one GET).
    assert read_stream(rsm.fetch_log_segment(metadata, 1024, 2047)) == seg[1024:2048]
    drain(rsm)
    assert gets(rsm) == 4
    assert all(rsm.chunk_cache.contains((rsm._segment(metadata).object_id, i)) for i in (2, 3))
    # Chunks 2-3 come from the prefetch; reading them prefetches 4-5.
    assert read_stream(rsm.fetch_log_segment(metadata, 2048, 4095)) == seg[2048:4096]
    drain(rsm)
    assert gets(rsm) == 5
    # 4-5 are cached, 6-7 are one GET, and there is nothing left to prefetch.
    assert read_stream(rsm.fetch_log_segment(metadata, 4096)) == seg[4096:]
    drain(rsm)
    assert gets(rsm) == 6


def test_random_reads_do_not_prefetch(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make(**{"chunk.size": "1024", "fetch.prefetch.chunks": "4"})
    files = segments.create(size=16 * 1024)
    metadata = copy(rsm, files, tip)
    for chunk in (9, 2, 13, 5):
        read_stream(rsm.fetch_log_segment(metadata, chunk * 1024, chunk * 1024 + 100))
    assert gets(rsm) == 1 + 4
    assert len(rsm.chunk_cache.memory) == 4


def test_a_scan_larger_than_a_quarter_of_the_cache_bypasses_it(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make(**{"chunk.size": "1024", "fetch.chunk.cache.size": str(8 * 1024)})
    files = segments.create(size=16 * 1024)
    metadata = copy(rsm, files, tip)
    assert read_stream(rsm.fetch_log_segment(metadata, 0)) == files.segment
    assert rsm.chunk_cache.memory.weight == 0
    read_stream(rsm.fetch_log_segment(metadata, 0, 100))
    assert rsm.chunk_cache.memory.weight == 1024


@pytest.mark.parametrize(("start", "end"), [(-1, None), (5, 4)])
def test_a_bad_range_is_refused_without_a_request(
    make: Callable[..., MemoryObjectStoreRSM], tip: TopicIdPartition, start: int, end: int | None
) -> None:
    """Kafka checks the arguments first: no manifest GET, even for a segment never copied."""
    rsm = make()
    with pytest.raises(InvalidArgumentError):
        rsm.fetch_log_segment(segment_metadata(tip, size=100), start, end)
    assert gets(rsm) == 0


def test_a_range_past_the_manifest_size_is_clamped_or_empty(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make()
    files = segments.create(size=100)
    metadata = copy(rsm, files, tip)
    assert read_stream(rsm.fetch_log_segment(metadata, 90, 10**5)) == files.segment[90:]
    before = gets(rsm)
    assert read_stream(rsm.fetch_log_segment(metadata, 100)) == b""
    assert gets(rsm) == before  # the manifest is cached: nothing past the end is asked for


def test_a_missing_transaction_index_costs_no_request(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make()
    metadata = copy(rsm, segments.create(with_transaction_index=False), tip)
    read_stream(rsm.fetch_index(metadata, IndexType.OFFSET))
    before = gets(rsm)
    with pytest.raises(RemoteResourceNotFoundException, match="no TRANSACTION index"):
        rsm.fetch_index(metadata, IndexType.TRANSACTION)
    assert gets(rsm) == before


# Memory -----------------------------------------------------------------------------------------
class SinkBackend(InMemoryBackend):
    """Reads uploads part by part like a cloud SDK and keeps only a digest: what the copy
    itself holds is all that tracemalloc sees."""

    def __init__(self, upload: UploadSettings, observer: RequestObserver, **kw: Any) -> None:
        super().__init__(upload, observer, **kw)
        self.digests: dict[str, str] = {}

    def upload(self, key: str, source: BinaryIO, size: int | None) -> None:
        digest = hashlib.sha256()
        while True:
            part = source.read(self.upload_settings.part_size)
            if not part:
                break
            digest.update(part)
            self.observer("upload_part", outcome="ok", bytes_sent=len(part))
            del part  # one part in flight (parallelism 1)
        self.digests[key] = digest.hexdigest()


class SinkRSM(MemoryObjectStoreRSM):
    def create_backend(
        self, configs: Any, upload: UploadSettings, observer: RequestObserver
    ) -> InMemoryBackend:
        return SinkBackend(upload, observer)


@pytest.mark.parametrize("transform", ["plain", "zstd+aes"])
def test_copy_memory_is_bounded_by_parts_and_chunks_not_by_the_segment(
    make: Callable[..., MemoryObjectStoreRSM],
    tmp_path: Path,
    tip: TopicIdPartition,
    transform: str,
) -> None:
    rsm = make(
        SinkRSM,
        **TRANSFORMS[transform],
        **{"chunk.size": str(4 * MiB), "upload.part.size": str(8 * MiB)},
    )
    files = SegmentFactory(tmp_path / "segments").create(size=0)
    size = 64 * MiB
    with files.data.log_segment.open("wb") as out:
        for i in range(64):
            out.write(random.Random(i).randbytes(MiB))
    metadata = segment_metadata(tip, size=size)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        rsm.copy_log_segment_data(metadata, files.data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # One part in flight, two copies of a chunk in the transform, and slack for buffers.
    bound = 8 * MiB + 2 * 4 * MiB + 4 * MiB
    assert peak - base < bound, f"copy of 64 MiB peaked at {(peak - base) / MiB:.1f} MiB"
    backend = rsm.backend
    assert isinstance(backend, SinkBackend)
    assert rsm.segment_keys(metadata).log in backend.digests


# Failures ---------------------------------------------------------------------------------------
def test_a_copy_failing_before_its_manifest_leaves_nothing_and_a_retry_succeeds(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make(**TRANSFORMS["zstd+aes"])
    files = segments.create(size=6000)
    metadata = segment_metadata(tip, size=6000)
    fault = rsm.memory_backend.fail("retriable", "upload", nth=2)  # indexes, then manifest
    with pytest.raises(RetriableRemoteStorageException):
        rsm.copy_log_segment_data(metadata, files.data)
    assert fault.seen >= 2
    assert rsm.conformance_stored_objects() == []
    with pytest.raises(RemoteResourceNotFoundException):
        rsm.fetch_log_segment(metadata, 0)
    rsm.copy_log_segment_data(metadata, files.data)
    assert read_stream(rsm.fetch_log_segment(metadata, 0)) == files.segment


def test_a_copy_that_dies_without_cleaning_up_is_never_read_back(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    """The broker dies mid-copy (here: the cleanup fails too): the log object is there, the
    manifest is not, so the segment does not exist for fetches."""
    rsm = make()
    files = segments.create(size=6000)
    metadata = segment_metadata(tip, size=6000)
    rsm.memory_backend.fail("fatal", "upload", nth=2)
    rsm.memory_backend.fail("fatal", "delete", nth=2)  # after the pre-copy manifest delete
    with pytest.raises(RemoteStorageException):
        rsm.copy_log_segment_data(metadata, files.data)
    assert rsm.conformance_stored_objects() == [rsm.segment_keys(metadata).log]
    with pytest.raises(RemoteResourceNotFoundException):
        rsm.fetch_log_segment(metadata, 0)
    with pytest.raises(RemoteResourceNotFoundException):
        rsm.fetch_index(metadata, IndexType.OFFSET)


def test_a_connection_dropped_mid_upload_is_retriable_and_nothing_is_read_back(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make(**TRANSFORMS["zstd"])  # a transformed log is uploaded as parts
    files = segments.create(size=50_000)
    metadata = segment_metadata(tip, size=50_000)
    rsm.memory_backend.fail("retriable", "upload_part", after_bytes=1000)
    with pytest.raises(RetriableRemoteStorageException, match="mid-upload"):
        rsm.copy_log_segment_data(metadata, files.data)
    with pytest.raises(RemoteResourceNotFoundException):
        rsm.fetch_index(metadata, IndexType.OFFSET)
    rsm.copy_log_segment_data(metadata, files.data)
    assert read_stream(rsm.fetch_log_segment(metadata, 100, 40_000)) == files.segment[100:40_001]


def test_a_failed_retry_never_leaves_the_old_manifest_over_new_data(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make()
    first = segments.create(size=4000)
    metadata = copy(rsm, first, tip)
    rsm.memory_backend.fail("fatal", "upload", nth=2)  # the retry's indexes upload
    with pytest.raises(RemoteStorageException):
        rsm.copy_log_segment_data(metadata, segments.create(size=3000).data)
    with pytest.raises(RemoteResourceNotFoundException):
        rsm.fetch_log_segment(metadata, 0)


def test_a_connection_dropped_mid_fetch_is_retriable_and_a_retry_reads_it(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make(**TRANSFORMS["aes"], **{"chunk.size": "1024", "fetch.chunk.cache.size": "0"})
    files = segments.create(size=8000)
    metadata = copy(rsm, files, tip)
    read_stream(rsm.fetch_index(metadata, IndexType.OFFSET))
    rsm.memory_backend.fail("retriable", "get", after_bytes=3000)
    with pytest.raises(RetriableRemoteStorageException):
        read_stream(rsm.fetch_log_segment(metadata, 0))
    assert read_stream(rsm.fetch_log_segment(metadata, 0)) == files.segment


def test_throttling_surfaces_as_retriable_and_is_counted(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make()
    metadata = copy(rsm, segments.create(), tip)
    rsm.memory_backend.fail("throttle", "get")
    with pytest.raises(ObjectStoreThrottledError) as raised:
        rsm.fetch_log_segment(metadata, 0)
    assert isinstance(raised.value, RetriableRemoteStorageException)
    text = rsm.expose().decode()
    assert 'tierlog_objectstore_throttles_total{backend="memory",operation="get"} 1.0' in text


def test_a_modified_stored_chunk_is_never_served(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make(**TRANSFORMS["aes"], **{"chunk.size": "1024"})
    files = segments.create(size=5000)
    metadata = copy(rsm, files, tip)
    key = rsm.segment_keys(metadata).log
    stored = bytearray(rsm.memory_backend.objects[key])
    stored[1040 + 7] ^= 0x20  # inside chunk 1
    rsm.memory_backend.objects[key] = bytes(stored)
    assert read_stream(rsm.fetch_log_segment(metadata, 0, 1023)) == files.segment[:1024]
    with pytest.raises(RemoteStorageException, match=r"chunk 1 .* failed authentication"):
        read_stream(rsm.fetch_log_segment(metadata, 1024, 2047))


# Transforms -------------------------------------------------------------------------------------
def kafka_segment(path: Path, compression: str, batches: int = 20) -> bytes:
    data = b"".join(
        build_batch(
            [
                Record(b * 10 + i, 1_700_000_000_000 + i, None, b"value %d " % i * 20)
                for i in range(10)
            ],
            base_offset=b * 10,
            compression=compression,
        )
        for b in range(batches)
    )
    path.write_bytes(data)
    return data


@pytest.mark.parametrize(
    ("producer_codec", "heuristic", "compressed"),
    [
        ("zstd", "true", False),
        ("lz4", "true", False),
        ("none", "true", True),
        ("zstd", "false", True),
    ],
)
def test_compression_is_skipped_for_segments_the_producers_compressed(
    make: Callable[..., MemoryObjectStoreRSM],
    segments: SegmentFactory,
    tip: TopicIdPartition,
    producer_codec: str,
    heuristic: str,
    compressed: bool,
) -> None:
    rsm = make(**{"compression.enabled": "true", "compression.heuristic.enabled": heuristic})
    files = segments.create(size=0)
    data = kafka_segment(files.data.log_segment, producer_codec)
    metadata = copy(rsm, files, tip)
    manifest = Manifest.from_json(rsm.memory_backend.objects[rsm.segment_keys(metadata).manifest])
    assert (manifest.compression is not None) is compressed
    assert read_stream(rsm.fetch_log_segment(metadata, 0)) == data
    if compressed and producer_codec == "none":
        assert manifest.stored_log_size < len(data) // 3


def _batch(base_offset: int, codec: str = "gzip") -> bytes:
    records = [Record(base_offset + i, 1_700_000_000_000, None, b"v" * 50) for i in range(3)]
    return build_batch(records, base_offset=base_offset, compression=codec)


def _marker(base_offset: int) -> bytes:
    return build_control_batch(
        ControlRecordType.COMMIT,
        0,
        base_offset=base_offset,
        timestamp=1,
        producer_id=7,
        producer_epoch=0,
    )


def _with_length(batch: bytes, length: int) -> bytes:
    return batch[:8] + length.to_bytes(4, "big", signed=True) + batch[12:]


def _compressed_run(count: int) -> bytes:
    return b"".join(_batch(10 * i) for i in range(count))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(_compressed_run(3), True, id="compressed-batches"),
        pytest.param(_compressed_run(2) + _batch(20, "none"), False, id="one-uncompressed"),
        pytest.param(_marker(0) + _compressed_run(2), True, id="control-batches-ignored"),
        pytest.param(_marker(0) + _marker(1), False, id="control-batches-only"),
        pytest.param(_compressed_run(8) + _batch(80, "none"), True, id="eight-batches-inspected"),
        pytest.param(b"", False, id="empty"),
        pytest.param(_compressed_run(2) + bytes(22), True, id="short-tail-header"),
        pytest.param(bytes(16) + b"\x01" + bytes(60), False, id="magic-1"),
        pytest.param(_with_length(_batch(0), 48) + _compressed_run(1), False, id="length-48"),
        pytest.param(_compressed_run(1) + _batch(10)[:-1], False, id="last-batch-past-size"),
        pytest.param(b"not a kafka segment, " * 10, False, id="not-a-segment"),
    ],
)
def test_already_compressed_inspects_the_first_data_batches(data: bytes, expected: bool) -> None:
    """The heuristic reads headers only: codec bits of up to 8 data batches, control batches
    skipped, and anything not a sound v2 batch within the file answers False."""
    assert already_compressed(io.BytesIO(data), len(data)) is expected
    # It leaves the stream where it found it.
    inner = io.BytesIO(data)
    inner.seek(3)
    already_compressed(inner, len(data))
    assert inner.tell() == 3


def test_already_compressed_stops_at_the_size_it_is_given() -> None:
    """``size`` bounds the walk: bytes after it (an uncompressed batch) are not looked at,
    and a batch that runs past it answers False."""
    data = _compressed_run(2) + _batch(20, "none")
    first_two = len(_compressed_run(2))
    assert already_compressed(io.BytesIO(data), first_two) is True
    assert already_compressed(io.BytesIO(data), first_two - 1) is False


def test_encrypted_objects_hold_no_plaintext(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make(**TRANSFORMS["aes"])
    files = segments.create(size=0)
    data = kafka_segment(files.data.log_segment, "none")
    metadata = copy(rsm, files, tip)
    keys = rsm.segment_keys(metadata)
    objects = rsm.memory_backend.objects
    assert b"value 3" not in objects[keys.log]
    assert files.indexes[IndexType.OFFSET][:32] not in objects[keys.indexes]
    assert read_stream(rsm.fetch_log_segment(metadata, 0)) == data


def test_a_retried_copy_is_never_served_from_the_first_attempts_cache(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make(**{"chunk.size": "1024"})
    first = segments.create(size=3000)
    metadata = copy(rsm, first, tip)
    assert read_stream(rsm.fetch_log_segment(metadata, 0, 100)) == first.segment[:101]
    second = segments.create(size=3000)
    copy(rsm, second, tip, segment_id=metadata.remote_log_segment_id.id)
    assert read_stream(rsm.fetch_log_segment(metadata, 0, 100)) == second.segment[:101]


class FakeTime:
    """A clock that only moves when ``sleep`` is called, recording each sleep."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_upload_rate_limit_slows_copies(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    """Every byte uploaded (log and indexes; not the small manifest) is paid for: beyond the
    bucket's initial burst, the copy sleeps exactly bytes / rate. Checked on a fake clock, so
    the machine's speed does not matter."""
    fake = FakeTime()
    buckets: list[TokenBucket] = []

    class FakeClockRSM(MemoryObjectStoreRSM):
        def create_upload_bucket(self, rate: int) -> TokenBucket:
            bucket = TokenBucket(rate, clock=fake.clock, sleep=fake.sleep)
            buckets.append(bucket)
            return bucket

    rate = 2 * MiB
    rsm = make(FakeClockRSM, **{"upload.rate.limit.bytes.per.second": str(rate)})
    assert [b.rate for b in buckets] == [rate]
    files = segments.create(size=MiB)
    metadata = copy(rsm, files, tip)
    keys = rsm.segment_keys(metadata)
    objects = rsm.memory_backend.objects
    paid = len(objects[keys.log]) + len(objects[keys.indexes])
    assert paid > MiB
    assert sum(fake.slept) == pytest.approx((paid - buckets[0].burst) / rate, rel=1e-9)
    assert sum(fake.slept) > 0.25


# Caches across restarts, deletes, metrics -------------------------------------------------------
def test_the_disk_cache_serves_chunks_after_a_restart(
    make: Callable[..., MemoryObjectStoreRSM],
    segments: SegmentFactory,
    tip: TopicIdPartition,
    tmp_path: Path,
) -> None:
    config = dict(
        TRANSFORMS["zstd+aes"],
        **{"chunk.size": "1024", "fetch.disk.cache.dir": str(tmp_path / "cache")},
    )
    first = make(**config)
    files = segments.create(size=6000)
    metadata = copy(first, files, tip)
    read_stream(first.fetch_log_segment(metadata, 1000, 3000))
    first.close()
    restarted = make(**config)
    assert (
        read_stream(restarted.fetch_log_segment(metadata, 1000, 3000)) == files.segment[1000:3001]
    )
    assert gets(restarted) == 1, "only the manifest: chunks 0-2 come from the disk cache"
    assert restarted.metrics.snapshot().cache_hits["disk"] == 3


def test_delete_is_idempotent_and_delete_partition_removes_leftovers(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make(**{"key.prefix.entropy.chars": "2"})
    kept = copy(rsm, segments.create(), TopicIdPartition(tip.topic_id, tip.topic, 1))
    gone = copy(rsm, segments.create(), tip)
    rsm.delete_log_segment_data(gone)
    rsm.delete_log_segment_data(gone)
    # An abandoned copy attempt left objects under the partition's prefix.
    orphan = rsm.layout.partition_prefix(tip) + "00000000000000000000-abandoned.log"
    rsm.memory_backend.upload(orphan, io.BytesIO(b"x"), 1)
    rsm.delete_partition(tip)
    rsm.delete_partition(tip)
    assert sorted(rsm.conformance_stored_objects()) == sorted(rsm.segment_keys(kept).all())


def test_metrics_count_requests_bytes_and_cache_per_backend(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make(**{"fetch.prefetch.chunks": "0"})
    files = segments.create(size=5000)
    metadata = copy(rsm, files, tip)
    read_stream(rsm.fetch_log_segment(metadata, 0, 99))
    read_stream(rsm.fetch_log_segment(metadata, 0, 99))
    snap = rsm.metrics.snapshot()
    assert snap.count("upload", "ok") == 3  # log, indexes, manifest
    assert snap.bytes_sent["upload"] > 5000
    assert snap.count("get", "ok") == 2  # the manifest, then one chunk; the rest is cached
    assert snap.cache_hits["manifest"] == 1 and snap.cache_misses["manifest"] == 1
    text = rsm.expose().decode()
    assert (
        'tierlog_objectstore_requests_total{backend="memory",operation="get",outcome="ok"}'
        " 2.0" in text
    )
    assert 'tierlog_objectstore_cache_hits_total{backend="memory",cache="memory"} 1.0' in text
    assert "tierlog_objectstore_received_bytes_total" in text


def test_concurrent_sequential_readers_with_prefetch_read_correct_bytes(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    """Readers racing over the same chunks and their prefetches (in-flight chunks are waited
    for, failed or finished prefetches never leave a reader hanging)."""
    from concurrent.futures import ThreadPoolExecutor

    rsm = make(
        **TRANSFORMS["zstd+aes"],
        **{
            "chunk.size": "1024",
            "fetch.prefetch.chunks": "3",
            "fetch.chunk.cache.size": str(64 * 1024),
        },
    )
    files = segments.create(size=40 * 1024)
    metadata = copy(rsm, files, tip)

    def reader(step: int) -> None:
        position = 0
        while position < len(files.segment):
            end = position + step - 1
            got = read_stream(rsm.fetch_log_segment(metadata, position, end))
            assert got == files.segment[position : end + 1]
            position = end + 1

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(reader, [700, 1024, 1500, 333, 4096, 999, 2048, 97]))
    drain(rsm)


# Configuration ------------------------------------------------------------------------------------


def test_an_unknown_key_is_reported_with_the_key_it_nearly_matches(
    make: Callable[..., MemoryObjectStoreRSM], caplog: pytest.LogCaptureFixture
) -> None:
    """A typo'd ``rsm.config.`` key is ignored with a warning naming the key meant; a key with
    no near match is named alone."""
    with caplog.at_level(logging.WARNING, logger="tierlog.storage.objectstore.rsm"):
        make(**{"compresion.enabled": "true", "transferer.class": "x.Y"})
    assert (
        "ignores unknown configuration keys: compresion.enabled (did you mean "
        "compression.enabled?), transferer.class (known: " in caplog.text
    )
