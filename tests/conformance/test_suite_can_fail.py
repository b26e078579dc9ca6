"""The RSM suite catches broken plugins: deliberately broken subclasses of LocalTieredStorage run
through it with ``pytester``, and exactly the tests for the broken rule fail.

A suite whose tests cannot fail proves nothing; each breakage here is one a real plugin could
ship (an exclusive end, a 404 on delete, an empty stream for a missing index, no overwrite, a
whole object in memory, a path built by string concatenation, a compaction summary dropped on
copy, kept from an earlier attempt, or left behind by a delete).
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

pytest_plugins = ["pytester"]

BROKEN_PLUGINS = """
import dataclasses
import io
import os
from pathlib import Path

from tierlog.conformance import RemoteStorageManagerSuite
from tierlog.spi import IndexType, RemoteResourceNotFoundException, RemoteStorageException
from tierlog.storage.local import LocalTieredStorage


class IgnoresEndPosition(LocalTieredStorage):
    def fetch_log_segment(self, metadata, start_position, end_position=None):
        return super().fetch_log_segment(metadata, start_position)


class DeleteRaisesOnMissing(LocalTieredStorage):
    def delete_log_segment_data(self, metadata):
        if not self.segment_paths(metadata)[".log"].exists():
            raise RemoteResourceNotFoundException("no such segment")
        super().delete_log_segment_data(metadata)


class EmptyStreamForMissingIndex(LocalTieredStorage):
    def fetch_index(self, metadata, index_type):
        try:
            return super().fetch_index(metadata, index_type)
        except RemoteResourceNotFoundException:
            if index_type is IndexType.TRANSACTION:
                return io.BytesIO(b"")
            raise


class RefusesToOverwrite(LocalTieredStorage):
    def copy_log_segment_data(self, metadata, data):
        if self.segment_paths(metadata)[".log"].exists():
            raise RemoteStorageException("segment already exists")
        return super().copy_log_segment_data(metadata, data)


class ReadsWholeSegment(LocalTieredStorage):
    def fetch_log_segment(self, metadata, start_position, end_position=None):
        super().fetch_log_segment(metadata, start_position, end_position).close()  # validation
        with super().fetch_log_segment(metadata, 0) as stream:
            whole = stream.read()
        end = len(whole) if end_position is None else end_position + 1
        return io.BytesIO(whole[start_position:end])


class JoinsPathsNaively(LocalTieredStorage):
    def _partition_dir(self, tip):
        directory = Path(os.path.join(self.storage_directory, f"{tip.topic}-{tip.partition}-"
                                      f"{tip.topic_id}"))
        directory.parent.mkdir(parents=True, exist_ok=True)
        return directory


class DropsCompactionSummary(LocalTieredStorage):
    # A plugin written before the extension: LogSegmentData.compaction_summary is ignored.
    def copy_log_segment_data(self, metadata, data):
        data = dataclasses.replace(data, compaction_summary=None)
        return super().copy_log_segment_data(metadata, data)


class KeepsStaleCompactionSummary(LocalTieredStorage):
    # A retry without a summary leaves the earlier attempt's in place.
    def copy_log_segment_data(self, metadata, data):
        path = self.segment_paths(metadata)[".compaction_summary"]
        old = path.read_bytes() if path.exists() else None
        result = super().copy_log_segment_data(metadata, data)
        if data.compaction_summary is None and old is not None:
            path.write_bytes(old)
        return result


class DeleteLeavesCompactionSummary(LocalTieredStorage):
    # The delete knows Kafka's files only.
    def delete_log_segment_data(self, metadata):
        path = self.segment_paths(metadata)[".compaction_summary"]
        kept = path.read_bytes() if path.exists() else None
        super().delete_log_segment_data(metadata)
        if kept is not None:
            path.write_bytes(kept)


class _Suite(RemoteStorageManagerSuite):
    def store_root(self, rsm):
        return rsm.storage_directory


class TestControl(_Suite):
    plugin_class = LocalTieredStorage


class TestIgnoresEndPosition(_Suite):
    plugin_class = IgnoresEndPosition


class TestDeleteRaisesOnMissing(_Suite):
    plugin_class = DeleteRaisesOnMissing


class TestEmptyStreamForMissingIndex(_Suite):
    plugin_class = EmptyStreamForMissingIndex


class TestRefusesToOverwrite(_Suite):
    plugin_class = RefusesToOverwrite


class TestJoinsPathsNaively(_Suite):
    plugin_class = JoinsPathsNaively


class TestDropsCompactionSummary(_Suite):
    plugin_class = DropsCompactionSummary


class TestKeepsStaleCompactionSummary(_Suite):
    plugin_class = KeepsStaleCompactionSummary


class TestDeleteLeavesCompactionSummary(_Suite):
    plugin_class = DeleteLeavesCompactionSummary


class TestReadsWholeSegment(_Suite):
    plugin_class = ReadsWholeSegment
    large_segment_size = 16 * 2**20
    memory_limit = 4 * 2**20


class TestControlSmallLarge(_Suite):
    plugin_class = LocalTieredStorage
    large_segment_size = 16 * 2**20
    memory_limit = 4 * 2**20
