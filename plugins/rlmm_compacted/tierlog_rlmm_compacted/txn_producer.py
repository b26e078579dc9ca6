"""The compacted RLMM's producer: every write is one Kafka transaction (group-committed).

One metadata event becomes several records: its projection record (keyed), its audit record
(the legacy bytes, null key, another topic) and the tombstones it makes obsolete. They must
land together or not at all, or the projection and the audit trail disagree (KAFKA-20033's
"consistent audit"); a Kafka transaction gives exactly that to a ``read_committed`` reader, and
the RLMM's own consumer reads ``read_committed``.

``send(records, primary)`` queues the records of one write and returns a future of the
``(partition, offset)`` of ``records[primary]`` (the projection record the write waits for),
completed once the transaction holding it committed. A writer thread does **group commit**:
every write queued while a transaction is open goes into the next one (begin, produce all,
commit), so a burst of writes costs a few transactions, not one each.

Errors (librdkafka's transactional API):

- *abortable* (``txn_requires_abort``: a record's delivery failed, a coordinator hiccup): the
  transaction is aborted and the same writes retried in a new one, up to ``max_attempts``
  times and no new attempt after ``commit_timeout_s``; then their futures fail with a
  retriable ``ProduceError``. A write whose own record
  is refused for good (too large, not authorized; at ``produce`` or in its delivery report)
  fails alone with that error and the others are retried without it, so one bad record never
  holds up the writes it was grouped with.
- *retriable* commit or abort errors (timeouts): the commit (or abort) is called again until
  ``commit_timeout_s``.
- **an outage** (the coordinator unreachable for longer than ``commit_timeout_s``): a commit
  or an abort that cannot complete leaves its transaction pending. The writes of that
  transaction fail with a retriable ``ProduceError`` (after an interrupted abort no
  ``read_committed`` reader ever sees them; after an interrupted commit they may be committed
  all the same, as after any producer's timeout: the RLM's retry then publishes an event the
  cache already holds, which every reader drops as an invalid transition), and the producer
  stays usable: before its next transaction it completes the pending commit or abort
  (librdkafka resumes a timed-out ``commit_transaction``/``abort_transaction`` called again,
  and allows no other call meanwhile); while it cannot, each batch fails retriably after
  ``commit_timeout_s``, so callers get an answer, never a hang. When the broker is back, the
  next write succeeds.
- **a producer that lost its brokers**: librdkafka can drop every broker it knew, for good,
  when a restarted broker answers a metadata request before it lists itself (librdkafka#5301).
  When the coordinator cannot be reached in time and a new client reaches a broker, the
  producer is asked for metadata; if it cannot answer within ``own_client_patience_s`` (longer
  than its longest reconnect backoff), it is replaced (as after a fatal error, but not counted
  in ``max_rebuilds``): the writes of that transaction fail retriably, and the new producer's
  ``init_transactions`` ends the old transaction before the next one (``replaced`` counts them).
- *fatal* errors: librdkafka's producer cannot be used any more.
  - Fenced (``PRODUCER_FENCED``, ``INVALID_PRODUCER_EPOCH``) with no outage behind it: another
    producer started with the same ``transactional.id``, that is another instance of this
    node. Writing on would fence that instance in turn: every pending write fails with a
    non-retriable ``ProduceError`` that says so, and every later ``send`` raises it. Only a
    restart of the RLMM writes again.
  - Any other fatal error, or a fencing after an outage (the coordinator aborted the
    transaction that outlived ``transaction.timeout.ms`` and bumped the producer's epoch): the
    producer is **rebuilt** (a new librdkafka producer with the same ``transactional.id``,
    whose ``init_transactions`` fences the old one and ends its transaction); the writes of
    the failed transaction fail retriably. After ``max_rebuilds`` rebuilds without a commit in
    between, the producer gives up as for a fencing.

``transactional.id`` comes with the configuration (``CompactedRlmmConfig.producer``: one per
node); ``init_transactions`` runs in the constructor, retried until ``init_timeout_s``: it
also fences any earlier instance of this node and completes or aborts its open transaction.
``close`` commits what is queued, then stops.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Final

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from tierlog_rlmm_topic.client_factory import close_client, new_client
from tierlog_rlmm_topic.producer import (
    LOST_BROKERS,
    ProduceError,
    RetriableProduceError,
    lost_its_brokers,
    produce_error,
)

from tierlog.spi import IllegalStateError, InvalidArgumentError

__all__ = ["OutRecord", "TransactionalMetadataProducer"]

_LOG = logging.getLogger(__name__)

TRANSACTIONAL_ID: Final = "transactional.id"

_IDLE_WAIT_S: Final = 0.5
"""How long the idle writer waits for a write before it serves librdkafka's log lines."""
_ATTEMPT_S: Final = 10.0
"""Longest single ``init_transactions``/``commit_transaction``/``abort_transaction`` call."""
_CONNECT_S: Final = 5.0
"""How long a producer waits for broker metadata before its first ``init_transactions``."""
_REPLACED: Final = (
    f"{LOST_BROKERS}; the write may still be committed if its commit had reached the coordinator"
)
_QUEUE_FULL_WAIT_S: Final = 30.0
"""How long a produce waits for room in librdkafka's queue before the transaction is retried."""

