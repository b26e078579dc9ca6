"""The HTTP/1.1 JSON API of a tierlog node, served beside its Prometheus metrics.

A tierlog node speaks no Kafka wire protocol, so this is how other processes (the ``tierlog
produce``/``consume``/``topics``/``status`` commands, ``TierlogClient``, curl, a dashboard) use
one. Standard library only (``http.server.ThreadingHTTPServer``, one daemon thread per
connection): a node must not need a web framework to be operated. ``tierlog serve`` runs it on
``tierlog.http.host``/``tierlog.http.port`` (port 0 picks a free port; ``HttpApi.port`` is the
bound one). The reference for users, with examples, is ``docs/http-api.md``.

Endpoints (bodies are JSON unless said otherwise; ``PartitionStatus`` is ``Node.status``'s)::

    GET    /healthz                            {"status": "ok", "node_id", "topics", "partitions"}
    GET    /metrics                            Prometheus text (OpenMetrics if Accept asks)
    GET    /status[?topic=T]                   {"node_id", "partitions": [PartitionStatus]}
    POST   /tier[?topic=T]                     run the RLM tasks and local retention now;
                                               {"partitions": [PartitionStatus]}
    GET    /topics                             {"topics": {name: {"id", "partitions", "configs"}}}
    POST   /topics                             {"name", "partitions"?, "configs"?} -> 201, topic
    GET    /topics/{t}                         the topic and "status": [PartitionStatus]
    DELETE /topics/{t}                         {"deleted": t, "id"}
    PATCH  /topics/{t}/configs                 {k: v | null} or {"configs": {k: v | null}}
                                               (null or "" removes an override) -> the topic
    POST   /topics/{t}/records                 JSON records, partitioned by the node
    POST   /topics/{t}/partitions/{p}/records  JSON records, or raw batches (below)
    GET    /topics/{t}/partitions/{p}/records  ?offset=&max_bytes=&isolation=&encoding=
    GET    /topics/{t}/partitions/{p}/offsets  ?spec=earliest|latest|earliest-local|latest-tiered
                                               or ?timestamp=MS
    POST   /topics/{t}/partitions/{p}/compact  ?force=true|false: one log-cleaner round now;
                                               the round's summary (``compaction_json``)

*Producing.* A JSON body is ``{"records": [{"key": str | null, "value": str | null, "headers":
{k: v | null} | [[k, v | null], ...], "timestamp": ms?}, ...], "encoding": "utf8" | "base64",
"compression": "none" | "gzip" | "snappy" | "lz4" | "zstd"}`` (``encoding`` applies to keys,
values and header values; default ``utf8``, ``compression`` default ``none``). Without a
partition in the path, keyed records go where Kafka's default partitioner puts them and unkeyed
ones to one partition per request (``Node.produce``). With ``Content-Type:
application/vnd.kafka.batches`` the body is whole record batches in Kafka's format, appended as
they are (``Node.append_batches``; the partition must be in the path). The answer is ``{"topic",
"offsets": [{"partition", "base_offset", "last_offset", "log_append_time"}]}``.

*Fetching.* ``offset`` defaults to the log start offset, ``max_bytes`` to 1 MiB (at most 64 MiB;
at least one batch is returned if there is one), ``isolation`` to ``read_uncommitted``,
``encoding`` (of keys, values and header values) to ``utf8``, which replaces bytes that are not
UTF-8: ask ``base64`` for binary data. The answer is ``{"topic", "partition", "records":
[{"offset", "timestamp", "key", "value", "headers": [[k, v], ...]}], "next_offset",
"high_watermark", "last_stable_offset", "log_start_offset", "local_log_start_offset",
"from_remote", "throttled", "remote_fetch_expired", "encoding"}``. Below the local log start
the node reads remote storage; when the remote fetch quota is exhausted the answer is empty with
``throttled`` true (retry later); when the remote read does not complete within the node's
``remote.fetch.max.wait.ms`` the answer is empty with ``remote_fetch_expired`` true (not an
error, as Kafka answers an expired remote fetch: fetch the same offset again). With
``Accept: application/vnd.kafka.batches`` the body is instead the whole batches as stored (the
first may start before ``offset``) and the offsets are headers: ``X-Tierlog-Next-Offset``,
``X-Tierlog-High-Watermark``, ``X-Tierlog-Last-Stable-Offset``, ``X-Tierlog-Log-Start-Offset``,
``X-Tierlog-Local-Log-Start-Offset``, ``X-Tierlog-From-Remote``, ``X-Tierlog-Throttled``,
``X-Tierlog-Remote-Fetch-Expired`` (``true``/``false``) and ``X-Tierlog-Aborted-Transactions``
(JSON ``[{"producer_id", "first_offset", "last_offset", "last_stable_offset"}]``, for
``read_committed`` decoding with ``tierlog.node.node.decode_fetched``). That is cheaper for both
sides: nothing is decoded or re-encoded, compressed batches stay compressed.

*Offsets.* ``{"topic", "partition", "offset", "timestamp", "leader_epoch"}``; ``offset`` is null
when no record has a timestamp at or after ``timestamp``; ``latest-tiered`` is -1 when nothing is
tiered yet (as Kafka answers). A search by timestamp whose remote part does not complete within
``remote.list.offsets.request.timeout.ms`` is a 503 ``RequestTimedOutError`` (Kafka's
``REQUEST_TIMED_OUT``), retriable.

*Compacting.* ``POST .../compact`` runs one cleaning round of a compacted partition now
(``Node.compact_now``; ``force``, default true, cleans below ``min.cleanable.dirty.ratio`` too)
and answers its summary, ``compaction_json``: for a tiered partition the round reads and writes
remote storage, and the summary adds what it downloaded and uploaded and the segments its Bloom
filters skipped. A round can take minutes, longer than a client waits for an idle socket, so
with ``Accept: application/x-ndjson`` the answer streams (chunked) one JSON object per line as
the round goes: ``{"progress": {"phase": "map" | "clean", "done", "total"}}`` as the passes
advance, ``{"elapsed_s"}`` every few seconds when nothing else was sent, and last either
``{"result": summary}`` or ``{"error": {...}, "status": N}`` (the status the error would have
had: the 200 was sent before the round ended). A topic whose ``cleanup.policy`` has no
``compact`` is a 400 before anything runs, worded as Kafka words a policy refusal.

*Errors* are ``{"error": {"type": "UnknownTopicError", "message": "...", ...}}``, never a
traceback (unexpected errors are logged on the node with theirs). ``type`` is the name of the
tierlog exception, which ``TierlogClient`` raises again. Statuses: 400 bad input (a parameter,
the JSON, the batches, a config value), 404 unknown topic or partition (or path), 405 wrong
method (with ``Allow``), 409 topic exists, 411 no ``Content-Length`` on a body, 413 body over
``max_request_bytes`` or record too large, 415 unsupported ``Content-Type``, 416 offset out of
range (the error carries ``log_start_offset``, ``high_watermark`` and ``log_end_offset``), 503
remote storage not ready, a remote read rejected (reader pool full), a remote ListOffsets timed
out, or the node stopping (with
``"retriable": true`` and ``Retry-After``), 500 anything else. Unknown or repeated query
parameters are 400, not ignored: a misspelt ``ofset=`` must not silently read from the start.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import queue
import re
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, cast
from urllib.parse import parse_qsl, unquote, urlsplit

from tierlog._version import __version__
from tierlog.compaction.cleaner import CleanResult
from tierlog.compaction.tiered import TieredCleanResult
from tierlog.log.batch import UnsupportedRecordFormatError
from tierlog.log.compression import CompressionType, UnsupportedCodecError
from tierlog.log.local_log import (
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from tierlog.log.producer_state import ProducerStateError
from tierlog.log.record import Record
from tierlog.node.node import (
    FetchResult,
    Node,
    OffsetSpec,
    ProduceResult,
    ProducerRecord,
    TopicExistsError,
    UnknownTopicError,
)
from tierlog.spi import (
    ConfigError,
    CorruptRecordError,
    IllegalStateError,
    InvalidArgumentError,
    RetriableRemoteStorageException,
    TierlogError,
)

__all__ = [
    "BATCHES_CONTENT_TYPE",
    "DEFAULT_MAX_REQUEST_BYTES",
    "HttpApi",
    "MAX_FETCH_BYTES",
    "NDJSON_CONTENT_TYPE",
    "TopicExistsError",
    "compaction_json",
    "endpoints",
]

_LOG = logging.getLogger(__name__)

BATCHES_CONTENT_TYPE: Final = "application/vnd.kafka.batches"
"""Whole record batches in Kafka's on-disk/wire format, for produce bodies and fetch answers."""
JSON_CONTENT_TYPE: Final = "application/json"
NDJSON_CONTENT_TYPE: Final = "application/x-ndjson"
"""One JSON object per line, sent as it is made: the streamed answer of a compaction."""
HEARTBEAT_S: Final = 5.0
"""The longest a streamed answer stays silent: a client's read timeout must not end a round
that is only slow (a long pass reports no progress)."""
DEFAULT_MAX_REQUEST_BYTES: Final = 16 * 1024 * 1024
"""Bodies above this are refused (413) before being read: a request must not exhaust memory."""
DEFAULT_FETCH_BYTES: Final = 1024 * 1024
MAX_FETCH_BYTES: Final = 64 * 1024 * 1024
"""The largest ``max_bytes`` a fetch may ask: the answer is built in memory."""
RETRY_AFTER_S: Final = 1
_INT32_MAX: Final = (1 << 31) - 1
_INT64_MAX: Final = (1 << 63) - 1
_ISOLATIONS: Final = ("read_uncommitted", "read_committed")
_ENCODINGS: Final = ("utf8", "base64")
_OFFSET_SPECS: Final = ("earliest", "latest", "earliest-local", "latest-tiered")
_BOOLEANS: Final = {"true": True, "false": False}


