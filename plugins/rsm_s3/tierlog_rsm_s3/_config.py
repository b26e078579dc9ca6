"""The ``s3`` plugin's own ``rsm.config.`` keys: where the bucket is and how to reach it.

Names follow Aiven's tiered-storage-for-apache-kafka S3 backend wherever it has the same
setting, so a broker's ``server.properties`` moves between the two with few edits
(``s3.bucket.name``, ``s3.region``, ``s3.endpoint.url``, ``s3.path.style.access.enabled``,
``s3.storage.class``, ``s3.api.call.attempt.timeout``, ``aws.access.key.id``,
``aws.secret.access.key``, ``aws.checksum.check.enabled``, ``aws.certificate.check.enabled``).
Two keys are tierlog's: ``aws.session.token`` (temporary credentials) and ``s3.max.attempts``
(botocore's retries). Aiven's ``s3.api.call.timeout`` (a deadline over all retries) has no
botocore equivalent and is not offered; chunking, part sizes and caches are common keys of
``tierlog.storage.objectstore``.

Everything is validated here, at ``configure``, without importing boto3 (the storage-class
check, which needs botocore's service model, is done when the backend is built). Secrets are
kept out of ``repr`` and of every message.

The shape is the one of every first-party object-store plugin (``tierlog_rsm_gcs``,
``tierlog_rsm_azure``): a constant per key, ``S3_CONFIG_KEYS`` (a ``ConfigKey`` per key, with its
default and meaning, from which the README's table is checked) and ``S3Config``, the validated
settings, built by ``S3Config.from_configs(configs)`` and naming its keys in ``S3Config.keys()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from tierlog.spi import ConfigError
from tierlog.storage.objectstore.config import (
    ConfigKey,
    full_key,
    get_bool,
    get_int,
    get_str,
)

__all__ = [
    "ACCESS_KEY_ID",
    "ATTEMPT_TIMEOUT",
    "BUCKET_NAME",
    "CERTIFICATE_CHECK",
    "CHECKSUM_CHECK",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_REGION",
    "ENDPOINT_URL",
    "MAX_ATTEMPTS",
    "PATH_STYLE",
    "REGION",
    "S3_CONFIG_KEYS",
    "SECRET_ACCESS_KEY",
    "SESSION_TOKEN",
    "STORAGE_CLASS",
    "S3Config",
]

BUCKET_NAME: Final = "s3.bucket.name"
REGION: Final = "s3.region"
ENDPOINT_URL: Final = "s3.endpoint.url"
PATH_STYLE: Final = "s3.path.style.access.enabled"
STORAGE_CLASS: Final = "s3.storage.class"
ATTEMPT_TIMEOUT: Final = "s3.api.call.attempt.timeout"
MAX_ATTEMPTS: Final = "s3.max.attempts"
ACCESS_KEY_ID: Final = "aws.access.key.id"
SECRET_ACCESS_KEY: Final = "aws.secret.access.key"
SESSION_TOKEN: Final = "aws.session.token"
CHECKSUM_CHECK: Final = "aws.checksum.check.enabled"
CERTIFICATE_CHECK: Final = "aws.certificate.check.enabled"

DEFAULT_REGION: Final = "us-east-1"
"""Used when neither ``s3.region`` nor the SDK's chain (``AWS_REGION``, ``AWS_DEFAULT_REGION``,
the profile) names one: S3-compatible servers ignore it, and AWS redirects nothing for it."""

DEFAULT_MAX_ATTEMPTS: Final = 3
"""botocore's ``standard`` retry mode default: the first try and two retries."""

S3_CONFIG_KEYS: Final[tuple[ConfigKey, ...]] = (
    ConfigKey(
        BUCKET_NAME,
        "string",
        default="(required)",
        doc="The bucket segments are stored in; it must exist.",
    ),
    ConfigKey(
        REGION,
        "string",
        default="(SDK chain, else us-east-1)",
        doc="The bucket's AWS region; unset, boto3's chain decides (AWS_REGION, "
        "AWS_DEFAULT_REGION, the profile), and us-east-1 if it finds none.",
    ),
    ConfigKey(
        ENDPOINT_URL,
        "string",
        default="(unset: AWS)",
        doc="http(s) URL of an S3-compatible server (SeaweedFS, MinIO, Ceph...) or a VPC endpoint.",
    ),
    ConfigKey(
        PATH_STYLE,
        "boolean",
        default="(unset: SDK decides)",
        doc="true: path-style requests (http://host/bucket/key), which most S3-compatible servers "
        "need; false: virtual-hosted style (http://bucket.host/key); unset: botocore's 'auto'.",
    ),
    ConfigKey(
        ACCESS_KEY_ID,
        "string",
        default="(unset: default chain)",
        doc="Static credentials, with aws.secret.access.key; unset, boto3's default chain is used "
        "(environment, shared files, web identity, container and instance roles).",
    ),
    ConfigKey(
        SECRET_ACCESS_KEY,
        "string",
        default="(unset)",
        doc="The secret of aws.access.key.id; never logged.",
    ),
    ConfigKey(
        SESSION_TOKEN,
        "string",
        default="(unset)",
        doc="Session token of temporary static credentials; never logged.",
    ),
    ConfigKey(
        ATTEMPT_TIMEOUT,
        "int",
        default="60000",
        doc="Milliseconds one HTTP attempt may wait to connect, and between bytes received.",
    ),
    ConfigKey(
        MAX_ATTEMPTS,
        "int",
        default=str(DEFAULT_MAX_ATTEMPTS),
        doc="Attempts per request, first one included (botocore's standard retry mode, with "
        "backoff); then throttling, 5xx and timeouts raise the retriable error.",
    ),
    ConfigKey(
        STORAGE_CLASS,
        "string",
        default="(unset: bucket default)",
        doc="Storage class of uploaded objects (STANDARD, INTELLIGENT_TIERING, STANDARD_IA...). "
        "Avoid archive classes (GLACIER, DEEP_ARCHIVE): their objects cannot be fetched.",
    ),
    ConfigKey(
        CHECKSUM_CHECK,
        "boolean",
        default="false",
        doc="true: botocore adds CRC32 checksums to uploads and validates downloads. Off by "
        "default (Aiven's default too): Kafka's batches carry CRCs and encryption is "
        "authenticated, and some S3-compatible servers reject the newer checksum headers.",
    ),
    ConfigKey(
        CERTIFICATE_CHECK,
        "boolean",
        default="true",
        doc="false: accept any TLS certificate of the endpoint (tests with self-signed "
        "certificates only).",
    ),
)


