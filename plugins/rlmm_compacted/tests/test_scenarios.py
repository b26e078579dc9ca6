"""The five user scenarios of KAFKA-20033's seed, against a real Apache Kafka 4.3.1 broker.

Each scenario is driven through the compacted RLMM's API with ``broker_leader_epoch`` set on
every event, as tierlog's RemoteLogManager sets it (the publishing leader's current epoch), and
checked twice:

(a) as written: the writer's cache (listings, lookups, highest offset per epoch); every record of
    the projection topic, read by an independent ``read_committed`` consumer, in words (key,
    event as Kafka's formatter prints it, the projection's tags, tombstones); every record of
    the audit topic (null key, Kafka's legacy bytes of each event: the audit keeps them all);
(b) after Kafka's log cleaner has really compacted the projection topic: the exact records it
    leaves per key (the seed's "After Compaction"), the audit topic unchanged, then a fresh node
    (another node id) bootstrapping from the compacted topic alone answers every read as the
    writer does and as a legacy replay of the audit topic does (tierlog's ``topic`` RLMM,
    Kafka's TBRLMM, reading the audit topic), but for the one documented difference: an upload
    superseded under its own key (scenario 3) is only in the legacy replay.

Compaction without waiting an hour: the projection topic is created with
``segment.ms=100``, ``min.cleanable.dirty.ratio=0.01``, ``delete.retention.ms=0`` and, while (a)
reads the whole history, ``min.compaction.lag.ms`` of a day (every rolled segment is too young
to clean: a segment rolls on any append 100 ms after its first record, so the scenario's own
writes roll segments, and without the lag the cleaner could remove records before (a) reads
them). For (b) the lag is set to 0 and a ``Roller`` publishes the add of a segment of another
user partition every 0.5 s: the active segment, which the cleaner never touches, rolls, and each
round leaves the rolled segments dirty enough for the next (a tombstone needs two rounds: one
stamps its delete horizon, the next removes it).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import pytest
from _fault_support import cache_view, diff_views
from _scenario_support import (
    Expected,
    Rec,
    alter_topic,
    as_compacted,
    assign,
    audit_text,
    cleaner_configs,
    compacted_configs,
    describe_expected,
    describe_record,
    legacy_replay,
    node_state,
    open_node,
    read_records,
    rolling,
    wait_compacted,
    wait_gone,
    wait_until,
)
from confluent_kafka.admin import AdminClient
from services._common import Service
from tierlog_rlmm_compacted import CompactedRemoteLogMetadataManager
from tierlog_rlmm_compacted.keys import MetadataKey
from tierlog_rlmm_compacted.state import PartitionState, diff

from tierlog.conformance.rlmm_suite import (
    DELETE_FINISHED,
    DELETE_STARTED,
    FINISHED,
    new_partition,
    segment,
    update_of,
)
from tierlog.metadata import serde
from tierlog.spi import (
    RemoteLogMetadata,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    TopicIdPartition,
    Uuid,
)

DAY_MS = 86_400_000
FRESH_NODE_ID = 9
LEGACY_NODE_ID = 8


def add(
    tip: TopicIdPartition,
    start: int,
    end: int,
    epochs: dict[int, int],
    *,
    epoch: int,
    broker: int,
) -> RemoteLogSegmentMetadata:
    """A segment's add (COPY_SEGMENT_STARTED) published by the leader of ``epoch``."""
    return replace(segment(tip, start, end, epochs, broker_id=broker), broker_leader_epoch=epoch)


def upd(
    seg: RemoteLogSegmentMetadata, state: RemoteLogSegmentState, *, epoch: int, broker: int
) -> RemoteLogSegmentMetadataUpdate:
    """An update of ``seg`` published by the leader of ``epoch``."""
    return replace(update_of(seg, state, broker_id=broker), broker_leader_epoch=epoch)


def key(tip: TopicIdPartition, end_offset: int, epoch: int) -> MetadataKey:
    return MetadataKey.of(tip, end_offset, epoch)


def ids(segments: Iterable[RemoteLogSegmentMetadata]) -> set[Uuid]:
    return {s.remote_log_segment_id.id for s in segments}


