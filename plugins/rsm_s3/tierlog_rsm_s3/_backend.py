"""``S3Backend``: tierlog's object-store contract over one boto3 S3 client.

Everything that is not an S3 call (layout, manifest, chunking, transforms, caches, metrics) is
done once in ``tierlog.storage.objectstore``; this module only moves bytes, and is strict about
the three things the Java RSM it replaces gets wrong or leaves to chance:

- **Uploads stream with bounded memory.** An object that fits in one part (or is below the
  multipart threshold) is one ``PutObject``. Anything larger is a multipart upload whose parts
  are read from the source one ``part_size`` buffer at a time and sent by the core's
  ``upload_parts``, so at most ``parallelism`` buffers exist at once whatever the object's size
  (Aiven's buffers grow on the heap, #559/#272). A failure aborts the upload: S3 makes an object
  visible only at ``CompleteMultipartUpload``, so readers never see part of one.
- **Every HTTP request is reported** to the ``RequestObserver``, including the attempts
  botocore retried on its own (a throttled attempt that a retry got past still counts as a
  throttle: that is what an operator needs to see before it turns into errors). botocore runs
  a call's attempts on the calling thread, so a thread-local log collects them.
- **Errors are tierlog's** (``_errors``): not found, throttled, retriable, or a message saying
  which bucket and which keys to fix.

The client is built from the ``S3Config`` (``_config``); without static keys, boto3's default
credential chain supplies them. Nothing here logs or formats a credential.
"""

from __future__ import annotations

import contextlib
import io
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, Final, Literal, cast

import boto3
import botocore.session
from botocore.config import Config
from botocore.exceptions import ClientError

from tierlog.spi import (
    ConfigError,
    IllegalStateError,
    RemoteResourceNotFoundException,
    RemoteStorageException,
)
from tierlog.storage.objectstore.backend import (
    ObjectInfo,
    ObjectStoreBackend,
    Operation,
    Outcome,
    PartReader,
    RequestObserver,
    UploadSettings,
    null_observer,
    read_up_to,
    upload_parts,
)
from tierlog_rsm_s3._config import DEFAULT_REGION, STORAGE_CLASS, S3Config
from tierlog_rsm_s3._errors import THROTTLE_CODES, classify, to_tierlog_error

if TYPE_CHECKING:
    from botocore.response import StreamingBody
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

__all__ = ["MAX_DELETE_BATCH", "MAX_PARTS", "S3Backend"]

_LOG = logging.getLogger(__name__)

MAX_PARTS: Final = 10_000
"""S3's limit of parts per multipart upload: a larger known size gets larger parts."""

MAX_DELETE_BATCH: Final = 1000
"""S3's limit of keys per ``DeleteObjects`` request."""

AWS_MIN_PART_SIZE: Final = 5 << 20
"""Amazon S3 refuses parts (all but the last) below 5 MiB with ``EntityTooSmall``."""

_USER_AGENT: Final = "tierlog-rsm-s3"

_shared_loader: Any = None
_loader_lock = threading.Lock()


def _new_session() -> boto3.session.Session:
    """A boto3 session of its own (credentials and region resolved for this backend), sharing
    one botocore data loader with every other backend of the process: parsing S3's service
    model takes about 0.2 s, and would otherwise be paid by each RSM instance."""
    global _shared_loader
    core = botocore.session.get_session()
    with _loader_lock:
        if _shared_loader is None:
            _shared_loader = core.get_component("data_loader")
        else:
            core.register_component("data_loader", _shared_loader)
    return boto3.session.Session(botocore_session=core)


# Request accounting -------------------------------------------------------------------------
class _AttemptLog(threading.local):
    """The outcomes of the HTTP attempts of the call running on this thread."""

    outcomes: list[Outcome] | None = None


def _attempt_outcome(
    response_dict: dict[str, Any] | None,
    parsed_response: dict[str, Any] | None,
    exception: BaseException | None,
) -> Outcome:
    if exception is not None or response_dict is None:
        return "error"
    status = int(response_dict.get("status_code", 0))
    if status < 300:
        return "ok"
    code = str((parsed_response or {}).get("Error", {}).get("Code", ""))
    if code == "NoSuchBucket":
        return "error"
    if status == 404:
        return "not_found"
    if status in {429, 503} or code in THROTTLE_CODES:
        return "throttled"
    return "error"


