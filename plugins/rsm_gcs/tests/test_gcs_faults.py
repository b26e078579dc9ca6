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
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest
from google.api_core.retry import retry_base, retry_unary
from services._common import Service
from services.fake_gcs import start_fake_gcs
from tierlog.conformance.faults import UploadPause
from tierlog.conformance.rsm_suite import SegmentFactory, read_stream, segment_metadata
from tierlog.spi import (
    RemoteResourceNotFoundException,
    RetriableRemoteStorageException,
    TopicIdPartition,
    Uuid,
)
from tierlog.storage.objectstore.backend import (
    Operation,
    Outcome,
    RequestObserver,
    UploadSettings,
    null_observer,
)

from gcs_test_helpers import gcs_configs, list_bucket
from tierlog_rsm_gcs import GcsBackend, GcsConfig, GcsRemoteStorageManager

if TYPE_CHECKING:
    pass

MiB = 1 << 20
CHUNK = MiB
DEADLINE_S = 120
T = TypeVar("T")


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


def make_backend(
    service: Service,
    chunk: int = CHUNK,
    deadline_ms: int = 3000,
    observer: RequestObserver = null_observer,
) -> GcsBackend:
    configs = gcs_configs(
        service,
        **{
            "gcs.resumable.upload.chunk.size": str(chunk),
            "gcs.retry.deadline.ms": str(deadline_ms),
        },
    )
    upload = UploadSettings(chunk, chunk, 1)
    return GcsBackend(GcsConfig.from_configs(configs, upload), upload, observer)


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
        # Three 1 MiB chunks sent, then the source stops 1000 bytes into the fourth.
        pause = UploadPause(at=3 * CHUNK + 1000)
        source = pause.wrap(io.BytesIO(data))
        upload = run_in_thread(lambda: backend.upload(key, source, len(data)))
        try:
            assert pause.paused.wait(DEADLINE_S), "the upload never reached the middle"
            assert not upload.done(), f"the upload ended at the pause: {upload.exception()}"
            server[0].kill()
        finally:
            pause.resume()
        with pytest.raises(RetriableRemoteStorageException):
            upload.result(DEADLINE_S)

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


class FakeRetryTime:
    """``time`` for google-api-core's retry loop (the only user of ``monotonic`` and
    ``sleep`` there): a clock that moves only when the loop sleeps, so a call's backoff is
    measured exactly, whatever the machine's speed."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_unreachable_server_raises_retriable(
    server: list[Service], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every call retries a refused connection (more than one attempt), sleeping at most
    ``gcs.retry.deadline.ms`` (1 s) in all before it gives up: the deadline configured is the
    one applied, on every path (the SDK's default would back off for up to 120 s). The retry
    loop's clock is fake, so this is exact on any machine."""
    fake = FakeRetryTime()
    monkeypatch.setattr(retry_unary, "time", fake)
    monkeypatch.setattr(retry_base, "time", fake)
    attempts: list[Operation] = []

    def observer(
        operation: Operation, *, outcome: Outcome, bytes_sent: int = 0, bytes_received: int = 0
    ) -> None:
        if outcome == "error":
            attempts.append(operation)

    backend = make_backend(server[0], deadline_ms=1000, observer=observer)
    try:
        server[0].kill()
        for name, action in (
            ("check_access", backend.check_access),
            ("get", lambda: read_stream(backend.get("faults/x"))),
            ("head", lambda: backend.head("faults/x")),
            ("delete", lambda: backend.delete(["faults/x"])),
            ("list", lambda: list(backend.list("faults/"))),
            ("upload", lambda: backend.upload("faults/x", io.BytesIO(b"abc"), 3)),
        ):
            attempts.clear()
            fake.slept.clear()
            started = fake.now
            with pytest.raises(RetriableRemoteStorageException):
                action()
            assert len(attempts) >= 2, f"{name}: {attempts} (no retry)"
            assert len(fake.slept) == len(attempts) - 1, f"{name}: a backoff between attempts"
            assert 0 < fake.now - started <= 1.0, f"{name}: backed off {fake.now - started} s"
    finally:
        backend.close()


# The RSM ------------------------------------------------------------------------------------
def rsm_for(
    service: Service, rsm: GcsRemoteStorageManager | None = None
) -> GcsRemoteStorageManager:
    rsm = rsm or GcsRemoteStorageManager()
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
    # The log's first 5 MiB chunk sent, its source stops 1 MiB into the second until the
    # server is dead: the resumable upload is certainly under way when it dies.
    pause = UploadPause(at=6 * MiB)
    rsm = rsm_for(server[0], pause.pause_uploads(GcsRemoteStorageManager()))
    try:
        copy = run_in_thread(lambda: rsm.copy_log_segment_data(metadata, files.data))
        try:
            assert pause.paused.wait(DEADLINE_S), f"the copy never read 6 MiB: {copy}"
            assert not copy.done(), f"the copy ended at the pause: {copy.exception()}"
            snapshot = rsm.metrics.snapshot()
            assert snapshot.count("upload", "ok") == 1, "no resumable session at the pause"
            assert snapshot.count("upload_part", "ok") >= 1, "no chunk sent before the pause"
            server[0].kill()
        finally:
            pause.resume()
        with pytest.raises(RetriableRemoteStorageException):
            copy.result(DEADLINE_S)

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
