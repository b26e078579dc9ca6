"""Appending to a partition's local log, and rolling its active segment.

``LocalLog.append_as_leader`` and ``append_as_follower`` come here. A leader's append validates
the batches as Kafka's ``LogValidator`` does for a producer (magic 2, CRC, size, offsets/count
consistency, timestamps, no control batches from clients), assigns offsets in place
(``batch.assign_offsets``), stamps the partition leader epoch and, with
``message.timestamp.type=LogAppendTime``, the append time; producer state checks idempotence and
transactions (a retried batch returns its original offsets and is not written twice). On a
compacted topic a leader also refuses a record without a key (``LogValidator.validateKey``: a
null key; an empty key is a key), since the cleaner could never tell which record it supersedes;
as in Kafka, a follower does not check (its leader did) and control batches are not looked at.
A follower's append keeps the offsets it is given. Both roll the active segment first when
``segment.bytes``, ``segment.ms`` (with jitter; on a compacted topic ``max.compaction.lag.ms``
when it is smaller, Kafka's ``maxSegmentMs``), a full index or an offset overflow says so, and
record new leader epochs.

Rolling lives here because the append decides it; retention also asks for a roll (to make the
active segment deletable), through ``LogAppender.roll``. This is the write hot path: it works
on the shared ``LogState`` directly, with no indirection per batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from tierlog.log.batch import (
    LENGTH_FIELD,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    RecordBatch,
    TimestampType,
    assign_offsets,
    decode_batch,
    read_batch_header,
    set_max_timestamp,
    verify_crc,
)
from tierlog.log.compression import CompressionType
from tierlog.log.files import (
    log_file,
    offset_index_file,
    time_index_file,
    transaction_index_file,
)
from tierlog.log.log_errors import (
    InvalidRecordError,
    InvalidTimestampError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from tierlog.log.log_state import LogState
from tierlog.log.producer_state import (
    AppendOrigin,
    CompletedTxn,
    EndTxnMarker,
    InvalidProducerEpochError,
    ProducerAppendInfo,
)
from tierlog.log.record import NO_TIMESTAMP
from tierlog.log.segment import LogSegment, RollParams, read_end_txn_marker
from tierlog.spi import CorruptRecordError, IllegalStateError

__all__ = ["LogAppendInfo", "LogAppender", "RecordsInput"]

_LOG = logging.getLogger(__name__)

_LEGACY_MIN_RECORD_SIZE: Final = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0

RecordsInput = bytes | bytearray | memoryview | Iterable[bytes | bytearray | memoryview]
"""Batches to append: one buffer of whole batches, or an iterable of single batches."""


@dataclass(slots=True)
class LogAppendInfo:
    """What an append did (Kafka's ``LogAppendInfo``).

    ``duplicate`` is true when the batch was a producer's retry of a batch already in the log:
    nothing was written and the offsets are those of the original batch.
    """

    first_offset: int
    last_offset: int
    last_leader_epoch: int | None
    max_timestamp: int
    log_append_time: int
    log_start_offset: int
    valid_bytes: int
    num_batches: int
    source_compression: CompressionType = CompressionType.NONE
    offsets_monotonic: bool = True
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class _Duplicate:
    first_offset: int
    last_offset: int
    timestamp: int


def _to_buffer(records: RecordsInput) -> bytearray:
    if isinstance(records, bytes | bytearray | memoryview):
        return bytearray(records)
    return bytearray(b"".join(bytes(r) for r in records))


def _parse_input(buf: bytearray) -> list[tuple[int, RecordBatch]]:
    """The batches of an append buffer; a partial last batch ends the list, as Kafka's
    ``ByteBufferLogInputStream`` (a follower's fetch may end in one)."""
    out: list[tuple[int, RecordBatch]] = []
    pos = 0
    end = len(buf)
    while end - pos >= LOG_OVERHEAD:
        length: int = LENGTH_FIELD.unpack_from(buf, pos + LENGTH_OFFSET)[0]
        if length < _LEGACY_MIN_RECORD_SIZE:
            raise CorruptRecordError(
                f"Record size {length} is less than the minimum record overhead "
                f"({_LEGACY_MIN_RECORD_SIZE}) at position {pos} of the append",
                position=pos,
            )
        if LOG_OVERHEAD + length > end - pos:
            break
        header = read_batch_header(buf, pos, end=end)
        out.append((pos, header))
        pos += LOG_OVERHEAD + length
    return out


class LogAppender:
    """Validates and writes appends to a ``LogState``, and rolls its active segment."""

    __slots__ = ("_state",)

    def __init__(self, state: LogState) -> None:
        self._state = state

    # Validation ----------------------------------------------------------------------------------
    def _analyze_and_validate(
        self,
        buf: bytearray,
        origin: AppendOrigin,
        ignore_record_size: bool,
        require_offsets_monotonic: bool,
        leader_epoch: int,
    ) -> list[tuple[int, RecordBatch]]:
        st = self._state
        batches: list[tuple[int, RecordBatch]] = []
        last_offset = -1
        for pos, header in _parse_input(buf):
            if origin is AppendOrigin.CLIENT and header.base_offset != 0:
                raise InvalidRecordError(
                    f"The baseOffset of the record batch in the append to {st.tp} should be "
                    f"0, but it is {header.base_offset}"
                )
            if (
                origin is AppendOrigin.REPLICATION
                and header.partition_leader_epoch >= 0
                and header.partition_leader_epoch > leader_epoch
            ):
                _LOG.info(
                    "Skipping batch at offset %d and what follows: its partition leader epoch "
                    "%d is higher than the replica's current leader epoch %d",
                    header.base_offset,
                    header.partition_leader_epoch,
                    leader_epoch,
                )
                break
            if last_offset >= header.last_offset and require_offsets_monotonic:
                raise OffsetsOutOfOrderError(
                    f"Out of order offsets found in append to {st.tp}: batch ending at "
                    f"{header.last_offset} follows offset {last_offset}"
                )
            last_offset = header.last_offset
            size = LOG_OVERHEAD + header.length
            if not ignore_record_size and size > st.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"The record batch size in the append to {st.tp} is {size} bytes which "
                    f"exceeds the maximum configured value of {st.config.max_message_bytes}."
                )
            try:
                verify_crc(buf, pos, header)
            except CorruptRecordError as e:
                raise CorruptRecordError(
                    f"Record is corrupt (stored crc = {header.crc}) in topic partition "
                    f"{st.tp}: {e}",
                    position=pos,
                ) from e
            batches.append((pos, header))
        return batches

    def _validate_client_batch(
        self, buf: bytearray, pos: int, header: RecordBatch, now: int
    ) -> None:
        """``LogValidator.validateBatch`` and the timestamp checks, for a producer's batch."""
        tp = self._state.tp
        count = header.records_count
        if count <= 0:
            raise InvalidRecordError(
                f"Invalid reported count for record batch: {count} in topic partition {tp}"
            )
        if header.last_offset_delta + 1 != count:
            raise InvalidRecordError(
                f"Inconsistent batch offset range [{header.base_offset}, {header.last_offset}] "
                f"and count of records {count} in topic partition {tp}"
            )
        if header.is_control:
            raise InvalidRecordError(
                f"Clients are not allowed to write control records in topic partition {tp}"
            )
        if header.has_producer_id and header.base_sequence < 0:
            raise InvalidRecordError(
                f"Invalid sequence number {header.base_sequence} in record batch with producerId "
                f"{header.producer_id} in topic partition {tp}"
            )
        self._validate_timestamps(buf, pos, header, now)

    def _validate_keys(self, buf: bytearray, pos: int, header: RecordBatch) -> None:
        """Kafka's ``LogValidator.validateKey`` for a leader's append to a compacted topic: every
        record of a data batch has a key (``None`` is no key; ``b""`` is one). The first keyless
        record fails the append with Kafka's message; control batches carry their own keys."""
        if header.is_control:
            return
        _, records = decode_batch(buf, pos, verify=False)
        for record in records:
            if record.key is None:
                raise InvalidRecordError(
                    "Compacted topic cannot accept message without key in topic partition "
                    f"{self._state.tp}"
                )

    def _validate_timestamps(self, buf: bytearray, pos: int, header: RecordBatch, now: int) -> None:
        cfg = self._state.config
        if cfg.log_append_time:
            if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
                raise InvalidRecordError(
                    "Invalid timestamp type in batch: Producer should not set timestamp type to "
                    "LogAppendTime."
                )
            return
        if header.max_timestamp != NO_TIMESTAMP and (
            header.max_timestamp - now > cfg.message_timestamp_after_max_ms
        ):
            raise InvalidTimestampError(
                f"Timestamp {header.max_timestamp} of a message in the batch is out of range. The "
                f"timestamp should be within [{now - cfg.message_timestamp_before_max_ms}, "
                f"{now + cfg.message_timestamp_after_max_ms}]"
            )
        if cfg.message_timestamp_before_max_ms < (1 << 63) - 1:
            _, records = decode_batch(buf, pos, verify=False)
            for record in records:
                if record.timestamp != NO_TIMESTAMP and (
                    now - record.timestamp > cfg.message_timestamp_before_max_ms
                ):
                    raise InvalidTimestampError(
                        f"Timestamp {record.timestamp} of message with offset {record.offset} is "
                        f"out of range. The timestamp should be within "
                        f"[{now - cfg.message_timestamp_before_max_ms}, "
                        f"{now + cfg.message_timestamp_after_max_ms}]"
                    )

    # Appending -----------------------------------------------------------------------------------
    def append(
        self,
        records: RecordsInput,
        origin: AppendOrigin,
        assign: bool,
        leader_epoch: int,
        ignore_record_size: bool,
        *,
        transaction_version: int = 0,
    ) -> LogAppendInfo:
        """Append ``records``: as a leader (``assign``: offsets and epoch assigned here) or as a
        follower (offsets kept). Validation happens before the lock; nothing is written if it
        fails."""
        st = self._state
        buf = _to_buffer(records)
        batches = self._analyze_and_validate(
            buf, origin, ignore_record_size, not assign, leader_epoch
        )
        with st.lock:
            st.check_open()
            if not batches:
                return LogAppendInfo(
                    -1, -1, None, NO_TIMESTAMP, NO_TIMESTAMP, st.log_start_offset, 0, 0
                )
            valid = batches[-1][0] + LOG_OVERHEAD + batches[-1][1].length
            if valid < len(buf):
                del buf[valid:]
            now = st.clock()
            log_append_time = NO_TIMESTAMP
            compression = CompressionType.NONE
            for _, header in batches:
                if header.compression_id:
                    compression = header.compression
            if assign:
                first_offset = st.log_end_offset
                if origin is AppendOrigin.CLIENT:
                    for pos, header in batches:
                        self._validate_client_batch(buf, pos, header, now)
                if st.config.compact:
                    for pos, header in batches:
                        self._validate_keys(buf, pos, header)
                assign_offsets(buf, first_offset, partition_leader_epoch=leader_epoch)
                restamped = False
                if st.config.log_append_time:
                    log_append_time = now
                    for pos, _ in batches:
                        set_max_timestamp(buf, TimestampType.LOG_APPEND_TIME, now, pos)
                    restamped = True
                else:
                    for pos, header in batches:
                        if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
                            set_max_timestamp(
                                buf, TimestampType.CREATE_TIME, header.max_timestamp, pos
                            )
                            restamped = True
                if restamped:
                    headers = [read_batch_header(buf, pos) for pos, _ in batches]
                else:
                    headers = []
                    offset = first_offset
                    for _, header in batches:
                        headers.append(
                            header._replace(base_offset=offset, partition_leader_epoch=leader_epoch)
                        )
                        offset += header.last_offset_delta + 1
            else:
                headers = [header for _, header in batches]
                first_offset = headers[0].base_offset
                if first_offset < st.log_end_offset:
                    raise UnexpectedAppendOffsetError(
                        f"Unexpected offset in append to {st.tp}. First offset {first_offset} "
                        f"is less than the next offset {st.log_end_offset}. Last offset in "
                        f"append: {headers[-1].last_offset}. Log start offset = "
                        f"{st.log_start_offset}",
                        first_offset,
                        headers[-1].last_offset,
                    )
            last_offset = headers[-1].last_offset
            max_timestamp = max(h.max_timestamp for h in headers)

            for header in headers:
                if header.partition_leader_epoch >= 0:
                    st.epochs.assign(header.partition_leader_epoch, header.base_offset)

            if origin is not AppendOrigin.REPLICATION and valid > st.config.segment_size:
                raise RecordBatchTooLargeError(
                    f"Message batch size is {valid} bytes in append to partition {st.tp}, "
                    f"which exceeds the maximum configured segment size of "
                    f"{st.config.segment_size}."
                )

            segment = self._maybe_roll(valid, max_timestamp, first_offset, last_offset, now)
            updated, completed, duplicate = self._analyze_producer_state(
                buf, headers, origin, transaction_version
            )
            last_epoch = headers[-1].partition_leader_epoch
            info = LogAppendInfo(
                first_offset,
                last_offset,
                last_epoch if last_epoch >= 0 else None,
                log_append_time if log_append_time != NO_TIMESTAMP else max_timestamp,
                log_append_time,
                st.log_start_offset,
                valid,
                len(headers),
                compression,
            )
            if duplicate is not None:
                info.first_offset = duplicate.first_offset
                info.last_offset = duplicate.last_offset
                info.log_append_time = duplicate.timestamp if st.config.log_append_time else -1
                info.duplicate = True
                return info

            segment.append(last_offset, buf, headers)
            st.log_end_offset = last_offset + 1
            psm = st.psm
            for append_info in updated.values():
                psm.update(append_info)
            for txn in completed:
                lso = psm.last_stable_offset(txn)
                segment.update_txn_index(txn, lso)
                psm.complete_txn(txn)
            psm.update_map_end_offset(last_offset + 1)
            st.maybe_increment_first_unstable_offset()
            if st.hw_follows_leo:
                st.apply_high_watermark(st.log_end_offset)
            if st.log_end_offset - st.recovery_point >= st.config.flush_messages:
                st.flush(st.log_end_offset)
            return info

    def _analyze_producer_state(
        self,
        buf: bytearray,
        headers: list[RecordBatch],
        origin: AppendOrigin,
        transaction_version: int,
    ) -> tuple[dict[int, ProducerAppendInfo], list[CompletedTxn], _Duplicate | None]:
        psm = self._state.psm
        updated: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        pos = 0
        for header in headers:
            size = LOG_OVERHEAD + header.length
            if header.has_producer_id:
                pid = header.producer_id
                if origin is AppendOrigin.CLIENT:
                    entry = psm.last_entry(pid)
                    if entry is not None:
                        meta = entry.find_duplicate_batch(header)
                        if meta is not None:
                            return (
                                updated,
                                completed,
                                _Duplicate(meta.first_offset, meta.last_offset, meta.timestamp),
                            )
                if origin is not AppendOrigin.REPLICATION and header.is_transactional:
                    entry = psm.last_entry(pid)
                    ongoing = (
                        entry is not None
                        and entry.current_txn_first_offset is not None
                        and entry.producer_epoch == header.producer_epoch
                    )
                    if (
                        not ongoing
                        and entry is not None
                        and header.producer_epoch < entry.producer_epoch
                    ):
                        raise InvalidProducerEpochError(
                            f"Epoch of producer {pid} is {header.producer_epoch}, which is smaller "
                            f"than the last seen epoch {entry.producer_epoch}"
                        )
                marker: EndTxnMarker | None = None
                if header.is_control:
                    marker = read_end_txn_marker(buf, pos)
                info = updated.get(pid)
                if info is None:
                    info = psm.prepare_update(pid, origin)
                    updated[pid] = info
                txn = info.append(header, marker, transaction_version=transaction_version)
                if txn is not None:
                    completed.append(txn)
            pos += size
        return updated, completed, None

    # Rolling -------------------------------------------------------------------------------------
    def _maybe_roll(
        self, messages_size: int, max_timestamp: int, first_offset: int, last_offset: int, now: int
    ) -> LogSegment:
        st = self._state
        segment = st.segments.active_segment
        params = RollParams(
            st.config.max_segment_ms,
            st.config.segment_size,
            max_timestamp,
            last_offset,
            messages_size,
            now,
        )
        if segment.should_roll(params):
            _LOG.debug(
                "Rolling new log segment (log_size = %d/%d, offset_index_size = %d/%d, "
                "time_index_size = %d/%d, inactive_time_ms = %d/%d).",
                segment.size,
                st.config.segment_size,
                segment.offset_index.entries,
                segment.offset_index.max_entries,
                segment.time_index.entries,
                segment.time_index.max_entries,
                segment.time_waited_for_roll(now, max_timestamp),
                st.config.max_segment_ms - segment.roll_jitter_ms,
            )
            return self.roll(first_offset)
        return segment

    def roll(self, expected_next_offset: int | None) -> LogSegment:
        """Seal the active segment and start a new one at the log end offset (or later).

        The caller holds the lock. The sealed segment's indexes are trimmed and get their final
        time index entry; a producer snapshot is written at the new base offset; the sealed
        segment is flushed and the recovery point advanced (unless ``flush_on_roll=False``).
        """
        st = self._state
        start = time.monotonic()
        new_offset = max(expected_next_offset or 0, st.log_end_offset)
        active = st.segments.active_segment
        if st.segments.contains(new_offset):
            if active.base_offset == new_offset and active.size == 0:
                # KAFKA-6388: an empty active segment whose index is "full" (tiny index size).
                _LOG.warning(
                    "Trying to roll a new log segment with start offset %d while it already "
                    "exists and is active with size 0; recreating it",
                    new_offset,
                )
                new_segment = st.replace_segment(new_offset, active)
            else:
                raise IllegalStateError(
                    f"Trying to roll a new log segment for topic partition {st.tp} with start "
                    f"offset {new_offset} while it already exists. Existing segment is "
                    f"{st.segments.get(new_offset)!r}."
                )
        elif new_offset < active.base_offset:
            raise IllegalStateError(
                f"Trying to roll a new log segment for topic partition {st.tp} with start "
                f"offset {new_offset} lower than start offset of the active segment {active!r}"
            )
        else:
            for path in (
                log_file(st.dir, new_offset),
                offset_index_file(st.dir, new_offset),
                time_index_file(st.dir, new_offset),
                transaction_index_file(st.dir, new_offset),
            ):
                if path.exists():
                    _LOG.warning(
                        "Newly rolled segment file %s already exists; deleting it first", path
                    )
                    path.unlink()
            active.on_become_inactive_segment()
            new_segment = LogSegment.open(st.dir, new_offset, st.config, clock=st.clock)
            st.segments.add(new_segment)
        # A snapshot at the new base offset lets recovery start at this segment, and is what the
        # RLM ships with the segment just sealed.
        st.psm.update_map_end_offset(new_segment.base_offset)
        st.psm.take_snapshot()
        if st.flush_on_roll:
            st.flush(new_segment.base_offset)
        _LOG.info(
            "Rolled new log segment at offset %d in %.1f ms.",
            new_offset,
            (time.monotonic() - start) * 1000,
        )
        return new_segment
