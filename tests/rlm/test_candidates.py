"""Copy candidates, the KIP-1241 copy lag and the copy-lag metrics (``tierlog.rlm.candidates``).

Every case runs on a real ``LocalLog``. The 20 boundary cases of Kafka's ``RemoteLagCopyTest``
are ported with the same shape (sealed segments at 5 and 10, active segment at 15, LSO 20, copy
from 5); Kafka's mocked sizes (40/30/20 bytes) become the real sizes of the segments, and its
byte thresholds keep their meaning: ``50`` there is exactly the bytes after the first segment
(the boundary), ``60`` one byte more.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tierlog.log.batch import build_batch
from tierlog.log.local_log import LocalLog
from tierlog.log.log_config import DEFAULT_LOCAL_RETENTION_BYTES, LogConfig
from tierlog.log.record import Record
from tierlog.log.segment import LogSegment
from tierlog.rlm.candidates import (
    CopyCandidate,
    candidate_log_segments,
    copy_lag,
    is_eligible_for_upload,
)

NOW = 1_700_000_000_000
MAX = (1 << 63) - 1


BASE_PROPS: dict[str, object] = {
    "remote.storage.enable": True,
    "segment.index.bytes": 4096,
    "index.interval.bytes": 64,
}


def records(n: int, value_size: int, ts: int) -> bytes:
    return build_batch([Record(i, ts, None, b"x" * value_size) for i in range(n)])


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "Leader-0"


def open_log(directory: Path, **props: object) -> LocalLog:
    return LocalLog.open(directory, {**BASE_PROPS, **props}, clock=lambda: NOW, sync=False)


def make_log(
    directory: Path,
    timestamps: tuple[int, ...] = (NOW - 1000, NOW - 1000),
    *,
    start: int = 5,
    value_sizes: tuple[int, ...] = (40, 30, 20),
    active_ts: int = NOW - 1000,
) -> LocalLog:
    """Sealed segments of 5 records each from ``start`` (one per timestamp), then an active
    segment with 5 records; each segment's records are ``value_sizes[i]`` bytes long."""
    log = open_log(directory)
    if start:
        log.truncate_fully_and_start_at(start)
    for i, ts in enumerate(timestamps):
        log.append_as_leader(records(5, value_sizes[i % len(value_sizes)], ts), 0)
        log.roll()
    log.append_as_leader(records(5, value_sizes[len(timestamps) % len(value_sizes)], active_ts), 0)
    return log


@pytest.fixture
def closing() -> Iterator[list[LocalLog]]:
    logs: list[LocalLog] = []
    yield logs
    for log in logs:
        log.close()


def bases(candidates: list[CopyCandidate]) -> list[tuple[int, int]]:
    return [(c.segment.base_offset, c.next_segment_offset) for c in candidates]


# Candidates: the active segment and the last stable offset ---------------------------------------
def test_candidate_log_segments_skips_active_segment(
    log_dir: Path, closing: list[LocalLog]
) -> None:
    """RemoteLogManagerTest.testCandidateLogSegmentsSkipsActiveSegment (KAFKA-FACTS 6.1 item 9)."""
    log = make_log(log_dir)
    closing.append(log)
    assert [s.base_offset for s in log.segments] == [5, 10, 15]
    candidates = candidate_log_segments(log, 5, 20, now_ms=NOW)
    assert bases(candidates) == [(5, 10), (10, 15)]
    assert candidates[0].segment is log.segments[0]
    assert candidates[1].segment is log.segments[1]


def test_candidate_log_segments_skips_segments_after_last_stable_offset(
    log_dir: Path, closing: list[LocalLog]
) -> None:
    """RemoteLogManagerTest.testCandidateLogSegmentsSkipsSegmentsAfterLastStableOffset."""
    log = make_log(log_dir, (NOW, NOW, NOW))
    closing.append(log)
    assert [s.base_offset for s in log.segments] == [5, 10, 15, 20]
    assert bases(candidate_log_segments(log, 5, 15, now_ms=NOW)) == [(5, 10), (10, 15)]


