"""``AzureBackend`` on what is particular to Azure, against Azurite: staged blocks, one GET per
ranged read, resuming a cut body, batch deletes, and how throttling and server errors map.

Faults that Azurite never produces on its own (503 ServerBusy, 500, a body cut short) are
injected by ``FaultProxy``, a plain HTTP proxy in front of Azurite: every answer it does not
inject is Azurite's.
"""

from __future__ import annotations

import hashlib
import io
import socket
import tracemalloc
from collections.abc import Iterator

import pytest
from services._common import Service
from tierlog.conformance.backend_suite import RecordingObserver, StreamSource
from tierlog.spi import (
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
)
from tierlog.storage.objectstore.backend import ObjectStoreThrottledError, UploadSettings

from azure_helpers import (
    FORWARD,
    Answer,
    FaultProxy,
    MiB,
    Plan,
    admin_container,
    azure_configs,
    list_container,
)
from tierlog_rsm_azure import AzureBackend, AzureConfig
from tierlog_rsm_azure._transport import classify_request, outcome_of

UPLOAD = UploadSettings(part_size=5 * MiB, multipart_threshold=5 * MiB, parallelism=3)


def make_backend(
    where: Service | str,
    observer: RecordingObserver | None = None,
    upload: UploadSettings = UPLOAD,
    configs: dict[str, str] | None = None,
) -> AzureBackend:
    settings = AzureConfig.from_configs(azure_configs(where, **(configs or {})), upload)
    return AzureBackend(settings, upload, observer or RecordingObserver())


@pytest.fixture
def observer() -> RecordingObserver:
    return RecordingObserver()


@pytest.fixture
def backend(azurite: Service, observer: RecordingObserver) -> Iterator[AzureBackend]:
    with make_backend(azurite, observer, configs={"azure.upload.block.size": str(64 * 1024)}) as b:
        yield b


def operations(observer: RecordingObserver) -> list[tuple[str, str]]:
    return [(r.operation, r.outcome) for r in observer.take()]


