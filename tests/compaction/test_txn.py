"""The transaction rules of a clean: ``decide_transactions`` and ``AbortedIndex``.

``decide_transactions`` replays Kafka's ``CleanedTransactionMetadata`` over the transactional and
control batches of a round (KAFKA-LOGCLEANER.md 3.1). The scenarios are those of Kafka's
``LogCleanerTest`` (aborted data, markers kept while their data remains, commit markers, empty
control batches, transactions spanning segments, interleaved producers); a property test then
compares it, on random well-formed logs that earlier rounds may have thinned, with a model of
Kafka's class written here that, like Kafka's, walks every batch (plain ones included).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from enum import Enum

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.compaction.txn import (
    AbortedIndex,
    MarkerKind,
    TxnDecisions,
    TxnEvent,
    decide_transactions,
)
from tierlog.log.txn_index import AbortedTxn

NONE, COMMIT, ABORT, EMPTY, OTHER = (
    MarkerKind.NONE,
    MarkerKind.COMMIT,
    MarkerKind.ABORT,
    MarkerKind.EMPTY,
    MarkerKind.OTHER,
)


def ev(base: int, pid: int, marker: MarkerKind = NONE, last: int | None = None) -> TxnEvent:
    return TxnEvent(base, base if last is None else last, pid, marker)


# Aborted transactions ----------------------------------------------------------------------------


def test_aborted_data_is_discardable_and_its_marker_kept_with_its_index_entry() -> None:
    entry = AbortedTxn(1, 0, 3, 0)
    d = decide_transactions([ev(0, 1, last=1), ev(2, 1), ev(3, 1, ABORT)], [entry])
    assert d.discard == {0: True, 2: True, 3: False}
    assert d.index_entries == {3: entry}
    assert d.can_discard(0) and d.can_discard(2) and not d.can_discard(3)


def test_abort_marker_without_remaining_data_is_discardable_and_loses_its_index_entry() -> None:
    # Round 2 of Kafka's testMultiPassSegmentCleaningWithAbortedTransactions: the data is gone.
    d = decide_transactions([ev(10, 1, ABORT)], [AbortedTxn(1, 8, 10, 11)])
    assert d.discard == {10: True}
    assert d.index_entries == {}


def test_abort_marker_without_an_index_entry_is_discardable() -> None:
    # An ABORT whose transaction the index does not know (it was dropped by an earlier round).
    d = decide_transactions([ev(0, 1, last=1), ev(2, 1, ABORT)], [])
    assert d.discard == {0: False, 2: True}
    assert d.index_entries == {}


def test_aborted_entry_is_active_only_from_its_first_offset() -> None:
    # pid 1 commits [0, 1] then aborts [2, 3]: only the second transaction's data goes.
    entry = AbortedTxn(1, 2, 3, 2)
    events = [ev(0, 1), ev(1, 1, COMMIT), ev(2, 1), ev(3, 1, ABORT)]
    d = decide_transactions(events, [entry])
    assert d.discard == {0: False, 1: False, 2: True, 3: False}
    assert d.index_entries == {3: entry}


def test_a_producer_aborting_twice() -> None:
    first, second = AbortedTxn(1, 0, 1, 0), AbortedTxn(1, 4, 5, 4)
    events = [ev(0, 1), ev(1, 1, ABORT), ev(2, 1), ev(3, 1, COMMIT), ev(4, 1), ev(5, 1, ABORT)]
    d = decide_transactions(events, [second, first])
    assert d.discard == {0: True, 1: False, 2: False, 3: False, 4: True, 5: False}
    assert d.index_entries == {1: first, 5: second}


def test_duplicate_index_entries_count_once() -> None:
    # Kafka collects an entry once per segment its transaction spans.
    entry = AbortedTxn(7, 0, 4, 0)
    events = [ev(0, 7), ev(2, 7, last=3), ev(4, 7, ABORT)]
    once = decide_transactions(events, [entry])
    thrice = decide_transactions(events, [entry, entry, entry])
    assert once == thrice
    assert thrice.index_entries == {4: entry}


# Commits, empty and other control batches --------------------------------------------------------


def test_commit_marker_kept_while_its_data_is_seen() -> None:
    d = decide_transactions([ev(0, 1, last=1), ev(2, 1, COMMIT)], [])
    assert d.discard == {0: False, 2: False}
    assert d.index_entries == {}


def test_commit_marker_without_data_is_discardable() -> None:
    # Kafka's testCommitMarkerRemoval, second round: the transaction's data was superseded.
    d = decide_transactions([ev(3, 1, COMMIT), ev(6, 1, last=7), ev(8, 1, COMMIT)], [])
    assert d.discard == {3: True, 6: False, 8: False}


def test_a_commit_resets_what_was_seen_of_its_producer() -> None:
    d = decide_transactions([ev(0, 1), ev(1, 1, COMMIT), ev(2, 1, COMMIT)], [])
    assert d.discard == {0: False, 1: False, 2: True}


def test_commit_of_another_producer_is_not_held_by_this_ones_data() -> None:
    d = decide_transactions([ev(0, 1), ev(1, 2, COMMIT), ev(2, 1, COMMIT)], [])
    assert d.discard == {0: False, 1: True, 2: False}


def test_empty_control_batch_is_discardable_and_other_types_are_not() -> None:
    # An emptied marker (Kafka's testCleanEmptyControlBatch) and an unknown control type.
    d = decide_transactions([ev(0, 1, EMPTY), ev(1, 2, OTHER), ev(2, 2, COMMIT)], [])
    assert d.discard == {0: True, 1: False, 2: True}


def test_empty_control_batch_does_not_end_an_ongoing_abort() -> None:
    entry = AbortedTxn(1, 0, 3, 0)
    d = decide_transactions([ev(0, 1), ev(1, 1, EMPTY), ev(2, 1), ev(3, 1, ABORT)], [entry])
    assert d.discard == {0: True, 1: True, 2: True, 3: False}
    assert d.index_entries == {3: entry}


# Spanning segments, interleaving -----------------------------------------------------------------


def test_transaction_spanning_segments_and_each_segments_share() -> None:
    # Kafka's testCleanWithTransactionsSpanningSegments: segments [0, 6) and [6, ...).
    p1, p2, p3 = 1, 2, 3
    a1, a2 = AbortedTxn(p1, 0, 18, 0), AbortedTxn(p2, 4, 12, 0)
    events = [
        ev(0, p1, last=1),
        ev(2, p3, last=3),
        ev(4, p2, last=5),
        # segment 2
        ev(6, p2, last=7),
        ev(8, p3, last=9),
        ev(10, p1, last=11),
        ev(12, p2, ABORT),
        ev(13, p3, last=14),
        ev(15, p3, COMMIT),
        ev(16, p1, last=17),
        ev(18, p1, ABORT),
    ]
    d = decide_transactions(events, [a1, a2, a2])
    assert d.discard == {
        0: True,
        2: False,
        4: True,
        6: True,
        8: False,
        10: True,
        12: False,
        13: False,
        15: False,
        16: True,
        18: False,
    }
    assert d.index_entries == {12: a2, 18: a1}
    first, second = d.restricted_to(0, 6), d.restricted_to(6, 19)
    assert first == TxnDecisions({0: True, 2: False, 4: True}, {})
    assert set(second.discard) == {6, 8, 10, 12, 13, 15, 16, 18}
    assert second.index_entries == {12: a2, 18: a1}
    assert d.restricted_to(13, 18).index_entries == {}


def test_interleaved_producers_keep_their_own_state() -> None:
    # pid 1 aborts, pid 2 commits, their batches interleaved; pid 3 has no transaction open.
    a1 = AbortedTxn(1, 1, 7, 1)
    events = [
        ev(1, 1, last=2),
        ev(3, 2),
        ev(5, 1),
        ev(6, 2),
        ev(7, 1, ABORT),
        ev(8, 3, COMMIT),
        ev(9, 2, COMMIT),
    ]
    d = decide_transactions(events, [a1])
    assert d.discard == {1: True, 3: False, 5: True, 6: False, 7: False, 8: True, 9: False}
    assert d.index_entries == {7: a1}


def test_marker_of_a_transaction_not_started_in_the_round() -> None:
    # The round starts after the transaction's data (an entry starting before the first event).
    entry = AbortedTxn(1, 0, 10, 0)
    d = decide_transactions([ev(10, 1, ABORT)], [entry])
    assert d.discard == {10: True}


def test_events_must_be_in_offset_order() -> None:
    with pytest.raises(Exception, match="out of order"):
        decide_transactions([ev(5, 1), ev(5, 1, COMMIT)], [])
    with pytest.raises(Exception, match="out of order"):
        decide_transactions([ev(5, 1), ev(3, 1, COMMIT)], [])


# AbortedIndex ------------------------------------------------------------------------------------


def test_aborted_index_intervals() -> None:
    a = AbortedTxn(1, 10, 20, 10)
    b = AbortedTxn(1, 30, 31, 30)
    c = AbortedTxn(2, 15, 40, 15)
    index = AbortedIndex([c, b, a, a, c])
    assert len(index) == 3
    assert index.entries == (a, c, b)
    # pid 1: aborted iff 10 <= last < 20 or 30 <= last < 31.
    expected_1 = {9: False, 10: True, 19: True, 20: False, 25: False, 29: False, 30: True}
    expected_1 |= {31: False, 100: False}
    for last, aborted in expected_1.items():
        assert index.is_aborted(1, last) is aborted, last
    # pid 2 overlaps pid 1's ranges; pid 3 has no entry.
    assert [index.is_aborted(2, x) for x in (14, 15, 20, 39, 40)] == [
        False,
        True,
        True,
        True,
        False,
    ]
    assert not index.is_aborted(3, 15)
    assert len(AbortedIndex([])) == 0 and not AbortedIndex([]).is_aborted(1, 0)


def test_aborted_index_batch_spanning_the_first_offset() -> None:
    # A batch [8, 12] of the producer ends inside the transaction starting at 10.
    index = AbortedIndex([AbortedTxn(4, 10, 20, 0)])
    assert index.is_aborted(4, 12)
    assert not index.is_aborted(4, 9)


# Against a model of Kafka's CleanedTransactionMetadata -------------------------------------------


class Kind(Enum):
    PLAIN = "plain"
    DATA = "data"
    COMMIT = "commit"
    ABORT = "abort"
    EMPTY = "empty"


@dataclass(frozen=True)
class ModelBatch:
    base: int
    last: int
    pid: int
    kind: Kind


def kafka_model(
    batches: list[ModelBatch], entries: list[AbortedTxn]
) -> tuple[dict[int, bool], dict[int, AbortedTxn]]:
    """Kafka's CleanedTransactionMetadata, fed every batch of the log (plain ones too)."""
    heap = [(e.first_offset, i, e) for i, e in enumerate(entries)]
    heapq.heapify(heap)
    ongoing_aborted: dict[int, list[object]] = {}  # pid -> [entry, observed]
    committed: set[int] = set()
    discard: dict[int, bool] = {}
    index: dict[int, AbortedTxn] = {}
    for b in batches:
        while heap and heap[0][0] <= b.last:
            _, _, e = heapq.heappop(heap)
            if e.producer_id not in ongoing_aborted:
                ongoing_aborted[e.producer_id] = [e, False]
        if b.kind is Kind.PLAIN:
            continue
        if b.kind is Kind.DATA:
            state = ongoing_aborted.get(b.pid)
            if state is not None:
                state[1] = True
                discard[b.base] = True
            else:
                committed.add(b.pid)
                discard[b.base] = False
        elif b.kind is Kind.ABORT:
            state = ongoing_aborted.pop(b.pid, None)
            if state is not None and state[1]:
                entry = state[0]
                assert isinstance(entry, AbortedTxn)
                index[b.base] = entry
                discard[b.base] = False
            else:
                discard[b.base] = True
        elif b.kind is Kind.COMMIT:
            discard[b.base] = b.pid not in committed
            committed.discard(b.pid)
        else:
            discard[b.base] = True
    return discard, index