@pytest.mark.parametrize(
    ("lso", "expected"),
    [
        (9, []),
        (10, [(5, 10)]),
        (14, [(5, 10)]),
        (15, [(5, 10), (10, 15)]),
        (100, [(5, 10), (10, 15)]),
    ],
)
def test_a_segment_is_a_candidate_only_below_the_last_stable_offset(
    log_dir: Path, closing: list[LocalLog], lso: int, expected: list[tuple[int, int]]
) -> None:
    # A segment ending at 9 needs LSO >= 10 (its last offset is below the LSO).
    log = make_log(log_dir)
    closing.append(log)
    assert bases(candidate_log_segments(log, 5, lso, now_ms=NOW)) == expected


@pytest.mark.parametrize(
    ("from_offset", "expected"),
    [(5, [(5, 10), (10, 15)]), (7, [(5, 10), (10, 15)]), (10, [(10, 15)]), (15, []), (19, [])],
)
def test_candidates_start_at_the_segment_holding_from_offset(
    log_dir: Path, closing: list[LocalLog], from_offset: int, expected: list[tuple[int, int]]
) -> None:
    log = make_log(log_dir)
    closing.append(log)
    assert bases(candidate_log_segments(log, from_offset, 20, now_ms=NOW)) == expected


def test_no_candidate_with_only_the_active_segment(log_dir: Path, closing: list[LocalLog]) -> None:
    log = make_log(log_dir, ())
    closing.append(log)
    assert len(log.segments) == 1
    assert candidate_log_segments(log, 5, 10, now_ms=NOW) == []


