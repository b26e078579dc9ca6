"""tierlog's ObjectStoreBackend conformance suite on ``S3Backend`` against SeaweedFS."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _s3_support import new_bucket_name, plugin_configs
from services._common import Service
from tierlog_rsm_s3 import S3Backend, S3Config

from tierlog.conformance.backend_suite import ObjectStoreBackendSuite, RecordingObserver
from tierlog.storage.objectstore.backend import UploadSettings


class TestS3Backend(ObjectStoreBackendSuite):
    """Every rule of the backend contract, on a real S3 server (parts of 5 MiB, S3's minimum)."""

    @pytest.fixture
    def backend(
        self,
        seaweedfs: Service,
        shared_bucket: str,
        upload_settings: UploadSettings,
        observer: RecordingObserver,
    ) -> Iterator[S3Backend]:
        settings = S3Config.from_configs(plugin_configs(seaweedfs, shared_bucket))
        backend = S3Backend(settings, upload_settings, observer)
        yield backend
        backend.close()

    @pytest.fixture
    def missing_bucket_backend(
        self, seaweedfs: Service, upload_settings: UploadSettings
    ) -> Iterator[S3Backend]:
        settings = S3Config.from_configs(plugin_configs(seaweedfs, new_bucket_name()))
        backend = S3Backend(settings, upload_settings)
        yield backend
        backend.close()