@dataclass
class _Call:
    """What one API call reports when it ends; ``defer`` leaves the final report to a stream."""

    operation: Operation
    bytes_sent: int = 0
    bytes_received: int = 0
    earlier: list[Outcome] = field(default_factory=list)


# Streams ------------------------------------------------------------------------------------
class _ObjectStream(io.RawIOBase):
    """The body of a ranged GET as a ``BinaryIO``: reads go straight to botocore's streaming
    body (which checks the length at the end), failures become tierlog errors, and the request
    is reported once, when the body is finished or closed, with the bytes actually read."""

    def __init__(
        self,
        body: StreamingBody | None,
        *,
        on_finish: Callable[[Outcome, int], None],
        on_error: Callable[[BaseException], RemoteStorageException],
    ) -> None:
        super().__init__()
        self._body = body
        self._on_finish = on_finish
        self._on_error = on_error
        self._received = 0
        self._finished = False

    def readable(self) -> bool:
        return True

    def _finish(self, outcome: Outcome) -> None:
        if not self._finished:
            self._finished = True
            self._on_finish(outcome, self._received)

    def read(self, size: int | None = -1) -> bytes:
        if self.closed:
            raise ValueError("I/O operation on closed stream")
        if self._body is None or self._finished:
            return b""
        amount = None if size is None or size < 0 else size
        if amount == 0:
            return b""
        try:
            data = self._body.read(amount)
        except Exception as error:
            self._finish("error")
            raise self._on_error(error) from error
        self._received += len(data)
        if not data or amount is None:
            self._finish("ok")
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._body is not None:
                self._body.close()
        finally:
            self._finish("ok")
            super().close()


class _PartStream(io.RawIOBase):
    """A part buffer as a seekable, read-only file, without copying it: each ``read`` copies
    only what it returns (botocore frames an aws-chunked body 1 MiB at a time)."""

    def __init__(self, data: bytes | bytearray) -> None:
        super().__init__()
        self._view = memoryview(data)
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: len(self._view)}
        if whence not in base:
            raise ValueError(f"invalid whence {whence}")
        self._position = max(0, base[whence] + offset)
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        end = len(self._view)
        if size is not None and size >= 0:
            end = min(end, self._position + size)
        start = min(self._position, end)
        self._position = max(self._position, end)
        return bytes(self._view[start:end])

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        """Straight from the part buffer into ``buffer``: no intermediate ``bytes``."""
        view = memoryview(buffer).cast("B")
        start = min(self._position, len(self._view))
        end = min(len(self._view), start + len(view))
        view[: end - start] = self._view[start:end]
        self._position = max(self._position, end)
        return end - start


