"""Fault injection at a known point of an upload, for the fault tests of object-store plugins.

A test that kills the object-store server "during an upload" must know the upload is under way
when the server dies. Slowing the upload down (a rate limit) and killing the server after a
sleep is a guess that a loaded machine gets wrong: the upload finishes first, or has not
started. ``UploadPause`` removes the guess: the first upload whose source it wraps stops after
exactly ``at`` bytes were read, until the test calls ``resume``::

    pause = UploadPause(at=6 * MiB)               # 1 MiB into the second 5 MiB part
    rsm = pause.pause_uploads(S3RemoteStorageManager())  # any object-store RSM; configure it
    copy = threading.Thread(target=rsm.copy_log_segment_data, args=(metadata, data))
    copy.start()
    assert pause.paused.wait(120)                 # the upload is certainly in progress
    server.kill()
    pause.resume()                                # the upload goes on, against a dead server
    copy.join(120)

Every first-party object-store plugin (s3, gcs, azure) uses it the same way; so can yours.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, BinaryIO, Final, TypeVar, cast

from tierlog.storage.objectstore.backend import ObjectStoreBackend, RequestObserver, UploadSettings
from tierlog.storage.objectstore.rsm import ObjectStoreRemoteStorageManager

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = ["DEFAULT_RESUME_TIMEOUT_S", "UploadPause"]

R = TypeVar("R", bound=ObjectStoreRemoteStorageManager)

DEFAULT_RESUME_TIMEOUT_S: Final = 120.0
"""How long a paused upload waits for ``resume`` before failing (a test that forgot it)."""


class UploadPause:
    """Stops the first upload whose source passes ``at`` bytes right there, until ``resume``.

    ``paused`` is set when the upload reaches ``at``. Only the first source given to ``wrap``
    pauses; later ones (a retry) pass through untouched.
    """

    def __init__(self, at: int, *, resume_timeout_s: float = DEFAULT_RESUME_TIMEOUT_S) -> None:
        if at < 0:
            raise ValueError(f"at must be >= 0, got {at}")
        self.at = at
        self.resume_timeout_s = resume_timeout_s
        self.paused = threading.Event()
        self._resumed = threading.Event()
        self._armed = True
        self._lock = threading.Lock()

    def wrap(self, source: BinaryIO) -> BinaryIO:
        """A non-seekable ``source`` pausing at ``at`` the first time; ``source`` afterwards."""
        with self._lock:
            armed, self._armed = self._armed, False
        if not armed:
            return source
        return cast(BinaryIO, io.BufferedReader(_PausingSource(source, self)))

    def pause_uploads(self, rsm: R) -> R:
        """``rsm`` (not yet configured) whose backend passes every upload's source through
        ``wrap``: its first upload pauses. The backend's requests are reported through
        ``observe``, which a subclass may extend."""
        create = rsm.create_backend

        def create_backend(
            configs: Mapping[str, str], upload: UploadSettings, observer: RequestObserver
        ) -> ObjectStoreBackend:
            backend = create(configs, upload, self.observe(observer))
            send = backend.upload

            def upload_paused(key: str, source: BinaryIO, size: int | None) -> None:
                send(key, self.wrap(source), size)

            backend.upload = upload_paused  # type: ignore[method-assign]
            return backend

        rsm.create_backend = create_backend  # type: ignore[method-assign]
        return rsm

    def observe(self, observer: RequestObserver) -> RequestObserver:
        """The observer the paused RSM's backend reports its requests to: ``observer`` itself;
        a subclass wraps it to learn how far the upload went (a part sent, say)."""
        return observer

    def resume(self) -> None:
        """Let the paused upload go on (call it after acting on the server)."""
        self._resumed.set()

    def _wait_resumed(self) -> None:
        self.paused.set()
        if not self._resumed.wait(self.resume_timeout_s):
            raise TimeoutError("the test never resumed the paused upload")


class _PausingSource(io.RawIOBase):
    """``source``'s bytes, stopping once before the byte at ``pause.at``."""

    def __init__(self, source: BinaryIO, pause: UploadPause) -> None:
        super().__init__()
        self._source = source
        self._pause = pause
        self._before_pause: int | None = pause.at

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        if self._before_pause == 0:
            self._before_pause = None
            self._pause._wait_resumed()
        want = len(view) if self._before_pause is None else min(len(view), self._before_pause)
        data = self._source.read(want)
        view[: len(data)] = data
        if self._before_pause is not None:
            self._before_pause -= len(data)
        return len(data)
