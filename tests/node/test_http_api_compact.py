"""``POST /topics/{t}/partitions/{p}/compact`` and ``TierlogClient.compact``, on a real node
behind a real HTTP server (embedded defaults, the in-process engine).

What the answer says is checked against what the node did: the routed remote segments, the
records a consumer reads afterwards, the RSM calls the round made. The streamed form is read
line by line off the socket, a blocked round must keep it alive with heartbeats, and a round
that fails must end the stream with the error the client raises again.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tierlog.compaction.tiered import remote_chain
from tierlog.node import Node
from tierlog.node import http_api as http_api_module
from tierlog.node.client import TierlogClient
from tierlog.node.http_api import NDJSON_CONTENT_TYPE, HttpApi
from tierlog.node.node import UnknownTopicError
from tierlog.spi import (
    InvalidArgumentError,
    RemoteStorageException,
    RetriableRemoteStorageException,
    TopicPartition,
)

from .test_node import node_props

KEYS = 20
ROUNDS = 30
TOPIC = "table"
TIERED = {
    "cleanup.policy": "compact",
    "remote.storage.enable": "true",
    "internal.segment.bytes": "2048",
    "local.retention.ms": "1",
}
"""Segments of a few batches; local copies dropped once they are below the cleaner offset."""
POLICY_MESSAGE = (
    "Partition events-0 can not be compacted due to the configured policy: "
    "cleanup.policy=delete, and only a topic whose cleanup.policy includes compact has a log "
    "cleaner"
)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    props = node_props(
        tmp_path,
        log_cleaner_enable="false",
        remote_log_compaction_engine="python",
        num_partitions=1,
    )
    with Node(props) as n:
        yield n


@pytest.fixture
def api(node: Node) -> Iterator[HttpApi]:
    with HttpApi(node, "127.0.0.1", 0) as a:
        yield a


@pytest.fixture
def client(api: HttpApi) -> TierlogClient:
    return TierlogClient(api.url, timeout=60)


def value(round_: int, key: int) -> bytes:
    return f"v{round_}-{key}-".encode() * 8


def produce(node: Node, topic: str, rounds: range, keys: range = range(KEYS)) -> None:
    """``rounds`` batches, each a version of every key of ``keys``; the active segment rolled
    after the last so that every record can be tiered and cleaned."""
    for r in rounds:
        node.produce(topic, [(f"key-{k:02d}".encode(), value(r, k)) for k in keys], partition=0)
    node.log(topic, 0).roll()


def tiered_table(node: Node) -> None:
    node.create_topic(TOPIC, 1, TIERED)
    produce(node, TOPIC, range(ROUNDS))
    node.tier_now(TOPIC)
    log = node.log(TOPIC, 0)
    assert log.highest_offset_in_remote_storage == log.log_end_offset - 1


def read_all(client: TierlogClient, topic: str) -> dict[bytes, bytes | None]:
    """Every record from the log start, each key at most once (a cleaned log)."""
    out: dict[bytes, bytes | None] = {}
    offset = 0
    end = client.list_offsets(topic, 0, "latest")
    assert end is not None
    while offset < end.offset:
        fetched = client.fetch(topic, 0, offset)
        assert fetched.next_offset > offset
        for r in fetched.records:
            if r.offset >= offset:
                assert r.key is not None and r.key not in out, f"{r.key!r} twice"
                out[r.key] = r.value
        offset = fetched.next_offset
    return out


def routed_ids(node: Node, topic: str) -> set[str]:
    assert node.rlm is not None and node.rlmm is not None
    tip = node.rlm.topic_id_partition(TopicPartition(topic, 0))
    return {
        str(s.remote_log_segment_id.id) for s in remote_chain(node.rlmm, tip, node.log(topic, 0))
    }


def call(
    api: HttpApi, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, http.client.HTTPMessage, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=60)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


def wrap_rsm(node: Node, name: str, before: Callable[[], None]) -> None:
    """Run ``before`` ahead of every call of the node's RSM method ``name`` (the instance the
    cleaner's tasks use: the node registers it for them)."""
    assert node.rsm is not None
    method = getattr(node.rsm, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        before()
        return method(*args, **kwargs)

    setattr(node.rsm, name, wrapped)


# The summary ------------------------------------------------------------------------------------
def test_a_round_on_a_tiered_partition_answers_what_it_did(
    api: HttpApi, node: Node, client: TierlogClient
) -> None:
    tiered_table(node)
    before = routed_ids(node, TOPIC)
    end = node.log(TOPIC, 0).log_end_offset
    status, headers, body = call(api, "POST", f"/topics/{TOPIC}/partitions/0/compact")
    assert status == 200 and headers["Content-Type"] == "application/json"
    summary = json.loads(body)
    assert summary["topic"] == TOPIC and summary["partition"] == 0
    assert summary["cleaned"] is True and summary["tiered"] is True
    assert summary["dirty_ratio"] == 1.0
    assert (summary["first_dirty_offset"], summary["end_offset"]) == (0, end)
    assert summary["keys_mapped"] == KEYS
    assert summary["records_read"] == KEYS * ROUNDS
    assert summary["records_kept"] == KEYS
    assert summary["records_dropped"] == KEYS * (ROUNDS - 1)
    assert summary["segments_read"] == summary["segments_written"] == len(before)
    # The local copies were still there: read from disk, nothing downloaded.
    assert summary["bytes_downloaded"] == 0 and summary["segments_skipped"] == 0
    published = summary["published"]
    assert summary["bytes_uploaded"] == sum(p["size_in_bytes"] for p in published) > 0
    assert summary["bytes_written"] == summary["bytes_uploaded"] < summary["bytes_read"]
    # Readers are now routed to exactly the segments the answer lists, none of the old ones.
    assert routed_ids(node, TOPIC) == {p["segment_id"] for p in published}
    assert not before & {p["segment_id"] for p in published}
    # Until local retention drops them, the local copies (uncleaned) serve the reads.
    node.run_local_retention()
    assert node.log(TOPIC, 0).local_log_start_offset == end
    assert read_all(client, TOPIC) == {
        f"key-{k:02d}".encode(): value(ROUNDS - 1, k) for k in range(KEYS)
    }
    # Nothing left to clean: without force the round does not run, and says why.
    again = client.compact(TOPIC, 0, force=False)
    assert again["cleaned"] is False
    assert (again["first_dirty_offset"], again["end_offset"]) == (end, end)
    assert again["dirty_ratio"] == 0.0 and again["published"] == []


def test_a_second_round_reads_only_what_its_bloom_filters_cannot_rule_out(
    node: Node, client: TierlogClient
) -> None:
    tiered_table(node)
    first = client.compact(TOPIC, 0)
    node.run_local_retention()  # the local copies are below the cleaner offset now
    log = node.log(TOPIC, 0)
    assert log.local_log_start_offset == first["end_offset"]
    fetched: list[str] = []
    wrap_rsm(node, "fetch_log_segment", lambda: fetched.append("segment"))
    produce(node, TOPIC, range(ROUNDS, ROUNDS + 3), keys=range(1))  # one key changes
    node.tier_now(TOPIC)
    assert node.rlm is not None and node.rlmm is not None
    tip = node.rlm.topic_id_partition(TopicPartition(TOPIC, 0))
    new = [s for s in remote_chain(node.rlmm, tip, log) if s.start_offset >= first["end_offset"]]
    second = client.compact(TOPIC, 0)
    assert second["cleaned"] and second["first_dirty_offset"] == first["end_offset"]
    assert second["keys_mapped"] == 1
    # The first round left its survivors in its last segments; the others hold no key at all
    # or not key-00: their Bloom filters rule them out and they are never downloaded.
    assert second["segments_skipped"] > 0
    downloaded = second["segments_read"] - len(new)  # the new ones are still on local disk
    assert downloaded >= 1 and len(fetched) == downloaded
    assert second["bytes_downloaded"] > 0
    node.run_local_retention()
    latest = read_all(client, TOPIC)
    assert latest[b"key-00"] == value(ROUNDS + 2, 0)
    assert latest[b"key-01"] == value(ROUNDS - 1, 1)


def test_a_local_compacted_partition_has_no_remote_figures(
    node: Node, client: TierlogClient
) -> None:
    node.create_topic("local", 1, {"cleanup.policy": "compact", "internal.segment.bytes": "2048"})
    produce(node, "local", range(5))
    summary = client.compact("local", 0)
    assert summary["cleaned"] and summary["tiered"] is False
    assert "bytes_downloaded" not in summary and "published" not in summary
    assert summary["records_kept"] == KEYS and summary["records_dropped"] == 4 * KEYS


# The streamed answer ----------------------------------------------------------------------------
def stream_lines(resp: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
    while line := resp.readline():
        yield json.loads(line)


def test_the_streamed_answer_reports_each_pass_then_the_summary(
    api: HttpApi, node: Node, client: TierlogClient
) -> None:
    tiered_table(node)
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=60)
    try:
        conn.request(
            "POST",
            f"/topics/{TOPIC}/partitions/0/compact",
            headers={"Accept": NDJSON_CONTENT_TYPE},
        )
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.headers["Content-Type"] == NDJSON_CONTENT_TYPE
        assert resp.headers["Transfer-Encoding"] == "chunked"
        assert resp.headers["Content-Length"] is None
        lines = list(stream_lines(resp))
    finally:
        conn.close()
    *steps, last = lines
    assert set(last) == {"result"} and last["result"]["cleaned"]
    phases = [s["progress"]["phase"] for s in steps if "progress" in s]
    assert phases[0] == "map" and phases[-1] == "clean"
    assert phases == sorted(phases, key=["map", "clean"].index)
    final = [s["progress"] for s in steps if "progress" in s][-1]
    assert final["done"] == final["total"] == last["result"]["segments_written"]

    # The client reads the same stream and hands the progress over.
    produce(node, TOPIC, range(ROUNDS, ROUNDS + 2))
    node.tier_now(TOPIC)
    seen: list[tuple[str, int, int]] = []
    summary = client.compact(TOPIC, 0, progress=lambda *a: seen.append(a))
    assert summary["cleaned"] and summary["first_dirty_offset"] == last["result"]["end_offset"]
    assert seen[-1] == ("clean", summary["segments_written"], summary["segments_written"])


def test_a_blocked_round_keeps_the_stream_alive_with_heartbeats(
    api: HttpApi, node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_api_module, "HEARTBEAT_S", 0.05)
    tiered_table(node)
    release = threading.Event()
    wrap_rsm(node, "copy_log_segment_data", lambda: release.wait(60))
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=60)
    try:
        conn.request(
            "POST",
            f"/topics/{TOPIC}/partitions/0/compact",
            headers={"Accept": NDJSON_CONTENT_TYPE},
        )
        resp = conn.getresponse()
        lines = []
        for line in stream_lines(resp):
            lines.append(line)
            if "elapsed_s" in line and not release.is_set():
                # A heartbeat while the round is stuck in its first upload: let it go on.
                release.set()
    finally:
        release.set()
        conn.close()
    heartbeats = [line["elapsed_s"] for line in lines if "elapsed_s" in line]
    assert heartbeats and heartbeats[0] >= 0.05
    assert "result" in lines[-1] and lines[-1]["result"]["cleaned"]


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (RemoteStorageException("the bucket is gone"), 500),
        (RetriableRemoteStorageException("the store is throttling"), 503),
    ],
)
def test_a_round_that_fails_ends_the_stream_with_its_error(
    api: HttpApi,
    node: Node,
    client: TierlogClient,
    error: RemoteStorageException,
    status: int,
) -> None:
    tiered_table(node)

    def fail() -> None:
        raise error

    wrap_rsm(node, "copy_log_segment_data", fail)
    with pytest.raises(type(error), match=str(error)):
        client.compact(TOPIC, 0)
    code, _, body = call(
        api, "POST", f"/topics/{TOPIC}/partitions/0/compact", {"Accept": NDJSON_CONTENT_TYPE}
    )
    assert code == 200
    last = json.loads(body.splitlines()[-1])
    assert last["status"] == status
    assert last["error"]["type"] == type(error).__name__
    assert last["error"]["message"] == str(error)
    assert last["error"].get("retriable", False) is (status == 503)
    # Without streaming the same failure is the answer's status.
    code, headers, body = call(api, "POST", f"/topics/{TOPIC}/partitions/0/compact")
    assert code == status and json.loads(body)["error"]["type"] == type(error).__name__
    assert (headers["Retry-After"] is not None) is (status == 503)


