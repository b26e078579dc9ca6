"""The projection applier without a broker: the seed's five scenarios, random RLM-like histories
read four ways, orphan keys, and each rule of ``projection.py``.

The readers compared (``_history.observe``: every listed segment, and per epoch the listing,
the highest copied offset, the remote log size and the routing of each segment's offsets):

- (a) the writer's own applier, which applied every record as it was written (a live node);
- (b) a fresh applier that read the projection after Kafka's log cleaner (``_history.compact``);
- (c) the topic RLMM's ``StoreApplier`` replaying the audit records (Kafka's legacy history),
  which also lists the COPY_SEGMENT_STARTED uploads a retry superseded under their key;
- and a fresh applier that read the whole projection, uncompacted.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import replace

import hypothesis
import pytest
from _history import (
    Leader,
    Node,
    PartitionState,
    Rec,
    compact,
    differences,
    observe,
    random_history,
    replay,
    replay_legacy,
)
from hypothesis import strategies as st
from tierlog_rlmm_compacted.keys import MetadataKey
from tierlog_rlmm_compacted.projection import KeyEntry, ProjectionApplier
from tierlog_rlmm_compacted.values import ProjectionValue, decode_value, encode_value

from tierlog.metadata import RemotePartitionMetadataStore, serde
from tierlog.metadata.serde import RemoteLogSegmentMetadataSnapshot
from tierlog.spi import (
    IllegalStateError,
    InvalidArgumentError,
    MetadataRecordError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    TopicIdPartition,
    Uuid,
)

S = RemoteLogSegmentState
P = RemotePartitionDeleteState

TOPIC_ID = Uuid.from_string("T8fJ9Kz3RyWxP2mQ4nL7vA")
TIP = TopicIdPartition(TOPIC_ID, "abc123", 0)
OTHER = TopicIdPartition(TOPIC_ID, "abc123", 1)
_PROJECTION = "tierlog_rlmm_compacted.projection"


def seg(
    n: int,
    end: int,
    epochs: dict[int, int],
    epoch: int | None,
    *,
    start: int | None = None,
    tip: TopicIdPartition = TIP,
) -> RemoteLogSegmentMetadata:
    """Upload ``n`` (its id) of the segment ending at ``end``, published under ``epoch``."""
    first = min(epochs.values()) if start is None else start
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, Uuid(n, n)),
        first,
        end,
        1_700_000_000_000 + n,
        100 + n,
        1_700_000_000_000,
        1000 + n,
        epochs,
        broker_leader_epoch=epoch,
    )


def upd(
    segment: RemoteLogSegmentMetadata, state: RemoteLogSegmentState, epoch: int | None
) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        segment.remote_log_segment_id, 1_700_000_001_000 + state, None, state, 101, epoch
    )


def key(end: int, epoch: int, tip: TopicIdPartition = TIP) -> MetadataKey:
    return MetadataKey.of(tip, end, epoch)


def values(records: list[Rec]) -> list[tuple[MetadataKey, ProjectionValue | None]]:
    """The records as (key, decoded value or None)."""
    out = []
    for r in records:
        assert r.key is not None
        out.append((MetadataKey.parse(r.key), None if r.value is None else decode_value(r.value)))
    return out


def ids(state: PartitionState) -> set[int]:
    return {s.remote_log_segment_id.id.most_significant_bits for s in state.segments}


def served_by(
    store: RemotePartitionMetadataStore, tip: TopicIdPartition, epoch: int, offset: int
) -> RemoteLogSegmentId | None:
    found = store.remote_log_segment_metadata(tip, epoch, offset)
    return None if found is None else found.remote_log_segment_id


def served(store: RemotePartitionMetadataStore, epoch: int, offset: int) -> int | None:
    found = store.remote_log_segment_metadata(TIP, epoch, offset)
    return None if found is None else found.remote_log_segment_id.id.most_significant_bits


def readers(node: Node) -> tuple[PartitionState, PartitionState, PartitionState]:
    """(a) live, (b) compacted bootstrap, (c) legacy replay of the audit, for TIP."""
    live = observe(node.applier.store, TIP)
    boot = observe(replay(compact(node.log.records), node.tips).store, TIP)
    legacy = observe(replay_legacy(node.audit, node.tips).store, TIP)
    return live, boot, legacy


def assert_readers_agree(node: Node, tip: TopicIdPartition = TIP) -> PartitionState:
    """Every reader of ``node``'s history answers as the live node: a fresh node reading the
    compacted topic (tombstones expired or not), the whole topic, and the legacy replay of the
    audit topic (the superseded uploads left out). Per epoch, ``highest`` may be lower for a
    reader of the compacted topic only where no finished segment is left (``differences``).
    The live node's state."""
    live = observe(node.applier.store, tip)
    for records, what in (
        (compact(node.log.records), "compacted"),
        (compact(node.log.records, tombstones_expired=False), "compacted, tombstones kept"),
    ):
        assert (
            differences(live, observe(replay(records, node.tips).store, tip), forgets=True) == []
        ), what
    assert observe(replay(node.log.records, node.tips).store, tip) == live, "whole topic"
    legacy = observe(replay_legacy(node.audit, node.tips).store, tip)
    assert differences(live, legacy) == [], "legacy replay"
    return live


