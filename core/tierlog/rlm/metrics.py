"""A node's Kafka metrics, exported for Prometheus under the names Kafka dashboards expect.

Mostly the tiered-storage families (``RemoteStorageMetrics``, the RLM's); beside them the log's
own, which a node records as a broker does: ``kafka.log:type=Log`` (size, offsets and segments of
each partition) and ``BrokerTopicMetrics`` ``BytesInPerSec`` / ``MessagesInPerSec``, so that a
dashboard shows what is written next to what is tiered.

A Kafka broker publishes these metrics as JMX MBeans; Prometheus usually scrapes them through the
JMX exporter with Strimzi's rule set (``packaging/examples/metrics/kafka-metrics.yaml``, with
``lowercaseOutputName: true``), which the Strimzi Grafana dashboards query. ``RemoteStorageMetrics``
emits what those rules would produce, so the same dashboards and alerts work on a tierlog node:

- Yammer meter ``kafka.<d>:type=<T>,name=<N>PerSec[,topic=<t>]``, attribute ``Count``:
  counter ``kafka_<d>_<t>_<n>_total`` (lowercased, ``PerSec`` dropped), label ``topic``.
- Yammer gauge ``kafka.<d>:type=<T>,name=<N>[,k=v...]``, attribute ``Value``: gauge
  ``kafka_<d>_<t>_<n>`` with the MBean's keys as labels; a name ending in ``Percent`` becomes
  ``kafka_<d>_<t>_<n without Percent>_percent``.
- Yammer timer ``...,name=<N>`` (milliseconds): histogram ``kafka_<d>_<t>_<n>`` in milliseconds.
  Strimzi turns the timer's ``Count`` into ``kafka_<d>_<t>_<n>_count``, which the histogram's
  ``_count`` series matches; percentiles come from ``histogram_quantile`` over ``_bucket``.
- Kafka-metrics attribute ``kafka.server:type=<group>`` ``<name>`` (as Strimzi's
  ``raft-metrics`` rule): gauge ``kafka_server_<group>_<name>``, dashes turned into underscores.

Strimzi's patterns start with ``kafka.(\\w+)``, which no ``kafka.log.remote`` MBean matches (they
are dropped by that exact config); the names below extend the same rules to a dotted domain by
turning its dots into underscores, as the JMX exporter sanitises any name. Strimzi's ``Percent``
rules take one key/value pair at most; the retention percentages keep both of theirs (``topic``,
``partition``). The copies of the two reader-pool gauges that Kafka still registers under the
deprecated ``org.apache.kafka.storage.internals.log`` domain (until 5.0) are not exported.

As in Kafka, the all-topics series carry no ``topic`` label, next to the per-topic series of the
same name. Partition-level gauge values of ``BrokerTopicMetrics`` are summed into their topic and
topics into the all-topics value (Kafka's ``BrokerTopicStats``/``GaugeWrapper``); no partition
label is exported for them. The ``kafka.log:type=Log`` gauges are per partition in Kafka (MBean
keys ``topic`` and ``partition``), and so are their series (Strimzi's ``topic=(.+),
partition=(.*)`` rule).

The mapping, Kafka MBean first (``[..]`` marks the all-topics form without the key):

- ``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec[,topic=t] (Count)``
  -> ``kafka_server_brokertopicmetrics_bytesin_total{[topic]}``
- ``kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec[,topic=t]``
  -> ``kafka_server_brokertopicmetrics_messagesin_total{[topic]}``
- ``kafka.log:type=Log,name=Size,topic=t,partition=p (Value)``
  -> ``kafka_log_log_size{topic,partition}``
- ``kafka.log:type=Log,name=LogEndOffset,topic=t,partition=p``
  -> ``kafka_log_log_logendoffset{topic,partition}``
- ``kafka.log:type=Log,name=LogStartOffset,topic=t,partition=p``
  -> ``kafka_log_log_logstartoffset{topic,partition}``
- ``kafka.log:type=Log,name=NumLogSegments,topic=t,partition=p``
  -> ``kafka_log_log_numlogsegments{topic,partition}``
- ``kafka.server:type=BrokerTopicMetrics,name=RemoteFetchBytesPerSec[,topic=t] (Count)``
  -> ``kafka_server_brokertopicmetrics_remotefetchbytes_total{[topic]}``
- ``kafka.server:type=BrokerTopicMetrics,name=RemoteFetchRequestsPerSec[,topic=t]``
  -> ``kafka_server_brokertopicmetrics_remotefetchrequests_total{[topic]}``
- ``kafka.server:type=BrokerTopicMetrics,name=RemoteFetchErrorsPerSec[,topic=t]``
  -> ``kafka_server_brokertopicmetrics_remotefetcherrors_total{[topic]}``
- ``kafka.server:type=BrokerTopicMetrics,name=RemoteCopyBytesPerSec[,topic=t]``
  -> ``kafka_server_brokertopicmetrics_remotecopybytes_total{[topic]}``
- ``kafka.server:type=BrokerTopicMetrics,name=RemoteCopyRequestsPerSec[,topic=t]``
  -> ``kafka_server_brokertopicmetrics_remotecopyrequests_total{[topic]}``
- ``kafka.server:type=BrokerTopicMetrics,name=RemoteCopyErrorsPerSec[,topic=t]``
  -> ``kafka_server_brokertopicmetrics_remotecopyerrors_total{[topic]}``
- ``kafka.server:type=BrokerTopicMetrics,name=RemoteDeleteRequestsPerSec[,topic=t]``
  -> ``kafka_server_brokertopicmetrics_remotedeleterequests_total{[topic]}``
- ``kafka.server:type=BrokerTopicMetrics,name=RemoteDeleteErrorsPerSec[,topic=t]``
  -> ``kafka_server_brokertopicmetrics_remotedeleteerrors_total{[topic]}``
- ``kafka.server:type=BrokerTopicMetrics,name=BuildRemoteLogAuxStateRequestsPerSec[,topic=t]``
  -> ``kafka_server_brokertopicmetrics_buildremotelogauxstaterequests_total{[topic]}``
- ``kafka.server:type=BrokerTopicMetrics,name=BuildRemoteLogAuxStateErrorsPerSec[,topic=t]``
  -> ``kafka_server_brokertopicmetrics_buildremotelogauxstateerrors_total{[topic]}``
- ``kafka.server:type=BrokerTopicMetrics,name=RemoteCopyLagBytes[,topic=t] (Value)``
  -> ``kafka_server_brokertopicmetrics_remotecopylagbytes{[topic]}``
- ``kafka.server:type=BrokerTopicMetrics,name=RemoteCopyLagSegments[,topic=t]``
  -> ``kafka_server_brokertopicmetrics_remotecopylagsegments{[topic]}``
- ``kafka.server:type=BrokerTopicMetrics,name=RemoteDeleteLagBytes[,topic=t]``
  -> ``kafka_server_brokertopicmetrics_remotedeletelagbytes{[topic]}``
- ``kafka.server:type=BrokerTopicMetrics,name=RemoteDeleteLagSegments[,topic=t]``
  -> ``kafka_server_brokertopicmetrics_remotedeletelagsegments{[topic]}``
- ``kafka.server:type=BrokerTopicMetrics,name=RemoteLogMetadataCount[,topic=t]``
  -> ``kafka_server_brokertopicmetrics_remotelogmetadatacount{[topic]}``
- ``kafka.server:type=BrokerTopicMetrics,name=RemoteLogSizeBytes[,topic=t]``
  -> ``kafka_server_brokertopicmetrics_remotelogsizebytes{[topic]}``
- ``kafka.server:type=BrokerTopicMetrics,name=RemoteLogSizeComputationTime[,topic=t]``
  -> ``kafka_server_brokertopicmetrics_remotelogsizecomputationtime{[topic]}``
- ``kafka.log.remote:type=RemoteLogManager,name=RemoteLogManagerTasksAvgIdlePercent``
  -> ``kafka_log_remote_remotelogmanager_remotelogmanagertasksavgidle_percent``
- ``kafka.log.remote:type=RemoteLogManager,name=RemoteLogReaderFetchRateAndTimeMs (timer)``
  -> ``kafka_log_remote_remotelogmanager_remotelogreaderfetchrateandtimems_{bucket,count,sum}``
- ``kafka.log.remote:type=RemoteLogManager,name=RetentionSizeInPercent,topic=t,partition=p``
  -> ``kafka_log_remote_remotelogmanager_retentionsizein_percent{topic,partition}``
- ``kafka.log.remote:type=RemoteLogManager,name=LocalRetentionSizeInPercent,topic=t,partition=p``
  -> ``kafka_log_remote_remotelogmanager_localretentionsizein_percent{topic,partition}``
- ``kafka.log.remote:type=RemoteStorageThreadPool,name=RemoteLogReaderTaskQueueSize``
  -> ``kafka_log_remote_remotestoragethreadpool_remotelogreadertaskqueuesize``
- ``kafka.log.remote:type=RemoteStorageThreadPool,name=RemoteLogReaderAvgIdlePercent``
  -> ``kafka_log_remote_remotestoragethreadpool_remotelogreaderavgidle_percent``
- ``kafka.server:type=DelayedRemoteFetchMetrics,name=ExpiresPerSec``
  -> ``kafka_server_delayedremotefetchmetrics_expires_total``
- ``kafka.server:type=DelayedRemoteListOffsetsMetrics,name=ExpiresPerSec[,topic=t,partition=p]``
  -> ``kafka_server_delayedremotelistoffsetsmetrics_expires_total{[topic,partition]}``
- ``kafka.server:type=RemoteLogManager, attribute remote-copy-throttle-time-avg``
  -> ``kafka_server_remotelogmanager_remote_copy_throttle_time_avg``
- ``kafka.server:type=RemoteLogManager, attribute remote-copy-throttle-time-max``
  -> ``kafka_server_remotelogmanager_remote_copy_throttle_time_max``
- ``kafka.server:type=RemoteLogManager, attribute remote-fetch-throttle-time-avg``
  -> ``kafka_server_remotelogmanager_remote_fetch_throttle_time_avg``
- ``kafka.server:type=RemoteLogManager, attribute remote-fetch-throttle-time-max``
  -> ``kafka_server_remotelogmanager_remote_fetch_throttle_time_max``
- ``kafka.server:type=RLMCopy, attribute byte-rate``
  -> ``kafka_server_rlmcopy_byte_rate``
- ``kafka.server:type=RLMFetch, attribute byte-rate``
  -> ``kafka_server_rlmfetch_byte_rate``

The ``*AvgIdlePercent`` gauges are fractions in [0, 1], as Kafka computes them, despite the name.
Each ``RemoteStorageMetrics`` owns its ``CollectorRegistry`` (never the process-wide default), so
several nodes or tests in one process keep separate metrics.
"""

