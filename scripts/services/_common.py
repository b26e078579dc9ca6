"""What every service launcher shares: free ports, readiness polling, process-group shutdown."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now (bound then released together,
    so they differ; a race with another process is possible but rare)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def http_answers(
    url: str, *, ok_statuses: Sequence[int] | None = (200,), timeout: float = 1.0
) -> bool:
    """Whether ``url`` answers (with one of ``ok_statuses``; ``None``: any HTTP answer)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return ok_statuses is None or response.status in ok_statuses
    except urllib.error.HTTPError as e:
        return ok_statuses is None or e.code in ok_statuses
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class Service:
    """A running server: its process (leader of its own process group) and where it listens."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    directory: Path
    log_path: Path
    extra: dict[str, object] = field(default_factory=dict)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the whole process group, SIGKILL it if it lingers; idempotent."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)

    def kill(self) -> None:
        """SIGKILL the process group now (fault tests: the store disappears mid-request)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(5)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn_process(
    name: str,
    argv: Sequence[str],
    directory: Path,
    url: str,
    *,
    env: dict[str, str] | None = None,
) -> Service:
    """Start ``argv`` in its own process group, output to ``<directory>/<name>.log``, without
    waiting (``wait_ready``): a cluster starts all its members before any can be ready."""
    directory.mkdir(parents=True, exist_ok=True)
    log_path = directory / f"{name}.log"
    log: IO[bytes] = log_path.open("wb")
    process = subprocess.Popen(
        list(argv),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, **(env or {})},
        cwd=directory,
    )
    log.close()
    return Service(name, url, process, directory, log_path)


def wait_ready(service: Service, ready: Callable[[], bool], *, timeout: float = 60.0) -> Service:
    """Wait until ``ready()``; on timeout or early exit, stop the service and raise with the
    tail of its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.process.poll() is not None:
            raise RuntimeError(
                f"{service.name} exited with code {service.process.returncode} before it was "
                f"ready:\n{service.log_tail()}"
            )
        if ready():
            return service
        time.sleep(0.1)
    service.stop()
    raise RuntimeError(f"{service.name} was not ready after {timeout:.0f} s:\n{service.log_tail()}")


def start_process(
    name: str,
    argv: Sequence[str],
    directory: Path,
    url: str,
    ready: Callable[[], bool],
    *,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
) -> Service:
    """``spawn_process`` then ``wait_ready``."""
    service = spawn_process(name, argv, directory, url, env=env)
    return wait_ready(service, ready, timeout=timeout)
