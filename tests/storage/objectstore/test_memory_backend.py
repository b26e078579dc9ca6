"""``InMemoryBackend``: the backend contract (through the backend conformance suite) and its
fault injection, which the RSM tests rely on to prove failure handling."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from tierlog.conformance import ObjectStoreBackendCapabilities, ObjectStoreBackendSuite, Unsupported
from tierlog.conformance.backend_suite import RecordingObserver
from tierlog.spi import (
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
)
from tierlog.storage.objectstore import InMemoryBackend, ObjectStoreThrottledError, UploadSettings

KiB = 1 << 10
SMALL = UploadSettings(part_size=64 * KiB, multipart_threshold=64 * KiB, parallelism=2)


class TestInMemoryBackendConformance(ObjectStoreBackendSuite):
    capabilities = ObjectStoreBackendCapabilities(
        bounded_memory=Unsupported("the in-memory backend holds every object in Python memory"),
    )

    @pytest.fixture
    def upload_settings(self) -> UploadSettings:
        return SMALL

    @pytest.fixture
    def backend(
        self, upload_settings: UploadSettings, observer: RecordingObserver
    ) -> Iterator[InMemoryBackend]:
        backend = InMemoryBackend(upload_settings, observer)
        yield backend
        backend.close()

    @pytest.fixture
    def missing_bucket_backend(self, upload_settings: UploadSettings) -> InMemoryBackend:
        return InMemoryBackend(upload_settings, bucket="no-such-bucket", exists=False)


@pytest.fixture
def observer() -> RecordingObserver:
    return RecordingObserver()


@pytest.fixture
def backend(observer: RecordingObserver) -> InMemoryBackend:
    return InMemoryBackend(SMALL, observer)


def test_multipart_upload_reports_each_part_and_the_completion(
    backend: InMemoryBackend, observer: RecordingObserver
) -> None:
    backend.upload("k", io.BytesIO(b"x" * (150 * KiB)), None)
    ops = [r.operation for r in observer.requests]
    assert ops == ["upload_part", "upload_part", "upload_part", "complete_upload"]
    assert sum(r.bytes_sent for r in observer.requests) == 150 * KiB
    assert backend.objects["k"] == b"x" * (150 * KiB)


@pytest.mark.parametrize(
    ("kind", "error", "outcome"),
    [
        ("retriable", RetriableRemoteStorageException, "error"),
        ("throttle", ObjectStoreThrottledError, "throttled"),
        ("fatal", RemoteStorageException, "error"),
    ],
)
def test_the_nth_matching_request_fails_with_the_kind_asked(
    backend: InMemoryBackend, observer: RecordingObserver, kind: str, error: type, outcome: str
) -> None:
    backend.upload("k", io.BytesIO(b"abc"), 3)
    backend.fail(kind, "get", nth=2)  # type: ignore[arg-type]
    backend.get("k").close()
    with pytest.raises(error) as raised:
        backend.get("k")
    assert kind != "fatal" or not isinstance(raised.value, RetriableRemoteStorageException)
    assert observer.requests[-1].outcome == outcome
    assert backend.get("k").read() == b"abc", "a fault with times=1 fails one request only"


def test_a_fault_mid_upload_leaves_the_previous_object(backend: InMemoryBackend) -> None:
    backend.upload("k", io.BytesIO(b"old"), 3)
    backend.fail("retriable", "upload_part", nth=2)
    with pytest.raises(RetriableRemoteStorageException):
        backend.upload("k", io.BytesIO(b"n" * (200 * KiB)), None)
    assert backend.objects["k"] == b"old"


def test_a_fault_mid_get_raises_while_reading(backend: InMemoryBackend) -> None:
    backend.upload("k", io.BytesIO(b"z" * 10_000), 10_000)
    backend.fail("retriable", "get", after_bytes=4000)
    stream = backend.get("k")
    assert stream.read(4000) == b"z" * 4000
    with pytest.raises(RetriableRemoteStorageException, match="mid-read"):
        stream.read(1)


def test_missing_object_raises_not_found_and_is_observed(
    backend: InMemoryBackend, observer: RecordingObserver
) -> None:
    with pytest.raises(RemoteResourceNotFoundException):
        backend.get("nope")
    assert observer.requests[-1].outcome == "not_found"
