"""The ``s3`` RSM as a broker uses it: found by name, configured, failing loudly at start-up,
surviving a server that dies mid-upload or mid-fetch, and uploading with bounded memory."""

from __future__ import annotations

import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest
from _s3_support import PrivateServers, new_bucket_name, plugin_configs, write_keyring
from services._common import Service
from services.seaweedfs import create_bucket, s3_client
from tierlog_rsm_s3 import S3RemoteStorageManager

from tierlog.conformance.faults import UploadPause
from tierlog.conformance.rsm_suite import SegmentFactory, read_stream, segment_metadata
from tierlog.spi import (
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
    TopicIdPartition,
    Uuid,
)
from tierlog.spi.plugins import get_registry

if TYPE_CHECKING:
    from tierlog.spi import RemoteLogSegmentMetadata

MiB = 1 << 20
DEADLINE_S = 120.0
T = TypeVar("T")
"""How long a test waits for a copy or a read before it fails: only a hung one takes this."""
TRANSFORMS = {
    "plain": {},
    "compressed-encrypted": {"compression.enabled": "true", "encryption.enabled": "true"},
}


@pytest.fixture
def make_rsm(tmp_path: Path) -> Iterator[Callable[..., S3RemoteStorageManager]]:
    """Configured RSMs on a server and bucket; closed at teardown."""
    made: list[S3RemoteStorageManager] = []

    def make(
        service: Service, bucket: str, *, rsm: S3RemoteStorageManager | None = None, **extra: str
    ) -> S3RemoteStorageManager:
        """``rsm`` (default: a new ``S3RemoteStorageManager``) configured for ``bucket``."""
        configs = plugin_configs(
            service,
            bucket,
            **{
                "upload.part.size": str(5 * MiB),
                "upload.parallelism": "2",
                "chunk.size": str(MiB),
                **extra,
            },
        )
        if configs.get("encryption.enabled") == "true":
            configs["encryption.key.file"] = str(write_keyring(tmp_path))
        rsm = rsm if rsm is not None else S3RemoteStorageManager()
        made.append(rsm)
        rsm.configure(configs)
        return rsm

    yield make
    for rsm in made:
        rsm.close()


@pytest.fixture
def segments(tmp_path: Path) -> SegmentFactory:
    return SegmentFactory(tmp_path / "segments")


def _metadata(size: int) -> RemoteLogSegmentMetadata:
    return segment_metadata(TopicIdPartition(Uuid.random(), "faults", 0), size=size)


# Discovery and start-up ---------------------------------------------------------------------
def test_registered_as_s3() -> None:
    assert get_registry().storage_manager_class("s3") is S3RemoteStorageManager


def test_configure_fails_on_a_missing_bucket(
    seaweedfs: Service, make_rsm: Callable[..., S3RemoteStorageManager]
) -> None:
    name = new_bucket_name()
    with pytest.raises(RemoteStorageException, match=f"bucket {name} does not exist"):
        make_rsm(seaweedfs, name)


def test_configure_fails_on_refused_credentials(
    seaweedfs: Service, shared_bucket: str, make_rsm: Callable[..., S3RemoteStorageManager]
) -> None:
    secret = "not-the-secret-at-all-42"
    with pytest.raises(RemoteStorageException) as raised:
        make_rsm(seaweedfs, shared_bucket, **{"aws.secret.access.key": secret})
    assert shared_bucket in str(raised.value)
    assert "rsm.config.aws.secret.access.key" in str(raised.value)
    assert secret not in str(raised.value)


def test_requests_reach_the_rsm_metrics(
    seaweedfs: Service,
    shared_bucket: str,
    make_rsm: Callable[..., S3RemoteStorageManager],
    segments: SegmentFactory,
) -> None:
    """The backend reports to the RSM's metrics: ``backend="s3"``, each part counted."""
    rsm = make_rsm(seaweedfs, shared_bucket, **{"key.prefix": f"{Uuid.random()}/"})
    files = segments.create(size=11 * MiB)
    metadata = _metadata(len(files.segment))
    rsm.copy_log_segment_data(metadata, files.data)
    assert read_stream(rsm.fetch_log_segment(metadata, 100, 199)) == files.segment[100:200]
    snapshot = rsm.metrics.snapshot()
    assert snapshot.count("upload_part", "ok") == 3
    assert snapshot.bytes_sent["upload_part"] == 11 * MiB
    assert snapshot.count("get", "ok") >= 1
    assert b'backend="s3"' in rsm.expose()


def _once_serving(action: Callable[[], T]) -> T:
    """``action()``, repeated while it fails with the retriable error, up to ``DEADLINE_S``.

    A restarted SeaweedFS answers S3 requests before its volume server has rejoined, and
    meanwhile fails them with ``InternalError`` (retriable, as the RLM treats it: it retries
    the copy or fetch). The property a restart test checks is what happens once the server
    serves data again, so it waits for that instead of racing the server's start-up.
    """
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            return action()
        except RetriableRemoteStorageException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# Faults -------------------------------------------------------------------------------------
