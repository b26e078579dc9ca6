"""The two stream adapters between tierlog and the GCS client: one per direction.

``UploadSource`` gives the client's resumable upload what it needs from any source (``tell``,
and ``seek`` back into the chunk in flight, which the client does to resume after a partial
chunk) while holding nothing but the chunk the client holds anyway; it also refuses a source
that ends before its declared size, so a short read is never committed as an object.

``DownloadStream`` is the body of one ranged GET read straight off the socket: memory never
grows with the range, and a connection that dies mid-body raises the retriable error instead of
ending the stream early, so a caller never mistakes a truncated object for a whole one.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO

from tierlog.spi import RemoteStorageException, RetriableRemoteStorageException

if TYPE_CHECKING:
    import requests
    from _typeshed import WriteableBuffer

__all__ = ["DownloadStream", "UploadSource"]


class UploadSource(io.RawIOBase):
    """A forward-only ``source`` made seekable within the last block read, and exact in size.

    The GCS client reads one chunk at a time (``read(chunk_size)``); after a chunk that the
    server only partly persisted it seeks back to the first byte the server lacks. That byte is
    always inside the last block read, so keeping a reference to that block (the same ``bytes``
    object the client is sending: no copy) is enough, whatever the source. A ``size`` that the
    source does not reach raises instead of returning a short final read.
    """

    def __init__(self, source: BinaryIO, size: int | None, where: str) -> None:
        super().__init__()
        self._source = source
        self._size = size
        self._where = where
        self._position = 0  # position of the next byte returned to the reader
        self._source_position = 0  # bytes consumed from the source
        self._last_start = 0  # position of self._last[0]
        self._last = b""
        self.source_error: BaseException | None = None
        """What the source raised, if it failed: the upload re-raises it unchanged."""

    @property
    def consumed(self) -> int:
        """Bytes taken from the source so far."""
        return self._source_position

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_CUR:
            offset += self._position
        elif whence == os.SEEK_END:
            if self._size is None:
                raise io.UnsupportedOperation("the end of a stream of unknown size")
            offset += self._size
        elif whence != os.SEEK_SET:
            raise ValueError(f"invalid whence {whence}")
        if not self._last_start <= offset <= self._source_position:
            raise io.UnsupportedOperation(
                f"can only seek within the last block read ({self._last_start}.."
                f"{self._source_position}), not to {offset}"
            )
        self._position = offset
        return offset

    def read(self, size: int | None = -1) -> bytes:
        bounded = size is not None and size >= 0
        want = size if size is not None and size >= 0 else -1
        start = self._position
        replay = b""
        if self._position < self._source_position:
            # Replaying the last block after a seek back (a resumed chunk); the rest of the
            # request comes from the source, so a resumed chunk is as long as a fresh one (a
            # short read would tell the client the stream has ended).
            begin = self._position - self._last_start
            replay = self._last[begin:] if not bounded else self._last[begin : begin + want]
            self._position += len(replay)
            if bounded:
                want -= len(replay)
                if want == 0:
                    return replay
        else:
            # The client reads the next chunk only once the last one is acknowledged: drop it
            # now, so that it is not held while the next one is read.
            self._last_start, self._last = self._source_position, b""
        fresh = self._read_source(want)
        data = replay + fresh if replay else fresh
        self._last_start = start
        self._last = data
        self._source_position += len(fresh)
        self._position = self._source_position
        return data

    def _read_source(self, want: int) -> bytes:
        """``want`` bytes from the source (``-1``: all), short only at its end; refuses an end
        before the announced size."""
        if self._size is not None:
            remaining = self._size - self._source_position
            want = remaining if want < 0 else min(want, remaining)
        if want == 0:
            return b""
        data = bytes(self._read(-1)) if want < 0 else self._read_full(want)
        if self._size is not None and len(data) < want:
            raise RemoteStorageException(
                f"upload of {self._where}: the source ended after "
                f"{self._source_position + len(data)} of the {self._size} bytes announced; "
                "nothing was committed"
            )
        return data

    def _read(self, size: int) -> bytes:
        try:
            return self._source.read(size)
        except BaseException as e:
            self.source_error = e
            raise

    def _read_full(self, size: int) -> bytes:
        """Up to ``size`` bytes, short only at EOF (a pipe-like source may return less per
        call, and the client takes a short chunk for the last one)."""
        first = self._read(size)
        if len(first) in (0, size):
            return bytes(first)
        parts = [first]
        got = len(first)
        while got < size:
            more = self._read(size - got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)


class DownloadStream(io.RawIOBase):
    """The body of a GET as a raw stream, checked to be whole.

    ``expected`` is the body length announced by the server (``Content-Length``), ``limit`` the
    most bytes to hand out (a server that answered 200 to a ranged request); errors while
    reading go through ``translate`` (the backend's error mapping) and EOF before ``expected``
    bytes raises ``RetriableRemoteStorageException``.
    """

    def __init__(
        self,
        response: requests.Response,
        where: str,
        expected: int | None,
        translate: Callable[[BaseException], RemoteStorageException],
        limit: int | None = None,
    ) -> None:
        super().__init__()
        self._response = response
        self._raw = response.raw
        self._where = where
        self._expected = expected if limit is None else None
        self._remaining = limit
        self._translate = translate
        self._received = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        want = len(view)
        if self._remaining is not None:
            want = min(want, self._remaining)
        if want == 0:
            return 0
        try:
            data = self._raw.read(want, decode_content=False)
        except Exception as e:  # the socket, urllib3 and requests raise many kinds
            self._response.close()
            raise self._translate(e) from e
        n = len(data)
        if n == 0 and self._expected is not None and self._received < self._expected:
            self._response.close()
            raise RetriableRemoteStorageException(
                f"reading {self._where}: the connection ended after {self._received} of "
                f"{self._expected} bytes"
            )
        view[:n] = data
        self._received += n
        if self._remaining is not None:
            self._remaining -= n
        return n

    def close(self) -> None:
        if not self.closed:
            self._response.close()
        super().close()


def buffered(raw: io.RawIOBase, buffer_size: int = 64 * 1024) -> BinaryIO:
    """``raw`` behind a read buffer, typed as the ``BinaryIO`` the backend contract returns."""
    return io.BufferedReader(raw, buffer_size)
