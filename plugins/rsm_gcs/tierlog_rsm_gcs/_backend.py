"""``GcsBackend``: a GCS bucket as tierlog's ``ObjectStoreBackend``, on google-cloud-storage.

What it adds to the SDK, and why:

- **One HTTP session it owns** (``_ObservedSession``, a google-auth ``AuthorizedSession``), so
  that every HTTP request the SDK makes, retries and resumable chunks included, is reported to
  the RSM's ``RequestObserver``; and so that ranged reads can stream the response body straight
  off the socket (the SDK's downloads write into a file object, which would hold a range whole).
- **Uploads**: one request for small objects, else a resumable session with an explicit chunk
  size (``gcs.resumable.upload.chunk.size``): memory is one chunk, whatever the object. GCS
  commits an object only when the final chunk lands, so a failed upload leaves nothing
  readable; its session expires on its own (GCS keeps unfinished sessions for a week and bills
  nothing for them).
- **Errors** become tierlog's: GCS answers 404 alike for a missing object and a missing bucket,
  so a 404 is followed by a bucket check to tell the user which it is.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, BinaryIO, Final

import google.auth
import google.auth.credentials
import google.auth.exceptions
import google.oauth2.credentials
import google.oauth2.service_account
import requests
import requests.adapters
import urllib3.exceptions
from google.api_core import exceptions as api_exceptions
from google.api_core.retry import Retry
from google.auth.credentials import Credentials
from google.auth.transport.requests import AuthorizedSession
from google.cloud import storage  # type: ignore[import-untyped]
from google.cloud.storage.exceptions import DataCorruption  # type: ignore[import-untyped]
from google.cloud.storage.retry import DEFAULT_RETRY  # type: ignore[import-untyped]
from tierlog.spi import (
    ConfigError,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
)
from tierlog.storage.objectstore.backend import (
    ObjectInfo,
    ObjectStoreBackend,
    ObjectStoreThrottledError,
    Operation,
    Outcome,
    RequestObserver,
    UploadSettings,
    null_observer,
)

from tierlog_rsm_gcs._config import (
    CHUNK_ALIGNMENT,
    CREDENTIALS_DEFAULT,
    CREDENTIALS_JSON,
    CREDENTIALS_PATH,
    GcsConfig,
)
from tierlog_rsm_gcs._streams import DownloadStream, UploadSource, buffered

if TYPE_CHECKING:
    from google.cloud.storage import Blob, Bucket, Client  # type: ignore[import-untyped]

__all__ = ["GcsBackend"]

_LOG = logging.getLogger(__name__)

SCOPES: Final = ("https://www.googleapis.com/auth/devstorage.read_write",)
DEFAULT_ENDPOINT: Final = "https://storage.googleapis.com"

SDK_SINGLE_REQUEST_LIMIT: Final = 8 * 1024 * 1024
"""google-cloud-storage sends a known size up to 8 MiB in one (multipart) request, whatever
the blob's chunk size, and anything larger as a resumable session."""

_CONTENT_TYPE: Final = "application/octet-stream"
_DELETE_PARALLELISM: Final = 8

# google-auth and google-api-core annotate their classes but not these functions; calls go
# through Any so that mypy --strict checks everything around them.
_auth: Any = google.auth
_anonymous: Any = google.auth.credentials.AnonymousCredentials
_service_account: Any = google.oauth2.service_account.Credentials
_user_credentials: Any = google.oauth2.credentials.Credentials
_from_http_response: Any = api_exceptions.from_http_response

_TRANSIENT: Final = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    requests.exceptions.ChunkedEncodingError,
    urllib3.exceptions.HTTPError,
    google.auth.exceptions.TransportError,
    ConnectionError,
    TimeoutError,
)
"""Failures below HTTP: the server went away, a socket timed out, a body was cut short."""


