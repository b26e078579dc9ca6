"""Interoperability tests against a real Apache Kafka 4.3.1 broker (Kafka's own tiered storage).

The broker is ``services.kafka_fixtures.kafka_broker`` (one per pytest worker, session scope):
Kafka's ``LocalTieredStorage`` under ``kafka_broker.extra["tiered_storage"]`` and Kafka's
``TopicBasedRemoteLogMetadataManager`` on 5 partitions of ``__remote_log_metadata``; its log
directory is ``kafka_broker.directory / "data"``. Kafka's own tools (``DumpLogSegments``, the
console consumer with Kafka's formatters) run from the same jars. Nothing here is skipped for
want of a broker: a missing Java or Maven fails the fixture with the reason.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The shared service launchers (<repo>/scripts/services) and this directory's helpers, importable
# whatever pytest's import mode.
for _path in (Path(__file__).resolve().parents[2] / "scripts", Path(__file__).resolve().parent):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from services.kafka_fixtures import kafka_broker  # noqa: E402, F401
