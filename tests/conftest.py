"""Fixtures every core test may use: the real Apache Kafka brokers of ``scripts/services``.

``kafka_broker`` (session, one per pytest worker; it runs Kafka's own tiered storage too),
``kafka_cluster`` (session, three nodes) and ``kafka_factory`` (private brokers) start only when
a test asks for them; see ``scripts/services/kafka_fixtures.py``.

Order: tests marked ``slow`` run first (``pytest_collection_modifyitems``). Under xdist
(``scripts/test``: ``-n 2 --dist loadgroup``) a worker takes the next test as it finishes one:
long tests started early overlap the short ones, while long tests left at the end of the
collection (``tests/test_doc_commands.py``, ``tests/test_bench_quick.py``) would keep one worker
busy after the other has run out of work.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_SCRIPTS = str(Path(__file__).resolve().parents[1] / "scripts")
if _SCRIPTS not in sys.path:
    sys.path.insert(0, _SCRIPTS)

from services.kafka_fixtures import kafka_broker, kafka_cluster, kafka_factory  # noqa: E402, F401
from services.spark_fixtures import (  # noqa: E402, F401
    spark_local,
    spark_sessions,
    spark_standalone,
    spark_standalone_cluster,
    spark_standalone_url,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` first, each group in its collected order (the sort is stable)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
