"""The compaction workload of the cleaner oracle: what is produced to a compacted topic.

Everything a cleaner decides on is here, in three phases (one per cleaning round of the oracle):

- keys with many versions, among them the empty key ``b""`` (a key, unlike a null one) and
  non-ASCII and binary keys; no record without a key (a compacted topic refuses them);
- values of several sizes (empty, small, a few hundred bytes, a few KiB), half random so that
  codecs cannot shrink them away and segments roll, and tombstones (``None``): some superseded
  later, some the last word on their key;
- headers (none, one, several with an empty value and a non-ASCII key) and explicit timestamps,
  some older than the records before them;
- the five codecs, one idempotent producer each (kafka-python producers are idempotent by
  default, so each leaves a producer id whose last batch a cleaner must keep), and a
  non-idempotent producer (batches without a producer id);
- a transactional producer whose keys overlap the others': in phase 1 it commits, aborts (after
  its records were written, so the abort is indexed) and commits again; in phase 2 it commits and
  aborts, so that its last batch is an abort marker.

The records are a function of the phase and the topic's base time only (values come from a seeded
generator), so every run offers the cleaners the same records; how the producers batch them
depends on timing, which does not matter: both cleaners read the same copy of the log.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

from kafka import KafkaProducer
from services._common import Service

from ._broker import active_segment_base, partition_dir

CODECS: tuple[str | None, ...] = (None, "gzip", "snappy", "lz4", "zstd")

KEYS: tuple[bytes, ...] = (
    b"",
    "ключ".encode(),
    "キー/é".encode(),
    b"\x00\xff\x01 binary",
    *(f"key-{i:02d}".encode() for i in range(56)),
)
"""60 keys; the first four are the unusual ones (empty, non-ASCII, not UTF-8)."""

HEADERS: tuple[list[tuple[str, bytes]], ...] = (
    [],
    [("h", b"x")],
    [("trace-id", b"abc"), ("empty", b""), ("ключ", b"\x00\x01")],
)

VALUE_SIZES = (0, 16, 240, 1400, 3000)
"""Value sizes in bytes (0 is an empty value, which is not a tombstone)."""

ROLL_KEY = b"roll"
ROLL_BYTES = 16_300
"""The key and value size of the record that rolls a segment (``roll_segment``). Uncompressed,
alone in its batch, it makes a 16,376-byte batch: at most the topic's 16 KiB segment (Kafka
refuses a larger batch with RECORD_LIST_TOO_LARGE) and more than the segment less any batch, so
Kafka appends it to a new segment unless the active one is empty."""


@dataclass(frozen=True)
class Sent:
    """One record as produced: the arguments of ``KafkaProducer.send``."""

    key: bytes
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp_ms: int


def _value(rng: random.Random, i: int) -> bytes:
    """Half random hex text, half one short random word repeated: every codec shrinks it (a
    producer sends a batch uncompressed when its codec does not), none shrinks it away."""
    size = VALUE_SIZES[i % len(VALUE_SIZES)]
    word = rng.randbytes(4).hex()
    return (rng.randbytes(size // 4).hex() + word * (size // 16 + 1))[:size].encode()


def records(
    phase: int, stream: str, count: int, base_ms: int, *, stride: int = 7
) -> Iterator[Sent]:
    """``count`` records of one producer (``stream`` names it) in ``phase``.

    Keys walk the key list with ``stride`` (so every key gets several versions from several
    producers); every 6th record is a tombstone; every 5th has a timestamp two minutes older than
    its neighbours (out of order within a batch).
    """
    rng = random.Random(f"{phase}/{stream}")
    offset = sum(map(ord, stream)) % len(KEYS)
    for i in range(count):
        key = KEYS[(offset + i * stride) % len(KEYS)]
        value = None if i % 6 == 5 else _value(rng, i)
        timestamp = base_ms - 120_000 - i if i % 5 == 4 else base_ms + i
        yield Sent(key, value, HEADERS[i % len(HEADERS)], timestamp)


def _send_all(producer: KafkaProducer, topic: str, sent: Iterator[Sent], *, wait: bool) -> None:
    for record in sent:
        future = producer.send(
            topic,
            key=record.key,
            value=record.value,
            headers=record.headers,
            timestamp_ms=record.timestamp_ms,
        )
        if wait:
            future.get(timeout=60)  # one batch per record
    producer.flush()


def _transactional(broker: Service, topic: str, codec: str | None) -> KafkaProducer:
    producer = KafkaProducer(
        bootstrap_servers=broker.url,
        transactional_id=f"{topic}-txn",
        compression_type=codec,
        linger_ms=5,
    )
    producer.init_transactions()
    return producer


def _transactions(
    broker: Service, topic: str, phase: int, base_ms: int, outcomes: tuple[bool, ...]
) -> None:
    """One transaction per outcome (True commits), 12 records each. An aborted transaction's
    records are flushed before the abort: they are in the log, so the abort is indexed."""
    producer = _transactional(broker, topic, "lz4")
    try:
        for number, commit in enumerate(outcomes):
            producer.begin_transaction()
            stream = f"txn-{number}-{'commit' if commit else 'abort'}"
            _send_all(producer, topic, records(phase, stream, 12, base_ms, stride=5), wait=False)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close()


def _idempotent(broker: Service, codec: str | None) -> KafkaProducer:
    return KafkaProducer(
        bootstrap_servers=broker.url, compression_type=codec, linger_ms=5, batch_size=4000
    )


def _plain(broker: Service, codec: str | None) -> KafkaProducer:
    return KafkaProducer(
        bootstrap_servers=broker.url,
        enable_idempotence=False,
        acks=1,
        compression_type=codec,
        linger_ms=5,
        batch_size=4000,
    )


def roll_segment(
    broker: Service, topic: str, phase: int, producer: KafkaProducer | None = None
) -> None:
    """Roll the active segment with one big record (``ROLL_BYTES``), sent by ``producer`` (by
    default a plain one). It is acknowledged once appended, so the old segment is sealed when
    this returns; the next append rolls again, so the big record's segment holds only it."""
    directory = partition_dir(broker, topic)
    before = active_segment_base(directory)
    sender = producer or _plain(broker, None)
    try:
        value = random.Random(f"roll/{phase}").randbytes(ROLL_BYTES // 2).hex().encode()
        sender.send(topic, key=ROLL_KEY, value=value).get(timeout=60)
    finally:
        if producer is None:
            sender.close()
    assert active_segment_base(directory) > before, f"{topic}'s segment {before} did not roll"


def produce_phase(broker: Service, topic: str, phase: int, base_ms: int | None = None) -> None:
    """Produce phase 1, 2 or 3 of the workload to ``topic`` (partition 0), rolling the active
    segment (``roll_segment``) so that a cleaner may clean what the phase produced: at its end
    in phases 1 and 2; in phase 3 with the last record of a transaction that is then aborted
    and followed by a committed one. The batch just before the active segment is then aborted
    data of a producer that wrote more later, which Kafka 4.3.1 keeps as an empty batch only
    because it ends at the first uncleanable offset. ``base_ms`` (default: five minutes ago)
    anchors the timestamps."""
    base = int(time.time() * 1000) - 300_000 if base_ms is None else base_ms
    if phase == 1:
        for codec in CODECS:
            producer = _idempotent(broker, codec)
            _send_all(producer, topic, records(1, f"codec-{codec}", 70, base), wait=False)
            producer.close()
        plain = _plain(broker, None)
        _send_all(plain, topic, records(1, "plain", 30, base, stride=3), wait=False)
        plain.close()
        _transactions(broker, topic, 1, base, (True, False, True))
        tail = _idempotent(broker, None)
        _send_all(tail, topic, records(1, "tail", 15, base, stride=11), wait=True)
        tail.close()
        roll_segment(broker, topic, phase)
    elif phase == 2:
        newer = _idempotent(broker, "zstd")
        _send_all(newer, topic, records(2, "newer", 40, base, stride=5), wait=False)
        newer.close()
        plain = _plain(broker, "gzip")
        _send_all(plain, topic, records(2, "plain", 12, base, stride=7), wait=False)
        plain.close()
        _transactions(broker, topic, 2, base, (True, False))
        roll_segment(broker, topic, phase)
    elif phase == 3:
        last = _idempotent(broker, "snappy")
        _send_all(last, topic, records(3, "last", 18, base, stride=13), wait=True)
        last.close()
        txn = _transactional(broker, topic, None)
        try:
            txn.begin_transaction()
            _send_all(txn, topic, records(3, "txn-open", 4, base, stride=17), wait=True)
            roll_segment(broker, topic, phase, txn)
            txn.abort_transaction()
            txn.begin_transaction()
            _send_all(txn, topic, records(3, "txn-after", 3, base, stride=19), wait=True)
            txn.commit_transaction()
        finally:
            txn.close()
    else:
        raise ValueError(f"the workload has phases 1, 2 and 3, not {phase}")
