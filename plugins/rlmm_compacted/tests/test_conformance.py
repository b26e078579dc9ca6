"""tierlog's RemoteLogMetadataManager conformance suite through the ``compacted`` plugin, on a
real Apache Kafka broker (the session's ``kafka_broker``), configured as a user would: the
plugin's own ``conformance_config()`` (``services.rlmm_suites.RlmmConformance``): a fresh
projection topic and audit topic per test (3 partitions, one replica), shared by the restarts
of that test so that a restart replays them, both deleted after the test. The projection topic
is created compacted (level 1: tombstones are written).

The plugin declares one capability unsupported (``conformance_capabilities()``):
``keeps_superseded_uploads``. Two COPY_SEGMENT_STARTED uploads ending at the same offset under
the same leader epoch share a key, and the later one supersedes the earlier (seed scenario 3);
the state machine's model forgets the superseded one too (also when a superseded upload is
added again: it takes its key back).

The suite's state machine runs as two tests of 25 runs each (``RlmmConformance``).
"""

from __future__ import annotations

from services.rlmm_suites import RlmmConformance
from tierlog_rlmm_compacted import CompactedRemoteLogMetadataManager


class TestCompactedRemoteLogMetadataManager(RlmmConformance):
    plugin_class = CompactedRemoteLogMetadataManager
