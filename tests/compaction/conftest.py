"""The engines compaction tests run a round on: this process, Spark ``local[2]``, and a real
Spark standalone cluster (``scripts/services/spark_fixtures.py``; cluster tests share one
xdist group so one pytest worker starts the cluster)."""

from __future__ import annotations

import pytest
from services.spark_fixtures import LOCAL_MASTER, STANDALONE_GROUP

from tierlog.compaction.engine import CleanEngine, PythonEngine

ENGINES = [
    "python",
    pytest.param("spark-local", marks=pytest.mark.spark),
    pytest.param(
        "spark-standalone",
        marks=[pytest.mark.spark, pytest.mark.xdist_group(STANDALONE_GROUP)],
    ),
]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> CleanEngine:
    """A fresh engine of each kind (parametrized)."""
    if request.param == "python":
        return PythonEngine()
    from tierlog.compaction.spark_engine import SparkEngine

    sessions = request.getfixturevalue("spark_sessions")
    master = (
        request.getfixturevalue("spark_standalone_url")
        if request.param == "spark-standalone"
        else LOCAL_MASTER
    )
    return SparkEngine(sessions.get(master))
