"""Fixtures of the ``gcs`` plugin's tests: a real fake-gcs-server per test session.

The server runs as a plain process (``scripts/services/fake_gcs.py``) with the memory backend
(the filesystem backend limits a path part to 255 bytes, which Kafka's longest topic names
exceed). Each pytest-xdist worker starts its own (a session fixture is per worker), and every
test writes under its own key prefix, so tests never see each other's objects. Fault tests that
kill the server start a private one (``private_fake_gcs``) and leave the shared one alone.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

_SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"
if str(_SCRIPTS) not in sys.path:
    sys.path.insert(0, str(_SCRIPTS))

from services._common import Service  # noqa: E402
from services.fake_gcs import create_bucket, start_fake_gcs  # noqa: E402

from gcs_test_helpers import BUCKET  # noqa: E402


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """fake-gcs-server on a free port, with bucket ``BUCKET``; stopped after the session."""
    service = start_fake_gcs(tmp_path_factory.mktemp("fake-gcs"), backend="memory")
    try:
        create_bucket(service, BUCKET)
        yield service
    finally:
        service.stop()


@pytest.fixture
def private_fake_gcs(tmp_path: Path) -> Iterator[Service]:
    """A fake-gcs-server of this test alone (fault tests kill and restart it)."""
    service = start_fake_gcs(tmp_path / "private-fake-gcs")
    try:
        create_bucket(service, BUCKET)
        yield service
    finally:
        service.stop()


@pytest.fixture
def key_prefix() -> str:
    """A key prefix no other test uses."""
    return f"tests/{uuid.uuid4().hex}/"
