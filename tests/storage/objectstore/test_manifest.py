"""The segment manifest: round trips, chunk arithmetic, and strict parsing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tierlog.spi import IndexType, RemoteStorageException
from tierlog.storage.objectstore.manifest import (
    Compression,
    Encryption,
    IndexEntry,
    Manifest,
    ManifestError,
)

INDEXES = {
    IndexType.OFFSET: IndexEntry(0, 80, 80),
    IndexType.TIMESTAMP: IndexEntry(80, 120, 120),
    IndexType.PRODUCER_SNAPSHOT: IndexEntry(200, 30, 30),
    IndexType.LEADER_EPOCH: IndexEntry(230, 12, 12),
}


def plain(size: int = 10_000, chunk: int = 4096) -> Manifest:
    return Manifest(
        copy_id="c0ffee", size=size, chunk_size=chunk, chunk_sizes=None, indexes=INDEXES
    )


def test_plain_round_trip_and_chunk_arithmetic() -> None:
    m = plain()
    again = Manifest.from_json(m.to_json())
    assert again == m
    assert (m.chunk_count, m.stored_log_size) == (3, 10_000)
    assert m.chunk_of(4095) == 0 and m.chunk_of(4096) == 1
    assert m.stored_range(1, 2) == (4096, 9999)
    assert m.original_chunk_size(2) == 10_000 - 8192
    assert IndexType.TRANSACTION not in again.indexes


def test_compressed_and_encrypted_round_trip_maps_chunks_to_their_stored_ranges() -> None:
    m = Manifest(
        copy_id="abc",
        size=10_000,
        chunk_size=4096,
        chunk_sizes=(100, 250, 75),
        indexes={**INDEXES, IndexType.TRANSACTION: IndexEntry(242, 50, 34)},
        compression=Compression("zstd", 5),
        encryption=Encryption("k2", b"w" * 40, b"nonc"),
    )
    again = Manifest.from_json(m.to_json())
    assert again == m
    assert again.stored_range(1, 1) == (100, 349)
    assert again.stored_range(0, 2) == (0, 424)
    assert again.indexes[IndexType.TRANSACTION] == IndexEntry(242, 50, 34)


def test_encryption_without_chunk_sizes_adds_the_tag_to_every_chunk() -> None:
    m = Manifest(
        copy_id="abc",
        size=5000,
        chunk_size=4096,
        chunk_sizes=None,
        indexes=INDEXES,
        encryption=Encryption("k1", b"w" * 40, b"nonc"),
        chunk_overhead=16,
    )
    again = Manifest.from_json(m.to_json())
    assert again.stored_range(1, 1) == (4096 + 16, 5000 + 32 - 1)
    assert again.stored_log_size == 5032


def test_an_empty_segment_has_no_chunks() -> None:
    m = Manifest.from_json(plain(size=0).to_json())
    assert (m.chunk_count, m.stored_log_size) == (0, 0)


def _doc(**changes: Any) -> bytes:
    doc = json.loads(plain().to_json())
    for path, value in changes.items():
        target = doc
        *parents, leaf = path.split("__")
        for p in parents:
            target = target[p]
        if value is _DELETE:
            del target[leaf]
        else:
            target[leaf] = value
    return json.dumps(doc).encode()


_DELETE = object()


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"not json", "not JSON"),
        (b"[]", "JSON object"),
        (_doc(version=3), "version 3"),
        (_doc(version=_DELETE), "version None"),
        (_doc(extra=1), "unknown fields"),
        (_doc(copy_id=""), "copy_id"),
        (_doc(segment__size=-1), "at least 0"),
        (_doc(segment__size=True), "integer"),
        (_doc(segment__size="10"), "integer"),
        (_doc(segment__chunk_size=0), "at least 1"),
        (_doc(segment__chunk_sizes=[1, 2]), "2 chunk sizes for 3 chunks"),
        (_doc(segment__chunk_sizes=[1, 0, 3]), "zero or negative"),
        (_doc(segment__chunk_sizes="1,2,3"), "list of integers"),
        (_doc(indexes__bogus=[0, 0, 0]), "unknown index"),
        (_doc(indexes__offset=[0, 1]), "position, stored size, size"),
        (_doc(indexes__offset=[0, -1, 1]), "position, stored size, size"),
        (_doc(indexes__leader_epoch=_DELETE), "lacks the indexes leader_epoch"),
        (_doc(compression={"codec": "lz4", "level": 1}), "not supported"),
        (
            _doc(compression={"codec": "zstd", "level": 3}, segment__chunk_sizes=None),
            "must list its chunk sizes",
        ),
        (
            _doc(
                encryption={
                    "algorithm": "AES-256-GCM",
                    "key_id": "k",
                    "wrapped_key": "%%",
                    "key_wrap": "AES-KW",
                    "nonce_prefix": "AAAAAA==",
                    "nonce_scheme": "prefix4-index8",
                }
            ),
            "not base64",
        ),
        (
            _doc(
                encryption={
                    "algorithm": "ChaCha",
                    "key_id": "k",
                    "wrapped_key": "d" * 56,
                    "key_wrap": "AES-KW",
                    "nonce_prefix": "AAAAAA==",
                    "nonce_scheme": "prefix4-index8",
                }
            ),
            "not supported",
        ),
    ],
)
def test_malformed_manifests_raise_a_typed_error(data: bytes, match: str) -> None:
    with pytest.raises(ManifestError, match=match) as raised:
        Manifest.from_json(data)
    assert isinstance(raised.value, RemoteStorageException)
