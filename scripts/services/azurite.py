"""Azurite, Microsoft's Azure Storage emulator (Blob service only), for the ``azure`` RSM.

Azurite is an npm package: ``npm ci --prefix plugins/rsm_azure`` installs the version pinned by
``plugins/rsm_azure/package-lock.json`` into ``plugins/rsm_azure/node_modules`` (git-ignored).
It is started from ``node_modules/.bin/azurite-blob`` directly, never through ``npx``: ``npx``
leaves a stray child behind on SIGTERM, and a process-group kill then misses it.

The flags, and why:

- ``--skipApiVersionCheck``: azure-storage-blob speaks a newer REST API version than Azurite
  knows and Azurite would refuse every request;
- ``--loose``: ignore headers Azurite does not implement instead of failing the request;
- ``--silent --disableTelemetry``: no access log on stdout, no network calls home;
- ``--location D``: blobs and metadata on disk, so a restart on the same directory (the fault
  tests SIGKILL it mid-request and start it again on the same port) keeps what was committed.

Azurite checks the Shared Key signature of every request, so a wrong account key is refused
with 403 ``AuthorizationFailure``, as Azure does.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

from services._common import Service, free_ports, http_answers, start_process

__all__ = [
    "ACCOUNT_KEY",
    "ACCOUNT_NAME",
    "azurite_binary",
    "blob_endpoint",
    "connection_string",
    "create_container",
    "start_azurite",
]

ACCOUNT_NAME: Final = "devstoreaccount1"
"""Azurite's well-known development account (the same in every Azurite and Azure SDK doc)."""

ACCOUNT_KEY: Final = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
"""The development account's well-known key: public, it only ever opens a local emulator."""

PACKAGE_DIR: Final = Path(__file__).resolve().parents[2] / "plugins" / "rsm_azure"
"""Where ``package.json`` pins Azurite and ``npm ci`` installs it."""


def azurite_binary() -> Path | None:
    """``node_modules/.bin/azurite-blob`` of the ``rsm_azure`` plugin (``AZURITE_BLOB`` overrides
    it), or ``None`` when it is not installed (``npm ci --prefix plugins/rsm_azure``)."""
    override = os.environ.get("AZURITE_BLOB")
    default = PACKAGE_DIR / "node_modules" / ".bin" / "azurite-blob"
    candidate = Path(override) if override else default
    return candidate if candidate.exists() else None


def blob_endpoint(service: Service) -> str:
    """The Blob endpoint of the development account: ``http://127.0.0.1:P/devstoreaccount1``."""
    return f"{service.url}/{ACCOUNT_NAME}"


def connection_string(service: Service) -> str:
    """The SDK connection string of the development account on this server."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};"
        f"BlobEndpoint={blob_endpoint(service)};"
    )


def start_azurite(directory: Path, *, port: int | None = None, timeout: float = 60.0) -> Service:
    """Start ``azurite-blob`` on 127.0.0.1 storing under ``directory``; ready when
    ``/devstoreaccount1?comp=list`` gives any HTTP answer (~1 s).

    ``port`` restarts a server on the port it had (fault tests); by default a free one.
    """
    binary = azurite_binary()
    if binary is None:
        raise FileNotFoundError(
            f"azurite-blob is not installed under {PACKAGE_DIR / 'node_modules'}: "
            "run `npm ci --prefix plugins/rsm_azure`"
        )
    if port is None:
        (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    data = directory / "data"
    data.mkdir(parents=True, exist_ok=True)
    argv = [
        str(binary),
        "--blobHost", "127.0.0.1",
        "--blobPort", str(port),
        "--location", str(data),
        "--silent",
        "--disableTelemetry",
        "--skipApiVersionCheck",
        "--loose",
    ]  # fmt: skip
    service = start_process(
        "azurite",
        argv,
        directory,
        url,
        lambda: http_answers(f"{url}/{ACCOUNT_NAME}?comp=list", ok_statuses=None),
        timeout=timeout,
    )
    service.extra["port"] = port
    service.extra["account_name"] = ACCOUNT_NAME
    service.extra["connection_string"] = connection_string(service)
    return service


def create_container(service: Service, name: str) -> None:
    """Create container ``name`` on the server (no error if it exists)."""
    from azure.core.exceptions import ResourceExistsError
    from azure.storage.blob import BlobServiceClient

    client = BlobServiceClient.from_connection_string(connection_string(service))
    with client, contextlib.suppress(ResourceExistsError):
        client.create_container(name)
