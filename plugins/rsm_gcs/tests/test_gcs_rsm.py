"""The ``gcs`` RSM as a whole: registration, a cheap import, requests per fetch, metrics, and
the README's configuration table."""

from __future__ import annotations

import random
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from services._common import Service
from tierlog.conformance.rsm_suite import SegmentFactory, read_stream, segment_metadata
from tierlog.spi import TopicIdPartition, Uuid
from tierlog.spi.plugins import get_registry
from tierlog.storage.objectstore.config import CONFIG_KEYS as COMMON_KEYS

from gcs_test_helpers import gcs_configs
from tierlog_rsm_gcs import GcsConfig, GcsRemoteStorageManager

MiB = 1 << 20
README = Path(__file__).resolve().parents[1] / "README.md"


def test_registered_as_gcs() -> None:
    assert get_registry().storage_manager_class("gcs") is GcsRemoteStorageManager


def test_import_does_not_load_the_google_client() -> None:
    """tierlog imports every installed plugin to list them; this one must stay cheap."""
    code = (
        "import sys, tierlog_rsm_gcs\n"
        "print(sorted(m for m in sys.modules if m.startswith('google.cloud')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "[]"


@pytest.fixture
def rsm_factory(fake_gcs: Service) -> Iterator[Callable[..., GcsRemoteStorageManager]]:
    made: list[GcsRemoteStorageManager] = []

    def make(**extra: str) -> GcsRemoteStorageManager:
        rsm = GcsRemoteStorageManager()
        rsm.configure(gcs_configs(fake_gcs, **{"key.prefix": f"rsm/{uuid.uuid4().hex}/", **extra}))
        made.append(rsm)
        return rsm

    yield make
    for rsm in made:
        rsm.close()


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"fetch.chunk.cache.size": "0"},
        {"compression.enabled": "true", "fetch.prefetch.chunks": "0"},
    ],
    ids=["plain-cached", "plain-uncached", "compressed"],
)
def test_one_get_per_fetch_of_one_mib_at_a_random_offset(
    rsm_factory: Callable[..., GcsRemoteStorageManager], tmp_path: Path, extra: dict[str, str]
) -> None:
    """With the manifest cached, a 1 MiB fetch at a random offset (of chunks not cached yet) is
    one GET: the chunks it spans are coalesced into one ranged request."""
    # 1 MiB chunks: a 1 MiB fetch spans two of them, which must still be one GET.
    rsm = rsm_factory(**{"chunk.size": str(MiB), **extra})
    files = SegmentFactory(tmp_path / "segments").create(size=24 * MiB)
    metadata = segment_metadata(TopicIdPartition(Uuid.random(), "gets", 0), size=len(files.segment))
    rsm.copy_log_segment_data(metadata, files.data)
    assert read_stream(rsm.fetch_log_segment(metadata, 0, 99)) == files.segment[:100]  # warm
    chunk = rsm.config.chunk_size
    rng = random.Random(7)
    # Offsets in distinct chunk pairs, so nothing they need is cached by an earlier fetch.
    for pair in rng.sample(range(1, len(files.segment) // (2 * chunk) - 1), 5):
        start = pair * 2 * chunk + rng.randrange(chunk)
        before = rsm.metrics.snapshot()
        got = read_stream(rsm.fetch_log_segment(metadata, start, start + MiB - 1))
        after = rsm.metrics.snapshot()
        assert got == files.segment[start : start + MiB]
        gets = after.count("get") - before.count("get")
        assert gets == 1, f"a 1 MiB fetch at {start} made {gets} GETs"


def test_metrics_count_requests_per_operation_under_backend_gcs(
    rsm_factory: Callable[..., GcsRemoteStorageManager], tmp_path: Path
) -> None:
    rsm = rsm_factory(**{"upload.part.size": str(5 * MiB)})
    files = SegmentFactory(tmp_path / "segments").create(size=12 * MiB)
    metadata = segment_metadata(
        TopicIdPartition(Uuid.random(), "metrics", 0), size=len(files.segment)
    )
    rsm.copy_log_segment_data(metadata, files.data)
    snapshot = rsm.metrics.snapshot()
    assert snapshot.count("upload_part", "ok") == 3  # 12 MiB in 5 MiB chunks
    assert snapshot.bytes_sent["upload_part"] >= 12 * MiB
    exposed = rsm.expose().decode()
    assert re.search(
        r'tierlog_objectstore_requests_total\{backend="gcs",operation="upload_part",'
        r'outcome="ok"\} 3\.0',
        exposed,
    ), exposed


def test_readme_documents_every_key() -> None:
    """Each key the RSM reads has a row in the README's tables, no row names a key that does
    not exist, and the common keys' defaults are the core's."""
    rows = dict(re.findall(r"^\| `([a-z0-9.]+)` \| ([^|]*) \|", README.read_text(), re.MULTILINE))
    every = {*GcsConfig.keys(), *(k.name for k in COMMON_KEYS)}
    assert not every - rows.keys(), f"README.md lacks rows for {sorted(every - rows.keys())}"
    assert not rows.keys() - every, f"README.md documents unknown {sorted(rows.keys() - every)}"
    wrong = {
        k.name: (rows[k.name], k.default)
        for k in COMMON_KEYS
        if rows[k.name].strip() != f"`{k.default}`"
    }
    assert not wrong, f"README.md's defaults differ from the core's: {wrong}"
