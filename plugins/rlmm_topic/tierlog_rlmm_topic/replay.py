"""Progress of a long replay of the metadata topic.

Every (re)assignment replays the metadata partitions of the new user partitions from the
beginning (Kafka keeps no snapshot), which for a busy cluster is millions of records. A short
replay shows nothing; one that has many records to read (``records_threshold``) or has been
running for a while (``seconds_threshold``) shows a ``tierlog.progress.Progress`` of records,
with the user partitions ready out of those loading in its description. The meter holds a few
numbers per metadata partition, never the records.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from tierlog.progress import Progress

__all__ = [
    "DEFAULT_RECORDS_THRESHOLD",
    "DEFAULT_SECONDS_THRESHOLD",
    "ProgressFactory",
    "ReplayMeter",
    "ReplayProgressSettings",
]

DEFAULT_RECORDS_THRESHOLD: Final = 100_000
DEFAULT_SECONDS_THRESHOLD: Final = 5.0

ProgressFactory = Callable[[str, float], Progress]
"""``factory(description, total)``: the ``Progress`` to show (records as the unit)."""


def _default_factory(description: str, total: float) -> Progress:
    return Progress(description, total, unit="records")


@dataclass(frozen=True, slots=True)
class ReplayProgressSettings:
    """When a replay is long enough to show, and how to show it."""

    records_threshold: int = DEFAULT_RECORDS_THRESHOLD
    """Show progress at once when a replay has at least this many records to read."""
    seconds_threshold: float = DEFAULT_SECONDS_THRESHOLD
    """Otherwise show it once the replay has run this long."""
    factory: ProgressFactory = _default_factory


class ReplayMeter:
    """Counts one replay's records read and partitions ready; owned by the consumer thread."""

    def __init__(
        self,
        topic: str,
        settings: ReplayProgressSettings,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._topic = topic
        self._settings = settings
        self._monotonic = monotonic
        self._ranges: dict[int, tuple[int, int]] = {}
        self._positions: dict[int, int] = {}
        self._started: float | None = None
        self._progress: Progress | None = None
        self.shown = 0
        """How many replays were shown (for tests and logs)."""

    @property
    def active(self) -> bool:
        return self._started is not None

    def add(self, partition: int, begin: int, end: int) -> None:
        """A metadata partition joins the replay: records ``[begin, end)`` are to be read."""
        if self._started is None:
            self._started = self._monotonic()
        self._ranges[partition] = (begin, end)
        self._positions.setdefault(partition, begin)

    def drop(self, partition: int) -> None:
        """The partition left the replay (unassigned, or paused on an unreadable record)."""
        self._ranges.pop(partition, None)
        self._positions.pop(partition, None)

    def position(self, partition: int, position: int) -> None:
        """The consumer's next offset in ``partition``."""
        if partition in self._ranges:
            self._positions[partition] = position

    def _counts(self) -> tuple[int, int]:
        total = done = 0
        for partition, (begin, end) in self._ranges.items():
            total += end - begin
            done += min(max(self._positions.get(partition, begin), begin), end) - begin
        return done, total

    def update(self, ready: int, loading: int) -> None:
        """Show or advance the progress; ``ready`` of ``ready + loading`` user partitions are
        done. A replay ends when nothing is loading."""
        if self._started is None:
            return
        done, total = self._counts()
        if loading == 0:
            self._finish(done)
            return
        description = f"replaying {self._topic}: {ready}/{ready + loading} partitions ready"
        if self._progress is None:
            long = total >= self._settings.records_threshold or (
                self._monotonic() - self._started >= self._settings.seconds_threshold
            )
            if not long or total == 0:
                return
            self._progress = self._settings.factory(description, total)
            self._progress.__enter__()
            self.shown += 1
        self._progress.description = description
        self._progress.total = max(float(total), 1.0)
        self._progress.update(done)

    def _finish(self, done: int) -> None:
        if self._progress is not None:
            self._progress.update(done)
            self._progress.close()
            self._progress = None
        self._ranges.clear()
        self._positions.clear()
        self._started = None

    def close(self) -> None:
        """Stop showing (the task is closing)."""
        if self._progress is not None:
            self._progress.close(completed=False)
            self._progress = None
        self._started = None