@dataclass
class World:
    """One scenario's broker, topics (one partition each) and what it published."""

    servers: str
    admin: AdminClient
    topic: str
    opened: list[RemoteLogMetadataManager]
    roll_tip: TopicIdPartition = field(default_factory=lambda: new_partition("roll", 0))
    events: list[RemoteLogMetadata] = field(default_factory=list)

    @property
    def audit_topic(self) -> str:
        return f"{self.topic}-audit"

    def node(self, node_id: int, *, lag_ms: int = DAY_MS) -> CompactedRemoteLogMetadataManager:
        configs = compacted_configs(
            self.servers,
            self.topic,
            self.audit_topic,
            node_id=node_id,
            extra=cleaner_configs(min_compaction_lag_ms=lag_ms),
        )
        rlmm = open_node(configs, self.opened)
        assert isinstance(rlmm, CompactedRemoteLogMetadataManager)
        assert rlmm.level == 1, "the projection topic was not created compacted"
        return rlmm

    def publish(self, rlmm: RemoteLogMetadataManager, event: RemoteLogMetadata) -> None:
        """Publish ``event`` through ``rlmm`` and wait until its consumer applied it."""
        if isinstance(event, RemoteLogSegmentMetadata):
            future = rlmm.add_remote_log_segment_metadata(event)
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            future = rlmm.update_remote_log_segment_metadata(event)
        else:
            assert isinstance(event, RemotePartitionDeleteMetadata)
            future = rlmm.put_remote_partition_delete_metadata(event)
        future.result(timeout=180)
        self.events.append(event)

    # (a) ------------------------------------------------------------------------------------
    def check_history(self, tips: Sequence[TopicIdPartition], expected: Sequence[Expected]) -> None:
        """(a): the projection holds exactly ``expected`` for ``tips`` (and nothing else: no
        roll event was written yet), the audit topic every published event, in order."""
        records = read_records(self.servers, self.topic)
        assert all(r.key is not None for r in records), "a projection record without a key"
        found = [describe_record(r) for r in records]
        wanted = [describe_expected(e) for e in expected]
        assert found == wanted, (
            "the projection's records:\nexpected:\n  " + "\n  ".join(wanted) + "\nfound:\n  "
        ) + "\n  ".join(found)
        self.check_audit(tips, everything=True)

    def check_audit(self, tips: Sequence[TopicIdPartition], *, everything: bool) -> None:
        """The audit topic: null keys, Kafka's legacy bytes of every published event of
        ``tips`` in order (``everything``: and no other record)."""
        records = read_records(self.servers, self.audit_topic)
        assert all(r.key is None for r in records), "an audit record with a key"
        wanted = {tip.topic_id for tip in tips}

        def ours(record: Rec) -> bool:
            assert record.value is not None, "a null value in the audit topic"
            event = serde.deserialize(record.value)
            assert not isinstance(event, serde.RemoteLogSegmentMetadataSnapshot), record
            return event.topic_id_partition.topic_id in wanted

        mine = records if everything else [r for r in records if ours(r)]
        assert [audit_text(r.value) for r in mine] == [
            audit_text(serde.serialize(e)) for e in self.events
        ]
        assert [r.value for r in mine] == [serde.serialize(e) for e in self.events]

    # (b) ------------------------------------------------------------------------------------
    def compact(
        self,
        writer: RemoteLogMetadataManager,
        tips: Sequence[TopicIdPartition],
        history: Sequence[Expected],
    ) -> list[Rec]:
        """Let Kafka's cleaner compact the projection topic until it holds, for ``tips``,
        what compaction leaves of ``history``; the records it leaves."""
        alter_topic(self.admin, self.topic, {"min.compaction.lag.ms": "0"})
        with rolling(writer, self.roll_tip) as roller:
            records = wait_compacted(
                self.servers,
                self.topic,
                {tip.topic_id for tip in tips},
                as_compacted(history),
                roller,
            )
        self.check_audit(tips, everything=False)  # the audit topic keeps every event
        return records

    def bootstrap(
        self,
        tips: Sequence[TopicIdPartition],
        *,
        gone: Sequence[TopicIdPartition] = (),
    ) -> tuple[RemoteLogMetadataManager, RemoteLogMetadataManager]:
        """A fresh compacted node bootstrapped from the compacted topic and a legacy replay of
        the audit topic, each with ``tips`` ready and ``gone`` replayed to their deletion."""
        fresh = self.node(FRESH_NODE_ID, lag_ms=0)
        assign(fresh, tips, follower=True)
        assign(fresh, gone, follower=True, wait=False)
        for tip in gone:
            wait_gone(fresh, tip)
        legacy = legacy_replay(
            self.servers, self.audit_topic, tips, self.opened, node_id=LEGACY_NODE_ID, gone=gone
        )
        return fresh, legacy


