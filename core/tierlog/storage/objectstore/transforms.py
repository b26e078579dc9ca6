"""Per-chunk transforms: zstd compression and client-side envelope encryption.

A segment is stored as independent chunks (``chunk.size`` original bytes each), so a ranged
read decodes only the chunks it touches. Encoding is compress-then-encrypt; decoding is the
reverse.

**Compression** is zstd per chunk (one frame each, with its content size). The RSM skips it for
a segment whose batches the producer already compressed (``compression.heuristic.enabled``):
compressing compressed data again costs CPU and saves nothing.

**Encryption** is envelope encryption, as KMS-backed stores do it:

- every segment gets a fresh random 256-bit *data key* (DK); its chunks are sealed with
  AES-256-GCM under the DK; the DK is stored in the manifest *wrapped* (RFC 3394 AES key wrap)
  by a *key-encryption key* (KEK) from a ``KeyProvider``, with the KEK's id;
- the 96-bit GCM nonce is a random 4-byte per-segment prefix followed by the 8-byte chunk index
  (indexes use the index's ordinal with the top bit set): unique for every chunk under one DK,
  and a DK is never reused across segments, so a nonce is never reused under a key;
- the associated data of a chunk is its index, the chunk count and the segment size, so chunks
  cannot be swapped, dropped or the segment truncated without the read failing authentication;
- key rotation: the provider's *active* key wraps new segments; old segments name the key id
  they were wrapped with, which the provider still resolves, so they stay readable. Rewrapping
  is never needed; retiring a key means deleting the segments it wraps first.

``cryptography`` is an optional dependency (``pip install 'tierlog[encryption]'``), imported
only when encryption is used.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import json
import logging
import os
import re
import struct
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

import zstandard

from tierlog.spi import ConfigError, IndexType, RemoteStorageException
from tierlog.storage.objectstore.manifest import (
    INDEX_ORDER,
    Compression,
    Encryption,
    Manifest,
)

__all__ = [
    "GCM_TAG_SIZE",
    "KeyProvider",
    "LocalKeyFileProvider",
    "SegmentCodec",
    "load_key_provider",
    "require_cryptography",
]

_LOG = logging.getLogger(__name__)

GCM_TAG_SIZE: Final = 16
DATA_KEY_SIZE: Final = 32
NONCE_PREFIX_SIZE: Final = 4
_LOG_AAD: Final = struct.Struct(">12sQQQ")
_INDEX_AAD: Final = struct.Struct(">12sQQ")
_NONCE_INDEX: Final = struct.Struct(">Q")
_INDEX_NONCE_BIT: Final = 1 << 63
_KEY_ID: Final = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_INSTALL_HINT: Final = "install it with: pip install 'tierlog[encryption]'"


def require_cryptography(error: type[Exception] = ConfigError) -> Any:
    """The ``cryptography`` AEAD and key-wrap modules, or ``error`` saying how to install them."""
    try:
        aead = importlib.import_module("cryptography.hazmat.primitives.ciphers.aead")
        keywrap = importlib.import_module("cryptography.hazmat.primitives.keywrap")
        exceptions = importlib.import_module("cryptography.exceptions")
    except ImportError:
        raise error(
            f"encryption needs the 'cryptography' package, which is not installed; {_INSTALL_HINT}"
        ) from None
    return _Crypto(aead, keywrap, exceptions)


class _Crypto:
    def __init__(self, aead: Any, keywrap: Any, exceptions: Any) -> None:
        self.AESGCM = aead.AESGCM
        self.wrap = keywrap.aes_key_wrap
        self.unwrap = keywrap.aes_key_unwrap
        self.InvalidUnwrap = keywrap.InvalidUnwrap
        self.InvalidTag = exceptions.InvalidTag


# Key providers --------------------------------------------------------------------------------
@runtime_checkable
class KeyProvider(Protocol):
    """Where key-encryption keys (KEKs) come from: a keyring file, a KMS, a vault.

    ``active_key`` is called for every copy (it must be cheap or cache), ``key`` for every
    segment read the first time (the RSM caches the unwrapped data key with the manifest).
    Both return 32-byte AES keys and are called from several threads. An implementation named
    by ``encryption.key.provider=package.module:Class`` is built with the RSM's configuration
    mapping (``rsm.config.`` stripped) as its only argument.
    """

    def active_key(self) -> tuple[str, bytes]:
        """The id and bytes of the key that wraps new segments' data keys."""
        ...

    def key(self, key_id: str) -> bytes:
        """The key ``key_id`` (active or retired); ``RemoteStorageException`` naming the id if
        it is unknown."""
        ...