from __future__ import annotations

import logging
import math
import threading
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import choose_encoder, start_http_server
from prometheus_client.metrics_core import HistogramMetricFamily, Metric

from tierlog.rlm.quota import RLMQuotaManager

__all__ = [
    "BROKER_TOPIC_GAUGES",
    "BROKER_TOPIC_METERS",
    "DEFAULT_READER_FETCH_BUCKETS_MS",
    "LOG_GAUGES",
    "METRICS",
    "MetricKind",
    "MetricSpec",
    "RemoteStorageMetrics",
    "prometheus_name",
]

_READS_FOLD_AT = 256
"""Remote reads queued by ``record_remote_read`` before the recording thread folds them."""

_LOG = logging.getLogger(__name__)

MetricKind = Literal["counter", "gauge", "histogram"]


def prometheus_name(domain: str, mbean_type: str, name: str, kind: MetricKind) -> str:
    """The series family name Strimzi's JMX-exporter rules give a Yammer metric (see above).

    Counters are returned without ``_total``: Prometheus client libraries append it.
    """
    base = "kafka_" + domain.removeprefix("kafka.").replace(".", "_") + "_" + mbean_type.lower()
    if kind == "counter" and name.endswith("PerSec"):
        return f"{base}_{name.removesuffix('PerSec').lower()}"
    if kind == "gauge" and "Percent" in name:
        return f"{base}_{name[: name.index('Percent')].lower()}_percent"
    return f"{base}_{name.lower()}"


