"""Position records: a Kafka broker must never wait on a metadata partition that ends in a commit.

Kafka 4.3.1's ``TopicBasedRemoteLogMetadataManager`` marks a user partition newly assigned to
a broker ready once its ``ConsumerTask`` has *processed a record* at or past the metadata
partition's end offset - 1, the end offset being captured at assignment
(``ConsumerTask.maybeMarkUserPartitionsAsReady``: ``readOffset + 1 >= endOffset``). A
transaction's commit (or abort) marker takes an offset but is never handed to the consumer as
a record, so when the last entry of a metadata partition is a marker of the compacted RLMM's
transactions, every user partition a Kafka broker newly takes over on it stays not ready (not
copied, not expired, its tiered offsets not served) until some other record lands there.

The compacted RLMM therefore follows its transactions on a metadata partition with one plain
(non-transactional) **position record** once the partition has been idle for a short while
(``DEFAULT_DELAY_S`` after the last commit: a burst of transactions costs one record). Only at
compaction level 0 on ``__remote_log_metadata``, the one topic Kafka's TBRLMM reads; at level 1
no Kafka broker reads the topic (and Kafka refuses null-key records on a compacted topic).

The record is a legacy-format ``RemotePartitionDeleteMetadata`` (DELETE_PARTITION_MARKED, null
key, written as Kafka's TBRLMM writes its own records) of ``POSITION_PARTITION``: the reserved
topic id ``POSITION_TOPIC_ID`` (the 16 ASCII bytes ``tierlog-position``, text form
``dGllcmxvZy1wb3NpdGlvbg``), topic name ``__tierlog_position``, partition 0. No broker is ever
assigned that partition, so Kafka's ConsumerTask decodes the record, skips it (not assigned) and
still counts its offset as read (``processConsumerRecord``); tierlog's consumer task does the
same, and ``tierlog metadata migrate`` leaves such records out (``is_position``).

``PositionDebouncer`` is the timing alone (an injected clock, no thread); ``PositionWriter``
runs it on a thread of its own and calls the write it is given for each partition due. A write
that fails is logged and tried again ``RETRY_S`` later (or after the next commit's delay, if
sooner); it never fails a metadata write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Final

from tierlog.metadata import serde
from tierlog.spi import (
    InvalidArgumentError,
    RemoteLogMetadata,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    Uuid,
)

__all__ = [
    "DEFAULT_DELAY_S",
    "POSITION_PARTITION",
    "POSITION_TOPIC_ID",
    "POSITION_TOPIC_NAME",
    "RETRY_S",
    "PositionDebouncer",
    "PositionWriter",
    "is_position",
    "position_value",
]

_LOG = logging.getLogger(__name__)

POSITION_TOPIC_ID: Final = Uuid.from_bytes(b"tierlog-position")
"""The reserved topic id of position records: the 16 ASCII bytes ``tierlog-position``
(``dGllcmxvZy1wb3NpdGlvbg`` in Kafka's text form). Kafka draws topic ids at random over 122
bits: no topic gets it."""
POSITION_TOPIC_NAME: Final = "__tierlog_position"
POSITION_PARTITION: Final = TopicIdPartition(POSITION_TOPIC_ID, POSITION_TOPIC_NAME, 0)
"""The user partition a position record names; never assigned to any broker or node."""

DEFAULT_DELAY_S: Final = 0.3
"""How long a metadata partition stays idle after the compacted RLMM's last commit on it before
its position record is written: long enough for a burst of writes (the RLM's copy of a segment
is two writes, a deletion two more) to cost one record, short beside the seconds a Kafka
broker's RLM task waits between its runs."""
RETRY_S: Final = 5.0
"""How long after a failed position write it is tried again (unless a new commit comes first)."""


def position_value(broker_id: int, event_timestamp_ms: int) -> bytes:
    """The bytes of a position record: a DELETE_PARTITION_MARKED of ``POSITION_PARTITION`` in
    Kafka's legacy format (no tagged fields), as Kafka's TBRLMM would write it."""
    return serde.serialize(
        RemotePartitionDeleteMetadata(
            POSITION_PARTITION,
            RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
            event_timestamp_ms,
            broker_id,
        )
    )


def is_position(item: RemoteLogMetadata | TopicIdPartition | None) -> bool:
    """Whether ``item`` (an event or the user partition it belongs to) is a position record's:
    its topic id is ``POSITION_TOPIC_ID``, whatever the name or partition."""
    if item is None:
        return False
    tip = item if isinstance(item, TopicIdPartition) else item.topic_id_partition
    return tip.topic_id == POSITION_TOPIC_ID


class PositionDebouncer:
    """Which metadata partitions are due a position record, and when.

    ``committed(p)`` notes a transaction ended on partition ``p`` now; ``p`` becomes due
    ``delay_s`` after its last commit. ``due()`` hands out (and forgets) the partitions due;
    ``failed(p)`` makes ``p`` due again ``retry_s`` from now, unless a commit makes it due
    sooner. Not thread-safe: ``PositionWriter`` holds a lock around it.
    """

    def __init__(
        self,
        *,
        delay_s: float = DEFAULT_DELAY_S,
        retry_s: float = RETRY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if delay_s < 0 or retry_s < 0:
            raise InvalidArgumentError(
                f"position record delays must be >= 0 (delay_s={delay_s}, retry_s={retry_s})"
            )
        self._delay_s = delay_s
        self._retry_s = retry_s
        self._clock = clock
        self._due_at: dict[int, float] = {}

    def committed(self, partition: int) -> None:
        """A transaction of this node ended (committed or aborted) on ``partition`` now."""
        self._due_at[partition] = self._clock() + self._delay_s

    def failed(self, partition: int) -> None:
        """The position write of ``partition`` failed: try again ``retry_s`` from now (a
        commit in between reschedules it after its own delay)."""
        at = self._clock() + self._retry_s
        self._due_at[partition] = min(at, self._due_at.get(partition, at))

    def due(self) -> list[int]:
        """The partitions due a position record now, in partition order; they are no longer
        pending."""
        now = self._clock()
        ready = sorted(p for p, at in self._due_at.items() if at <= now)
        for partition in ready:
            del self._due_at[partition]
        return ready

    def wait_s(self) -> float | None:
        """Seconds until the next partition is due (0 if one is), None if none is pending."""
        if not self._due_at:
            return None
        return max(0.0, min(self._due_at.values()) - self._clock())

    def pending(self) -> list[int]:
        """The partitions waiting for their position record, in partition order."""
        return sorted(self._due_at)

    def clear(self) -> None:
        """Forget every pending partition (level 1: no position record any more)."""
        self._due_at.clear()


class PositionWriter:
    """Writes the position records ``PositionDebouncer`` says are due, on a thread of its own.

    ``write(partition)`` sends one position record and returns its future; ``enabled()`` says
    whether position records are wanted now (level 0): commits noted while it is false are
    dropped, and so are partitions due when it turned false. The thread starts with the first
    commit noted; with ``background=False`` there is none, and the caller runs ``run_due``
    (tests drive the debouncer's clock that way). ``close(flush=True)`` writes what is pending
    at once (a node stopping right after a commit must not leave the partition ending in it)
    and stops the thread.
    """

    def __init__(
        self,
        *,
        write: Callable[[int], Future[object]],
        enabled: Callable[[], bool],
        debouncer: PositionDebouncer | None = None,
        name: str = "rlmm-position",
        background: bool = True,
    ) -> None:
        self._write = write
        self._enabled = enabled
        self._debouncer = debouncer if debouncer is not None else PositionDebouncer()
        self._name = name
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._background = background
        self._closed = False

    def committed(self, partition: int) -> None:
        """Note a transaction ended on metadata partition ``partition`` (called from the
        transactional producer's thread: only takes a lock)."""
        if not self._enabled():
            return
        with self._cond:
            if self._closed:
                return
            self._debouncer.committed(partition)
            if self._thread is None and self._background:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def pending(self) -> list[int]:
        with self._cond:
            return self._debouncer.pending()

    def run_due(self) -> list[int]:
        """One pass: send the position record of every partition due now; the partitions
        sent to. A send that raises or whose future fails is logged and retried later."""
        with self._cond:
            due = self._debouncer.due()
            if due and not self._enabled():
                self._debouncer.clear()
                return []
        for partition in due:
            self._send(partition)
        return due

    def _send(self, partition: int) -> None:
        try:
            future = self._write(partition)
        except Exception as exc:
            self._failed(partition, exc)
            return

        def done(sent: Future[object]) -> None:
            error = sent.exception()
            if error is not None:
                self._failed(partition, error)

        future.add_done_callback(done)

    def _failed(self, partition: int, error: BaseException) -> None:
        _LOG.warning(
            "cannot write the position record of metadata partition %d (tried again in %.0f s, "
            "or after the next commit on it): %s",
            partition,
            RETRY_S,
            error,
        )
        with self._cond:
            if self._closed:
                return
            self._debouncer.failed(partition)
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    wait = self._debouncer.wait_s()
                    if wait == 0:
                        break
                    self._cond.wait(wait)
                if self._closed:
                    return
            try:
                self.run_due()
            except Exception:  # the next commit or retry tries again
                _LOG.exception("the position record writer failed")

    def close(self, *, flush: bool = True) -> list[int]:
        """Stop the thread; with ``flush``, first send the position records still pending (if
        enabled), without waiting for their delay; the partitions sent to."""
        with self._cond:
            pending = self._debouncer.pending() if flush else []
            self._debouncer.clear()
            self._closed = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if not pending or not self._enabled():
            return []
        for partition in pending:
            self._send(partition)
        return pending
