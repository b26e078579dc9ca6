"""``walk_batch_headers``: the C twin agrees with the pure walk on every input, and both answer
what a header walk must (where the whole batches end, why the walk stopped, the last batch).

The C function is imported from the extension directly, so these run whichever walk
``TIERLOG_NO_SPEEDUPS`` selects for the rest of the suite (see ``test_speedups.py``).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.log import batch as batch_module
from tierlog.log.batch import (
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    WALK_BAD,
    WALK_END,
    WALK_PARTIAL,
    build_batch,
    walk_batch_headers_pure,
)
from tierlog.log.record import Record

walk_c: Callable[[Any, int, int], tuple[int, int, int]] = importlib.import_module(
    "tierlog.log._speedups"
).walk_batch_headers

MIN_LENGTH = RECORD_BATCH_OVERHEAD - 12


def a_batch(values: int, size: int = 20) -> bytes:
    return build_batch([Record(i, 1000 + i, None, b"x" * size) for i in range(values)])


def both(data: Any) -> tuple[int, int, int]:
    pure = walk_batch_headers_pure(data, MIN_LENGTH, MAGIC_V2)
    assert walk_c(data, MIN_LENGTH, MAGIC_V2) == pure
    return pure


def test_whole_batches_then_a_partial_one() -> None:
    first, second, third = a_batch(1), a_batch(3), a_batch(2)
    data = first + second + third
    assert both(data) == (len(data), WALK_END, len(first) + len(second))
    assert both(data[:-5]) == (len(first) + len(second), WALK_PARTIAL, len(first))
    # Fewer than 17 bytes of the third: the walk cannot read its Length and magic.
    cut = len(first) + len(second) + 10
    assert both(data[:cut]) == (len(first) + len(second), WALK_END, len(first))
    assert both(b"") == (0, WALK_END, -1)
    assert both(first[:30]) == (0, WALK_PARTIAL, -1)


def test_bad_length_or_magic_stops_the_walk_where_it_is() -> None:
    first, second = a_batch(1), a_batch(2)
    bad_magic = bytearray(first + second)
    bad_magic[len(first) + 16] = 1
    assert both(bytes(bad_magic)) == (len(first), WALK_BAD, 0)
    short = bytearray(first + second)
    short[len(first) + 8 : len(first) + 12] = (MIN_LENGTH - 1).to_bytes(4, "big")
    assert both(bytes(short)) == (len(first), WALK_BAD, 0)
    negative = bytearray(first + second)
    negative[len(first) + 8 : len(first) + 12] = (-5).to_bytes(4, "big", signed=True)
    assert both(bytes(negative)) == (len(first), WALK_BAD, 0)
    # A Length past the end is a partial batch, even if the magic is wrong too.
    huge = bytearray(first + second)
    huge[len(first) + 8 : len(first) + 12] = (1 << 30).to_bytes(4, "big")
    huge[len(first) + 16] = 0
    assert both(bytes(huge)) == (len(first), WALK_PARTIAL, 0)


def test_any_buffer_kind_is_walked_alike() -> None:
    data = a_batch(2) + a_batch(5)
    expected = both(data)
    for view in (bytearray(data), memoryview(data), memoryview(bytearray(data))):
        assert both(view) == expected


def test_the_c_walk_refuses_wrong_arguments() -> None:
    with pytest.raises(TypeError, match="3 arguments"):
        walk_c(b"")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        walk_c("text", MIN_LENGTH, MAGIC_V2)
    with pytest.raises(BufferError):
        walk_c(memoryview(b"abcd")[::2], MIN_LENGTH, MAGIC_V2)  # not contiguous


def test_walk_batch_headers_is_the_accelerator_unless_ruled_out() -> None:
    selected = batch_module.walk_batch_headers
    assert selected is walk_c or selected is walk_batch_headers_pure
    assert (selected is walk_c) == (batch_module.SPEEDUPS_MODULE is not None)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """Valid batches, then a few bytes changed (often in a header) and maybe truncated."""
    data = bytearray(
        b"".join(
            a_batch(draw(st.integers(1, 4)), draw(st.integers(0, 40)))
            for _ in range(draw(st.integers(0, 5)))
        )
    )
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data[: draw(st.integers(0, len(data)))])


@given(data=mutated())
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_agree_on_mutated_batches(data: bytes) -> None:
    pos, status, last = both(data)
    assert 0 <= pos <= len(data) and status in (WALK_END, WALK_PARTIAL, WALK_BAD)
    assert last < pos or (last == -1 and pos == 0)


@given(data=st.binary(max_size=200))
@settings(max_examples=300, deadline=None)
def test_agree_on_random_bytes(data: bytes) -> None:
    both(data)


def test_an_accelerator_built_from_older_sources_leaves_the_pure_walk() -> None:
    """An installed ``_speedups`` from before ``walk_batch_headers`` existed (a stale build)
    must not break ``import tierlog.log.batch``: the pure walk is used instead."""
    script = (
        "import types, tierlog.log._accel as accel\n"
        "old = types.ModuleType('tierlog.log._speedups')\n"
        "old.decode_block = accel.SPEEDUPS_MODULE.decode_block\n"
        "old.configure = accel.SPEEDUPS_MODULE.configure\n"
        "accel.SPEEDUPS_MODULE = old\n"
        "from tierlog.log import batch\n"
        "assert batch.walk_batch_headers is batch.walk_batch_headers_pure\n"
        "print('pure')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pure"
