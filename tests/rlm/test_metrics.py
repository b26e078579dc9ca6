"""Kafka's tiered-storage metrics in Prometheus form: names, labels, aggregation and exposition."""

from __future__ import annotations

import math
import threading
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tierlog.rlm.metrics import METRICS, MetricKind, RemoteStorageMetrics, prometheus_name
from tierlog.rlm.quota import RLMQuotaManager

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]

BTM = "kafka_server_brokertopicmetrics_"
RLM = "kafka_log_remote_remotelogmanager_"
POOL = "kafka_log_remote_remotestoragethreadpool_"

# Written out by hand from Strimzi's rules, independently of metrics.prometheus_name.
EXPECTED_SAMPLE_NAMES = {
    # BrokerTopicMetrics meters (Count -> counter, "PerSec" dropped)
    BTM + "bytesin_total",
    BTM + "messagesin_total",
    BTM + "remotefetchbytes_total",
    BTM + "remotefetchrequests_total",
    BTM + "remotefetcherrors_total",
    BTM + "remotecopybytes_total",
    BTM + "remotecopyrequests_total",
    BTM + "remotecopyerrors_total",
    BTM + "remotedeleterequests_total",
    BTM + "remotedeleteerrors_total",
    BTM + "buildremotelogauxstaterequests_total",
    BTM + "buildremotelogauxstateerrors_total",
    # BrokerTopicMetrics gauges
    BTM + "remotecopylagbytes",
    BTM + "remotecopylagsegments",
    BTM + "remotedeletelagbytes",
    BTM + "remotedeletelagsegments",
    BTM + "remotelogmetadatacount",
    BTM + "remotelogsizebytes",
    BTM + "remotelogsizecomputationtime",
    # kafka.log.remote:type=RemoteLogManager
    RLM + "remotelogmanagertasksavgidle_percent",
    RLM + "retentionsizein_percent",
    RLM + "localretentionsizein_percent",
    RLM + "remotelogreaderfetchrateandtimems_bucket",
    RLM + "remotelogreaderfetchrateandtimems_count",
    RLM + "remotelogreaderfetchrateandtimems_sum",
    # kafka.log.remote:type=RemoteStorageThreadPool
    POOL + "remotelogreadertaskqueuesize",
    POOL + "remotelogreaderavgidle_percent",
    # kafka.log:type=Log, per partition
    "kafka_log_log_size",
    "kafka_log_log_logendoffset",
    "kafka_log_log_logstartoffset",
    "kafka_log_log_numlogsegments",
    # Expiry meters of the delayed remote operations
    "kafka_server_delayedremotefetchmetrics_expires_total",
    "kafka_server_delayedremotelistoffsetsmetrics_expires_total",
    # Kafka-metrics attributes (RLMQuotaMetrics, RLMQuotaManager)
    "kafka_server_remotelogmanager_remote_copy_throttle_time_avg",
    "kafka_server_remotelogmanager_remote_copy_throttle_time_max",
    "kafka_server_remotelogmanager_remote_fetch_throttle_time_avg",
    "kafka_server_remotelogmanager_remote_fetch_throttle_time_max",
    "kafka_server_rlmcopy_byte_rate",
    "kafka_server_rlmfetch_byte_rate",
}


def series(body: bytes) -> Series:
    out: Series = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(scraped: Series, name: str, **labels: str) -> float:
    return scraped[(name, frozenset(labels.items()))]


def names(scraped: Series) -> set[str]:
    return {name for name, _ in scraped}


class ManualClock:
    def __init__(self) -> None:
        self.now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def metrics() -> Iterator[RemoteStorageMetrics]:
    yield RemoteStorageMetrics()


