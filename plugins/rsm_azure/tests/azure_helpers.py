"""Helpers of the ``azure`` plugin's tests: configurations for Azurite, an inspection of the
container that does not go through the plugin, and a fault-injecting HTTP proxy.

The module has a name no other package's tests use, so that the tests of every plugin can run
in one pytest session (``conftest`` and ``test_*`` basenames would collide).
"""

from __future__ import annotations

import http.client
import os
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Literal

import pytest
from azure.storage.blob import BlobServiceClient, ContainerClient

_SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"
if str(_SCRIPTS) not in sys.path:
    sys.path.insert(0, str(_SCRIPTS))

from services._common import Service  # noqa: E402
from services.azurite import (  # noqa: E402
    ACCOUNT_KEY,
    ACCOUNT_NAME,
    azurite_binary,
    blob_endpoint,
    connection_string,
    start_azurite,
)

CONTAINER = "tierlog-test"
MiB = 1 << 20


def azure_configs(service: Service | str, **extra: str) -> dict[str, str]:
    """``rsm.config.`` keys (prefix stripped) for the emulator (a ``Service``, or the base URL
    of a proxy in front of it): the development account's Shared Key on its endpoint, and
    short retries so that a dead server fails a test in seconds, not in the SDK's minute."""
    endpoint = (
        blob_endpoint(service) if isinstance(service, Service) else f"{service}/{ACCOUNT_NAME}"
    )
    return {
        "azure.container.name": CONTAINER,
        "azure.account.name": ACCOUNT_NAME,
        "azure.account.key": ACCOUNT_KEY,
        "azure.endpoint.url": endpoint,
        "azure.retry.total": "1",
        "azure.retry.backoff.ms": "50",
        "azure.connection.timeout.ms": "2000",
        "azure.read.timeout.ms": "20000",
        **extra,
    }


def admin_container(service: Service, container: str = CONTAINER) -> ContainerClient:
    """The container through the SDK directly, not through the plugin: the tests' independent
    way to look at what is stored."""
    return BlobServiceClient.from_connection_string(
        connection_string(service)
    ).get_container_client(container)


def list_container(service: Service, prefix: str) -> dict[str, int]:
    """Every committed blob under ``prefix`` with its size (independent of the plugin)."""
    with admin_container(service) as container:
        return {str(b.name): int(b.size) for b in container.list_blobs(name_starts_with=prefix)}


def read_blob(service: Service, key: str) -> bytes:
    """A blob's bytes (independent of the plugin)."""
    with admin_container(service) as container:
        return container.download_blob(key).readall()


def persist(service: Service) -> Service:
    """Stop ``service`` with SIGTERM (Azurite saves its metadata, which it otherwise does every
    5 s) and start it again on the same directory and port: what was committed before survives
    a later SIGKILL."""
    service.stop()
    return start_azurite(service.directory, port=int(str(service.extra["port"])))


def require_azurite() -> None:
    """Skip the test when Azurite is not installed, with the command that installs it; in CI
    (``CI=true``) fail instead: CI must never pass by skipping the real-server tests."""
    if azurite_binary() is not None:
        return
    reason = (
        "Azurite is not installed (plugins/rsm_azure/node_modules/.bin/azurite-blob): run "
        "`npm ci --prefix plugins/rsm_azure`"
    )
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail(f"{reason}; CI must run the tests against the real emulator", pytrace=False)
    pytest.skip(reason)


# Fault injection ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    """What the proxy does with one request: forward it, answer an error status itself, or
    forward it and cut the response body after ``cut_after`` bytes (a connection lost
    mid-download)."""

    kind: Literal["forward", "status", "cut"] = "forward"
    status: int = 0
    error_code: str = ""
    cut_after: int = 0


FORWARD = Answer()
Plan = Callable[[str, str], Answer]
"""(method, path with query) -> what to do."""

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
    }
)


class FaultProxy:
    """An HTTP proxy in front of Azurite that injects the faults a real Azure account shows
    under load (503 ServerBusy, 500 InternalError, a body cut short), per request, as ``plan``
    decides. It does not imitate Azure: every answer it does not inject is Azurite's own.

    The SDK signs requests with Shared Key over the path and headers, not the host, so the
    proxy forwards them unchanged. ``requests`` lists what it saw, as ``(method, path)``.
    """

    def __init__(self, upstream: Service, plan: Plan = lambda _m, _p: FORWARD) -> None:
        self.plan = plan
        self.requests: list[tuple[str, str]] = []
        self._upstream_port = int(str(upstream.extra["port"]))
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                proxy.requests.append((self.command, self.path))
                answer = proxy.plan(self.command, self.path)
                if answer.kind == "status":
                    payload = (
                        '<?xml version="1.0" encoding="utf-8"?><Error><Code>'
                        f"{answer.error_code}</Code><Message>injected</Message></Error>"
                    ).encode()
                    self.send_response(answer.status)
                    self.send_header("x-ms-error-code", answer.error_code)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                    return
                upstream = http.client.HTTPConnection("127.0.0.1", proxy._upstream_port, timeout=30)
                try:
                    headers = {
                        k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP
                    }
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    data = response.read()
                finally:
                    upstream.close()
                self.send_response(response.status, response.reason)
                for key, value in response.getheaders():
                    if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                if answer.kind == "cut":
                    self.wfile.write(data[: answer.cut_after])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
