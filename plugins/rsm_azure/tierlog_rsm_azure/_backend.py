"""``AzureBackend``: a blob container as tierlog's ``ObjectStoreBackend`` (azure-storage-blob).

Everything object-store generic (layout, manifest, chunking, transforms, caches, metrics) is in
``tierlog.storage.objectstore``; this module only speaks Blob REST through the SDK, and is
strict where Azure differs from the other clouds:

- **uploads** of a known size below ``upload.multipart.threshold`` are one Put Blob; anything
  else is staged blocks (Put Block, at most ``upload.parallelism`` in flight, each block read
  from the source only when a slot is free, by the core's ``upload_parts``, so memory is
  bounded by block size x parallelism) committed by one Put Block List. Staged blocks are
  invisible until the commit, so a reader never sees a partial object; a failed upload's
  blocks are dropped by Azure after a week or at the blob's next commit (there is no "abort"
  call). Block ids are ``<upload uuid><index>``, all the same length (Azure requires it for
  one blob) and unique per attempt, so a retry or a concurrent upload of the same key cannot
  commit another attempt's blocks. A commit discards every other uncommitted block of the
  blob, so of two concurrent uploads of one key the later commit may fail with
  ``InvalidBlockList``: that is raised as retriable (a retry succeeds);
- **ranged reads** are one streamed GET each, whatever the range's length, holding 1 MiB at a
  time (not the SDK's downloader, which buffers each response whole: see ``_open_range``); a
  body cut short is resumed with If-Match; a start at the end of the blob is an empty stream
  whether the server answers 416 (Azure) or an empty 206 (Azurite);
- **deletes** are batched (Blob Batch, 256 per request) and a missing blob (404) is success;
- **errors** become tierlog's (``_translate``), and no message carries a credential.
"""

from __future__ import annotations

import io
import logging
import random
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from importlib import import_module
from typing import Any, BinaryIO, Final, NoReturn, cast

from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    IncompleteReadError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob import BlobBlock, BlobClient, BlobServiceClient, ContainerClient
from azure.storage.blob import ExponentialRetry as _StorageExponentialRetry
from tierlog.spi import (
    ConfigError,
    InvalidArgumentError,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
    TierlogError,
)
from tierlog.storage.objectstore.backend import (
    ObjectInfo,
    ObjectStoreBackend,
    ObjectStoreThrottledError,
    PartReader,
    RequestObserver,
    UploadSettings,
    null_observer,
    read_up_to,
    upload_parts,
)

from tierlog_rsm_azure._config import (
    CONTAINER_NAME,
    CREDENTIAL_KEYS,
    MAX_RETRY_BACKOFF_S,
    AzureConfig,
)
from tierlog_rsm_azure._transport import ObservedTransport, install_url_redaction, redact

__all__ = ["MAX_BLOCKS", "AzureBackend"]

_LOG = logging.getLogger(__name__)

MAX_BLOCKS: Final = 50_000
"""Azure's limit of committed blocks per block blob."""
BATCH_LIMIT: Final = 256
"""Azure's limit of sub-requests per Blob Batch request."""
_SINGLE_PUT_LIMIT: Final = 5000 * (1 << 20)
"""The largest Put Blob (API version 2019-12-12 and later)."""

_AUTH_CODES: Final = frozenset(
    {
        "AuthenticationFailed",
        "AuthorizationFailure",
        "AuthorizationPermissionMismatch",
        "AuthorizationResourceTypeMismatch",
        "AuthorizationServiceMismatch",
        "AuthorizationProtocolMismatch",
        "AuthorizationSourceIPMismatch",
        "InsufficientAccountPermissions",
        "InvalidAuthenticationInfo",
        "NoAuthenticationInformation",
    }
)
_RETRIABLE_CODES: Final = frozenset({"InternalError", "OperationTimedOut", "ServerBusy"})


