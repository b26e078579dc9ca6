"""Errors a user meets: a missing bucket, bad credentials, an unreachable store, and how each
GCS answer becomes a tierlog exception.

fake-gcs-server performs no authorization, so it never answers 401, 403 or 429; nor does it
fail with 5xx on demand. The last tests therefore give the backend's error mapping the
exceptions google-cloud-storage raises for those answers (built the way the SDK builds them
from a response), rather than provoking them on a server.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.api_core import exceptions as api_exceptions
from services._common import Service, free_ports
from tierlog.spi import (
    ConfigError,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
)
from tierlog.storage.objectstore.backend import ObjectStoreThrottledError, UploadSettings

from gcs_test_helpers import BUCKET, gcs_configs
from tierlog_rsm_gcs import GcsBackend, GcsConfig, GcsRemoteStorageManager


def configure(configs: dict[str, str]) -> GcsRemoteStorageManager:
    rsm = GcsRemoteStorageManager()
    try:
        rsm.configure(configs)
    except BaseException:
        rsm.close()
        raise
    return rsm


def test_missing_bucket_fails_configure_with_what_to_fix(fake_gcs: Service) -> None:
    with pytest.raises(RemoteStorageException) as raised:
        configure(gcs_configs(fake_gcs, **{"gcs.bucket.name": "no-such-bucket"}))
    error = raised.value
    assert not isinstance(error, RetriableRemoteStorageException | RemoteResourceNotFoundException)
    message = str(error)
    assert "bucket no-such-bucket does not exist" in message
    assert "rsm.config.gcs.bucket.name" in message
    assert "gcloud storage buckets create gs://no-such-bucket" in message


def test_missing_bucket_key_is_a_config_error(fake_gcs: Service) -> None:
    configs = gcs_configs(fake_gcs)
    del configs["gcs.bucket.name"]
    with pytest.raises(ConfigError, match=r"rsm\.config\.gcs\.bucket\.name is required"):
        configure(configs)


def test_a_misspelled_key_is_reported(fake_gcs: Service) -> None:
    rsm = configure(gcs_configs(fake_gcs, **{"gcs.resumable.upload.chunksize": "1"}))
    try:
        assert rsm.ignored_configs == ("gcs.resumable.upload.chunksize",)
    finally:
        rsm.close()


def test_missing_bucket_on_upload_and_listing(fake_gcs: Service) -> None:
    """After start-up (the bucket deleted under a running broker), uploads and listings still
    say which bucket is missing."""
    configs = gcs_configs(fake_gcs, **{"gcs.bucket.name": "vanished-bucket"})
    backend = GcsBackend(GcsConfig.from_configs(configs, UploadSettings(part_size=8 << 20)))
    try:
        for action in (
            lambda: backend.upload("k", _bytes(b"abc"), 3),
            lambda: list(backend.list("k")),
        ):
            with pytest.raises(RemoteStorageException, match="bucket vanished-bucket does not"):
                action()
    finally:
        backend.close()


def _bytes(data: bytes):  # type: ignore[no-untyped-def]
    import io

    return io.BytesIO(data)


@pytest.fixture
def service_account(fake_gcs: Service) -> Iterator[dict[str, str]]:
    """A well-formed service account key whose token endpoint refuses it (fake-gcs-server
    answers 404 on /token): what a revoked or mistyped key looks like to the client."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    yield {
        "type": "service_account",
        "project_id": "tierlog-test",
        "private_key_id": "0123456789abcdef",
        "private_key": pem,
        "client_email": "tierlog@tierlog-test.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": f"{fake_gcs.url}/token",
    }


def _secret_line(account: dict[str, str]) -> str:
    return account["private_key"].splitlines()[1]


def test_rejected_credentials_fail_configure_without_leaking_them(
    fake_gcs: Service,
    service_account: dict[str, str],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.DEBUG)
    for key, value in (
        ("gcs.credentials.json", json.dumps(service_account)),
        ("gcs.credentials.path", str(_write(tmp_path / "key.json", service_account))),
    ):
        configs = gcs_configs(fake_gcs, **{key: value})
        del configs["gcs.credentials.default"]
        with pytest.raises(RemoteStorageException) as raised:
            configure(configs)
        message = str(raised.value)
        assert not isinstance(raised.value, RetriableRemoteStorageException)
        assert f"gs://{BUCKET}" in message
        assert "could not obtain an access token" in message
        assert key in message
        assert _secret_line(service_account) not in message
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert _secret_line(service_account) not in logged


def _write(path: Path, content: dict[str, str]) -> Path:
    path.write_text(json.dumps(content))
    return path


