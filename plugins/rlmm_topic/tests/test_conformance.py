"""tierlog's RemoteLogMetadataManager conformance suite through the ``topic`` plugin, on a real
Apache Kafka broker (the session's ``kafka_broker``), configured as a user would: the plugin's
own ``conformance_config()`` (``services.rlmm_suites.RlmmConformance``): a fresh topic per test
(3 partitions, one replica), shared by the restarts of that test so that a restart replays it,
deleted after the test.

The suite's state machine runs as two tests of 25 runs each (``RlmmConformance``).
"""

from __future__ import annotations

from services.rlmm_suites import RlmmConformance
from tierlog_rlmm_topic import TopicBasedRemoteLogMetadataManager


class TestTopicBasedRemoteLogMetadataManager(RlmmConformance):
    plugin_class = TopicBasedRemoteLogMetadataManager
