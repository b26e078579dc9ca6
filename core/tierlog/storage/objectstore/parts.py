"""Parallel part uploads with bounded memory: one helper for every backend that uploads parts.

S3 multipart uploads and Azure staged blocks are the same loop: cut the source into parts,
send up to ``parallelism`` of them at once, stop at the first failure, and hand back what each
part's request returned, in part order. The loop is here once because its memory bound is easy
to lose by one buffer, as both plugins did (issue 5):

- a *slot* is taken before a part is read and released by the part's task itself, after the
  upload call returned and the task dropped its reference to the buffer. Releasing it from the
  future's done callback is too early: the executor's work item still holds the call's
  arguments until its worker moves on, so the next part can be read while the last one is
  still alive (``parallelism + 1`` buffers);
- the first part, read ahead to choose between one request and a multipart upload, is kept by
  the ``PartReader`` and handed over to its upload task, not held by the caller's frames for
  the whole upload (another extra buffer);
- a part is read *into* a ``bytearray`` of its size (``readinto``), not assembled from short
  reads (``b"".join`` holds the pieces and the whole at once), and that ``bytearray`` is what
  the SDK sends: botocore signs, checksums and sends a ``bytearray`` body in place (a ``bytes``
  body is wrapped in a ``BytesIO`` and read again in 1 MiB copies for each; the S3 backend
  says where it streams the buffer instead), and azure-core sends it as it is.

So at most ``parallelism`` part buffers exist at any moment, whatever the object's size.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Executor, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import BinaryIO, Generic, TypeVar

__all__ = ["PartReader", "UploadedParts", "upload_parts"]

T = TypeVar("T")


class PartReader:
    """``source`` as consecutive parts of ``part_size`` bytes, the last one shorter; never
    reads past ``size`` bytes when ``size`` is given (the parts then add up to at most
    ``size``; whether the source has more is the caller's to check).

    The source may give short reads before its end (pipes, the RSM's transforming streams): a
    part is filled until it is full or the source ends.
    """

    def __init__(self, source: BinaryIO, part_size: int, size: int | None = None) -> None:
        if part_size <= 0:
            raise ValueError(f"part_size must be positive, got {part_size}")
        if size is not None and size < 0:
            raise ValueError(f"size must be >= 0 or None, got {size}")
        self.source = source
        self.part_size = part_size
        self.size = size
        self.bytes_read = 0
        """Bytes read from the source so far."""
        self.parts_read = 0
        """Parts read so far (including one read ahead and not yet taken)."""
        self.ended = False
        """Whether the source ended (a short part) or ``size`` bytes were read."""
        self._ahead: bytearray | None = None

    def read_whole(self) -> bytearray | None:
        """The whole source if it fits in one part (it ended within the first part), else
        ``None``: the first part is then kept here, and the next ``read_part`` (of
        ``upload_parts``) takes it, so the caller never holds it. Call before any ``read_part``.
        """
        if self.parts_read:
            raise RuntimeError("read_whole is for the first part only")
        part = self._read()
        if self.ended:
            return part
        self._ahead = part
        return None

    def read_part(self) -> bytearray:
        """The next part; empty once the source ended."""
        if self._ahead is not None:
            part, self._ahead = self._ahead, None
            return part
        return self._read()

    def _read(self) -> bytearray:
        if self.ended:
            return bytearray()
        want = self.part_size
        if self.size is not None:
            want = min(want, self.size - self.bytes_read)
        part = _read_into(self.source, want)
        if part:
            self.parts_read += 1
            self.bytes_read += len(part)
        if len(part) < self.part_size or (self.size is not None and self.bytes_read >= self.size):
            self.ended = True
        return part


_new_buffer: Callable[[int], bytearray] = bytearray
"""Allocates part buffers (the tests count the live ones with a weak-referenceable subclass)."""


def _read_into(source: BinaryIO, size: int) -> bytearray:
    """Up to ``size`` bytes of ``source`` in one ``bytearray``, fewer only at its end; filled in
    place (``readinto``) when the source has it, so no second copy of the part ever exists."""
    buffer = _new_buffer(size)
    got = 0
    readinto: Callable[[memoryview], int | None] | None = getattr(source, "readinto", None)
    with memoryview(buffer) as view:
        while got < size:
            if readinto is not None:
                n = readinto(view[got:]) or 0
            else:
                piece = source.read(size - got)
                n = len(piece)
                view[got : got + n] = piece
                del piece
            if n == 0:
                break
            got += n
    if got < size:
        del buffer[got:]
    return buffer


@dataclass(frozen=True, slots=True)
class UploadedParts(Generic[T]):
    """What ``upload_parts`` sent: each part's result, in part order, and the bytes sent."""

    results: list[T]
    size: int


class _Skipped(Exception):
    """A part's task started after another part failed: it did not upload."""


class _Upload(Generic[T]):
    """The state shared by one ``upload_parts`` call and its tasks."""

    def __init__(self, upload_part: Callable[[int, bytearray], T], parallelism: int) -> None:
        self.upload_part = upload_part
        self.slots = threading.BoundedSemaphore(parallelism)
        self.failed = threading.Event()
        self.error: BaseException | None = None
        self._lock = threading.Lock()

    def fail(self, error: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = error
        self.failed.set()

    def task(self, index: int, box: list[bytearray]) -> T:
        # The box is the only reference to the part outside this frame: emptied here, the
        # executor's work item (which keeps its arguments until the worker moves on) does
        # not keep the buffer alive.
        data = box.pop()
        try:
            if self.failed.is_set():
                raise _Skipped
            return self.upload_part(index, data)
        except _Skipped:
            raise
        except BaseException as error:
            self.fail(error)  # before the slot is released: the reader must see it
            raise
        finally:
            del data
            self.slots.release()


def upload_parts(
    parts: PartReader,
    upload_part: Callable[[int, bytearray], T],
    *,
    parallelism: int,
    executor: Executor | None = None,
    max_parts: int | None = None,
    too_many_parts: Callable[[], BaseException] | None = None,
    thread_name_prefix: str = "tierlog-upload",
) -> UploadedParts[T]:
    """Read every part of ``parts`` and call ``upload_part(index, data)`` on each (``index``
    from 0), at most ``parallelism`` at once, with at most ``parallelism`` part buffers alive.

    The calls run on ``executor`` (shared by several uploads: each call's own slots bound its
    memory) or, without one, on a pool of ``parallelism`` threads made for this call. The first
    failure stops the reading: parts not started are cancelled, those running are waited for,
    and the first error (of a part, or of the reading) is raised. Reading a part beyond
    ``max_parts`` raises ``too_many_parts()`` (or a ``ValueError``). An empty source uploads no
    part. Returns each call's result in part order and the bytes uploaded; the caller checks
    that against the size it expected.
    """
    if parallelism < 1:
        raise ValueError(f"parallelism must be >= 1, got {parallelism}")
    state: _Upload[T] = _Upload(upload_part, parallelism)
    pool = executor or ThreadPoolExecutor(parallelism, thread_name_prefix=thread_name_prefix)
    futures: list[Future[T]] = []
    boxes: list[list[bytearray]] = []
    try:
        while not parts.ended or parts.parts_read > len(futures):
            state.slots.acquire()  # before reading: the part read next holds this slot
            if state.failed.is_set():
                state.slots.release()
                break
            box: list[bytearray] = []  # the part, never bound to a name of this frame
            try:
                box.append(parts.read_part())
                if not box[0]:
                    state.slots.release()
                    break
                if max_parts is not None and len(futures) >= max_parts:
                    raise (
                        too_many_parts()
                        if too_many_parts is not None
                        else ValueError(f"more than {max_parts} parts")
                    )
                futures.append(pool.submit(state.task, len(futures), box))
            except BaseException:
                box.clear()
                state.slots.release()
                raise
            boxes.append(box)
        if futures:
            wait(futures, return_when=FIRST_EXCEPTION)
        if state.error is not None:
            raise state.error  # the first part to fail (the others were skipped or later)
        results = [future.result() for future in futures]
    except BaseException:
        state.failed.set()
        _stop(futures, boxes)
        raise
    finally:
        if executor is None:
            pool.shutdown(wait=True)
    return UploadedParts(results, parts.bytes_read)


def _stop(futures: list[Future[T]], boxes: list[list[bytearray]]) -> None:
    """Cancel the parts not started (dropping their buffers now, not when a worker gets to
    their work items) and wait for those running."""
    for future, box in zip(futures, boxes, strict=True):
        if future.cancel():
            box.clear()
    wait(futures)
