"""Fault tests of the ``topic`` RLMM against real Apache Kafka 4.3.1 brokers (issue 11, section 4).

- The broker restarted (SIGTERM and SIGKILL) while a stream of writes is in flight, for an
  outage shorter than the producer's delivery timeout (every write waits the broker out) and
  one longer (writes in flight fail, with a ``RemoteStorageException``): no acknowledged write
  lost, writes after the restart succeed, no record written twice, and a fresh node's replay
  equals the writer's cache.
- A node closed and a new one started and re-assigned on the same topic: the replayed cache
  answers every read exactly as the old one did (several epochs, overlapping copies,
  deletions, invalid transitions, partition deletion).
- In the three-node cluster (metadata topic with replication factor 3, ``min.insync.replicas``
  2): the metadata partition's leader moved during writes, by a reassignment of its replica
  order and a preferred leader election, and by stopping the leader broker and starting it
  again.
- Two nodes, leader and follower of the same user partitions: the follower's cache converges
  to the leader's, including writes made after it became ready.

Every test uses a metadata topic of its own. Waits are on conditions with generous deadlines;
no sleep is an assertion and no timing is asserted.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest
from _fault_support import (
    DEADLINE_S,
    RESTART_DEADLINE_S,
    Call,
    Writer,
    cache_view,
    check_topic_against_calls,
    diff_views,
    expected_segments,
    listed_by_id,
    open_rlmm,
    read_topic,
    rlmm_config,
    wait_until,
)
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient
from services._common import Service
from services.kafka import KafkaCluster, restart_kafka, run_kafka_class, start_again, stop_kafka
from tierlog_rlmm_topic import TopicBasedRemoteLogMetadataManager

from tierlog.conformance.rlmm_suite import (
    DELETE_FINISHED,
    DELETE_STARTED,
    FINISHED,
    new_partition,
    segment,
    update_of,
)
from tierlog.metadata import metadata_partition
from tierlog.spi import (
    CustomMetadata,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    TopicIdPartition,
)

Opened = list[TopicBasedRemoteLogMetadataManager]
ANY_TIME = float("-inf")
"""``no_failure_after=ANY_TIME``: no call may fail at all."""


@pytest.fixture
def opened() -> Iterator[Opened]:
    """RLMMs opened by the test, closed at its end."""
    made: Opened = []
    yield made
    for rlmm in made:
        rlmm.close()


def private_topic() -> str:
    return f"tierlog-rlmm-fault-{uuid.uuid4().hex}"


def done(future: Future[None], timeout: float = DEADLINE_S) -> None:
    future.result(timeout=timeout)


def assign_and_wait(
    rlmm: TopicBasedRemoteLogMetadataManager,
    tips: Iterable[TopicIdPartition],
    *,
    follower: bool = False,
    timeout: float = DEADLINE_S,
) -> None:
    tips = set(tips)
    if follower:
        rlmm.on_partition_leadership_changes(set(), tips)
    else:
        rlmm.on_partition_leadership_changes(tips, set())
    wait_until(lambda: all(rlmm.is_ready(tip) for tip in tips), f"readiness of {tips}", timeout)


def offsets_of(segments: Iterable[RemoteLogSegmentMetadata], limit: int = 400) -> set[int]:
    """The offsets worth looking up: around the bounds and epoch starts of every segment, or
    of ``limit`` segments spread over the offsets when there are more."""
    ordered = sorted(segments, key=lambda m: (m.start_offset, m.end_offset))
    if len(ordered) > limit:
        ordered = [ordered[i * len(ordered) // limit] for i in range(limit)] + ordered[-1:]
    offsets = {0}
    for m in ordered:
        offsets |= {
            m.start_offset,
            m.end_offset,
            m.end_offset + 1,
            (m.start_offset + m.end_offset) // 2,
        }
        for start in m.segment_leader_epochs.values():
            offsets |= {start - 1, start} if start > 0 else {start}
    return offsets


def assert_same_view(expected: dict, actual: dict, what: str) -> None:  # type: ignore[type-arg]
    diffs = diff_views(expected, actual)
    assert not diffs, f"{what}: {len(diffs)} read(s) differ\n" + "\n".join(diffs)


def assert_writes_applied(rlmm: TopicBasedRemoteLogMetadataManager, calls: Iterable[Call]) -> None:
    """Every acknowledged add is in the cache, with at least the state of its acknowledged
    update (the writer's history has no deletion)."""
    listed = {}
    missing = []
    for call in calls:
        if not call.acked:
            continue
        if call.tip not in listed:
            listed[call.tip] = listed_by_id(rlmm, call.tip)
        found = listed[call.tip].get(call.segment_id)
        if found is None or (call.kind == "update" and found.state is not FINISHED):
            missing.append((call, found))
    assert not missing, f"acknowledged writes not in the cache: {missing[:10]}"


def check_stream(
    writer: Writer,
    rlmm: TopicBasedRemoteLogMetadataManager,
    *,
    servers: str,
    topic: str,
    partitions: int,
    reader_configs: dict[str, str],
    opened: Opened,
) -> None:
    """The checks shared by the broker-restart and cluster tests, once the writer stopped:
    the topic holds every acknowledged record once and nothing else; the writer's cache is
    what the topic says (acknowledged writes included); a fresh node replaying the topic
    answers every read as the writer does."""
    calls = writer.snapshot()
    print(writer.summary())  # shown with -rP: how much the test exercised
    assert all(c.finished_at is not None for c in calls), "the writer stopped with calls pending"
    records = read_topic(servers, topic, partitions)
    check_topic_against_calls(records, calls)
    in_topic = {r.value for r in records}
    persisted = sum(c.payload in in_topic for c in calls if c.error is not None)
    print(f"{persisted} failed call(s) were written all the same (possibly persisted)")
    expected = expected_segments(records)
    tips = list(writer.tips)
    # A failed write may still have reached the topic ("possibly persisted"): the writer's
    # consumer applies it whenever it reads it, so wait for the cache to match the topic.
    wait_until(
        lambda: all(listed_by_id(rlmm, tip) == expected.get(tip, {}) for tip in tips),
        "the writer's cache matching the metadata topic",
        details=lambda: "\n".join(
            f"{tip}: cache {len(listed_by_id(rlmm, tip))} segments, topic "
            f"{len(expected.get(tip, {}))}"
            for tip in tips
        ),
    )
    assert_writes_applied(rlmm, calls)

    reader = open_rlmm(reader_configs, opened)
    assign_and_wait(reader, tips, follower=True)
    assert_writes_applied(reader, calls)
    offsets = offsets_of(m for segments in expected.values() for m in segments.values())
    epochs = {writer.epoch, writer.epoch + 1}
    assert_same_view(
        cache_view(rlmm, tips, epochs, offsets),
        cache_view(reader, tips, epochs, offsets),
        "a fresh node's replay against the writer",
    )


# 1. The broker restarted during writes ----------------------------------------------------------
SHORT_DELIVERY_TIMEOUT_MS = 30_000


@pytest.mark.slow
@pytest.mark.parametrize(
    "outage",
    ["brief", "past-delivery-timeout"],
    ids=["outage-within-delivery-timeout", "outage-past-delivery-timeout"],
)
@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_broker_restarted_during_writes(
    kafka_factory: Callable[..., Service],
    opened: Opened,
    tmp_path: Path,
    kill: bool,
    outage: str,
) -> None:
    """A private broker is stopped (SIGTERM: controlled shutdown; SIGKILL: no shutdown at all)
    and started again on the same data while four threads write segment lifecycles.

    ``brief``: the producer keeps librdkafka's delivery timeout (300 s), longer than the
    restart: every call must wait the broker out and succeed (issue 11: "a broker that goes
    away and comes back is waited for"). ``past-delivery-timeout``: with
    ``delivery.timeout.ms`` = 30 s, the broker stays down until a write has failed: failures
    must be ``RemoteStorageException``s (never a hang), and every call issued once the broker
    is back must succeed.

    In both, the idempotent producer must not write any record twice, although its requests
    in flight are retried through the restart. A failed call is never repeated by the writer
    (the RLM's copy task starts over with a new segment id), so a record appearing twice could
    only come from the producer's own retries: Kafka semantics allow none. A failed call's
    record may still be in the topic ("possibly persisted" after a timeout): it is then applied
    like any other, and the caches must show it.
    """
    broker = kafka_factory()
    topic = private_topic()
    extra = (
        {}
        if outage == "brief"
        else {"remote.log.metadata.producer.delivery.timeout.ms": str(SHORT_DELIVERY_TIMEOUT_MS)}
    )

    def configs(node_id: int) -> dict[str, str]:
        return rlmm_config(
            broker.url,
            topic,
            node_id=node_id,
            log_dir=str(tmp_path / f"node-{node_id}"),
            extra=extra,
        )

    rlmm = open_rlmm(configs(1), opened)
    tips = [new_partition(f"restart-{i}", i) for i in range(4)]
    assign_and_wait(rlmm, tips)
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
        assert not failed, (
            f"{len(failed)} calls failed although the broker was back before the delivery "
            f"timeout: {failed[:10]}"
        )
    else:
        late = [c for c in failed if c.issued_at >= back]
        assert not late, f"calls issued after the broker was back failed: {late[:10]}"
    check_stream(
        writer,
        rlmm,
        servers=broker.url,
        topic=topic,
        partitions=3,
        reader_configs=configs(2),
        opened=opened,
    )


# 2. A node restarted and re-assigned ------------------------------------------------------------
PADDING_PER_PARTITION = 1500
"""Records written to each metadata partition before the history: more than the consumer reads
in one batch (1000), so that a replay marking partitions ready too early is caught."""


def padding_tips(partitions: int = 3) -> list[TopicIdPartition]:
    """One user partition on each metadata partition."""
    found: dict[int, TopicIdPartition] = {}
    while len(found) < partitions:
        tip = new_partition("padding", len(found))
        found.setdefault(metadata_partition(tip, partitions), tip)
    return list(found.values())


def write_padding(rlmm: TopicBasedRemoteLogMetadataManager, tips: list[TopicIdPartition]) -> None:
    futures = [
        rlmm.add_remote_log_segment_metadata(segment(tip, n * 10, n * 10 + 9, {0: n * 10}))
        for n in range(PADDING_PER_PARTITION)
        for tip in tips
    ]
    for future in futures:
        done(future)


def write_history(
    rlmm: TopicBasedRemoteLogMetadataManager, tips: dict[str, TopicIdPartition]
) -> set[RemoteLogSegmentMetadata]:
    """A history with several epochs, overlapping copies, copies in progress, deletions,
    invalid transitions (written, then dropped by every cache) and partition deletions;
    returns every segment added (for the offsets to look up)."""
    added: set[RemoteLogSegmentMetadata] = set()

    def add(seg: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
        done(rlmm.add_remote_log_segment_metadata(seg))
        added.add(seg)
        return seg

    def update(
        seg: RemoteLogSegmentMetadata,
        state: RemoteLogSegmentState,
        custom: CustomMetadata | None = None,
    ) -> None:
        done(rlmm.update_remote_log_segment_metadata(update_of(seg, state, custom_metadata=custom)))

    def delete_partition(tip: TopicIdPartition, *states: RemotePartitionDeleteState) -> None:
        for state in states:
            done(
                rlmm.put_remote_partition_delete_metadata(
                    RemotePartitionDeleteMetadata(tip, state, int(time.time() * 1000), 1)
                )
            )

    multi = tips["multi"]
    a = add(segment(multi, 0, 99, {0: 0}, txn_idx_empty=True))
    update(a, FINISHED)
    b = add(segment(multi, 100, 199, {0: 100, 1: 150}))
    update(b, FINISHED)
    c = add(segment(multi, 100, 249, {0: 100, 1: 150}, txn_idx_empty=True))  # replaces b
    update(c, FINISHED)
    d = add(segment(multi, 250, 349, {1: 250, 2: 300}, size=3000))
    update(d, FINISHED)
    e = add(segment(multi, 350, 449, {2: 350}))  # a copy in progress...
    add(dataclasses.replace(e, broker_id=7, event_timestamp_ms=e.event_timestamp_ms + 1))  # again
    f = add(segment(multi, 450, 549, {3: 450}, size=77))
    update(f, FINISHED, CustomMetadata(b"custom"))
    add(a)  # COPY_SEGMENT_FINISHED -> STARTED: invalid, written and dropped
    update(d, DELETE_FINISHED)  # FINISHED -> DELETE_FINISHED: invalid, written and dropped
    dup = add(segment(multi, 450, 549, {3: 450}))  # a second copy of f's range
    update(dup, FINISHED)

    deleting = tips["deleting"]
    g = add(segment(deleting, 0, 99, {0: 0}))
    update(g, FINISHED)
    h = add(segment(deleting, 100, 199, {0: 100}))
    update(h, FINISHED)
    i = add(segment(deleting, 200, 299, {1: 200}))
    update(i, FINISHED)
    update(g, DELETE_STARTED)
    update(g, DELETE_FINISHED)
    update(h, DELETE_STARTED)  # stays listed
    update(i, DELETE_STARTED)
    update(i, FINISHED)  # DELETE_STARTED -> FINISHED: invalid, dropped

    marked = tips["marked"]
    j = add(segment(marked, 0, 99, {0: 0}))
    update(j, FINISHED)
    delete_partition(
        marked,
        RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
    )

    gone = tips["gone"]
    k = add(segment(gone, 0, 99, {0: 0}))
    update(k, FINISHED)
    add(segment(gone, 100, 199, {0: 100}))
    delete_partition(
        gone,
        RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
        RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
    )
    return added


HISTORY_PARTITIONS = ("multi", "deleting", "marked", "gone", "empty", "spare-1", "spare-2")
HISTORY_EPOCHS = range(-1, 6)


def history_tips() -> dict[str, TopicIdPartition]:
    return {name: new_partition(name, n) for n, name in enumerate(HISTORY_PARTITIONS)}


def sorted_segments(
    rlmm: TopicBasedRemoteLogMetadataManager, tip: TopicIdPartition
) -> list[RemoteLogSegmentMetadata]:
    """``list_remote_log_segments(tip)`` in the order ``cache_view`` sorts it."""
    return cache_view(rlmm, [tip], (), ())[(tip, "list")][1]


def wait_gone(rlmm: TopicBasedRemoteLogMetadataManager, tip: TopicIdPartition) -> None:
    """Wait until the partition's finished deletion is replayed (its reads say not found)."""

    def not_found() -> bool:
        try:
            rlmm.list_remote_log_segments(tip)
        except RemoteResourceNotFoundException:
            return True
        except RemoteStorageException:
            return False
        return False

    wait_until(not_found, f"the replay of {tip}'s deletion")


def test_a_restarted_node_replays_the_same_cache(
    kafka_broker: Service, opened: Opened, tmp_path: Path
) -> None:
    """Close a node and start a new one on the same topic (same node id), assign it the same
    partitions: every read answers exactly as the old node's did: listings with and without
    epoch, highest offset and size per epoch, lookups and next-transaction-index lookups at
    every segment bound, readiness. Then it keeps writing (read-your-writes works on the
    replayed state), refuses writes to the deleted partition like the old node, and a stop
    and re-assignment of its partitions (as a follower) replays the same cache again."""
    topic = private_topic()

    def configs() -> dict[str, str]:
        return rlmm_config(kafka_broker.url, topic, node_id=1, log_dir=str(tmp_path))

    tips = history_tips()
    padding = padding_tips()
    alive = [*padding, *(tip for name, tip in tips.items() if name != "gone")]
    old = open_rlmm(configs(), opened)
    assign_and_wait(old, [*tips.values(), *padding])
    write_padding(old, padding)
    added = write_history(old, tips)
    offsets = offsets_of(added)
    before = cache_view(old, tips.values(), HISTORY_EPOCHS, offsets)
    # The history did what it is meant to: the views compare non-trivial states.
    assert before[(tips["gone"], "list")] == ("raises", "RemoteResourceNotFoundException")
    assert before[(tips["gone"], "is_ready")] is False
    assert len(before[(tips["multi"], "list")][1]) == 7  # b, replaced by c, is still listed
    assert [m.start_offset for m in before[(tips["deleting"], "list")][1]] == [100, 200]
    assert before[(tips["deleting"], "highest", 0)] == ("returns", 199)
    assert before[(tips["marked"], "lookup", 0, 49)][1] is not None
    with pytest.raises(RemoteResourceNotFoundException):
        old.add_remote_log_segment_metadata(segment(tips["gone"], 200, 299, {0: 200}))
    old.close()

    new = open_rlmm(configs(), opened)
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
    (in_progress,) = [
        m
        for m in new.list_remote_log_segments(tips["multi"])
        if m.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED
    ]
    done(new.update_remote_log_segment_metadata(update_of(in_progress, FINISHED)))
    assert new.remote_log_segment_metadata(tips["multi"], 2, 400) is not None
    final = cache_view(new, tips.values(), HISTORY_EPOCHS, offsets)

    # Stopped and assigned again (as a follower this time): the same cache once more.
    new.on_stop_partitions({*tips.values(), *padding})
    assert not any(new.is_ready(tip) for tip in tips.values())
    assign_and_wait(new, alive, follower=True)
    new.on_partition_leadership_changes(set(), {tips["gone"]})
    wait_gone(new, tips["gone"])
    assert_same_view(
        final,
        cache_view(new, tips.values(), HISTORY_EPOCHS, offsets),
        "the node's replay after a stop and re-assignment",
    )


# 3. The metadata partition's leader moved in the three-node cluster ------------------------------
CLUSTER_GROUP = pytest.mark.xdist_group("kafka_cluster")


def partition_state(admin: AdminClient, topic: str) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, isr) of ``topic`` partition 0, as the cluster reports them."""
    described = admin.list_topics(topic=topic, timeout=30).topics[topic].partitions[0]
    return described.leader, list(described.replicas), list(described.isrs)


def wait_state(
    admin: AdminClient,
    topic: str,
    condition: Callable[[int, list[int], list[int]], bool],
    what: str,
) -> None:
    def check() -> bool:
        try:
            return condition(*partition_state(admin, topic))
        except Exception:  # a node going away: ask again
            return False

    wait_until(
        check,
        what,
        RESTART_DEADLINE_S,
        interval=0.5,
        details=lambda: f"(leader, replicas, isr) = {partition_state(admin, topic)}",
    )


def elect_preferred(admin: AdminClient, topic: str, expected_leader: int) -> None:
    """Run a preferred leader election of partition 0 until ``expected_leader`` leads it."""

    def elected() -> bool:
        if partition_state(admin, topic)[0] == expected_leader:
            return True
        result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)])
        try:
            result.result(timeout=60)
        except Exception:  # not yet possible (the replica catching up): try again
            return False
        return partition_state(admin, topic)[0] == expected_leader

    wait_until(
        elected, f"node {expected_leader} leading {topic}-0", RESTART_DEADLINE_S, interval=1.0
    )


def reassign(cluster: KafkaCluster, directory: Path, topic: str, replicas: list[int]) -> None:
    """Reassign ``topic`` partition 0 to ``replicas`` (same set, new order) with Kafka's
    ReassignPartitionsCommand and wait until Kafka reports it complete."""
    plan = directory / f"reassign-{'-'.join(map(str, replicas))}.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": replicas}]}
        )
    )
    tool = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
    common = [
        "--bootstrap-server",
        cluster.bootstrap_servers,
        "--reassignment-json-file",
        str(plan),
    ]
    run_kafka_class(tool, [*common, "--execute"])

    def completed() -> bool:
        result = run_kafka_class(tool, [*common, "--verify"], check=False)
        return result.returncode == 0 and "is completed" in result.stdout

    wait_until(
        completed, f"the reassignment of {topic}-0 to {replicas}", RESTART_DEADLINE_S, interval=1.0
    )


@pytest.fixture
def healthy_cluster(kafka_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """The session's cluster, every node running again after the test (the fixture is shared)."""
    yield kafka_cluster
    for node in kafka_cluster:
        if node.process.poll() is not None:
            start_again(node, timeout=RESTART_DEADLINE_S)


def cluster_configs(
    cluster: KafkaCluster, topic: str, node_id: int, tmp_path: Path
) -> dict[str, str]:
    """One metadata partition, three replicas, two of them in sync for a write."""
    return rlmm_config(
        cluster.bootstrap_servers,
        topic,
        node_id=node_id,
        log_dir=str(tmp_path / f"node-{node_id}"),
        partitions=1,
        replication_factor=3,
        min_isr=2,
    )


def assert_no_failed_call(writer: Writer) -> None:
    failed = writer.failed()
    assert not failed, (
        f"{len(failed)} calls failed while the cluster kept a quorum of in-sync replicas: "
        f"{failed[:10]}"
    )


@CLUSTER_GROUP
@pytest.mark.slow
def test_metadata_leader_moved_by_reassignment_and_election(
    healthy_cluster: KafkaCluster, opened: Opened, tmp_path: Path
) -> None:
    """The leader of the metadata partition moves twice during writes: its replica order is
    reassigned (ReassignPartitionsCommand) and a preferred leader election run (admin API),
    first to one follower then to the other. No call fails, nothing acknowledged is lost or
    written twice, and a fresh node's replay equals the writer's cache."""
    cluster = healthy_cluster
    topic = private_topic()
    rlmm = open_rlmm(cluster_configs(cluster, topic, 1, tmp_path), opened)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    wait_state(
        admin, topic, lambda leader, replicas, isr: len(isr) == 3, f"{topic}-0 fully in sync"
    )
    tips = [new_partition(f"moved-{i}", i) for i in range(3)]
    assign_and_wait(rlmm, tips)
    writer = Writer(rlmm, tips).start()
    try:
        writer.wait_acked(10, "writes before the first move", timeout=DEADLINE_S)
        for _ in range(2):
            leader, replicas, _ = partition_state(admin, topic)
            target = next(r for r in replicas if r != leader)
            order = [target, *(r for r in replicas if r != target)]
            reassign(cluster, tmp_path, topic, order)
            elect_preferred(admin, topic, target)
            moved = time.monotonic()
            writer.wait_acked(
                10,
                f"writes after node {target} took the lead",
                issued_after=moved,
                timeout=RESTART_DEADLINE_S,
                no_failure_after=ANY_TIME,
            )
    finally:
        writer.stop()
    assert_no_failed_call(writer)
    reader_configs = cluster_configs(cluster, topic, 2, tmp_path)
    check_stream(
        writer,
        rlmm,
        servers=cluster.bootstrap_servers,
        topic=topic,
        partitions=1,
        reader_configs=reader_configs,
        opened=opened,
    )


@CLUSTER_GROUP
@pytest.mark.slow
@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_metadata_leader_stopped_and_started(
    healthy_cluster: KafkaCluster, opened: Opened, tmp_path: Path, kill: bool
) -> None:
    """The broker leading the metadata partition is stopped (SIGTERM, or SIGKILL: the
    controller notices only when its session expires) during writes; writes go on with the two
    other replicas (min.insync.replicas 2); it is started again, catches up, and a preferred
    election gives it the lead back, still during writes. No call fails, nothing acknowledged
    is lost or written twice, and a fresh node's replay equals the writer's cache."""
    cluster = healthy_cluster
    topic = private_topic()
    rlmm = open_rlmm(cluster_configs(cluster, topic, 1, tmp_path), opened)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    wait_state(
        admin, topic, lambda leader, replicas, isr: len(isr) == 3, f"{topic}-0 fully in sync"
    )
    tips = [new_partition(f"stopped-{i}", i) for i in range(3)]
    assign_and_wait(rlmm, tips)
    writer = Writer(rlmm, tips).start()
    try:
        writer.wait_acked(10, "writes before the leader stops", timeout=DEADLINE_S)
        leader, replicas, _ = partition_state(admin, topic)
        node = cluster.node(leader)
        if kill:
            node.kill()
        else:
            stop_kafka(node)
        stopped = time.monotonic()
        wait_state(
            admin, topic, lambda now, r, isr: now not in (-1, leader), f"a new leader of {topic}-0"
        )
        writer.wait_acked(
            10,
            "writes while the old leader is down",
            issued_after=stopped,
            timeout=RESTART_DEADLINE_S,
            no_failure_after=ANY_TIME,
        )
        start_again(node, timeout=RESTART_DEADLINE_S)
        wait_state(
            admin,
            topic,
            lambda now, r, isr: len(isr) == 3,
            f"node {leader} back in sync on {topic}-0",
        )
        if replicas[0] == leader:
            elect_preferred(admin, topic, leader)
        back = time.monotonic()
        writer.wait_acked(
            10,
            "writes after the old leader is back",
            issued_after=back,
            timeout=RESTART_DEADLINE_S,
            no_failure_after=ANY_TIME,
        )
    finally:
        writer.stop()
    assert_no_failed_call(writer)
    reader_configs = cluster_configs(cluster, topic, 2, tmp_path)
    check_stream(
        writer,
        rlmm,
        servers=cluster.bootstrap_servers,
        topic=topic,
        partitions=1,
        reader_configs=reader_configs,
        opened=opened,
    )


# 4. Leader and follower nodes agree --------------------------------------------------------------
def test_follower_node_converges_to_the_leader_node(
    kafka_broker: Service, opened: Opened, tmp_path: Path
) -> None:
    """A follower node (node.id 2) is assigned the leader node's partitions while the leader
    writes. At readiness it shows every write the leader had acknowledged before the
    assignment (the end offsets captured at assignment, as Kafka's ConsumerTask). It then
    follows, without any new assignment, everything the leader writes afterwards (the stream,
    deletions, a new epoch, a partition marked for deletion, another deleted for good), and
    converges to the leader's cache: every read answers the same."""
    topic = private_topic()

    def configs(node_id: int) -> dict[str, str]:
        return rlmm_config(
            kafka_broker.url, topic, node_id=node_id, log_dir=str(tmp_path / f"node-{node_id}")
        )

    leader = open_rlmm(configs(1), opened)
    follower = open_rlmm(configs(2), opened)
    streamed = [new_partition(f"stream-{i}", i) for i in range(3)]
    doomed = new_partition("doomed", 0)
    tips = [*streamed, doomed]
    assign_and_wait(leader, tips)
    kept = segment(doomed, 0, 99, {0: 0})
    done(leader.add_remote_log_segment_metadata(kept))
    done(leader.update_remote_log_segment_metadata(update_of(kept, FINISHED)))

    writer = Writer(leader, streamed, batch=25).start()
    try:
        # More records than the consumer reads in one batch (1000): readiness must wait for
        # the replay to reach the end offsets, not come with the first records.
        writer.wait_acked(1500, "the leader's first writes", timeout=DEADLINE_S)
        before = writer.acked()
        follower.on_partition_leadership_changes(set(), set(tips))
        wait_until(lambda: all(follower.is_ready(tip) for tip in tips), "the follower's readiness")
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
        done(leader.update_remote_log_segment_metadata(update_of(m, DELETE_STARTED)))
        done(leader.update_remote_log_segment_metadata(update_of(m, DELETE_FINISHED)))
    top = max(m.end_offset for m in leader.list_remote_log_segments(first))
    new_epoch = segment(first, top + 1, top + 100, {0: top + 1, 1: top + 50})
    done(leader.add_remote_log_segment_metadata(new_epoch))
    done(leader.update_remote_log_segment_metadata(update_of(new_epoch, FINISHED)))
    done(
        leader.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(
                streamed[1],
                RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
                int(time.time() * 1000),
                1,
            )
        )
    )
    for state in (
        RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
        RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
    ):
        done(
            leader.put_remote_partition_delete_metadata(
                RemotePartitionDeleteMetadata(doomed, state, int(time.time() * 1000), 1)
            )
        )

    segments = [m for tip in tips if tip != doomed for m in leader.list_remote_log_segments(tip)]
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
