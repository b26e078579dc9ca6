"""Validation of the ``gcs.*`` keys at ``configure`` time (no server needed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tierlog.spi import ConfigError
from tierlog.storage.objectstore.backend import UploadSettings
from tierlog.storage.objectstore.config import CONFIG_KEYS, ConfigKey

import tierlog_rsm_gcs
from tierlog_rsm_gcs import GCS_CONFIG_KEYS, GcsConfig, GcsRemoteStorageManager
from tierlog_rsm_gcs._config import (
    BUCKET_NAME,
    CHUNK_SIZE,
    CREDENTIALS_DEFAULT,
    CREDENTIALS_JSON,
    CREDENTIALS_PATH,
    ENDPOINT_URL,
    MAX_CONNECTIONS,
    REQUEST_TIMEOUT_MS,
    RETRY_DEADLINE_MS,
    RETRY_INITIAL_BACKOFF_MS,
    RETRY_MAX_BACKOFF_MS,
)

KiB = 1 << 10
MiB = 1 << 20
SECRET = "-----BEGIN PRIVATE KEY-----\\nTOPSECRETMATERIAL\\n-----END PRIVATE KEY-----\\n"
README = Path(__file__).resolve().parents[1] / "README.md"


def parse(configs: dict[str, str], part_size: int) -> GcsConfig:
    return GcsConfig.from_configs(configs, UploadSettings(part_size=part_size))


def test_defaults() -> None:
    settings = parse({BUCKET_NAME: " segments "}, 8 * MiB)
    assert settings.bucket == "segments"
    assert settings.endpoint is None
    assert settings.project is None
    assert settings.credentials_default is None  # Application Default Credentials
    assert settings.chunk_size == 8 * MiB
    assert settings.request_timeout_s == 60.0
    assert settings.retry_deadline_s == 30.0
    assert (settings.retry_initial_backoff_s, settings.retry_max_backoff_s) == (1.0, 32.0)
    assert settings.max_connections == 32


def test_every_key_is_read() -> None:
    settings = parse(
        {
            BUCKET_NAME: "b",
            "gcs.project.id": "proj",
            ENDPOINT_URL: "http://127.0.0.1:4443/",
            CREDENTIALS_DEFAULT: "FALSE",
            CHUNK_SIZE: str(512 * KiB),
            REQUEST_TIMEOUT_MS: "1500",
            RETRY_DEADLINE_MS: "2500",
            RETRY_INITIAL_BACKOFF_MS: "10",
            RETRY_MAX_BACKOFF_MS: "20",
            MAX_CONNECTIONS: "3",
        },
        8 * MiB,
    )
    assert settings.project == "proj"
    assert settings.endpoint == "http://127.0.0.1:4443"
    assert settings.credentials_default is False
    assert settings.chunk_size == 512 * KiB
    assert (settings.request_timeout_s, settings.retry_deadline_s) == (1.5, 2.5)
    assert (settings.retry_initial_backoff_s, settings.retry_max_backoff_s) == (0.01, 0.02)
    assert settings.max_connections == 3
    assert len(GCS_CONFIG_KEYS) == 12


def test_the_public_shape_is_that_of_every_object_store_plugin() -> None:
    """``<P>Config`` with ``from_configs`` and ``keys``, ``<P>_CONFIG_KEYS`` of documented
    ``ConfigKey`` rows, ``<P>Backend`` and ``<P>RemoteStorageManager``: as s3 and azure."""
    assert set(tierlog_rsm_gcs.__all__) >= {
        "GcsConfig",
        "GCS_CONFIG_KEYS",
        "GcsBackend",
        "GcsRemoteStorageManager",
    }
    assert all(isinstance(k, ConfigKey) and k.doc and k.default for k in GCS_CONFIG_KEYS)
    names = [k.name for k in GCS_CONFIG_KEYS]
    assert len(set(names)) == len(names)
    assert GcsConfig.keys() == frozenset(names) == GcsRemoteStorageManager.backend_config_keys


def test_the_readme_documents_every_key() -> None:
    text = README.read_text()
    rows = set(re.findall(r"^\| `(?:rsm\.config\.)?([^`]+)` \|", text, re.MULTILINE))
    missing = [k.name for k in (*GCS_CONFIG_KEYS, *CONFIG_KEYS) if k.name not in rows]
    assert not missing, f"README.md has no row for {missing}"


def test_chunk_size_follows_the_common_part_size_rounded_to_256_kib() -> None:
    assert parse({BUCKET_NAME: "b"}, 5 * MiB).chunk_size == 5 * MiB
    assert parse({BUCKET_NAME: "b"}, 5 * MiB + 1).chunk_size == 5 * MiB + 256 * KiB


@pytest.mark.parametrize(
    "value", ["1000", "0", "-262144", str(256 * KiB + 1), "8MiB", "2147483648"]
)
def test_chunk_size_must_be_a_positive_multiple_of_256_kib(value: str) -> None:
    with pytest.raises(ConfigError, match=r"rsm\.config\.gcs\.resumable\.upload\.chunk\.size"):
        parse({BUCKET_NAME: "b", CHUNK_SIZE: value}, 8 * MiB)


@pytest.mark.parametrize("configs", [{}, {BUCKET_NAME: "  "}])
def test_bucket_is_required(configs: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=r"rsm\.config\.gcs\.bucket\.name is required"):
        parse(configs, 8 * MiB)


@pytest.mark.parametrize("bucket", ["gs://b", "b/prefix"])
def test_bucket_is_a_name_only(bucket: str) -> None:
    with pytest.raises(ConfigError, match="bucket name only"):
        parse({BUCKET_NAME: bucket}, 8 * MiB)


def test_endpoint_must_be_an_http_url() -> None:
    with pytest.raises(ConfigError, match=r"rsm\.config\.gcs\.endpoint\.url"):
        parse({BUCKET_NAME: "b", ENDPOINT_URL: "127.0.0.1:4443"}, 8 * MiB)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (REQUEST_TIMEOUT_MS, "0"),
        (RETRY_DEADLINE_MS, "soon"),
        (MAX_CONNECTIONS, "0"),
        (CREDENTIALS_DEFAULT, "yes"),
    ],
)
def test_bad_values_name_their_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"rsm.config.{key}"):
        parse({BUCKET_NAME: "b", key: value}, 8 * MiB)


def test_max_backoff_not_below_initial() -> None:
    with pytest.raises(ConfigError, match=RETRY_MAX_BACKOFF_MS):
        parse(
            {BUCKET_NAME: "b", RETRY_INITIAL_BACKOFF_MS: "500", RETRY_MAX_BACKOFF_MS: "100"},
            8 * MiB,
        )


def test_only_one_credential_source(tmp_path: Path) -> None:
    key_file = tmp_path / "key.json"
    key_file.write_text("{}")
    with pytest.raises(ConfigError, match="conflicting credentials") as raised:
        parse(
            {BUCKET_NAME: "b", CREDENTIALS_JSON: SECRET, CREDENTIALS_PATH: str(key_file)},
            8 * MiB,
        )
    assert "TOPSECRET" not in str(raised.value)
    with pytest.raises(ConfigError, match="conflicting credentials"):
        parse({BUCKET_NAME: "b", CREDENTIALS_JSON: "{}", CREDENTIALS_DEFAULT: "true"}, 8 * MiB)
    # default=false with a key is not a conflict: the key is used.
    settings = parse(
        {BUCKET_NAME: "b", CREDENTIALS_PATH: str(key_file), CREDENTIALS_DEFAULT: "false"},
        8 * MiB,
    )
    assert settings.credentials_path == key_file


def test_credentials_path_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"rsm\.config\.gcs\.credentials\.path"):
        parse({BUCKET_NAME: "b", CREDENTIALS_PATH: str(tmp_path / "nope.json")}, 8 * MiB)


def test_the_credentials_json_never_shows_in_repr() -> None:
    settings = parse(
        {BUCKET_NAME: "b", CREDENTIALS_JSON: json.dumps({"private_key": SECRET})}, 8 * MiB
    )
    assert settings.credentials_json is not None
    assert "TOPSECRET" not in repr(settings)
    assert "TOPSECRET" not in settings.credential_source