def started(segment: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
    """The add record a value carries: the segment in COPY_SEGMENT_STARTED."""
    return replace(segment, state=S.COPY_SEGMENT_STARTED, broker_leader_epoch=None)


# -- the seed's five scenarios ---------------------------------------------------------------------


@pytest.mark.parametrize("level", [0, 1])
def test_scenario_1_normal_upload(level: int) -> None:
    node = Node([TIP])
    node.level = level
    a = seg(1, 1000, {3: 0}, 3)
    assert node.write(a).key == key(1000, 3)
    finished = upd(a, S.COPY_SEGMENT_FINISHED, 3)
    plan = node.write(finished)
    assert plan.key == key(1000, 3)
    assert plan.tombstones == ()
    assert decode_value(plan.value) == ProjectionValue(finished, 3, 1000, started(a))
    assert node.audit == [serde.serialize(a), serde.serialize(finished)]

    compacted = compact(node.log.records)
    assert [k for k, _ in values(compacted)] == [key(1000, 3)]  # T1 compacted away
    live, boot, legacy = readers(node)
    assert live == boot == legacy
    assert [s.state for s in live.segments] == [S.COPY_SEGMENT_FINISHED]
    assert live.segments[0] == a.create_with_updates(finished)


@pytest.mark.parametrize("old_leader_epoch", [3, 4], ids=["own-epoch", "learnt-new-epoch"])
def test_scenario_2_leadership_change_during_upload(old_leader_epoch: int) -> None:
    """Both uploads finish; the old leader may publish its FINISHED under the epoch it has
    learnt meanwhile (4): the key of the new leader's upload is not taken from it."""
    node = Node([TIP])
    node.level = 1
    a = seg(1, 2000, {3: 1000}, 3)
    b = seg(2, 2000, {3: 1000}, 4)
    assert node.write(a).key == key(2000, 3)
    assert node.write(b).key == key(2000, 4)  # a different key
    assert node.write(upd(a, S.COPY_SEGMENT_FINISHED, old_leader_epoch)).key == key(2000, 3)
    assert node.write(upd(b, S.COPY_SEGMENT_FINISHED, 4)).key == key(2000, 4)

    compacted = values(compact(node.log.records))
    assert [(k, v.event.state) for k, v in compacted if v is not None] == [
        (key(2000, 3), S.COPY_SEGMENT_FINISHED),
        (key(2000, 4), S.COPY_SEGMENT_FINISHED),
    ]
    live, boot, legacy = readers(node)
    assert live == boot == legacy
    assert ids(live) == {1, 2}
    assert served(node.applier.store, 3, 1500) == 2  # the later upload serves the reads


def test_scenario_3_failed_upload_retried_under_the_same_epoch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    node = Node([TIP])
    node.level = 1
    a = seg(1, 3000, {5: 2000}, 5)
    b = seg(2, 3000, {5: 2000}, 5)
    node.write(a)
    with caplog.at_level(logging.INFO, _PROJECTION):
        assert node.write(b).key == key(3000, 5)  # same key, another upload
    assert "forgetting upload" in caplog.text
    assert node.write(upd(b, S.COPY_SEGMENT_FINISHED, 5)).key == key(3000, 5)

    compacted = values(compact(node.log.records))
    assert len(compacted) == 1
    assert compacted[0][0] == key(3000, 5)
    latest = compacted[0][1]
    assert latest is not None
    assert isinstance(latest.event, RemoteLogSegmentMetadataUpdate)
    assert latest.event.remote_log_segment_id == b.remote_log_segment_id
    live, boot, legacy = readers(node)
    assert live == boot
    assert ids(live) == {2}
    # The one difference with the legacy history: it still lists the superseded upload.
    assert ids(legacy) == {1, 2}
    superseded = frozenset({a.remote_log_segment_id})
    assert observe(replay_legacy(node.audit, [TIP]).store, TIP, leave_out=superseded) == live


def test_scenario_4_deletion_tombstones_every_key_of_the_end_offset() -> None:
    """Uploads under epochs 3 and 4 were deleted (their keys are left: level 0), then the
    active one under 5 is deleted by the leader of epoch 6 at level 1: its DELETE_SEGMENT_
    FINISHED tombstones the four keys of the end offset, as in the seed."""
    node = Node([TIP])
    a, b, c = (seg(n, 1000, {3: 0}, n + 2) for n in (1, 2, 3))
    for s, epoch in ((a, 3), (b, 4), (c, 5)):
        node.write(s)
        node.write(upd(s, S.COPY_SEGMENT_FINISHED, epoch))
    assert node.write(upd(a, S.DELETE_SEGMENT_STARTED, 6)).key == key(1000, 6)
    assert node.write(upd(a, S.DELETE_SEGMENT_FINISHED, 6)).tombstones == ()
    # 1000:6 still tells A's deletion (level 0: no tombstone), and B's own key holds the
    # FINISHED of a copy C overlaps: B's deletion goes to the nearest free key.
    assert node.write(upd(b, S.DELETE_SEGMENT_STARTED, 6)).key == key(1000, 2)
    node.write(upd(b, S.DELETE_SEGMENT_FINISHED, 6))
    assert ids(observe(node.applier.store, TIP)) == {3}
    node.level = 1
    node.write(upd(c, S.DELETE_SEGMENT_STARTED, 6))
    plan = node.write(upd(c, S.DELETE_SEGMENT_FINISHED, 6))
    assert set(plan.tombstones) == {key(1000, e) for e in (2, 3, 4, 5, 6)}

    assert compact(node.log.records) == []  # the segment is completely forgotten
    live, boot, legacy = readers(node)
    assert live == boot == legacy
    assert live.segments == ()
    assert node.applier.keys(TIP) == {}


def test_scenario_4_a_live_copy_keeps_its_key() -> None:
    """At level 1 from the start, the epoch-6 leader deletes only the active upload (C). The
    keys of the other copies stay (forgetting a live copy's key would leak its remote data),
    and so does C's history, as a displacement marker: Kafka's cache never routes a copy it
    displaced again, so a full replay serves offsets 0-1000 from nothing, and a reader of the
    compacted topic does too only if it still sees C finish after A and B, then be deleted.
    C's FINISHED stays where it is (the cache displaced A and B there) and its deletion is not
    tombstoned. Once B is deleted, B's history is the marker (B displaced A first), C's goes;
    with A's deletion everything goes."""
    node = Node([TIP])
    node.level = 1
    a, b, c = (seg(n, 1000, {3: 0}, n + 2) for n in (1, 2, 3))
    for s, epoch in ((a, 3), (b, 4), (c, 5)):
        node.write(s)
        node.write(upd(s, S.COPY_SEGMENT_FINISHED, epoch))
    node.write(upd(c, S.DELETE_SEGMENT_STARTED, 6))
    plan = node.write(upd(c, S.DELETE_SEGMENT_FINISHED, 6))
    assert plan.key == key(1000, 6)
    assert plan.tombstones == ()
    marker = decode_value(plan.value)
    assert marker.add_record is not None
    assert marker.add_record.remote_log_segment_id == c.remote_log_segment_id
    assert marker.copy_finished
    assert node.applier.orphan_keys(TIP) == []
    live = assert_readers_agree(node)
    assert ids(live) == {1, 2}
    assert {served for view in live.epochs for _, served in view.routing} == {None}
    assert served(node.applier.store, 3, 500) is None
    assert [k for k, _ in values(compact(node.log.records))] == [key(1000, e) for e in (3, 4, 5, 6)]

    # B's deletion, interrupted: B's FINISHED (1000:4) stays where B displaced A.
    assert node.write(upd(b, S.DELETE_SEGMENT_STARTED, 6)).key == key(1000, 2)
    assert_readers_agree(node)
    plan = node.write(upd(b, S.DELETE_SEGMENT_FINISHED, 6))
    assert plan.key == key(1000, 2)
    assert plan.tombstones == (key(1000, 5), key(1000, 6))
    assert set(node.applier.keys(TIP)) == {key(1000, 3), key(1000, 4), key(1000, 2)}
    assert ids(assert_readers_agree(node)) == {1}
    # The last copy: nothing is displaced any more, every key goes.
    node.write(upd(a, S.DELETE_SEGMENT_STARTED, 6))
    plan = node.write(upd(a, S.DELETE_SEGMENT_FINISHED, 6))
    assert set(plan.tombstones) == {key(1000, e) for e in (2, 3, 4, 6)}
    assert compact(node.log.records) == []
    assert node.applier.keys(TIP) == {}
    assert assert_readers_agree(node).segments == ()


def _displaced_pair(node: Node) -> tuple[RemoteLogSegmentMetadata, RemoteLogSegmentMetadata]:
    """Two finished copies of offsets 0-1000 (epoch 3), published under epochs 3 and 4: the
    second displaced the first."""
    a, b = seg(1, 1000, {3: 0}, 3), seg(2, 1000, {3: 0}, 4)
    for s, epoch in ((a, 3), (b, 4)):
        node.write(s)
        node.write(upd(s, S.COPY_SEGMENT_FINISHED, epoch))
    assert served(node.applier.store, 3, 0) == 2
    return a, b


def test_no_marker_for_a_copy_that_was_displaced() -> None:
    """Deleting the displaced copy: the one serving the reads keeps them, nothing needs
    replaying, and every key of the deleted copy goes (its deletion's too)."""
    node = Node([TIP])
    node.level = 1
    a, _ = _displaced_pair(node)
    node.write(upd(a, S.DELETE_SEGMENT_STARTED, 5))
    plan = node.write(upd(a, S.DELETE_SEGMENT_FINISHED, 5))
    assert set(plan.tombstones) == {key(1000, 3), key(1000, 5)}
    assert set(node.applier.keys(TIP)) == {key(1000, 4)}
    assert ids(assert_readers_agree(node)) == {2}


def test_a_marker_is_dropped_once_its_copy_is_routed_again() -> None:
    """A COPY_SEGMENT_FINISHED applied again to the displaced copy routes it again (Kafka's
    cache takes the transition): its value now comes after the marker, which is no longer
    needed, an orphan for the cleanup manager."""
    node = Node([TIP])
    node.level = 1
    a, b = _displaced_pair(node)
    node.write(upd(b, S.DELETE_SEGMENT_STARTED, 5))
    assert node.write(upd(b, S.DELETE_SEGMENT_FINISHED, 5)).tombstones == ()
    assert served(node.applier.store, 3, 0) is None
    assert_readers_agree(node)
    again = replace(upd(a, S.COPY_SEGMENT_FINISHED, 5), event_timestamp_ms=1_700_000_009_000)
    assert node.write(again).key == key(1000, 3)  # 1000:5 is the marker's
    assert served(node.applier.store, 3, 0) == 1
    assert_readers_agree(node)
    assert node.applier.orphan_keys(TIP) == [key(1000, 4), key(1000, 5)]
    assert node.cleanup() == [key(1000, 4), key(1000, 5)]
    assert set(node.applier.keys(TIP)) == {key(1000, 3)}
    assert ids(assert_readers_agree(node)) == {1}


def test_a_marker_stays_while_its_copy_is_not_routed() -> None:
    """A marker's keys are taken by no write while it is needed (an add relocates). A copy
    finishing later serves the offsets; the copy the marker displaced is still not routed, and
    the marker still says where it was displaced (Kafka's cache lists a copy its ``put``
    replaced differently from one the epoch's highest offset dropped). The later copy's
    deletion needs no marker of its own: it displaced nothing."""
    node = Node([TIP])
    node.level = 1
    _, b = _displaced_pair(node)
    node.write(upd(b, S.DELETE_SEGMENT_STARTED, 6))
    node.write(upd(b, S.DELETE_SEGMENT_FINISHED, 6))
    assert set(node.applier.keys(TIP)) == {key(1000, 3), key(1000, 4), key(1000, 6)}
    d = seg(4, 1000, {3: 0}, 6)
    assert node.write(d).key == key(1000, 5)  # 1000:6 is the marker's
    assert_readers_agree(node)
    node.write(upd(d, S.COPY_SEGMENT_FINISHED, 6))
    assert served(node.applier.store, 3, 0) == 4
    assert node.applier.orphan_keys(TIP) == []
    assert_readers_agree(node)
    node.write(upd(d, S.DELETE_SEGMENT_STARTED, 7))
    plan = node.write(upd(d, S.DELETE_SEGMENT_FINISHED, 7))
    assert plan.key == key(1000, 7)
    assert set(plan.tombstones) == {key(1000, 5), key(1000, 7)}
    assert set(node.applier.keys(TIP)) == {key(1000, 3), key(1000, 4), key(1000, 6)}
    assert node.applier.orphan_keys(TIP) == []
    assert ids(assert_readers_agree(node)) == {1}


def test_a_marker_whose_copy_has_another_end_offset() -> None:
    """S (0-1000) displaced X (0-999: it reached the epoch's highest offset, so Kafka's cache
    dropped every entry from its start). S's history is a marker at end offset 1000; X's
    deletion, at 999, does not look there: the cleanup manager drops it."""
    node = Node([TIP])
    node.level = 1
    x, s = seg(1, 999, {3: 0}, 3), seg(2, 1000, {3: 0}, 4)
    for segment, epoch in ((x, 3), (s, 4)):
        node.write(segment)
        node.write(upd(segment, S.COPY_SEGMENT_FINISHED, epoch))
    assert served(node.applier.store, 3, 0) == 2
    node.write(upd(s, S.DELETE_SEGMENT_STARTED, 5))
    assert node.write(upd(s, S.DELETE_SEGMENT_FINISHED, 5)).tombstones == ()
    assert ids(assert_readers_agree(node)) == {1}
    assert served(node.applier.store, 3, 0) is None
    node.write(upd(x, S.DELETE_SEGMENT_STARTED, 5))
    assert set(node.write(upd(x, S.DELETE_SEGMENT_FINISHED, 5)).tombstones) == {
        key(999, 3),
        key(999, 5),
    }
    assert set(node.applier.keys(TIP)) == {key(1000, 4), key(1000, 5)}
    assert_readers_agree(node)
    assert node.cleanup() == [key(1000, 4), key(1000, 5)]
    assert node.applier.keys(TIP) == {}
    assert compact(node.log.records) == []


@pytest.mark.parametrize("later_first", [False, True], ids=["dropped", "replaced"])
def test_a_marker_keeps_where_the_copy_was_displaced(later_first: bool) -> None:
    """H (0-99) and T, a copy of its offsets, in epoch 2, and Z (100-199) after them. When T
    finishes before Z, Kafka's cache drops H from the epoch's map (T reaches the epoch's
    highest offset): H stays listed, unreferenced. When Z finished first, T's ``put`` replaces
    H, which the epoch then no longer lists. Either way, once T is deleted, H is served by
    nothing, and a reader of the compacted topic must replay T's FINISHED where it was, before
    Z's: replayed from T's deletion, after Z's, it would always replace H."""
    node = Node([TIP])
    node.level = 1
    h, t, z = seg(1, 99, {2: 0}, 2), seg(2, 99, {2: 0}, 3), seg(3, 199, {2: 100}, 2)
    order = (h, z, t) if later_first else (h, t, z)
    for segment in order:
        node.write(segment)
        node.write(upd(segment, S.COPY_SEGMENT_FINISHED, segment.broker_leader_epoch))
    listed = {s.remote_log_segment_id for s in node.applier.store.list_remote_log_segments(TIP, 2)}
    assert (h.remote_log_segment_id in listed) is not later_first
    node.write(upd(t, S.DELETE_SEGMENT_STARTED, 4))
    plan = node.write(upd(t, S.DELETE_SEGMENT_FINISHED, 4))
    assert plan.key == key(99, 4)
    assert plan.tombstones == ()
    assert set(node.applier.keys(TIP)) == {key(99, 2), key(99, 3), key(99, 4), key(199, 2)}
    live = assert_readers_agree(node)
    assert served(node.applier.store, 2, 0) is None
    assert ids(live) == {1, 3}


def test_a_copy_displaces_as_it_did_after_a_later_segment_is_deleted() -> None:
    """K (0-99) and Z (100-199) finish in epoch 2; then cleaned copies of both, T and Z2.
    T finished after Z, when the epoch had copied up to 199: the cache's ``put`` replaced K,
    which epoch 2 no longer lists. Z is deleted (its cleaned copy serves its offsets) and
    compacted away. A reader of the compacted topic replays T's FINISHED before any segment
    beyond offset 99 in epoch 2: without the highest offset T's value carries
    (``EpochHighestOffsets``), T would drop K into the unreferenced segments, and epoch 2 would
    list K (and count its size) again."""
    node = Node([TIP])
    node.level = 1
    k, z = seg(1, 99, {2: 0}, 2), seg(2, 199, {2: 100}, 2)
    t = replace(seg(3, 99, {2: 0}, 2), cleaner_offsets={2: 99})
    z2 = replace(seg(4, 199, {2: 100}, 2), cleaner_offsets={2: 199})
    finished = {}
    for segment in (k, z, t, z2):
        node.write(segment)
        finished[segment] = node.write(upd(segment, S.COPY_SEGMENT_FINISHED, 2))
    assert decode_value(finished[t].value).highest_offsets == ((2, 199),)
    assert all(decode_value(finished[s].value).highest_offsets == () for s in (k, z, z2))
    listed = {s.remote_log_segment_id for s in node.applier.store.list_remote_log_segments(TIP, 2)}
    assert k.remote_log_segment_id not in listed
    assert_readers_agree(node)
    node.write(upd(z, S.DELETE_SEGMENT_STARTED, 2))
    node.write(upd(z, S.DELETE_SEGMENT_FINISHED, 2))
    live = assert_readers_agree(node)
    assert ids(live) == {1, 3, 4}
    boot = replay(compact(node.log.records), [TIP])
    assert [s.remote_log_segment_id for s in boot.store.list_remote_log_segments(TIP, 2)] == [
        t.remote_log_segment_id,
        z2.remote_log_segment_id,
    ]
    # T's deletion (it overwrites its FINISHED: nothing overlaps it any more) carries them too.
    node.write(upd(t, S.DELETE_SEGMENT_STARTED, 2))
    assert decode_value(node.log.records[-1].value or b"").highest_offsets == ((2, 199),)
    assert_readers_agree(node)


def test_a_level_0_history_keeps_its_marker_after_the_switch() -> None:
    """At level 0 nothing is tombstoned; when level 1 is switched on, the cleanup manager
    keeps the deleted copy's FINISHED and DELETE_SEGMENT_FINISHED (its history, a marker for
    the copy it displaced), and drops them with that copy's deletion."""
    node = Node([TIP])
    a, b = _displaced_pair(node)
    node.write(upd(b, S.DELETE_SEGMENT_STARTED, 5))
    node.write(upd(b, S.DELETE_SEGMENT_FINISHED, 5))
    assert set(node.applier.keys(TIP)) == {key(1000, 3), key(1000, 4), key(1000, 5)}
    assert_readers_agree(node)
    node.level = 1
    assert node.cleanup() == []
    assert ids(assert_readers_agree(node)) == {1}
    node.write(upd(a, S.DELETE_SEGMENT_STARTED, 5))
    plan = node.write(upd(a, S.DELETE_SEGMENT_FINISHED, 5))
    assert set(plan.tombstones) == {key(1000, e) for e in (3, 4, 5)} | {plan.key}
    assert node.applier.keys(TIP) == {}
    assert assert_readers_agree(node).segments == ()


def test_scenario_5_partition_deletion() -> None:
    node = Node([TIP])
    node.level = 1
    a = seg(1, 999, {0: 0}, 0)
    b = seg(2, 1999, {1: 1000}, 1)
    for s, epoch in ((a, 0), (b, 1)):
        node.write(s)
        node.write(upd(s, S.COPY_SEGMENT_FINISHED, epoch))
    plans = [
        node.write(RemotePartitionDeleteMetadata(TIP, state, 1, 101, 1, 2000))
        for state in (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED)
    ]
    assert [p.key for p in plans] == [key(2000, 1), key(2000, 1)]
    assert all(p.tombstones == () for p in plans)
    finished = node.write(
        RemotePartitionDeleteMetadata(TIP, P.DELETE_PARTITION_FINISHED, 2, 101, 1, 2000)
    )
    assert finished.key == key(2000, 1)
    assert set(finished.tombstones) == {key(999, 0), key(1999, 1)}  # every segment key

    compacted = values(compact(node.log.records))
    assert len(compacted) == 1  # the delete marker remains
    marker_key, marker = compacted[0]
    assert marker_key == key(2000, 1)
    assert marker is not None
    assert marker.event.state is P.DELETE_PARTITION_FINISHED
    live, boot, legacy = readers(node)
    assert live.deleted and boot.deleted and legacy.deleted
    assert node.applier.is_deleted(TIP)
    assert replay(compact(node.log.records), [TIP]).is_deleted(TIP)
    assert node.applier.keys(TIP) == {key(2000, 1): KeyEntry(None, P.DELETE_PARTITION_FINISHED)}


# -- random histories ------------------------------------------------------------------------------


def _readers_agree(node: Node, leaders: list[Leader]) -> None:
    """(a) the live node, (b) a fresh node reading the compacted topic (tombstones expired or
    not), the whole topic, and (c) the legacy replay (the superseded uploads left out) answer
    alike, and as the history says."""
    tips = node.tips
    boot = replay(compact(node.log.records), tips)
    with_tombstones = replay(compact(node.log.records, tombstones_expired=False), tips)
    full = replay(node.log.records, tips)
    legacy = replay_legacy(node.audit, tips)
    for tip, leader in zip(tips, leaders, strict=True):
        superseded = frozenset(leader.superseded)
        a = observe(node.applier.store, tip)
        assert a.deleted == leader.deleted
        forgets = node.level == 1  # tombstones removed deleted segments
        assert differences(a, observe(boot.store, tip), forgets=forgets) == [], "bootstrap"
        assert differences(a, observe(with_tombstones.store, tip), forgets=forgets) == []
        assert observe(full.store, tip) == a, f"full replay of {tip}"
        assert observe(legacy.store, tip, leave_out=superseded) == a, f"legacy replay of {tip}"
        if not a.deleted:
            # Exactly the superseded uploads are what the legacy replay lists in addition.
            assert observe(legacy.store, tip).ids - a.ids == superseded
            assert {s.remote_log_segment_id for s in leader.live} == a.ids


def _markers(node: Node, *, needed: bool) -> None:
    """Level 1: the compacted topic holds, per segment, at most 3 keys describing it: a live
    segment's, or a displacement marker's (a deleted segment's DELETE_SEGMENT_FINISHED with
    ``CopyFinished``, and the keys holding its FINISHED). With ``needed`` (after a cleanup):
    no marker that is not needed, at most one per finished copy and leader epoch where the
    cache does not route it."""
    tips = node.tips
    compacted = compact(node.log.records)
    assert all(r.value is not None for r in compacted)
    boot = replay(compacted, tips)
    fresh_keys = {k: e for tip in tips for k, e in boot.keys(tip).items()}
    assert len(compacted) == len(fresh_keys) <= sum(len(node.applier.keys(tip)) for tip in tips)
    for tip in tips:
        per_segment: dict[RemoteLogSegmentId, list[KeyEntry]] = {}
        for k, entry in boot.keys(tip).items():
            if entry.segment_id is None:
                continue  # a partition delete marker
            assert boot.describes(tip, k), f"{k} describes nothing"
            per_segment.setdefault(entry.segment_id, []).append(entry)
            if boot.store.peek_segment(tip, entry.segment_id) is None:
                assert entry.state in (S.DELETE_SEGMENT_FINISHED, S.COPY_SEGMENT_FINISHED), k
                if entry.state is S.DELETE_SEGMENT_FINISHED:
                    value = decode_value(next(r.value for r in compacted if r.key == k.encode()))
                    assert value.copy_finished, f"{k}: a marker of a segment that never finished"
        assert all(len(entries) <= 3 for entries in per_segment.values()), per_segment
        markers = [
            segment_id
            for segment_id, entries in per_segment.items()
            if boot.store.peek_segment(tip, segment_id) is None
        ]
        for segment_id in markers:
            states = [e.state for e in per_segment[segment_id]]
            assert states.count(S.DELETE_SEGMENT_FINISHED) == 1, (segment_id, states)
        if not needed:
            continue
        assert node.applier.orphan_keys(tip) == []
        store = node.applier.store
        if node.applier.is_deleted(tip):
            assert markers == []
            continue
        unrouted = [
            (s.remote_log_segment_id, e)
            for s in store.list_remote_log_segments(tip)
            if s.state is S.COPY_SEGMENT_FINISHED
            for e, o in s.segment_leader_epochs.items()
            if served_by(store, tip, e, max(o, s.start_offset)) != s.remote_log_segment_id
        ]
        assert len(markers) <= len(unrouted), (markers, unrouted)


def _check_history(seed: int, level_from: int | None, clean: bool) -> None:
    node, leaders = random_history(seed, level_from=level_from, clean_copies=clean)
    _readers_agree(node, leaders)
    if level_from is None or node.level == 0:
        return
    _markers(node, needed=False)
    # The cleanup manager's pass drops the markers no longer needed, and changes no answer.
    node.cleanup()
    _readers_agree(node, leaders)
    _markers(node, needed=True)


@hypothesis.settings(max_examples=100, deadline=None, derandomize=True)
@hypothesis.given(
    seed=st.integers(0, 2**32 - 1),
    level_from=st.sampled_from([None, 0, 20, 40]),
)
def test_random_histories_read_four_ways_agree(seed: int, level_from: int | None) -> None:
    _check_history(seed, level_from, clean=False)


@hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
@hypothesis.given(
    seed=st.integers(0, 2**32 - 1),
    level_from=st.sampled_from([None, 0, 30]),
)
def test_random_histories_with_cleaned_copies_agree(seed: int, level_from: int | None) -> None:
    """Cleaned copies (tiered compaction) of a segment are published under the epoch of the
    segment's own key: they are written under relocated keys."""
    _check_history(seed, level_from, clean=True)


@hypothesis.settings(max_examples=20, deadline=None, derandomize=True)
@hypothesis.given(
    seed=st.integers(0, 2**32 - 1),
    level_from=st.sampled_from([0, 15]),
    clean=st.booleans(),
)
def test_every_state_of_random_histories_reads_alike(
    seed: int, level_from: int, clean: bool
) -> None:
    """Not only the end: after every step of a history (a marker appears when the copy that
    displaced others is deleted, and goes when they are), all readers agree."""
    random_history(
        seed, steps=40, level_from=level_from, clean_copies=clean, after_step=_readers_agree
    )


# -- orphan keys -----------------------------------------------------------------------------------


def test_orphan_keys_after_level_0_then_level_1() -> None:
    node = Node([TIP, OTHER])
    gone = [seg(1, 99, {0: 0}, 0), seg(2, 199, {0: 100}, 0)]  # retention: the oldest first
    kept = seg(3, 299, {0: 200}, 0)
    other = seg(4, 99, {0: 0}, 0, tip=OTHER)
    for s in (*gone, kept, other):
        node.write(s)
        node.write(upd(s, S.COPY_SEGMENT_FINISHED, 0))
    for s in gone:
        node.write(upd(s, S.DELETE_SEGMENT_STARTED, 0))
        node.write(upd(s, S.DELETE_SEGMENT_FINISHED, 0))
    # An invalid transition leaves a bare record under a key of its own (level 0: no tombstone).
    bare = node.write(upd(kept, S.DELETE_SEGMENT_FINISHED, 0))
    assert node.applier.orphan_keys(TIP) == sorted([key(99, 0), key(199, 0), bare.key])
    assert node.applier.orphan_keys(OTHER) == []

    node.level = 1
    assert node.cleanup() == sorted([key(99, 0), key(199, 0), bare.key])
    assert node.applier.orphan_keys(TIP) == []  # idempotent: the tombstones were applied
    assert node.cleanup() == []
    assert set(node.applier.keys(TIP)) == {key(299, 0)}
    live, boot, legacy = readers(node)
    assert live == boot == legacy
    assert ids(live) == {3}
    assert [MetadataKey.parse(r.key) for r in compact(node.log.records) if r.key] == [
        key(299, 0),
        key(99, 0, OTHER),
    ]


def test_orphan_keys_of_a_deleted_partition_and_of_unknown_partitions() -> None:
    node = Node([TIP])
    a = seg(1, 99, {0: 0}, 0)
    node.write(a)
    node.write(upd(a, S.COPY_SEGMENT_FINISHED, 0))
    for state in P:
        node.write(RemotePartitionDeleteMetadata(TIP, state, 1, 1, 0, 100))
    assert node.applier.orphan_keys(TIP) == [key(99, 0)]  # the marker stays
    assert node.applier.orphan_keys(OTHER) == []
    node.level = 1
    node.cleanup()
    assert node.applier.orphan_keys(TIP) == []
    assert list(node.applier.keys(TIP)) == [key(100, 0)]


# -- writing: keys, values, tombstones -------------------------------------------------------------


def test_an_update_never_supersedes_the_upload_in_progress_under_its_key() -> None:
    """The old leader finishes under the new epoch while the new leader's upload of the same
    segment is still COPY_SEGMENT_STARTED: its FINISHED goes to its own key."""
    node = Node([TIP])
    a = seg(1, 99, {3: 0}, 3)
    b = seg(2, 99, {3: 0}, 4)
    node.write(a)
    node.write(b)
    assert node.write(upd(a, S.COPY_SEGMENT_FINISHED, 4)).key == key(99, 3)
    store = node.applier.store
    assert store.peek_segment(TIP, b.remote_log_segment_id) is not None
    assert node.write(upd(b, S.COPY_SEGMENT_FINISHED, 4)).key == key(99, 4)
    live, boot, legacy = readers(node)
    assert live == boot == legacy
    assert ids(live) == {1, 2}


def test_a_cleaned_copy_under_the_same_epoch_gets_a_key_of_its_own(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A cleaned copy has the offsets of the segment it replaces and is published by the same
    leader: its natural key describes that segment, so it is written under the nearest free
    epoch of the end offset (below first), and its later events follow it there."""
    node = Node([TIP])
    a = seg(1, 99, {2: 0}, 2)
    node.write(a)
    node.write(upd(a, S.COPY_SEGMENT_FINISHED, 2))
    cleaned = replace(seg(2, 99, {2: 0}, 2), cleaner_offsets={2: 99})
    with caplog.at_level(logging.INFO, _PROJECTION):
        assert node.write(cleaned).key == key(99, 1)
    assert "describes another live segment" in caplog.text
    assert node.write(upd(cleaned, S.COPY_SEGMENT_FINISHED, 2)).key == key(99, 1)
    assert served(node.applier.store, 2, 50) == 2
    # The replaced segment is deleted later; a copy at epoch 0 relocates upwards.
    node.write(upd(a, S.DELETE_SEGMENT_STARTED, 2))
    node.write(upd(a, S.DELETE_SEGMENT_FINISHED, 2))
    live, boot, legacy = readers(node)
    assert live == boot == legacy
    assert ids(live) == {2}
    node2 = Node([TIP])
    z = seg(3, 99, {0: 0}, 0)
    node2.write(z)
    node2.write(upd(z, S.COPY_SEGMENT_FINISHED, 0))
    assert node2.write(replace(seg(4, 99, {0: 0}, 0), cleaner_offsets={0: 99})).key == key(99, 1)


def test_a_deletion_keeps_the_finished_of_a_copy_another_overlaps() -> None:
    """Two finished copies of the same offsets (a leadership change). Deleting the one the
    other displaced must not move its FINISHED after the other's: a bootstrapping reader would
    route the offsets to it, then to nothing. Deleting the one that displaced the other must
    not move its FINISHED either: it is where the cache displaced the other (the deletion's
    value replaying it later, once the epoch has later segments, would make Kafka's ``put``
    replace the other, which the epoch then no longer lists). Either way the deletion goes to
    the nearest free key."""
    cases = [
        ((1, 2), 1, key(99, 2)),  # A displaced: its FINISHED (99:3) stays, the deletion moves
        ((1, 2), 2, key(99, 2)),  # B displaced A: its FINISHED (99:4) stays too
        ((2, 1), 1, key(99, 2)),  # A displaced B: the same
        ((2, 1), 2, key(99, 2)),  # B displaced: 99:4 is its own key, the nearest free is 99:2
    ]
    for order, deleted, where in cases:
        node = Node([TIP])
        a = seg(1, 99, {3: 0}, 3)
        b = seg(2, 99, {3: 0}, 4)
        node.write(a)
        node.write(b)
        by_n = {1: (a, 3), 2: (b, 4)}
        for n in order:
            s, epoch = by_n[n]
            node.write(upd(s, S.COPY_SEGMENT_FINISHED, epoch))
        victim = by_n[deleted][0]
        plan = node.write(upd(victim, S.DELETE_SEGMENT_STARTED, 4))
        assert plan.key == where, (order, deleted)
        assert decode_value(plan.value).copy_finished
        live, boot, legacy = readers(node)
        assert live == boot == legacy, (order, deleted)
        finished = node.write(upd(victim, S.DELETE_SEGMENT_FINISHED, 4))
        assert decode_value(finished.value).copy_finished
        live, boot, legacy = readers(node)
        assert live == boot == legacy, (order, deleted)


def test_a_key_holding_a_deletion_is_not_reused_at_level_0() -> None:
    """Without tombstones, overwriting the DELETE_SEGMENT_FINISHED of a segment that other keys
    still describe would bring it back for a bootstrapping reader."""
    node = Node([TIP])
    a = seg(1, 656, {3: 600}, 3)
    b = seg(2, 656, {3: 600}, 4)
    for s, epoch in ((a, 3), (b, 4)):
        node.write(s)
        node.write(upd(s, S.COPY_SEGMENT_FINISHED, epoch))
    assert node.write(upd(a, S.DELETE_SEGMENT_STARTED, 7)).key == key(656, 7)
    node.write(upd(a, S.DELETE_SEGMENT_FINISHED, 7))
    assert node.write(upd(b, S.DELETE_SEGMENT_STARTED, 7)).key == key(656, 4)
    node.write(upd(b, S.DELETE_SEGMENT_FINISHED, 7))
    live, boot, legacy = readers(node)
    assert live == boot == legacy
    assert live.segments == ()


def test_invalid_transitions_are_dropped_by_every_reader(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Kafka's cache drops an invalid transition with an ERROR. Its projection record is bare
    (no add record: nothing to catch up) under a key describing no live segment, tombstoned at
    once at level 1; the segment's own key keeps saying what it said."""
    for level in (0, 1):
        node = Node([TIP])
        node.level = level
        s = seg(1, 100, {5: 10}, 5)
        node.write(s)
        expected = s
        steps = [
            (S.DELETE_SEGMENT_FINISHED, False),
            (S.COPY_SEGMENT_FINISHED, True),
            (S.DELETE_SEGMENT_FINISHED, False),
            (S.DELETE_SEGMENT_STARTED, True),
            (S.COPY_SEGMENT_FINISHED, False),
        ]
        for state, valid in steps:
            update = upd(s, state, 5)
            with caplog.at_level(logging.WARNING, _PROJECTION):
                caplog.clear()
                plan = node.write(update)
            value = decode_value(plan.value)
            assert serde.deserialize(plan.audit_value) == update  # the audit has the event
            if valid:
                expected = expected.create_with_updates(update)
                assert value.add_record is not None
                assert plan.key == key(100, 5)
            else:
                assert "invalid transition" in caplog.text
                assert value.add_record is None
                assert value.event == update
                assert plan.key != key(100, 5)
                assert not node.applier.describes(TIP, plan.key)
                assert plan.tombstones == ((plan.key,) if level else ())
            live, boot, legacy = readers(node)
            assert live == boot == legacy, (level, state)
            assert live.segments == (expected,)
            assert observe(replay(node.log.records, [TIP]).store, TIP) == live
        node.write(upd(s, S.DELETE_SEGMENT_FINISHED, 5))
        live, boot, legacy = readers(node)
        assert live == boot == legacy
        assert live.segments == ()


def test_a_bare_update_is_not_applied_where_compaction_made_it_valid() -> None:
    """Level 0: Z and its duplicate C finish (C serves), Z's deletion starts under another key
    (its FINISHED stays where it was: C displaced it), a confused writer publishes Z's
    COPY_SEGMENT_FINISHED again (invalid: a bare record), and Z's deletion finishes over its
    DELETE_SEGMENT_STARTED. In the compacted topic the bare record stands after Z's FINISHED
    and before anything saying Z's deletion started: applied there it would be valid and route
    Z's offsets to Z again (then to nothing once Z is deleted). No reader applies it."""
    node = Node([TIP])
    z, c = seg(1, 367, {2: 351}, 2, start=351), seg(2, 367, {2: 351}, 3, start=351)
    for segment, epoch in ((z, 2), (c, 3)):
        node.write(segment)
        node.write(upd(segment, S.COPY_SEGMENT_FINISHED, epoch))
    assert served(node.applier.store, 2, 351) == 2
    node.write(upd(z, S.DELETE_SEGMENT_STARTED, 4))
    bare = node.write(upd(z, S.COPY_SEGMENT_FINISHED, 1))
    assert decode_value(bare.value).add_record is None
    node.write(upd(z, S.DELETE_SEGMENT_FINISHED, 4))
    assert ids(assert_readers_agree(node)) == {2}
    assert served(replay(compact(node.log.records), [TIP]).store, 2, 351) == 2


def test_writes_that_are_refused() -> None:
    node = Node([TIP])
    applier = node.applier
    a = seg(1, 99, {0: 0}, 0)
    with pytest.raises(IllegalStateError, match="not loaded"):
        applier.plan_write(seg(2, 99, {0: 0}, 0, tip=OTHER), tombstones=False)
    with pytest.raises(RemoteResourceNotFoundException, match="No remote log segment metadata"):
        applier.plan_write(upd(a, S.COPY_SEGMENT_FINISHED, 0), tombstones=False)
    with pytest.raises(InvalidArgumentError):
        applier.plan_write(replace(a, state=S.COPY_SEGMENT_FINISHED), tombstones=False)
    node.write(a)
    with pytest.raises(InvalidArgumentError):
        applier.plan_write(upd(a, S.COPY_SEGMENT_STARTED, 0), tombstones=False)
    node.write(upd(a, S.DELETE_SEGMENT_STARTED, 0))
    node.write(upd(a, S.DELETE_SEGMENT_FINISHED, 0))
    with pytest.raises(RemoteResourceNotFoundException):  # a finished deletion forgets it
        applier.plan_write(upd(a, S.DELETE_SEGMENT_FINISHED, 0), tombstones=False)


def test_epoch_and_end_offset_fallbacks() -> None:
    node = Node([TIP])
    a = seg(1, 99, {2: 0, 5: 50}, None)
    assert node.write(a).key == key(99, 5)  # the segment's highest epoch
    assert node.write(upd(a, S.COPY_SEGMENT_FINISHED, None)).key == key(99, 5)  # its key's
    plan = node.write(upd(a, S.DELETE_SEGMENT_STARTED, 7))
    assert plan.key == key(99, 7)
    assert node.write(upd(a, S.DELETE_SEGMENT_FINISHED, None)).key == key(99, 7)
    b = seg(2, 199, {6: 100}, 6)
    node.write(b)
    # A partition delete without epoch or end offset: the highest known key epoch, end + 1.
    marked = node.write(RemotePartitionDeleteMetadata(TIP, P.DELETE_PARTITION_MARKED, 1, 1))
    assert marked.key == key(200, 7)
    value = decode_value(marked.value)
    assert (value.broker_leader_epoch, value.end_offset) == (7, 200)
    # Later ones: those of the previous marker.
    assert node.write(
        RemotePartitionDeleteMetadata(TIP, P.DELETE_PARTITION_STARTED, 1, 1)
    ).key == key(200, 7)
    # Nothing known at all: epoch 0, log end offset -1.
    empty = Node([TIP])
    assert empty.write(
        RemotePartitionDeleteMetadata(TIP, P.DELETE_PARTITION_MARKED, 1, 1)
    ).key == key(-1, 0)


def test_an_earlier_marker_under_another_key_is_tombstoned() -> None:
    node = Node([TIP])
    node.level = 1
    node.write(RemotePartitionDeleteMetadata(TIP, P.DELETE_PARTITION_MARKED, 1, 1, 3, 500))
    plan = node.write(RemotePartitionDeleteMetadata(TIP, P.DELETE_PARTITION_STARTED, 2, 1, 4, 500))
    assert plan.key == key(500, 4)
    assert plan.tombstones == (key(500, 3),)
    assert list(node.applier.keys(TIP)) == [key(500, 4)]
    assert node.applier.store.remote_partition_delete_metadata(TIP) is not None


# -- reading: records and what they mean ---------------------------------------------------------


def test_legacy_records_then_keyed_ones() -> None:
    """A segment known only from null-key records (Kafka's, or the topic RLMM's) gets a
    self-sufficient keyed value at its next event: a reader of the compacted topic, where the
    legacy records are gone, sees it."""
    node = Node([TIP])
    a = seg(1, 99, {0: 0}, None)
    legacy = [serde.serialize(a), serde.serialize(upd(a, S.COPY_SEGMENT_FINISHED, None))]
    node._consume([node.log.append(None, v) for v in legacy])
    assert node.applier.keys(TIP) == {}
    assert ids(observe(node.applier.store, TIP)) == {1}
    plan = node.write(upd(a, S.DELETE_SEGMENT_STARTED, 3))
    value = decode_value(plan.value)
    assert value.add_record is not None
    assert value.add_record.remote_log_segment_id == a.remote_log_segment_id
    assert value.add_record.state is S.COPY_SEGMENT_STARTED
    assert (value.add_record.start_offset, value.add_record.end_offset) == (0, 99)
    assert value.add_record.segment_leader_epochs == a.segment_leader_epochs
    assert value.copy_finished
    node.audit[:0] = legacy
    live, boot, legacy_state = readers(node)
    assert live == boot == legacy_state
    assert [s.state for s in boot.segments] == [S.DELETE_SEGMENT_STARTED]


def test_a_tombstone_of_the_only_key_of_a_live_segment_forgets_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    node = Node([TIP])
    a = seg(1, 99, {0: 0}, 0)
    node.write(a)
    node.write(upd(a, S.COPY_SEGMENT_FINISHED, 0))
    with caplog.at_level(logging.WARNING, _PROJECTION):
        node._consume([node.log.append(key(99, 0).encode(), None)])
    assert "forgetting segment" in caplog.text
    assert observe(node.applier.store, TIP).segments == ()
    assert node.applier.keys(TIP) == {}
    # As a reader of the compacted topic sees it.
    assert observe(replay(compact(node.log.records), [TIP]).store, TIP).segments == ()


def test_decode() -> None:
    applier = ProjectionApplier(RemotePartitionMetadataStore())
    applier.load(TIP)
    a = seg(1, 99, {0: 0}, 0)
    value = encode_value(ProjectionValue(a, 0))
    with pytest.raises(MetadataRecordError, match="names another partition"):
        applier.decode(key(99, 0, OTHER).encode(), value)
    with pytest.raises(MetadataRecordError, match="has end offset 98, its value 99"):
        applier.decode(key(98, 0).encode(), value)
    finished = encode_value(ProjectionValue(upd(a, S.COPY_SEGMENT_FINISHED, 0), 0, 99, a))
    with pytest.raises(MetadataRecordError, match="has end offset 100, its value 99"):
        applier.decode(key(100, 0).encode(), finished)
    marker = encode_value(
        ProjectionValue(RemotePartitionDeleteMetadata(TIP, P.DELETE_PARTITION_MARKED, 1, 1), 0, 7)
    )
    with pytest.raises(MetadataRecordError, match="has end offset 8, its value 7"):
        applier.decode(key(8, 0).encode(), marker)
    with pytest.raises(MetadataRecordError, match="neither key nor value"):
        applier.decode(None, None)
    with pytest.raises(MetadataRecordError, match="malformed remote log metadata key"):
        applier.decode(b"99", value)
    # A tombstone names its partition by id: the hosted one (with its name), else a name-less
    # partition the consumer task never holds.
    assert applier.decode(key(99, 0).encode(), None).topic_id_partition == TIP
    unhosted = applier.decode(key(99, 0, OTHER).encode(), None).topic_id_partition
    assert unhosted == TopicIdPartition(TOPIC_ID, "", 1)
    snapshot = RemoteLogSegmentMetadataSnapshot.create(a)
    decoded = applier.decode(None, serde.serialize(snapshot))
    assert decoded.topic_id_partition is None
    with pytest.raises(MetadataRecordError, match="apiKey 3"):
        applier.decode(key(99, 0).encode(), serde.serialize(snapshot))
    assert applier.decode(None, serde.serialize(a)).topic_id_partition == TIP


def test_load_unload_and_records_of_partitions_not_loaded() -> None:
    node = Node([TIP])
    a = seg(1, 99, {0: 0}, 0)
    node.write(a)
    applier = node.applier
    applier.unload(TIP)
    assert applier.keys(TIP) == {}
    assert applier.orphan_keys(TIP) == []
    # A record of a partition no longer loaded changes nothing.
    applier.apply(applier.decode(key(99, 0).encode(), encode_value(ProjectionValue(a, 0))))
    assert applier.keys(TIP) == {}
    applier.load(TIP)
    assert applier.keys(TIP) == {}
    assert not applier.store.is_initialized(TIP)
    for record in node.log.records:
        applier.apply(applier.decode(record.key, record.value))
    applier.mark_initialized(TIP)
    assert ids(observe(applier.store, TIP)) == {1}


# -- memory and threads ----------------------------------------------------------------------------


def test_state_is_proportional_to_live_keys() -> None:
    """Many copy/delete cycles at level 1: the applier's state holds the live keys only."""
    node = Node([TIP])
    node.level = 1
    live: list[RemoteLogSegmentMetadata] = []
    for n in range(1, 400):
        epoch = n // 50
        s = seg(n, 100 * n + 99, {epoch: 100 * n}, epoch)
        node.write(s)
        node.write(upd(s, S.COPY_SEGMENT_FINISHED, epoch))
        live.append(s)
        if len(live) > 5:
            old = live.pop(0)
            node.write(upd(old, S.DELETE_SEGMENT_STARTED, epoch))
            node.write(upd(old, S.DELETE_SEGMENT_FINISHED, epoch))
    part = node.applier._parts[TIP]
    assert len(part.keys) == len(part.refs) == len(part.last_key) == len(part.finished) == 5
    assert len(part.positions) == len(part.starts) == len(part.ends) == len(part.by_end) == 5
    assert part.deaths == {}
    assert len(compact(node.log.records)) == 5


def test_concurrent_writers_and_the_consumer_thread() -> None:
    """Writers of four partitions plan and wait for their records while the consumer thread
    applies them and another thread inspects keys and orphans: no error, and the live state is
    the compacted one."""
    tips = [TopicIdPartition(TOPIC_ID, "abc123", p) for p in range(4)]
    node = Node(tips)
    node.level = 1
    log_lock = threading.Lock()
    inbox: queue.Queue[Rec | None] = queue.Queue()
    applied: dict[int, threading.Event] = {}
    errors: list[BaseException] = []

    def consume() -> None:
        while (record := inbox.get()) is not None:
            try:
                event = node.applier.decode(record.key, record.value)
                node.applier.apply(event)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
            applied[record.offset].set()

    def write(event: object) -> None:
        plan = node.applier.plan_write(event, tombstones=True)  # type: ignore[arg-type]
        with log_lock:
            records = [node.log.append(plan.key.encode(), plan.value)]
            records += [node.log.append(k.encode(), None) for k in plan.tombstones]
            for r in records:
                applied[r.offset] = threading.Event()
                inbox.put(r)
        assert applied[records[0].offset].wait(60), "the record was not applied in 60 s"

    def writer(tip: TopicIdPartition) -> None:
        try:
            window: list[RemoteLogSegmentMetadata] = []
            for n in range(1, 60):
                s = seg(n, 100 * n + 99, {0: 100 * n}, 0, tip=tip)
                write(s)
                write(upd(s, S.COPY_SEGMENT_FINISHED, 0))
                window.append(s)
                if len(window) > 3:
                    old = window.pop(0)
                    write(upd(old, S.DELETE_SEGMENT_STARTED, 0))
                    write(upd(old, S.DELETE_SEGMENT_FINISHED, 0))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    stop = threading.Event()

    def inspect() -> None:
        try:
            while not stop.is_set():
                for tip in tips:
                    assert all(k.belongs_to(tip) for k in node.applier.keys(tip))
                    orphans = node.applier.orphan_keys(tip)
                    assert orphans == sorted(orphans)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    consumer = threading.Thread(target=consume)
    inspector = threading.Thread(target=inspect)
    writers = [threading.Thread(target=writer, args=(tip,)) for tip in tips]
    for t in (consumer, inspector, *writers):
        t.start()
    for t in writers:
        t.join(120)
        assert not t.is_alive()
    stop.set()
    inbox.put(None)
    consumer.join(60)
    inspector.join(60)
    assert errors == []
    boot = replay(compact(node.log.records), tips)
    for tip in tips:
        assert observe(boot.store, tip) == observe(node.applier.store, tip)
        assert len(observe(node.applier.store, tip).segments) == 3
