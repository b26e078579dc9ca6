"""The conformance suite any RSM or RLMM plugin can run, first-party or third-party.

Subclass a suite in a test module of your plugin and pytest does the rest::

    from tierlog.conformance import RemoteStorageManagerSuite
    from my_package import MyStorage

    class TestMyStorage(RemoteStorageManagerSuite):
        plugin_class = MyStorage

or run it on an installed plugin: ``tierlog conformance --rsm NAME``. The suites are imported
lazily so that the ``pytest11`` entry point stays cheap for projects that never use them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tierlog.conformance._base import Capability, Unsupported, require

if TYPE_CHECKING:
    from tierlog.conformance.backend_suite import (
        ObjectStoreBackendCapabilities,
        ObjectStoreBackendSuite,
    )
    from tierlog.conformance.rlmm_suite import (
        RemoteLogMetadataManagerCapabilities,
        RemoteLogMetadataManagerSuite,
    )
    from tierlog.conformance.rsm_suite import (
        RemoteStorageManagerCapabilities,
        RemoteStorageManagerSuite,
    )

_LAZY = {
    "ObjectStoreBackendSuite": "tierlog.conformance.backend_suite",
    "ObjectStoreBackendCapabilities": "tierlog.conformance.backend_suite",
    "RemoteStorageManagerSuite": "tierlog.conformance.rsm_suite",
    "RemoteStorageManagerCapabilities": "tierlog.conformance.rsm_suite",
    "RemoteLogMetadataManagerSuite": "tierlog.conformance.rlmm_suite",
    "RemoteLogMetadataManagerCapabilities": "tierlog.conformance.rlmm_suite",
}

__all__ = [
    "Capability",
    "ObjectStoreBackendCapabilities",
    "ObjectStoreBackendSuite",
    "RemoteLogMetadataManagerCapabilities",
    "RemoteLogMetadataManagerSuite",
    "RemoteStorageManagerCapabilities",
    "RemoteStorageManagerSuite",
    "Unsupported",
    "require",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
