"""The embedded RLMM beyond the conformance suite: its files, configuration, crash recovery and
the decisions the suite leaves open (what is written, what is rejected before writing)."""

from __future__ import annotations

import logging
import struct
import zlib
from pathlib import Path

import pytest

from tierlog.conformance import RemoteLogMetadataManagerSuite
from tierlog.metadata import serde
from tierlog.metadata._record_log import RecordLog, frame
from tierlog.metadata.embedded import (
    METADATA_DIR_NAME,
    NUM_PARTITIONS_CONFIG,
    EmbeddedRemoteLogMetadataManager,
)
from tierlog.metadata.partitioner import metadata_partition
from tierlog.metadata.serde import RemoteLogSegmentMetadataSnapshot
from tierlog.spi import (
    ConfigError,
    CorruptRecordError,
    CustomMetadata,
    IllegalStateError,
    InvalidArgumentError,
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    TopicIdPartition,
    Uuid,
)
from tierlog.spi.plugins import PluginRegistry

STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED


def _tip(topic: str = "foo", partition: int = 0) -> TopicIdPartition:
    return TopicIdPartition(Uuid.random(), topic, partition)


def _segment(
    tip: TopicIdPartition, start: int, end: int, epochs: dict[int, int], **kw: object
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(tip),
        start,
        end,
        -1,
        0,
        1_700_000_000_000,
        1024,
        epochs,
        **kw,  # type: ignore[arg-type]
    )


def _update(
    m: RemoteLogSegmentMetadata, state: RemoteLogSegmentState, custom: CustomMetadata | None = None
) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        m.remote_log_segment_id, 1_700_000_000_001, custom, state, 1
    )


def _open(
    directory: Path, *tips: TopicIdPartition, **config: str
) -> EmbeddedRemoteLogMetadataManager:
    rlmm = EmbeddedRemoteLogMetadataManager()
    rlmm.configure({"dir": str(directory), **config})
    if tips:
        rlmm.on_partition_leadership_changes(set(tips), set())
    return rlmm


def _entries(path: Path) -> list[bytes]:
    """The payloads of a record log file, parsed independently of RecordLog."""
    data, out, pos = path.read_bytes(), [], 0
    while pos < len(data):
        length, crc = struct.unpack_from(">II", data, pos)
        payload = data[pos + 8 : pos + 8 + length]
        assert zlib.crc32(payload) == crc
        out.append(payload)
        pos += 8 + length
    return out


def _all_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.log"))}


# What is written ---------------------------------------------------------------------------------
def test_the_files_hold_exactly_the_kafka_record_values_in_order(tmp_path: Path) -> None:
    """Every accepted event is the ``serde.serialize`` value a broker would produce, in the
    metadata partition Kafka's partitioner picks, in call order; rejected calls write nothing,
    invalid transitions are written (a broker produces them too) and dropped on apply."""
    tips = [_tip("foo", 0), _tip("foo", 1), _tip("bar", 0)]
    rlmm = _open(tmp_path, *tips, **{NUM_PARTITIONS_CONFIG: "3"})
    written: list[RemoteLogMetadata] = []
    for i, tp in enumerate(tips):
        seg = _segment(tp, 0, 99, {0: 0}, txn_idx_empty=i % 2 == 0)
        fin = _update(seg, FINISHED, CustomMetadata(b"\xca\xfe"))
        invalid = _update(seg, STARTED)  # rejected: never written
        dropped = _update(seg, DELETE_FINISHED)  # invalid transition: written, dropped
        rlmm.add_remote_log_segment_metadata(seg).result()
        rlmm.update_remote_log_segment_metadata(fin).result()
        with pytest.raises(InvalidArgumentError):
            rlmm.update_remote_log_segment_metadata(invalid)
        rlmm.update_remote_log_segment_metadata(dropped).result()
        written += [seg, fin, dropped]
    delete = RemotePartitionDeleteMetadata(
        tips[2], RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 1_700_000_000_002, 0
    )
    rlmm.put_remote_partition_delete_metadata(delete).result()
    written.append(delete)
    rlmm.close()
    expected: dict[int, list[bytes]] = {}
    for event in written:
        expected.setdefault(metadata_partition(event.topic_id_partition, 3), []).append(
            serde.serialize(event)
        )
    files = {p.name: _entries(p) for p in tmp_path.glob("*.log")}
    assert files == {f"{METADATA_DIR_NAME}-{p}.log": v for p, v in expected.items()}


