"""The logical state of a user partition's remote metadata, for comparing two readers.

The compacted RLMM promises that a reader of the compacted projection and a reader of the full
legacy history answer the RemoteLogManager alike. What the RLM can ask of an RLMM is a handful of
reads, so "alike" is defined by them: ``logical_state`` takes the answers of one reader (a
``RemotePartitionMetadataStore`` or any RLMM, through the same read methods) and freezes them
into a comparable value:

- every listed segment (``list_remote_log_segments(tip)``: all not DELETE_SEGMENT_FINISHED),
  with every field ``RemoteLogSegmentMetadata`` compares (offsets, epochs, size, timestamps,
  broker, custom metadata, txn-index flag, cleaner offsets, state);
- for each leader epoch of those segments: the listing of ``list_remote_log_segments(tip,
  epoch)`` as runs of equal start offsets in the reader's order (Kafka's
  ``RemoteLogLeaderEpochState`` lists segments with equal start offsets in ``HashSet`` order,
  which is unspecified: which segments share a start offset is compared, not their order among
  themselves, as the conformance suite compares listings), ``highest_offset_for_epoch``,
  ``remote_log_size``,
  and which segment ``remote_log_segment_metadata(tip, epoch, offset)`` serves at the first and
  last offset of the epoch in each COPY_SEGMENT_FINISHED segment (when two copies of the same
  offsets finished, the reads go to one of them: the RLM's fetches must go to the same one).
  Epochs none of whose segments is left are not compared: a full replay remembers the highest
  offset of deleted segments, a compacted topic no longer holds them;
- whether the partition is gone (a reader raises ``RemoteResourceNotFoundException``: its
  deletion finished, or the reader never knew it);
- from a store only (an RLMM does not expose it): the latest partition-delete state.

``diff`` names each difference in words for error messages; ``PartitionState.without`` removes
segments (the COPY_SEGMENT_STARTED uploads a retry superseded under their key, the one
difference the design allows between the two readers). The migration, its tests and the
benchmark compare with these.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from tierlog.metadata import RemotePartitionMetadataStore
from tierlog.spi import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    TopicIdPartition,
    Uuid,
)

__all__ = ["EpochState", "MetadataReader", "PartitionState", "diff", "logical_state"]


class MetadataReader(Protocol):
    """The reads ``logical_state`` asks: those of ``RemotePartitionMetadataStore`` and of every
    ``RemoteLogMetadataManager``."""

    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> Iterator[RemoteLogSegmentMetadata]: ...

    def highest_offset_for_epoch(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int
    ) -> int | None: ...

    def remote_log_size(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int: ...

    def remote_log_segment_metadata(
        self, topic_id_partition: TopicIdPartition, epoch_for_offset: int, offset: int
    ) -> RemoteLogSegmentMetadata | None: ...


@dataclass(frozen=True, slots=True)
class EpochState:
    """What a reader answers for one leader epoch of the live segments."""

    epoch: int
    listing: tuple[tuple[int, frozenset[Uuid]], ...]
    """``list_remote_log_segments(tip, epoch)`` as (start offset, segment ids) runs of equal
    start offsets, in the reader's order (the order within a run is Kafka's HashSet order)."""
    highest_offset: int | None
    size: int
    routing: tuple[tuple[int, Uuid | None], ...] = ()
    """(offset, id of the segment ``remote_log_segment_metadata`` serves there), ascending."""


def _runs(listed: Iterable[tuple[int, Uuid]]) -> tuple[tuple[int, frozenset[Uuid]], ...]:
    """(start offset, id) pairs in listing order as runs of equal start offsets (adjacent runs
    of the same start merged): an order among equal starts does not show, any other does."""
    runs: list[tuple[int, set[Uuid]]] = []
    for start, segment_id in listed:
        if runs and runs[-1][0] == start:
            runs[-1][1].add(segment_id)
        else:
            runs.append((start, {segment_id}))
    return tuple((start, frozenset(ids)) for start, ids in runs)


def _segment_order(segment: RemoteLogSegmentMetadata) -> tuple[int, int, str]:
    return (segment.start_offset, segment.end_offset, str(segment.remote_log_segment_id.id))


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A user partition as one reader sees it; equal states answer every read alike."""

    topic_id_partition: TopicIdPartition
    gone: bool
    """The reader has no such partition (its deletion finished, or it never knew it)."""
    segments: tuple[RemoteLogSegmentMetadata, ...] = ()
    """Every listed segment, by start offset, end offset, id."""
    epochs: tuple[EpochState, ...] = ()
    """One per leader epoch of ``segments``, ascending."""
    delete_state: RemotePartitionDeleteState | None = field(default=None)
    """The latest partition-delete state; read from a store only (None from an RLMM)."""

    @property
    def segment_ids(self) -> frozenset[Uuid]:
        return frozenset(s.remote_log_segment_id.id for s in self.segments)

    def segment(self, segment_id: Uuid) -> RemoteLogSegmentMetadata | None:
        for segment in self.segments:
            if segment.remote_log_segment_id.id == segment_id:
                return segment
        return None

    def without(self, segment_ids: Collection[Uuid]) -> PartitionState:
        """This state with ``segment_ids`` removed as if they had never been added: out of the
        segments and the listings, their sizes out of each epoch's size, epochs left with no
        segment dropped. ``highest_offset`` is kept: only COPY_SEGMENT_FINISHED segments count
        in it, and what is removed here are uploads that never finished."""
        drop = frozenset(segment_ids)
        if not drop & self.segment_ids:
            return self
        removed = [s for s in self.segments if s.remote_log_segment_id.id in drop]
        kept = tuple(s for s in self.segments if s.remote_log_segment_id.id not in drop)
        live_epochs = {e for s in kept for e in s.segment_leader_epochs}
        epochs = []
        for state in self.epochs:
            if state.epoch not in live_epochs:
                continue
            size = state.size - sum(
                s.segment_size_in_bytes for s in removed if state.epoch in s.segment_leader_epochs
            )
            listing = _runs(
                (start, i) for start, ids in state.listing for i in sorted(ids - drop, key=str)
            )
            epochs.append(replace(state, listing=listing, size=size))
        return replace(self, segments=kept, epochs=tuple(epochs))


