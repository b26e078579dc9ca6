"""The installed distribution: discovered as ``azure`` through its entry point, and cheap to
discover (the Azure SDK is imported only when a backend is built)."""

from __future__ import annotations

import subprocess
import sys

from tierlog.spi.plugins import PluginRegistry

from tierlog_rsm_azure import AzureRemoteStorageManager, __version__


def test_the_entry_point_registers_azure() -> None:
    # Not strict: another installed plugin that fails to load is not this test's business.
    registry = PluginRegistry(strict=False)
    assert not [f for f in registry.failures if "azure" in repr(f)]
    info = registry.storage_managers["azure"]
    assert info.cls is AzureRemoteStorageManager
    assert registry.storage_manager_class("azure") is AzureRemoteStorageManager
    assert info.version == __version__


def test_discovery_does_not_import_the_azure_sdk() -> None:
    code = (
        "import sys; from tierlog.spi.plugins import PluginRegistry;"
        "PluginRegistry(strict=False).storage_manager_class('azure');"
        "print(sorted(m for m in sys.modules if m.startswith('azure')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert out == "[]"