def test_state_is_replayed_after_a_restart(tmp_path: Path) -> None:
    tip = _tip()
    rlmm = _open(tmp_path, tip)
    a, b = _segment(tip, 0, 99, {0: 0}), _segment(tip, 100, 199, {0: 100, 1: 150})
    for seg in (a, b):
        rlmm.add_remote_log_segment_metadata(seg).result()
        rlmm.update_remote_log_segment_metadata(_update(seg, FINISHED)).result()
    rlmm.update_remote_log_segment_metadata(_update(a, DELETE_STARTED)).result()
    before = (
        sorted(m.start_offset for m in rlmm.list_remote_log_segments(tip)),
        rlmm.remote_log_segment_metadata(tip, 1, 160),
        rlmm.highest_offset_for_epoch(tip, 0),
    )
    rlmm.close()
    again = _open(tmp_path)
    assert not again.is_ready(tip)
    again.on_partition_leadership_changes(set(), {tip})
    assert again.is_ready(tip)
    after = (
        sorted(m.start_offset for m in again.list_remote_log_segments(tip)),
        again.remote_log_segment_metadata(tip, 1, 160),
        again.highest_offset_for_epoch(tip, 0),
    )
    assert after == before
    again.close()


# Configuration -----------------------------------------------------------------------------------
def test_the_partition_count_is_persisted_and_a_change_is_refused(tmp_path: Path) -> None:
    _open(tmp_path, **{NUM_PARTITIONS_CONFIG: "5"}).close()
    assert (
        "remote.log.metadata.topic.num.partitions=5" in (tmp_path / "rlmm.properties").read_text()
    )
    for other in ({NUM_PARTITIONS_CONFIG: "7"}, {}):
        with pytest.raises(ConfigError, match=NUM_PARTITIONS_CONFIG) as info:
            _open(tmp_path, **other)
        assert "5" in str(info.value)
    _open(tmp_path, **{NUM_PARTITIONS_CONFIG: "5"}).close()


@pytest.mark.parametrize("value", ["0", "-1", "many", "2.5"])
def test_a_bad_partition_count_is_a_config_error(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match=NUM_PARTITIONS_CONFIG):
        _open(tmp_path, **{NUM_PARTITIONS_CONFIG: value})


def test_a_directory_is_required(tmp_path: Path) -> None:
    rlmm = EmbeddedRemoteLogMetadataManager()
    with pytest.raises(ConfigError) as info:
        rlmm.configure({"node.id": "1"})
    assert "'dir'" in str(info.value) and "'log.dir'" in str(info.value)


def test_log_dir_gives_the_default_directory(tmp_path: Path) -> None:
    rlmm = EmbeddedRemoteLogMetadataManager()
    rlmm.configure({"log.dir": str(tmp_path), "node.id": "1", "cluster.id": "c"})
    assert rlmm.directory == tmp_path / METADATA_DIR_NAME
    assert (tmp_path / METADATA_DIR_NAME / "rlmm.properties").exists()
    rlmm.close()


def test_kafka_keys_are_accepted_and_unknown_keys_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kafka = {
        "remote.log.metadata.topic.replication.factor": "3",
        "remote.log.metadata.topic.retention.ms": "-1",
        "remote.log.metadata.common.client.bootstrap.servers": "localhost:9092",
        "remote.log.metadata.producer.batch.size": "100",
        "broker.id": "0",
        "node.id": "0",
    }
    with caplog.at_level(logging.WARNING, logger="tierlog.metadata.embedded"):
        _open(tmp_path / "a", **kafka).close()
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="tierlog.metadata.embedded"):
        _open(tmp_path / "b", **{"remote.log.metadata.topic.num.partition": "3"}).close()
    assert "remote.log.metadata.topic.num.partition" in caplog.text


