"""The metadata topic's producer (Kafka's ``ProducerManager``).

Records are written as Kafka's TBRLMM writes them: a null key, the value from
``serde.serialize``, no headers, and an explicit partition, the one Kafka's
``RemoteLogMetadataTopicPartitioner`` computes (``tierlog.metadata.metadata_partition``), so a
Kafka broker and tierlog read each other's events. The producer is idempotent with
``acks=all`` (forced by the configuration): librdkafka retries a send through a broker restart
or a leader change without writing it twice, and keeps the order of the records of a
partition.

``send`` returns a ``Future`` of ``(partition, offset)``, completed by librdkafka's delivery
report. Delivery reports are served by a small thread calling ``poll``, so a caller never has
to, and ``close`` flushes what is in flight before it stops.

A producer that lost its brokers for good (librdkafka#5301: after a broker restart, a metadata
response listing no broker makes librdkafka drop every broker it knew) would hold its records
until the delivery timeout and every later one after it, forever. So when records are
outstanding and no delivery report came for ``lost_check_after_s`` (30 s), the poll thread asks
the producer for metadata; if it cannot answer while a new client can, it is replaced by a new
one: the records it held fail with a retriable ``RetriableProduceError`` naming the issue (the
RLM writes them again), and later sends go to the new producer. A broker down for every client
is waited out as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Final

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from tierlog.spi import (
    IllegalStateError,
    RemoteStorageException,
    RetriableRemoteStorageException,
)
from tierlog_rlmm_topic.client_factory import (
    close_aside,
    close_client,
    new_client,
    own_client_patience_s,
)

__all__ = [
    "LOST_BROKERS",
    "MetadataProducer",
    "ProduceError",
    "RetriableProduceError",
    "lost_its_brokers",
    "produce_error",
]

_LOG = logging.getLogger(__name__)

_POLL_S: Final = 0.05
"""How long the delivery-report thread blocks in one ``poll``: also how long ``close`` waits
for it."""
_QUEUE_FULL_WAIT_S: Final = 30.0
"""How long ``send`` waits for room in librdkafka's queue before it gives up (retriable)."""
LOST_CHECK_AFTER_S: Final = 30.0
"""How long records may be outstanding with no delivery report before the producer is checked
for lost brokers."""
_LOST_CHECK_EVERY_S: Final = 5.0
_CONNECT_S: Final = 5.0
LOST_BROKERS: Final = (
    "the producer had lost every broker connection (librdkafka#5301) and was replaced by a new one"
)
"""What a write failed by such a replacement says (both Kafka-topic RLMMs)."""
_PURGED: Final = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})


class ProduceError(RemoteStorageException):
    """A metadata record could not be written; the message names the topic, partition and
    librdkafka's error. ``retriable`` errors come as ``RetriableProduceError``."""


class RetriableProduceError(ProduceError, RetriableRemoteStorageException):
    """A transient failure (timeout, broker unavailable): the same call may succeed later. The
    record may have been written anyway (librdkafka cannot tell after a timeout); writing it
    again is harmless, the metadata cache accepts a repeated event."""


def produce_error(topic: str, partition: int, error: KafkaError) -> ProduceError:
    """librdkafka's ``error`` writing to ``topic``/``partition`` as the exception a write's
    future fails with: ``RetriableProduceError`` when waiting may help (timeouts, brokers
    unreachable, errors librdkafka marks retriable), ``ProduceError`` otherwise; a fatal error
    says so. Shared with the compacted RLMM's transactional producer."""
    message = (
        f"cannot write to the remote log metadata topic {topic} partition {partition}: "
        f"{error.name()}: {error.str()}"
    )
    if error.fatal():
        return ProduceError(message + " (fatal producer error)")
    if error.retriable() or error.code() in (
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
    ):
        return RetriableProduceError(message)
    return ProduceError(message)


def lost_its_brokers(producer: Producer, configs: Mapping[str, str], drop: str = "") -> bool:
    """Whether ``producer`` lost its brokers for good (librdkafka#5301): a new client made from
    ``configs`` (without the key ``drop``) reaches a broker, and ``producer`` cannot answer a
    metadata request within ``own_client_patience_s``."""
    try:
        probe = new_client(Producer, {k: v for k, v in configs.items() if k != drop}, "producer")
    except Exception as exc:  # cannot tell: waited out as an outage
        _LOG.debug("cannot create a probe client: %s", exc)
        return False
    try:
        reached = bool(probe.list_topics(timeout=_CONNECT_S).brokers)
    except KafkaException:
        reached = False  # an outage every client sees
    finally:
        close_client(probe)
    if not reached:
        return False
    try:
        producer.list_topics(timeout=own_client_patience_s(configs))
        return False
    except KafkaException:
        return True


