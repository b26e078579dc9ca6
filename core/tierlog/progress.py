"""Progress of long work: quickstart phases, replays, migrations, compactions, benchmarks.

One way to show it, whoever the caller is. On a terminal, a ``rich`` progress bar redrawn in
place (description, bar, percentage, amount, rate, time left). Anywhere else (a CI log, a pipe,
a file), one plain line each ``step`` percent and a last line at the end, so that a log holds a
handful of lines instead of thousands of carriage returns.

    with Progress("produce", total=size, unit="bytes", file=sys.stderr) as progress:
        for chunk in chunks:
            ...
            progress.advance(len(chunk))

``unit="bytes"`` shows amounts in MiB and rates in MiB/s; any other unit is counted as is
(``"segments"``, ``"records"``, ...).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import Final, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    ProgressColumn,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.progress import Progress as _RichProgress

__all__ = ["Progress"]

_MIB: Final = 1024 * 1024


class Progress:
    """A counter of done work out of ``total``, shown on ``file`` (default: stderr).

    ``monotonic`` is the clock of the rate in plain lines (injectable for tests).
    """

    def __init__(
        self,
        description: str,
        total: float,
        *,
        unit: str = "items",
        file: TextIO | None = None,
        step: float = 10.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if step <= 0 or step > 100:
            raise ValueError(f"step must be in (0, 100], got {step}")
        self.description = description
        self.total = max(float(total), 1.0)
        self.unit = unit
        self.step = step
        self.done = 0.0
        self._file = file if file is not None else sys.stderr
        self._monotonic = monotonic
        self._started = self._monotonic()
        self._next_percent = step
        self._console = Console(file=self._file, stderr=file is None)
        self._rich: _RichProgress | None = None
        self._task: object = None
        self._finished = False

    @property
    def is_terminal(self) -> bool:
        """True when the bar is redrawn in place (the output is a terminal)."""
        return self._console.is_terminal

    def __enter__(self) -> Progress:
        if self.is_terminal:
            columns: tuple[ProgressColumn, ...]
            if self.unit == "bytes":
                columns = (DownloadColumn(binary_units=True), TransferSpeedColumn())
            else:
                columns = (MofNCompleteColumn(), TextColumn(self.unit))
            self._rich = _RichProgress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                *columns,
                TimeRemainingColumn(),
                console=self._console,
                transient=False,
            )
            self._rich.start()
            self._task = self._rich.add_task(self.description, total=self.total)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(completed=exc_type is None)

    def advance(self, amount: float = 1) -> None:
        """``amount`` more units done."""
        self.update(self.done + amount)

    def update(self, done: float) -> None:
        """``done`` units done in all."""
        self.done = float(done)
        if self._rich is not None:
            self._rich.update(self._task, completed=min(self.done, self.total))  # type: ignore[arg-type]
            return
        percent = 100.0 * self.done / self.total
        if percent + 1e-9 < self._next_percent:
            return
        while self._next_percent <= percent + 1e-9:
            self._next_percent += self.step
        if self.done < self.total:
            self._line(percent)

    def close(self, *, completed: bool = True) -> None:
        """Stop the bar (or write the last line); idempotent."""
        if self._finished:
            return
        self._finished = True
        if self._rich is not None:
            self._rich.stop()
            return
        if completed:
            self._line(100.0 * self.done / self.total)

    def _line(self, percent: float) -> None:
        elapsed = max(self._monotonic() - self._started, 1e-6)
        if self.unit == "bytes":
            amount = f"{self.done / _MIB:,.1f} / {self.total / _MIB:,.1f} MiB"
            rate = f"{self.done / _MIB / elapsed:,.1f} MiB/s"
        else:
            amount = f"{self.done:,.0f} / {self.total:,.0f} {self.unit}"
            rate = f"{self.done / elapsed:,.0f} {self.unit}/s"
        print(
            f"[{self.description}] {percent:5.1f}%  {amount}  {rate}",
            file=self._file,
            flush=True,
        )