@st.composite
def txn_logs(draw: st.DrawFn, *, thin: bool = True) -> tuple[list[ModelBatch], list[AbortedTxn]]:
    """A well-formed log of up to three transactional producers and plain writes and its
    aborted entries (each given one to three times, as Kafka collects them once per segment);
    with ``thin``, earlier rounds may have removed batches and emptied markers."""
    offset = 0
    open_first: dict[int, int] = {}
    batches: list[ModelBatch] = []
    entries: list[AbortedTxn] = []
    for _ in range(draw(st.integers(1, 40))):
        action = draw(st.sampled_from(["plain", "data", "data", "end"]))
        pid = draw(st.integers(1, 3))
        size = draw(st.integers(1, 3))
        if action == "plain":
            batches.append(ModelBatch(offset, offset + size - 1, -1, Kind.PLAIN))
            offset += size
        elif action == "data":
            open_first.setdefault(pid, offset)
            batches.append(ModelBatch(offset, offset + size - 1, pid, Kind.DATA))
            offset += size
        elif pid in open_first:
            first = open_first.pop(pid)
            if draw(st.booleans()):
                batches.append(ModelBatch(offset, offset, pid, Kind.COMMIT))
            else:
                batches.append(ModelBatch(offset, offset, pid, Kind.ABORT))
                lso = min([first, *open_first.values()])
                entries.extend([AbortedTxn(pid, first, offset, lso)] * draw(st.integers(1, 3)))
            offset += 1
    if not thin:
        return batches, entries
    kept: list[ModelBatch] = []
    for b in batches:
        fate = draw(st.sampled_from(["keep", "keep", "keep", "drop", "empty"]))
        if fate == "drop":
            continue
        if fate == "empty" and b.kind in (Kind.COMMIT, Kind.ABORT):
            kept.append(ModelBatch(b.base, b.last, b.pid, Kind.EMPTY))
        else:
            kept.append(b)
    return kept, entries


