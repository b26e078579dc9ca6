"""``TierlogClient``: a node's HTTP API (``tierlog.node.http_api``) from Python, stdlib only.

The methods mirror ``Node``'s (``create_topic``, ``produce``, ``append_batches``, ``fetch``,
``list_offsets``, ``status``, ``compact``...) and return the same types (but ``compact``: the
round's summary as JSON), so code written against an embedded ``Node`` runs against a remote
one::

    client = TierlogClient("http://127.0.0.1:8405")
    client.create_topic("events", partitions=3, configs={"remote.storage.enable": "true"})
    client.produce("events", [b"hello", (b"key", b"value")])
    result = client.fetch("events", 0, offset=0)  # FetchResult, records decoded

Fetches ask for the raw batches (``application/vnd.kafka.batches``) and decode them here with
``decode_fetched``: the node neither decodes nor re-encodes records, and compressed batches cross
the network compressed. Errors are raised again as the tierlog exception the node raised
(``UnknownTopicError``, ``OffsetOutOfRangeError``, ``RetriableRemoteStorageException``...,
``TopicExistsError``), so ``except`` clauses written for ``Node`` still apply; an error type this
client does not know is an ``ApiError`` with the HTTP status, and an unreachable node is a
``NodeUnreachableError``.

Each call is one HTTP request on a new connection (``urllib``), which is simple and robust for
tools; a high-rate producer should batch records into few ``produce`` calls.
"""

from __future__ import annotations

import base64
import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields
from email.message import Message
from typing import Any, Final, Literal
from urllib.parse import quote, urlencode, urlsplit

from tierlog.log.local_log import (
    InvalidRecordError,
    InvalidTimestampError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from tierlog.log.producer_state import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateError,
    TransactionCoordinatorFencedError,
)
from tierlog.log.segment import TimestampAndOffset
from tierlog.log.txn_index import AbortedTxn
from tierlog.node.http_api import BATCHES_CONTENT_TYPE, NDJSON_CONTENT_TYPE
from tierlog.node.node import (
    FetchResult,
    PartitionStatus,
    ProduceInput,
    ProduceResult,
    ProducerRecord,
    RequestTimedOutError,
    TopicExistsError,
    UnknownTopicError,
    decode_fetched,
)
from tierlog.rlm.remote_read import RemoteReadRejectedError
from tierlog.spi import (
    ConfigError,
    CorruptRecordError,
    IllegalStateError,
    InvalidArgumentError,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageNotReadyException,
    RetriableRemoteStorageException,
    TierlogError,
    Uuid,
)

__all__ = ["ApiError", "NodeUnreachableError", "TierlogClient"]

DEFAULT_URL: Final = "http://127.0.0.1:8405"
"""Where ``tierlog serve`` listens with the default ``tierlog.http.host``/``port``."""
_DEFAULT_FETCH_BYTES: Final = 1024 * 1024


