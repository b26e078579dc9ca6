"""``ObjectStoreRemoteStorageManager``: everything an object-store RSM does but the SDK calls.

A plugin subclasses it and provides two things::

    class S3RemoteStorageManager(ObjectStoreRemoteStorageManager):
        backend_config_keys = frozenset({"s3.bucket.name", "s3.region", ...})

        def create_backend(self, configs, upload, observer):
            return S3Backend(configs, upload, observer)

The base class does the rest, identically on every cloud:

- **configure**: parses the common ``rsm.config.`` keys (``config.py``), reports unknown keys
  (a warning, as the ``local`` RSM does: the RLM passes extra keys such as ``node.id``), builds
  the backend and calls its ``check_access`` so that a missing bucket or bad credentials fail
  at start-up with a message saying what to fix.
- **copy**: three objects per segment (``layout.py``): the log data streamed from the segment
  file (as is, or as a stream of transformed chunks of unknown total size), then every index
  in one object, then the manifest, **last**. Memory is bounded by the backend's part size x
  parallelism plus a chunk, whatever the segment's size. Any failure deletes what was written
  (best effort) and raises; a retry under the same segment id first removes the earlier
  attempt's manifest, so an old manifest never describes new data, then overwrites.
- **fetch**: the manifest (cached, or one GET) maps the byte range to chunks; the run of
  chunks not in the cache is fetched with **one** ranged GET (coalescing), decoded chunk by
  chunk as the caller reads, so a stream never holds more than a chunk. Chunks land in the
  memory (and disk) cache unless the read is a scan larger than a quarter of the cache. When
  a segment is read sequentially, the next ``fetch.prefetch.chunks`` chunks are fetched in the
  background, and a read that needs a chunk being prefetched waits for it rather than asking
  again. A plain segment (no transforms) read without caching (caches off, or a scan too large
  to cache) is one exact ranged GET. The first chunk is fetched before ``fetch_log_segment``
  returns, so a missing object or an unreachable store raises there. Nothing partial is ever
  read back: without a manifest there is no segment.
- **fetch_index**: one ranged GET of the index's bytes inside the ``.indexes`` object; an
  index the segment does not have (the transaction index, usually, and the compaction summary
  of every segment not written by the log cleaner or copied before the summary existed) raises
  ``RemoteResourceNotFoundException`` without any request but the (cached) manifest's.
- **delete**: the three keys, manifest first, idempotently (the backend swallows "not found").
  ``delete_partition`` lists the partition's prefix and deletes what is left (objects of
  abandoned copies).

Keys are recomputed from the segment's metadata; its custom metadata (``layout.py``), when the
RLM passes it back, records the key prefix the segment was written under, so segments stay
reachable after ``key.prefix`` changes. Thread-safe: Kafka's RLM copies, fetches and deletes
from several threads at once.
"""

from __future__ import annotations

import abc
import io
import logging
import os
import secrets
import threading
from collections.abc import Generator, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, ClassVar, Final

from tierlog.log.batch import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    LENGTH_MAGIC_ATTRIBUTES,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
)
from tierlog.log.compression import CompressionType
from tierlog.properties import did_you_mean
from tierlog.spi import (
    ConfigError,
    CustomMetadata,
    IllegalStateError,
    IndexType,
    InvalidArgumentError,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageManager,
    TopicIdPartition,
    check_fetch_range,
)
from tierlog.storage.objectstore.backend import (
    ObjectStoreBackend,
    RequestObserver,
    UploadSettings,
)
from tierlog.storage.objectstore.cache import ChunkCache, ChunkKey, DiskChunkCache, LruCache
from tierlog.storage.objectstore.config import (
    FETCH_DISK_CACHE_DIR,
    RLM_PROVIDED_KEYS,
    ObjectStoreConfig,
)
from tierlog.storage.objectstore.layout import (
    KeyLayout,
    ObjectKeys,
    decode_custom_metadata,
)
from tierlog.storage.objectstore.manifest import (
    INDEX_ORDER,
    Compression,
    IndexEntry,
    Manifest,
)
from tierlog.storage.objectstore.metrics import ObjectStoreMetrics
from tierlog.storage.objectstore.ratelimit import TokenBucket, rate_limited
from tierlog.storage.objectstore.transforms import (
    KeyProvider,
    SegmentCodec,
    load_key_provider,
    require_cryptography,
)

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = ["ObjectStoreRemoteStorageManager", "already_compressed"]

