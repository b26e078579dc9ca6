"""The HTTP transport under the Azure SDK: counts every request for the RSM's metrics.

Why a transport and not a pipeline policy: azure-storage-blob builds its own policy list and
offers no public hook that sees every attempt, including the ones that fail before any answer
(connection refused, timeout). The transport is below the SDK's retry policy, so each retry,
each staged block and each page of a listing is one call here, exactly what the
``RequestObserver`` contract asks for ("every HTTP request").

It also owns the connection pool: the SDK's default (``requests``' 10 connections) is too small
for several copies each staging ``upload.parallelism`` blocks at once, and connections above the
pool size are opened, used once and thrown away.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

import requests
from azure.core.pipeline.transport import HttpRequest, HttpResponse, HttpTransport
from azure.core.pipeline.transport import RequestsTransport as _RequestsTransport
from requests.adapters import HTTPAdapter
from tierlog.storage.objectstore.backend import Operation, Outcome, RequestObserver
from urllib3.util.retry import Retry

__all__ = [
    "READ_BLOCK_SIZE",
    "ObservedTransport",
    "classify_request",
    "install_url_redaction",
    "outcome_of",
    "redact",
]

_LOG = logging.getLogger(__name__)

_SOCKET_BLOCK_SIZE = 64 * 1024
"""Bytes per socket ``send`` of request bodies (http.client's default is 8 KiB, which costs
throughput on multi-MiB blocks; azure-core's own adapter uses 32 KiB)."""


READ_BLOCK_SIZE = 1 << 20
"""Bytes per read of a streamed response body: what a ranged get holds in memory at a time."""


_SECRET_PARAMS: Final = re.compile(r"(?i)\b(sig|AccountKey|SharedAccessSignature)=[^&;\s'\"]*")


def redact(text: str) -> str:
    """Remove SAS signatures and account keys from ``text`` (a URL, a connection string)."""
    return _SECRET_PARAMS.sub(lambda m: f"{m.group(1)}=<redacted>", text)


class _RedactingFilter(logging.Filter):
    """Rewrites a log record whose message carries a SAS signature."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is the logging module's business
            return True
        if "sig=" in message.lower() or "accountkey=" in message.lower():
            record.msg, record.args = redact(message), None
        return True


_REDACTION_LOCK = threading.Lock()
_REDACTION_INSTALLED = False


def install_url_redaction() -> None:
    """Redact SAS signatures from ``urllib3``'s DEBUG lines, which quote every request URL: a
    SAS token travels in the query string, and a broker run with DEBUG logging must not write
    it to its log. (azure-core's own HTTP logging already redacts it.) Idempotent."""
    global _REDACTION_INSTALLED
    with _REDACTION_LOCK:
        if not _REDACTION_INSTALLED:
            logging.getLogger("urllib3.connectionpool").addFilter(_RedactingFilter())
            _REDACTION_INSTALLED = True


def classify_request(method: str, url: str) -> Operation:
    """The observer's operation for a Blob REST request, from its method and query string."""
    query = parse_qs(urlsplit(url).query)
    comp = query.get("comp", [""])[0]
    method = method.upper()
    if method == "PUT":
        if comp == "block":
            return "upload_part"
        if comp == "blocklist":
            return "complete_upload"
        return "upload"
    if method == "DELETE" or (method == "POST" and comp == "batch"):
        return "delete"
    if method == "GET" and comp == "list":
        return "list"
    if method == "HEAD" or (method == "GET" and query.get("restype") == ["container"]):
        return "head"
    return "get"


def outcome_of(status: int) -> Outcome:
    """``ok`` for success and for 416 (a read at the end of a blob: an empty answer, not a
    failure); ``not_found`` for 404; ``throttled`` for 503 (Azure's ``ServerBusy``) and 429;
    ``error`` otherwise."""
    if status < 400 or status == 416:
        return "ok"
    if status == 404:
        return "not_found"
    if status in (429, 503):
        return "throttled"
    return "error"


class _Adapter(HTTPAdapter):
    """``requests``' adapter with a larger socket write block and no urllib3 retries (the SDK
    retries, with its own policy)."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["blocksize"] = _SOCKET_BLOCK_SIZE
        super().init_poolmanager(*args, **kwargs)


def _session(pool_size: int) -> requests.Session:
    session = requests.Session()
    adapter = _Adapter(
        pool_connections=4,
        pool_maxsize=pool_size,
        max_retries=Retry(total=False, redirect=False, raise_on_status=False),
    )
    for scheme in ("http://", "https://"):
        session.mount(scheme, adapter)
    return session


class ObservedTransport(HttpTransport):  # type: ignore[type-arg]
    """azure-core's ``RequestsTransport`` on a session of ``pool_size`` connections, telling
    ``observer`` about every request it sends (and every one that fails to get an answer)."""

    def __init__(
        self,
        observer: RequestObserver,
        *,
        pool_size: int,
        connection_timeout: float,
        read_timeout: float,
    ) -> None:
        self._observer = observer
        self._session = _session(pool_size)
        self._inner = _RequestsTransport(
            session=self._session,
            session_owner=False,
            connection_timeout=connection_timeout,
            read_timeout=read_timeout,
            connection_data_block_size=READ_BLOCK_SIZE,
        )

    def send(self, request: HttpRequest, **kwargs: Any) -> HttpResponse:
        operation = classify_request(request.method, request.url)
        try:
            response: HttpResponse = self._inner.send(request, **kwargs)
        except BaseException:
            self._report(operation, "error")
            raise
        sent = _content_length(request.headers)
        received = 0 if request.method.upper() == "HEAD" else _content_length(response.headers)
        self._report(operation, outcome_of(response.status_code), sent, received)
        return response

    def _report(
        self, operation: Operation, outcome: Outcome, sent: int = 0, received: int = 0
    ) -> None:
        # Metrics must never fail a request.
        try:
            self._observer(operation, outcome=outcome, bytes_sent=sent, bytes_received=received)
        except Exception:
            _LOG.exception("request observer failed on %s (%s)", operation, outcome)

    def open(self) -> None:
        self._inner.open()

    def close(self) -> None:
        self._inner.close()
        self._session.close()

    def __enter__(self) -> ObservedTransport:
        self.open()
        return self

    def __exit__(self, *args: object) -> None:
        # The SDK's clients exit their transport when used as context managers; the backend
        # owns this one and closes it in ``close``.
        pass

    def sleep(self, duration: float) -> None:
        self._inner.sleep(duration)


def _content_length(headers: Any) -> int:
    try:
        return int(headers.get("Content-Length") or 0)
    except (TypeError, ValueError):
        return 0
