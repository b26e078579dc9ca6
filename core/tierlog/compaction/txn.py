"""Transactions during a clean: which batches are aborted, and which markers may go.

Kafka's cleaner walks the log in offset order with one ``CleanedTransactionMetadata`` per round
(KAFKA-LOGCLEANER.md 3.1). Its answers depend only on the transactional batches and the control
batches of the rewritten range, in order, and on the aborted transactions of the transaction
indexes; plain batches never change it. So tierlog splits the walk in two:

- every segment, independently (a Spark task each), lists its ``TxnEvent`` s: one per
  transactional or control batch, a few bytes each (``scan.txn_events``);
- the driver replays Kafka's state machine once over the events of the whole range, in order
  (``decide_transactions``), and hands every segment's rewrite the ``TxnDecisions`` it needs:
  whether each such batch may be discarded, and which ``AbortedTxn`` entries the cleaned
  transaction indexes keep.

The single-process cleaner uses the same two steps, so there is one implementation of the rules.

Pass 1 (the offset map) needs less: a transactional data batch is aborted iff an aborted
transaction of its producer started at or before the batch's last offset and ended (its ABORT
marker) after it. ``AbortedIndex`` answers that from the entries alone, so pass-1 tasks need no
state from other segments.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from tierlog.log.txn_index import AbortedTxn
from tierlog.spi import InvalidArgumentError

__all__ = [
    "AbortedIndex",
    "MarkerKind",
    "TxnDecisions",
    "TxnEvent",
    "decide_transactions",
]


class MarkerKind(IntEnum):
    """What a control batch holds, as far as the cleaner cares."""

    NONE = 0
    """Not a control batch (a transactional data batch)."""
    COMMIT = 1
    ABORT = 2
    EMPTY = 3
    """A control batch without records: one an earlier clean emptied (always discardable)."""
    OTHER = 4
    """Any other control record type (never discarded by the transaction rules)."""


class TxnEvent(NamedTuple):
    """One transactional data batch or control batch, as the transaction rules see it."""

    base_offset: int
    last_offset: int
    producer_id: int
    marker: MarkerKind


class AbortedIndex:
    """The aborted transactions of a range, by producer: is a data batch aborted?

    Built from the ``AbortedTxn`` entries of the transaction indexes (duplicates, which Kafka
    collects once per segment a transaction spans, are harmless). A transactional batch of
    producer ``p`` ending at ``last`` is aborted iff an entry of ``p`` has
    ``first_offset <= last < last_offset`` (its ABORT marker is the entry's last offset and comes
    after every batch of the transaction).
    """

    __slots__ = ("_by_producer", "_entries")

    def __init__(self, entries: Iterable[AbortedTxn]) -> None:
        unique = sorted(set(entries), key=lambda e: (e.first_offset, e.last_offset, e.producer_id))
        self._entries: tuple[AbortedTxn, ...] = tuple(unique)
        spans: dict[int, list[tuple[int, int]]] = {}
        for entry in unique:
            spans.setdefault(entry.producer_id, []).append((entry.first_offset, entry.last_offset))
        self._by_producer: dict[int, tuple[list[int], list[int]]] = {
            pid: ([f for f, _ in s], [last for _, last in s]) for pid, s in spans.items()
        }

    @property
    def entries(self) -> tuple[AbortedTxn, ...]:
        """The distinct entries, ordered by first offset."""
        return self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def is_aborted(self, producer_id: int, last_offset: int) -> bool:
        """True for a data batch of ``producer_id`` ending at ``last_offset`` inside an abort."""
        spans = self._by_producer.get(producer_id)
        if spans is None:
            return False
        firsts, lasts = spans
        i = bisect.bisect_right(firsts, last_offset) - 1
        return i >= 0 and last_offset < lasts[i]


@dataclass(frozen=True, slots=True)
class TxnDecisions:
    """What the transaction rules decided for one round, by batch base offset.

    ``discard`` holds, for every transactional data batch and control batch of the rewritten
    range, Kafka's ``canDiscard``: for a data batch "it belongs to an aborted transaction", for
    a marker "its transaction has no batch left, so the marker may go once its delete horizon
    has passed". ``index_entries`` maps the offset of each ABORT marker that is kept because
    batches of its transaction are still in the log to the entry the cleaned transaction index
    keeps for it (the only entries a cleaned index has).
    """

    discard: Mapping[int, bool] = field(default_factory=dict)
    index_entries: Mapping[int, AbortedTxn] = field(default_factory=dict)

    def can_discard(self, base_offset: int) -> bool:
        """The decision for the batch at ``base_offset`` (False for a batch with no event)."""
        return self.discard.get(base_offset, False)

    def restricted_to(self, start_offset: int, end_offset: int) -> TxnDecisions:
        """The decisions of the batches whose base offset is in ``[start, end)`` (one segment's
        share, so a task receives only what it needs)."""
        return TxnDecisions(
            {o: d for o, d in self.discard.items() if start_offset <= o < end_offset},
            {o: e for o, e in self.index_entries.items() if start_offset <= o < end_offset},
        )


@dataclass(slots=True)
class _Ongoing:
    """An aborted transaction whose marker is still ahead, and whether a batch was seen."""

    entry: AbortedTxn
    observed: bool = False


def decide_transactions(events: Iterable[TxnEvent], aborted: Iterable[AbortedTxn]) -> TxnDecisions:
    """Replay Kafka's ``CleanedTransactionMetadata`` over one round's events, in offset order.

    - Aborted entries become "ongoing" once a batch at or past their first offset is read.
    - A transactional data batch of a producer with an ongoing abort is discardable and marks
      that abort as observed; any other transactional data batch puts its producer in the
      "committed and seen" set.
    - An ABORT marker ends its producer's ongoing abort: kept (and its entry kept in the cleaned
      transaction index) if a batch of the transaction was observed this round, else
      discardable. A COMMIT marker is discardable unless a batch of its producer was seen since
      the previous COMMIT. An empty control batch is discardable; other control types are not.
    """
    queue = sorted(set(aborted), key=lambda e: (e.first_offset, e.last_offset, e.producer_id))
    next_entry = 0
    ongoing_aborted: dict[int, _Ongoing] = {}
    committed_seen: set[int] = set()
    discard: dict[int, bool] = {}
    index_entries: dict[int, AbortedTxn] = {}
    previous = -1
    for event in events:
        if event.base_offset <= previous:
            raise InvalidArgumentError(
                f"transaction events out of order: {event.base_offset} after {previous}"
            )
        previous = event.base_offset
        while next_entry < len(queue) and queue[next_entry].first_offset <= event.last_offset:
            entry = queue[next_entry]
            next_entry += 1
            ongoing_aborted.setdefault(entry.producer_id, _Ongoing(entry))
        pid = event.producer_id
        if event.marker == MarkerKind.NONE:
            state = ongoing_aborted.get(pid)
            if state is not None:
                state.observed = True
                discard[event.base_offset] = True
            else:
                committed_seen.add(pid)
                discard[event.base_offset] = False
        elif event.marker == MarkerKind.ABORT:
            state = ongoing_aborted.pop(pid, None)
            if state is not None and state.observed:
                index_entries[event.base_offset] = state.entry
                discard[event.base_offset] = False
            else:
                discard[event.base_offset] = True
        elif event.marker == MarkerKind.COMMIT:
            discard[event.base_offset] = pid not in committed_seen
            committed_seen.discard(pid)
        elif event.marker == MarkerKind.EMPTY:
            discard[event.base_offset] = True
        else:
            discard[event.base_offset] = False
    return TxnDecisions(discard, index_entries)