class _Backoff(_StorageExponentialRetry):
    """Exponential backoff: ``backoff`` seconds before the first retry, doubling per retry,
    +-20% jitter, capped at ``MAX_RETRY_BACKOFF_S``. The SDK's own schedule waits 15 s before
    the first retry, far too slow for a broker's fetch path."""

    def __init__(self, *, retry_total: int, backoff: float) -> None:
        super().__init__(
            retry_total=retry_total,
            retry_connect=retry_total,
            retry_read=retry_total,
            retry_status=retry_total,
        )
        self._backoff = backoff

    def get_backoff_time(self, settings: dict[str, Any]) -> float:
        # ``count`` is 1 before the first retry's sleep.
        exponent = max(0, int(settings.get("count", 1)) - 1)
        delay = min(MAX_RETRY_BACKOFF_S, self._backoff * (2**exponent))
        return float(delay * random.uniform(0.8, 1.2))


def _error_code(error: HttpResponseError) -> str:
    code = getattr(error, "error_code", None)
    response: Any = error.response
    if code is None and response is not None:
        code = response.headers.get("x-ms-error-code")
    return "" if code is None else str(getattr(code, "value", code))


def _first_line(error: BaseException) -> str:
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    return redact(str(message).strip().splitlines()[0] if str(message).strip() else "")


