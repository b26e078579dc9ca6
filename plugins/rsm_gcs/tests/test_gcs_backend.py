"""What ``GcsBackend`` does beyond the backend suite: how it uploads (one request, or a
resumable session in chunks of the configured size), its bounded memory, and the seekable
adapter the SDK's resumable uploads need over a forward-only source."""

from __future__ import annotations

import io
import math
import os
import tracemalloc
from collections.abc import Iterator

import pytest
from services._common import Service
from tierlog.conformance.backend_suite import RecordingObserver, StreamSource
from tierlog.conformance.rsm_suite import read_stream
from tierlog.spi import RemoteStorageException
from tierlog.storage.objectstore.backend import UploadSettings

from gcs_test_helpers import gcs_configs, list_bucket, read_object
from tierlog_rsm_gcs import GcsBackend, GcsConfig
from tierlog_rsm_gcs._streams import UploadSource

KiB = 1 << 10
MiB = 1 << 20
CHUNK = 512 * KiB


@pytest.fixture
def observer() -> RecordingObserver:
    return RecordingObserver()


def make(
    service: Service, observer: RecordingObserver, *, threshold: int, chunk: int = CHUNK
) -> GcsBackend:
    configs = gcs_configs(service, **{"gcs.resumable.upload.chunk.size": str(chunk)})
    upload = UploadSettings(chunk, threshold, 1)
    return GcsBackend(GcsConfig.from_configs(configs, upload), upload, observer)


@pytest.fixture
def backend(fake_gcs: Service, observer: RecordingObserver) -> Iterator[GcsBackend]:
    backend = make(fake_gcs, observer, threshold=CHUNK)
    yield backend
    backend.close()


def operations(observer: RecordingObserver) -> list[str]:
    return [r.operation for r in observer.take()]


@pytest.mark.parametrize("known_size", [True, False], ids=["known-size", "unknown-size"])
def test_small_object_of_known_size_is_one_request(
    backend: GcsBackend, observer: RecordingObserver, key_prefix: str, known_size: bool
) -> None:
    data = os.urandom(CHUNK - 1)
    observer.take()
    backend.upload(f"{key_prefix}small", io.BytesIO(data), len(data) if known_size else None)
    ops = operations(observer)
    if known_size:
        assert ops == ["upload"]
    else:  # unknown size: a session, then its one (final) chunk
        assert ops == ["upload", "upload_part"]
    assert read_stream(backend.get(f"{key_prefix}small")) == data


