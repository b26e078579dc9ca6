"""LocalTieredStorage beyond the conformance suite: Kafka's exact layout, atomic writes and
crashes, configuration, the delete switches, path safety specific to a directory store."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tierlog.conformance.rsm_suite import SegmentFactory, read_stream
from tierlog.properties import ConfigValueError
from tierlog.spi import (
    ConfigError,
    IllegalStateError,
    IndexType,
    InvalidArgumentError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    TopicIdPartition,
    Uuid,
)
from tierlog.spi.plugins import PluginRegistry
from tierlog.storage import local as local_module
from tierlog.storage.local import ROOT_STORAGE_DIR_NAME, LocalTieredStorage

pytest_plugins = ["pytester"]

# The example of Kafka's LocalTieredStorage Javadoc: topic id and segment id as Kafka prints them.
TOPIC_ID = Uuid.from_string("LWgrMmVrT0a__7a4SasuPA")
SEGMENT_ID = Uuid.from_string("bCqX9U--S-6U8XUM9II25Q")
TIP = TopicIdPartition(TOPIC_ID, "topic", 0)

# Kafka's RemoteLogSegmentFileset.FILENAME_FORMAT and RemoteTopicPartitionDirectory's pattern.
KAFKA_FILENAME = re.compile(r"(\d+-)([a-zA-Z0-9_-]{22})(\.[a-z_]+)")
KAFKA_PARTITION_DIR = re.compile(r"([a-zA-Z0-9._-]+)-(\d+)-([a-zA-Z0-9_-]{22})")


def metadata_for(
    tip: TopicIdPartition = TIP,
    segment_id: Uuid = SEGMENT_ID,
    start_offset: int = 11,
    size: int = 0,
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, segment_id),
        start_offset,
        start_offset + 10,
        1000,
        0,
        1000,
        size,
        {0: start_offset},
    )


@pytest.fixture
def segments(tmp_path: Path) -> SegmentFactory:
    return SegmentFactory(tmp_path / "local-segments")


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def storage(store_dir: Path) -> Iterator[LocalTieredStorage]:
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(store_dir), "node.id": "1"})
    yield rsm
    rsm.close()


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# Layout -----------------------------------------------------------------------------------------
def test_layout_matches_kafka_naming_exactly(
    storage: LocalTieredStorage, store_dir: Path, segments: SegmentFactory
) -> None:
    files = segments.create(start_offset=11)
    storage.copy_log_segment_data(metadata_for(), files.data)

    partition_dir = store_dir / ROOT_STORAGE_DIR_NAME / "topic-0-LWgrMmVrT0a__7a4SasuPA"
    assert listing(store_dir) == [ROOT_STORAGE_DIR_NAME]
    assert listing(store_dir / ROOT_STORAGE_DIR_NAME) == [partition_dir.name]
    prefix = "00000000000000000011-bCqX9U--S-6U8XUM9II25Q"
    assert listing(partition_dir) == sorted(
        prefix + suffix
        for suffix in (
            ".log",
            ".index",
            ".timeindex",
            ".txnindex",
            ".leader_epoch_checkpoint",
            ".snapshot",
        )
    )
    assert KAFKA_PARTITION_DIR.fullmatch(partition_dir.name)
    assert all(KAFKA_FILENAME.fullmatch(name) for name in listing(partition_dir))
    assert storage.storage_directory == store_dir / ROOT_STORAGE_DIR_NAME


def test_stored_files_are_byte_identical_to_the_local_ones(
    storage: LocalTieredStorage, segments: SegmentFactory
) -> None:
    files = segments.create(start_offset=11)
    storage.copy_log_segment_data(metadata_for(), files.data)
    paths = storage.segment_paths(metadata_for())
    assert paths[".log"].read_bytes() == files.data.log_segment.read_bytes()
    assert paths[".index"].read_bytes() == files.data.offset_index.read_bytes()
    assert paths[".timeindex"].read_bytes() == files.data.time_index.read_bytes()
    assert files.data.transaction_index is not None
    assert paths[".txnindex"].read_bytes() == files.data.transaction_index.read_bytes()
    assert paths[".snapshot"].read_bytes() == files.data.producer_snapshot_index.read_bytes()
    assert paths[".leader_epoch_checkpoint"].read_bytes() == files.data.leader_epoch_index


def test_segment_without_transaction_index_has_no_txnindex_file(
    storage: LocalTieredStorage, segments: SegmentFactory
) -> None:
    files = segments.create(start_offset=11, with_transaction_index=False)
    storage.copy_log_segment_data(metadata_for(), files.data)
    assert not storage.segment_paths(metadata_for())[".txnindex"].exists()
    assert len(listing(storage.segment_paths(metadata_for())[".log"].parent)) == 5


def test_reads_a_directory_laid_out_by_kafka(store_dir: Path) -> None:
    """Files placed as Kafka's LocalTieredStorage writes them (by hand here) are served."""
    partition_dir = store_dir / ROOT_STORAGE_DIR_NAME / "topic-0-LWgrMmVrT0a__7a4SasuPA"
    partition_dir.mkdir(parents=True)
    prefix = "00000000000000000011-bCqX9U--S-6U8XUM9II25Q"
    contents = {
        ".log": b"records",
        ".index": b"offset",
        ".timeindex": b"time",
        ".leader_epoch_checkpoint": b"0\n2\n0 0\n2 12",
        ".snapshot": b"pid",
    }
    for suffix, content in contents.items():
        (partition_dir / (prefix + suffix)).write_bytes(content)
    with LocalTieredStorage() as rsm:
        rsm.configure({"dir": str(store_dir)})
        assert read_stream(rsm.fetch_log_segment(metadata_for(), 0)) == b"records"
        assert read_stream(rsm.fetch_log_segment(metadata_for(), 2, 4)) == b"cor"
        assert read_stream(rsm.fetch_index(metadata_for(), IndexType.TIMESTAMP)) == b"time"
        assert read_stream(rsm.fetch_index(metadata_for(), IndexType.LEADER_EPOCH)) == (
            b"0\n2\n0 0\n2 12"
        )
        with pytest.raises(RemoteResourceNotFoundException, match="TRANSACTION index"):
            rsm.fetch_index(metadata_for(), IndexType.TRANSACTION)