def record_everything(metrics: RemoteStorageMetrics) -> None:
    metrics.record_copy("orders", 1000)
    metrics.record_copy_error("orders")
    metrics.record_fetch("orders", 300)
    metrics.record_fetch_error("orders")
    metrics.record_delete("orders")
    metrics.record_delete_error("orders")
    metrics.record_aux_state("orders")
    metrics.record_aux_state_error("orders")
    metrics.set_copy_lag("orders", 0, 4096, 2)
    metrics.set_delete_lag("orders", 0, 2048, 1)
    metrics.set_remote_log_size("orders", 0, 10_000, 7, 3.0)
    metrics.set_retention_percent("orders", 0, 55, 80)
    metrics.observe_reader_fetch(0.020)
    metrics.register_gauge_callback("RemoteLogManagerTasksAvgIdlePercent", {}, lambda: 0.75)
    metrics.register_gauge_callback("RemoteLogReaderTaskQueueSize", {}, lambda: 4)
    metrics.register_gauge_callback("RemoteLogReaderAvgIdlePercent", {}, lambda: 0.5)
    metrics.bind_quota(RLMQuotaManager("RLMCopy", 100))
    metrics.bind_quota(RLMQuotaManager("RLMFetch", 100))
    metrics.record_remote_fetch_expired()
    metrics.record_remote_list_offsets_expired("orders", 0)
    metrics.record_append("orders", 500, 4)
    for name in ("Size", "LogEndOffset", "LogStartOffset", "NumLogSegments"):
        metrics.register_gauge_callback(name, {"topic": "orders", "partition": 0}, lambda: 1)


# Names -----------------------------------------------------------------------------------------
def test_every_kafka_metric_is_exposed_under_its_dashboard_name(
    metrics: RemoteStorageMetrics,
) -> None:
    record_everything(metrics)
    exposed = names(series(metrics.expose()))
    assert exposed == EXPECTED_SAMPLE_NAMES  # all of them, and nothing unexpected
    # The catalogue names the same families (counters gain "_total", histograms three suffixes).
    families = {spec.prometheus for spec in METRICS}
    assert families == {
        n.removesuffix("_total").removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
        for n in EXPECTED_SAMPLE_NAMES
    }


def test_catalogue_keeps_the_kafka_mbean_next_to_each_name() -> None:
    by_kafka = {spec.kafka_name: spec for spec in METRICS}
    assert len({spec.mbean for spec in METRICS}) == len(METRICS) == 37
    spec = by_kafka["RemoteFetchBytesPerSec"]
    assert spec.mbean == (
        "kafka.server:type=BrokerTopicMetrics,name=RemoteFetchBytesPerSec,topic=<topic>"
    )
    assert spec.kind == "counter"
    assert "kafka.server:type=BrokerTopicMetrics,name=RemoteFetchBytesPerSec" in spec.help
    retention = by_kafka["RetentionSizeInPercent"]
    assert retention.mbean == (
        "kafka.log.remote:type=RemoteLogManager,name=RetentionSizeInPercent,"
        "topic=<topic>,partition=<partition>"
    )
    assert retention.labels == ("topic", "partition")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ("kafka.server", "BrokerTopicMetrics", "BytesInPerSec", "counter"),
            "kafka_server_brokertopicmetrics_bytesin",
        ),
        (
            ("kafka.server", "KafkaRequestHandlerPool", "RequestHandlerAvgIdlePercent", "gauge"),
            "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent",
        ),
        (
            ("kafka.server", "ReplicaManager", "UnderReplicatedPartitions", "gauge"),
            "kafka_server_replicamanager_underreplicatedpartitions",
        ),
    ],
)
def test_naming_rule_reproduces_known_strimzi_names(
    args: tuple[str, str, str, MetricKind], expected: str
) -> None:
    # Names Strimzi's dashboards query for core broker metrics, derived by the same rule.
    assert prometheus_name(*args) == expected


# Labels and aggregation ------------------------------------------------------------------------
def test_meters_per_topic_and_all_topics(metrics: RemoteStorageMetrics) -> None:
    metrics.record_copy("orders", 1000)
    metrics.record_copy("orders", 500)
    metrics.record_copy("payments", 250)
    scraped = series(metrics.expose())
    name = BTM + "remotecopybytes_total"
    assert value(scraped, name, topic="orders") == 1500
    assert value(scraped, name, topic="payments") == 250
    assert value(scraped, name) == 1750  # all topics: no topic label, the sum
    assert value(scraped, BTM + "remotecopyrequests_total", topic="orders") == 2
    assert value(scraped, BTM + "remotecopyrequests_total") == 3
    # Per-topic meters exist only once marked (lazily, as in Kafka); all-topics ones at once.
    assert value(scraped, BTM + "remotefetchbytes_total") == 0
    assert (BTM + "remotefetchbytes_total", frozenset({("topic", "orders")})) not in scraped