def _classify(method: str, url: str) -> Operation:
    """The observer's operation of one HTTP request, from its method and URL (the SDK's
    requests are all JSON-API ones, so the path says what they do)."""
    method = method.upper()
    if method == "PUT":
        return "upload_part"  # a resumable chunk (or a resumption's status query)
    if method == "DELETE":
        return "delete"
    parsed = urllib.parse.urlsplit(url)
    if method == "POST":
        return "upload"  # a single-request upload or a resumable session's start
    if "/download/" in parsed.path or "alt=media" in parsed.query:
        return "get"
    if parsed.path.rstrip("/").endswith("/o"):
        return "list"
    return "head"


def _outcome(status: int) -> Outcome:
    if status == 404:
        return "not_found"
    if status == 429:
        return "throttled"
    if status < 400 or status == 416:  # 308: resumable chunk accepted; 416: empty range
        return "ok"
    return "error"


def _names_missing_bucket(error: api_exceptions.GoogleAPICallError) -> bool:
    """Whether a 404 is GCS's "The specified bucket does not exist." rather than "No such
    object: ..." (telling them apart costs no request; emulators say "Not Found" to both, and
    there a missing bucket surfaces at ``check_access``, on uploads and on listings)."""
    return "bucket does not exist" in str(error.message).lower()


class _ObservedSession(AuthorizedSession):
    """An ``AuthorizedSession`` that reports each HTTP request to the backend's observer.

    Every request of the SDK and of ``GcsBackend.get`` goes through ``request``: JSON-API calls,
    each resumable chunk, each retry. Bytes sent are the request body's length; bytes received
    the response's ``Content-Length`` (the body of a streamed GET is read later, by the caller).
    """

    def __init__(self, credentials: Credentials, observer: RequestObserver, pool: int) -> None:
        super().__init__(credentials)  # type: ignore[no-untyped-call]
        self._observer = observer
        adapter = requests.adapters.HTTPAdapter(
            pool_connections=4, pool_maxsize=pool, max_retries=0
        )
        self.mount("https://", adapter)
        self.mount("http://", adapter)

    def request(  # type: ignore[override]  # narrower than requests' (the SDK's calls fit)
        self, method: str, url: str, data: Any = None, headers: Any = None, **kwargs: Any
    ) -> requests.Response:
        operation = _classify(method, url)
        sent = len(data) if isinstance(data, bytes | bytearray | memoryview) else 0
        try:
            response: requests.Response = super().request(  # type: ignore[no-untyped-call]
                method, url, data=data, headers=headers, **kwargs
            )
        except BaseException:
            self._observer(operation, outcome="error", bytes_sent=sent)
            raise
        if sent and response.request is not None:
            # requests keeps the body on response.request, and the SDK keeps each resumable
            # chunk's response until the next chunk has been read and sent: without this, two
            # chunks would be held at once instead of one.
            response.request.body = None
        length = response.headers.get("Content-Length", "")
        received = int(length) if length.isdigit() else 0
        self._observer(
            operation,
            outcome=_outcome(response.status_code),
            bytes_sent=sent,
            bytes_received=received,
        )
        return response


def _key_info(settings: GcsConfig) -> tuple[dict[str, Any], str]:
    """The parsed JSON of ``gcs.credentials.json`` or of the ``gcs.credentials.path`` file, and
    the key it came from. Errors name the key and never quote the content."""
    if settings.credentials_json is not None:
        key, text = CREDENTIALS_JSON, settings.credentials_json
    else:
        assert settings.credentials_path is not None
        key = CREDENTIALS_PATH
        try:
            text = settings.credentials_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(
                f"rsm.config.{key}: cannot read {settings.credentials_path}: {type(e).__name__}"
            ) from None
    try:
        info = json.loads(text)
    except ValueError as e:
        raise ConfigError(
            f"rsm.config.{key} is not valid JSON (line {getattr(e, 'lineno', '?')}): give a "
            "service account key file's content"
        ) from None
    if not isinstance(info, dict):
        raise ConfigError(f"rsm.config.{key} must hold a JSON object (a service account key)")
    return info, key


