"""tierlog's ObjectStoreBackend conformance suite on ``GcsBackend`` against fake-gcs-server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from services._common import Service
from tierlog.conformance.backend_suite import ObjectStoreBackendSuite, RecordingObserver
from tierlog.storage.objectstore.backend import UploadSettings

from gcs_test_helpers import gcs_configs
from tierlog_rsm_gcs import GcsBackend, GcsConfig


class TestGcsBackend(ObjectStoreBackendSuite):
    @pytest.fixture
    def large_object_size(self, memory_limit: int) -> int:
        """Twice the memory limit (the suite's minimum) rather than three times:
        fake-gcs-server's resumable uploads cost time quadratic in the object's size (see
        test_gcs_conformance.py), and twice already fails a backend that buffers it whole."""
        return 2 * memory_limit + 12_345

    @pytest.fixture
    def backend(
        self, fake_gcs: Service, upload_settings: UploadSettings, observer: RecordingObserver
    ) -> Iterator[GcsBackend]:
        # No explicit chunk size: it follows the suite's part size, as in the RSM.
        settings = GcsConfig.from_configs(gcs_configs(fake_gcs), upload_settings)
        backend = GcsBackend(settings, upload_settings, observer)
        yield backend
        backend.close()

    @pytest.fixture
    def missing_bucket_backend(self, fake_gcs: Service) -> Iterator[GcsBackend]:
        configs = gcs_configs(fake_gcs, **{"gcs.bucket.name": "no-such-bucket-here"})
        backend = GcsBackend(GcsConfig.from_configs(configs, UploadSettings(part_size=8 << 20)))
        yield backend
        backend.close()