class ApiError(TierlogError):
    """An error answer whose type this client does not map to a tierlog exception.

    ``status`` is the HTTP status, ``error_type`` the node's name for the error, ``details`` the
    whole error object and ``retriable`` whether the node said the request may be retried.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        error_type: str,
        retriable: bool = False,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.retriable = retriable
        self.details = dict(details or {})


class NodeUnreachableError(TierlogError):
    """No answer from the node: connection refused, DNS failure, timeout, or a non-API answer."""


_ERRORS: Final[dict[str, Callable[[str], TierlogError]]] = {
    cls.__name__: cls
    for cls in (
        UnknownTopicError,
        TopicExistsError,
        OffsetOutOfRangeError,
        OffsetMovedToTieredStorageError,
        RecordTooLargeError,
        RecordBatchTooLargeError,
        InvalidRecordError,
        InvalidTimestampError,
        OffsetsOutOfOrderError,
        ProducerStateError,
        OutOfOrderSequenceError,
        InvalidProducerEpochError,
        InvalidTxnStateError,
        TransactionCoordinatorFencedError,
        InvalidArgumentError,
        ConfigError,
        IllegalStateError,
        CorruptRecordError,
        RemoteStorageException,
        RetriableRemoteStorageException,
        RemoteStorageNotReadyException,
        RemoteResourceNotFoundException,
        RemoteReadRejectedError,
        RequestTimedOutError,
    )
}
"""Error types rebuilt from their name: those whose constructor takes just the message."""


@dataclass(frozen=True)
class _Answer:
    status: int
    headers: Message
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def _encode(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


def _record_json(item: ProduceInput) -> dict[str, Any]:
    """One record for the produce body, base64 so any bytes cross JSON unchanged."""
    if isinstance(item, ProducerRecord):
        rec = item
    elif isinstance(item, bytes | bytearray | memoryview):
        rec = ProducerRecord(bytes(item))
    elif isinstance(item, tuple) and len(item) == 2:
        rec = ProducerRecord(item[1], item[0])
    else:
        raise InvalidArgumentError(
            f"a record to produce is bytes, a (key, value) tuple or a ProducerRecord, got {item!r}"
        )
    out: dict[str, Any] = {"key": _encode(rec.key), "value": _encode(rec.value)}
    if rec.headers:
        out["headers"] = [[k, _encode(v)] for k, v in rec.headers]
    if rec.timestamp is not None:
        out["timestamp"] = rec.timestamp
    return out


def _produce_results(topic: str, body: Mapping[str, Any]) -> list[ProduceResult]:
    return [
        ProduceResult(
            topic, o["partition"], o["base_offset"], o["last_offset"], o["log_append_time"]
        )
        for o in body["offsets"]
    ]


_STATUS_FIELDS: Final = frozenset(f.name for f in fields(PartitionStatus))


def _status(obj: Mapping[str, Any]) -> PartitionStatus:
    # Fields a newer node adds are dropped rather than failing the call.
    return PartitionStatus(**{k: v for k, v in obj.items() if k in _STATUS_FIELDS})


class TierlogClient:
    """A client of one node's HTTP API (module docstring). Thread-safe: it holds no connection.

    ``timeout`` (seconds) bounds each request, including a remote read on the node.
    Environment proxy settings (``http_proxy``...) are not used: a node is reached directly,
    and a proxy meant for the internet would otherwise intercept requests to a local one.
    """

    def __init__(self, base_url: str = DEFAULT_URL, timeout: float = 30.0) -> None:
        split = urlsplit(base_url)
        if split.scheme not in ("http", "https") or not split.netloc:
            raise InvalidArgumentError(f"expected an http:// or https:// URL, got {base_url!r}")
        if timeout <= 0:
            raise InvalidArgumentError(f"timeout must be > 0, got {timeout}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __repr__(self) -> str:
        return f"TierlogClient({self.base_url!r})"

    # Transport -----------------------------------------------------------------------------------
    def _request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, object] | None = None,
        json_body: object = None,
        data: bytes | None = None,
        content_type: str | None = None,
        accept: str = "application/json",
    ) -> _Answer:
        with self._open(
            method,
            path,
            query=query,
            json_body=json_body,
            data=data,
            content_type=content_type,
            accept=accept,
        ) as resp:
            return _Answer(resp.status, resp.headers, resp.read())

    @contextmanager
    def _open(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, object] | None = None,
        json_body: object = None,
        data: bytes | None = None,
        content_type: str | None = None,
        accept: str = "application/json",
    ) -> Iterator[Any]:
        """The open answer of a 2xx (read it inside the block); any other is raised as the
        tierlog error it carries, and a network failure, also while reading, as
        ``NodeUnreachableError``."""
        url = self.base_url + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        headers = {"Accept": accept}
        if json_body is not None:
            data = json.dumps(json_body).encode("utf-8")
            content_type = "application/json"
        if content_type is not None:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                yield resp
        except urllib.error.HTTPError as e:
            with e:
                raise self._error(method, url, e.code, e.read()) from None
        except urllib.error.URLError as e:
            raise NodeUnreachableError(f"cannot reach {self.base_url}: {e.reason}") from None
        except TimeoutError:
            raise NodeUnreachableError(
                f"{method} {url}: no answer within {self.timeout:g} s"
            ) from None
        except (OSError, http.client.HTTPException) as e:
            raise NodeUnreachableError(f"{method} {url} failed: {e}") from None

    @staticmethod
    def _error(method: str, url: str, status: int, body: bytes) -> TierlogError:
        """The tierlog exception a JSON error answer stands for."""
        try:
            error = json.loads(body)["error"]
        except (ValueError, KeyError, TypeError):
            error = None
        if not isinstance(error, dict) or "type" not in error or "message" not in error:
            snippet = body[:200].decode("utf-8", errors="replace")
            return NodeUnreachableError(
                f"{method} {url}: HTTP {status} without a tierlog error body: {snippet!r}"
            )
        return TierlogClient._error_of(status, error)

    @staticmethod
    def _error_of(status: int, error: Mapping[str, Any]) -> TierlogError:
        """The tierlog exception of an ``"error"`` object (and the status it came with)."""
        error_type = str(error["type"])
        message = str(error["message"])
        factory = _ERRORS.get(error_type)
        if factory is not None:
            return factory(message)
        retriable = bool(error.get("retriable", False))
        return ApiError(
            f"{message} ({error_type}, HTTP {status})",
            status=status,
            error_type=error_type,
            retriable=retriable,
            details=error,
        )

    @staticmethod
    def _segment(name: str) -> str:
        return quote(name, safe="")

    def _partition_path(self, topic: str, partition: int) -> str:
        return f"/topics/{self._segment(topic)}/partitions/{int(partition)}"

    # Node ----------------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        """``GET /healthz``: ``{"status": "ok", ...}`` (``ApiError`` 503 while the node stops)."""
        result: dict[str, Any] = self._request("GET", "/healthz").json()
        return result

    def metrics(self, *, openmetrics: bool = False) -> str:
        """The Prometheus scrape of the node, as text."""
        accept = "application/openmetrics-text; version=1.0.0" if openmetrics else "text/plain"
        return self._request("GET", "/metrics", accept=accept).body.decode("utf-8")

    def status(self, topic: str | None = None) -> list[PartitionStatus]:
        """``Node.status``: offsets, sizes and tiering state of every partition (of ``topic``)."""
        body = self._request("GET", "/status", query={"topic": topic}).json()
        return [_status(s) for s in body["partitions"]]

    def tier(self, topic: str | None = None) -> list[PartitionStatus]:
        """``Node.tier_now``: copy, expire and apply local retention now; the status after."""
        body = self._request("POST", "/tier", query={"topic": topic}).json()
        return [_status(s) for s in body["partitions"]]

    def compact(
        self,
        topic: str,
        partition: int,
        *,
        force: bool = True,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> dict[str, Any]:
        """``Node.compact_now``: one log-cleaner round of a compacted partition now, and its
        summary (``tierlog.node.http_api.compaction_json``: ``cleaned``, ``dirty_ratio``, bytes
        and records read, written, kept and dropped, and for a tiered partition
        ``bytes_downloaded``, ``bytes_uploaded`` and ``segments_skipped`` by Bloom filters).

        ``force`` cleans below ``min.cleanable.dirty.ratio`` too. ``progress(phase, done,
        total)`` is called as the round's passes advance ("map", then "clean"). The answer is
        streamed, with a line at least every few seconds, so that ``timeout`` bounds a silence,
        not the round. A topic that is not compacted is an ``InvalidArgumentError``."""
        path = self._partition_path(topic, partition) + "/compact"
        query = {"force": "true" if force else "false"}
        with self._open("POST", path, query=query, accept=NDJSON_CONTENT_TYPE) as resp:
            if resp.headers.get_content_type() != NDJSON_CONTENT_TYPE:
                result: dict[str, Any] = json.loads(resp.read())
                return result
            for raw in resp:
                if not raw.strip():
                    continue
                try:
                    line = json.loads(raw)
                except ValueError:
                    raise NodeUnreachableError(
                        f"the compaction answer has a line that is not JSON: {raw[:200]!r}"
                    ) from None
                if "result" in line:
                    summary: dict[str, Any] = line["result"]
                    return summary
                if "error" in line:
                    raise self._error_of(int(line.get("status", 500)), line["error"])
                step = line.get("progress")
                if step is not None and progress is not None:
                    progress(str(step["phase"]), int(step["done"]), int(step["total"]))
        raise NodeUnreachableError(f"the compaction answer of {topic}-{partition} ended early")

    # Topics --------------------------------------------------------------------------------------
    def topics(self) -> dict[str, dict[str, Any]]:
        """``Node.topics``: name -> ``{"id", "partitions", "configs"}``."""
        result: dict[str, dict[str, Any]] = self._request("GET", "/topics").json()["topics"]
        return result

    def describe_topic(self, name: str) -> dict[str, Any]:
        """The topic (``name``, ``id``, ``partitions``, ``configs``) and its partitions'
        ``status`` (as JSON objects)."""
        result: dict[str, Any] = self._request("GET", f"/topics/{self._segment(name)}").json()
        return result

    def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        configs: Mapping[str, object] | None = None,
    ) -> Uuid:
        """``Node.create_topic``; ``TopicExistsError`` (an ``InvalidArgumentError``) if it
        exists."""
        body: dict[str, Any] = {"name": name}
        if partitions is not None:
            body["partitions"] = partitions
        if configs:
            body["configs"] = {str(k): v for k, v in configs.items()}
        answer = self._request("POST", "/topics", json_body=body).json()
        return Uuid.from_string(answer["id"])

    def alter_topic_config(self, name: str, configs: Mapping[str, object]) -> dict[str, str]:
        """``Node.alter_topic_config`` (None or "" removes an override); the new overrides."""
        answer = self._request(
            "PATCH",
            f"/topics/{self._segment(name)}/configs",
            json_body={"configs": {str(k): v for k, v in configs.items()}},
        ).json()
        result: dict[str, str] = answer["configs"]
        return result

    def delete_topic(self, name: str) -> None:
        """``Node.delete_topic``: remote segments first, then the local directories."""
        self._request("DELETE", f"/topics/{self._segment(name)}")

    # Producing -----------------------------------------------------------------------------------
    def produce(
        self,
        topic: str,
        records: Iterable[ProduceInput],
        *,
        partition: int | None = None,
        compression: str = "none",
    ) -> list[ProduceResult]:
        """``Node.produce``: a value, a ``(key, value)`` pair or a ``ProducerRecord`` each, in
        one request (partitioned by the node when ``partition`` is None)."""
        body = {
            "records": [_record_json(r) for r in records],
            "encoding": "base64",
            "compression": compression,
        }
        path = f"/topics/{self._segment(topic)}/records"
        if partition is not None:
            path = self._partition_path(topic, partition) + "/records"
        return _produce_results(topic, self._request("POST", path, json_body=body).json())

    def append_batches(self, topic: str, partition: int, batches: bytes) -> ProduceResult:
        """``Node.append_batches``: whole batches in Kafka's format, sent as they are."""
        answer = self._request(
            "POST",
            self._partition_path(topic, partition) + "/records",
            data=bytes(batches),
            content_type=BATCHES_CONTENT_TYPE,
        ).json()
        return _produce_results(topic, answer)[0]

    # Reading -------------------------------------------------------------------------------------
    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = _DEFAULT_FETCH_BYTES,
        isolation: Literal["read_uncommitted", "read_committed"] = "read_uncommitted",
    ) -> FetchResult:
        """``Node.fetch``: the records from ``offset`` (remote storage below the local log start
        is read by the node); ``throttled`` with no records when the remote quota is used up,
        ``remote_fetch_expired`` with no records when the node's remote read took longer than
        its ``remote.fetch.max.wait.ms`` (fetch again)."""
        answer = self._request(
            "GET",
            self._partition_path(topic, partition) + "/records",
            query={"offset": offset, "max_bytes": max_bytes, "isolation": isolation},
            accept=BATCHES_CONTENT_TYPE,
        )
        h = answer.headers
        try:
            aborted = tuple(
                AbortedTxn(**a) for a in json.loads(h.get("X-Tierlog-Aborted-Transactions", "[]"))
            )
            next_offset = int(h["X-Tierlog-Next-Offset"])
            high_watermark = int(h["X-Tierlog-High-Watermark"])
            last_stable_offset = int(h["X-Tierlog-Last-Stable-Offset"])
            log_start_offset = int(h["X-Tierlog-Log-Start-Offset"])
            local_log_start_offset = int(h["X-Tierlog-Local-Log-Start-Offset"])
        except (KeyError, TypeError, ValueError) as e:
            raise NodeUnreachableError(f"the fetch answer lacks its offset headers: {e}") from None
        records, decoded_next = decode_fetched(
            answer.body, offset, aborted if isolation == "read_committed" else None
        )
        return FetchResult(
            topic=topic,
            partition=partition,
            records=records,
            next_offset=max(next_offset, decoded_next),
            high_watermark=high_watermark,
            last_stable_offset=last_stable_offset,
            log_start_offset=log_start_offset,
            local_log_start_offset=local_log_start_offset,
            from_remote=h.get("X-Tierlog-From-Remote") == "true",
            throttled=h.get("X-Tierlog-Throttled") == "true",
            batches=answer.body,
            aborted_transactions=aborted,
            remote_fetch_expired=h.get("X-Tierlog-Remote-Fetch-Expired") == "true",
        )

    def list_offsets(
        self, topic: str, partition: int, spec: str | int
    ) -> TimestampAndOffset | None:
        """``Node.list_offsets``: ``earliest``, ``latest``, ``earliest-local``,
        ``latest-tiered`` or a timestamp in ms (None when no record is that recent)."""
        query: dict[str, object]
        if isinstance(spec, bool) or not isinstance(spec, str | int):
            raise InvalidArgumentError(f"spec must be a name or a timestamp, got {spec!r}")
        query = {"timestamp": spec} if isinstance(spec, int) else {"spec": spec}
        body = self._request(
            "GET", self._partition_path(topic, partition) + "/offsets", query=query
        ).json()
        if body["offset"] is None:
            return None
        return TimestampAndOffset(body["timestamp"], body["offset"], body["leader_epoch"])
