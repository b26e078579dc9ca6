"""Tests shared by the two Kafka-topic RLMM plugins (``plugins/rlmm_topic``,
``plugins/rlmm_compacted``): written once here, run by each plugin's own suite on itself.

Each class is a base a plugin's test module subclasses once (as a third party opts in to
``tierlog.conformance``)::

    class TestFaults(RlmmFaultSuite):
        '''The shared fault tests on this plugin.'''

The plugin under test is the ``rlmm_plugin`` fixture of the plugin's ``conftest.py`` (a
``services.rlmm_faults.PluginUnderTest``), which the fixtures of ``services.rlmm_fixtures`` use
too. What differs between the plugins is declared on the subclass: class attributes for what
parametrises a test (``RlmmFaultSuite.outages``, ``RlmmConfigSuite.bad_values``), hook methods
for the checks only one plugin has (``check_history``, ``check_converged``, ``check_replayed``:
the compacted RLMM's tombstones, projection keys and compaction level). None of these classes
is named ``Test*``, so importing one collects nothing: each shared test runs once per plugin,
in that plugin's suite.

- ``RlmmFaultSuite``: a broker restarted during writes, a node restarted on a history, the
  metadata partitions' leader moved and stopped in the three-node cluster, a follower node
  converging to the leader node.
- ``RlmmManagerSuite``: registration, the conformance configuration, read-your-writes, replay
  by a second node, lifecycle errors.
- ``RlmmConfigSuite``: the configuration (no broker): documented keys, refused values named by
  key, unknown keys, secrets, errors naming the plugin.
- ``RlmmConformance``: tierlog's conformance suite on the session's broker, configured as a
  user would (the plugin's ``conformance_config()``).

Waits are on conditions with generous deadlines; no sleep is an assertion and no timing is
asserted.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from tierlog_rlmm_topic import BOOTSTRAP_SERVERS_ENV, ConsumeTimeoutError
from tierlog_rlmm_topic.config import CONSUME_STALL_TIMEOUT_MS, CONSUME_WAIT_MS

from services._common import Service
from services.kafka import KafkaCluster, restart_kafka, start_again, stop_kafka
from services.rlmm_faults import (
    ANY_TIME,
    DEADLINE_S,
    HISTORY_EPOCHS,
    RESTART_DEADLINE_S,
    Call,
    History,
    Layout,
    Nodes,
    PluginUnderTest,
    Writer,
    assert_same_view,
    assert_writes_applied,
    assign,
    cache_view,
    check_stream,
    diff_views,
    done,
    elect_preferred,
    history_tips,
    listed_by_id,
    offsets_of,
    padding_tips,
    partition_state,
    private_topic,
    reassign,
    sorted_segments,
    wait_gone,
    wait_state,
    wait_until,
    write_history,
    write_padding,
)
from tierlog.conformance import RemoteLogMetadataManagerSuite
from tierlog.conformance.rlmm_suite import (
    DELETE_FINISHED,
    DELETE_STARTED,
    FINISHED,
    STARTED,
    RemoteLogMetadataManagerCapabilities,
    RemoteLogMetadataManagerHarness,
    new_partition,
    segment,
    update_of,
)
from tierlog.metadata import metadata_partition
from tierlog.spi import (
    ConfigError,
    IllegalStateError,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    TopicIdPartition,
)
from tierlog.spi.plugins import get_registry

__all__ = [
    "Node",
    "RlmmConfigSuite",
    "RlmmConformance",
    "RlmmFaultSuite",
    "RlmmManagerSuite",
    "Tips",
]

Node = RemoteLogMetadataManager
Tips = Sequence[TopicIdPartition]
Opened = list[Node]
Factory = Callable[..., Any]
SERVERS = "remote.log.metadata.common.client.bootstrap.servers"
CLUSTER_GROUP = pytest.mark.xdist_group("kafka_cluster")
"""The tests on the session's three-node cluster share one xdist worker (one cluster)."""
SHORT_DELIVERY_TIMEOUT_MS = 30_000


# Faults ------------------------------------------------------------------------------------------
def lost_brokers(call: Call) -> bool:
    """Whether ``call`` failed because the plugin replaced a client that had lost every broker
    (librdkafka#5301), retriably."""
    return isinstance(call.error, RemoteStorageException) and "librdkafka#5301" in str(call.error)


def held_by_the_broker(call: Call) -> bool:
    """Whether ``call`` timed out waiting for its record although the consumer had read all the
    broker let it read: the broker held the committed record back behind an open transaction
    (after a restart of the only broker, SIGKILL or SIGTERM, Kafka 4.3.1 left the records a
    transaction had on one partition without their commit marker until the producer's next
    commit there; in a controlled shutdown its coordinator logs that it found no leader for
    some of the transaction's partitions and skips its transaction-log write)."""
    error = call.error
    return (
        isinstance(error, ConsumeTimeoutError)
        and error.readable_end is not None
        and error.position == error.readable_end
    )