@dataclass(frozen=True)
class MetricSpec:
    """One Kafka metric: its MBean, its Prometheus family, its kind and its labels."""

    kafka_name: str
    mbean: str
    prometheus: str
    kind: MetricKind
    labels: tuple[str, ...]
    help: str


def _yammer(
    domain: str, mbean_type: str, name: str, kind: MetricKind, *, labels: tuple[str, ...], doc: str
) -> MetricSpec:
    mbean = f"{domain}:type={mbean_type},name={name}"
    if labels:
        mbean += "," + ",".join(f"{label}=<{label}>" for label in labels)
    return MetricSpec(
        name,
        mbean,
        prometheus_name(domain, mbean_type, name, kind),
        kind,
        labels,
        f"{doc} (Kafka {mbean})",
    )


_BTM = ("kafka.server", "BrokerTopicMetrics")
_RLM = ("kafka.log.remote", "RemoteLogManager")
_POOL = ("kafka.log.remote", "RemoteStorageThreadPool")
_LOG_MBEAN = ("kafka.log", "Log")

BROKER_TOPIC_METERS: dict[str, MetricSpec] = {
    spec.kafka_name: spec
    for spec in (
        _yammer(*_BTM, name, "counter", labels=("topic",), doc=doc)
        for name, doc in (
            ("BytesInPerSec", "Bytes appended to the partitions' logs as leader"),
            ("MessagesInPerSec", "Records appended to the partitions' logs as leader"),
            ("RemoteFetchBytesPerSec", "Bytes read from remote storage"),
            ("RemoteFetchRequestsPerSec", "Remote-storage reads started"),
            ("RemoteFetchErrorsPerSec", "Remote-storage reads that failed"),
            ("RemoteCopyBytesPerSec", "Bytes of segments copied to remote storage"),
            ("RemoteCopyRequestsPerSec", "Segment copies to remote storage started"),
            ("RemoteCopyErrorsPerSec", "Segment copies to remote storage that failed"),
            ("RemoteDeleteRequestsPerSec", "Remote segment deletions"),
            ("RemoteDeleteErrorsPerSec", "Remote segment deletions that failed"),
            ("BuildRemoteLogAuxStateRequestsPerSec", "Follower rebuilds of remote aux state"),
            ("BuildRemoteLogAuxStateErrorsPerSec", "Follower rebuilds of aux state that failed"),
        )
    )
}
"""Kafka's meters of ``BrokerTopicMetrics`` (per topic and all topics): bytes and messages in,
and those of remote storage."""

BROKER_TOPIC_GAUGES: dict[str, MetricSpec] = {
    spec.kafka_name: spec
    for spec in (
        _yammer(*_BTM, name, "gauge", labels=("topic",), doc=doc)
        for name, doc in (
            ("RemoteCopyLagBytes", "Bytes of local segments not yet copied (active excluded)"),
            ("RemoteCopyLagSegments", "Local segments not yet copied (active excluded)"),
            ("RemoteDeleteLagBytes", "Bytes of remote segments waiting to be deleted"),
            ("RemoteDeleteLagSegments", "Remote segments waiting to be deleted"),
            ("RemoteLogMetadataCount", "Remote segment metadata entries"),
            ("RemoteLogSizeBytes", "Bytes of remote segments (copy finished or delete started)"),
            ("RemoteLogSizeComputationTime", "Milliseconds spent computing the remote log size"),
        )
    )
}
"""Kafka's remote-storage gauges of ``BrokerTopicMetrics``: partition values summed per topic."""

