"""The ``rsm.config.azure.*`` keys: parsed and validated at ``configure``, never logged.

Kept apart from the backend so that reading and checking a configuration needs no Azure SDK
import, and so that the README's table and the parser cannot drift: both come from
``AZURE_CONFIG_KEYS``. Secrets (account key, SAS token, connection string) are held by
``AzureConfig`` but excluded from its ``repr``, and no error message ever quotes them.

The shape is the one of every first-party object-store plugin (``tierlog_rsm_s3``,
``tierlog_rsm_gcs``): a constant per key, ``AZURE_CONFIG_KEYS`` (a ``ConfigKey`` per key, with
its default and meaning) and ``AzureConfig``, the validated settings, built by
``AzureConfig.from_configs(configs, upload)`` and naming its keys in ``AzureConfig.keys()``.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tierlog.spi import ConfigError
from tierlog.storage.objectstore.backend import UploadSettings
from tierlog.storage.objectstore.config import ConfigKey, full_key, get_int, get_str

__all__ = [
    "ACCOUNT_KEY",
    "ACCOUNT_NAME",
    "API_VERSION",
    "AZURE_CONFIG_KEYS",
    "CONNECTION_STRING",
    "CONNECTION_TIMEOUT_MS",
    "CONTAINER_NAME",
    "CREDENTIAL_KEYS",
    "ENDPOINT_URL",
    "MAX_RETRY_BACKOFF_S",
    "READ_TIMEOUT_MS",
    "RETRY_BACKOFF_MS",
    "RETRY_TOTAL",
    "SAS_TOKEN",
    "UPLOAD_BLOCK_SIZE",
    "AzureConfig",
]

KiB: Final = 1 << 10
MiB: Final = 1 << 20

CONTAINER_NAME: Final = "azure.container.name"
ACCOUNT_NAME: Final = "azure.account.name"
ACCOUNT_KEY: Final = "azure.account.key"
SAS_TOKEN: Final = "azure.sas.token"
CONNECTION_STRING: Final = "azure.connection.string"
ENDPOINT_URL: Final = "azure.endpoint.url"
UPLOAD_BLOCK_SIZE: Final = "azure.upload.block.size"
API_VERSION: Final = "azure.api.version"
RETRY_TOTAL: Final = "azure.retry.total"
RETRY_BACKOFF_MS: Final = "azure.retry.backoff.ms"
CONNECTION_TIMEOUT_MS: Final = "azure.connection.timeout.ms"
READ_TIMEOUT_MS: Final = "azure.read.timeout.ms"

CREDENTIAL_KEYS: Final = (CONNECTION_STRING, ACCOUNT_KEY, SAS_TOKEN)
"""The keys that carry a secret; named (never quoted) in authentication error messages."""

MAX_BLOCK_SIZE: Final = 4000 * MiB
"""Azure's largest block (Put Block, API version 2019-12-12 and later)."""
MIN_UPLOAD_BLOCK_SIZE: Final = 1 * KiB
DEFAULT_RETRY_TOTAL: Final = 3
DEFAULT_RETRY_BACKOFF_MS: Final = 500
MAX_RETRY_BACKOFF_S: Final = 30.0
DEFAULT_CONNECTION_TIMEOUT_MS: Final = 20_000
DEFAULT_READ_TIMEOUT_MS: Final = 60_000