def logical_state(reader: MetadataReader, topic_id_partition: TopicIdPartition) -> PartitionState:
    """``reader``'s answers for ``topic_id_partition`` (see the module docstring).

    The partition must be readable: a loading one raises the reader's not-ready error."""
    tip = topic_id_partition
    delete_state = None
    if isinstance(reader, RemotePartitionMetadataStore):
        marker = reader.remote_partition_delete_metadata(tip)
        delete_state = None if marker is None else marker.state
    try:
        segments = tuple(sorted(reader.list_remote_log_segments(tip), key=_segment_order))
    except RemoteResourceNotFoundException:
        return PartitionState(tip, True, delete_state=delete_state)
    epochs = []
    for epoch in sorted({e for s in segments for e in s.segment_leader_epochs}):
        listing = _runs(
            (s.start_offset, s.remote_log_segment_id.id)
            for s in reader.list_remote_log_segments(tip, epoch)
        )
        routing = []
        for offset in _probes(segments, epoch):
            served = reader.remote_log_segment_metadata(tip, epoch, offset)
            routing.append((offset, None if served is None else served.remote_log_segment_id.id))
        epochs.append(
            EpochState(
                epoch,
                listing,
                reader.highest_offset_for_epoch(tip, epoch),
                reader.remote_log_size(tip, epoch),
                tuple(routing),
            )
        )
    return PartitionState(tip, False, segments, tuple(epochs), delete_state)


def _probes(segments: Collection[RemoteLogSegmentMetadata], epoch: int) -> list[int]:
    """The first and last offset of ``epoch`` in each finished segment that holds it."""
    offsets: set[int] = set()
    for segment in segments:
        if segment.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            continue
        epochs = segment.segment_leader_epochs
        if epoch not in epochs:
            continue
        later = [start for e, start in epochs.items() if e > epoch]
        offsets.add(epochs[epoch])
        offsets.add(min(later) - 1 if later else segment.end_offset)
    return sorted(offsets)


_UNASKED = object()


def _listing_text(listing: tuple[tuple[int, frozenset[Uuid]], ...]) -> str:
    """``[0: {id}, 100: {id, id}]``: each run's start offset and ids (sorted: their order is
    not compared)."""
    runs = (f"{start}: {{{', '.join(sorted(str(i) for i in ids))}}}" for start, ids in listing)
    return f"[{', '.join(runs)}]"


def _served(routing: Mapping[int, Uuid | None], offset: int) -> str:
    if offset not in routing:
        return "(not asked)"
    segment_id = routing[offset]
    return "no segment" if segment_id is None else f"segment {segment_id}"


_FIELDS = (
    "start_offset",
    "end_offset",
    "max_timestamp_ms",
    "broker_id",
    "event_timestamp_ms",
    "segment_size_in_bytes",
    "segment_leader_epochs",
    "custom_metadata",
    "state",
    "txn_idx_empty",
    "cleaner_offsets",
)