_MARKER = {
    Kind.DATA: MarkerKind.NONE,
    Kind.COMMIT: MarkerKind.COMMIT,
    Kind.ABORT: MarkerKind.ABORT,
    Kind.EMPTY: MarkerKind.EMPTY,
}


def events_of(batches: list[ModelBatch]) -> list[TxnEvent]:
    return [
        TxnEvent(b.base, b.last, b.pid, _MARKER[b.kind])
        for b in batches
        if b.kind is not Kind.PLAIN
    ]


@settings(max_examples=300, deadline=None)
@given(txn_logs())
def test_decisions_match_kafkas_state_machine(
    log: tuple[list[ModelBatch], list[AbortedTxn]],
) -> None:
    batches, entries = log
    expected_discard, expected_index = kafka_model(batches, entries)
    got = decide_transactions(events_of(batches), entries)
    assert dict(got.discard) == expected_discard
    assert dict(got.index_entries) == expected_index


@settings(max_examples=200, deadline=None)
@given(txn_logs())
def test_aborted_index_is_the_intervals_of_the_entries(
    log: tuple[list[ModelBatch], list[AbortedTxn]],
) -> None:
    # Pass 1 asks AbortedIndex, with no state; pass 2 asks the replay. A data batch inside an
    # entry's [first, marker) is aborted for both.
    batches, entries = log
    got = decide_transactions(events_of(batches), entries)
    index = AbortedIndex(entries)
    for b in batches:
        if b.kind is not Kind.DATA:
            continue
        inside = any(
            e.producer_id == b.pid and e.first_offset <= b.last < e.last_offset for e in entries
        )
        assert index.is_aborted(b.pid, b.last) is inside
        if inside:
            assert got.discard[b.base]


@settings(max_examples=200, deadline=None)
@given(txn_logs(thin=False))
def test_pass_one_and_pass_two_agree_on_a_whole_log(
    log: tuple[list[ModelBatch], list[AbortedTxn]],
) -> None:
    batches, entries = log
    got = decide_transactions(events_of(batches), entries)
    index = AbortedIndex(entries)
    for b in batches:
        if b.kind is Kind.DATA:
            assert index.is_aborted(b.pid, b.last) == got.discard[b.base]
