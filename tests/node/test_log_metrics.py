"""The log's own families on ``/metrics``: ``kafka.log:type=Log`` per partition and
``BrokerTopicMetrics`` ``BytesInPerSec`` / ``MessagesInPerSec``, produced through the HTTP API
and scraped through it, checked against what is on disk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tierlog.log.batch import build_batch
from tierlog.log.record import Record
from tierlog.node import Node, NodeConfig
from tierlog.node.client import TierlogClient
from tierlog.node.http_api import HttpApi

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]

BYTES_IN = "kafka_server_brokertopicmetrics_bytesin_total"
MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesin_total"
SIZE = "kafka_log_log_size"
LOG_END = "kafka_log_log_logendoffset"
LOG_START = "kafka_log_log_logstartoffset"
SEGMENTS = "kafka_log_log_numlogsegments"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    config = NodeConfig.from_props(
        {
            "log.dirs": str(tmp_path / "data"),
            "remote.log.storage.system.enable": "true",
            "remote.log.manager.task.interval.ms": "3600000",
            "log.retention.check.interval.ms": "3600000",
            "remote.fetch.max.wait.ms": "120000",
        }
    )
    with Node(config) as n:
        yield n


@pytest.fixture
def client(node: Node) -> Iterator[TierlogClient]:
    with HttpApi(node) as api:
        yield TierlogClient(api.url, timeout=60)


def scrape(client: TierlogClient) -> Series:
    out: Series = {}
    for family in text_string_to_metric_families(client.metrics()):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def at(scraped: Series, name: str, **labels: str | int) -> float:
    return scraped[(name, frozenset((k, str(v)) for k, v in labels.items()))]


def on_disk(node: Node, topic: str, partition: int) -> tuple[int, int]:
    """(bytes, count) of the partition's ``.log`` files, read from the directory."""
    files = sorted(node.log(topic, partition).dir.glob("*.log"))
    return sum(f.stat().st_size for f in files), len(files)


def test_produce_is_counted_in_and_the_log_gauges_follow_the_disk(
    node: Node, client: TierlogClient
) -> None:
    client.create_topic("orders", partitions=2)
    client.create_topic("audit", partitions=1)
    client.produce("orders", [b"a" * 100, b"b" * 100, b"c" * 100], partition=0)
    client.produce("orders", [b"d" * 50], partition=1)
    client.produce("audit", [(b"k", b"v")] * 5, partition=0)
    batch = build_batch([Record(i, 1_700_000_000_000, None, b"raw") for i in range(4)])
    client.append_batches("orders", 1, batch)

    scraped = scrape(client)
    orders_bytes = sum(on_disk(node, "orders", p)[0] for p in (0, 1))
    audit_bytes = on_disk(node, "audit", 0)[0]
    assert at(scraped, BYTES_IN, topic="orders") == orders_bytes
    assert at(scraped, BYTES_IN, topic="audit") == audit_bytes
    assert at(scraped, BYTES_IN) == orders_bytes + audit_bytes  # all topics: no label
    assert at(scraped, MESSAGES_IN, topic="orders") == 3 + 1 + 4
    assert at(scraped, MESSAGES_IN, topic="audit") == 5
    assert at(scraped, MESSAGES_IN) == 13

    for topic, partition, end in (("orders", 0, 3), ("orders", 1, 5), ("audit", 0, 5)):
        size, segments = on_disk(node, topic, partition)
        assert at(scraped, SIZE, topic=topic, partition=partition) == size > 0
        assert at(scraped, LOG_END, topic=topic, partition=partition) == end
        assert at(scraped, LOG_START, topic=topic, partition=partition) == 0
        assert at(scraped, SEGMENTS, topic=topic, partition=partition) == segments == 1


def test_tiering_and_remote_retention_move_the_log_gauges(
    node: Node, client: TierlogClient
) -> None:
    tiered = {
        "remote.storage.enable": "true",
        "internal.segment.bytes": "1024",
        "local.retention.bytes": "1",
    }
    client.create_topic("t", partitions=1, configs=tiered)
    for base in range(0, 120, 10):
        client.produce(
            "t", [f"value-{i:05d}".encode() * 4 for i in range(base, base + 10)], partition=0
        )
    before = scrape(client)
    segments_before = at(before, SEGMENTS, topic="t", partition=0)
    assert segments_before == on_disk(node, "t", 0)[1] > 3

    client.tier("t")  # copy, then local retention deletes what is copied
    tiered_scrape = scrape(client)
    size, segments = on_disk(node, "t", 0)
    assert at(tiered_scrape, SEGMENTS, topic="t", partition=0) == segments < segments_before
    assert at(tiered_scrape, SIZE, topic="t", partition=0) == size
    assert at(tiered_scrape, LOG_START, topic="t", partition=0) == 0  # still readable remotely
    assert at(tiered_scrape, LOG_END, topic="t", partition=0) == 120
    # Bytes in counts what was written, not what is left locally.
    assert at(tiered_scrape, BYTES_IN, topic="t") == at(before, BYTES_IN, topic="t") > size

    client.alter_topic_config("t", {"retention.bytes": "2048"})
    client.tier("t")  # remote retention moves the log start
    expired = scrape(client)
    log_start = node.log("t", 0).log_start_offset
    assert 0 < log_start < 120
    assert at(expired, LOG_START, topic="t", partition=0) == log_start


def test_a_deleted_topic_leaves_metrics_but_the_all_topics_counts_remain(
    node: Node, client: TierlogClient
) -> None:
    client.create_topic("gone")
    client.create_topic("kept")
    client.produce("gone", [b"x"] * 3)
    client.produce("kept", [b"y"] * 2)
    before = scrape(client)
    client.delete_topic("gone")
    after = scrape(client)
    assert all(dict(labels).get("topic") != "gone" for _, labels in after)
    assert at(after, MESSAGES_IN) == at(before, MESSAGES_IN) == 5
    assert at(after, MESSAGES_IN, topic="kept") == 2
    assert at(after, LOG_END, topic="kept", partition=0) == 2
