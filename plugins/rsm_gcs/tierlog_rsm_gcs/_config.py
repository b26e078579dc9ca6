"""The ``gcs.*`` keys of ``rsm.config.``: parsed and validated once, at ``configure``.

Everything a user can get wrong is refused here with a ``ConfigError`` naming the key, so that a
broker fails at start-up rather than on its first copy. Secret values (the credentials JSON) are
never echoed in a message: ``tierlog.properties`` parsers quote the value they refuse, so secret
keys are checked by hand. Messages name keys as the user typed them, ``rsm.config.gcs...``,
like the core's (``tierlog.storage.objectstore.config``), whose getters are reused.

The shape is the one of every first-party object-store plugin (``tierlog_rsm_s3``,
``tierlog_rsm_azure``): a constant per key, ``GCS_CONFIG_KEYS`` (a ``ConfigKey`` per key, with its
default and meaning) and ``GcsConfig``, the validated settings, built by
``GcsConfig.from_configs(configs, upload)`` and naming its keys in ``GcsConfig.keys()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tierlog.spi import ConfigError
from tierlog.storage.objectstore.backend import UploadSettings
from tierlog.storage.objectstore.config import (
    ConfigKey,
    full_key,
    get_bool,
    get_int,
    get_str,
)

__all__ = [
    "BUCKET_NAME",
    "CHUNK_ALIGNMENT",
    "CHUNK_SIZE",
    "CREDENTIALS_DEFAULT",
    "CREDENTIALS_JSON",
    "CREDENTIALS_PATH",
    "ENDPOINT_URL",
    "GCS_CONFIG_KEYS",
    "MAX_CONNECTIONS",
    "PROJECT_ID",
    "REQUEST_TIMEOUT_MS",
    "RETRY_DEADLINE_MS",
    "RETRY_INITIAL_BACKOFF_MS",
    "RETRY_MAX_BACKOFF_MS",
    "GcsConfig",
]

BUCKET_NAME: Final = "gcs.bucket.name"
PROJECT_ID: Final = "gcs.project.id"
ENDPOINT_URL: Final = "gcs.endpoint.url"
CREDENTIALS_DEFAULT: Final = "gcs.credentials.default"
CREDENTIALS_JSON: Final = "gcs.credentials.json"
CREDENTIALS_PATH: Final = "gcs.credentials.path"
CHUNK_SIZE: Final = "gcs.resumable.upload.chunk.size"
REQUEST_TIMEOUT_MS: Final = "gcs.request.timeout.ms"
RETRY_DEADLINE_MS: Final = "gcs.retry.deadline.ms"
RETRY_INITIAL_BACKOFF_MS: Final = "gcs.retry.initial.backoff.ms"
RETRY_MAX_BACKOFF_MS: Final = "gcs.retry.max.backoff.ms"
MAX_CONNECTIONS: Final = "gcs.http.max.connections"

CHUNK_ALIGNMENT: Final = 256 * 1024
"""GCS refuses a non-final resumable chunk whose size is not a multiple of 256 KiB."""

DEFAULT_REQUEST_TIMEOUT_MS: Final = 60_000
DEFAULT_RETRY_DEADLINE_MS: Final = 30_000
DEFAULT_RETRY_INITIAL_BACKOFF_MS: Final = 1_000
DEFAULT_RETRY_MAX_BACKOFF_MS: Final = 32_000
DEFAULT_MAX_CONNECTIONS: Final = 32

MAX_CHUNK_SIZE: Final = 1 << 30
"""A chunk is held in memory whole while it is sent; 1 GiB is far past any useful value."""

GCS_CONFIG_KEYS: Final[tuple[ConfigKey, ...]] = (
    ConfigKey(
        BUCKET_NAME,
        "string",
        default="(required)",
        doc="The bucket that holds the segments: its name only, no gs://, no path (a key "
        "prefix goes in key.prefix). It must exist: configure checks it with one listing "
        "request.",
    ),
    ConfigKey(
        PROJECT_ID,
        "string",
        default="(unset)",
        doc="The project of requests; by default the credentials' own. Object requests do not "
        "need one.",
    ),
    ConfigKey(
        ENDPOINT_URL,
        "string",
        default="(unset: https://storage.googleapis.com)",
        doc="The JSON API endpoint, an http:// or https:// URL: an emulator "
        "(http://127.0.0.1:4443) or a private endpoint (Private Service Connect).",
    ),
    ConfigKey(
        CREDENTIALS_DEFAULT,
        "boolean",
        default="(unset)",
        doc="true: Application Default Credentials (what happens anyway when no other "
        "credentials key is set). false with neither gcs.credentials.json nor "
        "gcs.credentials.path: anonymous requests (an emulator, a public bucket).",
    ),
    ConfigKey(
        CREDENTIALS_JSON,
        "string",
        default="(unset)",
        doc="The content of a service account key file (type service_account) or of a user's "
        "credentials (authorized_user). Secret: never logged or shown.",
    ),
    ConfigKey(
        CREDENTIALS_PATH,
        "string",
        default="(unset)",
        doc="The path of such a file. Set at most one of gcs.credentials.json, "
        "gcs.credentials.path and gcs.credentials.default=true.",
    ),
    ConfigKey(
        CHUNK_SIZE,
        "int",
        default="(upload.part.size rounded up to 256 KiB)",
        doc="Bytes per resumable upload chunk, a multiple of 256 KiB (GCS's rule), at most "
        "1 GiB. Upload memory is about this much (the SDK holds the chunk being sent); larger "
        "chunks mean fewer requests.",
    ),
    ConfigKey(
        REQUEST_TIMEOUT_MS,
        "int",
        default=str(DEFAULT_REQUEST_TIMEOUT_MS),
        doc="Timeout of one HTTP request's read, in milliseconds (1 ms to a day).",
    ),
    ConfigKey(
        RETRY_DEADLINE_MS,
        "int",
        default=str(DEFAULT_RETRY_DEADLINE_MS),
        doc="How long the client retries a request that failed transiently (429, 5xx, 408, "
        "timeouts, lost connections) before the RSM raises the retriable error.",
    ),
    ConfigKey(
        RETRY_INITIAL_BACKOFF_MS,
        "int",
        default=str(DEFAULT_RETRY_INITIAL_BACKOFF_MS),
        doc="First backoff of those retries; it doubles each time (with jitter), up to "
        "gcs.retry.max.backoff.ms.",
    ),
    ConfigKey(
        RETRY_MAX_BACKOFF_MS,
        "int",
        default=str(DEFAULT_RETRY_MAX_BACKOFF_MS),
        doc="The longest backoff (GCS's recommended maximum); not below "
        "gcs.retry.initial.backoff.ms.",
    ),
    ConfigKey(
        MAX_CONNECTIONS,
        "int",
        default=str(DEFAULT_MAX_CONNECTIONS),
        doc="HTTP connections kept open to the endpoint (concurrent copies, fetches and "
        "prefetches), 1-1024.",
    ),
)
"""Every key this plugin reads, documented (the common ``upload.*``, cache, compression and
encryption keys belong to the core's ``CONFIG_KEYS`` and are not repeated here)."""


@dataclass(frozen=True, slots=True)
class GcsConfig:
    """The validated ``gcs.*`` settings. ``credentials_json`` is secret: excluded from ``repr``."""

    bucket: str
    project: str | None = None
    endpoint: str | None = None
    credentials_default: bool | None = None
    credentials_json: str | None = None
    credentials_path: Path | None = None
    chunk_size: int = 8 * 1024 * 1024
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_MS / 1000
    retry_deadline_s: float = DEFAULT_RETRY_DEADLINE_MS / 1000
    retry_initial_backoff_s: float = DEFAULT_RETRY_INITIAL_BACKOFF_MS / 1000
    retry_max_backoff_s: float = DEFAULT_RETRY_MAX_BACKOFF_MS / 1000
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    def __repr__(self) -> str:
        json_state = "<set>" if self.credentials_json is not None else None
        return (
            f"GcsConfig(bucket={self.bucket!r}, project={self.project!r}, "
            f"endpoint={self.endpoint!r}, credentials_default={self.credentials_default!r}, "
            f"credentials_json={json_state}, credentials_path={self.credentials_path!r}, "
            f"chunk_size={self.chunk_size})"
        )

    @staticmethod
    def keys() -> frozenset[str]:
        """The plugin's keys (without ``rsm.config.``), for ``backend_config_keys``."""
        return frozenset(key.name for key in GCS_CONFIG_KEYS)

    @classmethod
    def from_configs(cls, configs: Mapping[str, str], upload: UploadSettings) -> GcsConfig:
        """Validate the ``gcs.*`` keys of ``configs`` (other keys are ignored: they belong to
        the core). ``upload.part_size`` is the resumable chunk size when
        ``gcs.resumable.upload.chunk.size`` is unset, rounded up to a multiple of 256 KiB."""
        bucket = get_str(configs, BUCKET_NAME)
        if bucket is None:
            raise ConfigError(
                f"{full_key(BUCKET_NAME)} is required: the name of the GCS bucket that holds the "
                f"segments ({full_key(BUCKET_NAME)}=my-bucket)"
            )
        if "/" in bucket or ":" in bucket:
            raise ConfigError(
                f"{full_key(BUCKET_NAME)} must be a bucket name only, got {bucket!r}: no gs:// "
                "scheme and no path (a key prefix goes in rsm.config.key.prefix)"
            )

        endpoint = get_str(configs, ENDPOINT_URL)
        if endpoint is not None:
            if not endpoint.startswith(("http://", "https://")):
                raise ConfigError(
                    f"{full_key(ENDPOINT_URL)} must be an http:// or https:// URL such as "
                    f"https://storage.googleapis.com, got {endpoint!r}"
                )
            endpoint = endpoint.rstrip("/")

        credentials_default = (
            get_bool(configs, CREDENTIALS_DEFAULT, True) if CREDENTIALS_DEFAULT in configs else None
        )
        raw_json = configs.get(CREDENTIALS_JSON)
        credentials_json = raw_json if raw_json is not None and raw_json.strip() else None
        path_text = get_str(configs, CREDENTIALS_PATH)
        credentials_path = Path(path_text).expanduser() if path_text is not None else None
        chosen = [
            key
            for key, given in (
                (CREDENTIALS_JSON, credentials_json is not None),
                (CREDENTIALS_PATH, credentials_path is not None),
                (CREDENTIALS_DEFAULT, credentials_default is True),
            )
            if given
        ]
        if len(chosen) > 1:
            raise ConfigError(
                f"conflicting credentials: {', '.join(full_key(k) for k in chosen)} are all "
                f"set; set only one of {full_key(CREDENTIALS_JSON)}, "
                f"{full_key(CREDENTIALS_PATH)} or {full_key(CREDENTIALS_DEFAULT)}=true"
            )
        if credentials_path is not None and not credentials_path.is_file():
            raise ConfigError(
                f"{full_key(CREDENTIALS_PATH)} must name a readable credentials file, "
                f"{str(credentials_path)!r} is not a file"
            )

        if configs.get(CHUNK_SIZE) is not None and str(configs[CHUNK_SIZE]).strip():
            chunk_size = get_int(
                configs,
                CHUNK_SIZE,
                0,
                minimum=CHUNK_ALIGNMENT,
                maximum=MAX_CHUNK_SIZE,
                unit=" (bytes)",
            )
            if chunk_size % CHUNK_ALIGNMENT:
                raise ConfigError(
                    f"{full_key(CHUNK_SIZE)} must be a multiple of 256 KiB ({CHUNK_ALIGNMENT} "
                    f"bytes), as GCS requires of resumable upload chunks, got {chunk_size} (e.g. "
                    f"{8 * 1024 * 1024} for 8 MiB)"
                )
        else:
            chunk_size = -(-max(upload.part_size, 1) // CHUNK_ALIGNMENT) * CHUNK_ALIGNMENT

        initial = _positive_ms(configs, RETRY_INITIAL_BACKOFF_MS, DEFAULT_RETRY_INITIAL_BACKOFF_MS)
        maximum = _positive_ms(configs, RETRY_MAX_BACKOFF_MS, DEFAULT_RETRY_MAX_BACKOFF_MS)
        if maximum < initial:
            raise ConfigError(
                f"{full_key(RETRY_MAX_BACKOFF_MS)} ({maximum * 1000:.0f}) must not be below "
                f"{full_key(RETRY_INITIAL_BACKOFF_MS)} ({initial * 1000:.0f})"
            )

        return cls(
            bucket=bucket,
            project=get_str(configs, PROJECT_ID),
            endpoint=endpoint,
            credentials_default=credentials_default,
            credentials_json=credentials_json,
            credentials_path=credentials_path,
            chunk_size=chunk_size,
            request_timeout_s=_positive_ms(configs, REQUEST_TIMEOUT_MS, DEFAULT_REQUEST_TIMEOUT_MS),
            retry_deadline_s=_positive_ms(configs, RETRY_DEADLINE_MS, DEFAULT_RETRY_DEADLINE_MS),
            retry_initial_backoff_s=initial,
            retry_max_backoff_s=maximum,
            max_connections=get_int(
                configs, MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS, minimum=1, maximum=1024
            ),
        )

    @property
    def credential_source(self) -> str:
        """Where credentials come from, for messages (never the credentials themselves)."""
        if self.credentials_json is not None:
            return f"the service account JSON of {CREDENTIALS_JSON}"
        if self.credentials_path is not None:
            return f"the credentials file {self.credentials_path} ({CREDENTIALS_PATH})"
        if self.credentials_default is False:
            return f"anonymous access ({CREDENTIALS_DEFAULT}=false)"
        return (
            "Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud auth "
            "application-default login, or the metadata server)"
        )


def _positive_ms(configs: Mapping[str, str], key: str, default: int) -> float:
    """Milliseconds (1 ms to a day) as seconds, the SDK's unit."""
    value = get_int(configs, key, default, minimum=1, maximum=24 * 3600 * 1000, unit=" (ms)")
    return value / 1000
