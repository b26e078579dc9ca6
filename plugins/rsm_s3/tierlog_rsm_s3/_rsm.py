"""``S3RemoteStorageManager``: the ``s3`` RSM, tierlog's object-store RSM on an ``S3Backend``.

The base class (``tierlog.storage.objectstore.rsm``) does everything an object store shares:
layout, manifest, chunking, compression, encryption, caches, metrics and the common
``rsm.config.`` keys. This class only names its own keys and builds the backend, importing
boto3 when it does so: the registration hook stays cheap for a process that never uses S3.
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
from tierlog_rsm_s3._config import S3Config

__all__ = ["S3RemoteStorageManager"]


class S3RemoteStorageManager(ObjectStoreRemoteStorageManager):
    """Kafka's RemoteStorageManager on an S3 bucket (Amazon S3 or any S3-compatible server).

    Configure it with ``remote.log.storage.manager.class.name=s3`` and the ``rsm.config.``
    keys of the README: ``s3.bucket.name`` is required, the rest has defaults.
    """

    backend_config_keys: ClassVar[frozenset[str]] = S3Config.keys()

    def create_backend(
        self,
        configs: Mapping[str, str],
        upload: UploadSettings,
        observer: RequestObserver,
    ) -> ObjectStoreBackend:
        """Parse the ``s3.*``/``aws.*`` keys (``ConfigError`` naming the key) and build the
        boto3-backed ``S3Backend``; the base then calls ``check_access``."""
        settings = S3Config.from_configs(configs)
        from tierlog_rsm_s3._backend import S3Backend

        return S3Backend(settings, upload, observer)