class MetadataProducer:
    """An idempotent producer of metadata records to one topic."""

    def __init__(
        self,
        topic: str,
        configs: Mapping[str, str],
        *,
        lost_check_after_s: float = LOST_CHECK_AFTER_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._topic = topic
        self._configs = dict(configs)
        self._producer: Producer = new_client(Producer, configs, "producer")
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._fatal: ProduceError | None = None
        self._lost_check_after_s = lost_check_after_s
        self._monotonic = monotonic
        self._last_report = monotonic()
        self._next_check = 0.0
        self._replaced = 0
        self._poller = threading.Thread(
            target=self._poll_loop, name=f"rlmm-producer-{topic}", daemon=True
        )
        self._poller.start()

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def replaced(self) -> int:
        """librdkafka producers replaced because they had lost every broker."""
        with self._lock:
            return self._replaced

    def send(self, partition: int, value: bytes) -> Future[tuple[int, int]]:
        """Produce ``value`` with a null key to ``partition``; the future gives the record's
        ``(partition, offset)`` once the cluster acknowledged it (``acks=all``), or fails with
        a ``ProduceError``."""
        future: Future[tuple[int, int]] = Future()
        future.set_running_or_notify_cancel()

        def delivered(error: KafkaError | None, message: Message) -> None:
            self._last_report = self._monotonic()
            if error is not None and error.code() in _PURGED:  # only a replacement purges
                future.set_exception(
                    RetriableProduceError(
                        f"cannot write to the remote log metadata topic {self._topic} "
                        f"partition {partition}: {LOST_BROKERS}"
                    )
                )
                return
            if error is not None:
                exc = produce_error(self._topic, partition, error)
                if error.fatal():
                    self._fatal = exc
                    _LOG.error("%s", exc)
                future.set_exception(exc)
                return
            offset = message.offset()
            if offset is None or offset < 0:
                future.set_exception(
                    ProduceError(f"{self._topic} partition {partition}: no offset was reported")
                )
                return
            future.set_result((partition, offset))

        deadline = time.monotonic() + _QUEUE_FULL_WAIT_S
        while True:
            with self._lock:
                if self._closed.is_set():
                    raise IllegalStateError("the RLMM's metadata producer is closed")
                if self._fatal is not None:
                    raise self._fatal
                try:
                    self._producer.produce(
                        self._topic,
                        value=value,
                        key=None,
                        partition=partition,
                        on_delivery=delivered,
                    )
                    return future
                except BufferError:
                    pass  # librdkafka's queue is full: let the poll thread drain it
                except KafkaException as exc:
                    error = exc.args[0] if exc.args else None
                    if isinstance(error, KafkaError):
                        raise produce_error(self._topic, partition, error) from exc
                    raise ProduceError(f"cannot write to {self._topic}: {exc}") from exc
            if time.monotonic() > deadline:
                raise RetriableProduceError(
                    f"the producer queue of {self._topic} stayed full for {_QUEUE_FULL_WAIT_S}s"
                )
            time.sleep(0.01)

    def _poll_loop(self) -> None:
        while not self._closed.is_set():
            try:
                self._producer.poll(_POLL_S)
                self._watch()
            except Exception:  # a delivery callback must never stop the loop
                _LOG.exception("error while serving the metadata producer's delivery reports")

    def _watch(self) -> None:
        """Replace the producer if it holds records, got no delivery report for
        ``lost_check_after_s`` and lost its brokers (see the module docstring)."""
        now = self._monotonic()
        if now < self._next_check:
            return
        self._next_check = now + min(_LOST_CHECK_EVERY_S, self._lost_check_after_s / 2)
        producer = self._producer
        if len(producer) == 0:
            self._last_report = now
            return
        if now - self._last_report < self._lost_check_after_s:
            return
        if not lost_its_brokers(producer, self._configs):
            return
        _LOG.warning(
            "the metadata producer of %s holds %d record(s), got no delivery report for %.0f s "
            "and lost every broker although a new client reaches them (librdkafka#5301): "
            "replacing it",
            self._topic,
            len(producer),
            now - self._last_report,
        )
        with self._lock:
            if self._closed.is_set():
                return
            self._producer = new_client(Producer, self._configs, "producer")
            self._replaced += 1
        self._last_report = now
        try:  # its records fail (retriably, naming the issue) through their delivery reports
            producer.purge(in_queue=True, in_flight=True, blocking=False)
            producer.poll(0)
        except (KafkaException, RuntimeError) as exc:
            _LOG.debug("purging a replaced producer: %s", exc)
        close_aside(producer)

    def close(self, timeout: float = 30.0) -> None:
        """Flush what is in flight (up to ``timeout`` seconds), then stop; idempotent."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
        self._poller.join()
        remaining = self._producer.flush(timeout)
        if remaining:
            _LOG.warning(
                "%d metadata record(s) were still in flight to %s when the producer closed",
                remaining,
                self._topic,
            )
        close_client(self._producer)

    def __repr__(self) -> str:
        return f"MetadataProducer(topic={self._topic!r})"
