"""Azurite killed (SIGKILL) mid-upload and mid-fetch: the plugin raises the retriable error,
nothing partial is ever read back, and once the server is back on the same directory and port
the retry completes.

The tests share an Azurite of their own (never the session's), which they kill and restart.
Azurite saves its metadata every 5 s and on SIGTERM, so what must survive a kill (the
container, a segment to fetch) is persisted with a SIGTERM restart first (``persist``): real
Azure is durable, the emulator is not.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from services._common import Service
from services.azurite import create_container, start_azurite
from tierlog.conformance.backend_suite import StreamSource
from tierlog.conformance.faults import UploadPause as BasePause
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
)

from azure_helpers import (
    CONTAINER,
    MiB,
    azure_configs,
    list_container,
    persist,
    read_blob,
    require_azurite,
)
from tierlog_rsm_azure import AzureBackend, AzureConfig, AzureRemoteStorageManager

if TYPE_CHECKING:
    pass

DEADLINE_S = 120


class Restartable:
    """The fault tests' Azurite, restarted in place (same directory and port) after a kill."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def restart(self) -> None:
        self.service = start_azurite(
            self.service.directory, port=int(str(self.service.extra["port"]))
        )


@pytest.fixture(scope="module")
def fault_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Restartable]:
    require_azurite()
    service = start_azurite(tmp_path_factory.mktemp("fault-azurite"))
    create_container(service, CONTAINER)
    holder = Restartable(persist(service))
    yield holder
    holder.service.stop()


@pytest.fixture
def server(fault_server: Restartable) -> Restartable:
    """The fault tests' Azurite, running (a previous test may have left it killed)."""
    if fault_server.service.process.poll() is not None:
        fault_server.restart()
    return fault_server


def test_kill_mid_staged_upload(server: Restartable, key_prefix: str) -> None:
    """SIGKILL after a few blocks are staged: ``upload`` raises the retriable error, no blob
    exists after the restart (staged blocks are invisible), and the retry succeeds."""
    staged = 0
    lock = threading.Lock()

    def observer(
        operation: Operation, *, outcome: Outcome, bytes_sent: int = 0, bytes_received: int = 0
    ) -> None:
        nonlocal staged
        if operation == "upload_part" and outcome == "ok":
            with lock:
                staged += 1
                if staged == 4:
                    server.service.kill()

    upload = UploadSettings(part_size=5 * MiB, multipart_threshold=MiB, parallelism=2)
    configs = azure_configs(server.service, **{"azure.upload.block.size": str(256 * 1024)})
    key = f"{key_prefix}killed.log"
    size = 8 * MiB
    with AzureBackend(AzureConfig.from_configs(configs, upload), upload, observer) as backend:
        with pytest.raises(RetriableRemoteStorageException):
            backend.upload(key, StreamSource(size, seed=1), size)  # type: ignore[arg-type]
        assert staged >= 4
        server.restart()
        assert backend.head(key) is None
        with pytest.raises(RemoteResourceNotFoundException):
            backend.get(key)
        assert list_container(server.service, key_prefix) == {}

        source = StreamSource(size, seed=2)
        backend.upload(key, source, size)  # type: ignore[arg-type]
    assert hashlib.sha256(read_blob(server.service, key)).digest() == source.sha256.digest()


def _rsm(
    service: Service,
    key_prefix: str,
    rsm: AzureRemoteStorageManager | None = None,
    **extra: str,
) -> AzureRemoteStorageManager:
    rsm = rsm or AzureRemoteStorageManager()
    rsm.configure(
        azure_configs(
            service, **{"key.prefix": key_prefix, "upload.part.size": str(5 * MiB), **extra}
        )
    )
    return rsm


class UploadPause(BasePause):
    """``tierlog.conformance.faults.UploadPause`` plus ``staged``, set once a block of the
    paused upload is staged."""

    def __init__(self, at: int) -> None:
        super().__init__(at, resume_timeout_s=DEADLINE_S)
        self.staged = threading.Event()

    def observe(self, observer: RequestObserver) -> RequestObserver:
        def observed(
            operation: Operation,
            *,
            outcome: Outcome,
            bytes_sent: int = 0,
            bytes_received: int = 0,
        ) -> None:
            observer(
                operation, outcome=outcome, bytes_sent=bytes_sent, bytes_received=bytes_received
            )
            if operation == "upload_part" and outcome == "ok":
                self.staged.set()

        return observed


def test_kill_mid_copy_then_retry(server: Restartable, tmp_path: Path, key_prefix: str) -> None:
    """A copy killed mid-upload raises retriable; after the restart the segment does not
    exist (no manifest, no data object), and the retried copy reads back whole."""
    factory = SegmentFactory(tmp_path / "segments")
    size = 12 * MiB
    files = factory.create(size=size)
    metadata = segment_metadata(TopicIdPartition(Uuid.random(), "orders", 0), size=size)
    # The log's first 5 MiB block read (and staged), its source stops 1 MiB into the second
    # until the server is dead: the upload is certainly under way when it dies.
    pause = UploadPause(at=6 * MiB)
    rsm = _rsm(server.service, key_prefix, pause.pause_uploads(AzureRemoteStorageManager()))
    failure: list[BaseException] = []

    def copy() -> None:
        try:
            rsm.copy_log_segment_data(metadata, files.data)
        except BaseException as error:  # examined by the test thread
            failure.append(error)

    thread = threading.Thread(target=copy)
    try:
        thread.start()
        try:
            assert pause.paused.wait(DEADLINE_S), f"the copy never read 6 MiB: {failure}"
            assert pause.staged.wait(DEADLINE_S), "the first block was never staged"
            assert thread.is_alive(), f"the copy ended at the pause: {failure}"
            server.service.kill()
        finally:
            pause.resume()
        thread.join(DEADLINE_S)
        assert not thread.is_alive(), "the copy did not end after the server was killed"
        assert failure, "the copy succeeded although the server was killed in the middle of it"
        assert isinstance(failure[0], RetriableRemoteStorageException), repr(failure[0])

        server.restart()
        with pytest.raises(RemoteResourceNotFoundException):
            rsm.fetch_log_segment(metadata, 0)
        assert list_container(server.service, key_prefix) == {}

        rsm.copy_log_segment_data(metadata, files.data)
        assert read_stream(rsm.fetch_log_segment(metadata, 0)) == files.segment
    finally:
        rsm.close()


def test_kill_mid_fetch_then_retry(server: Restartable, tmp_path: Path, key_prefix: str) -> None:
    """A fetch whose server dies mid-body raises retriable instead of ending early (what was
    read is a true prefix); after the restart the same fetch reads the whole segment."""
    factory = SegmentFactory(tmp_path / "segments")
    size = 24 * MiB
    files = factory.create(size=size)
    metadata = segment_metadata(TopicIdPartition(Uuid.random(), "orders", 0), size=size)
    rsm = _rsm(server.service, key_prefix)
    try:
        rsm.copy_log_segment_data(metadata, files.data)
        server.service = persist(server.service)  # the segment must survive the SIGKILL

        stream = rsm.fetch_log_segment(metadata, 0)
        received = bytearray(stream.read(MiB))
        server.service.kill()
        with pytest.raises(RetriableRemoteStorageException):
            while chunk := stream.read(MiB):
                received += chunk
        stream.close()
        assert len(received) < size
        assert files.segment.startswith(bytes(received))

        server.restart()
        assert read_stream(rsm.fetch_log_segment(metadata, 0)) == files.segment
    finally:
        rsm.close()
