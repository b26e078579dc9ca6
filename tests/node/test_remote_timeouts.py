"""``remote.fetch.max.wait.ms`` and ``remote.list.offsets.request.timeout.ms`` on a node whose
remote storage is made slow on demand: its segment reads block on an event until the test
releases them, so every expiry here is certain, whatever the machine's load (no sleep decides
an outcome)."""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tierlog.cli import main
from tierlog.node import Node, NodeConfig
from tierlog.node.client import TierlogClient
from tierlog.node.http_api import HttpApi
from tierlog.node.node import RequestTimedOutError
from tierlog.spi import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteStorageManager,
    RetriableRemoteStorageException,
)
from tierlog.storage.local import LocalTieredStorage

TIERED = {
    "remote.storage.enable": "true",
    "internal.segment.bytes": "2048",
    "local.retention.bytes": "1",
}
RECORDS = 200
FETCH_EXPIRED = "kafka_server_delayedremotefetchmetrics_expires_total"
LIST_OFFSETS_EXPIRED = "kafka_server_delayedremotelistoffsetsmetrics_expires_total"
REMOTE_FETCH_REQUESTS = "kafka_server_brokertopicmetrics_remotefetchrequests_total"


class BlockingStorage(RemoteStorageManager):
    """Wraps an RSM; while ``blocking`` is set, each ``fetch_log_segment`` announces itself
    (``entered``) and waits for ``release`` before reading."""

    def __init__(self, inner: RemoteStorageManager) -> None:
        self.inner = inner
        self.blocking = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()

    def configure(self, configs: Any) -> None:
        self.inner.configure(configs)

    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        log_segment_data: LogSegmentData,
    ) -> Any:
        return self.inner.copy_log_segment_data(remote_log_segment_metadata, log_segment_data)

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        if self.blocking.is_set():
            self.entered.set()
            assert self.release.wait(120), "the test never released the read"
        return self.inner.fetch_log_segment(
            remote_log_segment_metadata, start_position, end_position
        )

    def fetch_index(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata, index_type: IndexType
    ) -> BinaryIO:
        return self.inner.fetch_index(remote_log_segment_metadata, index_type)

    def delete_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata
    ) -> None:
        self.inner.delete_log_segment_data(remote_log_segment_metadata)

    def close(self) -> None:
        self.release.set()
        self.inner.close()


@pytest.fixture
def rsm(tmp_path: Path) -> Iterator[BlockingStorage]:
    inner = LocalTieredStorage()
    inner.configure({"dir": str(tmp_path / "remote")})
    storage = BlockingStorage(inner)
    yield storage
    storage.close()


NodeFactory = Callable[..., Node]


@pytest.fixture
def make_node(tmp_path: Path, rsm: BlockingStorage) -> Iterator[NodeFactory]:
    """A started node on ``rsm`` with a tiered topic ``t`` of ``RECORDS`` records, tiered and
    cut locally (offset 0 is only in remote storage); ``**props`` are more node keys."""
    nodes: list[Node] = []

    def make(**props: str) -> Node:
        config = NodeConfig.from_props(
            {
                "log.dirs": str(tmp_path / "logs"),
                "remote.log.storage.system.enable": "true",
                "remote.log.manager.task.interval.ms": "3600000",
                "log.retention.check.interval.ms": "3600000",
                **props,
            }
        )
        node = Node(config, rsm=rsm).start()
        nodes.append(node)
        node.create_topic("t", 1, TIERED)
        for base in range(0, RECORDS, 10):
            node.produce(
                "t",
                [(f"k{i}".encode(), f"value-{i:04d}".encode() * 4) for i in range(base, base + 10)],
                partition=0,
            )
        node.tier_now("t")
        assert node.log("t", 0).local_log_start_offset > 0
        return node

    yield make
    rsm.release.set()
    for node in nodes:
        node.close()


def scrape(node: Node) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(node.metrics.expose().decode()):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def metric(node: Node, name: str, **labels: str) -> float:
    return scrape(node)[(name, frozenset(labels.items()))]


def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


# Fetch -------------------------------------------------------------------------------------------
def test_an_expired_remote_fetch_answers_no_records_and_counts_the_expiry(
    make_node: NodeFactory, rsm: BlockingStorage
) -> None:
    node = make_node(**{"remote.fetch.max.wait.ms": "20", "remote.log.reader.threads": "1"})
    rsm.blocking.set()
    first = node.fetch("t", 0, 0)  # its read runs and blocks: it cannot finish in time
    assert rsm.entered.is_set()
    assert first.remote_fetch_expired and first.from_remote and not first.throttled
    assert first.records == [] and first.batches == b""
    assert first.next_offset == 0  # the consumer fetches offset 0 again
    assert first.high_watermark == RECORDS and first.log_start_offset == 0
    assert metric(node, FETCH_EXPIRED) == 1
    # The only reader thread is busy: the next read waits in the queue, expires there, and is
    # cancelled before it ever starts.
    second = node.fetch("t", 0, 0)
    assert second.remote_fetch_expired and second.records == []
    assert metric(node, FETCH_EXPIRED) == 2
    assert node.rlm is not None
    pool = node.rlm.reader_pool
    rsm.release.set()
    wait_until(lambda: pool.completed_count == 2 and pool.active_count == 0, "the pool to drain")
    # One read ran (the blocked one, finished in the background, its answer dropped); the
    # cancelled one never reached remote storage.
    assert metric(node, REMOTE_FETCH_REQUESTS, topic="t") == 1


def test_a_remote_fetch_within_its_bound_is_unaffected(
    make_node: NodeFactory, rsm: BlockingStorage
) -> None:
    node = make_node(**{"remote.fetch.max.wait.ms": "120000"})
    fetched = node.fetch("t", 0, 0)
    assert fetched.from_remote and not fetched.remote_fetch_expired
    assert fetched.records[0].offset == 0 and fetched.records[0].key == b"k0"
    assert metric(node, FETCH_EXPIRED) == 0