def test_not_found_message_names_the_missing_object(storage: LocalTieredStorage) -> None:
    with pytest.raises(RemoteResourceNotFoundException, match=r"segment data of .*not found"):
        storage.fetch_log_segment(metadata_for(), 0)
    with pytest.raises(RemoteResourceNotFoundException, match=r"OFFSET index of .*not found"):
        storage.fetch_index(metadata_for(), IndexType.OFFSET)


@pytest.mark.parametrize(("start", "end"), [(-1, None), (5, 4)])
def test_a_bad_range_is_refused_before_the_store_is_touched(start: int, end: int | None) -> None:
    """Kafka checks the arguments first: a bad range is InvalidArgumentError even on an
    instance that is not configured, for a segment that does not exist."""
    with pytest.raises(InvalidArgumentError):
        LocalTieredStorage().fetch_log_segment(metadata_for(), start, end)


def test_the_range_is_clamped_to_the_stored_file_not_the_metadata(
    storage: LocalTieredStorage, segments: SegmentFactory
) -> None:
    files = segments.create(size=100)
    storage.copy_log_segment_data(metadata_for(size=10**6), files.data)
    metadata = metadata_for(size=10**6)  # says more bytes than were stored
    assert read_stream(storage.fetch_log_segment(metadata, 90, 10**5)) == files.segment[90:]
    assert read_stream(storage.fetch_log_segment(metadata, 100)) == b""


