"""What an object store must do for tierlog: the one interface every cloud plugin implements.

tierlog's object-store RSMs (``s3``, ``gcs``, ``azure``) share everything that is not a cloud
SDK call (object layout, manifest, chunking, transforms, caches, error mapping, metrics:
``tierlog.storage.objectstore``); each plugin is a thin ``ObjectStoreBackend`` over its SDK.
The contract is small on purpose, and strict where clouds differ:

- ``upload`` streams from a file object with bounded memory (S3 multipart above a threshold,
  GCS resumable with an explicit chunk size, Azure staged blocks) and is atomic to readers: an
  object is visible whole or not at all, never partial (a crash mid-upload leaves nothing, or
  an uncommitted upload the store expires);
- ``get`` is a ranged read with an **inclusive** end, returning a stream; a start at or past the
  end of the object gives an empty stream on every backend (S3 and fake-gcs-server answer 416
  there, Azurite an empty 206: the backend hides it);
- ``delete`` is idempotent: deleting a missing key succeeds (GCS and Azure answer 404: the
  backend swallows it; S3 does not report it);
- errors are tierlog's: a missing object raises ``RemoteResourceNotFoundException``; throttling
  raises ``ObjectStoreThrottledError``; 5xx, timeouts and connection failures (after the SDK's
  own retries) raise ``RetriableRemoteStorageException``; bad credentials, a missing bucket or
  a permission problem raise ``RemoteStorageException`` whose message names the bucket and what
  to fix. Credentials are never put in a message or a log line;
- every HTTP request (including each part of a multipart upload) is reported to the
  ``RequestObserver`` given at construction, so the RSM's metrics count requests, bytes, errors
  and throttles per operation and backend.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import BinaryIO, Literal, Protocol, Self

from tierlog.spi import RetriableRemoteStorageException
from tierlog.storage.objectstore.parts import PartReader, UploadedParts, upload_parts

__all__ = [
    "ObjectInfo",
    "ObjectStoreBackend",
    "ObjectStoreThrottledError",
    "Operation",
    "Outcome",
    "PartReader",
    "RequestObserver",
    "UploadSettings",
    "UploadedParts",
    "null_observer",
    "read_up_to",
    "upload_parts",
]

Operation = Literal["upload", "upload_part", "complete_upload", "get", "delete", "list", "head"]
"""Request kinds reported to the observer (a multipart upload is one ``upload`` made of
``upload_part`` requests and a ``complete_upload``; backends without parts report ``upload``)."""

Outcome = Literal["ok", "not_found", "throttled", "error"]


class RequestObserver(Protocol):
    """Told about every request a backend makes (``tierlog.storage.objectstore`` metrics)."""

    def __call__(
        self,
        operation: Operation,
        *,
        outcome: Outcome,
        bytes_sent: int = 0,
        bytes_received: int = 0,
    ) -> None: ...


def null_observer(
    operation: Operation, *, outcome: Outcome, bytes_sent: int = 0, bytes_received: int = 0
) -> None:
    """An observer that ignores everything (a backend used on its own)."""


class ObjectStoreThrottledError(RetriableRemoteStorageException):
    """The store asked the client to slow down (S3 ``SlowDown``/503, GCS 429, Azure 503
    ``ServerBusy``) and the SDK's retries did not get through: retry later."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """A stored object: its key and size in bytes."""

    key: str
    size: int


@dataclass(frozen=True, slots=True)
class UploadSettings:
    """How uploads stream, common to every backend (``rsm.config.upload.*`` keys).

    ``part_size``: bytes per part (S3 multipart part, GCS resumable chunk, Azure block); memory
    held by an upload is at most ``part_size * parallelism`` plus the SDK's own buffers, whatever
    the object's size. ``multipart_threshold``: below it (and when the size is known), one
    single-request upload. ``parallelism``: parts in flight at once (GCS resumable uploads are
    sequential by protocol and ignore it).
    """

    part_size: int = 8 * 1024 * 1024
    multipart_threshold: int = 8 * 1024 * 1024
    parallelism: int = 4


class ObjectStoreBackend(abc.ABC):
    """A bucket (or container) as keys -> bytes. Thread-safe: the RSM calls it from several
    threads at once. Constructed configured by its plugin; ``close`` releases clients."""

    name: str = "object store"
    """The backend's short name in metrics and messages: ``s3``, ``gcs``, ``azure``, ``memory``."""

    location: str = ""
    """Where it stores, for messages: ``s3://bucket``, ``gs://bucket``, ``azure://account/container``."""

    @abc.abstractmethod
    def check_access(self) -> None:
        """Verify at ``configure`` that the bucket exists and the credentials may read and write
        it (a cheap request: HEAD bucket, get bucket, container properties). Raises
        ``RemoteStorageException`` naming the bucket and the fix ("create the bucket", "check
        the credentials of ..."), or ``RetriableRemoteStorageException`` if unreachable."""

    @abc.abstractmethod
    def upload(self, key: str, source: BinaryIO, size: int | None) -> None:
        """Store what ``source`` yields (``size`` bytes, or until EOF when ``None``) under
        ``key``, replacing any object there. Streams with bounded memory (``UploadSettings``);
        atomic to readers. A failed upload leaves no object under ``key`` (an abandoned
        multipart upload is aborted on a best-effort basis)."""

    @abc.abstractmethod
    def get(self, key: str, start: int = 0, end: int | None = None) -> BinaryIO:
        """A stream of the bytes ``[start, end]`` (inclusive; ``None``: to the end). Empty when
        ``start`` is at or past the end. The caller closes it. ``RemoteResourceNotFoundException``
        if the key does not exist."""

    @abc.abstractmethod
    def delete(self, keys: Sequence[str]) -> None:
        """Delete ``keys`` (batched where the store allows it); missing keys are not an error."""

    @abc.abstractmethod
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in key order."""

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo | None:
        """The object's size, or ``None`` if it does not exist."""

    def close(self) -> None:  # noqa: B027 - a no-op default is the contract
        """Release clients and thread pools; a second call is harmless."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def read_up_to(source: BinaryIO, size: int) -> bytes:
    """``size`` bytes of ``source``, fewer only at its end.

    Upload sources may return short reads before their end (a pipe, the RSM's compressing and
    encrypting streams): a backend filling a single-request body reads through this; parts of
    a parallel upload are read by ``PartReader`` and sent by ``upload_parts`` (``parts.py``).
    """
    if size <= 0:
        return b""
    first = source.read(size)
    if not first or len(first) == size:
        return first or b""
    pieces = [first]
    got = len(first)
    while got < size:
        more = source.read(size - got)
        if not more:
            break
        pieces.append(more)
        got += len(more)
    return b"".join(pieces)