def test_requests_and_bytes_can_be_marked_apart(metrics: RemoteStorageMetrics) -> None:
    # Kafka marks a copy request before the upload and its bytes after FINISHED: a failed copy
    # is a request and an error, with no bytes. Fetches likewise.
    metrics.record_copy_request("orders")
    metrics.record_copy_error("orders")
    metrics.record_copy_request("orders")
    metrics.record_copy_bytes("orders", 700)
    metrics.record_fetch_request("orders")
    metrics.record_fetch_error("orders")
    metrics.record_fetch_bytes("orders", 0)
    scraped = series(metrics.expose())
    assert value(scraped, BTM + "remotecopyrequests_total", topic="orders") == 2
    assert value(scraped, BTM + "remotecopyerrors_total", topic="orders") == 1
    assert value(scraped, BTM + "remotecopybytes_total", topic="orders") == 700
    assert value(scraped, BTM + "remotefetchrequests_total", topic="orders") == 1
    assert value(scraped, BTM + "remotefetcherrors_total") == 1
    assert value(scraped, BTM + "remotefetchbytes_total") == 0


def test_partition_gauges_sum_into_topic_and_all_topics(metrics: RemoteStorageMetrics) -> None:
    metrics.set_copy_lag("orders", 0, 100, 1)
    metrics.set_copy_lag("orders", 1, 250, 3)
    metrics.set_copy_lag("payments", 0, 50, 1)
    metrics.set_copy_lag("orders", 0, 10, 1)  # a newer value replaces the partition's old one
    scraped = series(metrics.expose())
    assert value(scraped, BTM + "remotecopylagbytes", topic="orders") == 260
    assert value(scraped, BTM + "remotecopylagbytes", topic="payments") == 50
    assert value(scraped, BTM + "remotecopylagbytes") == 310
    assert value(scraped, BTM + "remotecopylagsegments") == 5
    # No partition label on BrokerTopicMetrics: Kafka aggregates partitions into the topic.
    lag_labels = {labels for name, labels in scraped if name == BTM + "remotecopylagbytes"}
    assert all("partition" not in dict(labels) for labels in lag_labels)
    # Every gauge of a known topic exists, at 0 until set (Kafka registers them eagerly).
    assert value(scraped, BTM + "remotelogsizebytes", topic="payments") == 0


def test_remote_log_size_and_retention_percent(metrics: RemoteStorageMetrics) -> None:
    metrics.set_remote_log_size("orders", 3, 10_000, 7, 12.5)
    metrics.set_retention_percent("orders", 3, 55, 80)
    scraped = series(metrics.expose())
    assert value(scraped, BTM + "remotelogsizebytes", topic="orders") == 10_000
    assert value(scraped, BTM + "remotelogmetadatacount", topic="orders") == 7
    assert value(scraped, BTM + "remotelogsizecomputationtime", topic="orders") == 12.5
    assert value(scraped, RLM + "retentionsizein_percent", topic="orders", partition="3") == 55
    assert value(scraped, RLM + "localretentionsizein_percent", topic="orders", partition="3") == 80


def test_remove_partition_takes_its_values_out(metrics: RemoteStorageMetrics) -> None:
    metrics.record_copy("orders", 1000)
    metrics.set_copy_lag("orders", 0, 100, 1)
    metrics.set_copy_lag("orders", 1, 250, 3)
    metrics.set_delete_lag("orders", 1, 70, 2)
    metrics.set_retention_percent("orders", 1, 55, 80)
    metrics.remove_partition("orders", 1)
    scraped = series(metrics.expose())
    assert value(scraped, BTM + "remotecopylagbytes", topic="orders") == 100
    assert value(scraped, BTM + "remotecopylagbytes") == 100
    assert value(scraped, BTM + "remotedeletelagsegments", topic="orders") == 0
    assert not any(name == RLM + "retentionsizein_percent" for name, _ in scraped)
    # Meters are per topic and survive a partition's removal, as in Kafka.
    assert value(scraped, BTM + "remotecopybytes_total", topic="orders") == 1000


def test_remove_topic_drops_its_series_but_not_the_all_topics_counts(
    metrics: RemoteStorageMetrics,
) -> None:
    metrics.record_copy("orders", 1000)
    metrics.record_copy("payments", 10)
    metrics.set_copy_lag("orders", 0, 100, 1)
    metrics.set_retention_percent("orders", 0, 55, 80)
    metrics.remove_topic("orders")
    scraped = series(metrics.expose())
    assert all(dict(labels).get("topic") != "orders" for _, labels in scraped)
    assert value(scraped, BTM + "remotecopybytes_total") == 1010  # counters never go back
    assert value(scraped, BTM + "remotecopylagbytes") == 0


