"""What every object-store RSM shares, written once: tierlog's S3, GCS and Azure plugins are
thin adapters over it.

The split (issue 5): a plugin implements ``ObjectStoreBackend`` (``backend.py``: upload a
stream, ranged get, delete, list, head, check access) over its cloud SDK, and a subclass of
``ObjectStoreRemoteStorageManager`` (``rsm.py``) that names its configuration keys and builds
that backend. Everything else is here, so it behaves the same on every cloud and is tested once:

- ``config``: the common ``rsm.config.`` keys, defaults and validation (``CONFIG_KEYS`` is the
  documented table);
- ``layout``: ``<prefix>[<entropy>/]<topic>-<topicId>/<partition>/<offset>-<id>.<suffix>``
  keys, three objects per segment (``log``, ``indexes``, ``rsm-manifest``), and the compact
  custom metadata that remembers the key layout of each segment;
- ``manifest``: the per-segment JSON document, written last, that maps any byte range to
  object ranges with no listing;
- ``transforms``: per-chunk zstd compression and AES-256-GCM envelope encryption with
  pluggable key providers and key rotation;
- ``cache``: decoded chunks in memory and on disk (surviving restarts), manifests in memory;
- ``parts``: the parallel part uploader of S3 multipart uploads and Azure staged blocks, at
  most ``upload.parallelism`` part buffers alive at once (exported by ``backend``);
- ``ratelimit``: the upload rate limit;
- ``metrics``: requests, bytes, errors, throttles and cache hits per backend and operation,
  for Prometheus;
- ``memory``: an in-memory backend with fault injection and ``MemoryObjectStoreRSM`` over it,
  for tests.

Why this shape: the leading Java RSM's users complain of one GET per chunk, part buffers on
the heap that grow with parallelism, a disk cache wiped at restart, and hot S3 prefixes; each
of those is a property of the shared layer, so fixing it here fixes it for every cloud.
"""

from tierlog.storage.objectstore.backend import (
    ObjectInfo,
    ObjectStoreBackend,
    ObjectStoreThrottledError,
    Operation,
    Outcome,
    RequestObserver,
    UploadSettings,
    null_observer,
)
from tierlog.storage.objectstore.cache import ChunkCache, DiskChunkCache, LruCache
from tierlog.storage.objectstore.config import (
    CONFIG_KEYS,
    ConfigKey,
    ObjectStoreConfig,
    markdown_table,
)
from tierlog.storage.objectstore.layout import (
    KeyLayout,
    ObjectKeys,
    decode_custom_metadata,
    encode_custom_metadata,
)
from tierlog.storage.objectstore.manifest import Manifest, ManifestError
from tierlog.storage.objectstore.memory import Fault, InMemoryBackend, MemoryObjectStoreRSM
from tierlog.storage.objectstore.metrics import MetricsSnapshot, ObjectStoreMetrics
from tierlog.storage.objectstore.ratelimit import TokenBucket
from tierlog.storage.objectstore.rsm import ObjectStoreRemoteStorageManager
from tierlog.storage.objectstore.transforms import (
    KeyProvider,
    LocalKeyFileProvider,
    SegmentCodec,
)

__all__ = [
    "CONFIG_KEYS",
    "ChunkCache",
    "ConfigKey",
    "DiskChunkCache",
    "Fault",
    "InMemoryBackend",
    "KeyLayout",
    "KeyProvider",
    "LocalKeyFileProvider",
    "LruCache",
    "Manifest",
    "ManifestError",
    "MemoryObjectStoreRSM",
    "MetricsSnapshot",
    "ObjectInfo",
    "ObjectKeys",
    "ObjectStoreBackend",
    "ObjectStoreConfig",
    "ObjectStoreMetrics",
    "ObjectStoreRemoteStorageManager",
    "ObjectStoreThrottledError",
    "Operation",
    "Outcome",
    "RequestObserver",
    "SegmentCodec",
    "TokenBucket",
    "UploadSettings",
    "decode_custom_metadata",
    "encode_custom_metadata",
    "markdown_table",
    "null_observer",
]
