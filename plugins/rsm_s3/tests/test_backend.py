"""What the backend conformance suite cannot know about S3: credentials, a missing bucket,
throttling, retried attempts, multipart aborts, checksums, storage classes. All against a real
SeaweedFS; nothing is mocked."""

from __future__ import annotations

import io
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
from _s3_support import PrivateServers, new_bucket_name, plugin_configs
from services._common import Service
from services.seaweedfs import create_bucket, limit_concurrent_requests
from tierlog_rsm_s3 import S3Backend, S3Config

from tierlog.conformance.backend_suite import RecordingObserver, StreamSource
from tierlog.spi import (
    ConfigError,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
)
from tierlog.storage.objectstore.backend import ObjectStoreThrottledError, UploadSettings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

MiB = 1 << 20
SMALL_PARTS = UploadSettings(part_size=5 * MiB, multipart_threshold=5 * MiB, parallelism=2)


@pytest.fixture
def make_backend(
    seaweedfs: Service,
) -> Iterator[Callable[..., S3Backend]]:
    """Builds backends on the session's server (``bucket``, extra keys, observer); all closed
    at teardown."""
    made: list[S3Backend] = []

    def make(
        bucket: str,
        *,
        service: Service | None = None,
        observer: RecordingObserver | None = None,
        upload: UploadSettings = SMALL_PARTS,
        **extra: str,
    ) -> S3Backend:
        configs = plugin_configs(service or seaweedfs, bucket, **extra)
        backend = S3Backend(S3Config.from_configs(configs), upload, observer or RecordingObserver())
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


def _message(error: BaseException) -> str:
    return str(error)


# A missing bucket ---------------------------------------------------------------------------
def test_missing_bucket_message_names_bucket_and_key(
    make_backend: Callable[..., S3Backend],
) -> None:
    name = new_bucket_name()
    backend = make_backend(name)
    with pytest.raises(RemoteStorageException) as raised:
        backend.check_access()
    error = raised.value
    assert not isinstance(error, RetriableRemoteStorageException | RemoteResourceNotFoundException)
    assert f"bucket {name} does not exist: create it or fix rsm.config.s3.bucket.name" in str(error)


@pytest.mark.parametrize("operation", ["upload", "get", "delete", "list"])
def test_missing_bucket_on_each_operation_is_not_a_missing_object(
    make_backend: Callable[..., S3Backend], operation: str
) -> None:
    """S3 answers ``NoSuchBucket`` (404) to object requests in a missing bucket: that must not
    read as a missing segment (``RemoteResourceNotFoundException``), or the RLM would treat
    every segment as deleted."""
    name = new_bucket_name()
    backend = make_backend(name)
    actions: dict[str, Callable[[], object]] = {
        "upload": lambda: backend.upload("k", io.BytesIO(b"x"), 1),
        "get": lambda: backend.get("k").read(),
        "delete": lambda: backend.delete(["k"]),
        "list": lambda: list(backend.list("")),
    }
    with pytest.raises(RemoteStorageException) as raised:
        actions[operation]()
    assert not isinstance(raised.value, RemoteResourceNotFoundException)
    assert f"bucket {name} does not exist" in str(raised.value)


# Credentials --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("access_key", "secret"),
    [("tierlog-test-access", "wrong-secret-value-123"), ("NO-SUCH-KEY", "wrong-secret-value-123")],
    ids=["wrong-secret", "unknown-key"],
)
def test_refused_credentials_name_the_bucket_and_keys_never_the_secret(
    make_backend: Callable[..., S3Backend], shared_bucket: str, access_key: str, secret: str
) -> None:
    """SeaweedFS runs with one S3 identity, so wrong keys are refused as on AWS (403
    ``SignatureDoesNotMatch``/``InvalidAccessKeyId``; a bare 403 for HEAD)."""
    backend = make_backend(
        shared_bucket,
        **{"aws.access.key.id": access_key, "aws.secret.access.key": secret},
    )
    for action in (
        backend.check_access,
        lambda: backend.upload("k", io.BytesIO(b"x"), 1),
        lambda: backend.get("k"),
    ):
        with pytest.raises(RemoteStorageException) as raised:
            action()
        message = str(raised.value)
        assert not isinstance(raised.value, RetriableRemoteStorageException)
        assert shared_bucket in message
        assert "rsm.config.aws.access.key.id and rsm.config.aws.secret.access.key" in message
        assert secret not in message
        assert secret not in repr(backend)


def test_default_credential_chain_is_used_without_keys(
    seaweedfs: Service, shared_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``aws.access.key.id``, boto3's chain (here: the environment) supplies keys."""
    configs = plugin_configs(seaweedfs, shared_bucket)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", configs.pop("aws.access.key.id"))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", configs.pop("aws.secret.access.key"))
    with S3Backend(S3Config.from_configs(configs)) as backend:
        backend.check_access()
        backend.upload("chain/object", io.BytesIO(b"via the chain"), 13)
        assert backend.get("chain/object").read() == b"via the chain"


