"""The ``azure`` RSM against Azurite: every credential kind works, and what an operator sees
when the container is missing or a credential is wrong (a message naming the container and the
key to fix, never the secret, in the exception or in the logs)."""

from __future__ import annotations

import io
import logging
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from azure.storage.blob import ContainerSasPermissions, generate_container_sas
from services._common import Service
from services.azurite import ACCOUNT_KEY, ACCOUNT_NAME, blob_endpoint, connection_string
from tierlog.conformance.rsm_suite import SegmentFactory, read_stream, segment_metadata
from tierlog.spi import (
    RemoteStorageException,
    RetriableRemoteStorageException,
    TopicIdPartition,
    Uuid,
)

from azure_helpers import CONTAINER, MiB, azure_configs
from tierlog_rsm_azure import AzureRemoteStorageManager

WRONG_KEY = "AAAA" + ACCOUNT_KEY[4:]


def sas_token(**permissions: bool) -> str:
    return generate_container_sas(
        ACCOUNT_NAME,
        CONTAINER,
        account_key=ACCOUNT_KEY,
        permission=ContainerSasPermissions(**permissions),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )


def configured(configs: dict[str, str]) -> AzureRemoteStorageManager:
    rsm = AzureRemoteStorageManager()
    rsm.configure(configs)
    return rsm


def round_trip(rsm: AzureRemoteStorageManager, factory: SegmentFactory) -> None:
    """Copy, fetch and delete one segment."""
    tip = TopicIdPartition(Uuid.random(), "orders", 0)
    files = factory.create(size=100_000)
    metadata = segment_metadata(tip, size=100_000)
    rsm.copy_log_segment_data(metadata, files.data)
    assert read_stream(rsm.fetch_log_segment(metadata, 10, 99)) == files.segment[10:100]
    rsm.delete_log_segment_data(metadata)


@pytest.fixture
def factory(tmp_path: Path) -> SegmentFactory:
    return SegmentFactory(tmp_path / "segments")


def no_credentials(**configs: str) -> dict[str, str]:
    return {
        k: v
        for k, v in configs.items()
        if k not in {"azure.account.key", "azure.account.name", "azure.endpoint.url"}
    }


@pytest.mark.parametrize("credential", ["account-key", "sas-token", "connection-string"])
def test_every_credential_kind_works(
    azurite: Service, factory: SegmentFactory, key_prefix: str, credential: str
) -> None:
    configs = azure_configs(azurite, **{"key.prefix": key_prefix})
    if credential == "sas-token":
        configs = no_credentials(**configs) | {
            "azure.endpoint.url": blob_endpoint(azurite),
            "azure.sas.token": sas_token(read=True, write=True, delete=True, list=True),
        }
    elif credential == "connection-string":
        configs = no_credentials(**configs) | {
            "azure.connection.string": connection_string(azurite)
        }
    rsm = configured(configs)
    try:
        assert rsm.backend.location == f"azure://{ACCOUNT_NAME}/{CONTAINER}"
        round_trip(rsm, factory)
    finally:
        rsm.close()


def test_an_older_api_version_works(
    azurite: Service, factory: SegmentFactory, key_prefix: str
) -> None:
    """``azure.api.version`` for emulators that lag behind the SDK."""
    rsm = configured(
        azure_configs(azurite, **{"key.prefix": key_prefix, "azure.api.version": "2021-08-06"})
    )
    try:
        round_trip(rsm, factory)
    finally:
        rsm.close()


def test_a_missing_container_fails_configure_saying_what_to_do(azurite: Service) -> None:
    with pytest.raises(RemoteStorageException) as raised:
        configured(azure_configs(azurite, **{"azure.container.name": "no-such-container"}))
    message = str(raised.value)
    assert not isinstance(raised.value, RetriableRemoteStorageException)
    assert "container 'no-such-container' does not exist" in message
    assert f"storage account '{ACCOUNT_NAME}'" in message
    assert "rsm.config.azure.container.name" in message


