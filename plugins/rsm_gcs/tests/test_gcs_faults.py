"""The store disappears mid-request: fake-gcs-server is SIGKILLed during a resumable upload and
during a fetch, then restarted on the same directory and port.

What must hold (issue 5): the call raises ``RetriableRemoteStorageException`` (after the SDK's
retries, bounded here by ``gcs.retry.deadline.ms=3000``), nothing partial is ever read back
(GCS commits an object only when its last chunk lands; the RSM writes the manifest last), and a
retry after the restart completes. Each test runs its own server (``private_fake_gcs``, the
filesystem backend, so committed objects survive the restart as in a real bucket).
"""

from __future__ import annotations

import hashlib
import io
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest
from services._common import Service
from services.fake_gcs import start_fake_gcs
from tierlog.conformance.rsm_suite import SegmentFactory, read_stream, segment_metadata
from tierlog.spi import (
    RemoteResourceNotFoundException,
    RetriableRemoteStorageException,
    TopicIdPartition,
    Uuid,
)
from tierlog.storage.objectstore.backend import UploadSettings

from gcs_test_helpers import gcs_configs, list_bucket
from tierlog_rsm_gcs import GcsBackend, GcsConfig, GcsRemoteStorageManager

MiB = 1 << 20
CHUNK = MiB
T = TypeVar("T")


class GatedSource(io.RawIOBase):
    """A non-seekable upload source that stops after ``gate_at`` bytes until released, so the
    test can kill the server while an upload is provably in the middle of its chunks."""

    def __init__(self, data: bytes, gate_at: int) -> None:
        super().__init__()
        self._data = memoryview(data)
        self._position = 0
        self._gate_at = gate_at
        self.reached = threading.Event()
        self.release = threading.Event()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._position >= self._gate_at and not self.release.is_set():
            self.reached.set()
            assert self.release.wait(30), "the test never released the source"
        view = memoryview(buffer).cast("B")
        n = min(len(view), len(self._data) - self._position)
        if self._position < self._gate_at:
            n = min(n, self._gate_at - self._position)
        view[:n] = self._data[self._position : self._position + n]
        self._position += n
        return n


def restart(service: Service) -> Service:
    """Start fake-gcs-server again on the killed one's directory and port."""
    assert service.process.poll() is not None, "restart() expects a stopped server"
    port = service.extra["port"]
    assert isinstance(port, int)
    return start_fake_gcs(service.directory, port=port)


@pytest.fixture
def server(private_fake_gcs: Service) -> Iterator[list[Service]]:
    """The private server, in a list a test may replace with the restarted one; whichever is
    current is stopped at the end."""
    holder = [private_fake_gcs]
    yield holder
    holder[0].stop()


def make_backend(service: Service, chunk: int = CHUNK, deadline_ms: int = 3000) -> GcsBackend:
    configs = gcs_configs(
        service,
        **{
            "gcs.resumable.upload.chunk.size": str(chunk),
            "gcs.retry.deadline.ms": str(deadline_ms),
        },
    )
    upload = UploadSettings(chunk, chunk, 1)
    return GcsBackend(GcsConfig.from_configs(configs, upload), upload)


def run_in_thread(fn: Callable[[], T]) -> Future[T]:
    pool = ThreadPoolExecutor(1)
    future = pool.submit(fn)
    pool.shutdown(wait=False)
    return future


