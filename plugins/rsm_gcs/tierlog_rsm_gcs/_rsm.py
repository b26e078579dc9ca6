"""``GcsRemoteStorageManager``: tierlog's object-store RSM on a GCS bucket.

All of the RSM's behaviour (object layout, manifest, chunking, transforms, caches, metrics, the
common ``rsm.config.`` keys) is the core's ``ObjectStoreRemoteStorageManager``; this class only
says which keys are GCS's and how to build the backend from them. The Google libraries are
imported in ``create_backend``, so registering the plugin stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from tierlog.storage.objectstore.backend import (
    ObjectStoreBackend,
    RequestObserver,
    UploadSettings,
)
from tierlog.storage.objectstore.rsm import ObjectStoreRemoteStorageManager

from tierlog_rsm_gcs._config import GcsConfig

__all__ = ["GcsRemoteStorageManager"]


class GcsRemoteStorageManager(ObjectStoreRemoteStorageManager):
    """Kafka's RemoteStorageManager on Google Cloud Storage (``gcs``).

    Configured with ``rsm.config.gcs.bucket.name`` (required) and the optional ``gcs.*`` keys
    of ``tierlog_rsm_gcs.GCS_CONFIG_KEYS``, besides the common object-store keys; see the
    package's README for the table.
    """

    backend_config_keys: ClassVar[frozenset[str]] = GcsConfig.keys()

    def create_backend(
        self, configs: Mapping[str, str], upload: UploadSettings, observer: RequestObserver
    ) -> ObjectStoreBackend:
        """Validate the ``gcs.*`` keys and build the client (no request yet: the base calls
        ``check_access`` next). The resumable chunk size defaults to the common part size."""
        from tierlog_rsm_gcs._backend import GcsBackend

        settings = GcsConfig.from_configs(configs, upload)
        return GcsBackend(settings, upload, observer)