@pytest.mark.parametrize("known_size", [True, False], ids=["known-size", "unknown-size"])
@pytest.mark.parametrize("extra", [0, 1234], ids=["exact-chunks", "ragged"])
def test_large_object_goes_in_chunks_of_the_configured_size(
    backend: GcsBackend,
    observer: RecordingObserver,
    fake_gcs: Service,
    key_prefix: str,
    known_size: bool,
    extra: int,
) -> None:
    """Above the threshold: a resumable session whose chunks are each one request of exactly
    ``gcs.resumable.upload.chunk.size`` bytes (the last may be shorter), also below the SDK's
    8 MiB single-request limit (which would otherwise send a 3 MiB object whole)."""
    size = 6 * CHUNK + extra
    data = os.urandom(size)
    key = f"{key_prefix}chunked"
    observer.take()
    backend.upload(key, io.BytesIO(data), size if known_size else None)
    taken = observer.take()
    assert taken[0].operation == "upload"  # the session's start
    parts = [r for r in taken if r.operation == "upload_part"]
    assert all(r.outcome == "ok" for r in taken)
    assert len(parts) >= math.ceil(size / CHUNK)
    assert all(r.bytes_sent <= CHUNK for r in parts)
    assert [r.bytes_sent for r in parts[: size // CHUNK]] == [CHUNK] * (size // CHUNK)
    assert sum(r.bytes_sent for r in parts) == size
    assert read_object(fake_gcs, key) == data


def test_threshold_above_the_sdk_limit_sends_one_chunk(
    fake_gcs: Service, observer: RecordingObserver, key_prefix: str
) -> None:
    """A threshold above 8 MiB: an object between the two still goes in one body (a session
    and one chunk), never in several chunks."""
    backend = make(fake_gcs, observer, threshold=12 * MiB, chunk=MiB)
    try:
        data = os.urandom(9 * MiB + 5)
        observer.take()
        backend.upload(f"{key_prefix}nine", io.BytesIO(data), len(data))
        assert operations(observer) == ["upload", "upload_part"]
        assert read_object(fake_gcs, f"{key_prefix}nine") == data
    finally:
        backend.close()


def test_upload_memory_is_bounded_by_the_chunk_size(
    backend: GcsBackend, fake_gcs: Service, key_prefix: str
) -> None:
    """12 MiB from a stream in 512 KiB chunks: Python memory stays within a few chunks."""
    size = 12 * MiB
    source = StreamSource(size, seed=3, max_read=256 * KiB)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        backend.upload(f"{key_prefix}bounded", source, size)  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert source.position == size
    assert peak - base < 4 * CHUNK + MiB, f"peak {(peak - base) / MiB:.1f} MiB"
    assert list_bucket(fake_gcs, f"{key_prefix}bounded") == {f"{key_prefix}bounded": size}


def test_a_source_shorter_than_announced_commits_nothing(
    backend: GcsBackend, fake_gcs: Service, key_prefix: str
) -> None:
    for size, short in ((1000, 999), (6 * CHUNK, 5 * CHUNK + 17)):
        key = f"{key_prefix}short-{size}"
        with pytest.raises(RemoteStorageException, match="the source ended after"):
            backend.upload(key, io.BytesIO(os.urandom(short)), size)
        assert backend.head(key) is None
    assert list_bucket(fake_gcs, key_prefix) == {}


def test_a_source_longer_than_announced_stores_the_announced_size(
    backend: GcsBackend, key_prefix: str
) -> None:
    data = os.urandom(3 * CHUNK)
    source = io.BytesIO(data)
    backend.upload(f"{key_prefix}long", source, 2 * CHUNK + 5)
    assert read_stream(backend.get(f"{key_prefix}long")) == data[: 2 * CHUNK + 5]
    assert source.tell() == 2 * CHUNK + 5


def test_get_reports_the_bytes_of_its_range(
    backend: GcsBackend, observer: RecordingObserver, key_prefix: str
) -> None:
    backend.upload(f"{key_prefix}r", io.BytesIO(bytes(range(256)) * 40), 10240)
    observer.take()
    assert (
        read_stream(backend.get(f"{key_prefix}r", 100, 1123)) == (bytes(range(256)) * 40)[100:1124]
    )
    (request,) = observer.take()
    assert (request.operation, request.outcome, request.bytes_received) == ("get", "ok", 1024)


# UploadSource -----------------------------------------------------------------------------------
def test_upload_source_replays_the_last_block_after_a_seek_back() -> None:
    """What the SDK does after a chunk the server persisted only in part: seek to the first
    byte it lacks and read a whole chunk again; the replay continues into fresh bytes."""
    data = os.urandom(10_000)
    source = UploadSource(StreamSource(len(data), data=data, max_read=999), None, "x")  # type: ignore[arg-type]
    assert source.read(4000) == data[:4000]
    assert source.tell() == 4000
    source.seek(2500)
    assert source.read(4000) == data[2500:6500]  # 1500 replayed, 2500 fresh
    source.seek(6000)
    assert source.read(100) == data[6000:6100]  # within the replayed block
    assert source.read(-1) == data[6100:]
    assert source.read(10) == b""
    assert source.consumed == len(data)


def test_upload_source_refuses_seeks_outside_the_last_block() -> None:
    data = os.urandom(5000)
    source = UploadSource(io.BytesIO(data), 5000, "x")
    source.read(2000)
    source.read(2000)
    with pytest.raises(io.UnsupportedOperation):
        source.seek(1000)  # before the last block: gone
    with pytest.raises(io.UnsupportedOperation):
        source.seek(4500)  # ahead of what was read
    assert source.tell() == 4000, "a refused seek moved the position"
    assert source.read(5000) == data[4000:]  # and never past the announced size


def test_upload_source_passes_the_sources_own_error_through() -> None:
    source = UploadSource(StreamSource(5000, seed=1, fail_after=3000), 5000, "x")  # type: ignore[arg-type]
    source.read(3000)
    with pytest.raises(OSError, match="injected failure") as raised:
        source.read(2000)
    assert source.source_error is raised.value
