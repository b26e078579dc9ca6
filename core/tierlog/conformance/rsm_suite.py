"""The RemoteStorageManager conformance suite: Kafka's RSM contract as pytest tests.

A plugin opts in with a two-line test module (SQLAlchemy's dialect suite, fsspec's abstract
tests and langchain-tests work the same way)::

    from tierlog.conformance import RemoteStorageManagerSuite
    from my_package import MyStorage

    class TestMyStorage(RemoteStorageManagerSuite):
        plugin_class = MyStorage

The suite builds the plugin as Kafka does (``cls()``, then ``configure(config)``), with the
subclass's ``config`` or the plugin's ``conformance_config()``, and ``--tierlog-config`` keys on
top. Segment files are random bytes of the right shapes, distinct per file
and per segment, so a plugin that serves one file for another fails; the RSM must never
interpret them.

What a plugin cannot do is declared, with a reason, in ``RemoteStorageManagerCapabilities``
(on the subclass as ``capabilities = ...`` or on the plugin class as a
``conformance_capabilities()`` classmethod, which is what ``tierlog conformance --rsm NAME``
sees); the tests that need it are skipped with that reason.

Two optional hooks let the suite look at the store without going through the API under test,
as zarr's ``StoreTests`` and fsspec's fixtures do: ``store_root()`` (the directory a
filesystem-backed plugin writes under) and ``stored_objects()`` (everything currently stored,
listed independently). With them the suite also proves that nothing is left behind after a
delete and that no topic name makes the plugin write outside its directory.

Every test's docstring says what it checks and how to fix a failure.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import random
import struct
import threading
import tracemalloc
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, BinaryIO, ClassVar, Final, TypeVar

import pytest

from tierlog.conformance._base import RSM_OPTION, Capability, SuiteBase, Unsupported, require
from tierlog.spi import (
    CustomMetadata,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageManager,
    TopicIdPartition,
    Uuid,
)

__all__ = [
    "HOSTILE_TOPIC_NAMES",
    "LEGAL_TOPIC_NAMES",
    "MiB",
    "RemoteStorageManagerCapabilities",
    "RemoteStorageManagerSuite",
    "SegmentFactory",
    "SegmentFiles",
    "read_stream",
    "segment_metadata",
]

_LOG = logging.getLogger(__name__)

MiB: Final = 1 << 20
_T = TypeVar("_T")
_NOT_FOUND = RemoteResourceNotFoundException


# Capabilities ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class RemoteStorageManagerCapabilities:
    """What the plugin under test can do; each field is ``True`` or ``Unsupported("why")``.

    Everything defaults to supported: a plugin declares only what it cannot do, and the reason
    shows in every skip. A bare ``False`` is refused.
    """

    large_segments: Capability = True
    """Copies and fetches a segment of ``large_segment_size`` (256 MiB) while holding at most
    ``memory_limit`` (48 MiB) of Python memory: data is streamed, never read whole. Kafka's
    default ``segment.bytes`` is 1 GiB, so a broker-grade plugin must support this; an in-memory
    store or a CI machine without the disk space declares ``Unsupported``."""

    concurrent_copies: Capability = True
    """Copies of different segments may run at once from several threads (Kafka's RLM copies
    partitions on a thread pool, ``remote.log.manager.copier.thread.pool.size``), and fetches
    may run alongside. Declare ``Unsupported`` only for a plugin documented as single-threaded
    (it then needs ``remote.log.manager.copier.thread.pool.size=1``)."""

    path_hostile_topic_names: Capability = True
    """Topic names that look like paths (``../x``, ``/abs``, ``a/b``, NUL, unicode, very long)
    either work and stay inside the store, or are refused with ``ValueError``. Every plugin
    should pass; ``Unsupported`` is for a plugin that cannot be exercised with them at all, for
    example because a gateway in front of it rejects such requests before the plugin runs."""

    shared_between_instances: Capability = True
    """Two instances configured alike see the same data, as a leader's copy must be readable by
    a follower on another broker, and by the same broker after a restart. A store private to
    one object (a test double) declares ``Unsupported``."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not True and not isinstance(value, Unsupported):
                raise TypeError(
                    f"capability {f.name} must be True or Unsupported('reason'), got {value!r}"
                )


# Segment files --------------------------------------------------------------------------------
@dataclass(frozen=True)
class SegmentFiles:
    """A sealed segment's files on local disk, and the bytes each must read back as."""

    data: LogSegmentData
    segment: bytes
    indexes: Mapping[IndexType, bytes] = field(repr=False)
    """The expected content of each index; ``TRANSACTION`` is absent when the segment has none,
    ``COMPACTION_SUMMARY`` unless the segment was made with one."""

    def expected(self, index_type: IndexType) -> bytes:
        return self.indexes[index_type]


