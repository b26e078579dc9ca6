"""tierlog's RemoteStorageManager conformance suite on this plugin: the whole test module."""

from tierlog_example_rsm import MemoryRemoteStorage, stored_keys

from tierlog.conformance import RemoteStorageManagerSuite
from tierlog.spi import RemoteStorageManager


class TestMemoryRemoteStorage(RemoteStorageManagerSuite):
    plugin_class = MemoryRemoteStorage

    # Optional: lets the suite list the store without the API under test.
    def stored_objects(self, rsm: RemoteStorageManager) -> set[str]:
        assert isinstance(rsm, MemoryRemoteStorage)
        return stored_keys(rsm.namespace)
