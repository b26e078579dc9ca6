"""tierlog's RemoteStorageManager conformance suite on the ``azure`` RSM against Azurite, once
per transform combination: plain, compressed, encrypted, compressed and encrypted.

What is stored is listed with the Azure SDK directly (``stored_objects``), not through the
plugin, so the suite's "nothing left behind" checks do not trust the code under test.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path
from typing import ClassVar

import pytest
from azure.storage.blob import BlobServiceClient
from services._common import Service
from tierlog.conformance import RemoteStorageManagerSuite
from tierlog.spi import RemoteStorageManager

from azure_helpers import MiB, azure_configs
from tierlog_rsm_azure import AzureBackend, AzureRemoteStorageManager


def write_keyring(path: Path, *key_ids: str) -> Path:
    """A JSON keyring for the ``file`` key provider; the last id is the active key."""
    keys = {k: base64.b64encode(os.urandom(32)).decode("ascii") for k in key_ids}
    path.write_text(json.dumps({"active": key_ids[-1], "keys": keys}))
    return path


class _AzureConformance(RemoteStorageManagerSuite):
    """The suite on Azurite; subclasses choose the transforms."""

    plugin_class = AzureRemoteStorageManager
    transforms: ClassVar[dict[str, str]] = {}
    encrypted: ClassVar[bool] = False

    @pytest.fixture
    def rsm_config(self, azurite: Service, tmp_path: Path) -> dict[str, str]:
        # Every test under its own prefix: instances of one test share it (a follower, a
        # restart), other tests never see it. Parts of 5 MiB, 2 in flight, keep the upload
        # within the suite's 32 MiB memory limit for the large segment.
        config = azure_configs(
            azurite,
            **{
                "key.prefix": f"conformance/{uuid.uuid4().hex}/",
                "upload.part.size": str(5 * MiB),
                "upload.multipart.threshold": str(5 * MiB),
                "upload.parallelism": "2",
            },
        )
        config.update(self.transforms)
        if self.encrypted:
            keyring = write_keyring(tmp_path / "keyring.json", "k1")
            config |= {"encryption.enabled": "true", "encryption.key.file": str(keyring)}
        return config

    def stored_objects(self, rsm: RemoteStorageManager) -> set[str]:
        """Every blob under the RSM's key prefix, listed by a client of its own."""
        assert isinstance(rsm, AzureRemoteStorageManager)
        backend = rsm.backend
        assert isinstance(backend, AzureBackend)
        s = backend.settings
        client = BlobServiceClient(
            str(s.endpoint_url),
            credential={"account_name": str(s.account_name), "account_key": str(s.account_key)},
        )
        with client:
            container = client.get_container_client(s.container)
            listed = container.list_blobs(name_starts_with=rsm.config.key_prefix)
            return {str(b.name) for b in listed}


class TestPlain(_AzureConformance):
    """256 MiB for the large segment, as the suite defaults to."""


class TestCompressed(_AzureConformance):
    transforms: ClassVar[dict[str, str]] = {
        "compression.enabled": "true",
        # The suite's segments are random bytes, not record batches: compress them anyway.
        "compression.heuristic.enabled": "false",
    }
    # Three times the 32 MiB memory limit proves streaming as well as 256 MiB does (a whole
    # segment in memory fails either way), at a third of the time on a 2-core CI machine:
    # the transform classes take the smaller size, the plain one the suite's default.
    large_segment_size = 96 * MiB


class TestEncrypted(_AzureConformance):
    encrypted = True
    large_segment_size = 96 * MiB


class TestCompressedEncrypted(_AzureConformance):
    transforms: ClassVar[dict[str, str]] = {
        "compression.enabled": "true",
        "compression.heuristic.enabled": "false",
    }
    encrypted = True
    large_segment_size = 96 * MiB