class RlmmFaultSuite:
    """Fault tests of a Kafka-topic RLMM against real Apache Kafka 4.3.1 brokers (issue 11,
    section 4; issue 13 for the compacted RLMM, whose writes are Kafka transactions):

    - the broker restarted (SIGTERM, SIGKILL) while a stream of writes is in flight, for an
      outage shorter than the producer's delivery timeout and one longer: no acknowledged
      write lost, nothing written twice, writes after the restart succeed, the plugin's topics
      consistent (``PluginUnderTest.legacy_records``), a fresh node's replay equal to the
      writer's cache;
    - a node closed and a new one started with the same node id: it replays the same cache
      from a history of several epochs, overlapping copies, deletions, invalid transitions
      and partition deletions, keeps writing, and replays it again after a stop and
      re-assignment;
    - in the three-node cluster (topics with replication factor 3, ``min.insync.replicas`` 2):
      the leader of the metadata partitions moved during writes (reassignment and preferred
      election), and stopped and started again;
    - two nodes, leader and follower of the same user partitions: the follower converges to
      the leader's cache.

    Every test uses topics of its own.
    """

    outages: ClassVar[Sequence[Any]] = (
        pytest.param("brief", id="outage-within-delivery-timeout"),
        pytest.param("past-delivery-timeout", id="outage-past-delivery-timeout"),
    )
    """The ``outage`` parameters of ``test_broker_restarted_during_writes`` (a subclass may
    mark one)."""

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "outage" in metafunc.fixturenames:
            metafunc.parametrize("outage", self.outages)

    # Hooks ---------------------------------------------------------------------------------------
    def check_history(self, rlmm: Node, nodes: Nodes, tips: Mapping[str, TopicIdPartition]) -> None:
        """What the plugin's topics must show once ``write_history`` wrote ``tips``' history
        through ``rlmm`` (nothing more by default)."""

    def check_converged(self, leader: Node, follower: Node, nodes: Nodes, tips: Tips) -> None:
        """What else must agree once the follower node answers every read as the leader node
        (nothing more by default)."""

    # 1. The broker restarted during writes -------------------------------------------------------
    @pytest.mark.slow
    @pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
    def test_broker_restarted_during_writes(
        self,
        rlmm_plugin: PluginUnderTest,
        kafka_factory: Callable[..., Service],
        opened: Opened,
        kill: bool,
        outage: str,
    ) -> None:
        """A private broker (the transaction coordinator too) is stopped (SIGTERM: controlled
        shutdown; SIGKILL: no shutdown at all) and started again on the same data while four
        threads write segment lifecycles.

        ``brief``: the producer keeps librdkafka's delivery timeout (300 s), longer than the
        restart: every call must wait the broker out and succeed (issue 11: "a broker that goes
        away and comes back is waited for"), but for one librdkafka failure: a client can lose
        every broker for good when the restarted broker answers a metadata request before it
        lists itself (librdkafka#5301). A plugin then replaces the client; the calls of a
        transaction the lost producer could not end fail retriably, saying so (and naming the
        librdkafka issue). And after the restart (SIGKILL or SIGTERM), Kafka 4.3.1 was seen to
        leave the records of a transaction it had acknowledged without their commit marker on
        one partition (its last stable offset stuck there until the producer's next commit on
        that partition): a call then times out although its consumer read all the broker let
        it read
        (``ConsumeTimeoutError`` with ``position == readable_end``). Those two alone are
        excused, in both outages, and the calls after them must succeed.
        ``past-delivery-timeout``: with ``delivery.timeout.ms`` = 30 s, the broker stays down
        until a write has failed: failures must be ``RemoteStorageException``s (never a hang),
        and every call issued once the broker is back must succeed: a failed (for the
        compacted RLMM: aborted or timed-out transactional) write must not leave the producer
        unusable.

        The producer must not write any record twice, although its requests in flight are
        retried through the restart. A failed call is never repeated by the writer (the RLM's
        copy task starts over with a new segment id), so a record appearing twice could only
        come from the producer's own retries (or a transaction retried after it committed):
        Kafka semantics allow none. A failed call's record may still be in the topic ("possibly
        persisted" after a timeout): it is then applied like any other, and the caches must
        show it.
        """
        broker = kafka_factory()
        extra = (
            {}
            if outage == "brief"
            else {
                "remote.log.metadata.producer.delivery.timeout.ms": str(SHORT_DELIVERY_TIMEOUT_MS)
            }
        )
        nodes = Nodes(rlmm_plugin, broker.url, private_topic(rlmm_plugin), opened, extra)

        def excused(call: Call) -> bool:
            return lost_brokers(call) or held_by_the_broker(call)

        rlmm = nodes.open(1)
        tips = [new_partition(f"restart-{i}", i) for i in range(4)]
        assign(rlmm, tips)
        writer = Writer(rlmm, tips).start()
        try:
            writer.wait_acked(10, "writes before the restart", timeout=DEADLINE_S)
            if outage == "brief":
                restart_kafka(broker, kill=kill, timeout=RESTART_DEADLINE_S)
            else:
                if kill:
                    broker.kill()
                else:
                    stop_kafka(broker)
                writer.wait_failed(
                    "a write failing while the broker is down", timeout=RESTART_DEADLINE_S
                )
                start_again(broker, timeout=RESTART_DEADLINE_S)
            back = time.monotonic()
            writer.wait_acked(
                20,
                "writes issued after the broker is back",
                issued_after=back,
                timeout=RESTART_DEADLINE_S,
                no_failure_after=ANY_TIME if outage == "brief" else back,
                excused=excused,
            )
        finally:
            writer.stop()

        spanned = [
            c for c in writer.snapshot() if c.issued_at < back and (c.finished_at or 0.0) >= back
        ]
        assert spanned, "no call was in flight through the restart: the test exercised nothing"
        failed = writer.failed()
        wrong = [c for c in failed if not isinstance(c.error, RemoteStorageException)]
        assert not wrong, f"calls failed with errors outside RemoteStorageException: {wrong}"
        if outage == "brief":
            unexcused = [c for c in failed if not excused(c)]
            assert not unexcused, (
                f"{len(unexcused)} calls failed although the broker was back before the "
                f"delivery timeout: {unexcused[:10]}"
            )
        else:
            late = [c for c in failed if c.issued_at >= back and not excused(c)]
            assert not late, f"calls issued after the broker was back failed: {late[:10]}"
        check_stream(nodes, writer, rlmm)

    # 2. A node restarted and re-assigned ---------------------------------------------------------
    def test_a_restarted_node_replays_the_same_cache(self, nodes: Nodes) -> None:
        """Close a node and start a new one on the same topics with the same node id (for the
        compacted RLMM the same ``transactional.id``: the new producer fences the old one),
        assign it the same partitions: every read answers exactly as the old node's did, at
        readiness already: listings with and without epoch, highest offset and size per epoch,
        lookups and next-transaction-index lookups at every segment bound, readiness. Then it
        keeps writing (the copy in progress finishes: read-your-writes works on the replayed
        state), refuses writes to the deleted partition like the old node, and a stop and
        re-assignment of its partitions (as a follower) replays the same cache again."""
        tips = history_tips()
        padding = padding_tips()
        alive = [*padding, *(tip for name, tip in tips.items() if name != "gone")]
        old = nodes.open(1)
        assign(old, [*tips.values(), *padding])
        write_padding(old, padding)
        history = History(old)
        write_history(history, tips, keeps_superseded_uploads=nodes.plugin.keeps_superseded_uploads)
        self.check_history(old, nodes, tips)
        offsets = offsets_of(history.added)
        before = cache_view(old, tips.values(), HISTORY_EPOCHS, offsets)
        # The history did what it is meant to: the views compare non-trivial states.
        assert before[(tips["gone"], "list")] == ("raises", "RemoteResourceNotFoundException")
        assert before[(tips["gone"], "is_ready")] is False
        # b, replaced by c, is still listed; a superseded upload is not.
        assert len(before[(tips["multi"], "list")][1]) == 7
        assert [m.start_offset for m in before[(tips["deleting"], "list")][1]] == [100, 200]
        assert before[(tips["deleting"], "highest", 0)] == ("returns", 199)
        assert before[(tips["marked"], "lookup", 0, 49)][1] is not None
        with pytest.raises(RemoteResourceNotFoundException):
            old.add_remote_log_segment_metadata(segment(tips["gone"], 200, 299, {0: 200}))
        old.close()

        new = nodes.open(1)
        new.on_partition_leadership_changes({*alive, tips["gone"]}, set())
        wait_until(lambda: all(new.is_ready(tip) for tip in alive), "readiness", interval=0.005)
        # At readiness already, not only once the replay is over.
        at_ready = {tip: sorted_segments(new, tip) for tip in tips.values() if tip in alive}
        assert at_ready == {tip: before[(tip, "list")][1] for tip in at_ready}, (
            "the restarted node was ready before it had replayed the history"
        )
        wait_gone(new, tips["gone"])
        after = cache_view(new, tips.values(), HISTORY_EPOCHS, offsets)
        assert_same_view(before, after, "the restarted node's replay against the old node")
        with pytest.raises(RemoteResourceNotFoundException):
            new.add_remote_log_segment_metadata(segment(tips["gone"], 200, 299, {0: 200}))

        # The replayed node writes on: the copy in progress finishes.
        listed = new.list_remote_log_segments(tips["multi"])
        (in_progress,) = [m for m in listed if m.state is STARTED]
        History(new).update(in_progress, FINISHED, epoch=2)
        assert new.remote_log_segment_metadata(tips["multi"], 2, 400) is not None
        final = cache_view(new, tips.values(), HISTORY_EPOCHS, offsets)

        # Stopped and assigned again (as a follower this time): the same cache once more.
        new.on_stop_partitions({*tips.values(), *padding})
        assert not any(new.is_ready(tip) for tip in tips.values())
        assign(new, alive, follower=True)
        new.on_partition_leadership_changes(set(), {tips["gone"]})
        wait_gone(new, tips["gone"])
        assert_same_view(
            final,
            cache_view(new, tips.values(), HISTORY_EPOCHS, offsets),
            "the node's replay after a stop and re-assignment",
        )

    # 3. The metadata partitions' leader moved in the three-node cluster --------------------------
    @pytest.fixture
    def cluster_nodes(
        self, rlmm_plugin: PluginUnderTest, healthy_cluster: KafkaCluster, opened: Opened
    ) -> Nodes:
        """Nodes on the session's three-node cluster: one metadata partition per topic, three
        replicas, two of them in sync for a write."""
        layout = Layout(partitions=1, replication_factor=3, min_isr=2)
        topic = private_topic(rlmm_plugin)
        return Nodes(rlmm_plugin, healthy_cluster.bootstrap_servers, topic, opened, layout=layout)

    @CLUSTER_GROUP
    @pytest.mark.slow
    def test_metadata_leader_moved_by_reassignment_and_election(
        self, cluster_nodes: Nodes, tmp_path: Path
    ) -> None:
        """The leader of the metadata partitions (every topic of the plugin) moves twice during
        writes: their replica order is reassigned (ReassignPartitionsCommand) and a preferred
        leader election run (admin API), first to one follower then to the other. No call
        fails, nothing acknowledged is lost or written twice, the plugin's topics are
        consistent, and a fresh node's replay equals the writer's cache."""
        topic = cluster_nodes.topic
        topics = cluster_nodes.plugin.topics(topic)
        with _cluster_stream(cluster_nodes) as (admin, writer):
            for _ in range(2):
                leader, replicas, _ = partition_state(admin, topic)
                target = next(r for r in replicas if r != leader)
                order = [target, *(r for r in replicas if r != target)]
                reassign(cluster_nodes.servers, tmp_path, dict.fromkeys(topics, order))
                for each in topics:
                    elect_preferred(admin, each, target)
                writer.wait_acked_since(time.monotonic(), f"writes after node {target} led")

    @CLUSTER_GROUP
    @pytest.mark.slow
    @pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
    def test_metadata_leader_stopped_and_started(
        self, healthy_cluster: KafkaCluster, cluster_nodes: Nodes, kill: bool
    ) -> None:
        """The broker leading the metadata partition is stopped (SIGTERM, or SIGKILL: the
        controller notices only when its session expires) during writes; writes go on with the
        two other replicas (min.insync.replicas 2, and whichever transaction coordinator takes
        over); it is started again, catches up, and a preferred election gives it the lead back,
        still during writes. No call fails, nothing acknowledged is lost or written twice, the
        plugin's topics are consistent, and a fresh node's replay equals the writer's cache."""
        topic = cluster_nodes.topic
        with _cluster_stream(cluster_nodes) as (admin, writer):
            leader, replicas, _ = partition_state(admin, topic)
            node = healthy_cluster.node(leader)
            if kill:
                node.kill()
            else:
                stop_kafka(node)
            stopped = time.monotonic()
            wait_state(
                admin,
                topic,
                lambda now, r, isr: now not in (-1, leader),
                f"a new leader of {topic}-0",
            )
            writer.wait_acked_since(stopped, "writes while the old leader is down")
            start_again(node, timeout=RESTART_DEADLINE_S)
            wait_state(
                admin,
                topic,
                lambda now, r, isr: len(isr) == 3,
                f"node {leader} back in sync on {topic}-0",
            )
            if replicas[0] == leader:
                elect_preferred(admin, topic, leader)
            writer.wait_acked_since(time.monotonic(), "writes after the old leader is back")

    # 4. Leader and follower nodes agree ----------------------------------------------------------
    def test_follower_node_converges_to_the_leader_node(self, nodes: Nodes) -> None:
        """A follower node (node.id 2) is assigned the leader node's partitions while the
        leader writes. At readiness it shows every write the leader had acknowledged before the
        assignment (the end offsets captured at assignment, as Kafka's ConsumerTask). It then
        follows, without any new assignment, everything the leader writes afterwards (the
        stream, segment deletions, a new epoch, a partition marked for deletion, another
        deleted for good), and converges to the leader's cache: every read answers the same."""
        leader, follower = nodes.open(1), nodes.open(2)
        streamed = [new_partition(f"stream-{i}", i) for i in range(3)]
        doomed = new_partition("doomed", 0)
        tips = [*streamed, doomed]
        assign(leader, tips)
        history = History(leader)
        kept = history.add(doomed, 0, 99, {0: 0}, epoch=0)
        history.update(kept, FINISHED, epoch=0)

        writer = Writer(leader, streamed, batch=25).start()
        try:
            # More records than the consumer reads in one batch (1000): readiness must wait for
            # the replay to reach the end offsets, not come with the first records.
            writer.wait_acked(1500, "the leader's first writes", timeout=DEADLINE_S)
            before = writer.acked()
            assign(follower, tips, follower=True)
            assert_writes_applied(follower, before)
            assert kept.remote_log_segment_id.id in listed_by_id(follower, doomed)
            ready = time.monotonic()
            writer.wait_acked(
                20,
                "the leader's writes after the follower is ready",
                issued_after=ready,
                timeout=DEADLINE_S,
            )
        finally:
            writer.stop()
        assert not writer.failed(), writer.summary()

        # Later changes of every kind, written after the follower became ready.
        first = streamed[0]
        for m in sorted(leader.list_remote_log_segments(first), key=lambda m: m.start_offset)[:3]:
            history.update(m, DELETE_STARTED, epoch=1)
            history.update(m, DELETE_FINISHED, epoch=1)
        top = max(m.end_offset for m in leader.list_remote_log_segments(first))
        new_epoch = history.add(first, top + 1, top + 100, {0: top + 1, 1: top + 50}, epoch=1)
        history.update(new_epoch, FINISHED, epoch=1)
        history.delete_partition(
            streamed[1], RemotePartitionDeleteState.DELETE_PARTITION_MARKED, epoch=0, end=top + 1
        )
        history.delete_partition(
            doomed,
            RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
            RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
            RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
            epoch=0,
            end=100,
        )

        segments = [m for tip in streamed for m in leader.list_remote_log_segments(tip)]
        offsets = offsets_of([*segments, kept, new_epoch])
        expected = cache_view(leader, tips, {0, 1, 2}, offsets)
        assert expected[(doomed, "list")] == ("raises", "RemoteResourceNotFoundException")
        wait_until(
            lambda: cache_view(follower, tips, {0, 1, 2}, offsets) == expected,
            "the follower converging to the leader's cache",
            interval=0.5,
            details=lambda: "\n".join(
                diff_views(expected, cache_view(follower, tips, {0, 1, 2}, offsets))
            ),
        )
        self.check_converged(leader, follower, nodes, tips)


