"""The ObjectStoreBackend conformance suite: what every cloud adapter under the object-store RSM
must do, as pytest tests.

The object-store RSM (``tierlog.storage.objectstore``) keeps layout, manifest, chunking,
transforms and caches in the core and trusts each plugin's ``ObjectStoreBackend`` for the rest:
streaming atomic uploads, inclusive ranged gets, idempotent deletes, ordered listings, tierlog's
errors, one observer call per request. Clouds differ exactly there (S3 answers 416 for a range
at the end where Azurite answers an empty 206; GCS and Azure answer 404 to a delete of a
missing object where S3 does not), so a backend that gets one of them wrong breaks the RSM in a
way the RSM suite may only see on one cloud. This suite pins each rule on the backend alone,
where a failure names the rule.

A plugin opts in with a test class that provides the backend, built on the suite's
``upload_settings`` and ``observer`` fixtures::

    from tierlog.conformance import ObjectStoreBackendSuite

    class TestS3Backend(ObjectStoreBackendSuite):
        @pytest.fixture
        def backend(self, upload_settings, observer, s3_bucket):
            backend = S3Backend(bucket=s3_bucket, upload=upload_settings, observer=observer)
            yield backend
            backend.close()

The bucket may be shared by every test: each test writes only under its own ``key_prefix``
(``tierlog-conformance/<random hex>/``) and removes what it wrote (best effort) afterwards.

Sizes are fixtures, so CI stays fast and a store's limits are respected: ``upload_settings``
(default: 5 MiB parts, S3's minimum, threshold 5 MiB, 2 parts in flight) decides which uploads
take the multipart path, ``large_object_size`` and ``memory_limit`` the bounded-memory test.
What a backend cannot do is declared, with a reason, in ``ObjectStoreBackendCapabilities``
(``capabilities = ...`` on the class, or a ``conformance_capabilities()`` classmethod on the
backend class); the tests that need it are skipped with that reason. A standard test may not be
overridden without ``@pytest.mark.xfail(reason=...)`` or ``@pytest.mark.skip(reason=...)``.

Upload sources are real files and ``StreamSource`` streams: not seekable, without a length, and
giving short reads, like the compressing and encrypting streams the RSM hands over. Every test's
docstring says what it checks and how to fix a failure.
"""

from __future__ import annotations

import hashlib
import io
import logging
import math
import random
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, ClassVar, Final, cast, get_args

import pytest

from tierlog.conformance._base import Capability, SuiteBase, Unsupported, require
from tierlog.conformance.rsm_suite import LEGAL_TOPIC_NAMES, MiB, _measure_peak, read_stream
from tierlog.spi import (
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
    Uuid,
)
from tierlog.storage.objectstore.backend import (
    ObjectInfo,
    ObjectStoreBackend,
    Operation,
    Outcome,
    UploadSettings,
)

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = [
    "ObjectStoreBackendCapabilities",
    "ObjectStoreBackendSuite",
    "ObservedRequest",
    "RecordingObserver",
    "StreamSource",
    "UploadSourceError",
]

_LOG = logging.getLogger(__name__)

_NOT_FOUND = RemoteResourceNotFoundException
_OPERATIONS: Final = frozenset(get_args(Operation))
_OUTCOMES: Final = frozenset(get_args(Outcome))
_UPLOAD_OPERATIONS: Final = frozenset({"upload", "upload_part", "complete_upload"})


# Capabilities ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ObjectStoreBackendCapabilities:
    """What the backend under test can do; each field is ``True`` or ``Unsupported("why")``.

    Everything defaults to supported: a backend declares only what it cannot do, and the reason
    shows in every skip. A bare ``False`` is refused. The three cloud backends support all.
    """

    multipart_upload: Capability = True
    """Uploads above ``multipart_threshold`` (or of unknown size) go in parts of ``part_size``,
    each part one request reported to the observer as ``upload_part`` (or ``complete_upload``
    for a request that also finalizes). A store with no notion of parts (in memory) declares
    ``Unsupported``."""

    bounded_memory: Capability = True
    """An upload of ``large_object_size`` bytes, and reading it back, hold at most
    ``memory_limit`` of Python memory (about ``part_size * (parallelism + 1)``): nothing is
    buffered whole. A store that keeps objects in Python memory declares ``Unsupported``."""

    concurrent_requests: Capability = True
    """Uploads, gets and overwrites may run at once from several threads (the RSM copies
    segments on the RLM's thread pool while fetches run). Only a backend documented as
    single-threaded declares ``Unsupported``."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not True and not isinstance(value, Unsupported):
                raise TypeError(
                    f"capability {f.name} must be True or Unsupported('reason'), got {value!r}"
                )


# The observer ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ObservedRequest:
    """One call of the ``RequestObserver``: what the backend reported about one request."""

    operation: str
    outcome: str
    bytes_sent: int
    bytes_received: int


class RecordingObserver:
    """A ``RequestObserver`` that records every call, from any thread.

    The suite hands it to the backend (the ``observer`` fixture) and reads it back: the RSM's
    metrics (requests, bytes, errors and throttles per operation) are only as true as these
    calls.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[ObservedRequest] = []

    def __call__(
        self,
        operation: Operation,
        *,
        outcome: Outcome,
        bytes_sent: int = 0,
        bytes_received: int = 0,
    ) -> None:
        with self._lock:
            self._requests.append(ObservedRequest(operation, outcome, bytes_sent, bytes_received))

    @property
    def requests(self) -> list[ObservedRequest]:
        """A copy of everything recorded so far, in call order."""
        with self._lock:
            return list(self._requests)

    def take(self) -> list[ObservedRequest]:
        """What was recorded since the last ``take``, then forget it."""
        with self._lock:
            taken, self._requests = self._requests, []
            return taken


# Upload sources -------------------------------------------------------------------------------
class UploadSourceError(OSError):
    """Raised by a ``StreamSource`` with ``fail_after``: the disk failed mid-upload."""