def test_instances_do_not_share_state() -> None:
    first, second = RemoteStorageMetrics(), RemoteStorageMetrics()
    first.record_copy("orders", 1000)
    first.register_gauge_callback("RemoteLogReaderTaskQueueSize", {}, lambda: 9)
    scraped = series(second.expose())
    assert value(scraped, BTM + "remotecopybytes_total") == 0
    assert not any(name == POOL + "remotelogreadertaskqueuesize" for name, _ in scraped)
    assert value(series(first.expose()), BTM + "remotecopybytes_total") == 1000
    # Nothing leaks into prometheus_client's process-wide default registry either.
    assert b"brokertopicmetrics" not in generate_latest(REGISTRY)


def test_appends_are_counted_in_per_topic_and_all_topics(metrics: RemoteStorageMetrics) -> None:
    metrics.record_append("orders", 1000, 10)
    metrics.record_append("orders", 24, 1)
    metrics.record_append("payments", 76, 2)
    scraped = series(metrics.expose())
    assert value(scraped, BTM + "bytesin_total", topic="orders") == 1024
    assert value(scraped, BTM + "bytesin_total") == 1100
    assert value(scraped, BTM + "messagesin_total", topic="orders") == 11
    assert value(scraped, BTM + "messagesin_total", topic="payments") == 2
    assert value(scraped, BTM + "messagesin_total") == 13
    with pytest.raises(ValueError, match="cannot mark"):
        metrics.record_append("orders", -1, 1)


def test_log_gauges_are_per_partition_and_outlive_the_partitions_tiering(
    metrics: RemoteStorageMetrics,
) -> None:
    offsets = {0: 40, 1: 7}
    for p in list(offsets):
        labels = {"topic": "orders", "partition": p}
        metrics.register_gauge_callback("LogEndOffset", labels, lambda p=p: offsets[p])
        metrics.register_gauge_callback("Size", labels, lambda: 4096)
    scraped = series(metrics.expose())
    log_end = "kafka_log_log_logendoffset"
    assert value(scraped, log_end, topic="orders", partition="0") == 40
    assert value(scraped, log_end, topic="orders", partition="1") == 7
    # Kafka's Log MBeans are per partition: no topic sum, no all-partitions series.
    assert {labels for name, labels in scraped if name == log_end} == {
        frozenset({("topic", "orders"), ("partition", "0")}),
        frozenset({("topic", "orders"), ("partition", "1")}),
    }
    offsets[0] = 41  # read at each scrape
    metrics.remove_partition("orders", 1)  # tiering stopped: the log is still there
    scraped = series(metrics.expose())
    assert value(scraped, log_end, topic="orders", partition="0") == 41
    assert value(scraped, log_end, topic="orders", partition="1") == 7
    metrics.unregister_gauge_callback("LogEndOffset", {"topic": "orders", "partition": 1})
    metrics.remove_topic("orders")
    assert not any(name.startswith("kafka_log_log_") for name, _ in series(metrics.expose()))
    with pytest.raises(ValueError, match="labels"):
        metrics.register_gauge_callback("Size", {"topic": "orders"}, lambda: 1)


def test_expired_remote_operations_are_counted_as_kafka_does(
    metrics: RemoteStorageMetrics,
) -> None:
    fetch = "kafka_server_delayedremotefetchmetrics_expires_total"
    list_offsets = "kafka_server_delayedremotelistoffsetsmetrics_expires_total"
    scraped = series(metrics.expose())
    assert value(scraped, fetch) == 0 and value(scraped, list_offsets) == 0  # registered eagerly
    metrics.record_remote_fetch_expired()
    metrics.record_remote_fetch_expired()
    metrics.record_remote_list_offsets_expired("orders", 1)
    metrics.record_remote_list_offsets_expired("orders", 1)
    metrics.record_remote_list_offsets_expired("payments", 0)
    scraped = series(metrics.expose())
    # DelayedRemoteFetchMetrics has one meter; DelayedRemoteListOffsetsMetrics one in all and
    # one per partition.
    assert value(scraped, fetch) == 2
    assert [labels for name, labels in scraped if name == fetch] == [frozenset()]
    assert value(scraped, list_offsets) == 3
    assert value(scraped, list_offsets, topic="orders", partition="1") == 2
    assert value(scraped, list_offsets, topic="payments", partition="0") == 1
    metrics.remove_topic("orders")
    scraped = series(metrics.expose())
    assert (list_offsets, frozenset({("topic", "orders"), ("partition", "1")})) not in scraped
    assert value(scraped, list_offsets) == 3


