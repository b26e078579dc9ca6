"""pytest fixtures of Apache Spark (``tierlog[spark]``): a local session and a real standalone
cluster, for the compaction tests. ``tests/conftest.py`` imports them by name::

    from services.spark_fixtures import (
        spark_local, spark_sessions, spark_standalone, spark_standalone_cluster,
        spark_standalone_url,
    )

- ``spark_local`` (function): the session of this pytest worker on ``local[2]``.
- ``spark_standalone`` (function): the session of this pytest worker on the standalone cluster.
- ``spark_standalone_cluster`` (session): a master and one worker (2 cores, 2 GiB) started from
  the pyspark package (``services.spark``); ``spark_standalone_url`` (session) is its
  ``spark://127.0.0.1:PORT``. Kill tests reach the daemons' processes through the cluster.
- ``spark_sessions`` (session): what the two session fixtures share, ``.get(master)`` for any
  other master.

**One session per process.** Spark runs one ``SparkContext`` per Python process (pyspark's JVM
holds it): a worker cannot have a local session and one on the cluster at once, and
``getOrCreate`` would hand back the running one whatever master was asked for. So there is one
session per pytest worker, held by ``spark_sessions``, and a test that needs another master
switches it: the running session is stopped and one on the new master starts in the same JVM
(0.5-1 s; the first session of a worker starts the JVM, 10-15 s on two busy cores). That is
why ``spark_local`` and ``spark_standalone`` are function-scoped: a session object kept by a
module- or session-scoped fixture would be a stopped one after a switch. A fixture with a wider
scope asks ``spark_sessions`` (session-scoped) inside each use instead of keeping a session.
A test that stops the session (``session.stop()``, ``stop_spark_session()``) is fine too: the
next test gets a new one.

**Tests on the cluster** are marked ``@pytest.mark.xdist_group("spark_standalone")``
(``STANDALONE_GROUP``). ``scripts/test`` runs pytest-xdist with ``--dist loadgroup``, which
sends a group to one worker as one block: one worker starts the cluster, runs those tests one
after the other on one switch of its session, and switches back at most once; the other workers
never start a cluster. Without the mark every worker that meets such a test starts its own
cluster, which works but costs a cluster (three JVMs) per worker.

Test settings, not tierlog's defaults: ``-XX:+UseSerialGC -XX:TieredStopAtLevel=1`` for the
driver and executors (about half the JVM's start-up CPU; they would slow a benchmark's heavy
JVM work about twice), 4 shuffle partitions, Spark's SQL warehouse directory under pytest's
temporary directory. JVM options only take effect when a worker's JVM starts, i.e.
with its first session.

A missing pyspark or Java fails these fixtures with the reason (``SparkUnavailableError``):
Spark tests are never skipped for want of Spark.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

from services.spark import SparkCluster, start_spark_cluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tierlog.compaction.spark_session import SparkSettings

__all__ = [
    "LOCAL_MASTER",
    "STANDALONE_GROUP",
    "TEST_JAVA_OPTIONS",
    "SparkSessions",
    "spark_local",
    "spark_sessions",
    "spark_standalone",
    "spark_standalone_cluster",
    "spark_standalone_url",
]

LOCAL_MASTER: Final = "local[2]"
STANDALONE_GROUP: Final = "spark_standalone"
TEST_JAVA_OPTIONS: Final = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


class SparkSessions:
    """The one Spark session of this process, on whichever master the last caller asked for."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._session: SparkSession | None = None
        self.starts = 0
        """Sessions started so far (each switch of master starts one)."""

    def settings(self, master: str) -> SparkSettings:
        """tierlog's settings for a test session on ``master`` (see the module's docstring)."""
        from tierlog.compaction.spark_session import SparkSettings

        return SparkSettings(
            master=master,
            app_name="tierlog-tests",
            conf={
                "spark.driver.extraJavaOptions": TEST_JAVA_OPTIONS,
                "spark.executor.extraJavaOptions": TEST_JAVA_OPTIONS,
                "spark.sql.shuffle.partitions": "4",
                "spark.sql.warehouse.dir": str(self._directory / "warehouse"),
            },
        )

    @property
    def master(self) -> str | None:
        """The master of the running session, ``None`` when none runs."""
        from pyspark import SparkContext

        context = SparkContext._active_spark_context
        return None if context is None else context.master

    def get(self, master: str) -> SparkSession:
        """A running session on ``master``: the current one, or a new one after stopping
        whatever session runs (on another master, or not started here)."""
        from pyspark import SparkContext

        from tierlog.compaction.spark_session import spark_session, stop_spark_session

        context = SparkContext._active_spark_context
        session = self._session
        if (
            session is not None
            and context is not None
            and session.sparkContext is context
            and context.master == master
        ):
            return session
        self._session = None
        stop_spark_session()
        self._session = spark_session(self.settings(master))
        self.starts += 1
        return self._session

    def stop(self) -> None:
        """Stop the running session, if any (the JVM stays for the next one)."""
        from tierlog.compaction.spark_session import stop_spark_session

        self._session = None
        stop_spark_session()


@pytest.fixture(scope="session")
def spark_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSessions]:
    """This pytest worker's Spark session, on the master a test asks for."""
    sessions = SparkSessions(tmp_path_factory.mktemp("spark"))
    yield sessions
    sessions.stop()


@pytest.fixture
def spark_local(spark_sessions: SparkSessions) -> SparkSession:
    """A session on ``local[2]`` (this worker's, switched back from the cluster if needed)."""
    return spark_sessions.get(LOCAL_MASTER)


@pytest.fixture(scope="session")
def spark_standalone_cluster(
    tmp_path_factory: pytest.TempPathFactory, spark_sessions: SparkSessions
) -> Iterator[SparkCluster]:
    """A standalone master and one worker (2 cores, 2 GiB for executors) on loopback; tests
    using it share ``xdist_group(STANDALONE_GROUP)``."""
    cluster = start_spark_cluster(tmp_path_factory.mktemp("spark-cluster"))
    yield cluster
    if spark_sessions.master == cluster.url:
        spark_sessions.stop()
    cluster.stop()


@pytest.fixture(scope="session")
def spark_standalone_url(spark_standalone_cluster: SparkCluster) -> str:
    """The cluster's master URL, ``spark://127.0.0.1:PORT``."""
    return spark_standalone_cluster.url


@pytest.fixture
def spark_standalone(spark_sessions: SparkSessions, spark_standalone_url: str) -> SparkSession:
    """A session on the standalone cluster (this worker's session, switched to it)."""
    return spark_sessions.get(spark_standalone_url)
