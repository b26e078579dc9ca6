"""Fault tests of the ``topic`` RLMM against real Apache Kafka 4.3.1 brokers (issue 11, section 4).

They are the shared ones (``services.rlmm_suites.RlmmFaultSuite``, run on the compacted RLMM
too): the broker restarted during writes, within and past the producer's delivery timeout; a
node restarted on a history of several epochs, overlapping copies, deletions, invalid
transitions and partition deletions; the metadata partition's leader moved and stopped in the
three-node cluster (replication factor 3, ``min.insync.replicas`` 2); a follower node converging
to the leader node. The topic RLMM's topic is checked as it is: every record Kafka's legacy
format with a null key (``services.rlmm_faults.read_legacy_topic``).
"""

from __future__ import annotations

from services.rlmm_suites import RlmmFaultSuite


class TestFaults(RlmmFaultSuite):
    """The shared fault tests on the topic RLMM (``rlmm_plugin`` in ``conftest.py``)."""
