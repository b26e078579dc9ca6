"""The ``rsm.config.`` keys every object-store RSM shares, with their defaults and validation.

A plugin (``s3``, ``gcs``, ``azure``) adds its own keys (bucket, region, endpoint...) through
``ObjectStoreRemoteStorageManager.backend_config_keys``; everything here is common because it
is done once, in the core: object layout, chunking, uploads, caches and transforms.

Values are strings, as in a Java properties file; sizes are plain byte counts (Kafka's habit:
``segment.bytes=1073741824``). Every problem raises ``ConfigError`` naming the key (with the
``rsm.config.`` prefix the user typed) and what is accepted, at ``configure`` time, so a typo
never surfaces as a failed copy hours later.

``CONFIG_KEYS`` documents each key (name, type, default, meaning) as ``ConfigKey`` rows, the one
key-table type of ``tierlog.properties`` (re-exported here because plugins depend on
``tierlog.storage``, not on core utility modules): the plugins' READMEs and ``tierlog`` tooling
render their tables from it, and each plugin documents its own keys with the same type.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from tierlog.properties import ConfigKey, parse_bool
from tierlog.spi import ConfigError
from tierlog.storage.objectstore.backend import UploadSettings

__all__ = [
    "CONFIG_KEYS",
    "KEY_PREFIX_MAX_BYTES",
    "MiB",
    "RLM_PROVIDED_KEYS",
    "ConfigKey",
    "ObjectStoreConfig",
    "full_key",
    "get_bool",
    "get_int",
    "get_str",
    "markdown_table",
]

_LOG = logging.getLogger(__name__)

MiB: Final = 1 << 20
GiB: Final = 1 << 30

KEY_PREFIX_MAX_BYTES: Final = 125
"""The longest ``key.prefix`` (UTF-8 bytes): the prefix travels in the segment's custom
metadata (``layout.encode_custom_metadata``: 3 bytes + the prefix), which must stay within
Kafka's default ``remote.log.metadata.custom.metadata.max.bytes`` of 128."""

MAX_ENTROPY_CHARS: Final = 64
"""``key.prefix.entropy.chars`` takes at most the 64 hex characters of a SHA-256."""

S3_MIN_PART_SIZE: Final = 5 * MiB
"""S3 refuses multipart parts below 5 MiB (all but the last); one rule for every backend keeps a
configuration portable between clouds."""

MIN_CHUNK_SIZE: Final = 1024
"""Below it the manifest (one entry per chunk) and the per-request overhead dominate."""
MAX_CHUNK_SIZE: Final = 256 * MiB

RLM_PROVIDED_KEYS: Final = frozenset({"node.id", "broker.id", "log.dir"})
"""Keys the RemoteLogManager adds to every RSM's configuration (as Kafka's ``configureRSM``);
known, so never reported as unknown, and unused by object stores."""


KEY_PREFIX: Final = "key.prefix"
KEY_PREFIX_ENTROPY_CHARS: Final = "key.prefix.entropy.chars"
CHUNK_SIZE: Final = "chunk.size"
UPLOAD_PART_SIZE: Final = "upload.part.size"
UPLOAD_MULTIPART_THRESHOLD: Final = "upload.multipart.threshold"
UPLOAD_PARALLELISM: Final = "upload.parallelism"
UPLOAD_RATE_LIMIT: Final = "upload.rate.limit.bytes.per.second"
FETCH_CHUNK_CACHE_SIZE: Final = "fetch.chunk.cache.size"
FETCH_DISK_CACHE_DIR: Final = "fetch.disk.cache.dir"
FETCH_DISK_CACHE_SIZE: Final = "fetch.disk.cache.size"
FETCH_PREFETCH_CHUNKS: Final = "fetch.prefetch.chunks"
FETCH_MANIFEST_CACHE_ENTRIES: Final = "fetch.manifest.cache.entries"
COMPRESSION_ENABLED: Final = "compression.enabled"
COMPRESSION_LEVEL: Final = "compression.level"
COMPRESSION_HEURISTIC_ENABLED: Final = "compression.heuristic.enabled"
ENCRYPTION_ENABLED: Final = "encryption.enabled"
ENCRYPTION_KEY_PROVIDER: Final = "encryption.key.provider"
ENCRYPTION_KEY_FILE: Final = "encryption.key.file"

