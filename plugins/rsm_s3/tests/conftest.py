"""A real S3 server for the plugin's tests: SeaweedFS (``weed mini``), once per test session.

The server runs with an S3 identity (``SeaweedCredentials``), so wrong keys are refused as on
Amazon S3 and the bad-credentials messages can be tested against it. Each test gets a bucket
of its own (``bucket``), and ``s3_admin`` inspects the server independently of the code under
test. Tests that kill or throttle a server start their own (``private_seaweedfs``), so the
shared one stays healthy for the others.

The launcher lives in ``<repo>/scripts/services/seaweedfs.py``, shared with the benchmarks.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# The shared service launchers (<repo>/scripts/services) and this directory's helpers, importable
# whatever pytest's import mode.
for _path in (Path(__file__).resolve().parents[3] / "scripts", Path(__file__).resolve().parent):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from _s3_support import CREDENTIALS, PrivateServers, new_bucket_name, stop  # noqa: E402
from services._common import Service  # noqa: E402
from services.seaweedfs import (  # noqa: E402
    create_bucket,
    s3_client,
    start_seaweedfs,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The session's SeaweedFS, with authentication (``CREDENTIALS``)."""
    service = start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"), credentials=CREDENTIALS)
    yield service
    stop(service)


@pytest.fixture(scope="session")
def s3_admin(seaweedfs: Service) -> S3Client:
    """A plain boto3 client of the session's server: set-up and independent inspection."""
    return s3_client(seaweedfs)


@pytest.fixture(scope="session")
def shared_bucket(seaweedfs: Service) -> str:
    """One bucket for the whole session: tests that share it write under a key prefix of
    their own. SeaweedFS allocates volumes for each new bucket (about a second), so a bucket
    per test would dominate the run."""
    name = new_bucket_name()
    create_bucket(seaweedfs, name)
    return name


@pytest.fixture
def bucket(seaweedfs: Service) -> str:
    """A new, empty bucket on the session's server, for tests that look at a whole bucket."""
    name = new_bucket_name()
    create_bucket(seaweedfs, name)
    return name


@pytest.fixture
def private_seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateServers]:
    """Starts servers of the test's own; all stopped after it, whatever happened."""
    servers = PrivateServers(tmp_path_factory)
    yield servers
    servers.stop_all()
