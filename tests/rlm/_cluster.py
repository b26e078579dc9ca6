"""Several nodes of one partition, each a ``_harness.Harness``, sharing remote storage.

As in Kafka's tiered-storage integration tests, the nodes share one RSM (a ``LocalTieredStorage``
directory) and one RLMM instance (the metadata topic every broker reads), while each has its
own log directory, ``RemoteLogManager`` and index cache. Replication is what a follower's
``ReplicaFetcherThread`` does: read the leader's log from the follower's log end offset
(``log_end`` isolation) and ``append_as_follower``; a follower whose fetch offset is only in
remote storage is bootstrapped as Kafka's ``TierStateMachine`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager
from tierlog.spi import RemoteStorageManager

from ._harness import Clock, Harness


class Cluster:
    """Nodes ``0..n-1`` of partition ``topic-0`` on one clock, sharing ``rsm`` and ``rlmm``."""

    def __init__(
        self,
        root: Path,
        *,
        nodes: int = 2,
        topic: Mapping[str, object] | None = None,
        rlm: Mapping[str, object] | None = None,
        rsm: RemoteStorageManager | None = None,
        rlmm: EmbeddedRemoteLogMetadataManager | None = None,
    ) -> None:
        self.root = root
        self.clock = Clock()
        self._topic = topic
        self._rlm = rlm
        first = Harness(root, clock=self.clock, topic=topic, rlm=rlm, rsm=rsm, rlmm=rlmm)
        self.rsm = first.rsm
        self.rlmm = first.rlmm
        self.nodes = [first]
        for _ in range(1, nodes):
            self.add_node()

    def add_node(self) -> Harness:
        """A new node with an empty log (a replica added by a reassignment)."""
        node = Harness(
            self.root,
            clock=self.clock,
            topic=self._topic,
            rlm=self._rlm,
            rsm=self.rsm,
            rlmm=self.rlmm,
            broker_id=len(self.nodes),
        )
        self.nodes.append(node)
        return node

    @staticmethod
    def follow(node: Harness) -> None:
        """``node`` becomes a follower (its RLM schedules a follower task)."""
        node.rlm.on_leadership_change([], [node.log])

    @staticmethod
    def replicate(leader: Harness, follower: Harness, *, max_bytes: int = 1) -> int:
        """Fetch from ``leader`` until ``follower`` has its log end; returns the offsets added.

        ``max_bytes=1`` fetches one batch at a time, so the follower rolls its segments where
        the leader did (both roll on ``segment.bytes`` before an append). The leader raises
        ``OffsetMovedToTieredStorageError`` when the follower's offset is only remote. The
        follower's log start offset follows the leader's, as it does from fetch responses.
        """
        start = follower.log.log_end_offset
        while follower.log.log_end_offset < leader.log.log_end_offset:
            info = leader.log.read(follower.log.log_end_offset, max_bytes, "log_end")
            assert info.records, "the leader returned nothing below its log end"
            follower.log.append_as_follower(info.records, leader.epoch)
        follower.epoch = leader.epoch
        # A fetch response carries the leader's log start offset (DeleteRecords, retention).
        leader_start = min(leader.log.log_start_offset, follower.log.high_watermark)
        follower.log.maybe_increment_log_start_offset(leader_start, "leader offset increment")
        return follower.log.log_end_offset - start

    @staticmethod
    def bootstrap_from_remote(leader: Harness, follower: Harness) -> int:
        """Kafka's ``TierStateMachine.start``: the follower's offset moved to tiered storage, so
        it rebuilds its state up to the leader's local log start from the remote segment
        before it, and fetches from there. Returns the follower's new fetch offset."""
        local_start = leader.log.local_log_start_offset
        previous = local_start - 1
        epoch = leader.log.leader_epoch_cache.epoch_for_offset(local_start)
        assert epoch is not None
        target_epoch = epoch
        if epoch != 0:
            # OffsetsForLeaderEpoch(epoch - 1): the epoch (and end) before the local start's.
            earlier = leader.log.end_offset_for_epoch(epoch - 1)
            if earlier is not None and earlier[0] > previous:
                target_epoch = earlier[1]
        return follower.rlm.build_remote_log_aux_state(
            follower.log,
            target_epoch=target_epoch,
            leader_local_log_start_offset=local_start,
            leader_log_start_offset=leader.log.log_start_offset,
        )

    def close(self) -> None:
        for node in self.nodes:
            node.rlm.close()
            node.log.close()
        self.rsm.close()
        self.rlmm.close()