CONFIG_KEYS: Final[tuple[ConfigKey, ...]] = (
    ConfigKey(
        KEY_PREFIX,
        "string",
        default="",
        doc="Prepended to every object key, as typed (end it with '/' for a folder, e.g. "
        f"'tiered/'). At most {KEY_PREFIX_MAX_BYTES} UTF-8 bytes, no control characters.",
    ),
    ConfigKey(
        KEY_PREFIX_ENTROPY_CHARS,
        "int",
        default="0",
        doc="0 = off. N (1-64) hex characters of a SHA-256 of '<topic>-<topicId>/<partition>' "
        "inserted after the prefix ('<prefix><hash>/<topic>-...'), spreading partitions "
        "across S3 key prefixes so that request rates per prefix stay under S3's limits.",
    ),
    ConfigKey(
        CHUNK_SIZE,
        "int",
        default=str(4 * MiB),
        doc="Bytes of the original segment per chunk: the unit of ranged reads, caching, "
        f"compression and encryption ({MIN_CHUNK_SIZE} to {MAX_CHUNK_SIZE}).",
    ),
    ConfigKey(
        UPLOAD_PART_SIZE,
        "long",
        default=str(8 * MiB),
        doc="Bytes per multipart part (S3), resumable chunk (GCS) or staged block (Azure); at "
        "least 5 MiB (S3's minimum). Upload memory is bounded by part size x parallelism.",
    ),
    ConfigKey(
        UPLOAD_MULTIPART_THRESHOLD,
        "long",
        default=str(8 * MiB),
        doc="Objects of a known size below this are uploaded in one request.",
    ),
    ConfigKey(
        UPLOAD_PARALLELISM, "int", default="4", doc="Parts of one upload in flight at once (1-64)."
    ),
    ConfigKey(
        UPLOAD_RATE_LIMIT,
        "long",
        default="0",
        doc="0 = unlimited. Upload bandwidth per RSM instance in bytes/s (a token bucket on the "
        "uploaded stream; shared by concurrent copies).",
    ),
    ConfigKey(
        FETCH_CHUNK_CACHE_SIZE,
        "long",
        default=str(64 * MiB),
        doc="Bytes of decoded chunks kept in memory (LRU); 0 disables the memory cache and "
        "prefetching. Reads larger than a quarter of it (scans) bypass it.",
    ),
    ConfigKey(
        FETCH_DISK_CACHE_DIR,
        "string",
        default="(unset)",
        doc="A directory for a second, on-disk chunk cache that survives restarts; unset = off. "
        "Entries are CRC-checked; holds decrypted data, so protect the directory.",
    ),
    ConfigKey(
        FETCH_DISK_CACHE_SIZE, "long", default=str(1 * GiB), doc="Bytes the disk cache may use."
    ),
    ConfigKey(
        FETCH_PREFETCH_CHUNKS,
        "int",
        default="1",
        doc="On sequential reads of a segment, chunks fetched ahead in the background "
        "(0-64; 0 = off).",
    ),
    ConfigKey(
        FETCH_MANIFEST_CACHE_ENTRIES,
        "int",
        default="1000",
        doc="Segment manifests kept in memory, so a warm fetch costs one GET (0 = off).",
    ),
    ConfigKey(
        COMPRESSION_ENABLED,
        "boolean",
        default="false",
        doc="Compress each chunk with zstd. Applies to new segments; old ones stay readable.",
    ),
    ConfigKey(COMPRESSION_LEVEL, "int", default="3", doc="zstd level (-7 to 22)."),
    ConfigKey(
        COMPRESSION_HEURISTIC_ENABLED,
        "boolean",
        default="true",
        doc="Skip compression for a segment whose first record batches are already compressed "
        "by the producer (compressing them again costs CPU for nothing).",
    ),
    ConfigKey(
        ENCRYPTION_ENABLED,
        "boolean",
        default="false",
        doc="Client-side envelope encryption: AES-256-GCM per chunk under a random per-segment "
        "data key, wrapped by the key provider's active key. Needs 'tierlog[encryption]'.",
    ),
    ConfigKey(
        ENCRYPTION_KEY_PROVIDER,
        "string",
        default="file",
        doc="'file' (the JSON keyring of encryption.key.file) or 'package.module:Class' of a "
        "KeyProvider built with the RSM's configuration mapping.",
    ),
    ConfigKey(
        ENCRYPTION_KEY_FILE,
        "string",
        default="(unset)",
        doc='For the file provider: a JSON keyring {"active": "k2", "keys": {"k1": "<base64 of '
        '32 bytes>", "k2": "..."}}, re-read when it changes (rotation without restart). Also '
        "read with encryption.enabled=false, so segments copied encrypted stay readable.",
    ),
)

_T = TypeVar("_T")


