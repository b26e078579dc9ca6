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

The suite's state machine (50 random runs of 30 steps by default) is the longest test of the
plugin's suite (~5 min on the real broker: a run restarts the node many times, and every node
initializes its transactional producer). It runs here as two tests of 25 runs each, each
drawing random examples of its own (``test_state_machine``, ``test_state_machine_again``): the
same 50 runs, which two xdist workers can share instead of one worker spending 5 min on them.
"""

from __future__ import annotations

from collections.abc import Callable

from services.rlmm_suites import RlmmConformance
from tierlog_rlmm_compacted import CompactedRemoteLogMetadataManager

from tierlog.conformance.rlmm_suite import (
    RemoteLogMetadataManagerCapabilities,
    RemoteLogMetadataManagerHarness,
)


class TestCompactedRemoteLogMetadataManager(RlmmConformance):
    plugin_class = CompactedRemoteLogMetadataManager
    state_machine_max_examples = 25
    """Half the suite's default (50) per test: ``test_state_machine`` and
    ``test_state_machine_again`` run 25 each, 50 in all (see the module docstring)."""

    def test_state_machine_again(
        self,
        rlmm_factory: Callable[[], RemoteLogMetadataManagerHarness],
        rlmm_capabilities: RemoteLogMetadataManagerCapabilities,
    ) -> None:
        """The suite's ``test_state_machine`` once more, on topics of its own and with random
        examples of its own: the second half of the suite's 50 runs."""
        self.test_state_machine(rlmm_factory, rlmm_capabilities)