class SegmentFactory:
    """Writes realistic-looking segment files (right sizes and entry shapes, random content)
    under a directory of the test's ``tmp_path``.

    The bytes are random so that every file of every segment differs: a plugin that stores the
    offset index under the time index's name, or serves another segment's data, fails.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._counter = 0
        self._lock = threading.Lock()
        self._random = random.Random(int.from_bytes(os.urandom(8), "big"))

    def _next_dir(self) -> Path:
        with self._lock:
            self._counter += 1
            n = self._counter
        path = self.directory / f"segment-{n:04d}"
        path.mkdir(parents=True)
        return path

    def _bytes(self, n: int) -> bytes:
        with self._lock:
            return self._random.randbytes(n)

    def create(
        self,
        *,
        size: int = 4096,
        start_offset: int = 0,
        entries: int = 16,
        with_transaction_index: bool = True,
        compaction_summary: bytes | None = None,
    ) -> SegmentFiles:
        """A segment of ``size`` random bytes with an offset index (8-byte entries), a time
        index (12-byte entries), a transaction index (34-byte entries) unless disabled, a
        producer snapshot and a leader-epoch checkpoint text naming ``start_offset``, and the
        given ``compaction_summary`` (``None``, the default: a segment copied from the local
        log, which has none; ``summary()`` makes one)."""
        d = self._next_dir()
        name = f"{start_offset:020d}"
        segment = self._bytes(size)
        offset_index = self._bytes(8 * entries)
        time_index = self._bytes(12 * (entries - 1))
        txn_index = self._bytes(34 * (entries // 4 + 1))
        snapshot = struct.pack(">hIi", 1, 0, entries // 2) + self._bytes(46 * (entries // 2))
        epoch_lines = [
            f"0 {start_offset}",
            f"{self._random.randrange(1, 1 << 30)} {start_offset + entries}",
        ]
        leader_epoch = ("0\n2\n" + "\n".join(epoch_lines) + "\n").encode("ascii")

        files = {
            ".log": segment,
            ".index": offset_index,
            ".timeindex": time_index,
            ".snapshot": snapshot,
        }
        if with_transaction_index:
            files[".txnindex"] = txn_index
        for suffix, content in files.items():
            (d / f"{name}{suffix}").write_bytes(content)
        indexes = {
            IndexType.OFFSET: offset_index,
            IndexType.TIMESTAMP: time_index,
            IndexType.PRODUCER_SNAPSHOT: snapshot,
            IndexType.LEADER_EPOCH: leader_epoch,
        }
        if with_transaction_index:
            indexes[IndexType.TRANSACTION] = txn_index
        if compaction_summary is not None:
            indexes[IndexType.COMPACTION_SUMMARY] = compaction_summary
        data = LogSegmentData(
            log_segment=d / f"{name}.log",
            offset_index=d / f"{name}.index",
            time_index=d / f"{name}.timeindex",
            transaction_index=(d / f"{name}.txnindex") if with_transaction_index else None,
            producer_snapshot_index=d / f"{name}.snapshot",
            leader_epoch_index=leader_epoch,
            compaction_summary=compaction_summary,
        )
        return SegmentFiles(data, segment, indexes)

    def summary(self, size: int = 1250) -> bytes:
        """A compaction summary as the log cleaner hands one over: a small opaque blob (a
        header and Bloom filter bits in tierlog's own format; random bytes here, different
        every time, which the RSM must store without interpreting)."""
        return b"TLCS" + self._bytes(max(0, size - 4))

    def create_large(self, size: int, *, chunk: int = MiB) -> tuple[SegmentFiles, str]:
        """A segment of ``size`` bytes written ``chunk`` at a time (never whole in memory), and
        the SHA-256 of its content. ``SegmentFiles.segment`` is empty for it."""
        small = self.create(size=0)
        path = small.data.log_segment
        digest = hashlib.sha256()
        with path.open("wb") as out:
            remaining = size
            while remaining:
                block = self._bytes(min(chunk, remaining))
                digest.update(block)
                out.write(block)
                remaining -= len(block)
        return small, digest.hexdigest()

    @staticmethod
    def remove(files: SegmentFiles) -> None:
        """Delete the local files, as local retention does after a copy."""
        data = files.data
        for path in (
            data.log_segment,
            data.offset_index,
            data.time_index,
            data.transaction_index,
            data.producer_snapshot_index,
        ):
            if path is not None:
                path.unlink(missing_ok=True)


def segment_metadata(
    topic_id_partition: TopicIdPartition,
    *,
    start_offset: int = 0,
    end_offset: int | None = None,
    size: int = 0,
    segment_id: Uuid | None = None,
) -> RemoteLogSegmentMetadata:
    """The metadata the RLM would hand to ``copy_log_segment_data`` (state COPY_SEGMENT_STARTED)."""
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(
            topic_id_partition, segment_id if segment_id is not None else Uuid.random()
        ),
        start_offset=start_offset,
        end_offset=start_offset + 99 if end_offset is None else end_offset,
        max_timestamp_ms=1_700_000_000_000,
        broker_id=0,
        event_timestamp_ms=1_700_000_000_000,
        segment_size_in_bytes=size,
        segment_leader_epochs={0: start_offset},
    )


def read_stream(stream: BinaryIO, chunk: int | None = None) -> bytes:
    """Read a fetched stream to its end (in ``chunk``-sized reads if given), then close it."""
    with stream:
        if chunk is None:
            data = stream.read()
        else:
            parts = []
            while part := stream.read(chunk):
                assert len(part) <= chunk, f"read({chunk}) returned {len(part)} bytes"
                parts.append(part)
            data = b"".join(parts)
        assert isinstance(data, bytes), (
            f"the stream's read() must return bytes (BinaryIO), got {type(data).__name__}"
        )
        return data


def _measure_peak(fn: Callable[[], _T]) -> tuple[_T, int]:
    """Run ``fn`` and return its result and the peak of Python memory it allocated."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return result, max(0, peak - base)


def _walk(base: Path) -> set[Path]:
    """Every file, directory and link under ``base``, without following links."""
    found: set[Path] = set()
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        here = Path(dirpath)
        found.update(here / n for n in dirnames)
        found.update(here / n for n in filenames)
    return found


def _is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


LEGAL_TOPIC_NAMES: Final[Mapping[str, str]] = {
    "all-legal-characters": "Topic.With_All-legal.Chars-0123456789",
    "leading-underscore": "__internal_like",
    "leading-dash": "-starts-with-dash",
    "double-dot-inside": "a..b",
    "longest-legal": "t" * 249,
}
"""Legal Kafka topic names (``[a-zA-Z0-9._-]``, at most 249 characters) that must work."""

_ABSOLUTE = "<absolute path into a directory outside the store>"
_CLIMB = "<relative path climbing to / and into a directory outside the store>"
HOSTILE_TOPIC_NAMES: Final[Mapping[str, str]] = {
    "parent": "../x",
    "grandparent": "../../etc",
    "absolute": _ABSOLUTE,
    "climb-to-root": _CLIMB,
    "slash": "a/b",
    "backslash": "a\\b",
    "nul": "a\x00b",
    "newline": "a\nb",
    "dot": ".",
    "dotdot": "..",
    "empty": "",
    "unicode": "тема-🙂",
    "longest-legal": "t" * 249,
    "too-long": "t" * 1000,
}
"""Topic names that try to make a store write elsewhere. The two placeholders are replaced by
paths into a sentinel directory of the test, so an escape is observed, not just suspected:
``/<tmp>/outside/x`` and ``../../(x40)/<tmp>/outside/x`` (``..`` stops at ``/``, so the second
lands in the sentinel however deep the store is)."""