class LocalKeyFileProvider:
    """KEKs from a JSON keyring file: ``{"active": "k2", "keys": {"k1": "<base64>", ...}}``.

    Each key is 32 random bytes in base64 (``head -c 32 /dev/urandom | base64``). The file is
    re-read when it changes (size, mtime or inode: an editor's rename is seen too), so rotating
    is: add a key, point ``active`` at it; no restart. Keep old keys as long as segments wrapped
    by them exist. A keyring that becomes invalid after a change is reported, and the last valid
    one keeps serving, so a half-written edit cannot stop the broker.
    """

    def __init__(self, path: Path | str) -> None:
        self._path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._active = ""
        self._keys: dict[str, bytes] = {}
        self._reload(initial=True)

    @property
    def path(self) -> Path:
        return self._path

    def _reload(self, *, initial: bool = False) -> None:
        try:
            st = os.stat(self._path)
        except OSError as exc:
            if initial:
                raise ConfigError(f"cannot read the keyring {self._path}: {exc}") from None
            _LOG.error(
                "cannot read the keyring %s (%s); keeping the keys read before", self._path, exc
            )
            return
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return
        try:
            active, keys = self._parse(self._path.read_bytes())
        except (OSError, ConfigError) as exc:
            if initial:
                raise ConfigError(str(exc)) from None
            _LOG.error(
                "keyring %s is invalid after a change (%s); keeping the keys read before",
                self._path,
                exc,
            )
            return
        self._stamp, self._active, self._keys = stamp, active, keys
        if not initial:
            _LOG.info("reloaded keyring %s: active key %s, %d keys", self._path, active, len(keys))

    def _parse(self, data: bytes) -> tuple[str, dict[str, bytes]]:
        where = f"keyring {self._path}"
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{where} is not JSON: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("keys"), dict):
            raise ConfigError(
                f'{where} must be {{"active": "<id>", "keys": {{"<id>": '
                '"<base64 of 32 bytes>"}}}'
            )
        keys: dict[str, bytes] = {}
        for key_id, value in doc["keys"].items():
            if not _KEY_ID.fullmatch(key_id):
                raise ConfigError(f"{where}: key id {key_id!r} must match {_KEY_ID.pattern}")
            try:
                raw = base64.b64decode(str(value), validate=True)
            except (binascii.Error, ValueError):
                raise ConfigError(f"{where}: key {key_id} is not base64") from None
            if len(raw) != DATA_KEY_SIZE:
                raise ConfigError(
                    f"{where}: key {key_id} is {len(raw)} bytes; AES-256 needs {DATA_KEY_SIZE}"
                )
            keys[key_id] = raw
        active = doc.get("active")
        if not isinstance(active, str) or active not in keys:
            raise ConfigError(f"{where}: 'active' must name one of its keys, got {active!r}")
        return active, keys

    def active_key(self) -> tuple[str, bytes]:
        with self._lock:
            self._reload()
            return self._active, self._keys[self._active]

    def key(self, key_id: str) -> bytes:
        with self._lock:
            self._reload()  # one stat; called once per segment (the RSM caches the codec)
            found = self._keys.get(key_id)
        if found is None:
            raise RemoteStorageException(
                f"encryption key {key_id!r} is not in the keyring {self._path}: segments "
                f"wrapped by it cannot be read; restore key {key_id!r} to the keyring"
            )
        return found


