"""The consumer task: reads the metadata topic into the cache (Kafka's ``ConsumerTask``).

One thread, one confluent-kafka ``Consumer``, ``assign()``ed (no group, no commits) to the
metadata partitions of the user partitions this node hosts, leader or follower alike.

Assignment, as Kafka's ConsumerTask
-----------------------------------
- A user partition assigned anew starts from an empty, not-ready state and its metadata
  partition is replayed **from the beginning** (the topic is the only copy of the history).
  The metadata partition's other user partitions are not disturbed: a record is applied only
  if its offset is above the last one applied for its user partition (Kafka's
  ``shouldProcess``), so reading again after the seek changes nothing for them.
- Metadata partitions that keep their user partitions resume where they were.
- Readiness: the end offset of each metadata partition is captured when a new user partition
  is assigned; the user partition becomes ready once the consumer has read up to it (or when
  the metadata partition is empty or fully expired: begin == end). Records written later do
  not delay it. The consumer also counts librdkafka's end-of-partition event as having read up
  to that offset, so a gap at the end of a partition (left by compaction, or by transaction
  markers) cannot hold readiness back.
- A partition no longer hosted is dropped; a metadata partition no longer needed is
  unassigned.

Every (re)assignment is numbered (a generation per user partition), so a partition stopped and
assigned again before the thread noticed is still replayed, and never marked ready from the
reads of its previous assignment.

Read-your-writes
----------------
``wait_applied(tip, offset)`` gives a future that completes once the record at ``offset`` of
``tip`` has been applied (the last offset applied for ``tip`` reached it), or fails when the
wait exceeds its timeout (``ConsumeTimeoutError``), the partition is stopped, its metadata
partition stops on an unreadable record, or the task closes. The thread completes the futures
itself after each batch: no thread waits per write.

Errors
------
A record the applier cannot decode or apply stops its metadata partition (paused, never
skipped): the error (``UnreadableMetadataRecordError``, naming topic, partition and offset) is
logged once at ERROR, kept for ``failure_for``, and given to the waiting writes. A new
assignment of a user partition of that metadata partition replays it again (the record may
have been removed by retention meanwhile). Consumer errors (a broker down, a leader moving) are
logged at WARNING, at most every 30 s per kind, and waited out: librdkafka keeps the positions
and resumes fetching where it stopped, so nothing is lost or read twice.

Stalled fetches
---------------
librdkafka can lose a running client's connection for good after a broker restart, with no
error: a restarted KRaft broker may answer a metadata request before it lists itself, and
librdkafka then decommissions every broker it knew, the bootstrap ones included
(librdkafka#5301; seen here: the records of committed writes never read back, so every write to
that metadata partition timed out). So a metadata partition that a write or a replay waits for,
from which nothing was read for ``stall_timeout_s``
(``remote.log.metadata.consume.stall.timeout.ms``) although the broker has records past the
position (its end offset, the last stable offset for a ``read_committed`` consumer, asked
through the second client) at two checks in a row, gets a **new consumer**: a new librdkafka
client that resumes every assigned metadata partition where this one stood (logged at WARNING,
counted in ``consumer_rebuilds``; nothing skipped or applied twice). When the end offset cannot
be asked at all for twice that long while a new client can ask it, both clients are replaced
(a broker down for every client is waited out). A partition simply caught up (its
writes wait on an open transaction) is left alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from tierlog.spi import IllegalStateError, RemoteStorageException, TopicIdPartition
from tierlog_rlmm_topic.applier import RecordApplier
from tierlog_rlmm_topic.client_factory import (
    close_aside,
    close_client,
    new_client,
    own_client_patience_s,
)
from tierlog_rlmm_topic.errors import ConsumeTimeoutError, UnreadableMetadataRecordError
from tierlog_rlmm_topic.replay import ReplayMeter, ReplayProgressSettings

__all__ = ["ConsumerTask"]

_LOG = logging.getLogger(__name__)

DEFAULT_POLL_TIMEOUT_S: Final = 0.05
"""How long one poll blocks: how soon the thread sees a new assignment, expires waits, and
stops (Kafka's ConsumerTask polls for 100 ms)."""
DEFAULT_BATCH: Final = 1000
_WATERMARK_TIMEOUT_S: Final = 5.0
DEFAULT_STALL_TIMEOUT_S: Final = 30.0
"""How long a waited-for metadata partition may read nothing while records are readable."""
_STALL_CHECK_S: Final = 5.0
"""At most this long between two checks for stalled fetches."""
_STALL_QUERY_TIMEOUT_S: Final = 2.0
_ERROR_LOG_INTERVAL_S: Final = 30.0


@dataclass(eq=False)
class _Waiter:
    tip: TopicIdPartition
    partition: int
    offset: int
    deadline: float
    timeout_ms: int
    future: Future[None] = field(default_factory=Future)


class ConsumerTask:
    """Reads metadata partitions into a ``RecordApplier``; see the module docstring.

    ``partitioner`` maps a user partition to its metadata partition. The consumer is created
    at construction (a configuration librdkafka refuses raises ``ConfigError`` there); the
    thread starts with ``start()``.
    """

    def __init__(
        self,
        topic: str,
        configs: Mapping[str, str],
        applier: RecordApplier,
        partitioner: Callable[[TopicIdPartition], int],
        *,
        progress: ReplayProgressSettings | None = None,
        poll_timeout_s: float = DEFAULT_POLL_TIMEOUT_S,
        batch: int = DEFAULT_BATCH,
        stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._topic = topic
        self._configs = dict(configs)
        self._stall_timeout_s = stall_timeout_s
        self._applier = applier
        self._partitioner = partitioner
        self._poll_timeout_s = poll_timeout_s
        self._batch = batch
        self._monotonic = monotonic
        self._consumer: Consumer = new_client(Consumer, configs, "consumer")
        # End offsets are asked through a second client: librdkafka queues a ListOffsets
        # request behind the consumer's own long-poll fetch (up to fetch.wait.max.ms, 500 ms),
        # which every assignment would wait for.
        try:
            self._offsets: Consumer = new_client(Consumer, configs, "consumer")
        except BaseException:
            close_client(self._consumer)
            raise
        self._meter = ReplayMeter(topic, progress or ReplayProgressSettings(), monotonic)
        self._cond = threading.Condition()
        # Shared state, under _cond.
        self._desired: dict[TopicIdPartition, tuple[int, int]] = {}
        self._generation = 0
        self._changed = False
        self._closed = False
        self._consumer_closed = False
        self._failures: dict[int, UnreadableMetadataRecordError] = {}
        self._crash: RemoteStorageException | None = None
        self._waiters: list[_Waiter] = []
        # The thread's state. _read_by_user is also read (never written) by wait_applied.
        self._processed: dict[TopicIdPartition, tuple[int, int]] = {}
        self._read_by_user: dict[TopicIdPartition, int] = {}
        self._read_by_meta: dict[int, int] = {}
        self._eof: dict[int, int] = {}
        self._ends: dict[int, tuple[int, int]] = {}
        self._uninitialized: set[TopicIdPartition] = set()
        self._assigned: set[int] = set()
        self._error_logged: dict[int, float] = {}
        # Stalled fetches: when each assigned partition last gave a record or an end of
        # partition (or was (re)assigned), when a check first found it behind the broker's end
        # since then, and the end the last check saw (diagnostics).
        self._progress_at: dict[int, float] = {}
        self._behind_at: dict[int, float] = {}
        self._readable_end: dict[int, int] = {}
        self._next_stall_check = 0.0
        self._consumer_rebuilds = 0
        self._thread = threading.Thread(
            target=self._run, name=f"rlmm-consumer-{topic}", daemon=True
        )

    # Public API, called from any thread ---------------------------------------------------------
    @property
    def topic(self) -> str:
        return self._topic

    @property
    def replays_shown(self) -> int:
        """How many replays were long enough to show progress."""
        return self._meter.shown

    @property
    def consumer_rebuilds(self) -> int:
        """How many times the consumer was rebuilt after a stall (see the module docstring)."""
        with self._cond:
            return self._consumer_rebuilds

    def start(self) -> None:
        self._thread.start()

    def add_assignments(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Host these user partitions: each one not hosted yet is loaded (empty, not ready) and
        replayed. Partitions already hosted are left alone (a leadership change between
        leader and follower changes nothing here, as in Kafka)."""
        with self._cond:
            self._check_open()
            for tip in partitions:
                if tip in self._desired:
                    continue
                self._generation += 1
                self._desired[tip] = (self._partitioner(tip), self._generation)
                self._applier.load(tip)
                self._changed = True
            self._cond.notify_all()

    def remove_assignments(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Stop hosting these user partitions: their state is dropped at once."""
        with self._cond:
            self._check_open()
            for tip in partitions:
                if self._desired.pop(tip, None) is not None:
                    self._applier.unload(tip)
                    self._changed = True
            self._cond.notify_all()

    def is_assigned(self, tip: TopicIdPartition) -> bool:
        return tip in self._desired

    def assigned_count(self) -> int:
        return len(self._desired)

    def failure_for(self, tip: TopicIdPartition) -> RemoteStorageException | None:
        """Why ``tip`` cannot advance: its metadata partition holds an unreadable record, or
        the task stopped on an unexpected error; None when it can."""
        with self._cond:
            if self._crash is not None:
                return self._crash
            entry = self._desired.get(tip)
            if entry is None:
                return None
            failure = self._failures.get(entry[0])
        return failure.copy() if failure is not None else None

    def wait_applied(
        self, tip: TopicIdPartition, partition: int, offset: int, timeout_ms: int
    ) -> Future[None]:
        """A future completed once the record at ``partition``/``offset`` of ``tip`` is
        applied; see the module docstring for how it fails."""
        waiter = _Waiter(tip, partition, offset, self._monotonic() + timeout_ms / 1000, timeout_ms)
        waiter.future.set_running_or_notify_cancel()
        with self._cond:
            outcome = self._outcome(waiter, self._monotonic())
            if outcome is None:
                self._waiters.append(waiter)
        if outcome is not None:
            _complete(waiter, outcome)
        return waiter.future

    def stop(self) -> None:
        """Ask the thread to stop, without waiting (``close`` waits); lets a caller close
        other clients meanwhile."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def close(self, timeout: float = 30.0) -> None:
        """Stop the thread and close the consumer; pending waits fail. Idempotent."""
        self.stop()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self._close_consumer()
        self._fail_all_waiters()

    # Internals --------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError(f"the consumer task of {self._topic} is closed")

    def _outcome(self, waiter: _Waiter, now: float) -> BaseException | bool | None:
        """True when done, an exception when it failed, None while pending (lock held)."""
        if self._read_by_user.get(waiter.tip, -1) >= waiter.offset:
            return True
        if self._closed:
            return IllegalStateError(
                f"the RLMM closed before the record at {self._topic} partition "
                f"{waiter.partition} offset {waiter.offset} was applied"
            )
        if self._crash is not None:
            return self._crash
        failure = self._failures.get(waiter.partition)
        if failure is not None:
            return failure.copy()
        if waiter.tip not in self._desired:
            return RemoteStorageException(
                f"{waiter.tip} was stopped (on_stop_partitions) before its record at "
                f"{self._topic} partition {waiter.partition} offset {waiter.offset} was applied"
            )
        if now >= waiter.deadline:
            # Read without the thread's lock: a diagnostic.
            position = self._position(waiter.partition)
            end = self._readable_end.get(waiter.partition)
            read = "nothing yet" if position is None else f"up to offset {position}"
            known = "" if end is None else f", the broker's readable end was {end} when checked"
            return ConsumeTimeoutError(
                f"the record at {self._topic} partition {waiter.partition} offset "
                f"{waiter.offset} ({waiter.tip}) was written but not applied by this node's "
                f"consumer within {waiter.timeout_ms} ms (remote.log.metadata.consume.wait.ms); "
                f"it had read {read} there{known}",
                position=position,
                readable_end=end,
            )
        return None

    def _complete_waiters(self) -> None:
        if not self._waiters:
            return
        now = self._monotonic()
        finished: list[tuple[_Waiter, BaseException | bool]] = []
        with self._cond:
            pending = []
            for waiter in self._waiters:
                outcome = self._outcome(waiter, now)
                if outcome is None:
                    pending.append(waiter)
                else:
                    finished.append((waiter, outcome))
            self._waiters = pending
        for waiter, outcome in finished:
            _complete(waiter, outcome)

    def _fail_all_waiters(self) -> None:
        with self._cond:
            waiters, self._waiters = self._waiters, []
            outcomes = [(w, self._outcome(w, self._monotonic())) for w in waiters]
        for waiter, outcome in outcomes:
            _complete(
                waiter,
                outcome if outcome is not None else IllegalStateError("the RLMM closed"),
            )

    def _run(self) -> None:
        try:
            self._learn_leaders()
            while True:
                with self._cond:
                    while not (self._closed or self._changed or self._assigned or self._waiters):
                        self._cond.wait(1.0)
                    if self._closed:
                        return
                    desired = dict(self._desired) if self._changed else None
                    self._changed = False
                if desired is not None:
                    self._reassign(desired)
                self._offsets.poll(0)  # serves its log lines; it has no records to give
                if self._capture_end_offsets() and self._meter.active:
                    # A replay known to be long shows its progress before its first record.
                    loading = len(self._uninitialized)
                    self._meter.update(ready=len(self._processed) - loading, loading=loading)
                if self._assigned:
                    # poll() returns at the first record; consume() with a count would wait
                    # for a full batch or the timeout, delaying every read-your-writes.
                    first = self._consumer.poll(self._poll_timeout_s)
                    if first is not None:
                        self._process([first, *self._consumer.consume(self._batch, 0)])
                else:
                    with self._cond:
                        if not (self._closed or self._changed):
                            self._cond.wait(self._poll_timeout_s)
                loading = self._mark_ready()
                self._complete_waiters()
                self._watch_stalls()
                if self._meter.active:
                    self._meter.update(ready=len(self._processed) - loading, loading=loading)
        except BaseException as exc:
            _LOG.exception("the consumer task of %s stopped on an unexpected error", self._topic)
            with self._cond:
                self._crash = RemoteStorageException(
                    f"the consumer task of the remote log metadata topic {self._topic} stopped "
                    f"on an unexpected error: {type(exc).__name__}: {exc}"
                )
        finally:
            self._meter.close()
            self._close_consumer()
            self._fail_all_waiters()

    def _close_consumer(self) -> None:
        with self._cond:
            if self._consumer_closed:
                return
            self._consumer_closed = True
        close_client(self._consumer)
        close_client(self._offsets)

    def _learn_leaders(self) -> None:
        """Fetch the topic's metadata once: a partition assigned while librdkafka does not know
        its leader waits for a fixed 500 ms retry before its first offset lookup, which every
        replay would pay."""
        try:
            self._consumer.list_topics(self._topic, timeout=_WATERMARK_TIMEOUT_S)
            self._offsets.list_topics(self._topic, timeout=_WATERMARK_TIMEOUT_S)
        except KafkaException as exc:  # the assignment will find out the same, and retry
            _LOG.info("cannot read the metadata of %s yet: %s", self._topic, exc)

    def _reassign(self, desired: dict[TopicIdPartition, tuple[int, int]]) -> None:
        """Apply the wanted assignment (Kafka's ``maybeWaitForPartitionAssignments``)."""
        new = [tip for tip, entry in desired.items() if self._processed.get(tip) != entry]
        for tip in self._processed:
            if tip not in desired:
                self._read_by_user.pop(tip, None)
                self._uninitialized.discard(tip)
        replayed = {desired[tip][0] for tip in new}
        needed = {partition for partition, _ in desired.values()}
        for partition in (set(self._assigned) | replayed) - (needed - replayed):
            # Replayed from the beginning, or no longer needed: forget its positions.
            self._read_by_meta.pop(partition, None)
            self._eof.pop(partition, None)
            self._ends.pop(partition, None)
            self._meter.drop(partition)
            with self._cond:
                self._failures.pop(partition, None)
        for tip in new:
            self._read_by_user.pop(tip, None)
            self._uninitialized.add(tip)
            with self._cond:
                if self._desired.get(tip) == desired[tip]:
                    # Reset: the events of a previous assignment may have reached the state
                    # add_assignments created while this thread was reading.
                    self._applier.load(tip)
        self._processed = desired
        self._update_assignment(needed, replayed)
        if new:
            _LOG.info(
                "assigned %d new user partition(s) of %d; replaying metadata partition(s) %s of %s",
                len(new),
                len(desired),
                sorted(replayed),
                self._topic,
            )

    def _update_assignment(self, needed: set[int], replayed: set[int]) -> None:
        """Assign, unassign and seek incrementally: a metadata partition that stays assigned
        keeps its fetch state (a full ``assign()`` would make librdkafka look its leader up
        again, a 500 ms wait per reassignment). A partition stopped on an unreadable record
        stays assigned and paused until it is replayed or no longer needed."""
        try:
            self._update_incrementally(needed, replayed)
        except KafkaException as exc:
            _LOG.warning(
                "cannot change the assignment of %s incrementally (%s): assigning it whole",
                self._topic,
                exc,
            )
            assignment = [
                KafkaTopicPartition(
                    self._topic, p, OFFSET_BEGINNING if p in replayed else self._start_offset(p)
                )
                for p in sorted(needed)
            ]
            now = self._monotonic()
            for partition in self._assigned | needed:
                self._forget_progress(partition)
                if partition in needed:
                    self._progress_at[partition] = now
            if assignment:
                self._consumer.assign(assignment)
                # The thread alone changes _failures, so it reads them without the lock.
                failed = self._failures
                self._consumer.resume([tp for tp in assignment if tp.partition not in failed])
            else:
                self._consumer.unassign()
        self._assigned = set(needed)

    def _update_incrementally(self, needed: set[int], replayed: set[int]) -> None:
        topic = self._topic
        removed = sorted(self._assigned - needed)
        added = sorted(needed - self._assigned)
        rewound = sorted((replayed & self._assigned) & needed)
        now = self._monotonic()
        for partition in removed:
            self._forget_progress(partition)
        for partition in (*added, *rewound):
            self._forget_progress(partition)
            self._progress_at[partition] = now
        if removed:
            self._consumer.incremental_unassign([KafkaTopicPartition(topic, p) for p in removed])
        if added:
            self._consumer.incremental_assign(
                [KafkaTopicPartition(topic, p, self._start_offset(p)) for p in added]
            )
        for partition in rewound:
            try:
                self._consumer.seek(KafkaTopicPartition(topic, partition, OFFSET_BEGINNING))
            except KafkaException as exc:  # not fetching yet: assign it afresh instead
                _LOG.debug(
                    "seek of %s partition %d failed (%s): reassigning", topic, partition, exc
                )
                self._consumer.incremental_unassign([KafkaTopicPartition(topic, partition)])
                self._consumer.incremental_assign(
                    [KafkaTopicPartition(topic, partition, OFFSET_BEGINNING)]
                )
        if rewound:
            # A partition paused on an unreadable record is read again from the start.
            self._consumer.resume([KafkaTopicPartition(topic, p) for p in rewound])

    def _watermarks(self, partition: int, timeout: float) -> tuple[int, int]:
        """The broker's (begin, end) of ``partition``, asked through the second client (the
        end is the last stable offset for a ``read_committed`` consumer)."""
        begin, end = self._offsets.get_watermark_offsets(
            KafkaTopicPartition(self._topic, partition), timeout=timeout, cached=False
        )
        return begin, end

    def _forget_progress(self, partition: int) -> None:
        self._progress_at.pop(partition, None)
        self._behind_at.pop(partition, None)
        self._readable_end.pop(partition, None)

    def _position(self, partition: int) -> int | None:
        """The next offset this consumer reads in ``partition`` (past a control record or a
        compacted gap once it reached the end of the partition), None before its first record
        or end of partition."""
        read = self._read_by_meta.get(partition)
        eof = self._eof.get(partition)
        if read is None:
            return eof
        return read + 1 if eof is None else max(read + 1, eof)

    def _watch_stalls(self) -> None:
        """Rebuild the consumer when a waited-for partition reads nothing although the broker
        has records past its position, or cannot even be asked for long (see the module
        docstring)."""
        if self._stall_timeout_s <= 0:
            return
        now = self._monotonic()
        if now < self._next_stall_check:
            return
        self._next_stall_check = now + min(_STALL_CHECK_S, self._stall_timeout_s / 2)
        with self._cond:
            wanted = {waiter.partition for waiter in self._waiters}
            failed = set(self._failures)
        wanted |= {self._processed[tip][0] for tip in self._uninitialized if tip in self._processed}
        for partition in sorted((wanted & self._assigned) - failed):
            since = self._progress_at.setdefault(partition, now)
            behind = self._behind_at.get(partition)
            if behind is not None and behind < since:  # it read something since: start over
                del self._behind_at[partition]
                behind = None
            idle = now - since
            if idle < self._stall_timeout_s:
                continue
            try:
                begin, end = self._watermarks(partition, _STALL_QUERY_TIMEOUT_S)
            except KafkaException as exc:
                if idle >= 2 * self._stall_timeout_s and self._offsets_lost(partition):
                    self._rebuild(
                        f"partition {partition}: nothing read for {idle:.0f} s and its end "
                        f"offset cannot be asked ({exc}) although a new client can",
                        offsets_too=True,
                    )
                    return
                continue
            self._readable_end[partition] = end
            position = self._position(partition)
            if end <= (begin if position is None else position):
                self._behind_at.pop(partition, None)  # caught up: its writes wait on the broker
                continue
            if behind is None:
                self._behind_at[partition] = now  # behind once: rebuilt if still at the next
                continue
            at = "its beginning" if position is None else f"offset {position}"
            self._rebuild(
                f"partition {partition}: nothing read for {idle:.0f} s although the broker has "
                f"records up to offset {end} (this consumer is at {at})",
                offsets_too=False,
            )
            return

    def _offsets_lost(self, partition: int) -> bool:
        """Whether the end-offset client lost its brokers for good: a new client is answered,
        and it is not within ``own_client_patience_s`` (a broker down for every client, or a
        client waiting to reconnect after an outage, is not a lost one)."""
        tp = KafkaTopicPartition(self._topic, partition)
        try:
            probe = new_client(Consumer, self._configs, "consumer")
        except Exception as exc:  # cannot tell
            _LOG.debug("cannot create a probe of %s: %s", self._topic, exc)
            return False
        try:
            probe.get_watermark_offsets(tp, timeout=_WATERMARK_TIMEOUT_S, cached=False)
        except KafkaException:
            return False  # an outage every client sees
        finally:
            close_aside(probe)
        try:
            self._offsets.get_watermark_offsets(
                tp, timeout=own_client_patience_s(self._configs), cached=False
            )
            return False
        except KafkaException:
            return True

    def _rebuild(self, why: str, *, offsets_too: bool) -> None:
        """Replace the librdkafka consumer (and the end-offset client with ``offsets_too``)
        by a new one that resumes every assigned metadata partition at its position (those
        stopped on an unreadable record paused again). The old client is closed on a thread of
        its own: a wedged client may never finish closing."""
        _LOG.warning(
            "%s %s: rebuilding this node's consumer%s (a new librdkafka client resuming every "
            "metadata partition where it was)",
            self._topic,
            why,
            " and its end-offset client" if offsets_too else "",
        )
        topic = self._topic
        assignment = [
            KafkaTopicPartition(topic, p, self._start_offset(p)) for p in sorted(self._assigned)
        ]
        try:
            fresh = new_client(Consumer, self._configs, "consumer")
        except Exception as exc:  # tried again at the next check
            _LOG.warning("cannot create a new consumer for %s: %s", topic, exc)
            return
        try:
            if assignment:
                fresh.incremental_assign(assignment)
                stopped = [tp for tp in assignment if tp.partition in self._failures]
                if stopped:
                    fresh.pause(stopped)
            offsets = new_client(Consumer, self._configs, "consumer") if offsets_too else None
        except Exception as exc:
            _LOG.warning("cannot start a new consumer for %s: %s", topic, exc)
            close_aside(fresh)
            return
        close_aside(self._consumer)
        self._consumer = fresh
        if offsets is not None:
            close_aside(self._offsets)
            self._offsets = offsets
        now = self._monotonic()
        for partition in self._assigned:
            self._progress_at[partition] = now
            self._behind_at.pop(partition, None)
        with self._cond:
            self._consumer_rebuilds += 1

    def _start_offset(self, partition: int) -> int:
        """Where a newly assigned metadata partition starts: after what was read, else at the
        beginning."""
        if partition in self._read_by_meta:
            return self._read_by_meta[partition] + 1
        return self._eof.get(partition, OFFSET_BEGINNING)

    def _capture_end_offsets(self) -> bool:
        """The end offsets the loading partitions must reach (once per replay); whether any
        was captured."""
        if not self._uninitialized:
            return False
        captured = False
        wanted = {self._processed[tip][0] for tip in self._uninitialized} & self._assigned
        for partition in sorted(wanted - self._ends.keys()):
            try:
                begin, end = self._watermarks(partition, _WATERMARK_TIMEOUT_S)
            except KafkaException as exc:
                # Usual right after the topic is created (no leader known yet): INFO.
                self._log_error(
                    -1,
                    f"cannot read the end offset of {self._topic} "
                    f"partition {partition} yet (retrying): {exc}",
                    logging.INFO,
                )
                break
            self._ends[partition] = (begin, end)
            self._meter.add(partition, begin, end)
            captured = True
        return captured

    def _process(self, messages: list[Message]) -> None:
        read_by_meta = self._read_by_meta
        read_by_user = self._read_by_user
        processed = self._processed
        assigned = self._assigned
        decode = self._applier.decode
        apply = self._applier.apply
        stopped = self._failures  # only this thread changes it: read without the lock
        progress_at = self._progress_at
        now = self._monotonic()
        for message in messages:
            error = message.error()
            partition = message.partition()
            offset = message.offset()
            if partition is None or offset is None:
                if error is not None:
                    self._consumer_error(error)
                continue
            progress_at[partition] = now
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    self._eof[partition] = offset
                    self._meter.position(partition, offset)
                else:
                    self._consumer_error(error)
                continue
            if partition in stopped or partition not in assigned:
                continue
            try:
                event = decode(message.key(), message.value())
            except Exception as exc:
                self._stop_partition(partition, offset, "cannot be decoded", exc)
                continue
            tip = event.topic_id_partition
            if tip is None:
                _LOG.warning(
                    "%s partition %d offset %d: skipping a record that belongs to no user "
                    "partition (%s; Kafka never publishes it)",
                    self._topic,
                    partition,
                    offset,
                    type(event.event).__name__,
                )
            elif tip in processed and read_by_user.get(tip, -1) < offset:
                try:
                    apply(event)
                except Exception as exc:
                    self._stop_partition(partition, offset, "cannot be applied", exc)
                    continue
                read_by_user[tip] = offset
            read_by_meta[partition] = offset
        if self._meter.active:
            for partition, offset in read_by_meta.items():
                self._meter.position(partition, offset + 1)

    def _stop_partition(self, partition: int, offset: int, what: str, exc: Exception) -> None:
        failure = UnreadableMetadataRecordError(
            f"the record at offset {offset} of the remote log metadata topic {self._topic} "
            f"partition {partition} {what} ({type(exc).__name__}: {exc}); that metadata "
            "partition is stopped there: its user partitions still loading will not become "
            "ready and their reads raise this error, and writes to them fail, until the record "
            "is removed (retention) and they are assigned again",
            topic=self._topic,
            partition=partition,
            offset=offset,
        )
        _LOG.error("%s", failure)
        with self._cond:
            self._failures[partition] = failure
        self._meter.drop(partition)
        try:
            self._consumer.pause([KafkaTopicPartition(self._topic, partition)])
        except KafkaException as pause_error:  # its records are skipped anyway
            _LOG.warning("cannot pause %s partition %d: %s", self._topic, partition, pause_error)

    def _consumer_error(self, error: KafkaError) -> None:
        level = "" if error.retriable() else " (not retriable; librdkafka keeps trying)"
        self._log_error(
            error.code(), f"consumer error on {self._topic}{level}: {error.name()}: {error.str()}"
        )

    def _log_error(self, code: int, message: str, level: int = logging.WARNING) -> None:
        """Log ``message``, at most once per ``_ERROR_LOG_INTERVAL_S`` for one error code."""
        now = self._monotonic()
        last = self._error_logged.get(code)
        if last is None or now - last >= _ERROR_LOG_INTERVAL_S:
            self._error_logged[code] = now
            _LOG.log(level, "%s", message)

    def _mark_ready(self) -> int:
        """Kafka's ``maybeMarkUserPartitionsAsReady``; how many partitions are still loading
        (those stopped on an unreadable record aside)."""
        if not self._uninitialized:
            return 0
        with self._cond:
            failed = set(self._failures)
        for tip in list(self._uninitialized):
            entry = self._processed.get(tip)
            if entry is None:
                self._uninitialized.discard(tip)
                continue
            partition = entry[0]
            ends = self._ends.get(partition)
            if partition in failed or ends is None:
                continue
            begin, end = ends
            position = max(self._read_by_meta.get(partition, -1) + 1, self._eof.get(partition, -1))
            if begin != end and position < end:
                continue
            with self._cond:
                if self._desired.get(tip) == entry:
                    self._applier.mark_initialized(tip)
            self._uninitialized.discard(tip)
            _LOG.debug("%s is ready (metadata partition %d read to %d)", tip, partition, end)
        loading = {self._processed[tip][0] for tip in self._uninitialized}
        for partition in list(self._ends):
            if partition not in loading:
                del self._ends[partition]
        return sum(1 for tip in self._uninitialized if self._processed[tip][0] not in failed)


def _complete(waiter: _Waiter, outcome: BaseException | bool) -> None:
    if waiter.future.done():
        return
    if isinstance(outcome, BaseException):
        waiter.future.set_exception(outcome)
    else:
        waiter.future.set_result(None)
