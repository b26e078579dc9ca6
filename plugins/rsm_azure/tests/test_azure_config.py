"""The ``azure.*`` configuration keys: validation at ``configure``, with messages that name the
key and never quote a secret. No server needed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from tierlog.spi import ConfigError
from tierlog.storage.objectstore.backend import UploadSettings
from tierlog.storage.objectstore.config import CONFIG_KEYS, ConfigKey

import tierlog_rsm_azure
from tierlog_rsm_azure import AZURE_CONFIG_KEYS, AzureConfig, AzureRemoteStorageManager

KEY = "c2VjcmV0LWtleS1ieXRlcy0xMjM0NTY3ODkwMTIzNDU2Nzg5MA=="
UPLOAD = UploadSettings(part_size=6 << 20)


def parse(**configs: str) -> AzureConfig:
    base = {
        "azure.container.name": "segments",
        "azure.account.name": "acct",
        "azure.account.key": KEY,
    }
    base.update(configs)
    return AzureConfig.from_configs({k: v for k, v in base.items() if v != "-"}, UPLOAD)


def test_defaults() -> None:
    s = parse()
    assert (s.container, s.account_name, s.endpoint_url) == ("segments", "acct", None)
    assert s.upload_block_size == 6 << 20  # the common upload.part.size
    assert (s.retry_total, s.retry_backoff_s) == (3, 0.5)
    assert (s.connection_timeout_s, s.read_timeout_s) == (20.0, 60.0)
    assert s.credential_kind == "azure.account.key"


def test_every_key_is_documented_and_accepted_by_the_rsm() -> None:
    names = {k.name for k in AZURE_CONFIG_KEYS}
    assert names == AzureConfig.keys() == AzureRemoteStorageManager.backend_config_keys
    assert all(k.doc and k.default for k in AZURE_CONFIG_KEYS)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    names |= {k.name for k in CONFIG_KEYS}  # the common keys are documented there too
    missing = [n for n in names if f"`rsm.config.{n}`" not in readme]
    assert not missing, f"README.md does not document {missing}"


def test_the_public_shape_is_that_of_every_object_store_plugin() -> None:
    """``<P>Config`` with ``from_configs`` and ``keys``, ``<P>_CONFIG_KEYS`` of documented
    ``ConfigKey`` rows, ``<P>Backend`` and ``<P>RemoteStorageManager``: as s3 and gcs."""
    assert set(tierlog_rsm_azure.__all__) >= {
        "AzureConfig",
        "AZURE_CONFIG_KEYS",
        "AzureBackend",
        "AzureRemoteStorageManager",
    }
    assert all(isinstance(k, ConfigKey) for k in AZURE_CONFIG_KEYS)
    names = [k.name for k in AZURE_CONFIG_KEYS]
    assert len(set(names)) == len(names)


def test_secrets_are_not_in_the_repr() -> None:
    s = parse(**{"azure.account.key": KEY})
    assert KEY not in repr(s)
    s = parse(**{"azure.account.key": "-", "azure.sas.token": "?sv=2024&sig=SECRETSIG"})
    assert s.sas_token == "sv=2024&sig=SECRETSIG"  # the leading '?' is dropped
    assert "SECRETSIG" not in repr(s)


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"azure.container.name": "-"}, "azure.container.name is required"),
        ({"azure.container.name": "Upper"}, "azure.container.name must be 3-63"),
        ({"azure.container.name": "a--b"}, "azure.container.name must be 3-63"),
        ({"azure.container.name": "ab"}, "azure.container.name must be 3-63"),
        ({"azure.account.name": "bad/name"}, "azure.account.name must be letters"),
        (
            {"azure.account.name": "-", "azure.endpoint.url": "http://127.0.0.1:1/acct"},
            "azure.account.key needs rsm.config.azure.account.name",
        ),
        ({"azure.account.name": "-", "azure.account.key": "-"}, "azure.account.name is required"),
        ({"azure.account.key": "not base64!"}, "azure.account.key is not valid base64"),
        ({"azure.sas.token": "sv=1&sig=x"}, "one of rsm.config.azure.account.key and"),
        (
            {"azure.connection.string": "AccountName=a;AccountKey=b"},
            "remove rsm.config.azure.account.key, rsm.config.azure.account.name",
        ),
        ({"azure.endpoint.url": "ftp://host"}, "azure.endpoint.url must be an http"),
        ({"azure.upload.block.size": "10"}, "azure.upload.block.size must be between"),
        ({"azure.upload.block.size": "lots"}, "azure.upload.block.size must be an integer"),
        ({"azure.api.version": "latest"}, "azure.api.version must be a REST API version"),
        ({"azure.retry.total": "-1"}, "azure.retry.total must be between 0 and 20"),
        ({"azure.retry.backoff.ms": "999999"}, "azure.retry.backoff.ms must be between"),
        ({"azure.read.timeout.ms": "0"}, "azure.read.timeout.ms must be at least 1"),
    ],
)
def test_bad_settings_name_the_key(configs: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=r"rsm\.config\.") as raised:
        parse(**configs)
    assert message in str(raised.value)


def test_a_bad_key_is_not_quoted() -> None:
    with pytest.raises(ConfigError) as raised:
        parse(**{"azure.account.key": "very-secret-but-not-base64!"})
    assert "very-secret" not in str(raised.value)


def test_an_endpoint_alone_names_the_account() -> None:
    s = parse(
        **{
            "azure.account.name": "-",
            "azure.account.key": "-",
            "azure.sas.token": "sv=1&sig=abc",
            "azure.endpoint.url": "http://127.0.0.1:10000/devstoreaccount1/",
        }
    )
    assert s.endpoint_url == "http://127.0.0.1:10000/devstoreaccount1"
    assert s.credential_kind == "azure.sas.token"


def test_an_api_version_the_sdk_does_not_know_is_a_config_error() -> None:
    from tierlog_rsm_azure import AzureBackend

    with pytest.raises(ConfigError, match="Unsupported API version"):
        AzureBackend(parse(**{"azure.api.version": "1999-01-01"}))


def test_a_malformed_connection_string_is_a_config_error_without_its_text() -> None:
    from tierlog_rsm_azure import AzureBackend

    settings = parse(
        **{
            "azure.account.name": "-",
            "azure.account.key": "-",
            "azure.connection.string": "AccountKey=TOPSECRET;nonsense",
        }
    )
    with pytest.raises(ConfigError) as raised:
        AzureBackend(settings)
    assert "TOPSECRET" not in str(raised.value)


@pytest.mark.skipif(
    importlib.util.find_spec("azure.identity") is not None,
    reason="azure-identity is installed: DefaultAzureCredential would be used",
)
def test_no_credential_without_azure_identity_says_what_to_set() -> None:
    from tierlog_rsm_azure import AzureBackend

    with pytest.raises(ConfigError, match=r"tierlog-rsm-azure\[identity\]") as raised:
        AzureBackend(parse(**{"azure.account.key": "-"}))
    assert "rsm.config.azure.account.key" in str(raised.value)


def test_the_rsm_reports_a_bad_setting_at_configure() -> None:
    rsm = AzureRemoteStorageManager()
    with pytest.raises(ConfigError, match=r"rsm.config.azure.container.name is required"):
        rsm.configure({"azure.account.name": "acct", "azure.account.key": KEY})