def test_an_unknown_key_is_reported_with_the_key_it_nearly_matches(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    typos = {"remote.log.metadata.topic.num.partition": "3", "rebalance.mode": "x"}
    with caplog.at_level(logging.WARNING, logger="tierlog.metadata.embedded"):
        _open(tmp_path, **typos).close()
    assert caplog.messages == [
        "embedded RLMM ignores unknown configuration key(s): "
        "rebalance.mode, remote.log.metadata.topic.num.partition (did you mean "
        "remote.log.metadata.topic.num.partitions?)"
    ]


def test_a_second_instance_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    first = _open(tmp_path)
    with pytest.raises(IllegalStateError, match="in use"):
        _open(tmp_path)
    first.close()
    _open(tmp_path).close()


def test_it_is_registered_as_embedded() -> None:
    registry = PluginRegistry(only=[])
    assert registry.metadata_manager_class("embedded") is EmbeddedRemoteLogMetadataManager


# Rejections happen before anything is written ----------------------------------------------------
def test_writes_for_an_unassigned_partition_are_refused_without_writing(tmp_path: Path) -> None:
    assigned, other = _tip("assigned"), _tip("other")
    rlmm = _open(tmp_path, assigned, **{NUM_PARTITIONS_CONFIG: "1"})
    rlmm.add_remote_log_segment_metadata(_segment(assigned, 0, 9, {0: 0})).result()
    before = _all_files(tmp_path)
    seg = _segment(other, 0, 9, {0: 0})
    with pytest.raises(RemoteStorageException, match="not assigned"):
        rlmm.add_remote_log_segment_metadata(seg)
    with pytest.raises(RemoteStorageException, match="not assigned"):
        rlmm.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(
                other, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 0, 0
            )
        )
    rlmm.on_partition_leadership_changes({other}, set())
    rlmm.on_stop_partitions({other})
    with pytest.raises(RemoteStorageException, match="not assigned"):
        rlmm.add_remote_log_segment_metadata(seg)
    assert _all_files(tmp_path) == before
    rlmm.close()


def test_invalid_and_unknown_updates_are_refused_without_writing(tmp_path: Path) -> None:
    tip = _tip()
    rlmm = _open(tmp_path, tip, **{NUM_PARTITIONS_CONFIG: "1"})
    seg = _segment(tip, 0, 9, {0: 0})
    rlmm.add_remote_log_segment_metadata(seg).result()
    before = _all_files(tmp_path)
    with pytest.raises(InvalidArgumentError):
        rlmm.add_remote_log_segment_metadata(_segment(tip, 10, 19, {0: 10}, state=FINISHED))
    with pytest.raises(InvalidArgumentError):
        rlmm.update_remote_log_segment_metadata(_update(seg, STARTED))
    with pytest.raises(RemoteResourceNotFoundException):
        rlmm.update_remote_log_segment_metadata(_update(_segment(tip, 0, 9, {0: 0}), FINISHED))
    assert _all_files(tmp_path) == before
    rlmm.close()


def test_a_deleted_partition_stays_deleted(tmp_path: Path) -> None:
    """After DELETE_PARTITION_FINISHED lookups raise RRNFE, segment writes are refused (RRNFE,
    nothing written), partition-delete retries are accepted, and a restart agrees."""
    tip = _tip()
    rlmm = _open(tmp_path, tip)
    seg = _segment(tip, 0, 9, {0: 0})
    rlmm.add_remote_log_segment_metadata(seg).result()
    finished = RemotePartitionDeleteMetadata(
        tip, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED, 0, 0
    )
    rlmm.put_remote_partition_delete_metadata(finished).result()
    for restart in (False, True):
        if restart:
            rlmm.close()
            rlmm = _open(tmp_path, tip)
        instance = rlmm
        assert not instance.is_ready(tip)
        with pytest.raises(RemoteResourceNotFoundException):
            instance.list_remote_log_segments(tip)
        before = _all_files(tmp_path)
        with pytest.raises(RemoteResourceNotFoundException, match="deleted"):
            instance.add_remote_log_segment_metadata(_segment(tip, 10, 19, {0: 10}))
        with pytest.raises(RemoteResourceNotFoundException, match="deleted"):
            instance.update_remote_log_segment_metadata(_update(seg, FINISHED))
        assert _all_files(tmp_path) == before
        instance.put_remote_partition_delete_metadata(finished).result()
    rlmm.close()


