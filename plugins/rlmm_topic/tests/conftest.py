"""The topic RLMM's fixtures: those both Kafka-topic RLMM plugins' suites share
(``services.rlmm_fixtures``: the real Apache Kafka brokers of ``services.kafka_fixtures``, topics
of a test's own, nodes), and ``rlmm_plugin``, this plugin as they and the shared tests
(``services.rlmm_suites``) see it.

The session's ``kafka_broker`` also runs Kafka's own tiered storage, with its own 5-partition
``__remote_log_metadata``: the tests here always use metadata topics of their own. Under xdist
every worker starts its own broker.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The shared service launchers (<repo>/scripts/services), importable whatever pytest's import mode.
_SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"
if str(_SCRIPTS) not in sys.path:
    sys.path.insert(0, str(_SCRIPTS))

from services.rlmm_faults import PluginUnderTest  # noqa: E402
from services.rlmm_fixtures import *  # noqa: E402, F403 (the shared fixtures: its __all__)
from tierlog_rlmm_topic import TopicBasedRemoteLogMetadataManager  # noqa: E402


@pytest.fixture(scope="session")
def rlmm_plugin() -> PluginUnderTest:
    """The topic RLMM: one metadata topic, its records read back as they are."""
    return PluginUnderTest("topic", TopicBasedRemoteLogMetadataManager, "topic RLMM")