def markdown_table(keys: Iterable[ConfigKey] = CONFIG_KEYS) -> str:
    """A Markdown table of ``keys`` (full ``rsm.config.`` names, defaults, meanings), for a
    plugin README: ``markdown_table([*PLUGIN_KEYS, *CONFIG_KEYS])``."""
    lines = ["| Key | Default | Meaning |", "|---|---|---|"]
    for key in keys:
        if key.default is None:
            default = "-"
        elif key.default.startswith("("):
            default = key.default.strip("()")
        else:
            default = f"`{key.default}`" if key.default else '`""`'
        doc = key.doc.replace("|", "\\|")
        lines.append(f"| `rsm.config.{key.name}` | {default} | {doc} |")
    return "\n".join(lines) + "\n"


def full_key(key: str) -> str:
    """``rsm.config.<key>``: a key as the user wrote it in ``server.properties``, which is how
    every message names it (an RSM only sees its keys with the prefix removed)."""
    return f"rsm.config.{key}"


def get_bool(configs: Mapping[str, str], key: str, default: bool) -> bool:
    """The boolean ``key`` of ``configs``, ``default`` when absent.

    The value is read by ``tierlog.properties.parse_bool``, the one boolean rule of tierlog
    (Kafka's: ``true``/``false`` in any case); anything else is a ``ConfigValueError`` naming
    ``rsm.config.<key>`` rather than false, so a typo cannot silently turn off encryption.
    """
    raw = configs.get(key)
    return default if raw is None else parse_bool(full_key(key), raw)


def get_int(
    configs: Mapping[str, str],
    key: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    unit: str = "",
) -> int:
    """An integer within ``[minimum, maximum]``; the error names the key and the range."""
    raw = configs.get(key)
    if raw is None or not str(raw).strip():
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"{full_key(key)} must be an integer{unit}, got {raw!r}") from None
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = (
            f"between {minimum} and {maximum}"
            if minimum is not None and maximum is not None
            else f"at least {minimum}"
            if minimum is not None
            else f"at most {maximum}"
        )
        raise ConfigError(f"{full_key(key)} must be {bounds}{unit}, got {value}")
    return value


def get_str(configs: Mapping[str, str], key: str) -> str | None:
    """The text of ``key``, stripped; ``None`` when absent or blank (an empty value is unset,
    as a commented-out line would be)."""
    raw = configs.get(key)
    if raw is None:
        return None
    value = str(raw).strip()
    return value or None


def _checked(value: _T, check: Callable[[_T], str | None], key: str) -> _T:
    problem = check(value)
    if problem:
        raise ConfigError(f"{full_key(key)} {problem}")
    return value


def _prefix_problem(prefix: str) -> str | None:
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in prefix):
        return f"must not contain control characters, got {prefix!r}"
    if len(prefix.encode("utf-8")) > KEY_PREFIX_MAX_BYTES:
        return (
            f"is {len(prefix.encode('utf-8'))} bytes; at most {KEY_PREFIX_MAX_BYTES} (it is "
            "stored in each segment's custom metadata, which Kafka limits to 128 bytes)"
        )
    return None


