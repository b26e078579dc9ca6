"""An object store in a dict: the reference ``ObjectStoreBackend``, with fault injection.

``InMemoryBackend`` follows the backend contract the way the cloud backends must (inclusive
ranged reads, an empty stream past the end, idempotent deletes, atomic uploads, every request
reported to the observer, multipart uploads above the threshold as parts plus a completion), so
that the RSM's own tests run in milliseconds and the backend suite can check itself on it.
Faults are injected per request: the N-th matching request fails as a retriable error, a
non-retriable one, a throttle, or part-way through its data (a dropped connection).

``MemoryObjectStoreRSM`` is the object-store RSM over it, for tests: instances configured with
the same ``memory.store`` name share one store (like brokers sharing a bucket). It is not
registered as a plugin: a store that vanishes with the process is no remote storage.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, ClassVar, Literal

from tierlog.spi import (
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
from tierlog.storage.objectstore.rsm import ObjectStoreRemoteStorageManager

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = ["Fault", "FaultKind", "InMemoryBackend", "MemoryObjectStoreRSM"]

FaultKind = Literal["retriable", "fatal", "throttle"]

STORE_CONFIG = "memory.store"


@dataclass
class Fault:
    """Fail matching requests number ``nth`` to ``nth + times - 1`` (counted from when the fault
    is added). ``operation`` ``None`` matches every request. With ``after_bytes``, the request
    starts and fails part-way through its data: a single-request upload after reading that many
    bytes of its source, a part after reading the part, a get once the caller has read that
    many bytes of its stream. That is a connection dropped mid-transfer."""

    kind: FaultKind
    operation: Operation | None = None
    nth: int = 1
    times: int = 1
    after_bytes: int | None = None
    seen: int = 0

    def error(self, what: str) -> RemoteStorageException:
        if self.kind == "throttle":
            return ObjectStoreThrottledError(f"injected throttle: {what}")
        if self.kind == "retriable":
            return RetriableRemoteStorageException(f"injected retriable failure: {what}")
        return RemoteStorageException(f"injected failure: {what}")

    @property
    def outcome(self) -> Outcome:
        return "throttled" if self.kind == "throttle" else "error"


def _read_full(source: BinaryIO, n: int) -> bytes:
    """``n`` bytes, or fewer only at the end: a stream may give short reads before its end."""
    parts: list[bytes] = []
    while n > 0 and (part := source.read(n)):
        parts.append(part)
        n -= len(part)
    return b"".join(parts)


class _FailingStream(io.RawIOBase):
    """A get's body that raises after ``limit`` bytes."""

    def __init__(self, data: bytes, limit: int, fault: Fault, what: str) -> None:
        super().__init__()
        self._data = memoryview(data)
        self._limit = limit
        self._fault = fault
        self._what = what
        self._position = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        if self._position >= len(self._data):
            return 0
        if self._position >= self._limit:
            raise self._fault.error(f"{self._what} (connection dropped mid-read)")
        view = memoryview(buffer).cast("B")
        n = min(len(view), self._limit - self._position, len(self._data) - self._position)
        view[:n] = self._data[self._position : self._position + n]
        self._position += n
        return n


