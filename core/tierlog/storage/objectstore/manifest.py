"""The segment manifest: what a fetch needs to find any byte of a segment without listing.

Written last by a copy (its presence means the segment is complete), read once per segment
and cached. JSON, versioned, small (a few hundred bytes plus one number per chunk when chunks
are compressed)::

    {"version": 1,                             # 2 when a compaction summary is listed
     "copy_id": "9f2c4e0a1b3d5f70",           # random per copy: cache keys, never stale
     "segment": {"size": 1073741824,           # bytes of the original segment
                 "chunk_size": 4194304,        # original bytes per chunk (last may be shorter)
                 "chunk_sizes": [123, 456, ...] | null},
                                               # stored size of each chunk when they vary
                                               # (compression); null: original size + the
                                               # fixed per-chunk overhead of the transforms
     "indexes": {"offset": [position, stored size, original size], "timestamp": [...],
                 "producer_snapshot": [...], "leader_epoch": [...],
                 "transaction": [...],         # absent when the segment has none
                 "compaction_summary": [...]}, # absent unless the cleaner wrote one
     "compression": null | {"codec": "zstd", "level": 3},
     "encryption": null | {"algorithm": "AES-256-GCM", "key_id": "k2",
                           "wrapped_key": "<base64>", "key_wrap": "AES-KW",
                           "nonce_prefix": "<base64 of 4 bytes>",
                           "nonce_scheme": "prefix4-index8"}}

Every index is stored (and transformed) as a unit inside the ``.indexes`` object at
``position``. Parsing is strict: a missing or mistyped field, a negative size, sizes that do not
add up, or an unknown version raise ``ManifestError`` (a ``RemoteStorageException``: a
corrupt or foreign manifest is not worth retrying).

Versions: 1 lists Kafka's five indexes. 2 adds one optional index of tierlog's, the log
cleaner's ``compaction_summary`` (``IndexType.COMPACTION_SUMMARY``), stored last in the
``.indexes`` object. A manifest is written as version 2 only when it lists a summary, so every
segment copied from the local log stays readable by a tierlog that knows only version 1, and one
that does not know the summary says "upgrade tierlog" instead of failing on an unknown index.
This tierlog reads both; a version-1 manifest that lists a summary is refused.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Final

from tierlog.spi import IndexType, RemoteStorageException

__all__ = [
    "MANIFEST_VERSION",
    "Compression",
    "Encryption",
    "IndexEntry",
    "Manifest",
    "ManifestError",
]

MANIFEST_VERSION: Final = 2
"""The newest version this tierlog reads and writes (see the module docstring)."""
_SUMMARY_VERSION: Final = 2
"""The first version that may list a compaction summary."""
_READABLE_VERSIONS: Final = frozenset({1, 2})
_MAX_MANIFEST_BYTES: Final = 64 << 20

INDEX_NAMES: Final[Mapping[IndexType, str]] = {
    IndexType.OFFSET: "offset",
    IndexType.TIMESTAMP: "timestamp",
    IndexType.TRANSACTION: "transaction",
    IndexType.PRODUCER_SNAPSHOT: "producer_snapshot",
    IndexType.LEADER_EPOCH: "leader_epoch",
    IndexType.COMPACTION_SUMMARY: "compaction_summary",
}
_INDEX_BY_NAME: Final = {name: t for t, name in INDEX_NAMES.items()}
INDEX_ORDER: Final = (
    IndexType.OFFSET,
    IndexType.TIMESTAMP,
    IndexType.TRANSACTION,
    IndexType.PRODUCER_SNAPSHOT,
    IndexType.LEADER_EPOCH,
    IndexType.COMPACTION_SUMMARY,
)
"""The order of the indexes inside the ``.indexes`` object. New index types go at the end: an
index's position here is its ordinal in the encryption nonce and associated data
(``transforms``), so an existing one must never move."""
OPTIONAL_INDEXES: Final = frozenset({IndexType.TRANSACTION, IndexType.COMPACTION_SUMMARY})
"""Indexes a segment may lack; a manifest must list every other one."""


class ManifestError(RemoteStorageException):
    """A manifest that cannot be used: malformed, inconsistent, or of an unknown version."""


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """Where one index is inside the ``.indexes`` object, and its size before transforms."""

    position: int
    stored_size: int
    size: int


@dataclass(frozen=True, slots=True)
class Compression:
    codec: str = "zstd"
    level: int = 3


@dataclass(frozen=True, slots=True)
class Encryption:
    key_id: str
    wrapped_key: bytes
    nonce_prefix: bytes
    algorithm: str = "AES-256-GCM"
    key_wrap: str = "AES-KW"
    nonce_scheme: str = "prefix4-index8"


@dataclass(frozen=True, slots=True)
class Manifest:
    """A parsed manifest, with the chunk arithmetic a fetch needs."""

    copy_id: str
    size: int
    chunk_size: int
    chunk_sizes: tuple[int, ...] | None
    indexes: Mapping[IndexType, IndexEntry]
    compression: Compression | None = None
    encryption: Encryption | None = None
    chunk_overhead: int = 0
    """Stored bytes added to every chunk when ``chunk_sizes`` is ``None`` (the 16-byte GCM tag
    when only encryption is on). Not serialised: it follows from the transforms."""
    _offsets: tuple[int, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.size < 0 or self.chunk_size <= 0:
            raise ManifestError(f"bad segment size {self.size} or chunk size {self.chunk_size}")
        count = self.chunk_count
        if self.chunk_sizes is not None:
            if len(self.chunk_sizes) != count:
                raise ManifestError(
                    f"manifest lists {len(self.chunk_sizes)} chunk sizes for {count} chunks "
                    f"({self.size} bytes in chunks of {self.chunk_size})"
                )
            if any(s <= 0 for s in self.chunk_sizes):
                raise ManifestError("manifest lists a chunk of zero or negative size")
            sizes: Sequence[int] = self.chunk_sizes
        else:
            sizes = [self.original_chunk_size(i) + self.chunk_overhead for i in range(count)]
        object.__setattr__(self, "_offsets", tuple(accumulate(sizes, initial=0)))

    # Chunk arithmetic ---------------------------------------------------------------------------
    @property
    def transformed(self) -> bool:
        """Whether chunks are stored other than as the original bytes."""
        return self.compression is not None or self.encryption is not None

    @property
    def chunk_count(self) -> int:
        return -(-self.size // self.chunk_size)

    @property
    def stored_log_size(self) -> int:
        """The size of the ``.log`` object."""
        return self._offsets[-1]

    def original_chunk_size(self, index: int) -> int:
        return min(self.chunk_size, self.size - index * self.chunk_size)

    def chunk_of(self, position: int) -> int:
        """The chunk holding byte ``position`` of the original segment."""
        return position // self.chunk_size

    def stored_range(self, first: int, last: int) -> tuple[int, int]:
        """Object byte range ``[start, end]`` (inclusive) of chunks ``first..last``."""
        return self._offsets[first], self._offsets[last + 1] - 1

    def stored_chunk_size(self, index: int) -> int:
        return self._offsets[index + 1] - self._offsets[index]

    # Serialisation ------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        """The version ``to_json`` writes: the oldest that can describe this manifest."""
        return _SUMMARY_VERSION if IndexType.COMPACTION_SUMMARY in self.indexes else 1

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "version": self.version,
            "copy_id": self.copy_id,
            "segment": {
                "size": self.size,
                "chunk_size": self.chunk_size,
                "chunk_sizes": None if self.chunk_sizes is None else list(self.chunk_sizes),
            },
            "indexes": {
                INDEX_NAMES[t]: [e.position, e.stored_size, e.size]
                for t, e in sorted(self.indexes.items(), key=lambda i: INDEX_ORDER.index(i[0]))
            },
            "compression": None
            if self.compression is None
            else {"codec": self.compression.codec, "level": self.compression.level},
            "encryption": None
            if self.encryption is None
            else {
                "algorithm": self.encryption.algorithm,
                "key_id": self.encryption.key_id,
                "wrapped_key": base64.b64encode(self.encryption.wrapped_key).decode("ascii"),
                "key_wrap": self.encryption.key_wrap,
                "nonce_prefix": base64.b64encode(self.encryption.nonce_prefix).decode("ascii"),
                "nonce_scheme": self.encryption.nonce_scheme,
            },
        }
        return json.dumps(doc, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes, *, chunk_overhead: int | None = None) -> Manifest:
        """Parse strictly. ``chunk_overhead`` defaults to what the transforms imply (16 bytes
        with encryption and no per-chunk sizes)."""
        if len(data) > _MAX_MANIFEST_BYTES:
            raise ManifestError(f"manifest of {len(data)} bytes is implausibly large")
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ManifestError(f"manifest is not JSON: {exc}") from None
        obj = _obj(doc, "manifest")
        version = obj.get("version")
        if not _is_int(version) or version not in _READABLE_VERSIONS:
            raise ManifestError(
                f"manifest version {version!r} is not understood (this tierlog reads versions "
                f"{', '.join(map(str, sorted(_READABLE_VERSIONS)))}); upgrade tierlog"
            )
        _only(
            obj,
            {"version", "copy_id", "segment", "indexes", "compression", "encryption"},
            "manifest",
        )
        copy_id = _str(obj, "copy_id", "manifest")
        segment = _obj(obj.get("segment"), "segment")
        _only(segment, {"size", "chunk_size", "chunk_sizes"}, "segment")
        size = _int(segment, "size", "segment")
        chunk_size = _int(segment, "chunk_size", "segment", minimum=1)
        raw_sizes = segment.get("chunk_sizes")
        chunk_sizes: tuple[int, ...] | None
        if raw_sizes is None:
            chunk_sizes = None
        elif isinstance(raw_sizes, list) and all(_is_int(v) for v in raw_sizes):
            chunk_sizes = tuple(raw_sizes)
        else:
            raise ManifestError("segment.chunk_sizes must be null or a list of integers")

        indexes: dict[IndexType, IndexEntry] = {}
        for name, value in _obj(obj.get("indexes"), "indexes").items():
            index_type = _INDEX_BY_NAME.get(name)
            if index_type is None:
                raise ManifestError(f"unknown index {name!r} in manifest")
            if not (
                isinstance(value, list)
                and len(value) == 3
                and all(_is_int(v) and v >= 0 for v in value)
            ):
                raise ManifestError(
                    f"indexes.{name} must be [position, stored size, size], got {value!r}"
                )
            indexes[index_type] = IndexEntry(value[0], value[1], value[2])
        if IndexType.COMPACTION_SUMMARY in indexes and version < _SUMMARY_VERSION:
            raise ManifestError(
                f"a version-{version} manifest lists a compaction_summary index, which version "
                f"{_SUMMARY_VERSION} introduced (the manifest was altered or mislabelled)"
            )
        missing = [
            INDEX_NAMES[t] for t in INDEX_ORDER if t not in OPTIONAL_INDEXES and t not in indexes
        ]
        if missing:
            raise ManifestError(f"manifest lacks the indexes {', '.join(missing)}")

        compression = None
        raw_compression = obj.get("compression")
        if raw_compression is not None:
            c = _obj(raw_compression, "compression")
            _only(c, {"codec", "level"}, "compression")
            codec = _str(c, "codec", "compression")
            if codec != "zstd":
                raise ManifestError(f"compression codec {codec!r} is not supported")
            compression = Compression(codec, _int(c, "level", "compression", minimum=-(1 << 20)))

        encryption = None
        raw_encryption = obj.get("encryption")
        if raw_encryption is not None:
            e = _obj(raw_encryption, "encryption")
            _only(
                e,
                {"algorithm", "key_id", "wrapped_key", "key_wrap", "nonce_prefix", "nonce_scheme"},
                "encryption",
            )
            encryption = Encryption(
                key_id=_str(e, "key_id", "encryption"),
                wrapped_key=_b64(e, "wrapped_key"),
                nonce_prefix=_b64(e, "nonce_prefix"),
                algorithm=_str(e, "algorithm", "encryption"),
                key_wrap=_str(e, "key_wrap", "encryption"),
                nonce_scheme=_str(e, "nonce_scheme", "encryption"),
            )
            if (
                (encryption.algorithm, encryption.key_wrap, encryption.nonce_scheme)
                != ("AES-256-GCM", "AES-KW", "prefix4-index8")
                or len(encryption.nonce_prefix) != 4
                or len(encryption.wrapped_key) != 40
            ):
                raise ManifestError(
                    f"encryption {encryption.algorithm}/{encryption.key_wrap}/"
                    f"{encryption.nonce_scheme} with a {len(encryption.nonce_prefix)}-byte "
                    f"nonce prefix and a {len(encryption.wrapped_key)}-byte wrapped key is not "
                    "supported"
                )
        if chunk_overhead is None:
            chunk_overhead = 16 if encryption is not None and chunk_sizes is None else 0
        if compression is not None and chunk_sizes is None and size > 0:
            raise ManifestError("a compressed segment's manifest must list its chunk sizes")
        return cls(
            copy_id=copy_id,
            size=size,
            chunk_size=chunk_size,
            chunk_sizes=chunk_sizes,
            indexes=indexes,
            compression=compression,
            encryption=encryption,
            chunk_overhead=chunk_overhead,
        )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _obj(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ManifestError(f"{where} must be a JSON object, got {type(value).__name__}")
    return value


def _only(obj: Mapping[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(obj) - allowed)
    if extra:
        raise ManifestError(f"unknown fields in {where}: {', '.join(extra)}")


def _int(obj: Mapping[str, Any], key: str, where: str, *, minimum: int = 0) -> int:
    value = obj.get(key)
    if not _is_int(value):
        raise ManifestError(f"{where}.{key} must be an integer, got {value!r}")
    assert isinstance(value, int)
    if value < minimum:
        raise ManifestError(f"{where}.{key} must be at least {minimum}, got {value}")
    return value


def _str(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise ManifestError(f"{where}.{key} must be a non-empty string, got {value!r}")
    return value


def _b64(obj: Mapping[str, Any], key: str) -> bytes:
    value = _str(obj, key, "encryption")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ManifestError(f"encryption.{key} is not base64") from None