# RemoteLagCopyTest --------------------------------------------------------------------------------
# Each case: topic props (byte values "BOUNDARY" / "BOUNDARY+1" stand for Kafka's 50 / 60), the
# age of the first and second sealed segments (None: the timestamp lookup fails), expected bases.
# Where Kafka stubs no timestamp for the second segment its mock answers 0, which makes that
# segment eligible: those cases check that the first ineligible segment ends the scan.
BOUNDARY = "BOUNDARY"
ABOVE = "BOUNDARY+1"
UNSTUBBED = NOW  # Kafka's unstubbed mock timestamp (0): old enough, but the scan stopped before
LAG_CASES: list[tuple[str, dict[str, object], int | None, int, list[int]]] = [
    (
        "DelayUploadWhenRemoteCopyLagMsNotExceeded",
        {"retention.ms": 10_000, "remote.copy.lag.ms": 100, "remote.copy.lag.bytes": -1},
        50,
        UNSTUBBED,
        [],
    ),
    (
        "UploadWhenRemoteCopyLagMsReachedBoundary",
        {"retention.ms": 10_000, "remote.copy.lag.ms": 100, "remote.copy.lag.bytes": -1},
        100,
        50,
        [5],
    ),
    (
        "DelayUploadWhenRemoteCopyLagBytesNotExceeded",
        {
            "retention.ms": -1,
            "local.retention.ms": -2,
            "retention.bytes": 10_000,
            "remote.copy.lag.ms": -1,
            "remote.copy.lag.bytes": ABOVE,
        },
        10_000,
        10_000,
        [],
    ),
    (
        "UploadWhenRemoteCopyLagBytesReachedBoundary",
        {
            "retention.ms": -1,
            "local.retention.ms": -2,
            "retention.bytes": 10_000,
            "remote.copy.lag.ms": -1,
            "remote.copy.lag.bytes": BOUNDARY,
        },
        10_000,
        10_000,
        [5],
    ),
    (
        "UploadWhenBothRemoteCopyLagConfigsAreDefault",
        {
            "retention.ms": 10_000,
            "remote.copy.lag.ms": 0,
            "retention.bytes": 10_000,
            "remote.copy.lag.bytes": -1,
        },
        0,
        0,
        [5, 10],
    ),
    (
        "UploadWhenRemoteCopyLagConfigsAreNotSet",
        {"retention.ms": 10_000, "retention.bytes": 10_000},
        0,
        0,
        [5, 10],
    ),
    (
        "NotUploadWhenRemoteCopyLagAndLocalRetentionAreUnlimited",
        {
            "retention.ms": -1,
            "local.retention.ms": -1,
            "remote.copy.lag.ms": -1,
            "retention.bytes": -1,
            "local.retention.bytes": -1,
            "remote.copy.lag.bytes": -1,
        },
        10_000,
        10_000,
        [],
    ),
    (
        "UploadWhenRemoteCopyLagMsIsZeroAndLocalRetentionMsIsLimited",
        {
            "retention.ms": 10_000,
            "remote.copy.lag.ms": 0,
            "retention.bytes": 10_000,
            "remote.copy.lag.bytes": ABOVE,
        },
        0,
        0,
        [5, 10],
    ),
    (
        "UploadWhenRemoteCopyLagBytesIsZeroAndLocalRetentionBytesIsLimited",
        {
            "retention.bytes": 10_000,
            "remote.copy.lag.bytes": 0,
            "retention.ms": 10_000,
            "remote.copy.lag.ms": 100,
        },
        0,
        0,
        [5, 10],
    ),
    (
        "UploadImmediatelyWhenRemoteCopyLagMsIsZeroAndSizeLagExceeded",
        {
            "retention.ms": -1,
            "local.retention.ms": -1,
            "remote.copy.lag.ms": 0,
            "retention.bytes": 10_000,
            "remote.copy.lag.bytes": BOUNDARY,
        },
        0,
        0,
        [5, 10],
    ),
    (
        "UploadImmediatelyWhenRemoteCopyLagMsIsZeroAndSizeLagNotExceeded",
        {
            "retention.ms": -1,
            "local.retention.ms": -1,
            "remote.copy.lag.ms": 0,
            "retention.bytes": 10_000,
            "remote.copy.lag.bytes": ABOVE,
        },
        0,
        0,
        [5, 10],
    ),
    (
        "UploadWhenRemoteCopyLagMsUsesLocalRetention",
        {
            "retention.ms": 10_000,
            "local.retention.ms": 100,
            "remote.copy.lag.ms": -1,
            "remote.copy.lag.bytes": -1,
        },
        100,
        50,
        [5],
    ),
    (
        "DelayUploadWhenRemoteCopyLagMsUsesLocalRetention",
        {
            "retention.ms": 10_000,
            "local.retention.ms": 100,
            "remote.copy.lag.ms": -1,
            "remote.copy.lag.bytes": -1,
        },
        50,
        UNSTUBBED,
        [],
    ),
    (
        "UploadWhenRemoteCopyLagBytesUsesLocalRetention",
        {
            "retention.ms": -1,
            "local.retention.ms": -2,
            "retention.bytes": 10_000,
            "local.retention.bytes": BOUNDARY,
            "remote.copy.lag.ms": -1,
            "remote.copy.lag.bytes": -1,
        },
        10_000,
        10_000,
        [5],
    ),
    (
        "DelayUploadWhenRemoteCopyLagBytesUsesLocalRetention",
        {
            "retention.ms": -1,
            "local.retention.ms": -2,
            "retention.bytes": 10_000,
            "local.retention.bytes": ABOVE,
            "remote.copy.lag.ms": -1,
            "remote.copy.lag.bytes": -1,
        },
        10_000,
        10_000,
        [],
    ),
    (
        "UploadWhenTimeLagExceededAndSizeLagNotExceeded",
        {
            "retention.ms": 10_000,
            "remote.copy.lag.ms": 100,
            "retention.bytes": 10_000,
            "remote.copy.lag.bytes": ABOVE,
        },
        101,
        20,
        [5],
    ),
    (
        "UploadWhenSizeLagExceededAndTimeLagNotExceeded",
        {
            "retention.ms": 10_000,
            "remote.copy.lag.ms": 100,
            "retention.bytes": 10_000,
            "remote.copy.lag.bytes": BOUNDARY,
        },
        50,
        20,
        [5],
    ),
    (
        "DelayUploadWhenBothLagConditionsNotExceeded",
        {
            "retention.ms": 10_000,
            "remote.copy.lag.ms": 100,
            "retention.bytes": 10_000,
            "remote.copy.lag.bytes": ABOVE,
        },
        50,
        UNSTUBBED,
        [],
    ),
    (
        "UploadWhenLargestTimestampLookupFails",
        {"retention.ms": 10_000, "remote.copy.lag.ms": 100, "remote.copy.lag.bytes": -1},
        None,
        50,
        [5],
    ),
    (
        "UploadWhenLargestTimestampInFuture",
        {"retention.ms": 10_000, "remote.copy.lag.ms": 100, "remote.copy.lag.bytes": -1},
        -100,
        50,
        [5],
    ),
]


