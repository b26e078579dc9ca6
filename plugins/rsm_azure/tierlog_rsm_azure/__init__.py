"""``tierlog-rsm-azure``: tierlog's RemoteStorageManager on Azure Blob Storage.

Installing the distribution registers the RSM as ``azure`` (entry point group ``tierlog``), so a
broker selects it with ``remote.log.storage.manager.class.name=azure``; the README lists its
``rsm.config.`` keys. ``AzureBackend`` (the azure-storage-blob adapter under the RSM) is
importable for tools and tests; it is loaded lazily, as is the Azure SDK, so discovering
plugins stays cheap.

The public names are those of every first-party object-store plugin: ``AzureConfig`` (the
validated settings, ``AzureConfig.from_configs(configs, upload)``, ``AzureConfig.keys()``),
``AZURE_CONFIG_KEYS`` (each key's ``ConfigKey``: type, default, meaning), ``AzureBackend`` and
``AzureRemoteStorageManager``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tierlog import hookimpl

from tierlog_rsm_azure._config import AZURE_CONFIG_KEYS, AzureConfig
from tierlog_rsm_azure._rsm import AzureRemoteStorageManager
from tierlog_rsm_azure._version import __version__

if TYPE_CHECKING:
    from tierlog.spi.hookspecs import RegisterStorageManager

    from tierlog_rsm_azure._backend import AzureBackend

__all__ = [
    "AZURE_CONFIG_KEYS",
    "AzureBackend",
    "AzureConfig",
    "AzureRemoteStorageManager",
    "__version__",
    "tierlog_register_storage_managers",
]


def __getattr__(name: str) -> Any:
    if name == "AzureBackend":
        from tierlog_rsm_azure._backend import AzureBackend

        return AzureBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def tierlog_register_storage_managers(register: RegisterStorageManager) -> None:
    """Register ``azure``, as the built-in ``local`` RSM registers itself."""
    register("azure", AzureRemoteStorageManager)
