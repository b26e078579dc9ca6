"""Talking to the test broker with kafka-python: topics, producers, offsets, waiting."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import NewTopic, OffsetSpec
from kafka.errors import KafkaError
from services._common import Service

DEADLINE_S = 120.0
"""How long a condition that depends on the broker's background work may take (2 busy cores)."""

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T | None],
    what: str,
    *,
    timeout: float = DEADLINE_S,
    interval: float = 0.5,
) -> T:
    """Poll ``condition`` until it returns something truthy; fail naming ``what`` after
    ``timeout`` seconds, with the last value seen. A client error from the broker (one that is
    restarting, a leader being elected) counts as not yet."""
    deadline = time.monotonic() + timeout
    last: T | BaseException | None = None
    while True:
        try:
            value = condition()
        except KafkaError as exc:
            last = exc
        else:
            if value:
                return value
            last = value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} ({last!r})")
        time.sleep(interval)


def built_once(
    tmp_path_factory: Any, name: str, build: Callable[[Path], dict[str, Any]]
) -> tuple[Path, dict[str, Any]]:
    """``build(directory)`` once per test run, shared by the pytest-xdist workers.

    The first worker to get here builds under a lock into a directory of the run's base
    temporary directory (the workers' common parent) and saves what ``build`` returns; the
    others wait for it and reuse the files. Only files can be shared this way: each worker has
    a broker of its own.
    """
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    directory, done = root / name, root / f"{name}.json"
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            facts = build(directory)
            done.write_text(json.dumps(facts))
    return directory, json.loads(done.read_text())


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@contextmanager
def admin_client(broker: Service) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=broker.url, request_timeout_ms=60_000)
    try:
        yield admin
    finally:
        admin.close()


def create_topic(broker: Service, name: str, configs: Mapping[str, str]) -> str:
    """Create a one-partition topic and return its topic id in Kafka's base64 form."""
    with admin_client(broker) as admin:
        admin.create_topics([NewTopic(name, 1, 1, topic_configs=dict(configs))])
        topic_id = wait_for(
            lambda: _topic_id(admin, name), f"topic {name} to be described with its id"
        )
    return kafka_uuid(topic_id)


def _topic_id(admin: KafkaAdminClient, name: str) -> str | None:
    (described,) = admin.describe_topics([name])
    if described["error_code"] != 0 or not described["partitions"]:
        return None
    if described["partitions"][0]["leader_id"] < 0:
        return None
    return str(described["topic_id"])


def kafka_uuid(text: str) -> str:
    """A UUID (``6a909c29-c1ad-...``) in Kafka's text form (base64url, no padding)."""
    return base64.urlsafe_b64encode(uuid.UUID(text).bytes).decode().rstrip("=")


def list_offset(broker: Service, topic: str, spec: OffsetSpec, partition: int = 0) -> int:
    with admin_client(broker) as admin:
        tp = TopicPartition(topic, partition)
        return int(admin.list_partition_offsets({tp: spec})[tp].offset)


def partition_dir(broker: Service, topic: str, partition: int = 0) -> Path:
    return broker.directory / "data" / f"{topic}-{partition}"


def remote_partition_dir(broker: Service, topic: str, topic_id: str, partition: int = 0) -> Path:
    """Where Kafka's LocalTieredStorage keeps the partition's remote segments."""
    root = Path(str(broker.extra["tiered_storage"]))
    return root / "kafka-tiered-storage" / f"{topic}-{partition}-{topic_id}"


def active_segment_base(directory: Path) -> int:
    """The base offset of the partition's active (last) segment, from the file names."""
    return max(int(p.name[:20]) for p in directory.glob("*.log"))