def test_credentials_json_that_is_not_json_is_a_config_error(fake_gcs: Service) -> None:
    configs = gcs_configs(fake_gcs, **{"gcs.credentials.json": "not json TOPSECRET"})
    del configs["gcs.credentials.default"]
    with pytest.raises(ConfigError, match=r"gcs\.credentials\.json") as raised:
        configure(configs)
    assert "TOPSECRET" not in str(raised.value)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ({"type": "external_account"}, "GOOGLE_APPLICATION_CREDENTIALS"),
        ({"type": "service_account", "private_key": "TOPSECRET"}, "not a usable"),
    ],
)
def test_unusable_credentials_file_names_the_fix(
    fake_gcs: Service, tmp_path: Path, content: dict[str, str], says: str
) -> None:
    path = _write(tmp_path / "k.json", content)
    configs = gcs_configs(fake_gcs, **{"gcs.credentials.path": str(path)})
    del configs["gcs.credentials.default"]
    with pytest.raises(ConfigError, match=r"rsm\.config\.gcs\.credentials\.path") as raised:
        configure(configs)
    assert says in str(raised.value)
    assert "TOPSECRET" not in str(raised.value)


def test_no_application_default_credentials_names_the_fix(
    fake_gcs: Service, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without any credentials key, ADC is used; where there is none (no
    GOOGLE_APPLICATION_CREDENTIALS, no gcloud login, no metadata server) configure says what
    to set."""
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "absent.json"))
    configs = gcs_configs(fake_gcs)
    del configs["gcs.credentials.default"]
    with pytest.raises(
        RemoteStorageException, match=f"no usable GCS credentials for bucket {BUCKET}"
    ) as raised:
        configure(configs)
    assert "rsm.config.gcs.credentials.default=false" in str(raised.value)


def test_unreachable_endpoint_fails_configure_as_retriable() -> None:
    (port,) = free_ports(1)  # nothing listens there
    configs = {
        "gcs.bucket.name": BUCKET,
        "gcs.endpoint.url": f"http://127.0.0.1:{port}",
        "gcs.credentials.default": "false",
        "gcs.retry.deadline.ms": "500",
        "gcs.retry.initial.backoff.ms": "50",
        "gcs.retry.max.backoff.ms": "100",
    }
    with pytest.raises(RetriableRemoteStorageException, match=f"127.0.0.1:{port}"):
        configure(configs)


# The mapping of answers fake-gcs-server cannot give ---------------------------------------------
@pytest.fixture
def offline_backend() -> Iterator[GcsBackend]:
    """A backend that is never asked to reach its endpoint (the mapping tests only)."""
    configs = {
        "gcs.bucket.name": "b",
        "gcs.endpoint.url": "http://127.0.0.1:9",
        "gcs.credentials.default": "false",
    }
    backend = GcsBackend(GcsConfig.from_configs(configs, UploadSettings(part_size=8 << 20)))
    yield backend
    backend.close()


def _api_error(status: int, message: str) -> api_exceptions.GoogleAPICallError:
    error = api_exceptions.from_http_status(status, message)  # type: ignore[no-untyped-call]
    assert isinstance(error, api_exceptions.GoogleAPICallError)
    return error


@pytest.mark.parametrize(
    ("error", "expected", "says"),
    [
        (_api_error(429, "rate limit"), ObjectStoreThrottledError, "throttling"),
        (_api_error(500, "backend error"), RetriableRemoteStorageException, "backend error"),
        (_api_error(503, "unavailable"), RetriableRemoteStorageException, "unavailable"),
        (_api_error(504, "gateway"), RetriableRemoteStorageException, "gateway"),
        (_api_error(408, "timeout"), RetriableRemoteStorageException, "timeout"),
        (
            requests.exceptions.ConnectionError("refused"),
            RetriableRemoteStorageException,
            "unreachable",
        ),
        (requests.exceptions.ReadTimeout("slow"), RetriableRemoteStorageException, "slow"),
        (
            api_exceptions.RetryError("deadline", _api_error(429, "rate")),  # type: ignore[no-untyped-call]
            ObjectStoreThrottledError,
            "throttling",
        ),
        (
            api_exceptions.RetryError("deadline", None),  # type: ignore[no-untyped-call]
            RetriableRemoteStorageException,
            "gave up",
        ),
        (
            _api_error(404, "No such object: b/k"),
            RemoteResourceNotFoundException,
            "gs://b/k does not exist",
        ),
        (_api_error(400, "bad request"), RemoteStorageException, "bad request"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else None,
)
def test_error_mapping(
    offline_backend: GcsBackend, error: BaseException, expected: type, says: str
) -> None:
    got = offline_backend._translate(error, "read", "k")
    assert type(got) is expected, f"{error!r} became {got!r}"
    assert says in str(got)


@pytest.mark.parametrize("status", [401, 403])
def test_permission_errors_name_the_bucket_and_the_credential_keys(
    offline_backend: GcsBackend, status: int
) -> None:
    error = _api_error(status, "svc@p.iam.gserviceaccount.com does not have access")
    got = offline_backend._translate(error, "upload", "k")
    assert type(got) is RemoteStorageException
    message = str(got)
    assert "bucket b" in message and str(status) in message
    for key in ("gcs.credentials.json", "gcs.credentials.path", "gcs.credentials.default"):
        assert key in message


def test_a_404_saying_the_bucket_is_missing_is_not_a_missing_object(
    offline_backend: GcsBackend,
) -> None:
    """Real GCS tells the two 404s apart in the message; no extra request is needed."""
    got = offline_backend._translate(
        _api_error(404, "The specified bucket does not exist."), "read", "k"
    )
    assert type(got) is RemoteStorageException
    assert "bucket b does not exist" in str(got)
