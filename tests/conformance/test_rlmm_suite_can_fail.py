"""The RLMM suite catches broken plugins: deliberately broken subclasses of the embedded RLMM run
through it with ``pytester``, and the tests for the broken rule fail while unrelated ones pass.

A suite whose tests cannot fail proves nothing; each breakage here is one a real RLMM could ship
(serving copies in progress, recomputing the highest offset from live segments, keeping
metadata only in memory, raising on a dropped transition, completing the future before the
write is visible).
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

BROKEN_PLUGINS = '''
import tempfile
from concurrent.futures import Future

from hypothesis import Phase

from tierlog.conformance import RemoteLogMetadataManagerSuite
from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager
from tierlog.spi import InvalidArgumentError, RemoteLogSegmentState

# Deterministic (derandomize) and without shrinking: a failure is found early and reported as is.
FAST = {"phases": [Phase.explicit, Phase.generate], "database": None, "derandomize": True}


class ServesCopyInProgress(EmbeddedRemoteLogMetadataManager):
    """Lookups also return segments whose copy has not finished."""

    def remote_log_segment_metadata(self, tip, epoch, offset):
        found = super().remote_log_segment_metadata(tip, epoch, offset)
        if found is None:
            for m in self.list_remote_log_segments(tip, epoch):
                if (m.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED
                        and m.start_offset <= offset <= m.end_offset):
                    return m
        return found


class LowersHighestOnDelete(EmbeddedRemoteLogMetadataManager):
    """The highest offset is recomputed from the segments still finished."""

    def highest_offset_for_epoch(self, tip, epoch):
        ends = []
        for m in self.list_remote_log_segments(tip, epoch):
            if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                later = [s for e, s in m.segment_leader_epochs.items() if e > epoch]
                ends.append(min(later) - 1 if later else m.end_offset)
        return max(ends) if ends else None


class ForgetsOnRestart(EmbeddedRemoteLogMetadataManager):
    """Every instance writes to a directory of its own: nothing survives a restart."""

    def configure(self, configs):
        super().configure({**configs, "dir": tempfile.mkdtemp(prefix="forgets-")})


class RaisesOnInvalidTransition(EmbeddedRemoteLogMetadataManager):
    """An invalid transition raises instead of being dropped."""

    def update_remote_log_segment_metadata(self, update):
        current = {m.remote_log_segment_id: m.state
                   for m in self.list_remote_log_segments(update.topic_id_partition)}
        state = current.get(update.remote_log_segment_id)
        if state is not None and not RemoteLogSegmentState.is_valid_transition(state, update.state):
            raise InvalidArgumentError(f"invalid transition {state} -> {update.state}")
        return super().update_remote_log_segment_metadata(update)


class CompletesBeforeVisible(EmbeddedRemoteLogMetadataManager):
    """The future of an add completes at once, but the add is applied only with the next add."""

    def __init__(self):
        super().__init__()
        self._pending = []

    def add_remote_log_segment_metadata(self, metadata):
        for earlier in self._pending:
            super().add_remote_log_segment_metadata(earlier)
        self._pending = [metadata]
        result = Future()
        result.set_result(None)
        return result


class TestServesCopyInProgress(RemoteLogMetadataManagerSuite):
    plugin_class = ServesCopyInProgress
    state_machine_settings = FAST
    state_machine_max_examples = 200


class TestLowersHighestOnDelete(RemoteLogMetadataManagerSuite):
    plugin_class = LowersHighestOnDelete
    state_machine_settings = FAST
    state_machine_max_examples = 200


class TestForgetsOnRestart(RemoteLogMetadataManagerSuite):
    plugin_class = ForgetsOnRestart
    state_machine_settings = FAST
    state_machine_max_examples = 200


class TestRaisesOnInvalidTransition(RemoteLogMetadataManagerSuite):
    plugin_class = RaisesOnInvalidTransition
    state_machine_settings = FAST
    state_machine_max_examples = 200


class TestCompletesBeforeVisible(RemoteLogMetadataManagerSuite):
    plugin_class = CompletesBeforeVisible
    state_machine_settings = FAST
    state_machine_max_examples = 200
'''

# The tests that must fail for each broken plugin (all run; anything else selected must pass).
MUST_FAIL: dict[str, set[str]] = {
    "TestServesCopyInProgress": {
        "test_copy_started_segment_is_listed_not_served",
        "test_read_your_writes",
        "test_lifecycle_and_epoch_lookup",
        "test_state_machine",
    },
    "TestLowersHighestOnDelete": {
        "test_highest_offset_never_decreases_when_segments_are_deleted",
        "test_lifecycle_and_epoch_lookup",
        "test_state_machine",
    },
    "TestForgetsOnRestart": {
        "test_state_survives_restart",
        "test_partition_delete_survives_restart",
        "test_highest_offset_never_decreases_when_segments_are_deleted",
        "test_state_machine",
    },
    "TestRaisesOnInvalidTransition": {
        "test_invalid_transitions_are_dropped",
        "test_state_machine",
    },
    "TestCompletesBeforeVisible": {
        "test_read_your_writes",
        "test_read_your_writes_from_concurrent_threads",
        "test_copy_started_segment_is_listed_not_served",
    },
}

# Tests that exercise none of the broken rules: they must pass for every broken plugin, which
# shows the failures above are specific, not a suite that fails everything.
CONTROLS = {
    "test_remote_log_size_of_unknown_epoch_is_zero",
    "test_unknown_partition_raises_not_found",
    "test_is_ready_only_while_assigned",
}
ALSO_PASSES: dict[str, set[str]] = {
    "TestServesCopyInProgress": {
        "test_highest_offset_never_decreases_when_segments_are_deleted",
        "test_state_survives_restart",
    },
    "TestLowersHighestOnDelete": {
        "test_copy_started_segment_is_listed_not_served",
        "test_state_survives_restart",
    },
    "TestForgetsOnRestart": {
        "test_lifecycle_and_epoch_lookup",
        "test_read_your_writes",
        "test_invalid_transitions_are_dropped",
    },
    "TestRaisesOnInvalidTransition": {
        "test_lifecycle_and_epoch_lookup",
        "test_state_survives_restart",
    },
    "TestCompletesBeforeVisible": set(),
}


def _outcomes(reprec: pytest.HookRecorder) -> dict[tuple[str, str], str]:
    """``(class, test) -> outcome`` of the call phase (a failed setup counts as failed)."""
    result: dict[tuple[str, str], str] = {}
    for report in reprec.getreports("pytest_runtest_logreport"):
        parts = report.nodeid.split("::")
        key = (parts[-2], parts[-1].split("[")[0])
        if (report.when == "call" or report.failed) and result.get(key) != "failed":
            result[key] = report.outcome
    return result


def test_the_tests_for_each_broken_rule_fail(pytester: pytest.Pytester) -> None:
    """Each broken RLMM fails exactly the tests written for its rule; unrelated tests pass."""
    pytester.makepyfile(test_broken_rlmm=BROKEN_PLUGINS)
    names = set(CONTROLS)
    for group in (*MUST_FAIL.values(), *ALSO_PASSES.values()):
        names |= group
    reprec = pytester.inline_run("-p", "no:cacheprovider", "-k", " or ".join(sorted(names)))
    outcomes = _outcomes(reprec)
    problems = []
    for cls, must_fail in MUST_FAIL.items():
        for test in sorted(must_fail):
            if outcomes.get((cls, test)) != "failed":
                problems.append(f"{cls}::{test} should fail, got {outcomes.get((cls, test))}")
        for test in sorted(CONTROLS | ALSO_PASSES[cls]):
            if outcomes.get((cls, test)) != "passed":
                problems.append(f"{cls}::{test} should pass, got {outcomes.get((cls, test))}")
    assert not problems, "\n".join(problems)


def test_a_correct_subclass_passes_the_same_selection(pytester: pytest.Pytester) -> None:
    """Control for the test above: the unbroken embedded RLMM passes every selected test, so
    the failures come from the breakage and not from the pytester setup."""
    pytester.makepyfile(
        test_ok_rlmm="""
