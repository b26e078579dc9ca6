"""What the interoperability tests produce to the broker: one mix that exercises the format.

The five codecs (several batches each), null keys, null and empty values, headers (none, one,
several, empty values, non-ASCII keys), non-ASCII and invalid UTF-8 payloads, timestamps out of
order inside a batch, idempotent and plain producers, and a transactional producer that commits,
aborts (after its records were written, so the abort is indexed), commits again, and commits a
transaction during which a 16 KiB segment rolls.
"""

from __future__ import annotations

import os
import time
from typing import Any

from kafka import KafkaProducer
from services._common import Service

CODECS = (None, "gzip", "snappy", "lz4", "zstd")

VALUES: tuple[bytes | None, ...] = (
    b"plain ascii value",
    b"",
    None,
    "non-ASCII: é € 😀 ключ".encode(),
    b"\xff\xfe invalid \xe2\x82 utf-8 \xc3",
    b"x" * 3000,
    b"tab\tand spaces  ",
    bytes(range(32, 127)),
)
KEYS: tuple[bytes | None, ...] = (None, b"k", b"key-with-dash", "ключ".encode(), b"")
HEADERS: tuple[list[tuple[str, bytes]], ...] = (
    [],
    [("h", b"x")],
    [("trace-id", b"abc"), ("empty", b""), ("ключ", b"\x00\x01")],
)


def record_args(i: int, now_ms: int) -> dict[str, Any]:
    """The i-th record: key, value, headers and a timestamp (every 5th one older than the
    previous ones, so a batch's max timestamp is not its last record's)."""
    key = KEYS[i % len(KEYS)]
    value = VALUES[i % len(VALUES)]
    if key is None and value is None:  # kafka-python refuses a record with neither
        key = b"k"
    timestamp = now_ms - 60_000 if i % 5 == 4 else now_ms - 10_000 + i
    return {
        "key": key,
        "value": value,
        "headers": HEADERS[i % len(HEADERS)],
        "timestamp_ms": timestamp,
    }


def produce_mix(broker: Service, topic: str) -> None:
    """Every codec (several batches each), a non-idempotent producer and a transactional one
    that commits, aborts (after its records were written) and commits again."""
    now_ms = int(time.time() * 1000)
    n = 0
    for codec in CODECS:
        producer = KafkaProducer(
            bootstrap_servers=broker.url, compression_type=codec, linger_ms=5, batch_size=3000
        )
        for _ in range(40):
            producer.send(topic, **record_args(n, now_ms))
            n += 1
        producer.flush()
        producer.close()
    plain = KafkaProducer(bootstrap_servers=broker.url, enable_idempotence=False, acks=1)
    for _ in range(10):
        plain.send(topic, **record_args(n, now_ms))
        n += 1
    plain.flush()
    plain.close()

    txn = KafkaProducer(
        bootstrap_servers=broker.url,
        transactional_id=f"{topic}-txn",
        compression_type="lz4",
        linger_ms=5,
    )
    txn.init_transactions()
    for commit in (True, False, True):
        txn.begin_transaction()
        for _ in range(12):
            txn.send(topic, **record_args(n, now_ms))
            n += 1
        txn.flush()  # the aborted records are in the log, so the abort indexes them
        if commit:
            txn.commit_transaction()
        else:
            txn.abort_transaction()
    # A transaction larger than a 16 KiB segment, one batch per record: a segment rolls while
    # it is open, so the producer snapshot taken at the roll holds its first offset.
    txn.begin_transaction()
    for _ in range(8):
        txn.send(topic, key=b"big", value=os.urandom(1500).hex().encode()).get(timeout=60)
    txn.commit_transaction()
    txn.close()

    tail = KafkaProducer(bootstrap_servers=broker.url, linger_ms=0)
    for _ in range(30):
        tail.send(topic, **record_args(n, now_ms)).get(timeout=60)  # one batch per record
        n += 1
    tail.close()