class StreamSource(io.RawIOBase):
    """A non-seekable upload source of ``size`` bytes, giving short reads.

    The RSM uploads streams (compressing and encrypting transforms over a segment file): they
    cannot seek, have no length or ``fileno``, and ``read(n)`` may return fewer than ``n`` bytes
    before the end (here at most ``max_read``). A backend that seeks, asks for a length, or takes
    a short read for the end of the stream fails with this source. The content is ``data``, or
    bytes generated from ``seed`` and never held whole; ``sha256`` is their digest so far and
    ``position`` how much was read. With ``fail_after``, reading past that many bytes raises
    ``UploadSourceError`` (a disk failing mid-upload).
    """

    def __init__(
        self,
        size: int,
        *,
        data: bytes | None = None,
        seed: int = 0,
        max_read: int = 65_521,
        fail_after: int | None = None,
    ) -> None:
        super().__init__()
        if data is not None and len(data) != size:
            raise ValueError(f"data has {len(data)} bytes, size says {size}")
        self.size = size
        self.position = 0
        self.sha256 = hashlib.sha256()
        self._data = None if data is None else memoryview(data)
        self._random = random.Random(seed)
        self._max_read = max_read
        self._fail_after = fail_after

    @staticmethod
    def generated(size: int, seed: int) -> bytes:
        """The bytes a ``StreamSource(size, seed=seed)`` yields (for a comparison in memory)."""
        return random.Random(seed).randbytes(size)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def _take(self, wanted: int) -> bytes:
        if self.closed:
            raise ValueError("read from a closed StreamSource")
        if self._fail_after is not None and self.position >= self._fail_after:
            raise UploadSourceError(
                f"injected failure of the upload source after {self.position} bytes"
            )
        n = min(wanted, self._max_read, self.size - self.position)
        if self._fail_after is not None:
            n = min(n, self._fail_after - self.position)
        if n <= 0:
            return b""
        if self._data is not None:
            chunk = bytes(self._data[self.position : self.position + n])
        else:
            chunk = self._random.randbytes(n)
        self.position += n
        self.sha256.update(chunk)
        return chunk

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            return self.readall()
        return self._take(size)

    def readall(self) -> bytes:
        parts = []
        while chunk := self._take(self._max_read):
            parts.append(chunk)
        return b"".join(parts)

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        chunk = self._take(len(view))
        view[: len(chunk)] = chunk
        return len(chunk)


def _as_binary(source: io.RawIOBase) -> BinaryIO:
    """A ``StreamSource`` where the API wants ``BinaryIO`` (it has every method a reader uses)."""
    return cast(BinaryIO, source)


def _mismatch(got: bytes, expected: bytes) -> str:
    """Why ``got`` is not ``expected``: lengths and the first differing byte."""
    if len(got) != len(expected):
        described = f"{len(got)} bytes, expected {len(expected)}"
    else:
        described = f"{len(got)} bytes as expected, but different"
    first = next((i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), None)
    if first is not None:
        described += f"; first difference at byte {first}"
    return described


_SOURCE_KINDS: Final = ("file", "stream", "stream-unknown-size")