def _field_text(value: object) -> str:
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, Mapping):
        return str(dict(value))
    return repr(value)


def diff(a: PartitionState, b: PartitionState, *, forgets: bool = False) -> list[str]:
    """Each difference between ``a`` and ``b``, in words (empty when equal); ``a`` is named
    first in each line.

    ``forgets``: ``b`` is a reader of keyed values describing live segments only (a migrated
    or compacted topic), which cannot know the highest copied offset deleted segments gave an
    epoch: in an epoch with no COPY_SEGMENT_FINISHED segment left, its highest offset may be
    lower or unknown, never higher (the difference the compacted RLMM documents)."""
    out: list[str] = []
    if a.topic_id_partition != b.topic_id_partition:
        out.append(f"partition {a.topic_id_partition} vs {b.topic_id_partition}")
    if a.gone != b.gone:
        out.append(
            "partition gone (deleted or unknown) vs present"
            if a.gone
            else "partition present vs gone (deleted or unknown)"
        )
    if a.delete_state != b.delete_state:
        out.append(
            f"partition delete state {_field_text(a.delete_state)} vs {_field_text(b.delete_state)}"
        )
    mine = {s.remote_log_segment_id.id: s for s in a.segments}
    theirs = {s.remote_log_segment_id.id: s for s in b.segments}
    for segment_id in sorted(mine.keys() - theirs.keys(), key=str):
        s = mine[segment_id]
        out.append(
            f"segment {segment_id} ({s.start_offset}-{s.end_offset}, {s.state.name}) only in the "
            "first"
        )
    for segment_id in sorted(theirs.keys() - mine.keys(), key=str):
        s = theirs[segment_id]
        out.append(
            f"segment {segment_id} ({s.start_offset}-{s.end_offset}, {s.state.name}) only in the "
            "second"
        )
    for segment_id in sorted(mine.keys() & theirs.keys(), key=str):
        x, y = mine[segment_id], theirs[segment_id]
        if x == y:
            continue
        changed = [
            f"{name} {_field_text(getattr(x, name))} vs {_field_text(getattr(y, name))}"
            for name in _FIELDS
            if _field_text(getattr(x, name)) != _field_text(getattr(y, name))
        ]
        out.append(f"segment {segment_id}: " + "; ".join(changed or ["differs"]))
    epochs_a = {e.epoch: e for e in a.epochs}
    epochs_b = {e.epoch: e for e in b.epochs}
    for epoch in sorted(epochs_a.keys() | epochs_b.keys()):
        x_epoch, y_epoch = epochs_a.get(epoch), epochs_b.get(epoch)
        if x_epoch is None or y_epoch is None:
            out.append(
                f"leader epoch {epoch} only in the {'first' if y_epoch is None else 'second'}"
            )
            continue
        if x_epoch.listing != y_epoch.listing:
            out.append(
                f"leader epoch {epoch}: listing {_listing_text(x_epoch.listing)} vs "
                f"{_listing_text(y_epoch.listing)}"
            )
        if x_epoch.highest_offset != y_epoch.highest_offset and not (
            forgets and _forgotten(a, epoch, x_epoch.highest_offset, y_epoch.highest_offset)
        ):
            out.append(
                f"leader epoch {epoch}: highest offset {x_epoch.highest_offset} vs "
                f"{y_epoch.highest_offset}"
            )
        if x_epoch.size != y_epoch.size:
            out.append(f"leader epoch {epoch}: remote log size {x_epoch.size} vs {y_epoch.size}")
        served_x, served_y = dict(x_epoch.routing), dict(y_epoch.routing)
        for offset in sorted(served_x.keys() | served_y.keys()):
            if served_x.get(offset, _UNASKED) != served_y.get(offset, _UNASKED):
                out.append(
                    f"leader epoch {epoch}: offset {offset} served by "
                    f"{_served(served_x, offset)} vs {_served(served_y, offset)}"
                )
    return out


def _forgotten(state: PartitionState, epoch: int, full: int | None, keyed: int | None) -> bool:
    """Whether ``keyed`` is a highest offset ``diff(forgets=True)`` accepts for ``full``: the
    epoch has no finished segment in ``state`` and ``keyed`` is unknown or lower."""
    finished = any(
        s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED and epoch in s.segment_leader_epochs
        for s in state.segments
    )
    return not finished and (keyed is None or (full is not None and keyed < full))
