"""tierlog's RemoteLogMetadataManager conformance suite through the ``compacted`` plugin, on a
real Apache Kafka broker (the session's ``kafka_broker``).

The configuration is the plugin's own ``conformance_config()``, fed the broker's address through
``TIERLOG_KAFKA_BOOTSTRAP_SERVERS`` as a user running the suite against their cluster would: a
fresh projection topic and audit topic per test (3 partitions, one replica), shared by the
restarts of that test so that a restart replays them. The projection topic is created
compacted (level 1: tombstones are written). Both topics are deleted after the test.

The plugin declares one capability unsupported (``conformance_capabilities()``):
``keeps_superseded_uploads``. Two COPY_SEGMENT_STARTED uploads ending at the same offset under
the same leader epoch share a key, and the later one supersedes the earlier (seed scenario 3);
the state machine's model forgets the superseded one too (also when a superseded upload is
added again: it takes its key back).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from services._common import Service
from tierlog_rlmm_compacted import CompactedRemoteLogMetadataManager
from tierlog_rlmm_compacted.config import AUDIT_TOPIC_NAME
from tierlog_rlmm_topic import BOOTSTRAP_SERVERS_ENV
from tierlog_rlmm_topic.config import TOPIC_NAME

from tierlog.conformance import RemoteLogMetadataManagerSuite


class TestCompactedRemoteLogMetadataManager(RemoteLogMetadataManagerSuite):
    plugin_class = CompactedRemoteLogMetadataManager
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
        config = CompactedRemoteLogMetadataManager.conformance_config()
        delete_topics.extend((config[TOPIC_NAME], config[AUDIT_TOPIC_NAME]))
        yield config