def test_kill_mid_resumable_upload_raises_retriable_and_a_retry_completes(
    server: list[Service],
) -> None:
    data = Uuid.random().bytes * (6 * MiB // 16)  # 6 chunks
    key = "faults/upload.log"
    backend = make_backend(server[0])
    try:
        source = GatedSource(data, gate_at=3 * CHUNK + 1000)
        upload = run_in_thread(lambda: backend.upload(key, source, len(data)))  # type: ignore[arg-type]
        assert source.reached.wait(30), "the upload never reached the middle of the object"
        server[0].kill()
        source.release.set()
        with pytest.raises(RetriableRemoteStorageException):
            upload.result(60)

        server[0] = restart(server[0])
        assert backend.head(key) is None, "a killed resumable upload left an object behind"
        assert list_bucket(server[0], "faults/") == {}

        backend.upload(key, io.BytesIO(data), len(data))
        assert read_stream(backend.get(key)) == data
    finally:
        backend.close()


def test_kill_mid_fetch_raises_retriable_never_a_short_read(server: list[Service]) -> None:
    # Well beyond what loopback socket buffers hold, so the kill lands mid-body.
    data = Uuid.random().bytes * (32 * MiB // 16)
    key = "faults/fetch.log"
    backend = make_backend(server[0], chunk=8 * MiB)
    try:
        backend.upload(key, io.BytesIO(data), len(data))
        stream = backend.get(key)
        first = stream.read(MiB)
        assert first == data[:MiB]
        server[0].kill()
        got = bytearray(first)
        with pytest.raises(RetriableRemoteStorageException):
            while chunk := stream.read(MiB):
                got += chunk
        stream.close()
        assert len(got) < len(data), "the whole body had arrived before the kill: grow it"

        server[0] = restart(server[0])
        assert read_stream(backend.get(key)) == data
    finally:
        backend.close()


def test_unreachable_server_raises_retriable(server: list[Service]) -> None:
    backend = make_backend(server[0], deadline_ms=1000)
    try:
        server[0].kill()
        started = time.monotonic()
        for action in (
            backend.check_access,
            lambda: read_stream(backend.get("faults/x")),
            lambda: backend.head("faults/x"),
            lambda: backend.delete(["faults/x"]),
            lambda: list(backend.list("faults/")),
            lambda: backend.upload("faults/x", io.BytesIO(b"abc"), 3),
        ):
            with pytest.raises(RetriableRemoteStorageException):
                action()
        # Six calls, each retrying for at most gcs.retry.deadline.ms (1 s) and not much more.
        assert time.monotonic() - started < 6 * 1 + 10
    finally:
        backend.close()


# The RSM ------------------------------------------------------------------------------------
def rsm_for(service: Service) -> GcsRemoteStorageManager:
    rsm = GcsRemoteStorageManager()
    rsm.configure(
        gcs_configs(
            service,
            **{"key.prefix": "rsm-faults/", "upload.part.size": str(5 * MiB)},
        )
    )
    return rsm


def test_rsm_copy_killed_mid_upload_leaves_no_segment_and_a_retry_completes(
    server: list[Service], tmp_path: Path
) -> None:
    files = SegmentFactory(tmp_path / "segments").create(size=24 * MiB)  # five 5 MiB parts
    partition = TopicIdPartition(Uuid.random(), "faults", 0)
    metadata = segment_metadata(partition, size=len(files.segment))
    rsm = rsm_for(server[0])
    try:
        copy = run_in_thread(lambda: rsm.copy_log_segment_data(metadata, files.data))
        deadline = time.monotonic() + 60
        while rsm.metrics.snapshot().count("upload_part", "ok") < 2:
            assert time.monotonic() < deadline, "the copy never got two chunks in"
            assert not copy.done(), f"the copy ended before the kill: {copy.result()}"
            time.sleep(0.01)
        server[0].kill()
        with pytest.raises(RetriableRemoteStorageException):
            copy.result(60)

        server[0] = restart(server[0])
        # Nothing partial is read back as a segment: without its manifest there is none.
        with pytest.raises(RemoteResourceNotFoundException):
            read_stream(rsm.fetch_log_segment(metadata, 0))

        rsm.copy_log_segment_data(metadata, files.data)  # the RLM's retry
        got = read_stream(rsm.fetch_log_segment(metadata, 0))
        assert hashlib.sha256(got).digest() == hashlib.sha256(files.segment).digest()
    finally:
        rsm.close()


def test_rsm_fetch_killed_mid_stream_raises_retriable_and_a_retry_completes(
    server: list[Service], tmp_path: Path
) -> None:
    files = SegmentFactory(tmp_path / "segments").create(size=32 * MiB)
    partition = TopicIdPartition(Uuid.random(), "faults", 0)
    metadata = segment_metadata(partition, size=len(files.segment))
    rsm = rsm_for(server[0])
    try:
        rsm.copy_log_segment_data(metadata, files.data)
        stream = rsm.fetch_log_segment(metadata, 0)
        got = bytearray(stream.read(MiB))
        server[0].kill()
        with pytest.raises(RetriableRemoteStorageException):
            while chunk := stream.read(MiB):
                got += chunk
        stream.close()
        assert len(got) < len(files.segment)
        assert bytes(got) == files.segment[: len(got)], "bytes read before the kill differ"

        server[0] = restart(server[0])
        assert read_stream(rsm.fetch_log_segment(metadata, 0)) == files.segment
    finally:
        rsm.close()
