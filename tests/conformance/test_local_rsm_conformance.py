"""The conformance suite on the embedded default RSM, ``local`` (LocalTieredStorage)."""

from __future__ import annotations

from pathlib import Path

from tierlog.conformance import RemoteStorageManagerSuite
from tierlog.spi import RemoteStorageManager
from tierlog.storage.local import LocalTieredStorage


class TestLocalTieredStorage(RemoteStorageManagerSuite):
    plugin_class = LocalTieredStorage

    def store_root(self, rsm: RemoteStorageManager) -> Path | None:
        """Lets the suite walk ``<dir>/kafka-tiered-storage`` itself (independent inspection)."""
        assert isinstance(rsm, LocalTieredStorage)
        return rsm.storage_directory
