"""The cleaner-offset vector through the metadata store and the embedded RLMM's files.

The embedded RLMM stores the very record values a broker would produce (``serde.serialize``), so
the vector is in its files as tag 1272 of the add record, and a restart replays it; a record
whose vector is malformed stops the load with ``CorruptRecordError`` naming the field, like any
unreadable event. ``RemotePartitionMetadataStore`` hands each event to the cache, which keeps
the vector of the add record through the updates. (The topic RLMM's replay is in
``test_cleaner_offsets_kafka.py``; the suite's ``test_cleaner_offsets_*`` run on both RLMMs.)
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from tierlog.metadata import serde
from tierlog.metadata._record_log import RecordLog
from tierlog.metadata.embedded import (
    METADATA_DIR_NAME,
    NUM_PARTITIONS_CONFIG,
    EmbeddedRemoteLogMetadataManager,
)
from tierlog.metadata.partitioner import metadata_partition
from tierlog.metadata.store import RemotePartitionMetadataStore
from tierlog.spi import (
    CorruptRecordError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    Uuid,
)

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
PARTITIONS = "4"
TAG_1272 = b"\xf8\x09"  # the tag's unsigned varint


def segment(
    tip: TopicIdPartition,
    start: int,
    end: int,
    epochs: dict[int, int],
    vector: dict[int, int] | None,
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(tip),
        start,
        end,
        -1,
        0,
        1_700_000_000_000 + start,
        1024,
        epochs,
        cleaner_offsets=vector,
    )


def update(
    m: RemoteLogSegmentMetadata, state: RemoteLogSegmentState
) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        m.remote_log_segment_id, m.event_timestamp_ms + 1, None, state, 1
    )


def open_rlmm(directory: Path, *tips: TopicIdPartition) -> EmbeddedRemoteLogMetadataManager:
    rlmm = EmbeddedRemoteLogMetadataManager()
    rlmm.configure({"dir": str(directory), NUM_PARTITIONS_CONFIG: PARTITIONS})
    if tips:
        rlmm.on_partition_leadership_changes(set(tips), set())
    return rlmm


def payloads(path: Path) -> list[bytes]:
    """A record log's payloads, parsed independently of RecordLog (length, crc32, payload)."""
    data, out, pos = path.read_bytes(), [], 0
    while pos < len(data):
        length, crc = struct.unpack_from(">II", data, pos)
        payload = data[pos + 8 : pos + 8 + length]
        assert zlib.crc32(payload) == crc
        out.append(payload)
        pos += 8 + length
    return out


def tag_1272(vector: dict[int, int]) -> bytes:
    """Tag 1272 with its size and data: a compact array of (int32, int64, no tags) entries."""
    data = bytes([len(vector) + 1]) + b"".join(
        struct.pack(">iqB", epoch, offset, 0) for epoch, offset in sorted(vector.items())
    )
    return TAG_1272 + bytes([len(data)]) + data


def by_id(segments: object) -> dict[RemoteLogSegmentId, RemoteLogSegmentMetadata]:
    return {m.remote_log_segment_id: m for m in segments}  # type: ignore[attr-defined]


def test_the_embedded_rlmm_writes_the_vector_and_replays_it(tmp_path: Path) -> None:
    tip = TopicIdPartition(Uuid.random(), "compacted", 2)
    copied = segment(tip, 0, 99, {0: 0}, None)
    cleaned = segment(tip, 0, 99, {0: 0}, {0: 99})
    newer = segment(tip, 100, 199, {0: 100, 3: 180}, {0: 179, 3: 199})
    started = segment(tip, 200, 249, {3: 200}, {0: 179, 3: 249})
    rlmm = open_rlmm(tmp_path, tip)
    events: list[object] = []
    for m in (copied, cleaned, newer):
        rlmm.add_remote_log_segment_metadata(m).result()
        rlmm.update_remote_log_segment_metadata(update(m, FINISHED)).result()
        events += [m, update(m, FINISHED)]
    rlmm.add_remote_log_segment_metadata(started).result()
    rlmm.update_remote_log_segment_metadata(update(newer, DELETE_STARTED)).result()
    events += [started, update(newer, DELETE_STARTED)]
    before = by_id(rlmm.list_remote_log_segments(tip))
    rlmm.close()

    # The file holds the record values a broker would produce, the vector as tag 1272.
    log = tmp_path / f"{METADATA_DIR_NAME}-{metadata_partition(tip, int(PARTITIONS))}.log"
    written = payloads(log)
    assert written == [serde.serialize(e) for e in events]  # type: ignore[arg-type]
    for payload, event in zip(written, events, strict=True):
        vector = getattr(event, "cleaner_offsets", None)
        if vector is not None:  # the section ends with the tag, built here by hand
            assert payload.endswith(tag_1272(vector)), payload.hex()

    again = open_rlmm(tmp_path, tip)
    try:
        after = by_id(again.list_remote_log_segments(tip))
        assert after == before
        vectors = {
            k: None if m.cleaner_offsets is None else dict(m.cleaner_offsets)
            for k, m in after.items()
        }
        assert vectors == {
            copied.remote_log_segment_id: None,
            cleaned.remote_log_segment_id: {0: 99},
            newer.remote_log_segment_id: {0: 179, 3: 199},
            started.remote_log_segment_id: {0: 179, 3: 249},
        }
        assert after[newer.remote_log_segment_id].state is DELETE_STARTED
        served = again.remote_log_segment_metadata(tip, 0, 50)
        assert served == cleaned.create_with_updates(update(cleaned, FINISHED))
    finally:
        again.close()


def test_a_malformed_vector_in_the_files_stops_the_load(tmp_path: Path) -> None:
    tip = TopicIdPartition(Uuid.random(), "compacted", 0)
    good = segment(tip, 0, 99, {0: 0}, {0: 99})
    open_rlmm(tmp_path, tip).close()  # writes rlmm.properties
    data = serde.serialize(good)
    at = len(data) - len(tag_1272({0: 99}))
    assert data[at:] == tag_1272({0: 99})
    bad = data[: at + 3] + b"\x01" + data[at + 4 :]  # the vector's array says 0 entries: refused
    log = tmp_path / f"{METADATA_DIR_NAME}-{metadata_partition(tip, int(PARTITIONS))}.log"
    with RecordLog(log) as record_log:
        record_log.append([bad])
    with pytest.raises(
        CorruptRecordError, match=r"CleanerOffsets \(tag 1272\).*the array is empty"
    ) as caught:
        open_rlmm(tmp_path, tip)
    assert str(log) in str(caught.value)


def test_the_store_keeps_the_add_records_vector_through_updates() -> None:
    tip = TopicIdPartition(Uuid.random(), "compacted", 0)
    store = RemotePartitionMetadataStore()
    store.maybe_load_partition(tip)
    store.mark_initialized(tip)
    cleaned = segment(tip, 0, 99, {0: 0, 1: 40}, {0: 39, 1: 99})
    store.handle(cleaned)
    store.handle(update(cleaned, FINISHED))
    served = store.remote_log_segment_metadata(tip, 1, 70)
    assert served is not None and dict(served.cleaner_offsets or {}) == {0: 39, 1: 99}
    assert served == cleaned.create_with_updates(update(cleaned, FINISHED))
    listed = list(store.list_remote_log_segments(tip, 0))
    assert [dict(m.cleaner_offsets or {}) for m in listed] == [{0: 39, 1: 99}]
