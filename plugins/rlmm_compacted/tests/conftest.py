"""The compacted RLMM's fixtures: those both Kafka-topic RLMM plugins' suites share
(``services.rlmm_fixtures``: the real Apache Kafka brokers of ``services.kafka_fixtures``, topics
of a test's own, nodes), ``rlmm_plugin``, this plugin as they and the shared tests
(``services.rlmm_suites``) see it, and ``audit_topic_name``.

The session's ``kafka_broker`` also runs Kafka's own tiered storage, with Kafka's
TopicBasedRemoteLogMetadataManager on its own 5-partition ``__remote_log_metadata``: the tests
here use projection and audit topics of their own, except those about Kafka readers of that
topic. Under xdist every worker starts its own broker.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The shared service launchers (<repo>/scripts/services), importable whatever pytest's import mode.
_SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"
if str(_SCRIPTS) not in sys.path:
    sys.path.insert(0, str(_SCRIPTS))

from _fault_support import AUDIT_SUFFIX, audit_history  # noqa: E402
from services.rlmm_faults import PluginUnderTest  # noqa: E402
from services.rlmm_fixtures import *  # noqa: E402, F403 (the shared fixtures: its __all__)
from tierlog_rlmm_compacted import CompactedRemoteLogMetadataManager  # noqa: E402
from tierlog_rlmm_compacted.config import AUDIT_TOPIC_NAME  # noqa: E402


@pytest.fixture(scope="session")
def rlmm_plugin() -> PluginUnderTest:
    """The compacted RLMM: a projection topic and its audit topic (its name and
    ``AUDIT_SUFFIX``); its legacy history is the audit topic, once the projection agrees with
    it."""
    return PluginUnderTest(
        "compacted",
        CompactedRemoteLogMetadataManager,
        "compacted RLMM",
        companion_topics={AUDIT_TOPIC_NAME: AUDIT_SUFFIX},
        legacy_records=audit_history,
    )


@pytest.fixture
def audit_topic_name(topic_name: str) -> str:
    """The audit topic of the test's projection topic."""
    return topic_name + AUDIT_SUFFIX