@dataclass(frozen=True, slots=True)
class ObjectStoreConfig:
    """The common configuration, parsed and validated (see ``CONFIG_KEYS`` for each key)."""

    key_prefix: str = ""
    key_prefix_entropy_chars: int = 0
    chunk_size: int = 4 * MiB
    upload_part_size: int = 8 * MiB
    upload_multipart_threshold: int = 8 * MiB
    upload_parallelism: int = 4
    upload_rate_limit_bytes_per_second: int = 0
    fetch_chunk_cache_size: int = 64 * MiB
    fetch_disk_cache_dir: Path | None = None
    fetch_disk_cache_size: int = 1 * GiB
    fetch_prefetch_chunks: int = 1
    fetch_manifest_cache_entries: int = 1000
    compression_enabled: bool = False
    compression_level: int = 3
    compression_heuristic_enabled: bool = True
    encryption_enabled: bool = False
    encryption_key_provider: str = "file"
    encryption_key_file: Path | None = None

    @staticmethod
    def keys() -> frozenset[str]:
        """Every common key (without ``rsm.config.``); with the plugin's ``backend_config_keys``
        and ``RLM_PROVIDED_KEYS`` it is what ``configure`` does not report as unknown."""
        return frozenset(k.name for k in CONFIG_KEYS)

    @classmethod
    def from_configs(cls, configs: Mapping[str, str]) -> ObjectStoreConfig:
        """Parse and validate; unknown keys are the caller's business (they may be the
        plugin's). Raises ``ConfigError`` naming the key."""
        prefix = configs.get(KEY_PREFIX)
        key_prefix = _checked("" if prefix is None else str(prefix), _prefix_problem, KEY_PREFIX)
        entropy = get_int(
            configs, KEY_PREFIX_ENTROPY_CHARS, 0, minimum=0, maximum=MAX_ENTROPY_CHARS
        )
        chunk_size = get_int(
            configs,
            CHUNK_SIZE,
            4 * MiB,
            minimum=MIN_CHUNK_SIZE,
            maximum=MAX_CHUNK_SIZE,
            unit=" (bytes)",
        )
        part_size = get_int(
            configs,
            UPLOAD_PART_SIZE,
            8 * MiB,
            minimum=S3_MIN_PART_SIZE,
            maximum=5 * GiB,
            unit=" (bytes; S3's minimum part is 5 MiB)",
        )
        threshold = get_int(
            configs,
            UPLOAD_MULTIPART_THRESHOLD,
            8 * MiB,
            minimum=1,
            maximum=5 * GiB,
            unit=" (bytes)",
        )
        parallelism = get_int(configs, UPLOAD_PARALLELISM, 4, minimum=1, maximum=64)
        rate = get_int(configs, UPLOAD_RATE_LIMIT, 0, minimum=0, unit=" (bytes/s; 0 = off)")
        memory_cache = get_int(
            configs, FETCH_CHUNK_CACHE_SIZE, 64 * MiB, minimum=0, unit=" (bytes)"
        )
        disk_dir_raw = get_str(configs, FETCH_DISK_CACHE_DIR)
        disk_dir = None
        if disk_dir_raw is not None:
            if "\x00" in disk_dir_raw:
                raise ConfigError(f"{full_key(FETCH_DISK_CACHE_DIR)} contains a NUL character")
            disk_dir = Path(disk_dir_raw).expanduser().absolute()
        disk_size = get_int(configs, FETCH_DISK_CACHE_SIZE, 1 * GiB, minimum=1, unit=" (bytes)")
        if disk_dir is not None and disk_size < chunk_size:
            raise ConfigError(
                f"{full_key(FETCH_DISK_CACHE_SIZE)} ({disk_size}) must hold at least one chunk "
                f"({full_key(CHUNK_SIZE)}={chunk_size})"
            )
        prefetch = get_int(configs, FETCH_PREFETCH_CHUNKS, 1, minimum=0, maximum=64)
        manifests = get_int(configs, FETCH_MANIFEST_CACHE_ENTRIES, 1000, minimum=0)
        compression = get_bool(configs, COMPRESSION_ENABLED, False)
        level = get_int(configs, COMPRESSION_LEVEL, 3, minimum=-7, maximum=22)
        heuristic = get_bool(configs, COMPRESSION_HEURISTIC_ENABLED, True)
        encryption = get_bool(configs, ENCRYPTION_ENABLED, False)
        provider = get_str(configs, ENCRYPTION_KEY_PROVIDER) or "file"
        if provider != "file" and (provider.count(":") != 1 or not all(provider.split(":"))):
            raise ConfigError(
                f"{full_key(ENCRYPTION_KEY_PROVIDER)} must be 'file' or 'package.module:Class', "
                f"got {provider!r}"
            )
        key_file_raw = get_str(configs, ENCRYPTION_KEY_FILE)
        key_file = None if key_file_raw is None else Path(key_file_raw).expanduser().absolute()
        if encryption and provider == "file" and key_file is None:
            raise ConfigError(
                f"{full_key(ENCRYPTION_ENABLED)}=true with the file key provider needs "
                f"{full_key(ENCRYPTION_KEY_FILE)}: the path of a JSON keyring "
                '{"active": "k1", "keys": {"k1": "<base64 of 32 random bytes>"}}'
            )
        return cls(
            key_prefix=key_prefix,
            key_prefix_entropy_chars=entropy,
            chunk_size=chunk_size,
            upload_part_size=part_size,
            upload_multipart_threshold=threshold,
            upload_parallelism=parallelism,
            upload_rate_limit_bytes_per_second=rate,
            fetch_chunk_cache_size=memory_cache,
            fetch_disk_cache_dir=disk_dir,
            fetch_disk_cache_size=disk_size,
            fetch_prefetch_chunks=prefetch,
            fetch_manifest_cache_entries=manifests,
            compression_enabled=compression,
            compression_level=level,
            compression_heuristic_enabled=heuristic,
            encryption_enabled=encryption,
            encryption_key_provider=provider,
            encryption_key_file=key_file,
        )

    def upload_settings(self) -> UploadSettings:
        """What the backend needs to stream uploads."""
        return UploadSettings(
            part_size=self.upload_part_size,
            multipart_threshold=self.upload_multipart_threshold,
            parallelism=self.upload_parallelism,
        )