def _is_transient(error: BaseException) -> bool:
    """Connection refused or reset, timeouts, a body cut short: worth retrying later. azure-core
    wraps a body cut short in a bare ``HttpResponseError`` around a ``requests`` error (an
    ``OSError``); called on errors from the SDK only, so an ``OSError`` is the network's."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(
            current, (ServiceRequestError, ServiceResponseError, IncompleteReadError, OSError)
        ):
            return True
        inner = getattr(current, "inner_exception", None) or getattr(current, "error", None)
        current = inner if isinstance(inner, BaseException) else current.__cause__
    return False


class AzureBackend(ObjectStoreBackend):
    """A blob container of a storage account, through azure-storage-blob.

    Build it with ``AzureBackend(settings, upload, observer)`` (``AzureConfig.from_configs``
    parses the ``azure.*`` keys); the RSM does this in ``create_backend``. Thread-safe: the
    SDK's clients are, and each call builds its own short-lived blob client on the shared
    pipeline and connection pool. ``list_page_size`` (default: Azure's 5000) exists so that
    tests can cross page boundaries with a few hundred blobs.
    """

    name = "azure"

    def __init__(
        self,
        settings: AzureConfig,
        upload: UploadSettings | None = None,
        observer: RequestObserver = null_observer,
        *,
        list_page_size: int | None = None,
    ) -> None:
        self.settings = settings
        self._list_page_size = list_page_size
        self.upload_settings = upload if upload is not None else UploadSettings()
        self._closed = False
        self._close_lock = threading.Lock()
        self._owned_credential: Any = None
        self._transport = ObservedTransport(
            observer,
            # Every in-flight block of a few concurrent uploads, plus reads, without churn.
            pool_size=max(16, 4 * self.upload_settings.parallelism),
            connection_timeout=settings.connection_timeout_s,
            read_timeout=settings.read_timeout_s,
        )
        threshold = self.upload_settings.multipart_threshold
        options: dict[str, Any] = {
            "transport": self._transport,
            "retry_policy": _Backoff(
                retry_total=settings.retry_total, backoff=settings.retry_backoff_s
            ),
            # One Put Blob for everything ``upload`` sends in one request (the SDK would
            # otherwise split what is above its 64 MiB default into blocks of its own).
            "max_single_put_size": min(_SINGLE_PUT_LIMIT, max(threshold, 64 << 20)),
        }
        if settings.api_version is not None:
            options["api_version"] = settings.api_version
        try:
            self._service = self._service_client(options)
        except ConfigError:
            self._transport.close()
            raise
        except ValueError as e:
            self._transport.close()
            # The SDK's messages about a malformed connection string do not quote it, but
            # redact anyway: this text ends up in a broker's log.
            raise ConfigError(f"Azure client configuration refused: {redact(str(e))}") from None
        self._container: ContainerClient = self._service.get_container_client(settings.container)
        self.account_name: str = str(self._service.account_name or settings.account_name or "")
        self.location = f"azure://{self.account_name}/{settings.container}"

    def _service_client(self, options: dict[str, Any]) -> BlobServiceClient:
        s = self.settings
        if s.connection_string is not None:
            if "sharedaccesssignature=" in s.connection_string.lower():
                install_url_redaction()
            return BlobServiceClient.from_connection_string(s.connection_string, **options)
        url = s.endpoint_url or f"https://{s.account_name}.blob.core.windows.net"
        credential: Any
        if s.account_key is not None:
            credential = AzureNamedKeyCredential(cast(str, s.account_name), s.account_key)
        elif s.sas_token is not None:
            install_url_redaction()
            credential = AzureSasCredential(s.sas_token)
        else:
            credential = self._owned_credential = _default_credential(s)
        return BlobServiceClient(url, credential=credential, **options)

    # Errors -------------------------------------------------------------------------------------
    def _auth_hint(self) -> str:
        kind = self.settings.credential_kind
        keys = ", ".join(f"rsm.config.{k}" for k in CREDENTIAL_KEYS)
        if kind == "DefaultAzureCredential":
            return (
                "no credential key is set, so DefaultAzureCredential was used: check the "
                "identity's role on the container (Storage Blob Data Contributor) or set one of "
                f"{keys}"
            )
        return (
            f"check rsm.config.{kind} (the credential in use) for account "
            f"{self.account_name!r}; it must allow read, write, delete and list ({keys})"
        )

    def _translate(self, error: BaseException, action: str, key: str | None = None) -> Exception:
        """The tierlog error for an SDK error, with a message that names the container and
        what to fix; never a credential."""
        where = (
            f"{action} {key!r} in {self.location}"
            if key is not None
            else (f"{action} {self.location}")
        )
        if isinstance(error, HttpResponseError) and error.status_code is not None:
            status = error.status_code
            code = _error_code(error)
            detail = f"{status} {code}".strip()
            if code == "ContainerNotFound":
                c, a = self.settings.container, self.account_name
                return RemoteStorageException(
                    f"container {c!r} does not exist in storage account {a!r}: create it "
                    f"(az storage container create --name {c} --account-name {a}) or correct "
                    f"rsm.config.{CONTAINER_NAME} ({where})"
                )
            if status == 404:
                return RemoteResourceNotFoundException(f"{where}: not found ({detail})")
            if status in (401, 403) or code in _AUTH_CODES:
                return RemoteStorageException(
                    f"{where}: access refused ({detail}) to container "
                    f"{self.settings.container!r}: {self._auth_hint()}"
                )
            if status in (429, 503) or code == "ServerBusy":
                return ObjectStoreThrottledError(
                    f"{where}: throttled by Azure ({detail}) after "
                    f"{self.settings.retry_total} retries; retry later"
                )
            if (
                status == 408
                or (status >= 500 and status not in (501, 505))
                or (code in _RETRIABLE_CODES)
            ):
                return RetriableRemoteStorageException(
                    f"{where}: {detail} after {self.settings.retry_total} retries: "
                    f"{_first_line(error)}"
                )
            if code == "InvalidBlockList":
                # Another upload of the same key committed first and discarded our blocks.
                return RetriableRemoteStorageException(
                    f"{where}: {detail}: another upload of the same object committed first; "
                    "upload again"
                )
            return RemoteStorageException(f"{where}: {detail}: {_first_line(error)}")
        if isinstance(error, ClientAuthenticationError):
            # azure-identity could not get a token: there is no HTTP status.
            return RemoteStorageException(
                f"{where}: could not authenticate ({_first_line(error)}): {self._auth_hint()}"
            )
        if _is_transient(error):
            return RetriableRemoteStorageException(
                f"{where}: {type(error).__name__}: {_first_line(error)} (after "
                f"{self.settings.retry_total} retries; is the endpoint reachable?)"
            )
        if isinstance(error, TierlogError):
            return error
        return RemoteStorageException(f"{where}: {type(error).__name__}: {_first_line(error)}")

    def _raise(self, error: BaseException, action: str, key: str | None = None) -> NoReturn:
        raise self._translate(error, action, key) from None

    def _blob(self, key: str) -> BlobClient:
        if self._closed:
            raise RemoteStorageException(f"the backend of {self.location} is closed")
        return self._container.get_blob_client(key)

    # ObjectStoreBackend -----------------------------------------------------------------------
    def check_access(self) -> None:
        """List one blob: proves the container exists and that the credential may list it (the
        permission every data-plane role and SAS an RSM needs has; Get Container Properties is
        refused to some container-scoped SAS tokens that can do everything the RSM does)."""
        try:
            pages = self._container.list_blobs(results_per_page=1).by_page()
            for _ in next(pages, []):
                break
        except Exception as e:
            error = self._translate(e, "check access to")
            if isinstance(error, RemoteResourceNotFoundException):
                # Not a missing segment: the endpoint does not know the account or container.
                raise RemoteStorageException(
                    f"{error}: check rsm.config.azure.account.name, "
                    f"rsm.config.azure.endpoint.url and rsm.config.{CONTAINER_NAME}"
                ) from None
            raise error from None

    def upload(self, key: str, source: BinaryIO, size: int | None) -> None:
        if size is not None and size < 0:
            raise InvalidArgumentError(f"upload of {key!r}: size must be >= 0, got {size}")
        blob = self._blob(key)
        settings = self.upload_settings
        block = self.settings.upload_block_size
        if size is not None and size < settings.multipart_threshold:
            self._put(blob, key, _read_exactly(source, size, key))
            return
        blocks = PartReader(source, block, size)
        if size is None:
            whole = blocks.read_whole()
            if whole is not None:
                # An unknown size that turned out to fit in one block: one request, not two.
                # upload_blob takes bytes (it would iterate a bytearray): one copy, the
                # bytearray dropped at once.
                data = bytes(whole)
                del whole
                self._put(blob, key, data)
                return
        # Otherwise the first block stays in `blocks`, which hands it to its upload task.
        self._staged(blob, key, blocks, size)

    def _put(self, blob: BlobClient, key: str, data: bytes) -> None:
        try:
            blob.upload_blob(data, overwrite=True, max_concurrency=1)
        except Exception as e:
            self._raise(e, "upload", key)

    def _staged(self, blob: BlobClient, key: str, blocks: PartReader, size: int | None) -> None:
        """Blocks read and staged by ``upload_parts`` (at most ``parallelism`` block buffers
        at once), then one Put Block List; nothing is committed after a failure."""
        attempt = uuid.uuid4().hex

        def block_id(index: int) -> str:
            return f"{attempt}{index:06d}"

        def stage(index: int, data: bytearray) -> None:
            # The SDK types the body as bytes, but passes a bytearray on as it is (azure-core
            # and requests take it as a body with a length; urllib3 sends it through a
            # memoryview): the block is never copied. Its tests run this on Azurite.
            blob.stage_block(block_id(index), cast(bytes, data), length=len(data))

        def too_many_blocks() -> RemoteStorageException:
            return RemoteStorageException(
                f"upload {key!r} to {self.location}: more than {MAX_BLOCKS} blocks "
                f"of {blocks.part_size} bytes; raise rsm.config.azure.upload.block.size"
            )

        try:
            sent = upload_parts(
                blocks,
                stage,
                parallelism=self.upload_settings.parallelism,
                max_parts=MAX_BLOCKS,
                too_many_parts=too_many_blocks,
                thread_name_prefix="tierlog-azure-upload",
            )
        except (AzureError, ConnectionError, TimeoutError) as e:
            self._raise(e, "upload", key)
        if size is not None and sent.size < size:
            raise RemoteStorageException(
                f"upload {key!r}: the source ended after {sent.size} of {size} bytes"
            )
        try:
            blob.commit_block_list(
                [BlobBlock(block_id=block_id(i)) for i in range(len(sent.results))]
            )
        except Exception as e:
            self._raise(e, "upload", key)

    def get(self, key: str, start: int = 0, end: int | None = None) -> BinaryIO:
        if start < 0 or (end is not None and end < start):
            raise InvalidArgumentError(f"get {key!r}: bad range [{start}, {end}]")
        blob = self._blob(key)
        opened = self._open_range(blob, key, start, end, None)
        if opened is None:
            return io.BytesIO(b"")
        body, etag = opened

        def reopen(offset: int) -> Iterator[bytes]:
            # The rest of the range, from the same version of the blob (If-Match), after the
            # connection broke mid-body.
            again = self._open_range(blob, key, offset, end, etag)
            return iter(()) if again is None else again[0]

        return cast(
            BinaryIO,
            _DownloadStream(
                body,
                start,
                reopen,
                lambda e: self._translate(e, "get", key),
                resumes=self.settings.retry_total,
            ),
        )

    def _open_range(
        self, blob: BlobClient, key: str, start: int, end: int | None, etag: str | None
    ) -> tuple[Iterator[bytes], str | None] | None:
        """One streamed GET of ``[start, end]``: its body and ETag, or ``None`` when the
        range starts at or past the end (Azure's 416).

        It calls the SDK's generated ``Get Blob`` operation rather than ``download_blob``:
        ``StorageStreamDownloader`` reads every response whole into memory, and on the way
        ``list()`` preallocates eight bytes of pointers per byte of body (it trusts the body
        iterator's ``__len__``), so one 8 MiB GET peaks at 72 MiB. The generated operation
        returns the body as the HTTP stream, read ``READ_BLOCK_SIZE`` (1 MiB) at a time, and a
        range of any length is one request.
        """
        header = (
            None if start == 0 and end is None else (f"bytes={start}-{'' if end is None else end}")
        )
        headers = {} if etag is None else {"If-Match": etag}
        try:
            body, response_headers = blob._client.blob.download(
                range=header, headers=headers, cls=_body_and_headers
            )
        except HttpResponseError as e:
            if e.status_code == 416:  # the start is at or past the end of the blob
                return None
            if e.status_code == 412:
                raise RetriableRemoteStorageException(
                    f"get {key!r} in {self.location}: the object was replaced while it was "
                    "being read; read it again"
                ) from None
            self._raise(e, "get", key)
        except Exception as e:
            self._raise(e, "get", key)
        found = response_headers.get("ETag") or response_headers.get("etag")
        return body, None if found is None else str(found)

    def delete(self, keys: Sequence[str]) -> None:
        unique = list(dict.fromkeys(keys))
        if len(unique) == 1:
            self._delete_one(unique[0])
            return
        for i in range(0, len(unique), BATCH_LIMIT):
            self._delete_batch(unique[i : i + BATCH_LIMIT])

    def _delete_one(self, key: str) -> None:
        try:
            self._blob(key).delete_blob()
        except HttpResponseError as e:
            if e.status_code == 404 and _error_code(e) != "ContainerNotFound":
                return
            self._raise(e, "delete", key)
        except Exception as e:
            self._raise(e, "delete", key)

    def _delete_batch(self, keys: list[str]) -> None:
        if self._closed:
            raise RemoteStorageException(f"the backend of {self.location} is closed")
        try:
            responses = list(self._container.delete_blobs(*keys, raise_on_any_failure=False))
        except HttpResponseError as e:
            if e.status_code in (400, 405, 501) and _error_code(e) not in _AUTH_CODES:
                # An endpoint without Blob Batch (some emulators, proxies): one by one.
                _LOG.debug(
                    "Blob Batch refused by %s (%s); deleting one by one",
                    self.location,
                    e.status_code,
                )
                for key in keys:
                    self._delete_one(key)
                return
            self._raise(e, "delete", keys[0])
        except Exception as e:
            self._raise(e, "delete", keys[0])
        for key, response in zip(keys, responses, strict=True):
            status = response.status_code
            code = str(response.headers.get("x-ms-error-code") or "")
            if status < 300 or (status == 404 and code != "ContainerNotFound"):
                continue
            self._raise(
                HttpResponseError(message=code or f"HTTP {status}", response=response),
                "delete",
                key,
            )

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        if self._closed:
            raise RemoteStorageException(f"the backend of {self.location} is closed")
        return self._list(prefix)

    def _list(self, prefix: str) -> Iterator[ObjectInfo]:
        try:
            items = self._container.list_blobs(
                name_starts_with=prefix or None, results_per_page=self._list_page_size
            )
            for item in items:
                yield ObjectInfo(str(item.name), int(item.size or 0))
        except Exception as e:
            self._raise(e, "list", prefix)

    def head(self, key: str) -> ObjectInfo | None:
        try:
            properties = self._blob(key).get_blob_properties()
        except HttpResponseError as e:
            if e.status_code == 404 and _error_code(e) != "ContainerNotFound":
                return None
            self._raise(e, "head", key)
        except Exception as e:
            self._raise(e, "head", key)
        return ObjectInfo(key, int(properties.size))

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._service.close()
        finally:
            self._transport.close()
            closer = getattr(self._owned_credential, "close", None)
            if callable(closer):  # DefaultAzureCredential holds HTTP sessions of its own
                closer()


def _default_credential(settings: AzureConfig) -> Any:
    """``DefaultAzureCredential`` (environment, workload or managed identity, Azure CLI...),
    from the optional ``azure-identity`` (``pip install 'tierlog-rsm-azure[identity]'``)."""
    try:
        identity = import_module("azure.identity")
    except ImportError:
        raise ConfigError(
            "no Azure credential is configured: set rsm.config.azure.account.key, "
            "rsm.config.azure.sas.token or rsm.config.azure.connection.string, or install "
            "'tierlog-rsm-azure[identity]' to use DefaultAzureCredential (managed identity, "
            f"environment, Azure CLI) for account {settings.account_name!r}"
        ) from None
    return identity.DefaultAzureCredential()


def _read_exactly(source: BinaryIO, n: int, key: str) -> bytes:
    data = read_up_to(source, n)
    if len(data) != n:
        raise RemoteStorageException(
            f"upload {key!r}: the source ended after {len(data)} of {n} bytes"
        )
    return data


def _body_and_headers(pipeline_response: Any, body: Any, headers: Any) -> Any:
    """``cls`` of the generated ``download``: keep the streamed body and the headers."""
    return body, headers


class _DownloadStream(io.BufferedIOBase):
    """A streamed GET body as a file object, holding one network read at a time.

    A connection that breaks mid-body is resumed from where it stopped (up to ``resumes``
    times, with If-Match so the rest comes from the same version of the blob); past that, the
    error is raised as tierlog's (``RetriableRemoteStorageException`` for a lost connection).
    """

    def __init__(
        self,
        body: Iterator[bytes],
        start: int,
        reopen: Callable[[int], Iterator[bytes]],
        translate: Callable[[BaseException], Exception],
        *,
        resumes: int,
    ) -> None:
        super().__init__()
        self._body: Iterator[bytes] | None = body
        self._offset = start
        self._reopen = reopen
        self._translate = translate
        self._resumes = resumes
        self._chunk = b""
        self._pos = 0

    def readable(self) -> bool:
        return True

    def _fill(self) -> bool:
        """Make the current piece non-empty; ``False`` at the end."""
        while self._pos >= len(self._chunk):
            if self._body is None:
                return False
            self._chunk, self._pos = b"", 0  # drop the old piece before reading the next
            try:
                self._chunk = bytes(next(self._body))
            except StopIteration:
                self._body = None
                return False
            except Exception as e:
                self._body = None
                if self._resumes > 0 and _is_transient(e):
                    self._resumes -= 1
                    _LOG.debug("resuming a broken download at offset %d: %s", self._offset, e)
                    self._body = self._reopen(self._offset)
                    continue
                raise (e if isinstance(e, TierlogError) else self._translate(e)) from None
            self._offset += len(self._chunk)
        return True

    def _take(self, n: int) -> bytes:
        chunk, pos = self._chunk, self._pos
        if pos == 0 and n >= len(chunk):
            self._pos = len(chunk)
            return chunk  # no copy for whole pieces
        piece = chunk[pos : pos + n]
        self._pos += len(piece)
        return piece

    def read(self, size: int | None = -1) -> bytes:
        if self.closed:
            raise ValueError("read of a closed stream")
        parts = []
        remaining = -1 if size is None or size < 0 else size
        while remaining != 0 and self._fill():
            piece = self._take(len(self._chunk) if remaining < 0 else remaining)
            parts.append(piece)
            if remaining > 0:
                remaining -= len(piece)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read1(self, size: int = -1) -> bytes:
        if self.closed:
            raise ValueError("read of a closed stream")
        if not self._fill():
            return b""
        return self._take(len(self._chunk) if size is None or size < 0 else size)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._fill():
            piece = self._take(len(view) - done)
            view[done : done + len(piece)] = piece
            done += len(piece)
        return done

    def close(self) -> None:
        body, self._body = self._body, None
        self._chunk = b""
        closer = getattr(getattr(body, "response", None), "close", None)
        if callable(closer):  # give the connection back instead of draining the body
            try:
                closer()
            except Exception:
                _LOG.debug("closing a download stream failed", exc_info=True)
        super().close()
