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
  times; then their futures fail with a retriable ``ProduceError``. A write whose own record
  is refused for good (too large, not authorized; at ``produce`` or in its delivery report)
  fails alone with that error and the others are retried without it, so one bad record never
  holds up the writes it was grouped with.
- *retriable* commit or abort errors (timeouts): the commit (or abort) is called again until
  ``commit_timeout_s``.
- *fatal* (the producer is fenced: another producer started with the same
  ``transactional.id``, that is another instance of this node; or any fatal librdkafka
  error): every pending write fails with a non-retriable ``ProduceError`` that says so, and
  every later ``send`` raises it. Only a new producer (a restart of the RLMM) can write again.

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
from tierlog_rlmm_topic.producer import ProduceError, RetriableProduceError, produce_error

from tierlog.spi import IllegalStateError, InvalidArgumentError

__all__ = ["OutRecord", "TransactionalMetadataProducer"]

_LOG = logging.getLogger(__name__)

TRANSACTIONAL_ID: Final = "transactional.id"

_IDLE_WAIT_S: Final = 0.5
"""How long the idle writer waits for a write before it serves librdkafka's log lines."""
_ATTEMPT_S: Final = 10.0
"""Longest single ``init_transactions``/``commit_transaction``/``abort_transaction`` call."""
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
    """The producer cannot write any more (fenced, or a fatal librdkafka error)."""

    def __init__(self, failure: ProduceError) -> None:
        super().__init__(str(failure))
        self.failure = failure


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
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        transactional_id = str(configs.get(TRANSACTIONAL_ID, "")).strip()
        if not transactional_id:
            raise InvalidArgumentError(
                f"the transactional metadata producer needs {TRANSACTIONAL_ID} in its "
                "configuration (CompactedRlmmConfig.producer sets one per node)"
            )
        if max_attempts < 1 or max_batch_records < 1:
            raise InvalidArgumentError(
                f"max_attempts ({max_attempts}) and max_batch_records ({max_batch_records}) "
                "must be at least 1"
            )
        self._transactional_id = transactional_id
        self._servers = str(configs.get("bootstrap.servers", "?"))
        self._commit_timeout_s = commit_timeout_s
        self._max_attempts = max_attempts
        self._max_batch_records = max_batch_records
        self._monotonic = monotonic
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
                self._producer.poll(0)  # serves librdkafka's log lines
                if batch:
                    self._current = batch
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
        attempts = 0
        last = ""
        while batch:
            if attempts >= self._max_attempts:
                for write in batch:
                    _fail(
                        write,
                        RetriableProduceError(
                            f"a metadata write could not be committed by {TRANSACTIONAL_ID} "
                            f"{self._transactional_id} in {attempts} transaction(s), each "
                            f"aborted; last error: {last}"
                        ),
                    )
                return
            attempts += 1
            try:
                self._produce_all(batch)
                if not batch:  # every write refused at once: nothing to commit
                    self._abort()
                    return
                self._commit()
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
                    self._go_fatal(fatal.failure, batch)
                    return
                batch = self._drop_refused(batch)
                continue
            except _Fatal as fatal:
                self._go_fatal(fatal.failure, batch)
                return
            self._complete(batch)
            return

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
                self._producer.poll(0.05)
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
                    and self._monotonic() < deadline
                ):
                    _LOG.info(
                        "retrying the commit of a metadata transaction of %s: %s",
                        self._transactional_id,
                        _describe(error),
                    )
                    continue
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
                if error is not None and _retriable(error) and self._monotonic() < deadline:
                    continue
                raise _Fatal(
                    ProduceError(
                        f"{TRANSACTIONAL_ID} {self._transactional_id} cannot abort its "
                        f"transaction: {_describe(error, exc)}; the producer is unusable and "
                        "the RLMM must be restarted"
                    )
                ) from exc

    def _classified(self, exc: KafkaException, doing: str) -> Exception:
        error = _kafka_error(exc)
        if error is not None and error.fatal():
            return self._fatal_of(error)
        return _Abortable(error, f"cannot {doing}: {_describe(error, exc)}")

    def _fatal_of(self, error: KafkaError) -> _Fatal:
        if error.code() in _FENCED_CODES or "fenced" in error.str().lower():
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
        return _Fatal(ProduceError(what))

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
        ):
            self._producer.poll(0.05)
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


def _fail(write: _Write, error: BaseException) -> None:
    if not write.future.done():
        write.future.set_exception(error)