def _optional_bool(configs: Mapping[str, str], key: str) -> bool | None:
    """A boolean whose absence (or blank value) means "let the SDK decide"."""
    if get_str(configs, key) is None:
        return None
    return get_bool(configs, key, False)


def _endpoint(configs: Mapping[str, str]) -> str | None:
    url = get_str(configs, ENDPOINT_URL)
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise ConfigError(
            f"{full_key(ENDPOINT_URL)} must be an http:// or https:// URL with a host, got {url!r}"
        )
    return url


@dataclass(frozen=True, slots=True)
class S3Config:
    """The plugin's keys, parsed and validated; secrets stay out of ``repr``."""

    bucket: str
    region: str | None = None
    endpoint_url: str | None = None
    path_style: bool | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    attempt_timeout_ms: int = 60_000
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    storage_class: str | None = None
    checksum_check: bool = False
    certificate_check: bool = True

    @staticmethod
    def keys() -> frozenset[str]:
        """The plugin's keys (without ``rsm.config.``), for ``backend_config_keys``."""
        return frozenset(key.name for key in S3_CONFIG_KEYS)

    @property
    def static_credentials(self) -> bool:
        """Whether credentials come from the configuration (else from boto3's default chain)."""
        return self.access_key_id is not None

    @classmethod
    def from_configs(cls, configs: Mapping[str, str]) -> S3Config:
        """Parse the plugin's keys of ``configs`` (others are ignored); ``ConfigError`` names
        the key and what is accepted."""
        bucket = get_str(configs, BUCKET_NAME)
        if bucket is None:
            raise ConfigError(
                f"{full_key(BUCKET_NAME)} is required: the name of an existing S3 bucket"
            )
        if "/" in bucket:
            raise ConfigError(
                f"{full_key(BUCKET_NAME)} is a bucket name, not a path, got {bucket!r}; put a "
                "folder in rsm.config.key.prefix"
            )
        access_key = get_str(configs, ACCESS_KEY_ID)
        secret = get_str(configs, SECRET_ACCESS_KEY)
        token = get_str(configs, SESSION_TOKEN)
        if (access_key is None) != (secret is None):
            given, missing = (
                (ACCESS_KEY_ID, SECRET_ACCESS_KEY)
                if access_key is not None
                else (SECRET_ACCESS_KEY, ACCESS_KEY_ID)
            )
            raise ConfigError(
                f"{full_key(given)} is set but {full_key(missing)} is not: set both, or neither "
                "to use the AWS default credential chain"
            )
        if token is not None and access_key is None:
            raise ConfigError(
                f"{full_key(SESSION_TOKEN)} needs {full_key(ACCESS_KEY_ID)} and "
                f"{full_key(SECRET_ACCESS_KEY)}"
            )
        return cls(
            bucket=bucket,
            region=get_str(configs, REGION),
            endpoint_url=_endpoint(configs),
            path_style=_optional_bool(configs, PATH_STYLE),
            access_key_id=access_key,
            secret_access_key=secret,
            session_token=token,
            attempt_timeout_ms=get_int(
                configs, ATTEMPT_TIMEOUT, 60_000, minimum=1, unit=" (milliseconds)"
            ),
            max_attempts=get_int(
                configs, MAX_ATTEMPTS, DEFAULT_MAX_ATTEMPTS, minimum=1, maximum=20
            ),
            storage_class=get_str(configs, STORAGE_CLASS),
            checksum_check=get_bool(configs, CHECKSUM_CHECK, False),
            certificate_check=get_bool(configs, CERTIFICATE_CHECK, True),
        )