# Callbacks, timer, quotas ----------------------------------------------------------------------
def test_gauge_callbacks_are_evaluated_at_scrape_time(metrics: RemoteStorageMetrics) -> None:
    queue = [3]
    metrics.register_gauge_callback("RemoteLogReaderTaskQueueSize", {}, lambda: queue[0])
    metrics.register_gauge_callback(
        "RemoteLogMetadataCount", {"topic": "orders", "partition": 0}, lambda: 11
    )
    metrics.set_remote_log_size("orders", 1, 0, 4, 0)
    assert value(series(metrics.expose()), POOL + "remotelogreadertaskqueuesize") == 3
    queue[0] = 8
    scraped = series(metrics.expose())
    assert value(scraped, POOL + "remotelogreadertaskqueuesize") == 8
    assert value(scraped, BTM + "remotelogmetadatacount", topic="orders") == 15  # 11 + 4
    assert value(scraped, BTM + "remotelogmetadatacount") == 15
    metrics.unregister_gauge_callback("RemoteLogReaderTaskQueueSize", {})
    metrics.unregister_gauge_callback("RemoteLogMetadataCount", {"topic": "orders", "partition": 0})
    scraped = series(metrics.expose())
    assert not any(name == POOL + "remotelogreadertaskqueuesize" for name, _ in scraped)
    assert value(scraped, BTM + "remotelogmetadatacount") == 4


def test_a_failing_callback_is_left_out_of_the_scrape(metrics: RemoteStorageMetrics) -> None:
    def broken() -> float:
        raise RuntimeError("pool closed")

    metrics.register_gauge_callback("RemoteLogReaderAvgIdlePercent", {}, broken)
    metrics.register_gauge_callback("RemoteLogReaderTaskQueueSize", {}, lambda: math.nan)
    metrics.record_copy("orders", 1)
    scraped = series(metrics.expose())
    assert not any(name.startswith(POOL) for name, _ in scraped)
    assert value(scraped, BTM + "remotecopybytes_total") == 1  # the rest of the scrape is served


def test_gauge_registration_is_checked(metrics: RemoteStorageMetrics) -> None:
    with pytest.raises(ValueError, match="not a gauge"):
        metrics.register_gauge_callback("RemoteCopyBytesPerSec", {}, lambda: 1)
    with pytest.raises(ValueError, match="labels"):
        metrics.register_gauge_callback("RemoteLogReaderTaskQueueSize", {"topic": "t"}, lambda: 1)
    with pytest.raises(ValueError, match="topic and partition"):
        metrics.register_gauge_callback("RemoteCopyLagBytes", {"topic": "t"}, lambda: 1)
    with pytest.raises(ValueError, match="negative"):
        metrics.record_copy("orders", -1)


def test_reader_fetch_time_histogram_in_milliseconds(metrics: RemoteStorageMetrics) -> None:
    for seconds in (0.001, 0.0011, 0.2, 45.0):
        metrics.observe_reader_fetch(seconds)
    scraped = series(metrics.expose())
    name = RLM + "remotelogreaderfetchrateandtimems"
    assert value(scraped, name + "_bucket", le="1.0") == 1  # le is inclusive
    assert value(scraped, name + "_bucket", le="2.5") == 2
    assert value(scraped, name + "_bucket", le="250.0") == 3
    assert value(scraped, name + "_bucket", le="30000.0") == 3
    assert value(scraped, name + "_bucket", le="+Inf") == 4
    assert value(scraped, name + "_count") == 4
    assert value(scraped, name + "_sum") == pytest.approx(45_202.1)


def test_histogram_buckets_are_validated() -> None:
    with pytest.raises(ValueError, match="increasing"):
        RemoteStorageMetrics(reader_fetch_buckets_ms=(10, 5))
    custom = RemoteStorageMetrics(reader_fetch_buckets_ms=(100,))
    custom.observe_reader_fetch(0.05)
    scraped = series(custom.expose())
    assert value(scraped, RLM + "remotelogreaderfetchrateandtimems_bucket", le="100.0") == 1