# Refusals --------------------------------------------------------------------------------------
def test_what_cannot_be_compacted_is_refused_before_anything_runs(
    api: HttpApi, node: Node, client: TierlogClient
) -> None:
    node.create_topic("events", 1)
    node.produce("events", [b"a", b"b"], partition=0)
    node.create_topic("table", 1, {"cleanup.policy": "compact"})
    for path, expected, error_type, message in (
        ("/topics/events/partitions/0/compact", 400, "InvalidArgumentError", POLICY_MESSAGE),
        (
            "/topics/nope/partitions/0/compact",
            404,
            "UnknownTopicError",
            "This server does not host this topic: nope",
        ),
        (
            "/topics/table/partitions/7/compact",
            404,
            "UnknownTopicError",
            "This server does not host this topic-partition: table-7",
        ),
        (
            "/topics/table/partitions/0/compact?force=maybe",
            400,
            "InvalidArgumentError",
            "force must be true or false, got 'maybe'",
        ),
        (
            "/topics/table/partitions/0/compact?forced=true",
            400,
            "InvalidArgumentError",
            "unknown query parameter 'forced' (expected: force)",
        ),
        (
            "/topics/table/partitions/x/compact",
            400,
            "InvalidArgumentError",
            "partition must be an integer, got 'x'",
        ),
    ):
        for headers in ({}, {"Accept": NDJSON_CONTENT_TYPE}):
            status, _, body = call(api, "POST", path, headers)
            assert status == expected, (path, body)
            error = json.loads(body)["error"]
            assert (error["type"], error["message"]) == (error_type, message)
    status, headers, _ = call(api, "GET", "/topics/table/partitions/0/compact")
    assert status == 405 and headers["Allow"] == "POST"
    with pytest.raises(InvalidArgumentError, match="can not be compacted due to the configured"):
        client.compact("events", 0)
    with pytest.raises(UnknownTopicError):
        client.compact("nope", 0)
    assert node.log("events", 0).log_end_offset == 2