@pytest.fixture
def world(
    kafka_broker: Service,
    kafka_admin: AdminClient,
    delete_topics: list[str],
    opened: list[RemoteLogMetadataManager],
) -> World:
    topic = f"tierlog-scenario-{uuid.uuid4().hex}"
    delete_topics.extend((topic, f"{topic}-audit"))
    return World(kafka_broker.url, kafka_admin, topic, opened)


def assert_same(expected: PartitionState, actual: PartitionState, what: str) -> None:
    differences = diff(expected, actual)
    assert not differences, f"{what}:\n  " + "\n  ".join(differences)


def offsets_of(segments: Iterable[RemoteLogSegmentMetadata]) -> set[int]:
    """The offsets worth looking up: around the bounds and epoch starts of every segment."""
    offsets = {0}
    for m in segments:
        offsets |= {m.start_offset, m.end_offset, m.end_offset + 1}
        offsets |= {(m.start_offset + m.end_offset) // 2}
        offsets |= set(m.segment_leader_epochs.values())
    return offsets


def check_bootstrap(
    world: World,
    writer: RemoteLogMetadataManager,
    expected: dict[TopicIdPartition, PartitionState],
    segments: Iterable[RemoteLogSegmentMetadata],
    *,
    gone: Sequence[TopicIdPartition] = (),
    superseded: Iterable[Uuid] = (),
) -> None:
    """(b), last part: a fresh node bootstrapped from the compacted topic answers every read as
    the writer does, and so does the legacy replay of the audit topic once the ``superseded``
    uploads (only it lists them) are left out.

    Every read: ``state.logical_state`` (segments, per-epoch listing order, highest offset and
    size) and the topic RLMM's ``cache_view`` (readiness, listings, lookups and next
    transaction index lookups at every bound of every ``segments``, for the leader epochs of
    the live segments: a full replay remembers the highest offset of epochs whose segments are
    all deleted, the compacted topic does not)."""
    tips = [tip for tip in expected if tip not in gone]
    for tip, state in expected.items():
        assert_same(state, node_state(writer, tip), f"the writer's {tip} changed")
    fresh, legacy = world.bootstrap(tips, gone=gone)
    epochs = {
        e for state in expected.values() for s in state.segments for e in s.segment_leader_epochs
    }
    offsets = offsets_of(segments)
    reads = cache_view(writer, expected, epochs, offsets)
    superseded = set(superseded)
    problems: list[str] = []
    for tip, state in expected.items():
        problems += [f"fresh node, {tip}: {d}" for d in diff(state, node_state(fresh, tip))]
        legacy_state = node_state(legacy, tip)
        if superseded:
            assert superseded <= legacy_state.segment_ids, (
                "the legacy replay lists every upload, superseded ones included"
            )
        problems += [
            f"legacy replay, {tip}: {d}" for d in diff(state, legacy_state.without(superseded))
        ]
    problems += [
        f"fresh node: {d}" for d in diff_views(reads, cache_view(fresh, expected, epochs, offsets))
    ]
    legacy_reads = cache_view(legacy, expected, epochs, offsets)
    if superseded:  # listings and sizes are compared above, without the superseded uploads
        reads, legacy_reads = (
            {k: v for k, v in view.items() if len(k) < 2 or k[1] not in ("list", "size")}
            for view in (reads, legacy_reads)
        )
    problems += [f"legacy replay: {d}" for d in diff_views(reads, legacy_reads)]
    assert not problems, "reads that differ from the writer's (first the writer's answer):\n" + (
        "\n".join(problems)
    )


# Scenario 1 ---------------------------------------------------------------------------------
def test_scenario_1_normal_upload(world: World) -> None:
    """Broker 101 at epoch 3 uploads a segment ending at offset 1000: STARTED then FINISHED
    under one key; compaction keeps the FINISHED value, which alone rebuilds the segment."""
    rlmm = world.node(1)
    tip = new_partition("orders", 0)
    assign(rlmm, [tip, world.roll_tip])
    a = add(tip, 0, 1000, {3: 0}, epoch=3, broker=101)
    world.publish(rlmm, a)
    finished = upd(a, FINISHED, epoch=3, broker=101)
    world.publish(rlmm, finished)

    (listed,) = rlmm.list_remote_log_segments(tip)
    assert listed.remote_log_segment_id == a.remote_log_segment_id
    assert (listed.state, listed.end_offset) == (FINISHED, 1000)
    assert rlmm.remote_log_segment_metadata(tip, 3, 500) == listed
    assert rlmm.highest_offset_for_epoch(tip, 3) == 1000
    k = key(tip, 1000, 3)
    history = [Expected(k, a), Expected(k, finished, a)]
    world.check_history([tip], history)
    expected = {tip: node_state(rlmm, tip)}

    (kept,) = world.compact(rlmm, [tip], history)
    assert kept.key_text == str(k)
    assert kept.value is not None and serde.decode_record(kept.value).api_key == 1
    check_bootstrap(world, rlmm, expected, [a])


# Scenario 2 ---------------------------------------------------------------------------------
def test_scenario_2_leadership_change_during_upload(world: World) -> None:
    """Node 101 (epoch 3) starts an upload; the leadership moves to node 102 (epoch 4), which
    uploads the same offsets again; both finish, 101's after it lost the leadership. Two keys,
    both FINISHED after compaction; both segments listed, the reads served by 102's (the last
    to finish)."""
    first, second = world.node(101), world.node(102)
    tip = new_partition("orders", 0)
    assign(first, [tip])
    a = add(tip, 1001, 2000, {3: 1001}, epoch=3, broker=101)
    world.publish(first, a)
    # T2: the leadership moves to node 102.
    assign(second, [tip, world.roll_tip])
    first.on_partition_leadership_changes(set(), {tip})
    b = add(tip, 1001, 2000, {3: 1001}, epoch=4, broker=102)
    world.publish(second, b)
    a_done = upd(a, FINISHED, epoch=3, broker=101)
    world.publish(first, a_done)
    b_done = upd(b, FINISHED, epoch=4, broker=102)
    world.publish(second, b_done)

    k3, k4 = key(tip, 2000, 3), key(tip, 2000, 4)
    history = [
        Expected(k3, a),
        Expected(k4, b),
        Expected(k3, a_done, a),
        Expected(k4, b_done, b),
    ]
    world.check_history([tip], history)
    state = node_state(second, tip)
    assert ids(state.segments) == ids([a, b])
    assert {s.state for s in state.segments} == {FINISHED}
    served = second.remote_log_segment_metadata(tip, 3, 1500)
    assert served is not None and served.remote_log_segment_id == b.remote_log_segment_id
    assert second.highest_offset_for_epoch(tip, 3) == 2000
    wait_until(
        lambda: node_state(first, tip) == state,
        "the former leader's cache converging to the new leader's",
        details=lambda: "\n".join(diff(state, node_state(first, tip))),
    )

    kept = world.compact(second, [tip], history)
    assert [r.key_text for r in kept] == [str(k3), str(k4)]
    check_bootstrap(world, second, {tip: state}, [a, b])


# Scenario 3 ---------------------------------------------------------------------------------
def test_scenario_3_failed_upload_retried_under_the_same_epoch(world: World) -> None:
    """Node 101 (epoch 5) starts an upload, which fails silently; the retry (a new segment id,
    the same offsets) takes the same key and supersedes it: only UUID-B is listed, before and
    after compaction. The legacy replay of the audit topic still lists UUID-A (STARTED): the
    design's one difference with a full replay."""
    rlmm = world.node(1)
    tip = new_partition("orders", 0)
    assign(rlmm, [tip, world.roll_tip])
    a = add(tip, 2001, 3000, {5: 2001}, epoch=5, broker=101)
    world.publish(rlmm, a)
    b = add(tip, 2001, 3000, {5: 2001}, epoch=5, broker=101)
    world.publish(rlmm, b)
    b_done = upd(b, FINISHED, epoch=5, broker=101)
    world.publish(rlmm, b_done)

    (listed,) = rlmm.list_remote_log_segments(tip)
    assert listed.remote_log_segment_id == b.remote_log_segment_id and listed.state is FINISHED
    assert rlmm.remote_log_segment_metadata(tip, 5, 2500) == listed
    assert rlmm.highest_offset_for_epoch(tip, 5) == 3000
    k = key(tip, 3000, 5)
    history = [Expected(k, a), Expected(k, b), Expected(k, b_done, b)]
    world.check_history([tip], history)
    expected = {tip: node_state(rlmm, tip)}

    (kept,) = world.compact(rlmm, [tip], history)
    assert kept.key_text == str(k)
    check_bootstrap(world, rlmm, expected, [a, b], superseded={a.remote_log_segment_id.id})


# Scenario 4 ---------------------------------------------------------------------------------
def three_uploads(
    world: World, rlmm: RemoteLogMetadataManager, tip: TopicIdPartition
) -> tuple[list[RemoteLogSegmentMetadata], list[Expected]]:
    """The seed's initial state: the segment ending at offset 1000 uploaded by the leaders of
    epochs 3, 4 and 5 (UUID-A, -B, -C), each FINISHED under its own key; C, finished last,
    serves the reads."""
    uploads, history = [], []
    for epoch in (3, 4, 5):
        seg = add(tip, 0, 1000, {3: 0}, epoch=epoch, broker=100 + epoch)
        world.publish(rlmm, seg)
        done = upd(seg, FINISHED, epoch=epoch, broker=100 + epoch)
        world.publish(rlmm, done)
        uploads.append(seg)
        history += [
            Expected(key(tip, 1000, epoch), seg),
            Expected(key(tip, 1000, epoch), done, seg),
        ]
    assert ids(rlmm.list_remote_log_segments(tip)) == ids(uploads)
    served = rlmm.remote_log_segment_metadata(tip, 3, 500)
    assert served is not None and served.remote_log_segment_id == uploads[2].remote_log_segment_id
    return uploads, history


def delete_segment(
    world: World,
    rlmm: RemoteLogMetadataManager,
    seg: RemoteLogSegmentMetadata,
    tombstoned: Iterable[MetadataKey],
) -> list[Expected]:
    """The epoch-6 leader deletes ``seg``: DELETE_SEGMENT_STARTED and _FINISHED under the
    epoch-6 key, then (same transaction) the ``tombstoned`` keys; the records expected. Both
    deletion values carry ``CopyFinished``: the segment had finished its copy, which a reader
    that never saw its FINISHED replays first."""
    tip = seg.topic_id_partition
    k6 = key(tip, 1000, 6)
    started = upd(seg, DELETE_STARTED, epoch=6, broker=106)
    world.publish(rlmm, started)
    finished = upd(seg, DELETE_FINISHED, epoch=6, broker=106)
    world.publish(rlmm, finished)
    return [
        Expected(k6, started, seg, copy_finished=True),
        Expected(k6, finished, seg, copy_finished=True),
        *(Expected(k) for k in sorted(tombstoned)),
    ]


def test_scenario_4_deletion_tombstones_all_four_keys(world: World) -> None:
    """The leader of epoch 6 deletes the three uploads (the active one and, as Kafka's RLM
    does, the two unreferenced ones): tombstones for the upload keys of epochs 3, 4, 5 and the
    deletion key of epoch 6; compaction removes every record of that end offset and the
    segment is forgotten everywhere."""
    rlmm = world.node(1)
    tip = new_partition("orders", 0)
    assign(rlmm, [tip, world.roll_tip])
    uploads, history = three_uploads(world, rlmm, tip)
    for epoch, seg in zip((3, 4, 5), uploads, strict=True):
        history += delete_segment(world, rlmm, seg, {key(tip, 1000, epoch), key(tip, 1000, 6)})

    assert list(rlmm.list_remote_log_segments(tip)) == []
    assert rlmm.remote_log_segment_metadata(tip, 3, 500) is None
    tombstoned = {e.key for e in history if e.event is None}
    assert tombstoned == {key(tip, 1000, epoch) for epoch in (3, 4, 5, 6)}
    world.check_history([tip], history)
    expected = {tip: node_state(rlmm, tip)}

    assert world.compact(rlmm, [tip], history) == []
    check_bootstrap(world, rlmm, expected, uploads)


def test_scenario_4_deleting_the_active_upload_leaves_the_others(world: World) -> None:
    """The design's refinement of scenario 4: when the epoch-6 leader deletes only the active
    upload (UUID-C), the keys of epochs 3 and 4 still describe live segments (UUID-A, -B:
    their remote data is still referenced) and stay, before and after compaction, in every
    reader. Kafka's cache never routes a copy it displaced again: no segment serves offsets
    0-1000 at epoch 3 any more. So C's history stays too, as a displacement marker: its
    FINISHED (epoch-5 key), where it displaced B, and its deletion (epoch-6 key), nothing
    tombstoned; a node bootstrapping from the compacted topic replays A, B, C finishing, then
    C's deletion, and serves those offsets from nothing, as the writer and a legacy replay."""
    rlmm = world.node(1)
    tip = new_partition("orders", 0)
    assign(rlmm, [tip, world.roll_tip])
    uploads, history = three_uploads(world, rlmm, tip)
    history += delete_segment(world, rlmm, uploads[2], ())

    assert ids(rlmm.list_remote_log_segments(tip)) == ids(uploads[:2])
    assert {s.state for s in rlmm.list_remote_log_segments(tip)} == {FINISHED}
    assert rlmm.remote_log_segment_metadata(tip, 3, 500) is None
    assert rlmm.highest_offset_for_epoch(tip, 3) == 1000
    assert [e.key for e in history if e.event is None] == []
    world.check_history([tip], history)
    expected = {tip: node_state(rlmm, tip)}

    kept = world.compact(rlmm, [tip], history)
    assert [r.key_text for r in kept] == [str(key(tip, 1000, e)) for e in (3, 4, 5, 6)]
    check_bootstrap(world, rlmm, expected, uploads)


# Scenario 5 ---------------------------------------------------------------------------------
def test_scenario_5_partition_deletion(world: World) -> None:
    """The partition (two finished segments) is deleted: DELETE_PARTITION_STARTED and
    _FINISHED under the marker key (the log end offset 2000, epoch 2); the FINISHED write
    tombstones every segment key. After compaction only the marker is left, and every reader
    says the partition is gone; a partition next to it on the same metadata partition keeps
    its segment."""
    rlmm = world.node(1)
    tip, neighbour = new_partition("orders", 0), new_partition("payments", 0)
    assign(rlmm, [tip, neighbour, world.roll_tip])
    s1 = add(tip, 0, 999, {1: 0, 2: 500}, epoch=2, broker=101)
    s2 = add(tip, 1000, 1999, {2: 1000}, epoch=2, broker=101)
    other = add(neighbour, 0, 99, {0: 0}, epoch=0, broker=101)
    history = []
    for seg in (s1, s2, other):
        world.publish(rlmm, seg)
        done = upd(seg, FINISHED, epoch=seg.broker_leader_epoch or 0, broker=101)
        world.publish(rlmm, done)
        k = key(seg.topic_id_partition, seg.end_offset, seg.broker_leader_epoch or 0)
        history += [Expected(k, seg), Expected(k, done, seg)]
    assert rlmm.highest_offset_for_epoch(tip, 2) == 1999
    marker = key(tip, 2000, 2)
    for state in (
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
        RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
    ):
        event = RemotePartitionDeleteMetadata(
            tip, state, s2.event_timestamp_ms + 1, 101, broker_leader_epoch=2, end_offset=2000
        )
        world.publish(rlmm, event)
        history.append(Expected(marker, event))
    history += [Expected(key(tip, 999, 2)), Expected(key(tip, 1999, 2))]

    with pytest.raises(RemoteResourceNotFoundException):
        rlmm.list_remote_log_segments(tip)
    assert ids(rlmm.list_remote_log_segments(neighbour)) == ids([other])
    world.check_history([tip, neighbour], history)
    expected = {tip: node_state(rlmm, tip), neighbour: node_state(rlmm, neighbour)}
    assert expected[tip].gone

    kept = {r.key_text: r.value for r in world.compact(rlmm, [tip, neighbour], history)}
    assert [k for k in kept if k and k.startswith(f"{tip.topic_id}:")] == [str(marker)]
    marker_value = kept[str(marker)]
    assert marker_value is not None
    assert serde.deserialize(marker_value).state is (
        RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
    )
    check_bootstrap(world, rlmm, expected, [s1, s2, other], gone=[tip])