def test_quota_metrics_read_the_bound_managers(metrics: RemoteStorageMetrics) -> None:
    clock = ManualClock()
    copy = RLMQuotaManager("RLMCopy", 100, clock=clock)
    fetch = RLMQuotaManager("RLMFetch", 100, clock=clock)
    scraped = series(metrics.expose())
    assert not any("throttle_time" in name for name, _ in scraped)  # nothing bound yet
    metrics.bind_quota(copy)
    metrics.bind_quota(fetch)
    copy.record(500)
    copy.throttle_stats.record(4000)
    copy.throttle_stats.record(2000)
    scraped = series(metrics.expose())
    assert value(scraped, "kafka_server_rlmcopy_byte_rate") == 500.0
    assert value(scraped, "kafka_server_remotelogmanager_remote_copy_throttle_time_avg") == 3000
    assert value(scraped, "kafka_server_remotelogmanager_remote_copy_throttle_time_max") == 4000
    # Kafka's Avg and Max are NaN while the sensor has no sample.
    fetch_max = "kafka_server_remotelogmanager_remote_fetch_throttle_time_max"
    assert math.isnan(value(scraped, fetch_max))
    assert value(scraped, "kafka_server_rlmfetch_byte_rate") == 0.0


# Exposition ------------------------------------------------------------------------------------
def test_render_negotiates_the_format(metrics: RemoteStorageMetrics) -> None:
    metrics.record_copy("orders", 1)
    content_type, body = metrics.render()
    assert content_type.startswith("text/plain; version=0.0.4")
    assert body == metrics.expose()
    content_type, body = metrics.render("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    assert b'kafka_server_brokertopicmetrics_remotecopybytes_total{topic="orders"} 1.0' in body


def test_http_server_serves_the_registry(metrics: RemoteStorageMetrics) -> None:
    metrics.record_fetch("orders", 4096)
    server, thread = metrics.start_http_server(0, "127.0.0.1")
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            scraped = series(response.read())
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert value(scraped, BTM + "remotefetchbytes_total", topic="orders") == 4096
    assert value(scraped, BTM + "remotefetchrequests_total") == 1


def test_a_remote_read_records_what_the_separate_calls_record() -> None:
    """The reader's one-call ``record_remote_read`` (one lock hold per read) must leave exactly
    the series the separate request, bytes, error and time calls leave."""
    together = RemoteStorageMetrics()
    together.record_remote_read("orders", 300, 0.020, failed=False)
    together.record_remote_read("orders", 0, 0.004, failed=True)
    together.record_remote_read("audit", 70, 0.5, failed=False)
    apart = RemoteStorageMetrics()
    for topic, num_bytes, seconds, failed in (
        ("orders", 300, 0.020, False),
        ("orders", 0, 0.004, True),
        ("audit", 70, 0.5, False),
    ):
        apart.record_fetch_request(topic)
        apart.record_fetch_bytes(topic, num_bytes)
        if failed:
            apart.record_fetch_error(topic)
        apart.observe_reader_fetch(seconds)
    assert series(together.expose()) == series(apart.expose())
    got = series(together.expose())
    assert got[(BTM + "remotefetchrequests_total", frozenset({("topic", "orders")}))] == 2
    assert got[(BTM + "remotefetcherrors_total", frozenset())] == 1
    with pytest.raises(ValueError, match="RemoteFetchBytesPerSec"):
        together.record_remote_read("orders", -1, 0.0, failed=False)


def test_reads_recorded_from_many_threads_are_all_counted() -> None:
    """Reads are queued and folded in batches, by recording threads and by scrapes running at
    the same time: none may be lost or counted twice."""
    metrics = RemoteStorageMetrics()
    stop = threading.Event()

    def record_many(topic: str) -> None:
        for i in range(3000):
            metrics.record_remote_read(topic, i % 7, 0.001, failed=i % 10 == 0)

    def scrape() -> None:
        while not stop.is_set():
            metrics.expose()

    scraper = threading.Thread(target=scrape)
    scraper.start()
    threads = [threading.Thread(target=record_many, args=(f"t{i % 2}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    stop.set()
    scraper.join(30)
    got = series(metrics.expose())
    per_thread_bytes = sum(i % 7 for i in range(3000))
    assert value(got, BTM + "remotefetchrequests_total") == 18_000
    assert value(got, BTM + "remotefetchrequests_total", topic="t0") == 9_000
    assert value(got, BTM + "remotefetchbytes_total") == 6 * per_thread_bytes
    assert value(got, BTM + "remotefetcherrors_total") == 6 * 300
    assert value(got, RLM + "remotelogreaderfetchrateandtimems_count") == 18_000