def _failing_timestamp() -> int:
    raise OSError("failed-to-read-largest-timestamp")


@pytest.mark.parametrize(
    ("props", "age1", "age2", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in LAG_CASES],
)
def test_remote_lag_copy(
    log_dir: Path,
    closing: list[LocalLog],
    monkeypatch: pytest.MonkeyPatch,
    props: dict[str, object],
    age1: int | None,
    age2: int,
    expected: list[int],
) -> None:
    """Kafka's RemoteLagCopyTest, case by case (KAFKA-FACTS 5.2 and 6.1 item 9)."""
    log = make_log(log_dir, (NOW - (age1 or 0), NOW - age2))
    closing.append(log)
    first, second, active = log.segments
    assert len({first.size, second.size, active.size}) == 3  # distinct, as Kafka's 40/30/20
    bytes_after_first = second.size + active.size
    resolved = {
        key: {BOUNDARY: bytes_after_first, ABOVE: bytes_after_first + 1}.get(str(v), v)
        for key, v in props.items()
    }
    log.update_config(LogConfig.from_props({**BASE_PROPS, **resolved}))
    if age1 is None:
        monkeypatch.setattr(first, "largest_timestamp", _failing_timestamp)
    else:
        assert first.largest_timestamp() == NOW - age1
    result = candidate_log_segments(log, 5, 20, now_ms=NOW)
    assert [c.segment.base_offset for c in result] == expected
    assert [c.next_segment_offset for c in result] == [b + 5 for b in expected]


def test_copy_lag_minus_one_follows_the_effective_local_retention() -> None:
    """-1 means ``local.retention.*``, itself ``retention.*`` when -2 (Kafka's LogConfig)."""
    config = LogConfig.from_props(
        {
            "retention.ms": 10_000,
            "local.retention.ms": 100,
            "retention.bytes": 5000,
            "local.retention.bytes": DEFAULT_LOCAL_RETENTION_BYTES,
            "remote.copy.lag.ms": -1,
            "remote.copy.lag.bytes": -1,
        }
    )
    assert config.effective_remote_copy_lag_ms() == 100
    assert config.effective_remote_copy_lag_bytes() == 5000
    defaults = LogConfig()
    assert defaults.effective_remote_copy_lag_ms() == 0
    assert defaults.effective_remote_copy_lag_bytes() == -1


# is_eligible_for_upload ---------------------------------------------------------------------------
def test_is_eligible_for_upload_counts_the_bytes_after_the_segment_from_from_offset(
    log_dir: Path, closing: list[LocalLog]
) -> None:
    log = make_log(log_dir, (NOW, NOW))
    closing.append(log)
    first, second, active = log.segments
    log.update_config({"remote.copy.lag.ms": -1, "remote.copy.lag.bytes": active.size})

    def eligible(segment: LogSegment, from_offset: int, cumulative: int) -> bool:
        return is_eligible_for_upload(log, segment, from_offset, cumulative, now_ms=NOW)

    # The bytes after the second segment are the active segment's, whatever from_offset is.
    assert eligible(second, 5, first.size + second.size)
    assert eligible(second, 10, second.size)
    # Counted from 10, the first segment's bytes are not in the total: one byte short.
    assert not eligible(second, 10, second.size + 1)
    # The total may be given (candidate_log_segments computes it once).
    assert is_eligible_for_upload(
        log, second, 10, second.size, now_ms=NOW, total_size=second.size + active.size
    )
    assert not is_eligible_for_upload(
        log, second, 10, second.size, now_ms=NOW, total_size=second.size + active.size - 1
    )