def test_server_killed_mid_upload_then_retry_completes(
    private_seaweedfs: PrivateServers,
    make_rsm: Callable[..., S3RemoteStorageManager],
    segments: SegmentFactory,
) -> None:
    """SIGKILL the server while a segment's multipart upload is under way: the copy raises the
    retriable error; after a restart nothing of the segment is readable (no manifest, no
    segment), and a retry of the same copy completes and reads back whole.

    Run with both transforms (a compressed, encrypted stream of unknown size, the longer
    path); a failed known-size multipart upload is covered by the backend tests
    (``test_failed_multipart_upload_is_aborted``, the suite's failed-upload tests)."""
    transform = "compressed-encrypted"
    service = private_seaweedfs()
    bucket = new_bucket_name()
    create_bucket(service, bucket)
    # The first 5 MiB part read, the multipart upload is created; the source then stops 1 MiB
    # into the second part until the server is dead.
    pause = UploadPause(at=6 * MiB)
    rsm = make_rsm(
        service,
        bucket,
        rsm=pause.pause_uploads(S3RemoteStorageManager()),
        **{
            # A server that died mid-write may take seconds to accept writes again after its
            # restart (volume recovery): give attempts time; a refused connection fails fast.
            "s3.max.attempts": "2",
            "s3.api.call.attempt.timeout": "20000",
            **TRANSFORMS[transform],
        },
    )
    files = segments.create(size=24 * MiB)
    metadata = _metadata(len(files.segment))
    admin = s3_client(service)
    failure: list[BaseException] = []

    def copy() -> None:
        try:
            rsm.copy_log_segment_data(metadata, files.data)
        except BaseException as error:  # examined by the test thread
            failure.append(error)

    thread = threading.Thread(target=copy)
    thread.start()
    try:
        assert pause.paused.wait(DEADLINE_S), f"the copy never read {pause.at} bytes: {failure}"
        assert admin.list_multipart_uploads(Bucket=bucket).get("Uploads"), (
            "no multipart upload under way at the pause"
        )
        service.kill()
    finally:
        pause.resume()
    thread.join(DEADLINE_S)
    assert not thread.is_alive()
    assert failure, "the copy succeeded although the server was killed in the middle of it"
    assert isinstance(failure[0], RetriableRemoteStorageException), repr(failure[0])

    service = private_seaweedfs.restart(service)

    def nothing_was_published() -> None:
        with pytest.raises(RemoteResourceNotFoundException):
            read_stream(rsm.fetch_log_segment(metadata, 0))

    _once_serving(nothing_was_published)
    _once_serving(lambda: rsm.copy_log_segment_data(metadata, files.data))
    assert read_stream(rsm.fetch_log_segment(metadata, 0)) == files.segment


@pytest.mark.parametrize("transform", list(TRANSFORMS))
def test_server_killed_mid_fetch_then_retry_reads_whole(
    private_seaweedfs: PrivateServers,
    make_rsm: Callable[..., S3RemoteStorageManager],
    segments: SegmentFactory,
    transform: str,
) -> None:
    """SIGKILL the server while a fetch stream is being read: the read raises the retriable
    error (never a short segment); after a restart the same fetch reads back whole."""
    service = private_seaweedfs()
    bucket = new_bucket_name()
    create_bucket(service, bucket)
    rsm = make_rsm(
        service,
        bucket,
        **{
            "fetch.chunk.cache.size": "0",
            "s3.max.attempts": "2",
            "s3.api.call.attempt.timeout": "20000",
            **TRANSFORMS[transform],
        },
    )
    files = segments.create(size=32 * MiB)
    metadata = _metadata(len(files.segment))
    rsm.copy_log_segment_data(metadata, files.data)
    stream = rsm.fetch_log_segment(metadata, 0)
    got = stream.read(MiB)
    assert got == files.segment[:MiB]
    service.kill()
    with pytest.raises(RetriableRemoteStorageException):
        while chunk := stream.read(MiB):
            got += chunk
        pytest.fail(f"read {len(got)} bytes of {len(files.segment)} from a killed server")
    stream.close()
    service = private_seaweedfs.restart(service)
    assert _once_serving(lambda: read_stream(rsm.fetch_log_segment(metadata, 0))) == files.segment


# Memory -------------------------------------------------------------------------------------
@pytest.mark.parametrize("transform", list(TRANSFORMS))
def test_upload_memory_does_not_grow_with_the_segment(
    seaweedfs: Service,
    shared_bucket: str,
    make_rsm: Callable[..., S3RemoteStorageManager],
    segments: SegmentFactory,
    transform: str,
) -> None:
    """Copies of a 16 MiB and a 64 MiB segment peak at about the same Python memory, below
    part size x parallelism plus the transforms' chunks and slack (one part more would not
    fit): parts are streamed from disk (Aiven buffers them on the heap and grows with the
    segment)."""
    rsm = make_rsm(
        seaweedfs, shared_bucket, **{"key.prefix": f"{Uuid.random()}/", **TRANSFORMS[transform]}
    )
    peaks = {}
    for size in (16 * MiB, 64 * MiB):
        files, _ = segments.create_large(size)
        metadata = _metadata(size)
        tracemalloc.start()
        try:
            rsm.copy_log_segment_data(metadata, files.data)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        peaks[size] = peak
        segments.remove(files)
    bound = 5 * MiB * 2 + 2 * MiB + 2 * MiB
    assert max(peaks.values()) < bound, f"upload peaks {peaks} exceed {bound}"
    assert abs(peaks[64 * MiB] - peaks[16 * MiB]) < 4 * MiB, (
        f"upload memory grows with the segment: {peaks}"
    )
