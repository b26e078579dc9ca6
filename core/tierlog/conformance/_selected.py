"""The suite run by ``tierlog conformance``: the plugin comes from the command-line options.

Not collected by a project's own test run (the name does not match ``test_*.py``); the CLI passes
this file to pytest explicitly.
"""

from __future__ import annotations

from tierlog.conformance.rlmm_suite import RemoteLogMetadataManagerSuite
from tierlog.conformance.rsm_suite import RemoteStorageManagerSuite


class TestSelectedRemoteStorageManager(RemoteStorageManagerSuite):
    """The RSM named by ``--tierlog-rsm``."""


class TestSelectedRemoteLogMetadataManager(RemoteLogMetadataManagerSuite):
    """The RLMM named by ``--tierlog-rlmm``."""
