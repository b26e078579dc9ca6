"""``tierlog.spi.check_fetch_range``: the one check of ``fetch_log_segment``'s arguments, and
the clamp of its inclusive range to the stored segment, that every RSM uses."""

from __future__ import annotations

import pytest

import tierlog.spi
from tierlog.spi import InvalidArgumentError, check_fetch_range


def test_it_is_part_of_the_plugin_contract() -> None:
    assert "check_fetch_range" in tierlog.spi.__all__
    assert tierlog.spi.check_fetch_range is check_fetch_range


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (-1, None, "start position must be >= 0, got -1"),
        (-1, 10, "start position must be >= 0, got -1"),
        (-5, -6, "start position must be >= 0, got -5"),
        (2, 1, "end position 1 is before start position 2"),
        (1, -1, "end position -1 is before start position 1"),
    ],
)
def test_a_bad_range_is_invalid_argument_with_or_without_size(
    start: int, end: int | None, message: str
) -> None:
    """Kafka's ``IllegalArgumentException`` is ``InvalidArgumentError``, a ``ValueError``; the
    size does not matter (the check comes before the store is touched)."""
    with pytest.raises(InvalidArgumentError) as without_size:
        check_fetch_range(start, end)
    assert str(without_size.value) == message
    assert isinstance(without_size.value, ValueError)
    for size in (0, 100):
        with pytest.raises(InvalidArgumentError, match=message):
            check_fetch_range(start, end, size)


@pytest.mark.parametrize(("start", "end"), [(0, None), (0, 0), (7, 7), (7, 100), (10**12, None)])
def test_a_good_range_without_size_passes_and_returns_nothing(start: int, end: int | None) -> None:
    assert check_fetch_range(start, end) is None


@pytest.mark.parametrize(
    ("start", "end", "size", "length"),
    [
        pytest.param(0, 99, 100, 100, id="whole"),
        pytest.param(0, 0, 100, 1, id="first-byte"),
        pytest.param(99, 99, 100, 1, id="last-byte"),
        pytest.param(10, 19, 100, 10, id="middle"),
        pytest.param(50, None, 100, 50, id="no-end"),
        pytest.param(0, None, 100, 100, id="no-end-from-0"),
        pytest.param(50, 1_000, 100, 50, id="end-past-the-end-is-clamped"),
        pytest.param(50, 100, 100, 50, id="end-at-size-is-clamped"),
        pytest.param(100, 100, 100, 0, id="start-at-size"),
        pytest.param(100, None, 100, 0, id="start-at-size-no-end"),
        pytest.param(110, 120, 100, 0, id="start-past-size"),
        pytest.param(0, None, 0, 0, id="empty-segment"),
        pytest.param(0, 5, 0, 0, id="empty-segment-with-end"),
    ],
)
def test_with_size_it_returns_the_bytes_to_serve(
    start: int, end: int | None, size: int, length: int
) -> None:
    """The inclusive range clamped to the segment: what slicing the segment's bytes gives."""
    assert check_fetch_range(start, end, size) == length
    data = bytes(range(256))[:size]
    assert len(data[start : size if end is None else end + 1]) == length


def test_a_negative_size_is_invalid_argument() -> None:
    with pytest.raises(InvalidArgumentError, match="segment size must be >= 0, got -1"):
        check_fetch_range(0, None, -1)