def _credentials(settings: GcsConfig) -> tuple[Credentials, str | None]:
    """The credentials the settings ask for, and the project they name (if any). Builds them
    without a network call; a failure names the key to fix and never quotes its value.

    A key given in the configuration is loaded by its declared type (``service_account`` or
    ``authorized_user``) with google-auth's type-specific loaders, which validate it, rather
    than the generic loader google-auth deprecates for configuration it cannot vouch for; any
    other credential type (workload identity federation, impersonation) comes through
    Application Default Credentials (``GOOGLE_APPLICATION_CREDENTIALS``).
    """
    if settings.credentials_json is not None or settings.credentials_path is not None:
        info, key = _key_info(settings)
        kind = info.get("type")
        try:
            if kind == "service_account":
                creds: Credentials = _service_account.from_service_account_info(
                    info, scopes=list(SCOPES)
                )
            elif kind == "authorized_user":
                creds = _user_credentials.from_authorized_user_info(info, scopes=list(SCOPES))
            else:
                raise ConfigError(
                    f"rsm.config.{key}: credentials of type {str(kind)[:40]!r} are not "
                    "supported here; give a service account key (type service_account) or a "
                    "user's (authorized_user), or point GOOGLE_APPLICATION_CREDENTIALS at "
                    "any other kind and leave the gcs.credentials.* keys unset"
                )
        except ValueError as e:  # missing fields, an unreadable private key
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(f"rsm.config.{key}: not a usable {kind} key: {e}") from None
        project = info.get("project_id") or info.get("quota_project_id")
        return creds, str(project) if project else None
    if settings.credentials_default is False:
        anonymous: Credentials = _anonymous()
        return anonymous, None
    try:
        creds, project = _auth.default(scopes=list(SCOPES))
    except google.auth.exceptions.DefaultCredentialsError as e:
        # Its messages describe the problem (file type, missing field) without secrets.
        raise RemoteStorageException(
            f"no usable GCS credentials for bucket {settings.bucket} from "
            f"{settings.credential_source}: {e}. Set rsm.config.{CREDENTIALS_PATH} or "
            f"rsm.config.{CREDENTIALS_JSON} to a service account key, run where Application "
            f"Default Credentials exist, or set rsm.config.{CREDENTIALS_DEFAULT}=false for "
            "anonymous access (an emulator)"
        ) from None
    return creds, project


