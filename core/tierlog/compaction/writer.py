"""Writing a cleaned segment: ``<base>.log.cleaned`` with its rebuilt indexes.

Kafka's cleaner writes each output group into a new segment named by the group's first base
offset with the ``.cleaned`` suffix (``createNewCleanedSegment``), appending the surviving
batches through ``LogSegment.append`` so the offset and time indexes get entries by the same
``index.interval.bytes`` rule as on produce (the first batch is never indexed), appending the
kept aborted-transaction entries to its transaction index, then closing it as an inactive
segment (final time index entry, trimmed indexes), flushing it and giving it the modification
time of the group's last source segment. ``CleanedSegmentWriter`` does exactly that; the same
writer builds the segments uploaded to remote storage (in a scratch directory).
"""

from __future__ import annotations

import os
from pathlib import Path

from tierlog.log.batch import RecordBatch
from tierlog.log.files import log_file, offset_index_file, time_index_file, transaction_index_file
from tierlog.log.log_config import LogConfig
from tierlog.log.segment import LogSegment
from tierlog.log.txn_index import AbortedTxn
from tierlog.spi import InvalidArgumentError

__all__ = ["CLEANED_SUFFIX", "CleanedSegmentWriter"]

CLEANED_SUFFIX = ".cleaned"


class CleanedSegmentWriter:
    """One output segment of a clean, being written (see the module docstring)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        base_offset: int,
        config: LogConfig,
        *,
        suffix: str = CLEANED_SUFFIX,
    ) -> None:
        directory = Path(directory)
        for make in (log_file, offset_index_file, time_index_file, transaction_index_file):
            make(directory, base_offset, suffix).unlink(missing_ok=True)  # a stale attempt's
        self._segment = LogSegment.open(directory, base_offset, config, suffix=suffix)
        self._batches = 0
        self._last_offset = base_offset - 1

    @property
    def segment(self) -> LogSegment:
        return self._segment

    @property
    def batches(self) -> int:
        return self._batches

    @property
    def size(self) -> int:
        return self._segment.size

    def append(self, header: RecordBatch, data: bytes, index_entry: AbortedTxn | None) -> None:
        """Append one surviving batch (and the transaction index entry its marker keeps)."""
        if header.base_offset <= self._last_offset:
            raise InvalidArgumentError(
                f"cleaned batches out of order: {header.base_offset} after {self._last_offset}"
            )
        if index_entry is not None:
            self._segment.txn_index.append(index_entry)
        self._segment.append(header.last_offset, data, [header])
        self._last_offset = header.last_offset
        self._batches += 1

    def finish(self, last_modified_ms: int | None) -> LogSegment:
        """Seal the segment: final time index entry, trimmed indexes, fsync, mtime."""
        segment = self._segment
        segment.on_become_inactive_segment()
        segment.flush()
        if last_modified_ms is not None:
            segment.set_last_modified(last_modified_ms)
        return segment

    def abort(self) -> None:
        """Delete what was written (a failed round leaves no ``.cleaned`` file behind)."""
        self._segment.delete_if_exists()