@contextlib.contextmanager
def _cluster_stream(nodes: Nodes) -> Iterator[tuple[AdminClient, Writer]]:
    """Node 1 writing on three user partitions, once every topic of the plugin is fully in
    sync and ten writes per partition were acknowledged; the body changes the cluster. Then
    the writer stops, no call may have failed (a quorum of in-sync replicas stayed), and
    ``check_stream``."""
    rlmm = nodes.open(1)
    admin = AdminClient({"bootstrap.servers": nodes.servers})
    for each in nodes.plugin.topics(nodes.topic):
        wait_state(admin, each, lambda leader, r, isr: len(isr) == 3, f"{each}-0 fully in sync")
    tips = [new_partition(f"cluster-{i}", i) for i in range(3)]
    assign(rlmm, tips)
    writer = Writer(rlmm, tips).start()
    try:
        writer.wait_acked(10, "writes before the cluster changes", timeout=DEADLINE_S)
        yield admin, writer
    finally:
        writer.stop()
    writer.assert_no_failed_call()
    check_stream(nodes, writer, rlmm)


# The manager -------------------------------------------------------------------------------------
class RlmmManagerSuite:
    """A Kafka-topic RLMM node against the session's broker, checked from outside where it
    matters: its registration, its conformance configuration, read-your-writes, a second node
    replaying what the first wrote, and the errors of its lifecycle. Every test uses topics of
    its own (``rlmm_factory``), deleted afterwards."""

    def check_replayed(
        self, writer: Node, reader: Node, tips: Tips, deleted: TopicIdPartition
    ) -> None:
        """What else must agree once a second node replayed ``tips`` and the partition
        ``deleted`` for good (nothing more by default)."""

    def test_registered_under_its_name(self, rlmm_plugin: PluginUnderTest) -> None:
        registered = get_registry().metadata_manager_class(rlmm_plugin.name)
        assert registered is rlmm_plugin.manager

    def test_conformance_config_needs_the_bootstrap_variable(
        self, rlmm_plugin: PluginUnderTest, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        manager: Any = rlmm_plugin.manager
        monkeypatch.delenv(BOOTSTRAP_SERVERS_ENV, raising=False)
        owner = re.escape(rlmm_plugin.owner)
        with pytest.raises(ConfigError, match=rf"^the {owner}'s .*set {BOOTSTRAP_SERVERS_ENV}"):
            manager.conformance_config()
        monkeypatch.setenv(BOOTSTRAP_SERVERS_ENV, "h:1")
        first, second = manager.conformance_config(), manager.conformance_config()
        assert first[SERVERS] == "h:1"
        topics = [first[key] for key in rlmm_plugin.topic_keys]
        assert len(set(topics)) == len(topics), f"two of its topics share a name: {topics}"
        assert all(first[key] != second[key] for key in rlmm_plugin.topic_keys), (
            "each configuration has topics of its own"
        )

    def test_read_your_writes(self, rlmm_factory: Factory) -> None:
        rlmm = rlmm_factory()
        tip = new_partition()
        assign(rlmm, [tip])
        for i in range(20):
            seg = segment(tip, i * 100, i * 100 + 99, {0: i * 100})
            done(rlmm.add_remote_log_segment_metadata(seg))
            assert seg.remote_log_segment_id in {
                m.remote_log_segment_id for m in rlmm.list_remote_log_segments(tip)
            }
            upd = update_of(seg, FINISHED)
            done(rlmm.update_remote_log_segment_metadata(upd))
            found = rlmm.remote_log_segment_metadata(tip, 0, i * 100 + 50)
            assert found == seg.create_with_updates(upd)
            assert rlmm.highest_offset_for_epoch(tip, 0) == i * 100 + 99

    def test_a_second_node_replays_the_history(self, rlmm_factory: Factory) -> None:
        """A second node (node.id 2), assigned as a follower, replays what the first wrote: on
        each partition expired segments (copied, then deleted), finished copies over two
        epochs and uploads in progress in a third; a partition deleted for good. It lists the
        same segments with the same highest offset per epoch, then follows a later write
        without a new assignment."""
        writer = rlmm_factory()
        tips = [new_partition("replay", p) for p in range(4)]
        deleted = new_partition("replay-deleted", 0)
        assign(writer, [*tips, deleted])
        expected = {tip: _write_replay_history(writer, tip) for tip in tips}
        _write_replay_history(writer, deleted, count=1, finished=1, expired=1)
        History(writer).delete_partition(deleted, *RemotePartitionDeleteState, epoch=0, end=10)

        reader = rlmm_factory({"node.id": "2"})
        assert not any(reader.is_ready(tip) for tip in tips)
        assign(reader, tips, follower=True)
        for tip in tips:
            got = sorted(reader.list_remote_log_segments(tip), key=lambda m: m.start_offset)
            assert got == expected[tip]
            mine = sorted(writer.list_remote_log_segments(tip), key=lambda m: m.start_offset)
            assert got == mine
            for epoch in range(3):
                highest = writer.highest_offset_for_epoch(tip, epoch)
                assert reader.highest_offset_for_epoch(tip, epoch) == highest
            assert reader.highest_offset_for_epoch(tip, 1) == 199
        assign(reader, [deleted], follower=True, wait=False)
        wait_gone(reader, deleted)
        self.check_replayed(writer, reader, tips, deleted)
        # The reader follows new writes as they come, without a new assignment.
        late = segment(tips[0], 1000, 1009, {5: 1000})
        done(writer.add_remote_log_segment_metadata(late))
        wait_until(
            lambda: late in list(reader.list_remote_log_segments(tips[0])),
            "the second node reading a later write",
        )

    @pytest.mark.parametrize("check", [True, False], ids=["restarted", "check-off"])
    def test_a_stalled_consumer_is_rebuilt(
        self, rlmm_factory: Factory, caplog: pytest.LogCaptureFixture, check: bool
    ) -> None:
        """librdkafka can lose a client's brokers for good after a broker restart, with no
        error (librdkafka#5301; it failed writes in CI): seen from the consumer task, a
        waited-for metadata partition reads nothing although the broker has records past its
        position. Simulated by pausing the partition behind the task's back. With the check
        (5 s here) the write completes all the same, read by a new consumer, logged; with the
        check off it times out, naming where the consumer stood. (How many rebuilds is not
        asserted: on a loaded machine a fetch slower than the check may count one more.)"""
        rlmm = rlmm_factory(
            {
                CONSUME_STALL_TIMEOUT_MS: "5000" if check else "0",
                CONSUME_WAIT_MS: str(int(DEADLINE_S * 1000)) if check else "3000",
            }
        )
        tip = new_partition("stall")
        assign(rlmm, [tip])
        done(rlmm.add_remote_log_segment_metadata(segment(tip, 0, 99, {0: 0})))
        task = rlmm.consumer_task
        config = rlmm.config
        partition = metadata_partition(tip, config.num_partitions)
        # The task's own client: nothing else can make it read nothing.
        task._consumer.pause([KafkaTopicPartition(config.topic_name, partition)])
        before = task.consumer_rebuilds
        later = segment(tip, 100, 199, {0: 100})
        with caplog.at_level(logging.WARNING, logger="tierlog_rlmm_topic.consumer"):
            future = rlmm.add_remote_log_segment_metadata(later)
            if not check:
                where = r"it had read up to offset \d+ there"
                with pytest.raises(ConsumeTimeoutError, match=where):
                    done(future)
                assert task.consumer_rebuilds == 0
                return
            done(future)
        assert later in list(rlmm.list_remote_log_segments(tip))
        assert task.consumer_rebuilds > before
        rebuilt = [r.getMessage() for r in caplog.records if "rebuilding" in r.getMessage()]
        assert rebuilt and all(f"partition {partition}:" in m for m in rebuilt), rebuilt
        # It reads on from there.
        done(rlmm.add_remote_log_segment_metadata(segment(tip, 200, 299, {0: 200})))

    def test_unassigned_lookups_and_lifecycle_errors(
        self, rlmm_plugin: PluginUnderTest, rlmm_factory: Factory
    ) -> None:
        rlmm = rlmm_factory()
        tip = new_partition()
        with pytest.raises(IllegalStateError, match="already configured"):
            rlmm.configure({})
        with pytest.raises(RemoteResourceNotFoundException):
            rlmm.list_remote_log_segments(tip)
        assign(rlmm, [tip])
        rlmm.on_stop_partitions({tip})
        assert not rlmm.is_ready(tip)
        rlmm.close()
        rlmm.close()  # idempotent
        assert not rlmm.is_ready(tip)
        closed = f"{rlmm_plugin.manager.__name__} is closed"
        with pytest.raises(IllegalStateError, match=closed):
            rlmm.add_remote_log_segment_metadata(segment(tip, 0, 1, {0: 0}))
        with pytest.raises(IllegalStateError):
            rlmm.list_remote_log_segments(tip)
        with pytest.raises(IllegalStateError):
            rlmm.on_partition_leadership_changes({tip}, set())
        with pytest.raises(IllegalStateError):
            rlmm.configure({})


def _write_replay_history(
    rlmm: RemoteLogMetadataManager,
    tip: TopicIdPartition,
    *,
    count: int = 25,
    finished: int = 20,
    expired: int = 4,
) -> list[RemoteLogSegmentMetadata]:
    """``count`` segments of 10 offsets, ten per leader epoch, added at once; the first
    ``finished`` copied, of which the first ``expired`` deleted again; the segments a replay
    lists (in offset order), each step's calls in flight at once."""
    segments = [segment(tip, i * 10, i * 10 + 9, {i // 10: i * 10}) for i in range(count)]
    for future in [rlmm.add_remote_log_segment_metadata(seg) for seg in segments]:
        done(future)
    listed = list(segments)
    for state, chosen in (
        (FINISHED, range(finished)),
        (DELETE_STARTED, range(expired)),
        (DELETE_FINISHED, range(expired)),
    ):
        updates = {i: update_of(segments[i], state) for i in chosen}
        for future in [rlmm.update_remote_log_segment_metadata(u) for u in updates.values()]:
            done(future)
        for i, upd in updates.items():
            listed[i] = listed[i].create_with_updates(upd)
    return [m for m in listed if m.state is not DELETE_FINISHED]


# The configuration -------------------------------------------------------------------------------
TOPIC_RLMM_BAD_VALUES: tuple[tuple[str, str, str], ...] = (
    ("remote.log.metadata.topic.num.partitions", "0", "at least 1"),
    ("remote.log.metadata.topic.num.partitions", "x", "Not a number"),
    ("remote.log.metadata.topic.replication.factor", "0", "at least 1"),
    ("remote.log.metadata.topic.replication.factor", "40000", "no more than 32767"),
    ("remote.log.metadata.topic.min.isr", "0", "at least 1"),
    ("remote.log.metadata.topic.retention.ms", "0", r"-1 \(unlimited\) or greater than 0"),
    ("remote.log.metadata.topic.retention.ms", "-2", r"-1 \(unlimited\) or greater than 0"),
    ("remote.log.metadata.consume.wait.ms", "-1", "at least 0"),
    ("remote.log.metadata.initialization.retry.max.timeout.ms", "-1", "at least 0"),
    ("remote.log.metadata.initialization.retry.interval.ms", "-5", "at least 0"),
    ("remote.log.metadata.topic.name", " ", "non-empty"),
    ("node.id", "one", "Not a number"),
)
"""Values of the topic RLMM's keys (which the compacted RLMM reads too) that are refused, and
what the error says."""


class RlmmConfigSuite:
    """A Kafka-topic RLMM's configuration, parsed with no broker: every key documented (in
    the code and in the plugin's README), refused values naming their key, unknown keys
    reported with a suggestion, Kafka's forced client settings, secrets out of ``repr``, the
    required keys' errors naming the plugin. A subclass sets ``config_class`` and
    ``config_keys``."""

    config_class: ClassVar[Any]
    """The plugin's configuration class: ``from_configs(mapping)``, ``keys()``; the parsed
    configuration has ``producer`` and ``consumer`` client settings."""
    config_keys: ClassVar[Sequence[Any]]
    """The plugin's own ``ConfigKey``s (name, default, doc), as its README's table lists them."""
    bad_values: ClassVar[Sequence[tuple[str, str, str]]] = TOPIC_RLMM_BAD_VALUES
    """(key, value, what the error says) of ``test_bad_values_name_the_key``."""
    misspelt: ClassVar[Sequence[tuple[str, str]]] = (
        ("remote.log.metadata.topic.num.partiton", "remote.log.metadata.topic.num.partitions"),
    )
    """(unknown key, the key suggested for it)."""

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if metafunc.definition.originalname == "test_bad_values_name_the_key":
            metafunc.parametrize(("key", "value", "message"), self.bad_values)

    def parse(self, extra: Mapping[str, str] | None = None) -> Any:
        """A configuration with a node id and bootstrap servers, plus ``extra``."""
        return self.config_class.from_configs({"node.id": "7", SERVERS: "k1:9092", **(extra or {})})

    def test_every_key_is_documented(self) -> None:
        assert self.config_class.keys() == {key.name for key in self.config_keys}
        assert all(key.doc and key.default for key in self.config_keys)

    def test_the_readme_documents_every_key(self, request: pytest.FixtureRequest) -> None:
        readme = (request.path.parents[1] / "README.md").read_text()
        for key in self.config_keys:
            rows = (f"| `{key.name}` | {key.default} |", f"| `{key.name}` | `{key.default}` |")
            assert any(row in readme for row in rows), (
                f"README's table lacks {key.name} (default {key.default})"
            )

    def test_bad_values_name_the_key(self, key: str, value: str, message: str) -> None:
        with pytest.raises(ConfigError, match=message) as caught:
            self.parse({key: value})
        assert key in str(caught.value)

    def test_unknown_keys_are_reported_with_a_suggestion(
        self, rlmm_plugin: PluginUnderTest, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING):
            self.parse({**{wrong: "5" for wrong, _ in self.misspelt}, "something.else": "1"})
        text = caplog.text
        assert f"{rlmm_plugin.owner} ignores unknown configuration key(s)" in text
        for wrong, meant in self.misspelt:
            assert f"{wrong} (did you mean {meant}?)" in text
        assert "something.else" in text

    def test_forced_client_settings_as_kafka(self, caplog: pytest.LogCaptureFixture) -> None:
        """Kafka's TBRLMM forces some client settings whatever the keys say (and says so)."""
        with caplog.at_level(logging.WARNING):
            config = self.parse(
                {
                    "remote.log.metadata.producer.acks": "1",
                    "remote.log.metadata.consumer.enable.auto.commit": "true",
                    "remote.log.metadata.common.client.client.id": "mine",
                }
            )
        assert config.producer["acks"] == "all"
        assert config.producer["enable.idempotence"] == "true"
        assert config.producer["client.id"] == "__remote_log_metadata_client_7_producer"
        assert config.consumer["client.id"] == "__remote_log_metadata_client_7_consumer"
        assert config.consumer["enable.auto.commit"] == "false"
        assert config.consumer["auto.offset.reset"] == "earliest"
        assert config.consumer["group.id"]  # librdkafka needs one; it is never joined
        text = caplog.text
        assert "remote.log.metadata.producer.acks=1 is overridden" in text
        assert "remote.log.metadata.consumer.enable.auto.commit=true is overridden" in text
        assert "remote.log.metadata.common.client.client.id is overridden" in text

    def test_secrets_stay_out_of_repr(self) -> None:
        config = self.parse(
            {
                "remote.log.metadata.common.client.sasl.jaas.config": (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    'username="u" password="s3cret";'
                )
            }
        )
        assert config.producer["sasl.password"] == "s3cret"
        assert config.consumer["sasl.password"] == "s3cret"
        assert "s3cret" not in repr(config)

    def test_required_keys_are_named_with_the_plugin(self, rlmm_plugin: PluginUnderTest) -> None:
        owner = re.escape(rlmm_plugin.owner)
        with pytest.raises(ConfigError, match=rf"^the {owner} needs node\.id \(or the deprecated "):
            self.config_class.from_configs({SERVERS: "k:1"})
        with pytest.raises(ConfigError, match=rf"^the {owner}'s producer has no bootstrap") as no:
            self.config_class.from_configs({"node.id": "1"})
        assert SERVERS in str(no.value)


# The conformance suite ---------------------------------------------------------------------------
class RlmmConformance(RemoteLogMetadataManagerSuite):
    """tierlog's RemoteLogMetadataManager conformance suite on the session's real broker
    (``kafka_broker``), configured as a user running the suite against their cluster would:
    the plugin's own ``conformance_config()``, fed the broker's address through
    ``TIERLOG_KAFKA_BOOTSTRAP_SERVERS``: fresh topics per test (3 partitions, one replica),
    shared by the restarts of that test so that a restart replays them, deleted after it. A
    subclass sets ``plugin_class``."""

    ready_timeout_s = 90.0
    write_timeout_s = 90.0
    state_machine_max_examples = 25
    """Half the suite's default (50) per test: the state machine (50 random runs of 30 steps,
    the longest test of a plugin's suite: a run restarts the node many times) runs as
    ``test_state_machine`` and ``test_state_machine_again``, 25 runs each drawing examples of
    its own, which two xdist workers share instead of one worker spending minutes on them."""

    def test_state_machine_again(
        self,
        rlmm_factory: Callable[[], RemoteLogMetadataManagerHarness],
        rlmm_capabilities: RemoteLogMetadataManagerCapabilities,
    ) -> None:
        """The suite's ``test_state_machine`` once more, on topics of its own and with random
        examples of its own: the second half of the suite's 50 runs."""
        self.test_state_machine(rlmm_factory, rlmm_capabilities)

    @pytest.fixture
    def rlmm_config(
        self,
        rlmm_class: type[RemoteLogMetadataManager],
        rlmm_plugin: PluginUnderTest,
        kafka_broker: Service,
        monkeypatch: pytest.MonkeyPatch,
        delete_topics: list[str],
    ) -> Iterator[dict[str, str]]:
        """The plugin's own ``conformance_config()``, pointed at the session's broker."""
        monkeypatch.setenv(BOOTSTRAP_SERVERS_ENV, kafka_broker.url)
        manager: Any = rlmm_class
        config: dict[str, str] = manager.conformance_config()
        delete_topics.extend(config[key] for key in rlmm_plugin.topic_keys)
        yield config