# The suite ------------------------------------------------------------------------------------
class RemoteStorageManagerSuite(SuiteBase):
    """Kafka's RemoteStorageManager contract; subclass it with ``plugin_class = YourRSM``.

    Class attributes a subclass may set: ``plugin_class``, ``config``, ``capabilities``,
    ``large_segment_size``, ``memory_limit``, ``concurrency``. Hooks it may override:
    ``store_root`` and ``stored_objects``. Fixtures it may override: ``rsm_config``, ``rsm``.
    """

    _option_name: ClassVar[str] = RSM_OPTION
    _kind: ClassVar[str] = "rsm"
    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.tierlog_conformance]

    capabilities: ClassVar[RemoteStorageManagerCapabilities | None] = None
    """What the plugin cannot do; ``None`` asks the plugin's ``conformance_capabilities()``
    classmethod, and without one everything is expected to work."""

    large_segment_size: ClassVar[int] = 256 * MiB
    """Size of the segment of ``test_large_segment_streams_with_bounded_memory``."""

    memory_limit: ClassVar[int] = 48 * MiB
    """Peak Python memory (``tracemalloc``) allowed while copying or fetching that segment.

    Above the bounded working set of a streaming plugin at its default settings (the
    object-store RSMs keep ``upload.part.size`` x ``upload.parallelism`` = 8 MiB x 4 = 32 MiB of
    parts in flight, by design) and far below the 256 MiB segment, so that a plugin reading the
    segment whole still fails."""

    concurrency: ClassVar[int] = 8
    """Threads of ``test_concurrent_copies_of_different_segments``."""

    # Hooks for independent inspection -----------------------------------------------------------
    def store_root(self, rsm: RemoteStorageManager) -> Path | None:
        """The local directory the plugin keeps everything under, if it stores on this
        machine's file system; ``None`` (the default) otherwise.

        With it, the suite walks the file system itself (not through the RSM API) to check that
        hostile topic names write nothing outside this directory, and ``stored_objects``
        defaults to the files found under it. The default asks the plugin: an RSM may define
        ``conformance_store_root()`` returning that directory, which is how
        ``tierlog conformance --rsm NAME`` gets it.
        """
        hook: Any = getattr(rsm, "conformance_store_root", None)
        if hook is None:
            return None
        root = hook()
        return None if root is None else Path(root)

    def stored_objects(self, rsm: RemoteStorageManager) -> set[str] | None:
        """Names of every object currently stored, listed without the API under test (a
        directory walk, a bucket listing, a dict's keys); ``None`` if it cannot be listed.

        The default asks the plugin first (an RSM may define ``conformance_stored_objects()``
        returning such names, e.g. from a bucket listing, which is how ``tierlog conformance``
        gets them), then lists the files under ``store_root()`` as relative POSIX paths.
        """
        hook: Any = getattr(rsm, "conformance_stored_objects", None)
        if hook is not None:
            listed = hook()
            return None if listed is None else {str(name) for name in listed}
        root = self.store_root(rsm)
        if root is None:
            return None
        return {
            p.relative_to(root).as_posix() for p in _walk(root) if p.is_symlink() or not p.is_dir()
        }

    # Fixtures -----------------------------------------------------------------------------------
    @pytest.fixture
    def rsm_class(self, request: pytest.FixtureRequest) -> type[RemoteStorageManager]:
        """The class under test: ``plugin_class`` or the ``--tierlog-rsm`` plugin."""
        return self._plugin_class_of(request.config, RemoteStorageManager)

    @pytest.fixture
    def rsm_config(
        self,
        request: pytest.FixtureRequest,
        rsm_class: type[RemoteStorageManager],
        tmp_path: Path,
    ) -> dict[str, str]:
        """The configuration passed to ``configure`` (see the module docstring for its source)."""
        return self._make_config(request.config, rsm_class, tmp_path)

    @pytest.fixture
    def rsm_capabilities(
        self, rsm_class: type[RemoteStorageManager]
    ) -> RemoteStorageManagerCapabilities:
        """The declared capabilities: the subclass's, else the plugin's, else all supported."""
        return self._declared_capabilities(
            self.capabilities, rsm_class, RemoteStorageManagerCapabilities
        )

    @pytest.fixture
    def make_rsm(
        self, rsm_class: type[RemoteStorageManager], rsm_config: dict[str, str]
    ) -> Iterator[Callable[[], RemoteStorageManager]]:
        """Builds more instances with the same configuration (another broker, or the same one
        after a restart); each is closed at teardown."""
        made: list[RemoteStorageManager] = []

        def make() -> RemoteStorageManager:
            instance = rsm_class()
            instance.configure(dict(rsm_config))
            made.append(instance)
            return instance

        yield make
        for instance in reversed(made):
            instance.close()

    @pytest.fixture
    def rsm(
        self, rsm_class: type[RemoteStorageManager], rsm_config: dict[str, str]
    ) -> Iterator[RemoteStorageManager]:
        """The instance under test, built as Kafka builds it: ``cls()`` then ``configure``."""
        instance = rsm_class()
        instance.configure(dict(rsm_config))
        yield instance
        instance.close()

    @pytest.fixture
    def segments(self, tmp_path: Path) -> SegmentFactory:
        """Makes local segment files under ``tmp_path/local-segments``."""
        return SegmentFactory(tmp_path / "local-segments")

    @pytest.fixture
    def topic_partition(self) -> TopicIdPartition:
        """A fresh partition (random topic id) for the test."""
        return TopicIdPartition(Uuid.random(), "tierlog-conformance", 0)

    # Helpers ------------------------------------------------------------------------------------
    @staticmethod
    def copy(
        rsm: RemoteStorageManager,
        files: SegmentFiles,
        topic_id_partition: TopicIdPartition,
        *,
        start_offset: int = 0,
        segment_id: Uuid | None = None,
    ) -> RemoteLogSegmentMetadata:
        """Copy ``files`` as a new segment (or as ``segment_id``) and return its metadata."""
        metadata = segment_metadata(
            topic_id_partition,
            start_offset=start_offset,
            size=len(files.segment),
            segment_id=segment_id,
        )
        result = rsm.copy_log_segment_data(metadata, files.data)
        assert result is None or isinstance(result, CustomMetadata), (
            f"copy_log_segment_data must return None or CustomMetadata, got {result!r}"
        )
        return metadata

    @staticmethod
    def assert_stored(
        rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, files: SegmentFiles
    ) -> None:
        """The segment and each of its indexes read back byte for byte; an index the segment
        was copied without (transaction index, compaction summary) raises
        ``RemoteResourceNotFoundException``."""
        segment_id = metadata.remote_log_segment_id
        got = read_stream(rsm.fetch_log_segment(metadata, 0))
        assert got == files.segment, (
            f"segment data of {segment_id} differs from what was copied "
            f"({len(got)} bytes read, {len(files.segment)} copied)"
        )
        for index_type in IndexType:
            if index_type in files.indexes:
                got = read_stream(rsm.fetch_index(metadata, index_type))
                assert got == files.expected(index_type), (
                    f"{index_type} index of {segment_id} differs from what was copied "
                    f"({len(got)} bytes read, {len(files.expected(index_type))} copied)"
                )
            else:
                with pytest.raises(_NOT_FOUND):
                    read_stream(rsm.fetch_index(metadata, index_type))

    @staticmethod
    def assert_gone(rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata) -> None:
        """Fetching the segment or any index raises ``RemoteResourceNotFoundException``."""
        with pytest.raises(_NOT_FOUND):
            read_stream(rsm.fetch_log_segment(metadata, 0))
        for index_type in IndexType:
            with pytest.raises(_NOT_FOUND):
                read_stream(rsm.fetch_index(metadata, index_type))

    # Copy and fetch -----------------------------------------------------------------------------
    def test_copy_returns_none_or_custom_metadata(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """``copy_log_segment_data`` returns ``None`` or a ``CustomMetadata``.

        The RLM stores what is returned with the segment's metadata. To fix: return ``None``
        (Kafka's ``Optional.empty()``) or ``CustomMetadata(bytes)``; nothing else.
        """
        files = segments.create()
        metadata = segment_metadata(topic_partition, size=len(files.segment))
        result = rsm.copy_log_segment_data(metadata, files.data)
        assert result is None or isinstance(result, CustomMetadata), (
            f"copy_log_segment_data returned {result!r}; expected None or CustomMetadata"
        )

    def test_fetch_segment_returns_copied_bytes(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """A copied segment fetched from position 0 reads back byte for byte.

        To fix: copy the whole ``log_segment`` file in binary mode and serve it back unchanged
        (no text decoding, no compression left on the returned stream).
        """
        files = segments.create(size=10_000)
        metadata = self.copy(rsm, files, topic_partition)
        got = read_stream(rsm.fetch_log_segment(metadata, 0))
        assert got == files.segment, f"read {len(got)} bytes, copied {len(files.segment)}"

    @pytest.mark.parametrize("index_type", list(IndexType), ids=str)
    def test_fetch_index_returns_copied_bytes(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
        index_type: IndexType,
    ) -> None:
        """Each index type reads back exactly what was copied for it.

        ``LEADER_EPOCH`` comes from ``LogSegmentData.leader_epoch_index`` and
        ``COMPACTION_SUMMARY`` from ``LogSegmentData.compaction_summary`` (bytes in memory), the
        others from files. To fix a mismatch: check the mapping from ``IndexType`` to what you
        store (a mix-up of offset and time index is the usual bug).
        """
        files = segments.create(compaction_summary=segments.summary())
        metadata = self.copy(rsm, files, topic_partition)
        got = read_stream(rsm.fetch_index(metadata, index_type))
        assert got == files.expected(index_type), (
            f"{index_type}: read {len(got)} bytes, copied {len(files.expected(index_type))}"
        )

    def test_copy_empty_segment(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """A zero-byte segment copies; fetching it gives an empty stream, its indexes work.

        Kafka's LocalTieredStorageTest copies an empty segment too. To fix: do not treat an
        empty file as missing, and do not skip writing it.
        """
        files = segments.create(size=0)
        metadata = self.copy(rsm, files, topic_partition)
        self.assert_stored(rsm, metadata, files)

    def test_copy_survives_deletion_of_local_files(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """After the copy returns, the local files may be deleted (local retention does so)
        and the remote copy still reads back.

        To fix: copy the bytes before returning; do not keep a reference to, or a symbolic
        link to, the local files, and do not upload lazily.
        """
        files = segments.create()
        metadata = self.copy(rsm, files, topic_partition)
        SegmentFactory.remove(files)
        self.assert_stored(rsm, metadata, files)

    # Idempotent copy ----------------------------------------------------------------------------
    def test_copy_retry_overwrites(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """Copying again with the same segment id succeeds and replaces every file.

        The retry carries different, shorter content, so a plugin that refuses existing
        content, keeps the first copy, or writes without truncating is caught. To fix: overwrite
        (or delete then write) each object; never fail because it exists.
        """
        first = segments.create(size=8192, entries=32)
        metadata = self.copy(rsm, first, topic_partition)
        second = segments.create(size=3000, entries=8)
        self.copy(rsm, second, topic_partition, segment_id=metadata.remote_log_segment_id.id)
        self.assert_stored(rsm, metadata, second)

    def test_retry_without_transaction_index_drops_the_old_one(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """A retry whose segment has no transaction index leaves none behind.

        Otherwise the earlier attempt's index would be served for data it does not describe.
        To fix: when ``transaction_index`` is ``None``, delete any stored transaction index of
        the segment id.
        """
        first = segments.create(with_transaction_index=True)
        metadata = self.copy(rsm, first, topic_partition)
        second = segments.create(with_transaction_index=False)
        self.copy(rsm, second, topic_partition, segment_id=metadata.remote_log_segment_id.id)
        self.assert_stored(rsm, metadata, second)

    # Optional transaction index -----------------------------------------------------------------
    def test_missing_transaction_index_raises_not_found(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """Without a transaction index, fetching it raises RemoteResourceNotFoundException and
        everything else still reads back.

        The RLM then treats the segment as having no aborted transactions. To fix: store nothing
        for a ``None`` ``transaction_index`` and raise ``RemoteResourceNotFoundException`` in
        ``fetch_index(TRANSACTION)``; do not return an empty stream or ``None``.
        """
        files = segments.create(with_transaction_index=False)
        metadata = self.copy(rsm, files, topic_partition)
        with pytest.raises(_NOT_FOUND):
            read_stream(rsm.fetch_index(metadata, IndexType.TRANSACTION))
        self.assert_stored(rsm, metadata, files)

    # Compaction summary (a tierlog extension) ---------------------------------------------------
    def test_compaction_summary_round_trips(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """A segment copied with ``LogSegmentData.compaction_summary`` serves exactly those bytes
        from ``fetch_index(COMPACTION_SUMMARY)``, and everything else as usual.

        The log cleaner uploads a summary (a Bloom filter of the segment's keys) with every
        segment it writes and reads it back to decide whether the segment must be downloaded.
        To fix: store the bytes with the segment's other indexes (they are in memory, like
        ``leader_epoch_index``) and serve them for ``IndexType.COMPACTION_SUMMARY``.
        """
        files = segments.create(compaction_summary=segments.summary())
        metadata = self.copy(rsm, files, topic_partition)
        got = read_stream(rsm.fetch_index(metadata, IndexType.COMPACTION_SUMMARY))
        assert got == files.expected(IndexType.COMPACTION_SUMMARY), (
            f"COMPACTION_SUMMARY: read {len(got)} bytes, copied "
            f"{len(files.expected(IndexType.COMPACTION_SUMMARY))}"
        )
        self.assert_stored(rsm, metadata, files)

    def test_missing_compaction_summary_raises_not_found(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """A segment copied without a compaction summary (``None``, every segment copied from
        the local log) raises RemoteResourceNotFoundException for it, never another error, and
        everything else reads back.

        The cleaner then downloads the segment instead of skipping it. To fix: store nothing for
        a ``None`` summary and raise ``RemoteResourceNotFoundException`` from
        ``fetch_index(COMPACTION_SUMMARY)``, as for a missing transaction index; not an empty
        stream, ``None``, ``KeyError`` or ``ValueError`` for an index type you did not expect.
        """
        files = segments.create()
        metadata = self.copy(rsm, files, topic_partition)
        with pytest.raises(_NOT_FOUND):
            read_stream(rsm.fetch_index(metadata, IndexType.COMPACTION_SUMMARY))
        self.assert_stored(rsm, metadata, files)

    def test_empty_compaction_summary_round_trips_as_empty(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """An empty summary (``b""``) is a summary: it reads back as an empty stream, not as
        RemoteResourceNotFoundException.

        To fix: test the summary with ``is not None``, not for truth, when copying; store the
        empty object, and serve an empty stream for it.
        """
        files = segments.create(compaction_summary=b"")
        metadata = self.copy(rsm, files, topic_partition)
        got = read_stream(rsm.fetch_index(metadata, IndexType.COMPACTION_SUMMARY))
        assert got == b"", f"an empty compaction summary read back as {len(got)} bytes"
        self.assert_stored(rsm, metadata, files)

    def test_retry_replaces_the_compaction_summary(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """A retry under the same segment id with another, shorter summary serves the new one.

        A rerun of the cleaner uploads the same segment id again. To fix: overwrite the summary
        (and truncate) like every other index.
        """
        first = segments.create(compaction_summary=segments.summary(4000))
        metadata = self.copy(rsm, first, topic_partition)
        second = segments.create(compaction_summary=segments.summary(300))
        self.copy(rsm, second, topic_partition, segment_id=metadata.remote_log_segment_id.id)
        self.assert_stored(rsm, metadata, second)

    def test_retry_without_compaction_summary_drops_the_old_one(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """A retry whose data has no summary leaves none behind: fetching it then raises
        RemoteResourceNotFoundException.

        Otherwise the earlier attempt's Bloom filter would describe other keys than the stored
        segment's, and the cleaner could skip a segment it must rewrite. To fix: when
        ``compaction_summary`` is ``None``, delete any summary stored under the segment id.
        """
        first = segments.create(compaction_summary=segments.summary())
        metadata = self.copy(rsm, first, topic_partition)
        second = segments.create()
        self.copy(rsm, second, topic_partition, segment_id=metadata.remote_log_segment_id.id)
        self.assert_stored(rsm, metadata, second)

    def test_delete_removes_the_compaction_summary(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """After a delete, the compaction summary raises RemoteResourceNotFoundException like
        the segment and its other indexes.

        To fix: delete the summary with the segment's other objects in
        ``delete_log_segment_data``.
        """
        files = segments.create(compaction_summary=segments.summary())
        metadata = self.copy(rsm, files, topic_partition)
        rsm.delete_log_segment_data(metadata)
        with pytest.raises(_NOT_FOUND):
            read_stream(rsm.fetch_index(metadata, IndexType.COMPACTION_SUMMARY))
        self.assert_gone(rsm, metadata)

    # Missing data -------------------------------------------------------------------------------
    def test_fetch_missing_segment_raises_not_found(
        self, rsm: RemoteStorageManager, topic_partition: TopicIdPartition
    ) -> None:
        """Fetching a segment that was never copied raises RemoteResourceNotFoundException.

        To fix: translate your store's "not found" (``FileNotFoundError``, S3 ``NoSuchKey``, GCS
        ``NotFound``, Azure ``ResourceNotFoundError``, a ``KeyError``) into
        ``RemoteResourceNotFoundException``, and raise it from ``fetch_log_segment`` itself or at
        the latest on the first read.
        """
        metadata = segment_metadata(topic_partition, size=100)
        with pytest.raises(_NOT_FOUND):
            read_stream(rsm.fetch_log_segment(metadata, 0))

    @pytest.mark.parametrize("index_type", list(IndexType), ids=str)
    def test_fetch_index_of_missing_segment_raises_not_found(
        self,
        rsm: RemoteStorageManager,
        topic_partition: TopicIdPartition,
        index_type: IndexType,
    ) -> None:
        """Fetching any index of a segment that was never copied raises
        RemoteResourceNotFoundException.

        To fix: as for the segment, translate the store's "not found" for every index type.
        """
        metadata = segment_metadata(topic_partition, size=100)
        with pytest.raises(_NOT_FOUND):
            read_stream(rsm.fetch_index(metadata, index_type))

    # Delete -------------------------------------------------------------------------------------
    def test_delete_then_fetch_raises_not_found(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """After a delete, the segment and every index raise RemoteResourceNotFoundException.

        To fix: delete the segment and all its indexes (the transaction index too), and make the
        store's "not found" surface as ``RemoteResourceNotFoundException``.
        """
        files = segments.create()
        metadata = self.copy(rsm, files, topic_partition)
        rsm.delete_log_segment_data(metadata)
        self.assert_gone(rsm, metadata)

    def test_delete_of_never_copied_segment_succeeds(
        self, rsm: RemoteStorageManager, topic_partition: TopicIdPartition
    ) -> None:
        """Deleting a segment that was never copied returns normally.

        The RLM deletes the data of failed copies, which may have stored nothing. To fix: ignore
        "not found" while deleting (GCS and Azure raise 404 on a missing object).
        """
        rsm.delete_log_segment_data(segment_metadata(topic_partition, size=100))

    def test_delete_twice_succeeds(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """A second delete of the same segment returns normally (delete is idempotent).

        To fix: ignore "not found" while deleting; never raise
        ``RemoteResourceNotFoundException`` from ``delete_log_segment_data``.
        """
        files = segments.create(with_transaction_index=False)
        metadata = self.copy(rsm, files, topic_partition)
        rsm.delete_log_segment_data(metadata)
        rsm.delete_log_segment_data(metadata)
        self.assert_gone(rsm, metadata)

    def test_copy_and_delete_leave_nothing_behind(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """Copies (one retried, one without transaction index, one with a compaction summary)
        then deletes leave the store, listed independently by ``stored_objects()``, as it was.

        Needs a way to list the store independently (``conformance_stored_objects()`` or
        ``conformance_store_root()`` on the plugin, or the suite hooks). To fix: delete
        every object a copy wrote, and remove temporary files of a copy before it returns.
        """
        before = self.stored_objects(rsm)
        if before is None:
            pytest.skip(
                "the store cannot be listed independently: define conformance_stored_objects()"
                " or conformance_store_root() on the plugin (or stored_objects()/store_root() "
                "on the suite subclass)"
            )
        with_txn = self.copy(rsm, segments.create(), topic_partition)
        self.copy(
            rsm, segments.create(), topic_partition, segment_id=with_txn.remote_log_segment_id.id
        )
        without_txn = self.copy(
            rsm, segments.create(with_transaction_index=False), topic_partition, start_offset=100
        )
        with_summary = self.copy(
            rsm,
            segments.create(compaction_summary=segments.summary()),
            topic_partition,
            start_offset=200,
        )
        during = self.stored_objects(rsm)
        assert during is not None and len(during) > len(before), (
            "stored_objects() lists nothing new after three copies; it must list the store"
        )
        rsm.delete_log_segment_data(with_txn)
        rsm.delete_log_segment_data(without_txn)
        rsm.delete_log_segment_data(with_summary)
        after = self.stored_objects(rsm)
        assert after == before, f"left behind after delete: {sorted((after or set()) - before)}"

    # Ranged fetch -------------------------------------------------------------------------------
    _RANGES: ClassVar[Mapping[str, Callable[[int], tuple[int, int | None]]]] = {
        "first-byte": lambda n: (0, 0),
        "whole": lambda n: (0, n - 1),
        "last-byte": lambda n: (n - 1, n - 1),
        "middle": lambda n: (n // 3, 2 * n // 3),
        "one-middle-byte": lambda n: (n // 2, n // 2),
        "end-past-the-end": lambda n: (n // 2, n + 1000),
        "no-end": lambda n: (n // 2, None),
        "no-end-from-0": lambda n: (0, None),
        "start-at-size": lambda n: (n, n),
        "start-at-size-no-end": lambda n: (n, None),
        "start-past-size": lambda n: (n + 10, n + 20),
    }

    @pytest.mark.parametrize("case", list(_RANGES))
    def test_fetch_range(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
        case: str,
    ) -> None:
        """``fetch_log_segment(start, end)`` gives bytes ``start..end`` inclusive.

        No end means to the end; an end past the end is clamped; a start at or past the end
        gives an empty stream. Read whole and in 7-byte reads. To fix: the end is *inclusive*
        (``end - start + 1`` bytes; an HTTP ``Range: bytes=start-end`` is inclusive too), clamp
        it to the size, and answer an empty stream rather than an error for a start at the
        end (S3 and GCS answer 416 there: catch it).
        """
        size = 5000
        files = segments.create(size=size)
        metadata = self.copy(rsm, files, topic_partition)
        start, end = self._RANGES[case](size)
        expected = files.segment[start : size if end is None else end + 1]
        got = read_stream(rsm.fetch_log_segment(metadata, start, end))
        assert got == expected, (
            f"fetch_log_segment({start}, {end}) of a {size}-byte segment returned {len(got)} "
            f"bytes, expected {len(expected)}"
            + ("" if len(got) != len(expected) else " (same length, different bytes)")
        )
        chunked = read_stream(rsm.fetch_log_segment(metadata, start, end), chunk=7)
        assert chunked == expected, (
            f"fetch_log_segment({start}, {end}) read 7 bytes at a time returned {len(chunked)} "
            f"bytes, expected {len(expected)}: the stream must stop at the end position"
        )

    _INVALID_RANGES: ClassVar[Mapping[str, tuple[int, int | None]]] = {
        "start-after-end": (2, 1),
        "end-negative": (1, -1),
        "negative-start": (-1, 10),
        "negative-start-no-end": (-1, None),
    }

    @pytest.mark.parametrize("case", list(_INVALID_RANGES))
    def test_fetch_invalid_range_raises_value_error(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
        case: str,
    ) -> None:
        """``start < 0`` or ``start > end`` raises ``ValueError`` (``InvalidArgumentError``).

        Kafka raises ``IllegalArgumentException`` for these. To fix: check the arguments before
        touching the store and raise ``tierlog.spi.InvalidArgumentError``.
        """
        files = segments.create(size=100)
        metadata = self.copy(rsm, files, topic_partition)
        start, end = self._INVALID_RANGES[case]
        with pytest.raises(ValueError):
            read_stream(rsm.fetch_log_segment(metadata, start, end))

    # Isolation ----------------------------------------------------------------------------------
    def test_segments_of_one_partition_do_not_interfere(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """Three consecutive segments of one partition read back their own data, and deleting
        the middle one leaves the others intact.

        To fix: key every object by the segment id (and start offset), not by the partition.
        """
        stored = []
        for i in range(3):
            files = segments.create(start_offset=100 * i)
            stored.append((self.copy(rsm, files, topic_partition, start_offset=100 * i), files))
        for metadata, files in stored:
            self.assert_stored(rsm, metadata, files)
        rsm.delete_log_segment_data(stored[1][0])
        self.assert_gone(rsm, stored[1][0])
        self.assert_stored(rsm, *stored[0])
        self.assert_stored(rsm, *stored[2])

    def test_partitions_and_topic_ids_do_not_interfere(
        self, rsm: RemoteStorageManager, segments: SegmentFactory
    ) -> None:
        """Segments at the same offsets of other partitions, of a recreated topic (same name,
        new topic id) and of another topic stay separate.

        To fix: include the topic id and the partition in every object's key (a topic deleted
        and recreated keeps its name but not its id).
        """
        topic_id = Uuid.random()
        partitions = [
            TopicIdPartition(topic_id, "orders", 0),
            TopicIdPartition(topic_id, "orders", 1),
            TopicIdPartition(Uuid.random(), "orders", 0),
            TopicIdPartition(Uuid.random(), "payments", 0),
        ]
        stored = [
            (self.copy(rsm, files, tip), files)
            for tip in partitions
            for files in [segments.create()]
        ]
        for metadata, files in stored:
            self.assert_stored(rsm, metadata, files)
        rsm.delete_log_segment_data(stored[0][0])
        self.assert_gone(rsm, stored[0][0])
        for metadata, files in stored[1:]:
            self.assert_stored(rsm, metadata, files)

    def test_segment_ids_are_per_attempt(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
    ) -> None:
        """Two copy attempts of the same offsets under two segment ids are both retrievable
        until deleted, and deleting one keeps the other.

        Kafka generates a new ``RemoteLogSegmentId`` per attempt, and an abandoned attempt is
        deleted later. To fix: key objects by the segment id, not only by the offsets.
        """
        first = segments.create()
        second = segments.create()
        m1 = self.copy(rsm, first, topic_partition)
        m2 = self.copy(rsm, second, topic_partition)
        self.assert_stored(rsm, m1, first)
        self.assert_stored(rsm, m2, second)
        rsm.delete_log_segment_data(m1)
        self.assert_gone(rsm, m1)
        self.assert_stored(rsm, m2, second)

    # Concurrency --------------------------------------------------------------------------------
    def test_concurrent_copies_of_different_segments(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        rsm_capabilities: RemoteStorageManagerCapabilities,
    ) -> None:
        """``concurrency`` threads copy different segments at once (of two partitions, from one
        instance); all land intact, then read back concurrently.

        To fix: no shared mutable state without a lock (a shared temporary file name, a client
        that is not thread-safe, a check-then-create of a directory that raises when it exists).
        """
        require(rsm_capabilities.concurrent_copies, "concurrent_copies")
        tips = [TopicIdPartition(Uuid.random(), "concurrent", p) for p in (0, 1)]
        jobs = [
            (
                tips[i % 2],
                100 * (i // 2),
                segments.create(size=20_000 + i, start_offset=100 * (i // 2)),
            )
            for i in range(self.concurrency)
        ]
        barrier = threading.Barrier(self.concurrency)

        def copy(job: tuple[TopicIdPartition, int, SegmentFiles]) -> RemoteLogSegmentMetadata:
            tip, offset, files = job
            barrier.wait(timeout=30)
            return self.copy(rsm, files, tip, start_offset=offset)

        with ThreadPoolExecutor(self.concurrency) as pool:
            copied = list(pool.map(copy, jobs))

        def check(pair: tuple[RemoteLogSegmentMetadata, SegmentFiles]) -> None:
            self.assert_stored(rsm, *pair)

        with ThreadPoolExecutor(self.concurrency) as pool:
            list(pool.map(check, [(m, job[2]) for m, job in zip(copied, jobs, strict=True)]))

    # Large segments -----------------------------------------------------------------------------
    @pytest.mark.tierlog_large
    @pytest.mark.slow
    def test_large_segment_streams_with_bounded_memory(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
        rsm_capabilities: RemoteStorageManagerCapabilities,
        request: pytest.FixtureRequest,
    ) -> None:
        """A ``large_segment_size`` (256 MiB) segment copies and reads back (SHA-256 equal,
        read in 1 MiB chunks) with at most ``memory_limit`` (48 MiB) of Python memory at peak
        (``tracemalloc``) during the copy and during the read; ranges near the end read back.

        To fix: stream in both directions. Copy with ``shutil.copyfileobj``/``sendfile`` or a
        multipart upload from the open file, never ``path.read_bytes()``; return a stream over
        the object (a file, an HTTP body) rather than ``io.BytesIO(whole_object)``.
        """
        require(rsm_capabilities.large_segments, "large_segments")
        size = self.large_segment_size
        files, digest = segments.create_large(size)
        metadata = segment_metadata(topic_partition, size=size)
        try:
            _, copy_peak = _measure_peak(lambda: rsm.copy_log_segment_data(metadata, files.data))

            def read_all() -> tuple[str, int]:
                h = hashlib.sha256()
                n = 0
                with rsm.fetch_log_segment(metadata, 0) as stream:
                    while chunk := stream.read(MiB):
                        h.update(chunk)
                        n += len(chunk)
                return h.hexdigest(), n

            (got_digest, got_size), fetch_peak = _measure_peak(read_all)
            request.node.user_properties.extend(
                [
                    ("large_segment_bytes", size),
                    ("copy_peak_bytes", copy_peak),
                    ("fetch_peak_bytes", fetch_peak),
                ]
            )
            _LOG.info(
                "large segment of %d MiB: copy peak %.2f MiB, fetch peak %.2f MiB",
                size // MiB,
                copy_peak / MiB,
                fetch_peak / MiB,
            )
            assert got_size == size, f"read {got_size} bytes of a {size}-byte segment"
            assert got_digest == digest, "the large segment read back differs from the copy"

            def read_range(start: int, end: int) -> bytes:
                return read_stream(rsm.fetch_log_segment(metadata, start, end))

            with files.data.log_segment.open("rb") as local:
                for start, end in ((size - 100, size + 10), (size // 2, size // 2 + 4095)):
                    local.seek(start)
                    expected = local.read(min(end, size - 1) - start + 1)
                    got, peak = _measure_peak(functools.partial(read_range, start, end))
                    assert got == expected, f"range {start}..{end} of the large segment differs"
                    assert peak < self.memory_limit, (
                        f"fetching {len(expected)} bytes at {start} peaked at {peak / MiB:.1f} "
                        "MiB: seek to the start instead of reading up to it"
                    )
            assert copy_peak < self.memory_limit, (
                f"copy of a {size / MiB:.0f} MiB segment peaked at {copy_peak / MiB:.1f} MiB of "
                f"Python memory (limit {self.memory_limit / MiB:.0f} MiB): stream the file"
            )
            assert fetch_peak < self.memory_limit, (
                f"reading a {size / MiB:.0f} MiB segment peaked at {fetch_peak / MiB:.1f} MiB "
                f"(limit {self.memory_limit / MiB:.0f} MiB): return a stream, not the whole "
                "object in memory"
            )
        finally:
            SegmentFactory.remove(files)
            rsm.delete_log_segment_data(metadata)

    # Topic names --------------------------------------------------------------------------------
    @pytest.mark.parametrize("case", list(LEGAL_TOPIC_NAMES))
    def test_legal_topic_names_work(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        case: str,
    ) -> None:
        """Every legal Kafka topic name (``[a-zA-Z0-9._-]``, up to 249 characters) works.

        A 249-character name plus partition and id is longer than a file name may be (255
        bytes) on most file systems. To fix: a filesystem store must shorten such names without
        collisions (for example a prefix plus a hash), an object store must keep keys within
        its limit (S3: 1024 bytes).
        """
        tip = TopicIdPartition(Uuid.random(), LEGAL_TOPIC_NAMES[case], 3)
        files = segments.create()
        metadata = self.copy(rsm, files, tip)
        self.assert_stored(rsm, metadata, files)
        rsm.delete_log_segment_data(metadata)
        self.assert_gone(rsm, metadata)

    @pytest.mark.parametrize("case", list(HOSTILE_TOPIC_NAMES))
    def test_hostile_topic_names_stay_inside_the_store(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        rsm_capabilities: RemoteStorageManagerCapabilities,
        tmp_path: Path,
        case: str,
    ) -> None:
        """A topic name that looks like a path either works (copy, fetch, delete) and stays in
        the store, or is refused with ``ValueError``; nothing is ever written outside.

        Checked independently of the API: a sentinel directory that absolute and climbing names
        point into must stay empty, and with ``store_root()`` the file system around the store
        is walked before and after. To fix: validate names (Kafka allows ``[a-zA-Z0-9._-]``, at
        most 249) and raise ``InvalidArgumentError``, or encode them; then check that the final
        path resolves inside your root directory.
        """
        require(rsm_capabilities.path_hostile_topic_names, "path_hostile_topic_names")
        outside = tmp_path / "outside-the-store"
        outside.mkdir()
        name = HOSTILE_TOPIC_NAMES[case]
        if name == _ABSOLUTE:
            name = str(outside / "x")
        elif name == _CLIMB:
            name = "../" * 40 + str(outside / "x").lstrip("/")

        files = segments.create()
        root = self.store_root(rsm)
        walk_base: Path | None = None
        before: set[Path] = set()
        if root is not None:
            root = root.absolute()
            walk_base = tmp_path if _is_within(root, tmp_path) else root.parent
            before = _walk(walk_base)

        tip = TopicIdPartition(Uuid.random(), name, 0)
        metadata = segment_metadata(tip, size=len(files.segment))
        try:
            rsm.copy_log_segment_data(metadata, files.data)
        except ValueError:
            refused = True
        else:
            refused = False
        if refused:
            with pytest.raises((ValueError, RemoteResourceNotFoundException)):
                read_stream(rsm.fetch_log_segment(metadata, 0))
            with contextlib.suppress(ValueError):
                rsm.delete_log_segment_data(metadata)
        else:
            self.assert_stored(rsm, metadata, files)
            stored = self.stored_objects(rsm)
            rsm.delete_log_segment_data(metadata)
            self.assert_gone(rsm, metadata)
            if root is not None and stored is not None:
                escaped = [
                    o for o in stored if not _is_within((root / o).resolve(), root.resolve())
                ]
                assert not escaped, f"stored_objects() outside the store root: {escaped}"

        leaked = sorted(str(p) for p in _walk(outside))
        assert not leaked, f"topic name {name!r} made the plugin write outside the store: {leaked}"
        if walk_base is not None and root is not None:
            created = _walk(walk_base) - before
            escaped_paths = sorted(str(p) for p in created if not _is_within(p, root))
            assert not escaped_paths, (
                f"topic name {name!r} created entries outside the store root {root}: "
                f"{escaped_paths}"
            )

    # Instances and lifecycle --------------------------------------------------------------------
    def test_instances_with_the_same_config_share_the_store(  # noqa: PLR0917 - fixtures
        self,
        rsm_class: type[RemoteStorageManager],
        rsm_config: dict[str, str],
        make_rsm: Callable[[], RemoteStorageManager],
        segments: SegmentFactory,
        topic_partition: TopicIdPartition,
        rsm_capabilities: RemoteStorageManagerCapabilities,
    ) -> None:
        """A second instance with the same configuration reads what the first copied, its
        delete is seen by the first, and a third one made after the first is closed (a
        restart) still reads the rest.

        A follower on another broker fetches what the leader copied. To fix: keep no
        per-instance state that reads depend on (a local cache of what was written, an index
        held in memory only), and do not remove the data on ``close``.
        """
        require(rsm_capabilities.shared_between_instances, "shared_between_instances")
        one = segments.create()
        two = segments.create(start_offset=100, compaction_summary=segments.summary())
        leader = rsm_class()
        leader.configure(dict(rsm_config))
        try:
            m1 = self.copy(leader, one, topic_partition)
            m2 = self.copy(leader, two, topic_partition, start_offset=100)
            follower = make_rsm()
            self.assert_stored(follower, m1, one)
            follower.delete_log_segment_data(m1)
            self.assert_gone(leader, m1)
        finally:
            leader.close()
        restarted = make_rsm()
        self.assert_stored(restarted, m2, two)

    def test_close_twice_is_safe(self, make_rsm: Callable[[], RemoteStorageManager]) -> None:
        """``close()`` may be called again (by a context manager and an explicit call).

        To fix: make ``close`` return quietly when already closed.
        """
        instance = make_rsm()
        with instance:
            pass
        instance.close()