# The backend --------------------------------------------------------------------------------
class S3Backend(ObjectStoreBackend):
    """One S3 bucket through one boto3 client (thread-safe, shared by every thread)."""

    name = "s3"

    def __init__(
        self,
        settings: S3Config,
        upload: UploadSettings | None = None,
        observer: RequestObserver = null_observer,
    ) -> None:
        self.settings = settings
        self.location = f"s3://{settings.bucket}"
        self._upload = upload or UploadSettings()
        # Over TLS with checksums on, botocore sends a checksum as an aws-chunked trailer and
        # wraps a bytes-like body in a BytesIO for that: a copy of a whole bytearray part. There
        # a part goes as a stream over its buffer; everywhere else as the buffer itself, which
        # botocore signs, checksums and sends in place (see ``_body``).
        self._stream_bodies = settings.checksum_check and (
            settings.endpoint_url is None or settings.endpoint_url.lower().startswith("https:")
        )
        self._observer = observer
        self._attempts = _AttemptLog()
        self._closed = False
        self._client = self._make_client()
        self._check_storage_class()
        if self._upload.part_size < AWS_MIN_PART_SIZE:
            _LOG.warning(
                "%s: part size %d is below 5 MiB; Amazon S3 refuses such parts "
                "(EntityTooSmall), only some S3-compatible servers accept them",
                self.location,
                self._upload.part_size,
            )
        # Parts of concurrent uploads share these threads; each upload's own semaphore bounds
        # its buffers to `parallelism`.
        self._executor = ThreadPoolExecutor(
            max_workers=max(2, self._upload.parallelism * 2),
            thread_name_prefix="tierlog-s3-upload",
        )
        self._client.meta.events.register("response-received.s3.*", self._on_response)

    def __repr__(self) -> str:
        endpoint = self.settings.endpoint_url or "AWS"
        return f"S3Backend(bucket={self.settings.bucket!r}, endpoint={endpoint!r})"

    # Client ------------------------------------------------------------------------------------
    def _make_client(self) -> S3Client:
        settings = self.settings
        # A session per backend: boto3's default session is not safe to share across threads
        # while clients are created, and its region comes from the same default chain.
        session = _new_session()
        region = settings.region or session.region_name or DEFAULT_REGION
        addressing: Literal["path", "virtual", "auto"] = (
            "auto" if settings.path_style is None else "path" if settings.path_style else "virtual"
        )
        checksums: Literal["when_supported", "when_required"] = (
            "when_supported" if settings.checksum_check else "when_required"
        )
        timeout = settings.attempt_timeout_ms / 1000
        config = Config(
            region_name=region,
            connect_timeout=timeout,
            read_timeout=timeout,
            # total_max_attempts counts the first try (botocore's max_attempts counts retries).
            retries={"mode": "standard", "total_max_attempts": settings.max_attempts},
            max_pool_connections=max(32, self._upload.parallelism * 2 + 16),
            s3={"addressing_style": addressing},
            request_checksum_calculation=checksums,
            response_checksum_validation=checksums,
            user_agent_extra=_USER_AGENT,
        )
        return session.client(
            "s3",
            endpoint_url=settings.endpoint_url,
            aws_access_key_id=settings.access_key_id,
            aws_secret_access_key=settings.secret_access_key,
            aws_session_token=settings.session_token,
            verify=settings.certificate_check,
            config=config,
        )

    def _check_storage_class(self) -> None:
        storage_class = self.settings.storage_class
        if storage_class is None:
            return
        shape: Any = self._client.meta.service_model.shape_for("StorageClass")
        allowed = list(getattr(shape, "enum", []) or [])
        if allowed and storage_class not in allowed:
            raise ConfigError(
                f"rsm.config.{STORAGE_CLASS} must be one of {', '.join(allowed)}, "
                f"got {storage_class!r}"
            )

    def _on_response(
        self,
        response_dict: dict[str, Any] | None = None,
        parsed_response: dict[str, Any] | None = None,
        exception: BaseException | None = None,
        **_: Any,
    ) -> None:
        """botocore's ``response-received`` event: one per HTTP attempt, on the calling thread."""
        outcomes = self._attempts.outcomes
        if outcomes is not None:
            outcomes.append(_attempt_outcome(response_dict, parsed_response, exception))

    @contextlib.contextmanager
    def _request(
        self, operation: Operation, key: str | None, *, bytes_sent: int = 0, defer: bool = False
    ) -> Iterator[_Call]:
        """Run one API call: report its attempts to the observer and turn its errors into
        tierlog's. With ``defer`` the final, successful attempt is left for the caller to report
        (a GET, whose body is still to be read)."""
        if self._closed:
            raise IllegalStateError(f"{self!r} is closed")
        call = _Call(operation, bytes_sent=bytes_sent)
        outcomes: list[Outcome] = []
        self._attempts.outcomes = outcomes
        try:
            yield call
        except Exception as error:
            outcome = classify(error)
            for earlier in outcomes[:-1]:
                self._observer(operation, outcome=earlier)
            self._observer(operation, outcome=outcome)
            raise self._error(error, operation, key) from error
        else:
            call.earlier = outcomes[:-1]
            for earlier in call.earlier:
                self._observer(operation, outcome=earlier)
            if not defer:
                self._observer(
                    operation,
                    outcome="ok",
                    bytes_sent=call.bytes_sent,
                    bytes_received=call.bytes_received,
                )
        finally:
            self._attempts.outcomes = None

    def _error(
        self, error: BaseException, operation: str, key: str | None
    ) -> RemoteStorageException:
        return to_tierlog_error(
            error,
            action=operation,
            bucket=self.settings.bucket,
            key=key,
            static_credentials=self.settings.static_credentials,
        )

    def _storage_class(self) -> dict[str, Any]:
        if self.settings.storage_class is None:
            return {}
        return {"StorageClass": self.settings.storage_class}

    # Contract ------------------------------------------------------------------------------
    def check_access(self) -> None:
        """``HeadBucket``: the bucket exists and these credentials may list it."""
        try:
            with self._request("head", None):
                self._client.head_bucket(Bucket=self.settings.bucket)
        except RemoteResourceNotFoundException as error:
            raise RemoteStorageException(
                f"bucket {self.settings.bucket} does not exist: create it or fix "
                f"rsm.config.s3.bucket.name (endpoint {self.settings.endpoint_url or 'AWS'})"
            ) from error

    def upload(self, key: str, source: BinaryIO, size: int | None) -> None:
        """One ``PutObject`` when the object fits in one part (or is below the multipart
        threshold), else a multipart upload streamed part by part."""
        settings = self._upload
        if size is not None and size < 0:
            raise ValueError(f"size must be >= 0 or None, got {size}")
        part_size = settings.part_size
        if size is not None:
            # A known size never needs more than S3's 10,000 parts.
            part_size = max(part_size, -(-size // MAX_PARTS))
            if size < settings.multipart_threshold or size <= part_size:
                data = read_up_to(source, size)
                self._check_size(key, len(data), size, exact=len(source.read(1)) == 0)
                self._put(key, data)
                return
        parts = PartReader(source, part_size, size)
        if size is None:
            whole = parts.read_whole()
            if whole is not None:
                self._put(key, whole)
                return
        # Otherwise the first part stays in `parts`, which hands it to its upload task.
        self._multipart(key, parts, size)

    def _check_size(self, key: str, got: int, expected: int | None, *, exact: bool) -> None:
        if expected is not None and (got != expected or not exact):
            raise RemoteStorageException(
                f"upload of s3://{self.settings.bucket}/{key}: the source "
                f"{'ended after' if got < expected else 'has more than'} {got} bytes, "
                f"{expected} were announced; nothing was stored"
            )

    def _put(self, key: str, data: bytes | bytearray) -> None:
        with self._request("upload", key, bytes_sent=len(data)):
            self._client.put_object(
                Bucket=self.settings.bucket, Key=key, Body=self._body(data), **self._storage_class()
            )

    def _multipart(self, key: str, parts: PartReader, size: int | None) -> None:
        """Parts read and sent by ``upload_parts``: at most ``parallelism`` part buffers exist
        at once, on the backend's shared threads; any failure aborts the upload."""
        bucket = self.settings.bucket
        checksum: dict[str, Any] = (
            {"ChecksumAlgorithm": "CRC32"} if self.settings.checksum_check else {}
        )
        with self._request("upload", key):
            created = self._client.create_multipart_upload(
                Bucket=bucket, Key=key, **self._storage_class(), **checksum
            )
        upload_id = created["UploadId"]

        def upload_part(index: int, data: bytearray) -> CompletedPartTypeDef:
            return self._upload_part(key, upload_id, index + 1, data, checksum)

        def too_many_parts() -> RemoteStorageException:
            return RemoteStorageException(
                f"upload of s3://{bucket}/{key} needs more than {MAX_PARTS} parts of "
                f"{parts.part_size} bytes: raise rsm.config.upload.part.size"
            )

        try:
            sent = upload_parts(
                parts,
                upload_part,
                parallelism=self._upload.parallelism,
                executor=self._executor,
                max_parts=MAX_PARTS,
                too_many_parts=too_many_parts,
            )
            exact = size is None or len(parts.source.read(1)) == 0
            self._check_size(key, sent.size, size, exact=exact)
            with self._request("complete_upload", key):
                self._client.complete_multipart_upload(
                    Bucket=bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": sent.results},
                )
        except BaseException:
            self._abort(key, upload_id)
            raise

    def _upload_part(
        self, key: str, upload_id: str, number: int, data: bytearray, checksum: dict[str, Any]
    ) -> CompletedPartTypeDef:
        with self._request("upload_part", key, bytes_sent=len(data)):
            response = self._client.upload_part(
                Bucket=self.settings.bucket,
                Key=key,
                UploadId=upload_id,
                PartNumber=number,
                Body=self._body(data),
                **checksum,
            )
        part: CompletedPartTypeDef = {"PartNumber": number, "ETag": response["ETag"]}
        if "ChecksumCRC32" in response:
            part["ChecksumCRC32"] = response["ChecksumCRC32"]
        return part

    def _body(self, data: bytes | bytearray) -> bytes:
        """The request body for a part (or a single-request object) in ``data``.

        A ``bytearray`` (what ``PartReader`` gives) goes as it is: botocore's validator takes
        it, and it is signed (SHA-256 over plain HTTP, or when no checksum is sent), checksummed
        and sent in place, where a ``bytes`` body is wrapped in a ``BytesIO`` and read again in
        1 MiB copies for each. Over TLS with checksums on, botocore would copy a bytearray whole
        (into the ``BytesIO`` of its aws-chunked trailer): the part goes as a ``_PartStream``
        over the same buffer, read 1 MiB at a time as it is framed. The cast is for the stubs,
        which say bytes or a file."""
        return cast(bytes, _PartStream(data) if self._stream_bodies else data)

    def _abort(self, key: str, upload_id: str) -> None:
        """Best effort: an upload left behind is invisible to readers and expires with the
        bucket's lifecycle rule for incomplete multipart uploads (recommended in the README)."""
        try:
            with self._request("delete", key):
                self._client.abort_multipart_upload(
                    Bucket=self.settings.bucket, Key=key, UploadId=upload_id
                )
        except RemoteStorageException as error:
            _LOG.warning(
                "could not abort the multipart upload of %s/%s: %s", self.location, key, error
            )

    def get(self, key: str, start: int = 0, end: int | None = None) -> BinaryIO:
        """``GetObject`` with ``Range: bytes=start-end``; S3's 416 for a start at or past the end
        of the object becomes an empty stream."""
        if start < 0 or (end is not None and end < start):
            raise ValueError(f"invalid range {start}..{end}")
        kwargs: dict[str, Any] = {}
        if start > 0 or end is not None:
            kwargs["Range"] = f"bytes={start}-{'' if end is None else end}"
        try:
            with self._request("get", key, defer=True):
                response = self._client.get_object(Bucket=self.settings.bucket, Key=key, **kwargs)
        except RemoteStorageException as error:
            cause = error.__cause__
            if isinstance(cause, ClientError) and (
                cause.response.get("Error", {}).get("Code") == "InvalidRange"
                or cause.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 416
            ):
                return cast(BinaryIO, _ObjectStream(None, on_finish=_ignore, on_error=_reraise))
            raise
        observer = self._observer

        def finish(outcome: Outcome, received: int) -> None:
            observer("get", outcome=outcome, bytes_received=received)

        return cast(
            BinaryIO,
            _ObjectStream(
                response["Body"],
                on_finish=finish,
                on_error=lambda error: self._error(error, "get", key),
            ),
        )

    def delete(self, keys: Sequence[str]) -> None:
        """``DeleteObjects`` in batches of 1000 (``Quiet``: only failures are listed); a
        missing key is not a failure on S3."""
        unique = list(dict.fromkeys(keys))
        for begin in range(0, len(unique), MAX_DELETE_BATCH):
            batch = unique[begin : begin + MAX_DELETE_BATCH]
            with self._request("delete", batch[0] if len(batch) == 1 else None):
                response = self._client.delete_objects(
                    Bucket=self.settings.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            failures = [e for e in response.get("Errors", []) if e.get("Code") not in {"NoSuchKey"}]
            if failures:
                first = failures[0]
                error = ClientError(
                    {"Error": {"Code": first.get("Code", ""), "Message": first.get("Message", "")}},
                    "DeleteObjects",
                )
                mapped = self._error(error, "delete", first.get("Key"))
                raise type(mapped)(
                    f"{mapped} ({len(failures)} of {len(batch)} keys not deleted)"
                ) from error

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """``ListObjectsV2`` pages (1000 keys each), sorted by key (UTF-8 bytes).

        Amazon S3 lists in that order, but S3-compatible servers built on a file tree do not:
        SeaweedFS lists ``c/d`` before ``c.e`` (a directory before its siblings). The listing
        is therefore collected and sorted before it is yielded: the RSM lists one partition's
        objects at a time (three per segment), so this costs little memory.
        """
        found: list[ObjectInfo] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.settings.bucket, "Prefix": prefix}
            if token is not None:
                kwargs["ContinuationToken"] = token
            with self._request("list", prefix):
                page = self._client.list_objects_v2(**kwargs)
            found.extend(
                ObjectInfo(item["Key"], int(item["Size"])) for item in page.get("Contents", [])
            )
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or token is None:
                break
        found.sort(key=lambda info: info.key.encode("utf-8"))
        yield from found

    def head(self, key: str) -> ObjectInfo | None:
        """``HeadObject``; ``None`` for S3's bare 404."""
        try:
            with self._request("head", key):
                response = self._client.head_object(Bucket=self.settings.bucket, Key=key)
        except RemoteResourceNotFoundException:
            return None
        return ObjectInfo(key, int(response["ContentLength"]))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._executor.shutdown(wait=True)
        self._client.close()


def _ignore(outcome: Outcome, received: int) -> None:
    """An empty range made no successful request to report (the 416 was reported)."""


def _reraise(error: BaseException) -> RemoteStorageException:
    raise error