def test_a_wrong_account_key_fails_configure_naming_the_key_not_its_value(
    azurite: Service, caplog: pytest.LogCaptureFixture
) -> None:
    """Azurite checks the Shared Key signature, as Azure does: 403 AuthorizationFailure."""
    caplog.set_level(logging.DEBUG)
    with pytest.raises(RemoteStorageException) as raised:
        configured(azure_configs(azurite, **{"azure.account.key": WRONG_KEY}))
    message = str(raised.value)
    assert not isinstance(raised.value, RetriableRemoteStorageException)
    assert "access refused (403" in message
    assert f"container '{CONTAINER}'" in message
    assert "rsm.config.azure.account.key" in message
    assert WRONG_KEY not in message
    assert WRONG_KEY not in caplog.text
    assert ACCOUNT_KEY not in caplog.text


def test_a_sas_token_without_the_needed_permission_names_the_token_key(
    azurite: Service, caplog: pytest.LogCaptureFixture
) -> None:
    """A read-only SAS passes ``configure`` (it may list) but a copy is refused: the error
    says the credential in use is ``azure.sas.token``; the token's signature is never shown."""
    caplog.set_level(logging.DEBUG)
    token = sas_token(read=True, list=True)
    configs = no_credentials(**azure_configs(azurite)) | {
        "azure.endpoint.url": blob_endpoint(azurite),
        "azure.sas.token": token,
    }
    rsm = configured(configs)
    try:
        with pytest.raises(RemoteStorageException) as raised:
            rsm.backend.upload("tests/denied.log", io.BytesIO(b"x"), 1)
    finally:
        rsm.close()
    message = str(raised.value)
    assert "rsm.config.azure.sas.token" in message
    signature = dict(p.split("=", 1) for p in token.split("&"))["sig"]
    assert signature not in message
    assert signature not in caplog.text


def test_the_metrics_count_requests_per_operation(
    azurite: Service, factory: SegmentFactory, key_prefix: str
) -> None:
    """The RSM's metrics see the plugin's requests, under backend ``azure``."""
    rsm = configured(azure_configs(azurite, **{"key.prefix": key_prefix}))
    try:
        round_trip(rsm, factory)
        snapshot = rsm.metrics.snapshot()
        exposed = rsm.expose().decode()
    finally:
        rsm.close()
    assert snapshot.count("upload", "ok") >= 3  # data, indexes, manifest
    assert snapshot.count("get", "ok") >= 1
    assert snapshot.count("delete", "ok") >= 1
    assert 'backend="azure"' in exposed


def test_a_warm_fetch_of_one_mib_is_one_get(
    azurite: Service, factory: SegmentFactory, key_prefix: str
) -> None:
    """With the manifest cached, 1 MiB at a random offset of a 32 MiB segment costs one GET
    (the benchmark's goal), the chunks it spans coming back in one ranged read."""
    rsm = configured(azure_configs(azurite, **{"key.prefix": key_prefix}))
    try:
        tip = TopicIdPartition(Uuid.random(), "orders", 0)
        size = 32 * MiB
        files = factory.create(size=size)
        metadata = segment_metadata(tip, size=size)
        rsm.copy_log_segment_data(metadata, files.data)
        read_stream(rsm.fetch_log_segment(metadata, 0, 0))  # warms the manifest
        rng = random.Random(7)
        first = rsm.metrics.snapshot().count("get")
        for _ in range(5):
            start = rng.randrange(size - MiB)
            before = rsm.metrics.snapshot().count("get")
            got = read_stream(rsm.fetch_log_segment(metadata, start, start + MiB - 1))
            assert got == files.segment[start : start + MiB]
            # 0 when every chunk it spans was cached by an earlier read
            assert rsm.metrics.snapshot().count("get") - before <= 1
        assert rsm.metrics.snapshot().count("get") > first
    finally:
        rsm.close()
