"""tierlog's RemoteLogMetadataManager conformance suite through the ``topic`` plugin, on a real
Apache Kafka broker (the session's ``kafka_broker``).

The configuration is the plugin's own ``conformance_config()``, fed the broker's address through
``TIERLOG_KAFKA_BOOTSTRAP_SERVERS`` as a user running the suite against their cluster would:
a fresh topic per test (3 partitions, one replica), shared by the restarts of that test so that
a restart replays it. The topic is deleted after the test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from services._common import Service
from tierlog_rlmm_topic import BOOTSTRAP_SERVERS_ENV, TopicBasedRemoteLogMetadataManager
from tierlog_rlmm_topic.config import TOPIC_NAME

from tierlog.conformance import RemoteLogMetadataManagerSuite


class TestTopicBasedRemoteLogMetadataManager(RemoteLogMetadataManagerSuite):
    plugin_class = TopicBasedRemoteLogMetadataManager
    ready_timeout_s = 90.0
    write_timeout_s = 90.0

    @pytest.fixture
    def rlmm_config(
        self,
        kafka_broker: Service,
        monkeypatch: pytest.MonkeyPatch,
        delete_topics: list[str],
    ) -> Iterator[dict[str, str]]:
        """The plugin's own ``conformance_config()``, pointed at the session's broker."""
        monkeypatch.setenv(BOOTSTRAP_SERVERS_ENV, kafka_broker.url)
        config = TopicBasedRemoteLogMetadataManager.conformance_config()
        delete_topics.append(config[TOPIC_NAME])
        yield config
