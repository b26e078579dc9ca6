"""Fixtures of the ``azure`` plugin's tests: a real Azurite per test session.

Azurite (Microsoft's Azure Storage emulator, an npm package installed by
``npm ci --prefix plugins/rsm_azure``) runs as a plain process (``scripts/services/azurite.py``).
Each pytest-xdist worker starts its own (a session fixture is per worker), and every test writes
under its own key prefix, so tests never see each other's objects. The fault tests, which kill
the server, start their own (``test_azure_faults.py``) and leave the shared one alone.

Without Azurite installed the tests that need it are skipped with the command to install it,
except in CI (``CI=true``), where a missing emulator is a failure: CI must never pass by
skipping the real-server tests.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# The helpers module next to this file, and scripts/ (the service launchers), whatever pytest's
# import mode.
for _path in (Path(__file__).resolve().parent, Path(__file__).resolve().parents[3] / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from services._common import Service  # noqa: E402
from services.azurite import create_container, start_azurite  # noqa: E402

from azure_helpers import CONTAINER, require_azurite  # noqa: E402


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """Azurite on a free port, with container ``CONTAINER``; stopped after the session."""
    require_azurite()
    service = start_azurite(tmp_path_factory.mktemp("azurite"))
    try:
        create_container(service, CONTAINER)
        yield service
    finally:
        service.stop()


@pytest.fixture
def key_prefix() -> str:
    """A key prefix no other test uses."""
    return f"tests/{uuid.uuid4().hex}/"