_FENCED_CODES: Final = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)
_PURGED_CODES: Final = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
"""Delivery errors an abort gives the records it discards: not the records' own fault."""
_RETRIABLE_CODES: Final = frozenset(
    {
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
    }
)


@dataclass(frozen=True, slots=True)
class OutRecord:
    """One record of a write: ``key``/``value`` None for a null key / a tombstone."""

    topic: str
    partition: int
    key: bytes | None
    value: bytes | None


_Result = tuple[int, int] | KafkaError | None
"""A record's delivery: ``(partition, offset)``, librdkafka's error, or not reported yet."""


@dataclass(eq=False)
class _Write:
    records: tuple[OutRecord, ...]
    primary: int
    future: Future[tuple[int, int]] = field(default_factory=Future)
    results: list[_Result] = field(default_factory=list)
    """The delivery of each record in the current attempt; a new list per attempt, so a late
    report of an aborted attempt cannot touch the next one."""


class _Abortable(Exception):
    """The open transaction must be aborted; its writes may be retried."""

    def __init__(self, error: KafkaError | None, what: str) -> None:
        super().__init__(what)
        self.error = error
        self.what = what


class _Fatal(Exception):
    """librdkafka's producer cannot write any more (fenced, or a fatal librdkafka error)."""

    def __init__(self, failure: ProduceError, *, fenced: bool) -> None:
        super().__init__(str(failure))
        self.failure = failure
        self.fenced = fenced


