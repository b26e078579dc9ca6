"""tierlog.progress: plain milestone lines off a terminal, a rich bar on one."""

from __future__ import annotations

import io

import pytest

from tierlog.progress import Progress


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_one_line_per_step_and_a_last_line() -> None:
    out = io.StringIO()
    clock = _Clock()
    with Progress("copy", total=1000, unit="segments", file=out, step=25, monotonic=clock) as p:
        assert not p.is_terminal
        for _ in range(1000):
            clock.now += 0.01
            p.advance()
    lines = out.getvalue().splitlines()
    # 25, 50, 75 while running, then the final 100 %; never a carriage return.
    assert [line.split("%")[0].split("]")[1].strip() for line in lines] == [
        "25.0",
        "50.0",
        "75.0",
        "100.0",
    ]
    assert "\r" not in out.getvalue()
    assert lines[-1] == "[copy] 100.0%  1,000 / 1,000 segments  100 segments/s"


def test_bytes_are_shown_in_mib() -> None:
    out = io.StringIO()
    clock = _Clock()
    with Progress("produce", total=8 << 20, unit="bytes", file=out, step=50, monotonic=clock) as p:
        clock.now += 2
        p.update(4 << 20)
        clock.now += 2
        p.update(8 << 20)
    assert out.getvalue().splitlines() == [
        "[produce]  50.0%  4.0 / 8.0 MiB  2.0 MiB/s",
        "[produce] 100.0%  8.0 / 8.0 MiB  2.0 MiB/s",
    ]


def test_a_jump_over_several_steps_prints_one_line() -> None:
    out = io.StringIO()
    with Progress("x", total=100, file=out, step=10) as p:
        p.update(95)
        p.update(96)
    assert len(out.getvalue().splitlines()) == 2  # 95 % once, then the last line


def test_no_last_line_when_the_work_failed() -> None:
    out = io.StringIO()
    with pytest.raises(RuntimeError), Progress("x", total=100, file=out, step=50) as p:
        p.update(10)
        raise RuntimeError("boom")
    assert out.getvalue() == ""


def test_bad_step_is_refused() -> None:
    with pytest.raises(ValueError, match="step"):
        Progress("x", total=1, step=0)


def test_on_a_terminal_a_bar_is_drawn() -> None:
    class _Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = _Tty()
    with Progress("consume", total=10, unit="records", file=out) as p:
        assert p.is_terminal
        p.advance(10)
    assert "consume" in out.getvalue() and "10/10" in out.getvalue()