def load_key_provider(
    provider: str, key_file: Path | None, configs: Mapping[str, str]
) -> KeyProvider:
    """Build the configured provider and check that it has an active key (at ``configure``)."""
    if provider == "file":
        if key_file is None:
            raise ConfigError("rsm.config.encryption.key.file is required by the file provider")
        built: object = LocalKeyFileProvider(key_file)
    else:
        module_name, _, class_name = provider.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(
                f"rsm.config.encryption.key.provider={provider!r} cannot be loaded: {exc}"
            ) from None
        try:
            built = cls(dict(configs))
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(
                f"rsm.config.encryption.key.provider={provider!r} failed to start: {exc}"
            ) from None
    if not isinstance(built, KeyProvider):
        raise ConfigError(
            f"rsm.config.encryption.key.provider={provider!r} does not implement KeyProvider "
            "(active_key() and key(key_id))"
        )
    try:
        key_id, key = built.active_key()
    except RemoteStorageException as exc:
        raise ConfigError(f"the key provider has no usable active key: {exc}") from None
    if len(key) != DATA_KEY_SIZE:
        raise ConfigError(f"active key {key_id!r} is {len(key)} bytes; AES-256 needs 32")
    return built


# Codec ----------------------------------------------------------------------------------------
_zstd_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    d: zstandard.ZstdDecompressor | None = getattr(_zstd_local, "d", None)
    if d is None:
        d = _zstd_local.d = zstandard.ZstdDecompressor()
    return d


