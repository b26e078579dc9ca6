"""Helpers shared by the ``gcs`` plugin's test modules (a uniquely named module, so that it
cannot collide with another package's helpers when several plugins' tests run together)."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services._common import Service

BUCKET = "tierlog-test"


def gcs_configs(service: Service, **extra: str) -> dict[str, str]:
    """``rsm.config.`` keys (prefix stripped) for the emulator: anonymous access, short
    retries so that a dead server fails a test in seconds, not in the default 30 s."""
    return {
        "gcs.bucket.name": BUCKET,
        "gcs.endpoint.url": service.url,
        "gcs.credentials.default": "false",
        "gcs.retry.deadline.ms": "3000",
        "gcs.retry.initial.backoff.ms": "50",
        "gcs.retry.max.backoff.ms": "500",
        **extra,
    }


def list_bucket(service: Service, prefix: str) -> dict[str, int]:
    """Every object under ``prefix`` with its size, listed through the JSON API with plain
    ``urllib``: an inspection independent of the plugin and of google-cloud-storage."""
    found: dict[str, int] = {}
    token = ""
    while True:
        query = {"prefix": prefix, **({"pageToken": token} if token else {})}
        url = f"{service.url}/storage/v1/b/{BUCKET}/o?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            page = json.load(response)
        for item in page.get("items", []):
            found[item["name"]] = int(item["size"])
        token = page.get("nextPageToken", "")
        if not token:
            return found


def read_object(service: Service, key: str) -> bytes:
    """An object's bytes through plain HTTP (independent of the plugin)."""
    url = (
        f"{service.url}/download/storage/v1/b/{BUCKET}/o/"
        f"{urllib.parse.quote(key, safe='')}?alt=media"
    )
    with urllib.request.urlopen(url, timeout=30) as response:
        data: bytes = response.read()
        return data
