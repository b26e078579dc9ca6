"""The RLMM conformance suite on the embedded RLMM, exactly as a third-party plugin runs it."""

from __future__ import annotations

from tierlog.conformance import RemoteLogMetadataManagerSuite
from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager


class TestEmbeddedRemoteLogMetadataManager(RemoteLogMetadataManagerSuite):
    plugin_class = EmbeddedRemoteLogMetadataManager
