"""The RemoteLogMetadataManager conformance suite: Kafka's RLMM semantics as pytest tests.

Opt in with a two-line test module::

    from tierlog.conformance import RemoteLogMetadataManagerSuite
    from my_package import MyRLMM

    class TestMyRLMM(RemoteLogMetadataManagerSuite):
        plugin_class = MyRLMM

or run it on an installed plugin with ``pytest --tierlog-rlmm NAME`` / ``tierlog conformance
--rlmm NAME``.

What is checked
---------------
Every expectation comes from Kafka's own tests of its RLMM (RemoteLogMetadataCacheTest,
RemoteLogLeaderEpochStateTest, RemoteLogSegmentLifecycleTest, RemoteLogMetadataManagerTest and
TopicBasedRemoteLogMetadataManager{,Restart}Test): the lifecycle of a segment, which lookup sees
a segment in which state, how overlapping and duplicate copies replace each other, the highest
copied offset per leader epoch (it never decreases), ``remote_log_size``, partition deletion,
read-your-writes, and durability across a restart. A hypothesis state machine then drives the
plugin with random sequences of the same operations and compares every query with a small
reference model written from Kafka's ``RemoteLogMetadataCache``.

One group of tests checks tierlog's extension of the metadata, not Kafka's: the cleaner-offset
vector of a segment the log cleaner wrote (``RemoteLogSegmentMetadata.cleaner_offsets``,
compacted topics in tiered storage, KIP-1272). It must come back exactly as added, through every
read and state change and across a restart, and stay None for a segment added without one. The
vectors used there form one lineage (no zombie leader), so routing by vector and Kafka's rule
(the last finished copy of an offset is served) give the same answers.

How the RLMM is driven
----------------------
Like Kafka's RemoteLogManager drives it: the class is constructed with no arguments,
``configure``d once (``conformance_config()`` or the suite's ``config``, with
``--tierlog-config`` keys on top), given its partitions with ``on_partition_leadership_changes``
(the suite then waits for ``is_ready``, as the RLM's tasks do), and closed at teardown. A
"restart" closes the instance and builds a new one with the same configuration. Every test uses
partitions with fresh random topic ids, so a configuration that points at a shared backend works
too.

Capabilities
------------
Not every RLMM does everything Kafka's does. Declare what yours lacks on the suite subclass
(``capabilities = RemoteLogMetadataManagerCapabilities(partition_delete=Unsupported("..."))``)
or with a ``conformance_capabilities()`` classmethod on the plugin class; tests that need a
missing capability are skipped with the reason, so the report says what the plugin does not do.

Reading a failure
-----------------
Each test's docstring says what it checks and how to fix a failure; the assertion messages name
the call, its arguments, what came back and what Kafka returns.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import hypothesis
import hypothesis.strategies as st
import pytest
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tierlog.conformance._base import RLMM_OPTION, Capability, SuiteBase, Unsupported, require
from tierlog.spi import (
    CustomMetadata,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageNotReadyException,
    TopicIdPartition,
    Uuid,
)

__all__ = [
    "RemoteLogMetadataManagerCapabilities",
    "RemoteLogMetadataManagerHarness",
    "RemoteLogMetadataManagerSuite",
]

STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED

SEG_SIZE = 1024 * 1024
"""Kafka's tests use 1 MiB segments; ``remote_log_size`` expectations are multiples of it."""

_clock = itertools.count(1_700_000_000_000)


def _now_ms() -> int:
    """Distinct, increasing event timestamps, so a dropped update is visible in the fields."""
    return next(_clock)


# Capabilities ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RemoteLogMetadataManagerCapabilities:
    """What the RLMM under test supports beyond the core contract; each field is ``True`` or
    ``Unsupported("why")``. The defaults describe Kafka's TopicBasedRemoteLogMetadataManager."""

    durable_across_restart: Capability = True
    """Metadata written before ``close()`` is served by a new instance with the same
    configuration once its partitions are assigned again (Kafka replays the metadata topic).
    Unsupported for an in-memory RLMM; the restart tests and the state machine's restart and
    stop/reassign steps are then skipped."""

    readiness_tracking: Capability = True
    """The RLMM knows which partitions are assigned to it, as TBRLMM does: ``is_ready`` is False
    until ``on_partition_leadership_changes`` has loaded a partition and after
    ``on_stop_partitions``; lookups of a partition that is not assigned raise
    ``RemoteResourceNotFoundException``; writes for it fail with ``RemoteStorageException``.
    Unsupported for an RLMM that serves every partition from a shared store (the SPI's default
    ``is_ready`` is always True)."""

    txn_index_tracking: Capability = True
    """``next_segment_with_txn_index`` skips segments whose ``txn_idx_empty`` is True (KIP-1058).
    Unsupported means the SPI default (the segment holding the offset, whatever its index)."""

    partition_delete: Capability = True
    """``put_remote_partition_delete_metadata`` is honoured: MARKED and STARTED keep the
    segments readable, FINISHED drops the partition so lookups raise
    ``RemoteResourceNotFoundException``."""

    cleaner_offsets: Capability = True
    """``RemoteLogSegmentMetadata.cleaner_offsets`` (tierlog's cleaner-offset vector of a
    cleaned segment) is stored and returned as added. Unsupported for an RLMM that drops it; such
    an RLMM cannot fence a zombie leader's cleaning, so it must not serve compacted topics."""

    keeps_superseded_uploads: Capability = True
    """A COPY_SEGMENT_STARTED segment stays listed when another segment ending at the same
    offset is added under the same leader epoch, as in Kafka's cache. Unsupported for the
    compacted RLMM (KAFKA-20033): both uploads share a key (``topicId:partition:endOffset:
    brokerLeaderEpoch``, the epoch taken from the segment when the caller sets none), so the
    later one supersedes the failed one (the seed's scenario 3); the state machine's model then
    forgets the superseded segment, as the RLMM does."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not True and not isinstance(value, Unsupported):
                raise TypeError(
                    f"capability {f.name} must be True or Unsupported('reason'), got {value!r}"
                )


# Building blocks ---------------------------------------------------------------------------------
def new_partition(topic: str = "foo", partition: int = 0) -> TopicIdPartition:
    """A partition with a fresh random topic id, so tests never see each other's metadata."""
    return TopicIdPartition(Uuid.random(), topic, partition)


def segment(
    tip: TopicIdPartition,
    start: int,
    end: int,
    epochs: Mapping[int, int],
    *,
    size: int = SEG_SIZE,
    txn_idx_empty: bool = False,
    custom_metadata: CustomMetadata | None = None,
    broker_id: int = 0,
    cleaner_offsets: Mapping[int, int] | None = None,
) -> RemoteLogSegmentMetadata:
    """A new segment in ``COPY_SEGMENT_STARTED``, as the RLM's copy task first records it;
    ``cleaner_offsets`` makes it a segment the log cleaner wrote."""
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(tip),
        start,
        end,
        -1,
        broker_id,
        _now_ms(),
        size,
        epochs,
        custom_metadata,
        STARTED,
        txn_idx_empty,
        cleaner_offsets,
    )


def update_of(
    metadata: RemoteLogSegmentMetadata | RemoteLogSegmentId,
    state: RemoteLogSegmentState,
    *,
    custom_metadata: CustomMetadata | None = None,
    broker_id: int = 1,
) -> RemoteLogSegmentMetadataUpdate:
    """An update of ``metadata``'s segment to ``state``."""
    segment_id = (
        metadata.remote_log_segment_id
        if isinstance(metadata, RemoteLogSegmentMetadata)
        else metadata
    )
    return RemoteLogSegmentMetadataUpdate(segment_id, _now_ms(), custom_metadata, state, broker_id)


def _describe(value: object) -> str:
    if isinstance(value, RemoteLogSegmentMetadata):
        epochs = dict(value.segment_leader_epochs)
        return (
            f"<segment {value.remote_log_segment_id.id} [{value.start_offset}..{value.end_offset}]"
            f" epochs={epochs} {value.state.name} size={value.segment_size_in_bytes}"
            f" txn_idx_empty={value.txn_idx_empty} broker={value.broker_id}"
            f" custom={value.custom_metadata}{_describe_vector(value.cleaner_offsets)}>"
        )
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_describe(v) for v in value) + "]"
    return repr(value)


def _describe_vector(vector: Mapping[int, int] | None) -> str:
    return "" if vector is None else f" cleaner_offsets={dict(vector)}"


def _vectors(segments: Iterable[RemoteLogSegmentMetadata]) -> dict[Uuid, dict[int, int] | None]:
    """Each segment's cleaner-offset vector by segment id, as plain dicts (None: no vector)."""
    return {
        m.remote_log_segment_id.id: None if m.cleaner_offsets is None else dict(m.cleaner_offsets)
        for m in segments
    }


def _assert_vectors(
    got: Iterable[RemoteLogSegmentMetadata],
    expected: Iterable[RemoteLogSegmentMetadata],
    what: str,
) -> None:
    want, have = _vectors(expected), _vectors(got)
    assert have == want, (
        f"{what}: cleaner_offsets by segment id are {have}; they must be as added: {want} "
        "(None for a segment added without a vector)"
    )


