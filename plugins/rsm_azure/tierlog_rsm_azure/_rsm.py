"""``AzureRemoteStorageManager``: the ``azure`` RSM, tierlog's object-store RSM on an
``AzureBackend``.

The base class (``tierlog.storage.objectstore.rsm``) does everything an object store shares:
layout, manifest, chunking, compression, encryption, caches, metrics and the common
``rsm.config.`` keys. This class only names its own keys and builds the backend, importing
azure-storage-blob when it does so: the registration hook stays cheap for a process that never
uses Azure.
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

from tierlog_rsm_azure._config import AzureConfig

__all__ = ["AzureRemoteStorageManager"]


class AzureRemoteStorageManager(ObjectStoreRemoteStorageManager):
    """Kafka's RemoteStorageManager on an Azure Blob Storage container (or Azurite).

    Configure it with ``remote.log.storage.manager.class.name=azure`` and the ``rsm.config.``
    keys of the README: ``azure.container.name`` and a way to reach the account are required.
    """

    backend_config_keys: ClassVar[frozenset[str]] = AzureConfig.keys()

    def create_backend(
        self,
        configs: Mapping[str, str],
        upload: UploadSettings,
        observer: RequestObserver,
    ) -> ObjectStoreBackend:
        """Parse the ``azure.*`` keys (``ConfigError`` naming the key) and build the
        azure-storage-blob ``AzureBackend``; the base then calls ``check_access``."""
        settings = AzureConfig.from_configs(configs, upload)
        from tierlog_rsm_azure._backend import AzureBackend

        return AzureBackend(settings, upload, observer)