from tierlog.conformance import RemoteLogMetadataManagerSuite
from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager


class TestOk(RemoteLogMetadataManagerSuite):
    plugin_class = EmbeddedRemoteLogMetadataManager
    state_machine_max_examples = 5
"""
    )
    names = set(CONTROLS)
    for group in MUST_FAIL.values():
        names |= group
    reprec = pytester.inline_run("-p", "no:cacheprovider", "-k", " or ".join(sorted(names)))
    passed, _skipped, failed = reprec.listoutcomes()
    assert not failed, [r.nodeid for r in failed]
    assert len(passed) >= len(names)


CAPABILITIES = '''
from tierlog.conformance import (
    RemoteLogMetadataManagerCapabilities,
    RemoteLogMetadataManagerSuite,
    Unsupported,
)
from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager
from tierlog.spi import RemoteLogMetadataManager


class NoTxnTracking(EmbeddedRemoteLogMetadataManager):
    """Keeps the SPI default: the segment holding the offset, whatever its txn index."""

    next_segment_with_txn_index = RemoteLogMetadataManager.next_segment_with_txn_index


class TestNoTxnTrackingUndeclared(RemoteLogMetadataManagerSuite):
    plugin_class = NoTxnTracking


class TestNoTxnTrackingDeclared(RemoteLogMetadataManagerSuite):
    plugin_class = NoTxnTracking
    capabilities = RemoteLogMetadataManagerCapabilities(
        txn_index_tracking=Unsupported("uses the SPI default"))
    state_machine_max_examples = 20


class TestNoPartitionDelete(RemoteLogMetadataManagerSuite):
    plugin_class = EmbeddedRemoteLogMetadataManager
    capabilities = RemoteLogMetadataManagerCapabilities(
        partition_delete=Unsupported("the backend keeps partitions forever"))
'''


def test_declared_capabilities_relax_exactly_their_tests(pytester: pytest.Pytester) -> None:
    """An RLMM that keeps the SPI's ``next_segment_with_txn_index`` fails that test unless it
    declares ``txn_index_tracking`` Unsupported, and then passes it (and the state machine);
    a declared ``partition_delete`` gap skips the partition-delete tests with the reason."""
    pytester.makepyfile(test_capabilities=CAPABILITIES)
    reprec = pytester.inline_run(
        "-p",
        "no:cacheprovider",
        "-rs",
        "-k",
        "test_next_segment_with_txn_index or (TestNoTxnTrackingDeclared and test_state_machine) "
        "or (NoPartitionDelete and partition_delete)",
    )
    outcomes = _outcomes(reprec)
    assert outcomes == {
        ("TestNoTxnTrackingUndeclared", "test_next_segment_with_txn_index"): "failed",
        ("TestNoTxnTrackingDeclared", "test_next_segment_with_txn_index"): "passed",
        ("TestNoTxnTrackingDeclared", "test_state_machine"): "passed",
        ("TestNoPartitionDelete", "test_next_segment_with_txn_index"): "passed",
        ("TestNoPartitionDelete", "test_partition_delete"): "skipped",
        ("TestNoPartitionDelete", "test_partition_delete_survives_restart"): "skipped",
    }
    skipped = [r for r in reprec.getreports("pytest_runtest_logreport") if r.skipped]
    assert all("the backend keeps partitions forever" in str(r.longrepr) for r in skipped)