class RemoteLogMetadataManagerHarness:
    """Builds, assigns, restarts and closes the RLMM under test the way Kafka's RLM does.

    ``rlmm`` is the current instance; ``restart()`` replaces it. The harness remembers which
    partitions were assigned (as leader or follower) so a restart assigns them again.
    """

    def __init__(
        self,
        plugin_class: type[RemoteLogMetadataManager],
        config: Mapping[str, str],
        *,
        ready_timeout_s: float = 30.0,
        write_timeout_s: float = 30.0,
    ) -> None:
        self.plugin_class = plugin_class
        self.config = dict(config)
        self.ready_timeout_s = ready_timeout_s
        self.write_timeout_s = write_timeout_s
        self.leaders: set[TopicIdPartition] = set()
        self.followers: set[TopicIdPartition] = set()
        self.deleted: set[TopicIdPartition] = set()
        """Partitions whose deletion finished: never expected to become ready again."""
        self._rlmm: RemoteLogMetadataManager | None = None

    @property
    def rlmm(self) -> RemoteLogMetadataManager:
        if self._rlmm is None:
            self._rlmm = self._build()
        return self._rlmm

    def _build(self) -> RemoteLogMetadataManager:
        instance = self.plugin_class()
        instance.configure(dict(self.config))
        return instance

    # Assignment --------------------------------------------------------------------------------
    def assign(
        self,
        leaders: Iterable[TopicIdPartition] = (),
        followers: Iterable[TopicIdPartition] = (),
    ) -> None:
        """``on_partition_leadership_changes``, then wait until every partition ``is_ready``."""
        leader_set, follower_set = set(leaders), set(followers)
        self.rlmm.on_partition_leadership_changes(leader_set, follower_set)
        self.leaders |= leader_set
        self.followers |= follower_set
        self.followers -= leader_set
        self.leaders -= follower_set
        self.wait_ready(leader_set | follower_set)

    def wait_ready(self, partitions: Iterable[TopicIdPartition]) -> None:
        pending = set(partitions) - self.deleted
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            pending = {tp for tp in pending if not self.rlmm.is_ready(tp)}
            if not pending:
                return
            if time.monotonic() > deadline:
                names = ", ".join(sorted(str(tp) for tp in pending))
                pytest.fail(
                    f"is_ready() stayed False for {self.ready_timeout_s}s after "
                    f"on_partition_leadership_changes for: {names}. The RLM never runs tasks "
                    "for a partition that is not ready: load the partition's metadata and mark "
                    "it ready once it is loaded.",
                    pytrace=False,
                )
            time.sleep(0.01)

    def stop(self, partitions: Iterable[TopicIdPartition]) -> None:
        """``on_stop_partitions``: this node no longer hosts the partitions."""
        stopped = set(partitions)
        self.rlmm.on_stop_partitions(stopped)
        self.leaders -= stopped
        self.followers -= stopped

    def restart(self) -> RemoteLogMetadataManager:
        """Close the instance, build a new one with the same configuration, re-assign."""
        self.close()
        self._rlmm = self._build()
        leaders, followers = set(self.leaders), set(self.followers)
        if leaders or followers:
            self.assign(leaders, followers)
        return self._rlmm

    def close(self) -> None:
        if self._rlmm is not None:
            instance, self._rlmm = self._rlmm, None
            instance.close()

    # Writes ------------------------------------------------------------------------------------
    def outcome(self, call: Callable[[], concurrent.futures.Future[None]]) -> Exception | None:
        """Run a mutating call and wait for its future; the exception it raised (from the call
        itself or from the future), or ``None``. A future that never completes fails the test."""
        try:
            future = call()
        except Exception as exc:
            return exc
        if not isinstance(future, concurrent.futures.Future):
            pytest.fail(
                f"a mutating RLMM call returned {future!r}, not a concurrent.futures.Future",
                pytrace=False,
            )
        try:
            future.result(timeout=self.write_timeout_s)
        except concurrent.futures.TimeoutError:
            pytest.fail(
                f"a mutating RLMM call's future did not complete within {self.write_timeout_s}s",
                pytrace=False,
            )
        except Exception as exc:
            return exc
        return None

    def _expect_ok(self, what: str, call: Callable[[], concurrent.futures.Future[None]]) -> None:
        exc = self.outcome(call)
        if exc is not None:
            raise AssertionError(f"{what} failed: {type(exc).__name__}: {exc}") from exc

    def add(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._expect_ok(
            f"add_remote_log_segment_metadata({_describe(metadata)})",
            lambda: self.rlmm.add_remote_log_segment_metadata(metadata),
        )

    def update(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        self._expect_ok(
            f"update_remote_log_segment_metadata({update.remote_log_segment_id.id} -> "
            f"{update.state.name})",
            lambda: self.rlmm.update_remote_log_segment_metadata(update),
        )

    def finish(self, metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
        """Add ``metadata`` and move it to COPY_SEGMENT_FINISHED; the metadata now stored."""
        self.add(metadata)
        upd = update_of(metadata, FINISHED)
        self.update(upd)
        return metadata.create_with_updates(upd)

    def move(
        self, metadata: RemoteLogSegmentMetadata, state: RemoteLogSegmentState, **kw: Any
    ) -> RemoteLogSegmentMetadata:
        """Update ``metadata``'s segment to ``state``; the metadata now stored."""
        upd = update_of(metadata, state, **kw)
        self.update(upd)
        return metadata.create_with_updates(upd)

    def put_partition_delete(
        self, tip: TopicIdPartition, state: RemotePartitionDeleteState
    ) -> None:
        delete = RemotePartitionDeleteMetadata(tip, state, _now_ms(), 0)
        self._expect_ok(
            f"put_remote_partition_delete_metadata({tip}, {state.name})",
            lambda: self.rlmm.put_remote_partition_delete_metadata(delete),
        )
        if state is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
            self.deleted.add(tip)

    # Reads -------------------------------------------------------------------------------------
    def listed(
        self, tip: TopicIdPartition, epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        if epoch is None:
            return list(self.rlmm.list_remote_log_segments(tip))
        return list(self.rlmm.list_remote_log_segments(tip, epoch))


# Assertions --------------------------------------------------------------------------------------
def _by_id(segments: Iterable[RemoteLogSegmentMetadata]) -> dict[Uuid, RemoteLogSegmentMetadata]:
    return {m.remote_log_segment_id.id: m for m in segments}


def _assert_rlsm(
    rlmm: RemoteLogMetadataManager,
    tip: TopicIdPartition,
    epoch: int,
    offset: int,
    expected: RemoteLogSegmentMetadata | None,
) -> None:
    got = rlmm.remote_log_segment_metadata(tip, epoch, offset)
    assert got == expected, (
        f"remote_log_segment_metadata(epoch={epoch}, offset={offset}) returned "
        f"{_describe(got)}; Kafka returns {_describe(expected)}"
    )


def _assert_highest(
    rlmm: RemoteLogMetadataManager, tip: TopicIdPartition, epoch: int, expected: int | None
) -> None:
    got = rlmm.highest_offset_for_epoch(tip, epoch)
    assert got == expected, (
        f"highest_offset_for_epoch(epoch={epoch}) returned {got!r}; Kafka returns {expected!r}"
    )


def _runs(
    segments: Sequence[RemoteLogSegmentMetadata],
) -> list[tuple[int, dict[Uuid, RemoteLogSegmentMetadata]]]:
    """The list as runs of equal start offsets, each run as a map by id (order-free)."""
    runs: list[tuple[int, dict[Uuid, RemoteLogSegmentMetadata]]] = []
    for m in segments:
        if runs and runs[-1][0] == m.start_offset:
            runs[-1][1][m.remote_log_segment_id.id] = m
        else:
            runs.append((m.start_offset, {m.remote_log_segment_id.id: m}))
    return runs


def _assert_listed_in_order(
    got: Sequence[RemoteLogSegmentMetadata],
    expected: Sequence[RemoteLogSegmentMetadata],
    what: str,
) -> None:
    """The segments of ``expected`` in its order; segments with equal start offsets may come
    in any order among themselves (Kafka sorts with a hash set's order as the tie-break)."""
    assert len(got) == len(expected) and _runs(got) == _runs(expected), (
        f"{what} returned {_describe(list(got))}; Kafka returns {_describe(list(expected))}"
    )


def _assert_same_set(
    got: Sequence[RemoteLogSegmentMetadata],
    expected: Iterable[RemoteLogSegmentMetadata],
    what: str,
) -> None:
    want = list(expected)
    assert _by_id(got) == _by_id(want) and len(got) == len(want), (
        f"{what} returned {_describe(list(got))}; Kafka returns (in any order) {_describe(want)}"
    )


def _raises_not_found(call: Callable[[], object], what: str, patience_s: float = 0.0) -> None:
    """``call`` raises RemoteResourceNotFoundException (possibly while iterating its result).

    With ``patience_s``, a RemoteStorageNotReadyException (an RLMM still replaying after an
    assignment) is retried until the time is up.
    """
    deadline = time.monotonic() + patience_s
    while True:
        try:
            result = call()
            if isinstance(result, Iterator):
                list(result)
        except RemoteResourceNotFoundException:
            return
        except RemoteStorageNotReadyException:
            if time.monotonic() < deadline:
                time.sleep(0.01)
                continue
            raise
        except Exception as exc:
            raise AssertionError(
                f"{what} raised {type(exc).__name__}: {exc}; Kafka raises "
                "RemoteResourceNotFoundException"
            ) from exc
        raise AssertionError(
            f"{what} returned normally; Kafka raises RemoteResourceNotFoundException"
        )


def _expect_error(exc: Exception | None, kind: type[Exception], what: str, why: str) -> None:
    if exc is None:
        raise AssertionError(f"{what} succeeded; it must raise {kind.__name__}: {why}")
    if not isinstance(exc, kind):
        raise AssertionError(
            f"{what} raised {type(exc).__name__}: {exc}; it must raise {kind.__name__}: {why}"
        ) from exc


# The reference model ------------------------------------------------------------------------------
@dataclass
class _EpochModel:
    """Kafka's ``RemoteLogLeaderEpochState``, with plain containers."""

    offset_to_id: dict[int, RemoteLogSegmentId] = field(default_factory=dict)
    unreferenced: set[RemoteLogSegmentId] = field(default_factory=set)
    highest: int | None = None


def _epoch_end(metadata: RemoteLogSegmentMetadata, epoch: int) -> int:
    """The last offset of ``epoch`` inside the segment: the next epoch's start - 1, or the end."""
    later = [start for e, start in metadata.segment_leader_epochs.items() if e > epoch]
    return min(later) - 1 if later else metadata.end_offset


class _PartitionModel:
    """Kafka's ``RemoteLogMetadataCache`` for one partition, written for obviousness, not speed.

    Every method transcribes the Java (KAFKA-FACTS §3.3/3.4) line by line; the state machine
    trusts this model, so keep it boring.
    """

    def __init__(self) -> None:
        self.segments: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        self.epochs: dict[int, _EpochModel] = {}

    def _epoch(self, epoch: int) -> _EpochModel:
        if epoch not in self.epochs:
            self.epochs[epoch] = _EpochModel()
        return self.epochs[epoch]

    def add(self, metadata: RemoteLogSegmentMetadata) -> None:
        existing = self.segments.get(metadata.remote_log_segment_id)
        if not RemoteLogSegmentState.is_valid_transition(
            existing.state if existing else None, metadata.state
        ):
            return  # Kafka logs an error and drops the event
        for epoch in metadata.segment_leader_epochs:
            self._epoch(epoch).unreferenced.add(metadata.remote_log_segment_id)
        self.segments[metadata.remote_log_segment_id] = metadata

    def knows(self, segment_id: RemoteLogSegmentId) -> bool:
        return segment_id in self.segments

    def supersede(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Forget the COPY_SEGMENT_STARTED segments ``metadata`` supersedes under a KAFKA-20033
        key: another id, the same end offset, the same highest leader epoch (the key's epoch
        when the caller sets none). Not Kafka's cache: see ``keeps_superseded_uploads``."""
        epoch = max(metadata.segment_leader_epochs)
        same_key = [
            other
            for other in self.segments.values()
            if other.remote_log_segment_id != metadata.remote_log_segment_id
            and other.end_offset == metadata.end_offset
            and max(other.segment_leader_epochs) == epoch
        ]
        if any(other.state is not STARTED for other in same_key):
            return  # the key holds a live segment: the add goes to another key
        for other in same_key:
            for state in (DELETE_STARTED, DELETE_FINISHED):
                self.update(update_of(other, state))

    def update(self, upd: RemoteLogSegmentMetadataUpdate) -> None:
        seg_id = upd.remote_log_segment_id
        existing = self.segments[seg_id]
        if not RemoteLogSegmentState.is_valid_transition(existing.state, upd.state):
            return  # dropped
        new = existing.create_with_updates(upd)
        if upd.state is FINISHED:
            for epoch, start in new.segment_leader_epochs.items():
                end = _epoch_end(new, epoch)
                state = self._epoch(epoch)
                while state.offset_to_id:
                    last = max(state.offset_to_id)
                    assert state.highest is not None
                    if not (last >= start and state.highest <= end):
                        break
                    state.unreferenced.add(state.offset_to_id.pop(last))
                state.offset_to_id[start] = seg_id
                state.unreferenced.discard(seg_id)
                state.highest = end if state.highest is None else max(state.highest, end)
            self.segments[seg_id] = new
        elif upd.state is DELETE_STARTED:
            for epoch, start in new.segment_leader_epochs.items():
                state = self._epoch(epoch)
                if state.offset_to_id.get(start) == seg_id:
                    del state.offset_to_id[start]
                state.unreferenced.add(seg_id)
            self.segments[seg_id] = new
        elif upd.state is DELETE_FINISHED:
            for epoch in new.segment_leader_epochs:
                self._epoch(epoch).unreferenced.discard(seg_id)
            del self.segments[seg_id]

    # Queries -----------------------------------------------------------------------------------
    def rlsm(self, epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        state = self.epochs.get(epoch)
        if state is None:
            return None
        floor = [start for start in state.offset_to_id if start <= offset]
        if not floor:
            return None
        metadata = self.segments.get(state.offset_to_id[max(floor)])
        if metadata is None or offset > _epoch_end(metadata, epoch):
            return None
        return metadata

    def next_with_txn_index(self, epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        metadata = self.rlsm(epoch, offset)
        while metadata is not None and metadata.txn_idx_empty:
            metadata = self.rlsm(epoch, metadata.end_offset + 1)
        return metadata

    def listed(self, epoch: int | None = None) -> list[RemoteLogSegmentMetadata]:
        if epoch is None:
            return list(self.segments.values())
        state = self.epochs.get(epoch)
        if state is None:
            return []
        # Kafka: the index in key order (an epoch's start offset inside each segment); only
        # when there are unreferenced segments is everything sorted by segment start offset.
        listed = [self.segments[state.offset_to_id[k]] for k in sorted(state.offset_to_id)]
        if not state.unreferenced:
            return listed
        listed += [self.segments[i] for i in state.unreferenced]
        return sorted(listed, key=lambda m: m.start_offset)

    def highest(self, epoch: int) -> int | None:
        state = self.epochs.get(epoch)
        return None if state is None else state.highest

    def size(self, epoch: int) -> int:
        return sum(m.segment_size_in_bytes for m in self.listed(epoch))


@st.composite
def _segment_specs(draw: st.DrawFn) -> dict[str, Any]:
    """Offsets, epochs, size and flags of a random segment in a small space, so segments of a
    run overlap, duplicate and share epochs often."""
    start = draw(st.integers(0, 60))
    end = start + draw(st.integers(0, 25))
    n_epochs = draw(st.integers(1, min(3, end - start + 1)))
    first_epoch = draw(st.integers(0, 3))
    epoch_numbers = [first_epoch]
    for _ in range(n_epochs - 1):
        epoch_numbers.append(epoch_numbers[-1] + draw(st.integers(1, 2)))
    later_starts = sorted(
        draw(st.sets(st.integers(start + 1, end), min_size=n_epochs - 1, max_size=n_epochs - 1))
        if n_epochs > 1
        else set()
    )
    return {
        "start": start,
        "end": end,
        "epochs": dict(zip(epoch_numbers, [start, *later_starts], strict=True)),
        "size": draw(st.integers(0, 4096)),
        "txn_idx_empty": draw(st.booleans()),
        "custom": draw(st.none() | st.binary(max_size=6).map(CustomMetadata)),
    }


_CUSTOM = st.none() | st.binary(max_size=6).map(CustomMetadata)
_NEXT_STATE: Mapping[RemoteLogSegmentState, RemoteLogSegmentState] = {
    STARTED: FINISHED,
    FINISHED: DELETE_STARTED,
    DELETE_STARTED: DELETE_FINISHED,
    DELETE_FINISHED: DELETE_FINISHED,
}


def _build_state_machine(
    make_harness: Callable[[], RemoteLogMetadataManagerHarness],
    caps: RemoteLogMetadataManagerCapabilities,
) -> type[RuleBasedStateMachine]:
    durable = caps.durable_across_restart is True
    deletes = caps.partition_delete is True
    ready = caps.readiness_tracking is True
    txn = caps.txn_index_tracking is True
    keeps_superseded = caps.keeps_superseded_uploads is True

    class RLMMStateMachine(RuleBasedStateMachine):
        """Random operations on the RLMM and on the reference model; every query must agree."""

        segments = Bundle("segments")

        def __init__(self) -> None:
            super().__init__()
            self.harness = make_harness()
            self.tips = [new_partition("sm", 0), new_partition("sm", 1), new_partition("other", 0)]
            try:
                self.harness.assign(self.tips[:2], self.tips[2:])
            except BaseException:
                self.harness.close()  # teardown() does not run when __init__ fails
                raise
            self.model: dict[TopicIdPartition, _PartitionModel] = {
                tip: _PartitionModel() for tip in self.tips
            }
            self.deleted: set[TopicIdPartition] = set()
            self.ever: dict[TopicIdPartition, list[RemoteLogSegmentMetadata]] = {
                tip: [] for tip in self.tips
            }

        def teardown(self) -> None:
            self.harness.close()

        # Rules -----------------------------------------------------------------------------
        @rule(target=segments, p=st.integers(0, 2), spec=_segment_specs())
        def add_segment(self, p: int, spec: dict[str, Any]) -> object:
            tip = self.tips[p]
            if tip in self.deleted:
                return multiple()
            metadata = segment(
                tip,
                spec["start"],
                spec["end"],
                spec["epochs"],
                size=spec["size"],
                txn_idx_empty=spec["txn_idx_empty"],
                custom_metadata=spec["custom"],
            )
            self.harness.add(metadata)
            if not keeps_superseded:
                self.model[tip].supersede(metadata)
            self.model[tip].add(metadata)
            self.ever[tip].append(metadata)
            return metadata

        @rule(metadata=segments)
        def add_same_segment_again(self, metadata: RemoteLogSegmentMetadata) -> None:
            """A retried add: valid from STARTED (and after DELETE_FINISHED), dropped else."""
            tip = metadata.topic_id_partition
            if tip in self.deleted:
                return
            self.harness.add(metadata)
            current = self.model[tip].segments.get(metadata.remote_log_segment_id)
            if not keeps_superseded and (current is None or current.state is STARTED):
                # A valid re-add takes its key back from what superseded it meanwhile.
                self.model[tip].supersede(metadata)
            self.model[tip].add(metadata)

        @rule(metadata=segments, custom=_CUSTOM)
        def advance_segment(
            self, metadata: RemoteLogSegmentMetadata, custom: CustomMetadata | None
        ) -> None:
            """The RLM's path: STARTED -> FINISHED -> DELETE_STARTED -> DELETE_FINISHED."""
            tip = metadata.topic_id_partition
            current = self.model[tip].segments.get(metadata.remote_log_segment_id)
            if tip in self.deleted or current is None:
                return
            target = _NEXT_STATE[current.state]
            upd = update_of(metadata, target, custom_metadata=custom)
            self.harness.update(upd)
            self.model[tip].update(upd)

        @rule(
            metadata=segments,
            state=st.sampled_from(RemoteLogSegmentState),
            custom=_CUSTOM,
            broker=st.integers(0, 3),
        )
        def update_segment(
            self,
            metadata: RemoteLogSegmentMetadata,
            state: RemoteLogSegmentState,
            custom: CustomMetadata | None,
            broker: int,
        ) -> None:
            tip = metadata.topic_id_partition
            if tip in self.deleted:
                return
            upd = update_of(metadata, state, custom_metadata=custom, broker_id=broker)
            exc = self.harness.outcome(
                lambda: self.harness.rlmm.update_remote_log_segment_metadata(upd)
            )
            what = f"update to {state.name} of {_describe(metadata)}"
            if state is STARTED:
                _expect_error(exc, ValueError, what, "an update may not be COPY_SEGMENT_STARTED")
                return
            if not self.model[tip].knows(metadata.remote_log_segment_id):
                _expect_error(exc, RemoteResourceNotFoundException, what, "the segment is unknown")
                return
            if exc is not None:
                raise AssertionError(
                    f"{what} raised {type(exc).__name__}: {exc}; a valid update must succeed "
                    "and an invalid transition must be dropped silently (Kafka logs it)"
                ) from exc
            self.model[tip].update(upd)

        @rule(
            p=st.integers(0, 2),
            spec=_segment_specs(),
            state=st.sampled_from([FINISHED, DELETE_STARTED, DELETE_FINISHED]),
            unknown_update=st.booleans(),
        )
        def rejected_write(
            self,
            p: int,
            spec: dict[str, Any],
            state: RemoteLogSegmentState,
            unknown_update: bool,
        ) -> None:
            """An add in a state other than STARTED (ValueError), or an update of a segment
            that was never added (RemoteResourceNotFoundException); neither changes anything."""
            tip = self.tips[p]
            if tip in self.deleted:
                return
            segment_id = RemoteLogSegmentId.generate_new(tip)
            if unknown_update:
                upd = update_of(segment_id, state)
                exc = self.harness.outcome(
                    lambda: self.harness.rlmm.update_remote_log_segment_metadata(upd)
                )
                _expect_error(
                    exc,
                    RemoteResourceNotFoundException,
                    "update of an unknown segment",
                    "the segment was never added",
                )
                return
            metadata = RemoteLogSegmentMetadata(
                segment_id,
                spec["start"],
                spec["end"],
                -1,
                0,
                _now_ms(),
                spec["size"],
                spec["epochs"],
                None,
                state,
            )
            exc = self.harness.outcome(
                lambda: self.harness.rlmm.add_remote_log_segment_metadata(metadata)
            )
            _expect_error(
                exc,
                ValueError,
                f"add in state {state.name}",
                "a new segment must be COPY_SEGMENT_STARTED",
            )

        @precondition(lambda self: deletes)
        @rule(p=st.integers(0, 2), state=st.sampled_from(RemotePartitionDeleteState))
        def partition_delete(self, p: int, state: RemotePartitionDeleteState) -> None:
            tip = self.tips[p]
            if tip in self.deleted:
                return
            self.harness.put_partition_delete(tip, state)
            if state is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                self.deleted.add(tip)

        @precondition(lambda self: durable)
        @rule()
        def restart(self) -> None:
            self.harness.restart()

        @precondition(lambda self: durable)
        @rule(p=st.integers(0, 2))
        def stop_and_reassign(self, p: int) -> None:
            tip = self.tips[p]
            self.harness.stop([tip])
            if ready:
                assert not self.harness.rlmm.is_ready(tip), (
                    f"is_ready({tip}) is True after on_stop_partitions"
                )
            self.harness.assign([tip])

        # Invariants ------------------------------------------------------------------------
        @invariant()
        def queries_agree_with_the_model(self) -> None:
            rlmm = self.harness.rlmm
            for tip in self.tips:
                if tip in self.deleted:
                    self._check_deleted(rlmm, tip)
                    continue
                if ready:
                    assert rlmm.is_ready(tip), f"is_ready({tip}) is False while assigned"
                self._check_partition(rlmm, tip, self.model[tip])

        def _check_deleted(self, rlmm: RemoteLogMetadataManager, tip: TopicIdPartition) -> None:
            patience = self.harness.ready_timeout_s
            _raises_not_found(
                lambda: rlmm.list_remote_log_segments(tip),
                "list_remote_log_segments after DELETE_PARTITION_FINISHED",
                patience_s=patience,
            )
            _raises_not_found(
                lambda: rlmm.remote_log_segment_metadata(tip, 0, 0),
                "remote_log_segment_metadata after DELETE_PARTITION_FINISHED",
                patience_s=patience,
            )

        def _check_partition(
            self, rlmm: RemoteLogMetadataManager, tip: TopicIdPartition, model: _PartitionModel
        ) -> None:
            _assert_same_set(
                list(rlmm.list_remote_log_segments(tip)),
                model.listed(),
                f"list_remote_log_segments({tip})",
            )
            epochs = {e for m in self.ever[tip] for e in m.segment_leader_epochs} | {99}
            for epoch in sorted(epochs):
                _assert_listed_in_order(
                    list(rlmm.list_remote_log_segments(tip, epoch)),
                    model.listed(epoch),
                    f"list_remote_log_segments(epoch={epoch})",
                )
                _assert_highest(rlmm, tip, epoch, model.highest(epoch))
                got_size = rlmm.remote_log_size(tip, epoch)
                assert got_size == model.size(epoch), (
                    f"remote_log_size(epoch={epoch}) is {got_size}; Kafka: {model.size(epoch)}"
                )
            probes = {(99, 0)}
            for m in self.ever[tip]:
                for epoch, start in m.segment_leader_epochs.items():
                    end = _epoch_end(m, epoch)
                    probes |= {(epoch, start), (epoch, end), (epoch, end + 1)}
                    if start > 0:
                        probes.add((epoch, start - 1))
            for epoch, offset in sorted(probes):
                _assert_rlsm(rlmm, tip, epoch, offset, model.rlsm(epoch, offset))
                got = rlmm.next_segment_with_txn_index(tip, epoch, offset)
                want = model.next_with_txn_index(epoch, offset)
                allowed = [want] if txn else [want, model.rlsm(epoch, offset)]
                assert got in allowed, (
                    f"next_segment_with_txn_index(epoch={epoch}, offset={offset}) returned "
                    f"{_describe(got)}; Kafka returns {_describe(want)}"
                )

    return RLMMStateMachine


# The suite ---------------------------------------------------------------------------------------
class RemoteLogMetadataManagerSuite(SuiteBase):
    """Kafka's RLMM contract as tests; subclass it with ``plugin_class`` set (see the module).

    Class attributes a subclass may set: ``plugin_class``, ``config``, ``capabilities``,
    ``ready_timeout_s``, ``write_timeout_s`` and the ``state_machine_*`` settings. Fixtures it
    may override: ``rlmm_class``, ``rlmm_config``, ``rlmm_capabilities``.
    """

    _option_name: ClassVar[str] = RLMM_OPTION
    _kind: ClassVar[str] = "rlmm"
    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.tierlog_conformance]

    capabilities: ClassVar[RemoteLogMetadataManagerCapabilities | None] = None
    """What the plugin supports; ``None`` asks the plugin class's ``conformance_capabilities()``
    and otherwise assumes everything Kafka's TBRLMM does."""

    ready_timeout_s: ClassVar[float] = 30.0
    """How long to wait for ``is_ready`` after an assignment (raise it for slow backends)."""

    write_timeout_s: ClassVar[float] = 30.0
    """How long a mutating call's future may take to complete."""

    state_machine_max_examples: ClassVar[int] = 50
    """Random runs of the state machine; lower it for slow backends, raise it to search harder."""

    state_machine_step_count: ClassVar[int] = 30
    """Operations per state-machine run."""

    state_machine_settings: ClassVar[Mapping[str, Any]] = {}
    """More ``hypothesis.settings`` arguments for the state machine (``database``, ``phases``,
    ``derandomize``, ...), without loading a global hypothesis profile."""

    # Fixtures ----------------------------------------------------------------------------------
    @pytest.fixture
    def rlmm_class(self, request: pytest.FixtureRequest) -> type[RemoteLogMetadataManager]:
        """The class under test: ``plugin_class`` or the ``--tierlog-rlmm`` plugin."""
        return self._plugin_class_of(request.config, RemoteLogMetadataManager)

    @pytest.fixture
    def rlmm_config(
        self,
        request: pytest.FixtureRequest,
        rlmm_class: type[RemoteLogMetadataManager],
        tmp_path: Path,
    ) -> dict[str, str]:
        """The configuration passed to ``configure`` (see the module docstring for its source);
        every instance of a test, restarts included, gets the same one."""
        return self._make_config(request.config, rlmm_class, tmp_path)

    @pytest.fixture
    def rlmm_capabilities(
        self, rlmm_class: type[RemoteLogMetadataManager]
    ) -> RemoteLogMetadataManagerCapabilities:
        """The declared capabilities: the subclass's, else the plugin's, else all supported."""
        return self._declared_capabilities(
            self.capabilities, rlmm_class, RemoteLogMetadataManagerCapabilities
        )

    @pytest.fixture
    def rlmm_factory(
        self, rlmm_class: type[RemoteLogMetadataManager], rlmm_config: dict[str, str]
    ) -> Iterator[Callable[[], RemoteLogMetadataManagerHarness]]:
        """Makes harnesses sharing one configuration; closes them all at teardown."""
        made: list[RemoteLogMetadataManagerHarness] = []

        def make() -> RemoteLogMetadataManagerHarness:
            harness = RemoteLogMetadataManagerHarness(
                rlmm_class,
                rlmm_config,
                ready_timeout_s=self.ready_timeout_s,
                write_timeout_s=self.write_timeout_s,
            )
            made.append(harness)
            return harness

        yield make
        for harness in made:
            harness.close()

    @pytest.fixture
    def harness(
        self, rlmm_factory: Callable[[], RemoteLogMetadataManagerHarness]
    ) -> RemoteLogMetadataManagerHarness:
        return rlmm_factory()

    @pytest.fixture
    def tip(self, harness: RemoteLogMetadataManagerHarness) -> TopicIdPartition:
        """A fresh partition assigned to the RLMM as leader."""
        partition = new_partition()
        harness.assign([partition])
        return partition

    # Lifecycle and visibility (RemoteLogSegmentLifecycleTest) ----------------------------------
    def test_read_your_writes(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: once a mutating call's future completes, a read on the same instance sees
        the write (RemoteLogMetadataManagerTest.testFetchSegments).
        How: add seg(101,200,{0:101}); it is listed but not served; finish it; it is served at
        (0,150); start its deletion; it is listed in DELETE_SEGMENT_STARTED.
        Fix: complete the future only after the write is applied to what reads consult."""
        rlmm = harness.rlmm
        seg = segment(tip, 101, 200, {0: 101})
        harness.add(seg)
        _assert_listed_in_order(harness.listed(tip, 0), [seg], "list_remote_log_segments(0)")
        _assert_rlsm(rlmm, tip, 0, 150, None)
        finished = harness.move(seg, FINISHED)
        _assert_rlsm(rlmm, tip, 0, 150, finished)
        deleting = harness.move(finished, DELETE_STARTED)
        _assert_same_set(harness.listed(tip), [deleting], "list_remote_log_segments()")

    def test_read_your_writes_from_concurrent_threads(
        self, harness: RemoteLogMetadataManagerHarness
    ) -> None:
        """Checks: read-your-writes holds while several threads write at once, as the RLM's
        copy and expiration pools do, on distinct and on shared partitions.
        How: 8 threads over 4 partitions (two threads per partition, each in its own leader
        epoch) each add, check, finish and check 10 segments.
        Fix: make the RLMM thread-safe; never complete a future before the write is visible."""
        tips = [new_partition("rw", i) for i in range(4)]
        harness.assign(tips)
        rlmm = harness.rlmm

        def worker(n: int) -> None:
            tp, epoch = tips[n % 4], n // 4
            for i in range(10):
                start = i * 100
                seg = segment(tp, start, start + 99, {epoch: start})
                harness.add(seg)
                listed = [m.remote_log_segment_id for m in rlmm.list_remote_log_segments(tp)]
                assert seg.remote_log_segment_id in listed, (
                    f"thread {n}: segment {i} not listed right after its add completed"
                )
                finished = harness.move(seg, FINISHED)
                got = rlmm.remote_log_segment_metadata(tp, epoch, start + 50)
                assert got == finished, (
                    f"thread {n}: segment {i} not served right after its finish completed: "
                    f"{_describe(got)}"
                )

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for result in [pool.submit(worker, n) for n in range(8)]:
                result.result()
        for n in range(8):
            tp, epoch = tips[n % 4], n // 4
            _assert_highest(rlmm, tp, epoch, 999)
            assert len(harness.listed(tp, epoch)) == 10

    def test_invalid_transitions_are_dropped(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: an update with an invalid transition changes nothing and raises nothing;
        a valid one applies (RemoteLogMetadataCacheTest.testDropEventOnInvalidStateTransition).
        How: seg(10,100,{5:10}): DELETE_FINISHED (dropped), FINISHED, DELETE_FINISHED (dropped),
        STARTED (ValueError), DELETE_STARTED, FINISHED (dropped), STARTED (ValueError),
        DELETE_FINISHED (gone); after each step ``list_remote_log_segments(5)`` shows the state
        and the fields of the last applied update.
        Fix: check ``RemoteLogSegmentState.is_valid_transition(current, target)`` and drop the
        event with an error log when it is False; reject STARTED in an update up front."""
        rlmm = harness.rlmm
        current = segment(tip, 10, 100, {5: 10})
        harness.add(current)

        def expect(metadata: RemoteLogSegmentMetadata | None, step: str) -> None:
            listed = harness.listed(tip, 5)
            want = [] if metadata is None else [metadata]
            assert listed == want, (
                f"after {step}: list_remote_log_segments(5) returned {_describe(listed)}; "
                f"Kafka returns {_describe(want)}"
            )

        def dropped(state: RemoteLogSegmentState) -> None:
            harness.update(update_of(current, state, broker_id=99))
            expect(current, f"the invalid update {current.state.name} -> {state.name}")

        def rejected() -> None:
            upd = update_of(current, STARTED, broker_id=98)
            exc = harness.outcome(lambda: rlmm.update_remote_log_segment_metadata(upd))
            _expect_error(
                exc,
                ValueError,
                "an update to COPY_SEGMENT_STARTED",
                "updates may not set the initial state",
            )
            expect(current, "the rejected update to COPY_SEGMENT_STARTED")

        dropped(DELETE_FINISHED)
        current = harness.move(current, FINISHED)
        expect(current, "STARTED -> FINISHED")
        dropped(DELETE_FINISHED)
        rejected()
        current = harness.move(current, DELETE_STARTED)
        expect(current, "FINISHED -> DELETE_STARTED")
        dropped(FINISHED)
        rejected()
        harness.move(current, DELETE_FINISHED)
        expect(None, "DELETE_STARTED -> DELETE_FINISHED")

    def test_update_of_unknown_segment_raises_not_found(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: an update of a segment the RLMM does not know raises
        RemoteResourceNotFoundException, from the call or from its future (KAFKA-FACTS 6.1
        scenario 1; Kafka's Javadoc ``@throws RemoteResourceNotFoundException``).
        How: update a never-added segment id; then update a segment after DELETE_FINISHED.
        Fix: look the segment up before accepting the update and raise the exception."""
        rlmm = harness.rlmm
        unknown = update_of(RemoteLogSegmentId.generate_new(tip), FINISHED)
        _expect_error(
            harness.outcome(lambda: rlmm.update_remote_log_segment_metadata(unknown)),
            RemoteResourceNotFoundException,
            "update of a never-added segment",
            "the RLMM has no such segment",
        )
        seg = segment(tip, 0, 10, {0: 0})
        harness.add(seg)
        harness.move(seg, DELETE_STARTED)
        harness.move(seg, DELETE_FINISHED)
        again = update_of(seg, DELETE_FINISHED)
        _expect_error(
            harness.outcome(lambda: rlmm.update_remote_log_segment_metadata(again)),
            RemoteResourceNotFoundException,
            "update of a segment after DELETE_SEGMENT_FINISHED",
            "a finished deletion forgets the segment",
        )

    @pytest.mark.parametrize(
        "state", [FINISHED, DELETE_STARTED, DELETE_FINISHED], ids=lambda s: s.name
    )
    def test_add_with_state_other_than_copy_started_is_rejected(
        self,
        harness: RemoteLogMetadataManagerHarness,
        tip: TopicIdPartition,
        rlmm_capabilities: RemoteLogMetadataManagerCapabilities,
        state: RemoteLogSegmentState,
    ) -> None:
        """Checks: ``add_remote_log_segment_metadata`` with a state other than
        COPY_SEGMENT_STARTED raises ValueError (InvalidArgumentError) and stores nothing.
        How: add such a segment; the partition lists nothing, also after a restart if durable.
        Fix: validate the state before writing anything."""
        bad = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(tip),
            0,
            100,
            -1,
            0,
            _now_ms(),
            SEG_SIZE,
            {0: 0},
            None,
            state,
        )
        exc = harness.outcome(lambda: harness.rlmm.add_remote_log_segment_metadata(bad))
        _expect_error(
            exc,
            ValueError,
            f"add in state {state.name}",
            "a new segment must be COPY_SEGMENT_STARTED",
        )
        assert harness.listed(tip) == [], "a rejected add was stored"
        if rlmm_capabilities.durable_across_restart is True:
            harness.restart()
            assert harness.listed(tip) == [], "a rejected add was persisted"

    def test_update_to_copy_segment_started_is_rejected(
        self,
        harness: RemoteLogMetadataManagerHarness,
        tip: TopicIdPartition,
        rlmm_capabilities: RemoteLogMetadataManagerCapabilities,
    ) -> None:
        """Checks: an update to COPY_SEGMENT_STARTED raises ValueError and changes nothing
        (TBRLMM rejects it before producing the record).
        How: add a segment, update it to STARTED with another broker id; the stored metadata
        is unchanged, also after a restart if durable.
        Fix: reject ``state == COPY_SEGMENT_STARTED`` in ``update_remote_log_segment_metadata``
        before writing."""
        seg = segment(tip, 0, 100, {0: 0})
        harness.add(seg)
        upd = update_of(seg, STARTED, broker_id=42)
        exc = harness.outcome(lambda: harness.rlmm.update_remote_log_segment_metadata(upd))
        _expect_error(
            exc,
            ValueError,
            "an update to COPY_SEGMENT_STARTED",
            "updates may not set the initial state",
        )
        assert harness.listed(tip) == [seg], "a rejected update changed the segment"
        if rlmm_capabilities.durable_across_restart is True:
            harness.restart()
            assert harness.listed(tip) == [seg], "a rejected update was persisted"

    def test_lifecycle_and_epoch_lookup(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: lookups by (epoch, offset) and the highest offset per epoch over four
        segments with leader changes inside them (RemoteLogSegmentLifecycleTest
        .testRemoteLogSegmentLifeCycle; KAFKA-FACTS 6.1 scenario 2).
        How: S0=(0,100,{0:0,1:20,2:80}), S1=(101,200,{2:101}), S2=(201,300,{2:201,3:240}),
        S3=(250,400,{3:250,4:370}), all finished; then S0 is deleted.
        Fix: index finished segments per leader epoch by the epoch's first offset in the segment;
        a lookup takes the floor entry and checks the offset is within that epoch's part of the
        segment (next epoch's start - 1, or the segment's end); highest per epoch is the max of
        those epoch ends over finished segments and is never lowered."""
        rlmm = harness.rlmm
        s0 = segment(tip, 0, 100, {0: 0, 1: 20, 2: 80})
        harness.add(s0)
        _assert_rlsm(rlmm, tip, 1, 40, None)
        for epoch in (0, 1, 2):
            _assert_highest(rlmm, tip, epoch, None)
        s0 = harness.move(s0, FINISHED)
        s1 = harness.finish(segment(tip, 101, 200, {2: 101}))
        s2 = harness.finish(segment(tip, 201, 300, {2: 201, 3: 240}))
        s3 = harness.finish(segment(tip, 250, 400, {3: 250, 4: 370}))
        for epoch, offset, want in [
            (1, 40, s0),
            (2, 110, s1),
            (3, 240, s2),
            (3, 250, s3),
            (4, 375, s3),
            (1, 110, None),
            (4, 401, None),
            (5, 301, None),
        ]:
            _assert_rlsm(rlmm, tip, epoch, offset, want)
        harness.move(s0, DELETE_STARTED)
        _assert_rlsm(rlmm, tip, 0, 10, None)
        harness.move(s0, DELETE_FINISHED)
        _assert_rlsm(rlmm, tip, 0, 10, None)
        for epoch, highest in {0: 19, 1: 79, 2: 239, 3: 369, 4: 400, 5: None}.items():
            _assert_highest(rlmm, tip, epoch, highest)

    def test_copy_started_segment_is_listed_not_served(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: a COPY_SEGMENT_STARTED segment is listed (per epoch and in all) but never
        served by ``remote_log_segment_metadata`` and not counted in the highest offset.
        How: add seg(0,50,{0:0}); look it up at (0,0); list it.
        Fix: serve only COPY_SEGMENT_FINISHED segments; list every state but DELETE_FINISHED."""
        rlmm = harness.rlmm
        seg = segment(tip, 0, 50, {0: 0})
        harness.add(seg)
        _assert_rlsm(rlmm, tip, 0, 0, None)
        _assert_highest(rlmm, tip, 0, None)
        _assert_listed_in_order(harness.listed(tip, 0), [seg], "list_remote_log_segments(0)")
        _assert_same_set(harness.listed(tip), [seg], "list_remote_log_segments()")

    def test_copy_finished_segment_is_served_and_listed(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: a COPY_SEGMENT_FINISHED segment is served with the update's fields applied
        (broker id, event time, custom metadata, state) and listed.
        How: add and finish seg(101,200,{0:101}) with custom metadata; look up (0,150).
        Fix: store ``existing.create_with_updates(update)`` on every applied update."""
        rlmm = harness.rlmm
        seg = segment(tip, 101, 200, {0: 101})
        harness.add(seg)
        finished = harness.move(seg, FINISHED, custom_metadata=CustomMetadata(b"\xca\xfe"))
        _assert_rlsm(rlmm, tip, 0, 150, finished)
        _assert_highest(rlmm, tip, 0, 200)
        _assert_listed_in_order(harness.listed(tip, 0), [finished], "list_remote_log_segments(0)")
        _assert_same_set(harness.listed(tip), [finished], "list_remote_log_segments()")

    def test_delete_started_segment_is_listed_not_served(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: a DELETE_SEGMENT_STARTED segment is listed (so the RLM can retry the delete)
        but not served.
        How: add seg(201,300,{0:201}), move it straight to DELETE_SEGMENT_STARTED (a failed copy
        is cleaned up this way); and a finished seg(301,400,{0:301}) to DELETE_SEGMENT_STARTED.
        Fix: on DELETE_SEGMENT_STARTED remove the segment from the per-epoch offset index but
        keep its metadata."""
        rlmm = harness.rlmm
        failed_copy = segment(tip, 201, 300, {0: 201})
        harness.add(failed_copy)
        a = harness.move(failed_copy, DELETE_STARTED)
        b = harness.move(harness.finish(segment(tip, 301, 400, {0: 301})), DELETE_STARTED)
        _assert_rlsm(rlmm, tip, 0, 250, None)
        _assert_rlsm(rlmm, tip, 0, 350, None)
        _assert_listed_in_order(harness.listed(tip, 0), [a, b], "list_remote_log_segments(0)")
        _assert_same_set(harness.listed(tip), [a, b], "list_remote_log_segments()")

    def test_delete_finished_segment_is_forgotten(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: after DELETE_SEGMENT_FINISHED a segment is neither served nor listed.
        How: seg(301,400,{0:301}) added, DELETE_STARTED, DELETE_FINISHED.
        Fix: on DELETE_SEGMENT_FINISHED drop the segment from every index and from the map."""
        rlmm = harness.rlmm
        seg = segment(tip, 301, 400, {0: 301})
        harness.add(seg)
        harness.move(seg, DELETE_STARTED)
        _assert_rlsm(rlmm, tip, 0, 350, None)
        harness.move(seg, DELETE_FINISHED)
        assert harness.listed(tip, 0) == [], "a DELETE_SEGMENT_FINISHED segment is still listed"
        assert harness.listed(tip) == [], "a DELETE_SEGMENT_FINISHED segment is still listed"

    def test_list_segments_in_start_offset_order(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: ``list_remote_log_segments(tp, epoch)`` returns the epoch's segments sorted by
        start offset, and only the segments holding that epoch (testCacheListSegments).
        How: S0=(0,100,{0:0}), S1=(101,200,{0:101}), S2=(201,400,{0:201,1:301}), finished in
        order; epoch 0 lists [S0,S1,S2], epoch 1 lists [S2].
        Fix: keep a per-epoch index and sort by start offset."""
        s0 = harness.finish(segment(tip, 0, 100, {0: 0}))
        s1 = harness.finish(segment(tip, 101, 200, {0: 101}))
        s2 = harness.finish(segment(tip, 201, 400, {0: 201, 1: 301}))
        assert harness.listed(tip, 0) == [s0, s1, s2], (
            f"list_remote_log_segments(0) returned {_describe(harness.listed(tip, 0))}; "
            f"Kafka returns {_describe([s0, s1, s2])}"
        )
        _assert_same_set(harness.listed(tip), [s0, s1, s2], "list_remote_log_segments()")
        assert harness.listed(tip, 1) == [s2]

    def test_list_orders_by_epoch_start_when_nothing_is_unreferenced(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: Kafka's corner of the per-epoch order: while an epoch has no copy in
        progress, deletion in progress or replaced copy, its list is in the order of the
        epoch's first offset inside each segment, which for a segment spanning epochs is not
        its start offset (RemoteLogLeaderEpochState.listAllRemoteLogSegments sorts only when
        unreferenced segments exist).
        How: A=(1,1,{1:1}) and B=(0,3,{0:0,1:2}), both finished: epoch 1 lists [A, B]; once
        C=(5,6,{1:5}) is only added (unreferenced), epoch 1 lists [B, A, C].
        Fix: return the epoch's index in key order; sort by start offset only when there are
        unreferenced segments."""
        a = harness.finish(segment(tip, 1, 1, {1: 1}))
        b = harness.finish(segment(tip, 0, 3, {0: 0, 1: 2}))
        _assert_listed_in_order(harness.listed(tip, 1), [a, b], "list_remote_log_segments(1)")
        c = segment(tip, 5, 6, {1: 5})
        harness.add(c)
        _assert_listed_in_order(harness.listed(tip, 1), [b, a, c], "list_remote_log_segments(1)")

    # Overlaps (RemoteLogLeaderEpochStateTest, KAFKA-FACTS 6.1 scenario 4) ----------------------
    def test_overlapping_segment_replaces_covered_one(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: a finished segment that starts at or before a finished segment of the same
        epoch and reaches at least the epoch's highest offset replaces it for lookups; the
        replaced one stays listed until it is deleted.
        How: s1=(10,100,{0:10}), then s2=(5,150,{0:5}): (0,11), (0,100) and (0,150) give s2;
        highest(0)=150; epoch 0 lists [s2, s1].
        Fix: on COPY_SEGMENT_FINISHED, while the last index entry starts at or after the new
        segment's epoch start and the epoch's highest offset <= the new epoch end, move it to
        the unreferenced set (Kafka's RemoteLogLeaderEpochState)."""
        rlmm = harness.rlmm
        s1 = harness.finish(segment(tip, 10, 100, {0: 10}))
        s2 = harness.finish(segment(tip, 5, 150, {0: 5}))
        for offset in (11, 100, 150):
            _assert_rlsm(rlmm, tip, 0, offset, s2)
        _assert_highest(rlmm, tip, 0, 150)
        assert harness.listed(tip, 0) == [s2, s1], _describe(harness.listed(tip, 0))

    def test_multiple_overlapping_segments(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: one long segment replaces several earlier ones at once
        (handleSegmentWithCopySegmentFinishedStateForMultipleOverlappingSegments).
        How: s1=(10,100), s2=(5,150), s3=(148,155), then s4=(4,200), all epoch 0: before s4,
        (0,149) gives s3 and highest is 155; after it, s4 serves 11, 149 and 200, highest is
        200, and all four are listed in start order.
        Fix: see test_overlapping_segment_replaces_covered_one."""
        rlmm = harness.rlmm
        s1 = harness.finish(segment(tip, 10, 100, {0: 10}))
        s2 = harness.finish(segment(tip, 5, 150, {0: 5}))
        s3 = harness.finish(segment(tip, 148, 155, {0: 148}))
        _assert_rlsm(rlmm, tip, 0, 149, s3)
        _assert_rlsm(rlmm, tip, 0, 100, s2)
        _assert_highest(rlmm, tip, 0, 155)
        s4 = harness.finish(segment(tip, 4, 200, {0: 4}))
        for offset in (4, 11, 149, 200):
            _assert_rlsm(rlmm, tip, 0, offset, s4)
        _assert_rlsm(rlmm, tip, 0, 201, None)
        _assert_highest(rlmm, tip, 0, 200)
        assert harness.listed(tip, 0) == [s4, s2, s1, s3], _describe(harness.listed(tip, 0))

    def test_duplicate_segment_replaces_earlier_copy(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: a second copy of the same offsets (a new leader re-uploading) replaces the
        first for lookups (handleSegmentWithCopySegmentFinishedStateForDuplicateSegments).
        How: s1=(10,100,{0:10}) and s2=(10,100,{0:10}) finished in turn: (0,11) gives s2, both
        are listed, highest(0)=100.
        Fix: see test_overlapping_segment_replaces_covered_one (``>=`` on both comparisons)."""
        rlmm = harness.rlmm
        s1 = harness.finish(segment(tip, 10, 100, {0: 10}))
        s2 = harness.finish(segment(tip, 10, 100, {0: 10}))
        _assert_rlsm(rlmm, tip, 0, 11, s2)
        _assert_highest(rlmm, tip, 0, 100)
        _assert_listed_in_order(harness.listed(tip, 0), [s1, s2], "list_remote_log_segments(0)")

    def test_same_start_offset_longer_segment_wins(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: of two segments with the same start, the later, longer one serves
        (handleSegmentWithCopySegmentFinishedStateForSegmentsWithSameStartOffset).
        How: s1=(10,100,{0:10}), s2=(10,150,{0:10}): (0,11) and (0,111) give s2; highest 150.
        Fix: see test_overlapping_segment_replaces_covered_one."""
        rlmm = harness.rlmm
        harness.finish(segment(tip, 10, 100, {0: 10}))
        s2 = harness.finish(segment(tip, 10, 150, {0: 10}))
        _assert_rlsm(rlmm, tip, 0, 11, s2)
        _assert_rlsm(rlmm, tip, 0, 111, s2)
        _assert_highest(rlmm, tip, 0, 150)

    def test_shorter_overlapping_segment_does_not_replace(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: a finished segment that ends below the epoch's highest offset does not evict
        the segments after its start (the ``highest <= epoch end`` half of Kafka's condition).
        How: s1=(10,100,{0:10}) then s2=(5,50,{0:5}): (0,7) gives s2, (0,20) and (0,100) give
        s1, highest(0) stays 100.
        Fix: only evict while the epoch's highest offset <= the new segment's epoch end."""
        rlmm = harness.rlmm
        s1 = harness.finish(segment(tip, 10, 100, {0: 10}))
        s2 = harness.finish(segment(tip, 5, 50, {0: 5}))
        _assert_rlsm(rlmm, tip, 0, 7, s2)
        _assert_rlsm(rlmm, tip, 0, 20, s1)
        _assert_rlsm(rlmm, tip, 0, 100, s1)
        _assert_highest(rlmm, tip, 0, 100)

    def test_list_sorts_unreferenced_segments_by_start_offset(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: copies in progress and replaced copies are listed among the others in start
        offset order (testListAllRemoteLogSegmentsShouldReturnSortedSegments).
        How: s1=(0,4) started only; s2=(5,10), s3=(11,100), s4=(9,150) finished (s4 replaces
        s3): epoch 0 lists [s1, s2, s4, s3]; (0,50) gives s4.
        Fix: list the index entries and the unreferenced segments together, sorted by start."""
        s1 = segment(tip, 0, 4, {0: 0})
        harness.add(s1)
        s2 = harness.finish(segment(tip, 5, 10, {0: 5}))
        s3 = harness.finish(segment(tip, 11, 100, {0: 11}))
        s4 = harness.finish(segment(tip, 9, 150, {0: 9}))
        assert harness.listed(tip, 0) == [s1, s2, s4, s3], _describe(harness.listed(tip, 0))
        _assert_rlsm(harness.rlmm, tip, 0, 50, s4)

    # remote_log_size (TopicBasedRemoteLogMetadataManagerTest, scenario 5) ----------------------
    def test_remote_log_size_of_segments_in_the_same_epoch(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: ``remote_log_size`` sums the sizes of the epoch's listed segments, copies in
        progress included (testRemoteLogSizeCalculationWithSegmentsOfTheSameEpoch).
        How: three added (not finished) segments in epoch 0 of 1, 2 and 3 MiB -> 6 MiB.
        Fix: sum ``segment_size_in_bytes`` over ``list_remote_log_segments(tp, epoch)``."""
        for i, (start, end) in enumerate([(0, 100), (100, 200), (200, 300)], 1):
            harness.add(segment(tip, start, end, {0: 0}, size=SEG_SIZE * i))
        assert harness.rlmm.remote_log_size(tip, 0) == 6 * SEG_SIZE

    def test_remote_log_size_of_segments_in_different_epochs(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: each epoch's size counts only the segments holding that epoch
        (testRemoteLogSizeCalculationWithSegmentsOfDifferentEpochs).
        How: 1, 2 and 3 MiB segments in epochs 0, 1 and 2 -> 1, 2 and 3 MiB.
        Fix: sum over the epoch's segments only."""
        for i, (start, end) in enumerate([(0, 100), (100, 200), (200, 300)]):
            harness.add(segment(tip, start, end, {i: start}, size=SEG_SIZE * (i + 1)))
        for i in range(3):
            got = harness.rlmm.remote_log_size(tip, i)
            assert got == SEG_SIZE * (i + 1), f"remote_log_size(epoch={i}) = {got}"

    def test_remote_log_size_of_unknown_epoch_is_zero(
        self,
        harness: RemoteLogMetadataManagerHarness,
        tip: TopicIdPartition,
    ) -> None:
        """Checks: an epoch with no segments has size 0, also on an empty partition
        (testRemoteLogSizeCalculationWithSegmentsHavingNonExistentEpochs).
        How: empty partition -> size(0) = 0; segments in epochs 0 and 1 -> size(9001) = 0.
        Fix: return 0 (not None, not an exception) for an epoch without segments."""
        assert harness.rlmm.remote_log_size(tip, 0) == 0
        harness.add(segment(tip, 0, 100, {0: 0}))
        harness.add(segment(tip, 100, 200, {1: 100}, size=2 * SEG_SIZE))
        assert harness.rlmm.remote_log_size(tip, 9001) == 0

    def test_remote_log_size_counts_listed_states_once_per_epoch(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: copy-started, finished and delete-started segments count, delete-finished
        ones do not, and a segment spanning epochs counts in each (KIP-852 as in TBRLMM).
        How: A=(0,99,{0:0,1:50}) finished 1 MiB, B=(100,199,{1:100}) delete-started 2 MiB,
        C=(200,299,{1:200}) started 4 MiB, D=(300,399,{1:300}) deleted 8 MiB: epoch 0 = 1 MiB,
        epoch 1 = 7 MiB.
        Fix: sum exactly what ``list_remote_log_segments(tp, epoch)`` returns."""
        harness.finish(segment(tip, 0, 99, {0: 0, 1: 50}, size=SEG_SIZE))
        b = segment(tip, 100, 199, {1: 100}, size=2 * SEG_SIZE)
        harness.add(b)
        harness.move(b, DELETE_STARTED)
        harness.add(segment(tip, 200, 299, {1: 200}, size=4 * SEG_SIZE))
        d = segment(tip, 300, 399, {1: 300}, size=8 * SEG_SIZE)
        harness.add(d)
        harness.move(d, DELETE_STARTED)
        harness.move(d, DELETE_FINISHED)
        assert harness.rlmm.remote_log_size(tip, 0) == SEG_SIZE
        assert harness.rlmm.remote_log_size(tip, 1) == 7 * SEG_SIZE

    def test_unknown_partition_raises_not_found(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: listing or sizing a partition the RLMM has never seen raises
        RemoteResourceNotFoundException (testRemoteLogSizeCalculationForUnknownTopicIdPartition
        Throws; the SPI's documented behaviour).
        How: a fresh partition, never assigned or written: ``list_remote_log_segments`` (with
        and without epoch) and ``remote_log_size``.
        Fix: raise RemoteResourceNotFoundException for a partition without metadata state."""
        rlmm = harness.rlmm
        unknown = new_partition("singleton", 0)
        _raises_not_found(
            lambda: rlmm.list_remote_log_segments(unknown),
            "list_remote_log_segments(unknown partition)",
        )
        _raises_not_found(
            lambda: rlmm.list_remote_log_segments(unknown, 0),
            "list_remote_log_segments(unknown partition, 0)",
        )
        _raises_not_found(
            lambda: rlmm.remote_log_size(unknown, 0), "remote_log_size(unknown partition, 0)"
        )

    # highest offset and transactions -----------------------------------------------------------
    def test_highest_offset_never_decreases_when_segments_are_deleted(
        self,
        harness: RemoteLogMetadataManagerHarness,
        tip: TopicIdPartition,
        rlmm_capabilities: RemoteLogMetadataManagerCapabilities,
    ) -> None:
        """Checks: deleting segments never lowers ``highest_offset_for_epoch`` (the RLM would
        otherwise copy them again); it is also the same after a restart if durable.
        How: (0,99,{0:0}) and (100,199,{0:100,1:150}) finished: highest 149 / 199; both deleted
        to DELETE_SEGMENT_FINISHED: still 149 / 199, nothing listed or served.
        Fix: keep the per-epoch highest offset as a running maximum that deletes never touch."""
        a = harness.finish(segment(tip, 0, 99, {0: 0}))
        b = harness.finish(segment(tip, 100, 199, {0: 100, 1: 150}))
        _assert_highest(harness.rlmm, tip, 0, 149)
        _assert_highest(harness.rlmm, tip, 1, 199)
        for seg in (a, b):
            harness.move(seg, DELETE_STARTED)
            _assert_highest(harness.rlmm, tip, 0, 149)
            harness.move(seg, DELETE_FINISHED)
        _assert_highest(harness.rlmm, tip, 0, 149)
        _assert_highest(harness.rlmm, tip, 1, 199)
        assert harness.listed(tip) == []
        _assert_rlsm(harness.rlmm, tip, 0, 50, None)
        if rlmm_capabilities.durable_across_restart is True:
            harness.restart()
            _assert_highest(harness.rlmm, tip, 0, 149)
            _assert_highest(harness.rlmm, tip, 1, 199)

    def test_next_segment_with_txn_index(
        self,
        harness: RemoteLogMetadataManagerHarness,
        tip: TopicIdPartition,
        rlmm_capabilities: RemoteLogMetadataManagerCapabilities,
    ) -> None:
        """Checks: ``next_segment_with_txn_index`` returns the first finished segment at or after
        the offset, within the epoch, whose transaction index is not empty (Kafka's
        RemoteLogMetadataCache.nextSegmentWithTxnIndex). With ``txn_index_tracking``
        Unsupported, the SPI default (the segment holding the offset) is accepted too.
        How: A=(0,99,{0:0}) and B=(100,199,{0:100}) without aborted txns, C=(200,299,{0:200})
        and D=(300,399,{0:300,1:350}) with, E=(400,499,{1:400}) without, all finished.
        Fix: start at ``remote_log_segment_metadata(epoch, offset)`` and step to
        ``end_offset + 1`` while the segment's ``txn_idx_empty`` is True."""
        rlmm = harness.rlmm
        a = harness.finish(segment(tip, 0, 99, {0: 0}, txn_idx_empty=True))
        harness.finish(segment(tip, 100, 199, {0: 100}, txn_idx_empty=True))
        c = harness.finish(segment(tip, 200, 299, {0: 200}, txn_idx_empty=False))
        d = harness.finish(segment(tip, 300, 399, {0: 300, 1: 350}, txn_idx_empty=False))
        e = harness.finish(segment(tip, 400, 499, {1: 400}, txn_idx_empty=True))
        tracking = rlmm_capabilities.txn_index_tracking is True
        for epoch, offset, want, default in [
            (0, 10, c, a),
            (0, 250, c, c),
            (0, 300, d, d),
            (1, 360, d, d),
            (0, 360, None, None),
            (0, 400, None, None),
            (1, 400, None, e),
            (2, 0, None, None),
        ]:
            got = rlmm.next_segment_with_txn_index(tip, epoch, offset)
            allowed = [want] if tracking else [want, default]
            assert got in allowed, (
                f"next_segment_with_txn_index(epoch={epoch}, offset={offset}) returned "
                f"{_describe(got)}; Kafka returns {_describe(want)}"
                + ("" if tracking else f" (the SPI default returns {_describe(default)})")
            )

    def test_txn_idx_empty_flag_is_kept(
        self, harness: RemoteLogMetadataManagerHarness, tip: TopicIdPartition
    ) -> None:
        """Checks: ``txn_idx_empty`` is stored as given and kept across updates (updates carry
        no such field).
        How: two segments, flag True and False, listed after add and after finish.
        Fix: store the flag with the segment; ``create_with_updates`` keeps it."""
        yes = segment(tip, 0, 9, {0: 0}, txn_idx_empty=True)
        no = segment(tip, 10, 19, {0: 10}, txn_idx_empty=False)
        harness.add(yes)
        harness.add(no)
        flags = {m.start_offset: m.txn_idx_empty for m in harness.listed(tip)}
        assert flags == {0: True, 10: False}, f"txn_idx_empty after add: {flags}"
        harness.move(yes, FINISHED)
        harness.move(no, FINISHED)
        flags = {m.start_offset: m.txn_idx_empty for m in harness.listed(tip)}
        assert flags == {0: True, 10: False}, f"txn_idx_empty after finish: {flags}"

    # Cleaner-offset vectors (tierlog: compacted topics in tiered storage) ----------------------
    def test_cleaner_offsets_are_returned_as_added(
        self,
        harness: RemoteLogMetadataManagerHarness,
        tip: TopicIdPartition,
        rlmm_capabilities: RemoteLogMetadataManagerCapabilities,
    ) -> None:
        """Checks: a segment's ``cleaner_offsets`` (the cleaner-offset vector per leader epoch of
        a segment the log cleaner wrote) is returned exactly as added by every read, in every
        state until its deletion finishes, and is None for a segment added without one.
        How: A=(0,99,{0:0}) copied (no vector), B=(100,199,{0:100,1:150}) cleaned with
        {0:149,1:199}, C=(200,299,{1:200,2:260}) cleaned with {0:149,1:259,2:299}; listed after
        add, served and listed after finish, listed after B's DELETE_SEGMENT_STARTED.
        Fix: store the vector with the segment's add record (updates carry none:
        ``create_with_updates`` keeps it) and build it into every metadata returned; a
        serialized store must write it (tierlog's serde: tag 1272 of the add record)."""
        require(rlmm_capabilities.cleaner_offsets, "cleaner_offsets")
        rlmm = harness.rlmm
        a = segment(tip, 0, 99, {0: 0})
        b = segment(tip, 100, 199, {0: 100, 1: 150}, cleaner_offsets={0: 149, 1: 199})
        c = segment(tip, 200, 299, {1: 200, 2: 260}, cleaner_offsets={2: 299, 0: 149, 1: 259})
        for m in (a, b, c):
            harness.add(m)
        _assert_vectors(harness.listed(tip), [a, b, c], "list_remote_log_segments() after add")
        _assert_vectors(harness.listed(tip, 1), [b, c], "list_remote_log_segments(1) after add")
        a, b, c = (harness.move(m, FINISHED) for m in (a, b, c))
        for epoch, offset, want in [(0, 50, a), (0, 120, b), (1, 170, b), (1, 230, c), (2, 280, c)]:
            _assert_rlsm(rlmm, tip, epoch, offset, want)
            got = rlmm.remote_log_segment_metadata(tip, epoch, offset)
            assert got is not None
            _assert_vectors([got], [want], f"remote_log_segment_metadata({epoch}, {offset})")
        for epoch, members in {0: [a, b], 1: [b, c], 2: [c]}.items():
            _assert_vectors(
                harness.listed(tip, epoch), members, f"list_remote_log_segments({epoch})"
            )
        vector = next(iter(harness.listed(tip, 2))).cleaner_offsets
        assert vector is not None and list(vector.items()) == [(0, 149), (1, 259), (2, 299)], (
            f"cleaner_offsets of C is {vector!r}: it must be in ascending epoch order"
        )
        b = harness.move(b, DELETE_STARTED)
        _assert_vectors(harness.listed(tip), [a, b, c], "list_remote_log_segments() after delete")

    def test_cleaned_copy_of_the_same_offsets_is_served_with_its_vector(
        self,
        harness: RemoteLogMetadataManagerHarness,
        tip: TopicIdPartition,
        rlmm_capabilities: RemoteLogMetadataManagerCapabilities,
    ) -> None:
        """Checks: when the log cleaner's output of a segment (same offsets and epochs, a new id,
        a vector) finishes after the copied segment, lookups serve the cleaned one with its
        vector, and both stay listed (the copied one until the RLM deletes it).
        How: A=(0,99,{0:0,1:50}) copied and finished; A'=(0,99,{0:0,1:50}) with {0:49,1:99}
        finished; look up (0,10) and (1,70).
        Fix: keep the vector of each segment separately; a lookup returns the served segment's
        own metadata."""
        require(rlmm_capabilities.cleaner_offsets, "cleaner_offsets")
        rlmm = harness.rlmm
        copied = harness.finish(segment(tip, 0, 99, {0: 0, 1: 50}))
        cleaned = harness.finish(segment(tip, 0, 99, {0: 0, 1: 50}, cleaner_offsets={0: 49, 1: 99}))
        for epoch, offset in [(0, 10), (1, 70)]:
            _assert_rlsm(rlmm, tip, epoch, offset, cleaned)
        _assert_same_set(harness.listed(tip), [copied, cleaned], "list_remote_log_segments()")
        _assert_vectors(harness.listed(tip), [copied, cleaned], "list_remote_log_segments()")

    def test_cleaner_offsets_survive_restart(
        self,
        harness: RemoteLogMetadataManagerHarness,
        rlmm_capabilities: RemoteLogMetadataManagerCapabilities,
    ) -> None:
        """Checks: after a restart every segment has the vector it was added with (None for a
        copied one), in lookups and listings, for a leader and a follower partition.
        How: per partition a copied segment, a cleaned finished one and a cleaned one still in
        COPY_SEGMENT_STARTED; restart; compare.
        Fix: persist the vector with the add event and rebuild it on replay."""
        require(rlmm_capabilities.durable_across_restart, "durable_across_restart")
        require(rlmm_capabilities.cleaner_offsets, "cleaner_offsets")
        leader, follower = new_partition("compacted-leader", 0), new_partition("compacted-f", 3)
        harness.assign([leader], [follower])
        added: dict[TopicIdPartition, list[RemoteLogSegmentMetadata]] = {}
        for tp in (leader, follower):
            copied = harness.finish(segment(tp, 0, 99, {0: 0}))
            done = harness.finish(
                segment(tp, 100, 199, {0: 100, 4: 120}, cleaner_offsets={0: 119, 4: 199})
            )
            pending = segment(tp, 200, 299, {4: 200}, cleaner_offsets={0: 119, 4: 299})
            harness.add(pending)
            added[tp] = [copied, done, pending]
        harness.restart()
        for tp, segments in added.items():
            _assert_same_set(harness.listed(tp), segments, f"list_remote_log_segments({tp})")
            _assert_vectors(harness.listed(tp), segments, f"list_remote_log_segments({tp})")
            served = harness.rlmm.remote_log_segment_metadata(tp, 4, 150)
            assert served is not None
            _assert_vectors([served], [segments[1]], "remote_log_segment_metadata(4, 150)")

    # Partitions --------------------------------------------------------------------------------
    def test_partition_delete(
        self,
        harness: RemoteLogMetadataManagerHarness,
        tip: TopicIdPartition,
        rlmm_capabilities: RemoteLogMetadataManagerCapabilities,
    ) -> None:
        """Checks: DELETE_PARTITION_MARKED and _STARTED leave the segments readable;
        DELETE_PARTITION_FINISHED drops the partition: lookups raise
        RemoteResourceNotFoundException; another partition is untouched
        (RemoteLogMetadataManagerTest.testRemotePartitionDeletion; scenario 6).
        How: finished seg(0,100,{0:0,1:20,2:50,3:80}); look up (1,30) after each state.
        Fix: keep the latest delete state per partition; on FINISHED drop the partition's
        metadata."""
        require(rlmm_capabilities.partition_delete, "partition_delete")
        rlmm = harness.rlmm
        other = new_partition("bar", 0)
        harness.assign([other])
        other_seg = harness.finish(segment(other, 0, 100, {0: 0}))
        seg = harness.finish(segment(tip, 0, 100, {0: 0, 1: 20, 2: 50, 3: 80}))
        _assert_rlsm(rlmm, tip, 1, 30, seg)
        for state in (
            RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
            RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
        ):
            harness.put_partition_delete(tip, state)
            _assert_rlsm(rlmm, tip, 1, 30, seg)
            _assert_same_set(harness.listed(tip), [seg], f"list after {state.name}")
        harness.put_partition_delete(tip, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED)
        where = "after DELETE_PARTITION_FINISHED"
        _raises_not_found(
            lambda: rlmm.remote_log_segment_metadata(tip, 1, 30),
            f"remote_log_segment_metadata {where}",
        )
        _raises_not_found(
            lambda: rlmm.list_remote_log_segments(tip), f"list_remote_log_segments {where}"
        )
        _raises_not_found(
            lambda: rlmm.list_remote_log_segments(tip, 0),
            f"list_remote_log_segments(epoch) {where}",
        )
        _raises_not_found(
            lambda: rlmm.highest_offset_for_epoch(tip, 0), f"highest_offset_for_epoch {where}"
        )
        _raises_not_found(lambda: rlmm.remote_log_size(tip, 0), f"remote_log_size {where}")
        _assert_rlsm(rlmm, other, 0, 50, other_seg)

    def test_partitions_are_independent(self, harness: RemoteLogMetadataManagerHarness) -> None:
        """Checks: metadata of different partitions never mixes: other partition numbers,
        other topics, and a topic recreated under the same name (a new topic id).
        How: the same offsets and epochs in foo-0, foo-1, bar-0 and a new foo-0, in different
        states and sizes; every lookup sees only its own partition's segment.
        Fix: key all state by the full TopicIdPartition (topic id, name and partition)."""
        rlmm = harness.rlmm
        tips = [new_partition("foo", 0), new_partition("foo", 1), new_partition("bar", 0)]
        recreated = TopicIdPartition(Uuid.random(), "foo", 0)
        tips.append(recreated)
        harness.assign(tips[:2], tips[2:])
        segs = []
        for i, tp in enumerate(tips):
            seg = segment(tp, 0, 100, {0: 0, 1: 60}, size=SEG_SIZE * (i + 1))
            harness.add(seg)
            segs.append(seg)
        finished0 = harness.move(segs[0], FINISHED)
        finished2 = harness.move(segs[2], FINISHED)
        deleting2 = harness.move(finished2, DELETE_STARTED)
        expected_rlsm = [finished0, None, None, None]
        expected_highest = [59, None, 59, None]
        expected_listed = [finished0, segs[1], deleting2, segs[3]]
        for i, tp in enumerate(tips):
            _assert_rlsm(rlmm, tp, 0, 30, expected_rlsm[i])
            _assert_highest(rlmm, tp, 0, expected_highest[i])
            _assert_same_set(harness.listed(tp), [expected_listed[i]], f"list of {tp}")
            assert rlmm.remote_log_size(tp, 1) == SEG_SIZE * (i + 1)

    # Durability (TopicBasedRemoteLogMetadataManagerRestartTest) --------------------------------
    def _snapshot(
        self,
        harness: RemoteLogMetadataManagerHarness,
        tips: Sequence[TopicIdPartition],
        epochs: Sequence[int],
        offsets: Sequence[int],
    ) -> dict[str, object]:
        rlmm = harness.rlmm
        snap: dict[str, object] = {}
        for tp in tips:
            snap[f"{tp} all"] = _by_id(harness.listed(tp))
            for epoch in epochs:
                snap[f"{tp} list({epoch})"] = harness.listed(tp, epoch)
                snap[f"{tp} highest({epoch})"] = rlmm.highest_offset_for_epoch(tp, epoch)
                snap[f"{tp} size({epoch})"] = rlmm.remote_log_size(tp, epoch)
                for offset in offsets:
                    snap[f"{tp} rlsm({epoch},{offset})"] = rlmm.remote_log_segment_metadata(
                        tp, epoch, offset
                    )
        return snap

    def test_state_survives_restart(
        self,
        harness: RemoteLogMetadataManagerHarness,
        rlmm_capabilities: RemoteLogMetadataManagerCapabilities,
    ) -> None:
        """Checks: after close and a new instance with the same configuration (partitions
        assigned again), every query answers as before: copies in progress, finished and
        delete-started segments, custom metadata, transaction flags, highest offsets kept
        through deletes; new segments can be added on top.
        How: a leader and a follower partition with segments in every state, a snapshot of all
        lookups before and after the restart.
        Fix: persist every accepted event and rebuild the state from them on assignment."""
        require(rlmm_capabilities.durable_across_restart, "durable_across_restart")
        leader, follower = new_partition("new-leader", 0), new_partition("new-follower", 0)
        harness.assign([leader], [follower])
        for tp in (leader, follower):
            harness.add(
                segment(tp, 0, 99, {0: 0}, txn_idx_empty=True, custom_metadata=CustomMetadata(b""))
            )
            harness.finish(segment(tp, 100, 199, {0: 100, 1: 150}, txn_idx_empty=False))
            f = harness.finish(segment(tp, 200, 299, {1: 200}, txn_idx_empty=True))
            harness.move(f, FINISHED, custom_metadata=CustomMetadata(b"\x00\xff"), broker_id=7)
            harness.move(harness.finish(segment(tp, 300, 399, {1: 300, 2: 350})), DELETE_STARTED)
            gone = harness.finish(segment(tp, 400, 499, {3: 400}, size=5))
            harness.move(gone, DELETE_STARTED)
            harness.move(gone, DELETE_FINISHED)
        epochs, offsets = [0, 1, 2, 3, 4], [0, 50, 120, 160, 250, 320, 360, 450]
        before = self._snapshot(harness, [leader, follower], epochs, offsets)
        harness.restart()
        after = self._snapshot(harness, [leader, follower], epochs, offsets)
        diff = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
        assert not diff, "state changed across a restart:\n" + "\n".join(
            f"  {k}: before {_describe(b)}, after {_describe(a)}" for k, (b, a) in diff.items()
        )
        extra = harness.finish(segment(leader, 500, 599, {4: 500}))
        _assert_rlsm(harness.rlmm, leader, 4, 550, extra)
        assert len(harness.listed(leader)) == 5

    def test_partition_delete_survives_restart(
        self,
        harness: RemoteLogMetadataManagerHarness,
        rlmm_capabilities: RemoteLogMetadataManagerCapabilities,
    ) -> None:
        """Checks: a partition deleted (DELETE_PARTITION_FINISHED) stays deleted after a restart,
        and a partition only MARKED keeps its segments.
        How: two partitions with a finished segment each; one FINISHED, one MARKED; restart.
        Fix: persist partition-delete events and replay them in order."""
        require(rlmm_capabilities.durable_across_restart, "durable_across_restart")
        require(rlmm_capabilities.partition_delete, "partition_delete")
        gone, marked = new_partition("gone", 0), new_partition("marked", 0)
        harness.assign([gone, marked])
        harness.finish(segment(gone, 0, 100, {0: 0}))
        kept = harness.finish(segment(marked, 0, 100, {0: 0}))
        harness.put_partition_delete(gone, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
        harness.put_partition_delete(gone, RemotePartitionDeleteState.DELETE_PARTITION_STARTED)
        harness.put_partition_delete(gone, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED)
        harness.put_partition_delete(marked, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
        harness.restart()  # assigns both again; a deleted partition need not become ready
        _raises_not_found(
            lambda: harness.rlmm.remote_log_segment_metadata(gone, 0, 50),
            "remote_log_segment_metadata of a deleted partition after a restart",
            patience_s=harness.ready_timeout_s,
        )
        _assert_rlsm(harness.rlmm, marked, 0, 50, kept)

    def test_stop_and_reassign_reloads_partition(
        self,
        harness: RemoteLogMetadataManagerHarness,
        tip: TopicIdPartition,
        rlmm_capabilities: RemoteLogMetadataManagerCapabilities,
    ) -> None:
        """Checks: ``on_stop_partitions`` then ``on_partition_leadership_changes`` (a partition
        moving away and back) serves the same metadata again.
        How: finished and started segments; stop; assign as follower; compare lookups.
        Fix: reload the partition's metadata on every (re)assignment."""
        require(rlmm_capabilities.durable_across_restart, "durable_across_restart")
        finished = harness.finish(segment(tip, 0, 100, {0: 0}))
        started = segment(tip, 101, 200, {0: 101})
        harness.add(started)
        harness.stop([tip])
        harness.assign([], [tip])
        _assert_rlsm(harness.rlmm, tip, 0, 50, finished)
        _assert_listed_in_order(harness.listed(tip, 0), [finished, started], "list after reload")
        _assert_highest(harness.rlmm, tip, 0, 100)

    # Readiness (TopicBasedRemoteLogMetadataManagerTest.testNewPartitionUpdates) ----------------
    def test_is_ready_only_while_assigned(
        self,
        harness: RemoteLogMetadataManagerHarness,
        rlmm_capabilities: RemoteLogMetadataManagerCapabilities,
    ) -> None:
        """Checks: ``is_ready`` is False before a partition is assigned, True once it is loaded
        (the harness waits for it), False again after ``on_stop_partitions``.
        How: a fresh partition through assign and stop, as leader and as follower.
        Fix: track assigned, loaded partitions; answer ``is_ready`` from that."""
        require(rlmm_capabilities.readiness_tracking, "readiness_tracking")
        rlmm = harness.rlmm
        leader, follower = new_partition("new-leader", 0), new_partition("new-follower", 0)
        assert not rlmm.is_ready(leader), "is_ready is True for a partition never assigned"
        assert not rlmm.is_ready(follower), "is_ready is True for a partition never assigned"
        harness.assign([leader], [follower])
        assert rlmm.is_ready(leader) and rlmm.is_ready(follower)
        harness.stop([leader, follower])
        assert not rlmm.is_ready(leader), "is_ready is True after on_stop_partitions"
        assert not rlmm.is_ready(follower), "is_ready is True after on_stop_partitions"

    def test_unassigned_partition_lookups_raise_not_found(
        self,
        harness: RemoteLogMetadataManagerHarness,
        tip: TopicIdPartition,
        rlmm_capabilities: RemoteLogMetadataManagerCapabilities,
    ) -> None:
        """Checks: lookups of a partition that is not (or no longer) assigned raise
        RemoteResourceNotFoundException, as Kafka's store does for a partition without cache.
        How: every lookup on a never-assigned partition, and on ``tip`` after it is stopped.
        Fix: serve lookups only for assigned, loaded partitions."""
        require(rlmm_capabilities.readiness_tracking, "readiness_tracking")
        rlmm = harness.rlmm
        harness.finish(segment(tip, 0, 100, {0: 0}))
        harness.stop([tip])
        for tp in (new_partition("never", 0), tip):
            calls: dict[str, Callable[[], object]] = {
                "remote_log_segment_metadata": partial(rlmm.remote_log_segment_metadata, tp, 0, 50),
                "highest_offset_for_epoch": partial(rlmm.highest_offset_for_epoch, tp, 0),
                "list_remote_log_segments": partial(rlmm.list_remote_log_segments, tp),
                "remote_log_size": partial(rlmm.remote_log_size, tp, 0),
            }
            for name, call in calls.items():
                _raises_not_found(call, f"{name}({tp}) while unassigned")

    def test_write_for_unassigned_partition_fails(
        self,
        harness: RemoteLogMetadataManagerHarness,
        rlmm_capabilities: RemoteLogMetadataManagerCapabilities,
    ) -> None:
        """Checks: adding a segment of a partition not assigned to this RLMM fails with a
        RemoteStorageException (from the call or the future): TBRLMM cannot read its own write
        back when it does not consume the metadata partition.
        How: add a segment of a never-assigned partition.
        Fix: check the assignment first and raise RemoteStorageException naming the partition."""
        require(rlmm_capabilities.readiness_tracking, "readiness_tracking")
        unassigned = new_partition("unassigned", 0)
        seg = segment(unassigned, 0, 100, {0: 0})
        exc = harness.outcome(lambda: harness.rlmm.add_remote_log_segment_metadata(seg))
        _expect_error(
            exc,
            RemoteStorageException,
            "add for an unassigned partition",
            "the partition is not assigned to this RLMM",
        )

    # The state machine -------------------------------------------------------------------------
    def test_state_machine(
        self,
        rlmm_factory: Callable[[], RemoteLogMetadataManagerHarness],
        rlmm_capabilities: RemoteLogMetadataManagerCapabilities,
    ) -> None:
        """Checks: random sequences of adds, updates to every state (valid and invalid),
        rejected writes, partition deletes, restarts and stop/reassign leave the RLMM answering
        every query exactly like a reference model of Kafka's RemoteLogMetadataCache.
        How: a hypothesis ``RuleBasedStateMachine`` over three partitions; after every step it
        compares ``remote_log_segment_metadata`` and ``next_segment_with_txn_index`` at each
        segment's epoch boundaries, ``list_remote_log_segments`` per epoch (sorted) and in all
        (as a set), ``highest_offset_for_epoch`` and ``remote_log_size`` per epoch.
        Fix: hypothesis prints the shortest failing sequence of steps; replay it by hand
        against the example tests above, which pin down each rule. Tune the run with
        ``state_machine_max_examples`` / ``state_machine_step_count``."""
        machine = _build_state_machine(rlmm_factory, rlmm_capabilities)
        run_state_machine_as_test(
            machine,
            settings=hypothesis.settings(
                **{
                    "max_examples": self.state_machine_max_examples,
                    "stateful_step_count": self.state_machine_step_count,
                    "deadline": None,
                    "suppress_health_check": list(hypothesis.HealthCheck),
                    **self.state_machine_settings,
                }
            ),
        )