class _Unavailable(Exception):
    """The coordinator could not be reached in time: the producer is usable once it can.
    ``ending``: the commit or abort left pending (librdkafka resumes a timed-out
    ``commit_transaction``/``abort_transaction`` when it is called again, and allows no other
    call meanwhile), None when nothing was started."""

    def __init__(self, what: str, ending: str | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.ending = ending


def _kafka_error(exc: KafkaException) -> KafkaError | None:
    error = exc.args[0] if exc.args else None
    return error if isinstance(error, KafkaError) else None


def _describe(error: KafkaError | None, fallback: object = "") -> str:
    if error is None:
        return str(fallback)
    return f"{error.name()}: {error.str()}"


def _retriable(error: KafkaError) -> bool:
    return error.retriable() or error.code() in _RETRIABLE_CODES


class TransactionalMetadataProducer:
    """A transactional producer of metadata writes; see the module docstring.

    ``configs`` is a complete librdkafka producer configuration with ``transactional.id``.
    ``max_batch_records`` bounds the records of one transaction (whole writes are grouped;
    a larger write goes alone).
    """

    def __init__(
        self,
        configs: Mapping[str, str],
        *,
        init_timeout_s: float = 120.0,
        commit_timeout_s: float = 60.0,
        max_attempts: int = 5,
        max_batch_records: int = 5000,
        max_rebuilds: int = 3,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        transactional_id = str(configs.get(TRANSACTIONAL_ID, "")).strip()
        if not transactional_id:
            raise InvalidArgumentError(
                f"the transactional metadata producer needs {TRANSACTIONAL_ID} in its "
                "configuration (CompactedRlmmConfig.producer sets one per node)"
            )
        if max_attempts < 1 or max_batch_records < 1 or max_rebuilds < 0:
            raise InvalidArgumentError(
                f"max_attempts ({max_attempts}) and max_batch_records ({max_batch_records}) "
                f"must be at least 1, max_rebuilds ({max_rebuilds}) at least 0"
            )
        self._configs = dict(configs)
        self._transactional_id = transactional_id
        self._servers = str(configs.get("bootstrap.servers", "?"))
        self._init_timeout_s = init_timeout_s
        self._commit_timeout_s = commit_timeout_s
        self._max_attempts = max_attempts
        self._max_batch_records = max_batch_records
        self._max_rebuilds = max_rebuilds
        self._monotonic = monotonic
        # The writer thread's recovery state (see the module docstring: an outage).
        self._commit_pending = False  # a commit that timed out: it must be called again
        self._abort_pending = False  # a transaction is open that an abort could not end yet
        self._init_pending = False  # a rebuilt producer whose init_transactions has not run
        self._outage = False  # an outage since the last commit (a fencing may be its result)
        self._rebuilds = 0  # rebuilds since the last commit
        self._producer: Producer = new_client(Producer, configs, "producer")
        try:
            self._init_transactions(init_timeout_s)
        except BaseException:
            _close_unusable(self._producer)
            raise
        self._cond = threading.Condition()
        self._queue: list[_Write] = []
        self._current: list[_Write] = []  # the writer thread's batch
        self._closing = False
        self._fatal: str | None = None
        self._transactions = 0
        self._aborts = 0
        self._rebuilt = 0
        self._replaced = 0
        self._thread = threading.Thread(
            target=self._run, name=f"rlmm-txn-producer-{transactional_id}", daemon=True
        )
        self._thread.start()

    # Public API --------------------------------------------------------------------------------
    @property
    def transactional_id(self) -> str:
        return self._transactional_id

    @property
    def transactions(self) -> int:
        """Transactions committed so far (tests, tools: group commit makes it smaller than the
        number of writes)."""
        with self._cond:
            return self._transactions

    @property
    def aborts(self) -> int:
        """Transactions aborted so far."""
        with self._cond:
            return self._aborts

    @property
    def rebuilds(self) -> int:
        """librdkafka producers replaced after a fatal error so far."""
        with self._cond:
            return self._rebuilt

    @property
    def replaced(self) -> int:
        """librdkafka producers replaced because they had lost every broker (librdkafka#5301)
        while the cluster was reachable (also counted in ``rebuilds``)."""
        with self._cond:
            return self._replaced

    def send(self, records: Sequence[OutRecord], primary: int) -> Future[tuple[int, int]]:
        """Queue one write; the future gives ``(partition, offset)`` of ``records[primary]``
        once its transaction committed, or fails with a ``ProduceError``."""
        batch = tuple(records)
        if not batch:
            raise InvalidArgumentError("a metadata write needs at least one record")
        if not 0 <= primary < len(batch):
            raise InvalidArgumentError(
                f"primary index {primary} is outside the write's {len(batch)} record(s)"
            )
        write = _Write(batch, primary)
        write.future.set_running_or_notify_cancel()
        with self._cond:
            if self._fatal is not None:
                raise ProduceError(self._fatal)
            if self._closing:
                raise IllegalStateError("the RLMM's transactional metadata producer is closed")
            self._queue.append(write)
            self._cond.notify_all()
        return write.future

    def close(self, timeout: float = 30.0) -> None:
        """Commit what is queued (up to ``timeout`` seconds), then stop; idempotent. Writes
        still queued after that fail with ``IllegalStateError``."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            _LOG.warning(
                "the transactional metadata producer %s did not finish its writes within %.0f s",
                self._transactional_id,
                timeout,
            )
        with self._cond:
            left, self._queue = self._queue, []
        for write in left:
            _fail(write, IllegalStateError("the RLMM closed before the metadata write was sent"))
        if not self._thread.is_alive():
            if self._fatal is None:
                close_client(self._producer)
            else:
                _close_unusable(self._producer)

    # Initialization ----------------------------------------------------------------------------
    def _init_transactions(self, timeout_s: float) -> None:
        deadline = self._monotonic() + timeout_s
        attempts = 0
        # A metadata request first: it waits for a broker connection. librdkafka looks for the
        # transaction coordinator at once, and with no broker connected yet retries only on a
        # 500 ms timer (measured: a quarter of the node starts took ~515 ms instead of ~65 ms).
        try:
            self._producer.list_topics(timeout=max(0.5, min(_CONNECT_S, timeout_s)))
        except KafkaException as exc:  # init_transactions reports what is wrong, retried
            _LOG.debug("no broker metadata before init_transactions: %s", exc)
        while True:
            attempts += 1
            remaining = deadline - self._monotonic()
            try:
                self._producer.init_transactions(max(0.5, min(_ATTEMPT_S, remaining)))
                _LOG.info("transactional producer %s initialized", self._transactional_id)
                return
            except KafkaException as exc:
                error = _kafka_error(exc)
                if error is None or error.fatal() or not _retriable(error):
                    raise ProduceError(
                        f"cannot initialize the transactions of {TRANSACTIONAL_ID} "
                        f"{self._transactional_id} on {self._servers}: {_describe(error, exc)}"
                    ) from exc
                if self._monotonic() >= deadline:
                    raise RetriableProduceError(
                        f"cannot initialize the transactions of {TRANSACTIONAL_ID} "
                        f"{self._transactional_id} on {self._servers} within {timeout_s:.0f} s "
                        f"({attempts} attempt(s)); last error: {_describe(error, exc)}"
                    ) from exc
                _LOG.info(
                    "initializing the transactions of %s (attempt %d): %s",
                    self._transactional_id,
                    attempts,
                    _describe(error, exc),
                )

    # The writer thread -------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    if not self._queue and not self._closing:
                        self._cond.wait(_IDLE_WAIT_S)
                    if self._fatal is not None:
                        return
                    if not self._queue:
                        if self._closing:
                            return
                        batch: list[_Write] = []
                    else:
                        batch = self._take()
                self._current = batch  # failed by the handler below if anything raises
                fatal = self._poll(0)  # serves librdkafka's log lines and fatal errors
                if fatal is not None and not self._rebuild_or_give_up(
                    fatal, batch, fail_if_rebuilt=False
                ):
                    return
                if batch:
                    self._transact(batch)
                self._current = []
        except BaseException as exc:  # never leave writes hanging
            _LOG.exception("the transactional metadata producer stopped on an unexpected error")
            self._go_fatal(
                ProduceError(
                    f"the transactional metadata producer {self._transactional_id} stopped on "
                    f"an unexpected error: {type(exc).__name__}: {exc}"
                ),
                self._current,
            )

    def _take(self) -> list[_Write]:
        """The queued writes of the next transaction, oldest first (lock held)."""
        count = 0
        taken = 0
        for write in self._queue:
            if taken and count + len(write.records) > self._max_batch_records:
                break
            count += len(write.records)
            taken += 1
        batch, self._queue = self._queue[:taken], self._queue[taken:]
        return batch

    def _transact(self, batch: list[_Write]) -> None:
        if not self._recovered(batch):
            return
        attempts = 0
        last = ""
        # No new attempt after commit_timeout_s: a write is answered within a few timeouts
        # (the attempt under way, its abort), not max_attempts of them.
        deadline = self._monotonic() + self._commit_timeout_s
        while batch:
            if attempts >= self._max_attempts or (attempts and self._monotonic() >= deadline):
                self._fail_retriable(
                    batch, f"{attempts} transaction(s), each aborted; last error: {last}"
                )
                return
            attempts += 1
            try:
                self._produce_all(batch)
                if not batch:  # every write refused at once: nothing to commit
                    self._abort()
                    return
                self._commit()
            except _Unavailable as exc:  # the commit, or the empty transaction's abort
                self._unavailable(batch, exc, exc.what)
                return
            except _Abortable as exc:
                last = exc.what
                _LOG.warning(
                    "aborting a metadata transaction of %s (%d write(s), attempt %d of %d): %s",
                    self._transactional_id,
                    len(batch),
                    attempts,
                    self._max_attempts,
                    exc.what,
                )
                try:
                    self._abort()
                except _Fatal as fatal:
                    self._rebuild_or_give_up(fatal, batch)
                    return
                except _Unavailable as unavailable:
                    self._unavailable(
                        self._drop_refused(batch),
                        unavailable,
                        f"{unavailable.what} (after: {exc.what})",
                    )
                    return
                batch = self._drop_refused(batch)
                continue
            except _Fatal as fatal:
                self._rebuild_or_give_up(fatal, batch)
                return
            self._rebuilds = 0
            self._outage = False
            self._complete(batch)
            return

    # Recovery ----------------------------------------------------------------------------------
    def _recovered(self, batch: list[_Write]) -> bool:
        """Make the producer ready for ``batch``'s transaction; False when ``batch`` failed
        instead (the coordinator still unreachable: retriably; the producer given up)."""
        while True:
            try:
                self._recover()
                return True
            except _Unavailable as exc:
                # Still pending: the ending is already remembered (or a rebuilt producer's
                # init_transactions), unless the producer lost its brokers and is replaced.
                if self._replaced_if_lost():
                    self._fail_retriable(batch, f"{exc.what}; {_REPLACED}")
                else:
                    self._fail_retriable(batch, exc.what)
                return False
            except _Fatal as fatal:
                # Nothing of ``batch`` was produced: it goes on with the rebuilt producer.
                if not self._rebuild_or_give_up(fatal, batch, fail_if_rebuilt=False):
                    return False

    def _recover(self) -> None:
        """Before a transaction: end what an outage or a rebuild left (``_Unavailable`` while
        the coordinator still cannot be reached, ``_Fatal`` when it cannot be done at all)."""
        if self._init_pending:
            try:
                self._init_transactions(self._commit_timeout_s)
            except RetriableProduceError as exc:
                raise _Unavailable(str(exc)) from exc
            except ProduceError as exc:
                raise _Fatal(exc, fenced=False) from exc
            self._init_pending = False
        if self._commit_pending:
            try:
                self._commit()
                _LOG.info("%s completed a commit an outage had left", self._transactional_id)
            except _Abortable as exc:  # the resumed commit failed: the transaction is aborted
                _LOG.info("%s: %s", self._transactional_id, exc.what)
                self._abort_pending = True
            self._commit_pending = False
        if self._abort_pending:
            self._abort()
            self._abort_pending = False
            _LOG.info("%s ended the transaction an outage had left open", self._transactional_id)

    def _unavailable(self, batch: list[_Write], unavailable: _Unavailable, why: str) -> None:
        """The coordinator could not be reached in time: ``batch`` fails retriably, and the
        interrupted commit or abort is remembered, or, when the producer itself lost its
        brokers, the producer is replaced (whose ``init_transactions`` ends that transaction)."""
        if self._replaced_if_lost():
            self._fail_retriable(batch, f"{why}; {_REPLACED}")
            return
        self._pending(unavailable)
        self._fail_retriable(batch, why)

    def _replaced_if_lost(self) -> bool:
        """Replace the librdkafka producer if it cannot reach the cluster while a new client
        can (``lost_its_brokers``; librdkafka#5301: after a broker restart, a metadata
        response listing no broker makes librdkafka drop every broker it knew, for good);
        whether it was replaced. An outage every client sees is waited out as before. Not
        counted as a rebuild after a fatal error (``max_rebuilds``): it says nothing about this
        node's transactions."""
        if not lost_its_brokers(self._producer, self._configs, drop=TRANSACTIONAL_ID):
            return False
        _LOG.warning(
            "the metadata producer %s lost every broker of %s although a new client reaches "
            "them (librdkafka#5301, after a broker restart): replacing it",
            self._transactional_id,
            self._servers,
        )
        self._outage = True  # the replaced producer's transaction was interrupted
        self._replace_producer()
        with self._cond:
            self._replaced += 1
        return True

    def _replace_producer(self) -> None:
        """A new librdkafka producer with the same ``transactional.id`` (its
        ``init_transactions``, before the next transaction, fences the old one and ends its
        transaction); the old one is discarded on a thread of its own (with the coordinator
        gone, closing can block)."""
        old, self._producer = self._producer, new_client(Producer, self._configs, "producer")
        self._init_pending = True
        self._commit_pending = self._abort_pending = False
        with self._cond:
            self._rebuilt += 1
        threading.Thread(
            target=_discard, args=(old,), name="rlmm-txn-producer-discard", daemon=True
        ).start()

    def _pending(self, unavailable: _Unavailable) -> None:
        """Remember the commit or abort an outage interrupted (``_recover`` ends it)."""
        self._outage = True
        if unavailable.ending == "commit":
            self._commit_pending = True
        elif unavailable.ending == "abort":
            self._abort_pending = True

    def _rebuild_or_give_up(
        self, fatal: _Fatal, batch: list[_Write], *, fail_if_rebuilt: bool = True
    ) -> bool:
        """A fatal error: rebuild the producer (True; ``batch`` fails retriably unless
        ``fail_if_rebuilt`` is False), or give up (False; ``batch`` and every later write
        fail for good)."""
        if (fatal.fenced and not self._outage) or self._rebuilds >= self._max_rebuilds:
            reason = (
                fatal.failure
                if fatal.fenced and not self._outage
                else ProduceError(
                    f"{fatal.failure} (after {self._rebuilds} rebuild(s) of the producer "
                    "without a commit; the RLMM must be restarted)"
                )
            )
            self._go_fatal(reason, batch)
            return False
        _LOG.warning(
            "rebuilding the metadata producer %s after a fatal error: %s",
            self._transactional_id,
            fatal.failure,
        )
        self._replace_producer()
        self._rebuilds += 1
        if fail_if_rebuilt:
            self._fail_retriable(batch, f"the metadata producer was rebuilt: {fatal.failure}")
        return True

    def _fail_retriable(self, batch: Sequence[_Write], why: str) -> None:
        for write in batch:
            _fail(
                write,
                RetriableProduceError(
                    f"a metadata write could not be committed by {TRANSACTIONAL_ID} "
                    f"{self._transactional_id}: {why}"
                ),
            )

    def _produce_all(self, batch: list[_Write]) -> None:
        """Begin a transaction and produce every record of ``batch``. A write with a record
        librdkafka refuses at once is failed and removed from ``batch``; if records of the
        transaction were produced before it, the transaction is aborted (``_Abortable``)."""
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            raise self._classified(exc, "begin the transaction") from exc
        produced = 0
        for write in list(batch):
            write.results = [None] * len(write.records)
            try:
                for index, record in enumerate(write.records):
                    self._produce(record, write.results, index)
                    produced += 1
            except _RecordRefused as refused:
                batch.remove(write)
                _fail(write, refused.failure)
                if produced:  # records of this transaction would be committed without it
                    raise _Abortable(
                        None, f"a write grouped with others was refused: {refused.failure}"
                    ) from refused

    def _produce(self, record: OutRecord, results: list[_Result], index: int) -> None:
        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                results[index] = error
                return
            offset = message.offset()
            partition = message.partition()
            results[index] = (
                partition if partition is not None else record.partition,
                offset if offset is not None else -1,
            )

        deadline = self._monotonic() + _QUEUE_FULL_WAIT_S
        while True:
            try:
                self._producer.produce(
                    record.topic,
                    value=record.value,
                    key=record.key,
                    partition=record.partition,
                    on_delivery=delivered,
                )
                return
            except BufferError:
                if self._monotonic() > deadline:
                    raise _Abortable(
                        None, f"the producer queue stayed full for {_QUEUE_FULL_WAIT_S:.0f} s"
                    ) from None
                fatal = self._poll(0.05)
                if fatal is not None:
                    raise fatal from None
            except KafkaException as exc:
                error = _kafka_error(exc)
                if error is not None and not error.fatal() and not error.txn_requires_abort():
                    if _retriable(error):
                        raise _Abortable(error, _describe(error)) from exc
                    raise _RecordRefused(
                        produce_error(record.topic, record.partition, error)
                    ) from exc
                raise self._classified(exc, f"produce to {record.topic}") from exc

    def _commit(self) -> None:
        deadline = self._monotonic() + self._commit_timeout_s
        while True:
            try:
                self._producer.commit_transaction(_ATTEMPT_S)
                with self._cond:
                    self._transactions += 1
                return
            except KafkaException as exc:
                error = _kafka_error(exc)
                if (
                    error is not None
                    and not error.fatal()
                    and not error.txn_requires_abort()
                    and _retriable(error)
                ):
                    if self._monotonic() < deadline:
                        _LOG.info(
                            "retrying the commit of a metadata transaction of %s: %s",
                            self._transactional_id,
                            _describe(error),
                        )
                        continue
                    raise _Unavailable(
                        f"{TRANSACTIONAL_ID} {self._transactional_id} could not confirm the "
                        f"commit of its transaction within {self._commit_timeout_s:.0f} s on "
                        f"{self._servers} ({_describe(error)}): the write may be committed "
                        "all the same once the coordinator is back",
                        "commit",
                    ) from exc
                raise self._classified(exc, "commit the transaction") from exc

    def _abort(self) -> None:
        deadline = self._monotonic() + self._commit_timeout_s
        while True:
            try:
                self._producer.abort_transaction(_ATTEMPT_S)
                with self._cond:
                    self._aborts += 1
                return
            except KafkaException as exc:
                error = _kafka_error(exc)
                if error is not None and error.fatal():
                    raise self._fatal_of(error) from exc
                if error is not None and _retriable(error):
                    if self._monotonic() < deadline:
                        continue
                    raise _Unavailable(
                        f"{TRANSACTIONAL_ID} {self._transactional_id} could not abort its "
                        f"transaction within {self._commit_timeout_s:.0f} s on {self._servers} "
                        f"({_describe(error)}): it stays open until the abort completes",
                        "abort",
                    ) from exc
                raise _Fatal(
                    ProduceError(
                        f"{TRANSACTIONAL_ID} {self._transactional_id} cannot abort its "
                        f"transaction: {_describe(error, exc)}"
                    ),
                    fenced=False,
                ) from exc

    def _poll(self, timeout_s: float) -> _Fatal | None:
        """Serve librdkafka's callbacks; a fatal error (which confluent-kafka raises from
        ``poll`` when nothing else reported it) is returned, anything else logged."""
        try:
            self._producer.poll(timeout_s)
        except KafkaException as exc:
            classified = self._classified(exc, "serve the producer's events")
            if isinstance(classified, _Fatal):
                return classified
            _LOG.warning("%s: %s", self._transactional_id, classified)
        return None

    def _classified(self, exc: KafkaException, doing: str) -> Exception:
        error = _kafka_error(exc)
        if error is not None and error.fatal():
            return self._fatal_of(error)
        return _Abortable(error, f"cannot {doing}: {_describe(error, exc)}")

    def _fatal_of(self, error: KafkaError) -> _Fatal:
        fenced = error.code() in _FENCED_CODES or "fenced" in error.str().lower()
        if fenced:
            what = (
                f"the metadata producer {TRANSACTIONAL_ID} {self._transactional_id} was fenced: "
                "another producer with the same transactional.id started (another instance "
                "of this node, node.id, on the same cluster); this one cannot write any more "
                f"({_describe(error)})"
            )
        else:
            what = (
                f"the metadata producer {TRANSACTIONAL_ID} {self._transactional_id} failed "
                f"fatally and cannot write any more ({_describe(error)})"
            )
        return _Fatal(ProduceError(what), fenced=fenced)

    def _drop_refused(self, batch: list[_Write]) -> list[_Write]:
        """After an abort: fail the writes whose own record was refused for good (a delivery
        error that is neither retriable nor caused by the transaction); keep the others."""
        kept: list[_Write] = []
        for write in batch:
            refused = next(
                (
                    (record, result)
                    for record, result in zip(write.records, write.results, strict=False)
                    if isinstance(result, KafkaError)
                    and result.code() not in _PURGED_CODES
                    and not result.fatal()
                    and not result.txn_requires_abort()
                    and not _retriable(result)
                ),
                None,
            )
            if refused is None:
                kept.append(write)
            else:
                record, error = refused
                assert isinstance(error, KafkaError)
                _fail(write, produce_error(record.topic, record.partition, error))
        return kept

    def _complete(self, batch: list[_Write]) -> None:
        """Complete the writes of a committed transaction with their primary record's
        position; a delivery report the commit's flush left in librdkafka's queue is served
        first."""
        deadline = self._monotonic() + _ATTEMPT_S
        while (
            any(write.results[write.primary] is None for write in batch)
            and self._monotonic() < deadline
            and self._poll(0.05) is None  # a fatal error: the next transaction handles it
        ):
            pass
        for write in batch:
            result = write.results[write.primary]
            if isinstance(result, tuple) and result[1] >= 0:
                if not write.future.done():
                    write.future.set_result(result)
            else:
                record = write.records[write.primary]
                _fail(
                    write,
                    ProduceError(
                        f"{record.topic} partition {record.partition}: the transaction "
                        f"committed but no offset was reported ({result})"
                    ),
                )

    def _go_fatal(self, failure: ProduceError, batch: list[_Write]) -> None:
        _LOG.error("%s", failure)
        with self._cond:
            self._fatal = str(failure)
            queued, self._queue = self._queue, []
        for write in [*batch, *queued]:
            _fail(write, ProduceError(str(failure)))

    def __repr__(self) -> str:
        return f"TransactionalMetadataProducer(transactional_id={self._transactional_id!r})"


class _RecordRefused(Exception):
    """librdkafka refused one record for good at ``produce``: its write fails alone."""

    def __init__(self, failure: ProduceError) -> None:
        super().__init__(str(failure))
        self.failure = failure


def _close_unusable(producer: Producer) -> None:
    """Close a producer whose transactions failed for good (fenced, never initialized):
    confluent-kafka's ``close`` then tries to abort and warns (``RuntimeWarning``) that it
    cannot, which says nothing the RLMM has not already reported."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        close_client(producer)


def _discard(producer: Producer) -> None:
    """Drop a producer replaced after a fatal error: its queued records are purged (they
    belong to a transaction that is never committed), then it is closed."""
    try:
        producer.purge(in_queue=True, in_flight=True, blocking=False)
    except (KafkaException, RuntimeError) as exc:
        _LOG.debug("purging a discarded producer: %s", exc)
    _close_unusable(producer)


def _fail(write: _Write, error: BaseException) -> None:
    if not write.future.done():
        write.future.set_exception(error)