LOG_GAUGES: dict[str, MetricSpec] = {
    spec.kafka_name: spec
    for spec in (
        _yammer(*_LOG_MBEAN, name, "gauge", labels=("topic", "partition"), doc=doc)
        for name, doc in (
            ("Size", "Bytes of the partition's local log segments"),
            ("LogEndOffset", "Offset of the partition's next record"),
            ("LogStartOffset", "First offset of the partition (remote storage included)"),
            ("NumLogSegments", "Local log segments of the partition"),
        )
    )
}
"""Kafka's ``UnifiedLog`` gauges (``kafka.log:type=Log``), one series per partition; the node
registers a callback for each (``register_gauge_callback``)."""

_LABELLED_GAUGES: dict[str, MetricSpec] = {
    **LOG_GAUGES,
    **{
        spec.kafka_name: spec
        for spec in (
            _yammer(
                *_RLM,
                "RemoteLogManagerTasksAvgIdlePercent",
                "gauge",
                labels=(),
                doc="Idle fraction of the copier thread pool",
            ),
            _yammer(
                *_RLM,
                "RetentionSizeInPercent",
                "gauge",
                labels=("topic", "partition"),
                doc="Total (local + remote) log size as a percentage of retention.bytes",
            ),
            _yammer(
                *_RLM,
                "LocalRetentionSizeInPercent",
                "gauge",
                labels=("topic", "partition"),
                doc="Local log size as a percentage of local.retention.bytes",
            ),
            _yammer(
                *_POOL,
                "RemoteLogReaderTaskQueueSize",
                "gauge",
                labels=(),
                doc="Remote reads waiting for a reader thread",
            ),
            _yammer(
                *_POOL,
                "RemoteLogReaderAvgIdlePercent",
                "gauge",
                labels=(),
                doc="Idle fraction of the remote-log reader pool",
            ),
        )
    },
}

_READER_FETCH = _yammer(
    *_RLM,
    "RemoteLogReaderFetchRateAndTimeMs",
    "histogram",
    labels=(),
    doc="Milliseconds spent by one remote read",
)


_DELAYED_OPERATION_METERS: dict[str, MetricSpec] = {
    spec.mbean.split(",")[0]: spec
    for spec in (
        _yammer(
            "kafka.server",
            "DelayedRemoteFetchMetrics",
            "ExpiresPerSec",
            "counter",
            labels=(),
            doc="Remote fetches not done within remote.fetch.max.wait.ms, answered with no records",
        ),
        _yammer(
            "kafka.server",
            "DelayedRemoteListOffsetsMetrics",
            "ExpiresPerSec",
            "counter",
            labels=("topic", "partition"),
            doc="Remote ListOffsets not done within remote.list.offsets.request.timeout.ms, "
            "answered REQUEST_TIMED_OUT",
        ),
    )
}
"""The expiry meters of Kafka's delayed remote operations, keyed by MBean type: an all-topics
count and, where Kafka has them, one per partition (``topic``, ``partition``)."""
_EXPIRED_FETCH = "kafka.server:type=DelayedRemoteFetchMetrics"
_EXPIRED_LIST_OFFSETS = "kafka.server:type=DelayedRemoteListOffsetsMetrics"


def _kafka_metric(group: str, attribute: str, doc: str) -> MetricSpec:
    """A Kafka-metrics (not Yammer) attribute of ``kafka.server:type=<group>``."""
    mbean = f"kafka.server:type={group}"
    return MetricSpec(
        attribute,
        f"{mbean} ({attribute})",
        f"kafka_server_{group.lower()}_{attribute.replace('-', '_')}",
        "gauge",
        (),
        f"{doc} (Kafka {mbean} attribute {attribute})",
    )


def _quota_specs(quota_type: str, sensor: str, what: str) -> tuple[MetricSpec, ...]:
    """``<sensor>-avg``, ``<sensor>-max`` (RLMQuotaMetrics) and the quota's ``byte-rate``."""
    return (
        _kafka_metric(
            "RemoteLogManager", f"{sensor}-avg", f"Average time in ms remote {what} were throttled"
        ),
        _kafka_metric(
            "RemoteLogManager", f"{sensor}-max", f"Maximum time in ms remote {what} were throttled"
        ),
        _kafka_metric(quota_type, "byte-rate", f"Measured byte rate of remote {what}"),
    )


_QUOTA_SPECS: dict[str, tuple[MetricSpec, ...]] = {
    "RLMCopy": _quota_specs("RLMCopy", "remote-copy-throttle-time", "copies"),
    "RLMFetch": _quota_specs("RLMFetch", "remote-fetch-throttle-time", "fetches"),
}

METRICS: tuple[MetricSpec, ...] = (
    *BROKER_TOPIC_METERS.values(),
    *BROKER_TOPIC_GAUGES.values(),
    *_LABELLED_GAUGES.values(),
    *_DELAYED_OPERATION_METERS.values(),
    _READER_FETCH,
    *(spec for specs in _QUOTA_SPECS.values() for spec in specs),
)
"""Every metric this module exports, with its Kafka MBean."""

DEFAULT_READER_FETCH_BUCKETS_MS: tuple[float, ...] = (
    1,
    2.5,
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1000,
    2500,
    5000,
    10000,
    30000,
)
"""Upper bounds (ms) of the remote-read time histogram: object-store reads take 10 ms to seconds."""

GaugeValue = float | Callable[[], float]