class _HttpError(Exception):
    """An answer other than 2xx, decided by a handler: status, tierlog error type, message."""

    def __init__(
        self,
        status: int,
        error_type: str,
        message: str,
        *,
        extra: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        retriable: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.extra = dict(extra or {})
        self.headers = dict(headers or {})
        self.retriable = retriable


def _bad_request(message: str, error_type: str = "InvalidArgumentError") -> _HttpError:
    return _HttpError(HTTPStatus.BAD_REQUEST, error_type, message)


@dataclass
class _Request:
    method: str
    path: str
    params: dict[str, str]
    query: dict[str, str]
    headers: Mapping[str, str]
    """Lower-cased names."""
    body: bytes

    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    def accepts(self, media_type: str) -> bool:
        accept = self.headers.get("accept", "").lower()
        return any(part.split(";")[0].strip() == media_type for part in accept.split(","))


@dataclass
class _Response:
    status: int
    body: bytes
    content_type: str = JSON_CONTENT_TYPE
    headers: dict[str, str] = field(default_factory=dict)
    stream: Iterator[bytes] | None = None
    """Instead of ``body``: chunks sent as they come (chunked transfer encoding)."""


def _json_response(obj: Any, status: int = HTTPStatus.OK, **headers: str) -> _Response:
    body = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
    return _Response(status, body, JSON_CONTENT_TYPE, dict(headers))


_Handler = Callable[["HttpApi", _Request], _Response]


@dataclass(frozen=True)
class _Route:
    pattern: re.Pattern[str]
    methods: Mapping[str, _Handler]


# Parameter parsing -------------------------------------------------------------------------------
def _check_query(req: _Request, allowed: Iterable[str]) -> None:
    allowed = set(allowed)
    unknown = sorted(k for k in req.query if k not in allowed)
    if unknown:
        expected = ", ".join(sorted(allowed)) or "none"
        raise _bad_request(f"unknown query parameter {unknown[0]!r} (expected: {expected})")


def _int_param(name: str, raw: str, *, minimum: int = 0, maximum: int = _INT64_MAX) -> int:
    text = raw.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise _bad_request(f"{name} must be an integer, got {raw!r}")
    value = int(text)
    if not minimum <= value <= maximum:
        raise _bad_request(f"{name} must be in [{minimum}, {maximum}], got {value}")
    return value


def _choice_param(name: str, raw: str | None, choices: tuple[str, ...], default: str) -> str:
    if raw is None:
        return default
    if raw not in choices:
        raise _bad_request(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return raw


def _bool_param(name: str, raw: str | None, default: bool) -> bool:
    if raw is None:
        return default
    value = _BOOLEANS.get(raw.strip().lower())
    if value is None:
        raise _bad_request(f"{name} must be true or false, got {raw!r}")
    return value


def _partition_param(req: _Request) -> int:
    return _int_param("partition", req.params["partition"], maximum=_INT32_MAX)


def _json_body(req: _Request) -> dict[str, Any]:
    ctype = req.content_type()
    if ctype not in ("", JSON_CONTENT_TYPE) and not ctype.endswith("+json"):
        raise _HttpError(
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
            "InvalidArgumentError",
            f"expected Content-Type {JSON_CONTENT_TYPE}, got {ctype!r}",
        )
    if not req.body.strip():
        raise _bad_request("a JSON object body is required")

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")

    try:
        obj = json.loads(req.body, parse_constant=no_constants)
    except (ValueError, UnicodeDecodeError) as e:
        raise _bad_request(f"the body is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise _bad_request(f"the body must be a JSON object, got {type(obj).__name__}")
    return obj


def _check_fields(obj: Mapping[str, Any], allowed: Iterable[str], what: str) -> None:
    allowed = set(allowed)
    unknown = sorted(k for k in obj if k not in allowed)
    if unknown:
        raise _bad_request(
            f"unknown field {unknown[0]!r} in {what} (expected: {', '.join(sorted(allowed))})"
        )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _config_map(obj: object, what: str, *, allow_null: bool) -> dict[str, object]:
    """Topic config overrides from JSON: string keys, scalar values (null only to remove)."""
    if not isinstance(obj, dict):
        raise _bad_request(f"{what} must be an object of config key to value")
    out: dict[str, object] = {}
    for key, value in obj.items():
        if value is None and allow_null:
            out[key] = None
        elif isinstance(value, str | bool) or _is_int(value):
            out[key] = value
        else:
            raise _bad_request(f"{what}[{key!r}] must be a string, an integer or a boolean")
    return out


def _decode_bytes(value: object, encoding: str, what: str) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad_request(f"{what} must be a string or null, got {type(value).__name__}")
    if encoding == "base64":
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as e:
            raise _bad_request(f"{what} is not valid base64: {e}") from None
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise _bad_request(f"{what} is not encodable as UTF-8: {e}") from None


def _encode_bytes(value: bytes | None, encoding: str) -> str | None:
    if value is None:
        return None
    if encoding == "base64":
        return base64.b64encode(value).decode("ascii")
    return value.decode("utf-8", errors="replace")


def _parse_headers(raw: object, encoding: str, where: str) -> tuple[tuple[str, bytes | None], ...]:
    if raw is None:
        return ()
    pairs: list[tuple[object, object]]
    if isinstance(raw, dict):
        pairs = list(raw.items())
    elif isinstance(raw, list):
        pairs = []
        for item in raw:
            if not isinstance(item, list) or len(item) != 2:
                raise _bad_request(f"{where}.headers items must be [key, value] pairs")
            pairs.append((item[0], item[1]))
    else:
        raise _bad_request(f"{where}.headers must be an object or a list of [key, value] pairs")
    out = []
    for key, value in pairs:
        if not isinstance(key, str):
            raise _bad_request(f"{where}.headers keys must be strings")
        out.append((key, _decode_bytes(value, encoding, f"{where}.headers[{key!r}]")))
    return tuple(out)


def _parse_records(body: Mapping[str, Any]) -> tuple[list[ProducerRecord], CompressionType]:
    _check_fields(body, ("records", "encoding", "compression"), "the produce request")
    encoding = body.get("encoding", "utf8")
    if encoding not in _ENCODINGS:
        raise _bad_request(f"encoding must be one of {', '.join(_ENCODINGS)}, got {encoding!r}")
    compression_name = body.get("compression", "none")
    if not isinstance(compression_name, str):
        raise _bad_request("compression must be a string")
    try:
        compression = CompressionType.from_name(compression_name)
    except InvalidArgumentError as e:
        raise _bad_request(str(e)) from None
    raw_records = body.get("records")
    if not isinstance(raw_records, list) or not raw_records:
        raise _bad_request("records must be a non-empty list")
    records = []
    for i, raw in enumerate(raw_records):
        where = f"records[{i}]"
        if not isinstance(raw, dict):
            raise _bad_request(f"{where} must be an object")
        _check_fields(raw, ("key", "value", "headers", "timestamp"), where)
        timestamp = raw.get("timestamp")
        if timestamp is not None and not (_is_int(timestamp) and 0 <= timestamp <= _INT64_MAX):
            raise _bad_request(f"{where}.timestamp must be a non-negative integer (ms)")
        records.append(
            ProducerRecord(
                value=_decode_bytes(raw.get("value"), encoding, f"{where}.value"),
                key=_decode_bytes(raw.get("key"), encoding, f"{where}.key"),
                headers=_parse_headers(raw.get("headers"), encoding, where),
                timestamp=timestamp,
            )
        )
    return records, compression


def _record_json(record: Record, encoding: str) -> dict[str, Any]:
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": _encode_bytes(record.key, encoding),
        "value": _encode_bytes(record.value, encoding),
        "headers": [[k, _encode_bytes(v, encoding)] for k, v in record.headers],
    }


def _produce_json(topic: str, results: Iterable[ProduceResult]) -> dict[str, Any]:
    return {
        "topic": topic,
        "offsets": [
            {
                "partition": r.partition,
                "base_offset": r.base_offset,
                "last_offset": r.last_offset,
                "log_append_time": r.log_append_time,
            }
            for r in results
        ],
    }


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


# Endpoints ---------------------------------------------------------------------------------------
def _healthz(api: HttpApi, req: _Request) -> _Response:
    _check_query(req, ())
    return _json_response(
        {
            "status": "ok",
            "node_id": api.node.config.node_id,
            "topics": len(api.node.topics()),
            "partitions": len(api.node.partitions()),
        }
    )


def _metrics(api: HttpApi, req: _Request) -> _Response:
    _check_query(req, ())
    content_type, body = api.node.metrics.render(req.headers.get("accept"))
    return _Response(HTTPStatus.OK, body, content_type)


def _topic_filter(api: HttpApi, req: _Request) -> str | None:
    topic = req.query.get("topic")
    if topic is not None and topic not in api.node.topics():
        raise UnknownTopicError(f"This server does not host this topic: {topic}")
    return topic


def _status(api: HttpApi, req: _Request) -> _Response:
    _check_query(req, ("topic",))
    topic = _topic_filter(api, req)
    return _json_response(
        {
            "node_id": api.node.config.node_id,
            "partitions": [s.to_json() for s in api.node.status(topic)],
        }
    )


def _tier(api: HttpApi, req: _Request) -> _Response:
    _check_query(req, ("topic",))
    topic = _topic_filter(api, req)
    api.node.tier_now(topic)
    return _json_response({"partitions": [s.to_json() for s in api.node.status(topic)]})


def _list_topics(api: HttpApi, req: _Request) -> _Response:
    _check_query(req, ())
    return _json_response({"topics": api.node.topics()})


def _create_topic(api: HttpApi, req: _Request) -> _Response:
    _check_query(req, ())
    body = _json_body(req)
    _check_fields(body, ("name", "partitions", "configs"), "the topic")
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise _bad_request("name must be a non-empty string")
    partitions = body.get("partitions")
    if partitions is not None and not (_is_int(partitions) and 1 <= partitions <= _INT32_MAX):
        raise _bad_request(f"partitions must be an integer in [1, {_INT32_MAX}]")
    configs = _config_map(body.get("configs") or {}, "configs", allow_null=False)
    api.node.create_topic(name, partitions, configs)
    topic = api.node.topics()[name]
    return _json_response({"name": name, **topic}, HTTPStatus.CREATED, Location=f"/topics/{name}")


def _describe_topic(api: HttpApi, req: _Request) -> _Response:
    _check_query(req, ())
    name = req.params["topic"]
    topic = api.node.topics().get(name)
    if topic is None:
        raise UnknownTopicError(f"This server does not host this topic: {name}")
    status = [s.to_json() for s in api.node.status(name)]
    return _json_response({"name": name, **topic, "status": status})


def _delete_topic(api: HttpApi, req: _Request) -> _Response:
    _check_query(req, ())
    name = req.params["topic"]
    topic = api.node.topics().get(name)
    api.node.delete_topic(name)  # UnknownTopicError if it is not (or no longer) there
    return _json_response({"deleted": name, "id": None if topic is None else topic["id"]})


def _alter_configs(api: HttpApi, req: _Request) -> _Response:
    _check_query(req, ())
    body = _json_body(req)
    if set(body) == {"configs"} and isinstance(body["configs"], dict):
        body = body["configs"]
    configs = _config_map(body, "configs", allow_null=True)
    name = req.params["topic"]
    api.node.alter_topic_config(name, configs)
    return _json_response({"name": name, **api.node.topics()[name]})


def _produce(api: HttpApi, req: _Request, partition: int | None) -> _Response:
    topic = req.params["topic"]
    try:
        if req.content_type() == BATCHES_CONTENT_TYPE:
            if partition is None:
                raise _bad_request(
                    f"{BATCHES_CONTENT_TYPE} bodies go to /topics/{{t}}/partitions/{{p}}/records"
                )
            if not req.body:
                raise _bad_request("the body holds no record batch")
            results = [api.node.append_batches(topic, partition, req.body)]
        else:
            records, compression = _parse_records(_json_body(req))
            results = api.node.produce(topic, records, partition=partition, compression=compression)
    except (CorruptRecordError, UnsupportedCodecError, UnsupportedRecordFormatError) as e:
        # Here they describe the request's batches (or codec), not the node's disk.
        raise _bad_request(str(e), type(e).__name__) from None
    return _json_response(_produce_json(topic, results))


def _produce_any(api: HttpApi, req: _Request) -> _Response:
    _check_query(req, ())
    return _produce(api, req, None)


def _produce_partition(api: HttpApi, req: _Request) -> _Response:
    _check_query(req, ())
    return _produce(api, req, _partition_param(req))


def _offset_range_error(api: HttpApi, topic: str, partition: int, e: Exception) -> _HttpError:
    extra: dict[str, Any] = {}
    try:
        status = next(s for s in api.node.status(topic) if s.partition == partition)
        extra = {
            "log_start_offset": status.log_start_offset,
            "high_watermark": status.high_watermark,
            "log_end_offset": status.log_end_offset,
        }
    except (StopIteration, TierlogError):
        pass
    return _HttpError(
        HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, type(e).__name__, str(e), extra=extra
    )


def _fetch(api: HttpApi, req: _Request) -> _Response:
    _check_query(req, ("offset", "max_bytes", "isolation", "encoding"))
    topic = req.params["topic"]
    partition = _partition_param(req)
    raw_offset = req.query.get("offset")
    max_bytes = (
        DEFAULT_FETCH_BYTES
        if "max_bytes" not in req.query
        else _int_param("max_bytes", req.query["max_bytes"], minimum=1, maximum=MAX_FETCH_BYTES)
    )
    isolation = _choice_param(
        "isolation", req.query.get("isolation"), _ISOLATIONS, "read_uncommitted"
    )
    encoding = _choice_param("encoding", req.query.get("encoding"), _ENCODINGS, "utf8")
    if raw_offset is None:
        earliest = api.node.list_offsets(topic, partition, "earliest")
        offset = 0 if earliest is None else earliest.offset
    else:
        offset = _int_param("offset", raw_offset)
    try:
        result = api.node.fetch(
            topic,
            partition,
            offset,
            max_bytes=max_bytes,
            isolation="read_committed" if isolation == "read_committed" else "read_uncommitted",
            timeout_s=api.fetch_timeout_s,
        )
    except OffsetOutOfRangeError as e:
        raise _offset_range_error(api, topic, partition, e) from None
    if req.accepts(BATCHES_CONTENT_TYPE):
        headers = _fetch_headers(result)
        return _Response(HTTPStatus.OK, result.batches, BATCHES_CONTENT_TYPE, headers)
    return _json_response(
        {
            "topic": result.topic,
            "partition": result.partition,
            "records": [_record_json(r, encoding) for r in result.records],
            "next_offset": result.next_offset,
            "high_watermark": result.high_watermark,
            "last_stable_offset": result.last_stable_offset,
            "log_start_offset": result.log_start_offset,
            "local_log_start_offset": result.local_log_start_offset,
            "from_remote": result.from_remote,
            "throttled": result.throttled,
            "remote_fetch_expired": result.remote_fetch_expired,
            "encoding": encoding,
        }
    )


def _fetch_headers(result: FetchResult) -> dict[str, str]:
    aborted = [
        {
            "producer_id": a.producer_id,
            "first_offset": a.first_offset,
            "last_offset": a.last_offset,
            "last_stable_offset": a.last_stable_offset,
        }
        for a in result.aborted_transactions
    ]
    return {
        "X-Tierlog-Next-Offset": str(result.next_offset),
        "X-Tierlog-High-Watermark": str(result.high_watermark),
        "X-Tierlog-Last-Stable-Offset": str(result.last_stable_offset),
        "X-Tierlog-Log-Start-Offset": str(result.log_start_offset),
        "X-Tierlog-Local-Log-Start-Offset": str(result.local_log_start_offset),
        "X-Tierlog-From-Remote": _bool_text(result.from_remote),
        "X-Tierlog-Throttled": _bool_text(result.throttled),
        "X-Tierlog-Remote-Fetch-Expired": _bool_text(result.remote_fetch_expired),
        "X-Tierlog-Aborted-Transactions": json.dumps(aborted, separators=(",", ":")),
    }


def _offsets(api: HttpApi, req: _Request) -> _Response:
    _check_query(req, ("spec", "timestamp"))
    topic = req.params["topic"]
    partition = _partition_param(req)
    spec_text = req.query.get("spec")
    timestamp_text = req.query.get("timestamp")
    if (spec_text is None) == (timestamp_text is None):
        raise _bad_request("give exactly one of spec= and timestamp=")
    spec: OffsetSpec | int
    if spec_text is not None:
        spec = cast(OffsetSpec, _choice_param("spec", spec_text, _OFFSET_SPECS, "latest"))
    else:
        assert timestamp_text is not None
        spec = _int_param("timestamp", timestamp_text)
    found = api.node.list_offsets(topic, partition, spec)
    return _json_response(
        {
            "topic": topic,
            "partition": partition,
            "offset": None if found is None else found.offset,
            "timestamp": None if found is None else found.timestamp,
            "leader_epoch": None if found is None else found.leader_epoch,
        }
    )


# Compaction --------------------------------------------------------------------------------------
def compaction_json(result: CleanResult) -> dict[str, Any]:
    """A cleaning round's summary as JSON: what ``POST .../compact`` answers and ``tierlog
    compact`` prints (on a node or offline). ``tiered`` rounds add their remote traffic,
    ``segments_skipped`` (clean segments their Bloom filters ruled out, never downloaded) and
    the cleaned segments they published."""
    s = result.stats
    out: dict[str, Any] = {
        "topic": result.topic_partition.topic,
        "partition": result.topic_partition.partition,
        "cleaned": result.cleaned,
        "dirty_ratio": round(result.cleanable_ratio, 6),
        "first_dirty_offset": result.first_dirty_offset,
        "end_offset": result.end_offset,
        "checkpoint_reset": result.checkpoint_reset,
        "keys_mapped": result.keys_mapped,
        "segments_read": result.segments_read,
        "segments_written": result.segments_written,
        "bytes_read": s.bytes_read,
        "bytes_written": s.bytes_written,
        "map_bytes_read": result.map_bytes_read,
        "records_read": s.records_read,
        "records_kept": s.records_written,
        "records_dropped": s.records_read - s.records_written,
        "batches_read": s.batches_read,
        "batches_written": s.batches_written,
        "tombstones_kept": s.tombstones_kept,
        "invalid_records": s.invalid_records,
        "elapsed_s": round(result.elapsed_s, 3),
        "tiered": isinstance(result, TieredCleanResult),
    }
    if isinstance(result, TieredCleanResult):
        out |= {
            "remote_bytes": result.remote_bytes,
            "bytes_downloaded": result.bytes_downloaded,
            "bytes_uploaded": result.bytes_uploaded,
            "segments_skipped": result.segments_skipped,
            "summary_bytes_downloaded": result.summary_bytes_downloaded,
            "published": [
                {
                    "segment_id": str(m.remote_log_segment_id.id),
                    "start_offset": m.start_offset,
                    "end_offset": m.end_offset,
                    "size_in_bytes": m.segment_size_in_bytes,
                }
                for m in result.published
            ],
        }
    return out


def _policy_error(api: HttpApi, topic: str, partition: int) -> _HttpError | None:
    """Kafka refuses an operation that the topic's policy forbids with POLICY_VIOLATION and
    words it "... can not be <done> due to the configured policy" (``DeleteRecords`` on a
    compacted topic); a round on a topic with no ``compact`` policy is refused alike."""
    config = api.node.log(topic, partition).config  # UnknownTopicError: 404
    if config.compact:
        return None
    policy = ",".join(config.cleanup_policy) or "(none)"
    return _bad_request(
        f"Partition {topic}-{partition} can not be compacted due to the configured policy: "
        f"cleanup.policy={policy}, and only a topic whose cleanup.policy includes compact has "
        "a log cleaner"
    )


def _run_compaction(
    api: HttpApi,
    topic: str,
    partition: int,
    force: bool,
    progress: Callable[[str, int, int], None] | None,
) -> CleanResult:
    if progress is None:
        return api.node.compact_now(topic, partition, force=force)
    # ``Node.compact_now`` takes no progress callback: its cleaner's ``clean_partition`` does.
    cleaner = api.node.cleaner
    if cleaner is None:
        raise IllegalStateError("the node is not started")
    return cleaner.clean_partition(topic, partition, force=force, progress=progress)


def _ndjson(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def _compaction_stream(api: HttpApi, topic: str, partition: int, force: bool) -> Iterator[bytes]:
    """The round in a thread of its own; its progress, heartbeats and outcome as lines."""
    events: queue.Queue[tuple[str, Any]] = queue.Queue()

    def progress(phase: str, done: int, total: int) -> None:
        events.put(("progress", {"phase": phase, "done": done, "total": total}))

    def work() -> None:
        try:
            result = _run_compaction(api, topic, partition, force, progress)
        except Exception as exc:
            events.put(("error", exc))
        else:
            events.put(("result", compaction_json(result)))

    started = time.monotonic()
    threading.Thread(
        target=work, name=f"tierlog-http-compact-{topic}-{partition}", daemon=True
    ).start()
    while True:
        try:
            kind, payload = events.get(timeout=HEARTBEAT_S)
        except queue.Empty:
            yield _ndjson({"elapsed_s": round(time.monotonic() - started, 1)})
            continue
        if kind == "progress":
            yield _ndjson({"progress": payload})
        elif kind == "result":
            yield _ndjson({"result": payload})
            return
        else:
            err = _error_for(payload, api.stopping)
            if err.status >= 500 and not err.retriable:
                _LOG.error("Compacting %s-%d failed", topic, partition, exc_info=payload)
            yield _ndjson({"error": _error_object(err), "status": err.status})
            return


def _compact(api: HttpApi, req: _Request) -> _Response:
    _check_query(req, ("force",))
    topic = req.params["topic"]
    partition = _partition_param(req)
    force = _bool_param("force", req.query.get("force"), True)
    refused = _policy_error(api, topic, partition)
    if refused is not None:
        raise refused
    if req.accepts(NDJSON_CONTENT_TYPE):
        stream = _compaction_stream(api, topic, partition, force)
        return _Response(HTTPStatus.OK, b"", NDJSON_CONTENT_TYPE, stream=stream)
    return _json_response(compaction_json(_run_compaction(api, topic, partition, force, None)))


_SEGMENT: Final = r"(?P<topic>[^/]+)"
_ROUTES: Final = (
    _Route(re.compile(r"/healthz"), {"GET": _healthz}),
    _Route(re.compile(r"/metrics"), {"GET": _metrics}),
    _Route(re.compile(r"/status"), {"GET": _status}),
    _Route(re.compile(r"/tier"), {"POST": _tier}),
    _Route(re.compile(r"/topics"), {"GET": _list_topics, "POST": _create_topic}),
    _Route(re.compile(rf"/topics/{_SEGMENT}"), {"GET": _describe_topic, "DELETE": _delete_topic}),
    _Route(re.compile(rf"/topics/{_SEGMENT}/configs"), {"PATCH": _alter_configs}),
    _Route(re.compile(rf"/topics/{_SEGMENT}/records"), {"POST": _produce_any}),
    _Route(
        re.compile(rf"/topics/{_SEGMENT}/partitions/(?P<partition>[^/]+)/records"),
        {"GET": _fetch, "POST": _produce_partition},
    ),
    _Route(
        re.compile(rf"/topics/{_SEGMENT}/partitions/(?P<partition>[^/]+)/offsets"),
        {"GET": _offsets},
    ),
    _Route(
        re.compile(rf"/topics/{_SEGMENT}/partitions/(?P<partition>[^/]+)/compact"),
        {"POST": _compact},
    ),
)


def endpoints() -> list[tuple[str, str]]:
    """Every ``(method, path)`` the API serves, path parameters written ``{name}``
    (``/topics/{topic}``), in routing order. HEAD is also served wherever GET is.

    ``docs/http-api.md`` documents each of them; a test holds the two together, so that an
    endpoint added here cannot go undocumented.
    """
    out: list[tuple[str, str]] = []
    for route in _ROUTES:
        path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", route.pattern.pattern)
        out.extend((method, path) for method in route.methods)
    return out


def _error_object(err: _HttpError) -> dict[str, Any]:
    """The ``"error"`` object of an answer: type, message, the error's extra fields."""
    error: dict[str, Any] = {"type": err.error_type, "message": err.message, **err.extra}
    if err.retriable:
        error["retriable"] = True
    return error


def _error_for(exc: BaseException, stopping: bool) -> _HttpError:
    """The answer to an exception a handler raised: tierlog's types to HTTP statuses."""
    if isinstance(exc, _HttpError):
        return exc
    name = type(exc).__name__
    message = str(exc)
    if isinstance(exc, RetriableRemoteStorageException):
        return _HttpError(HTTPStatus.SERVICE_UNAVAILABLE, name, message, retriable=True)
    if isinstance(exc, IllegalStateError) and stopping:
        return _HttpError(
            HTTPStatus.SERVICE_UNAVAILABLE, "NodeStoppingError", message, retriable=True
        )
    if isinstance(exc, UnknownTopicError):
        return _HttpError(HTTPStatus.NOT_FOUND, name, message)
    if isinstance(exc, TopicExistsError):
        return _HttpError(HTTPStatus.CONFLICT, name, message)
    if isinstance(exc, OffsetOutOfRangeError):
        return _HttpError(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, name, message)
    if isinstance(exc, RecordTooLargeError | RecordBatchTooLargeError):
        return _HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, name, message)
    if isinstance(exc, ConfigError | InvalidArgumentError | ProducerStateError):
        # ConfigValueError has its own constructor: clients rebuild it as its base.
        return _HttpError(
            HTTPStatus.BAD_REQUEST, "ConfigError" if isinstance(exc, ConfigError) else name, message
        )
    if isinstance(exc, TierlogError):
        return _HttpError(HTTPStatus.INTERNAL_SERVER_ERROR, name, message)
    return _HttpError(HTTPStatus.INTERNAL_SERVER_ERROR, "InternalError", f"{name}: {message}")


# Server ------------------------------------------------------------------------------------------
class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    api: HttpApi

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, a DNS lookup that can hang for
        # seconds on a machine without reverse DNS; the name is only used for CGI.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up mid-answer is routine; anything else the handler already logged.
        _LOG.debug("Connection from %s failed", client_address, exc_info=True)


class _Server6(_Server):
    address_family = socket.AF_INET6


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = f"tierlog/{__version__}"
    sys_version = ""
    server: _Server

    def version_string(self) -> str:
        return self.server_version

    def setup(self) -> None:
        super().setup()
        # An idle or stalled client must not hold a thread forever.
        self.connection.settimeout(self.server.api.request_timeout_s)
        self.server.api._connection_opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.api._connection_closed(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        _LOG.debug("%s %s", self.address_string(), format % args)

    def handle_expect_100(self) -> bool:
        # Refuse an oversized body before the client sends it.
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = 0
        if length > self.server.api.max_request_bytes:
            self.close_connection = True
            self._send_error_json(self._too_large(length))
            return False
        return super().handle_expect_100()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """``http.server``'s own errors (bad request line, unsupported method) as JSON too."""
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "Error"
        self.close_connection = True
        self._send_error_json(_HttpError(code, "HttpError", message or phrase))

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    # ---------------------------------------------------------------------------------------------
    def _too_large(self, length: int) -> _HttpError:
        limit = self.server.api.max_request_bytes
        return _HttpError(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            "InvalidArgumentError",
            f"the body is {length} bytes, more than the {limit} this node accepts",
            extra={"max_request_bytes": limit},
        )

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise _HttpError(
                HTTPStatus.LENGTH_REQUIRED,
                "InvalidArgumentError",
                "chunked bodies are not supported: send a Content-Length",
            )
        raw = self.headers.get("Content-Length")
        if raw is None:
            if self.command in ("POST", "PATCH", "PUT"):
                # Without a length a body (if any) cannot be told from the next request.
                self.close_connection = True
            return b""
        if not raw.strip().isdigit():
            self.close_connection = True
            raise _bad_request(f"invalid Content-Length {raw!r}")
        length = int(raw)
        if length > self.server.api.max_request_bytes:
            self.close_connection = True
            raise self._too_large(length)
        body = self.rfile.read(length)
        if len(body) != length:
            self.close_connection = True
            raise _bad_request(f"the body ended after {len(body)} of {length} bytes")
        return body

    def _handle(self) -> None:
        api = self.server.api
        api._request_started()
        started = time.monotonic()
        try:
            try:
                response = self._dispatch(api)
            except Exception as exc:
                err = _error_for(exc, api.stopping)
                if err.status >= 500 and not err.retriable:
                    _LOG.error("%s %s failed", self.command, self.path, exc_info=exc)
                self._send_error_json(err)
                return
            self._send(response)
        finally:
            api._request_finished()
            _LOG.debug(
                "%s %s took %.1f ms", self.command, self.path, (time.monotonic() - started) * 1e3
            )

    def _dispatch(self, api: HttpApi) -> _Response:
        body = self._read_body()
        if api.stopping:
            self.close_connection = True
            raise _HttpError(
                HTTPStatus.SERVICE_UNAVAILABLE,
                "NodeStoppingError",
                "the node is stopping",
                retriable=True,
            )
        split = urlsplit(self.path)
        path = split.path.rstrip("/") or "/"
        for route in _ROUTES:
            match = route.pattern.fullmatch(path)
            if match is None:
                continue
            method = "GET" if self.command == "HEAD" else self.command
            handler = route.methods.get(method)
            if handler is None:
                raise _HttpError(
                    HTTPStatus.METHOD_NOT_ALLOWED,
                    "HttpError",
                    f"{self.command} is not allowed on {path}",
                    headers={"Allow": ", ".join(route.methods)},
                )
            query: dict[str, str] = {}
            try:
                pairs = parse_qsl(split.query, keep_blank_values=True, strict_parsing=False)
            except ValueError as e:
                raise _bad_request(f"invalid query string: {e}") from None
            for key, value in pairs:
                if key in query:
                    raise _bad_request(f"query parameter {key!r} given more than once")
                query[key] = value
            params = {k: unquote(v) for k, v in match.groupdict().items()}
            headers = {k.lower(): v for k, v in self.headers.items()}
            req = _Request(self.command, path, params, query, headers, body)
            return handler(api, req)
        raise _HttpError(HTTPStatus.NOT_FOUND, "HttpError", f"no endpoint {path}")

    def _send(self, response: _Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        if response.stream is None:
            self.send_header("Content-Length", str(len(response.body)))
        else:
            self.send_header("Transfer-Encoding", "chunked")
        for key, value in response.headers.items():
            self.send_header(key, value)
        if self.close_connection or self.server.api.stopping:
            self.close_connection = True
            self.send_header("Connection", "close")
        self.end_headers()
        if response.stream is not None:
            self._send_chunks(response.stream)
        elif self.command != "HEAD":
            self.wfile.write(response.body)

    def _send_chunks(self, stream: Iterator[bytes]) -> None:
        try:
            for chunk in stream:
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            # The client went away: what it asked for still ends (a round is not abandoned
            # half-way by a hang-up), nobody hears about it.
            self.close_connection = True

    def _send_error_json(self, err: _HttpError) -> None:
        error = _error_object(err)
        headers = dict(err.headers)
        if err.retriable:
            headers["Retry-After"] = str(RETRY_AFTER_S)
        response = _json_response({"error": error}, err.status, **headers)
        try:
            self._send(response)
        except OSError:
            self.close_connection = True


class HttpApi:
    """The API of one ``Node`` on ``host:port`` (module docstring); ``start`` then ``close``.

    ``fetch_timeout_s`` bounds the remote part of a fetch; None (the default) leaves it to the
    node's ``remote.fetch.max.wait.ms``, as a Kafka broker does.

    The node is neither started nor closed here: ``tierlog serve`` closes this first (no new
    request reaches a closing node), then the node.
    """

    def __init__(
        self,
        node: Node,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        fetch_timeout_s: float | None = None,
        request_timeout_s: float = 60.0,
    ) -> None:
        if not 0 <= port <= 65535:
            raise InvalidArgumentError(f"port must be in [0, 65535], got {port}")
        if max_request_bytes < 1:
            raise InvalidArgumentError(f"max_request_bytes must be >= 1, got {max_request_bytes}")
        self.node = node
        self.host = host
        self.requested_port = port
        self.max_request_bytes = max_request_bytes
        self.fetch_timeout_s = fetch_timeout_s
        self.request_timeout_s = request_timeout_s
        self.stopping = False
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Condition()
        self._in_flight = 0
        self._connections: set[socket.socket] = set()
        self._closed = False

    # Lifecycle -----------------------------------------------------------------------------------
    def start(self) -> HttpApi:
        """Bind (``OSError`` if the address is taken) and serve from a daemon thread."""
        if self._server is not None:
            return self
        if self._closed:
            raise IllegalStateError("the HTTP API is closed")
        server_class = _Server6 if ":" in self.host else _Server
        server = server_class((self.host, self.requested_port), _RequestHandler)
        server.api = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"tierlog-http-{self.port}",
            daemon=True,
        )
        self._thread.start()
        _LOG.info("HTTP API listening on %s", self.url)
        return self

    @property
    def port(self) -> int:
        """The bound port (the real one when the configured port was 0)."""
        if self._server is None:
            return self.requested_port
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://host:port`` to reach the API from this machine: a wildcard bind address
        (``0.0.0.0``, ``::``) is given as the loopback address, which it includes."""
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def close(self, grace_s: float = 5.0) -> None:
        """Stop accepting, let requests in progress finish (up to ``grace_s``), then drop the
        idle keep-alive connections. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.stopping = True
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.shutdown()
        server.server_close()
        thread.join()
        deadline = time.monotonic() + grace_s
        with self._lock:
            while self._in_flight and (remaining := deadline - time.monotonic()) > 0:
                self._lock.wait(remaining)
            if self._in_flight:
                _LOG.warning("Closing the HTTP API with %d requests in progress", self._in_flight)
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        _LOG.info("HTTP API stopped")

    def __enter__(self) -> HttpApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Bookkeeping for close -----------------------------------------------------------------------
    def _request_started(self) -> None:
        with self._lock:
            self._in_flight += 1

    def _request_finished(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self._lock.notify_all()

    def _connection_opened(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.add(conn)

    def _connection_closed(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.discard(conn)