def test_no_credentials_anywhere_says_where_to_put_them(
    seaweedfs: Service, shared_bucket: str, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    configs = plugin_configs(seaweedfs, shared_bucket)
    del configs["aws.access.key.id"], configs["aws.secret.access.key"]
    for variable in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with (
        S3Backend(S3Config.from_configs(configs)) as backend,
        pytest.raises(RemoteStorageException) as raised,
    ):
        backend.check_access()
    message = str(raised.value)
    assert "no usable AWS credentials" in message
    assert "default chain" in message and "rsm.config.aws.access.key.id" in message


def test_credentials_are_never_logged(
    make_backend: Callable[..., S3Backend],
    shared_bucket: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Even botocore's debug logging of a failed request (headers, signatures) must not carry
    the secret: botocore signs with it, it never sends it."""
    secret = "a-very-recognisable-secret-0123456789"
    caplog.set_level(logging.DEBUG)
    backend = make_backend(shared_bucket, **{"aws.secret.access.key": secret})
    with pytest.raises(RemoteStorageException):
        backend.check_access()
    assert caplog.records, "debug logging captured nothing: the test would prove nothing"
    assert secret not in caplog.text


# Ranges -------------------------------------------------------------------------------------
def test_get_of_an_empty_object(make_backend: Callable[..., S3Backend], shared_bucket: str) -> None:
    """S3 answers 416 to any range of an empty object: every read of it is empty."""
    backend = make_backend(shared_bucket)
    backend.upload("empty/object", io.BytesIO(b""), 0)
    assert backend.get("empty/object").read() == b""
    assert backend.get("empty/object", 0, 10).read() == b""
    assert backend.get("empty/object", 5).read() == b""


# Uploads ------------------------------------------------------------------------------------
def test_failed_multipart_upload_is_aborted(
    make_backend: Callable[..., S3Backend], bucket: str, s3_admin: S3Client
) -> None:
    """S3 keeps the parts of an abandoned multipart upload (and bills them) until it is
    aborted: a failed upload must abort, leaving no upload in progress."""
    backend = make_backend(bucket)
    source = StreamSource(20 * MiB, seed=1, fail_after=12 * MiB)
    with pytest.raises(OSError, match="injected failure"):
        backend.upload("aborted/object", source, 20 * MiB)  # type: ignore[arg-type]
    uploads = s3_admin.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert uploads == [], f"multipart uploads left in progress: {uploads}"
    assert backend.head("aborted/object") is None


@pytest.mark.parametrize("announced", [3 * MiB, 12 * MiB], ids=["single-put", "multipart"])
def test_source_shorter_than_announced_stores_nothing(
    make_backend: Callable[..., S3Backend], shared_bucket: str, announced: int
) -> None:
    """A segment file truncated under the RSM's feet must not be stored as if complete."""
    backend = make_backend(shared_bucket)
    key = f"short/{announced}"
    with pytest.raises(RemoteStorageException, match="announced; nothing was stored"):
        backend.upload(key, io.BytesIO(b"x" * (announced - 100)), announced)
    assert backend.head(key) is None


def test_source_longer_than_announced_stores_nothing(
    make_backend: Callable[..., S3Backend], shared_bucket: str
) -> None:
    backend = make_backend(shared_bucket)
    with pytest.raises(RemoteStorageException, match="has more than"):
        backend.upload("long/object", io.BytesIO(b"x" * 1001), 1000)
    assert backend.head("long/object") is None


def test_multipart_upload_sends_each_part_once(
    make_backend: Callable[..., S3Backend], shared_bucket: str
) -> None:
    observer = RecordingObserver()
    backend = make_backend(shared_bucket, observer=observer)
    size = 17 * MiB + 3
    data = StreamSource.generated(size, seed=3)
    backend.upload("parts/object", io.BytesIO(data), size)
    requests = observer.take()
    parts = [r for r in requests if r.operation == "upload_part"]
    # Parts run in parallel: they report in the order they finish.
    assert sorted(r.bytes_sent for r in parts) == [2 * MiB + 3, 5 * MiB, 5 * MiB, 5 * MiB]
    assert [r.operation for r in requests if r.operation != "upload_part"] == [
        "upload",
        "complete_upload",
    ]
    assert (
        backend.get("parts/object", 5 * MiB - 2, 5 * MiB + 1).read()
        == data[5 * MiB - 2 : 5 * MiB + 2]
    )


def test_unknown_size_that_fits_in_one_part_is_one_put(
    make_backend: Callable[..., S3Backend], shared_bucket: str
) -> None:
    observer = RecordingObserver()
    backend = make_backend(shared_bucket, observer=observer)
    backend.upload("one-put/object", io.BytesIO(b"y" * 4000), None)
    assert [(r.operation, r.bytes_sent) for r in observer.take()] == [("upload", 4000)]


def test_checksums_enabled_round_trip(
    make_backend: Callable[..., S3Backend], shared_bucket: str
) -> None:
    """With ``aws.checksum.check.enabled`` every part carries a CRC32 and the completed
    upload lists them."""
    backend = make_backend(shared_bucket, **{"aws.checksum.check.enabled": "true"})
    size = 11 * MiB
    data = StreamSource.generated(size, seed=4)
    backend.upload("checksums/object", io.BytesIO(data), size)
    backend.upload("checksums/small", io.BytesIO(data[:1000]), 1000)
    assert backend.get("checksums/object").read() == data
    assert backend.get("checksums/small").read() == data[:1000]


@pytest.mark.parametrize("streamed", [False, True], ids=["in-place", "streamed"])
@pytest.mark.parametrize("checksums", [False, True], ids=["no-checksum", "checksum"])
def test_part_bodies_in_place_or_streamed_round_trip(
    make_backend: Callable[..., S3Backend], shared_bucket: str, streamed: bool, checksums: bool
) -> None:
    """A part goes as its buffer, or, over TLS with checksums on (where botocore would copy a
    bytearray whole into the BytesIO of its aws-chunked trailer), as a stream over it: both
    store the same bytes, multipart and single-request."""
    backend = make_backend(
        shared_bucket, **{"aws.checksum.check.enabled": "true" if checksums else "false"}
    )
    backend._stream_bodies = streamed  # SeaweedFS speaks plain HTTP: force the TLS choice
    data = StreamSource.generated(11 * MiB + 5, seed=6)
    prefix = f"bodies/{streamed}-{checksums}"
    backend.upload(f"{prefix}/known", io.BytesIO(data), len(data))
    backend.upload(f"{prefix}/unknown", StreamSource(len(data), data=data), None)  # type: ignore[arg-type]
    backend.upload(f"{prefix}/one-part", io.BytesIO(data[:4000]), None)
    assert backend.get(f"{prefix}/known").read() == data
    assert backend.get(f"{prefix}/unknown").read() == data
    assert backend.get(f"{prefix}/one-part").read() == data[:4000]


@pytest.mark.parametrize(
    ("endpoint", "checksums", "streamed"),
    [
        (None, "true", True),  # AWS: TLS
        ("https://s3.example.com", "true", True),
        ("https://s3.example.com", "false", False),
        ("http://127.0.0.1:9000", "true", False),
    ],
)
def test_parts_are_streamed_only_where_botocore_would_copy_them(
    endpoint: str | None, checksums: str, streamed: bool
) -> None:
    configs = {
        "s3.bucket.name": "any-bucket",
        "s3.region": "us-east-1",
        "aws.access.key.id": "id",
        "aws.secret.access.key": "secret",
        "aws.checksum.check.enabled": checksums,
    }
    if endpoint is not None:
        configs["s3.endpoint.url"] = endpoint
    with S3Backend(S3Config.from_configs(configs)) as backend:  # no request is made
        assert backend._stream_bodies is streamed


def test_a_part_stream_frames_like_the_bytes_it_wraps() -> None:
    """botocore's aws-chunked wrapper (TLS with checksums) reads the stream as it reads a
    BytesIO of the same bytes, and rewinds it for a retry."""
    from botocore.httpchecksum import AwsChunkedWrapper, Crc32Checksum
    from tierlog_rsm_s3._backend import _PartStream

    data = bytearray(StreamSource.generated(3 * MiB + 17, seed=8))

    def framed(body: object) -> bytes:
        wrapper = AwsChunkedWrapper(
            body, checksum_cls=Crc32Checksum, checksum_name="x-amz-checksum-crc32"
        )
        out = wrapper.read()
        wrapper.seek(0)
        assert wrapper.read() == out
        return out

    stream = _PartStream(data)
    assert framed(stream) == framed(io.BytesIO(bytes(data)))
    stream.seek(5)
    assert stream.tell() == 5
    assert stream.read(3) == data[5:8]
    assert stream.seek(0, io.SEEK_END) == len(data)
    assert stream.read() == b""
    stream.seek(len(data) - 4)
    into = bytearray(10)
    assert stream.readinto(into) == 4 and into[:4] == data[-4:]
    assert stream.readinto(into) == 0
    stream.seek(1)
    buffered = io.BufferedReader(stream, buffer_size=1000)  # readinto under a buffered reader
    assert buffered.read() == data[1:]


def test_storage_class_is_validated_and_applied(
    make_backend: Callable[..., S3Backend], shared_bucket: str, s3_admin: S3Client
) -> None:
    with pytest.raises(ConfigError, match=r"rsm\.config\.s3\.storage\.class must be one of"):
        make_backend(shared_bucket, **{"s3.storage.class": "COLD_STORAGE"})
    backend = make_backend(shared_bucket, **{"s3.storage.class": "STANDARD_IA"})
    backend.upload("class/object", io.BytesIO(b"z" * 10), 10)
    head = s3_admin.head_object(Bucket=shared_bucket, Key="class/object")
    assert head.get("StorageClass") == "STANDARD_IA"


def test_delete_beyond_one_batch_and_missing_keys(
    make_backend: Callable[..., S3Backend], bucket: str, s3_admin: S3Client
) -> None:
    """``DeleteObjects`` takes 1000 keys: 2300 keys (some never written) take three requests
    and delete everything."""
    observer = RecordingObserver()
    backend = make_backend(bucket, observer=observer)
    written = [f"many/{i:05d}" for i in range(0, 2300, 10)]
    for key in written:
        s3_admin.put_object(Bucket=bucket, Key=key, Body=b"1")
    observer.take()
    backend.delete([f"many/{i:05d}" for i in range(2300)])
    deletes = [r for r in observer.take() if r.operation == "delete"]
    assert [r.outcome for r in deletes] == ["ok", "ok", "ok"]
    assert s3_admin.list_objects_v2(Bucket=bucket).get("KeyCount") == 0


# Throttling and retries ---------------------------------------------------------------------
def test_throttling_is_retried_counted_and_raised(
    private_seaweedfs: PrivateServers, make_backend: Callable[..., S3Backend]
) -> None:
    """SeaweedFS's circuit breaker refuses a second simultaneous GET with 503: botocore retries
    it ``s3.max.attempts`` times, each attempt is reported as ``throttled``, and then the
    retriable ``ObjectStoreThrottledError`` is raised. Once the first GET is done, a retry
    succeeds. The gateway learns the breaker from the filer a moment after ``weed shell`` sets
    it: until then a second GET still succeeds, so the test waits (with a deadline) for the
    first refused one."""
    service = private_seaweedfs()
    name = new_bucket_name()
    create_bucket(service, name)
    observer = RecordingObserver()
    backend = make_backend(name, service=service, observer=observer, **{"s3.max.attempts": "2"})
    size = 24 * MiB  # far more than socket buffers: the first GET stays open while unread
    backend.upload("hot/object", io.BytesIO(bytes(size)), size)
    limit_concurrent_requests(service, "Read", 1)
    observer.take()
    first = backend.get("hot/object")
    assert first.read(10) == bytes(10)
    deadline = time.monotonic() + 60
    while True:
        observer.take()
        try:
            backend.get("hot/object").close()
        except ObjectStoreThrottledError as e:
            assert "throttled get of s3://" in str(e)
            break
        assert time.monotonic() < deadline, "the gateway never applied the circuit breaker"
        time.sleep(0.1)
    throttled = [r for r in observer.take() if r.operation == "get"]
    assert [r.outcome for r in throttled] == ["throttled", "throttled"]
    assert len(first.read()) == size - 10
    first.close()
    assert [r.outcome for r in observer.take()] == ["ok"]
    with backend.get("hot/object", 0, 99) as again:
        assert again.read() == bytes(100)


def test_every_attempt_against_a_dead_server_is_reported(
    private_seaweedfs: PrivateServers, make_backend: Callable[..., S3Backend]
) -> None:
    """Connection failures are retried by botocore; each attempt is one reported error, and
    the call raises the retriable error naming the object."""
    service = private_seaweedfs()
    observer = RecordingObserver()
    backend = make_backend(
        new_bucket_name(),
        service=service,
        observer=observer,
        **{"s3.max.attempts": "3", "s3.api.call.attempt.timeout": "2000"},
    )
    service.kill()
    with pytest.raises(RetriableRemoteStorageException, match="get of s3://"):
        backend.get("any/object")
    assert [(r.operation, r.outcome) for r in observer.take()] == [("get", "error")] * 3


# Concurrency --------------------------------------------------------------------------------
def test_backend_is_shared_by_threads(
    make_backend: Callable[..., S3Backend], shared_bucket: str
) -> None:
    """One client serves concurrent multipart uploads and gets (the RLM's thread pools)."""
    backend = make_backend(shared_bucket)
    datas = [StreamSource.generated(6 * MiB + i, seed=i) for i in range(4)]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            backend.upload(f"threads/{i}", io.BytesIO(datas[i]), None)
            assert backend.get(f"threads/{i}").read() == datas[i]
        except BaseException as error:  # collected for the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