_LOG = logging.getLogger(__name__)

_READ_BUFFER: Final = 256 << 10
_HEURISTIC_BATCHES: Final = 8
_HEURISTIC_SCAN: Final = 16 << 20
_HEURISTIC_HEADER: Final = LENGTH_OFFSET + LENGTH_MAGIC_ATTRIBUTES.size
"""The bytes of a batch header the heuristic reads: up to and including Attributes."""
_LIST_DELETE_BATCH: Final = 1000
_SEQUENTIAL_TRACKED: Final = 4096


def already_compressed(source: BinaryIO, size: int) -> bool:
    """Whether the first record batches of a segment file are compressed by the producer.

    Reads the headers of up to 8 data batches (control batches are never compressed and are
    ignored) within the first 16 MiB. A file that does not start with v2 batches (not a Kafka
    segment: compress it) or whose inspected batches include an uncompressed one answers
    ``False``. Leaves the position where it was.
    """
    saved = source.tell()
    try:
        position, data_batches = 0, 0
        while data_batches < _HEURISTIC_BATCHES and position < min(size, _HEURISTIC_SCAN):
            source.seek(position)
            header = source.read(_HEURISTIC_HEADER)
            if len(header) < _HEURISTIC_HEADER:
                break
            length, magic, attributes = LENGTH_MAGIC_ATTRIBUTES.unpack_from(header, LENGTH_OFFSET)
            if (
                magic != MAGIC_V2
                or length < MIN_BATCH_LENGTH
                or position + LOG_OVERHEAD + length > size
            ):
                return False
            if not attributes & CONTROL_FLAG_MASK:
                if attributes & COMPRESSION_CODEC_MASK == CompressionType.NONE:
                    return False
                data_batches += 1
            position += LOG_OVERHEAD + length
        return data_batches > 0
    finally:
        source.seek(saved)


def _read_exact(stream: BinaryIO, n: int, what: str) -> bytes:
    """``n`` bytes from ``stream`` (HTTP bodies may return short reads)."""
    parts: list[bytes] = []
    remaining = n
    while remaining > 0:
        part = stream.read(remaining)
        if not part:
            raise RemoteStorageException(
                f"{what} ended {remaining} bytes early: the object is shorter than its manifest "
                "says (overwritten or truncated)"
            )
        parts.append(part)
        remaining -= len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


@dataclass(frozen=True, slots=True)
class _Segment:
    """A stored segment as a fetch sees it: keys, manifest, codec, cache identity."""

    keys: ObjectKeys
    manifest: Manifest
    codec: SegmentCodec
    object_id: str
    what: str

    def chunk_key(self, index: int) -> ChunkKey:
        return (self.object_id, index)


class _ChunkEncoder(io.RawIOBase):
    """The transformed chunks of a segment file as one stream (for an upload of unknown size).

    Holds one chunk (original and encoded) at a time; records each encoded chunk's size for the
    manifest. Reads exactly ``size`` bytes of the file: a file that ends early fails the copy.
    """

    def __init__(self, source: BinaryIO, size: int, codec: SegmentCodec, what: str) -> None:
        super().__init__()
        self._source = source
        self._size = size
        self._codec = codec
        self._what = what
        self._next = 0
        self._pending = memoryview(b"")
        self.sizes: list[int] = []

    def readable(self) -> bool:
        return True

    @property
    def complete(self) -> bool:
        return self._next == self._codec.chunk_count and not self._pending

    def readinto(self, buffer: WriteableBuffer) -> int:
        if not self._pending:
            if self._next >= self._codec.chunk_count:
                return 0
            want = min(self._codec.chunk_size, self._size - self._next * self._codec.chunk_size)
            raw = self._source.read(want)
            if len(raw) != want:
                raise RemoteStorageException(
                    f"{self._what} ended early: read {len(raw)} of {want} bytes of chunk "
                    f"{self._next} (the file changed during the copy)"
                )
            stage = self._codec.compress(raw)
            del raw  # at most two copies of a chunk alive at once
            encoded = self._codec.seal_chunk(self._next, stage)
            del stage
            self.sizes.append(len(encoded))
            self._pending = memoryview(encoded)
            self._next += 1
        view = memoryview(buffer).cast("B")
        n = min(len(view), len(self._pending))
        view[:n] = self._pending[:n]
        # An empty slice would still hold the whole encoded chunk: let it go.
        self._pending = self._pending[n:] if n < len(self._pending) else memoryview(b"")
        return n