def test_copy_without_sendfile_streams_through_a_buffer(
    storage: LocalTieredStorage, segments: SegmentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``sendfile`` refuses the source (a pipe, some file systems), the copy falls back
    to a 1 MiB buffer and the bytes are the same."""

    def no_sendfile(*args: object) -> int:
        raise OSError(errno.EINVAL, "sendfile not supported here")

    monkeypatch.setattr(os, "sendfile", no_sendfile)
    files = segments.create(size=3 * (1 << 20) + 17)
    storage.copy_log_segment_data(metadata_for(), files.data)
    assert read_stream(storage.fetch_log_segment(metadata_for(), 0)) == files.segment


def test_copy_leaves_no_temporary_files(
    storage: LocalTieredStorage, segments: SegmentFactory
) -> None:
    storage.copy_log_segment_data(metadata_for(), segments.create().data)
    storage.copy_log_segment_data(metadata_for(), segments.create().data)  # a retry
    names = listing(storage.segment_paths(metadata_for())[".log"].parent)
    assert len(names) == 6
    assert not [n for n in names if n.startswith(".") or n.endswith(".tmp")]


# Atomic writes and crashes ----------------------------------------------------------------------
def test_failed_rename_leaves_nothing_under_final_names(
    storage: LocalTieredStorage, segments: SegmentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rename that fails in the middle of a retry: the copy raises, and neither a partial
    file nor a half-replaced fileset is left (Kafka removes the fileset of a failed copy)."""
    storage.copy_log_segment_data(metadata_for(), segments.create().data)
    real_replace = os.replace

    def failing_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if str(dst).endswith(".timeindex"):
            raise OSError(errno.EIO, "simulated I/O error on rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(RemoteStorageException, match="simulated I/O error"):
        storage.copy_log_segment_data(metadata_for(), segments.create().data)
    monkeypatch.undo()
    assert listing(storage.segment_paths(metadata_for())[".log"].parent) == []
    with pytest.raises(RemoteResourceNotFoundException):
        storage.fetch_log_segment(metadata_for(), 0)


def test_missing_source_file_fails_the_copy_cleanly(
    storage: LocalTieredStorage, segments: SegmentFactory
) -> None:
    files = segments.create()
    files.data.time_index.unlink()
    with pytest.raises(RemoteStorageException, match="copy of"):
        storage.copy_log_segment_data(metadata_for(), files.data)
    assert listing(storage.segment_paths(metadata_for())[".log"].parent) == []


def test_a_full_disk_is_not_retriable_but_a_busy_file_is(
    storage: LocalTieredStorage, segments: SegmentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tierlog.spi import RetriableRemoteStorageException

    for code, retriable in ((errno.ENOSPC, False), (errno.EAGAIN, True)):

        def fail(fd: int, code: int = code) -> None:
            raise OSError(code, os.strerror(code))

        monkeypatch.setattr(os, "fsync", fail)
        with pytest.raises(RemoteStorageException) as info:
            storage.copy_log_segment_data(metadata_for(), segments.create().data)
        assert isinstance(info.value, RetriableRemoteStorageException) is retriable
        monkeypatch.undo()


_CRASH_CHILD = textwrap.dedent(
    """
    import json, os, signal, sys
    from pathlib import Path
    from tierlog.spi import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata
    from tierlog.spi import TopicIdPartition, Uuid
    from tierlog.storage import local

    args = json.loads(sys.argv[1])
    tip = TopicIdPartition(Uuid.from_string(args["topic_id"]), "topic", 0)
    md = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, Uuid.from_string(args["segment_id"])), 11, 21, 0, 0, 0, 0, {0: 11})
    data = LogSegmentData(*(Path(p) if p else None for p in args["paths"]),
                          leader_epoch_index=args["epochs"].encode())

    def die(*_a, **_k):
        os.kill(os.getpid(), signal.SIGKILL)

    if args["where"] == "rename":  # the .log is complete and fsynced, not yet renamed
        real = os.replace
        def replace(src, dst):
            if str(dst).endswith(".log"):
                die()
            real(src, dst)
        os.replace = replace
    else:  # half of the .log is written to the temporary file
        def half(src, dst):
            size = os.fstat(src).st_size
            os.write(dst, os.read(src, size // 2))
            die()
        local._copy_fd = half
    rsm = local.LocalTieredStorage()
    rsm.configure({"dir": args["dir"]})
    rsm.copy_log_segment_data(md, data)
    """
)


@pytest.mark.parametrize("where", ["rename", "mid-write"])
def test_crash_during_a_retry_keeps_the_old_object_intact(
    store_dir: Path, segments: SegmentFactory, where: str
) -> None:
    """A process killed (SIGKILL, no cleanup) while a retry writes the segment: the final names
    still hold the first attempt's complete bytes, the new bytes are only in a hidden temporary
    file, and a restarted instance serves the old object; the retry that then succeeds removes
    that temporary file."""
    first = segments.create(start_offset=11, size=100_000)
    second = segments.create(start_offset=11, size=200_000)
    with LocalTieredStorage() as rsm:
        rsm.configure({"dir": str(store_dir)})
        rsm.copy_log_segment_data(metadata_for(), first.data)

    d = second.data
    args = {
        "dir": str(store_dir),
        "where": where,
        "topic_id": str(TOPIC_ID),
        "segment_id": str(SEGMENT_ID),
        "epochs": d.leader_epoch_index.decode(),
        "paths": [
            str(d.log_segment),
            str(d.offset_index),
            str(d.time_index),
            str(d.transaction_index),
            str(d.producer_snapshot_index),
        ],
    }
    child = subprocess.run(
        [sys.executable, "-c", _CRASH_CHILD, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == -9, child.stderr

    with LocalTieredStorage() as rsm:
        rsm.configure({"dir": str(store_dir)})
        assert read_stream(rsm.fetch_log_segment(metadata_for(), 0)) == first.segment
        partition_dir = rsm.segment_paths(metadata_for())[".log"].parent
        temps = [n for n in listing(partition_dir) if n.endswith(".tmp")]
        assert len(temps) == 1 and temps[0].startswith(".")
        temp_size = (partition_dir / temps[0]).stat().st_size
        assert temp_size == (len(second.segment) if where == "rename" else len(second.segment) // 2)
        finals = [n for n in listing(partition_dir) if not n.startswith(".")]
        assert all(KAFKA_FILENAME.fullmatch(n) for n in finals)
        # Another segment's write in progress is not this segment's leftover.
        start = temps[0][1:].split("-", 1)[0]  # the same start offset, another segment id
        other = partition_dir / f".{start}-AAAAAAAAAAAAAAAAAAAAAA.log.0123.tmp"
        other.write_bytes(b"x")

        # The copy that finally succeeds takes the killed attempt's temp file with it.
        rsm.copy_log_segment_data(metadata_for(), second.data)
        assert read_stream(rsm.fetch_log_segment(metadata_for(), 0)) == second.segment
        assert [n for n in listing(partition_dir) if n.endswith(".tmp")] == [other.name]


def test_open_stream_is_not_affected_by_a_retry(
    storage: LocalTieredStorage, segments: SegmentFactory
) -> None:
    """Renaming over a file keeps open readers on the old content: a reader never sees a mix."""
    first, second = segments.create(size=1_000_000), segments.create(size=1_000_000)
    storage.copy_log_segment_data(metadata_for(), first.data)
    with storage.fetch_log_segment(metadata_for(), 0) as stream:
        head = stream.read(1000)
        storage.copy_log_segment_data(metadata_for(), second.data)
        rest = stream.read()
    assert head + rest == first.segment
    assert read_stream(storage.fetch_log_segment(metadata_for(), 0)) == second.segment


# Delete switches --------------------------------------------------------------------------------
def test_delete_enable_false_keeps_the_data(store_dir: Path, segments: SegmentFactory) -> None:
    """As in Kafka's LocalTieredStorage: the delete returns normally and the files stay."""
    files = segments.create()
    with LocalTieredStorage() as rsm:
        rsm.configure({"dir": str(store_dir), "delete.enable": "false"})
        rsm.copy_log_segment_data(metadata_for(), files.data)
        rsm.delete_log_segment_data(metadata_for())
        assert read_stream(rsm.fetch_log_segment(metadata_for(), 0)) == files.segment
        rsm.delete_partition(TIP)
        assert rsm.segment_paths(metadata_for())[".log"].exists()


def test_delete_partition_removes_its_directory(
    storage: LocalTieredStorage, segments: SegmentFactory
) -> None:
    for i in range(3):
        storage.copy_log_segment_data(
            metadata_for(segment_id=Uuid.random(), start_offset=i), segments.create().data
        )
    directory = storage.storage_directory / storage.partition_directory_name(TIP)
    assert len(listing(directory)) == 18
    storage.delete_partition(TIP)
    assert not directory.exists()
    storage.delete_partition(TIP)  # missing is fine


def test_delete_on_close_removes_the_storage_but_not_dir(
    store_dir: Path, segments: SegmentFactory
) -> None:
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(store_dir), "delete.on.close": "true"})
    rsm.copy_log_segment_data(metadata_for(), segments.create().data)
    (store_dir / "users-own-file").write_text("keep me")
    rsm.close()
    assert listing(store_dir) == ["users-own-file"]
    rsm.close()


def test_delete_on_close_keeps_a_storage_with_unexpected_files(
    store_dir: Path, segments: SegmentFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka keeps the directory for post-mortem analysis if it holds a stray file."""
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(store_dir), "delete.on.close": "true"})
    rsm.copy_log_segment_data(metadata_for(), segments.create().data)
    (rsm.storage_directory / "stray").write_text("?")
    with caplog.at_level(logging.WARNING, logger=local_module.__name__):
        rsm.close()
    assert "unexpected entries (stray)" in caplog.text
    assert (store_dir / ROOT_STORAGE_DIR_NAME / "stray").exists()


def test_without_delete_on_close_data_survives_a_restart(
    store_dir: Path, segments: SegmentFactory
) -> None:
    files = segments.create()
    with LocalTieredStorage() as rsm:
        rsm.configure({"dir": str(store_dir)})
        rsm.copy_log_segment_data(metadata_for(), files.data)
    with LocalTieredStorage() as rsm:
        rsm.configure({"dir": str(store_dir)})
        assert read_stream(rsm.fetch_log_segment(metadata_for(), 0)) == files.segment


# Configuration ----------------------------------------------------------------------------------
@pytest.mark.parametrize("config", [{}, {"dir": ""}, {"dir": "  "}, {"delete.on.close": "true"}])
def test_missing_dir_is_a_config_error_naming_the_key(config: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=r"\bdir is required"):
        LocalTieredStorage().configure(config)


@pytest.mark.parametrize(
    ("key", "value"),
    [("delete.on.close", "yes"), ("delete.enable", "0"), ("node.id", "one"), ("broker.id", "1.5")],
)
def test_malformed_values_name_the_key(store_dir: Path, key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(key)):
        LocalTieredStorage().configure({"dir": str(store_dir), key: value})


@pytest.mark.parametrize(
    ("config", "removed_on_close", "deletes"),
    [
        ({}, False, True),  # the defaults
        ({"delete.on.close": " TRUE ", "delete.enable": "False"}, True, False),
        ({"delete.on.close": "false", "delete.enable": "true"}, False, True),
    ],
)
def test_boolean_settings_are_kafka_booleans_with_defaults(
    store_dir: Path,
    segments: SegmentFactory,
    config: dict[str, str],
    removed_on_close: bool,
    deletes: bool,
) -> None:
    """``true``/``false`` in any case, blanks around ignored (Kafka's BOOLEAN); an absent key
    is its default: keep the directory on close, really delete."""
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(store_dir), **config})
    rsm.copy_log_segment_data(metadata_for(), segments.create().data)
    rsm.delete_log_segment_data(metadata_for())
    stored = rsm.segment_paths(metadata_for())[".log"].exists()
    rsm.close()
    assert stored is not deletes
    assert (store_dir / ROOT_STORAGE_DIR_NAME).exists() is not removed_on_close


def test_a_malformed_boolean_is_refused_in_kafkas_words(store_dir: Path) -> None:
    with pytest.raises(ConfigValueError, match="Expected value to be either true or false") as err:
        LocalTieredStorage().configure({"dir": str(store_dir), "delete.enable": "yes"})
    assert (err.value.key, err.value.value) == ("delete.enable", "yes")


def test_unknown_keys_are_reported_not_fatal(
    store_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rsm = LocalTieredStorage()
    with caplog.at_level(logging.WARNING, logger=local_module.__name__):
        rsm.configure({"dir": str(store_dir), "transferer.class": "x.Y", "dri": "typo"})
    assert rsm.ignored_configs == ("dri", "transferer.class")
    assert "ignores unknown configuration keys: dri, transferer.class" in caplog.text


def test_an_unknown_key_is_reported_with_the_key_it_nearly_matches(
    store_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rsm = LocalTieredStorage()
    with caplog.at_level(logging.WARNING, logger=local_module.__name__):
        rsm.configure({"dir": str(store_dir), "delete.enabled": "false", "transferer.class": "x"})
    assert rsm.ignored_configs == ("delete.enabled", "transferer.class")
    assert (
        "ignores unknown configuration keys: delete.enabled (did you mean delete.enable?), "
        "transferer.class (known: " in caplog.text
    )


def test_node_id_and_deprecated_broker_id(
    store_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    both = LocalTieredStorage()
    both.configure({"dir": str(store_dir), "node.id": "3", "broker.id": "4"})
    assert both.node_id == 3
    legacy = LocalTieredStorage()
    with caplog.at_level(logging.WARNING, logger=local_module.__name__):
        legacy.configure({"dir": str(store_dir), "broker.id": "4"})
    assert legacy.node_id == 4
    assert "broker.id is deprecated" in caplog.text


def test_configure_twice_is_refused(storage: LocalTieredStorage, store_dir: Path) -> None:
    with pytest.raises(IllegalStateError, match="only be called once"):
        storage.configure({"dir": str(store_dir)})


def test_operations_need_a_configured_open_instance(
    store_dir: Path, segments: SegmentFactory
) -> None:
    rsm = LocalTieredStorage()
    with pytest.raises(IllegalStateError, match="not configured"):
        rsm.fetch_log_segment(metadata_for(), 0)
    rsm.configure({"dir": str(store_dir)})
    rsm.close()
    with pytest.raises(IllegalStateError, match="closed"):
        rsm.copy_log_segment_data(metadata_for(), segments.create().data)


def test_conformance_config_makes_a_fresh_directory(tmp_path: Path) -> None:
    import tempfile

    saved = tempfile.tempdir
    tempfile.tempdir = str(tmp_path)
    try:
        one, two = LocalTieredStorage.conformance_config(), LocalTieredStorage.conformance_config()
    finally:
        tempfile.tempdir = saved
    assert one["dir"] != two["dir"]
    assert Path(one["dir"]).parent == tmp_path
    assert Path(one["dir"]).name.startswith("tierlog-local-rsm-")


# Registration -----------------------------------------------------------------------------------
def test_registered_as_local_through_the_hook() -> None:
    registry = PluginRegistry(load_entry_points=False)
    registry.register_plugin(local_module, "local")
    assert registry.storage_manager_class("local") is LocalTieredStorage


def test_the_hook_registers_exactly_local() -> None:
    registered: list[tuple[str, type]] = []
    local_module.tierlog_register_storage_managers(
        register=lambda name, cls: registered.append((name, cls))
    )
    assert registered == [("local", LocalTieredStorage)]


def test_registered_as_local_through_the_entry_point() -> None:
    registry = PluginRegistry(strict=False)
    info = registry.storage_managers["local"]
    assert info.cls is LocalTieredStorage
    assert info.distribution == "tierlog"


# Path safety specific to a directory store ------------------------------------------------------
def test_long_legal_names_are_shortened_without_collisions(
    storage: LocalTieredStorage, segments: SegmentFactory
) -> None:
    a = TopicIdPartition(TOPIC_ID, "t" * 248 + "a", 0)
    b = TopicIdPartition(TOPIC_ID, "t" * 248 + "b", 0)
    name_a, name_b = storage.partition_directory_name(a), storage.partition_directory_name(b)
    assert name_a != name_b
    assert len(name_a.encode()) <= 255 and "~" in name_a
    assert name_a.endswith(f"-0-{TOPIC_ID}")
    files_a, files_b = segments.create(), segments.create()
    storage.copy_log_segment_data(metadata_for(a), files_a.data)
    storage.copy_log_segment_data(metadata_for(b), files_b.data)
    assert read_stream(storage.fetch_log_segment(metadata_for(a), 0)) == files_a.segment
    assert read_stream(storage.fetch_log_segment(metadata_for(b), 0)) == files_b.segment


def test_short_names_keep_kafka_naming(storage: LocalTieredStorage) -> None:
    tip = TopicIdPartition(TOPIC_ID, "t" * 200, 7)
    assert storage.partition_directory_name(tip) == "t" * 200 + f"-7-{TOPIC_ID}"


@pytest.mark.parametrize(
    "topic", ["../x", "a/b", "/abs", "a\\b", "a\x00b", ".", "..", "", "тема", "t" * 250, "a b"]
)
def test_illegal_topic_names_are_refused(storage: LocalTieredStorage, topic: str) -> None:
    with pytest.raises(InvalidArgumentError):
        storage.partition_directory_name(TopicIdPartition(TOPIC_ID, topic, 0))


def test_a_symlink_planted_in_the_store_is_not_followed_out(
    storage: LocalTieredStorage, segments: SegmentFactory, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (storage.storage_directory / storage.partition_directory_name(TIP)).symlink_to(outside)
    with pytest.raises(InvalidArgumentError, match="outside the storage directory"):
        storage.copy_log_segment_data(metadata_for(), segments.create().data)
    assert listing(outside) == []


# A subclass runs the suite with no configuration ------------------------------------------------
def test_a_subclass_needs_no_config_to_run_the_suite(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_subclass="""
        from tierlog.conformance import RemoteStorageManagerSuite
        from tierlog.storage.local import LocalTieredStorage

        class MyStorage(LocalTieredStorage):
            pass

        class TestMyStorage(RemoteStorageManagerSuite):
            plugin_class = MyStorage
        """
    )
    result = pytester.runpytest_inprocess(
        "-q",
        "-p",
        "no:cacheprovider",
        "-k",
        "copy_retry or fetch_range or delete_twice or share_the_store",
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 14, result.stdout.str()
    assert "failed" not in outcomes and "errors" not in outcomes, result.stdout.str()
