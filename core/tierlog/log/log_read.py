"""Reading a partition's local log: fetches, offset lookups by timestamp, offset metadata.

``LocalLog.read(fetch_offset, max_bytes, isolation)`` returns whole batches, bounded by the high
watermark (``read_uncommitted``), the last stable offset (``read_committed``, with the aborted
transactions of the range) or the log end (``log_end``, for replication and tiering).
``fetch_offset_by_timestamp`` answers Kafka's ListOffsets from the local segments. Reads only
look at the shared ``LogState`` (under its lock); nothing here moves an offset, so a later part
that rewrites segments (a cleaner) need only keep the segments consistent for reads to follow.
"""

from __future__ import annotations

from typing import Final, Literal

from tierlog.log.log_errors import OffsetMovedToTieredStorageError, OffsetOutOfRangeError
from tierlog.log.log_state import LogState
from tierlog.log.record import NO_TIMESTAMP
from tierlog.log.segment import FetchDataInfo, LogOffsetMetadata, LogSegment, TimestampAndOffset
from tierlog.log.txn_index import AbortedTxn
from tierlog.spi import InvalidArgumentError

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "Isolation",
    "LogReader",
]

Isolation = Literal["read_uncommitted", "read_committed", "log_end"]
"""How far a read may go: the high watermark, the last stable offset, or the log end."""

EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1
EARLIEST_LOCAL_TIMESTAMP: Final = -4


class LogReader:
    """Reads batches and offsets from a ``LogState`` (see the module docstring)."""

    __slots__ = ("_state",)

    def __init__(self, state: LogState) -> None:
        self._state = state

    def offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """Where ``offset`` is: its segment and the position of the batch holding it, or of the
        first batch after it (message-only metadata outside the local log)."""
        st = self._state
        if offset == st.log_end_offset:
            active = st.segments.active_segment
            return LogOffsetMetadata(offset, active.base_offset, active.size)
        segment = st.segments.floor_segment(offset)
        if offset > st.log_end_offset or segment is None:
            return LogOffsetMetadata(offset)
        located = segment.translate_offset(offset)
        if located is not None:
            return LogOffsetMetadata(offset, segment.base_offset, located.position)
        nxt = st.segments.higher_segment(segment.base_offset)
        if nxt is not None:
            return LogOffsetMetadata(offset, nxt.base_offset, 0)
        return LogOffsetMetadata(offset, segment.base_offset, segment.size)

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation: Isolation = "read_uncommitted",
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """``LocalLog.read``: whole batches from the one holding ``fetch_offset``."""
        if isolation not in ("read_uncommitted", "read_committed", "log_end"):
            raise InvalidArgumentError(f"unknown isolation {isolation!r}")
        if max_bytes < 0:
            raise InvalidArgumentError(f"max_bytes must be >= 0, got {max_bytes}")
        st = self._state
        with st.lock:
            st.check_open()
            if fetch_offset < st.log_start_offset or fetch_offset > st.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"Received request for offset {fetch_offset} for partition {st.tp}, but we "
                    f"only have log segments in the range {st.log_start_offset} to "
                    f"{st.log_end_offset}."
                )
            segments = st.segments
            first_local = max(st.local_log_start_offset, segments.base_offsets[0])
            if fetch_offset < first_local:
                if not st.remote_log_enabled:
                    raise OffsetOutOfRangeError(
                        f"Offset {fetch_offset} of partition {st.tp} is below the first "
                        f"offset of the log's segments, {first_local}"
                    )
                raise OffsetMovedToTieredStorageError(
                    f"Offset {fetch_offset} of partition {st.tp} is below the local log start "
                    f"offset {first_local}: it is only in remote storage"
                )
            committed = isolation == "read_committed"
            if isolation == "log_end":
                max_offset = st.log_end_offset
            elif committed:
                max_offset = st.last_stable_offset
            else:
                max_offset = st.high_watermark
            empty_aborted: list[AbortedTxn] | None = [] if committed else None
            if fetch_offset >= max_offset:
                return FetchDataInfo(self.offset_metadata(fetch_offset), b"", False, empty_aborted)
            max_meta = self.offset_metadata(max_offset)
            segment = segments.floor_segment(fetch_offset)
            while segment is not None:
                if segment.base_offset < max_meta.segment_base_offset:
                    max_position = segment.size
                elif segment.base_offset == max_meta.segment_base_offset:
                    max_position = max_meta.relative_position_in_segment
                else:
                    max_position = 0
                info = segment.read(fetch_offset, max_bytes, max_position, min_one_message)
                if info is not None:
                    if committed:
                        info = info._replace(
                            aborted_transactions=self._aborted_transactions_for(
                                fetch_offset, segment, info
                            )
                        )
                    return info
                segment = segments.higher_segment(segment.base_offset)
            return FetchDataInfo(self.offset_metadata(st.log_end_offset), b"", False, empty_aborted)

    def _aborted_transactions_for(
        self, fetch_offset: int, segment: LogSegment, info: FetchDataInfo
    ) -> list[AbortedTxn]:
        upper = segment.fetch_upper_bound_offset(info.fetch_offset_metadata, len(info.records))
        if upper is None:
            nxt = self._state.segments.higher_segment(segment.base_offset)
            upper = nxt.base_offset if nxt is not None else self._state.log_end_offset
        found: list[AbortedTxn] = []
        for seg in [segment, *self._state.segments.higher_segments(segment.base_offset)]:
            result = seg.collect_aborted_txns(fetch_offset, upper)
            found.extend(result.aborted_transactions)
            if result.is_complete:
                break
        return found

    def fetch_offset_by_timestamp(self, target_timestamp: int) -> TimestampAndOffset | None:
        """``LocalLog.fetch_offset_by_timestamp``: Kafka's ListOffsets on the local segments."""
        st = self._state
        with st.lock:
            st.check_open()
            if target_timestamp == EARLIEST_TIMESTAMP:
                return TimestampAndOffset(
                    NO_TIMESTAMP,
                    st.log_start_offset,
                    st.epochs.epoch_for_offset(st.log_start_offset),
                )
            if target_timestamp == LATEST_TIMESTAMP:
                return TimestampAndOffset(NO_TIMESTAMP, st.log_end_offset, st.epochs.latest_epoch())
            if target_timestamp == EARLIEST_LOCAL_TIMESTAMP:
                local = st.local_log_start_offset
                return TimestampAndOffset(NO_TIMESTAMP, local, st.epochs.epoch_for_offset(local))
            if target_timestamp < 0:
                raise InvalidArgumentError(f"unsupported target timestamp {target_timestamp}")
            for segment in st.segments.values():
                if segment.largest_timestamp() >= target_timestamp:
                    return segment.find_offset_by_timestamp(
                        target_timestamp, st.local_log_start_offset
                    )
            return None
