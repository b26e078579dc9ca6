"""The RLMM suite's cleaner-offset tests catch an RLMM that loses the vector.

Broken subclasses of the embedded RLMM run through the suite with ``pytester``: one drops the
vector on write, one drops it on read, one keeps it only in memory (lost on restart). Each fails
exactly the cleaner-offset tests its breakage touches, while tests that do not involve vectors
pass; a plugin that declares ``cleaner_offsets`` Unsupported gets those tests skipped with its
reason. The correct embedded RLMM passing them is ``tests/conformance``'s run of the suite.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

BROKEN = '''
import dataclasses

from tierlog.conformance import (
    RemoteLogMetadataManagerCapabilities,
    RemoteLogMetadataManagerSuite,
    Unsupported,
)
from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager


def strip(metadata):
    return None if metadata is None else dataclasses.replace(metadata, cleaner_offsets=None)


class DropsOnWrite(EmbeddedRemoteLogMetadataManager):
    """Writes the add record without the vector (an RLMM whose store has no column for it)."""

    def add_remote_log_segment_metadata(self, metadata):
        return super().add_remote_log_segment_metadata(strip(metadata))


class DropsOnRead(EmbeddedRemoteLogMetadataManager):
    """Stores the vector, but lookups build the metadata without it; listings keep it."""

    def remote_log_segment_metadata(self, tip, epoch, offset):
        return strip(super().remote_log_segment_metadata(tip, epoch, offset))


class KeepsInMemory(EmbeddedRemoteLogMetadataManager):
    """Writes without the vector and re-attaches it from memory: gone after a restart."""

    def __init__(self):
        super().__init__()
        self._vectors = {}

    def add_remote_log_segment_metadata(self, metadata):
        self._vectors[metadata.remote_log_segment_id] = metadata.cleaner_offsets
        return super().add_remote_log_segment_metadata(strip(metadata))

    def _attach(self, metadata):
        vector = self._vectors.get(metadata.remote_log_segment_id)
        return dataclasses.replace(metadata, cleaner_offsets=vector)

    def remote_log_segment_metadata(self, tip, epoch, offset):
        found = super().remote_log_segment_metadata(tip, epoch, offset)
        return None if found is None else self._attach(found)

    def list_remote_log_segments(self, tip, epoch=None):
        return iter([self._attach(m) for m in super().list_remote_log_segments(tip, epoch)])


class TestDropsOnWrite(RemoteLogMetadataManagerSuite):
    plugin_class = DropsOnWrite


class TestDropsOnRead(RemoteLogMetadataManagerSuite):
    plugin_class = DropsOnRead


class TestKeepsInMemory(RemoteLogMetadataManagerSuite):
    plugin_class = KeepsInMemory


class TestDropsOnWriteDeclared(RemoteLogMetadataManagerSuite):
    plugin_class = DropsOnWrite
    capabilities = RemoteLogMetadataManagerCapabilities(
        cleaner_offsets=Unsupported("the store has no column for it"))
'''

VECTOR_TESTS = {
    "test_cleaner_offsets_are_returned_as_added",
    "test_cleaned_copy_of_the_same_offsets_is_served_with_its_vector",
    "test_cleaner_offsets_survive_restart",
}
CONTROLS = {  # no vectors involved: they pass whatever the breakage
    "test_read_your_writes",
    "test_read_your_writes_from_concurrent_threads",
    "test_state_survives_restart",
    "test_txn_idx_empty_flag_is_kept",
}

EXPECTED: dict[str, dict[str, str]] = {
    "TestDropsOnWrite": dict.fromkeys(VECTOR_TESTS, "failed"),
    "TestDropsOnRead": {
        "test_cleaner_offsets_are_returned_as_added": "failed",
        "test_cleaned_copy_of_the_same_offsets_is_served_with_its_vector": "failed",
        "test_cleaner_offsets_survive_restart": "failed",
    },
    "TestKeepsInMemory": {
        "test_cleaner_offsets_are_returned_as_added": "passed",
        "test_cleaned_copy_of_the_same_offsets_is_served_with_its_vector": "passed",
        "test_cleaner_offsets_survive_restart": "failed",
    },
    "TestDropsOnWriteDeclared": dict.fromkeys(VECTOR_TESTS, "skipped"),
}


def _outcomes(reprec: pytest.HookRecorder) -> dict[tuple[str, str], str]:
    """``(class, test) -> outcome`` of the call phase (a failed setup counts as failed)."""
    result: dict[tuple[str, str], str] = {}
    for report in reprec.getreports("pytest_runtest_logreport"):
        parts = report.nodeid.split("::")
        key = (parts[-2], parts[-1].split("[")[0])
        if (report.when == "call" or report.failed or report.skipped) and result.get(
            key
        ) != "failed":
            result[key] = report.outcome
    return result


def test_rlmms_that_lose_the_vector_fail_the_vector_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_broken_vectors=BROKEN)
    reprec = pytester.inline_run(
        "-p", "no:cacheprovider", "-rs", "-k", " or ".join(sorted(VECTOR_TESTS | CONTROLS))
    )
    outcomes = _outcomes(reprec)
    expected = {
        (cls, test): outcome for cls, tests in EXPECTED.items() for test, outcome in tests.items()
    }
    expected |= {(cls, test): "passed" for cls in EXPECTED for test in CONTROLS}
    assert outcomes == expected
    skipped = [r for r in reprec.getreports("pytest_runtest_logreport") if r.skipped]
    assert skipped and all("the store has no column for it" in str(r.longrepr) for r in skipped)