class _ConcatReader(io.RawIOBase):
    """Several byte sources (open files of known size, or bytes) read as one stream."""

    def __init__(self, parts: Sequence[tuple[BinaryIO | bytes, int]]) -> None:
        super().__init__()
        self._parts = list(parts)
        self._index = 0
        self._offset = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        while self._index < len(self._parts):
            part, size = self._parts[self._index]
            remaining = size - self._offset
            if remaining <= 0:
                self._index += 1
                self._offset = 0
                continue
            n = min(len(view), remaining)
            if isinstance(part, bytes):
                view[:n] = part[self._offset : self._offset + n]
            else:
                data = part.read(n)
                if not data:
                    raise RemoteStorageException(
                        "an index file ended early (it changed during the copy)"
                    )
                n = len(data)
                view[:n] = data
            self._offset += n
            return n
        return 0


class _ChunkStream(io.RawIOBase):
    """The bytes ``[start, start + length)`` of a segment, decoded chunk by chunk as read."""

    def __init__(self, chunks: Generator[bytes, None, None], skip: int, length: int) -> None:
        super().__init__()
        self._chunks = chunks
        self._skip = skip
        self._remaining = length
        self._current = memoryview(b"")

    def readable(self) -> bool:
        return True

    def prime(self) -> None:
        """Fetch the first chunk now, so that a missing object or an unreachable store raises
        from ``fetch_log_segment`` itself (as an SDK's GET would), not from the first read."""
        try:
            self._advance()
        except BaseException:
            self.close()
            raise

    def _advance(self) -> bool:
        """Make the next chunk current; ``False`` at the end."""
        try:
            chunk = next(self._chunks)
        except StopIteration:
            self._remaining = 0
            return False
        view = memoryview(chunk)
        if self._skip:
            view = view[self._skip :]
            self._skip = 0
        self._current = view[: self._remaining]
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        if self._remaining <= 0:
            return 0
        while not self._current:
            if not self._advance():
                return 0
        out = memoryview(buffer).cast("B")
        n = min(len(out), len(self._current))
        out[:n] = self._current[:n]
        self._current = self._current[n:] if n < len(self._current) else memoryview(b"")
        self._remaining -= n
        return n

    def close(self) -> None:
        if not self.closed:
            try:
                self._chunks.close()
            finally:
                super().close()


