"""From botocore's errors to tierlog's: what the RemoteLogManager should do about each.

The RLM only distinguishes three things: the object is not there
(``RemoteResourceNotFoundException``), trying again later may work
(``RetriableRemoteStorageException``, and ``ObjectStoreThrottledError`` when the store asked to
slow down), or a person must fix something (``RemoteStorageException``, whose message says
what: create the bucket, check which credential keys). botocore has already retried
throttling, 5xx and connection failures ``s3.max.attempts`` times when an error gets here.

Messages name the bucket and key and the ``rsm.config.`` keys to check, never a credential
value: S3's own error message is included only for codes whose text cannot carry one.
"""

from __future__ import annotations

from typing import Final

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    CredentialRetrievalError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
    ReadTimeoutError,
    ResponseStreamingError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)
from urllib3.exceptions import HTTPError as Urllib3HTTPError

from tierlog.spi import (
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
)
from tierlog.storage.objectstore.backend import ObjectStoreThrottledError, Outcome
from tierlog_rsm_s3._config import ACCESS_KEY_ID, BUCKET_NAME, SECRET_ACCESS_KEY, SESSION_TOKEN

__all__ = ["classify", "error_code", "to_tierlog_error"]

NOT_FOUND_CODES: Final = frozenset({"NoSuchKey", "404", "NotFound", "NoSuchUpload"})
"""A missing object: ``GetObject`` answers ``NoSuchKey``, ``HeadObject`` a bare 404."""

THROTTLE_CODES: Final = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "RequestLimitExceeded",
        "TooManyRequests",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "BandwidthLimitExceeded",
        "503",
        "429",
    }
)
CREDENTIAL_CODES: Final = frozenset(
    {
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AccessDenied",
        "AllAccessDisabled",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "InvalidSecurity",
        "AuthorizationHeaderMalformed",
        "403",
    }
)
RETRIABLE_CODES: Final = frozenset(
    {
        "InternalError",
        "ServiceUnavailable",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "OperationAborted",
        "IncompleteBody",
        "500",
        "502",
        "504",
    }
)
"""5xx, and S3's 400 ``RequestTimeout`` (the socket was idle too long) / 409
``OperationAborted`` (a conflicting operation on the same bucket): all transient."""

_RETRIABLE_EXCEPTIONS: Final = (
    BotoConnectionError,  # EndpointConnectionError, ConnectionClosedError, Read/ConnectTimeout
    HTTPClientError,
    IncompleteReadError,
    ReadTimeoutError,
    ResponseStreamingError,
    Urllib3HTTPError,
    TimeoutError,
    ConnectionError,
)
_CREDENTIAL_EXCEPTIONS: Final = (
    NoCredentialsError,
    PartialCredentialsError,
    CredentialRetrievalError,
)


def error_code(error: ClientError) -> tuple[str, int]:
    """S3's error code (``NoSuchKey``; a bare status such as ``404`` for HEAD requests, which
    have no body) and the HTTP status."""
    response = error.response
    code = str(response.get("Error", {}).get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return code, status


def _is_throttle(code: str, status: int) -> bool:
    return code in THROTTLE_CODES or status in {429, 503}


def classify(error: BaseException) -> Outcome:
    """The observer's outcome for a failed request."""
    if isinstance(error, ClientError):
        code, status = error_code(error)
        if code == "NoSuchBucket":
            return "error"
        if code in NOT_FOUND_CODES or status == 404:
            return "not_found"
        if _is_throttle(code, status):
            return "throttled"
    return "error"


def _credentials_hint(static_credentials: bool) -> str:
    if static_credentials:
        keys = f"rsm.config.{ACCESS_KEY_ID} and rsm.config.{SECRET_ACCESS_KEY}"
        return f"check {keys} (and rsm.config.{SESSION_TOKEN} if the keys are temporary)"
    return (
        "no keys are configured, so boto3's default chain supplied them (environment, "
        f"~/.aws, instance or container role): check it, or set rsm.config.{ACCESS_KEY_ID} "
        f"and rsm.config.{SECRET_ACCESS_KEY}"
    )


def to_tierlog_error(
    error: BaseException,
    *,
    action: str,
    bucket: str,
    key: str | None = None,
    static_credentials: bool,
) -> RemoteStorageException:
    """The tierlog exception for ``error``, raised by ``action`` (``get``, ``upload_part``...)
    on ``bucket``/``key``. The caller raises it ``from error``."""
    where = f"s3://{bucket}/{key}" if key is not None else f"s3://{bucket}"
    if isinstance(error, RemoteStorageException):
        return error
    if isinstance(error, ClientError):
        code, status = error_code(error)
        if code == "NoSuchBucket":
            return RemoteStorageException(
                f"bucket {bucket} does not exist: create it or fix rsm.config.{BUCKET_NAME} "
                f"({action} of {where})"
            )
        if code in NOT_FOUND_CODES or status == 404:
            return RemoteResourceNotFoundException(f"{where} does not exist ({action})")
        if _is_throttle(code, status):
            return ObjectStoreThrottledError(
                f"S3 throttled {action} of {where} ({code or status}) after botocore's "
                "retries: retry later, spread load with rsm.config.key.prefix.entropy.chars, "
                "or raise rsm.config.s3.max.attempts"
            )
        if code in CREDENTIAL_CODES or status in {401, 403}:
            return RemoteStorageException(
                f"S3 refused {action} of {where} ({code or status}): the credentials are "
                f"wrong or lack permission on bucket {bucket}; "
                f"{_credentials_hint(static_credentials)}, and that the principal may "
                "s3:GetObject, s3:PutObject, s3:DeleteObject and s3:ListBucket on it"
            )
        if code in RETRIABLE_CODES or status >= 500:
            return RetriableRemoteStorageException(
                f"S3 failed {action} of {where} ({code or status}) after botocore's retries"
            )
        message = str(error.response.get("Error", {}).get("Message", ""))
        return RemoteStorageException(
            f"S3 refused {action} of {where}: {code or status} {message}".rstrip()
        )
    if isinstance(error, _CREDENTIAL_EXCEPTIONS):
        return RemoteStorageException(
            f"no usable AWS credentials for bucket {bucket} ({type(error).__name__}): "
            f"{_credentials_hint(static_credentials)}"
        )
    if isinstance(error, _RETRIABLE_EXCEPTIONS):
        return RetriableRemoteStorageException(
            f"S3 {action} of {where} failed: {type(error).__name__}: {error}"
        )
    if isinstance(error, BotoCoreError):
        return RemoteStorageException(f"S3 {action} of {where} failed: {error}")
    return RemoteStorageException(f"S3 {action} of {where} failed: {type(error).__name__}: {error}")