"""

ASSERT_GONE_USERS = {
    "test_delete_then_fetch_raises_not_found",
    "test_delete_removes_the_compaction_summary",
    "test_delete_twice_succeeds",
    "test_segments_of_one_partition_do_not_interfere",
    "test_partitions_and_topic_ids_do_not_interfere",
    "test_segment_ids_are_per_attempt",
    "test_instances_with_the_same_config_share_the_store",
    "test_hostile_topic_names_stay_inside_the_store[longest-legal]",
    *(
        f"test_legal_topic_names_work[{case}]"
        for case in (
            "all-legal-characters",
            "leading-underscore",
            "leading-dash",
            "double-dot-inside",
            "longest-legal",
        )
    ),
}
"""Tests that check, after a delete, that every index (the transaction index too) is gone."""

EXPECTED_FAILURES: Mapping[str, set[str]] = {
    "TestControl": set(),
    "TestIgnoresEndPosition": {
        "test_fetch_range[first-byte]",
        "test_fetch_range[middle]",
        "test_fetch_range[one-middle-byte]",
        "test_fetch_invalid_range_raises_value_error[start-after-end]",
        "test_fetch_invalid_range_raises_value_error[end-negative]",
    },
    "TestDeleteRaisesOnMissing": {
        "test_delete_of_never_copied_segment_succeeds",
        "test_delete_twice_succeeds",
    },
    "TestEmptyStreamForMissingIndex": {
        "test_missing_transaction_index_raises_not_found",
        "test_retry_without_transaction_index_drops_the_old_one",
        "test_fetch_index_of_missing_segment_raises_not_found[TRANSACTION]",
        *ASSERT_GONE_USERS,
    },
    "TestRefusesToOverwrite": {
        "test_copy_retry_overwrites",
        "test_retry_without_transaction_index_drops_the_old_one",
        "test_retry_replaces_the_compaction_summary",
        "test_retry_without_compaction_summary_drops_the_old_one",
        "test_copy_and_delete_leave_nothing_behind",
    },
    "TestDropsCompactionSummary": {
        "test_fetch_index_returns_copied_bytes[COMPACTION_SUMMARY]",
        "test_compaction_summary_round_trips",
        "test_empty_compaction_summary_round_trips_as_empty",
        "test_retry_replaces_the_compaction_summary",
        "test_instances_with_the_same_config_share_the_store",
    },
    "TestKeepsStaleCompactionSummary": {
        "test_retry_without_compaction_summary_drops_the_old_one",
    },
    "TestDeleteLeavesCompactionSummary": {
        "test_delete_removes_the_compaction_summary",
        "test_copy_and_delete_leave_nothing_behind",
    },
    "TestReadsWholeSegment": set(),  # only its large-segment test fails: see below
    "TestJoinsPathsNaively": {
        "test_hostile_topic_names_stay_inside_the_store[parent]",
        "test_hostile_topic_names_stay_inside_the_store[grandparent]",
        "test_hostile_topic_names_stay_inside_the_store[absolute]",
        "test_hostile_topic_names_stay_inside_the_store[climb-to-root]",
        "test_hostile_topic_names_stay_inside_the_store[longest-legal]",
        "test_hostile_topic_names_stay_inside_the_store[too-long]",
        "test_legal_topic_names_work[longest-legal]",
    },
}


def _failures_by_class(reprec: pytest.HookRecorder) -> tuple[dict[str, set[str]], int]:
    """Failed test names (with parameters) per suite class, and the number of passed tests."""
    passed, _skipped, failed = reprec.listoutcomes()
    by_class: dict[str, set[str]] = {}
    for report in failed:
        _module, cls, test = report.nodeid.split("::")
        by_class.setdefault(cls, set()).add(test)
    return by_class, len(passed)


def test_exactly_the_tests_for_the_broken_rule_fail(pytester: pytest.Pytester) -> None:
    """Each broken plugin fails exactly its expected tests; the control (LocalTieredStorage
    itself) fails none; every other standard test passes for every plugin."""
    pytester.makepyfile(test_broken=BROKEN_PLUGINS)
    reprec = pytester.inline_run(
        "-p", "no:cacheprovider", "-m", "not slow", "-k", "not TestControlSmallLarge"
    )
    failures, passed = _failures_by_class(reprec)
    expected = {cls: tests for cls, tests in EXPECTED_FAILURES.items() if tests}
    assert failures == expected
    per_class = passed + sum(map(len, failures.values()))
    assert per_class // len(EXPECTED_FAILURES) > 40, "the suite must have run for every class"


def test_bounded_memory_check_catches_a_plugin_that_reads_whole_segments(
    pytester: pytest.Pytester,
) -> None:
    """With a 16 MiB segment and a 4 MiB limit, a fetch that reads the whole object into
    memory fails the large-segment test, while LocalTieredStorage passes it at the same scale."""
    pytester.makepyfile(test_broken=BROKEN_PLUGINS)
    reprec = pytester.inline_run(
        "-p",
        "no:cacheprovider",
        "-k",
        "(TestReadsWholeSegment or TestControlSmallLarge) and large_segment",
    )
    failures, passed = _failures_by_class(reprec)
    assert failures == {"TestReadsWholeSegment": {"test_large_segment_streams_with_bounded_memory"}}
    assert passed == 1
    failed_report = reprec.listoutcomes()[2][0]
    assert "MiB" in str(failed_report.longrepr)
