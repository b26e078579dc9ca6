"""The node's HTTP API and ``TierlogClient``, against a real server on a free port.

Every endpoint is called over real sockets (``http.client`` when the status, the headers or the
exact error body matter, ``TierlogClient`` otherwise) on a real ``Node`` with the ``local`` RSM
and the ``embedded`` RLMM, so the remote read path is the real one.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tierlog.log.batch import ControlRecordType, build_batch, build_control_batch
from tierlog.log.local_log import OffsetOutOfRangeError
from tierlog.log.record import Record
from tierlog.metadata.partitioner import murmur2
from tierlog.node import Node, NodeConfig, ProducerRecord, UnknownTopicError
from tierlog.node.client import ApiError, NodeUnreachableError, TierlogClient
from tierlog.node.http_api import BATCHES_CONTENT_TYPE, HttpApi
from tierlog.node.node import TopicExistsError
from tierlog.spi import (
    ConfigError,
    InvalidArgumentError,
    RemoteLogSegmentMetadata,
    RemoteStorageNotReadyException,
)
from tierlog.storage.local import LocalTieredStorage

TIERED_SMALL = {
    "remote.storage.enable": "true",
    "internal.segment.bytes": "600",
    "local.retention.bytes": "1",
}
"""Segments of a few batches, deleted locally as soon as they are copied."""


class FlakyStorage(LocalTieredStorage):
    """The ``local`` RSM, whose reads fail as "not ready" while ``not_ready`` is set."""

    not_ready = False

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, *args: Any, **kw: Any) -> Any:
        if self.not_ready:
            raise RemoteStorageNotReadyException("remote storage is warming up")
        return super().fetch_log_segment(metadata, *args, **kw)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, *args: Any, **kw: Any) -> Any:
        if self.not_ready:
            raise RemoteStorageNotReadyException("remote storage is warming up")
        return super().fetch_index(metadata, *args, **kw)


@pytest.fixture
def rsm(tmp_path: Path) -> Iterator[FlakyStorage]:
    storage = FlakyStorage()
    storage.configure({"dir": str(tmp_path / "remote"), "node.id": "0"})
    yield storage
    storage.close()


@pytest.fixture
def node(tmp_path: Path, rsm: FlakyStorage) -> Iterator[Node]:
    config = NodeConfig.from_props(
        {
            "log.dirs": str(tmp_path / "data"),
            "remote.log.storage.system.enable": "true",
            "auto.create.topics.enable": "false",
            "num.partitions": "2",
            # No expiry of a remote read slowed by a loaded machine (test_remote_timeouts.py).
            "remote.fetch.max.wait.ms": "120000",
        }
    )
    with Node(config, rsm=rsm) as n:
        yield n


@pytest.fixture
def api(node: Node) -> Iterator[HttpApi]:
    with HttpApi(node, "127.0.0.1", 0) as a:
        yield a


@pytest.fixture
def client(api: HttpApi) -> TierlogClient:
    return TierlogClient(api.url, timeout=60)


def call(
    api: HttpApi,
    method: str,
    path: str,
    body: bytes | Mapping[str, Any] | list[Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, http.client.HTTPMessage, bytes]:
    """One request on a fresh connection: status, headers, body."""
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=60)
    try:
        hdrs = dict(headers or {})
        data: bytes | None
        if isinstance(body, dict | list):
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        else:
            data = body
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


def error_of(body: bytes) -> dict[str, Any]:
    err: dict[str, Any] = json.loads(body)["error"]
    assert set(err) >= {"type", "message"}
    assert "Traceback" not in err["message"]
    return err


# Node endpoints ----------------------------------------------------------------------------------
def test_healthz_reports_the_node(api: HttpApi, client: TierlogClient) -> None:
    status, headers, body = call(api, "GET", "/healthz")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"status": "ok", "node_id": 0, "topics": 0, "partitions": 0}
    client.create_topic("a")
    assert client.health()["partitions"] == 2


def test_api_binds_a_free_port_and_reports_it(api: HttpApi) -> None:
    assert api.port != 0
    assert api.url == f"http://127.0.0.1:{api.port}"


def test_metrics_negotiates_prometheus_text_and_openmetrics(api: HttpApi) -> None:
    status, headers, body = call(api, "GET", "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert b"# TYPE kafka_server_brokertopicmetrics_remotecopybytes_total counter" in body
    status, headers, body = call(
        api, "GET", "/metrics", headers={"Accept": "application/openmetrics-text"}
    )
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")


def test_unknown_path_wrong_method_and_unsupported_method_are_json_errors(api: HttpApi) -> None:
    status, _, body = call(api, "GET", "/nope")
    assert status == 404 and error_of(body)["type"] == "HttpError"
    status, headers, body = call(api, "PUT", "/topics")
    assert status == 405 and headers["Allow"] == "GET, POST"
    assert "PUT" in error_of(body)["message"]
    status, _, body = call(api, "OPTIONS", "/topics")
    assert status == 501 and error_of(body)["type"] == "HttpError"


def test_unknown_or_repeated_query_parameters_are_refused(api: HttpApi, node: Node) -> None:
    node.create_topic("t", 1)
    status, _, body = call(api, "GET", "/topics/t/partitions/0/records?ofset=3")
    assert status == 400 and "'ofset'" in error_of(body)["message"]
    status, _, body = call(api, "GET", "/topics/t/partitions/0/records?offset=0&offset=1")
    assert status == 400 and "more than once" in error_of(body)["message"]
    status, _, _ = call(api, "GET", "/healthz?verbose=1")
    assert status == 400


# Topics ------------------------------------------------------------------------------------------
def test_topic_lifecycle(api: HttpApi, client: TierlogClient, node: Node) -> None:
    status, headers, body = call(
        api, "POST", "/topics", {"name": "t", "partitions": 3, "configs": {"retention.ms": 60000}}
    )
    assert status == 201 and headers["Location"] == "/topics/t"
    created = json.loads(body)
    assert created["partitions"] == 3 and created["configs"] == {"retention.ms": "60000"}
    assert client.topics()["t"]["id"] == created["id"] == str(node.topics()["t"]["id"])

    described = client.describe_topic("t")
    assert [s["partition"] for s in described["status"]] == [0, 1, 2]

    status, _, body = call(
        api, "PATCH", "/topics/t/configs", {"retention.ms": None, "segment.ms": "3600000"}
    )
    assert status == 200 and json.loads(body)["configs"] == {"segment.ms": "3600000"}
    assert client.alter_topic_config("t", {"segment.ms": ""}) == {}
    assert node.topics()["t"]["configs"] == {}

    status, _, body = call(api, "DELETE", "/topics/t")
    assert status == 200 and json.loads(body) == {"deleted": "t", "id": created["id"]}
    assert client.topics() == {}
    status, _, body = call(api, "DELETE", "/topics/t")
    assert status == 404 and error_of(body)["type"] == "UnknownTopicError"


def test_create_topic_errors(api: HttpApi, client: TierlogClient) -> None:
    assert str(client.create_topic("t")) == client.topics()["t"]["id"]
    status, _, body = call(api, "POST", "/topics", {"name": "t"})
    assert status == 409 and error_of(body)["type"] == "TopicExistsError"
    with pytest.raises(TopicExistsError, match=r"already exists\."):
        client.create_topic("t")

    bad_bodies: list[Any] = [
        {"name": "a/b"},
        {"name": ""},
        {"name": "x", "partitions": 0},
        {"name": "x", "partitions": "2"},
        {"name": "x", "replicas": 1},
        {"name": "x", "configs": {"retention.ms": [1]}},
        ["x"],
    ]
    for bad in bad_bodies:
        status, _, body = call(api, "POST", "/topics", bad)
        assert status == 400 and error_of(body)["type"] == "InvalidArgumentError", bad
    status, _, body = call(api, "POST", "/topics", b"{not json", {"Content-Type": "text/json"})
    assert status == 415
    status, _, body = call(api, "POST", "/topics", b"{not", {"Content-Type": "application/json"})
    assert status == 400 and "not valid JSON" in error_of(body)["message"]
    status, _, body = call(api, "POST", "/topics", b"name=x", {"Content-Type": "text/plain"})
    assert status == 415
    with pytest.raises(ConfigError, match=r"retention\.ms"):
        client.create_topic("y", configs={"retention.ms": "soon"})
    assert "y" not in client.topics()


def test_alter_unknown_topic_and_bad_value(api: HttpApi, client: TierlogClient) -> None:
    with pytest.raises(UnknownTopicError):
        client.alter_topic_config("nope", {"retention.ms": "1"})
    client.create_topic("t")
    status, _, body = call(api, "PATCH", "/topics/t/configs", {"retention.ms": "never"})
    assert status == 400 and error_of(body)["type"] == "ConfigError"


# Producing ---------------------------------------------------------------------------------------
def test_produce_json_utf8_and_base64_round_trip(api: HttpApi, client: TierlogClient) -> None:
    client.create_topic("t", 1)
    status, _, body = call(
        api,
        "POST",
        "/topics/t/partitions/0/records",
        {
            "records": [
                {"key": "k", "value": "héllo", "headers": {"h": "1", "n": None}, "timestamp": 5},
                {"value": None},
            ]
        },
    )
    assert status == 200
    assert json.loads(body)["offsets"] == [
        {"partition": 0, "base_offset": 0, "last_offset": 1, "log_append_time": -1}
    ]
    binary = bytes(range(256))
    status, _, body = call(
        api,
        "POST",
        "/topics/t/records",
        {
            "records": [{"value": base64.b64encode(binary).decode(), "headers": [["h", "AA=="]]}],
            "encoding": "base64",
            "compression": "gzip",
        },
    )
    assert status == 200 and json.loads(body)["offsets"][0]["base_offset"] == 2

    status, _, body = call(api, "GET", "/topics/t/partitions/0/records?offset=0")
    assert status == 200
    fetched = json.loads(body)
    assert fetched["records"][0] == {
        "offset": 0,
        "timestamp": 5,
        "key": "k",
        "value": "héllo",
        "headers": [["h", "1"], ["n", None]],
    }
    assert fetched["records"][1]["value"] is None
    assert fetched["next_offset"] == 3 and fetched["high_watermark"] == 3
    assert fetched["from_remote"] is False and fetched["throttled"] is False

    status, _, body = call(api, "GET", "/topics/t/partitions/0/records?offset=2&encoding=base64")
    rec = json.loads(body)["records"][0]
    assert base64.b64decode(rec["value"]) == binary and rec["headers"] == [["h", "AA=="]]
    assert client.fetch("t", 0, 2).records[0].value == binary


def test_keyed_records_follow_kafkas_partitioner(client: TierlogClient) -> None:
    client.create_topic("t", 4)
    results = client.produce("t", [(b"user-%d" % i, b"v") for i in range(8)])
    by_partition = {r.partition: r.last_offset - r.base_offset + 1 for r in results}
    expected: dict[int, int] = {}
    for i in range(8):
        p = (murmur2(b"user-%d" % i) & 0x7FFFFFFF) % 4
        expected[p] = expected.get(p, 0) + 1
    assert by_partition == expected


def test_produce_errors(api: HttpApi, client: TierlogClient) -> None:
    client.create_topic("t", 1)
    cases: list[tuple[str, Any, int, str]] = [
        ("/topics/nope/records", {"records": [{"value": "x"}]}, 404, "UnknownTopicError"),
        ("/topics/t/partitions/7/records", {"records": [{"value": "x"}]}, 404, "UnknownTopic"),
        ("/topics/t/partitions/x/records", {"records": [{"value": "x"}]}, 400, "partition"),
        ("/topics/t/records", {"records": []}, 400, "non-empty"),
        ("/topics/t/records", {"records": [{"value": 1}]}, 400, "records[0].value"),
        ("/topics/t/records", {"records": [{"value": "%%"}], "encoding": "base64"}, 400, "base64"),
        ("/topics/t/records", {"records": [{"value": "x"}], "compression": "rar"}, 400, "rar"),
        ("/topics/t/records", {"records": [{"value": "x", "timestamp": -3}]}, 400, "timestamp"),
        ("/topics/t/records", {"records": [{"value": "x", "partition": 0}]}, 400, "partition"),
        ("/topics/t/records", {"records": [{"value": "x"}], "acks": 1}, 400, "acks"),
    ]
    for path, body, expected_status, needle in cases:
        status, _, answer = call(api, "POST", path, body)
        err = error_of(answer)
        assert status == expected_status, (path, body, err)
        assert needle in err["type"] + err["message"], (path, body, err)
    assert client.list_offsets("t", 0, "latest") is not None
    assert client.list_offsets("t", 0, "latest").offset == 0  # type: ignore[union-attr]


def test_raw_batches_round_trip(api: HttpApi, client: TierlogClient) -> None:
    client.create_topic("t", 1)
    records = [
        Record(i, 1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i, (("h", b"x"),)) for i in range(5)
    ]
    batch = build_batch(records, compression="zstd")
    status, _, body = call(
        api,
        "POST",
        "/topics/t/partitions/0/records",
        batch,
        {"Content-Type": BATCHES_CONTENT_TYPE},
    )
    assert status == 200 and json.loads(body)["offsets"][0]["last_offset"] == 4
    result = client.append_batches("t", 0, build_batch(records[:2]))
    assert (result.base_offset, result.last_offset) == (5, 6)

    status, headers, raw = call(
        api,
        "GET",
        "/topics/t/partitions/0/records?offset=2",
        headers={"Accept": BATCHES_CONTENT_TYPE},
    )
    assert status == 200 and headers["Content-Type"] == BATCHES_CONTENT_TYPE
    assert headers["X-Tierlog-Next-Offset"] == "7"
    assert headers["X-Tierlog-High-Watermark"] == "7"
    assert headers["X-Tierlog-From-Remote"] == "false"
    assert json.loads(headers["X-Tierlog-Aborted-Transactions"]) == []
    # Whole batches: the compressed first batch starts before the offset asked for.
    assert raw[:8] == (0).to_bytes(8, "big")

    fetched = client.fetch("t", 0, 2)
    assert [(r.offset, r.key, r.value, r.headers) for r in fetched.records] == [
        (2, b"k2", b"v2", (("h", b"x"),)),
        (3, b"k3", b"v3", (("h", b"x"),)),
        (4, b"k4", b"v4", (("h", b"x"),)),
        (5, b"k0", b"v0", (("h", b"x"),)),
        (6, b"k1", b"v1", (("h", b"x"),)),
    ]
    assert fetched.next_offset == 7 and fetched.batches == raw


def test_raw_batch_errors(api: HttpApi, client: TierlogClient) -> None:
    client.create_topic("t", 1)
    batch = build_batch([Record(0, 1, None, b"v")])
    status, _, body = call(
        api, "POST", "/topics/t/records", batch, {"Content-Type": BATCHES_CONTENT_TYPE}
    )
    assert status == 400 and "partitions/{p}" in error_of(body)["message"]
    corrupt = bytearray(batch)
    corrupt[-1] ^= 0xFF
    status, _, body = call(
        api,
        "POST",
        "/topics/t/partitions/0/records",
        bytes(corrupt),
        {"Content-Type": BATCHES_CONTENT_TYPE},
    )
    assert status == 400 and error_of(body)["type"] == "CorruptRecordError"
    marker = build_control_batch(
        ControlRecordType.ABORT, 0, timestamp=1, producer_id=1, producer_epoch=0
    )
    with pytest.raises(InvalidArgumentError):  # clients may not write transaction markers
        client.append_batches("t", 0, marker)
    assert client.list_offsets("t", 0, "latest").offset == 0  # type: ignore[union-attr]


def test_read_committed_drops_aborted_transactions(
    api: HttpApi, client: TierlogClient, node: Node
) -> None:
    client.create_topic("t", 1)
    client.produce("t", [b"before"], partition=0)
    txn = build_batch(
        [Record(0, 1, None, b"aborted")],
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    client.append_batches("t", 0, txn)
    epoch = node.status("t")[0].leader_epoch
    marker = build_control_batch(
        ControlRecordType.ABORT, 0, timestamp=2, producer_id=7, producer_epoch=0
    )
    node.log("t", 0).append_as_leader(marker, epoch, origin="coordinator")
    client.produce("t", [b"after"], partition=0)

    committed = client.fetch("t", 0, 0, isolation="read_committed")
    assert [r.value for r in committed.records] == [b"before", b"after"]
    assert [a.producer_id for a in committed.aborted_transactions] == [7]
    uncommitted = client.fetch("t", 0, 0)
    assert [r.value for r in uncommitted.records] == [b"before", b"aborted", b"after"]
    status, _, body = call(
        api, "GET", "/topics/t/partitions/0/records?offset=0&isolation=read_committed"
    )
    assert status == 200
    assert [r["value"] for r in json.loads(body)["records"]] == ["before", "after"]


# Fetching and offsets ----------------------------------------------------------------------------
def test_fetch_parameter_validation(api: HttpApi, client: TierlogClient) -> None:
    client.create_topic("t", 1)
    client.produce("t", [b"a", b"b"], partition=0)
    base = "/topics/t/partitions/0/records"
    for query, needle in [
        ("offset=-1", "offset"),
        ("offset=x", "offset"),
        ("max_bytes=0", "max_bytes"),
        ("max_bytes=999999999999", "max_bytes"),
        ("isolation=dirty", "isolation"),
        ("encoding=latin1", "encoding"),
    ]:
        status, _, body = call(api, "GET", f"{base}?{query}")
        assert status == 400 and needle in error_of(body)["message"], query
    _, _, body = call(api, "GET", base)  # offset defaults to the log start
    assert [r["value"] for r in json.loads(body)["records"]] == ["a", "b"]
    status, _, body = call(api, "GET", "/topics/t/partitions/1/records?offset=0")
    assert status == 404 and error_of(body)["type"] == "UnknownTopicError"


def test_offset_out_of_range_carries_the_valid_range(api: HttpApi, client: TierlogClient) -> None:
    client.create_topic("t", 1)
    client.produce("t", [b"a", b"b", b"c"], partition=0)
    status, _, body = call(api, "GET", "/topics/t/partitions/0/records?offset=10")
    err = error_of(body)
    assert status == 416
    assert err["type"] == "OffsetOutOfRangeError"
    assert (err["log_start_offset"], err["high_watermark"], err["log_end_offset"]) == (0, 3, 3)
    with pytest.raises(OffsetOutOfRangeError, match="offset 10"):
        client.fetch("t", 0, 10)
    assert client.fetch("t", 0, 3).records == []  # the log end itself is in range


def test_list_offsets(api: HttpApi, client: TierlogClient) -> None:
    client.create_topic("t", 1)
    records = [ProducerRecord(b"a", timestamp=1000), ProducerRecord(b"b", timestamp=2000)]
    client.produce("t", records, partition=0)
    assert client.list_offsets("t", 0, "earliest").offset == 0  # type: ignore[union-attr]
    assert client.list_offsets("t", 0, "latest").offset == 2  # type: ignore[union-attr]
    assert client.list_offsets("t", 0, "earliest-local").offset == 0  # type: ignore[union-attr]
    assert client.list_offsets("t", 0, "latest-tiered").offset == -1  # type: ignore[union-attr]
    found = client.list_offsets("t", 0, 1500)
    assert found is not None and (found.offset, found.timestamp) == (1, 2000)
    assert client.list_offsets("t", 0, 5000) is None
    for query in ("", "spec=latest&timestamp=1", "spec=newest", "timestamp=-1"):
        status, _, body = call(api, "GET", f"/topics/t/partitions/0/offsets?{query}")
        assert status == 400 and error_of(body)["type"] == "InvalidArgumentError", query
    with pytest.raises(UnknownTopicError):
        client.list_offsets("nope", 0, "latest")


# Tiering and the remote read path ----------------------------------------------------------------
def _produce_tiered(client: TierlogClient, count: int) -> None:
    client.create_topic("tiered", 1, TIERED_SMALL)
    for i in range(count):
        client.produce("tiered", [b"value-%03d" % i], partition=0)


def test_read_through_remote_storage(api: HttpApi, client: TierlogClient) -> None:
    _produce_tiered(client, 40)
    status, _, body = call(api, "POST", "/tier?topic=tiered")
    assert status == 200
    (after,) = json.loads(body)["partitions"]
    assert after["remote_segments"] >= 2 and after["local_log_start_offset"] > 0
    assert after["highest_offset_in_remote_storage"] == after["local_log_start_offset"] - 1

    status, _, body = call(api, "GET", "/topics/tiered/partitions/0/records?offset=0")
    first = json.loads(body)
    assert first["from_remote"] is True
    assert first["records"][0] == {
        "offset": 0,
        "timestamp": first["records"][0]["timestamp"],
        "key": None,
        "value": "value-000",
        "headers": [],
    }
    assert first["log_start_offset"] == 0
    assert first["local_log_start_offset"] == after["local_log_start_offset"]

    values: list[bytes] = []
    sources: set[bool] = set()
    offset = 0
    while offset < 40:
        result = client.fetch("tiered", 0, offset)
        assert not result.throttled
        values += [r.value or b"" for r in result.records]
        sources.add(result.from_remote)
        offset = result.next_offset
    assert values == [b"value-%03d" % i for i in range(40)]
    assert sources == {True, False}
    tiered = client.list_offsets("tiered", 0, "latest-tiered")
    assert tiered is not None and tiered.offset == after["highest_offset_in_remote_storage"]

    _, _, metrics = call(api, "GET", "/metrics")
    samples = dict(
        line.rsplit(" ", 1) for line in metrics.decode().splitlines() if not line.startswith("#")
    )
    prefix = "kafka_server_brokertopicmetrics_"
    assert float(samples[prefix + 'remotecopybytes_total{topic="tiered"}']) == after["remote_bytes"]
    assert float(samples[prefix + "remotecopybytes_total"]) == after["remote_bytes"]
    assert float(samples[prefix + 'remotefetchrequests_total{topic="tiered"}']) > 0


def test_status_and_tier(api: HttpApi, client: TierlogClient) -> None:
    _produce_tiered(client, 12)
    client.create_topic("other", 1)
    statuses = client.status()
    assert [(s.topic, s.partition) for s in statuses] == [("other", 0), ("tiered", 0)]
    before = client.status("tiered")[0]
    assert before.log_end_offset == 12 and before.remote_segments == 0
    assert before.copy_lag_segments > 0
    after = client.tier("tiered")[0]
    assert after.remote_segments == before.copy_lag_segments and after.copy_lag_segments == 0
    for path in ("/status?topic=nope", "/tier?topic=nope"):
        method = "GET" if path.startswith("/status") else "POST"
        status, _, body = call(api, method, path)
        assert status == 404 and error_of(body)["type"] == "UnknownTopicError", path


def test_remote_storage_not_ready_is_503_retriable(
    api: HttpApi, client: TierlogClient, rsm: FlakyStorage
) -> None:
    _produce_tiered(client, 20)
    client.tier()
    rsm.not_ready = True
    status, headers, body = call(api, "GET", "/topics/tiered/partitions/0/records?offset=0")
    err = error_of(body)
    assert status == 503 and headers["Retry-After"] == "1"
    assert err == {
        "type": "RemoteStorageNotReadyException",
        "message": "remote storage is warming up",
        "retriable": True,
    }
    with pytest.raises(RemoteStorageNotReadyException):
        client.fetch("tiered", 0, 0)
    rsm.not_ready = False
    assert client.fetch("tiered", 0, 0).records[0].value == b"value-000"


# Limits and connection handling ------------------------------------------------------------------
def test_oversized_body_is_refused_with_413(node: Node) -> None:
    node.create_topic("t", 1)
    with HttpApi(node, "127.0.0.1", 0, max_request_bytes=1000) as small:
        big = {"records": [{"value": "x" * 2000}]}
        status, headers, body = call(small, "POST", "/topics/t/records", big)
        assert status == 413 and headers["Connection"] == "close"
        assert error_of(body)["max_request_bytes"] == 1000
        status, _, _ = call(small, "POST", "/topics/t/records", {"records": [{"value": "x"}]})
        assert status == 200

        # With Expect: 100-continue the refusal comes before the body is sent.
        with socket.create_connection(("127.0.0.1", small.port), timeout=60) as sock:
            sock.sendall(
                b"POST /topics/t/records HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                b"\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n"
            )
            assert sock.recv(4096).startswith(b"HTTP/1.1 413")
        # Chunked bodies (no length to check) are refused outright.
        status, _, body = call(
            small, "POST", "/topics/t/records", b"", {"Transfer-Encoding": "chunked"}
        )
        assert status == 411 and "Content-Length" in error_of(body)["message"]


def test_keep_alive_and_close_with_idle_connection(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    """An idle keep-alive connection does not hold ``close``: with a grace period and an idle
    timeout of an hour, it returns (checked with a generous deadline, not a duration) without
    counting the connection as a request in progress, and the connection is dropped."""
    server = HttpApi(node, "127.0.0.1", 0, request_timeout_s=3600).start()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    for _ in range(2):  # two requests on one HTTP/1.1 connection
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Connection") is None
        resp.read()
    closer = threading.Thread(target=server.close, kwargs={"grace_s": 3600}, daemon=True)
    with caplog.at_level("INFO", logger="tierlog.node.http_api"):
        closer.start()
        closer.join(60)
    assert not closer.is_alive(), "close() waits for the idle keep-alive connection"
    assert "HTTP API stopped" in caplog.messages
    assert not [m for m in caplog.messages if "requests in progress" in m]
    with pytest.raises((OSError, http.client.HTTPException)):
        conn.request("GET", "/healthz")
        conn.getresponse()
    conn.close()
    with pytest.raises(NodeUnreachableError, match="cannot reach"):
        TierlogClient(server.url, timeout=2).health()


def test_close_waits_for_a_request_in_progress(node: Node, rsm: FlakyStorage) -> None:
    """The status request in progress holds on until ``close`` has stopped the listener (the
    serving thread ended: a close that does not wait returns right after), then gives ``close``
    a second to return early. Whether it did is recorded, and ``close`` must return after the
    request, whatever the load: a loaded machine can only hide a close that does not wait
    (it returns later than that second), never fail a correct one."""
    server = HttpApi(node, "127.0.0.1", 0).start()
    serving = server._thread
    assert serving is not None
    client = TierlogClient(server.url, timeout=60)
    client.create_topic("t", 1)
    entered = threading.Event()
    closed = threading.Event()
    seen: list[str] = []
    original = node.status

    def slow_status(topic: str | None = None) -> Any:
        entered.set()
        serving.join(60)
        if serving.is_alive():
            seen.append("close() never stopped the listener")
        elif closed.wait(1.0):
            seen.append("close() returned during the request")
        return original(topic)

    def close() -> None:
        server.close(grace_s=600)  # the grace period is not what ends the wait
        closed.set()

    node.status = slow_status  # type: ignore[method-assign]
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(client.status()), daemon=True)
    worker.start()
    assert entered.wait(60)
    closer = threading.Thread(target=close, daemon=True)
    closer.start()
    worker.join(60)
    closer.join(60)
    assert not closer.is_alive() and not worker.is_alive()
    assert seen == []
    assert len(results) == 1 and results[0][0].topic == "t"


def test_client_maps_unknown_error_types_to_api_error(api: HttpApi) -> None:
    client = TierlogClient(api.url)
    with pytest.raises(ApiError) as info:
        client._request("GET", "/nope")
    assert info.value.status == 404 and info.value.error_type == "HttpError"
    with pytest.raises(InvalidArgumentError):
        TierlogClient("ftp://x")