class GcsBackend(ObjectStoreBackend):
    """A GCS bucket through google-cloud-storage; thread-safe (one client, one session)."""

    name = "gcs"

    def __init__(
        self,
        settings: GcsConfig,
        upload: UploadSettings | None = None,
        observer: RequestObserver = null_observer,
    ) -> None:
        self.settings = settings
        self.upload_settings = upload or UploadSettings()
        self.location = f"gs://{settings.bucket}"
        self._observer = observer
        credentials, project = _credentials(settings)
        self._session = _ObservedSession(credentials, observer, settings.max_connections)
        self._session.headers["Accept-Encoding"] = "identity"  # bytes as stored, no gzip
        options = {"api_endpoint": settings.endpoint} if settings.endpoint else None
        self._client: Client = storage.Client(
            project=settings.project or project,
            credentials=credentials,
            _http=self._session,
            client_options=options,
        )
        if getattr(self._client, "_bucket_metadata_cache", None) is not None:
            # google-cloud-storage >= 3.10 fetches each bucket's metadata in a background
            # thread on first use, only to label OpenTelemetry spans: a request the RSM never
            # asked for, needing storage.buckets.get, which an object-only role lacks.
            self._client._bucket_metadata_cache = None
        self._bucket: Bucket = self._client.bucket(settings.bucket)
        self._endpoint = settings.endpoint or self._client.api_endpoint or DEFAULT_ENDPOINT
        self._timeout = (min(10.0, settings.request_timeout_s), settings.request_timeout_s)
        self._retry: Retry = DEFAULT_RETRY.with_timeout(settings.retry_deadline_s).with_delay(
            initial=settings.retry_initial_backoff_s,
            maximum=settings.retry_max_backoff_s,
            multiplier=2.0,
        )
        self._closed = False
        self._close_lock = threading.Lock()
        self._delete_pool: ThreadPoolExecutor | None = None
        self._delete_pool_lock = threading.Lock()

    # Contract ------------------------------------------------------------------------------
    def check_access(self) -> None:
        """List one object: it needs ``storage.objects.list``, which the RSM's role has
        anyway, where a bucket ``GET`` would need ``storage.buckets.get``, which
        ``roles/storage.objectAdmin`` lacks. A missing bucket answers 404 either way."""
        try:
            pages = self._client.list_blobs(
                self._bucket, max_results=1, retry=self._retry, timeout=self._timeout
            )
            for _ in pages:
                break
        except Exception as e:
            raise self._translate(e, "check access to", None) from e

    def upload(self, key: str, source: BinaryIO, size: int | None) -> None:
        """One request for a known size up to the threshold, else a resumable session in
        chunks of ``gcs.resumable.upload.chunk.size``.

        The SDK picks its path from the size alone (a known size up to 8 MiB goes whole, in
        one request), so the size it is told is chosen to get the path wanted: ``None`` for an
        object above the threshold but below 8 MiB (streamed in chunks, memory one chunk), and
        a single chunk of the object's size for one below a threshold above 8 MiB. The source
        is read through ``UploadSource``, which gives the SDK the ``tell``/``seek`` its
        resumable uploads need without seeking the source, and refuses a short source.
        """
        where = self._where(key)
        threshold = self.upload_settings.multipart_threshold
        chunk_size = self.settings.chunk_size
        sdk_size = size
        if size is not None and size <= threshold:
            if size <= SDK_SINGLE_REQUEST_LIMIT:
                chunk_size = 0  # one multipart request
            else:
                # Above the SDK's single-request limit: one chunk after the session's start.
                chunk_size = -(-size // CHUNK_ALIGNMENT) * CHUNK_ALIGNMENT
        elif size is not None and size <= SDK_SINGLE_REQUEST_LIMIT:
            # The SDK would send it whole; an unknown size makes it stream in chunks.
            sdk_size = None
        blob: Blob = self._bucket.blob(key, chunk_size=chunk_size or None)
        stream = UploadSource(source, size, where)
        try:
            blob.upload_from_file(
                stream,
                size=sdk_size,
                content_type=_CONTENT_TYPE,
                timeout=self._timeout,
                retry=self._retry,
            )
        except Exception as e:
            if isinstance(e, RemoteStorageException) or e is stream.source_error:
                raise  # ours, or the source's own failure (a disk error): unchanged
            error = self._translate(e, "upload", key, uploading=True)
            if isinstance(e, DataCorruption):
                # The object was committed but its checksum differs: do not leave it readable.
                self._delete_quietly(key)
            raise error from e
        if size is not None and stream.consumed != size:
            self._delete_quietly(key)
            raise RemoteStorageException(
                f"upload of {where}: sent {stream.consumed} bytes, expected {size}"
            )

    def get(self, key: str, start: int = 0, end: int | None = None) -> BinaryIO:
        """One ranged GET of the JSON API's media URL, its body streamed off the socket.

        The SDK's downloads write into a file object (a range would be held whole, or spooled)
        and its ``blob.open()`` reader re-requests in ``chunk_size`` pieces; a single request
        whose body the caller reads is both one GET per fetch and bounded memory. The request
        is retried like the SDK's own (``gcs.retry.*``); a failure while the body is read
        raises ``RetriableRemoteStorageException`` and is the caller's to retry.
        """
        if start < 0 or (end is not None and end < start):
            raise ValueError(f"invalid range [{start}, {end}] for {self._where(key)}")
        url = (
            f"{self._endpoint}/download/storage/v1/b/{urllib.parse.quote(self.settings.bucket)}"
            f"/o/{urllib.parse.quote(key, safe='')}?alt=media"
        )
        headers = {}
        if start > 0 or end is not None:
            headers["Range"] = f"bytes={start}-{'' if end is None else end}"

        def attempt() -> requests.Response:
            response = self._session.get(url, headers=headers, stream=True, timeout=self._timeout)
            if response.status_code in (200, 206, 416):
                return response
            try:
                error = _from_http_response(response)
            finally:
                response.close()
            raise error

        try:
            response = self._retry(attempt)()
        except Exception as e:
            raise self._translate(e, "read", key) from e
        if response.status_code == 416:  # start at or past the end: nothing to read
            response.close()
            return io.BytesIO()
        limit = None
        if response.status_code == 200 and headers:
            if start > 0:
                response.close()
                raise RemoteStorageException(
                    f"reading {self._where(key)}: {self._endpoint} ignored the Range header"
                )
            limit = None if end is None else end + 1
        length = response.headers.get("Content-Length", "")
        expected = int(length) if length.isdigit() else None
        raw = DownloadStream(
            response,
            self._where(key),
            expected,
            lambda e: self._translate(e, "read", key, after_start=True),
            limit,
        )
        return buffered(raw)

    def delete(self, keys: Sequence[str]) -> None:
        """One request per key, up to ``_DELETE_PARALLELISM`` at once: the JSON API's batch
        endpoint is not offered by every GCS-compatible server (fake-gcs-server lacks it), and
        a segment's three objects go in one round trip's time this way."""
        if not keys:
            return
        if len(keys) == 1:
            self._delete_one(keys[0])
            return
        errors: list[RemoteStorageException] = []
        with self._delete_pool_lock:
            if self._delete_pool is None:
                self._delete_pool = ThreadPoolExecutor(
                    _DELETE_PARALLELISM, thread_name_prefix="tierlog-gcs-delete"
                )
            pool = self._delete_pool
        for future in [pool.submit(self._delete_one, key) for key in keys]:
            try:
                future.result()
            except RemoteStorageException as e:
                errors.append(e)
        if errors:
            raise errors[0]

    def _delete_one(self, key: str) -> None:
        try:
            self._bucket.delete_blob(key, retry=self._retry, timeout=self._timeout)
        except api_exceptions.NotFound:
            pass  # already gone (or never written): deletes are idempotent
        except Exception as e:
            raise self._translate(e, "delete", key) from e

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Pages of 1000 names and sizes (only those fields are asked for), in GCS's
        lexicographic key order."""
        try:
            blobs = self._client.list_blobs(
                self._bucket,
                prefix=prefix,
                fields="items(name,size),nextPageToken",
                retry=self._retry,
                timeout=self._timeout,
            )
            for blob in blobs:
                yield ObjectInfo(blob.name, int(blob.size or 0))
        except Exception as e:
            raise self._translate(e, "list", None) from e

    def head(self, key: str) -> ObjectInfo | None:
        """The object's metadata (one GET); ``Bucket.get_blob`` is not used because it answers
        ``None`` for a missing bucket too."""
        blob = self._bucket.blob(key)
        try:
            blob.reload(retry=self._retry, timeout=self._timeout)
        except api_exceptions.NotFound as e:
            if _names_missing_bucket(e):
                raise self._missing_bucket_error("look up", key) from e
            return None
        except Exception as e:
            raise self._translate(e, "look up", key) from e
        return ObjectInfo(blob.name, int(blob.size or 0))

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        with self._delete_pool_lock:
            pool, self._delete_pool = self._delete_pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self._session.close()  # type: ignore[no-untyped-call]

    # Errors -------------------------------------------------------------------------------
    def _where(self, key: str | None) -> str:
        return self.location if key is None else f"{self.location}/{key}"

    def _bucket_missing(self) -> bool:
        """Whether the bucket does not exist (a listing answers 404 only then; any other
        answer, including 403, leaves the question to the caller's own error). One more
        request, so only on paths where a 404 is abnormal (an upload)."""
        try:
            for _ in self._client.list_blobs(
                self._bucket, max_results=1, retry=self._retry, timeout=self._timeout
            ):
                break
        except api_exceptions.NotFound:
            return True
        except Exception:
            return False
        return False

    def _missing_bucket_error(self, action: str, key: str | None) -> RemoteStorageException:
        return RemoteStorageException(
            f"bucket {self.settings.bucket} does not exist (on {action} {self._where(key)}): "
            f"create it (gcloud storage buckets create gs://{self.settings.bucket}) or fix "
            "rsm.config.gcs.bucket.name"
        )

    def _translate(
        self,
        error: BaseException,
        action: str,
        key: str | None,
        *,
        uploading: bool = False,
        after_start: bool = False,
    ) -> RemoteStorageException:
        """tierlog's exception for an SDK, HTTP or socket failure of ``action`` on ``key``.

        The SDK has already retried what its retry policy covers (429, 5xx, 408, connection
        errors) until ``gcs.retry.deadline.ms``; what reaches here is final for this call.
        """
        where = self._where(key)
        if isinstance(error, RemoteStorageException):
            return error
        if isinstance(error, api_exceptions.RetryError):
            cause = error.cause
            if cause is not None and cause is not error:
                return self._translate(cause, action, key, uploading=uploading)
            return RetriableRemoteStorageException(
                f"{action} {where}: gave up after retrying for "
                f"{self.settings.retry_deadline_s:g} s: {error}"
            )
        if isinstance(error, api_exceptions.TooManyRequests):
            return ObjectStoreThrottledError(f"{action} {where}: GCS is throttling: {error}")
        if isinstance(error, api_exceptions.NotFound):
            # A bucket-level request (key None) only 404s for a missing bucket; GCS says so in
            # the message of an object request; an upload checks, since 404 is abnormal there.
            if (
                key is None
                or _names_missing_bucket(error)
                or (uploading and self._bucket_missing())
            ):
                return self._missing_bucket_error(action, key)
            if uploading:
                return RetriableRemoteStorageException(
                    f"upload of {where}: the resumable upload session was lost (404); retry "
                    "the upload"
                )
            return RemoteResourceNotFoundException(f"{where} does not exist")
        if isinstance(error, api_exceptions.Unauthorized | api_exceptions.Forbidden):
            code = (
                "401 (credentials rejected)"
                if isinstance(error, api_exceptions.Unauthorized)
                else "403 (permission denied)"
            )
            return RemoteStorageException(
                f"{action} {where}: GCS answered {code}: {error.message}. Check the "
                f"credentials ({self.settings.credential_source}) and that their principal "
                f"may read and write objects in bucket {self.settings.bucket} "
                "(roles/storage.objectAdmin); they are set by rsm.config."
                f"{CREDENTIALS_JSON}, {CREDENTIALS_PATH} or {CREDENTIALS_DEFAULT}"
            )
        if isinstance(error, google.auth.exceptions.RefreshError):
            if getattr(error, "retryable", False):
                return RetriableRemoteStorageException(
                    f"{action} {where}: could not refresh the access token: {error}"
                )
            return RemoteStorageException(
                f"{action} {where}: the credentials ({self.settings.credential_source}) "
                f"could not obtain an access token: {error}. Fix rsm.config.{CREDENTIALS_JSON}"
                f", {CREDENTIALS_PATH} or the Application Default Credentials"
            )
        if isinstance(error, api_exceptions.ServerError) or (
            isinstance(error, api_exceptions.GoogleAPICallError) and error.code == 408
        ):
            return RetriableRemoteStorageException(f"{action} {where}: {error}")
        if isinstance(error, _TRANSIENT):
            stage = "mid-stream" if after_start else "unreachable"
            return RetriableRemoteStorageException(
                f"{action} {where}: {stage} ({self._endpoint}): {type(error).__name__}: {error}"
            )
        if isinstance(error, DataCorruption):
            return RetriableRemoteStorageException(
                f"{action} {where}: checksum mismatch, the object was discarded: {error}"
            )
        return RemoteStorageException(f"{action} {where}: {type(error).__name__}: {error}")

    def _delete_quietly(self, key: str) -> None:
        try:
            self._bucket.delete_blob(key, retry=self._retry, timeout=self._timeout)
        except Exception:
            _LOG.warning("could not delete %s after a failed upload", self._where(key))
