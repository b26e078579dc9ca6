"""tierlog's ObjectStoreBackend conformance suite on ``AzureBackend`` against Azurite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from services._common import Service
from tierlog.conformance.backend_suite import ObjectStoreBackendSuite, RecordingObserver
from tierlog.storage.objectstore.backend import UploadSettings

from azure_helpers import azure_configs
from tierlog_rsm_azure import AzureBackend, AzureConfig


class TestAzureBackend(ObjectStoreBackendSuite):
    # Azure lists 5000 blobs per page and deletes 256 per batch: with 100-blob pages, 300 blobs
    # cross both boundaries in a fraction of the time 1100 uploads take.
    listing_objects = 300

    @pytest.fixture
    def backend(
        self, azurite: Service, upload_settings: UploadSettings, observer: RecordingObserver
    ) -> Iterator[AzureBackend]:
        settings = AzureConfig.from_configs(azure_configs(azurite), upload_settings)
        backend = AzureBackend(settings, upload_settings, observer, list_page_size=100)
        yield backend
        backend.close()

    @pytest.fixture
    def missing_bucket_backend(
        self, azurite: Service, upload_settings: UploadSettings
    ) -> Iterator[AzureBackend]:
        configs = azure_configs(azurite, **{"azure.container.name": "no-such-container"})
        backend = AzureBackend(AzureConfig.from_configs(configs, upload_settings), upload_settings)
        yield backend
        backend.close()
