"""The conformance suite on the embedded default RSM, ``local`` (LocalTieredStorage)."""

from __future__ import annotations

from pathlib import Path

from tierlog.conformance import RemoteStorageManagerSuite
from tierlog.storage.local import LocalTieredStorage


class TestLocalTieredStorage(RemoteStorageManagerSuite):
    plugin_class = LocalTieredStorage


def test_the_suite_inspects_the_store_independently(tmp_path: Path) -> None:
    """``conformance_store_root`` lets the suite walk ``<dir>/kafka-tiered-storage`` itself."""
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(tmp_path)})
    suite = TestLocalTieredStorage()
    assert suite.store_root(rsm) == tmp_path / "kafka-tiered-storage"
    assert suite.stored_objects(rsm) == set()
