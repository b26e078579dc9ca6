"""The plugin's keys: parsing, validation messages, and the README documenting every key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tierlog_rsm_s3
from tierlog_rsm_s3 import S3_CONFIG_KEYS, S3Config, S3RemoteStorageManager

from tierlog.spi import ConfigError
from tierlog.storage.objectstore.config import CONFIG_KEYS, ConfigKey

README = Path(__file__).resolve().parents[1] / "README.md"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def test_minimal_configuration_uses_defaults() -> None:
    settings = S3Config.from_configs({"s3.bucket.name": "segments"})
    assert settings == S3Config(bucket="segments")
    assert settings.region is None  # resolved by boto3's chain when the client is built
    assert settings.path_style is None
    assert settings.max_attempts == 3
    assert not settings.static_credentials


def test_every_key_is_parsed() -> None:
    settings = S3Config.from_configs(
        {
            "s3.bucket.name": " segments ",
            "s3.region": "eu-west-1",
            "s3.endpoint.url": "https://s3.example.com:9000",
            "s3.path.style.access.enabled": "TRUE",
            "aws.access.key.id": "AKIDEXAMPLE",
            "aws.secret.access.key": SECRET,
            "aws.session.token": "token",
            "s3.api.call.attempt.timeout": "2500",
            "s3.max.attempts": "7",
            "s3.storage.class": "STANDARD_IA",
            "aws.checksum.check.enabled": "true",
            "aws.certificate.check.enabled": "false",
        }
    )
    assert settings == S3Config(
        bucket="segments",
        region="eu-west-1",
        endpoint_url="https://s3.example.com:9000",
        path_style=True,
        access_key_id="AKIDEXAMPLE",
        secret_access_key=SECRET,
        session_token="token",
        attempt_timeout_ms=2500,
        max_attempts=7,
        storage_class="STANDARD_IA",
        checksum_check=True,
        certificate_check=False,
    )


def test_secrets_stay_out_of_repr() -> None:
    settings = S3Config.from_configs(
        {
            "s3.bucket.name": "b",
            "aws.access.key.id": "AKIDEXAMPLE",
            "aws.secret.access.key": SECRET,
            "aws.session.token": "SESSIONTOKENVALUE",
        }
    )
    assert SECRET not in repr(settings)
    assert "SESSIONTOKENVALUE" not in repr(settings)


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({}, r"rsm\.config\.s3\.bucket\.name is required"),
        ({"s3.bucket.name": "  "}, r"rsm\.config\.s3\.bucket\.name is required"),
        ({"s3.bucket.name": "b/folder"}, r"key\.prefix"),
        (
            {"s3.bucket.name": "b", "aws.access.key.id": "AKID"},
            r"aws\.access\.key\.id is set but rsm\.config\.aws\.secret\.access\.key is not",
        ),
        (
            {"s3.bucket.name": "b", "aws.secret.access.key": SECRET},
            r"aws\.secret\.access\.key is set but rsm\.config\.aws\.access\.key\.id is not",
        ),
        ({"s3.bucket.name": "b", "aws.session.token": "t"}, r"aws\.session\.token needs"),
        ({"s3.bucket.name": "b", "s3.endpoint.url": "localhost:9000"}, r"http:// or https://"),
        ({"s3.bucket.name": "b", "s3.endpoint.url": "ftp://host"}, r"http:// or https://"),
        ({"s3.bucket.name": "b", "s3.path.style.access.enabled": "yes"}, r"true or false"),
        ({"s3.bucket.name": "b", "s3.max.attempts": "0"}, r"s3\.max\.attempts must be"),
        ({"s3.bucket.name": "b", "s3.api.call.attempt.timeout": "soon"}, r"an integer"),
        ({"s3.bucket.name": "b", "aws.checksum.check.enabled": "1"}, r"true or false"),
    ],
)
def test_bad_configuration_names_the_key(configs: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        S3Config.from_configs(configs)
    assert SECRET not in str(raised.value)


def test_backend_config_keys_are_the_documented_keys() -> None:
    assert S3RemoteStorageManager.backend_config_keys == {k.name for k in S3_CONFIG_KEYS}


def test_the_public_shape_is_that_of_every_object_store_plugin() -> None:
    """``<P>Config`` with ``from_configs`` and ``keys``, ``<P>_CONFIG_KEYS`` of documented
    ``ConfigKey`` rows, ``<P>Backend`` and ``<P>RemoteStorageManager``: as gcs and azure."""
    assert set(tierlog_rsm_s3.__all__) >= {
        "S3Config",
        "S3_CONFIG_KEYS",
        "S3Backend",
        "S3RemoteStorageManager",
    }
    assert all(isinstance(k, ConfigKey) and k.doc and k.default for k in S3_CONFIG_KEYS)
    names = [k.name for k in S3_CONFIG_KEYS]
    assert len(set(names)) == len(names)
    assert S3Config.keys() == frozenset(names)


def test_readme_documents_every_key_with_its_default() -> None:
    """The README's configuration table lists each plugin key and each common key, with the
    default the code uses (a key added without documentation fails here)."""
    text = README.read_text()
    rows = dict(re.findall(r"^\| `rsm\.config\.([^`]+)` \| ([^|]+?) \|", text, re.MULTILINE))
    for key in (*S3_CONFIG_KEYS, *CONFIG_KEYS):
        assert key.name in rows, f"README.md has no row for rsm.config.{key.name}"
        got = rows[key.name].strip("` ")
        assert (got if got != "(empty)" else "") == key.default, (
            f"README.md gives {rows[key.name]!r} as the default of rsm.config.{key.name}, "
            f"the code {key.default!r}"
        )
