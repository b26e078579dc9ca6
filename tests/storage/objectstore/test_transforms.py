"""Chunk transforms: zstd and AES-256-GCM envelope encryption, key providers and rotation."""

from __future__ import annotations

import base64
import builtins
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tierlog.spi import ConfigError, IndexType, RemoteStorageException
from tierlog.storage.objectstore.manifest import Compression, IndexEntry, Manifest
from tierlog.storage.objectstore.transforms import (
    KeyProvider,
    LocalKeyFileProvider,
    SegmentCodec,
    load_key_provider,
    require_cryptography,
)

CHUNK = 1024
DATA = (b"tierlog chunk " * 400)[:3000]  # 3 chunks, compressible


def keyring(path: Path, active: str, keys: dict[str, bytes]) -> Path:
    doc = {"active": active, "keys": {k: base64.b64encode(v).decode() for k, v in keys.items()}}
    path.write_text(json.dumps(doc))
    # Make the change visible even on a file system with coarse timestamps.
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    return path


@pytest.fixture
def keys() -> dict[str, bytes]:
    return {"k1": os.urandom(32), "k2": os.urandom(32)}


@pytest.fixture
def provider(tmp_path: Path, keys: dict[str, bytes]) -> LocalKeyFileProvider:
    return LocalKeyFileProvider(keyring(tmp_path / "keys.json", "k1", {"k1": keys["k1"]}))


def encode(
    data: bytes, compression: Compression | None, provider: KeyProvider | None
) -> tuple[Manifest, list[bytes], bytes]:
    """Encode ``data`` as the RSM does; returns the manifest, the stored chunks and the stored
    offset index (the data's first 100 bytes)."""
    codec, encryption = SegmentCodec.for_copy(
        size=len(data), chunk_size=CHUNK, compression=compression, key_provider=provider
    )
    stored = [
        codec.encode_chunk(i, data[i * CHUNK : (i + 1) * CHUNK]) for i in range(codec.chunk_count)
    ]
    index = codec.encode_index(IndexType.OFFSET, data[:100])
    manifest = Manifest(
        copy_id="x",
        size=len(data),
        chunk_size=CHUNK,
        chunk_sizes=tuple(map(len, stored)) if compression else None,
        indexes={
            t: IndexEntry(0, len(index), 100)
            for t in (
                IndexType.OFFSET,
                IndexType.TIMESTAMP,
                IndexType.PRODUCER_SNAPSHOT,
                IndexType.LEADER_EPOCH,
            )
        },
        compression=compression,
        encryption=encryption,
        chunk_overhead=0 if compression else codec.chunk_overhead,
    )
    return Manifest.from_json(manifest.to_json()), stored, index


def decode_all(manifest: Manifest, stored: list[bytes], provider: KeyProvider | None) -> bytes:
    codec = SegmentCodec.for_manifest(manifest, provider, "test segment")
    return b"".join(codec.decode_chunk(i, c, "test segment") for i, c in enumerate(stored))


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "zstd"])
@pytest.mark.parametrize("encrypt", [False, True], ids=["clear", "aes"])
def test_round_trip(compress: bool, encrypt: bool, provider: LocalKeyFileProvider) -> None:
    compression = Compression("zstd", 3) if compress else None
    manifest, stored, index = encode(DATA, compression, provider if encrypt else None)
    assert decode_all(manifest, stored, provider) == DATA
    codec = SegmentCodec.for_manifest(manifest, provider, "s")
    assert codec.decode_index(IndexType.OFFSET, index, 100, "s") == DATA[:100]
    if compress:
        assert sum(map(len, stored)) < len(DATA) // 4
    if encrypt:
        assert all(DATA[:40] not in c for c in stored)
        assert [len(c) for c in stored][:2] == (
            [CHUNK + 16] * 2 if not compress else [len(stored[0]), len(stored[1])]
        )
        # Stored sizes follow from the manifest alone (no listing): tag per chunk.
        assert manifest.stored_log_size == sum(map(len, stored))


def test_identical_chunks_encrypt_differently_and_segments_get_their_own_keys(
    provider: LocalKeyFileProvider,
) -> None:
    same = b"\x00" * (2 * CHUNK)
    m1, stored1, _ = encode(same, None, provider)
    m2, stored2, _ = encode(same, None, provider)
    assert stored1[0] != stored1[1], "a nonce must never repeat within a segment"
    assert stored1[0] != stored2[0]
    assert m1.encryption and m2.encryption
    assert m1.encryption.wrapped_key != m2.encryption.wrapped_key


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "zstd"])
def test_a_modified_chunk_fails_authentication(
    compress: bool, provider: LocalKeyFileProvider
) -> None:
    manifest, stored, _ = encode(DATA, Compression() if compress else None, provider)
    tampered = bytearray(stored[1])
    tampered[5] ^= 0x01
    stored[1] = bytes(tampered)
    with pytest.raises(RemoteStorageException, match=r"chunk 1 .* failed authentication"):
        decode_all(manifest, stored, provider)


def test_swapped_chunks_fail_authentication(provider: LocalKeyFileProvider) -> None:
    data = os.urandom(2 * CHUNK)
    manifest, stored, _ = encode(data, None, provider)
    codec = SegmentCodec.for_manifest(manifest, provider, "s")
    with pytest.raises(RemoteStorageException, match="chunk 0 of s failed authentication"):
        codec.decode_chunk(0, stored[1], "s")