def test_candidates_count_the_byte_lag_from_from_offset(
    log_dir: Path, closing: list[LocalLog]
) -> None:
    log = make_log(log_dir, (NOW, NOW))
    closing.append(log)
    active = log.segments[-1]
    log.update_config({"remote.copy.lag.ms": -1, "remote.copy.lag.bytes": active.size + 1})
    # From 5 the first segment is followed by enough bytes; the second is not.
    assert bases(candidate_log_segments(log, 5, 20, now_ms=NOW)) == [(5, 10)]
    log.update_config({"remote.copy.lag.bytes": active.size})
    assert bases(candidate_log_segments(log, 10, 20, now_ms=NOW)) == [(10, 15)]


def test_a_segment_without_timestamps_ages_by_its_file_time(
    log_dir: Path, closing: list[LocalLog]
) -> None:
    # Records without a timestamp (-1): the largest timestamp is the .log file's mtime.
    log = open_log(log_dir, **{"remote.copy.lag.ms": 100, "retention.ms": 10_000})
    closing.append(log)
    log.append_as_leader(records(5, 10, -1), 0)
    log.roll()
    log.append_as_leader(records(5, 10, NOW), 0)
    sealed = log.segments[0]
    sealed.set_last_modified(NOW - 99)
    assert sealed.largest_timestamp() == NOW - 99
    assert candidate_log_segments(log, 0, 10, now_ms=NOW) == []
    sealed.set_last_modified(NOW - 100)
    assert bases(candidate_log_segments(log, 0, 10, now_ms=NOW)) == [(0, 5)]


# copy_lag -----------------------------------------------------------------------------------------
def test_copy_lag_with_only_active_segment(log_dir: Path, closing: list[LocalLog]) -> None:
    """RemoteLogManagerTest.testCopyLagMetricsWithOnlyActiveSegment."""
    log = make_log(log_dir, ())
    closing.append(log)
    assert log.active_segment.size > 0
    assert copy_lag(log) == (0, 0)


def test_copy_lag_with_multiple_segments(log_dir: Path, closing: list[LocalLog]) -> None:
    """RemoteLogManagerTest.testCopyLagMetricsWithMultipleSegments: every segment but the active
    one is local only (nothing in remote storage yet)."""
    log = make_log(log_dir, (NOW, NOW))
    closing.append(log)
    first, second, _ = log.segments
    assert log.highest_offset_in_remote_storage == -1
    assert copy_lag(log) == (first.size + second.size, 2)
    # Once the first segment (5..9) is in remote storage, only the second lags.
    log.update_highest_offset_in_remote_storage(9)
    assert copy_lag(log) == (second.size, 1)
    # Kafka's filter is base offset >= highest remote offset: a segment starting exactly there
    # still counts as local only.
    log.update_highest_offset_in_remote_storage(10)
    assert copy_lag(log) == (second.size, 1)
    log.update_highest_offset_in_remote_storage(11)
    assert copy_lag(log) == (0, 0)


def test_copy_lag_after_leader_change_with_higher_remote_offset(
    log_dir: Path, closing: list[LocalLog]
) -> None:
    """RemoteLogManagerTest.testCopyLagMetricsAfterLeaderChangeWithHigherRemoteOffset: the
    active segment starts below the highest remote offset, so nothing is local only and the
    lag is 0, not negative."""
    log = make_log(log_dir, (NOW, NOW))
    closing.append(log)
    log.update_highest_offset_in_remote_storage(17)
    assert log.active_segment.base_offset == 15
    assert log.only_local_log_segments_size() == 0
    assert copy_lag(log) == (0, 0)
