"""Fixtures every core test may use: the real Apache Kafka brokers of ``scripts/services``.

``kafka_broker`` (session, one per pytest worker; it runs Kafka's own tiered storage too),
``kafka_cluster`` (session, three nodes) and ``kafka_factory`` (private brokers) start only when
a test asks for them; see ``scripts/services/kafka_fixtures.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

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
