"""``tierlog-rsm-s3``: tierlog's RemoteStorageManager on Amazon S3 and S3-compatible servers.

Installing the distribution registers the RSM as ``s3`` (entry point group ``tierlog``), so a
broker selects it with ``remote.log.storage.manager.class.name=s3``; the README lists its
``rsm.config.`` keys. ``S3Backend`` (the boto3 adapter under the RSM) is importable for tools
and tests; it is loaded lazily, as is boto3, so discovering plugins stays cheap.

The public names are those of every first-party object-store plugin: ``S3Config`` (the validated
settings, ``S3Config.from_configs(configs)``, ``S3Config.keys()``), ``S3_CONFIG_KEYS`` (each
key's ``ConfigKey``: type, default, meaning), ``S3Backend`` and ``S3RemoteStorageManager``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tierlog import hookimpl
from tierlog_rsm_s3._config import S3_CONFIG_KEYS, S3Config
from tierlog_rsm_s3._rsm import S3RemoteStorageManager
from tierlog_rsm_s3._version import __version__

if TYPE_CHECKING:
    from tierlog.spi.hookspecs import RegisterStorageManager
    from tierlog_rsm_s3._backend import S3Backend

__all__ = [
    "S3_CONFIG_KEYS",
    "S3Backend",
    "S3Config",
    "S3RemoteStorageManager",
    "__version__",
    "tierlog_register_storage_managers",
]


def __getattr__(name: str) -> Any:
    if name == "S3Backend":
        from tierlog_rsm_s3._backend import S3Backend

        return S3Backend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def tierlog_register_storage_managers(register: RegisterStorageManager) -> None:
    """Register ``s3``, as the built-in ``local`` RSM registers itself."""
    register("s3", S3RemoteStorageManager)
