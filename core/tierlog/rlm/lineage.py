"""Leader-epoch lineage: which remote segments belong to this leader's history, and the offsets
the RLM derives from remote metadata.

Pure functions over the RLMM and the leader epoch cache, ports of ``RemoteLogManager``'s
``buildFilteredLeaderEpochMap``, ``isRemoteSegmentWithinLeaderEpochs``,
``findHighestRemoteOffset``, ``findLogStartOffset`` and ``findNextSegmentWithTxnIndex``. None of
them writes anything: the copy, expiration and follower tasks act on what they return.

Why the lineage matters: after leader elections (clean or not) remote storage can hold segments
copied by earlier leaders whose history diverged from the current leader's, or that overlap each
other. Retention only counts and deletes, and reads only trust, segments whose epochs and offsets
agree with the current leader's epoch cache.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping

from tierlog.log.leader_epoch_cache import LeaderEpochFileCache
from tierlog.spi import RemoteLogMetadataManager, RemoteLogSegmentMetadata, TopicIdPartition

__all__ = [
    "build_filtered_leader_epoch_map",
    "find_highest_remote_offset",
    "find_log_start_offset",
    "is_remote_segment_within_leader_epochs",
    "next_segment_with_txn_index",
    "segment_epochs_all_below",
]

NO_OFFSET_AND_EPOCH = (-1, -1)
"""What ``find_highest_remote_offset`` returns when nothing was copied: Kafka's
``OffsetAndEpoch(-1, RecordBatch.NO_PARTITION_LEADER_EPOCH)``."""


def build_filtered_leader_epoch_map(epochs: Mapping[int, int]) -> dict[int, int]:
    """Epoch -> start offset without the epochs that hold no record (ascending by epoch).

    An epoch whose start offset equals the next epoch's start offset never had a record written
    under it (leaders were elected in a row without producing), so it cannot appear in any
    segment's data; Kafka drops it before comparing lineages (``buildFilteredLeaderEpochMap``).
    The last epoch is always kept: it is the one being written to. Example from Kafka's test:
    ``{0:0,1:0,2:0,3:30,4:40,5:60,6:60,7:70,8:70}`` -> ``{2:0,3:30,4:40,6:60,8:70}``.
    """
    out: dict[int, int] = {}
    previous: tuple[int, int] | None = None
    for epoch, offset in sorted(epochs.items()):
        if previous is not None and previous[1] != offset:
            out[previous[0]] = previous[1]
        previous = (epoch, offset)
    if previous is not None:
        out[previous[0]] = previous[1]
    return out


def is_remote_segment_within_leader_epochs(
    segment: RemoteLogSegmentMetadata, log_end_offset: int, lineage: Mapping[int, int]
) -> bool:
    """Whether ``segment``'s epochs and offsets agree with the leader's lineage.

    ``lineage`` is the leader's ``build_filtered_leader_epoch_map``. Kafka's rules
    (``isRemoteSegmentWithinLeaderEpochs``), on the segment's own filtered epochs:

    - its last epoch lies within ``[first, last]`` lineage epoch;
    - epochs below the lineage's first epoch are ignored (the log start moved past them, and
      the cache was truncated from the start; an overlapping segment copied by an older leader
      may still begin there); the first remaining one (``ceiling`` of the lineage's first epoch)
      must exist;
    - every remaining epoch must be in the lineage; the first one may start before its lineage
      start offset only when it is the lineage's first epoch; for every epoch but the last the
      next (epoch, start offset) pair must be the same in both; the segment must end before the
      lineage's next epoch starts;
    - the segment ends below the log end offset.

    An empty lineage (an empty epoch cache) validates nothing: Kafka never calls this then.
    """
    if not lineage:
        return False
    segment_epochs = build_filtered_leader_epoch_map(segment.segment_leader_epochs)
    lineage_epochs = sorted(lineage)
    seg_epochs = list(segment_epochs)  # ascending
    first_lineage, last_lineage = lineage_epochs[0], lineage_epochs[-1]
    segment_last = seg_epochs[-1]
    if segment_last < first_lineage or segment_last > last_lineage:
        return False
    i = bisect_left(seg_epochs, first_lineage)
    if i == len(seg_epochs):
        return False
    segment_first = seg_epochs[i]
    end_offset = segment.end_offset
    for epoch in seg_epochs[i:]:
        offset = segment_epochs[epoch]
        if epoch not in lineage:
            return False
        if epoch == segment_first and epoch != first_lineage and offset < lineage[epoch]:
            return False
        nxt = _higher_entry(lineage_epochs, lineage, epoch)
        if epoch == segment_last:
            if nxt is not None and end_offset > nxt[1] - 1:
                return False
        elif nxt != _higher_entry(seg_epochs, segment_epochs, epoch):
            return False
    return end_offset < log_end_offset


def _higher_entry(keys: list[int], mapping: Mapping[int, int], key: int) -> tuple[int, int] | None:
    """``NavigableMap.higherEntry``: the entry with the least key strictly above ``key``."""
    j = bisect_right(keys, key)
    return (keys[j], mapping[keys[j]]) if j < len(keys) else None


def find_highest_remote_offset(
    rlmm: RemoteLogMetadataManager,
    tp: TopicIdPartition,
    epoch_cache: LeaderEpochFileCache,
    log_end_offset: int,
) -> tuple[int, int]:
    """The highest offset already copied to remote storage in this leader's lineage, with its
    epoch: ``(offset, epoch)``, or ``(-1, -1)`` when none is (Kafka's ``findHighestRemoteOffset``).

    The epochs are walked from the latest backwards; at the first one the RLMM has a highest
    offset for, the answer is that offset, unless the leader's own history ends that epoch
    earlier (an unclean election truncated it): then it is the last offset of the epoch in the
    leader's log, ``end_offset_for(epoch) - 1``, under the epoch ``end_offset_for`` names. The
    copy task copies from the next offset; followers and the expiration task use it as the
    highest offset in remote storage, below which local segments may be deleted.
    """
    entry = epoch_cache.latest_entry()
    while entry is not None:
        epoch = entry.epoch
        highest = rlmm.highest_offset_for_epoch(tp, epoch)
        if highest is not None:
            requested_epoch, end_offset = epoch_cache.end_offset_for(epoch, log_end_offset)
            if end_offset <= highest:
                return end_offset - 1, requested_epoch
            return highest, epoch
        entry = epoch_cache.previous_entry(epoch)
    return NO_OFFSET_AND_EPOCH


def find_log_start_offset(
    rlmm: RemoteLogMetadataManager,
    tp: TopicIdPartition,
    epoch_cache: LeaderEpochFileCache,
    local_log_start_offset: int,
) -> int:
    """The log start offset of a partition as a new leader finds it (Kafka's
    ``findLogStartOffset``): the start offset of the first segment the RLMM lists for the
    earliest epoch that has any, walking epochs upwards; ``local_log_start_offset`` when no epoch
    has a remote segment.

    Any listed segment counts, whatever its state, as in Kafka (the listing includes copies in
    progress and deletions in progress).
    """
    entry = epoch_cache.earliest_entry()
    epoch = entry.epoch if entry is not None else None
    while epoch is not None:
        first = next(iter(rlmm.list_remote_log_segments(tp, epoch)), None)
        if first is not None:
            return first.start_offset
        epoch = epoch_cache.next_epoch(epoch)
    return local_log_start_offset


def next_segment_with_txn_index(
    rlmm: RemoteLogMetadataManager,
    tp: TopicIdPartition,
    epoch_cache: LeaderEpochFileCache,
    offset: int,
) -> RemoteLogSegmentMetadata | None:
    """The first remote segment at or after ``offset`` that may hold aborted transactions,
    following the leader's epochs (Kafka's ``findNextSegmentWithTxnIndex``).

    For each epoch entry from the epoch of ``offset`` upwards, ask the RLMM for
    ``next_segment_with_txn_index(tp, epoch, max(epoch start, offset))`` and return the first
    answer. ``None`` when ``offset`` is below every epoch or no epoch has one. Whether the
    returned segment really has a transaction index depends on the RLMM (the SPI default returns
    the segment holding the offset); the reader copes with both, as Kafka's does.
    """
    initial_epoch = epoch_cache.epoch_for_offset(offset)
    if initial_epoch is None:
        return None
    for entry in epoch_cache.epoch_entries():
        if entry.epoch >= initial_epoch:
            found = rlmm.next_segment_with_txn_index(
                tp, entry.epoch, max(entry.start_offset, offset)
            )
            if found is not None:
                return found
    return None


def segment_epochs_all_below(segment: RemoteLogSegmentMetadata, epoch: int) -> bool:
    """Whether every leader epoch of ``segment`` is strictly below ``epoch``.

    The predicate of Kafka's ``deleteLogSegmentsDueToLeaderEpochCacheTruncation``: after an
    unclean leader election the new leader's epoch cache may begin after epochs that remote
    storage still holds; a segment made only of such epochs is unreferenced and deleted.
    """
    return all(e < epoch for e in segment.segment_leader_epochs)