# Crashes and damage ------------------------------------------------------------------------------
def test_a_torn_tail_from_a_crash_is_truncated_on_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tip = _tip()
    rlmm = _open(tmp_path, tip)
    seg = _segment(tip, 0, 99, {0: 0})
    rlmm.add_remote_log_segment_metadata(seg).result()
    rlmm.update_remote_log_segment_metadata(_update(seg, FINISHED)).result()
    path = rlmm.record_log_path(metadata_partition(tip, rlmm.num_partitions))
    rlmm.close()
    # The crash: half of the next record reached the disk.
    next_record = frame(serde.serialize(_segment(tip, 100, 199, {0: 100})))
    with open(path, "ab") as f:
        f.write(next_record[: len(next_record) // 2])
    with caplog.at_level(logging.WARNING):
        again = _open(tmp_path, tip)
    assert "torn tail" in caplog.text and str(path) in caplog.text
    found = again.remote_log_segment_metadata(tip, 0, 50)
    assert found is not None and found.remote_log_segment_id == seg.remote_log_segment_id
    later = _segment(tip, 100, 199, {0: 100})
    again.add_remote_log_segment_metadata(later).result()
    again.close()
    third = _open(tmp_path, tip)
    assert len(list(third.list_remote_log_segments(tip))) == 2
    third.close()


def test_damage_inside_a_record_log_fails_the_load(tmp_path: Path) -> None:
    tip = _tip()
    rlmm = _open(tmp_path, tip)
    for start in (0, 100):
        rlmm.add_remote_log_segment_metadata(_segment(tip, start, start + 99, {0: start})).result()
    path = rlmm.record_log_path(metadata_partition(tip, rlmm.num_partitions))
    rlmm.close()
    raw = bytearray(path.read_bytes())
    raw[20] ^= 0xFF
    path.write_bytes(bytes(raw))
    again = _open(tmp_path)
    with pytest.raises(CorruptRecordError, match=str(path)):
        again.on_partition_leadership_changes({tip}, set())
    assert not again.is_ready(tip)
    again.close()


def test_a_record_that_cannot_be_decoded_fails_the_load(tmp_path: Path) -> None:
    tip = _tip()
    rlmm = _open(tmp_path, tip)
    rlmm.add_remote_log_segment_metadata(_segment(tip, 0, 9, {0: 0})).result()
    path = rlmm.record_log_path(metadata_partition(tip, rlmm.num_partitions))
    rlmm.close()
    with RecordLog(path) as log:
        log.append([b"\x01\x09\x00garbage"])
    again = _open(tmp_path)
    with pytest.raises(CorruptRecordError, match="offset 1"):
        again.on_partition_leadership_changes({tip}, set())
    again.close()


def test_a_snapshot_record_in_the_log_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """apiKey 3 carries no partition; Kafka never publishes it: skipped with a warning."""
    tip = _tip()
    rlmm = _open(tmp_path, tip)
    seg = _segment(tip, 0, 9, {0: 0})
    rlmm.add_remote_log_segment_metadata(seg).result()
    path = rlmm.record_log_path(metadata_partition(tip, rlmm.num_partitions))
    rlmm.close()
    with RecordLog(path) as log:
        log.append([serde.serialize(RemoteLogSegmentMetadataSnapshot.create(seg))])
    with caplog.at_level(logging.WARNING):
        again = _open(tmp_path, tip)
    assert "snapshot" in caplog.text
    assert [m.start_offset for m in again.list_remote_log_segments(tip)] == [0]
    again.close()


# Lifecycle ---------------------------------------------------------------------------------------
def test_calls_after_close_raise_illegal_state(tmp_path: Path) -> None:
    tip = _tip()
    rlmm = _open(tmp_path, tip)
    rlmm.close()
    rlmm.close()
    assert not rlmm.is_ready(tip)
    calls = [
        lambda: rlmm.add_remote_log_segment_metadata(_segment(tip, 0, 9, {0: 0})),
        lambda: rlmm.remote_log_segment_metadata(tip, 0, 0),
        lambda: rlmm.list_remote_log_segments(tip),
        lambda: rlmm.highest_offset_for_epoch(tip, 0),
        lambda: rlmm.remote_log_size(tip, 0),
        lambda: rlmm.on_partition_leadership_changes({tip}, set()),
        lambda: rlmm.on_stop_partitions({tip}),
        lambda: rlmm.configure({"dir": str(tmp_path)}),
    ]
    for call in calls:
        with pytest.raises(IllegalStateError):
            call()


def test_calls_before_configure_raise_illegal_state() -> None:
    rlmm = EmbeddedRemoteLogMetadataManager()
    with pytest.raises(IllegalStateError, match="not configured"):
        rlmm.on_partition_leadership_changes({_tip()}, set())
    with pytest.raises(IllegalStateError, match="not configured"):
        rlmm.add_remote_log_segment_metadata(_segment(_tip(), 0, 9, {0: 0}))


def test_a_directory_that_cannot_be_used_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match="a-file"):
        _open(blocker)


# The suite on a subclass, with no configuration --------------------------------------------------
class _Subclassed(EmbeddedRemoteLogMetadataManager):
    """A plugin built on the embedded RLMM inherits its ``conformance_config``."""


class TestASubclassRunsTheSuiteWithNoConfiguration(RemoteLogMetadataManagerSuite):
    plugin_class = _Subclassed
    state_machine_max_examples = 10