class SegmentCodec:
    """Encodes and decodes the chunks and indexes of one segment. Thread-safe for decoding;
    one copy (one thread) encodes."""

    def __init__(
        self,
        *,
        size: int,
        chunk_size: int,
        compression: Compression | None = None,
        data_key: bytes | None = None,
        nonce_prefix: bytes | None = None,
        crypto: Any = None,
    ) -> None:
        self.size = size
        self.chunk_size = chunk_size
        self.chunk_count = -(-size // chunk_size)
        self.compression = compression
        self._compressor = (
            None
            if compression is None
            else zstandard.ZstdCompressor(level=compression.level, write_content_size=True)
        )
        self._crypto = crypto
        self._aead = None if data_key is None else crypto.AESGCM(data_key)
        self._nonce_prefix = nonce_prefix or b""

    @property
    def identity(self) -> bool:
        """Nothing to do: chunks are stored as they are."""
        return self.compression is None and self._aead is None

    @property
    def chunk_overhead(self) -> int:
        """Fixed stored bytes added per chunk when there is no compression."""
        return GCM_TAG_SIZE if self._aead is not None else 0

    @classmethod
    def for_copy(
        cls,
        *,
        size: int,
        chunk_size: int,
        compression: Compression | None,
        key_provider: KeyProvider | None,
    ) -> tuple[SegmentCodec, Encryption | None]:
        """A codec for a new segment: a fresh data key and nonce prefix if encrypting, and the
        manifest's encryption entry (the data key wrapped by the active KEK)."""
        if key_provider is None:
            return cls(size=size, chunk_size=chunk_size, compression=compression), None
        crypto = require_cryptography(RemoteStorageException)
        key_id, kek = key_provider.active_key()
        data_key = os.urandom(DATA_KEY_SIZE)
        nonce_prefix = os.urandom(NONCE_PREFIX_SIZE)
        encryption = Encryption(
            key_id=key_id, wrapped_key=crypto.wrap(kek, data_key), nonce_prefix=nonce_prefix
        )
        codec = cls(
            size=size,
            chunk_size=chunk_size,
            compression=compression,
            data_key=data_key,
            nonce_prefix=nonce_prefix,
            crypto=crypto,
        )
        return codec, encryption

    @classmethod
    def for_manifest(
        cls, manifest: Manifest, key_provider: KeyProvider | None, what: str
    ) -> SegmentCodec:
        """The codec that reads a stored segment (unwrapping its data key)."""
        encryption = manifest.encryption
        if encryption is None:
            return cls(
                size=manifest.size, chunk_size=manifest.chunk_size, compression=manifest.compression
            )
        crypto = require_cryptography(RemoteStorageException)
        if key_provider is None:
            raise RemoteStorageException(
                f"{what} is encrypted (key {encryption.key_id!r}) but encryption is not "
                "configured: set rsm.config.encryption.enabled=true and its key provider"
            )
        kek = key_provider.key(encryption.key_id)
        try:
            data_key = crypto.unwrap(kek, encryption.wrapped_key)
        except crypto.InvalidUnwrap:
            raise RemoteStorageException(
                f"the data key of {what} does not unwrap with key {encryption.key_id!r}: the "
                "keyring's key of that id is not the one the segment was written with"
            ) from None
        return cls(
            size=manifest.size,
            chunk_size=manifest.chunk_size,
            compression=manifest.compression,
            data_key=data_key,
            nonce_prefix=encryption.nonce_prefix,
            crypto=crypto,
        )

    # Log chunks ---------------------------------------------------------------------------------
    def _chunk_aad(self, index: int) -> bytes:
        return _LOG_AAD.pack(b"tierlog/log1", index, self.chunk_count, self.size)

    def encode_chunk(self, index: int, data: bytes) -> bytes:
        return self.seal_chunk(index, self.compress(data))

    def compress(self, data: bytes) -> bytes:
        """The first step of ``encode_chunk`` (a caller streaming large chunks drops the
        original before sealing, so that at most two copies of a chunk are alive)."""
        return data if self._compressor is None else self._compressor.compress(data)

    def seal_chunk(self, index: int, data: bytes) -> bytes:
        """The second step of ``encode_chunk``: encrypt (compressed) chunk ``index``."""
        if self._aead is None:
            return data
        nonce = self._nonce_prefix + _NONCE_INDEX.pack(index)
        return bytes(self._aead.encrypt(nonce, data, self._chunk_aad(index)))

    def decode_chunk(self, index: int, data: bytes, what: str) -> bytes:
        """The original bytes of chunk ``index``; ``RemoteStorageException`` if the stored
        chunk was modified, swapped or truncated."""
        expected = min(self.chunk_size, self.size - index * self.chunk_size)
        return self._decode(
            data, self._chunk_aad(index), index, expected, f"chunk {index} of {what}"
        )

    # Indexes ------------------------------------------------------------------------------------
    def _index_aad(self, index_type: IndexType, size: int) -> tuple[bytes, int]:
        ordinal = INDEX_ORDER.index(index_type)
        return _INDEX_AAD.pack(b"tierlog/idx1", ordinal, size), _INDEX_NONCE_BIT | ordinal

    def encode_index(self, index_type: IndexType, data: bytes) -> bytes:
        out = data
        if self._compressor is not None:
            out = self._compressor.compress(out)
        if self._aead is not None:
            aad, counter = self._index_aad(index_type, len(data))
            out = self._aead.encrypt(self._nonce_prefix + _NONCE_INDEX.pack(counter), out, aad)
        return out

    def decode_index(self, index_type: IndexType, data: bytes, size: int, what: str) -> bytes:
        aad, counter = self._index_aad(index_type, size)
        return self._decode(data, aad, counter, size, f"{index_type} index of {what}")

    def _decode(self, data: bytes, aad: bytes, counter: int, expected: int, what: str) -> bytes:
        out = data
        if self._aead is not None:
            nonce = self._nonce_prefix + _NONCE_INDEX.pack(counter)
            try:
                out = self._aead.decrypt(nonce, out, aad)
            except self._crypto.InvalidTag:
                raise RemoteStorageException(
                    f"{what} failed authentication: the stored object was modified, truncated "
                    "or swapped with another"
                ) from None
        if self.compression is not None:
            try:
                out = _decompressor().decompress(out, max_output_size=max(expected, 1))
            except zstandard.ZstdError as exc:
                raise RemoteStorageException(f"{what} does not decompress: {exc}") from None
        if len(out) != expected:
            raise RemoteStorageException(
                f"{what} decodes to {len(out)} bytes, the manifest says {expected}"
            )
        return out