class InMemoryBackend(ObjectStoreBackend):
    """Objects in a dict (shared when ``objects`` is given). Thread-safe."""

    name = "memory"

    def __init__(
        self,
        upload: UploadSettings | None = None,
        observer: RequestObserver = null_observer,
        *,
        objects: dict[str, bytes] | None = None,
        bucket: str = "memory",
        exists: bool = True,
        lock: threading.Lock | None = None,
    ) -> None:
        self.upload_settings = upload or UploadSettings()
        self.observer = observer
        self.objects: dict[str, bytes] = {} if objects is None else objects
        self.bucket = bucket
        self.exists = exists
        self.location = f"memory://{bucket}"
        self._lock = lock or threading.Lock()
        self._faults: list[Fault] = []
        self.closed = False

    # Faults -------------------------------------------------------------------------------------
    def fail(
        self,
        kind: FaultKind = "retriable",
        operation: Operation | None = None,
        *,
        nth: int = 1,
        times: int = 1,
        after_bytes: int | None = None,
    ) -> Fault:
        """Inject a fault (see ``Fault``); returns it (``seen`` counts matching requests)."""
        fault = Fault(kind, operation, nth, times, after_bytes)
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _fault_for(self, operation: Operation) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.operation is not None and fault.operation != operation:
                    continue
                fault.seen += 1
                if fault.nth <= fault.seen < fault.nth + fault.times:
                    return fault
        return None

    def _request(self, operation: Operation, what: str) -> Fault | None:
        """Count a request against the faults; raise at once unless the fault is mid-data."""
        fault = self._fault_for(operation)
        if fault is not None and fault.after_bytes is None:
            self.observer(operation, outcome=fault.outcome)
            raise fault.error(f"{operation} {what}")
        return fault

    # Contract -----------------------------------------------------------------------------------
    def check_access(self) -> None:
        """No request; fails like a cloud backend on a missing bucket when ``exists`` is
        false (to test how configure reports it)."""
        if not self.exists:
            raise RemoteStorageException(
                f"bucket {self.bucket!r} does not exist ({self.location}): create it, or fix "
                "rsm.config.memory.store"
            )
        if self.closed:
            raise RemoteStorageException(f"{self.location} is closed")

    def upload(self, key: str, source: BinaryIO, size: int | None) -> None:
        settings = self.upload_settings
        if size is not None and size < settings.multipart_threshold:
            fault = self._request("upload", key)
            data = self._read(source, size, fault, "upload", key)
            self.observer("upload", outcome="ok", bytes_sent=len(data))
        else:
            # As a cloud SDK does: read a part into a buffer, then send it as one request.
            parts: list[bytes] = []
            remaining = size
            while True:
                want = (
                    settings.part_size if remaining is None else min(settings.part_size, remaining)
                )
                part = _read_full(source, want)
                if remaining is not None and len(part) < want:
                    raise RemoteStorageException(
                        f"upload of {key}: the source ended {remaining - len(part)} bytes early"
                    )
                if not part and parts:
                    break
                fault = self._request("upload_part", key)
                if fault is not None:
                    self.observer("upload_part", outcome=fault.outcome)
                    raise fault.error(f"upload_part {key} (connection dropped mid-upload)")
                self.observer("upload_part", outcome="ok", bytes_sent=len(part))
                parts.append(part)
                if remaining is not None:
                    remaining -= len(part)
                if remaining == 0 or len(part) < want:
                    break
            self._request("complete_upload", key)
            self.observer("complete_upload", outcome="ok")
            data = b"".join(parts)
        with self._lock:
            self.objects[key] = data

    def _read(
        self, source: BinaryIO, n: int, fault: Fault | None, operation: Operation, key: str
    ) -> bytes:
        if fault is not None and fault.after_bytes is not None:
            _read_full(source, min(n, fault.after_bytes))
            self.observer(operation, outcome=fault.outcome)
            raise fault.error(f"{operation} {key} (connection dropped mid-upload)")
        data = _read_full(source, n)
        if len(data) != n:
            raise RemoteStorageException(
                f"upload of {key}: the source gave {len(data)} of {n} bytes"
            )
        return data

    def get(self, key: str, start: int = 0, end: int | None = None) -> BinaryIO:
        fault = self._request("get", key)
        with self._lock:
            data = self.objects.get(key)
        if data is None:
            self.observer("get", outcome="not_found")
            raise RemoteResourceNotFoundException(f"{key} not found in {self.location}")
        stop = len(data) if end is None else min(end + 1, len(data))
        body = data[start:stop] if start < stop else b""
        self.observer("get", outcome="ok", bytes_received=len(body))
        if fault is not None and fault.after_bytes is not None:
            return io.BufferedReader(_FailingStream(body, fault.after_bytes, fault, key))
        return io.BytesIO(body)

    def delete(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        self._request("delete", ", ".join(keys))
        with self._lock:
            for key in keys:
                self.objects.pop(key, None)
        self.observer("delete", outcome="ok")

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self._request("list", prefix)
        with self._lock:
            found = sorted((k, len(v)) for k, v in self.objects.items() if k.startswith(prefix))
        self.observer("list", outcome="ok")
        return iter([ObjectInfo(k, n) for k, n in found])

    def head(self, key: str) -> ObjectInfo | None:
        self._request("head", key)
        with self._lock:
            data = self.objects.get(key)
        self.observer("head", outcome="ok" if data is not None else "not_found")
        return None if data is None else ObjectInfo(key, len(data))

    def close(self) -> None:
        self.closed = True


class MemoryObjectStoreRSM(ObjectStoreRemoteStorageManager):
    """The object-store RSM on an ``InMemoryBackend``, for tests (not a registered plugin).

    ``rsm.config.memory.store`` names the store (default ``default``); instances configured
    with the same name in one process share it, as brokers share a bucket.
    """

    backend_config_keys: ClassVar[frozenset[str]] = frozenset({STORE_CONFIG})
    _stores: ClassVar[dict[str, tuple[dict[str, bytes], threading.Lock]]] = {}
    _stores_lock: ClassVar[threading.Lock] = threading.Lock()

    def create_backend(
        self, configs: Mapping[str, str], upload: UploadSettings, observer: RequestObserver
    ) -> InMemoryBackend:
        name = configs.get(STORE_CONFIG, "default") or "default"
        objects, lock = self.store(name)
        return InMemoryBackend(upload, observer, objects=objects, lock=lock, bucket=name)

    @property
    def memory_backend(self) -> InMemoryBackend:
        backend = self.backend
        assert isinstance(backend, InMemoryBackend)
        return backend

    @classmethod
    def store(cls, name: str) -> tuple[dict[str, bytes], threading.Lock]:
        """The shared objects of store ``name`` (created empty on first use) and their lock."""
        with cls._stores_lock:
            found = cls._stores.get(name)
            if found is None:
                found = cls._stores[name] = ({}, threading.Lock())
            return found

    @classmethod
    def drop_store(cls, name: str) -> None:
        """Forget store ``name`` (tests clean up with it)."""
        with cls._stores_lock:
            cls._stores.pop(name, None)

    @classmethod
    def conformance_config(cls) -> dict[str, str]:
        """A fresh store per test, and chunks small enough that the suite's segments span
        several of them."""
        import uuid

        return {STORE_CONFIG: uuid.uuid4().hex, "chunk.size": "1024"}

    @classmethod
    def conformance_capabilities(cls) -> Any:
        from tierlog.conformance import RemoteStorageManagerCapabilities, Unsupported

        return RemoteStorageManagerCapabilities(
            large_segments=Unsupported("the in-memory store holds every object in Python memory")
        )