def test_a_truncated_segment_fails_authentication(provider: LocalKeyFileProvider) -> None:
    """Dropping the last chunk and shrinking the manifest's size is detected: the chunk count
    and the size are authenticated with every chunk."""
    manifest, stored, _ = encode(os.urandom(3 * CHUNK), None, provider)
    forged = Manifest(
        copy_id="x",
        size=2 * CHUNK,
        chunk_size=CHUNK,
        chunk_sizes=None,
        indexes=manifest.indexes,
        encryption=manifest.encryption,
        chunk_overhead=16,
    )
    with pytest.raises(RemoteStorageException, match="failed authentication"):
        decode_all(forged, stored[:2], provider)


def test_an_index_cannot_be_served_as_another(provider: LocalKeyFileProvider) -> None:
    manifest, _, index = encode(DATA, None, provider)
    codec = SegmentCodec.for_manifest(manifest, provider, "s")
    with pytest.raises(RemoteStorageException, match="failed authentication"):
        codec.decode_index(IndexType.TIMESTAMP, index, 100, "s")


def test_rotation_keeps_old_segments_readable(
    tmp_path: Path, keys: dict[str, bytes], provider: LocalKeyFileProvider
) -> None:
    old_manifest, old_stored, _ = encode(DATA, None, provider)
    assert old_manifest.encryption and old_manifest.encryption.key_id == "k1"
    keyring(provider.path, "k2", keys)  # rotate: k2 active, k1 kept; no restart
    assert provider.active_key() == ("k2", keys["k2"])
    new_manifest, new_stored, _ = encode(DATA, None, provider)
    assert new_manifest.encryption and new_manifest.encryption.key_id == "k2"
    assert decode_all(old_manifest, old_stored, provider) == DATA
    assert decode_all(new_manifest, new_stored, provider) == DATA


def test_a_missing_key_names_it(
    tmp_path: Path, keys: dict[str, bytes], provider: LocalKeyFileProvider
) -> None:
    manifest, stored, _ = encode(DATA, None, provider)
    keyring(provider.path, "k2", {"k2": keys["k2"]})  # k1 retired too early
    with pytest.raises(RemoteStorageException, match="'k1' is not in the keyring"):
        decode_all(manifest, stored, provider)


def test_a_key_of_the_same_id_but_other_bytes_is_reported(
    tmp_path: Path, provider: LocalKeyFileProvider
) -> None:
    manifest, stored, _ = encode(DATA, None, provider)
    other = LocalKeyFileProvider(keyring(tmp_path / "other.json", "k1", {"k1": os.urandom(32)}))
    with pytest.raises(RemoteStorageException, match="does not unwrap with key 'k1'"):
        decode_all(manifest, stored, other)


def test_an_encrypted_segment_without_a_key_provider_says_what_to_configure(
    provider: LocalKeyFileProvider,
) -> None:
    manifest, stored, _ = encode(DATA, None, provider)
    with pytest.raises(RemoteStorageException, match=r"encryption\.enabled=true"):
        decode_all(manifest, stored, None)


def test_a_broken_keyring_edit_keeps_the_last_good_keys(
    tmp_path: Path, keys: dict[str, bytes], provider: LocalKeyFileProvider
) -> None:
    provider.path.write_text("{ half written")
    st = provider.path.stat()
    os.utime(provider.path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))
    assert provider.active_key() == ("k1", keys["k1"])


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("nope", "not JSON"),
        ('{"active": "k1"}', "must be"),
        (
            '{"active": "k9", "keys": {"k1": "' + base64.b64encode(b"k" * 32).decode() + '"}}',
            "'active' must name",
        ),
        ('{"active": "k1", "keys": {"k1": "c2hvcnQ="}}', "AES-256 needs 32"),
        ('{"active": "k1", "keys": {"k1": "***"}}', "not base64"),
        (
            '{"active": "a b", "keys": {"a b": "' + base64.b64encode(b"k" * 32).decode() + '"}}',
            "key id",
        ),
    ],
)
def test_an_invalid_keyring_is_a_config_error(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "keys.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=match):
        LocalKeyFileProvider(path)


def test_a_missing_keyring_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the keyring"):
        load_key_provider("file", tmp_path / "absent.json", {})


class StaticProvider:
    """A custom provider named by module:Class, built with the configuration."""

    def __init__(self, configs: dict[str, str]) -> None:
        self.key_bytes = base64.b64decode(configs["test.kek"])

    def active_key(self) -> tuple[str, bytes]:
        return "static", self.key_bytes

    def key(self, key_id: str) -> bytes:
        if key_id != "static":
            raise RemoteStorageException(f"unknown key {key_id}")
        return self.key_bytes


def test_a_custom_provider_is_loaded_by_class_path() -> None:
    kek = base64.b64encode(os.urandom(32)).decode()
    built = load_key_provider(f"{__name__}:StaticProvider", None, {"test.kek": kek})
    assert isinstance(built, StaticProvider)
    manifest, stored, _ = encode(DATA, None, built)
    assert decode_all(manifest, stored, built) == DATA


@pytest.mark.parametrize(
    "path", ["no.such.module:Thing", f"{__name__}:NoSuchClass", "builtins:object"]
)
def test_a_bad_provider_class_path_is_a_config_error(path: str) -> None:
    with pytest.raises(ConfigError, match=r"encryption\.key\.provider"):
        load_key_provider(path, None, {})


def test_missing_cryptography_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_cryptography(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("cryptography"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cryptography)
    for module in [m for m in list(__import__("sys").modules) if m.startswith("cryptography")]:
        monkeypatch.delitem(__import__("sys").modules, module)
    with pytest.raises(ConfigError, match=r"pip install 'tierlog\[encryption\]'"):
        require_cryptography()