AZURE_CONFIG_KEYS: Final[tuple[ConfigKey, ...]] = (
    ConfigKey(
        CONTAINER_NAME,
        "string",
        default="(required)",
        doc="The blob container segments are stored in. It must exist (tierlog never creates it); "
        "3-63 characters: lowercase letters, digits and single hyphens.",
    ),
    ConfigKey(
        ACCOUNT_NAME,
        "string",
        default="(unset)",
        doc="The storage account. Required unless azure.connection.string or azure.endpoint.url "
        "names it; the endpoint is then https://<account>.blob.core.windows.net.",
    ),
    ConfigKey(
        ACCOUNT_KEY,
        "string",
        default="(unset)",
        doc="Shared Key credential (base64) of azure.account.name. Secret: never logged.",
    ),
    ConfigKey(
        SAS_TOKEN,
        "string",
        default="(unset)",
        doc="A SAS token (with or without the leading '?') granting read, write, delete and list "
        "on the container. Secret: never logged.",
    ),
    ConfigKey(
        CONNECTION_STRING,
        "string",
        default="(unset)",
        doc="A full connection string (account, key or SAS, endpoints); excludes the other "
        "credential keys and the account/endpoint keys. Secret: never logged.",
    ),
    ConfigKey(
        ENDPOINT_URL,
        "string",
        default="(unset)",
        doc="The Blob service URL, for an emulator or a private endpoint, e.g. "
        "http://127.0.0.1:10000/devstoreaccount1 for Azurite.",
    ),
    ConfigKey(
        UPLOAD_BLOCK_SIZE,
        "long",
        default="(upload.part.size)",
        doc=f"Bytes per staged block of a large upload ({MIN_UPLOAD_BLOCK_SIZE} to "
        f"{MAX_BLOCK_SIZE}; at most 50,000 blocks per object, so the largest object is 50,000 "
        "x this). An upload holds at most this x upload.parallelism of block buffers.",
    ),
    ConfigKey(
        API_VERSION,
        "string",
        default="(the SDK's newest)",
        doc="The Blob REST API version to speak, for emulators or Azure Stack that lag behind "
        "(e.g. 2025-11-05).",
    ),
    ConfigKey(
        RETRY_TOTAL,
        "int",
        default=str(DEFAULT_RETRY_TOTAL),
        doc="Retries of a failed request (5xx, 503 ServerBusy, timeouts, connection errors) by the "
        "SDK before the RSM raises a retriable error (0-20).",
    ),
    ConfigKey(
        RETRY_BACKOFF_MS,
        "int",
        default=str(DEFAULT_RETRY_BACKOFF_MS),
        doc="Delay before the first retry; it doubles at each retry (+-20% jitter, at most "
        f"{MAX_RETRY_BACKOFF_S:.0f} s).",
    ),
    ConfigKey(
        CONNECTION_TIMEOUT_MS,
        "int",
        default=str(DEFAULT_CONNECTION_TIMEOUT_MS),
        doc="Connection establishment timeout of each request.",
    ),
    ConfigKey(
        READ_TIMEOUT_MS,
        "int",
        default=str(DEFAULT_READ_TIMEOUT_MS),
        doc="Socket read timeout of each request (time without a byte, not a total).",
    ),
)