class ObjectStoreRemoteStorageManager(RemoteStorageManager):
    """The RSM of every object store; a plugin subclasses it (see the module docstring).

    Construct with no arguments, ``configure`` once, use from any thread, ``close``.
    """

    backend_config_keys: ClassVar[frozenset[str]]
    """The plugin's own ``rsm.config.`` keys (bucket, region, endpoint...): not reported as
    unknown. Every subclass sets it."""

    @abc.abstractmethod
    def create_backend(
        self, configs: Mapping[str, str], upload: UploadSettings, observer: RequestObserver
    ) -> ObjectStoreBackend:
        """Build the plugin's backend from the whole configuration mapping (``rsm.config.``
        stripped; read only the plugin's own keys). Raise ``ConfigError`` naming the key for a
        bad setting; do not contact the store here (``check_access`` follows)."""

    def create_upload_bucket(self, rate: int) -> TokenBucket:
        """The token bucket of ``upload.rate.limit.bytes.per.second`` (``rate`` bytes per
        second), built once by ``configure`` and shared by every copy. Overridable so that a
        test can give it a fake clock and sleep and check the throttling exactly."""
        return TokenBucket(rate)

    # Lifecycle ----------------------------------------------------------------------------------
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._configured = False
        self._closed = False
        self._config = ObjectStoreConfig()
        self._layout = KeyLayout()
        self._backend: ObjectStoreBackend | None = None
        self._metrics = ObjectStoreMetrics()
        self._key_provider: KeyProvider | None = None
        self._bucket: TokenBucket | None = None
        self._chunk_cache = ChunkCache(0)
        self._manifests: LruCache[str, _Segment] = LruCache(0, lambda _s: 1)
        self._last_read: LruCache[str, int] = LruCache(_SEQUENTIAL_TRACKED, lambda _s: 1)
        self._executor: ThreadPoolExecutor | None = None
        self._inflight: dict[ChunkKey, Future[bytes]] = {}
        self._inflight_lock = threading.Lock()
        self._ignored: tuple[str, ...] = ()

    def configure(self, configs: Mapping[str, str]) -> None:
        """Parse and check the configuration, build the backend, check access to the bucket.

        Raises ``ConfigError`` naming the key for a bad setting, and whatever ``check_access``
        raises (``RemoteStorageException`` saying which bucket and what to fix).
        """
        with self._lock:
            if self._closed:
                raise IllegalStateError(f"{type(self).__name__} is closed; build a new instance")
            if self._configured:
                raise IllegalStateError(
                    f"{type(self).__name__} is already configured; configure() may only be "
                    "called once"
                )
            configs = {str(k): str(v) for k, v in configs.items()}
            config = ObjectStoreConfig.from_configs(configs)
            backend_keys = getattr(type(self), "backend_config_keys", None)
            if not isinstance(backend_keys, frozenset | set):
                raise TypeError(
                    f"{type(self).__qualname__}.backend_config_keys must be a frozenset of the "
                    "plugin's configuration keys"
                )
            known = config.keys() | backend_keys | RLM_PROVIDED_KEYS
            ignored = tuple(sorted(k for k in configs if k not in known))
            if ignored:
                _LOG.warning(
                    "%s ignores unknown configuration keys: %s (known: %s)",
                    type(self).__name__,
                    ", ".join(k + did_you_mean(k, known) for k in ignored),
                    ", ".join(sorted(known)),
                )
            key_provider = None
            if config.encryption_enabled:
                require_cryptography(ConfigError)
                key_provider = load_key_provider(
                    config.encryption_key_provider, config.encryption_key_file, configs
                )
            elif config.encryption_key_file is not None or (
                config.encryption_key_provider != "file"
            ):
                # Encryption turned off for new segments: keep the old ones readable.
                try:
                    require_cryptography(ConfigError)
                    key_provider = load_key_provider(
                        config.encryption_key_provider, config.encryption_key_file, configs
                    )
                except ConfigError as exc:
                    _LOG.warning(
                        "encryption is off and its key provider is unusable (%s): "
                        "segments copied encrypted cannot be read",
                        exc,
                    )
            disk = None
            if config.fetch_disk_cache_dir is not None:
                try:
                    disk = DiskChunkCache(config.fetch_disk_cache_dir, config.fetch_disk_cache_size)
                except OSError as exc:
                    raise ConfigError(
                        f"rsm.config.{FETCH_DISK_CACHE_DIR}={config.fetch_disk_cache_dir} "
                        f"cannot be used: {exc}"
                    ) from None
            metrics = ObjectStoreMetrics()
            backend = self.create_backend(configs, config.upload_settings(), metrics)
            metrics.backend = backend.name
            try:
                backend.check_access()
            except BaseException:
                backend.close()
                raise
            self._config = config
            self._layout = KeyLayout(config.key_prefix, config.key_prefix_entropy_chars)
            self._backend = backend
            self._metrics = metrics
            self._key_provider = key_provider
            self._bucket = (
                self.create_upload_bucket(config.upload_rate_limit_bytes_per_second)
                if config.upload_rate_limit_bytes_per_second
                else None
            )
            self._chunk_cache = ChunkCache(
                config.fetch_chunk_cache_size,
                disk,
                on_hit=metrics.cache_hit,
                on_miss=metrics.cache_miss,
            )
            self._manifests = LruCache(config.fetch_manifest_cache_entries, lambda _s: 1)
            if config.fetch_prefetch_chunks and self._chunk_cache.enabled:
                self._executor = ThreadPoolExecutor(
                    max_workers=2, thread_name_prefix=f"tierlog-{backend.name}-prefetch"
                )
            self._ignored = ignored
            self._configured = True
        _LOG.info(
            "%s configured on %s (prefix %r, chunk %d bytes, compression %s, encryption %s)",
            type(self).__name__,
            backend.location or backend.name,
            config.key_prefix,
            config.chunk_size,
            "on" if config.compression_enabled else "off",
            "on" if config.encryption_enabled else "off",
        )

    def close(self) -> None:
        """Stop prefetching and release the backend's clients. A second call does nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            executor, backend = self._executor, self._backend
            self._executor = None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
            # Prefetches cancelled before they started never settle their chunks: do it, so a
            # reader waiting for one fetches the chunk itself (or fails on the closed backend).
            with self._inflight_lock:
                pending, self._inflight = list(self._inflight.values()), {}
            for future in pending:
                if not future.done():
                    future.set_exception(IllegalStateError(f"{type(self).__name__} is closed"))
        if backend is not None:
            backend.close()

    # Accessors ----------------------------------------------------------------------------------
    @property
    def config(self) -> ObjectStoreConfig:
        """The common configuration (parsed)."""
        return self._config

    @property
    def layout(self) -> KeyLayout:
        """How new segments' keys are made."""
        return self._layout

    @property
    def backend(self) -> ObjectStoreBackend:
        """The plugin's backend (after ``configure``)."""
        return self._require_backend()

    @property
    def metrics(self) -> ObjectStoreMetrics:
        """Request and cache counters; ``metrics.expose()`` for Prometheus."""
        return self._metrics

    @property
    def chunk_cache(self) -> ChunkCache:
        return self._chunk_cache

    @property
    def ignored_configs(self) -> tuple[str, ...]:
        """Configuration keys that were not recognised (reported at configure time)."""
        return self._ignored

    def expose(self) -> bytes:
        """This RSM's metrics in Prometheus text format."""
        return self._metrics.expose()

    def segment_keys(self, metadata: RemoteLogSegmentMetadata) -> ObjectKeys:
        """Where the segment's objects are: under the layout its custom metadata records, or
        the configured one."""
        return self._layout_of(metadata).segment_keys(metadata)

    def conformance_stored_objects(self) -> list[str]:
        """For the conformance suite: every key under ``key.prefix``, listed by the backend
        (not through the RSM API)."""
        return [info.key for info in self._require_backend().list(self._config.key_prefix)]

    def _require_backend(self) -> ObjectStoreBackend:
        backend = self._backend
        if backend is None or not self._configured:
            raise IllegalStateError(f"{type(self).__name__} is not configured")
        if self._closed:
            raise IllegalStateError(f"{type(self).__name__} is closed")
        return backend

    def _layout_of(self, metadata: RemoteLogSegmentMetadata) -> KeyLayout:
        custom = metadata.custom_metadata
        if custom is None or not custom.value:
            return self._layout
        return decode_custom_metadata(custom.value)

    # Copy ---------------------------------------------------------------------------------------
    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        log_segment_data: LogSegmentData,
    ) -> CustomMetadata | None:
        """Upload the log object, the indexes object, then the manifest; returns the custom
        metadata naming the key layout (``layout.py``). On failure, deletes what was written
        (best effort) and raises."""
        backend = self._require_backend()
        metadata = remote_log_segment_metadata
        layout = self._layout
        keys = layout.segment_keys(metadata)
        what = f"segment {metadata.remote_log_segment_id.id} of {metadata.topic_id_partition}"
        self._manifests.discard(keys.manifest)
        # A retry of this segment id: remove the earlier attempt's manifest before anything
        # else, so that whatever happens next it never describes the new objects.
        backend.delete([keys.manifest])
        try:
            manifest = self._upload_data(backend, keys, log_segment_data, what)
            body = manifest.to_json()
            backend.upload(keys.manifest, io.BytesIO(body), len(body))
        except BaseException as exc:
            try:
                backend.delete(list(keys.all()))
            except Exception as cleanup:
                _LOG.warning("could not clean up after the failed copy of %s: %s", what, cleanup)
            if isinstance(exc, OSError):
                raise RemoteStorageException(
                    f"copy of {what} failed reading the local files: {exc}"
                ) from exc
            raise
        _LOG.info(
            "copied %s (%d bytes%s%s) to %s",
            what,
            manifest.size,
            ", compressed" if manifest.compression else "",
            ", encrypted" if manifest.encryption else "",
            backend.location or backend.name,
        )
        return layout.custom_metadata()

    def _compression_for(self, source: BinaryIO, size: int, what: str) -> Compression | None:
        config = self._config
        if not config.compression_enabled:
            return None
        if config.compression_heuristic_enabled and already_compressed(source, size):
            _LOG.debug("%s is already compressed by its producers: not compressing it", what)
            return None
        return Compression("zstd", config.compression_level)

    def _upload_data(
        self, backend: ObjectStoreBackend, keys: ObjectKeys, data: LogSegmentData, what: str
    ) -> Manifest:
        config = self._config
        with open(data.log_segment, "rb") as source:
            size = os.fstat(source.fileno()).st_size
            codec, encryption = SegmentCodec.for_copy(
                size=size,
                chunk_size=config.chunk_size,
                compression=self._compression_for(source, size, what),
                key_provider=self._key_provider if config.encryption_enabled else None,
            )
            chunk_sizes: tuple[int, ...] | None = None
            if codec.identity:
                backend.upload(keys.log, rate_limited(source, self._bucket), size)
            else:
                encoder = _ChunkEncoder(source, size, codec, f"segment file {data.log_segment}")
                stream = io.BufferedReader(encoder, buffer_size=_READ_BUFFER)
                backend.upload(keys.log, rate_limited(stream, self._bucket), None)
                if not encoder.complete:
                    raise RemoteStorageException(
                        f"the {backend.name} backend stopped reading {keys.log} before its end"
                    )
                if codec.compression is not None:
                    chunk_sizes = tuple(encoder.sizes)
        indexes = self._upload_indexes(backend, keys, data, codec)
        return Manifest(
            copy_id=secrets.token_hex(8),
            size=size,
            chunk_size=config.chunk_size,
            chunk_sizes=chunk_sizes,
            indexes=indexes,
            compression=codec.compression,
            encryption=encryption,
            chunk_overhead=0 if chunk_sizes is not None else codec.chunk_overhead,
        )

    def _upload_indexes(
        self,
        backend: ObjectStoreBackend,
        keys: ObjectKeys,
        data: LogSegmentData,
        codec: SegmentCodec,
    ) -> dict[IndexType, IndexEntry]:
        """Every index in one object, in ``INDEX_ORDER``; streamed from the files when stored
        as is, each transformed whole otherwise (indexes are bounded by ``segment.index.bytes``
        and the like, not by the segment's size). The optional ones (transaction index,
        compaction summary) are stored only when given: the manifest lists what is there, and a
        retry's new manifest forgets what an earlier attempt had."""
        sources: dict[IndexType, Path | bytes | None] = {
            IndexType.OFFSET: data.offset_index,
            IndexType.TIMESTAMP: data.time_index,
            IndexType.TRANSACTION: data.transaction_index,
            IndexType.PRODUCER_SNAPSHOT: data.producer_snapshot_index,
            IndexType.LEADER_EPOCH: bytes(data.leader_epoch_index),
            IndexType.COMPACTION_SUMMARY: data.compaction_summary,
        }
        entries: dict[IndexType, IndexEntry] = {}
        parts: list[tuple[BinaryIO | bytes, int]] = []
        opened: list[BinaryIO] = []
        position = 0
        try:
            for index_type in INDEX_ORDER:
                src = sources[index_type]
                if src is None:
                    continue
                if codec.identity:
                    if isinstance(src, bytes):
                        part: BinaryIO | bytes = src
                        size = stored = len(src)
                    else:
                        handle = open(src, "rb")  # noqa: SIM115 - closed below
                        opened.append(handle)
                        part = handle
                        size = stored = os.fstat(handle.fileno()).st_size
                else:
                    raw = src if isinstance(src, bytes) else src.read_bytes()
                    part = codec.encode_index(index_type, raw)
                    size, stored = len(raw), len(part)
                parts.append((part, stored))
                entries[index_type] = IndexEntry(position, stored, size)
                position += stored
            stream = io.BufferedReader(_ConcatReader(parts), buffer_size=_READ_BUFFER)
            backend.upload(keys.indexes, rate_limited(stream, self._bucket), position)
        finally:
            for f in opened:
                f.close()
        return entries

    # Fetch --------------------------------------------------------------------------------------
    def _segment(self, metadata: RemoteLogSegmentMetadata) -> _Segment:
        """The segment's manifest and codec, from the cache or with one GET."""
        backend = self._require_backend()
        keys = self._layout_of(metadata).segment_keys(metadata)
        cached = self._manifests.get(keys.manifest)
        if cached is not None:
            self._metrics.cache_hit("manifest")
            return cached
        self._metrics.cache_miss("manifest")
        what = f"segment {metadata.remote_log_segment_id.id} of {metadata.topic_id_partition}"
        try:
            with backend.get(keys.manifest) as body:
                raw = body.read()
        except RemoteResourceNotFoundException:
            raise RemoteResourceNotFoundException(
                f"{what} not found: no manifest at {keys.manifest} (never copied, deleted, or "
                "its copy did not finish)"
            ) from None
        manifest = Manifest.from_json(raw)
        codec = SegmentCodec.for_manifest(manifest, self._key_provider, what)
        segment = _Segment(keys, manifest, codec, f"{keys.log}#{manifest.copy_id}", what)
        self._manifests.put(keys.manifest, segment)
        return segment

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        """A stream of bytes ``start..end`` (inclusive) of the original segment, clamped to the
        size in its manifest (``check_fetch_range``, before and after the manifest is read)."""
        check_fetch_range(start_position, end_position)
        backend = self._require_backend()
        segment = self._segment(remote_log_segment_metadata)
        manifest = segment.manifest
        length = check_fetch_range(start_position, end_position, manifest.size)
        if not length:
            return io.BytesIO(b"")
        last = start_position + length - 1
        cache = self._chunk_cache
        admit_memory = length <= cache.memory.capacity // 4
        admit_disk = cache.disk is not None and length <= cache.disk.capacity // 4
        if not manifest.transformed and not (admit_memory or admit_disk):
            # Stored as is and not worth caching: exactly the bytes asked for, one GET.
            return backend.get(segment.keys.log, start_position, last)
        first_chunk, last_chunk = manifest.chunk_of(start_position), manifest.chunk_of(last)
        self._maybe_prefetch(segment, first_chunk, last_chunk)
        chunks = self._chunks(segment, first_chunk, last_chunk, admit_memory, admit_disk)
        skip = start_position - first_chunk * manifest.chunk_size  # the segment's, not config's
        stream = _ChunkStream(chunks, skip, length)
        stream.prime()
        return io.BufferedReader(stream, buffer_size=_READ_BUFFER)

    def _cached_or_inflight(self, segment: _Segment, index: int) -> bytes | None:
        key = segment.chunk_key(index)
        found = self._chunk_cache.get(key)
        if found is not None:
            return found
        with self._inflight_lock:
            future = self._inflight.get(key)
        if future is None:
            return None
        try:
            return future.result()
        except Exception:  # the prefetch failed: fetch it ourselves
            return None

    def _chunks(
        self, segment: _Segment, first: int, last: int, admit_memory: bool, admit_disk: bool
    ) -> Generator[bytes, None, None]:
        """Decoded chunks ``first..last``: from the cache (or a prefetch under way), else the
        run of consecutive missing chunks in one ranged GET, decoded as they are read."""
        index = first
        while index <= last:
            found = self._cached_or_inflight(segment, index)
            if found is not None:
                yield found
                index += 1
                continue
            end = index
            while end < last and not self._is_available(segment, end + 1):
                end += 1
            yield from self._fetch_run(segment, index, end, admit_memory, admit_disk)
            index = end + 1

    def _is_available(self, segment: _Segment, index: int) -> bool:
        key = segment.chunk_key(index)
        if self._chunk_cache.contains(key):
            return True
        with self._inflight_lock:
            return key in self._inflight

    def _fetch_run(
        self, segment: _Segment, first: int, last: int, admit_memory: bool, admit_disk: bool
    ) -> Iterator[bytes]:
        """One ranged GET of chunks ``first..last``, decoded one at a time."""
        manifest = segment.manifest
        start, end = manifest.stored_range(first, last)
        with self._require_backend().get(segment.keys.log, start, end) as body:
            for index in range(first, last + 1):
                stored = _read_exact(
                    body, manifest.stored_chunk_size(index), f"chunk {index} of {segment.what}"
                )
                chunk = (
                    stored
                    if segment.codec.identity
                    else segment.codec.decode_chunk(index, stored, segment.what)
                )
                if admit_memory or admit_disk:
                    self._chunk_cache.put(
                        segment.chunk_key(index), chunk, memory=admit_memory, disk=admit_disk
                    )
                yield chunk

    # Prefetch -----------------------------------------------------------------------------------
    def _maybe_prefetch(self, segment: _Segment, first: int, last: int) -> None:
        """After a read that continues the previous one of the same segment, fetch the next
        ``fetch.prefetch.chunks`` chunks into the cache in the background (one GET)."""
        executor = self._executor
        previous = self._last_read.get(segment.object_id)
        self._last_read.put(segment.object_id, last)
        if executor is None or previous is None or first not in (previous, previous + 1):
            return
        stop = min(last + 1 + self._config.fetch_prefetch_chunks, segment.manifest.chunk_count)
        run: list[int] = []
        with self._inflight_lock:
            for index in range(last + 1, stop):
                key = segment.chunk_key(index)
                if key in self._inflight or self._chunk_cache.contains(key):
                    if run:
                        break
                    continue
                run.append(index)
            futures = {i: Future[bytes]() for i in run}
            for i, future in futures.items():
                self._inflight[segment.chunk_key(i)] = future
        if not run:
            return
        try:
            executor.submit(self._prefetch, segment, run[0], run[-1], futures)
        except RuntimeError:  # shutting down
            self._settle(segment, futures, RuntimeError("the RSM is closing"))

    def _prefetch(
        self, segment: _Segment, first: int, last: int, futures: dict[int, Future[bytes]]
    ) -> None:
        try:
            for index, chunk in zip(
                range(first, last + 1),
                self._fetch_run(segment, first, last, True, True),
                strict=True,
            ):
                future = futures.pop(index)
                with self._inflight_lock:
                    self._inflight.pop(segment.chunk_key(index), None)
                future.set_result(chunk)
        except Exception as exc:
            _LOG.debug("prefetch of chunks %d-%d of %s failed: %s", first, last, segment.what, exc)
            self._settle(segment, futures, exc)
        finally:
            self._settle(segment, futures, RuntimeError("prefetch stopped"))

    def _settle(
        self, segment: _Segment, futures: dict[int, Future[bytes]], exc: BaseException
    ) -> None:
        with self._inflight_lock:
            for index in futures:
                self._inflight.pop(segment.chunk_key(index), None)
        for future in futures.values():
            if not future.done():
                future.set_exception(exc)
        futures.clear()

    # Indexes ------------------------------------------------------------------------------------
    def fetch_index(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata, index_type: IndexType
    ) -> BinaryIO:
        """One index: a ranged GET inside the ``.indexes`` object (decoded if transformed).

        An index the manifest does not list raises ``RemoteResourceNotFoundException``: the
        transaction index of a segment without one, and the compaction summary of a segment
        copied without one or before this tierlog knew it (a version-1 manifest)."""
        if not isinstance(index_type, IndexType):
            raise InvalidArgumentError(f"unknown index type {index_type!r}")
        backend = self._require_backend()
        segment = self._segment(remote_log_segment_metadata)
        entry = segment.manifest.indexes.get(index_type)
        if entry is None:
            raise RemoteResourceNotFoundException(f"{segment.what} has no {index_type} index")
        if entry.stored_size == 0:
            return io.BytesIO(b"")
        end = entry.position + entry.stored_size - 1
        if segment.codec.identity:
            return backend.get(segment.keys.indexes, entry.position, end)
        with backend.get(segment.keys.indexes, entry.position, end) as body:
            stored = _read_exact(body, entry.stored_size, f"{index_type} index of {segment.what}")
        return io.BytesIO(segment.codec.decode_index(index_type, stored, entry.size, segment.what))

    # Delete -------------------------------------------------------------------------------------
    def delete_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata
    ) -> None:
        """Delete the manifest, the log and the indexes objects; missing ones are fine."""
        backend = self._require_backend()
        keys = self._layout_of(remote_log_segment_metadata).segment_keys(
            remote_log_segment_metadata
        )
        self._manifests.discard(keys.manifest)
        backend.delete(list(keys.all()))
        _LOG.info(
            "deleted segment %s of %s",
            remote_log_segment_metadata.remote_log_segment_id.id,
            remote_log_segment_metadata.topic_id_partition,
        )

    def delete_partition(self, topic_id_partition: TopicIdPartition) -> None:
        """Delete every object left under the partition's prefix (abandoned copies); the RLM
        calls it once all the partition's segments are deleted. Objects written under an
        earlier ``key.prefix`` are not listed: their segments' own deletes remove them."""
        backend = self._require_backend()
        prefix = self._layout.partition_prefix(topic_id_partition)
        batch: list[str] = []
        deleted = 0
        for info in backend.list(prefix):
            batch.append(info.key)
            if len(batch) >= _LIST_DELETE_BATCH:
                backend.delete(batch)
                deleted += len(batch)
                batch = []
        if batch:
            backend.delete(batch)
            deleted += len(batch)
        if deleted:
            _LOG.info("deleted %d leftover objects of partition %s", deleted, topic_id_partition)