# Uploads --------------------------------------------------------------------------------------
def test_staged_upload_commits_blocks_of_the_configured_size(
    backend: AzureBackend, azurite: Service, observer: RecordingObserver, key_prefix: str
) -> None:
    """Above the threshold, an upload is Put Block per ``azure.upload.block.size`` and one Put
    Block List: the committed blob is exactly those blocks, in order, with ids of one length."""
    size = 6 * MiB + 5
    key = f"{key_prefix}staged.log"
    source = StreamSource(size, seed=1)
    observer.take()
    backend.upload(key, source, size)  # type: ignore[arg-type]
    calls = operations(observer)
    blocks = -(-size // (64 * 1024))
    assert calls.count(("upload_part", "ok")) == blocks
    assert calls[-1] == ("complete_upload", "ok")
    assert ("upload", "ok") not in calls
    with admin_container(azurite) as container:
        committed = container.get_blob_client(key).get_block_list("committed")[0]
        data = container.download_blob(key).readall()
    assert [b.size for b in committed] == [64 * 1024] * (blocks - 1) + [size % (64 * 1024)]
    assert len({len(b.id) for b in committed}) == 1
    assert hashlib.sha256(data).digest() == source.sha256.digest()


@pytest.mark.parametrize("known_size", [True, False], ids=["known-size", "unknown-size"])
def test_a_small_upload_is_one_put_blob(
    backend: AzureBackend, observer: RecordingObserver, key_prefix: str, known_size: bool
) -> None:
    """Below the threshold, or of unknown size but shorter than one block: one request."""
    observer.take()
    backend.upload(f"{key_prefix}small.log", io.BytesIO(b"x" * 1000), 1000 if known_size else None)
    assert operations(observer) == [("upload", "ok")]


def test_upload_memory_is_bounded_by_blocks_in_flight(azurite: Service, key_prefix: str) -> None:
    """A 48 MiB stream of unknown size uploads holding at most ``parallelism`` blocks (the one
    being read is one of them, filled in place from the short reads), plus the source's own
    256 KiB reads and the SDK's bookkeeping: one block more would exceed the bound."""
    upload = UploadSettings(part_size=5 * MiB, multipart_threshold=MiB, parallelism=4)
    block = 2 * MiB
    source = StreamSource(48 * MiB, seed=3, max_read=256 * 1024)
    with make_backend(azurite, upload=upload, configs={"azure.upload.block.size": str(block)}) as b:
        tracemalloc.start()
        try:
            b.upload(f"{key_prefix}big.log", source, None)  # type: ignore[arg-type]
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < upload.parallelism * block + 3 * MiB // 2, f"peak {peak / MiB:.1f} MiB"
    assert list_container(azurite, key_prefix) == {f"{key_prefix}big.log": 48 * MiB}


def test_a_source_shorter_than_its_size_fails_and_leaves_nothing(
    backend: AzureBackend, azurite: Service, key_prefix: str
) -> None:
    key = f"{key_prefix}short.log"
    with pytest.raises(RemoteStorageException, match="ended after"):
        backend.upload(key, io.BytesIO(b"y" * (6 * MiB)), 7 * MiB)
    assert list_container(azurite, key_prefix) == {}


# Gets -----------------------------------------------------------------------------------------
def test_a_ranged_get_of_any_length_is_one_request(
    backend: AzureBackend, observer: RecordingObserver, key_prefix: str
) -> None:
    """The body streams from one GET, however long the range (the SDK's downloader would
    split it and buffer each piece whole)."""
    size = 12 * MiB
    data = StreamSource.generated(size, seed=4)
    key = f"{key_prefix}ranged.log"
    backend.upload(key, io.BytesIO(data), size)
    observer.take()
    with backend.get(key, 100, size - 101) as stream:
        got = stream.read()
    assert got == data[100 : size - 100]
    calls = observer.take()
    assert [(r.operation, r.outcome) for r in calls] == [("get", "ok")]
    assert calls[0].bytes_received == size - 200


def test_get_at_the_end_is_empty(backend: AzureBackend, key_prefix: str) -> None:
    """Azurite answers an empty 206 at the size and 416 past it; both are an empty stream."""
    key = f"{key_prefix}end.log"
    backend.upload(key, io.BytesIO(b"abc"), 3)
    for start in (3, 4, 100):
        with backend.get(key, start) as stream:
            assert stream.read() == b""


@pytest.fixture
def proxy(azurite: Service) -> Iterator[FaultProxy]:
    with FaultProxy(azurite) as p:
        yield p


def _cut_first_get(after: int, times: int = 1) -> Plan:
    left = [times]

    def plan(method: str, path: str) -> Answer:
        if method == "GET" and "comp=" not in path and left[0] > 0:
            left[0] -= 1
            return Answer("cut", cut_after=after)
        return FORWARD

    return plan


def test_a_body_cut_short_is_resumed(proxy: FaultProxy, azurite: Service, key_prefix: str) -> None:
    """A connection lost mid-body is resumed from where it stopped; the reader sees no gap."""
    size = 3 * MiB
    data = StreamSource.generated(size, seed=5)
    key = f"{key_prefix}resumed.log"
    with make_backend(proxy.url) as b:
        b.upload(key, io.BytesIO(data), size)
        # Past the first 1 MiB network read, so that the resume starts mid-range.
        proxy.plan = _cut_first_get(MiB + MiB // 2)
        with b.get(key, 10) as stream:
            got = stream.read()
    assert got == data[10:]
    gets = [r for r in proxy.requests if r[0] == "GET"]
    assert len(gets) == 2


def test_a_body_cut_short_again_and_again_raises_retriable(
    proxy: FaultProxy, key_prefix: str
) -> None:
    """Past ``azure.retry.total`` resumes the read fails as retriable, never ends early."""
    size = 2 * MiB
    data = StreamSource.generated(size, seed=6)
    key = f"{key_prefix}cut.log"
    with make_backend(proxy.url) as b:
        b.upload(key, io.BytesIO(data), size)
        proxy.plan = _cut_first_get(100_000, times=10)
        received = bytearray()
        with pytest.raises(RetriableRemoteStorageException), b.get(key) as stream:
            while chunk := stream.read(64 * 1024):
                received += chunk
    assert data.startswith(bytes(received))


def test_a_blob_replaced_before_a_resume_is_not_mixed(
    proxy: FaultProxy, azurite: Service, key_prefix: str
) -> None:
    """The resume asks for the same version (If-Match): a replaced blob fails the read as
    retriable instead of splicing two versions."""
    size = 4 * MiB
    key = f"{key_prefix}versioned.log"
    with make_backend(proxy.url) as b:
        b.upload(key, io.BytesIO(StreamSource.generated(size, seed=7)), size)
        # The body breaks after 2.5 MiB: the first read (one 1 MiB network read) gets through,
        # then the blob is replaced, then the body breaks and the resume must not splice.
        proxy.plan = _cut_first_get(2 * MiB + MiB // 2)
        stream = b.get(key)
        first = stream.read(100_000)
        assert first
        with admin_container(azurite) as container:
            container.upload_blob(key, StreamSource.generated(size, seed=8), overwrite=True)
        with pytest.raises(
            RetriableRemoteStorageException, match="replaced while it was being read"
        ):
            while stream.read(64 * 1024):
                pass
        stream.close()


# Deletes --------------------------------------------------------------------------------------
def test_deletes_are_one_batch_and_missing_blobs_are_fine(
    backend: AzureBackend, observer: RecordingObserver, azurite: Service, key_prefix: str
) -> None:
    keys = [f"{key_prefix}d{i}" for i in range(3)]
    for key in keys[:2]:
        backend.upload(key, io.BytesIO(b"1"), 1)
    observer.take()
    backend.delete([*keys, keys[0]])
    assert operations(observer) == [("delete", "ok")]
    assert list_container(azurite, key_prefix) == {}


def test_deletes_fall_back_to_one_by_one_without_blob_batch(
    proxy: FaultProxy, azurite: Service, key_prefix: str
) -> None:
    """An endpoint that refuses Blob Batch (400) still gets every blob deleted."""
    keys = [f"{key_prefix}d{i}" for i in range(3)]
    with make_backend(proxy.url) as b:
        for key in keys[:2]:
            b.upload(key, io.BytesIO(b"1"), 1)
        proxy.plan = lambda method, path: (
            Answer("status", 400, "InvalidQueryParameterValue")
            if method == "POST" and "comp=batch" in path
            else FORWARD
        )
        b.delete(keys)
    assert list_container(azurite, key_prefix) == {}
    assert sum(1 for m, _ in proxy.requests if m == "DELETE") == 3


def test_operations_on_a_missing_container_name_it(azurite: Service, key_prefix: str) -> None:
    """A container deleted under a running broker: every operation says which container is
    missing, and no read pretends a segment is missing."""
    with make_backend(azurite, configs={"azure.container.name": "gone-container"}) as b:
        for call in (
            lambda: b.get(f"{key_prefix}x"),
            lambda: b.head(f"{key_prefix}x"),
            lambda: b.delete([f"{key_prefix}x"]),
            lambda: b.delete([f"{key_prefix}x", f"{key_prefix}y"]),
            lambda: list(b.list(key_prefix)),
            lambda: b.upload(f"{key_prefix}x", io.BytesIO(b"1"), 1),
        ):
            with pytest.raises(RemoteStorageException) as raised:
                call()
            assert not isinstance(raised.value, RemoteResourceNotFoundException)
            assert "'gone-container' does not exist" in str(raised.value)


# Throttling and server errors -----------------------------------------------------------------
@pytest.mark.parametrize(("status", "code"), [(503, "ServerBusy"), (429, "TooManyRequests")])
def test_throttling_raises_the_throttled_error_and_is_counted(
    proxy: FaultProxy, observer: RecordingObserver, key_prefix: str, status: int, code: str
) -> None:
    proxy.plan = lambda _m, _p: Answer("status", status, code)
    with make_backend(proxy.url, observer) as b:
        observer.take()
        with pytest.raises(ObjectStoreThrottledError, match=code):
            b.head(f"{key_prefix}x")
    outcomes = {(r.operation, r.outcome) for r in observer.take()}
    assert outcomes == {("head", "throttled")}


def test_throttling_that_passes_is_retried_by_the_sdk(
    proxy: FaultProxy, observer: RecordingObserver, key_prefix: str
) -> None:
    """One 503 ServerBusy, then Azurite: the SDK's retry gets through, both are counted."""
    left = [1]

    def plan(method: str, path: str) -> Answer:
        if left[0]:
            left[0] -= 1
            return Answer("status", 503, "ServerBusy")
        return FORWARD

    with make_backend(proxy.url, observer) as b:
        observer.take()
        proxy.plan = plan
        assert b.head(f"{key_prefix}missing") is None
    assert operations(observer) == [("head", "throttled"), ("head", "not_found")]


def test_server_errors_raise_retriable(
    proxy: FaultProxy, observer: RecordingObserver, key_prefix: str
) -> None:
    proxy.plan = lambda _m, _p: Answer("status", 500, "InternalError")
    with make_backend(proxy.url, observer) as b:
        with pytest.raises(RetriableRemoteStorageException) as raised:
            b.get(f"{key_prefix}x")
        assert not isinstance(raised.value, ObjectStoreThrottledError)
    assert {(r.operation, r.outcome) for r in observer.take()} == {("get", "error")}


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_an_unreachable_endpoint_raises_retriable() -> None:
    """Nothing listens on the port: connection refused, after the SDK's retries."""
    with make_backend(closed_port_url()) as b, pytest.raises(RetriableRemoteStorageException):
        b.check_access()


# Request classification -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "url", "operation"),
    [
        ("PUT", "http://h/a/c/k", "upload"),
        ("PUT", "http://h/a/c/k?comp=block&blockid=x", "upload_part"),
        ("PUT", "http://h/a/c/k?comp=blocklist", "complete_upload"),
        ("GET", "http://h/a/c/k", "get"),
        ("HEAD", "http://h/a/c/k", "head"),
        ("GET", "http://h/a/c?restype=container", "head"),
        ("GET", "http://h/a/c?restype=container&comp=list&prefix=p", "list"),
        ("DELETE", "http://h/a/c/k", "delete"),
        ("POST", "http://h/a/c?restype=container&comp=batch", "delete"),
    ],
)
def test_requests_are_classified_for_metrics(method: str, url: str, operation: str) -> None:
    assert classify_request(method, url) == operation


def test_outcomes() -> None:
    assert [outcome_of(s) for s in (200, 201, 202, 206, 404, 416, 429, 503, 500, 403)] == [
        "ok",
        "ok",
        "ok",
        "ok",
        "not_found",
        "ok",
        "throttled",
        "throttled",
        "error",
        "error",
    ]