class RemoteStorageMetrics:
    """The tiered-storage metrics of one node, in a registry of its own. Thread-safe.

    Record methods mirror where Kafka marks its meters and sets its gauges; gauge values may
    instead come from callbacks evaluated at scrape time (``register_gauge_callback``).
    """

    def __init__(
        self, *, reader_fetch_buckets_ms: Sequence[float] = DEFAULT_READER_FETCH_BUCKETS_MS
    ) -> None:
        bounds = [float(b) for b in reader_fetch_buckets_ms]
        if not bounds or bounds != sorted(set(bounds)) or not all(map(math.isfinite, bounds)):
            raise ValueError("reader_fetch_buckets_ms must be finite, increasing and non-empty")
        self._lock = threading.Lock()
        self._meters_all: dict[str, float] = dict.fromkeys(BROKER_TOPIC_METERS, 0.0)
        self._meters_topic: dict[str, dict[str, float]] = {name: {} for name in BROKER_TOPIC_METERS}
        # Topics whose BrokerTopicMetrics exist: Kafka registers their gauges eagerly (value 0).
        self._topics: set[str] = set()
        self._partition_gauges: dict[str, dict[tuple[str, int], GaugeValue]] = {
            name: {} for name in BROKER_TOPIC_GAUGES
        }
        self._labelled: dict[str, dict[tuple[tuple[str, str], ...], GaugeValue]] = {
            name: {} for name in _LABELLED_GAUGES
        }
        self._delayed_all: dict[str, float] = dict.fromkeys(_DELAYED_OPERATION_METERS, 0.0)
        self._delayed_labelled: dict[str, dict[tuple[tuple[str, str], ...], float]] = {
            key: {} for key in _DELAYED_OPERATION_METERS
        }
        self._bucket_bounds = bounds
        self._bucket_counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self._fetch_time_sum_ms = 0.0
        self._reads: deque[tuple[str, int, float, bool]] = deque()  # see record_remote_read
        self._quotas: dict[str, RLMQuotaManager] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    # Meters ---------------------------------------------------------------------------------------
    def record_append(self, topic: str, num_bytes: int, num_messages: int) -> None:
        """A leader appended ``num_messages`` records in ``num_bytes`` of batches to a partition
        of ``topic`` (``BytesInPerSec`` and ``MessagesInPerSec``, marked as Kafka's
        ``ReplicaManager`` marks them after each append: the request's bytes, the records
        appended)."""
        if num_bytes < 0 or num_messages < 0:
            raise ValueError(f"an append cannot mark {num_bytes} bytes, {num_messages} messages")
        with self._lock:
            self._topics.add(topic)
            for name, amount in (("BytesInPerSec", num_bytes), ("MessagesInPerSec", num_messages)):
                per_topic = self._meters_topic[name]
                per_topic[topic] = per_topic.get(topic, 0.0) + amount
                self._meters_all[name] += amount

    def record_copy(self, topic: str, num_bytes: int) -> None:
        """A segment copy finished: ``RemoteCopyRequestsPerSec`` + ``RemoteCopyBytesPerSec``.

        Shorthand for ``record_copy_request`` and ``record_copy_bytes``. Kafka marks the request
        just before calling the RSM (a failed copy is a request too) and the bytes once the
        COPY_SEGMENT_FINISHED metadata is published; use the two methods to keep that split.
        """
        self.record_copy_request(topic)
        self.record_copy_bytes(topic, num_bytes)

    def record_copy_request(self, topic: str) -> None:
        """An upload to the RSM starts (``RemoteCopyRequestsPerSec``)."""
        self._mark(topic, "RemoteCopyRequestsPerSec", 1)

    def record_copy_bytes(self, topic: str, num_bytes: int) -> None:
        """A segment of ``num_bytes`` is now fully in remote storage (``RemoteCopyBytesPerSec``)."""
        self._mark(topic, "RemoteCopyBytesPerSec", num_bytes)

    def record_copy_error(self, topic: str) -> None:
        """A segment copy failed (``RemoteCopyErrorsPerSec``)."""
        self._mark(topic, "RemoteCopyErrorsPerSec", 1)

    def record_fetch(self, topic: str, num_bytes: int) -> None:
        """A remote read returned ``num_bytes``: ``RemoteFetchRequestsPerSec`` + ``...BytesPerSec``.

        Shorthand for ``record_fetch_request`` and ``record_fetch_bytes``. Kafka marks the
        request when the read is submitted to the reader pool (``RemoteLogReader``'s
        constructor), so failed reads count as requests too; use the two methods for that.
        """
        self.record_fetch_request(topic)
        self.record_fetch_bytes(topic, num_bytes)

    def record_remote_read(
        self, topic: str, num_bytes: int, seconds: float, *, failed: bool
    ) -> None:
        """One remote read ended: a fetch request, the ``num_bytes`` it returned, an error if
        it ``failed``, and its time in ``RemoteLogReaderFetchRateAndTimeMs``.

        Queued, not applied: every remote read records here, so recording is one append (no
        lock, a handful of objects touched); the queue is folded into the meters by every
        scrape (``collect``) and whenever it holds ``_READS_FOLD_AT`` reads, so nothing is
        lost and no scrape misses a read that ended before it.
        """
        if num_bytes < 0:
            raise ValueError(f"RemoteFetchBytesPerSec cannot be marked with {num_bytes}")
        reads = self._reads
        reads.append((topic, num_bytes, seconds, failed))
        if len(reads) >= _READS_FOLD_AT:
            with self._lock:
                self._fold_reads_locked()

    def _fold_reads_locked(self) -> None:
        """Apply the queued remote reads (the caller holds the lock; ``append`` is atomic, so a
        read recorded meanwhile is folded now or by the next fold)."""
        reads = self._reads
        meters = self._meters_topic
        totals = self._meters_all
        requests = meters["RemoteFetchRequestsPerSec"]
        fetched = meters["RemoteFetchBytesPerSec"]
        errors = meters["RemoteFetchErrorsPerSec"]
        bounds = self._bucket_bounds
        counts = self._bucket_counts
        while reads:  # every fold holds the lock: nothing else pops
            topic, num_bytes, seconds, failed = reads.popleft()
            self._topics.add(topic)
            requests[topic] = requests.get(topic, 0.0) + 1
            fetched[topic] = fetched.get(topic, 0.0) + num_bytes
            totals["RemoteFetchRequestsPerSec"] += 1
            totals["RemoteFetchBytesPerSec"] += num_bytes
            if failed:
                errors[topic] = errors.get(topic, 0.0) + 1
                totals["RemoteFetchErrorsPerSec"] += 1
            millis = seconds * 1000.0
            counts[bisect_left(bounds, millis)] += 1
            self._fetch_time_sum_ms += millis

    def record_fetch_request(self, topic: str) -> None:
        """A remote read is submitted (``RemoteFetchRequestsPerSec``)."""
        self._mark(topic, "RemoteFetchRequestsPerSec", 1)

    def record_fetch_bytes(self, topic: str, num_bytes: int) -> None:
        """A remote read returned ``num_bytes`` (``RemoteFetchBytesPerSec``)."""
        self._mark(topic, "RemoteFetchBytesPerSec", num_bytes)

    def record_fetch_error(self, topic: str) -> None:
        """A remote read failed (``RemoteFetchErrorsPerSec``; not for OffsetOutOfRange)."""
        self._mark(topic, "RemoteFetchErrorsPerSec", 1)

    def record_delete(self, topic: str) -> None:
        """A remote segment deletion starts (``RemoteDeleteRequestsPerSec``; Kafka marks it once
        DELETE_SEGMENT_STARTED is published, before the RSM call)."""
        self._mark(topic, "RemoteDeleteRequestsPerSec", 1)

    def record_delete_error(self, topic: str) -> None:
        """A remote segment deletion failed (``RemoteDeleteErrorsPerSec``)."""
        self._mark(topic, "RemoteDeleteErrorsPerSec", 1)

    def record_aux_state(self, topic: str) -> None:
        """A follower rebuilt its aux state from remote storage (``BuildRemoteLogAuxState...``)."""
        self._mark(topic, "BuildRemoteLogAuxStateRequestsPerSec", 1)

    def record_aux_state_error(self, topic: str) -> None:
        """Rebuilding the aux state failed (``BuildRemoteLogAuxStateErrorsPerSec``)."""
        self._mark(topic, "BuildRemoteLogAuxStateErrorsPerSec", 1)

    def record_remote_fetch_expired(self) -> None:
        """A fetch's remote read did not complete within ``remote.fetch.max.wait.ms`` and the
        fetch was answered without its records (Kafka's ``DelayedRemoteFetch.onExpiration``:
        ``kafka.server:type=DelayedRemoteFetchMetrics,name=ExpiresPerSec``)."""
        with self._lock:
            self._delayed_all[_EXPIRED_FETCH] += 1

    def record_remote_list_offsets_expired(self, topic: str, partition: int) -> None:
        """A ListOffsets by timestamp did not complete its remote search within
        ``remote.list.offsets.request.timeout.ms`` (Kafka's
        ``DelayedRemoteListOffsetsMetrics.recordExpiration``: the all-partitions meter and the
        partition's)."""
        key = _partition_labels(topic, partition)
        with self._lock:
            self._delayed_all[_EXPIRED_LIST_OFFSETS] += 1
            per_partition = self._delayed_labelled[_EXPIRED_LIST_OFFSETS]
            per_partition[key] = per_partition.get(key, 0.0) + 1

    def _mark(self, topic: str, name: str, amount: float) -> None:
        if amount < 0:
            raise ValueError(f"{name} cannot be marked with a negative amount ({amount})")
        with self._lock:
            self._topics.add(topic)
            per_topic = self._meters_topic[name]
            per_topic[topic] = per_topic.get(topic, 0.0) + amount
            self._meters_all[name] += amount

    # Gauges ---------------------------------------------------------------------------------------
    def set_copy_lag(self, topic: str, partition: int, num_bytes: int, segments: int) -> None:
        """``RemoteCopyLagBytes`` / ``RemoteCopyLagSegments`` of one partition (0 when reset)."""
        self._set_partition(
            topic, partition, RemoteCopyLagBytes=num_bytes, RemoteCopyLagSegments=segments
        )

    def set_delete_lag(self, topic: str, partition: int, num_bytes: int, segments: int) -> None:
        """``RemoteDeleteLagBytes`` / ``RemoteDeleteLagSegments`` of one partition."""
        self._set_partition(
            topic, partition, RemoteDeleteLagBytes=num_bytes, RemoteDeleteLagSegments=segments
        )

    def set_remote_log_size(
        self, topic: str, partition: int, num_bytes: int, count: int, computation_ms: float
    ) -> None:
        """``RemoteLogSizeBytes``, ``RemoteLogMetadataCount``, ``RemoteLogSizeComputationTime``."""
        self._set_partition(
            topic,
            partition,
            RemoteLogSizeBytes=num_bytes,
            RemoteLogMetadataCount=count,
            RemoteLogSizeComputationTime=computation_ms,
        )

    def set_retention_percent(
        self,
        topic: str,
        partition: int,
        retention_size_percent: int,
        local_retention_size_percent: int,
    ) -> None:
        """``RetentionSizeInPercent`` and ``LocalRetentionSizeInPercent`` of one partition.

        Kafka registers them when the partition's expiration task first runs and reports 0
        where ``retention.bytes`` / ``local.retention.bytes`` is not positive.
        """
        key = _partition_labels(topic, partition)
        with self._lock:
            self._labelled["RetentionSizeInPercent"][key] = float(retention_size_percent)
            self._labelled["LocalRetentionSizeInPercent"][key] = float(local_retention_size_percent)

    def _set_partition(self, topic: str, partition: int, **values: float) -> None:
        with self._lock:
            self._topics.add(topic)
            for name, value in values.items():
                self._partition_gauges[name][(topic, partition)] = float(value)

    def register_gauge_callback(
        self, name: str, labels: Mapping[str, str | int], fn: Callable[[], float]
    ) -> None:
        """Compute gauge ``name`` (its Kafka name) with ``fn`` at every scrape.

        ``labels`` are the MBean's keys: none for the pool gauges
        (``RemoteLogManagerTasksAvgIdlePercent``, ``RemoteLogReaderTaskQueueSize``,
        ``RemoteLogReaderAvgIdlePercent``); ``topic`` and ``partition`` for the retention
        percentages, for the log's gauges (``LOG_GAUGES``: ``Size``, ``LogEndOffset``,
        ``LogStartOffset``, ``NumLogSegments``) and for the ``BrokerTopicMetrics`` gauges, whose
        callback gives one
        partition's value to be summed into its topic (e.g. ``RemoteLogMetadataCount`` read from
        the RLMM). A later registration, or a ``set_*`` call, replaces it. A callback that
        raises or returns NaN is left out of that scrape.
        """
        if name in BROKER_TOPIC_GAUGES:
            if set(labels) != {"topic", "partition"}:
                raise ValueError(f"{name} needs exactly the labels topic and partition")
            topic, partition = str(labels["topic"]), int(labels["partition"])
            with self._lock:
                self._topics.add(topic)
                self._partition_gauges[name][(topic, partition)] = fn
            return
        spec = _LABELLED_GAUGES.get(name)
        if spec is None:
            raise ValueError(f"{name!r} is not a gauge of RemoteStorageMetrics")
        if set(labels) != set(spec.labels):
            raise ValueError(f"{name} needs exactly the labels {list(spec.labels)}")
        with self._lock:
            self._labelled[name][_label_key(labels)] = fn

    def unregister_gauge_callback(self, name: str, labels: Mapping[str, str | int]) -> None:
        """Drop the gauge registered under ``name`` and ``labels`` (no error if absent)."""
        with self._lock:
            if name in BROKER_TOPIC_GAUGES and {"topic", "partition"} <= set(labels):
                key = (str(labels["topic"]), int(labels["partition"]))
                self._partition_gauges[name].pop(key, None)
            elif name in _LABELLED_GAUGES:
                self._labelled[name].pop(_label_key(labels), None)

    # Timer ----------------------------------------------------------------------------------------
    def observe_reader_fetch(self, seconds: float) -> None:
        """One remote read took ``seconds`` (``RemoteLogReaderFetchRateAndTimeMs``, in ms)."""
        millis = seconds * 1000.0
        with self._lock:
            self._bucket_counts[bisect_left(self._bucket_bounds, millis)] += 1
            self._fetch_time_sum_ms += millis

    # Quotas ---------------------------------------------------------------------------------------
    def bind_quota(self, quota: RLMQuotaManager) -> None:
        """Export a quota's ``byte-rate`` and its throttle-time sensor (``*-avg``, ``*-max``).

        Both are read at scrape time. Binding another manager of the same type replaces it.
        """
        with self._lock:
            self._quotas[quota.quota_type] = quota

    # Removal --------------------------------------------------------------------------------------
    def remove_partition(self, topic: str, partition: int) -> None:
        """Forget a partition this node no longer leads (Kafka's ``stopPartitions`` and
        leadership loss: ``removeRemoteTopicPartitionMetrics`` and the expiration task's
        ``cancel``). Its gauge values leave the topic and all-topics sums; the topic's meters
        stay, as in Kafka. The ``kafka.log:type=Log`` gauges are the log's, not tiering's: they
        stay until their owner unregisters them (a partition whose tiering stops still has a
        log)."""
        key = _partition_labels(topic, partition)
        with self._lock:
            for values in self._partition_gauges.values():
                values.pop((topic, partition), None)
            for name in ("RetentionSizeInPercent", "LocalRetentionSizeInPercent"):
                self._labelled[name].pop(key, None)

    def remove_topic(self, topic: str) -> None:
        """Forget a topic entirely (``BrokerTopicStats.removeMetrics`` when the node holds no
        partition of it any more): every series labelled with it. All-topics counters keep what
        the topic contributed."""
        with self._lock:
            self._fold_reads_locked()  # the topic's reads count in the all-topics meters
            self._topics.discard(topic)
            for per_topic in self._meters_topic.values():
                per_topic.pop(topic, None)
            for values in self._partition_gauges.values():
                for key in [k for k in values if k[0] == topic]:
                    del values[key]
            for labelled in self._labelled.values():
                for label_key in [k for k in labelled if dict(k).get("topic") == topic]:
                    del labelled[label_key]
            for per_partition in self._delayed_labelled.values():
                for label_key in [k for k in per_partition if dict(k).get("topic") == topic]:
                    del per_partition[label_key]

    # Exposition -----------------------------------------------------------------------------------
    def expose(self) -> bytes:
        """The registry in Prometheus text format 0.0.4."""
        return generate_latest(self.registry)

    def render(self, accept_header: str | None = None) -> tuple[str, bytes]:
        """``(content_type, body)`` for an HTTP scrape, negotiating OpenMetrics via ``Accept``."""
        encoder, content_type = choose_encoder(accept_header or "")
        return content_type, encoder(self.registry)

    def start_http_server(
        self, port: int, addr: str = "0.0.0.0"
    ) -> tuple[WSGIServer, threading.Thread]:
        """Serve this registry on ``addr:port`` from a daemon thread (port 0 picks a free one).

        Stop it with ``server.shutdown(); server.server_close()``.
        """
        return start_http_server(port, addr, registry=self.registry)

    def collect(self) -> Iterable[Metric]:
        """Build every family (``prometheus_client`` Collector protocol).

        State is copied under the lock; callbacks run outside it, so a callback may take its
        own locks without risking a deadlock with a thread that records.
        """
        with self._lock:
            self._fold_reads_locked()
            meters_all = dict(self._meters_all)
            meters_topic = {name: dict(v) for name, v in self._meters_topic.items()}
            topics = set(self._topics)
            partition_gauges = {name: dict(v) for name, v in self._partition_gauges.items()}
            labelled = {name: dict(v) for name, v in self._labelled.items()}
            delayed_all = dict(self._delayed_all)
            delayed_labelled = {key: dict(v) for key, v in self._delayed_labelled.items()}
            bucket_counts = list(self._bucket_counts)
            fetch_sum = self._fetch_time_sum_ms
            quotas = dict(self._quotas)

        families: list[Metric] = []
        for name, spec in BROKER_TOPIC_METERS.items():
            family = Metric(spec.prometheus, spec.help, "counter")
            sample = spec.prometheus + "_total"
            family.add_sample(sample, {}, meters_all[name])
            for topic in sorted(meters_topic[name]):
                family.add_sample(sample, {"topic": topic}, meters_topic[name][topic])
            families.append(family)

        for name, spec in BROKER_TOPIC_GAUGES.items():
            per_topic = dict.fromkeys(topics, 0.0)
            for (topic, _partition), value in partition_gauges[name].items():
                resolved = _resolve(value, name)
                if resolved is not None:
                    per_topic[topic] = per_topic.get(topic, 0.0) + resolved
            family = Metric(spec.prometheus, spec.help, "gauge")
            family.add_sample(spec.prometheus, {}, sum(per_topic.values(), 0.0))
            for topic in sorted(per_topic):
                family.add_sample(spec.prometheus, {"topic": topic}, per_topic[topic])
            families.append(family)

        for name, spec in _LABELLED_GAUGES.items():
            family = Metric(spec.prometheus, spec.help, "gauge")
            for label_key in sorted(labelled[name]):
                resolved = _resolve(labelled[name][label_key], name)
                if resolved is not None:
                    family.add_sample(spec.prometheus, dict(label_key), resolved)
            families.append(family)

        for key, spec in _DELAYED_OPERATION_METERS.items():
            family = Metric(spec.prometheus, spec.help, "counter")
            sample = spec.prometheus + "_total"
            family.add_sample(sample, {}, delayed_all[key])
            for label_key in sorted(delayed_labelled[key]):
                family.add_sample(sample, dict(label_key), delayed_labelled[key][label_key])
            families.append(family)

        cumulative = 0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip([*self._bucket_bounds, math.inf], bucket_counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == math.inf else repr(bound), float(cumulative)))
        families.append(
            HistogramMetricFamily(
                _READER_FETCH.prometheus, _READER_FETCH.help, buckets=buckets, sum_value=fetch_sum
            )
        )

        for quota_type, quota in sorted(quotas.items()):
            readers = (quota.throttle_stats.avg, quota.throttle_stats.max, quota.byte_rate)
            for spec, read in zip(_QUOTA_SPECS[quota_type], readers, strict=True):
                family = Metric(spec.prometheus, spec.help, "gauge")
                family.add_sample(spec.prometheus, {}, read())
                families.append(family)
        return families


def _partition_labels(topic: str, partition: int) -> tuple[tuple[str, str], ...]:
    return _label_key({"topic": topic, "partition": partition})


def _label_key(labels: Mapping[str, str | int]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((key, str(value)) for key, value in labels.items()))


def _resolve(value: GaugeValue, name: str) -> float | None:
    if not callable(value):
        return value
    try:
        result = float(value())
    except Exception:
        _LOG.debug("Gauge callback for %s failed; left out of this scrape", name, exc_info=True)
        return None
    return None if math.isnan(result) else result