_CONTAINER_NAME = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}")
_ACCOUNT_NAME = re.compile(r"[A-Za-z0-9]{1,64}")
_API_VERSION = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True, slots=True)
class AzureConfig:
    """The Azure side of the configuration, validated. Secrets are excluded from ``repr`` so
    that a settings object printed in a traceback or a log line leaks nothing."""

    container: str
    account_name: str | None = None
    endpoint_url: str | None = None
    account_key: str | None = field(default=None, repr=False)
    sas_token: str | None = field(default=None, repr=False)
    connection_string: str | None = field(default=None, repr=False)
    upload_block_size: int = 8 * MiB
    api_version: str | None = None
    retry_total: int = DEFAULT_RETRY_TOTAL
    retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_MS / 1000
    connection_timeout_s: float = DEFAULT_CONNECTION_TIMEOUT_MS / 1000
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_MS / 1000

    @staticmethod
    def keys() -> frozenset[str]:
        """Every ``azure.*`` key (``backend_config_keys`` of the RSM)."""
        return frozenset(k.name for k in AZURE_CONFIG_KEYS)

    @property
    def credential_kind(self) -> str:
        """Which credential is in use, for messages: never the secret itself."""
        if self.connection_string is not None:
            return CONNECTION_STRING
        if self.account_key is not None:
            return ACCOUNT_KEY
        if self.sas_token is not None:
            return SAS_TOKEN
        return "DefaultAzureCredential"

    @classmethod
    def from_configs(cls, configs: Mapping[str, str], upload: UploadSettings) -> AzureConfig:
        """Parse and check the ``azure.*`` keys; ``upload`` gives the default block size.

        Raises ``ConfigError`` naming the key; a secret's value is never part of the message.
        """
        container = get_str(configs, CONTAINER_NAME)
        if container is None:
            raise ConfigError(
                f"{full_key(CONTAINER_NAME)} is required: the name of an existing blob container"
            )
        if container != "$root" and not _CONTAINER_NAME.fullmatch(container):
            raise ConfigError(
                f"{full_key(CONTAINER_NAME)} must be 3-63 lowercase letters, digits and single "
                f"hyphens, starting and ending with a letter or digit, got {container!r}"
            )
        account = get_str(configs, ACCOUNT_NAME)
        if account is not None and not _ACCOUNT_NAME.fullmatch(account):
            raise ConfigError(
                f"{full_key(ACCOUNT_NAME)} must be letters and digits only, got {account!r}"
            )
        endpoint = get_str(configs, ENDPOINT_URL)
        if endpoint is not None:
            if not re.match(r"https?://[^/\s]+", endpoint):
                raise ConfigError(
                    f"{full_key(ENDPOINT_URL)} must be an http:// or https:// URL, got {endpoint!r}"
                )
            endpoint = endpoint.rstrip("/")
        key = get_str(configs, ACCOUNT_KEY)
        if key is not None:
            try:
                base64.b64decode(key, validate=True)
            except (binascii.Error, ValueError):
                raise ConfigError(
                    f"{full_key(ACCOUNT_KEY)} is not valid base64 (value not shown): copy the "
                    "storage account's access key exactly"
                ) from None
        sas = get_str(configs, SAS_TOKEN)
        if sas is not None:
            sas = sas.removeprefix("?")
        connection_string = get_str(configs, CONNECTION_STRING)

        if connection_string is not None:
            others = [
                k
                for k in (ACCOUNT_KEY, SAS_TOKEN, ACCOUNT_NAME, ENDPOINT_URL)
                if get_str(configs, k) is not None
            ]
            if others:
                raise ConfigError(
                    f"{full_key(CONNECTION_STRING)} already names the account, endpoint and "
                    f"credential: remove {', '.join(full_key(k) for k in others)}"
                )
        else:
            if key is not None and sas is not None:
                raise ConfigError(
                    f"set one of {full_key(ACCOUNT_KEY)} and {full_key(SAS_TOKEN)}, not both"
                )
            if account is None and endpoint is None:
                raise ConfigError(
                    f"{full_key(ACCOUNT_NAME)} is required (or {full_key(ENDPOINT_URL)}, or "
                    f"{full_key(CONNECTION_STRING)}): the storage account to use"
                )
            if key is not None and account is None:
                raise ConfigError(
                    f"{full_key(ACCOUNT_KEY)} needs {full_key(ACCOUNT_NAME)}: a Shared Key "
                    "signature names the account"
                )

        upload_block = get_int(
            configs,
            UPLOAD_BLOCK_SIZE,
            upload.part_size,
            minimum=MIN_UPLOAD_BLOCK_SIZE,
            maximum=MAX_BLOCK_SIZE,
            unit=" (bytes)",
        )
        api_version = get_str(configs, API_VERSION)
        if api_version is not None and not _API_VERSION.fullmatch(api_version):
            raise ConfigError(
                f"{full_key(API_VERSION)} must be a REST API version like 2025-11-05, "
                f"got {api_version!r}"
            )
        retry_total = get_int(configs, RETRY_TOTAL, DEFAULT_RETRY_TOTAL, minimum=0, maximum=20)
        backoff_ms = get_int(
            configs,
            RETRY_BACKOFF_MS,
            DEFAULT_RETRY_BACKOFF_MS,
            minimum=0,
            maximum=int(MAX_RETRY_BACKOFF_S * 1000),
            unit=" (ms)",
        )
        connect_ms = get_int(
            configs, CONNECTION_TIMEOUT_MS, DEFAULT_CONNECTION_TIMEOUT_MS, minimum=1, unit=" (ms)"
        )
        read_ms = get_int(
            configs, READ_TIMEOUT_MS, DEFAULT_READ_TIMEOUT_MS, minimum=1, unit=" (ms)"
        )
        return cls(
            container=container,
            account_name=account,
            endpoint_url=endpoint,
            account_key=key,
            sas_token=sas,
            connection_string=connection_string,
            upload_block_size=upload_block,
            api_version=api_version,
            retry_total=retry_total,
            retry_backoff_s=backoff_ms / 1000,
            connection_timeout_s=connect_ms / 1000,
            read_timeout_s=read_ms / 1000,
        )
