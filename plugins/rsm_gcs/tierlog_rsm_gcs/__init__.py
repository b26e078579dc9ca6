"""``gcs``: tierlog's RemoteStorageManager for Google Cloud Storage.

Everything object stores share (layout, manifest, chunking, compression, encryption, caches,
metrics) is tierlog's ``ObjectStoreRemoteStorageManager``; this package adds ``GcsBackend``, a
thin adapter over google-cloud-storage, and registers the RSM as ``gcs``::

    remote.log.storage.manager.class.name=gcs
    rsm.config.gcs.bucket.name=my-bucket

The module stays cheap to import (tierlog imports every plugin to list them): the Google
client libraries load when an RSM is configured, or when ``GcsBackend`` is first used here.

The public names are those of every first-party object-store plugin: ``GcsConfig`` (the
validated settings, ``GcsConfig.from_configs(configs, upload)``, ``GcsConfig.keys()``),
``GCS_CONFIG_KEYS`` (each key's ``ConfigKey``: type, default, meaning), ``GcsBackend`` and
``GcsRemoteStorageManager``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tierlog import hookimpl

from tierlog_rsm_gcs._config import GCS_CONFIG_KEYS, GcsConfig
from tierlog_rsm_gcs._rsm import GcsRemoteStorageManager
from tierlog_rsm_gcs._version import __version__

if TYPE_CHECKING:
    from tierlog.spi.hookspecs import RegisterStorageManager

    from tierlog_rsm_gcs._backend import GcsBackend

__all__ = [
    "GCS_CONFIG_KEYS",
    "GcsBackend",
    "GcsConfig",
    "GcsRemoteStorageManager",
    "__version__",
    "tierlog_register_storage_managers",
]


def __getattr__(name: str) -> Any:
    if name == "GcsBackend":
        from tierlog_rsm_gcs._backend import GcsBackend

        return GcsBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def tierlog_register_storage_managers(register: RegisterStorageManager) -> None:
    """Register ``gcs``, the name users give ``remote.log.storage.manager.class.name``."""
    register("gcs", GcsRemoteStorageManager)