_SIZE_CASES: Final[Mapping[str, Callable[[UploadSettings], int]]] = {
    "empty": lambda s: 0,
    "small": lambda s: 1000,
    "below-threshold": lambda s: s.multipart_threshold - 1,
    "exactly-threshold": lambda s: s.multipart_threshold,
    "above-threshold": lambda s: s.multipart_threshold + s.part_size // 2 + 1,
    "parts-multiple": lambda s: s.part_size * (s.multipart_threshold // s.part_size + 1),
}
"""Upload sizes of ``test_upload_round_trip``, from the upload settings: the single-request
path, its boundary, and the multipart path with a ragged and with an exact last part."""

_RANGES: Final[Mapping[str, Callable[[int], tuple[int, int | None]]]] = {
    "first-byte": lambda n: (0, 0),
    "whole": lambda n: (0, n - 1),
    "last-byte": lambda n: (n - 1, n - 1),
    "middle": lambda n: (n // 3, 2 * n // 3),
    "one-middle-byte": lambda n: (n // 2, n // 2),
    "end-past-the-end": lambda n: (n // 2, n + 1000),
    "no-end": lambda n: (n // 2, None),
    "no-end-from-0": lambda n: (0, None),
    "start-at-size": lambda n: (n, n + 10),
    "start-at-size-no-end": lambda n: (n, None),
    "start-past-size": lambda n: (n + 10, n + 20),
    "start-past-size-no-end": lambda n: (n + 10, None),
}
"""``get(start, end)`` cases of ``test_ranged_get``: the end is inclusive, clamped to the size;
a start at or past the size gives an empty stream."""


# The suite ------------------------------------------------------------------------------------
class ObjectStoreBackendSuite(SuiteBase):
    """The ``ObjectStoreBackend`` contract; subclass it and provide a ``backend`` fixture.

    Fixtures a subclass provides: ``backend`` (required: a configured backend on a bucket that
    exists, built with ``upload_settings`` and ``observer``), and optionally
    ``missing_bucket_backend`` (one configured alike on a bucket that does not exist). Fixtures
    it may override: ``upload_settings``, ``large_object_size``, ``memory_limit``,
    ``key_prefix``. Class attributes: ``capabilities``, ``concurrency``, ``listing_objects``.
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.tierlog_conformance]

    capabilities: ClassVar[ObjectStoreBackendCapabilities | None] = None
    """What the backend cannot do; ``None`` asks the backend class's
    ``conformance_capabilities()`` classmethod, and without one everything must work."""

    concurrency: ClassVar[int] = 8
    """Threads of the concurrency tests."""

    listing_objects: ClassVar[int] = 1100
    """Objects of ``test_list_and_delete_beyond_one_page``: more than one page of a listing
    (1000 on S3 and GCS) and one batch of a delete (1000 on S3, 256 on Azure, 100 on GCS)."""

    # Fixtures -----------------------------------------------------------------------------------
    @pytest.fixture
    def backend(self) -> ObjectStoreBackend:
        """The backend under test: override it (see the class docstring)."""
        pytest.fail(
            f"{type(self).__name__} must provide a `backend` fixture: a configured "
            "ObjectStoreBackend on an existing bucket, built with the `upload_settings` and "
            "`observer` fixtures",
            pytrace=False,
        )

    @pytest.fixture
    def upload_settings(self) -> UploadSettings:
        """How the backend under test streams uploads. The default is the smallest a real
        store accepts (S3 refuses parts below 5 MiB), so the multipart path runs on objects of
        a few parts; an in-memory backend can go much lower."""
        return UploadSettings(part_size=5 * MiB, multipart_threshold=5 * MiB, parallelism=2)

    @pytest.fixture
    def observer(self) -> RecordingObserver:
        """The ``RequestObserver`` to give the backend; the suite checks what it was told."""
        return RecordingObserver()

    @pytest.fixture
    def memory_limit(self, upload_settings: UploadSettings) -> int:
        """Peak Python memory (``tracemalloc``) allowed while uploading or reading back a
        ``large_object_size`` object: the parts in flight, one more being read, and 16 MiB for
        the SDK's own buffers and lazily imported modules."""
        s = upload_settings
        return s.part_size * (s.parallelism + 1) + 16 * MiB

    @pytest.fixture
    def large_object_size(self, memory_limit: int) -> int:
        """Size of the bounded-memory test's object: three times ``memory_limit`` (plus a
        ragged tail), so that holding it whole is bound to fail."""
        return 3 * memory_limit + 12_345

    @pytest.fixture
    def missing_bucket_backend(self) -> ObjectStoreBackend | None:
        """A backend configured like ``backend`` but on a bucket that does not exist; ``None``
        (the default) skips ``test_check_access_names_a_missing_bucket``."""
        return None

    @pytest.fixture
    def backend_capabilities(self, backend: ObjectStoreBackend) -> ObjectStoreBackendCapabilities:
        """The declared capabilities: the subclass's, else the backend class's, else all."""
        return self._declared_capabilities(
            self.capabilities, type(backend), ObjectStoreBackendCapabilities
        )

    @pytest.fixture
    def key_prefix(self, backend: ObjectStoreBackend) -> Iterator[str]:
        """A prefix no other test uses; whatever is under it is deleted afterwards (best
        effort: a broken backend must not turn its failures into teardown errors)."""
        prefix = f"tierlog-conformance/{uuid.uuid4().hex}/"
        yield prefix
        try:
            left = [info.key for info in backend.list(prefix)]
            if left:
                backend.delete(left)
        except Exception:  # cleanup must not mask the test's own outcome
            _LOG.debug("could not clean up %s", prefix, exc_info=True)

    # Helpers ------------------------------------------------------------------------------------
    @staticmethod
    def put(backend: ObjectStoreBackend, key: str, data: bytes, *, known_size: bool = True) -> None:
        """Upload ``data`` under ``key`` from a non-seekable ``StreamSource``."""
        source = StreamSource(len(data), data=data)
        backend.upload(key, _as_binary(source), len(data) if known_size else None)
        assert source.position == len(data), (
            f"upload({key!r}) returned after reading {source.position} of {len(data)} bytes "
            "of its source: read the source to its end"
        )

    @staticmethod
    def assert_object(backend: ObjectStoreBackend, key: str, expected: bytes) -> None:
        """``head`` gives the size, ``get`` the bytes (whole and in small reads)."""
        info = backend.head(key)
        assert info is not None, f"head({key!r}) returned None right after an upload"
        assert (info.key, info.size) == (key, len(expected)), (
            f"head({key!r}) returned {info!r}, expected key {key!r} and size {len(expected)}"
        )
        got = read_stream(backend.get(key))
        assert got == expected, f"get({key!r}) returned {_mismatch(got, expected)}"
        chunk = 7 if len(expected) <= 10_000 else MiB - 1
        chunked = read_stream(backend.get(key), chunk=chunk)
        assert chunked == expected, (
            f"get({key!r}) read {chunk} bytes at a time returned {_mismatch(chunked, expected)}"
        )

    @staticmethod
    def assert_missing(backend: ObjectStoreBackend, key: str) -> None:
        """``head`` gives ``None`` and ``get`` raises ``RemoteResourceNotFoundException``."""
        info = backend.head(key)
        assert info is None, f"head({key!r}) returned {info!r} for an object that must not exist"
        with pytest.raises(_NOT_FOUND):
            read_stream(backend.get(key))

    @staticmethod
    def listed(backend: ObjectStoreBackend, prefix: str) -> list[tuple[str, int]]:
        """``list(prefix)`` as ``(key, size)`` pairs, in the order the backend gave them."""
        infos = list(backend.list(prefix))
        for info in infos:
            assert isinstance(info, ObjectInfo), (
                f"list({prefix!r}) yielded {info!r}; it must yield ObjectInfo"
            )
        return [(info.key, info.size) for info in infos]

    # Access -------------------------------------------------------------------------------------
    def test_check_access_succeeds(self, backend: ObjectStoreBackend) -> None:
        """``check_access()`` returns normally on the fixture's bucket, and may be repeated.

        The RSM calls it in ``configure``. To fix: make it one cheap request on the bucket
        (HEAD bucket, get bucket, container properties) that needs only the permissions the
        RSM uses; do not create the bucket, do not list it whole.
        """
        backend.check_access()
        backend.check_access()

    def test_check_access_names_a_missing_bucket(
        self, missing_bucket_backend: ObjectStoreBackend | None
    ) -> None:
        """On a bucket that does not exist, ``check_access()`` raises ``RemoteStorageException``
        (neither retriable nor not-found) whose message names the bucket.

        Needs the optional ``missing_bucket_backend`` fixture. The message is what an operator
        reads when the broker refuses to start. To fix: catch the store's "no such bucket"
        (S3 ``NoSuchBucket``/404, GCS 404, Azure ``ContainerNotFound``) and raise
        ``RemoteStorageException(f"bucket {name!r} does not exist: create it or fix ...")``;
        a ``RemoteResourceNotFoundException`` would read as a missing segment.
        """
        if missing_bucket_backend is None:
            pytest.skip("no missing_bucket_backend fixture: override it to run this test")
        with pytest.raises(RemoteStorageException) as raised:
            missing_bucket_backend.check_access()
        error = raised.value
        assert not isinstance(error, RetriableRemoteStorageException | _NOT_FOUND), (
            f"a missing bucket raised {type(error).__name__}: it must be a plain "
            "RemoteStorageException (retrying does not create a bucket)"
        )
        bucket = missing_bucket_backend.location.rstrip("/").rsplit("/", 1)[-1]
        assert bucket, "missing_bucket_backend.location is empty: set it (s3://bucket, ...)"
        assert bucket in str(error), (
            f"the message {str(error)!r} does not name the bucket {bucket!r}"
        )

    # Upload and get -----------------------------------------------------------------------------
    @pytest.mark.parametrize("source_kind", _SOURCE_KINDS)
    @pytest.mark.parametrize("size_case", list(_SIZE_CASES))
    def test_upload_round_trip(  # noqa: PLR0917 - fixtures and parameters
        self,
        backend: ObjectStoreBackend,
        key_prefix: str,
        upload_settings: UploadSettings,
        tmp_path: Path,
        size_case: str,
        source_kind: str,
    ) -> None:
        """An upload reads back byte for byte, with its size from ``head`` and ``list``.

        Sizes cover the single-request path (empty, small, one below the threshold), the
        threshold itself, and the multipart path with a ragged and an exact last part; sources
        are a file, a non-seekable stream with short reads, and the same with ``size=None``.
        To fix: upload exactly ``size`` bytes (or to EOF); fill each part by reading until it
        is full, since a short ``read`` is not the end of the stream, only ``b""`` is; finish
        an unknown-size upload whose last part is empty or whose whole body is empty; never
        ``seek``, ``tell`` or ``fileno`` the source.
        """
        size = _SIZE_CASES[size_case](upload_settings)
        data = StreamSource.generated(size, seed=size)
        key = f"{key_prefix}round-trip/object.log"
        if source_kind == "file":
            path = tmp_path / "source.bin"
            path.write_bytes(data)
            with path.open("rb") as file:
                backend.upload(key, file, size)
                assert file.tell() == size, (
                    f"upload returned after reading {file.tell()} of {size} bytes of the file"
                )
        else:
            self.put(backend, key, data, known_size=source_kind == "stream")
        self.assert_object(backend, key, data)
        assert self.listed(backend, key) == [(key, size)], (
            f"list({key!r}) must give exactly the uploaded object and its size"
        )

    @pytest.mark.parametrize("case", list(_RANGES))
    def test_ranged_get(self, backend: ObjectStoreBackend, key_prefix: str, case: str) -> None:
        """``get(key, start, end)`` gives bytes ``start..end`` **inclusive**.

        No end means to the end; an end past the end is clamped; a start at or past the end
        gives an empty stream. Read whole and 7 bytes at a time. To fix: send
        ``Range: bytes=start-end`` (inclusive, like the contract) or ``bytes=start-`` for no
        end; turn the store's answer to a start at the size (416 on S3 and GCS, an empty 206 on
        Azurite) into an empty stream, not an error.
        """
        size = 5000
        data = StreamSource.generated(size, seed=7)
        key = f"{key_prefix}ranged/object.log"
        self.put(backend, key, data)
        start, end = _RANGES[case](size)
        expected = data[start : size if end is None else end + 1]
        got = read_stream(backend.get(key, start, end))
        assert got == expected, (
            f"get({start}, {end}) of a {size}-byte object returned {_mismatch(got, expected)}"
        )
        chunked = read_stream(backend.get(key, start, end), chunk=7)
        assert chunked == expected, (
            f"get({start}, {end}) read 7 bytes at a time returned "
            f"{_mismatch(chunked, expected)}: the stream must stop at the end position"
        )

    def test_ranged_get_across_part_boundaries(
        self, backend: ObjectStoreBackend, key_prefix: str, upload_settings: UploadSettings
    ) -> None:
        """Ranges of an object uploaded in parts read back wherever they fall: across a part
        boundary, exactly one part, the tail.

        To fix: the parts of a multipart upload must be stored in order and each exactly
        ``part_size`` (but the last); check the part numbers (1-based on S3) and the order of
        the block list (Azure).
        """
        p = upload_settings.part_size
        size = upload_settings.multipart_threshold + 2 * p + 7
        data = StreamSource.generated(size, seed=11)
        key = f"{key_prefix}parts/object.log"
        self.put(backend, key, data)
        ranges: list[tuple[int, int | None]] = [
            (0, p - 1),
            (p - 1, p),
            (p - 100, p + 99),
            (p, 2 * p - 1),
            (p + 1, 2 * p),
            (2 * p - 5, None),
            (size - 1, size - 1),
            (size - 3, size + 3),
        ]
        wrong = []
        for start, end in ranges:
            expected = data[start : size if end is None else end + 1]
            got = read_stream(backend.get(key, start, end))
            if got != expected:
                wrong.append(f"get({start}, {end}): {_mismatch(got, expected)}")
        assert not wrong, (
            f"ranges of a {size}-byte object uploaded in {p}-byte parts differ: " + "; ".join(wrong)
        )

    def test_empty_object_reads_empty(self, backend: ObjectStoreBackend, key_prefix: str) -> None:
        """A zero-byte object exists (``head`` size 0, listed) and every range of it is empty.

        The RSM stores an empty segment's data object (Kafka copies empty segments). To fix:
        do not skip the upload of an empty body; a ranged get of an empty object is an empty
        stream (S3 answers 416 to ``bytes=0-0`` there).
        """
        key = f"{key_prefix}empty/object.log"
        self.put(backend, key, b"")
        self.assert_object(backend, key, b"")
        for start, end in ((0, None), (0, 0), (0, 10), (5, None)):
            got = read_stream(backend.get(key, start, end))
            assert got == b"", f"get({start}, {end}) of an empty object returned {len(got)} bytes"
        assert self.listed(backend, key) == [(key, 0)]

    def test_closing_a_stream_early_is_safe(
        self, backend: ObjectStoreBackend, key_prefix: str, upload_settings: UploadSettings
    ) -> None:
        """Streams closed after reading one byte do not break later requests.

        The RSM stops reading a segment as soon as it has the batches it needs. To fix: on
        ``close``, release (or discard) the HTTP connection of an unfinished body instead of
        returning it to the pool with unread bytes, and do not read the rest to the end.
        """
        size = upload_settings.multipart_threshold + 1
        data = StreamSource.generated(size, seed=13)
        key = f"{key_prefix}early-close/object.log"
        self.put(backend, key, data)
        for i in range(2 * self.concurrency):
            stream = backend.get(key, i)
            try:
                first = stream.read(1)
            finally:
                stream.close()
            assert first == data[i : i + 1], f"get({key!r}, {i}) started with {first!r}"
        self.assert_object(backend, key, data)

    # Missing objects ----------------------------------------------------------------------------
    @pytest.mark.parametrize(
        "byte_range", [(0, None), (10, 20), (0, 0)], ids=["whole", "range", "first-byte"]
    )
    def test_get_missing_raises_not_found(
        self, backend: ObjectStoreBackend, key_prefix: str, byte_range: tuple[int, int | None]
    ) -> None:
        """``get`` of a key that does not exist raises ``RemoteResourceNotFoundException``,
        from the call or at the latest on the first read.

        The RSM turns it into Kafka's ``RemoteResourceNotFoundException``. To fix: catch the
        SDK's "not found" (S3 ``NoSuchKey``, GCS ``NotFound``, Azure ``ResourceNotFoundError``
        / ``BlobNotFound``) and raise ``RemoteResourceNotFoundException``; do not return an
        empty stream.
        """
        start, end = byte_range
        with pytest.raises(_NOT_FOUND):
            read_stream(backend.get(f"{key_prefix}missing/object.log", start, end))

    def test_head_missing_returns_none(self, backend: ObjectStoreBackend, key_prefix: str) -> None:
        """``head`` of a key that does not exist returns ``None``, also when a longer key with
        that prefix exists.

        To fix: map the 404 of HEAD (on S3 a bare ``ClientError`` with code "404", not
        ``NoSuchKey``) to ``None``; do not answer with a listing that matches by prefix.
        """
        self.put(backend, f"{key_prefix}head/object.log.longer", b"x")
        assert backend.head(f"{key_prefix}head/object.log") is None
        assert backend.head(f"{key_prefix}head/other") is None

    # Delete -------------------------------------------------------------------------------------
    def test_delete_removes(self, backend: ObjectStoreBackend, key_prefix: str) -> None:
        """After ``delete([key])`` the object is gone: ``head`` is ``None``, ``get`` raises
        not-found, ``list`` does not show it.

        To fix: delete the exact key (not a prefix); wait for the delete to complete.
        """
        key = f"{key_prefix}delete/object.log"
        self.put(backend, key, b"some bytes")
        backend.delete([key])
        self.assert_missing(backend, key)
        assert self.listed(backend, f"{key_prefix}delete/") == []

    def test_delete_missing_succeeds(self, backend: ObjectStoreBackend, key_prefix: str) -> None:
        """Deleting a key that never existed returns normally (delete is idempotent).

        The RSM deletes what a failed copy may not have written. To fix: swallow "not found"
        while deleting (GCS and Azure answer 404 there; S3 does not).
        """
        backend.delete([f"{key_prefix}never/written.log"])

    def test_delete_twice_succeeds(self, backend: ObjectStoreBackend, key_prefix: str) -> None:
        """A second delete of the same key returns normally.

        Kafka retries a delete whose outcome it did not see. To fix: as for a missing key,
        a 404 on delete is success.
        """
        key = f"{key_prefix}twice/object.log"
        self.put(backend, key, b"bytes")
        backend.delete([key])
        backend.delete([key])
        self.assert_missing(backend, key)

    def test_delete_nothing_succeeds(self, backend: ObjectStoreBackend) -> None:
        """``delete([])`` returns normally and deletes nothing.

        To fix: return before building a request (S3's DeleteObjects refuses an empty list
        with ``MalformedXML``).
        """
        backend.delete([])

    def test_delete_many_including_missing(
        self, backend: ObjectStoreBackend, key_prefix: str
    ) -> None:
        """One ``delete`` of several keys, some missing, removes exactly the existing ones
        named and keeps the others.

        The RSM deletes a segment's three objects in one call, whichever exist. To fix: treat
        a per-key "not found" in a batch answer as success, but raise for any other per-key
        error (S3 DeleteObjects reports them in the body of a 200); do not stop at the first
        missing key.
        """
        keys = [f"{key_prefix}many/{name}" for name in ("a.log", "b.log", "c.log", "d.log")]
        for i, key in enumerate(keys):
            self.put(backend, key, bytes([i]) * (i + 1))
        backend.delete(
            [keys[0], f"{key_prefix}many/missing-1", keys[2], f"{key_prefix}missing-2/x"]
        )
        self.assert_missing(backend, keys[0])
        self.assert_missing(backend, keys[2])
        self.assert_object(backend, keys[1], b"\x01\x01")
        self.assert_object(backend, keys[3], b"\x03" * 4)
        assert self.listed(backend, f"{key_prefix}many/") == [(keys[1], 2), (keys[3], 4)]

    def test_list_and_delete_beyond_one_page(
        self, backend: ObjectStoreBackend, key_prefix: str
    ) -> None:
        """``listing_objects`` (1100) objects are all listed, in key order, and one ``delete``
        of all of them (and a missing key) removes every one.

        A listing comes in pages (1000 keys on S3 and GCS) and a batch delete has a limit
        (1000 on S3, 256 on Azure, 100 on GCS). To fix: follow continuation tokens / page
        iterators to the end; split deletes into batches the store accepts.
        """
        count = self.listing_objects
        keys = [f"{key_prefix}page/{i:05d}" for i in range(count)]
        shuffled = random.Random(3).sample(keys, len(keys))

        def upload(key: str) -> None:
            self.put(backend, key, b"x" * (int(key[-5:]) % 7))

        with ThreadPoolExecutor(self.concurrency) as pool:
            list(pool.map(upload, shuffled))
        got = self.listed(backend, f"{key_prefix}page/")
        expected = [(key, int(key[-5:]) % 7) for key in keys]
        assert len(got) == count, f"list gave {len(got)} of {count} objects: follow every page"
        assert got == expected, "list must give every object in key order, with its size"
        backend.delete([*shuffled, f"{key_prefix}page/missing"])
        left = self.listed(backend, f"{key_prefix}page/")
        assert left == [], f"{len(left)} of {count} objects left after one delete of all"

    # Overwrite ----------------------------------------------------------------------------------
    @pytest.mark.parametrize("case", ["shorter", "longer", "same-size"])
    def test_overwrite_replaces(
        self,
        backend: ObjectStoreBackend,
        key_prefix: str,
        upload_settings: UploadSettings,
        case: str,
    ) -> None:
        """An upload to an existing key replaces the object whole: new bytes, new size, one
        listing entry.

        The RSM retries a failed copy under the same keys. Multipart to single-request and
        back. To fix: never refuse an existing key (no ``If-None-Match: *``, no
        ``ifGenerationMatch=0``); a shorter object must not keep the old tail; commit an
        Azure block list of the new blocks only.
        """
        big = upload_settings.multipart_threshold + upload_settings.part_size // 2 + 3
        sizes = {"shorter": (big, 1000), "longer": (1000, big), "same-size": (1000, 1000)}[case]
        first = StreamSource.generated(sizes[0], seed=1)
        second = StreamSource.generated(sizes[1], seed=2)
        key = f"{key_prefix}overwrite/object.log"
        self.put(backend, key, first)
        self.put(backend, key, second)
        self.assert_object(backend, key, second)
        assert self.listed(backend, f"{key_prefix}overwrite/") == [(key, len(second))]

    # List ---------------------------------------------------------------------------------------
    def test_list_returns_keys_in_order_with_sizes(
        self, backend: ObjectStoreBackend, key_prefix: str
    ) -> None:
        """``list(prefix)`` gives every object under it once, in key order, with its size,
        whatever order they were written in.

        To fix: return the store's listing order (S3, GCS and Azure list in UTF-8 byte order)
        or sort; report each object's size in bytes, not a part count or a rounded size.
        """
        names = ["b", "a", "c/d", "aa", "a0", "a-", "c.e", "z" * 40]
        written = []
        for i, name in enumerate(names):
            key = f"{key_prefix}list/{name}"
            self.put(backend, key, b"y" * (i * 3 + 1))
            written.append((key, i * 3 + 1))
        got = self.listed(backend, f"{key_prefix}list/")
        assert sorted(got) == sorted(written), "list must give exactly the objects under it"
        assert got == sorted(written), (
            f"list must give keys in key order, got {[k.rsplit('/', 1)[-1] for k, _ in got]}"
        )

    _NESTED_KEYS: ClassVar[Sequence[str]] = (
        "a/b/c",
        "a/b/d/e",
        "a/bc",
        "a/b-",
        "a/b0",
        "ab",
        "a/x/y",
        "b/a/b/c",
    )
    _NESTED_CASES: ClassVar[Mapping[str, str]] = {
        "directory": "a/b/",
        "string-prefix": "a/b",
        "top-directory": "a/",
        "top-string": "a",
        "deep-elsewhere": "b/",
        "exact-key": "a/b/c",
        "nothing": "zz",
        "longer-than-every-key": "a/b/c/d/e/f",
    }

    @pytest.mark.parametrize("case", list(_NESTED_CASES))
    def test_list_nested_prefixes(
        self, backend: ObjectStoreBackend, key_prefix: str, case: str
    ) -> None:
        """A prefix matches as a string, not as a directory: ``a/b`` lists ``a/b-``, ``a/b/c``,
        ``a/b/d/e``, ``a/b0`` and ``a/bc`` (in that order), ``a/b/`` only the two below it, and
        nothing outside the prefix is ever listed.

        The RSM lists a partition's prefix to clean up; a false match would delete another
        partition's segments (``1/`` vs ``10/``). To fix: pass the prefix to the store as is,
        with no delimiter (listing is recursive) and no trimming of a trailing ``/``; if you
        filter or sort yourself, compare whole strings (``-`` sorts before ``/``, ``/``
        before ``0``).
        """
        for i, name in enumerate(self._NESTED_KEYS):
            self.put(backend, f"{key_prefix}nested/{name}", bytes([65 + i]) * (i + 1))
        prefix = self._NESTED_CASES[case]
        expected = sorted(
            (f"{key_prefix}nested/{name}", i + 1)
            for i, name in enumerate(self._NESTED_KEYS)
            if name.startswith(prefix)
        )
        got = self.listed(backend, f"{key_prefix}nested/{prefix}")
        short = [k.removeprefix(f"{key_prefix}nested/") for k, _ in got]
        assert got == expected, f"list({prefix!r}) gave {short}"

    # Kafka keys ---------------------------------------------------------------------------------
    @pytest.mark.parametrize("topic_case", list(LEGAL_TOPIC_NAMES))
    def test_kafka_segment_keys(
        self, backend: ObjectStoreBackend, key_prefix: str, topic_case: str
    ) -> None:
        """Keys of the RSM's layout work with every legal topic name (``[a-zA-Z0-9._-]``, up to
        249 characters), Kafka's base64url ids, the largest partition and 20-digit offsets:
        upload, head, get, list by partition (``1/`` never matches ``10/``), delete.

        The layout is ``<prefix>[<entropy>/]<topic>-<topicId>/<partition>/<offset:020d>-<id>.
        <suffix>``. To fix: send keys verbatim (no URL-encoding twice, no normalisation of
        ``..`` or a leading ``-``/``_``), and keep a 400-byte key within the store's limits.
        """
        topic = LEGAL_TOPIC_NAMES[topic_case]
        base = f"{key_prefix}a3f9c2e1/{topic}-{Uuid.random()}/"
        objects: dict[str, bytes] = {}
        for partition in (1, 10, 2_147_483_647):
            for offset in (0, 9_223_372_036_854_775_807):
                segment = Uuid.random()
                for suffix in ("log", "indexes", "rsm-manifest"):
                    key = f"{base}{partition}/{offset:020d}-{segment}.{suffix}"
                    objects[key] = f"{key}|{len(objects)}".encode()
        for key, data in objects.items():
            self.put(backend, key, data)
        for key, data in objects.items():
            self.assert_object(backend, key, data)
        expected = sorted((key, len(data)) for key, data in objects.items())
        assert self.listed(backend, base) == expected
        one = f"{base}1/"
        assert self.listed(backend, one) == [(k, n) for k, n in expected if k.startswith(one)], (
            f"list({one!r}) must give partition 1's objects only (not partition 10's)"
        )
        backend.delete(list(objects))
        assert self.listed(backend, base) == []
        self.assert_missing(backend, next(iter(objects)))

    # Concurrency --------------------------------------------------------------------------------
    def test_concurrent_uploads_and_gets(
        self,
        backend: ObjectStoreBackend,
        key_prefix: str,
        upload_settings: UploadSettings,
        backend_capabilities: ObjectStoreBackendCapabilities,
    ) -> None:
        """``concurrency`` threads upload different objects at once (half of them multipart),
        then read them back at once, whole and by range.

        To fix: share no mutable state between calls without a lock (a multipart upload id or
        block-id counter on ``self``, one SDK object that is not thread-safe: a boto3
        ``Session``, an Azure ``BlobClient`` built once for every key).
        """
        require(backend_capabilities.concurrent_requests, "concurrent_requests")
        big = upload_settings.multipart_threshold + upload_settings.part_size // 3 + 1
        contents = {
            f"{key_prefix}concurrent/{i:02d}.log": StreamSource.generated(
                big + i if i % 2 else 2000 + i, seed=100 + i
            )
            for i in range(self.concurrency)
        }
        barrier = threading.Barrier(self.concurrency)

        def upload(item: tuple[str, bytes]) -> None:
            barrier.wait(timeout=60)
            self.put(backend, *item)

        def check(item: tuple[str, bytes]) -> None:
            key, data = item
            barrier.wait(timeout=60)
            got = read_stream(backend.get(key))
            assert got == data, f"get({key!r}) returned {_mismatch(got, data)}"
            mid = len(data) // 2
            got = read_stream(backend.get(key, mid - 5, mid + 5))
            assert got == data[mid - 5 : mid + 6], f"get({key!r}, {mid - 5}, {mid + 5}) differs"

        with ThreadPoolExecutor(self.concurrency) as pool:
            list(pool.map(upload, contents.items()))
        with ThreadPoolExecutor(self.concurrency) as pool:
            list(pool.map(check, contents.items()))
        assert self.listed(backend, f"{key_prefix}concurrent/") == sorted(
            (key, len(data)) for key, data in contents.items()
        )

    def test_concurrent_overwrites_are_atomic(
        self,
        backend: ObjectStoreBackend,
        key_prefix: str,
        upload_settings: UploadSettings,
        backend_capabilities: ObjectStoreBackendCapabilities,
    ) -> None:
        """While threads overwrite one key with different versions (one multipart), readers
        only ever see a whole version (or not-found before the first upload completes), and
        the final object is one whole version.

        A fetch that races a copy retry must never read a mix. To fix: make the object
        visible only when complete (S3 CompleteMultipartUpload, GCS finalizing the resumable
        session, Azure committing the block list; in a file store, write a temporary file and
        rename it); never write in place.
        """
        require(backend_capabilities.concurrent_requests, "concurrent_requests")
        key = f"{key_prefix}race/object.log"
        versions = [
            StreamSource.generated(size, seed=200 + i)
            for i, size in enumerate((3000, 7001, upload_settings.multipart_threshold + 1, 12_000))
        ]
        done = threading.Event()
        seen: list[str] = []
        bad: list[str] = []

        def write(version: bytes) -> None:
            for _ in range(3):
                self.put(backend, key, version)

        def read() -> None:
            reads = 0
            while not done.is_set() and reads < 100:
                reads += 1
                existed = bool(seen)  # a version was read whole before this get started
                try:
                    got = read_stream(backend.get(key))
                except _NOT_FOUND:
                    if existed:
                        bad.append("not found after a version had been read")
                    continue
                if got in versions:
                    seen.append("ok")
                else:
                    bad.append(f"a read of {len(got)} bytes matching no version")

        with ThreadPoolExecutor(len(versions) + 2) as pool:
            readers = [pool.submit(read) for _ in range(2)]
            writers = [pool.submit(write, v) for v in versions]
            for w in writers:
                w.result()
            done.set()
            for r in readers:
                r.result()
        assert not bad, f"readers saw partial or vanished objects: {sorted(set(bad))}"
        final = read_stream(backend.get(key))
        assert final in versions, f"the final object is no whole version ({len(final)} bytes)"

    # Failed uploads -----------------------------------------------------------------------------
    @staticmethod
    def _failing_source(case: str, settings: UploadSettings) -> tuple[StreamSource, int | None]:
        """A source that fails mid-upload for ``case``, and the size to declare."""
        if case == "single-request":
            size = max(2, min(settings.multipart_threshold - 1, 200_000))
            return StreamSource(size, seed=5, fail_after=size // 2), size
        size = settings.multipart_threshold + 2 * settings.part_size
        fail_after = settings.multipart_threshold + settings.part_size // 2
        source = StreamSource(size, seed=5, fail_after=fail_after)
        return source, (size if case == "multipart" else None)

    @pytest.mark.parametrize("case", ["single-request", "multipart", "unknown-size"])
    def test_failed_upload_leaves_no_object(
        self,
        backend: ObjectStoreBackend,
        key_prefix: str,
        upload_settings: UploadSettings,
        case: str,
    ) -> None:
        """A source that raises mid-upload makes ``upload`` raise (the source's error or a
        ``RemoteStorageException``), leaves nothing under the key, and a retry then succeeds.

        After the failure the RSM reports the copy as failed and Kafka retries it; a partial
        object read back as a segment would be corrupt data. To fix: upload multipart and
        resumable bodies to a session that becomes the object only when completed, abort it
        on error (S3 AbortMultipartUpload; GCS: do not finalize; Azure: do not commit the
        block list); for a single request, let the error from reading the body abort the
        request; re-raise, never swallow.
        """
        source, size = self._failing_source(case, upload_settings)
        key = f"{key_prefix}failed/object.log"
        with pytest.raises((UploadSourceError, RemoteStorageException)):
            backend.upload(key, _as_binary(source), size)
        self.assert_missing(backend, key)
        assert self.listed(backend, f"{key_prefix}failed/") == [], (
            "a failed upload left an object behind"
        )
        data = StreamSource.generated(source.size, seed=5)
        self.put(backend, key, data, known_size=size is not None)
        self.assert_object(backend, key, data)

    @pytest.mark.parametrize("case", ["single-request", "multipart"])
    def test_failed_overwrite_never_exposes_a_partial_object(
        self,
        backend: ObjectStoreBackend,
        key_prefix: str,
        upload_settings: UploadSettings,
        case: str,
    ) -> None:
        """A failed upload over an existing object leaves the old object whole (or, at worst,
        no object): never part of the new one.

        To fix: as for a failed upload; in particular do not delete the old object first and
        do not write the new bytes in place.
        """
        key = f"{key_prefix}failed-overwrite/object.log"
        old = StreamSource.generated(1500, seed=6)
        self.put(backend, key, old)
        source, size = self._failing_source(case, upload_settings)
        with pytest.raises((UploadSourceError, RemoteStorageException)):
            backend.upload(key, _as_binary(source), size)
        if backend.head(key) is None:
            self.assert_missing(backend, key)
        else:
            self.assert_object(backend, key, old)

    # Memory -------------------------------------------------------------------------------------
    @pytest.mark.tierlog_large
    def test_large_object_streams_with_bounded_memory(  # noqa: PLR0917 - fixtures
        self,
        backend: ObjectStoreBackend,
        key_prefix: str,
        large_object_size: int,
        memory_limit: int,
        backend_capabilities: ObjectStoreBackendCapabilities,
        request: pytest.FixtureRequest,
    ) -> None:
        """An upload of ``large_object_size`` bytes from a stream, and reading it back in
        1 MiB reads, each peak below ``memory_limit`` of Python memory (``tracemalloc``); the
        object reads back with the same SHA-256.

        The RSM uploads 1 GiB segments; memory must depend on ``part_size * parallelism``, not
        on the object. To fix: read one part at a time from the source and hold at most
        ``parallelism`` parts (a bounded queue or semaphore in front of the thread pool);
        never ``source.read()`` whole, never ``BytesIO(whole_object)`` for a get: return the
        HTTP body as a stream.
        """
        require(backend_capabilities.bounded_memory, "bounded_memory")
        size = large_object_size
        if size < 2 * memory_limit:
            pytest.fail(
                f"large_object_size ({size}) must be at least twice memory_limit "
                f"({memory_limit}) for the test to prove anything",
                pytrace=False,
            )
        key = f"{key_prefix}large/object.log"
        source = StreamSource(size, seed=17, max_read=MiB)
        _, upload_peak = _measure_peak(lambda: backend.upload(key, _as_binary(source), size))
        assert source.position == size, f"upload read {source.position} of {size} bytes"

        def read_back() -> tuple[str, int]:
            digest = hashlib.sha256()
            n = 0
            with backend.get(key) as stream:
                while chunk := stream.read(MiB):
                    digest.update(chunk)
                    n += len(chunk)
            return digest.hexdigest(), n

        (got_digest, got_size), get_peak = _measure_peak(read_back)
        request.node.user_properties.extend(
            [
                ("large_object_bytes", size),
                ("upload_peak_bytes", upload_peak),
                ("get_peak_bytes", get_peak),
            ]
        )
        _LOG.info(
            "large object of %.1f MiB: upload peak %.2f MiB, get peak %.2f MiB",
            size / MiB,
            upload_peak / MiB,
            get_peak / MiB,
        )
        assert got_size == size, f"read back {got_size} bytes of a {size}-byte object"
        assert got_digest == source.sha256.hexdigest(), "the object read back differs"
        assert upload_peak < memory_limit, (
            f"uploading {size / MiB:.1f} MiB peaked at {upload_peak / MiB:.1f} MiB of Python "
            f"memory (limit {memory_limit / MiB:.1f} MiB): stream the source part by part"
        )
        assert get_peak < memory_limit, (
            f"reading back {size / MiB:.1f} MiB peaked at {get_peak / MiB:.1f} MiB (limit "
            f"{memory_limit / MiB:.1f} MiB): return a stream, not the whole object"
        )

    # Observer -----------------------------------------------------------------------------------
    @staticmethod
    def _check_reported(requests: list[ObservedRequest]) -> None:
        """Every record names a known operation and outcome with non-negative byte counts."""
        for r in requests:
            assert r.operation in _OPERATIONS, f"unknown operation reported: {r!r}"
            assert r.outcome in _OUTCOMES, f"unknown outcome reported: {r!r}"
            assert isinstance(r.bytes_sent, int) and r.bytes_sent >= 0, f"bad bytes_sent: {r!r}"
            assert isinstance(r.bytes_received, int) and r.bytes_received >= 0, (
                f"bad bytes_received: {r!r}"
            )

    def test_observer_sees_every_request(
        self, backend: ObjectStoreBackend, key_prefix: str, observer: RecordingObserver
    ) -> None:
        """Each operation is reported to the ``observer`` with its outcome and bytes: an upload
        (``ok``, at least the body's bytes sent), head, a ranged get (at least the bytes read
        received), list and delete (``ok``); head and get of a missing key (``not_found``).

        The RSM's metrics (requests, bytes, errors, throttles per operation and backend) come
        only from these calls. To fix: build the backend with the suite's ``observer`` fixture
        and call it once per HTTP request, after the answer (for a get stream, the bytes may be
        reported as the body is read or on close), with ``not_found`` for a 404, ``throttled``
        for 429/503 SlowDown, ``error`` for other failures.
        """
        key = f"{key_prefix}observed/object.log"
        missing = f"{key_prefix}observed/missing.log"
        observer.take()

        def step(name: str, action: Callable[[], object]) -> list[ObservedRequest]:
            action()
            taken = observer.take()
            self._check_reported(taken)
            assert taken, (
                f"{name} made no report to the observer: build the backend with the suite's "
                "`observer` fixture and call it for every request"
            )
            return taken

        def only(
            taken: list[ObservedRequest], operations: frozenset[str], outcome: str, name: str
        ) -> None:
            wrong = [r for r in taken if r.operation not in operations or r.outcome != outcome]
            assert not wrong, f"{name} reported {wrong}; expected {sorted(operations)} {outcome}"

        taken = step("upload", lambda: self.put(backend, key, b"z" * 1000))
        only(taken, _UPLOAD_OPERATIONS, "ok", "a small upload")
        assert sum(r.bytes_sent for r in taken) >= 1000, (
            f"a 1000-byte upload reported {sum(r.bytes_sent for r in taken)} bytes sent"
        )
        only(step("head", lambda: backend.head(key)), frozenset({"head"}), "ok", "head")
        taken = step("get", lambda: read_stream(backend.get(key, 10, 109)))
        only(taken, frozenset({"get"}), "ok", "a ranged get")
        assert sum(r.bytes_received for r in taken) >= 100, (
            f"a 100-byte get reported {sum(r.bytes_received for r in taken)} bytes received"
        )
        only(step("list", lambda: list(backend.list(key))), frozenset({"list"}), "ok", "list")
        taken = step("head of a missing key", lambda: backend.head(missing))
        only(taken, frozenset({"head"}), "not_found", "head of a missing key")

        def get_missing() -> None:
            with pytest.raises(_NOT_FOUND):
                read_stream(backend.get(missing))

        taken = step("get of a missing key", get_missing)
        only(taken, frozenset({"get"}), "not_found", "get of a missing key")
        only(step("delete", lambda: backend.delete([key])), frozenset({"delete"}), "ok", "delete")
        taken = step("delete of a missing key", lambda: backend.delete([missing]))
        wrong = [r for r in taken if r.operation != "delete" or r.outcome == "error"]
        assert not wrong, f"a delete of a missing key reported {wrong}"

    def test_observer_sees_each_part(
        self,
        backend: ObjectStoreBackend,
        key_prefix: str,
        upload_settings: UploadSettings,
        observer: RecordingObserver,
        backend_capabilities: ObjectStoreBackendCapabilities,
    ) -> None:
        """A multipart upload reports one request per part (``upload_part`` or, for a request
        that finalizes, ``complete_upload``), all ``ok``, and at least the body's bytes.

        To fix: call the observer from the code that sends each part (on the worker thread
        is fine: the observer is thread-safe), not once for the whole upload.
        """
        require(backend_capabilities.multipart_upload, "multipart_upload")
        s = upload_settings
        size = s.multipart_threshold + 2 * s.part_size + 1
        parts = math.ceil(size / s.part_size)
        observer.take()
        self.put(
            backend, f"{key_prefix}observed-parts/object.log", StreamSource.generated(size, seed=23)
        )
        taken = observer.take()
        self._check_reported(taken)
        wrong = [r for r in taken if r.operation not in _UPLOAD_OPERATIONS or r.outcome != "ok"]
        assert not wrong, f"a multipart upload reported {wrong}"
        part_requests = [r for r in taken if r.operation in {"upload_part", "complete_upload"}]
        assert len(part_requests) >= parts, (
            f"a {size}-byte upload in {s.part_size}-byte parts reported {len(part_requests)} "
            f"part requests, expected at least {parts}"
        )
        sent = sum(r.bytes_sent for r in taken)
        assert sent >= size, f"a {size}-byte multipart upload reported {sent} bytes sent"

    # Lifecycle ----------------------------------------------------------------------------------
    def test_close_twice_is_safe(self, backend: ObjectStoreBackend) -> None:
        """``close()`` may be called again (the RSM's close and a context manager both do).

        To fix: make ``close`` return quietly when already closed.
        """
        backend.close()
        backend.close()
