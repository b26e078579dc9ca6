"""Helpers of the ``s3`` plugin's tests, in a module with a name no other plugin uses (every
plugin's tests have a ``conftest``; importing helpers from "conftest" could pick another's
when several plugins' tests run in one session)."""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from services._common import Service
from services.seaweedfs import (
    SeaweedCredentials,
    remove_grpc_sockets,
    restart_seaweedfs,
    start_seaweedfs,
)

CREDENTIALS = SeaweedCredentials()


def new_bucket_name() -> str:
    """A bucket name no other test uses (S3 rules: lower case, 3-63 characters)."""
    return f"t-{uuid.uuid4().hex[:24]}"


def plugin_configs(service: Service, bucket: str, **extra: str) -> dict[str, str]:
    """The ``s3`` plugin's keys (``rsm.config.`` stripped) for ``bucket`` on ``service``."""
    credentials = service.extra.get("credentials") or CREDENTIALS
    assert isinstance(credentials, SeaweedCredentials)
    return {
        "s3.bucket.name": bucket,
        "s3.endpoint.url": service.url,
        "s3.path.style.access.enabled": "true",
        "s3.region": "us-east-1",
        "aws.access.key.id": credentials.access_key,
        "aws.secret.access.key": credentials.secret_key,
        **extra,
    }


def write_keyring(directory: Path) -> Path:
    """A JSON keyring of the built-in file key provider, with one random 256-bit key."""
    path = directory / "keyring.json"
    key = base64.b64encode(os.urandom(32)).decode("ascii")
    path.write_text(json.dumps({"active": "k1", "keys": {"k1": key}}))
    return path


def stop(service: Service) -> None:
    """Stop a test server at once: its data are thrown away, so SIGKILL rather than wait
    seconds for a clean shutdown."""
    service.kill()
    remove_grpc_sockets(service)


class PrivateServers:
    """Servers of one test (to kill, restart or throttle), every one stopped at teardown,
    restarted ones included."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._factory = tmp_path_factory
        self._started: list[Service] = []

    def __call__(self, **kwargs: Any) -> Service:
        service = start_seaweedfs(
            self._factory.mktemp("seaweedfs-private"), credentials=CREDENTIALS, **kwargs
        )
        self._started.append(service)
        return service

    def restart(self, service: Service) -> Service:
        """``restart_seaweedfs``, tracked: the new process is stopped at teardown too."""
        restarted = restart_seaweedfs(service)
        self._started.append(restarted)
        return restarted

    def stop_all(self) -> None:
        for service in self._started:
            stop(service)