def test_the_callers_timeout_replaces_remote_fetch_max_wait(
    make_node: NodeFactory, rsm: BlockingStorage
) -> None:
    # A 1 ms remote.fetch.max.wait.ms would expire most reads; the caller's own bound wins.
    node = make_node(**{"remote.fetch.max.wait.ms": "1"})
    rsm.blocking.set()
    threading.Thread(
        target=lambda: rsm.entered.wait(120) and rsm.release.set(), daemon=True
    ).start()  # the read is released only once it has started: it waits well past 1 ms
    fetched = node.fetch("t", 0, 0, timeout_s=120)
    assert rsm.entered.is_set()
    assert fetched.records and not fetched.remote_fetch_expired
    assert metric(node, FETCH_EXPIRED) == 0


# ListOffsets -------------------------------------------------------------------------------------
def first_remote_timestamp(node: Node) -> int:
    """A timestamp only a remote segment holds (the first record's)."""
    record = node.fetch("t", 0, 0, timeout_s=120).records[0]
    return record.timestamp


def test_a_remote_list_offsets_past_its_timeout_is_request_timed_out(
    make_node: NodeFactory, rsm: BlockingStorage
) -> None:
    node = make_node(**{"remote.list.offsets.request.timeout.ms": "20"})
    timestamp = first_remote_timestamp(node)
    rsm.blocking.set()
    with pytest.raises(
        RequestTimedOutError, match=re.escape("remote.list.offsets.request.timeout.ms")
    ):
        node.list_offsets("t", 0, timestamp)
    assert rsm.entered.is_set()  # the search was in remote storage when it timed out
    assert isinstance(RequestTimedOutError("x"), RetriableRemoteStorageException)
    assert metric(node, LIST_OFFSETS_EXPIRED) == 1
    assert metric(node, LIST_OFFSETS_EXPIRED, topic="t", partition="0") == 1
    rsm.blocking.clear()
    rsm.release.set()
    found = node.list_offsets("t", 0, timestamp)  # remote storage answers again
    assert found is not None and found.offset == 0


def test_a_remote_list_offsets_within_its_timeout_is_unaffected(
    make_node: NodeFactory, rsm: BlockingStorage
) -> None:
    node = make_node(**{"remote.list.offsets.request.timeout.ms": "120000"})
    timestamp = first_remote_timestamp(node)
    found = node.list_offsets("t", 0, timestamp)
    assert found is not None and found.offset == 0 and found.timestamp == timestamp
    assert metric(node, LIST_OFFSETS_EXPIRED) == 0


# Over HTTP ---------------------------------------------------------------------------------------
def get(api: HttpApi, path: str) -> tuple[int, http.client.HTTPMessage, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=120)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.headers, json.loads(resp.read())
    finally:
        conn.close()


def test_the_http_api_answers_an_expired_fetch_empty_and_a_timed_out_search_503(
    make_node: NodeFactory, rsm: BlockingStorage
) -> None:
    node = make_node(
        **{"remote.fetch.max.wait.ms": "20", "remote.list.offsets.request.timeout.ms": "20"}
    )
    timestamp = first_remote_timestamp(node)
    with HttpApi(node) as api:
        client = TierlogClient(api.url, timeout=120)
        rsm.blocking.set()
        status, _, body = get(api, "/topics/t/partitions/0/records?offset=0")
        assert status == 200
        assert body["records"] == [] and body["remote_fetch_expired"] is True
        assert body["next_offset"] == 0 and body["from_remote"] is True
        fetched = client.fetch("t", 0, 0)  # the raw-batches answer carries it as a header
        assert fetched.remote_fetch_expired and fetched.records == []

        status, headers, body = get(api, f"/topics/t/partitions/0/offsets?timestamp={timestamp}")
        assert status == 503 and headers["Retry-After"] == "1"
        assert body["error"]["type"] == "RequestTimedOutError"
        assert body["error"]["retriable"] is True
        assert "remote.list.offsets.request.timeout.ms" in body["error"]["message"]
        with pytest.raises(RequestTimedOutError):
            client.list_offsets("t", 0, timestamp)

        metrics = client.metrics()
        assert f"{FETCH_EXPIRED} 2.0" in metrics
        assert f'{LIST_OFFSETS_EXPIRED}{{partition="0",topic="t"}} 2.0' in metrics

        rsm.blocking.clear()
        rsm.release.set()
        status, _, body = get(api, "/topics/t/partitions/0/records?offset=0")
        assert status == 200 and body["remote_fetch_expired"] is False and body["records"]


def test_consume_fetches_again_after_an_expired_remote_read(
    make_node: NodeFactory, rsm: BlockingStorage, capsys: pytest.CaptureFixture[str]
) -> None:
    node = make_node(**{"remote.fetch.max.wait.ms": "20"})
    with HttpApi(node) as api:
        rsm.blocking.set()

        def release_after_an_expiry() -> None:
            wait_until(lambda: metric(node, FETCH_EXPIRED) >= 1, "a remote fetch to expire")
            rsm.blocking.clear()
            rsm.release.set()

        releaser = threading.Thread(target=release_after_an_expiry, daemon=True)
        releaser.start()
        code = main(["consume", "--url", api.url, "--topic", "t", "--from-beginning"])
        releaser.join(60)
    out = capsys.readouterr().out
    assert code == 0
    assert metric(node, FETCH_EXPIRED) >= 1
    # Not stopped at the expiry, as if the partition had ended: every record, in order.
    assert out.splitlines() == [f"value-{i:04d}" * 4 for i in range(RECORDS)]
