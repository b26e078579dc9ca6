"""The compaction summary in the object-store RSM (every cloud plugin shares it): an optional
entry of the ``.indexes`` object listed by a version-2 manifest, compressed and encrypted like
the other indexes, fetched with one ranged GET; segments copied without one, or before it
existed (version-1 manifests), raise RemoteResourceNotFoundException without a request."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tierlog.compaction.summary import BloomFilter, SegmentSummary
from tierlog.conformance.rsm_suite import SegmentFactory, read_stream, segment_metadata
from tierlog.spi import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    TopicIdPartition,
    Uuid,
)
from tierlog.storage.objectstore import Manifest, ManifestError, MemoryObjectStoreRSM

SUMMARY = IndexType.COMPACTION_SUMMARY
KAFKA_INDEX_NAMES = {"offset", "timestamp", "transaction", "producer_snapshot", "leader_epoch"}
TRANSFORMS: dict[str, dict[str, str]] = {
    "plain": {},
    "zstd": {"compression.enabled": "true", "compression.heuristic.enabled": "false"},
    "aes": {"encryption.enabled": "true"},
    "zstd+aes": {
        "compression.enabled": "true",
        "compression.heuristic.enabled": "false",
        "encryption.enabled": "true",
    },
}


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Callable[..., MemoryObjectStoreRSM]]:
    """Configured RSMs over one fresh in-memory store, with a key file for encryption."""
    keyring = tmp_path / "keyring.json"
    keyring.write_text(
        json.dumps({"active": "k1", "keys": {"k1": base64.b64encode(os.urandom(32)).decode()}})
    )
    store = uuid.uuid4().hex
    made: list[MemoryObjectStoreRSM] = []

    def build(**config: str) -> MemoryObjectStoreRSM:
        rsm = MemoryObjectStoreRSM()
        rsm.configure({"memory.store": store, "encryption.key.file": str(keyring), **config})
        made.append(rsm)
        return rsm

    yield build
    for rsm in made:
        rsm.close()
    MemoryObjectStoreRSM.drop_store(store)


@pytest.fixture
def segments(tmp_path: Path) -> SegmentFactory:
    return SegmentFactory(tmp_path / "segments")


@pytest.fixture
def tip() -> TopicIdPartition:
    return TopicIdPartition(Uuid.random(), "orders", 0)


def copy(
    rsm: MemoryObjectStoreRSM,
    data: Any,
    tip: TopicIdPartition,
    segment_id: Uuid | None = None,
) -> RemoteLogSegmentMetadata:
    metadata = segment_metadata(tip, size=data.log_segment.stat().st_size, segment_id=segment_id)
    rsm.copy_log_segment_data(metadata, data)
    return metadata


def manifest_doc(rsm: MemoryObjectStoreRSM, metadata: RemoteLogSegmentMetadata) -> Any:
    return json.loads(rsm.memory_backend.objects[rsm.segment_keys(metadata).manifest])


def gets(rsm: MemoryObjectStoreRSM) -> int:
    return rsm.metrics.snapshot().count("get")


# Layout and manifest ----------------------------------------------------------------------------
def test_the_summary_is_the_last_entry_of_the_indexes_object_in_a_version_2_manifest(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make()
    summary = segments.summary(777)
    files = segments.create(size=3000, compaction_summary=summary)
    metadata = copy(rsm, files.data, tip)
    keys = rsm.segment_keys(metadata)
    objects = rsm.memory_backend.objects
    assert list(objects) == [keys.log, keys.indexes, keys.manifest], "still three objects"
    doc = manifest_doc(rsm, metadata)
    assert doc["version"] == 2
    assert list(doc["indexes"])[-1] == "compaction_summary"
    others = sum(
        stored for name, (_, stored, _) in doc["indexes"].items() if name in KAFKA_INDEX_NAMES
    )
    assert doc["indexes"]["compaction_summary"] == [others, 777, 777]
    assert objects[keys.indexes][others:] == summary
    assert read_stream(rsm.fetch_index(metadata, SUMMARY)) == summary


def test_a_segment_without_a_summary_gets_the_manifest_older_tierlog_reads(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    """Every segment copied from the local log: version 1, Kafka's indexes only, so a tierlog
    from before the summary still reads it during a rolling upgrade."""
    rsm = make()
    metadata = copy(rsm, segments.create().data, tip)
    doc = manifest_doc(rsm, metadata)
    assert doc["version"] == 1
    assert set(doc["indexes"]) == KAFKA_INDEX_NAMES
    with pytest.raises(RemoteResourceNotFoundException, match="has no COMPACTION_SUMMARY index"):
        rsm.fetch_index(metadata, SUMMARY)


def test_a_retry_without_a_summary_drops_it_and_goes_back_to_version_1(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make()
    metadata = copy(rsm, segments.create(compaction_summary=segments.summary()).data, tip)
    assert read_stream(rsm.fetch_index(metadata, SUMMARY))  # cached manifest of the first copy
    second = segments.create()
    copy(rsm, second.data, tip, segment_id=metadata.remote_log_segment_id.id)
    assert manifest_doc(rsm, metadata)["version"] == 1
    with pytest.raises(RemoteResourceNotFoundException):
        rsm.fetch_index(metadata, SUMMARY)
    assert read_stream(rsm.fetch_index(metadata, IndexType.LEADER_EPOCH)) == second.expected(
        IndexType.LEADER_EPOCH
    )


def test_segments_stored_before_the_summary_existed_raise_not_found(
    make: Callable[..., MemoryObjectStoreRSM], tip: TopicIdPartition
) -> None:
    """Objects and a version-1 manifest written by hand, as tierlog wrote them before the
    summary: the summary is not found (not a ManifestError, not a request), the rest reads,
    and the delete removes all three objects."""
    rsm = make()
    metadata = segment_metadata(tip, size=10)
    keys = rsm.segment_keys(metadata)
    indexes = b"O" * 8 + b"T" * 12 + b"P" * 10 + b"0\n1\n0 0\n"
    old_manifest = {
        "version": 1,
        "copy_id": "0123456789abcdef",
        "segment": {"size": 10, "chunk_size": 4194304, "chunk_sizes": None},
        "indexes": {
            "offset": [0, 8, 8],
            "timestamp": [8, 12, 12],
            "producer_snapshot": [20, 10, 10],
            "leader_epoch": [30, 8, 8],
        },
        "compression": None,
        "encryption": None,
    }
    objects = rsm.memory_backend.objects
    objects[keys.log] = b"0123456789"
    objects[keys.indexes] = indexes
    objects[keys.manifest] = json.dumps(old_manifest).encode()

    assert read_stream(rsm.fetch_index(metadata, IndexType.TIMESTAMP)) == b"T" * 12
    before = gets(rsm)
    with pytest.raises(RemoteResourceNotFoundException, match="has no COMPACTION_SUMMARY index"):
        rsm.fetch_index(metadata, SUMMARY)
    assert gets(rsm) == before, "a summary the manifest does not list costs no request"
    reader = make()  # a fresh instance: the manifest is read from the store, not a cache
    with pytest.raises(RemoteResourceNotFoundException):
        reader.fetch_index(metadata, SUMMARY)
    reader.delete_log_segment_data(metadata)
    assert rsm.conformance_stored_objects() == []


# Transforms and requests ------------------------------------------------------------------------
@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize("size", [0, 1, 3000], ids=lambda n: f"{n}B")
def test_the_summary_round_trips_through_every_transform(
    make: Callable[..., MemoryObjectStoreRSM],
    segments: SegmentFactory,
    tip: TopicIdPartition,
    transform: str,
    size: int,
) -> None:
    """Read back by an instance configured without any transform: the manifest says how the
    summary was stored. Encrypted, the stored object holds none of its plaintext."""
    writer = make(**TRANSFORMS[transform])
    summary = b"" if size == 0 else (b"TLCS" + b"\x00\x01" * size)[:size]
    files = segments.create(compaction_summary=summary)
    metadata = copy(writer, files.data, tip)
    reader = make()
    assert read_stream(reader.fetch_index(metadata, SUMMARY)) == summary
    assert read_stream(reader.fetch_index(metadata, IndexType.OFFSET)) == files.expected(
        IndexType.OFFSET
    )
    stored = writer.memory_backend.objects[writer.segment_keys(metadata).indexes]
    if "aes" in transform and size >= 64:
        assert summary[:64] not in stored


def test_one_ranged_get_per_summary_fetch_once_the_manifest_is_cached(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    rsm = make(**TRANSFORMS["zstd+aes"])
    summary = segments.summary()
    metadata = copy(rsm, segments.create(compaction_summary=summary).data, tip)
    start = gets(rsm)
    assert read_stream(rsm.fetch_index(metadata, SUMMARY)) == summary
    assert gets(rsm) - start == 2, "the manifest, then the summary's bytes"
    assert read_stream(rsm.fetch_index(metadata, SUMMARY)) == summary
    assert gets(rsm) - start == 3, "the manifest is cached: one GET"


def test_a_modified_encrypted_summary_is_never_served(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    """The summary is authenticated like every index: a flipped bit fails the fetch with an
    error naming the index, and the other indexes still read."""
    rsm = make(**TRANSFORMS["aes"])
    files = segments.create(compaction_summary=segments.summary(500))
    metadata = copy(rsm, files.data, tip)
    key = rsm.segment_keys(metadata).indexes
    position = manifest_doc(rsm, metadata)["indexes"]["compaction_summary"][0]
    stored = bytearray(rsm.memory_backend.objects[key])
    stored[position + 10] ^= 0x01
    rsm.memory_backend.objects[key] = bytes(stored)
    with pytest.raises(RemoteStorageException, match=r"COMPACTION_SUMMARY index .* authentication"):
        read_stream(rsm.fetch_index(metadata, SUMMARY))
    assert read_stream(rsm.fetch_index(metadata, IndexType.LEADER_EPOCH)) == files.expected(
        IndexType.LEADER_EPOCH
    )


def test_a_cleaner_summary_reads_back_and_answers_the_same(
    make: Callable[..., MemoryObjectStoreRSM], segments: SegmentFactory, tip: TopicIdPartition
) -> None:
    """The log cleaner's own format (``tierlog.compaction.summary``), compressed and
    encrypted on the way: it decodes to the same summary, and its filter answers the same."""
    keys = [hashlib.md5(f"key-{i}".encode()).digest() for i in range(3000)]
    others = [hashlib.md5(f"other-{i}".encode()).digest() for i in range(3000)]
    summary = SegmentSummary(
        record_count=9000,
        key_count=len(keys),
        first_batch_timestamp=None,
        largest_timestamp=1_700_000_100_000,
        earliest_horizon=1_700_000_200_000,
        has_transactional=True,
        has_empty_batches=False,
        has_keyless=False,
        has_unstamped_tombstones=False,
        bloom=BloomFilter.of(keys, 0.01),
    )
    encoded = summary.encode()
    rsm = make(**TRANSFORMS["zstd+aes"])
    metadata = copy(rsm, segments.create(compaction_summary=encoded).data, tip)
    decoded = SegmentSummary.decode(read_stream(make().fetch_index(metadata, SUMMARY)))
    assert decoded == summary
    assert decoded.bloom.might_contain(keys).all()
    assert list(decoded.bloom.might_contain(others)) == list(summary.bloom.might_contain(others))


# Manifest versions ------------------------------------------------------------------------------
def _doc(version: object, with_summary: bool) -> bytes:
    indexes: dict[str, list[int]] = {
        "offset": [0, 8, 8],
        "timestamp": [8, 12, 12],
        "producer_snapshot": [20, 10, 10],
        "leader_epoch": [30, 8, 8],
    }
    if with_summary:
        indexes["compaction_summary"] = [38, 5, 5]
    return json.dumps(
        {
            "version": version,
            "copy_id": "c0ffee",
            "segment": {"size": 10, "chunk_size": 4096, "chunk_sizes": None},
            "indexes": indexes,
            "compression": None,
            "encryption": None,
        }
    ).encode()


@pytest.mark.parametrize(("version", "with_summary"), [(1, False), (2, False), (2, True)])
def test_versions_1_and_2_are_read(version: int, with_summary: bool) -> None:
    manifest = Manifest.from_json(_doc(version, with_summary))
    assert (SUMMARY in manifest.indexes) is with_summary
    assert Manifest.from_json(manifest.to_json()) == manifest
    assert json.loads(manifest.to_json())["version"] == (2 if with_summary else 1)


def test_a_version_1_manifest_listing_a_summary_is_refused() -> None:
    with pytest.raises(ManifestError, match="version-1 manifest lists a compaction_summary"):
        Manifest.from_json(_doc(1, True))


@pytest.mark.parametrize("version", [3, 0, True, "2", None], ids=repr)
def test_other_versions_are_refused_with_upgrade_advice(version: object) -> None:
    with pytest.raises(ManifestError, match=r"not understood .* reads versions 1, 2\); upgrade"):
        Manifest.from_json(_doc(version, True))
